"""What an unhinted ``mbarrier.try_wait`` on a pending phase does to its warp, measured.

PTX calls ``try_wait`` "potentially blocking": if the phase is not complete, the
thread "may be suspended" until it completes or a system-dependent time limit
expires. This probe measures, on one warp with ``%clock64`` (SM cycles):

* the pending probe on a barrier of count 1 with no arrival, its predicate read at
  once by a ``selp`` (whose value is stored, so ptxas keeps the clock read behind
  it): unhinted, with suspend-time hints of 0, 1,000 and 10,000 ns, back to back and
  spaced 200, 2,000 and 20,000 cycles apart; the same with the predicated shared
  store that ``benchmarks/studies/trywait_microbench.py`` reads the predicate with;
* references: ``try_wait`` on a completed phase, ``test_wait`` on the pending one;
* whether the warp stops at the probe or only where its answer is read: the pending
  probe with its predicate read after the second clock read, alone and followed by a
  bulk copy's issue (one thread, as a producer issues its copies), beside the copy's
  issue alone;
* a loop of unhinted ``try_wait`` (and of the 10 ms-hinted blocking form) ended by
  another warp's arrival: cycles from the arrival to the end of the loop, and how
  many ``try_wait`` it took;
* the setup of ``trywait_microbench.py`` (pending barrier of count 2 with one
  arrival; other probes, a shared-memory load, bulk copies with blocking waits on
  another barrier, global stores, a ``test_wait`` around the timed probe in its
  loop): all of it, each condition added alone to the clean probe, and each removed
  alone from the full setup -- which condition gives the short answer?

The CUDA source is ``benchmarks/trywait_probe.cu``; this script builds it with nvcc
(sm_90a), runs it, prints a table and writes the JSON (and, with ``--sass``, the
kernels' SASS beside it). Needs an NVIDIA GPU of compute capability 9.x and nvcc;
without them it exits with status 2.

    python -m benchmarks.trywait_probe --out benchmarks/results/    # -> trywait_probe_<gpu>.json
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

SOURCE = Path(__file__).with_suffix(".cu")
NO_GPU = 2  # exit status when the probe cannot run here


class CannotRun(Exception):
    """No GPU, no nvcc, or a GPU the probe is not written for."""


def gpu_slug(name: str) -> str:
    """``NVIDIA H100 80GB HBM3`` -> ``h100``: the result file's suffix."""
    found = re.search(r"\b([A-Z]{1,2}\d{2,3}[A-Z]?)\b", name)
    return (found.group(1) if found else re.sub(r"\W+", "_", name)).lower()


