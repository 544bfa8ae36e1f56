"""Compiling kernels: the in-process cache, the DSL's disk cache, and compile-only
builds (any machine, no GPU) with their PTX/cubin artifacts.

The cache key is :class:`wsgemm.config.KernelSpec`: arch, dtypes, operand majors,
every config knob and the alignment. Problem sizes and strides are runtime
arguments of the compiled function, so one compiled kernel serves every shape.
"""

from __future__ import annotations

import functools
import hashlib
import os
import tempfile
import threading
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

from . import cache_files
from .config import KernelSpec
from .hardware import TMA_ALIGNMENT_BYTES


def _kernel_builder(spec: KernelSpec):
    """The kernel object for ``spec``, once its barrier counts are checked against the
    arrivals its roles issue (a mismatch would hang or race on the GPU)."""
    from .kernels.common.protocol import check_barrier_protocol

    check_barrier_protocol(spec)
    if spec.arch == "sm90":
        from .kernels.sm90 import Sm90Gemm

        return Sm90Gemm(spec)
    if spec.arch == "sm100":
        from .kernels.sm100 import Sm100Gemm

        return Sm100Gemm(spec)
    raise NotImplementedError(f"no kernel for arch {spec.arch!r}")  # make_spec rejects earlier


def _example_args(spec: KernelSpec):
    """Stand-ins for the kernel's arguments: symbolic tensors in torch layouts.

    Sizes and non-unit strides are runtime values (one compiled kernel serves every
    shape); the unit stride, the 16-byte alignment of base and strides, and which
    sizes must agree (A's K and B's K, ...) are part of the compiled signature, and
    the TVM-FFI call checks them on every call. The stream is the caller's current
    one, read by TVM-FFI from PyTorch.
    """
    import cutlass
    import cutlass.cute as cute
    from cutlass import Int32
    from cutlass.cute.runtime import make_fake_compact_tensor, make_fake_stream, make_fake_tensor

    from .config import DTYPE_BYTES
    from .kernels.common.base import CUTLASS_DTYPES

    m, n, k, batches = (cute.sym_int() for _ in range(4))

    def fake(dtype_name: str, rows, cols, cols_contiguous: bool):
        align = TMA_ALIGNMENT_BYTES // DTYPE_BYTES[dtype_name]
        ld = cute.sym_int64(divisibility=align)
        shape, stride = (rows, cols), ((ld, 1) if cols_contiguous else (1, ld))
        if spec.batched:
            shape, stride = (batches, *shape), (cute.sym_int64(divisibility=align), *stride)
        return make_fake_tensor(CUTLASS_DTYPES[dtype_name], shape, stride, assumed_align=TMA_ALIGNMENT_BYTES)

    d = fake(spec.out_dtype, m, n, spec.d_major == "n")  # D (M, N)
    operands = [
        fake(spec.ab_dtype, m, k, spec.a_major == "k"),  # A (M, K)
        fake(spec.ab_dtype, k, n, spec.b_major == "n"),  # B (K, N): row-major is N-major
        d,
    ]
    if spec.config.has_workspace:  # split-K or stream-K: arrival flags, fp32 partial sums
        operands += [make_fake_compact_tensor(cutlass.Int32, (cute.sym_int(),), assumed_align=16),
                     make_fake_compact_tensor(cutlass.Float32, (cute.sym_int64(),), assumed_align=16)]
    elif spec.epilogue.fused:  # the fused entry point's workspace slots take D, unused
        operands += [d, d]
    if spec.epilogue.fused:
        bias = d  # D stands in for a bias the epilogue does not add
        if spec.epilogue.bias:
            # (batches or 1, length), unit stride along its length; one vector for
            # every batch has batch stride 0. Any element alignment.
            bias = make_fake_tensor(CUTLASS_DTYPES[spec.epilogue.bias_dtype], (cute.sym_int(), cute.sym_int()),
                                    (cute.sym_int64(), 1), assumed_align=DTYPE_BYTES[spec.epilogue.bias_dtype])
        operands += [bias, cutlass.Float32(1.0)]  # alpha
    return operands + [
        Int32(1),  # clusters in the persistent grid
        make_fake_stream(use_tvm_ffi_env_stream=True),
    ]


