"""Condense Nsight Compute's per-instruction (SASS) counters into a small JSON.

Input: the CSV that ``ncu -i report.ncu-rep --page source --print-source sass --csv``
prints (optionally gzipped); it holds, per kernel in the report, one row per SASS
instruction with how often it executed and where the warp-state sampler found warps
stalled. Output, per kernel: instructions executed, the most executed opcodes, the
stall reasons summed over the kernel, and the instructions with the most stall
samples (with their reasons). That is enough to compare two kernels' instruction
mixes and where their warps wait, and small enough to commit. With ``--details``
(the text of ``ncu -i report.ncu-rep --page details``) it adds each kernel's
duration, cycles, clock and SM throughput from the Speed Of Light section:

    python -m benchmarks.maint.ncu_summary sass.csv.gz --details details.txt \
        --out benchmarks/results/ncu_8192x8192x256.json

With ``--raw`` instead (the CSV of ``ncu -i report.ncu-rep --page raw --csv``), it
keeps each kernel's launch, clock and traffic metrics (``RAW_METRICS``): where the
bytes go between HBM, the L2 and the SMs, which a power budget pays for.
``--labels`` names the kernels in report order (``ncu_kernels`` prints the order;
two wsgemm configurations share a kernel name):

    python -m benchmarks.maint.ncu_summary --raw raw.csv.gz --labels "wsgemm,torch.matmul" \
        --out benchmarks/results/ncu_16384x10240x8192_traffic.json

See ``benchmarks/maint/ncu_kernels.py`` for taking the profile and docs/profiling.md for
reading one.
"""

from __future__ import annotations

import argparse
import collections
import csv
import gzip
import io
import json
import sys
from pathlib import Path

TOP_OPCODES = 16
TOP_STALLED = 10
STALL_PREFIX = "stall_"  # per-reason sample columns; "... (Not Issued)" variants are left out


def read_kernels(text: str) -> list[dict]:
    """[{name, rows: [{column: value}]}] in the report's kernel order."""
    kernels, header = [], None
    for row in csv.reader(io.StringIO(text)):
        if not row:
            continue
        if row[0] == "Kernel Name":
            kernels.append({"name": row[1], "rows": []})
        elif row[0] == "Address":
            header = row
        elif kernels and header:
            kernels[-1]["rows"].append(dict(zip(header, row)))
    return kernels


# Speed Of Light rows kept from ``--page details``: (row label, JSON key).
SOL_ROWS = (("Duration", "duration"), ("Elapsed Cycles", "elapsed_cycles"), ("SM Frequency", "sm_frequency"),
            ("Compute (SM) Throughput", "sm_throughput_pct"), ("Memory Throughput", "memory_throughput"))


def read_details(text: str) -> list[dict]:
    """Per kernel, in report order: {key: "value unit"} of the ``SOL_ROWS`` found.
    A kernel's block starts at a line indented two spaces (its name and launch)."""
    kernels = []
    for line in text.splitlines():
        if line.startswith("  ") and not line.startswith("   "):
            kernels.append({})
            continue
        for label, key in SOL_ROWS:  # "    Duration     us     54.88": label, unit, value
            if kernels and key not in kernels[-1] and line.strip().startswith(label + " "):
                unit, value = line.split()[-2:]
                kernels[-1][key] = f"{value} {unit}"
    return kernels


# Kept from ``--page raw``: launch shape, time and clock, and the traffic at each level.
RAW_METRICS = (
    "launch__grid_size", "launch__cluster_size", "launch__cluster_max_active", "gpu__time_duration.sum",
    "gpc__cycles_elapsed.max", "gpc__cycles_elapsed.max.per_second", "inst_executed",
    "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed",
    "sm__pipe_tensor_cycles_active.min.pct_of_peak_sustained_elapsed",
    "dram__bytes.sum.per_second", "lts__t_sector_hit_rate.pct",
    "lts__throughput.avg.pct_of_peak_sustained_elapsed", "lts__d_sectors.avg.pct_of_peak_sustained_elapsed",
    "lts__d_sectors_fill_device.avg.pct_of_peak_sustained_elapsed",
    "l1tex__m_xbar2l1tex_read_sectors.avg.pct_of_peak_sustained_elapsed",
    # Bytes into the SMs against requests at the L2 slices: equal bytes with 31 % fewer
    # requests was cuBLAS's difference on small K = 4096 problems (docs/tuning-log/clusters.md).
    # The lrc__ counter is there only where the profile asked for it (--metrics).
    "l1tex__m_xbar2l1tex_read_bytes.sum", "lts__t_requests_srcunit_tex_op_read.sum",
    "lts__t_sectors_srcunit_tex_op_read.sum", "lrc__xbar2gpc_sectors_op_read.sum",
)


