"""The mbarrier rings between warp roles, as device code, and the producer loop that
both kernels run.

``SmemRing`` holds ``num_stages`` pairs of mbarriers in shared memory:

* ``full[s]``  -- one arrival (the producer's ``arrive.expect_tx``) plus the stage's
  byte count as transactions that the TMA copies complete. Consumers wait on it.
* ``empty[s]`` -- ``consumer_arrivals`` arrivals per phase: on SM90 one per consumer
  warp of every CTA that reads what this CTA's copies write; on SM100 one
  ``tcgen05.commit`` per MMA that read them. The producer waits on it.

``AccRing`` is the SM100 accumulator pipeline between the MMA warp and the epilogue
warps, over ``acc_stages`` tensor-memory buffers, with the same two-barrier shape.

Which slot and which parity a hand-over uses come from the pure functions in
:mod:`.stages`, shared with the CPU pipeline model; the k-loops step that position
with :meth:`SmemRing.next_slot` instead of dividing a count. Roles keep the plain
``Int32`` loop state; nothing here owns it. Which CTAs a release must reach comes from
:func:`.stages.release_mask`, which the host-side protocol check (:mod:`.protocol`)
enumerates with plain ints.
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute
from cutlass import Boolean, Int32

from ...config import Lookahead
from . import stages



@cute.jit
def publish_barrier_init(cluster_size: cutlass.Constexpr):
    """Make barrier initialisation visible to every thread that may arrive on or wait
    for these barriers -- cluster-wide when peers multicast into this CTA -- before
    any role starts."""
    cute.arch.mbarrier_init_fence()
    if cutlass.const_expr(cluster_size > 1):
        cute.arch.cluster_arrive_relaxed()
        cute.arch.cluster_wait()
    else:
        cute.arch.sync_threads()



class SmemRing:
    """Full/empty mbarrier pairs of one shared-memory ring (device-side handle)."""

    def __init__(self, barrier_ptr, num_stages: int, tx_bytes: int, consumer_arrivals: int):
        self.full_base = barrier_ptr
        self.empty_base = barrier_ptr + num_stages
        self.num_stages = num_stages
        self.tx_bytes = tx_bytes
        self.consumer_arrivals = consumer_arrivals

    # The DSL carries this handle through dynamic control flow as its one runtime
    # value, the barrier array's base pointer; the rest is compile-time.
    def __extract_mlir_values__(self):
        return [self.full_base]

    def __new_from_mlir_values__(self, values):
        return type(self)(values[0], self.num_stages, self.tx_bytes, self.consumer_arrivals)

    # -- set-up ---------------------------------------------------------------------

    def init(self):
        """Called by every thread of one warp; one elected thread initialises."""
        with cute.arch.elect_one():
            for s in range(self.num_stages):
                cute.arch.mbarrier_init(self.full_base + s, 1)
                cute.arch.mbarrier_init(self.empty_base + s, self.consumer_arrivals)

    # -- the ring's position -------------------------------------------------------------

    # Every role addresses the ring by a (slot, parity) pair that its loop steps along
    # itself. The same pair follows from a running count (``stages.stage_index`` and
    # the parity functions), but with a ring depth that is not a power of two that is a
    # division (IMAD.HI and LEA.HI in SASS) in every k-block of the loop
    # (docs/tuning-log/pingpong.md and docs/tuning-log/tile-shapes.md).

    def producer_start(self):
        """(slot, parity) of the producer's first hand-over: slot 0 on lap 0, whose
        empty-barrier wait passes at once (``stages.empty_wait_parity``)."""
        return Int32(0), Int32(stages.empty_wait_parity(0, self.num_stages))

    def consumer_start(self):
        """(slot, parity) of the first k-block a consumer (or the SM100 MMA warp) reads:
        slot 0, waiting for its full barrier's first completion."""
        return Int32(0), Int32(stages.full_wait_parity(0, self.num_stages))

    @cute.jit
    def next_slot(self, slot, parity):
        """The (slot, parity) of the hand-over after ``slot``'s: the parity a role waits
        for flips each time the ring wraps."""
        slot += 1
        if slot == self.num_stages:
            slot = Int32(0)
            parity = parity ^ 1
        return slot, parity

    # -- producer side ----------------------------------------------------------------

    def producer_try_acquire(self, slot, parity) -> Boolean:
        """Probe whether ``slot`` may be refilled, without stopping the warp.

        The warp goes on issuing after ``mbarrier.try_wait``; the instruction that
        first reads its answer, the token for :meth:`producer_acquire`, waits for it.
        Measured on an H100 (docs/producer-lookahead.md, part 2): on a warp that has
        not issued bulk copies the answer comes when the phase completes (true,
        shortly after the release) or after ~3.9 us (false); after the warp has
        issued bulk copies and waited for them, a pending phase answered false in
        ~50 cycles. Either answer is safe: a false token only means a blocking wait.
        ``parity``: ``stages.empty_wait_parity`` of the hand-over's count.
        """
        return cute.arch.mbarrier_try_wait(self.empty_base + slot, parity)

    @cute.jit
    def producer_acquire(self, slot, parity, token: Boolean, announces_bytes: Boolean, tx_bytes=None):
        """Wait until ``slot`` is empty (unless ``token`` says it already is), then
        announce the bytes its TMA copies will deliver to ``full[slot]``: the whole
        stage, or ``tx_bytes`` where the tile skips an operand (SM90: an A or B box
        that is all padding).

        With a 2-CTA MMA only the leader CTA of the pair announces (the peer's copies
        complete on the leader's barrier), so ``announces_bytes`` is false there.
        """
        if not token:
            cute.arch.mbarrier_wait(self.empty_base + slot, parity)
        if announces_bytes:
            with cute.arch.elect_one():
                if cutlass.const_expr(tx_bytes is None):
                    cute.arch.mbarrier_arrive_and_expect_tx(self.full_base + slot, self.tx_bytes)
                else:
                    cute.arch.mbarrier_arrive_and_expect_tx(self.full_base + slot, tx_bytes)

    @cute.jit
    def producer_tail(self, slot, parity):
        """Wait until the consumers released every slot once more, starting at the
        producer's next ``slot``.

        A CTA must not exit while peers can still arrive on its barriers or
        multicast into its shared memory; once all its slots are empty again,
        nothing of this CTA's work is in flight anywhere in the cluster.
        """
        for _ in cutlass.range_constexpr(self.num_stages):
            cute.arch.mbarrier_wait(self.empty_base + slot, parity)
            slot, parity = self.next_slot(slot, parity)

    # -- consumer side ----------------------------------------------------------------

    def consumer_try_wait_slot(self, slot, parity) -> Boolean:
        return cute.arch.mbarrier_try_wait(self.full_base + slot, parity)

    @cute.jit
    def consumer_wait_slot(self, slot, parity, token: Boolean):
        if not token:
            cute.arch.mbarrier_wait(self.full_base + slot, parity)

    @cute.jit
    def warp_release_slot(self, slot, lane_signals: Boolean, is_cluster: cutlass.Constexpr):
        """SM90: one arrival on ``empty[slot]`` of cluster CTA ``lane`` per signalling lane.

        Each consumer warp calls this with all its lanes; lane i signals cluster CTA i
        when CTA i is in this CTA's :func:`.stages.release_mask` (``lane_signals``), so one
        warp instruction releases the slot everywhere it has to.
        """
        if lane_signals:
            if cutlass.const_expr(is_cluster):
                cute.arch.mbarrier_arrive(self.empty_base + slot, cute.arch.lane_idx())
            else:
                cute.arch.mbarrier_arrive(self.empty_base + slot)

    def mma_release_slot(self, slot, mask, cta_group):
        """SM100: ``tcgen05.commit`` -- arrive on ``empty[slot]`` of every CTA in
        ``mask`` once the MMAs issued so far (which read the slot) have completed."""
        with cute.arch.elect_one():
            if mask is None:
                cute.nvgpu.tcgen05.commit(self.empty_base + slot)
            else:
                cute.nvgpu.tcgen05.commit(self.empty_base + slot, mask, cta_group)


