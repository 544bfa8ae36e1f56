"""Problem shape -> ``GemmConfig``, when the caller does not pass one.

SM90 configurations are ranked by a small throughput model (:func:`estimate_seconds`):
for each candidate tile shape and split-K factor it estimates the time of the
busiest SM (waves of work items, each bound by its MMA or its operand traffic),
the HBM time of the whole problem, and the split-K fix-up. The model's constants
are rough; its job is to get the *shape* of the trade-off right (fill the SMs,
prefer wide tiles, do not split what is already full, swap A and B for decode).
``wsgemm.autotune`` times the model's best candidates for real, and where it has
measured a shape bucket on this GPU (``wsgemm.tuned_table``) ``wsgemm.api`` uses
that winner instead. benchmarks/NOTES.md records the measurements behind the
constants.
"""

from __future__ import annotations

from dataclasses import dataclass

from .config import MAX_STAGES, GemmConfig, Raster
from .kernels.common.scheduler import ceil_div

TILE_K = 64
EPILOGUE_SMEM_BYTES = 16 * 1024  # two epilogue buffers, roughly


@dataclass(frozen=True)
class ThroughputModel:
    """Per-GPU rates of the model (defaults: an H200 SXM, 132 SMs)."""

    # Dense BF16/FP16 tensor throughput of one SM: 989.4 TFLOP/s (H100/H200 SXM
    # datasheet, sparse 1979 / 2) over 132 SMs.
    mma_flops_per_sm: float = 989.4e12 / 132
    # HBM bandwidth a GEMM achieves: the datasheet's 4.8 TB/s (H200 HBM3e) is not
    # reached; the best decode kernels measured here (ours and cuBLAS) stream
    # weights at ~3.7 TB/s (benchmarks/NOTES.md section 5).
    hbm_bytes_per_s: float = 3.8e12
    # Latency of a TMA load from HBM under load. By Little's law one SM streams at
    # most (bytes its ring keeps in flight) / latency: a 64-wide tile's 8 KB stages
    # cannot pull what a 128x256 tile's 48 KB stages do.
    load_latency_s: float = 1.0e-6
    # What one SM pulls from HBM when nothing else limits it. Fitted: swapped decode
    # GEMMs with 64 of 132 SMs streaming the weight ran at ~1.9 TB/s, with 128 SMs
    # at ~3.7 TB/s (benchmarks/NOTES.md section 6): ~30 GB/s per SM.
    sm_hbm_bytes_per_s: float = 30e9
    # One SM's bandwidth to L2 (operand tiles other tiles also read, which L2 serves,
    # and the split-K fix-up's fp32 stores and loads): ~64 B per clock at 1.98 GHz.
    sm_l2_bytes_per_s: float = 120e9
    smem_bytes: int = 227 * 1024
    # Rows of a TMA box past the tensor's edge are zero-filled, and not for free: a
    # 64-row A box holding one real row (M = 1) made 64x64 tiles ~1.6x slower than at
    # M = 64 with the same bytes from HBM. Fitted: ~20 GB/s per SM of filled rows.
    oob_fill_bytes_per_s: float = 20e9


H200 = ThroughputModel()

# Fraction of the SM's MMA peak a persistent tile sustains (first order: wider tiles
# amortise the per-k-block synchronisation and the epilogue; 128-row tiles run two
# consumer warpgroups). 128x256: 790/989 measured for cuBLAS-class 8192^3.
MMA_EFFICIENCY = {
    (128, 256): 0.80, (128, 192): 0.78, (128, 128): 0.72, (128, 64): 0.55,
    (64, 256): 0.62, (64, 192): 0.60, (64, 128): 0.55, (64, 64): 0.45,
    # Narrow N (swap_ab for decode): bound by the weights' bytes, not the MMA; rough.
    (128, 32): 0.40, (128, 16): 0.30, (64, 32): 0.35, (64, 16): 0.25,
}
SPLITS = (1, 2, 3, 4, 6, 8)
SWAP_AB_MAX_M = 64
SWAP_AB_MIN_GAIN = 0.95  # modelled time of the best swap / the best without
# A split needs enough k-blocks to fill its ring and amortise the fix-up.
MIN_K_BLOCKS_PER_SPLIT = 4
# Split the last wave's tiles only when there are at most this many waves.
MAX_WAVES_TO_SPLIT = 4


