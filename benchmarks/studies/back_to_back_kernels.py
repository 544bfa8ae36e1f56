"""Study: how long does each kernel of back-to-back calls take, untraced?

**Question.** A change to split-K's fix-up (the finisher loading its slots in rounds
before adding them) ran 12.70 -> 11.62 us at 8 splits in a config sweep's graph
replays, yet ``benchmarks.maint.kernel_timeline``'s trace points saw no gain. Is the
gain the kernel's, and what do the trace points cost?

**Run** 2026-12-01 on an H200 (NVIDIA H200, CUDA graphs of 20 calls of
1024x16x8192, 64x16 tiles split 2-8, beside the commit before the change through
``benchmarks.maint.baseline``).

**Result.** CUPTI, untraced: 7.36 -> 6.21 us a kernel at 8 splits back to back, level
at 2 splits; after the suite's L2 flush 9.38 -> 8.03 us at 8 splits. Traced: level.

**Conclusion.** The gain is the kernel's: the trace points shift a kernel by
0.4-0.7 us, too coarse to tell such variants apart, and a serial fix-up slot costs
~0.2 us. Variants that differ by less than a microsecond are compared untraced, with
this script. Tuning log: docs/tuning-log/split-k.md.

What it measures: calls of one fixed configuration are captured in a CUDA graph
(``--calls`` a graph, no L2 flush between them) and replayed under the profiler; per
implementation: the median kernel duration, the median gap between consecutive
kernels, and the time per call from CUDA events around whole replays. With ``--base``
a ``benchmarks.maint.baseline`` export of another commit runs beside this tree's
package, so a kernel change can be told apart from host time and launch gaps.
``--after-flush RUNS`` adds each kernel's median over single calls after the suite's
L2 flush.

    python -m benchmarks.maint.baseline e009d98 /tmp/base
    PYTHONPATH=/tmp/base python -m benchmarks.studies.back_to_back_kernels --base --after-flush 15 \\
        --shape 1024x16x8192 --tile 64x16 --splits 2,4,8 --name fixup_back_to_back
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import torch

import wsgemm
import wsgemm.timing
from benchmarks.harness import RESULTS, environment, kernel_spans, operands, regenerate_command, within_tolerance


def kernel_stats(spans: list[tuple[float, float]]) -> dict:
    """Median duration and median gap (us) of kernels given as (start, end) pairs."""
    spans = sorted(spans)
    gaps = [later[0] - earlier[1] for earlier, later in zip(spans, spans[1:])]
    return {"kernels": len(spans), "median_us": statistics.median(end - start for start, end in spans),
            "median_gap_us": statistics.median(gaps) if gaps else 0.0}


def checked_output(package, a, b, config) -> torch.Tensor:
    d = package.gemm(a, b, config=config)
    ref = a.float() @ b.float()
    error = wsgemm.timing.relative_error(d, ref)
    if not within_tolerance(error):
        raise SystemExit(f"{package.__name__} {config.short()}: wrong result (relative error {error:.2e})")
    return d


def after_flushes(package, a, b, config, runs: int) -> dict:
    """Single calls, each after the suite's L2 flush (``wsgemm.timing.L2Flush``)."""
    d = checked_output(package, a, b, config)
    flush = wsgemm.timing.L2Flush()

    def calls():
        for _ in range(runs):
            flush()
            package.gemm(a, b, out=d, config=config)

    return {"median_us": kernel_stats(kernel_spans(calls, (flush,)))["median_us"]}


def back_to_back(package, a, b, config, calls: int, replays: int) -> dict:
    d = checked_output(package, a, b, config)
    # One operand copy: back to back, the weight stays in L2, as in a decode loop.
    graph, _ = wsgemm.timing.capture_back_to_back(lambda: package.gemm(a, b, out=d, config=config), [()], calls)
    graph.replay()
    torch.cuda.synchronize()
    spans = kernel_spans(lambda: [graph.replay() for _ in range(replays)])
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(replays):
        graph.replay()
    end.record()
    torch.cuda.synchronize()
    return {**kernel_stats(spans), "per_call_us": start.elapsed_time(end) * 1e3 / (replays * calls)}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.studies.back_to_back_kernels", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shape", required=True, help="MxNxK; B = W.t() of an (N, K) weight")
    p.add_argument("--tile", required=True, help="TMxTN")
    p.add_argument("--splits", default="1", help="split_k values, e.g. 4,8")
    p.add_argument("--calls", type=int, default=20, help="calls captured in one graph")
    p.add_argument("--replays", type=int, default=5)
    p.add_argument("--base", action="store_true", help="also run benchmarks.maint.baseline's export (wsgemm_base)")
    p.add_argument("--after-flush", type=int, default=0, metavar="RUNS",
                   help="also single calls, each after the suite's L2 flush: the median kernel of RUNS")
    p.add_argument("--name", default="back_to_back_kernels")
    p.add_argument("--out", type=Path, default=RESULTS, help="output folder (default: benchmarks/results/)")
    args = p.parse_args(argv)
    m, n, k = (int(v) for v in args.shape.split("x"))
    tile_m, tile_n = (int(v) for v in args.tile.split("x"))
    packages = {"wsgemm": wsgemm}
    if args.base:
        import wsgemm_base
        packages["wsgemm-base"] = wsgemm_base
    a, b = operands(m, n, k)
    rows = []
    for split in (int(s) for s in args.splits.split(",")):
        for name, package in packages.items():
            config = package.GemmConfig(tile_m=tile_m, tile_n=tile_n, split_k=split)
            row = {"impl": name, "config": config.short(), **back_to_back(package, a, b, config, args.calls,
                                                                          args.replays)}
            if args.after_flush:
                row["after_flush_us"] = after_flushes(package, a, b, config, args.after_flush)["median_us"]
            rows.append(row)
            print(f"{name:12s} {row['config']}: kernel {row['median_us']:.2f} us, gap {row['median_gap_us']:.2f}, "
                  f"{row['per_call_us']:.2f} us a call"
                  + (f"; after a flush {row['after_flush_us']:.2f} us" if args.after_flush else ""), flush=True)
    report = {"command": regenerate_command("benchmarks.studies.back_to_back_kernels",
                                            sys.argv[1:] if argv is None else argv),
              "environment": environment(), "shape": [m, n, k], "b": "W.t()", "calls": args.calls,
              "replays": args.replays, "rows": rows}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{args.name}.json").write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
