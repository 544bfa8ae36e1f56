"""Barrier protocol check, on the host, before anything is launched.

An mbarrier whose expected arrival count differs from the arrivals the code issues
per phase never completes (a hang) or completes early (a race). This module counts
the arrivals each role issues for a configuration -- by enumerating every CTA of the
cluster and asking the same :func:`.stages.release_mask` the kernels call whom it
signals -- and compares them with the counts the kernels initialise the barriers
with (:func:`.stages.empty_arrivals` and the fixed counts of ``SmemRing`` and
``AccRing``). Every kernel is checked before it is built (``compile._kernel_builder``);
the tests run it over the compile matrix and on deliberately wrong counts.
"""

from __future__ import annotations

from dataclasses import dataclass

from ... import hardware
from ...config import KernelSpec, cta_pair, tile_warpgroups
from ...errors import ConfigError
from .stages import empty_arrivals, release_mask

SM100_EPILOGUE_WARPS = 4


@dataclass(frozen=True)
class BarrierCount:
    barrier: str  # e.g. "empty[s] of CTA (1, 0)"
    initialised: int  # the count the kernel passes to mbarrier.init
    issued: int  # arrivals per phase the roles issue

    @property
    def ok(self) -> bool:
        return self.initialised == self.issued


def _ctas(spec: KernelSpec):
    c = spec.config
    return [(m, n) for n in range(c.cluster_n) for m in range(c.cluster_m)]


def _rank(spec: KernelSpec, m: int, n: int) -> int:
    return m + n * spec.config.cluster_m


def sm90_counts(spec: KernelSpec, init_empty=None) -> list[BarrierCount]:
    """Barrier counts of the SM90 kernel. ``init_empty`` overrides what the kernel
    would initialise ``empty`` with (to show the check catches a wrong count)."""
    c = spec.config
    # The consumer warps that read one slot: those sharing a tile.
    warps = tile_warpgroups(c) * hardware.WARPS_PER_WARPGROUP
    initialised = empty_arrivals(c.cluster_m, c.cluster_n, 1, warps) if init_empty is None else init_empty
    counts = []
    for m, n in _ctas(spec):
        me = 1 << _rank(spec, m, n)
        # Every consumer warp of CTA Y arrives once on X's empty barrier when X is in
        # Y's release mask (lane X of the warp does it).
        issued = sum(warps for ym, yn in _ctas(spec) if release_mask(ym, yn, c.cluster_m, c.cluster_n) & me)
        counts.append(BarrierCount(f"empty[s] of CTA ({m}, {n})", initialised, issued))
        # The producer's one arrive.expect_tx; the bytes complete the transactions.
        counts.append(BarrierCount(f"full[s] of CTA ({m}, {n})", 1, 1))
    return counts


def sm100_counts(spec: KernelSpec, init_empty=None, init_acc_empty=None) -> list[BarrierCount]:
    """Barrier counts of the SM100 kernel (see :func:`sm90_counts` for ``init_*``)."""
    c = spec.config
    pair = cta_pair(c)
    initialised = empty_arrivals(c.cluster_m, c.cluster_n, pair, 1) if init_empty is None else init_empty
    acc_initialised = SM100_EPILOGUE_WARPS * pair if init_acc_empty is None else init_acc_empty
    leaders = [(m, n) for m, n in _ctas(spec) if m % pair == 0]
    counts = []
    for m, n in _ctas(spec):
        me = 1 << _rank(spec, m, n)
        # One tcgen05.commit per k-block by each pair leader's MMA warp, multicast
        # to its release mask.
        issued = sum(1 for lm, ln in leaders if release_mask(lm, ln, c.cluster_m, c.cluster_n, pair) & me)
        counts.append(BarrierCount(f"empty[s] of CTA ({m}, {n})", initialised, issued))
        if m % pair == 0:
            counts.append(BarrierCount(f"full[s] of CTA ({m}, {n})", 1, 1))  # leader's expect_tx
            # Epilogue warps of both CTAs of the pair release the leader's buffer.
            counts.append(BarrierCount(f"acc_empty[b] of CTA ({m}, {n})", acc_initialised,
                                       SM100_EPILOGUE_WARPS * pair))
        # The leader's "accumulator full" commit reaches every CTA of its pair.
        counts.append(BarrierCount(f"acc_full[b] of CTA ({m}, {n})", 1, 1))
    return counts


def barrier_counts(spec: KernelSpec) -> list[BarrierCount]:
    return sm90_counts(spec) if spec.arch == "sm90" else sm100_counts(spec)


def check_barrier_protocol(spec: KernelSpec, counts: list[BarrierCount] | None = None) -> None:
    """Raise ``ConfigError`` if any barrier's initial count differs from its arrivals."""
    counts = barrier_counts(spec) if counts is None else counts
    wrong = [b for b in counts if not b.ok]
    if wrong:
        detail = "; ".join(f"{b.barrier}: initialised {b.initialised}, {b.issued} arrivals issued" for b in wrong)
        raise ConfigError(
            f"{spec.short()}: barrier arrival counts do not match (this would hang or race "
            f"on the GPU): {detail}"
        )