@cute.jit
def produce_k_blocks(ring: SmemRing, slot: Int32, parity: Int32, token: Boolean, k_blocks: Int32,
                     policy: cutlass.Constexpr, announces_bytes: Boolean, issue_copies: cutlass.Constexpr,
                     tx_bytes=None):
    """The TMA producer's k-loop for one output tile, shared by the SM90 and SM100 kernels.

    ``slot`` and ``parity`` are the ring position of the tile's first k-block (the
    parity its empty barrier must complete). For each k-block: acquire the slot
    (blocking only if ``token`` says it is not known to be empty), then
    ``issue_copies(kb, slot, full_barrier)``. ``policy`` places the probe of the
    *next* slot: before the copies (``BEFORE_COPY``, CUTLASS's ``load()`` order), after
    them except on the last k-block (``AFTER_COPY``), or nowhere (``NONE``). Returns
    the position after the tile and the token for the next tile. ``tx_bytes``: the
    bytes the tile's copies deliver per k-block, where not the whole stage.
    """
    for kb in cutlass.range(k_blocks, unroll=1):
        if cutlass.const_expr(policy == Lookahead.NONE):
            token = Boolean(False)
        ring.producer_acquire(slot, parity, token, announces_bytes, tx_bytes)
        next_slot, next_parity = ring.next_slot(slot, parity)
        if cutlass.const_expr(policy == Lookahead.BEFORE_COPY):
            # The probe's answer is needed one iteration later, so this try_wait
            # overlaps the copies issued below instead of stalling in front of them.
            token = ring.producer_try_acquire(next_slot, next_parity)
        issue_copies(kb, slot, ring.full_base + slot)
        if cutlass.const_expr(policy == Lookahead.AFTER_COPY):
            token = Boolean(False)
            if kb + 1 < k_blocks:
                token = ring.producer_try_acquire(next_slot, next_parity)
        slot, parity = next_slot, next_parity
    return slot, parity, token


