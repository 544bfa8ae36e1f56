"""Launch rules: how a chosen plan (table, autotuner or cost model) runs on the kernel's
own problem. A caller's ``GemmConfig`` is used as given and skips them.

Each rule is one small function of (problem, plan, GPU) that returns the plan it
launches, with its reason in one line; the measurements behind each are in the tuning
log (docs/tuning-log/, by topic). :func:`as_launched` applies them in order.
"""

from __future__ import annotations

from dataclasses import replace

from ..config import SM90_PINGPONG_MAX_TILE_M, GemmConfig, KernelSpec, smem_budget
from ..grid import TileGrid, ceil_div, stream_k_fits_int32
from .gpu import Gpu
from .problem import Problem


def _waves(p: Problem, c: GemmConfig, gpu: Gpu) -> float:
    return TileGrid.for_problem(p.m, p.n, p.batches, c).units / gpu.clusters(c.cluster_size)


def _k_blocks(p: Problem, c: GemmConfig) -> int:
    return ceil_div(p.k, c.tile_k)


# Ping-pong consumers for k-loops of at most this many k-blocks over two waves or more:
# a tile's epilogue is long against its mainloop, and one warpgroup's epilogue then
# overlaps the other's mainloop (7-17 % at K = 512-1536; docs/tuning-log/pingpong.md).
PINGPONG_MAX_K_BLOCKS = 24
PINGPONG_MIN_WAVES = 2
# ... 128-row tiles 128 wide for k-loops this short, else 192 or 128 wide, whichever
# leaves the busiest SM less work (a 128-wide wgmma reads 12 % more shared memory per
# FLOP: ``PINGPONG_TILE_SPEED``).
PINGPONG_NARROW_MAX_K_BLOCKS = 2
PINGPONG_TILE_SPEED = {192: 1.0, 128: 0.93}


def pingpong_for_short_k(p: Problem, c: GemmConfig, gpu: Gpu) -> GemmConfig:
    """Short k-loops over several waves run on ping-pong consumers (unbatched, unsplit,
    tiles of at most 128 rows)."""
    k_blocks = _k_blocks(p, c)
    if (p.batches != 1 or k_blocks > PINGPONG_MAX_K_BLOCKS or c.has_workspace
            or c.tile_m > SM90_PINGPONG_MAX_TILE_M):
        return c
    pingpong = replace(c, pingpong=True, stages=None, epi_stages=2)
    if c.tile_m == 128:
        slots = gpu.clusters(c.cluster_size)

        def busiest_sm_work(tile_n: int) -> float:
            units = TileGrid.for_problem(p.m, p.n, p.batches, replace(pingpong, tile_n=tile_n)).units
            return ceil_div(units, slots) * tile_n / PINGPONG_TILE_SPEED[tile_n]

        tile_n = 128 if k_blocks <= PINGPONG_NARROW_MAX_K_BLOCKS else min(PINGPONG_TILE_SPEED, key=busiest_sm_work)
        pingpong = replace(pingpong, tile_n=tile_n)
    return pingpong if _waves(p, pingpong, gpu) >= PINGPONG_MIN_WAVES else c


# One wave of 128x128 tiles over a long k-loop runs each tile on one warpgroup of a
# ping-pong CTA: 1-5 % faster than two cooperative warpgroups (docs/tuning-log/pingpong.md).
SOLO_TILE_MIN_K_BLOCKS = 32


def pingpong_for_one_wave(p: Problem, c: GemmConfig, gpu: Gpu) -> GemmConfig:
    """One wave of unsplit 128x128 tiles with long k-loops runs on ping-pong consumers."""
    if ((c.tile_m, c.tile_n) != (128, 128) or c.has_workspace or c.pingpong or p.batches != 1
            or _k_blocks(p, c) < SOLO_TILE_MIN_K_BLOCKS or _waves(p, c, gpu) > 1):
        return c
    return replace(c, pingpong=True, stages=None, epi_stages=2)


# Stream-K for the last, partial wave from this many whole waves up, for k-loops of at
# least this many k-blocks: 0.3-3.6 % faster there; with fewer waves or shorter loops
# the partial sums cost more than the idle SMs (docs/tuning-log/stream-k.md).
STREAM_K_MIN_WAVES = 6
STREAM_K_MIN_K_BLOCKS = 64