def estimate_seconds(m: int, n: int, k: int, batches: int, sm_count: int, tile_m: int, tile_n: int,
                     split_k: int = 1, model: ThroughputModel = H200) -> float:
    """Modelled run time of one SM90 configuration on an ``sm_count``-SM GPU.

    With ``split_k > 1`` only the tiles of the last partial wave are split
    (``kernels/common/split_k.py``): full waves of whole tiles, then the split tail.
    """
    tiles = ceil_div(m, tile_m) * ceil_div(n, tile_n) * batches
    tail = tiles % sm_count if split_k > 1 else 0
    k_blocks = ceil_div(k, TILE_K)
    busiest_sm = (tiles - tail) // sm_count * _tile_seconds(m, n, k_blocks, tile_m, tile_n, model)
    if tail:
        split_blocks = ceil_div(k_blocks, split_k)
        busiest_sm += ceil_div(tail * split_k, sm_count) * _tile_seconds(m, n, split_blocks, tile_m, tile_n, model)
        # The last split stores nothing until it has read the others' fp32 tiles; the
        # others' stores run alongside.
        busiest_sm += split_k * tile_m * tile_n * 4 / model.sm_l2_bytes_per_s
    elif tiles % sm_count:
        busiest_sm += _tile_seconds(m, n, k_blocks, tile_m, tile_n, model)
    partial_bytes = (split_k - 1) * tail * tile_m * tile_n * 4 * 2  # written, then read back
    hbm = ((m * k + k * n) * 2 * batches + partial_bytes) / model.hbm_bytes_per_s
    return max(busiest_sm, hbm)


