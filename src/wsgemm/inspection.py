"""Reading what the compiler produced: PTX instruction counts, the resources recorded
in the cubin (registers, stack frame), and SASS where ``nvdisasm`` exists.

Used by ``python -m wsgemm inspect``, the demo and the compile-only tests; needs no GPU.
"""

from __future__ import annotations

import re
import shutil
import struct
import subprocess
from dataclasses import dataclass
from pathlib import Path

# PTX instructions that show which hardware paths a kernel uses.
KEY_INSTRUCTIONS = {
    "wgmma.mma_async": "Hopper warpgroup MMA",
    "tcgen05.mma": "Blackwell MMA into tensor memory",
    "tcgen05.alloc": "tensor-memory allocation",
    "tcgen05.dealloc": "tensor-memory release",
    "tcgen05.relinquish_alloc_permit": "the CTA gives up allocating tensor memory",
    "tcgen05.ld": "tensor memory -> registers",
    "tcgen05.commit": "MMA completion -> mbarrier",
    "cp.async.bulk.tensor": "TMA copy (load or store)",
    "mbarrier::complete_tx": "TMA load completing on an mbarrier",
    "mbarrier.try_wait": "mbarrier probe / wait loop",
    "mbarrier.arrive": "mbarrier arrival",
    "setmaxnreg": "warpgroup register reallocation",
    "red.release.gpu": "a partial sum published (split-K / stream-K fix-up)",
    "stmatrix": "registers -> shared memory (epilogue)",
    "elect.sync": "one-lane election",
    "griddepcontrol": "programmatic dependent launch (wait / launch_dependents)",
}


def count_instructions(ptx: str, patterns=KEY_INSTRUCTIONS) -> dict[str, int]:
    return {p: ptx.count(p) for p in patterns}


# --------------------------------------------------------------------------------------
# cubin resources
# --------------------------------------------------------------------------------------

# Attributes of the CUDA ELF ".nv.info" sections (as cuobjdump names them).
_EIATTR_REGCOUNT = 0x2F
_EIATTR_FRAME_SIZE = 0x11
_EIATTR_MAX_REG_COUNT = 0x1B
_EIFMT_HVAL = 3  # 16-bit value follows
_EIFMT_SVAL = 4  # 16-bit size, then that many bytes


@dataclass(frozen=True)
class KernelResources:
    name: str
    registers: int  # per thread, as allocated at launch (setmaxnreg moves them later)
    stack_frame_bytes: int  # > 0 means local memory: spills or indexed register arrays
    register_cap: int | None  # the launch-bound cap ptxas compiled under


def _elf_sections(data: bytes):
    if data[:4] != b"\x7fELF" or data[4] != 2:
        raise ValueError("not a 64-bit ELF file")
    shoff = struct.unpack_from("<Q", data, 0x28)[0]
    entsize, count, strndx = struct.unpack_from("<HHH", data, 0x3A)
    headers = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * entsize) for i in range(count)]
    str_off = headers[strndx][4]

    def name(off):
        end = data.index(b"\0", str_off + off)
        return data[str_off + off:end].decode()

    return [(name(h[0]), data[h[4]:h[4] + h[5]], h) for h in headers]


def _nv_info_attrs(blob: bytes):
    i = 0
    while i + 4 <= len(blob):
        fmt, attr = blob[i], blob[i + 1]
        if fmt == _EIFMT_SVAL:
            size = struct.unpack_from("<H", blob, i + 2)[0]
            yield attr, blob[i + 4:i + 4 + size]
            i += 4 + size
        elif fmt == _EIFMT_HVAL:
            yield attr, blob[i + 2:i + 4]
            i += 4
        else:  # formats without payload (EIFMT_NVAL) or unknown: stop reading
            i += 2 if fmt == 1 else 4


