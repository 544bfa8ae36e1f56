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

import dataclasses
import functools
from dataclasses import dataclass

from .config import (DEFAULT_MAX_STAGES, SM90_PINGPONG_MAX_TILE_M, SM90_TILE_N, SM90_TILE_N_STEP, GemmConfig,
                     KernelSpec, Raster, sm90_registers_fit, smem_budget)
from .kernels.common import stream_k
from .kernels.common.scheduler import TileGrid, ceil_div

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
    # What one SM pulls from HBM when nothing else limits it: ~30 GB/s, fitted to the
    # swapped decode configs of suite run 2 (benchmarks/NOTES.md section 6). Too low
    # for swapped 128x16 tiles: 48 SMs streamed 16x6144x4096's weight at 2.7 TB/s,
    # 56 GB/s each (section 16).
    sm_hbm_bytes_per_s: float = 30e9
    # One SM's bandwidth to L2 (operand tiles other tiles also read, which L2 serves,
    # and the split-K fix-up's fp32 stores and loads): ~64 B per clock at 1.98 GHz.
    sm_l2_bytes_per_s: float = 120e9
    # ... but not all SMs at once: what L2 serves to every SM together. 128x128 tiles
    # of one wave, unclustered, drew 8.8-10 TB/s in all (96-120 CTAs, 32 KB per
    # k-block each; benchmarks/NOTES.md sections 26 and 29), so a CTA of a full wave
    # gets ~60 GB/s, half its own port's rate, and a cluster that multicasts a shared
    # operand tile reads less of it. Fitted to 13 one-wave sweeps (section 30).
    l2_bytes_per_s: float = 8e12
    smem_bytes: int = 227 * 1024
    # Rows of a TMA box past the tensor's edge are zero-filled, and not for free: a
    # 64-row A box holding one real row (M = 1) made 64x64 tiles ~1.6x slower than at
    # M = 64 with the same bytes from HBM. Fitted: ~20 GB/s per SM of filled rows.
    oob_fill_bytes_per_s: float = 20e9
    # A split tile's fix-up is latency more than bytes: the last split waits for the
    # others' release of the arrival flag, then loads their partial sums before its
    # epilogue. Fitted on an H200 (benchmarks/NOTES.md section 25): at M = 256-1024,
    # N = 1024-4096 the model's split picks ran 1.1-1.9x slower than unsplit tiles,
    # and a split tile cost 4-7 us more than an unsplit tile of the same work; 3 us
    # is the smallest fixed cost (of 0.5-6) that stopped the model picking those
    # splits. Side by side, the 42 off-table shapes whose plan it changed ran 1.09x
    # faster in single calls, 1.22x in graph replays (results/model_split_fixup_ab).
    split_fixup_s: float = 3e-6
    # ... for two splits; each split past two costs this much more. Fitted when the last
    # split added the others' slots one after another, each a dependent round trip to
    # L2 before the epilogue, to the committed sweeps (benchmarks/model_regret.py: the
    # model's pick among the timed plans of 462 swept problems, 1.027x -> 1.024x the
    # fastest in single calls, 1.024x -> 1.019x in graph replays) and A/B'd on an H200
    # (NOTES section 51, results/split_fixup_per_split.json.gz): on 36 held-out shapes
    # whose plan it changed (splits of 3-8 cut to 2-6 or none, mostly at M <= 256 on
    # 1024- to 3072-row weights), 1.054x faster in single calls and 1.059x in graph
    # replays, 0.97x -> 1.02x of cuBLAS in single calls; slowest 0.92x (256x2048x8192,
    # whose 1x2 clusters over two tile rows ``_clusters`` now leaves out), then 0.95x.
    # Since ``split_k.add_partials`` loads several slots a round (a decode tile's
    # fix-up is one round), a model charging rounds instead of splits picked more
    # splits and ran 0.985x as fast in graph replays (NOTES section 52): a split costs
    # more than its slot's round trip, for reasons not yet measured.
    split_fixup_per_extra_split_s: float = 1e-6


H200 = ThroughputModel()

# Fraction of the SM's MMA peak a persistent tile sustains (first order: wider tiles
# amortise the per-k-block synchronisation and the epilogue; 128-row tiles run two
# consumer warpgroups). 128x256: 790/989 measured for cuBLAS-class 8192^3.
# 160- and 224-wide tiles exist to fit the waves (10240 = 64 x 160, 28672 = 128 x 224).
# Measured on an H200 (NOTES section 17): 128x160 ran at ~0.76 of peak per filled SM at
# M = 512 (start-up costs included); at 8192^3 autotune run f timed 128x224 2-3 % slower
# than 128x256 (``results/autotune_h200_f.json.gz``, 1x1 and 2x1 clusters).
MMA_EFFICIENCY = {
    (128, 256): 0.80, (128, 224): 0.79, (128, 192): 0.78, (128, 160): 0.76, (128, 128): 0.72, (128, 64): 0.55,
    (128, 96): 0.65, (64, 256): 0.62, (64, 224): 0.61, (64, 192): 0.60, (64, 160): 0.57, (64, 128): 0.55,
    (64, 96): 0.50, (64, 64): 0.45,
    # Narrow N (swap_ab for decode): bound by the weights' bytes, not the MMA; rough.
    (128, 32): 0.40, (128, 16): 0.30, (64, 32): 0.35, (64, 16): 0.25,
    # 256 rows: two wgmmas stacked per consumer warpgroup. Measured beside 128x256 in
    # 2x1 clusters (benchmarks/NOTES.md section 39): 256x128 1-2 % slower at
    # 2048x4096x4096 and 4096x6144x4096, 256x192 2 % faster at 4096x6144x4096 (less
    # shared-memory and L2 traffic per FLOP, though only 3 stages fit). Narrower:
    # the 128-row rates, unmeasured.
    (256, 192): 0.81, (256, 128): 0.79, (256, 64): 0.55, (256, 32): 0.40, (256, 16): 0.30,
}
# 192 rows: three warpgroups of 64 rows, rated as the two of a 128-row tile.
MMA_EFFICIENCY_RATED_AS = {192: 128}


def mma_efficiency(tile_m: int, tile_n: int) -> float:
    """``MMA_EFFICIENCY``, read on a line between its measured widths for the widths
    in steps of 16 (``fitted_token_tile``, ``FITTED_PLAIN_TILE_N``); none of those was
    measured on its own, and their 16-column epilogue steps are not charged."""
    tile_m = MMA_EFFICIENCY_RATED_AS.get(tile_m, tile_m)
    if (tile_m, tile_n) in MMA_EFFICIENCY:
        return MMA_EFFICIENCY[tile_m, tile_n]
    widths = sorted(n for m, n in MMA_EFFICIENCY if m == tile_m)
    below, above = max(n for n in widths if n < tile_n), min(n for n in widths if n > tile_n)
    share = (tile_n - below) / (above - below)
    return (1 - share) * MMA_EFFICIENCY[tile_m, below] + share * MMA_EFFICIENCY[tile_m, above]


# One wave of a long k-loop: where a configuration's work items all run at once
# (one wave) for at least this many k-blocks (K >= 4096 with 64-deep blocks), every
# CTA pulls its operands from L2 for most of the run. There the model charges each
# CTA its share of L2's bandwidth (``ThroughputModel.l2_bytes_per_s``), rates 64-row
# tiles 64 to 256 wide ``ONE_WAVE_64_ROW_GAIN`` faster (their MMA_EFFICIENCY held
# back the L2 traffic that this share now charges: in one wave 64x128 tiles ran a
# k-block in 0.177 us against a wgmma bound of 0.129, 0.73 of peak) and considers
# clusters along N (``_clusters``); not for one tile row, whose weight streams from
# HBM, and the 64-row gain only for work items whose own k-loop is that long (64-row
# split tiles lost up to 13 % by it). Fitted to 13 one-wave sweeps at K = 4096-14336;
# side by side on the 81 grid shapes whose plan it changes, 1.054x faster in the
# geometric mean (0.909x -> 0.959x of cuBLAS; 14 shapes 4-13 % slower, at N <= 2048
# mostly; benchmarks/NOTES.md section 30). Elsewhere the model is as fitted before:
# with short k-loops launch and epilogue costs it does not weigh decide (64x160
# tiles at 1024^3 ran 1.2x slower than the 64x128 tiles this term ties them with),
# and over several waves the term moved M = 896-2944 problems to tiles 4-14 %
# slower. Except for 64-row tiles (which serve M <= 1024 only) with more than one
# tile column: there every wave re-reads the weight once per tile row, and the share
# applies over any number of waves. 384 tiles of 64x224 at 192x28672x4096 (~3 waves)
# drew ~8.6 TB/s from L2 and ran 103.6 us; the 128x224 tiles in 2x1 clusters the model
# then picks ran 88.2 us. On the 6 shapes of M = 136-192 whose plan it changed, 1.24x
# faster in single calls (0.69x -> 0.86x of cuBLAS; benchmarks/NOTES.md section 38,
# ``results/model_l2_64row_ab.json.gz``).
ONE_WAVE_MIN_K_BLOCKS = 64
ONE_WAVE_64_ROW_GAIN = 1.15


def _one_long_wave(work_items: int, slots: int, k_blocks: int) -> bool:
    """All work items run at once, over a k-loop of at least ``ONE_WAVE_MIN_K_BLOCKS``."""
    return work_items <= slots and k_blocks >= ONE_WAVE_MIN_K_BLOCKS