def _tile_seconds(m: int, n: int, k_blocks: int, tile_m: int, tile_n: int, model: ThroughputModel) -> float:
    """One work item of ``k_blocks`` k-blocks: bound by its MMAs or its operand loads."""
    k_elems = k_blocks * TILE_K
    mma = 2 * tile_m * tile_n * k_elems / (model.mma_flops_per_sm * MMA_EFFICIENCY[tile_m, tile_n])
    stage_bytes = (tile_m + tile_n) * TILE_K * 2
    stages = min(MAX_STAGES, (model.smem_bytes - EPILOGUE_SMEM_BYTES) // stage_bytes)
    a_rows, b_rows = min(tile_m, m), min(tile_n, n)
    in_flight = stages * (a_rows + b_rows) * TILE_K * 2
    # An operand tile only this tile reads (the weight of a decode GEMM: one M tile)
    # streams from HBM; one that other tiles share is mostly an L2 hit.
    a_rate = model.sm_hbm_bytes_per_s if ceil_div(n, tile_n) == 1 else model.sm_l2_bytes_per_s
    b_rate = model.sm_hbm_bytes_per_s if ceil_div(m, tile_m) == 1 else model.sm_l2_bytes_per_s
    a_rate, b_rate = (min(rate, in_flight / model.load_latency_s) for rate in (a_rate, b_rate))
    oob_rows = tile_m + tile_n - a_rows - b_rows
    loads = k_blocks * TILE_K * 2 * (a_rows / a_rate + b_rows / b_rate + oob_rows / model.oob_fill_bytes_per_s)
    return max(mma, loads)


def ranked_sm90_configs(m: int, n: int, k: int, batches: int, sm_count: int, can_swap: bool = False,
                        model: ThroughputModel = H200) -> list[tuple[float, GemmConfig]]:
    """Every candidate configuration with its modelled time, fastest first.

    ``can_swap``: the operands are 2-D and TMA-readable, so ``swap_ab`` (compute
    D^T = B^T A^T) is possible; it is considered for M <= 64, where the tokens fit
    one 16-, 32- or 64-wide N tile instead of a mostly empty 64-row M tile.
    """
    ranked = _plain_candidates(m, n, k, batches, sm_count, model)
    if can_swap and batches == 1 and m <= SWAP_AB_MAX_M:
        swapped = _swapped_candidates(m, n, k, sm_count, model)
        # Swap only for a clear gain: the transposed views cost host time on every call.
        if swapped[0][0] < SWAP_AB_MIN_GAIN * ranked[0][0]:
            return _break_ties(ranked + swapped)
    return ranked


def candidates_to_time(m: int, n: int, k: int, batches: int, sm_count: int, can_swap: bool, count: int,
                       model: ThroughputModel = H200) -> list[GemmConfig]:
    """What ``config="autotune"`` times: the model's best ``count``; for decode shapes
    that can swap A and B, the best half of each kind, because the model's choice
    between them is its least reliable (the model keeps 8B QKV at M = 1 unswapped;
    measured at M <= 8, swapped ran 18.6 us against 21.8 us; benchmarks/NOTES.md
    section 10)."""
    plain = _plain_candidates(m, n, k, batches, sm_count, model)
    if not (can_swap and batches == 1 and m <= SWAP_AB_MAX_M):
        return [c for _, c in plain[:count]]
    swapped = _swapped_candidates(m, n, k, sm_count, model)
    half = min(count // 2, len(swapped))
    return [c for _, c in plain[:count - half] + swapped[:half]]


def _plain_candidates(m, n, k, batches, sm_count, model):
    return _break_ties(list(_candidates(m, n, k, batches, sm_count, (64,) if m <= 64 else (128,),
                                        (256, 192, 128, 64), False, model)))


def _swapped_candidates(m, n, k, sm_count, model):
    """D^T = B^T A^T: the weight's N on the 64/128-row side, the tokens in one N tile.
    One N tile must hold every token: with two, each weight tile is streamed twice
    (the L2 cannot keep a whole weight matrix between the two visits)."""
    narrow = tuple(t for t in (16, 32, 64) if t >= m)[:1]
    return _break_ties(list(_candidates(n, m, k, 1, sm_count, (64, 128), narrow, True, model)))


def _break_ties(ranked):
    """Fastest first; ties (within 2 %) go to no split, then to the wider tile: less
    workspace, fewer stores."""
    ranked.sort(key=lambda item: item[0])
    best = ranked[0][0]
    close = [item for item in ranked if item[0] <= best * 1.02]
    close.sort(key=lambda item: (item[1].split_k, -item[1].tile_n))
    return close + [item for item in ranked if item[0] > best * 1.02]


def _candidates(m, n, k, batches, sm_count, tile_ms, tile_ns, swap_ab, model):
    """(modelled seconds, config) of each tile and split for the kernel's own M, N."""
    k_blocks = ceil_div(k, TILE_K)
    for tile_m in tile_ms:
        for tile_n in tile_ns:
            tiles = ceil_div(m, tile_m) * ceil_div(n, tile_n) * batches
            tail = tiles % sm_count  # the last partial wave: all of them below one wave
            for split in SPLITS:
                # Split only to fill idle SMs, within one wave: past it, every extra
                # wave of splits adds fp32 partial tiles to write and read back
                # (measured: 112 tiles split 8 ways ran 2.5x slower than unsplit).
                # Past a few waves the tail is a few percent of the run, inside the
                # model's error and the jitter that already evens out the waves.
                if split > 1 and (tail == 0 or tail * split > sm_count or tiles > MAX_WAVES_TO_SPLIT * sm_count
                                  or k_blocks < split * MIN_K_BLOCKS_PER_SPLIT):
                    continue
                seconds = estimate_seconds(m, n, k, batches, sm_count, tile_m, tile_n, split, model)
                yield seconds, _sm90_config(m, tiles, sm_count, tile_m, tile_n, split, swap_ab)


def _sm90_config(m, tiles, sm_count, tile_m, tile_n, split, swap_ab) -> GemmConfig:
    # A 2-CTA cluster along M shares each B tile through multicast, halving B's L2
    # traffic; only worth it when there are at least two M tiles to pair and two waves.
    cluster_m = 2 if ceil_div(m, tile_m) >= 2 and tiles >= 2 * sm_count else 1
    return GemmConfig(tile_m=tile_m, tile_n=tile_n, tile_k=TILE_K, cluster_m=cluster_m, cluster_n=1,
                      raster=Raster.ALONG_M, swizzle=1, split_k=split, swap_ab=swap_ab)


def choose_config(arch: str, m: int, n: int, k: int, batches: int, sm_count: int,
                  can_swap: bool = False) -> GemmConfig:
    if arch == "sm100":
        return _choose_sm100(m, n, batches, sm_count)
    return ranked_sm90_configs(m, n, k, batches, sm_count, can_swap)[0][1]


def _choose_sm100(m: int, n: int, batches: int, sm_count: int) -> GemmConfig:
    """Blackwell: unmeasured (no Blackwell GPU here), so the conservative shape of
    CUTLASS's defaults: 128x256 tiles with two TMEM accumulator buffers, a 2x1
    cluster sharing B when there are enough tiles; the 2-CTA MMA only on request."""
    tiles = ceil_div(m, 128) * ceil_div(n, 256) * batches
    cluster_m = 2 if ceil_div(m, 128) >= 2 and tiles >= 2 * sm_count else 1
    return GemmConfig(tile_m=128, tile_n=256 if tiles >= sm_count else 128, cluster_m=cluster_m, acc_stages=2)