def find_gpu() -> tuple[str, str]:
    """(name, compute capability) of GPU 0, from nvidia-smi; :class:`CannotRun` if none."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        raise CannotRun("no NVIDIA GPU here (nvidia-smi not found)")
    run = subprocess.run([smi, "--query-gpu=name,compute_cap", "--format=csv,noheader"],
                         capture_output=True, text=True)
    rows = [line.split(",") for line in run.stdout.strip().splitlines() if "," in line]
    if run.returncode != 0 or not rows:
        raise CannotRun(f"no NVIDIA GPU here (nvidia-smi: {(run.stderr or run.stdout).strip()[:200]})")
    name, cc = (field.strip() for field in rows[0][:2])
    if not cc.startswith("9."):
        raise CannotRun(f"{name} has compute capability {cc}; the probe is built for sm_90a (H100, H200)")
    return name, cc


def find_nvcc() -> str:
    for candidate in (shutil.which("nvcc"), os.path.join(os.environ.get("CUDA_HOME", "/usr/local/cuda"), "bin", "nvcc")):
        if candidate and os.path.exists(candidate):
            return candidate
    raise CannotRun("nvcc not found (PATH, $CUDA_HOME/bin)")


def build(build_dir: Path) -> Path:
    exe = build_dir / "trywait_probe"
    cmd = [find_nvcc(), "-O3", "-std=c++17", "-gencode", "arch=compute_90a,code=sm_90a", "-o", str(exe), str(SOURCE)]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"nvcc failed:\n{done.stderr[-4000:]}")
    return exe


def sass(exe: Path) -> str | None:
    tool = shutil.which("cuobjdump")
    if tool is None:
        return None
    return subprocess.run([tool, "-sass", str(exe)], capture_output=True, text=True).stdout


def stats(values: list[int]) -> dict:
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "n": len(values)}


def summarise(lines: list[dict]) -> dict:
    """The executable's JSON lines -> the report: per case its label, the raw cycles
    and their median/min/max (and per-column for the extra timings it recorded)."""
    header, cases = lines[0], lines[1:]
    mhz = header["clock_cycles"] / header["clock_ns"] * 1e3
    report = {"gpu": header["device"], "compute_capability": header["cc"], "reps": header["reps"],
              "sm_clock_mhz": round(mhz), "cases": []}
    for case in cases:
        label = case["case"]
        if case.get("hint_ns") and "hinted" in label:
            label += f" {case['hint_ns']} ns"
        elif case.get("form") == 1:
            label += " 0 ns"
        if case.get("spacing"):
            label += f" {case['spacing']} cycles apart"
        if "arrival_delay" in case:
            label += f", arrival {case['arrival_delay']} cycles in"
        entry = {"label": label, **{k: v for k, v in case.items() if k != "case"}, "cycles_stats": stats(case["cycles"])}
        for key in [k for k in case if k.startswith("hinted_after_") or k in ("iterations", "ns")]:
            entry[f"{key}_stats"] = stats(case[key])
        report["cases"].append(entry)
    return report


def table(report: dict) -> str:
    mhz = report["sm_clock_mhz"]
    lines = [f"{report['gpu']} (cc {report['compute_capability']}), SM clock measured at {mhz} MHz; "
             f"{report['reps']} calls per case, one warp; cycles from %clock64",
             "",
             f"{'case':70} {'median':>8} {'min':>8} {'max':>8} {'us (median)':>11}  extra"]
    for case in report["cases"]:
        s = case["cycles_stats"]
        extra = []
        if "iterations_stats" in case:
            extra.append(f"try_waits per loop {case['iterations_stats']['median']:.0f} "
                         f"({case['iterations_stats']['min']}-{case['iterations_stats']['max']})")
        for key in [k for k in case if k.startswith("hinted_after_") and k.endswith("_stats")]:
            extra.append(f"{key[len('hinted_after_'):-len('_stats')]}: {case[key]['median']:.0f}")
        lines.append(f"{case['label'][:70]:70} {s['median']:8.0f} {s['min']:8d} {s['max']:8d} "
                     f"{s['median'] / mhz:11.3f}  {'; '.join(extra)}")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.trywait_probe", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True,
                   help="the JSON file to write, or a folder to write trywait_probe_<gpu>.json into")
    p.add_argument("--reps", type=int, default=16, help="calls per case (1-64, default 16)")
    p.add_argument("--sass", action="store_true", help="also write the SASS beside the JSON (needs cuobjdump)")
    args = p.parse_args(argv)
    try:
        name, _ = find_gpu()
        with tempfile.TemporaryDirectory(prefix="trywait_probe-") as tmp:
            exe = build(Path(tmp))
            run = subprocess.run([str(exe), str(args.reps)], capture_output=True, text=True, timeout=300)
            if run.returncode != 0:
                raise RuntimeError(f"the probe failed (status {run.returncode}):\n{run.stderr[-4000:]}")
            listing = sass(exe) if args.sass else None
    except CannotRun as why:
        print(f"trywait_probe: cannot run here: {why}", file=sys.stderr)
        return NO_GPU
    report = summarise([json.loads(line) for line in run.stdout.splitlines() if line.startswith("{")])
    out = Path(args.out)
    if out.suffix != ".json":
        out = out / f"trywait_probe_{gpu_slug(name)}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1) + "\n")
    if listing is not None:
        out.with_suffix(".sass").write_text(listing)
    print(table(report))
    print(f"\nwrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
