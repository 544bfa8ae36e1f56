"""wsgemm vs torch.matmul (cuBLAS), side by side in one process.

Protocol: random normal inputs; each implementation's output is checked against a
float32 reference before it is timed (a wrong result is reported, not timed);
warm-up; then ``--reps`` rounds in which the implementations take turns, each run
timed with CUDA events and preceded by a write of a 512 MiB buffer that evicts L2
(60 MB on an H200); median and spread per implementation; GPU clocks and
temperature recorded before and after.

    python benchmarks/bench_gemm.py --shapes 8192x8192x8192,4096x4096x4096 --dtypes bf16,fp16

Writes ``<out>/<name>.json`` and ``<out>/<name>.md``.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from result_files import write_text  # noqa: E402

import wsgemm  # noqa: E402
import wsgemm.timing  # noqa: E402

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
# The largest relative Frobenius error from the float32 reference a correct output has,
# per input dtype (bf16 keeps 8 mantissa bits, fp16 11).
TOLERANCE = {"bf16": 1e-2, "fp16": 2e-3}


def within_tolerance(error: float, dtype_name: str = "bf16") -> bool:
    """Whether an output with this relative error is correct; a NaN error is not."""
    return error < TOLERANCE[dtype_name]


# Significant digits a results file keeps of each float: run-to-run noise on the GPU
# is ~1 %, so more digits only make the committed files (and the tree) larger.
RESULT_DIGITS = 5


def rounded(value):
    """``value`` (JSON-like) with every float rounded to ``RESULT_DIGITS`` significant digits."""
    if isinstance(value, float):
        return float(f"{value:.{RESULT_DIGITS}g}")
    if isinstance(value, dict):
        return {key: rounded(item) for key, item in value.items()}
    if isinstance(value, list):
        return [rounded(item) for item in value]
    return value


def results_json(report: dict) -> str:
    """A results file's text: compact (no indentation), floats :func:`rounded`."""
    return json.dumps(rounded(report), separators=(",", ":")) + "\n"


def write_results(path: Path, report: dict) -> None:
    """Write ``report`` as :func:`results_json` to ``path``, gzipped where the name ends
    in ``.gz`` (the small reports that only their ``.md`` tables and the examples read
    are kept so, to hold the tree under its 2 MiB limit)."""
    write_text(path, results_json(report))


def gpu_state() -> dict:
    fields = "clocks.sm,clocks.mem,temperature.gpu,power.draw"
    try:
        out = subprocess.run(
            ["nvidia-smi", f"--query-gpu={fields}", "--format=csv,noheader,nounits"],
            capture_output=True, text=True, timeout=10,
        ).stdout.strip().splitlines()[0]
        return dict(zip(fields.split(","), [v.strip() for v in out.split(",")]))
    except Exception as exc:  # no nvidia-smi: record why
        return {"error": str(exc)}


def environment() -> dict:
    import cutlass

    props = torch.cuda.get_device_properties(0)
    try:
        driver = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                capture_output=True, text=True, timeout=10).stdout.strip()
    except Exception:
        driver = None
    return {
        "gpu": props.name,
        "sms": props.multi_processor_count,
        "driver": driver,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cutlass_dsl": getattr(cutlass, "__version__", None),
        "wsgemm": wsgemm.__version__,
        "python": platform.python_version(),
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
    }


