"""Study: does the autotuner time a large GEMM in the clock regime the suite reports?

**Question.** The autotuner timed its candidates back to back, round after round; the
suite rests between problems. Do the two see the same SM clock on large shapes?

**Run** 2026-11-30 on an H200, 8192x6144x4096 (``results/clock_throttle.md``).

**Result.** No: back to back, the autotuner's loop fell from 1980 to 1575-1665 MHz and
timed 8-18 % slower than the suite did (wsgemm's default 555 us against the suite's
513, the fastest of 12 candidates 605 us). Resting after each round
(``REST_AFTER_ROUND = 2``: idle twice the round's time) kept 1980 MHz throughout, and
the autotuner then agreed with the suite (512.7 against 513.4 us).

**Conclusion.** ``wsgemm.timing.time_in_turns`` rests after each round, and rested
rounds open with an untimed call; the autotuner's timing matches the suite's.
Tuning log: docs/tuning-log/timing.md.

What it measures: for each ``--rest`` (``wsgemm.tuning.autotune.REST_AFTER_ROUND``; 0
is back to back), wsgemm's default and torch.matmul on the same operands three ways,
with ``nvidia-smi`` sampling the SM clock every 50 ms:

- ``suite``: the benchmark suite's loop (5 warm-up rounds, 20 timed rounds in turns,
  ``wsgemm.timing.L2Flush`` before each call);
- ``autotuner, 2 calls``: ``wsgemm.tuning.autotune._time_candidates`` on the same two;
- ``autotuner, 12 candidates``: the autotuner's candidates for the shape
  (``candidates_to_time``), as it launches them, plus torch.matmul.

    python -m benchmarks.studies.clock_throttle --shape 8192x6144x4096 --rest 0 --rest 2

Writes ``results/clock_throttle.json`` and ``.md``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

import torch

import wsgemm
import wsgemm.timing
from benchmarks.harness import RESULTS, environment, gpu_of, operands, regenerate_command, write_results
from wsgemm import plans, tuning
from wsgemm.tuning import autotune

SAMPLE_MS = 50
SUITE_WARMUP, SUITE_ROUNDS = 5, 20


class ClockLog:
    """nvidia-smi's SM clock every SAMPLE_MS, and named phases to read it by."""

    def __init__(self):
        self._file = tempfile.TemporaryFile(mode="w+")
        self._smi = subprocess.Popen(
            ["nvidia-smi", "--query-gpu=timestamp,clocks.sm", "--format=csv,noheader,nounits",
             "-lms", str(SAMPLE_MS)], stdout=self._file)
        self.phases: list[tuple[str, float, float]] = []

    def phase(self, name: str, fn):
        time.sleep(1.0)  # idle between phases, as between the suite's problems
        begin = time.time()
        result = fn()
        self.phases.append((name, begin, time.time()))
        return result

    def close(self) -> dict[str, list[int]]:
        """{phase: SM clocks (MHz) sampled during it}. nvidia-smi stamps its samples
        with the local wall-clock time, as ``time.time()`` reads it."""
        time.sleep(3 * SAMPLE_MS / 1000)  # the last phase's samples, still on their way
        self._smi.terminate()
        self._smi.wait()
        self._file.seek(0)
        samples = []
        for line in self._file:
            stamp, _, clock = line.rpartition(",")
            try:
                samples.append((datetime.strptime(stamp.strip(), "%Y/%m/%d %H:%M:%S.%f").timestamp(), int(clock)))
            except ValueError:
                continue
        return {name: [clock for at, clock in samples if begin <= at <= end] for name, begin, end in self.phases}


def median_us(times: dict) -> dict[str, float]:
    return {name: round(1000 * (statistics.median(v) if isinstance(v, list) else v), 1) for name, v in times.items()}