SPLITS = (1, 2, 3, 4, 6, 8)
# Swap A and B up to this M: the tokens then fill one or two narrow N tiles (measured
# at M = 96 and 128 on 6144-wide weights: 0.85x -> 1.0x of cuBLAS; NOTES section 13).
SWAP_AB_MAX_M = 128
SWAP_TILE_N = (16, 32, 64, 96, 128)
# Past that, up to this M, two N tiles hold the tokens, paired by a 1x2 cluster that
# multicasts the weight tile: at M = 257-320 128-row M tiles take a third tile row,
# mostly padding. With the plain widths (96 for M = 129-192, 128 for 193-256, 160 for
# 257-320), where the model gained, on 57 shapes of M = 136-192 and 260-320 (Llama-3
# and grid weights, K >= 4096), its swapped picks ran 1.154x faster than the unswapped
# plans (0.84x -> 0.97x of cuBLAS, whose kernel names at such M carry 104- to 160-wide
# tiles); not past 320, where two 192-wide tiles ran 0.89-1.04x of the default
# (benchmarks/NOTES.md section 32) ...
SWAP_TWO_TILES_MAX_M = 320
# ... and the tiles are fitted to the tokens in steps of 16, the kernel's narrowest
# epilogue step (``fitted_token_tile``, ``SM90_TILE_N_STEP``): at M = 200 two
# 128-wide tiles are 22 % padding, two 112-wide ones 11 %. On the 36 shapes of
# M = 136-288 timed where that changed the plan, 1.098x faster (0.92x -> 1.01x of
# cuBLAS, none slower by 3 %; NOTES section 34) ...
# ... and only for work items (whole or split k-loops) of at least this many k-blocks:
# 16-block splits of 128x96 and 128x160 swapped tiles at N = 2048, K = 4096 ran
# 0.82-0.97x of the unswapped 64-row tiles (their fix-up is a larger share of a
# 10-15 us run); no two-tile swap was measured below K = 4096.
SWAP_TWO_TILES_MIN_K_BLOCKS = 32
# Four N tiles fitted to the tokens, paired in 1x2 clusters, where they make one wave
# with 128-row weight tiles (k-loops of at least ONE_WAVE_MIN_K_BLOCKS, unsplit): on
# a 4096-row weight 32 weight tiles times four token tiles fill 128 SMs (cuBLAS runs
# 128x80 tiles in 1x2 clusters at 320x4096x4096). Those tiles ran faster than the
# model's rates say (``results/sweep_swap_four_token_tiles.json.gz``, benchmarks/
# NOTES.md section 38): 0.24-0.29 us per k-block for 128x80 and 128x96 tiles at
# K = 14336, ~9.7 TB/s from L2 in all and 0.73 of the MMA peak, where the model
# charges 8 TB/s and rates them 0.60-0.65. So they are rated this much faster; with
# it the model picks them at 320-448 x 4096 x 4096 and 14336, where they ran 4-12 %
# faster than the plans before (two 160-wide swapped tiles split 2, 128-row plain
# tiles). Not up to M = 256, where four 64-wide tiles ran level with the default
# (256x4096x14336) and narrower ones are unmeasured.
SWAP_FOUR_TILES_GAIN = 1.2
SWAP_FOUR_TILES_MIN_M = 257
SWAP_FOUR_TILES_MAX_M = 448
# The flat zero-fill rate, fitted at M = 1 (63 of 64 rows padding), overcharges boxes
# that are mostly real rows, and the model split k-loops or declined swaps to spread
# the charge. On an H200 such a box costs its padding's share of that rate:
# - unswapped 64-row token boxes at M = 48: the same plans ran 0-0.7 us slower than
#   at M = 64, where the flat rate charged 6.5-13 us a tile (benchmarks/NOTES.md
#   section 64);
# - swapped 16- and 32-wide token boxes at M = 9-30: the plans the share picks (64-row
#   weight tiles, less split; swaps where plain 64x160-64x256 tiles ran) ran 1.047x
#   (single calls) and 1.081x (graph replays) faster than the flat rate's over 31
#   shapes, 18 of them held out; of cuBLAS 0.968x -> 1.046x in graph replays, below
#   0.9x 8 -> 0 (section 65).
# Not for wider boxes: at M = 136 the share picked 64x144 token tiles that ran
# 0.88-1.00x of the flat rate's paired 128x80 ones in graph replays (section 65).
SHARE_SCALED_FILL_MAX_ROWS = 64
# ... and a token box of at most 16 rows costs nothing in one wave of unsplit tiles of
# 64 weight rows: the Llama suites' swapped 64x16 plans ran M = 1, 2, 4, 8 and 16
# within 1 % of each other (benchmarks/NOTES.md section 68), where the flat rate
# charged ~5 us a tile at M = 1 and the model split 2048-5120-row weights at M = 1-8;
# unsplit, 19 such shapes ran 1.055x (single calls) and 1.121x (graph replays) faster.
# Kept elsewhere, as free there it picked plans that ran 0.93-0.99x: 3 splits for 4 on
# 1024-2048-row weights (the charge stands in for what splitting short streams saves)
# and several waves of 64x16 tiles on 27648- and 57344-row weights; unsplit 128x16
# tiles, which it would pick on 10240-12288-row weights, ran 0.90-0.99x of the split
# 64x16 ones there (section 69).
FREE_FILL_MAX_ROWS = 16
# One token tile fitted to the tokens (16, 32, 48 or 64 wide) beside 64-row weight
# tiles, in one wave of whole or split k-loops. The model rated these swaps up to 2.2x
# slower than they ran on an H200: 56 unsplit 64x48 tiles on a 3584x18944 weight each
# read ~56 GB/s where the model charges 30 (benchmarks/NOTES.md section 64,
# results/oob_sweep_swap.json.gz). Rated so:
# - at M = 33-64 it displaced split unswapped 64-row tiles: off the tuned table at
#   M = 36-60, 1.049x (single calls) and 1.064x (graph replays) faster than the plans
#   before over 69 shapes (results/fitted_swap_ab.json.gz, fitted_swap_ab2.json.gz);
# - at M = 1-32 it displaced 128-row weight tiles split 2-4 ways and splits of 64-row
#   ones: 1.051x and 1.062x over 31 shapes on 14 weights, 0.96-0.98x on 1024x4096
#   (section 66, results/fitted_from_1_ab.json).
# With 128-row weight tiles, on weights too tall for one wave of 64-row ones, they
# ran 2-7 % slower than the plain plans.
FITTED_SWAP_MAX_M = 64
FITTED_SWAP_HBM_GAIN = 1.9
FITTED_SWAP_WEIGHT_TILE_M = 64
# One token tile on tall weight tiles (192 or 256 rows), where those make at most one
# wave of unsplit k-loops of at least ONE_WAVE_MIN_K_BLOCKS: at 136x28672x4096 cuBLAS
# runs 256x136 tiles (112 CTAs, one wave), at 176x22016x8192 192x176 (115). Both hold
# at most 192 tokens (``config.consumer_warpgroups``). Measured (benchmarks/NOTES.md
# section 39, ``results/sweep_swap_256_rows.json.gz``): 256x144 in 2x1 clusters ran
# 70.2 us at 136x28672x4096 against 76.5 for the plan before (two 80-wide token tiles
# split 2) and 68.0 for cuBLAS; 256x192 78.3 us at 192x28672x4096 against 88.9 (128x224
# plain tiles) and 80.9. The model charges them 1.15-1.2x too much (its weight stream
# at ~30 GB/s per SM plus the tokens' loads, which overlap on the GPU), so their rates
# are taken this much faster. Split, they lost to the plans before (0.68-0.96x at
# 136x6144x4096, 136x4096x14336, 192x10240x8192 and 192x8192x28672). On weights of
# 22016 and 24576 rows (115 and 128 tiles of 192 rows) the model then picks 192-row
# tiles, the tiles cuBLAS runs there: 6 held-out shapes 1.12x faster than the plans
# before in both protocols (1.03-1.28x), 0.89x -> 1.00x of cuBLAS
# (``results/swap_192_rows_ab.json.gz``). Clusters of 4 along M, which cuBLAS also
# runs, measured within 1 % of pairs in single calls
# (``results/sweep_swap_tall_clusters.json.gz``) and 3 % faster in graph replays for
# 256-row tiles (section 46): the launch policy runs those so
# (:func:`_with_tall_swaps_in_fours`); the model ranks pairs.
# Plain 192-row tiles ran as much faster than the model's rates (PLAIN_TALL_TILE_M).
TALL_TILES_GAIN = 1.2
SWAP_TALL_TILES_MAX_M = 192
SWAP_TALL_TILE_M = (192, 256)
# Three token tiles fitted to the tokens beside 256-row weight tiles, where those make
# one wave of unsplit k-loops of at least ONE_WAVE_MIN_K_BLOCKS, rated TALL_TILES_GAIN
# faster too, in place of a plain plan (after the swap decision, as the plain tall
# tiles): cuBLAS runs 256x96 and 256x112 tiles at M = 272-336 on 10240- and 11008-row
# weights (40 or 43 weight tiles times three token tiles: 120 or 129 CTAs). Measured
# (benchmarks/NOTES.md section 42, ``results/swap_three_token_tiles_ab.json.gz``): on
# the 17 shapes where the model picks them, 1.16x faster than the plain plans before in
# single calls and 1.13x in graph replays (0.84x -> 0.98x of cuBLAS; 288x11008x4096:
# 40.2 us against 49.9 and cuBLAS's 38.4). Not in place of two swapped token tiles in
# 1x2 clusters, which they displaced 0.98x slower (12 shapes; 320x10240x28672 0.93x),
# nor past M = 336 (three 128-wide token tiles at M = 352-384 ran level or slower:
# 368x10240x14336 0.94x), nor on 6144- and 7168-row weights, whose 72-84 CTAs ran
# 0.75-0.78x of the default.
SWAP_THREE_TILES_MIN_M = 257
SWAP_THREE_TILES_MAX_M = 336
SWAP_THREE_TILES_WEIGHT_TILE_M = 256
SWAP_MAX_M = max(SWAP_TWO_TILES_MAX_M, SWAP_FOUR_TILES_MAX_M)
# Two token tiles fitted to the tokens beside 192-row weight tiles, the pair in a 1x2
# cluster that multicasts each weight tile to both, in one wave of unsplit k-loops of
# ONE_WAVE_MIN_K_BLOCKS to SWAP_TALL_PAIRS_MAX_K_BLOCKS whose CTAs fill at least
# SWAP_TALL_PAIRS_MIN_FILL of the SMs, up to SWAP_TALL_PAIRS_MAX_M tokens; rated
# TALL_TILES_GAIN faster. There one 192-wide token tile would leave half the SMs idle,
# and pairs of 128-row weight tiles need more than one wave past 8448 rows, so the
# model chose split swaps or plain 128x160 tiles whose second tile row computes
# padding, which the GPU pays for in clock at its power limit. Measured
# (benchmarks/NOTES.md sections 47-48, ``results/tall_pairs_ab.json.gz``,
# ``tall_pairs_wider.json.gz``): on 24 shapes (22 held out) of M = 130-224, 9216- to
# 12672-row weights, K = 4096-10240, 1.08-1.16x faster than the plans before in
# single calls and graph replays, from 0.92-0.95x to 1.00-1.11x of cuBLAS, which runs
# the same tiles on 12288- and 12672-row weights (``nvjet_sm90_tst_192x72_64x6_1x2``
# to 192x112). Not on 8192-row weights (86 CTAs, 0.91-0.96x of the 128-row pairs),
# past 160 k-blocks (at 192 one of two shapes lost 4 % in graph replays; at K = 14336
# 0.89-0.96x of a split swap), nor at M = 256 (two 128-wide token tiles 0.87-1.00x of
# the default). At M = 193-224 the model picks them on 11008- to 12672-row weights,
# not on 9216 and 10240 rows, where they ran 0.96x and 1.00x of the default.
SWAP_TALL_PAIRS_TILE_M = 192
SWAP_TALL_PAIRS_MIN_FILL = 0.7
SWAP_TALL_PAIRS_MAX_K_BLOCKS = 160
SWAP_TALL_PAIRS_MAX_M = 224
# Two rows of 128-row tiles (M = 129-256) in 2x1 clusters, each pair reading its weight
# tile once, in the width (a multiple of 16) whose columns make one wave of the pairs:
# 64 columns of 144 on a 9216-row weight, 63 of 176 on 11008, 64 of 112 on 7168, 64 of
# 80 on 5120 (126-128 CTAs), where the model's plans used 116 (2x2 clusters), 64-row
# tiles or a split, and cuBLAS runs 144-, 112-, 80- and 168-wide tiles. The model rates
# the 80- and 112-wide ones 10-30 % slower than they ran (it adds up both operands' L2
# loads), so their rates are taken this much faster. Measured (benchmarks/NOTES.md
# section 49, ``results/two_rows_filling.json.gz``): on 12 held-out shapes 1.050x
# faster in single calls, 1.068x in graph replays, 0.96x -> 1.01x and 0.96x -> 1.02x
# of cuBLAS; slower only in single calls where K = 14336 was split before (0.97x and
# 0.98x; 1.08x in graph replays). From M = 129 too (section 50), where the model
# declines the swap, in place of 128-row tiles 160 or 192 wide split two ways (the
# same two tile rows) or 64x160 and 64x192 tiles: on 10 held-out shapes of M = 129-192, 5120-
# and 6144-row weights, K = 4096-10240, 1.059x faster in single calls (0.974-1.124)
# and 1.060x in graph replays (1.028-1.108); slower in single calls at 129 and
# 169 x 5120 x 4096 (0.976x, 0.974x). Where the model swaps (7168- to 11008-row
# weights below M = 193, mostly) the swaps ran faster; at 192 k-blocks and more token
# tiles split to fill the wave take over (SWAP_SPLIT_FILL_MIN_K_BLOCKS).
# 2x1 clusters only (1x2 ran 0.73-0.98x as fast).
TWO_ROWS_FILLING_MIN_M = 129
TWO_ROWS_FILLING_GAIN = 1.3
# Token tiles fitted to the tokens beside the weight's tiles, each k-loop split as many
# ways as one wave holds, where the k-loops are long (K >= 12288) and the model declines
# the swap (after the swap decision, as the tall families): one token tile beside
# 128-row weight tiles, unclustered (split 3 on 5120 rows, 2 on 7168), or two beside
# 192-row weight tiles in 1x2 clusters that multicast each weight tile to both (split 2
# on 6144 rows, 4 on 3072), whichever keeps more SMs working. A down projection of a
# mid-size model in small prefill: the weight streams from HBM, and one wave of split
# k-loops keeps 108-128 SMs pulling it; cuBLAS runs these tiles (nvjet 128x144 and
# 128x176 split-K on 5120 rows, 192x80 and 192x96 in 1x2 on 6144); the model's plans
# were plain tiles split 2-4 ways, their second tile row mostly padding. The model rated
# the split swaps 1.5-1.6x too slow (it adds up the weight's HBM stream and the tokens'
# L2 loads for split k-loops, see ``_tile_seconds``; ``split_paths_overlap`` rates them
# side by side, 46 us at 176x5120x14336, which ran 48.6), so the family is taken
# wherever it applies. Measured (benchmarks/NOTES.md section 50,
# ``results/small_prefill_long_k.json.gz``): with one token tile on every layout, faster
# than the plans before on every one of 21 held-out shapes of M = 129-192, 3072- to
# 7168-row weights and K = 12288-28672, 1.180x in single calls (1.035-1.314) and 1.181x
# in graph replays (1.042-1.262), 0.84x -> 0.99x of cuBLAS in single calls and 0.85x ->
# 1.01x in graph replays; the pairs then took over on 6144 and 3072 rows (96 CTAs for
# one tile, 128 for pairs): 1.046x faster in single calls and 1.077x in graph replays on
# 11 held-out shapes (6144 rows 1.02-1.13x single; level on 3584 rows, 114 CTAs against
# 112). Not in place of the swaps the model picks before it (two 80-wide token tiles
# beside 128-row weight tiles in 1x2 clusters ran 1.06x as fast as one tile at 144 x
# 3584 x 14336 and 27648), nor below 70 % of the SMs (2048-row weights, unmeasured).
SWAP_SPLIT_FILL_MAX_M = 192
# (weight tile rows, token tiles); the pairs' weight tiles are the unsplit pairs' ones
SWAP_SPLIT_FILL_LAYOUTS = ((128, 1), (SWAP_TALL_PAIRS_TILE_M, 2))
SWAP_SPLIT_FILL_MAX_SPLIT = 4
SWAP_SPLIT_FILL_MIN_K_BLOCKS = 192
SWAP_SPLIT_FILL_MIN_SMS = 0.7
PLAIN_TILE_N = (256, 224, 192, 160, 128, 96, 64)
# Past the swaps' M, 128-row tiles may also take the odd multiples of 16 between those
# widths, where they fit the waves better (1536x2560x8192: 11 columns of 240 fill 132
# SMs, 10 of 256 leave 12 idle). On the shapes where the model then picks them,
# 1.022x faster (24 shapes, M = 384-3072) and 1.021x on 21 held out (M = 448-2560),
# 0.93-0.97x on 5 of the 45 (benchmarks/NOTES.md section 34). Not up to
# SWAP_TWO_TILES_MAX_M, where plain tiles of every width ran 0.976x (31 shapes; they
# displaced better swaps), nor for 64-row tiles (1.005x on 8).
FITTED_PLAIN_TILE_N = tuple(n for n in reversed(SM90_TILE_N) if min(PLAIN_TILE_N) < n < max(PLAIN_TILE_N)
                            and n not in PLAIN_TILE_N)