def stream_k_for_long_runs(p: Problem, c: GemmConfig, gpu: Gpu) -> GemmConfig:
    """A long run's last, partial wave is streamed over every SM."""
    units = TileGrid.for_problem(p.m, p.n, p.batches, c).units
    slots = gpu.clusters(c.cluster_size)
    k_blocks = _k_blocks(p, c)
    if (c.has_workspace or c.pingpong or not units % slots or units // slots < STREAM_K_MIN_WAVES
            or k_blocks < STREAM_K_MIN_K_BLOCKS or not stream_k_fits_int32(units, slots, k_blocks)):
        return c
    return replace(c, stream_k=True)


# Long grids walk in bands of this many cluster columns: at the power limit the bands
# keep more of both operands in L2 (M = 16384: 0.88-0.93x -> 0.97-1.00x of cuBLAS;
# docs/tuning-log/raster-bands.md) ...
BAND_CLUSTERS = 8
# ... where the grid is at least this tall, the k-loops this long, and at least two
# bands wide.
LONG_GRID_MIN_M = 8192
LONG_GRID_MIN_K_BLOCKS = 64


def bands_for_long_grids(p: Problem, c: GemmConfig, gpu: Gpu) -> GemmConfig:
    """A tall grid over long k-loops walks in bands of ``BAND_CLUSTERS`` cluster columns."""
    if c.swap_ab or p.batches != 1 or c.swizzle != 1 or p.m < LONG_GRID_MIN_M or _k_blocks(p, c) < LONG_GRID_MIN_K_BLOCKS:
        return c
    grid = TileGrid.for_problem(p.m, p.n, p.batches, c)
    if grid.clusters_n < 2 * BAND_CLUSTERS or _waves(p, c, gpu) < 2:
        return c
    return replace(c, swizzle=BAND_CLUSTERS)


# One wave of unsplit 64x128 tiles over at least this many rows reads each operand tile
# into many CTAs from L2; clusters of 8 multicast them (1.06x single calls, 1.11x in
# graphs on 16 shapes; docs/tuning-log/clusters.md) ...
SHARED_TILES_MIN_M = 512
# ... where their tiles fill at least this share of what the resident clusters of 8 hold,
CLUSTERS_OF_EIGHT_MIN_FILL = 0.8
# ... else, in pairs, a ring this deep keeps the CTAs that share a tile in step, so
# the L2 merges their reads (1.02-1.03x on 22 shapes; docs/tuning-log/clusters.md).
SHARED_TILES_RING_STAGES = 7


def clusters_for_shared_tiles(p: Problem, c: GemmConfig, gpu: Gpu) -> GemmConfig:
    """One wave of unsplit 64x128 tiles in pairs runs in clusters of 8 where they also
    make one wave, else on a ``SHARED_TILES_RING_STAGES``-stage ring."""
    if ((c.tile_m, c.tile_n, c.tile_k, c.cluster_m) != (64, 128, 64, 2) or c.cluster_n not in (1, 2)
            or c.swap_ab or c.pingpong or c.has_workspace or p.batches != 1 or p.m < SHARED_TILES_MIN_M
            or _waves(p, c, gpu) > 1):
        return c
    tiles = ceil_div(p.m, c.tile_m) * ceil_div(p.n, c.tile_n)
    if tiles >= CLUSTERS_OF_EIGHT_MIN_FILL * gpu.clusters(8) * 8:
        eights = [e for e in (replace(c, cluster_m=2, cluster_n=4), replace(c, cluster_m=4, cluster_n=2))
                  if _waves(p, e, gpu) <= 1]
        if eights:
            return min(eights, key=lambda e: TileGrid.for_problem(p.m, p.n, 1, e).units)
    if c.cluster_n == 1 and (c.stages is None or c.stages > SHARED_TILES_RING_STAGES):
        return replace(c, stages=SHARED_TILES_RING_STAGES)
    return c


# Programmatic dependent launch for every plan of at most this many tokens (decode:
# +1.8 to +5.7 % per call back to back) ...
DEPENDENT_LAUNCH_MAX_TOKENS = 128
# ... and of at most this many tokens on the kernel's M or a swapped kernel's N (small
# and chunked prefill: +2.2 %; docs/tuning-log/dependent-launch.md).
DEPENDENT_LAUNCH_MAX_PREFILL_TOKENS = 1024


