"""Fused epilogues against the paths a PyTorch user has: does ``act(a @ w.t() + bias)``
in one wsgemm kernel beat two kernels?

For each LLM-shaped problem (M tokens against an N x K weight), bf16, side by side in
one process, the implementations taking turns after an L2 flush (the suite's protocol,
``benchmarks/harness.py``), median of ``--reps`` runs:

* ``wsgemm fused``: ``wsgemm.gemm(a, w.t(), bias=b, activation=act)``, one kernel;
* ``wsgemm + torch``: ``act(wsgemm.gemm(a, w.t()) + b)``: the unfused call and PyTorch's
  elementwise kernels (what the fusion must never lose to);
* ``torch``: ``act(torch.addmm(b, a, w.t()))`` (cuBLASLt's bias epilogue, then the
  activation's kernel);
* ``torch.compile``: the same function compiled by inductor (its own fusion choice).

Every output is checked against a float32 reference before it is timed.

    python -m benchmarks.bench_fused [--activation gelu] [--m 1,16,128,1024,8192] [--reps 30]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import torch

import wsgemm
from wsgemm.fused import reference_activation
from wsgemm.timing import L2Flush, relative_error, time_in_turns

# (name, N, K): Llama-3 8B's projections whose output an activation follows in an MLP
# (gate/up), and the attention output and down projection (bias-only paths).
WEIGHTS = [("llama3-8b up", 14336, 4096), ("llama3-8b down", 4096, 14336), ("llama3-8b o", 4096, 4096)]
TOLERANCE = 2e-2


def torch_activation(name: str):
    f = torch.nn.functional
    return {"relu": f.relu, "gelu": f.gelu, "gelu_tanh": lambda x: f.gelu(x, approximate="tanh"),
            "silu": f.silu}[name]


def implementations(a, w, bias, activation: str) -> dict:
    act = torch_activation(activation)

    def eager(x, weight, b):
        return act(torch.addmm(b, x, weight.t()))

    compiled = torch.compile(eager)
    return {
        "wsgemm fused": lambda: wsgemm.gemm(a, w.t(), bias=bias, activation=activation),
        "wsgemm + torch": lambda: act(wsgemm.gemm(a, w.t()) + bias),
        "torch": lambda: eager(a, w, bias),
        "torch.compile": lambda: compiled(a, w, bias),
    }


def run_problem(label: str, m: int, n: int, k: int, activation: str, reps: int, flush) -> dict:
    a = torch.randn(m, k, device="cuda").to(torch.bfloat16)
    w = torch.randn(n, k, device="cuda").to(torch.bfloat16) / k ** 0.5
    bias = torch.randn(n, device="cuda").to(torch.bfloat16)
    reference = reference_activation(a.float() @ w.float().t() + bias.float(), activation)
    impls = implementations(a, w, bias, activation)
    errors = {}
    for name, fn in impls.items():
        errors[name] = relative_error(fn(), reference)
        if errors[name] > TOLERANCE:
            raise AssertionError(f"{label} M={m}: {name} is wrong (relative error {errors[name]:.2e})")
    times = time_in_turns(impls, reps, flush)
    us = {name: statistics.median(ms) * 1e3 for name, ms in times.items()}
    return {"label": label, "m": m, "n": n, "k": k, "activation": activation, "us": us, "errors": errors}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--activation", default="gelu", choices=["relu", "gelu", "gelu_tanh", "silu"])
    parser.add_argument("--m", default="1,16,64,256,1024,4096,8192", help="token counts, comma-separated")
    parser.add_argument("--reps", type=int, default=30)
    parser.add_argument("--out", type=Path, default=None, help="write the rows as JSON here")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("bench_fused needs a CUDA GPU", file=sys.stderr)
        return 2
    flush = L2Flush()
    rows = []
    gpu = torch.cuda.get_device_name()
    print(f"{gpu}; bf16; activation {args.activation}; median of {args.reps}; microseconds")
    header = f"{'problem':<22}{'M':>6}" + "".join(f"{name:>16}" for name in
                                                  ("wsgemm fused", "wsgemm + torch", "torch", "torch.compile"))
    print(header + f"{'fused/torch':>13}{'fused/unfused':>15}")
    for label, n, k in WEIGHTS:
        for m in (int(x) for x in args.m.split(",")):
            row = run_problem(label, m, n, k, args.activation, args.reps, flush)
            rows.append(row)
            us = row["us"]
            print(f"{label:<22}{m:>6}" + "".join(f"{us[name]:>16.1f}" for name in us)
                  + f"{us['torch'] / us['wsgemm fused']:>13.3f}{us['wsgemm + torch'] / us['wsgemm fused']:>15.3f}",
                  flush=True)
    for other in ("torch", "wsgemm + torch", "torch.compile"):
        ratios = [r["us"][other] / r["us"]["wsgemm fused"] for r in rows]
        geomean = statistics.geometric_mean(ratios)
        print(f"speed-up of the fused call over {other}: geometric mean {geomean:.3f}, lowest {min(ratios):.3f}")
    if args.out:
        args.out.write_text(json.dumps({"gpu": gpu, "activation": args.activation, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
