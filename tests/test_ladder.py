"""The kernel ladder (examples/ladder/) on the CPU: every step compiles for its arch
(sm_90a for Hopper, sm_100a for Blackwell) and its PTX holds the instruction the step
introduces, in the place the step's header says, and lacks what only a later step
adds. The Hopper steps' results are checked on a GPU by tests/test_gpu_ladder.py; the
Blackwell steps have no GPU to run on, so this is all the checking they get.

Each step compiles in a few seconds (nine in all, once each per run)."""

import ast
import importlib
import re
import subprocess
import sys
from pathlib import Path

import pytest

from wsgemm.inspection import announced_bytes, ptx_loop_around, releases_before_their_guard

LADDER = Path(__file__).resolve().parents[1] / "examples" / "ladder"
HOPPER = ["hopper_1_tma_load", "hopper_2_one_wgmma", "hopper_3_k_ring", "hopper_4_warp_specialized",
          "hopper_5_persistent", "hopper_6_tma_store"]
BLACKWELL = ["blackwell_1_tcgen05_mma", "blackwell_2_warp_specialized", "blackwell_3_acc_double_buffer"]
STEPS = HOPPER + BLACKWELL

TMA_LOAD = r"cp\.async\.bulk\.tensor\.2d\.shared::cta\.global\.tile\.mbarrier::complete_tx::bytes"
TMA_STORE = r"cp\.async\.bulk\.tensor\.2d\.global\.shared::cta"
ARRIVE = r"mbarrier\.arrive\.shared\.b64"  # a plain arrival (a release), not expect_tx


def step(name: str):
    if str(LADDER) not in sys.path:
        sys.path.insert(0, str(LADDER))
    return importlib.import_module(name)


_PTX: dict[str, str] = {}


def ptx(name: str) -> str:
    """The step's PTX, compiled once per test run."""
    if name not in _PTX:
        _PTX[name] = step(name).build().ptx
    return _PTX[name]


def lines_matching(text: str, pattern: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if re.search(pattern, line)]


def first_index(lines: list[str], pattern: str) -> int:
    return next(i for i, line in enumerate(lines) if re.search(pattern, line))


def test_the_ladder_is_the_files_its_readme_lists():
    files = sorted(p.stem for p in LADDER.glob("*_[0-9]_*.py"))
    assert files == sorted(STEPS)
    readme = (LADDER / "README.md").read_text()
    for name in STEPS:
        assert f"{name}.py" in readme, f"README.md does not list {name}.py"
    assert "src/wsgemm/kernels/sm90.py" in readme and "src/wsgemm/kernels/sm100.py" in readme


@pytest.mark.parametrize("name", STEPS)
def test_every_step_says_what_it_changed_and_what_it_needs(name):
    doc = ast.get_docstring(ast.parse((LADDER / f"{name}.py").read_text()))
    assert re.search(r"^What (this step adds|changed|changes)", doc, re.MULTILINE), name
    assert re.search(r"^Needs:", doc, re.MULTILINE) and re.search(r"^Run:\s+python examples/ladder/" + name, doc,
                                                                    re.MULTILINE)
    if name.startswith("blackwell"):
        assert "COMPILED AND CHECKED ONLY" in doc and "never run" in doc


# -- Hopper -------------------------------------------------------------------------------

def test_hopper_1_one_tma_load_completes_on_one_mbarrier():
    text = ptx("hopper_1_tma_load")
    loads = lines_matching(text, TMA_LOAD)
    assert len(loads) == 1
    assert len(lines_matching(text, r"mbarrier\.init")) == 1
    assert announced_bytes(text) == [64 * 64 * 2]
    # Everybody waits for phase 0: the parity is the immediate 0.
    waits = lines_matching(text, r"mbarrier\.try_wait\.parity")
    assert waits and all(re.search(r"\],\s*0,", w) for w in waits), waits
    assert "wgmma" not in text