def dependent_launch(p: Problem, c: GemmConfig, gpu: Gpu) -> GemmConfig:
    """Short kernels launch as programmatic dependents: each CTA sets up while the
    previous kernel on the stream finishes (unbatched decode and prefill, and unsplit
    64-row tiles 64 to 128 wide)."""
    tokens = p.n if c.swap_ab else p.m
    short = p.batches == 1 and (min(p.m, p.n) <= DEPENDENT_LAUNCH_MAX_TOKENS
                                or tokens <= DEPENDENT_LAUNCH_MAX_PREFILL_TOKENS)
    narrow = not c.has_workspace and c.tile_m == 64 and 64 <= c.tile_n <= 128
    return replace(c, dependent_launch=True) if short or narrow else c


# Decode tiles streaming a K-major weight load 128-deep k-blocks on half the stages:
# the same bytes in flight, half the barrier round trips (1.005-1.080x in graphs;
# docs/tuning-log/decode.md). Swapped with at most this many token columns ...
DEEP_K_BLOCK = 128
DEEP_K_BLOCK_MAX_TOKEN_COLUMNS = 32
# ... or unswapped, unclustered, one 64-row token tile beside at least this many weight
# columns; K at least this long, and at least this many 128-deep stages.
DEEP_K_BLOCK_MIN_WEIGHT_COLUMNS = 160
DEEP_K_BLOCK_MIN_K = 2048
DEEP_K_BLOCK_MIN_STAGES = 3


def deep_k_blocks_for_decode(p: Problem, c: GemmConfig, gpu: Gpu) -> GemmConfig:
    """A decode tile streaming a K-major weight takes 128-deep k-blocks on half its ring."""
    if not p.k_major or c.tile_k == DEEP_K_BLOCK or p.k < DEEP_K_BLOCK_MIN_K or p.k % DEEP_K_BLOCK:
        return c
    swapped_narrow = c.swap_ab and c.tile_n <= DEEP_K_BLOCK_MAX_TOKEN_COLUMNS
    one_token_tile = (not c.swap_ab and c.tile_m == 64 and p.m <= c.tile_m and c.cluster_size == 1
                      and c.tile_n >= DEEP_K_BLOCK_MIN_WEIGHT_COLUMNS)
    if not (swapped_narrow or one_token_tile):
        return c
    stages = _ring(p, c).stages // 2
    return replace(c, tile_k=DEEP_K_BLOCK, stages=stages) if stages >= DEEP_K_BLOCK_MIN_STAGES else c


# The most epilogue buffers a plan gets where shared memory holds them beside its ring:
# with two, the consumers wait on the stores when a tile's output is large against its
# k-loop (3-9 % on short K; docs/tuning-log/epilogue.md).
SPARE_EPILOGUE_BUFFERS = 4


def spare_epilogue_buffers(p: Problem, c: GemmConfig, gpu: Gpu) -> GemmConfig:
    """The plan keeps its ring and takes the epilogue buffers that still fit (not 64-row
    ping-pong tiles, which ran slower with four)."""
    if c.epi_stages >= SPARE_EPILOGUE_BUFFERS or (c.pingpong and c.tile_m != 128):
        return c
    stages = _ring(p, c).stages
    for buffers in range(SPARE_EPILOGUE_BUFFERS, c.epi_stages, -1):
        more = replace(c, stages=stages, epi_stages=buffers)
        budget = _ring(p, more)
        if budget.total_bytes <= budget.capacity_bytes:
            return more
    return c


def _ring(p: Problem, c: GemmConfig):
    return smem_budget(KernelSpec("sm90", p.ab_dtype, p.out_dtype, "k", "k", "n", c))


# In order: the consumers' arrangement first (it changes the tile), the tail's schedule,
# the walk, the clusters, then what only the launch and the ring see.
RULES = (pingpong_for_one_wave, pingpong_for_short_k, stream_k_for_long_runs, bands_for_long_grids,
         clusters_for_shared_tiles, dependent_launch, deep_k_blocks_for_decode, spare_epilogue_buffers)


def as_launched(problem: Problem, config: GemmConfig, gpu: Gpu) -> GemmConfig:
    """``config`` (chosen for the kernel's own ``problem``) with every launch rule applied
    (SM90: the SM100 kernel's launches are unmeasured)."""
    if gpu.arch != "sm90":
        return config
    for rule in RULES:
        config = rule(problem, config, gpu)
    return config