# Up to M = 64 (one 64-row tile row) the weight streams from HBM, and the tile columns
# set how many SMs stream it: 64x160 tiles give a 10240-row weight 64 CTAs on 132 SMs,
# 64x80 tiles 128. There the plain tiles also take the widths whose columns fill one
# or two waves (``_widths_filling_waves``), as cuBLAS's do (64x48 at 48x6144x4096,
# 64x32 at 64x4096x4096). Measured on 25 shapes of M = 24-64 whose plan changed: 1.035x
# faster in single calls, 1.065x in graph replays, 0.969x -> 1.003x of cuBLAS, none
# 3 % slower; on 22 held out 1.042x and 1.088x (benchmarks/NOTES.md section 43).
# Narrower than ONE_ROW_FITTED_MIN_N columns was not measured.
ONE_ROW_FITTED_MIN_N = 32
# Plain 192-row tiles where two of them hold M's rows and 128-row tiles would take
# three (M = 257-384), paired along M by a 2x1 cluster that multicasts the weight
# tile, in one wave of unsplit k-loops of at least ONE_WAVE_MIN_K_BLOCKS; rated
# TALL_TILES_GAIN faster, as the swapped tall tiles are. Three 128-row tile rows cannot
# all pair along M, so the model's plans there paired along N (1x2, sharing the
# tokens) or swapped A and B, and every CTA read its own copy of a weight tile.
# Measured (benchmarks/NOTES.md section 41): 192x96 in 2x1 clusters at
# 320/352/384x6144x4096 30.1/31.1/33.1 us against 32.6/33.3/34.0 for the plans
# before (128x160 and 128x144 in 1x2 clusters), 192x128 at 384x8192x8192 70.2 against
# 72.1. Not where they are narrower than 80 columns (192x64 at 320-384x4096: 0.85-0.9x
# of the swapped plans) nor past M = 384, where 192x128 and 192x192 tiles in three or
# four rows ran 0.87-0.93x of 128-row plans (576 and 640 x 4096 and 6144 x 4096).
PLAIN_TALL_TILE_M = 192
PLAIN_TALL_TILES_MIN_N = 80
SWAP_AB_MIN_GAIN = 0.95  # modelled time of the best swap / the best without
# A split needs enough k-blocks to fill its ring and amortise the fix-up.
MIN_K_BLOCKS_PER_SPLIT = 4
# Split the last wave's tiles only when there are at most this many waves.
MAX_WAVES_TO_SPLIT = 4


# Share of the SMs that clusters of 4 and 8 CTAs can fill at once. A cluster sits in
# one GPC, and the H200's GPCs do not all hold a multiple of 4 SMs: its driver fits
# 30 clusters of 4 and 15 of 8 (not 33 and 16), and 66 of 2
# (``wsgemm.api.max_active_clusters``, asked on the H200 in benchmarks/NOTES.md
# section 30). Pairs fit whole.
LARGE_CLUSTER_SLOT_SHARE = {4: 30 * 4 / 132, 8: 15 * 8 / 132}