class AccRing:
    """SM100 accumulator pipeline: ``acc_stages`` tensor-memory buffers between the MMA
    warp (producer) and the epilogue warps (consumers).

    * ``acc_full[b]``  -- 1 arrival: the MMA warp's ``tcgen05.commit`` after a tile's
      last k-block (multicast to both CTAs of a 2-CTA pair).
    * ``acc_empty[b]`` -- ``epilogue_arrivals`` arrivals: one per epilogue warp of each
      CTA whose accumulators the MMA wrote, on the pair leader's barrier.
    """

    def __init__(self, barrier_ptr, num_stages: int, epilogue_arrivals: int):
        self.full_base = barrier_ptr
        self.empty_base = barrier_ptr + num_stages
        self.num_stages = num_stages
        self.epilogue_arrivals = epilogue_arrivals

    def __extract_mlir_values__(self):
        return [self.full_base]

    def __new_from_mlir_values__(self, values):
        return AccRing(values[0], self.num_stages, self.epilogue_arrivals)

    def init(self):
        with cute.arch.elect_one():
            for b in range(self.num_stages):
                cute.arch.mbarrier_init(self.full_base + b, 1)
                cute.arch.mbarrier_init(self.empty_base + b, self.epilogue_arrivals)

    def buffer(self, count):
        return stages.stage_index(count, self.num_stages)

    @cute.jit
    def mma_acquire(self, count):
        """MMA warp: wait until the epilogue drained buffer ``count`` (passes on lap 0)."""
        cute.arch.mbarrier_wait(
            self.empty_base + self.buffer(count), stages.empty_wait_parity(count, self.num_stages)
        )
        # Order the epilogue's tensor-memory reads before the MMAs that overwrite them.
        cute.arch.inline_ptx("tcgen05.fence::after_thread_sync;")

    def mma_commit(self, count, mask, cta_group):
        with cute.arch.elect_one():
            if mask is None:
                cute.nvgpu.tcgen05.commit(self.full_base + self.buffer(count))
            else:
                cute.nvgpu.tcgen05.commit(self.full_base + self.buffer(count), mask, cta_group)

    @cute.jit
    def epilogue_wait(self, count):
        cute.arch.mbarrier_wait(
            self.full_base + self.buffer(count), stages.full_wait_parity(count, self.num_stages)
        )
        cute.arch.inline_ptx("tcgen05.fence::after_thread_sync;")

    @cute.jit
    def epilogue_release(self, count, leader_rank, is_cluster: cutlass.Constexpr):
        """One arrival per epilogue warp, after its tensor-memory loads completed:
        called once the tile's last sub-tile is in shared memory, it waits for the
        loads (``tcgen05.wait::ld``) and hands the buffer back before that sub-tile's
        TMA store."""
        cute.arch.fence_view_async_tmem_load()  # tcgen05.wait::ld: the loads are done
        cute.arch.inline_ptx("tcgen05.fence::before_thread_sync;")
        with cute.arch.elect_one():
            if cutlass.const_expr(is_cluster):
                cute.arch.mbarrier_arrive(self.empty_base + self.buffer(count), leader_rank)
            else:
                cute.arch.mbarrier_arrive(self.empty_base + self.buffer(count))

    @cute.jit
    def mma_tail(self, count):
        """MMA warp, before exit: every buffer drained once more."""
        for i in cutlass.range_constexpr(self.num_stages):
            cute.arch.mbarrier_wait(
                self.empty_base + self.buffer(count + i),
                stages.empty_wait_parity(count + i, self.num_stages),
            )