def cuda_kernel_events(fn) -> list:
    """The CUDA kernels (profiler events) that ``fn`` launches, as CUPTI records them."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]


def kernel_spans(fn, leave_out=()) -> list[tuple[float, float]]:
    """(start, end) of every kernel ``fn`` launches, CUPTI's clock (us), but memsets and
    the kernels that each of ``leave_out`` (a flush, a scratch reset) launches alone."""
    skip = {e.name for other in leave_out for e in cuda_kernel_events(other)}
    return [(e.time_range.start, e.time_range.end) for e in cuda_kernel_events(fn)
            if e.name not in skip and "memset" not in e.name.lower()]


def parse_shapes(text: str) -> list[tuple[int, int, int]]:
    return [tuple(int(x) for x in s.split("x")) for s in text.split(",") if s]


def add_flush_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--flush", default="read", choices=wsgemm.timing.L2Flush.MODES,
                        help="before each timed run: read twice the L2 and spin (the autotuner's protocol), "
                        "or write 512 MiB (the suite's until session 14; leaves the L2 full of dirty lines)")


def time_interleaved(impls: dict, reps: int, flush: wsgemm.timing.L2Flush) -> dict[str, list[float]]:
    """Milliseconds of every run, the implementations taking turns, each run after
    ``flush`` (wsgemm.timing: the autotuner's protocol)."""
    return wsgemm.timing.time_in_turns(impls, reps, flush)


def summarize(ms: list[float], flops: float) -> dict:
    ms = sorted(ms)
    med = statistics.median(ms)
    return {
        "median_ms": med,
        "p10_ms": ms[len(ms) // 10],
        "p90_ms": ms[(9 * len(ms)) // 10],
        "min_ms": ms[0],
        "tflops": flops / med / 1e9,
        "runs": len(ms),
    }


def bench_case(m, n, k, dtype_name, reps, warmup, flush, config=None) -> dict:
    dtype = DTYPES[dtype_name]
    a = torch.randn(m, k, device="cuda", dtype=torch.float32).to(dtype)
    b = torch.randn(k, n, device="cuda", dtype=torch.float32).to(dtype)
    ref = torch.matmul(a.float(), b.float())
    impls = {
        "wsgemm": lambda: wsgemm.gemm(a, b, config=config),
        "torch.matmul": lambda: torch.matmul(a, b),
    }
    row = {"m": m, "n": n, "k": k, "dtype": dtype_name, "results": {}}
    good = {}
    for name, fn in impls.items():
        d = fn()
        err = wsgemm.timing.relative_error(d, ref)
        ok = within_tolerance(err, dtype_name)
        row["results"][name] = {"rel_error": err, "correct": ok}
        if ok:
            good[name] = fn
    for _ in range(warmup):
        for fn in good.values():
            fn()
    times = time_interleaved(good, reps, flush)
    flops = 2.0 * m * n * k
    for name, ms in times.items():
        row["results"][name].update(summarize(ms, flops))
    if "wsgemm" in times and "torch.matmul" in times:
        row["speedup_vs_torch"] = (
            row["results"]["torch.matmul"]["median_ms"] / row["results"]["wsgemm"]["median_ms"]
        )
    return row


def markdown(report: dict) -> str:
    env = report["environment"]
    lines = [
        f"# {report['name']}",
        "",
        f"{env['gpu']} ({env['sms']} SMs), driver {env['driver']}, torch {env['torch']} (CUDA {env['cuda']}), "
        f"CuTe DSL {env['cutlass_dsl']}, wsgemm {env['wsgemm']}; {env['date']}.",
        f"Median of {report['reps']} interleaved runs each, {report.get('flush', 'L2 flushed')} before every run, "
        "random normal inputs. "
        "p10-p90 in brackets.",
        "",
        "| shape (MxNxK) | dtype | wsgemm TFLOP/s | torch.matmul TFLOP/s | wsgemm / torch | wsgemm ms [p10-p90] | torch ms [p10-p90] |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in report["rows"]:
        w, t = row["results"].get("wsgemm", {}), row["results"].get("torch.matmul", {})

        def cell(r, key, fmt):
            return fmt.format(r[key]) if key in r else ("WRONG" if r and not r.get("correct") else "-")

        spread = lambda r: f"{r['median_ms']:.3f} [{r['p10_ms']:.3f}-{r['p90_ms']:.3f}]" if "median_ms" in r else "-"
        lines.append(
            f"| {row['m']}x{row['n']}x{row['k']} | {row['dtype']} | {cell(w, 'tflops', '{:.1f}')} | "
            f"{cell(t, 'tflops', '{:.1f}')} | {row.get('speedup_vs_torch', float('nan')):.3f}x | "
            f"{spread(w)} | {spread(t)} |"
        )
    lines += [
        "",
        f"GPU state before: {report['gpu_before']}; after: {report['gpu_after']}.",
        "",
        f"Regenerate: `{report['command']}`",
    ]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shapes", default="8192x8192x8192,4096x4096x4096")
    p.add_argument("--dtypes", default="bf16,fp16")
    p.add_argument("--reps", type=int, default=50)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--name", default="gemm_vs_cublas")
    p.add_argument("--out", default=str(Path(__file__).parent / "results"))
    add_flush_option(p)
    args = p.parse_args(argv)
    torch.backends.cuda.matmul.allow_tf32 = False
    flush = wsgemm.timing.L2Flush(mode=args.flush)
    cases = [(s, d) for s in parse_shapes(args.shapes) for d in args.dtypes.split(",")]
    report = {
        "name": args.name,
        "command": f"python benchmarks/bench_gemm.py --shapes {args.shapes} --dtypes {args.dtypes} "
        f"--reps {args.reps} --name {args.name} --flush {args.flush}",
        "environment": environment(),
        "reps": args.reps,
        "flush": flush.describe(),
        "gpu_before": gpu_state(),
        "rows": [],
    }
    for i, ((m, n, k), dt) in enumerate(cases, 1):
        row = bench_case(m, n, k, dt, args.reps, args.warmup, flush)
        report["rows"].append(row)
        w = row["results"]["wsgemm"].get("tflops", float("nan"))
        t = row["results"]["torch.matmul"].get("tflops", float("nan"))
        print(f"[{i}/{len(cases)}] {m}x{n}x{k} {dt}: wsgemm {w:.1f} TFLOP/s, torch.matmul {t:.1f} TFLOP/s, "
              f"ratio {row.get('speedup_vs_torch', float('nan')):.3f}", flush=True)
    report["gpu_after"] = gpu_state()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{args.name}.json").write_text(json.dumps(report, indent=2) + "\n")
    (out / f"{args.name}.md").write_text(markdown(report))
    print(markdown(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
