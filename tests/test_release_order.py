"""Each kernel hands a buffer back only after the instruction that makes that safe, in
the PTX the compiler emitted (no GPU): the SM90 consumer arrives on ``empty[s]`` after
``wgmma.wait_group``; the SM100 MMA warp releases its slot with a ``tcgen05.commit``
issued after the MMAs that read it; the SM100 epilogue arrives on ``acc_empty`` after
``tcgen05.wait::ld``; and the SM100 allocator gives its tensor-memory allocation permit
up right after its one ``tcgen05.alloc``, before any MMA can start. The pipeline model
assumes these orders (its releases happen when the reads are done, its allocator
relinquishes right after allocating); these checks tie the model to the code. Moving a
release in front of its guard, or the relinquish back to the end, makes them fail, as
the second half shows on edited PTX."""

import re

import pytest

from wsgemm import GemmConfig
from wsgemm import config as cfg
from wsgemm.compile import compile_spec
from wsgemm.inspection import ptx_loop_around, releases_before_their_guard
from wsgemm.kernels.sm100 import TMEM_ALLOC_BARRIER_ID

ARRIVE = r"mbarrier\.arrive(?!\.expect_tx)"  # a plain arrive (the producer's announce excluded)
WGMMA, WGMMA_WAIT = r"wgmma\.mma_async", r"wgmma\.wait_group"
TC_MMA, TC_COMMIT = r"tcgen05\.mma\.", r"tcgen05\.commit\."
TC_LD, TC_WAIT_LD = r"tcgen05\.ld\.", r"tcgen05\.wait::ld"
TC_ALLOC, TC_RELINQUISH, TC_DEALLOC = r"tcgen05\.alloc\.", r"tcgen05\.relinquish_alloc_permit\.", r"tcgen05\.dealloc\."
# The named barrier on which the allocating warp hands the allocation to the MMA warp.
ALLOC_BARRIER = rf"\bbar(?:rier)?\.sync(?:\.aligned)?\s+{TMEM_ALLOC_BARRIER_ID}\b"


@pytest.fixture(scope="module")
def sm90_ptx():
    return compile_spec(cfg.make_spec("sm90", "bf16", "bf16", "k", "k", "n", GemmConfig()), keep_artifacts=True).ptx


@pytest.fixture(scope="module")
def sm100_ptx():
    return compile_spec(cfg.make_spec("sm100", "bf16", "bf16", "k", "k", "n", GemmConfig()), keep_artifacts=True).ptx


@pytest.fixture(scope="module")
def sm100_pair_ptx():
    spec = cfg.make_spec("sm100", "bf16", "bf16", "k", "k", "n", GemmConfig(cluster_m=2, two_cta=True))
    return compile_spec(spec, keep_artifacts=True).ptx


def sm90_consumer_releases_after_wait(ptx: str) -> bool:
    loop = ptx_loop_around(ptx, WGMMA)
    releases = [line for line in loop if re.search(ARRIVE, line)]
    return bool(releases) and not releases_before_their_guard(loop, WGMMA, WGMMA_WAIT, ARRIVE)


def sm100_slot_commits_follow_the_mmas(ptx: str) -> bool:
    loop = ptx_loop_around(ptx, TC_MMA)
    mmas = [i for i, line in enumerate(loop) if re.search(TC_MMA, line)]
    commits = [i for i, line in enumerate(loop) if re.search(TC_COMMIT, line)]
    return bool(mmas and commits) and min(commits) > max(mmas)


def sm100_epilogue_releases_after_wait_ld(ptx: str) -> bool:
    loop = ptx_loop_around(ptx, TC_LD)
    releases = [line for line in loop if re.search(ARRIVE, line)]
    return bool(releases) and not releases_before_their_guard(loop, TC_LD, TC_WAIT_LD, ARRIVE)


