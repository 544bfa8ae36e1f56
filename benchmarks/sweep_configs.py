"""Time several ``GemmConfig``s of wsgemm against torch.matmul on one shape, interleaved.

Used to choose the defaults in ``wsgemm/heuristics.py``; results go to
``benchmarks/results/<name>.json`` and the findings to benchmarks/NOTES.md.

    python benchmarks/sweep_configs.py --shape 8192x8192x8192 --dtype bf16
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_gemm import DTYPES, environment, gpu_state, summarize, time_interleaved  # noqa: E402

import wsgemm  # noqa: E402
from wsgemm import GemmConfig  # noqa: E402

CANDIDATES = {
    "128x256 c1x1": GemmConfig(),
    "128x256 c2x1": GemmConfig(cluster_m=2),
    "128x256 c1x2": GemmConfig(cluster_n=2),
    "128x256 c2x1 along_n": GemmConfig(cluster_m=2, raster="along_n"),
    "128x256 c2x1 sw4": GemmConfig(cluster_m=2, swizzle=4),
    "128x256 c2x1 sw8 along_n": GemmConfig(cluster_m=2, swizzle=8, raster="along_n"),
    "128x256 c2x1 e1": GemmConfig(cluster_m=2, epi_stages=1),
    "128x256 c2x1 after_copy": GemmConfig(cluster_m=2, lookahead="after_copy"),
    "128x256 c2x1 none": GemmConfig(cluster_m=2, lookahead="none"),
    "128x192 c2x1": GemmConfig(tile_n=192, cluster_m=2),
    "128x128 c2x1": GemmConfig(tile_n=128, cluster_m=2),
}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shape", default="8192x8192x8192")
    p.add_argument("--dtype", default="bf16")
    p.add_argument("--reps", type=int, default=20)
    p.add_argument("--name", default="sweep_8192_bf16")
    p.add_argument("--out", default=str(Path(__file__).parent / "results"))
    args = p.parse_args(argv)
    m, n, k = (int(x) for x in args.shape.split("x"))
    dtype = DTYPES[args.dtype]
    a = torch.randn(m, k, device="cuda").to(dtype)
    b = torch.randn(k, n, device="cuda").to(dtype)
    ref = a.float() @ b.float()
    impls = {"torch.matmul": lambda: torch.matmul(a, b)}
    errors = {}
    for label, config in CANDIDATES.items():
        fn = (lambda c: (lambda: wsgemm.gemm(a, b, config=c)))(config)
        d = fn()
        errors[label] = ((d.float() - ref).norm() / ref.norm()).item()
        if errors[label] < 1e-2:
            impls[label] = fn
        print(f"compiled {label}: rel error {errors[label]:.2e}", flush=True)
    flush = torch.empty(128 * 1024 * 1024, device="cuda", dtype=torch.float32)
    for fn in impls.values():
        fn()
    times = time_interleaved(impls, args.reps, flush)
    flops = 2.0 * m * n * k
    rows = {label: {**summarize(ms, flops), "rel_error": errors.get(label)} for label, ms in times.items()}
    base = rows["torch.matmul"]["median_ms"]
    print(f"\n{args.shape} {args.dtype}: median of {args.reps} interleaved runs")
    for label, r in sorted(rows.items(), key=lambda kv: kv[1]["median_ms"]):
        print(f"  {label:28s} {r['tflops']:7.1f} TFLOP/s  {base / r['median_ms']:.3f}x torch  "
              f"[{r['p10_ms']:.3f}-{r['p90_ms']:.3f} ms]")
    report = {"shape": [m, n, k], "dtype": args.dtype, "reps": args.reps, "environment": environment(),
              "gpu_state": gpu_state(), "configs": {k2: c.short() for k2, c in CANDIDATES.items()}, "rows": rows}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{args.name}.json").write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