def _entry_point(kernel, spec: KernelSpec):
    """The builder's host function matching :func:`_example_args`."""
    if spec.epilogue.fused:
        return kernel.call_with_epilogue
    return kernel.call_with_workspace if spec.config.has_workspace else kernel


def launcher(fn):
    """What a cached call should invoke to launch ``fn``: the TVM-FFI function itself
    where the DSL wraps it in a Python ``__call__`` (its kwargs wrapper binds names and
    defaults our positional calls do not use: ~0.6 us per call on the development
    CPU). Functions with raw-pointer arguments need the wrapper's conversion; ours
    have none, but the check keeps that true if a kernel signature ever changes."""
    unwrap = getattr(fn, "__tvm_ffi_object__", None)
    execution_args = getattr(fn, "execution_args", None)
    if unwrap is None or getattr(execution_args, "has_pointer_address_arg_specs", False):
        return fn
    ffi_function = unwrap()
    return fn if ffi_function is None else ffi_function


@dataclass
class CompiledGemm:
    """A compiled kernel and what it took to build it."""

    spec: KernelSpec
    fn: object  # the DSL's compiled host function
    compile_seconds: float
    ptx: str | None = None
    cubin_path: str | None = None
    extra: dict = field(default_factory=dict)


def _artifact_text(value) -> str | None:
    if value is None:
        return None
    if isinstance(value, str) and "\n" not in value and os.path.exists(value):
        return Path(value).read_text()
    return value


def compile_spec(spec: KernelSpec, *, keep_artifacts: bool = False, dump_dir: str | None = None) -> CompiledGemm:
    """Compile ``spec`` for its arch target; works without a GPU.

    With ``keep_artifacts`` the PTX text and the cubin file come back too.
    """
    import cutlass.cute as cute

    kernel = _kernel_builder(spec)
    # TVM-FFI: the compiled function takes torch tensors directly and checks them in C,
    # which keeps a cached call to a few microseconds of host time.
    options = [f"--gpu-arch {spec.facts.compile_target}", "--enable-tvm-ffi"]
    if keep_artifacts:
        dump_dir = dump_dir or tempfile.mkdtemp(prefix="wsgemm-")
        os.makedirs(dump_dir, exist_ok=True)
        options += ["--keep-ptx", "--keep-cubin", f"--dump-dir {dump_dir}"]
    start = time.perf_counter()
    fn = cute.compile(_entry_point(kernel, spec), *_example_args(spec), options=" ".join(options))
    seconds = time.perf_counter() - start
    compiled = CompiledGemm(spec, fn, seconds,
                            extra={"smem_bytes": kernel.smem_bytes, "tx_bytes": kernel.tx_bytes})
    if keep_artifacts:
        artifacts = getattr(fn, "artifacts", None)
        compiled.ptx = _artifact_text(getattr(artifacts, "PTX", None))
        cubin = getattr(artifacts, "CUBIN", None)
        if isinstance(cubin, (bytes, bytearray)):
            path = Path(dump_dir) / f"{spec.short()}.cubin"
            path.write_bytes(cubin)
            compiled.cubin_path = str(path)
        elif isinstance(cubin, str) and os.path.exists(cubin):
            compiled.cubin_path = cubin
    return compiled


# --------------------------------------------------------------------------------------
# Disk cache: compiled kernels exported as host objects (the DSL's AOT export)
# --------------------------------------------------------------------------------------

def disk_cache_dir() -> Path:
    """``$WSGEMM_CACHE_DIR``, else ``$XDG_CACHE_HOME/wsgemm``, else ``~/.cache/wsgemm``."""
    root = os.environ.get("WSGEMM_CACHE_DIR")
    if root:
        return Path(root)
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "wsgemm"


@functools.lru_cache(maxsize=1)
def _code_fingerprint() -> str:
    """Hash of everything that shapes the generated code besides the spec: the
    kernel sources, the config module and the DSL version. Editing a kernel
    therefore never loads a stale binary."""
    import cutlass

    h = hashlib.sha256(getattr(cutlass, "__version__", "?").encode())
    package = Path(__file__).parent
    for path in sorted([package / "config.py", *(package / "kernels").rglob("*.py")]):
        h.update(path.name.encode())
        h.update(path.read_bytes())
    return h.hexdigest()


