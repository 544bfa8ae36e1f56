"""Study: do decode tiles run faster with 128-deep k-blocks on half the stages?

**Question.** A decode tile streams a slab of a K-major weight. A 64-deep k-block
loads 128 B of each weight row (one TMA box), a 128-deep one 256 B (two boxes, issued
together): with half the stages the same bytes are in flight, and each barrier round
trip moves twice the bytes. Faster, and for which plans?

**Run** 2026-12-02 on an H200: Llama-3 8B and 70B weights at M = 1, 16
(``results/tuning-log/deep_k_blocks.json``), M = 24-48 and 64-128
(``results/tuning-log/deep_k_blocks_tokens_24_48.json``,
``results/tuning-log/deep_k_blocks_tokens_64_128.json``) and Qwen2.5 weights
(``results/tuning-log/deep_k_blocks_qwen.json``), CUDA-graph replays.

**Result.** Swapped plans of 16 token columns 1.012-1.038x faster 128 deep, of 32
columns 1.008-1.060x; unswapped 64-row token tiles in 1x1 clusters at M <= 64: 64x224
1.03x, 64x160 1.02x, narrower ones 1.00-1.02x; swapped 64x64 tiles level
(0.977-1.008x); at M = 128, 64-row tiles in 2x1 clusters 0.894-0.998x (slower). On
the Qwen weights 0.995-1.044x.

**Conclusion.** The launch rule ``wsgemm.tuning.launch.deep_k_blocks_for_decode``:
128-deep k-blocks on half the ring for swapped tiles of up to 32 token columns and
for one unclustered 64-row token tile beside at least 160 weight columns (A/B against
the commits before: 1.009-1.075x and 1.005-1.080x in graph replays). Tuning log:
docs/tuning-log/decode.md.

What it measures: for every shape, its default plan (swapped or not) twice, with
64-deep k-blocks and with 128-deep ones on half the stages (the same bytes in
flight), beside torch.matmul; single calls after an L2 flush, and CUDA-graph replays
of 20 back-to-back calls. Each output is checked against a float32 reference before
it is timed. Shapes: M in ``--tokens`` on the ``--weights`` (by default Llama-3 8B's
and 70B's), B = W.t().

    python -m benchmarks.studies.deep_k_blocks --tokens 1,16,64

Writes ``<out>/<name>.json`` (``--name``, by default ``deep_k_blocks``).
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
from pathlib import Path

import torch

import wsgemm
import wsgemm.timing
from benchmarks.harness import (
    RESULTS, environment, gpu_state, operands, regenerate_command, within_tolerance, write_results,
)
from wsgemm import config as cfg
from wsgemm import plans

WEIGHTS = ((6144, 4096), (4096, 4096), (28672, 4096), (4096, 14336),  # 8B qkv, o, gate_up, down
           (10240, 8192), (8192, 8192), (57344, 8192), (8192, 28672))  # 70B
GRAPH_CALLS = 20


def both_depths(planned: cfg.GemmConfig, swapped: bool) -> dict[str, cfg.GemmConfig]:
    """The planned config with 64-deep k-blocks and with 128-deep ones; the 128-deep one
    has half the 64-deep one's resolved stages (the same bytes in flight)."""
    deep_factor = planned.tile_k // 64
    shallow = dataclasses.replace(planned, swap_ab=swapped, tile_k=64,
                                  stages=None if planned.stages is None else planned.stages * deep_factor)
    ring = cfg.smem_budget(cfg.KernelSpec("sm90", "bf16", "bf16", "k", "k", "n", shallow)).stages
    return {"64-deep": dataclasses.replace(shallow, stages=ring),
            "128-deep": dataclasses.replace(shallow, tile_k=128, stages=max(2, ring // 2))}


def bench_shape(m: int, n: int, k: int, reps: int, flush) -> dict:
    a, b = operands(m, n, k)
    plan = plans.make_plan(a, b, None, None, None)
    configs = both_depths(plan.spec.config, swapped=plan.mode == "swap")
    calls = {"torch.matmul": torch.matmul}
    calls.update({name: (lambda c: lambda x, y: wsgemm.gemm(x, y, config=c))(c) for name, c in configs.items()})
    reference = a.float() @ b.float()
    errors = {name: wsgemm.timing.relative_error(call(a, b), reference) for name, call in calls.items()}
    wrong = sorted(name for name, error in errors.items() if not within_tolerance(error))
    timed = {name: call for name, call in calls.items() if name not in wrong}
    single = wsgemm.timing.time_in_turns({name: (lambda f: lambda: f(a, b))(f) for name, f in timed.items()},
                                         reps, flush.evict)
    graph = wsgemm.timing.time_graph_replays(timed, a, b, flush, GRAPH_CALLS, reps)
    return {"plan": plan.spec.config.short(), "swapped": plan.mode == "swap",
            "configs": {name: c.short() for name, c in configs.items()},
            "wrong": wrong, "single_us": {name: round(statistics.median(v) * 1e3, 2) for name, v in single.items()},
            "graph_us": {name: round(v * 1e3, 3) for name, v in graph.items()}}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.studies.deep_k_blocks", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tokens", default="1,16,64", help="comma-separated M")
    p.add_argument("--weights", default=",".join(f"{n}x{k}" for n, k in WEIGHTS),
                   help="comma-separated NxK weight shapes (default: Llama-3 8B and 70B)")
    p.add_argument("--name", default="deep_k_blocks", help="the report is <out>/<name>.json")
    p.add_argument("--reps", type=int, default=15)
    p.add_argument("--out", default=str(RESULTS), help="output folder (default: benchmarks/results/)")
    args = p.parse_args(argv)
    argv = sys.argv[1:] if argv is None else argv
    flush = wsgemm.timing.L2Flush()
    weights = [tuple(int(d) for d in w.split("x")) for w in args.weights.split(",")]
    shapes = [(int(m), n, k) for m in args.tokens.split(",") for n, k in weights]
    report = {"command": regenerate_command("benchmarks.studies.deep_k_blocks", argv), "environment": environment(),
              "gpu_before": gpu_state(), "reps": args.reps, "rows": {}}
    for i, (m, n, k) in enumerate(shapes, 1):
        print(f"[{i}/{len(shapes)}] {m}x{n}x{k}", file=sys.stderr, flush=True)
        row = bench_shape(m, n, k, args.reps, flush)
        report["rows"][f"{m}x{n}x{k}"] = row
        g = row["graph_us"]
        if not row["wrong"]:
            print(f"  {row['plan']}: graph 64-deep {g['64-deep']} us, 128-deep {g['128-deep']} us "
                  f"({g['64-deep'] / g['128-deep']:.3f}x), torch.matmul {g['torch.matmul']} us", flush=True)
    report["gpu_after"] = gpu_state()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    write_results(out / f"{args.name}.json", report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