def cubin_resources(path: str | Path) -> list[KernelResources]:
    """Registers and stack frame of every kernel in a cubin, read from its ELF notes."""
    data = Path(path).read_bytes()
    sections = _elf_sections(data)
    symtab = next((s for s in sections if s[0] == ".symtab"), None)
    strtab = next((s for s in sections if s[0] == ".strtab"), None)

    def symbol_name(index: int) -> str:
        entry = symtab[1][index * 24:(index + 1) * 24]
        off = struct.unpack_from("<I", entry, 0)[0]
        raw = strtab[1]
        return raw[off:raw.index(b"\0", off)].decode()

    regs: dict[str, int] = {}
    frames: dict[str, int] = {}
    for name, blob, _ in sections:
        if name != ".nv.info":
            continue
        for attr, value in _nv_info_attrs(blob):
            if attr in (_EIATTR_REGCOUNT, _EIATTR_FRAME_SIZE) and len(value) == 8:
                sym, val = struct.unpack("<II", value)
                (regs if attr == _EIATTR_REGCOUNT else frames)[symbol_name(sym)] = val
    caps: dict[str, int] = {}
    for name, blob, _ in sections:
        if name.startswith(".nv.info."):
            for attr, value in _nv_info_attrs(blob):
                if attr == _EIATTR_MAX_REG_COUNT and len(value) == 2:
                    caps[name[len(".nv.info."):]] = struct.unpack("<H", value)[0]
    return [
        KernelResources(k, regs[k], frames.get(k, 0), caps.get(k)) for k in sorted(regs)
    ]


# --------------------------------------------------------------------------------------
# SASS
# --------------------------------------------------------------------------------------

def find_nvdisasm() -> str | None:
    """``nvdisasm`` from PATH, a CUDA toolkit, or the ``nvidia-cuda-nvdisasm`` wheel
    (``pip install wsgemm[sass]``), which installs under ``site-packages/nvidia/*/bin``."""
    found = shutil.which("nvdisasm")
    if found:
        return found
    candidates = [Path("/usr/local/cuda/bin/nvdisasm")]
    try:
        import nvidia  # namespace package of NVIDIA's CUDA wheels

        for root in nvidia.__path__:
            candidates += sorted(Path(root).glob("*/bin/nvdisasm"))
    except ImportError:
        pass
    return next((str(p) for p in candidates if p.exists()), None)


def disassemble(cubin: str | Path) -> str | None:
    tool = find_nvdisasm()
    if tool is None:
        return None
    return subprocess.run([tool, "-c", "-g", str(cubin)], check=True, capture_output=True, text=True).stdout


def sass_instructions(sass: str) -> list[str]:
    """The instructions of ``nvdisasm`` output, one per entry, without their
    ``/*addr*/`` prefixes, the ``;`` that ends each and what follows it (encodings),
    and without labels."""
    return [line.split("*/", 1)[1].split(";", 1)[0].strip()
            for line in sass.splitlines() if re.search(r"/\*[0-9a-f]{4}\*/", line)]


def sass_mnemonic(instruction: str) -> str:
    """``@!P0 SYNCS.PHASECHK.TRANS64 P0, [R3]`` -> ``SYNCS.PHASECHK.TRANS64``."""
    words = instruction.split()
    return words[1] if words[0].startswith("@") else words[0]


def sass_opcode(instruction: str) -> str:
    """``@!P0 SYNCS.PHASECHK.TRANS64 P0, [R3]`` -> ``SYNCS``."""
    return sass_mnemonic(instruction).split(".")[0]


def uniform_moves_between(instructions: list[str], mma_opcode: str) -> list[str]:
    """``R2UR`` moves (register -> uniform register) from the first ``mma_opcode`` to
    the last: the MMA reads its shared-memory descriptors from uniform registers, so
    moves there mean the descriptors were built in ordinary ones."""
    positions = [i for i, ins in enumerate(instructions) if sass_opcode(ins) == mma_opcode]
    if not positions:
        raise ValueError(f"no {mma_opcode} in the SASS")
    return [ins for ins in instructions[positions[0]:positions[-1] + 1] if sass_opcode(ins) == "R2UR"]


