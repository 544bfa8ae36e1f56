"""One call each of wsgemm, cuBLAS and QuACK (if installed) on the same operands,
inside a profiler range, for Nsight Compute to read the hardware counters of.

Every implementation runs (and compiles) once before the range opens, so only the
measured calls are profiled:

    ncu --clock-control none --profile-from-start off \\
        --section SpeedOfLight --section WarpStateStats --section InstructionStats \\
        --section SourceCounters --import-source no -o /tmp/rep \\
        python -m benchmarks.maint.ncu_kernels --shape 8192x8192x256
    ncu -i /tmp/rep.ncu-rep --page source --print-source sass --csv > sass.csv
    python -m benchmarks.maint.ncu_summary sass.csv --out benchmarks/results/ncu_8192x8192x256.json

``--clock-control none`` leaves the clocks to the GPU, as every timing here does
(ncu would otherwise lock them at base). docs/profiling.md walks through a profile.
"""

from __future__ import annotations

import argparse
import sys

import torch

import wsgemm
import wsgemm.timing
from benchmarks.harness import DTYPES, operands, parse_shapes, quack_gemm
from benchmarks.maint.sustained import launched_as_given, parse_config
from wsgemm import plans


def implementations(a: torch.Tensor, b: torch.Tensor, wanted: list[str], configs: list[str] = ()) -> dict:
    fns = {"wsgemm": lambda: wsgemm.gemm(a, b), "torch.matmul": lambda: torch.matmul(a, b)}
    for text in configs:  # launched as the default path launches its own, with the band width given
        launch = launched_as_given(parse_config(text))
        fns[f"wsgemm {text}"] = lambda launch=launch: launch(a, b)
    quack, note = quack_gemm(autotune=False)  # the suite's entry point: QuACK's heuristic config
    if quack is not None:
        fns["quack"] = lambda: quack(a, b)
    elif "quack" in wanted:
        print(f"quack: {note}", flush=True)
    return {name: fn for name, fn in fns.items() if name in wanted or name.removeprefix("wsgemm ") in configs}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.maint.ncu_kernels", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shape", default="8192x8192x256", help="MxNxK")
    p.add_argument("--dtype", default="bf16")
    p.add_argument("--impls", default="wsgemm,torch.matmul,quack")
    p.add_argument("--configs", default="", help="wsgemm configurations to profile too, TMxTN:CMxCN[:wS][:sD][:n][:x] "
                   "(as benchmarks.maint.sustained takes them)")
    p.add_argument("--weight", action="store_true", help="B = W.t() of an (N, K) weight, as nn.Linear stores it")
    args = p.parse_args(argv)
    ((m, n, k),) = parse_shapes(args.shape)
    dtype = DTYPES[args.dtype]
    a, b = operands(m, n, k, dtype, args.weight)
    ref = a.float() @ b.float()
    fns = implementations(a, b, args.impls.split(","), [c for c in args.configs.split(",") if c])
    for name, fn in fns.items():  # compile, warm up, and check before profiling
        error = wsgemm.timing.relative_error(fn(), ref)
        print(f"{name}: relative error {error:.2e}", flush=True)
    print("wsgemm plan:", plans.make_plan(a, b, None, None, None).spec.config.short(), flush=True)
    print("profiled in this order:", ", ".join(fns), flush=True)
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    for fn in fns.values():
        fn()
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
