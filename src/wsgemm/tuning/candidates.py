"""The candidate space: every plan the cost model rates, written as data.

A plan is a tile shape, a cluster shape, a split of the last wave's k-loops, and the
orientation (``swap_ab``: the kernel computes ``D^T = B^T A^T``, so a few tokens sit
in a narrow N tile beside the weight's rows). The space is the product of the tuples
below, less what the kernel cannot build (``config.py``'s register and shared-memory
budgets) and what cannot help (clusters wider than the tile grid, splits past one
wave).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

from ..config import SM90_TILE_M, SM90_TILE_N_STEP, GemmConfig, Raster, sm90_registers_fit, smem_budget, KernelSpec
from ..grid import ceil_div
from .gpu import Gpu
from .problem import Problem

TILE_M = SM90_TILE_M  # 64-256 rows: one to three consumer warpgroups (two for 256)
TILE_N_STEP = SM90_TILE_N_STEP  # the epilogue's narrowest step
MAX_TILE_N = 256  # wgmma's widest N
CLUSTERS = ((1, 1), (2, 1), (1, 2), (2, 2))  # pairs multicast the shared operand's tile
SPLITS = (1, 2, 3, 4, 6, 8)
# A split needs enough k-blocks to fill its ring and amortise its fix-up.
MIN_K_BLOCKS_PER_SPLIT = 4
# Only the last, partial wave is split, and only where the run is a few waves long:
# past that the tail is a few percent of the run.
MAX_WAVES_TO_SPLIT = 4
# The fewest stages a candidate's ring may have: two only hides no latency.
MIN_STAGES = 3
# Swapping A and B puts the tokens in narrow N tiles: worth it while two N tiles of at
# most 256 columns hold them.
SWAP_MAX_TOKENS = 2 * MAX_TILE_N


def tile_widths(extent: int) -> tuple[int, ...]:
    """Tile widths worth trying over ``extent`` columns: for each number of tile columns
    that a width from 16 to 256 gives, the narrowest width (a multiple of 16) that
    gives it. A wider tile with as many columns only computes more padding."""
    widths = set()
    for width in range(TILE_N_STEP, MAX_TILE_N + 1, TILE_N_STEP):
        columns = ceil_div(extent, width)
        widths.add(ceil_div(ceil_div(extent, columns), TILE_N_STEP) * TILE_N_STEP)
    return tuple(sorted(widths))


def tile_heights(extent: int) -> tuple[int, ...]:
    """Tile heights up to the first that holds all ``extent`` rows."""
    heights = []
    for rows in TILE_M:
        heights.append(rows)
        if rows >= extent:
            break
    return tuple(heights)


def candidates(problem: Problem, gpu: Gpu) -> Iterator[GemmConfig]:
    """Every plan of the space the kernel can build for ``problem`` on ``gpu``."""
    swaps = problem.can_swap and problem.batches == 1 and problem.m <= SWAP_MAX_TOKENS
    orientations = (False, True) if swaps else (False,)
    for swap in orientations:
        p = problem.kernel_problem(swap)
        k_blocks = ceil_div(p.k, 64)
        for tile_m in tile_heights(p.m):
            for tile_n in tile_widths(p.n):
                base = GemmConfig(tile_m=tile_m, tile_n=tile_n, tile_k=64, raster=Raster.ALONG_M, swizzle=1,
                                  swap_ab=swap)
                if not buildable(base, p):
                    continue
                tiles_m, tiles_n = ceil_div(p.m, tile_m), ceil_div(p.n, tile_n)
                for cluster_m, cluster_n in CLUSTERS:
                    if cluster_m > tiles_m or cluster_n > tiles_n:
                        continue
                    units = ceil_div(tiles_m, cluster_m) * ceil_div(tiles_n, cluster_n) * p.batches
                    slots = gpu.clusters(cluster_m * cluster_n)
                    tail = units % slots
                    for split in SPLITS:
                        if split > 1 and (tail == 0 or tail * split > slots or units > MAX_WAVES_TO_SPLIT * slots
                                          or k_blocks < split * MIN_K_BLOCKS_PER_SPLIT):
                            continue
                        yield replace(base, cluster_m=cluster_m, cluster_n=cluster_n, split_k=split)


def buildable(config: GemmConfig, p: Problem) -> bool:
    """The kernel builds ``config`` for ``p``'s dtypes with a useful ring
    (``config.py``'s register and shared-memory budgets)."""
    if not sm90_registers_fit(config):
        return False
    budget = smem_budget(KernelSpec("sm90", p.ab_dtype, p.out_dtype, "k", "k", "n", config))
    return budget.stages >= MIN_STAGES and budget.total_bytes <= budget.capacity_bytes
