"""18 -- Decode at 33-64 tokens: what a padded token box costs, and who holds the tokens.

Teaches: how a throughput model's one wrong rate picks the wrong plan, and how a
measurement finds it. At M = 48 an unswapped decode tile's 64-row token box is a quarter
padding: TMA zero-fills those 16 rows of every stage. The model charged them at the rate
fitted where a box is all padding but a row (M = 1), 6.5-13 us a tile, and split the
k-loops to spread that over more SMs. On an H200 the same plans ran 0-0.7 us slower at
M = 48 than at M = 64, and the split plans 0.80-0.91x of cuBLAS. Charged by its share
of the box, the padding is small; and on weights of up to ~8400 rows a swap that puts
the tokens in one tile fitted to them (48 wide) beside 64-row weight tiles, in one wave,
ran level with the unsplit plans or faster (up to 1.36x).

Part 1 prints the model's rating of three plans for a Qwen2.5-14B projection at M = 48,
with the padding at both rates. Part 2 prints what the default path now picks by M.
Part 3 prints the H200's times from the committed reports (benchmarks/NOTES.md section 64).

Needs: any machine (the model and committed measurements).
Run:   python examples/18_padding_a_token_box.py
"""

import sys
from pathlib import Path

from wsgemm import heuristics

RESULTS = Path(__file__).resolve().parents[1] / "benchmarks" / "results"
sys.path.insert(0, str(RESULTS.parent))
from result_files import load_json  # noqa: E402  (reads reports moved into results/archive.tar.xz too)
H200_SMS = 132
M, N, K = 48, 7168, 5120  # Qwen2.5-14B's qkv weight, 48 tokens
PLANS = {  # label: (kernel M, kernel N, tile_m, tile_n, split), swapped plans with the weight as M
    "64x224 split 4": (M, N, 64, 224, 4),
    "64x64": (M, N, 64, 64, 1),
    "swap 64x48": (N, M, 64, 48, 1),
}


def part1() -> None:
    k_bytes = K * 2
    flat = k_bytes * (64 - M) / heuristics.H200.oob_fill_bytes_per_s  # the rate fitted at M = 1
    share = heuristics._zero_fill_seconds(k_bytes, 64, M, heuristics.H200)
    print(f"The tokens' 64-row box at M = {M}: {64 - M} rows of padding, {(64 - M) * k_bytes // 1024} KiB a tile;")
    print(f"  charged {flat * 1e6:.1f} us at the flat rate, {share * 1e6:.1f} us by its share of the box.\n")
    print("The model's time for each plan (us), the padding charged by its share / at the flat rate:")
    for label, (km, kn, tm, tn, split) in PLANS.items():
        seconds = heuristics.estimate_seconds(km, kn, K, 1, H200_SMS, tm, tn, split)
        # A memory-bound work item's loads add the charge; a split item loads 1/split of K.
        before = seconds + (0 if km == N else (flat - share) / split)
        print(f"  {label:16s} {seconds * 1e6:6.1f} / {before * 1e6:6.1f}")
    print("  At the flat rate the split plan came first; by share, the unsplit one.")
    fitted = heuristics._one_fitted_token_tile(M, N, K, H200_SMS, heuristics.H200)
    print(f"  swap 64x48 as the fitted-token-tile family rates it: {min(s for s, _ in fitted) * 1e6:.1f} "
          f"(per-SM HBM rate x{heuristics.FITTED_SWAP_HBM_GAIN})\n")


def part2() -> None:
    print(f"What the default path picks for the {N}x{K} weight, by M:")
    for m in (16, 32, 40, 48, 56, 64):
        c = heuristics.choose_config("sm90", m, N, K, 1, H200_SMS, can_swap=True)
        print(f"  M = {m:2d}: {'swap ' if c.swap_ab else ''}{c.tile_m}x{c.tile_n}"
              f"{f' split {c.split_k}' if c.split_k > 1 else ''}")
    print()


def part3() -> None:
    print("Measured on an H200 (us per call in graph replays of 20 calls):")
    grid = {}
    for name in ("oob_sweep_plain", "oob_sweep_swap"):
        for row in load_json(RESULTS / f"{name}.json.gz")["shapes"]:
            if row["shape"] == [M, N, K]:
                grid.update(row["graph_us"])
    for label in ("torch.matmul", "64x224 c1x1 split4", "64x64 c1x1", "swap 64x48 c1x1"):
        print(f"  {label:20s} {grid[label]:6.2f}")
    ab = next(r for r in load_json(RESULTS / "fitted_swap_ab.json.gz")["shapes"] if r["shape"] == [M, N, K])["graph_us"]
    print(f"  the default path before (64x224 split 4) / after (swap 64x48), as launched: "
          f"{ab['base default']:.2f} / {ab['default']:.2f}; cuBLAS {ab['torch.matmul']:.2f}")
    print("\nThe grid rows run without dependent launch; the default path launches with it (example 08).")


if __name__ == "__main__":
    print("1. What the model charges\n")
    part1()
    print("2. What the default path picks\n")
    part2()
    print("3. What the H200 measured\n")
    part3()