def sass_loop_around(sass: str, opcode: str) -> list[str]:
    """The instructions of the innermost loop around the first ``opcode`` in ``sass``
    (nvdisasm text): from the label that a later branch jumps back to, to that branch."""
    lines = sass.splitlines()
    labels = {}
    for i, line in enumerate(lines):
        match = re.match(r"\s*(\.L_x_\d+):", line)
        if match:
            labels[match.group(1)] = i
    found = [i for i, line in enumerate(lines) if sass_instructions(line)
             and sass_opcode(sass_instructions(line)[0]) == opcode]
    if not found:
        raise ValueError(f"no {opcode} in the SASS")
    for j in range(found[0], len(lines)):
        branch = re.search(r"\bBRA\b[^`]*`\((\.L_x_\d+)\)", lines[j])
        if branch and labels.get(branch.group(1), len(lines)) <= found[0]:
            return sass_instructions("\n".join(lines[labels[branch.group(1)]:j + 1]))
    raise ValueError(f"the first {opcode} is not inside a loop")


# --------------------------------------------------------------------------------------
# PTX structure
# --------------------------------------------------------------------------------------

# An instruction line, optionally predicated, and the register its first operand writes.
_PTX_DESTINATION = re.compile(r"^\s*(?:@!?%p\d+\s+)?[a-z][\w.:]*\s+(%\w+),")


def ptx_destination(line: str) -> str | None:
    """The register a PTX instruction line writes (its first operand), or None (stores,
    copies and branches, whose first operand is an address or a label)."""
    match = _PTX_DESTINATION.match(line)
    return match.group(1) if match else None


def ptx_definition(lines: list[str], register: str) -> int | None:
    """Index of the first of ``lines`` that writes ``register``."""
    return next((i for i, line in enumerate(lines) if ptx_destination(line) == register), None)


_MBARRIER_INIT = re.compile(r"^\s*mbarrier\.init\.shared(?:::cta)?\.b64\s+\[(%\w+)(?:\+(\d+))?\],\s*(%\w+|\d+);")
_MOVE_IMMEDIATE = re.compile(r"^\s*mov\.[bu]32\s+(%\w+),\s*(\d+);")
_EXPECT_TX = re.compile(r"^\s*mbarrier\.arrive\.expect_tx\S*\s+\S+,\s*\[[^\]]+\],\s*(%\w+|\d+);")


def _with_immediates(ptx: str):
    """Each line of ``ptx`` with a function that gives an operand's value there: an
    immediate, or the immediate last moved into the register above (else None)."""
    moved: dict[str, int] = {}
    for line in ptx.splitlines():
        move = _MOVE_IMMEDIATE.match(line)
        if move:
            moved[move.group(1)] = int(move.group(2))
        yield line, lambda operand: int(operand) if operand.isdigit() else moved.get(operand)


def mbarrier_init_counts(ptx: str) -> dict[str, dict[int, int | None]]:
    """The arrival counts the kernel initialises its mbarriers with, as the PTX has
    them: ``{base register: {byte offset: count}}``."""
    found: dict[str, dict[int, int | None]] = {}
    for line, value in _with_immediates(ptx):
        init = _MBARRIER_INIT.match(line)
        if init:
            found.setdefault(init.group(1), {})[int(init.group(2) or 0)] = value(init.group(3))
    return found


def announced_bytes(ptx: str) -> list[int | None]:
    """The transaction bytes each ``mbarrier.arrive.expect_tx`` announces, as the PTX
    has them (None: a register not set from an immediate just above, e.g. chosen per tile)."""
    return [value(match.group(1)) for line, value in _with_immediates(ptx) if (match := _EXPECT_TX.match(line))]


def tma_coordinates(line: str) -> list[str]:
    """The coordinate operands of a ``cp.async.bulk.tensor`` line, innermost first
    (``{%r352, %r17}``: the k column and the tile row of a K-major box)."""
    return re.search(r"\{([^}]*)\}", line).group(1).replace(" ", "").split(",")


def loop_blocks(ptx: str) -> list[str]:
    """Split a kernel's PTX at labels, keeping each label with the code that follows."""
    return re.split(r"\n(?=\$L__BB\d+_\d+:)", ptx)


