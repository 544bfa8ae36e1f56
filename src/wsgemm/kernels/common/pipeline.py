"""The mbarrier ring between a TMA producer and its consumers, as device code.

``SmemRing`` holds ``num_stages`` pairs of mbarriers in shared memory:

* ``full[s]``  -- expected arrivals: 1 (the producer's ``arrive.expect_tx``), plus the
  stage's byte count as transactions that the TMA copies complete. A consumer waits
  on it before reading stage ``s``.
* ``empty[s]`` -- expected arrivals: ``consumer_arrivals`` (one per consumer warp per
  CTA that reads what this CTA's copies write; see :func:`consumer_arrivals`). The
  producer waits on it before overwriting stage ``s``.

Which slot and which parity a hand-over uses come from the pure functions in
:mod:`.stages`, shared with the CPU pipeline model. Roles keep plain ``Int32``
counters; nothing here owns loop state.
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute
from cutlass import Boolean, Int32

from . import stages


def consumer_arrivals(consumer_warps: int, cluster_m: int, cluster_n: int) -> int:
    """Arrivals that complete one phase of an ``empty`` barrier (SM90 ring).

    With multicast, CTA (m, n) writes its slice of A into every CTA of cluster row m
    and its slice of B into every CTA of cluster column n, so it may refill a stage
    only after all of them have released it: ``cluster_m + cluster_n - 1`` CTAs,
    each releasing once per consumer warp.
    """
    return consumer_warps * (cluster_m + cluster_n - 1)


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
        return SmemRing(values[0], self.num_stages, self.tx_bytes, self.consumer_arrivals)

    # -- set-up ---------------------------------------------------------------------

    def init(self):
        """Called by every thread of warp 0; one elected thread initialises."""
        with cute.arch.elect_one():
            for s in range(self.num_stages):
                cute.arch.mbarrier_init(self.full_base + s, 1)
                cute.arch.mbarrier_init(self.empty_base + s, self.consumer_arrivals)

    # -- producer side ----------------------------------------------------------------

    def full_barrier(self, count):
        return self.full_base + stages.stage_index(count, self.num_stages)

    def producer_try_acquire(self, count) -> Boolean:
        """Probe, without blocking for long, whether slot ``count`` may be refilled.

        ``mbarrier.try_wait`` returns true if the phase completed, else false after a
        hardware time limit; the answer is a token for :meth:`producer_acquire`.
        """
        return cute.arch.mbarrier_try_wait(
            self.empty_base + stages.stage_index(count, self.num_stages),
            stages.empty_wait_parity(count, self.num_stages),
        )

    @cute.jit
    def producer_acquire(self, count, token: Boolean):
        """Wait until slot ``count`` is empty (unless ``token`` says it already is),
        then announce the bytes its TMA copies will deliver to ``full``."""
        if not token:
            cute.arch.mbarrier_wait(
                self.empty_base + stages.stage_index(count, self.num_stages),
                stages.empty_wait_parity(count, self.num_stages),
            )
        with cute.arch.elect_one():
            cute.arch.mbarrier_arrive_and_expect_tx(self.full_barrier(count), self.tx_bytes)

    @cute.jit
    def producer_tail(self, count):
        """Wait until the consumers released every slot once more.

        A CTA must not exit while peers can still arrive on its barriers or
        multicast into its shared memory; once all its slots are empty again,
        nothing of this CTA's work is in flight anywhere in the cluster.
        """
        for i in cutlass.range_constexpr(self.num_stages):
            cute.arch.mbarrier_wait(
                self.empty_base + stages.stage_index(count + i, self.num_stages),
                stages.empty_wait_parity(count + i, self.num_stages),
            )

    # -- consumer side ----------------------------------------------------------------

    def consumer_try_wait(self, count) -> Boolean:
        return cute.arch.mbarrier_try_wait(
            self.full_barrier(count), stages.full_wait_parity(count, self.num_stages)
        )

    @cute.jit
    def consumer_wait(self, count, token: Boolean):
        if not token:
            cute.arch.mbarrier_wait(
                self.full_barrier(count), stages.full_wait_parity(count, self.num_stages)
            )

    @cute.jit
    def consumer_release(self, count, signals: Boolean, peer_rank: Int32, is_cluster: cutlass.Constexpr):
        """One arrival on ``empty[slot]`` of CTA ``peer_rank`` from each signalling lane.

        Each consumer warp calls this with all its lanes; lane i signals cluster CTA i
        when that CTA multicasts into this one (``signals``), so one warp instruction
        releases the slot everywhere it has to.
        """
        slot = self.empty_base + stages.stage_index(count, self.num_stages)
        if signals:
            if cutlass.const_expr(is_cluster):
                cute.arch.mbarrier_arrive(slot, peer_rank)
            else:
                cute.arch.mbarrier_arrive(slot)
