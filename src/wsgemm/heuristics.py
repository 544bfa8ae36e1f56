"""Problem shape -> ``GemmConfig``, when the caller does not pass one.

The rules are deliberately few and each has its reason next to it; the benchmark
notes (benchmarks/NOTES.md) record the measurements behind them.
"""

from __future__ import annotations

from .config import GemmConfig, Raster
from .kernels.common.scheduler import ceil_div


def choose_config(arch: str, m: int, n: int, k: int, batches: int, sm_count: int) -> GemmConfig:
    if arch == "sm100":
        return _choose_sm100(m, n, batches, sm_count)
    # Few rows: a 64-row tile (one consumer warpgroup) wastes less of the MMA.
    tile_m = 64 if m <= 64 else 128
    # The widest tile that still gives every SM work: small and skinny problems are
    # bound by how many SMs stream operands, not by the MMA.
    for tile_n in (256, 128, 64):
        if ceil_div(m, tile_m) * ceil_div(n, tile_n) * batches >= sm_count:
            break
    tiles = ceil_div(m, tile_m) * ceil_div(n, tile_n) * batches
    # A 2-CTA cluster along M shares each B tile through multicast, halving B's L2
    # traffic; only worth it when there are at least two M tiles to pair.
    cluster_m = 2 if ceil_div(m, tile_m) >= 2 and tiles >= 2 * sm_count else 1
    return GemmConfig(
        tile_m=tile_m,
        tile_n=tile_n,
        tile_k=64,
        cluster_m=cluster_m,
        cluster_n=1,
        raster=Raster.ALONG_M,
        swizzle=1,
    )


def _choose_sm100(m: int, n: int, batches: int, sm_count: int) -> GemmConfig:
    """Blackwell: unmeasured (no Blackwell GPU here), so the conservative shape of
    CUTLASS's defaults: 128x256 tiles with two TMEM accumulator buffers, a 2x1
    cluster sharing B when there are enough tiles; the 2-CTA MMA only on request."""
    tiles = ceil_div(m, 128) * ceil_div(n, 256) * batches
    cluster_m = 2 if ceil_div(m, 128) >= 2 and tiles >= 2 * sm_count else 1
    return GemmConfig(tile_m=128, tile_n=256 if tiles >= sm_count else 128, cluster_m=cluster_m, acc_stages=2)