def measure(m: int, n: int, k: int, rest: float) -> dict:
    autotune.REST_AFTER_ROUND = rest
    a, b = operands(m, n, k)  # B an nn.Linear weight, as the LLM suite
    gpu = gpu_of(a)
    problem = tuning.Problem(m, n, k, can_swap=True)  # bf16, both operands K-major, as planned for these
    candidates = {}
    for config in autotune.candidates_to_time(problem, gpu, autotune.TOP_CANDIDATES):
        launched = tuning.as_launched(problem.kernel_problem(config.swap_ab), config, gpu)
        candidates[config.short()] = (lambda c: lambda: plans.gemm_eager(a, b, None, None, c))(launched)
    pair = {"wsgemm default": lambda: wsgemm.gemm(a, b), "torch.matmul": lambda: torch.matmul(a, b)}
    for fn in [*candidates.values(), *pair.values()]:  # compile before anything is timed
        fn()
    torch.cuda.synchronize()
    flush = wsgemm.timing.L2Flush()

    def suite():
        wsgemm.timing.time_in_turns(pair, SUITE_WARMUP, flush)
        return median_us(wsgemm.timing.time_in_turns(pair, SUITE_ROUNDS, flush))

    log = ClockLog()
    timings = {
        "suite": log.phase("suite", suite),
        "autotuner, 2 calls": log.phase("autotuner, 2 calls", lambda: median_us(autotune._time_candidates(pair, flush))),
        "autotuner, 12 candidates": log.phase("autotuner, 12 candidates", lambda: median_us(
            autotune._time_candidates({**candidates, "torch.matmul": pair["torch.matmul"]}, flush))),
        "suite again": log.phase("suite again", suite),
    }
    clocks = log.close()
    return {"shape": f"{m}x{n}x{k}", "rest": rest, "timings_us": timings,
            "sm_clock_mhz": {name: {"min": min(c, default=None), "max": max(c, default=None), "samples": c}
                             for name, c in clocks.items()}}


def render(report: dict) -> str:
    env = report["environment"]
    lines = ["# The autotuner's timing against the suite's, with the SM clock sampled", "",
             (f"{env['gpu']}, torch {env['torch']}, wsgemm {env['wsgemm']}; {env['date']}. "
              f"Median us per call; SM clock from nvidia-smi every {SAMPLE_MS} ms during each phase. "
              "`rest`: the autotuner's REST_AFTER_ROUND (0: back to back, as the autotuner timed at first)."), "",
             "| shape | rest | phase | wsgemm default | torch.matmul | fastest candidate | SM clock MHz (min-max) |",
             "|---|---|---|---|---|---|---|"]
    for run in report["runs"]:
        for phase, times in run["timings_us"].items():
            clock = run["sm_clock_mhz"][phase]
            clocks = f"{clock['min']}-{clock['max']}" if clock["min"] is not None else "not sampled"
            others = {name: t for name, t in times.items() if name not in ("wsgemm default", "torch.matmul")}
            fastest = f"{min(others.values())} ({min(others, key=others.get)})" if others else "-"
            lines.append(f"| {run['shape']} | {run['rest']:g} | {phase} | {times.get('wsgemm default', '-')} | "
                         f"{times['torch.matmul']} | {fastest} | {clocks} |")
    lines += ["", f"Regenerate: `{report['command']}`"]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.studies.clock_throttle", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shape", default="8192x6144x4096", help="MxNxK")
    p.add_argument("--rest", type=float, action="append", help="REST_AFTER_ROUND values to compare")
    p.add_argument("--out", type=Path, default=RESULTS, help="output folder (default: benchmarks/results/)")
    args = p.parse_args(argv)
    m, n, k = (int(x) for x in args.shape.split("x"))
    rests = args.rest or [0.0, autotune.REST_AFTER_ROUND]
    report = {"command": regenerate_command("benchmarks.studies.clock_throttle",
                                            ["--shape", args.shape, *(f"--rest={r:g}" for r in rests)]),
              "environment": environment(), "runs": []}
    for rest in rests:
        report["runs"].append(measure(m, n, k, rest))
        print(json.dumps(report["runs"][-1]["timings_us"]), flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    write_results(args.out / "clock_throttle.json", report)
    (args.out / "clock_throttle.md").write_text(render(report))
    print((args.out / "clock_throttle.md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
