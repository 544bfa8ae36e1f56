"""Large GEMMs called back to back, as a prefill or a training step calls them, with the
GPU's SM clock and board power sampled while each implementation runs.

The suite times single calls after an L2 flush. A run of large GEMMs keeps an H200 at
its power limit (~690 W) instead, where the clock, and so the speed, depends on the
power each implementation draws per FLOP: HBM traffic costs clock
(benchmarks/NOTES.md section 35). For each shape this script

* checks every implementation's output against a float32 reference;
* **sustained**: calls each implementation back to back for ``--seconds`` (the first
  half untimed, to reach the power limit), in turns, ``--rounds`` times, and reports
  the median ms per call of the timed halves with the median SM clock (MHz) and board
  power (W) sampled every 20 ms meanwhile;
* **single** (with ``--single REPS``): the suite's protocol beside it (single calls in
  turns, each after an L2 flush, ``wsgemm.timing``).

Implementations: ``torch.matmul``, ``wsgemm`` (its default path) and, per ``--bands``,
``wsgemm-wS``: the default path's configuration walking the output in raster bands of
S cluster columns (``GemmConfig.swizzle``; 1 walks all of M before moving along N).

    python benchmarks/sustained.py --shapes 16384x10240x8192,8192x8192x8192 --bands 1,8 --single 10
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_gemm import environment, parse_shapes  # noqa: E402
from suite import TOLERANCE, check, default_config_with  # noqa: E402

import wsgemm  # noqa: E402
from wsgemm import timing  # noqa: E402

SAMPLE_SECONDS = 0.02


def sample_gpu(stop: threading.Event, samples: list) -> None:
    """(SM clock MHz, board power W) every ``SAMPLE_SECONDS`` until ``stop``."""
    while not stop.is_set():
        samples.append((torch.cuda.clock_rate(), torch.cuda.power_draw() / 1000.0))
        time.sleep(SAMPLE_SECONDS)


def back_to_back(fn, seconds: float) -> dict:
    """``fn`` called back to back for ``seconds``: ms per call over the second half,
    with the SM clock and power sampled meanwhile (medians)."""
    start = time.perf_counter()
    calls = 0
    while time.perf_counter() - start < seconds / 2:  # reach the power limit; untimed
        fn()
        calls += 1
        if calls % 8 == 0:
            torch.cuda.synchronize()  # keep the host's queue short
    torch.cuda.synchronize()
    samples, stop = [], threading.Event()
    sampler = threading.Thread(target=sample_gpu, args=(stop, samples))
    sampler.start()
    first, last = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    timed = max(4, calls)
    first.record()
    for _ in range(timed):
        fn()
    last.record()
    torch.cuda.synchronize()
    stop.set()
    sampler.join()
    return {"ms": first.elapsed_time(last) / timed, "calls": timed,
            "mhz": statistics.median(s[0] for s in samples) if samples else None,
            "watts": statistics.median(s[1] for s in samples) if samples else None}


def implementations(bands: list[int]) -> dict:
    fns = {"torch.matmul": torch.matmul, "wsgemm": wsgemm.gemm}
    for band in bands:
        fns[f"wsgemm-w{band}"] = default_config_with(swizzle=band)
    return fns


def run_shape(shape, fns: dict, args) -> dict:
    m, n, k = shape
    a = torch.randn(m, k, device="cuda").to(torch.bfloat16)
    b = torch.randn(n, k, device="cuda").to(torch.bfloat16).t()  # an nn.Linear weight, as the LLM suite
    ref = torch.matmul(a.float(), b.float())
    checks = {name: check(fn, a, b, ref, TOLERANCE["bf16"]) for name, fn in fns.items()}
    del ref
    good = {name: (lambda fn=fn: fn(a, b)) for name, fn in fns.items() if checks[name]["status"] == "ok"}
    plan = wsgemm.api.make_plan(a, b, None, None, None)
    row = {"shape": [m, n, k], "b": "W.t()", "wsgemm_plan": f"{plan.mode} {plan.spec.config.short()}",
           "checks": checks, "sustained": {name: [] for name in good}}
    for _ in range(args.rounds):
        for name, fn in good.items():
            row["sustained"][name].append(back_to_back(fn, args.seconds))
    if args.single:
        times = timing.time_in_turns(good, args.single, timing.L2Flush())
        row["single_ms"] = {name: statistics.median(ms) for name, ms in times.items()}
    return row


def summary(row: dict) -> dict:
    """{name: (sustained ms, MHz, W, x of torch.matmul sustained, single ms, x single)}."""
    med = {name: {key: statistics.median(r[key] for r in runs) for key in ("ms", "mhz", "watts")}
           for name, runs in row["sustained"].items()}
    single = row.get("single_ms", {})
    out = {}
    for name, s in med.items():
        out[name] = {**s, "x_torch": med["torch.matmul"]["ms"] / s["ms"] if "torch.matmul" in med else None,
                     "single_ms": single.get(name),
                     "single_x_torch": single["torch.matmul"] / single[name] if name in single and
                     "torch.matmul" in single else None}
    return out


def markdown(report: dict) -> str:
    env = report["environment"]
    lines = [f"# {report['name']}\n",
             f"{env['gpu']}, torch {env['torch']}, CuTe DSL {env.get('cutlass_dsl', '?')}; {report['date']}. "
             f"B is an (N, K) weight passed as `W.t()`, bf16. **Sustained**: each implementation called back to "
             f"back for {report['seconds']} s (the first half untimed), in turns, {report['rounds']} rounds; "
             "median ms per call with the median SM clock and board power sampled meanwhile. "
             + (f"**Single**: the suite's protocol, {report['single']} single calls in turns, each after an "
                "L2 flush. " if report["single"] else "")
             + "Every output was checked against a float32 reference first.\n",
             "| shape | wsgemm plan | implementation | sustained us | MHz | W | x torch.matmul | single us | "
             "x torch.matmul (single) |", "|---|---|---|---|---|---|---|---|---|"]
    for row in report["shapes"]:
        m, n, k = row["shape"]
        for name, s in summary(row).items():
            single = f"{s['single_ms'] * 1e3:.0f} | {s['single_x_torch']:.3f}x" if s["single_ms"] else "- | -"
            lines.append(f"| {m}x{n}x{k} | `{row['wsgemm_plan']}` | {name} | {s['ms'] * 1e3:.0f} | "
                         f"{s['mhz']:.0f} | {s['watts']:.0f} | {s['x_torch']:.3f}x | {single} |")
    lines.append(f"\nRegenerate: `{report['command']}`")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shapes", default="16384x10240x8192,8192x8192x8192", help="MxNxK[,MxNxK...]")
    p.add_argument("--bands", default="1,8", help="raster band widths of the default plan to add (empty: none)")
    p.add_argument("--seconds", type=float, default=1.0, help="back-to-back seconds per implementation and round")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--single", type=int, default=0, help="also time REPS single calls after an L2 flush")
    p.add_argument("--name", default="sustained")
    p.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results")
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        raise SystemExit("sustained.py needs a CUDA GPU")
    fns = implementations([int(v) for v in args.bands.split(",") if v])
    shapes = parse_shapes(args.shapes)
    report = {"name": args.name, "command": "python benchmarks/sustained.py " + " ".join(argv or sys.argv[1:]),
              "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "environment": environment(),
              "seconds": args.seconds, "rounds": args.rounds, "single": args.single, "shapes": []}
    for i, shape in enumerate(shapes, 1):
        print(f"[{i}/{len(shapes)}] {'x'.join(map(str, shape))}: {len(fns)} implementations, "
              f"{args.rounds} x {args.seconds} s back to back each", flush=True)
        row = run_shape(shape, fns, args)
        report["shapes"].append(row)
        for name, s in summary(row).items():
            single = f", single {s['single_x_torch']:.3f}x" if s["single_ms"] else ""
            print(f"  {name:16s} {s['ms'] * 1e3:9.1f} us {s['mhz']:6.0f} MHz {s['watts']:5.0f} W "
                  f"{s['x_torch']:.3f}x{single}", flush=True)
        # After every shape: a long run cut short keeps what it measured.
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / f"{args.name}.json").write_text(json.dumps(report, indent=1) + "\n")
        (args.out / f"{args.name}.md").write_text(markdown(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