def read_raw(text: str, labels: list[str]) -> list[dict]:
    """Per kernel, in report order: {kernel, label, metrics: {name: "value unit"}} of
    the ``RAW_METRICS`` in the report (row 1 names the metrics, row 2 their units)."""
    rows = [row for row in csv.reader(io.StringIO(text)) if row]
    names, units = rows[0], rows[1]
    kernels = []
    for i, row in enumerate(rows[2:]):
        values = dict(zip(names, row))
        metrics = {name: f"{values[name]} {units[names.index(name)]}".strip() for name in RAW_METRICS
                   if name in values}
        kernels.append({"kernel": values.get("Kernel Name", "?"), "label": labels[i] if i < len(labels) else None,
                        "metrics": metrics})
    return kernels


def opcode(source: str) -> str:
    """``@!P0 SYNCS.PHASECHK.TRANS64 P0, ...`` -> ``SYNCS``."""
    words = source.split()
    word = words[1] if words[0].startswith("@") else words[0]
    return word.split(".")[0]


def count(value: str) -> int:
    return int(value) if value not in ("", "-") else 0


def summarize_kernel(kernel: dict) -> dict:
    rows = kernel["rows"]
    reasons = [c for c in rows[0] if c.startswith(STALL_PREFIX) and "Not Issued" not in c] if rows else []
    opcodes: collections.Counter = collections.Counter()
    stalls: collections.Counter = collections.Counter()
    for row in rows:
        opcodes[opcode(row["Source"])] += count(row["Instructions Executed"])
        for reason in reasons:
            stalls[reason[len(STALL_PREFIX):]] += count(row[reason])

    def samples(row: dict) -> int:
        return count(row["Warp Stall Sampling (All Samples)"])

    most_stalled = sorted(range(len(rows)), key=lambda i: -samples(rows[i]))[:TOP_STALLED]
    return {
        "kernel": kernel["name"],
        "sass_instructions": len(rows),
        "instructions_executed": sum(opcodes.values()),
        "stall_samples": sum(samples(row) for row in rows),
        "top_opcodes": dict(opcodes.most_common(TOP_OPCODES)),
        "stall_reasons": {reason: n for reason, n in stalls.most_common() if n},
        "most_stalled": [
            {"index": i, "sass": " ".join(rows[i]["Source"].split()), "samples": samples(rows[i]),
             "executed": count(rows[i]["Instructions Executed"]),
             "reasons": {r[len(STALL_PREFIX):]: count(rows[i][r]) for r in reasons if count(rows[i][r])}}
            for i in sorted(most_stalled)
        ],
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.maint.ncu_summary", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("csv", nargs="?", help="ncu --page source --print-source sass --csv output (.gz accepted)")
    p.add_argument("--raw", help="ncu --page raw --csv output (.gz accepted), instead of the SASS page")
    p.add_argument("--labels", default="", help="with --raw: names of the kernels in report order, comma-separated")
    p.add_argument("--details", help="text of ncu --page details for the same report")
    p.add_argument("--out", help="JSON file to write (default: print)")
    p.add_argument("--note", default="", help="what was profiled, kept in the JSON")
    args = p.parse_args(argv)
    if (args.csv is None) == (args.raw is None):
        p.error("give the SASS page's CSV or --raw, one of them")
    path = args.raw or args.csv
    raw = Path(path).read_bytes()
    text = (gzip.decompress(raw) if path.endswith(".gz") else raw).decode()
    if args.raw:
        kernels = read_raw(text, [label for label in args.labels.split(",") if label])
    else:
        kernels = [summarize_kernel(k) for k in read_kernels(text)]
    if args.details:
        for kernel, sol in zip(kernels, read_details(Path(args.details).read_text())):
            kernel["speed_of_light"] = sol
    report = {"note": args.note, "kernels": kernels}
    out = json.dumps(report, indent=1)
    if args.out:
        Path(args.out).write_text(out + "\n")
    else:
        print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