def test_hopper_2_two_loads_on_one_barrier_then_wgmma():
    text = ptx("hopper_2_one_wgmma")
    loads = lines_matching(text, TMA_LOAD)
    assert len(loads) == 2
    barriers = {re.findall(r"\[([^\]]+)\]", line)[2] for line in loads}
    assert len(barriers) == 1, loads  # A and B complete on the same mbarrier
    assert announced_bytes(text) == [(128 + 128) * 64 * 2]
    # 128 x 128 x 64 from 64 x 128 x 16 instructions: 2 rows of them x 4 k-steps.
    assert text.count("wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16") == 8
    order = [first_index(text.splitlines(), p) for p in
             (r"mbarrier\.try_wait", r"wgmma\.fence", r"wgmma\.mma_async", r"wgmma\.commit_group",
              r"wgmma\.wait_group\.sync\.aligned\s+0")]
    assert order == sorted(order)


def test_hopper_3_a_ring_of_full_barriers_waited_with_a_running_parity():
    text = ptx("hopper_3_k_ring")
    assert len(lines_matching(text, r"mbarrier\.init")) == step("hopper_3_k_ring").STAGES
    # The k-loop waits with the parity held in a register, not a constant.
    loop = ptx_loop_around(text, r"wgmma\.mma_async")
    waits = [line for line in loop if re.search(r"mbarrier\.try_wait\.parity", line)]
    assert waits and all(re.search(r"\],\s*%r\d+", w) for w in waits), waits
    # The refill of a slot comes after every warp's wgmma.wait_group and a CTA barrier.
    wait_group = first_index(loop, r"wgmma\.wait_group")
    barrier = first_index(loop, r"bar\.sync\s+0")
    refill = first_index(loop, TMA_LOAD)
    assert wait_group < barrier < refill
    assert not lines_matching(text, ARRIVE)  # no empty barriers yet


def test_hopper_4_the_consumer_releases_empty_after_its_wgmmas_retire():
    text = ptx("hopper_4_warp_specialized")
    assert len(lines_matching(text, r"mbarrier\.init")) == 2 * step("hopper_4_warp_specialized").STAGES
    loop = ptx_loop_around(text, r"wgmma\.mma_async")
    releases = [line for line in loop if re.search(ARRIVE, line)]
    assert releases
    assert not releases_before_their_guard(loop, r"wgmma\.mma_async", r"wgmma\.wait_group", ARRIVE)
    # The consumer's loop has no CTA barrier and no loads: the producer warp loads.
    assert not [line for line in loop if re.search(r"bar\.sync|cp\.async\.bulk", line)]
    producer_loop = ptx_loop_around(text, TMA_LOAD)
    assert not [line for line in producer_loop if "wgmma" in line]
    assert "%nctaid" not in text


def test_hopper_5_persistent_ctas_step_through_the_tiles_by_the_grid_size():
    text = ptx("hopper_5_persistent")
    assert "%nctaid.x" in text
    assert not any("%nctaid" in ptx(name) for name in HOPPER[:4])
    # The consumer's tile loop holds its k-loop and the store of each tile.
    assert lines_matching(text, r"st\.global")


def test_hopper_6_the_epilogue_stores_through_shared_memory_with_tma():
    text = ptx("hopper_6_tma_store")
    lines = text.splitlines()
    assert lines_matching(text, TMA_STORE) and lines_matching(text, r"stmatrix")
    assert not lines_matching(text, r"st\.global")  # no thread writes D itself any more
    # Written with stmatrix, fenced for the async proxy, gathered at a 128-thread
    # barrier, then stored and committed.
    fence = first_index(lines, r"fence\.proxy\.async\.shared::cta")
    gathered = fence + first_index(lines[fence:], r"bar\.sync\s+\S+,\s*128")
    order = [first_index(lines, r"stmatrix"), fence, gathered, first_index(lines, TMA_STORE),
             first_index(lines, r"cp\.async\.bulk\.commit_group")]
    assert order == sorted(order), order
    # The buffer is reused only once the previous store has read it; and at exit.
    assert set(re.findall(r"cp\.async\.bulk\.wait_group\.read\s+(\d+)", text)) == {"0"}
    assert len(lines_matching(text, r"cp\.async\.bulk\.wait_group\.read")) == 2


# -- Blackwell (compiled only) -------------------------------------------------------------

