"""Study: what does a model's decode step see of wsgemm, eager and under torch.compile?

**Question.** Per-call timings say little about a model: between its GEMMs sit
``nn.Module`` calls, a forward's Python and, under ``torch.compile``, inductor's
launches or CUDA graphs. How do decode steps of Llama-3-8B-shaped layers compare with
``torch.nn.Linear`` (cuBLAS) and ``wsgemm.nn.Linear`` on the same weights?

**Run** 2026-12-01 on an H200, rerun 2026-12-02 after the host-path changes it
prompted (``results/compiled_decode.md``: two layers, M = 1 and 16).

**Result.** First run: in CUDA graphs (``reduce-overhead``) 1.005x (M = 1) and 1.019x
(M = 16) of torch's step; outside them M = 1 was host-bound for wsgemm (eager
0.867x, compiled 0.752x). Rerun, with decode plans launched from C++ and the layer's
weight transposed in C++: eager 1.145x and 1.274x, compiled 1.019x and 1.074x,
reduce-overhead 0.990x and 1.025x (M = 1, 16). Eager and compiled steps without
graphs take within ~2 us of the host's time to issue them, for both libraries.

**Conclusion.** Outside CUDA graphs the steps are host-bound and move with the host
from one process to the next; ``benchmarks/bench_overhead.py``'s per-call table is
the evidence of what a call costs, this the check of what a model sees. Found on the
way: the split-K workspace under CUDA-graph trees (fixed). Tuning log:
docs/tuning-log/host-overhead.md.

What it measures: each layer is the 8B layer's four projections without attention
(which neither library computes): qkv 4096 -> 6144, whose first 4096 columns stand
in for the attention output, o 4096 -> 4096 plus the residual, gate_up 4096 -> 28672,
SiLU(gate) * up, down 14336 -> 4096 plus the residual. Its weights (~436 MB a layer)
are read from HBM every step, as at decode. Three models share the same weights:
torch's layers, wsgemm's, and wsgemm's with ``read_weight_before_wait`` (the promise
that no earlier kernel writes the weights, true at inference). Each runs eager,
compiled (inductor's default: one launch per kernel, host time counts) and compiled
with ``mode="reduce-overhead"`` (CUDA graphs: the host is out of the loop), under
``torch.inference_mode``. Each output is checked against the eager torch model's
before it is timed; a wrong one is reported, not timed. Timing: ``--steps`` steps
between CUDA events, per model and mode in turns, median of ``--reps`` such loops.

    python -m benchmarks.studies.bench_compiled_decode --tokens 1,16 --layers 2

Writes ``<out>/compiled_decode.json`` and ``.md``.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
import time
from pathlib import Path

import torch

import wsgemm
import wsgemm.nn
import wsgemm.timing
from benchmarks.harness import RESULTS, environment, gpu_state, regenerate_command, write_results

HIDDEN, QKV, INTERMEDIATE = 4096, 6144, 14336  # Llama-3 8B
MODES = ("eager", "compiled", "compiled, reduce-overhead")


class Layer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv = torch.nn.Linear(HIDDEN, QKV, bias=False)
        self.o = torch.nn.Linear(HIDDEN, HIDDEN, bias=False)
        self.gate_up = torch.nn.Linear(HIDDEN, 2 * INTERMEDIATE, bias=False)
        self.down = torch.nn.Linear(INTERMEDIATE, HIDDEN, bias=False)

    def forward(self, x):
        x = x + self.o(self.qkv(x)[:, :HIDDEN])
        gate, up = self.gate_up(x).chunk(2, dim=-1)
        return x + self.down(torch.nn.functional.silu(gate) * up)


def with_wsgemm_layers(model: torch.nn.Module, promise: bool) -> torch.nn.Module:
    """A copy of ``model`` whose Linear layers are wsgemm's, on the same weights."""
    copied = copy.deepcopy(model)
    for layer in copied:
        for name in ("qkv", "o", "gate_up", "down"):
            setattr(layer, name, wsgemm.nn.Linear.from_linear(getattr(layer, name), read_weight_before_wait=promise))
    return copied


def step_loops(runs: dict, x: torch.Tensor, steps: int, reps: int) -> tuple[dict, dict]:
    """({name: [ms per step, one per loop]}, {name: [host ms per step, one per loop]}):
    each loop ``steps`` calls between CUDA events; the runs take turns loop by loop.
    The host time is what the CPU took to issue the loop's steps. A loop's launches
    (~700 for two eager layers at the default 50 steps) fit in the launch queue
    (~1024), so the CPU never waits for the GPU there: where the host time reaches
    the event time, the loop is host-bound."""
    times = {name: [] for name in runs}
    host = {name: [] for name in runs}
    for _ in range(reps):
        for name, run in runs.items():
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            issued = time.perf_counter()
            for _ in range(steps):
                run(x)
            host[name].append((time.perf_counter() - issued) * 1000 / steps)
            end.record()
            end.synchronize()
            times[name].append(start.elapsed_time(end) / steps)
    return times, host