def sm100_permit_relinquished_after_the_allocation(ptx: str) -> bool:
    """The one ``tcgen05.relinquish_alloc_permit`` comes right after the one
    ``tcgen05.alloc``: before the named barrier that hands the allocation to the MMA
    warp -- which passes the same barrier before its first ``tcgen05.mma``, so no MMA
    runs before the permit is given up -- and before the epilogue's first ``tcgen05.ld``."""
    lines = ptx.splitlines()

    def where(pattern):
        return [i for i, line in enumerate(lines) if re.search(pattern, line)]

    allocs, relinquishes, barriers = where(TC_ALLOC), where(TC_RELINQUISH), where(ALLOC_BARRIER)
    mmas, loads = where(TC_MMA), where(TC_LD)
    if len(allocs) != 1 or len(relinquishes) != 1 or not (mmas and loads):
        return False
    alloc, relinquish = allocs[0], relinquishes[0]
    handover = next((b for b in barriers if b > alloc), None)
    mma_gate = any(b < min(mmas) for b in barriers)
    return handover is not None and mma_gate and alloc < relinquish < handover < min(loads)


def test_every_release_follows_the_instruction_that_makes_it_safe(sm90_ptx, sm100_ptx):
    assert sm90_consumer_releases_after_wait(sm90_ptx)
    assert sm100_slot_commits_follow_the_mmas(sm100_ptx)
    assert sm100_epilogue_releases_after_wait_ld(sm100_ptx)


TMA_STORE = r"cp\.async\.bulk\.tensor\S*global\.shared"


def test_the_accumulator_is_released_after_its_last_load_before_its_last_store(sm100_ptx):
    # As CUTLASS's epilogue: the MMA warp may refill the buffer while the last
    # sub-tile is still being converted and stored.
    loop = ptx_loop_around(sm100_ptx, TC_LD)
    last = {name: max(i for i, line in enumerate(loop) if re.search(pattern, line))
            for name, pattern in (("load", TC_LD), ("wait", TC_WAIT_LD), ("release", ARRIVE), ("store", TMA_STORE))}
    assert last["load"] < last["wait"] < last["release"] < last["store"]


# -- a release moved in front of its guard fails ------------------------------------------

def move_line(ptx: str, moved: str, before: str) -> str:
    """``ptx`` with the first line matching ``moved`` taken out and put back in front of
    the first line matching ``before``: what moving that one call in the kernel source
    would do to the PTX."""
    lines = ptx.splitlines()
    index = next(i for i, line in enumerate(lines) if re.search(moved, line))
    line = lines.pop(index)
    target = next(i for i, other in enumerate(lines) if re.search(before, other))
    lines.insert(target, line)
    return "\n".join(lines)


def test_an_sm90_release_before_wait_group_fails(sm90_ptx):
    # The consumer's arrive on empty[s] right after commit_group, before wait_group.
    loop = "\n".join(ptx_loop_around(sm90_ptx, WGMMA))
    moved = move_line(loop, ARRIVE, WGMMA_WAIT)
    assert not sm90_consumer_releases_after_wait(moved)


def test_an_sm100_slot_commit_before_the_mmas_fails(sm100_ptx):
    loop = "\n".join(ptx_loop_around(sm100_ptx, TC_MMA))
    moved = move_line(loop, TC_COMMIT, TC_MMA)
    assert not sm100_slot_commits_follow_the_mmas(moved)


@pytest.mark.parametrize("which", ["sm100_ptx", "sm100_pair_ptx"])
def test_the_tmem_permit_is_relinquished_right_after_the_allocation(which, request):
    # As CUTLASS's kernel: the CTA allocates once, so it gives the permit up at once
    # (a 2-CTA pair with the cta_group::2 form, like its alloc).
    ptx = request.getfixturevalue(which)
    assert sm100_permit_relinquished_after_the_allocation(ptx)
    group = "cta_group::2" if which == "sm100_pair_ptx" else "cta_group::1"
    assert f"tcgen05.relinquish_alloc_permit.{group}" in ptx


def test_a_permit_relinquished_at_the_end_fails(sm100_ptx):
    # Where the kernel used to give it up: next to tcgen05.dealloc, after the tile loop.
    moved = move_line(sm100_ptx, TC_RELINQUISH, TC_DEALLOC)
    assert sm100_permit_relinquished_after_the_allocation(sm100_ptx)
    assert not sm100_permit_relinquished_after_the_allocation(moved)


def test_an_sm100_accumulator_release_before_wait_ld_fails(sm100_ptx):
    loop = "\n".join(ptx_loop_around(sm100_ptx, TC_LD))
    moved = move_line(loop, ARRIVE, TC_WAIT_LD)
    assert not sm100_epilogue_releases_after_wait_ld(moved)
