"""06 -- Split-K (and stream-K) for the last wave only.

Teaches: why a persistent GEMM with a few waves of output tiles wastes SMs on its
last, partial wave, and how splitting the K range of just those tiles
(``GemmConfig(split_k=S)``) gives the idle SMs work; then stream-K
(``GemmConfig(stream_k=True)``), which deals the last wave's k-blocks out evenly
instead; and last, the answer that needs neither: a tile width that cuts the
problem into whole waves. The schedules printed are the ones the kernel runs:
``TileGrid.cta_work`` and ``TileGrid.cta_pieces`` walk the same ``split_k`` /
``stream_k`` arithmetic the producer and consumer warps execute on the GPU; the
times are the throughput model of wsgemm/heuristics.py, and the measured numbers
come from benchmarks/NOTES.md sections 10, 16, 17, 50 and 52.

Needs: any machine (pure Python, no GPU).
Run:   python examples/06_split_the_last_wave.py
"""

import sys
from collections import Counter
from pathlib import Path

from wsgemm import GemmConfig
from wsgemm.heuristics import choose_config, estimate_seconds
from wsgemm.kernels.common.scheduler import TileGrid, ceil_div

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from result_files import load_json  # noqa: E402  (reads reports moved into results/archive.tar.xz too)

SMS = 132  # an H100/H200: one 1x1 cluster per SM
M, N, K = 512, 10240, 8192  # Llama-3 70B QKV projection, 512 tokens
TILE_M, TILE_N = 128, 256


def measured(result_file: str) -> dict:
    """A committed H200 result (benchmarks/results/*.json.gz)."""
    return load_json(Path(__file__).resolve().parents[1] / "benchmarks" / "results" / result_file)


def busiest_sm(grid: TileGrid, k_blocks: int) -> tuple[float, Counter]:
    """Work of the busiest SM in k-blocks, and how many SMs run each amount."""
    loads = Counter()
    for sm in range(grid.launch_clusters(SMS)):
        total = 0.0
        for _, _, _, split, splits in grid.cta_work(sm, grid.launch_clusters(SMS), 0, 0):
            total += k_blocks / splits  # a split covers 1/splits of the tile's k-blocks
        loads[round(total, 1)] += 1
    return max(loads), loads


tiles_m, tiles_n = ceil_div(M, TILE_M), ceil_div(N, TILE_N)
k_blocks = ceil_div(K, 64)
tiles = tiles_m * tiles_n
print(f"{M}x{N}x{K} in {TILE_M}x{TILE_N} tiles: {tiles} tiles, {k_blocks} k-blocks each, on {SMS} SMs")
print(f"  {tiles // SMS} full wave(s) and a last wave of {tiles % SMS} tiles\n")

for split in (1, 2, 4):
    grid = TileGrid(tiles_m, tiles_n, 1, split_k=split)
    clusters = grid.launch_clusters(SMS)
    worst, loads = busiest_sm(grid, k_blocks)
    model_us = estimate_seconds(M, N, K, 1, SMS, TILE_M, TILE_N, split) * 1e6
    spread = ", ".join(f"{count} SMs x {blocks:g}" for blocks, count in sorted(loads.items()))
    print(f"split_k={split}: {grid.work_items(clusters)} work items, {grid.split_tiles(clusters)} tiles split")
    print(f"  k-blocks per SM: {spread}")
    print(f"  busiest SM: {worst:g} k-blocks = {worst / k_blocks:.2f} tile-times; model: {model_us:.0f} us\n")

tail = tiles % SMS
print(f"Without a split the last {tail} tiles keep {tail} SMs busy for a whole tile-time while")
print(f"{SMS - tail} idle. Split 4 ways, those tiles become {4 * tail} quarter-tiles spread over {4 * tail} SMs:")
print("the run takes ~1.25 tile-times instead of 2, plus what the fix-up costs (the")
print("last split of a tile waits for the others' fp32 partial sums, then adds them).")
print("Measured on an H200 (NOTES section 10): 0.80x -> 0.89x of cuBLAS for this shape.")
# Each partial sum the last split reads is an L2 round trip (another SM wrote it), so it
# loads several before adding any (split_k.slots_in_flight): for a decode tile, all of them.
probe = measured("split_fixup_rounds.json.gz")["probe_direct"]["shapes"][0]
single = probe["us"]
print(f"The adds: {'x'.join(map(str, probe['shape']))} in 64x16 tiles split 8 ways took "
      f"{single['base 64x16 c1x1 split8'][0]:.1f} us a call loading the 7 partial sums one after another,")
print(f"{single['64x16 c1x1 split8'][0]:.1f} us loading them all before the first add (NOTES section 52).\n")

