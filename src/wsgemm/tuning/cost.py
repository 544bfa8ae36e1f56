"""The cost model: one function that rates any plan of the candidate space.

A persistent kernel runs its work items in waves, one per resident cluster. Within a
wave every CTA steps through k-blocks, and a k-block takes as long as the slowest of

* its MMAs, at the tile shape's measured share of the tensor peak (``TILE_EFFICIENCY``);
* its CTA's loads: what the CTA streams from HBM at one SM's streaming rate, all it
  receives at one SM's port rate, the box rows past the tensor's edge that TMA fills
  with zeros, and a ring too shallow to cover the load latency;
* the wave's share of the memory system: the distinct operand bytes of the whole wave
  from HBM, and every cluster's reads from L2 (a cluster multicasts a shared tile, so
  it reads it once).

A work item adds its epilogue. The busiest SM runs the full waves, then the last,
partial wave (fewer CTAs, so each gets more of the memory system), then, with
split-K or stream-K, the fix-up that adds the pieces of a tile, which starts only once
its pieces are loaded. The run takes as long as the busiest SM or the problem's unique
bytes from HBM, whichever is longer.

The rates come from the GPU's own numbers (:class:`Rates.for_gpu`): SM count and clock,
HBM bandwidth, cluster residency. The per-clock constants below were fitted on an H200
to the committed sweeps (docs/tuning-log/cost-model.md says how, and how far the
model's picks are from the fastest plans timed).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from ..config import DTYPE_BYTES, GemmConfig, KernelSpec, smem_budget
from ..grid import ceil_div
from .gpu import Gpu
from .problem import Problem

# Share of the tensor peak a persistent tile sustains through its k-loop, by tile shape
# (rows, columns), measured on an H200 at long K: wider tiles read less shared memory
# per FLOP and amortise each k-block's barrier round trip over more MMAs. 256-row tiles
# ran 1-2 % behind 128x256 at large M (docs/tuning-log/prefill.md); 192-row tiles (three
# warpgroups of 64 rows under 168 registers) are rated as 128-row ones times
# ``THREE_WARPGROUP_SHARE`` (fitted).
TILE_EFFICIENCY = {
    (256, 192): 0.78, (256, 128): 0.78, (256, 64): 0.55, (256, 32): 0.40, (256, 16): 0.30,
    (128, 256): 0.80, (128, 224): 0.79, (128, 192): 0.78, (128, 160): 0.76, (128, 128): 0.72, (128, 96): 0.65,
    (128, 64): 0.55, (128, 32): 0.40, (128, 16): 0.30,
    (64, 256): 0.62, (64, 224): 0.61, (64, 192): 0.60, (64, 160): 0.57, (64, 128): 0.55, (64, 96): 0.50,
    (64, 64): 0.45, (64, 32): 0.35, (64, 16): 0.25,
}
RATED_AS_ROWS = {192: 128}
THREE_WARPGROUP_SHARE = 0.9

# Dense 16-bit tensor FLOPs per SM per clock on Hopper (4 tensor cores x 512 FMAs), at
# the clock NVIDIA's 989 TFLOP/s figure assumes: 1830 of the 1980 MHz maximum.
TENSOR_FLOPS_PER_SM_CLOCK = 4096
TENSOR_CLOCK_SHARE = 1830 / 1980
# Share of the HBM's peak a stream of TMA loads reaches: 4.2 of 4.9 TB/s on an H200 (the
# fastest read-only kernels reached 3.2-4.5 TB/s there, docs/tuning-log/decode.md).
HBM_READ_SHARE = 0.85
# What one SM streams from HBM, at most, per clock: ~36 GB/s at 1.98 GHz (fitted; 48-56
# SMs streaming a weight each pulled 36-56 GB/s, more than HBM's share for all 132).
SM_STREAM_BYTES_PER_CLOCK = 18
# One SM's port from L2, per clock.
SM_PORT_BYTES_PER_CLOCK = 48
# What L2 serves all SMs together, per SM per clock: 9.4 TB/s on 132 SMs at 1.98 GHz
# (one wave of 128x128 tiles drew 8.8-10 TB/s, docs/tuning-log/clusters.md).
L2_BYTES_PER_SM_CLOCK = 36
# Box rows past the tensor's edge that an SM's TMA fills with zeros, per clock (~8 GB/s,
# fitted): the fill runs beside the loads and shows where it is most of the box (M = 1
# in a 64-row box ran ~1.6x slower than M = 64, docs/tuning-log/decode.md).
FILL_BYTES_PER_SM_CLOCK = 4
# A TMA load's round trip under load, from HBM and from L2: a ring of S stages
# completes at most S k-blocks per round trip.
HBM_LATENCY_S = 1.5e-6
L2_LATENCY_S = 1.0e-6
# An operand larger than this share of L2 comes from HBM, and its tiles that at most
# this many clusters of a wave read are fetched by each of them (``_Wave``).
STREAMED_L2_SHARE = 0.5
STREAM_SHARERS_MAX = 6
# How sharply the k-block's limits combine (``soft_max``): large is a plain maximum.
SOFT_MAX_POWER = 10
# A split tile's fix-up: waiting for the other pieces' flags, then their partial sums
# from L2, before the epilogue; and per split past two.
FIXUP_S = 5.0e-6
FIXUP_PER_EXTRA_SPLIT_S = 2.0e-6
# An epilogue's fixed part: the consumers' barrier, fence and TMA store issue.
EPILOGUE_S = 0.3e-6


@dataclass(frozen=True)
class Rates:
    mma_flops_per_sm: float
    hbm_bytes_per_s: float
    l2_bytes_per_s: float
    sm_stream_bytes_per_s: float
    sm_port_bytes_per_s: float
    fill_bytes_per_s: float

    @classmethod
    def for_gpu(cls, gpu: Gpu) -> "Rates":
        clock = gpu.sm_clock_hz
        return cls(
            mma_flops_per_sm=TENSOR_FLOPS_PER_SM_CLOCK * clock * TENSOR_CLOCK_SHARE,
            hbm_bytes_per_s=gpu.hbm_peak_bytes_per_s * HBM_READ_SHARE,
            l2_bytes_per_s=L2_BYTES_PER_SM_CLOCK * gpu.sms * clock,
            sm_stream_bytes_per_s=SM_STREAM_BYTES_PER_CLOCK * clock,
            sm_port_bytes_per_s=SM_PORT_BYTES_PER_CLOCK * clock,
            fill_bytes_per_s=FILL_BYTES_PER_SM_CLOCK * clock,
        )


def tile_efficiency(tile_m: int, tile_n: int) -> float:
    """``TILE_EFFICIENCY``, read on a line between measured widths."""
    rows = RATED_AS_ROWS.get(tile_m, tile_m)
    scale = THREE_WARPGROUP_SHARE if tile_m == 192 else 1.0
    if (rows, tile_n) in TILE_EFFICIENCY:
        return scale * TILE_EFFICIENCY[rows, tile_n]
    widths = sorted(n for m, n in TILE_EFFICIENCY if m == rows)
    below = max(n for n in widths if n < tile_n)
    above = min(n for n in widths if n > tile_n)
    share = (tile_n - below) / (above - below)
    return scale * ((1 - share) * TILE_EFFICIENCY[rows, below] + share * TILE_EFFICIENCY[rows, above])


@functools.lru_cache(maxsize=4096)
def ring_stages(config: GemmConfig, ab_dtype: str, out_dtype: str) -> int:
    """Stages of the shared-memory ring the kernel builds for ``config``."""
    return smem_budget(KernelSpec("sm90", ab_dtype, out_dtype, "k", "k", "n", config)).stages


class _Wave:
    """One wave's k-block time: ``clusters`` clusters of the grid running at once."""

    def __init__(self, p: Problem, c: GemmConfig, rates: Rates, l2_bytes: int, tiles_m: int, tiles_n: int,
                 stages: int):
        self.p, self.c, self.rates = p, c, rates
        self.tiles_m, self.tiles_n = tiles_m, tiles_n
        self.clusters_m, self.clusters_n = ceil_div(tiles_m, c.cluster_m), ceil_div(tiles_n, c.cluster_n)
        # Real rows of an average A box and columns of a B box; the rest is zero fill.
        self.a_rows = p.m / tiles_m
        self.b_cols = p.n / tiles_n
        self.row_bytes = row_bytes = c.tile_k * DTYPE_BYTES[p.ab_dtype]
        self.mma = 2 * c.tile_m * c.tile_n * c.tile_k / (rates.mma_flops_per_sm * tile_efficiency(c.tile_m, c.tile_n))
        # An operand too large to stay in L2 comes from HBM, and its loads wait for HBM.
        operand_bytes = p.k * DTYPE_BYTES[p.ab_dtype] * p.batches
        self.a_large = p.m * operand_bytes > STREAMED_L2_SHARE * l2_bytes
        self.b_large = p.n * operand_bytes > STREAMED_L2_SHARE * l2_bytes
        # What this CTA asks for per k-block: a cluster row shares (multicasts) its A
        # tile, a cluster column its B tile, each CTA issuing its share.
        self.issue_a = self.a_rows * row_bytes / c.cluster_n
        self.issue_b = self.b_cols * row_bytes / c.cluster_m
        received = (self.a_rows + self.b_cols) * row_bytes
        filled = (c.tile_m - self.a_rows + c.tile_n - self.b_cols) * row_bytes
        latency = HBM_LATENCY_S if self.a_large or self.b_large else L2_LATENCY_S
        self.cta_terms = (self.mma, received / rates.sm_port_bytes_per_s, filled / rates.fill_bytes_per_s,
                          latency / stages)

    def k_block_seconds(self, clusters: int) -> float:
        c, rates = self.c, self.rates
        batches_in_wave = max(1, ceil_div(clusters, self.clusters_m * self.clusters_n))
        per_batch = min(clusters, self.clusters_m * self.clusters_n)
        # The walk goes down M in bands of ``swizzle`` cluster columns.
        band = min(c.swizzle, self.clusters_n)
        if per_batch <= band * self.clusters_m:
            columns, rows = min(band, per_batch), ceil_div(per_batch, band)
        else:
            rows, columns = self.clusters_m, ceil_div(per_batch, self.clusters_m)
        a_tiles = min(self.tiles_m, rows * c.cluster_m)
        b_tiles = min(self.tiles_n, columns * c.cluster_n)
        hbm = (a_tiles * self.a_rows + b_tiles * self.b_cols) * self.row_bytes * batches_in_wave
        l2 = clusters * (c.cluster_m * self.a_rows + c.cluster_n * self.b_cols) * self.row_bytes
        # A large operand's tile that few clusters of the wave read is fetched from HBM by
        # each of them at about the same time: each pulls its own share at one SM's rate.
        streamed = (self.issue_a * (self.a_large and columns <= STREAM_SHARERS_MAX)
                    + self.issue_b * (self.b_large and rows <= STREAM_SHARERS_MAX))
        ctas = clusters * c.cluster_size
        return soft_max((*self.cta_terms, hbm / rates.hbm_bytes_per_s, l2 / rates.l2_bytes_per_s,
                         max(streamed, hbm / ctas) / rates.sm_stream_bytes_per_s))


