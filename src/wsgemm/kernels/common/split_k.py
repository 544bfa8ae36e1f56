"""Split-K: several work items share one output tile's K range ("serial" fix-up).

When a problem has fewer output tiles than SMs (decode-like M, or M = 512 against
a 4096-wide weight) most SMs would idle while a few stream a long K each. Split-K
cuts a tile's k-blocks into ``splits`` contiguous ranges; each range is its own
work item, so the items fill the persistent grid.

Only the tiles of the last, partial wave are split ("data-parallel + split tail",
the idea behind the hybrid schedules of stream-K): with ``units`` work units
(cluster-sized tiles) on a grid of ``clusters``, the first ``units - tail`` run
whole, one per cluster per wave, and the ``tail = units % clusters`` left over,
which would otherwise keep a few SMs busy for a whole extra tile while the rest
idle, run as ``tail * splits`` shorter items. With fewer tiles than clusters that is
every tile (classic split-K); when the tiles fill whole waves, nothing is split.

The partial sums of a split tile meet in an fp32 **workspace** in global memory:

* every split but the last stores its accumulators to its own slot, in *fragment
  order* (element ``v`` of consumer thread ``t`` at ``v * threads + t``: the
  stores of a warp are contiguous and no layout arithmetic is needed, because the
  last split reads them back into the same registers), then counts itself in the
  tile's **arrival flag** with a release add at GPU scope;
* the last split waits until the flag says ``splits - 1``, resets it to 0 for the
  next launch, adds the slots into its own accumulators and runs the normal epilogue.

Slots and flags are numbered by the tile's place in the tail, so the workspace
holds at most one wave of split tiles, whatever the problem size.

Why the wait cannot deadlock: whole tiles come first and never wait; the splits of a
tile are consecutive work items; a cluster walks its items in increasing order; and
the persistent grid is never larger than what is co-resident. The unfinished item
with the smallest index therefore always runs, and if it is a last split, the splits
it waits for (smaller indices) are done.

The flags start at zero when the workspace is allocated (``wsgemm.api``) and every
launch leaves them at zero, so a cached workspace needs no memset per call.

Stream-K (``stream_k.py``) deals the tail out differently but meets in the same
kind of workspace through the same device functions: a *contributor* publishes
to a slot and counts itself in a flag; a *finisher* waits for a count and adds a
run of consecutive slots. Here the non-last splits are the contributors and the
last split is the finisher.
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute
from cutlass import Int32, Int64

from ...grid import work_items


# --------------------------------------------------------------------------------------
# Integer arithmetic shared by host and device (Python ints or DSL Int32)
# --------------------------------------------------------------------------------------

def item_of_work(work, units, clusters, splits: int):
    """(unit, split, splits of that unit, index of the unit in the tail) of linear work
    item ``work``. Whole units come first (split 0 of 1); the splits of one tail unit
    are consecutive, so they run side by side on neighbouring clusters.

    Branch-free integer arithmetic: runs on Python ints (host, tests) and on DSL
    ``Int32`` values (kernels), where ``work`` varies per loop iteration.
    """
    if splits == 1:
        return work, 0, 1, 0
    whole = units - units % clusters
    in_tail = cutlass.min(cutlass.max(work - whole + 1, 0), 1)  # 1 if work >= whole else 0
    past = cutlass.max(work - whole, 0)
    tail_index = past // splits
    unit = work + in_tail * (whole + tail_index - work)
    return unit, past - tail_index * splits, 1 + in_tail * (splits - 1), tail_index


def k_range(split, k_blocks, splits: int):
    """(first k-block, number of k-blocks) of split ``split``: ranges differ by at
    most one block, and together cover ``0 .. k_blocks`` once."""
    begin = split * k_blocks // splits
    end = (split + 1) * k_blocks // splits
    return begin, end - begin


def steps_of_cluster(cluster, units, clusters, splits: int):
    """Work items cluster ``cluster`` runs: ``cluster, cluster + clusters, ...``."""
    return (cutlass.max(work_items(units, clusters, splits) - cluster, 0) + clusters - 1) // clusters


def piece_of_step(step, cluster, units, clusters, k_blocks, splits: int):
    """``(unit, first k-block, k-blocks, publish slot, waits, first slot, flag)`` of
    this cluster's ``step``-th work item, in the form ``stream_k.piece_of_step`` gives
    (the kernels handle both alike): a split but the last publishes to its slot
    (``publish slot`` >= 0), the last split waits for the ``splits - 1`` others,
    whose slots are consecutive from ``first slot``; ``flag`` is the tile's place
    in the tail."""
    unit, split, unit_splits, tail_index = item_of_work(cluster + step * clusters, units, clusters, splits)
    kb_first, kb_count = k_range(split, k_blocks, unit_splits)
    is_split = cutlass.min(unit_splits - 1, 1)
    is_last = cutlass.min(cutlass.max(split - unit_splits + 2, 0), 1)  # split == unit_splits - 1
    first_slot = tail_index * (splits - 1)
    publish_slot = is_split * (1 - is_last) * (first_slot + split + 1) - 1
    waits = is_split * is_last * (splits - 1)
    return unit, kb_first, kb_count, publish_slot, waits, first_slot, tail_index


# --------------------------------------------------------------------------------------
# Device side: the consumer warpgroups' fix-up
# --------------------------------------------------------------------------------------

def _slot(partials: cute.Tensor, slot, ctas: int, cta_rank, threads: int, frag: int):
    """Fragment-order view of partial-sum slot ``slot`` of the CTA ``cta_rank`` of
    its cluster (slots interleave the cluster's CTAs)."""
    offset = (Int64(slot) * ctas + Int64(cta_rank)) * (threads * frag)
    return cute.make_tensor(partials.iterator + offset, cute.make_layout((threads, frag), stride=(1, threads)))


@cute.jit
def publish_partial(acc: cute.Tensor, partials: cute.Tensor, flags: cute.Tensor, slot, flag,
                    ctas: cutlass.Constexpr, cta_rank, tidx: Int32, threads: cutlass.Constexpr, barrier):
    """A contributor (a split but the last, or a stream-K piece that does not start
    its tile): store ``acc`` to its slot, then count the tile's flag up."""
    frag = cute.size(acc)
    dst = _slot(partials, slot, ctas, cta_rank, threads, frag)
    for v in cutlass.range(frag, unroll_full=True):
        dst[(tidx, v)] = acc[v]
    # Every thread's stores must be visible GPU-wide before the flag says so. The
    # barrier orders them before thread 0's add, and a release is cumulative: it
    # makes visible what was ordered before it, in any thread of the CTA (the
    # pattern of CUTLASS's GenericBarrier::arrive_inc). A GPU-scope fence in every
    # thread, as before, made each wait for its own stores first.
    barrier.arrive_and_wait()
    if tidx == 0:
        cute.arch.red((flags.iterator + (flag * ctas + cta_rank)).llvm_ptr, Int32(1), op="add", dtype=Int32,
                      sem="release", scope="gpu")


@cute.jit
def wait_for_contributors(flags: cute.Tensor, flag, waits, ctas: cutlass.Constexpr, cta_rank, tidx: Int32,
                          barrier):
    """A finisher's first half: wait until ``waits`` contributors have counted
    themselves in the tile's flag (acquire: their slots are then visible)."""
    if tidx == 0:
        flag_ptr = (flags.iterator + (flag * ctas + cta_rank)).llvm_ptr
        arrived = cute.arch.load(flag_ptr, Int32, sem="acquire", scope="gpu")
        while arrived < waits:
            arrived = cute.arch.load(flag_ptr, Int32, sem="acquire", scope="gpu")
        # Nobody else touches this flag in this launch: leave it at zero for the next.
        cute.arch.store(flag_ptr, Int32(0), sem="relaxed", scope="gpu")
    barrier.arrive_and_wait()


# Fix-up registers a finisher may hold in flight: ``slots_in_flight`` slots of its
# fragment are loaded before any of them is added.
FIXUP_REGISTERS_IN_FLIGHT = 64
MAX_SLOTS_IN_FLIGHT = 8


def slots_in_flight(frag: int) -> int:
    """Slots the finisher loads before it adds: each slot is a round trip to the L2
    (the contributors wrote it from other SMs), so slots loaded one after another
    cost one round trip each; loaded together they cost one. A decode tile's fragment
    is small (8 values a thread for 64x16), so several fit in the registers; a
    128x256 tile's (128 a thread) leaves room for one."""
    return max(1, min(MAX_SLOTS_IN_FLIGHT, FIXUP_REGISTERS_IN_FLIGHT // frag))


@cute.jit
def add_partials(acc: cute.Tensor, partials: cute.Tensor, first_slot, waits, ctas: cutlass.Constexpr, cta_rank,
                 tidx: Int32, threads: cutlass.Constexpr):
    """A finisher's second half: add the contributors' slots (``first_slot`` on, in
    order) to ``acc``, ``slots_in_flight`` slots a round: all their loads first, then
    the adds. A round past the last slot reloads the last one and does not add it
    (a select, not a multiply by zero, so an infinite partial sum stays exact)."""
    frag = cute.size(acc)
    group = slots_in_flight(frag)
    loaded = cute.make_rmem_tensor(cute.make_layout((frag, group)), cutlass.Float32)
    for first in cutlass.range(0, waits, group, unroll=1):
        for g in cutlass.range_constexpr(group):
            src = _slot(partials, first_slot + cutlass.min(first + g, waits - 1), ctas, cta_rank, threads, frag)
            for v in cutlass.range(frag, unroll_full=True):
                loaded[v, g] = src[(tidx, v)]
        for g in cutlass.range_constexpr(group):
            for v in cutlass.range(frag, unroll_full=True):
                acc[v] = acc[v] + cutlass.select_(first + g < waits, loaded[v, g], cutlass.Float32(0))
