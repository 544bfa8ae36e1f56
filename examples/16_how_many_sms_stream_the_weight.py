"""16 -- Decode-sized GEMMs: how many SMs stream the weight.

Teaches: why the width of a tile matters most when there are few tokens. Up to 64
tokens one 64-row tile row holds them all, so ``x @ W.T`` reads the weight W (N x K)
from HBM exactly once. Each CTA streams its own N columns of W, and one SM moves only so
many bytes a second (the model's ``sm_hbm_bytes_per_s``, ~30 GB/s). So the number of tile
columns, ceil(N / tile_n), decides how much of the HBM bandwidth the GEMM can use. 64x160
tiles give a 10240-row weight 64 CTAs on the H200's 132 SMs; 64x80 tiles give it 128.

Part 1 lists each width the model ranks for one tile row (the fixed 64-256 list and the
widths fitted to one or two waves, ``heuristics._widths_filling_waves``), the CTAs it
makes and the model's time. Part 2 shows what the default path plans. Part 3 gives the
times measured on an H200, before and after the fitted widths, read from the committed
benchmarks/results/one_row_fitted_widths_ab.json.gz and suite_llm_decode.json.gz
(benchmarks/NOTES.md section 43).

Needs: any machine (the model and committed measurements; nothing compiles).
Run:   python examples/16_how_many_sms_stream_the_weight.py
"""

import sys
from pathlib import Path

from wsgemm import heuristics
from wsgemm.heuristics import H200, PLAIN_TILE_N, ceil_div

RESULTS = Path(__file__).resolve().parents[1] / "benchmarks" / "results"
sys.path.insert(0, str(RESULTS.parent))
from result_files import load_json  # noqa: E402  (reads reports moved into results/archive.tar.xz too)
H200_SMS = 132


def part1(m: int = 64, k: int = 8192) -> None:
    print(f"One SM streams at most {H200.sm_hbm_bytes_per_s / 1e9:.0f} GB/s in the model; HBM gives "
          f"{H200.hbm_bytes_per_s / 1e12:.1f} TB/s, so it takes "
          f"{H200.hbm_bytes_per_s / H200.sm_hbm_bytes_per_s:.0f} CTAs to use it all.\n")
    for n in (6144, 10240, 13824):
        fitted = heuristics._widths_filling_waves(n, 1, H200_SMS)
        print(f"{m}x{n}x{k} (weight {n * k * 2 / 2**20:.0f} MiB):")
        for width in sorted(set(PLAIN_TILE_N) | set(fitted)):
            ctas = ceil_div(n, width)
            us = heuristics.estimate_seconds(m, n, k, 1, H200_SMS, 64, width) * 1e6
            mark = "  <- fitted to the waves" if width in fitted else ""
            print(f"  64x{width:<3}  {ctas:3d} CTAs  model {us:6.1f} us{mark}")
        print()


def part2() -> None:
    for m, n, k in ((40, 10240, 4096), (56, 6144, 8192), (48, 3072, 2048), (64, 22016, 14336)):
        chosen = heuristics.choose_config("sm90", m, n, k, 1, H200_SMS, can_swap=True)
        print(f"{m}x{n}x{k}: {'swap ' if chosen.swap_ab else ''}{chosen.tile_m}x{chosen.tile_n}"
              f"{f' split {chosen.split_k}' if chosen.split_k > 1 else ''}: "
              f"{ceil_div(m, chosen.tile_m) * ceil_div(n, chosen.tile_n)} tiles")
    print("(Past M = 64 the tiles take two rows; there the fitted widths measured level, NOTES section 43.)\n")


def part3() -> None:
    print("Measured on an H200 (single calls after an L2 flush, us; 'before': the plan before the fitted widths):")
    print(f"  {'shape':>16}  {'before':>6}  {'now':>6}  {'cuBLAS':>6}  the plan now")
    report = load_json(RESULTS / "one_row_fitted_widths_ab.json.gz")
    for run in ("1_ab", "1_ab_continued", "3_heldout"):
        for shape in report["runs"][run]["shapes"][::4]:  # every fourth shape of each run
            us = {impl: times[0] for impl, times in shape["us"].items()}
            width = int(shape["default_plan"].split("x")[1])
            print(f"  {'x'.join(map(str, shape['shape'])):>16}  {us['base default']:6.1f}  {us['default']:6.1f}  "
                  f"{us['torch.matmul']:6.1f}  64x{width}, {ceil_div(shape['shape'][1], width)} CTAs")
    suite = load_json(RESULTS / "suite_llm_decode.json.gz")
    print("\nThe LLM suite's row the fitted widths lifted most (70B QKV M = 64: 0.932x of cuBLAS with")
    print("64x160 tiles, 0.974x with 64x80, NOTES section 43), in the latest suite run:")
    for row in suite["rows"]:
        if row["label"] == "llm/llama3-70b qkv M=64":
            ms = {impl: result["timings"]["events"]["median_ms"] for impl, result in row["results"].items()}
            print(f"  {row['shape']}: wsgemm ({row['results']['wsgemm']['config']}) {ms['wsgemm'] * 1e3:.1f} us, "
                  f"cuBLAS {ms['torch.matmul'] * 1e3:.1f} us")


if __name__ == "__main__":
    print("1. The widths the model ranks for one tile row\n")
    part1()
    print("2. What the default path plans\n")
    part2()
    print("3. What the H200 measured\n")
    part3()
