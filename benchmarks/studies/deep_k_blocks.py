"""Decode plans with 64- and 128-deep k-blocks, side by side (benchmarks/NOTES.md
sections 62-63).

A decode tile streams a slab of the weight. A 64-deep k-block loads 128 B of each
weight row (one TMA box), a 128-deep one 256 B (two boxes, issued together). For every
shape, this times its default plan (swapped or not) twice, with 64-deep k-blocks and
with 128-deep ones on half the stages (the same bytes in flight), beside torch.matmul.
Single calls after an L2 flush, and CUDA-graph replays of 20 back-to-back calls. Each
output is checked against a float32 reference before it is timed. Shapes: M in
``--tokens`` on the ``--weights`` (by default Llama-3 8B's and 70B's), B = W.t().

    python benchmarks/deep_k_blocks.py --tokens 1,16,64

Writes ``<out>/<name>.json.gz`` (``--name``, by default ``deep_k_blocks``).
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_gemm import environment, gpu_state, within_tolerance, write_results  # noqa: E402
from result_files import regenerate_command  # noqa: E402

import wsgemm  # noqa: E402
import wsgemm.timing  # noqa: E402
from wsgemm import config as cfg  # noqa: E402

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
    a = torch.randn(m, k, device="cuda").to(torch.bfloat16)
    b = torch.randn(n, k, device="cuda").to(torch.bfloat16).t()
    plan = wsgemm.api.make_plan(a, b, None, None, None)
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
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tokens", default="1,16,64", help="comma-separated M")
    p.add_argument("--weights", default=",".join(f"{n}x{k}" for n, k in WEIGHTS),
                   help="comma-separated NxK weight shapes (default: Llama-3 8B and 70B)")
    p.add_argument("--name", default="deep_k_blocks", help="the report is <out>/<name>.json.gz")
    p.add_argument("--reps", type=int, default=15)
    p.add_argument("--out", default=str(Path(__file__).parent / "results"))
    args = p.parse_args(argv)
    argv = sys.argv[1:] if argv is None else argv
    flush = wsgemm.timing.L2Flush()
    weights = [tuple(int(d) for d in w.split("x")) for w in args.weights.split(",")]
    shapes = [(int(m), n, k) for m in args.tokens.split(",") for n, k in weights]
    report = {"command": regenerate_command("deep_k_blocks.py", argv), "environment": environment(),
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
    write_results(out / f"{args.name}.json.gz", report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