def soft_max(terms) -> float:
    """The largest of ``terms``, rounded up where others come close: limits that bind
    at once queue behind each other (a p-norm, ``SOFT_MAX_POWER``)."""
    return sum(t ** SOFT_MAX_POWER for t in terms) ** (1 / SOFT_MAX_POWER)


def estimate_seconds(problem: Problem, config: GemmConfig, gpu: Gpu, rates: Rates | None = None) -> float:
    """Modelled run time of ``config`` on ``problem`` (the caller's orientation:
    ``config.swap_ab`` runs the swapped problem) on ``gpu``."""
    rates = rates or Rates.for_gpu(gpu)
    p = problem.kernel_problem(config.swap_ab)
    c = config
    tiles_m, tiles_n = ceil_div(p.m, c.tile_m), ceil_div(p.n, c.tile_n)
    units = ceil_div(tiles_m, c.cluster_m) * ceil_div(tiles_n, c.cluster_n) * p.batches
    slots = gpu.clusters(c.cluster_m * c.cluster_n)
    k_blocks = ceil_div(p.k, c.tile_k)
    wave = _Wave(p, c, rates, gpu.l2_bytes, tiles_m, tiles_n, ring_stages(c, p.ab_dtype, p.out_dtype))
    epilogue = EPILOGUE_S + c.tile_m * c.tile_n * DTYPE_BYTES[p.out_dtype] / rates.sm_port_bytes_per_s

    full_waves, tail = divmod(units, slots)
    busiest = full_waves * (k_blocks * wave.k_block_seconds(slots) + epilogue) if full_waves else 0.0
    fixup = 0.0
    partial_bytes = 0.0
    if tail and (c.split_k > 1 or c.stream_k):
        pieces = 2 if c.stream_k else c.split_k
        if c.stream_k:
            busy, streamed = slots, ceil_div(tail * k_blocks, slots)
        else:
            items = tail * c.split_k
            busy, streamed = min(items, slots), ceil_div(items, slots) * ceil_div(k_blocks, c.split_k)
        busiest += streamed * wave.k_block_seconds(busy) + epilogue
        tile_partial = c.tile_m * c.tile_n * 4
        fixup = (FIXUP_S + max(0, pieces - 2) * FIXUP_PER_EXTRA_SPLIT_S
                 + (pieces - 1) * tile_partial / rates.sm_port_bytes_per_s)
        partial_bytes = 2 * (pieces - 1) * tail * c.cluster_m * c.cluster_n * tile_partial
    elif tail:
        busiest += k_blocks * wave.k_block_seconds(tail) + epilogue
    unique = (p.m * p.k + p.k * p.n) * DTYPE_BYTES[p.ab_dtype] * p.batches + partial_bytes
    return max(busiest, unique / rates.hbm_bytes_per_s) + fixup