def test_blackwell_1_one_tcgen05_mma_into_tensor_memory_read_back_with_tcgen05_ld():
    text = ptx("blackwell_1_tcgen05_mma")
    lines = text.splitlines()
    assert len(lines_matching(text, r"tcgen05\.alloc\.")) == len(lines_matching(text, r"tcgen05\.dealloc\.")) == 1
    assert len(lines_matching(text, r"tcgen05\.mma\.cta_group::1\.kind::f16")) == 4  # 128x128x16, 4 k-steps
    assert len(lines_matching(text, r"tcgen05\.commit")) == 1
    order = [first_index(lines, p) for p in (r"tcgen05\.alloc", r"tcgen05\.mma", r"tcgen05\.commit",
                                             r"tcgen05\.ld", r"tcgen05\.wait::ld", r"tcgen05\.dealloc")]
    assert order == sorted(order), order
    assert "wgmma" not in text


def test_blackwell_2_the_mma_warp_releases_each_slot_with_a_commit():
    text = ptx("blackwell_2_warp_specialized")
    stages = step("blackwell_2_warp_specialized").STAGES
    assert len(lines_matching(text, r"mbarrier\.init")) == 2 * stages + 1  # full, empty, acc_full
    loop = ptx_loop_around(text, r"tcgen05\.mma\.")
    mmas = [i for i, line in enumerate(loop) if re.search(r"tcgen05\.mma\.", line)]
    commits = [i for i, line in enumerate(loop) if re.search(r"tcgen05\.commit", line)]
    assert commits and min(commits) > max(mmas)  # the release follows the MMAs that read the slot
    assert not [line for line in loop if re.search(ARRIVE, line)]  # no thread arrives on empty itself
    assert len(lines_matching(text, r"tcgen05\.commit")) == 2  # the slot's, and acc_full after the loop


def test_blackwell_3_two_accumulators_handed_over_through_acc_full_and_acc_empty():
    text = ptx("blackwell_3_acc_double_buffer")
    module = step("blackwell_3_acc_double_buffer")
    assert len(lines_matching(text, r"mbarrier\.init")) == 2 * module.STAGES + 2 * module.ACC_STAGES
    assert "%nctaid.x" in text
    # The epilogue releases a buffer once its loads are done and ordered before the arrival.
    loop = ptx_loop_around(text, r"tcgen05\.ld\.")
    releases = [line for line in loop if re.search(ARRIVE, line)]
    assert len(releases) == 1
    assert not releases_before_their_guard(loop, r"tcgen05\.ld\.", r"tcgen05\.wait::ld", ARRIVE)
    assert first_index(loop, r"tcgen05\.fence::before_thread_sync") < first_index(loop, ARRIVE)
    # ... and before it stores the tile: the MMA warp may refill it meanwhile.
    assert first_index(loop, ARRIVE) < first_index(loop, r"st\.global")
    # The MMA warp waits on acc_empty, then fences, before the tile's first MMA.
    mma_loop = ptx_loop_around(text, r"tcgen05\.commit")
    assert any("tcgen05.fence::after_thread_sync" in line for line in mma_loop)


@pytest.mark.parametrize("name", BLACKWELL)
def test_blackwell_steps_also_compile_for_the_family_target_the_library_uses(name):
    text = step(name).build(arch="sm_100f").ptx
    assert re.search(r"^\.target sm_100f", text, re.MULTILINE)
    assert lines_matching(text, r"tcgen05\.mma\.cta_group::1") and lines_matching(text, r"tcgen05\.commit")


@pytest.mark.parametrize("name", ["hopper_6_tma_store", "blackwell_3_acc_double_buffer"])
def test_a_step_runs_as_a_script(name, tmp_path):
    """Run as ``python examples/ladder/<step>.py``: compiles, lists what it introduces,
    and without a GPU says what it would run (with an SM90 GPU, runs and checks)."""
    done = subprocess.run([sys.executable, str(LADDER / f"{name}.py")], capture_output=True, text=True,
                          timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "compiled for sm_" in done.stdout
    for instruction in step(name).INTRODUCES:
        count = re.search(rf"{re.escape(instruction)}\s+x(\d+)", done.stdout)
        assert count and int(count.group(1)) >= 1, (instruction, done.stdout)