def resident_clusters(sm_count: int, cluster_size: int) -> int:
    """Clusters of ``cluster_size`` CTAs the model assumes resident at once: one CTA per
    SM, less what the GPCs leave over for clusters of 4 and 8
    (``LARGE_CLUSTER_SLOT_SHARE``)."""
    share = LARGE_CLUSTER_SLOT_SHARE.get(cluster_size, 1.0)
    return max(1, int(sm_count * share) // cluster_size)


def estimate_seconds(m: int, n: int, k: int, batches: int, sm_count: int, tile_m: int, tile_n: int,
                     split_k: int = 1, model: ThroughputModel = H200, cluster_m: int = 1,
                     cluster_n: int = 1, split_paths_overlap: bool = False) -> float:
    """Modelled run time of one SM90 configuration on an ``sm_count``-SM GPU.

    With ``split_k > 1`` only the tiles of the last partial wave are split
    (``kernels/common/split_k.py``): full waves of whole tiles, then the split tail.
    A cluster pads the tile grid to whole clusters, and its CTAs share the operand
    tiles they have in common through multicast (one L2 read for the cluster). The
    CTAs resident at once share L2's bandwidth (``ThroughputModel.l2_bytes_per_s``).
    ``split_paths_overlap``: split work items, too, load an operand from HBM and one
    from L2 side by side (``_tile_seconds``), as swapped token tiles' do in one wave of
    splits (``SWAP_SPLIT_FILL_MIN_K_BLOCKS``). Over several waves the HBM time grows by
    what the last partial wave's fewer CTAs leave unpulled (``_last_wave_drain_seconds``).
    """
    cluster = cluster_m * cluster_n
    units = ceil_div(ceil_div(m, tile_m), cluster_m) * ceil_div(ceil_div(n, tile_n), cluster_n) * batches
    slots = resident_clusters(sm_count, cluster)
    tail = units % slots if split_k > 1 else 0
    k_blocks = ceil_div(k, TILE_K)
    work_items = units - tail + tail * split_k
    # One tile row (M <= tile_m): the weight streams from HBM, which the loads below
    # charge already, and the tokens' small A tile stays in L2. 64-row tiles over
    # several tile columns share L2 over any number of waves (see ONE_WAVE_MIN_K_BLOCKS).
    shares_l2 = m > tile_m and (_one_long_wave(work_items, slots, k_blocks)
                                or (tile_m == 64 and n > tile_n and k_blocks >= ONE_WAVE_MIN_K_BLOCKS))
    tile_seconds = functools.partial(_tile_seconds, m, n, tile_m=tile_m, tile_n=tile_n, model=model,
                                     cluster_m=cluster_m, cluster_n=cluster_n,
                                     resident_ctas=min(work_items, slots) * cluster if shares_l2 else None,
                                     paths_overlap=units <= slots if split_k == 1
                                     else split_paths_overlap and work_items <= slots,
                                     narrow_fill_free=split_k == 1 and units <= slots and max(tile_m, tile_n) == 64)
    busiest_sm = (units - tail) // slots * tile_seconds(k_blocks)
    after_stream = 0.0
    if tail:
        split_blocks = ceil_div(k_blocks, split_k)
        busiest_sm += ceil_div(tail * split_k, slots) * tile_seconds(split_blocks)
        # The last split stores nothing until it has read the others' fp32 tiles; the
        # others' stores run alongside.
        fixup = split_k * tile_m * tile_n * 4 / model.sm_l2_bytes_per_s + model.split_fixup_s
        busiest_sm += (split_k - 2) * model.split_fixup_per_extra_split_s
        if split_k == 2 and (m <= tile_m or n <= tile_n):
            # One tile of tokens in two splits: the splits stream the weight once, and
            # where HBM, not the SMs, sets that stream's pace, the fix-up still waits for
            # its last loads, so it follows the HBM time too. On weights of 48-64 tiles
            # of 64 rows the unsplit swap ran 1.10x faster than split 2 (benchmarks/
            # NOTES.md section 67). Not past two splits: on 32-40 tiles, 3 and 4 splits
            # still ran 2-9 % faster than one split fewer, which this charge would pick.
            after_stream = fixup
        else:
            busiest_sm += fixup
    elif units % slots:
        busiest_sm += tile_seconds(k_blocks)
    partial_bytes = (split_k - 1) * tail * cluster * tile_m * tile_n * 4 * 2  # written, then read back
    hbm = ((m * k + k * n) * 2 * batches + partial_bytes) / model.hbm_bytes_per_s
    if work_items > slots and work_items % slots:
        hbm += _last_wave_drain_seconds(hbm, work_items, slots)
    return max(busiest_sm, hbm) + after_stream


def _last_wave_drain_seconds(hbm_seconds: float, work_items: int, slots: int) -> float:
    """What a last partial wave adds to an HBM-paced stream of several waves: its fewer
    CTAs keep fewer loads in flight, so they pull less than HBM's full rate. Fitted on an
    H200 (benchmarks/NOTES.md section 69) over 1.7-3.6 waves of 64-row tiles at M = 128
    on 28672- and 37888-row weights: a last wave holding a share ``f`` of the slots took
    about (1 + f) / 2 of a full wave's time, not ``f`` of it. Without this term the
    model tied those plans at their HBM time, and the widest tile won the tie: 64x224
    in 2.6 waves ran 1.05-1.10x slower than 64x192 in three full ones. On the 9 shapes
    whose plan it changes (M = 12-128 on 27648-57344-row weights): 1.067x faster in
    single calls, 1.055x in graph replays."""
    share = work_items % slots / slots
    return hbm_seconds / (work_items / slots) * (1 - share) / 2


def _tile_seconds(m: int, n: int, k_blocks: int, tile_m: int, tile_n: int, model: ThroughputModel,
                  cluster_m: int = 1, cluster_n: int = 1, resident_ctas: int | None = None,
                  paths_overlap: bool = True, narrow_fill_free: bool = False) -> float:
    """One work item of ``k_blocks`` k-blocks: bound by its MMAs or its operand loads.
    ``resident_ctas``: in one wave of a long k-loop (or any wave of 64-row tiles), the
    CTAs that share L2's bandwidth with this one (``ONE_WAVE_MIN_K_BLOCKS``); ``None``:
    it reads at its port's rate. ``paths_overlap``: an operand from HBM and one from
    L2 load side by side, not one after the other (see ``loads`` below).
    ``narrow_fill_free``: its boxes of at most ``FREE_FILL_MAX_ROWS`` rows cost no
    zero fill (one wave of unsplit tiles 64 by 16 rows; see the constant)."""
    k_elems = k_blocks * TILE_K
    efficiency = mma_efficiency(tile_m, tile_n)
    if resident_ctas is not None and tile_m == 64 and tile_n >= 64 and k_blocks >= ONE_WAVE_MIN_K_BLOCKS:
        efficiency *= ONE_WAVE_64_ROW_GAIN
    mma = 2 * tile_m * tile_n * k_elems / (model.mma_flops_per_sm * efficiency)
    stage_bytes = (tile_m + tile_n) * TILE_K * 2
    stages = min(DEFAULT_MAX_STAGES, (model.smem_bytes - EPILOGUE_SMEM_BYTES) // stage_bytes)
    a_rows, b_rows = min(tile_m, m), min(tile_n, n)
    in_flight = stages * (a_rows + b_rows) * TILE_K * 2
    # An operand tile only this tile reads (the weight of a decode GEMM: one M tile)
    # streams from HBM; one that other tiles share is mostly an L2 hit.
    l2_rate = model.sm_l2_bytes_per_s
    if resident_ctas is not None:
        l2_rate = min(l2_rate, model.l2_bytes_per_s / resident_ctas)
    a_from_hbm, b_from_hbm = ceil_div(n, tile_n) == 1, ceil_div(m, tile_m) == 1
    a_rate = model.sm_hbm_bytes_per_s if a_from_hbm else l2_rate
    b_rate = model.sm_hbm_bytes_per_s if b_from_hbm else l2_rate
    a_rate, b_rate = (min(rate, in_flight / model.load_latency_s) for rate in (a_rate, b_rate))
    # Multicast: each CTA of a cluster row issues 1/cluster_n of the shared A tile, and
    # of a cluster column 1/cluster_m of the shared B tile.
    k_bytes = k_blocks * TILE_K * 2
    a_seconds, b_seconds = k_bytes * a_rows / cluster_n / a_rate, k_bytes * b_rows / cluster_m / b_rate
    # One operand streaming from HBM (the weight beside one tile of tokens) and the
    # other from L2 travel different paths into the same stages, so the slower sets
    # the pace; two operands from the same place queue for it. Summed, the model rated
    # swapped tiles holding all the tokens 1.6x too slow at M = 136-176: 64x176 at
    # 176x6144x4096 ran 21.5 us against 34.8 modelled. ``estimate_seconds`` asks for it
    # only in one wave of unsplit tiles: rated so, one token tile split 2-8 ways ran
    # 12-25 % slower than the pairs of token tiles it displaced, and over 3-7 waves
    # (57344-row weights) 2-12 % slower (benchmarks/NOTES.md section 40).
    overlap = paths_overlap and a_from_hbm != b_from_hbm
    loads = max(a_seconds, b_seconds) if overlap else a_seconds + b_seconds
    loads += (_zero_fill_seconds(k_bytes, tile_m, a_rows, model, narrow_fill_free)
              + _zero_fill_seconds(k_bytes, tile_n, b_rows, model, narrow_fill_free))
    return max(mma, loads)


def _zero_fill_seconds(k_bytes: int, box_rows: int, real_rows: int, model: ThroughputModel,
                       narrow_fill_free: bool = False) -> float:
    """What zero-filling an operand box's rows past the tensor's edge adds to a work
    item's loads, at ``model.oob_fill_bytes_per_s``: fitted where the box is all
    padding but a row (M = 1, unswapped: 64x64 tiles ~1.6x slower than at M = 64).
    A box of at most ``SHARE_SCALED_FILL_MAX_ROWS`` rows that is less than half padding
    costs that rate times its padding's share of the box, and with ``narrow_fill_free``
    (one wave of unsplit 64-row tiles) one of at most ``FREE_FILL_MAX_ROWS`` rows costs
    nothing (see the constants)."""
    if narrow_fill_free and box_rows <= FREE_FILL_MAX_ROWS:
        return 0.0
    padding_rows = box_rows - real_rows
    seconds = k_bytes * padding_rows / model.oob_fill_bytes_per_s
    if 2 * padding_rows < box_rows <= SHARE_SCALED_FILL_MAX_ROWS:
        seconds *= padding_rows / box_rows
    return seconds


def ranked_sm90_configs(m: int, n: int, k: int, batches: int, sm_count: int, can_swap: bool = False,
                        model: ThroughputModel = H200) -> list[tuple[float, GemmConfig]]:
    """Every candidate configuration with its modelled time, fastest first.

    ``can_swap``: the operands are 2-D and TMA-readable, so ``swap_ab`` (compute
    D^T = B^T A^T) is possible; it is considered for M <= ``SWAP_AB_MAX_M``, where the
    tokens fit one or two narrow N tiles instead of a mostly empty 64-row M tile, up
    to ``SWAP_TWO_TILES_MAX_M``, where two N tiles hold them with less padding than
    128-row M tiles, and up to ``SWAP_FOUR_TILES_MAX_M``, where four N tiles and the
    weight's 128-row tiles make one wave (up to ``SWAP_TALL_TILES_MAX_M`` also one N
    tile beside the weight's 192- or 256-row tiles, and up to ``SWAP_TALL_PAIRS_MAX_M``
    two paired beside 192-row ones, in one wave). Where the swap is declined,
    tall tiles may still displace the plain plan: two rows of plain 192-row tiles
    (``PLAIN_TALL_TILE_M``) or three token tiles beside 256-row weight tiles
    (``SWAP_THREE_TILES_MIN_M``), and so may two rows of 128-row tiles whose width
    fills one wave (``TWO_ROWS_FILLING_MIN_M``); on long k-loops token tiles split to
    fill one wave displace them all (``SWAP_SPLIT_FILL_MIN_K_BLOCKS``).
    """
    ranked = _plain_candidates(m, n, k, batches, sm_count, model)
    if can_swap and batches == 1 and m <= SWAP_MAX_M:
        swapped = _swapped_candidates(m, n, k, sm_count, model)
        if swapped and _swap_pays(swapped, ranked):
            return _break_ties(ranked + swapped)
    # After the swap is decided: tall tiles, plain or beside three token tiles, two rows
    # of 128-row tiles filling one wave and token tiles split to fill one wave were
    # measured faster than the plain plans they displace and slower than the swaps
    # (PLAIN_TALL_TILE_M, SWAP_THREE_TILES_MIN_M, TWO_ROWS_FILLING_MIN_M,
    # SWAP_SPLIT_FILL_MIN_K_BLOCKS).
    ranked = _break_ties(ranked + _two_rows_of_tall_tiles(m, n, k, batches, sm_count, model)
                         + _two_rows_filling_one_wave(m, n, k, batches, sm_count, model))
    if can_swap and batches == 1:
        # Measured faster than every plan it displaced, whatever the model's rates.
        filling = _token_tiles_split_to_fill_one_wave(m, n, k, sm_count, model)
        if filling:
            return filling + ranked
        three = _three_token_tiles_on_tall_weight_tiles(m, n, k, sm_count, model)
        if three and _swap_pays(three, ranked):
            return _break_ties(ranked + three)
    return ranked


def _swap_pays(swapped, plain) -> bool:
    """The fastest of ``swapped`` beats the fastest of ``plain`` by ``SWAP_AB_MIN_GAIN``:
    the transposed views cost host time on every call, so swap only for a clear gain."""
    return min(seconds for seconds, _ in swapped) < SWAP_AB_MIN_GAIN * min(seconds for seconds, _ in plain)


def candidates_to_time(m: int, n: int, k: int, batches: int, sm_count: int, can_swap: bool, count: int,
                       model: ThroughputModel = H200, tokens_up_to: int | None = None) -> list[GemmConfig]:
    """What ``config="autotune"`` times: ``count`` of the model's candidates; for decode
    shapes that can swap A and B, half of each kind, because the model's choice
    between them is its least reliable (the model kept 8B QKV at M = 1 unswapped;
    measured at M <= 8, swapped ran 18.6 us against 21.8 us; benchmarks/NOTES.md
    section 10; it keeps M = 1 on a 6144x8192 weight unswapped). Within a kind,
    :func:`_diverse` spreads the picks over tile shapes. For long runs that are not
    swapped, the last candidate is the model's first choice walking in raster bands
    (:func:`_banded_variant`).

    ``tokens_up_to``: the largest M the winner will serve (the autotuner's bucket
    bound); up to ``SWAP_AB_MAX_M`` swapped candidates' N tiles hold that many tokens,
    not just ``m``. Past it, up to ``SWAP_MAX_M``, they hold ``m``'s tokens in two or
    four tiles, as the default path's swaps do; at an M of the bucket that needs more
    token tiles than the winner was timed with, :func:`table_winner_or_model` serves
    the model's pick instead. The tall tiles that :func:`ranked_sm90_configs` weighs
    only after its swap decision are candidates here too, so that the default path's
    plan is among those timed.
    """
    plain = _break_ties(_plain_candidates(m, n, k, batches, sm_count, model)
                        + _two_rows_of_tall_tiles(m, n, k, batches, sm_count, model)
                        + _two_rows_filling_one_wave(m, n, k, batches, sm_count, model))
    swaps = can_swap and batches == 1 and m <= SWAP_MAX_M
    tokens = max(m, min(tokens_up_to or m, SWAP_AB_MAX_M)) if m <= SWAP_AB_MAX_M else m
    swapped = _swapped_candidates(tokens, n, k, sm_count, model) if swaps else []
    late = (_three_token_tiles_on_tall_weight_tiles(m, n, k, sm_count, model)
            + _token_tiles_split_to_fill_one_wave(m, n, k, sm_count, model)) if swaps else []
    swapped = _break_ties(swapped + late) if late else swapped
    if not swapped:
        banded = _banded_variant(plain[0][1], m, n, batches, sm_count)
        return _diverse(plain, count - 1) + [banded] if banded else _diverse(plain, count)
    half = min(count // 2, len(swapped))
    return _diverse(plain, count - half) + _diverse(swapped, half)


# Raster band width (``GemmConfig.swizzle``) the autotuner also tries for long runs,
# and which long grids get whatever was chosen (``LONG_GRID_MIN_M`` below).
# Walking all of M before moving along N re-reads A from HBM once per wave when a
# column of tiles holds more of A than L2 keeps; bands of 8 cluster columns keep a
# wave's A and B rows in L2. Measured on an H200 (NOTES section 17): 1-4 % faster in
# 12 of 23 LLM and square buckets (K = 4096 mostly), within 0.5 % in 8, and 6-13 %
# slower in 3 with long K at M = 16384, where a band's rows no longer fit L2. That
# depends on K and on what L2 keeps, so the autotuner tries it and the model does not
# (long grids get bands from the launch policy: ``LONG_GRID_MIN_M`` below).
BAND_CLUSTERS = 8


# Long grids walk in bands of ``BAND_CLUSTERS`` whatever was chosen
# (:func:`_with_long_grid_bands`). Walking all of M before moving along N re-reads A
# from HBM for every column of tiles, and back-to-back calls on an H200 run at its
# power limit (~690 W), where HBM traffic costs clock (benchmarks/NOTES.md section
# 35, calls back to back for 1 s):
# - M = 16384, the five LLM buckets whose table winners walked without bands: 1215-1320
#   MHz and 0.876-0.934x of torch.matmul; in bands of 8, 1384-1402 MHz and 0.970-1.001x
#   (+5 to +13 %); 16384^3 0.920x -> 1.020x;
# - M = 8192: 8192^3 0.994x -> 1.025x, and bands of 8 2-3 % ahead of none in three
#   LLM buckets whose table winners have them;
# - M = 4096: bands of 8 within -1.0 to +0.7 % of none (four buckets), so not there.
# In the suite's protocol (single calls after an L2 flush) the five M = 16384 buckets
# ran -2.8 % to +1.2 % (geometric mean -0.6 %), 8192^3 +4.2 %, 16384^3 +-0. Bands of
# 4 ran about 1 % behind 8 back to back. All of it unswapped, unbatched, at K >= 4096,
# on grids 16 or more cluster columns wide; elsewhere what was chosen is kept.
LONG_GRID_MIN_M = 8192
LONG_GRID_MIN_K_BLOCKS = 64
LONG_GRID_MIN_CLUSTER_COLUMNS = 2 * BAND_CLUSTERS


def _grid_walked_along_m(config: GemmConfig, m: int, n: int, batches: int, sm_count: int) -> TileGrid | None:
    """``config``'s tile grid where it walks along M over at least two waves (where the
    order of the walk decides what L2 keeps), else ``None``."""
    if config.raster != Raster.ALONG_M:
        return None
    grid = TileGrid.for_problem(m, n, batches, config)
    return grid if grid.units >= 2 * resident_clusters(sm_count, config.cluster_size) else None


def _with_long_grid_bands(config: GemmConfig, m: int, n: int, k_blocks: int, batches: int,
                          sm_count: int) -> GemmConfig:
    """``config`` walking in bands of ``BAND_CLUSTERS`` cluster columns where it would
    walk all of M (at least ``LONG_GRID_MIN_M`` rows) before moving along N, with
    k-loops of at least ``LONG_GRID_MIN_K_BLOCKS``, over a grid at least
    ``LONG_GRID_MIN_CLUSTER_COLUMNS`` cluster columns wide and two waves long; else
    ``config``, whose band width, if the autotuner or the table chose one, is kept.
    Unswapped, unbatched problems only (as measured)."""
    if (config.swap_ab or batches != 1 or config.swizzle != 1 or m < LONG_GRID_MIN_M
            or k_blocks < LONG_GRID_MIN_K_BLOCKS):
        return config
    grid = _grid_walked_along_m(config, m, n, batches, sm_count)
    if grid is None or grid.clusters_n < LONG_GRID_MIN_CLUSTER_COLUMNS:
        return config
    return dataclasses.replace(config, swizzle=BAND_CLUSTERS)


def _banded_variant(config: GemmConfig, m: int, n: int, batches: int, sm_count: int) -> GemmConfig | None:
    """``config`` walking the output in bands of ``BAND_CLUSTERS`` cluster columns,
    where its tile grid is long enough along M for the order to matter: at least two
    waves, and columns of more than a band's worth of cluster rows."""
    grid = _grid_walked_along_m(config, m, n, batches, sm_count)
    if grid is None or grid.clusters_m <= BAND_CLUSTERS:
        return None
    return dataclasses.replace(config, swizzle=BAND_CLUSTERS)


def _diverse(ranked, count: int) -> list[GemmConfig]:
    """``count`` configs of a ranked list: the best of each tile and cluster shape in
    turn, each with its unsplit variant, then the rest in rank order. The model ranks
    memory-bound shapes least well (at M = 64 it put every split ahead of the
    unsplit 64-wide tile that measured fastest; NOTES section 13), and the shape of
    the tile matters more than the split."""
    configs = [c for _, c in ranked]
    picked, shapes = [], set()
    for c in configs:
        shape = (c.tile_m, c.tile_n, c.cluster_m, c.cluster_n)
        if shape in shapes:
            continue
        shapes.add(shape)
        unsplit = dataclasses.replace(c, split_k=1)
        picked += [c] + ([unsplit] if unsplit != c and unsplit in configs else [])
    picked += [c for c in configs if c not in picked]
    return picked[:count]


def _plain_candidates(m, n, k, batches, sm_count, model):
    # 64-row tiles up to M = 1024. At M = 128 two of them (paired by a cluster that
    # multicasts the weight) keep twice the SMs streaming as one 128-row tile. Up to
    # M = 1024 they also beat the 128-row tiles of half their width, whose narrower
    # wgmmas read more shared memory per FLOP, and the splits those got: on an H200
    # the model's 64-row picks at M = 384-1024 (N = 1024-2048, K = 1024) ran 1.06-1.89x
    # faster than its 128-row picks (benchmarks/NOTES.md section 24).
    tile_ms = (64,) if m <= 64 else (64, 128) if m <= 1024 else (128,)
    ranked = list(_candidates(m, n, k, batches, sm_count, tile_ms, PLAIN_TILE_N, False, model))
    if m <= 64:  # one tile row: widths that fill the waves (see ONE_ROW_FITTED_MIN_N)
        ranked += _candidates(m, n, k, batches, sm_count, (64,), _widths_filling_waves(n, batches, sm_count), False,
                              model)
    if m > SWAP_TWO_TILES_MAX_M and 128 in tile_ms:
        ranked += _candidates(m, n, k, batches, sm_count, (128,), FITTED_PLAIN_TILE_N, False, model)
    return _break_ties(ranked)


def _widths_filling_waves(n, batches, sm_count):
    """The narrowest tile widths (multiples of 16, at least ``ONE_ROW_FITTED_MIN_N``)
    whose columns of one tile row, over ``batches``, make at most one or two waves;
    those ``PLAIN_TILE_N`` already holds left out."""
    widths = {_narrowest_width(n * batches, waves * sm_count) for waves in (1, 2)}
    return tuple(sorted(width for width in widths
                        if ONE_ROW_FITTED_MIN_N <= width <= max(SM90_TILE_N) and width not in PLAIN_TILE_N))


def _two_rows_of_tall_tiles(m, n, k, batches, sm_count, model):
    """Plain candidates of ``PLAIN_TALL_TILE_M``-row tiles at an M that two of them
    hold and two 128-row tiles do not, alone or paired along M, whose unsplit k-loops
    of at least ``ONE_WAVE_MIN_K_BLOCKS`` make one wave; their rates taken
    ``TALL_TILES_GAIN`` times ``model``'s. Unbatched only (as measured)."""
    if not 2 * 128 < m <= 2 * PLAIN_TALL_TILE_M or batches != 1 or ceil_div(k, TILE_K) < ONE_WAVE_MIN_K_BLOCKS:
        return []
    # Three warpgroups' registers hold at most m64n192 (``config.sm90_registers_fit``).
    widths = tuple(width for width in PLAIN_TILE_N + FITTED_PLAIN_TILE_N if PLAIN_TALL_TILES_MIN_N <= width
                   and sm90_registers_fit(GemmConfig(tile_m=PLAIN_TALL_TILE_M, tile_n=width)))
    measured = _tall_tile_rates(model)
    return [(seconds, c) for seconds, c in _candidates(m, n, k, 1, sm_count, (PLAIN_TALL_TILE_M,), widths, False,
                                                       measured)
            if c.split_k == 1 and c.cluster_n == 1 and _in_one_wave(m, n, c, sm_count)]


def _two_rows_filling_one_wave(m, n, k, batches, sm_count, model):
    """Plain candidates of two rows of 128-row tiles (``TWO_ROWS_FILLING_MIN_M`` to 256
    tokens) in 2x1 clusters, in the width (a multiple of 16) whose columns fill one wave
    of the pairs, unsplit, for k-loops of at least ``ONE_WAVE_MIN_K_BLOCKS``; their
    rates taken ``TWO_ROWS_FILLING_GAIN`` times ``model``'s. Unbatched only (as
    measured)."""
    if not TWO_ROWS_FILLING_MIN_M <= m <= 2 * 128 or batches != 1 or ceil_div(k, TILE_K) < ONE_WAVE_MIN_K_BLOCKS:
        return []
    width = _narrowest_width(n, resident_clusters(sm_count, 2))
    if not min(PLAIN_TILE_N) < width <= max(PLAIN_TILE_N):
        return []
    measured = _rates_scaled(model, TWO_ROWS_FILLING_GAIN, "mma_flops_per_sm", "sm_l2_bytes_per_s", "l2_bytes_per_s")
    return [(seconds, c) for seconds, c in _candidates(m, n, k, 1, sm_count, (128,), (width,), False, measured)
            if c.split_k == 1 and (c.cluster_m, c.cluster_n) == (2, 1) and _in_one_wave(m, n, c, sm_count)]


def _swapped_candidates(m, n, k, sm_count, model):
    """D^T = B^T A^T: the weight's N on the 64/128-row side, the tokens in the narrow N
    tile. Either one N tile holds every token, or two 64- or 96-wide ones do and a 2-CTA
    cluster multicasts each weight tile to both: the L2 cannot keep a whole weight
    matrix between two separate visits, so a weight tile must be read once. (Pairs of
    16- and 32-wide tiles measured 1.2-1.8x slower than one tile: their halves of a
    weight tile are too small a copy.) Past ``SWAP_AB_MAX_M`` one or two tiles fitted
    to the tokens (``SWAP_TWO_TILES_MAX_M``, :func:`fitted_token_tile`), for work
    items long enough (``SWAP_TWO_TILES_MIN_K_BLOCKS``)."""
    if m <= SWAP_AB_MAX_M:
        narrow = [t for t in SWAP_TILE_N if t >= m][:1] + [t for t in SWAP_TILE_N if 64 <= t < m <= 2 * t][:1]
    elif m <= SWAP_TWO_TILES_MAX_M:
        narrow = [t for t in (fitted_token_tile(m, 1), fitted_token_tile(m, 2)) if t in SM90_TILE_N]
    else:
        narrow = []
    min_item_k_blocks = SWAP_TWO_TILES_MIN_K_BLOCKS if m > SWAP_AB_MAX_M else 1
    candidates = list(_candidates(n, m, k, 1, sm_count, (64, 128), tuple(narrow), True, model, min_item_k_blocks))
    fitted = _one_fitted_token_tile(m, n, k, sm_count, model)
    refitted = {config for _, config in fitted}  # plans above that the family rates anew
    candidates = [item for item in candidates if item[1] not in refitted] + fitted
    candidates += _four_token_tiles(m, n, k, sm_count, model)
    candidates += _one_token_tile_on_tall_weight_tiles(m, n, k, sm_count, model)
    candidates += _two_token_tiles_on_tall_weight_tiles(m, n, k, sm_count, model)
    return _break_ties(candidates) if candidates else []


def _token_tiles_split_to_fill_one_wave(m, n, k, sm_count, model):
    """The swapped candidate of ``SWAP_SPLIT_FILL_LAYOUTS`` (one token tile fitted to
    ``m`` beside 128-row weight tiles, or two beside 192-row ones paired in a 1x2
    cluster) whose k-loops, split as many ways (up to ``SWAP_SPLIT_FILL_MAX_SPLIT``) as
    one wave holds, keep the most SMs working, at least ``SWAP_SPLIT_FILL_MIN_SMS`` of
    them; past ``SWAP_AB_MAX_M`` up to ``SWAP_SPLIT_FILL_MAX_M`` tokens, for k-loops of
    at least ``SWAP_SPLIT_FILL_MIN_K_BLOCKS``. Rated with the weight's and the tokens'
    loads side by side."""
    k_blocks = ceil_div(k, TILE_K)
    if not SWAP_AB_MAX_M < m <= SWAP_SPLIT_FILL_MAX_M or k_blocks < SWAP_SPLIT_FILL_MIN_K_BLOCKS:
        return []
    layouts = []
    for weight_m, token_tiles in SWAP_SPLIT_FILL_LAYOUTS:
        clusters = ceil_div(n, weight_m)
        split = min(SWAP_SPLIT_FILL_MAX_SPLIT, resident_clusters(sm_count, token_tiles) // clusters)
        ctas = clusters * token_tiles * split
        if split >= 2 and ctas >= SWAP_SPLIT_FILL_MIN_SMS * sm_count:
            layouts.append((ctas, -token_tiles, weight_m, token_tiles, split))  # ties: one token tile
    if not layouts:
        return []
    _, _, weight_m, token_tiles, split = max(layouts)
    token_tile = fitted_token_tile(m, token_tiles)
    seconds = estimate_seconds(n, m, k, 1, sm_count, weight_m, token_tile, split, model, cluster_n=token_tiles,
                               split_paths_overlap=True)
    return [(seconds, GemmConfig(tile_m=weight_m, tile_n=token_tile, tile_k=TILE_K, cluster_n=token_tiles,
                                 raster=Raster.ALONG_M, swizzle=1, split_k=split, swap_ab=True))]


def _one_fitted_token_tile(m, n, k, sm_count, model):
    """Swapped candidates of one token tile fitted to ``m`` (up to ``FITTED_SWAP_MAX_M``
    tokens) beside ``FITTED_SWAP_WEIGHT_TILE_M``-row weight tiles in 1x1 clusters, whose
    tiles and splits make one wave; rated with ``FITTED_SWAP_HBM_GAIN`` times
    ``model``'s per-SM HBM rate."""
    if m > FITTED_SWAP_MAX_M:
        return []
    token_tile = fitted_token_tile(m, 1)
    measured = _rates_scaled(model, FITTED_SWAP_HBM_GAIN, "sm_hbm_bytes_per_s")
    slots = resident_clusters(sm_count, 1)
    return [(seconds, config) for seconds, config in _candidates(n, m, k, 1, sm_count, (FITTED_SWAP_WEIGHT_TILE_M,),
                                                                   (token_tile,), True, measured)
            if config.cluster_size == 1 and ceil_div(n, config.tile_m) * config.split_k <= slots]


def _four_token_tiles(m, n, k, sm_count, model):
    """Swapped candidates whose four token tiles (fitted to ``m``, paired in 1x2
    clusters) and 128-row weight tiles make one wave of unsplit k-loops of at least
    ``ONE_WAVE_MIN_K_BLOCKS``, from ``SWAP_FOUR_TILES_MIN_M`` to
    ``SWAP_FOUR_TILES_MAX_M`` tokens; their MMA and L2 rates taken ``SWAP_FOUR_TILES_GAIN``
    times ``model``'s."""
    if not SWAP_FOUR_TILES_MIN_M <= m <= SWAP_FOUR_TILES_MAX_M or ceil_div(k, TILE_K) < ONE_WAVE_MIN_K_BLOCKS:
        return []
    token_tiles, weight_tile = 4, 128
    if ceil_div(n, weight_tile) * token_tiles > 2 * resident_clusters(sm_count, 2):
        return []  # more than one wave of pairs
    measured = _rates_scaled(model, SWAP_FOUR_TILES_GAIN, "mma_flops_per_sm", "l2_bytes_per_s")
    return _unsplit_swaps(m, n, k, sm_count, (weight_tile,), fitted_token_tile(m, token_tiles), measured)


def _one_token_tile_on_tall_weight_tiles(m, n, k, sm_count, model):
    """Swapped candidates whose one token tile (fitted to ``m``, past ``SWAP_AB_MAX_M``
    up to ``SWAP_TALL_TILES_MAX_M``) sits beside weight tiles of ``SWAP_TALL_TILE_M``
    rows, unsplit, in one wave of k-loops of at least ``ONE_WAVE_MIN_K_BLOCKS``; their
    rates taken ``TALL_TILES_GAIN`` times ``model``'s."""
    if not SWAP_AB_MAX_M < m <= SWAP_TALL_TILES_MAX_M or ceil_div(k, TILE_K) < ONE_WAVE_MIN_K_BLOCKS:
        return []
    one_wave = tuple(rows for rows in SWAP_TALL_TILE_M if ceil_div(n, rows) <= sm_count)
    if not one_wave:
        return []
    measured = _tall_tile_rates(model)
    return _unsplit_swaps(m, n, k, sm_count, one_wave, fitted_token_tile(m, 1), measured)


def _two_token_tiles_on_tall_weight_tiles(m, n, k, sm_count, model):
    """Swapped candidates whose two token tiles (fitted to ``m``, past ``SWAP_AB_MAX_M``
    up to ``SWAP_TALL_PAIRS_MAX_M``) sit beside ``SWAP_TALL_PAIRS_TILE_M``-row weight
    tiles, paired in 1x2 clusters, in one wave of unsplit k-loops of
    ``ONE_WAVE_MIN_K_BLOCKS`` to ``SWAP_TALL_PAIRS_MAX_K_BLOCKS`` whose CTAs fill at
    least ``SWAP_TALL_PAIRS_MIN_FILL`` of the SMs; their rates taken
    ``TALL_TILES_GAIN`` times ``model``'s."""
    k_blocks = ceil_div(k, TILE_K)
    if not SWAP_AB_MAX_M < m <= SWAP_TALL_PAIRS_MAX_M or not (
            ONE_WAVE_MIN_K_BLOCKS <= k_blocks <= SWAP_TALL_PAIRS_MAX_K_BLOCKS):
        return []
    if 2 * ceil_div(n, SWAP_TALL_PAIRS_TILE_M) < SWAP_TALL_PAIRS_MIN_FILL * sm_count:
        return []
    return _tall_swaps_in_one_wave(m, n, k, sm_count, model, SWAP_TALL_PAIRS_TILE_M, 2)


def _three_token_tiles_on_tall_weight_tiles(m, n, k, sm_count, model):
    """Swapped candidates whose three token tiles (fitted to ``m``, from
    ``SWAP_THREE_TILES_MIN_M`` to ``SWAP_THREE_TILES_MAX_M`` tokens) sit beside
    ``SWAP_THREE_TILES_WEIGHT_TILE_M``-row weight tiles, alone or paired along the
    weight (sharing a token tile), in one wave of unsplit k-loops of at least
    ``ONE_WAVE_MIN_K_BLOCKS``; their rates taken ``TALL_TILES_GAIN`` times ``model``'s."""
    if not SWAP_THREE_TILES_MIN_M <= m <= SWAP_THREE_TILES_MAX_M or ceil_div(k, TILE_K) < ONE_WAVE_MIN_K_BLOCKS:
        return []
    return _tall_swaps_in_one_wave(m, n, k, sm_count, model, SWAP_THREE_TILES_WEIGHT_TILE_M, 3)


def _tall_swaps_in_one_wave(m, n, k, sm_count, model, weight_tile, token_tiles):
    """Unsplit swaps of ``token_tiles`` token tiles fitted to ``m`` beside
    ``weight_tile``-row weight tiles whose clusters all run at once, at the tall
    tiles' rates (:func:`_tall_tile_rates`)."""
    swaps = _unsplit_swaps(m, n, k, sm_count, (weight_tile,), fitted_token_tile(m, token_tiles),
                           _tall_tile_rates(model))
    return [(seconds, c) for seconds, c in swaps if _in_one_wave(n, m, c, sm_count)]


def _tall_tile_rates(model: ThroughputModel) -> ThroughputModel:
    """``model`` with every rate a tall tile (192 or 256 rows) uses ``TALL_TILES_GAIN``
    times faster: swapped or plain, they ran that much faster than rated."""
    return _rates_scaled(model, TALL_TILES_GAIN, "mma_flops_per_sm", "sm_hbm_bytes_per_s", "sm_l2_bytes_per_s",
                         "l2_bytes_per_s")


def _in_one_wave(kernel_m: int, kernel_n: int, config: GemmConfig, sm_count: int) -> bool:
    """``config``'s clusters over the kernel's (``kernel_m``, ``kernel_n``) problem all run at once."""
    return TileGrid.for_problem(kernel_m, kernel_n, 1, config).units <= resident_clusters(sm_count,
                                                                                          config.cluster_size)


def _rates_scaled(model: ThroughputModel, gain: float, *rates: str) -> ThroughputModel:
    """``model`` with the named rates ``gain`` times faster: plans measured to run
    faster than the model rates them."""
    return dataclasses.replace(model, **{rate: getattr(model, rate) * gain for rate in rates})


def _unsplit_swaps(m, n, k, sm_count, weight_tiles, token_tile, model):
    """Swapped candidates (the weight's ``n`` rows in ``weight_tiles``-row tiles, the
    tokens in ``token_tile``-wide ones) whose k-loops are whole."""
    return [(seconds, config) for seconds, config in _candidates(n, m, k, 1, sm_count, weight_tiles, (token_tile,),
                                                                   True, model) if config.split_k == 1]


def fitted_token_tile(m: int, tiles: int) -> int:
    """The narrowest swapped N tile of which ``tiles`` hold ``m`` tokens."""
    return _narrowest_width(m, tiles)


def _narrowest_width(extent: int, tiles: int) -> int:
    """The narrowest N tile (a multiple of ``SM90_TILE_N_STEP``, the epilogue's step) of
    which ``tiles`` cover ``extent`` columns."""
    return ceil_div(ceil_div(extent, tiles), SM90_TILE_N_STEP) * SM90_TILE_N_STEP


def _break_ties(ranked):
    """Fastest first; ties (within 2 %) go to no split, then to the wider tile (less
    workspace, fewer stores), then to the larger cluster (less L2 traffic)."""
    ranked.sort(key=lambda item: item[0])
    best = ranked[0][0]
    close = [item for item in ranked if item[0] <= best * 1.02]
    close.sort(key=lambda item: (item[1].split_k, -item[1].tile_n, -item[1].cluster_size))
    return close + [item for item in ranked if item[0] > best * 1.02]


def _candidates(m, n, k, batches, sm_count, tile_ms, tile_ns, swap_ab, model, min_item_k_blocks=1):
    """(modelled seconds, config) of each tile, cluster and split for the kernel's own M, N,
    whose work items (whole or split k-loops) have at least ``min_item_k_blocks`` k-blocks."""
    k_blocks = ceil_div(k, TILE_K)
    for tile_m in tile_ms:
        for tile_n in tile_ns:
            tiles_m, tiles_n = ceil_div(m, tile_m), ceil_div(n, tile_n)
            for cluster_m, cluster_n in _clusters(tile_m, tiles_m, tiles_n, swap_ab):
                units = ceil_div(tiles_m, cluster_m) * ceil_div(tiles_n, cluster_n) * batches
                slots = resident_clusters(sm_count, cluster_m * cluster_n)
                if cluster_n > 1 and not swap_ab and not _one_long_wave(units, slots, k_blocks):
                    continue  # see _clusters
                tail = units % slots  # the last partial wave: all of them below one wave
                for split in SPLITS:
                    # Split only to fill idle SMs, within one wave: past it, every extra
                    # wave of splits adds fp32 partial tiles to write and read back
                    # (measured: 112 tiles split 8 ways ran 2.5x slower than unsplit).
                    # Past a few waves the tail is a few percent of the run, inside the
                    # model's error and the jitter that already evens out the waves.
                    if split > 1 and (tail == 0 or tail * split > slots or units > MAX_WAVES_TO_SPLIT * slots
                                      or k_blocks < split * MIN_K_BLOCKS_PER_SPLIT):
                        continue
                    if ceil_div(k_blocks, split) < min_item_k_blocks:
                        continue
                    seconds = estimate_seconds(m, n, k, batches, sm_count, tile_m, tile_n, split, model,
                                               cluster_m, cluster_n)
                    yield seconds, GemmConfig(tile_m=tile_m, tile_n=tile_n, tile_k=TILE_K, cluster_m=cluster_m,
                                              cluster_n=cluster_n, raster=Raster.ALONG_M, swizzle=1,
                                              split_k=split, swap_ab=swap_ab)


def _clusters(tile_m, tiles_m, tiles_n, swap_ab):
    """Cluster shapes worth modelling. Plain: B (the weight) is multicast along M, so
    pair M tiles when there are two or more (measured at M = 96-512: 3-14 % faster than
    unpaired; NOTES section 13). Clusters along N also multicast A, where there are
    two tile rows or more: 2x2, and 1x2 for 128-row tiles over three rows or more (over
    two, pairing the rows reads each weight tile once: 1x2 ran 0.73-0.98x as fast as
    2x1 at M = 176-256, NOTES sections 49 and 51). ``_candidates`` keeps them only
    where the clusters fit one wave of a long k-loop (``ONE_WAVE_MIN_K_BLOCKS``),
    where L2 binds: at 320-384x2560x8192, 64x128 tiles in 2x2 clusters ran 1.2x
    faster than the 128x128 split tiles the model chose before, and cuBLAS runs
    such shapes in 4x2 and 1x2 clusters. Past one wave 2x2 clusters ran 9 % slower
    than 1x2 at 8192x8192 with K <= 512 (``results/sweep_shortk.json.gz``, section
    18's sweep); 64-row tiles in 1x2 clusters, whose A box is 8 KB a k-block, ran up
    to 1.2x slower than unclustered ones (NOTES section 30). Swapped: the weight is
    A, multicast along N; two or four N tiles of tokens are always paired (see
    ``_swapped_candidates``, two beside tall weight tiles too); tall weight tiles
    beside one or three token tiles may pair along M, sharing one."""
    if swap_ab:
        if tiles_n in (2, 4):
            return [(1, 2)]
        if tile_m in SWAP_TALL_TILE_M and tiles_m >= 2:
            return [(1, 1), (2, 1)]  # one or three token tiles: pairs of weight tiles share one
        return [(1, 1)]
    along_m = [(1, 1), (2, 1)] if tiles_m >= 2 else [(1, 1)]
    if tiles_m < 2 or tiles_n < 2:
        return along_m
    return along_m + [(cluster_m, 2) for cluster_m, _ in along_m
                      if cluster_m == 2 or (tile_m == 128 and tiles_m > 2)]


def choose_config(arch: str, m: int, n: int, k: int, batches: int, sm_count: int,
                  can_swap: bool = False) -> GemmConfig:
    if arch == "sm100":
        return _choose_sm100(m, n, batches, sm_count)
    return ranked_sm90_configs(m, n, k, batches, sm_count, can_swap)[0][1]


# A packaged winner (``wsgemm.tuned_table``) was measured at its bucket's largest M,
# the suites' own M, and serves every M down to half of it. How many waves its tiles
# make moves with M: at 1536x4096x4096 the M = 2048 winner (128x256 in 2x1 clusters,
# 96 clusters for 66 slots) ran 1.30x slower than the model's 128x192 tiles (132
# clusters, two full waves), which the model had predicted (1.30x). Past this loss,
# relative to the winner's modelled standing where it was measured, the model's pick
# serves the M instead (benchmarks/NOTES.md section 26).
TABLE_WAVE_LOSS_MAX = 1.05


def table_winner_or_model(measured: GemmConfig, measured_m: int, m: int, n: int, k: int, batches: int,
                          sm_count: int, can_swap: bool = False,
                          model: ThroughputModel = H200) -> GemmConfig:
    """The packaged winner ``measured`` (timed at M = ``measured_m``) for the kernel's
    (``m``, ``n``, ``k``, ``batches``) problem, unless the model puts it more than
    ``TABLE_WAVE_LOSS_MAX`` further behind its own best here than at ``measured_m``;
    then the model's best. Only past ``SWAP_AB_MAX_M``: below it the problems are
    memory-bound, where the model ranks least well. A swapped winner gives way at any
    M that needs more token tiles than it was timed with (an autotuned two- or
    four-tile swap serves only up to the M of its tiles, ``candidates_to_time``).

    What changes with M is how the tiles fill the waves. The M = 512 winners of five
    Llama-3 weights fill one wave with 128 CTAs over 4 tile rows, and leave 36 of 132
    SMs idle over the 3 rows of M = 257-384; there the model's picks (128x192 and
    128x160 tiles in 1x2 clusters, 64x192 in 2x1) ran 1.07-1.25x faster on each of 30
    shapes, 1.18x in the geometric mean (benchmarks/NOTES.md section 31; up to
    M = 320 its picks now swap A and B, faster again, section 32). Until its
    one-wave L2 share (section 30) the model ranked one-wave tiles badly, and the
    winners of one wave were kept at every M of their bucket (section 26)."""
    if measured.swap_ab and ceil_div(m, measured.tile_n) > ceil_div(measured_m, measured.tile_n):
        # More token tiles than it was timed with, the last of them in a half-empty
        # cluster: a swap of two or four tiles timed at a smaller M of the bucket.
        return ranked_sm90_configs(m, n, k, batches, sm_count, can_swap, model)[0][1]
    if m == measured_m or m <= SWAP_AB_MAX_M or measured.swap_ab:
        return measured

    def loss(at_m: int) -> tuple[float, GemmConfig]:
        best_seconds, best = ranked_sm90_configs(at_m, n, k, batches, sm_count, can_swap, model)[0]
        launched = _without_half_empty_clusters(measured, at_m)
        seconds = estimate_seconds(at_m, n, k, batches, sm_count, launched.tile_m, launched.tile_n,
                                   launched.split_k, model, launched.cluster_m, launched.cluster_n)
        return seconds / best_seconds, best

    here, best = loss(m)
    there, _ = loss(measured_m)
    return best if here > TABLE_WAVE_LOSS_MAX * there else measured


# Stream the last partial wave (``GemmConfig.stream_k``) from this many whole waves
# up. Measured on an H200 (benchmarks/NOTES.md section 16): with 7.8-31 waves of
# 128x256 tiles, 0.3-3.6 % faster (8192^3: 2.0 %); with 2-4 waves, where the
# streamed wave is a quarter to a half of the run, slower: up to 9 % in the LLM
# suite's ablation (``results/streamk_ablation_llm.json.gz``), and 91.1 -> 106.1 us
# in single calls at 2048x4096x4096 (1.9 waves).
STREAM_K_MIN_WAVES = 6
# ... and only for tiles whose k-loop is at least this many k-blocks (K >= 4096 with
# 64-deep blocks). A streamed tile's pieces meet through fp32 partial tiles (128 KB
# for 128x256), which cost more than the idle last wave saves when the k-loop is
# short: on an H200, streaming 128x256 c2x1 tiles was 9 % slower at K = 128, 5 % at
# K = 512, 2 % at K = 1024-2048 and 2 % faster at 8192^3 (NOTES section 18).
STREAM_K_MIN_K_BLOCKS = 64
# Ping-pong consumers (``GemmConfig.pingpong``) for k-loops of at most this many
# k-blocks (K <= 1536), where a tile's epilogue is long against its mainloop and
# cooperative consumers leave the tensor cores idle through it. Measured on an H200
# (benchmarks/NOTES.md section 19), 128x192 ping-pong against the default's 128x256
# cooperative tiles at 8192x8192: 17 % faster at K = 512, 9 % at 1024, 7 % at 1536,
# 1 % at 2048 (within the noise) and 3 % at 3072 and 8192.
PINGPONG_MAX_K_BLOCKS = 24
# ... 128x128 tiles up to this many (K <= 128): 2-5 % faster there than 128x192.
PINGPONG_NARROW_MAX_K_BLOCKS = 2
# Relative speed per filled SM of the 128-row ping-pong tiles (fitted at 8192x8192,
# K = 512 and 1024, to the measured ratio after the waves): a 64-row wgmma of a
# 128-wide tile reads 12 % more shared memory per FLOP than one of a 192-wide tile.
PINGPONG_TILE_SPEED = {192: 1.0, 128: 0.93}
# ... and only for tile grids of at least this many waves: a warpgroup's epilogue
# overlaps the other's mainloop only on an SM that runs two tiles or more.
PINGPONG_MIN_WAVES = 2
# Tile rows up to which an odd count makes 2x1 clusters lose: measured at 3 (slower;
# by 2-4 % since the producer skips all-padding boxes), 5 (within 2.5 %) and 7 (as
# fast or faster).
PADDED_CLUSTER_MAX_ROWS = 3
# One warpgroup per tile for k-loops that fill one wave of 128x128 tiles: a
# ping-pong CTA with a single tile runs it on one warpgroup (the other idles). On an
# H200 (benchmarks/NOTES.md section 21), with 128-132 such tiles: 1-3 % faster than
# two cooperative warpgroups sharing each tile at K = 2048-6144 (three repeats) and
# 3-5 % at K >= 8192; 8-14 % faster than the split 128x256 tiles the model chose
# at K = 5120-16384.
SOLO_TILE_MIN_K_BLOCKS = 32
# ... when the tiles fill at least this share of the CTAs (fewer leave SMs idle that
# a split would use: 64 tiles at 256x4096x14336 ran 30 % slower than split-K).
SOLO_TILE_MIN_FILL = 0.9
# One wave of 64x128 tiles over at least this many rows reads each operand tile into
# many CTAs, mostly from L2 (:func:`_one_wave_of_shared_tiles`) ...
SHARED_TILES_MIN_M = 512
# ... and in 2x1 clusters runs a ring of this depth instead of as deep as fits (9):
# see :func:`_with_ring_for_shared_tiles`.
SHARED_TILES_RING_STAGES = 7
# One wave of 64x128 tiles at M >= SHARED_TILES_MIN_M takes clusters of 8 where
# they also make one wave and its tiles fill at least this share of the CTAs the
# resident clusters of 8 hold (96 of 120 on an H200; measured at 96-120 tiles): see
# :func:`_with_clusters_of_eight`.
CLUSTERS_OF_EIGHT_MIN_FILL = 0.8
# Swapped weight tiles of this many rows beside one token tile, in pairs that make one
# wave, run in clusters of TALL_SWAP_CLUSTER_M along the weight instead: see
# :func:`_with_tall_swaps_in_fours`.
TALL_SWAP_QUAD_TILE_M = 256
TALL_SWAP_CLUSTER_M = 4


def with_launch_policy(arch: str, config: GemmConfig, m: int, n: int, k: int, batches: int,
                       sm_count: int) -> GemmConfig:
    """How a configuration wsgemm chose (table, model or autotuner; a caller's config
    is used as given) is launched on the kernel's own (``m``, ``n``, ``k``,
    ``batches``) problem: one warpgroup per tile for one wave of tiles, ping-pong
    consumers for short k-loops, stream-K for the last wave of a long run, raster
    bands for long grids, and programmatic dependent launch
    (``GemmConfig.dependent_launch``).

    **One warpgroup per tile** (:func:`_solo_tile_variant`): where 128x128 tiles in
    2x1 clusters fill one wave (at least ``SOLO_TILE_MIN_FILL`` of the CTAs, none
    left for a second) and the k-loop has at least ``SOLO_TILE_MIN_K_BLOCKS``
    k-blocks, those tiles on ping-pong consumers, whatever was chosen: each CTA runs
    its one tile on one warpgroup, unsplit.

    **No half-empty clusters** (:func:`_without_half_empty_clusters`): 2x1 clusters
    of 128-row tiles over one or three tile rows run unclustered.

    **Ping-pong consumers** (:func:`pingpong_variant`) for k-loops of at most
    ``PINGPONG_MAX_K_BLOCKS`` over at least ``PINGPONG_MIN_WAVES`` waves of tiles, for
    unbatched problems: batched ones measured (with 128x128 ping-pong tiles) from 4 %
    slower (L = 64, 512x512x512) to 1 % faster (L = 64, 1024x1024x128).

    **Stream-K** from ``STREAM_K_MIN_WAVES`` whole waves up, when the last wave is
    partial: its tiles' k-blocks are dealt out over every SM instead of leaving the
    SMs without a tile idle for a whole tile-time (kernels/common/stream_k.py); not
    for k-loops shorter than ``STREAM_K_MIN_K_BLOCKS``, nor where K is too long for
    the kernel's 32-bit stream-K arithmetic.

    **Raster bands** for long grids (:func:`_with_long_grid_bands` has the rule, the
    comment above ``LONG_GRID_MIN_M`` the measurements behind it).

    **Operand tiles read together** (:func:`_with_clusters_of_eight`,
    :func:`_with_ring_for_shared_tiles`): one wave of 64x128 tiles over at least 512
    rows runs in clusters of 8 where they also make one wave, else, in 2x1 clusters,
    on a 7-stage ring.

    **Tall swapped tiles in fours** (:func:`_with_tall_swaps_in_fours`): one wave of
    swapped 256-row weight tiles beside one token tile runs in 4x1 clusters.

    **Dependent launch** (:func:`_launches_dependent`) for decode and small prefill
    problems and for unsplit tiles 64 rows tall and 64 to 128 wide.
    """
    if arch != "sm90":
        return config
    k_blocks = ceil_div(k, config.tile_k)
    solo = _solo_tile_variant(config, m, n, k_blocks, batches, sm_count)
    if solo is not None:
        return solo
    config = _without_half_empty_clusters(config, m)
    pingpong = None
    if batches == 1 and k_blocks <= PINGPONG_MAX_K_BLOCKS:
        pingpong = pingpong_variant(config, m, n, k, batches, sm_count)
    if pingpong is not None and (TileGrid.for_problem(m, n, batches, pingpong).units
                                 >= PINGPONG_MIN_WAVES * resident_clusters(sm_count, pingpong.cluster_size)):
        config = pingpong
    units = TileGrid.for_problem(m, n, batches, config).units
    slots = resident_clusters(sm_count, config.cluster_size)
    if (config.split_k == 1 and not config.pingpong and units % slots and units // slots >= STREAM_K_MIN_WAVES
            and k_blocks >= STREAM_K_MIN_K_BLOCKS and stream_k.fits_int32(units, slots, k_blocks)):
        config = dataclasses.replace(config, stream_k=True)
    config = _with_long_grid_bands(config, m, n, k_blocks, batches, sm_count)
    if batches == 1 and _one_wave_of_shared_tiles(config, m, n, sm_count):  # measured unbatched only
        config = _with_ring_for_shared_tiles(_with_clusters_of_eight(config, m, n, sm_count))
    if batches == 1:  # swapped problems are unbatched
        config = _with_tall_swaps_in_fours(config, m, n, sm_count)
    if _launches_dependent(config, m, n, batches):
        config = dataclasses.replace(config, dependent_launch=True)
    return config


# Decode: the launch policy makes every plan of an unbatched problem with at most this
# many tokens (M, or the swapped kernel's N) a dependent launch ...
DEPENDENT_LAUNCH_MAX_TOKENS = 128
# ... and, past decode, every plan of an unbatched problem whose tokens (the kernel's M,
# or a swapped kernel's N) number at most this: small and chunked prefill.
DEPENDENT_LAUNCH_MAX_PREFILL_TOKENS = 1024


def _launches_dependent(config: GemmConfig, m: int, n: int, batches: int) -> bool:
    """Whether the kernel problem (``m`` x ``n``) launches with programmatic dependent
    launch: the next kernel on the stream starts its CTAs on the SMs this grid leaves
    free and sets them up (barriers, descriptors) while this one finishes, and waits
    in ``griddepcontrol.wait`` before it touches global memory.

    That pays for kernels whose CTAs end raggedly or leave SMs idle, the shorter the
    more. In CUDA graphs of back-to-back calls on an H200 (benchmarks/NOTES.md):
    - unsplit tiles 64 rows tall and 64 to 128 wide, 1-15 % faster (geometric mean
      7.1 %, 9 rows; section 15);
    - every other decode plan (the suite's 60 decode problems, M = 1-128; section 37,
      ``results/pdl_policy_decode.json.gz``): swapped 64x16 and 64x32 tiles +4.6 and
      +5.7 % (up to +13 % where 64 CTAs leave half the SMs idle, 8B o-proj), split
      ones +1.8 to +2.9 %, unswapped tiles +1.8 %: no kind of plan slower on
      average. In single calls after an L2 flush the same plans moved -0.8 to +0.4 %
      (geometric means per kind): noise;
    - beside the policy before, in the suite's protocol (``results/pdl_policy_ab.json.gz``):
      the 29 graph-timed rows with M <= 128 +2.4 % (8B o-proj +8.5 to +10.4 %; 8B QKV,
      96 CTAs, -1.5 to -2.2 % where the ablation had +2 to +5 %: the spread between
      calls), the 55 others +0.2 %;
    - the prefill suite's 44 problems (M = 136-1024, Llama-3 weights; section 38,
      ``results/pdl_prefill.json.gz``): +2.2 % in the geometric mean; +4.7 % for the
      9 kernels under 25 us, +2.5 % for the 19 of 25-100 us, +0.5 % for the 16
      longer ones; none slower by more than 1.1 %. Single calls -0.4 % (-1.5 % under
      25 us, where single calls after a flush spread by more than that).
    Section 15 had measured split and 16-wide decode tiles at 0.7 % slower (6 % either
    way); the kernel's split fix-up has changed since (section 29). Past 1024 tokens
    only the first rule applies: there 128-row tiles had ranged from 6 % slower to 6 %
    faster (section 15), and nothing else is measured.
    """
    if batches == 1:
        tokens = n if config.swap_ab else m
        if min(m, n) <= DEPENDENT_LAUNCH_MAX_TOKENS or tokens <= DEPENDENT_LAUNCH_MAX_PREFILL_TOKENS:
            return True
    return not config.has_workspace and config.tile_m == 64 and 64 <= config.tile_n <= 128


def _one_wave_of_shared_tiles(config: GemmConfig, m: int, n: int, sm_count: int) -> bool:
    """``config`` is one wave of unswapped, unsplit 64x128 tiles in 2x1 or 2x2 clusters
    over at least ``SHARED_TILES_MIN_M`` rows: every operand tile is read by many
    CTAs, mostly from L2 (benchmarks/NOTES.md section 45)."""
    return ((config.tile_m, config.tile_n, config.tile_k, config.cluster_m) == (64, 128, TILE_K, 2)
            and config.cluster_n in (1, 2) and not (config.swap_ab or config.pingpong or config.has_workspace)
            and m >= SHARED_TILES_MIN_M and _in_one_wave(m, n, config, sm_count))


def _with_clusters_of_eight(config: GemmConfig, m: int, n: int, sm_count: int) -> GemmConfig:
    """``config`` (one wave of shared tiles, :func:`_one_wave_of_shared_tiles`) in 2x4
    or 4x2 clusters where its tiles fill at least ``CLUSTERS_OF_EIGHT_MIN_FILL`` of
    the CTAs the resident clusters of 8 hold and clusters of 8 also make one wave;
    else unchanged. Of the two, the one that pads the grid less (2x4 on a tie).

    Every operand tile of such a grid is read by many CTAs. A 2x4 cluster multicasts
    each A tile to 4 CTAs and each B tile to 2, so the L2 sends each line once per
    cluster instead of once per CTA or pair. The H200 fits 15 clusters of 8 (120
    CTAs, padding included). cuBLAS runs 128x64 tiles in such clusters on
    these grids (``nvjet_sm90_tst_128x64_64x8_4x2_h``, its frame). On an H200
    (benchmarks/NOTES.md section 45, ``results/clusters_of_eight_ab.json.gz``), beside
    the 2x1 or 2x2 clusters the model picks on 16 shapes of M = 512-896, N = 1024-1536
    and K = 1024-4096, B a transposed weight or row-major: 1.107x in CUDA-graph replays
    (1.019-1.175x) and 1.057x in single calls (1.000-1.121x); against cuBLAS 0.96x ->
    1.02x in single calls, 0.98x -> 1.09x in graph replays. The other
    orientation, where it needs a second wave, ran 0.55-0.75x of cuBLAS. At M = 384-448
    clusters of 8 won on one shape of three (single calls at 384x2048x4096), so not
    there.
    """
    eight_slots = resident_clusters(sm_count, 8)
    if ceil_div(m, config.tile_m) * ceil_div(n, config.tile_n) < CLUSTERS_OF_EIGHT_MIN_FILL * eight_slots * 8:
        return config
    fits = [eight for eight in (dataclasses.replace(config, cluster_m=2, cluster_n=4),
                                dataclasses.replace(config, cluster_m=4, cluster_n=2))
            if _in_one_wave(m, n, eight, sm_count)]
    return min(fits, key=lambda eight: TileGrid.for_problem(m, n, 1, eight).units, default=config)


def _with_ring_for_shared_tiles(config: GemmConfig) -> GemmConfig:
    """``config`` (one wave of shared tiles, :func:`_one_wave_of_shared_tiles`) with a
    ring of ``SHARED_TILES_RING_STAGES`` where it is in 2x1 clusters and deeper; else
    unchanged. Clusters of 8 (:func:`_with_clusters_of_eight`) come first where they
    fit.

    There every A tile is read by each CTA of its tile row and every B tile by each
    cluster of its column, mostly from L2. The L2's request coalescer merges reads of
    one line that arrive close together, and sends the line once to every SM that
    asked. With 9 stages the CTAs that share a tile drift apart during the k-loop
    (our reading, not measured: a CTA that runs ahead hides its L2 misses behind its
    deep ring, so nothing slows it). On an H200 at 1024x1024x4096 (benchmarks/NOTES.md
    section 45), the k-block landing times of the 8 CTAs sharing an A tile spread by
    a median 1.95 us with 9 stages and 0.42 us with 6 (a k-block every 0.22 us). The
    coalescer merged 16 % of the A reads with 9 stages and 30 % with 6; cuBLAS's were
    73 %.

    Beside the deep ring (9 stages, two epilogue buffers; this ring leaves room for
    four), on 22 shapes of M = 512-1024, N = 1024-2048 and K = 256-4096, B a
    transposed weight or row-major (``results/shared_tiles_ring_ab.json.gz``): 1.030x
    in CUDA-graph replays (faster on all 22, 1.008-1.062x) and 1.020x in single calls
    (0.984-1.049x). 6 stages lost more often (``results/l2_coalescing_profile.json.gz``).
    At M = 96-256 the deep ring stays: there the weight streams from HBM once and needs
    the depth (section 44).
    """
    if config.cluster_n != 1 or (config.stages is not None and config.stages <= SHARED_TILES_RING_STAGES):
        return config
    return dataclasses.replace(config, stages=SHARED_TILES_RING_STAGES)


def _with_tall_swaps_in_fours(config: GemmConfig, m: int, n: int, sm_count: int) -> GemmConfig:
    """``config`` in clusters of ``TALL_SWAP_CLUSTER_M`` along M where it is swapped,
    unsplit ``TALL_SWAP_QUAD_TILE_M``-row weight tiles beside one token tile in 2x1
    clusters, and the clusters of 4 make one wave of whole clusters (on the kernel's
    problem: ``m`` weight rows, ``n`` tokens); else unchanged.

    Every CTA of such a grid reads the same token tile; a cluster of 4 multicasts it
    to 4 CTAs instead of 2. cuBLAS runs these tiles so
    (``nvjet_sm90_tst_256x136_64x4_4x1`` at 136x28672x4096: 28 clusters of 4). On an
    H200 (benchmarks/NOTES.md section 46, ``results/cluster_sweeps_one_wave.json.gz``),
    beside the pairs on 7 shapes of M = 129-160 tokens on the 28672-row weight,
    K = 4096-14336 (30 runs each): 1.030x in CUDA-graph replays (1.011-1.044x; 1.00-1.02x
    of cuBLAS) and 0.998x in single calls (0.988-1.011x). Level at
    M = 176-192 (0.99-1.01x either way; section 39's sweep had the same in single
    calls). 192-row tiles, whose 22016-row weight makes 115 tiles, ran level in
    clusters of 4 and are left as they are.
    """
    if not (config.swap_ab and config.tile_m == TALL_SWAP_QUAD_TILE_M and (config.cluster_m, config.cluster_n) == (2, 1)
            and not (config.has_workspace or config.pingpong) and ceil_div(n, config.tile_n) == 1
            and ceil_div(m, config.tile_m) % TALL_SWAP_CLUSTER_M == 0):
        return config
    quads = dataclasses.replace(config, cluster_m=TALL_SWAP_CLUSTER_M)
    return quads if _in_one_wave(m, n, quads, sm_count) else config


def _without_half_empty_clusters(config: GemmConfig, m: int) -> GemmConfig:
    """``config`` unclustered where its 2x1 clusters of 128-row tiles would leave a CTA
    in each cluster of the last tile row with no rows of its own: an odd number of
    tile rows, at most ``PADDED_CLUSTER_MAX_ROWS``. That CTA takes its half of the shared B tile
    and its partner runs in step with it. On an H200 (benchmarks/NOTES.md section
    25, ``results/model_half_empty_clusters_ab.json.gz``), over 3 tile rows (M = 192
    and 320-384, N = 1024-28672) 2x1 clusters ran 5-40 % slower than none in 8 of 9
    shapes and within 2 % in the ninth; over 7 rows (896 x 4096 x 4096, 128x256
    tiles) as fast (``results/sweep_odd_tile_rows.json.gz``). Most of that loss was the
    all-padding A box the CTA loaded, which the producer now skips (section 26): 2-4 %
    slower than none remain over 3 rows (``results/padded_tiles_ab.json.gz``), and
    with it only for 128-row tiles (``results/half_empty_rule_after_skip_ab.json.gz``:
    on 17 shapes the rule kept 128x192 and 128x256 tiles 1.4-4 % faster, while 64x64
    tiles over 3 rows ran 9-14 % faster in their clusters; over nine such shapes,
    ``half_empty_64row_ab.json.gz``, 1.05x in single calls and 1.10x in graph
    replays)."""
    tiles_m = ceil_div(m, config.tile_m)
    if (config.cluster_m != 2 or config.swap_ab or config.tile_m != 128 or tiles_m % 2 == 0
            or tiles_m > PADDED_CLUSTER_MAX_ROWS):
        return config
    return dataclasses.replace(config, cluster_m=1)


def _solo_tile_variant(config: GemmConfig, m: int, n: int, k_blocks: int, batches: int,
                       sm_count: int) -> GemmConfig | None:
    """128x128 ping-pong tiles in 2x1 clusters, one per CTA, for a k-loop whose
    tiles fill one wave (``SOLO_TILE_MIN_K_BLOCKS``, ``SOLO_TILE_MIN_FILL``); else
    ``None``. Unbatched, unswapped problems of 64-deep k-blocks only (as measured)."""
    if batches != 1 or config.swap_ab or config.tile_k != TILE_K or k_blocks < SOLO_TILE_MIN_K_BLOCKS:
        return None
    solo = GemmConfig(tile_m=128, tile_n=128, cluster_m=2, pingpong=True)
    tiles = ceil_div(m, solo.tile_m) * ceil_div(n, solo.tile_n)
    slots = resident_clusters(sm_count, solo.cluster_size)
    one_wave = TileGrid.for_problem(m, n, batches, solo).units <= slots
    return solo if one_wave and tiles >= SOLO_TILE_MIN_FILL * slots * solo.cluster_size else None


# The most epilogue buffers a chosen SM90 configuration gets where shared memory has
# room for them beside its ring (the most the kernel takes).
SPARE_EPILOGUE_BUFFERS = 4


def with_spare_epilogue_buffers(arch: str, config: GemmConfig, ab_dtype: str, out_dtype: str) -> GemmConfig:
    """``config`` with the most epilogue buffers, up to ``SPARE_EPILOGUE_BUFFERS``,
    that fit in the shared memory its ring leaves free (its ring depth, resolved if
    it was "as many as fit", is kept), else ``config`` unchanged.

    The epilogue cycles output sub-tiles through these buffers into TMA stores, and a
    buffer is refilled only once its store has read it: with two, the consumer
    warpgroups wait on the stores when a tile's output is large against its k-loop.
    Measured on an H200 (benchmarks/NOTES.md section 18): 3-9 % faster on short-K and
    batched K = 128 problems, within +-2 % elsewhere where no stage was given up;
    where the buffers would cost a stage (128x192 tiles at M = 512) up to 6 % slower,
    so not there. Ping-pong consumers have a set each: 128x128 tiles get four,
    128x192 three, which keeps the fifth ring stage that four would take (1-5 %
    faster on the short-K rows, K = 256-1024, NOTES section 20); 64-row ping-pong
    tiles keep their two (64x256 was 5-10 % slower with four, NOTES section 19). SM90
    only: the SM100 kernel's epilogue is unmeasured.
    """
    if arch != "sm90" or config.epi_stages >= SPARE_EPILOGUE_BUFFERS:
        return config
    if config.pingpong and config.tile_m != 128:
        return config
    # The budget does not depend on the operands' majors.
    ring = smem_budget(KernelSpec(arch, ab_dtype, out_dtype, "k", "k", "n", config))
    for buffers in range(SPARE_EPILOGUE_BUFFERS, config.epi_stages, -1):
        more = dataclasses.replace(config, stages=ring.stages, epi_stages=buffers)
        budget = smem_budget(KernelSpec(arch, ab_dtype, out_dtype, "k", "k", "n", more))
        if budget.total_bytes <= budget.capacity_bytes:
            return more
    return config


def pingpong_variant(config: GemmConfig, m: int, n: int, k: int, batches: int,
                     sm_count: int) -> GemmConfig | None:
    """``config`` with ping-pong consumers (``GemmConfig.pingpong``) for the kernel's
    (``m``, ``n``, ``k``, ``batches``) problem, its cluster and raster kept; ``None``
    for a configuration whose tiles are split or streamed (pieces meet in a
    workspace, which ping-pong consumers do not run) or taller than 128 rows.

    A warpgroup holds a whole tile's accumulators, so 128-row tiles are 192 or 128
    wide: 128 for k-loops of at most ``PINGPONG_NARROW_MAX_K_BLOCKS``, else whichever
    leaves the busiest SM less work after the waves (``PINGPONG_TILE_SPEED``). 64-row
    tiles keep their width. The variant has two epilogue buffers per warpgroup and a
    ring as deep as then fits; :func:`with_spare_epilogue_buffers` then adds the
    buffers that cost no stage.
    """
    if config.has_workspace or config.tile_m > SM90_PINGPONG_MAX_TILE_M:
        return None
    base = dataclasses.replace(config, pingpong=True, stages=None, epi_stages=2)
    if config.tile_m != 128:
        return base
    if ceil_div(k, config.tile_k) <= PINGPONG_NARROW_MAX_K_BLOCKS:
        return dataclasses.replace(base, tile_n=128)
    slots = resident_clusters(sm_count, config.cluster_size)

    def busiest_sm_work(tile_n: int) -> float:
        units = TileGrid.for_problem(m, n, batches, dataclasses.replace(base, tile_n=tile_n)).units
        return ceil_div(units, slots) * tile_n / PINGPONG_TILE_SPEED[tile_n]

    # Ties (equal work) go to the wider tile, first in the dict.
    tile_n = min(PINGPONG_TILE_SPEED, key=busiest_sm_work)
    return dataclasses.replace(base, tile_n=tile_n)


# A decode tile streams the weight: a swapped one a 64- or 128-row slab of it beside
# its token columns, an unswapped one a slab of weight columns beside one 64-row tile
# of tokens. Where both operands are K-major (an nn.Linear weight read as W.t()), a
# 128-deep k-block loads two 128 B-wide TMA boxes of each together (256 B of each row)
# where a 64-deep one loads one a stage; half the stages keep the same bytes in flight,
# and each barrier round trip moves twice the bytes (which of the two gains is
# unmeasured). On an H200 in graph replays (benchmarks/NOTES.md sections 62-63):
# - swapped plans with 16 token columns (M = 1 and 16 on Llama-3 8B and 70B weights,
#   16 plans, split and stream-K among them) ran 1.2-3.8 % faster, with 32 columns
#   (M = 20-32, 40 plans) 0.5-8.0 %; swapped 64x64 tiles 0.98-1.01x, so at most 32;
# - unswapped 64-row tiles in 1x1 clusters on one row of tokens (M = 40-64): 64x160 and
#   64x224 ran 0.6-3.0 % faster (ten plans), 64x48 and 64x80 0.96-1.02x (ten), so
#   160 weight columns or more; in 2x1 clusters at M = 128 they lost up to 11 % (a
#   cluster's stage is freed when both CTAs are done with it, and half the stages leave
#   less slack between the pair: a guess, unmeasured), so one CTA clusters only.
# Measured with K from 4096 to 28672, whole 128-deep blocks, rings of 3 or more
# 128-deep stages (a 64x256 tile would get 2: left at 64 deep, unmeasured).
DEEP_K_BLOCK = 128
DEEP_K_BLOCK_MAX_TOKEN_COLUMNS = 32
DEEP_K_BLOCK_TOKEN_ROWS = 64
DEEP_K_BLOCK_MIN_WEIGHT_COLUMNS = 160
DEEP_K_BLOCK_MIN_K = 2048
DEEP_K_BLOCK_MIN_STAGES = 3


def with_deep_weight_k_blocks(arch: str, config: GemmConfig, m: int, k: int, ab_dtype: str, out_dtype: str,
                              k_major: bool) -> GemmConfig:
    """``config`` with 128-deep k-blocks and half its ring's stages where it is a decode
    tile streaming the weight with both operands K-major (``k_major``), else unchanged:
    swapped with at most ``DEEP_K_BLOCK_MAX_TOKEN_COLUMNS`` token columns, or unswapped
    with all ``m`` tokens in one 64-row tile, at least ``DEEP_K_BLOCK_MIN_WEIGHT_COLUMNS``
    weight columns wide and no cluster; and where at least
    ``DEEP_K_BLOCK_MIN_STAGES`` 128-deep stages fit."""
    if (arch != "sm90" or not k_major or config.tile_k == DEEP_K_BLOCK
            or k < DEEP_K_BLOCK_MIN_K or k % DEEP_K_BLOCK):
        return config
    swapped_narrow = config.swap_ab and config.tile_n <= DEEP_K_BLOCK_MAX_TOKEN_COLUMNS
    one_token_tile = (not config.swap_ab and config.tile_m == DEEP_K_BLOCK_TOKEN_ROWS and m <= config.tile_m
                      and config.tile_n >= DEEP_K_BLOCK_MIN_WEIGHT_COLUMNS
                      and config.cluster_m == config.cluster_n == 1)
    if not (swapped_narrow or one_token_tile):
        return config
    deep_stages = smem_budget(KernelSpec(arch, ab_dtype, out_dtype, "k", "k", "n", config)).stages // 2
    if deep_stages < DEEP_K_BLOCK_MIN_STAGES:
        return config
    return dataclasses.replace(config, tile_k=DEEP_K_BLOCK, stages=deep_stages)


def as_launched(arch: str, config: GemmConfig, m: int, n: int, k: int, batches: int, sm_count: int,
                ab_dtype: str, out_dtype: str, k_major: bool = True) -> GemmConfig:
    """What a configuration wsgemm chose (table, model or autotuner) runs as on the
    kernel's own problem: :func:`with_launch_policy`, :func:`with_deep_weight_k_blocks`
    (``k_major``: both the kernel's operands are read along K), then
    :func:`with_spare_epilogue_buffers`. A caller's config is used as given."""
    config = with_launch_policy(arch, config, m, n, k, batches, sm_count)
    config = with_deep_weight_k_blocks(arch, config, m, k, ab_dtype, out_dtype, k_major)
    return with_spare_epilogue_buffers(arch, config, ab_dtype, out_dtype)


def _choose_sm100(m: int, n: int, batches: int, sm_count: int) -> GemmConfig:
    """Blackwell: unmeasured (no Blackwell GPU here), so the conservative shape of
    CUTLASS's defaults: 128x256 tiles with two TMEM accumulator buffers, a 2x1
    cluster sharing B when there are enough tiles; the 2-CTA MMA only on request."""
    tiles = ceil_div(m, 128) * ceil_div(n, 256) * batches
    cluster_m = 2 if ceil_div(m, 128) >= 2 and tiles >= 2 * sm_count else 1
    return GemmConfig(tile_m=128, tile_n=256 if tiles >= sm_count else 128, cluster_m=cluster_m, acc_stages=2)