def bench_tokens(models: dict, tokens: int, steps: int, reps: int, tolerance: float) -> dict:
    """Per model and mode: the check against eager torch and the step times (us)."""
    x = torch.randn(tokens, HIDDEN, device="cuda").to(torch.bfloat16)
    runs, rows = {}, {}
    with torch.inference_mode():
        reference = models["torch"](x)
        for model_name, model in models.items():
            for mode in MODES:
                name = f"{model_name} | {mode}"
                print(f"  M = {tokens}: {name}: compiling and checking...", file=sys.stderr, flush=True)
                if mode == "eager":
                    run = model
                else:
                    run = torch.compile(model, mode="reduce-overhead" if "reduce" in mode else None)
                for _ in range(3):  # compile, record the graphs, warm up
                    out = run(x).clone()
                error = wsgemm.timing.relative_error(out, reference)
                rows[name] = {"rel_error": error}
                if error > tolerance:
                    rows[name]["status"] = "wrong"
                    continue
                rows[name]["status"] = "ok"
                runs[name] = run
        print(f"  M = {tokens}: timing {len(runs)} runs x {reps} loops of {steps} steps...", file=sys.stderr,
              flush=True)
        times, host = step_loops(runs, x, steps, reps)
        for name, loops in times.items():
            us = sorted(1000 * t for t in loops)
            rows[name].update(median_us=statistics.median(us), p10_us=us[len(us) // 10],
                              p90_us=us[(9 * len(us)) // 10], loops_us=[1000 * t for t in loops],
                              host_us=statistics.median(1000 * t for t in host[name]))
    return rows


def paired_ratio(ours: dict, theirs: dict) -> float:
    """theirs / ours per step. The median of the ratios of the loops timed side by side
    (loop i of each run is taken in the same round): outside CUDA graphs the steps are
    host-bound, and a disturbance of the host lasting seconds moves the loops of one
    round alike, so their ratio cancels what a ratio of the two medians keeps (those
    medians moved 0.94-1.19x between runs, docs/tuning-log/host-overhead.md). Reports
    without the loops: the ratio of the medians."""
    if "loops_us" in ours and "loops_us" in theirs:
        return statistics.median(t / o for t, o in zip(theirs["loops_us"], ours["loops_us"]))
    return theirs["median_us"] / ours["median_us"]


def markdown(report: dict) -> str:
    env = report["environment"]
    lines = [f"# Decode steps, eager and compiled ({report['layers']} Llama-3 8B-shaped layers, bf16)", "",
             f"{env['gpu']}, torch {env['torch']}, CuTe DSL {env['cutlass_dsl']}, wsgemm {env['wsgemm']}; "
             f"{env['date']}. Median of {report['reps']} loops of {report['steps']} steps (p10-p90), the runs "
             "taking turns loop by loop, under torch.inference_mode; microseconds per step, and the host's "
             "time to issue a step (median; where it reaches the step's time, the loop is host-bound). Ratios: "
             "the median of the ratios of the loops timed in the same round. Each layer: qkv, o, "
             "gate_up, down projections without attention; torch.compile's default mode launches every kernel "
             "from the host, reduce-overhead replays CUDA graphs.", "",
             "| tokens | mode | torch.nn.Linear | wsgemm.nn.Linear | torch / wsgemm | wsgemm, weights read before "
             "the wait | torch / that |", "|---|---|---|---|---|---|---|"]

    def cell(row):
        if row.get("status") != "ok":
            return f"wrong (rel. error {row['rel_error']:.2g})"
        host = f"; host {row['host_us']:.1f}" if "host_us" in row else ""  # the first reports lack it
        return f"{row['median_us']:.1f} ({row['p10_us']:.1f}-{row['p90_us']:.1f}{host})"

    def ratio(ours, theirs):
        if ours.get("status") != "ok" or theirs.get("status") != "ok":
            return "-"
        return f"{paired_ratio(ours, theirs):.3f}x"

    for tokens, rows in report["rows"].items():
        for mode in MODES:
            theirs, ours, promised = (rows[f"{model} | {mode}"] for model in ("torch", "wsgemm", "wsgemm-promise"))
            lines.append(f"| {tokens} | {mode} | {cell(theirs)} | {cell(ours)} | {ratio(ours, theirs)} | "
                         f"{cell(promised)} | {ratio(promised, theirs)} |")
    lines += ["", f"GPU before: {report['gpu_before']}; after: {report['gpu_after']}.", "",
              f"Regenerate: `{report['command']}`"]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.studies.bench_compiled_decode", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tokens", default="1,16", help="comma-separated decode batch sizes (M)")
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--reps", type=int, default=15)
    p.add_argument("--tolerance", type=float, default=2e-2, help="largest relative error against eager torch")
    p.add_argument("--out", default=str(RESULTS), help="output folder (default: benchmarks/results/)")
    args = p.parse_args(argv)
    argv = sys.argv[1:] if argv is None else argv
    torch.manual_seed(0)
    # Every model and mode compiles the same forward code: room for all of them in
    # dynamo's cache, or the later ones would silently run eager.
    torch._dynamo.config.cache_size_limit = torch._dynamo.config.accumulated_cache_size_limit = 256
    with torch.device("cuda"):
        reference = torch.nn.Sequential(*(Layer() for _ in range(args.layers))).to(torch.bfloat16)
    for parameter in reference.parameters():
        parameter.requires_grad_(False)
        parameter.mul_(0.02 / parameter.std())  # a trained model's scale: activations stay O(1)
    models = {"torch": reference, "wsgemm": with_wsgemm_layers(reference, promise=False),
              "wsgemm-promise": with_wsgemm_layers(reference, promise=True)}
    report = {"command": regenerate_command("benchmarks.studies.bench_compiled_decode", argv), "environment": environment(),
              "layers": args.layers, "steps": args.steps, "reps": args.reps, "gpu_before": gpu_state(), "rows": {}}
    for tokens in (int(t) for t in args.tokens.split(",")):
        report["rows"][str(tokens)] = bench_tokens(models, tokens, args.steps, args.reps, args.tolerance)
    report["gpu_after"] = gpu_state()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    write_results(out / "compiled_decode.json", report)
    text = markdown(report)
    (out / "compiled_decode.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