def ptx_loop_around(ptx: str, pattern: str) -> list[str] | None:
    """The lines of the loop around every line matching ``pattern``: from the label that
    the first branch after the last match jumps back to, to that branch (None: no
    match, or no such loop)."""
    lines = ptx.splitlines()
    hits = [i for i, line in enumerate(lines) if re.search(pattern, line)]
    if not hits:
        return None
    loop = _back_edge(lines, hits[0], hits[-1], reach=len(lines))
    return lines[loop[0]:loop[1] + 1] if loop else None


def releases_before_their_guard(lines: list[str], issue: str, guard: str, release: str) -> list[str]:
    """The ``release`` lines among ``lines`` that follow an ``issue`` line with no
    ``guard`` line in between, in program order: an mbarrier arrive that would hand
    a buffer back while the asynchronous instructions reading it may still run (e.g.
    issue ``wgmma.mma_async``, guard ``wgmma.wait_group``, release ``mbarrier.arrive``)."""
    unguarded, pending = [], False
    for line in lines:
        if re.search(issue, line):
            pending = True
        elif re.search(guard, line):
            pending = False
        elif re.search(release, line) and pending:
            unguarded.append(line.strip())
    return unguarded


def producer_probe_precedes_copies(ptx: str) -> bool:
    """True if some basic block issues a non-blocking ``mbarrier.try_wait`` (the
    look-ahead probe, the predicate form without a retry loop) before the TMA load
    copies of the same block -- the ``Lookahead.BEFORE_COPY`` order."""
    for block in loop_blocks(ptx):
        probe = re.search(r"mbarrier\.try_wait\.parity[^\n]*%p\d+,", block)
        copy = re.search(r"cp\.async\.bulk\.tensor[^\n]*mbarrier::complete_tx", block)
        if probe and copy and probe.start() < copy.start():
            return True
    return False


# --------------------------------------------------------------------------------------
# The producer's k-loop, for the look-ahead evidence (python -m wsgemm lookahead)
# --------------------------------------------------------------------------------------

@dataclass(frozen=True)
class LoopExcerpt:
    """The producer k-loop of one kernel, as the compiler emitted it."""

    lines: list[str]  # the excerpt, from the slot acquire to the back-edge
    events: list[tuple[int, str]]  # (line index in ``lines``, what happens there)


# What marks each step of the producer loop, in PTX and in SASS.
_PTX_MARKS = {
    "load": r"cp\.async\.bulk\.tensor\S*shared::\S*global\S*mbarrier::complete_tx",
    "announce": r"mbarrier\.arrive\.expect_tx",
    "probe": r"mbarrier\.try_wait\.parity\S*\s+(%p\d+),",
}
_SASS_MARKS = {
    "load": r"UTMALDG",
    "announce": r"SYNCS\.ARRIVE\.TRANS64(?!\.ART0)",
    "probe": r"SYNCS\.PHASECHK\.TRANS64\.TRYWAIT\s+(P\d+),",
}


def _label_of(line: str) -> str | None:
    match = re.match(r"\s*(\$?[.\w]+):", line)
    return match.group(1) if match else None


def _back_edge(lines: list[str], first: int, last: int, reach: int = 80) -> tuple[int, int] | None:
    """(loop head line, branch line) of the first branch within ``reach`` lines after
    ``last`` that jumps back to a label at or before ``first``: the k-loop around the
    copies."""
    labels = {_label_of(line): i for i, line in enumerate(lines) if _label_of(line)}
    for i in range(last, min(len(lines), last + reach)):
        target = re.search(r"\bbra(?:\.uni)?\s+\(?`?\(?(\$?[.\w]+)|\bBRA\S*\s+(?:U?P\w+,\s*)?`\((\.?\w+)\)", lines[i])
        if target:
            label = target.group(1) or target.group(2)
            if label in labels and labels[label] <= first:
                return labels[label], i
    return None