# Stream-K: the tail's k-blocks in one run per SM, cut at tile boundaries into pieces.
grid = TileGrid(tiles_m, tiles_n, 1, stream_k=True)
clusters = grid.launch_clusters(SMS)
walks = [list(grid.cta_pieces(sm, clusters, 0, 0, k_blocks)) for sm in range(clusters)]
loads = Counter(sum(p.kb_count for p in walk) for walk in walks)
spread = ", ".join(f"{count} SMs x {blocks}" for blocks, count in sorted(loads.items()))
contributors = sum(p.publish_slot >= 0 for walk in walks for p in walk)
print(f"stream_k=True: {sum(map(len, walks))} pieces on {clusters} SMs, {contributors} of them publish partial sums")
print(f"  k-blocks per SM: {spread}")
print(f"  busiest SM: {max(loads)} k-blocks = {max(loads) / k_blocks:.2f} tile-times")
sm = next(i for i, walk in enumerate(walks) if len(walk) > 2)
print(f"  SM {sm} runs: " + "; ".join(
    f"tile ({p.tile_m},{p.tile_n}) k-blocks {p.kb_first}-{p.kb_first + p.kb_count - 1}"
    + (" -> publishes" if p.publish_slot >= 0 else f" -> adds {p.waits} partial(s), stores D" if p.waits else "")
    for p in walks[sm]))
print("Balanced on paper. Measured on an H200 (NOTES section 16; the LLM suite's ablation,")
print("benchmarks/results/streamk_ablation_llm.json.gz): for this shape, with the 128x96")
print("tiles it then ran, 1 % slower than splitting them 4 ways; where the streamed wave is a")
print("quarter to a half of the run, up to 9 % slower than leaving it whole (and 91.1 -> 106.1")
print("us in single calls at 2048x4096x4096, 1.9 waves). The default path streams the last")
print("wave only from six whole waves up (8192^3: 1.006x -> 1.027x of cuBLAS in one run),")
print("and only k-loops of 64 or more k-blocks: below that the fp32 partial tiles cost more")
print("than the idle wave (2-9 % slower at K = 128-2048, NOTES section 18).")

# Neither: a tile width whose tiles fill whole waves. Clusters of two CTAs pair the
# M tiles (they share, by multicast, the weight tile); 66 such pairs fit at once.
print("\nOr pick a tile width that fills the waves (pairs of M tiles, 66 pairs at a time):")
for tile_n in (256, 224, 192, 160, 128):
    pairs = TileGrid.for_problem(M, N, 1, GemmConfig(tile_n=tile_n, cluster_m=2)).units
    waves = pairs / (SMS // 2)
    model_us = estimate_seconds(M, N, K, 1, SMS, TILE_M, tile_n, cluster_m=2) * 1e6
    print(f"  128x{tile_n}: {pairs:3d} pairs = {waves:.2f} waves, the last {waves % 1 or 1:.0%} full; "
          f"model {model_us:.0f} us")
print("10240 = 64 x 160: 160-wide tiles make 1.94 waves with no split and no fix-up. Measured")
print("on an H200 (NOTES section 17): 0.98x of cuBLAS against 0.67x for 128x256 unsplit and")
print("0.86x for the split-4 kernel the table used before; it is this shape's default now.")

# One wave or less: a down projection at 160 tokens (Qwen2.5-14B's 5120 x 13824 weight).
# Swapped, the weight's 40 tiles of 128 rows sit beside one 160-wide token tile: 40 CTAs.
m, n, k = 160, 5120, 13824
plan = choose_config("sm90", m, n, k, 1, SMS, can_swap=True)
print(f"\n{m}x{n}x{k}: the default path plans swap={plan.swap_ab} {plan.tile_m}x{plan.tile_n} "
      f"split_k={plan.split_k}: {ceil_div(n, plan.tile_m)} weight tiles x {plan.split_k} = "
      f"{ceil_div(n, plan.tile_m) * plan.split_k} CTAs, each streaming 1/{plan.split_k} of a weight tile from HBM")
for overlap in (False, True):
    model_us = estimate_seconds(n, m, k, 1, SMS, plan.tile_m, plan.tile_n, plan.split_k,
                                cluster_n=plan.cluster_n, split_paths_overlap=overlap) * 1e6
    print(f"  model, the weight's HBM stream and the tokens' L2 loads {'side by side' if overlap else 'added up'}: "
          f"{model_us:.0f} us")
ab = measured("small_prefill_long_k.json.gz")["ab_split_one_tile"]
us = next(s["us"] for s in ab["shapes"] if s["shape"] == [m, n, k])
print(f"Measured on an H200 (NOTES section 50, single calls): {us['default'][0]:.1f} us, against "
      f"{us['base default'][0]:.1f} for the plan before (128x160 tiles split 2, their second tile row")
print(f"mostly padding) and {us['torch.matmul'][0]:.1f} for cuBLAS, whose nvjet kernel runs 128x160 tiles split along K too.")
