"""Study: where should the SM90 producer probe the ring's next stage?

**Question.** CUTLASS's producer probes stage k+1 (``producer_try_acquire``) before it
issues stage k's TMA copies (``before_copy``). Does that order buy speed over probing
after the copies (``after_copy``) or not probing at all (``none``), and at which ring
depths?

**Run** 2026-11-29 on an H200 (``results/lookahead_ablation.md``).

**Result.** No measurable difference at 3-6 stages (within 0-3 %, mostly within the
runs' spread); at 2 stages the early probe was the slower one by 1-2 %.

**Conclusion.** The placement does not matter on the H200: a ``try_wait`` without a
time hint lets the warp go on issuing and only the read of its answer waits
(``benchmarks/trywait_probe.py``), and every placement is correct. ``before_copy`` (CUTLASS's order) stays the default.
Tuning log: docs/tuning-log/lookahead.md; the whole answer: docs/producer-lookahead.md.

What it measures: for each shape, every (policy, stage count) variant is compiled,
checked against a float32 reference, then timed with the others interleaved (CUDA
events, L2 flushed before every run, median and spread of ``--reps`` runs each).
Shapes:

* compute-bound: 8192^3 (128x256 tiles, 2048 tiles over 132 SMs);
* latency-bound: few output tiles, long K (512x512x32768 with 128x128 tiles: 16 tiles);
* short K, many tiles: 8192x8192x256 and 8192x8192x512 (128x256 tiles).

Stage counts run from 2 to the most that fit in shared memory for the tile.

    python -m benchmarks.studies.bench_lookahead --reps 25
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

import wsgemm
import wsgemm.timing
from benchmarks.harness import (
    RESULTS, environment, gpu_state, summarize, time_interleaved, within_tolerance, write_results,
)
from wsgemm import GemmConfig, Lookahead
from wsgemm import config as cfg

SHAPES = {
    "compute-bound 8192^3": ((8192, 8192, 8192), (128, 256)),
    "latency-bound 512x512x32768": ((512, 512, 32768), (128, 128)),
    "short-K 8192x8192x256": ((8192, 8192, 256), (128, 256)),
    "short-K 8192x8192x512": ((8192, 8192, 512), (128, 256)),
}


def stage_range(tile_m: int, tile_n: int) -> range:
    spec = cfg.make_spec("sm90", "bf16", "bf16", "k", "k", "n", GemmConfig(tile_m=tile_m, tile_n=tile_n))
    return range(2, spec.config.stages + 1)


def bench_shape(label, mnk, tile, reps, flush) -> dict:
    m, n, k = mnk
    a = torch.randn(m, k, device="cuda").to(torch.bfloat16)
    b = torch.randn(k, n, device="cuda").to(torch.bfloat16)
    ref = a.float() @ b.float()
    impls, errors = {}, {}
    for stages in stage_range(*tile):
        for policy in Lookahead:
            config = GemmConfig(tile_m=tile[0], tile_n=tile[1], stages=stages, lookahead=policy)
            name = f"{policy.value}/s{stages}"
            fn = (lambda c: (lambda: wsgemm.gemm(a, b, config=c)))(config)
            errors[name] = wsgemm.timing.relative_error(fn(), ref)
            if within_tolerance(errors[name]):
                impls[name] = fn
    for fn in impls.values():
        fn()
    times = time_interleaved(impls, reps, flush)
    flops = 2.0 * m * n * k
    return {
        "label": label, "m": m, "n": n, "k": k, "tile": list(tile),
        "variants": {name: {**summarize(ms, flops), "rel_error": errors[name]} for name, ms in times.items()},
        "wrong": [name for name in errors if name not in impls],
    }


def markdown(report: dict) -> str:
    env = report["environment"]
    lines = [
        "# Producer look-ahead ablation (SM90 kernel)",
        "",
        f"{env['gpu']}, torch {env['torch']}, CuTe DSL {env['cutlass_dsl']}; {env['date']}. "
        f"Median of {report['reps']} interleaved runs per variant, L2 flushed before each, bf16, "
        "random inputs; p10-p90 in brackets; ratio = before_copy time / policy time (>1: faster than before_copy).",
        "",
    ]
    for row in report["rows"]:
        lines += [f"## {row['label']} (tile {row['tile'][0]}x{row['tile'][1]})", "",
                  "| stages | before_copy ms | after_copy ms | none ms | after/before | none/before |",
                  "|---|---|---|---|---|---|"]
        stages = sorted({int(name.split("/s")[1]) for name in row["variants"]})
        for s in stages:
            cells, base = [], row["variants"].get(f"before_copy/s{s}")
            for policy in ("before_copy", "after_copy", "none"):
                v = row["variants"].get(f"{policy}/s{s}")
                cells.append(f"{v['median_ms']:.4f} [{v['p10_ms']:.4f}-{v['p90_ms']:.4f}]" if v else "-")
            ratios = []
            for policy in ("after_copy", "none"):
                v = row["variants"].get(f"{policy}/s{s}")
                ratios.append(f"{base['median_ms'] / v['median_ms']:.3f}" if v and base else "-")
            lines.append(f"| {s} | " + " | ".join(cells + ratios) + " |")
        if row["wrong"]:
            lines.append(f"\nWRONG RESULTS (not timed): {row['wrong']}")
        lines.append("")
    lines += [f"GPU before: {report['gpu_before']}; after: {report['gpu_after']}.", "",
              "Regenerate: `python -m benchmarks.studies.bench_lookahead`"]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.studies.bench_lookahead", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--reps", type=int, default=25)
    p.add_argument("--shapes", default=",".join(SHAPES), help="comma-separated labels from SHAPES")
    p.add_argument("--out", default=str(RESULTS), help="output folder (default: benchmarks/results/)")
    args = p.parse_args(argv)
    flush = wsgemm.timing.L2Flush()  # the autotuner's protocol
    report = {"environment": environment(), "reps": args.reps, "gpu_before": gpu_state(), "rows": []}
    labels = args.shapes.split(",")
    for i, label in enumerate(labels, 1):
        mnk, tile = SHAPES[label]
        report["rows"].append(bench_shape(label, mnk, tile, args.reps, flush))
        print(f"[{i}/{len(labels)}] {label} done", flush=True)
    report["gpu_after"] = gpu_state()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    write_results(out / "lookahead_ablation.json", report)
    (out / "lookahead_ablation.md").write_text(markdown(report))
    print(markdown(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