def _producer_loop(lines: list[str], marks: dict) -> LoopExcerpt | None:
    loads = [i for i, line in enumerate(lines) if re.search(marks["load"], line)]
    if not loads:
        return None
    first, last = loads[0], loads[-1]
    loop = _back_edge(lines, first, last)
    start, end = (loop[0], loop[1] + 1) if loop else (max(0, first - 30), last + 25)
    excerpt = lines[start:end]
    events = []
    probe_preds = []
    for i, line in enumerate(excerpt):
        probe = re.search(marks["probe"], line)
        if re.search(marks["announce"], line):
            events.append((i, "announce: arrive.expect_tx of this stage's bytes"))
        elif re.search(marks["load"], line):
            events.append((i, "copy: TMA load into the current stage"))
        elif probe and any(text.startswith("announce") for _, text in events):
            probe_preds.append((i, probe.group(1)))
            events.append((i, f"probe: try_wait on the next slot's empty barrier -> {probe.group(1)}"))
    for probe_line, pred in probe_preds:
        # The probe's answer is read where the next acquire decides whether to wait:
        # later in this iteration or, wrapping around, at the top of the next.
        pattern = re.compile(rf"(?<![\w%]){re.escape(pred)}(?!\d)")
        order = list(range(probe_line + 1, len(excerpt))) + list(range(0, probe_line))
        use = next((i for i in order if pattern.search(excerpt[i])), None)
        if use is not None:
            events.append((use, f"read: first use of {pred}, deciding whether the next acquire waits"))
    events.sort()
    return LoopExcerpt(excerpt, events)


_PARAM_MOVE = re.compile(r"mov\.b64\s+(%rd\d+),\s*\S+_param_(\d+);")
_PARAM_ADDRESS = re.compile(r"cvta\.param\.u64\s+(%rd\d+),\s*(%rd\d+);")
_TMA_LOAD = re.compile(r"cp\.async\.bulk\.tensor\.\S*shared::\w+\.global\S*\s+\[[^\]]*\],\s*\[(%rd\d+),")


def tma_load_parameters(ptx: str) -> list[tuple[int, int]]:
    """(line number, kernel parameter) of each TMA load in ``ptx``: the parameter whose
    tensor-map descriptor the load reads, which tells A's loads from B's."""
    lines = ptx.splitlines()
    param_of = {}
    loads = []
    for number, line in enumerate(lines):
        if move := _PARAM_MOVE.search(line):
            param_of[move.group(1)] = int(move.group(2))
        elif address := _PARAM_ADDRESS.search(line):
            if address.group(2) in param_of:
                param_of[address.group(1)] = param_of[address.group(2)]
        elif load := _TMA_LOAD.search(line):
            loads.append((number, param_of.get(load.group(1), -1)))
    return loads


def announced_bytes_operands(ptx: str) -> set[str]:
    """The byte-count operands of the ``mbarrier.arrive.expect_tx`` instructions in
    ``ptx``: an immediate, or the register chosen per tile where a producer may skip a
    box (the SM90 kernel in clusters, docs/tuning-log/packaged-table.md)."""
    return set(re.findall(r"mbarrier\.arrive\.expect_tx\S*\s+\S+,\s*\[[^\]]+\],\s*([^;\s]+);", ptx))


def producer_loop_ptx(ptx: str) -> LoopExcerpt | None:
    return _producer_loop(ptx.splitlines(), _PTX_MARKS)


def producer_loop_sass(sass: str) -> LoopExcerpt | None:
    return _producer_loop(sass.splitlines(), _SASS_MARKS)


def format_excerpt(excerpt: LoopExcerpt, width: int = 110) -> str:
    notes = dict(excerpt.events)
    texts = [line.strip()[:width] for line in excerpt.lines]
    # Pad only the annotated lines, and only to the longest line: trailing blanks on every
    # line tripled the size of docs/evidence/lookahead-codegen.md.
    column = max(map(len, texts), default=0)
    return "\n".join(f"{text:<{column}}  <-- {notes[i]}" if i in notes else text for i, text in enumerate(texts))
