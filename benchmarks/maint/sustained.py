"""Large GEMMs called back to back, as a prefill or a training step calls them, with the
GPU's SM clock and board power sampled while each implementation runs.

The suite times single calls after an L2 flush. A run of large GEMMs keeps an H200 at
its power limit (~690 W) instead, where the clock, and so the speed, depends on the
power each implementation draws per FLOP: HBM traffic costs clock
(docs/tuning-log/raster-bands.md). For each problem this script

* checks every implementation's output against a float32 reference;
* **sustained**: after ``--seconds`` of untimed calls that bring the GPU out of rest,
  calls each implementation back to back for ``--seconds`` (the first
  half untimed, to reach the power limit), in turns, ``--rounds`` times, and reports
  the median ms per call of the timed halves with the median SM clock (MHz) and board
  power (W) sampled every 20 ms meanwhile;
* **single** (with ``--single REPS``): the suite's protocol beside it (single calls in
  turns, each after an L2 flush, ``wsgemm.timing``).

Implementations: ``torch.matmul``, ``wsgemm`` (its default path) and, per ``--bands``,
``wsgemm-wS``: the default path's configuration walking the output in raster bands of
S cluster columns (``GemmConfig.swizzle``; 1 walks all of M before moving along N);
per ``--configs``, other tiles, clusters, bands and walks (as the default path would launch
them, with the band width given).

Problems: ``--shapes`` (B = W.t() of an (N, K) weight), or the suite's own problems
(``--suite``, with their layouts) of at least ``--min-gflop`` per call, where a run of
calls reaches the power limit: the scoreboard's large rows, back to back.

    python -m benchmarks.maint.sustained --shapes 16384x10240x8192,8192x8192x8192 --bands 1,8 --single 10
    python -m benchmarks.maint.sustained --suite llm --suite square --bands "" --name sustained_llm_square

Its reports feed ``benchmarks.maint.retune_sustained`` (winners back to back for the
packaged table); ``--configs`` is also how ``benchmarks.maint.ncu_kernels`` names a
configuration to profile.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import threading
import time
from pathlib import Path

import torch

import wsgemm
from benchmarks import shapes as suites
from benchmarks.harness import (
    RESULTS, TOLERANCE, check, default_config_with, default_problem, environment, gpu_of, make_operands, parse_shapes,
    regenerate_command,
)
from wsgemm import plans, timing
from wsgemm.tuning import launch

SAMPLE_SECONDS = 0.02
# With --suite: problems below this many GFLOP per call are left out (a call of 500
# GFLOP takes ~0.7 ms on an H200; smaller ones rarely run long enough back to back to
# meet the power limit in a model's forward pass).
MIN_GFLOP = 500.0


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


def parse_config(text: str) -> wsgemm.GemmConfig:
    """``TMxTN:CMxCN[:wS][:sD][:n][:x]`` -> a GemmConfig: tile, cluster, raster band width
    S (default 1), ring depth D (default: what the launch policy gives), with ``:n`` a
    walk along N first (``Raster.ALONG_N``), with ``:x`` A and B swapped (``swap_ab``:
    tile and cluster in the kernel's terms, the weight's rows along its M)."""
    tile, cluster, *rest = text.split(":")
    tile_m, tile_n = (int(v) for v in tile.split("x"))
    cluster_m, cluster_n = (int(v) for v in cluster.split("x"))
    swizzle = next((int(v.removeprefix("w")) for v in rest if v.startswith("w")), 1)
    stages = next((int(v.removeprefix("s")) for v in rest if v.startswith("s")), None)
    raster = wsgemm.Raster.ALONG_N if "n" in rest else wsgemm.Raster.ALONG_M
    unknown = [v for v in rest if v not in ("n", "x") and not v.startswith(("w", "s"))]
    if unknown:
        raise ValueError(f"{text!r}: {unknown} is neither a band width (wS), a ring depth (sD), n (walk along N) "
                         "nor x (swap A and B)")
    return wsgemm.GemmConfig(tile_m=tile_m, tile_n=tile_n, cluster_m=cluster_m, cluster_n=cluster_n, swizzle=swizzle,
                             stages=stages, raster=raster, swap_ab="x" in rest)


def launched_as_given(config: wsgemm.GemmConfig, gpu=None):
    """f(a, b): ``config`` launched as the default path launches its own choices
    (``wsgemm.tuning.launch``'s rules: stream-K, epilogue buffers, ...) but with the
    band width it names, which the launch rules would otherwise widen on long grids,
    and the ring depth it names, if any (then with the epilogue buffers that fit
    beside it), which the launch rules would otherwise set on some grids. ``gpu``: the
    planner's ``wsgemm.tuning.Gpu`` (default: the operands' device's)."""
    import dataclasses

    configs = {}

    def gemm(a, b):
        if a.dim() != 2:
            raise ValueError("--configs takes 2-D problems")
        key = (a.shape, a.stride(), b.shape, b.stride())
        if key not in configs:
            on = gpu or gpu_of(a)
            # The launch rules plan on the kernel's own problem: N x M when A and B swap.
            kernel = default_problem(a, b, on).kernel_problem(config.swap_ab)
            launched = dataclasses.replace(launch.as_launched(kernel, config, on), swizzle=config.swizzle)
            if config.stages is not None:
                launched = launch.spare_epilogue_buffers(
                    kernel, dataclasses.replace(launched, stages=config.stages, epi_stages=2), on)
            configs[key] = launched
        return wsgemm.gemm(a, b, config=configs[key])

    return gemm


def implementations(bands: list[int], configs: list[str] = ()) -> dict:
    fns = {"torch.matmul": torch.matmul, "wsgemm": wsgemm.gemm}
    for band in bands:
        fns[f"wsgemm-w{band}"] = default_config_with(swizzle=band)
    for text in configs:
        fns[f"wsgemm {text}"] = launched_as_given(parse_config(text))
    return fns


def problems(args) -> list:
    """The problems to time: the suites' own (``--suite``, at least ``--min-gflop``), or
    ``--shapes`` with B = W.t() of an (N, K) weight, as the LLM suite passes it."""
    if args.suite:
        return [p for p in suites.select(args.suite, args.filter) if p.flops >= args.min_gflop * 1e9]
    return [suites.Problem(f"shape/{m}x{n}x{k}", m, n, k, layout="b_weight_t")
            for m, n, k in parse_shapes(args.shapes)]


def run_problem(problem, fns: dict, args) -> dict:
    a, b = make_operands(problem, torch.bfloat16)
    ref = torch.matmul(a.float(), b.float())
    checks = {name: check(fn, a, b, ref, TOLERANCE["bf16"]) for name, fn in fns.items()}
    del ref
    good = {name: (lambda fn=fn: fn(a, b)) for name, fn in fns.items() if checks[name]["status"] == "ok"}
    plan = plans.make_plan(a, b, None, None, None)
    row = {"label": problem.label, "shape": [problem.m, problem.n, problem.k], "batch": problem.batch,
           "layout": problem.layout, "b": "W.t()" if problem.layout == "b_weight_t" else "(K, N)",
           "wsgemm_plan": f"{plan.mode} {plan.spec.config.short()}",
           "checks": checks, "sustained": {name: [] for name in good}}
    # Leave rest before anything is timed. Otherwise the first implementation of each
    # problem's first round (after the checks' pause) ran below the power limit: in
    # every report before this, cuBLAS, timed first, drew 565-650 W there at up to
    # 1500 MHz and ~691 W like the others in later rounds (docs/tuning-log/dependent-launch.md).
    back_to_back(next(iter(good.values())), args.seconds)
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


def geometric_means(report: dict) -> dict:
    """{implementation (and 'NAME, single'): geometric mean of its x torch.matmul over
    the problems where both ran}."""
    ratios: dict = {}
    for row in report["shapes"]:
        for name, s in summary(row).items():
            if name == "torch.matmul":
                continue
            if s["x_torch"]:
                ratios.setdefault(name, []).append(s["x_torch"])
            if s["single_x_torch"]:
                ratios.setdefault(f"{name}, single", []).append(s["single_x_torch"])
    return {name: math.exp(sum(map(math.log, values)) / len(values)) for name, values in ratios.items()}


def markdown(report: dict) -> str:
    env = report["environment"]
    lines = [f"# {report['name']}\n",
             f"{env['gpu']}, torch {env['torch']}, CuTe DSL {env.get('cutlass_dsl', '?')}; {report['date']}. "
             "bf16; column B: how B was passed (`W.t()` of an (N, K) weight, or (K, N) row-major). "
             + (f"**Sustained**: after {report['seconds']} s of untimed calls that bring the GPU out of rest, "
                if report.get("warm_start") else "**Sustained**: ")
             + f"each implementation called back to back for {report['seconds']} s (the first half "
             f"untimed), in turns, {report['rounds']} rounds; "
             "median ms per call with the median SM clock and board power sampled meanwhile. "
             + (f"**Single**: the suite's protocol, {report['single']} single calls in turns, each after an "
                "L2 flush. " if report["single"] else "")
             + "Every output was checked against a float32 reference first.\n",
             "| problem | shape | B | wsgemm plan | implementation | sustained us | MHz | W | x torch.matmul | "
             "single us | x torch.matmul (single) |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for row in report["shapes"]:
        m, n, k = row["shape"]
        shape = f"{row.get('batch', 1)}x{m}x{n}x{k}" if row.get("batch", 1) > 1 else f"{m}x{n}x{k}"
        for name, s in summary(row).items():
            single = f"{s['single_ms'] * 1e3:.0f} | {s['single_x_torch']:.3f}x" if s["single_ms"] else "- | -"
            lines.append(f"| {row.get('label', '')} | {shape} | {row.get('b', 'W.t()')} | `{row['wsgemm_plan']}` | "
                         f"{name} | {s['ms'] * 1e3:.0f} | {s['mhz']:.0f} | {s['watts']:.0f} | {s['x_torch']:.3f}x | "
                         f"{single} |")
    means = geometric_means(report)
    if means:
        lines.append("\nGeometric mean over the problems, x torch.matmul: "
                     + "; ".join(f"{name} {value:.3f}x" for name, value in means.items()))
    lines.append(f"\nRegenerate: `{report['command']}`")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.maint.sustained", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shapes", default="16384x10240x8192,8192x8192x8192",
                   help="MxNxK[,MxNxK...], B = W.t() (ignored with --suite)")
    p.add_argument("--suite", action="append", choices=sorted(suites.SUITES),
                   help="the suite's problems of at least --min-gflop instead (repeatable)")
    p.add_argument("--filter", help="with --suite: keep labels this regular expression matches")
    p.add_argument("--min-gflop", type=float, default=MIN_GFLOP)
    p.add_argument("--bands", default="1,8", help="raster band widths of the default plan to add (empty: none)")
    p.add_argument("--configs", default="",
                   help="configurations to add, TMxTN:CMxCN[:wS][:sD][:n][:x] (e.g. 128x256:2x1:w8,128x256:2x2:w8; "
                   ":n walks along N first, :x swaps A and B), launched "
                   "as the default path launches its own, with the band width given")
    p.add_argument("--seconds", type=float, default=1.0, help="back-to-back seconds per implementation and round")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--single", type=int, default=0, help="also time REPS single calls after an L2 flush")
    p.add_argument("--name", default="sustained")
    p.add_argument("--out", type=Path, default=RESULTS, help="output folder (default: benchmarks/results/)")
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        raise SystemExit("benchmarks.maint.sustained needs a CUDA GPU")
    fns = implementations([int(v) for v in args.bands.split(",") if v], [c for c in args.configs.split(",") if c])
    todo = problems(args)
    report = {"name": args.name, "command": regenerate_command("benchmarks.maint.sustained",
                                                               sys.argv[1:] if argv is None else argv),
              "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "environment": environment(),
              "seconds": args.seconds, "rounds": args.rounds, "single": args.single, "warm_start": True,
              "shapes": []}
    for i, problem in enumerate(todo, 1):
        print(f"[{i}/{len(todo)}] {problem.label} ({problem.shape_text}): {len(fns)} implementations, "
              f"{args.rounds} x {args.seconds} s back to back each", flush=True)
        row = run_problem(problem, fns, args)
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