def disk_key(spec: KernelSpec) -> str:
    # The target is not in the spec's repr: a binary built for another target never
    # loads; nor one built on another host platform sharing this cache directory.
    text = repr(spec) + spec.facts.compile_target + _code_fingerprint() + cache_files.host()
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def disk_path(spec: KernelSpec) -> Path:
    return disk_cache_dir() / f"k{disk_key(spec)}.o"


def _disk_cache_disabled() -> bool:
    return bool(os.environ.get("WSGEMM_DISABLE_DISK_CACHE"))


def load_from_disk(spec: KernelSpec):
    """The compiled function for ``spec`` from the disk cache, or ``None``: only from a
    file its record vouches for (:mod:`wsgemm.cache_files`); a damaged one is set aside
    with a warning, as is one the DSL fails to load."""
    if _disk_cache_disabled():
        return None
    path = disk_path(spec)
    if not cache_files.verified(path):
        return None
    try:
        import cutlass.cute as cute

        return getattr(cute.runtime.load_module(str(path), enable_tvm_ffi=True), f"wsgemm_{disk_key(spec)}")
    except Exception as exc:  # intact but unusable (say, another DSL runtime): recompile
        cache_files.set_aside(path, f"the DSL could not load it: {type(exc).__name__}: {exc}")
        return None


def save_to_disk(spec: KernelSpec, fn) -> Path | None:
    """Export ``fn`` to the disk cache and publish it with its record; best effort (the
    export needs the CUDA runtime to link). None where it was not written."""
    if _disk_cache_disabled():
        return None
    path = disk_path(spec)
    if not cache_files.writable(path.parent):
        return None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=path.parent, prefix=".export-") as tmp:
            exported = Path(tmp) / path.name
            fn.export_to_c(str(exported), function_name=f"wsgemm_{disk_key(spec)}")
            return path if cache_files.publish(path, exported) else None
    except OSError as exc:  # read-only or full: one warning, then in memory
        cache_files.mark_unwritable(path.parent, exc)
        return None
    except Exception as exc:
        warnings.warn(f"wsgemm: could not export the kernel to the disk cache ({exc}); kernels will be "
                      "recompiled in new processes", RuntimeWarning, stacklevel=3)
        return None


class CompileCache:
    """Thread-safe map from :class:`KernelSpec` to :class:`CompiledGemm`.

    Two threads asking for the same missing spec compile it once: the second waits
    for the first. Different specs compile concurrently.
    """

    def __init__(self, use_disk: bool = True):
        self._lock = threading.Lock()
        self._entries: dict[KernelSpec, CompiledGemm] = {}
        self._building: dict[KernelSpec, threading.Lock] = {}
        self.hits = 0
        self.misses = 0
        self.use_disk = use_disk

    def get(self, spec: KernelSpec) -> CompiledGemm:
        entry = self._entries.get(spec)
        if entry is not None:
            self.hits += 1
            return entry
        with self._lock:
            entry = self._entries.get(spec)
            if entry is not None:
                self.hits += 1
                return entry
            build_lock = self._building.setdefault(spec, threading.Lock())
        with build_lock:
            entry = self._entries.get(spec)
            if entry is None:
                self.misses += 1
                entry = self._load_or_compile(spec)
                with self._lock:
                    self._entries[spec] = entry
                    self._building.pop(spec, None)
            else:
                self.hits += 1
        return entry

    def _load_or_compile(self, spec: KernelSpec) -> CompiledGemm:
        start = time.perf_counter()
        if not self.use_disk or _disk_cache_disabled():
            return compile_spec(spec)
        fn = load_from_disk(spec)
        if fn is None:
            # Another process compiling this kernel is waited for, then read; where the
            # lock cannot be had (a hung holder, an unwritable directory) it is compiled
            # here and kept in memory.
            with cache_files.lock(disk_path(spec)) as held:
                fn = load_from_disk(spec)
                if fn is None:
                    entry = compile_spec(spec)
                    if held:
                        save_to_disk(spec, entry.fn)
                    return entry
        return CompiledGemm(spec, fn, time.perf_counter() - start, extra={"from_disk": True})

    def __contains__(self, spec: KernelSpec) -> bool:
        return spec in self._entries

    def __len__(self) -> int:
        return len(self._entries)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self.hits = self.misses = 0


KERNEL_CACHE = CompileCache()
