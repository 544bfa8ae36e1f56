"""Turn back-to-back measurements (``benchmarks.maint.sustained`` reports) into an
autotune-format run that ``benchmarks.maint.tuned_table`` takes with ``--superseding``.

The autotuner ranks a bucket's candidates in single calls at rest. The largest
problems run at the GPU's power limit when called back to back, where a candidate
that draws less power per FLOP keeps a higher clock (docs/tuning-log/raster-bands.md).
A bucket gets a new winner here only where the report's fastest ``--configs``
candidate back to back beat the default plan in **both** protocols: by at least
``--min-gain`` back to back, while losing no more than ``--single-tolerance`` (none by
default) in the suite's single calls, so the scoreboard never pays for the sustained
regime. Reports without single calls cannot change a bucket. The reports are bf16
problems on an SM90 GPU, as ``sustained`` times them; the buckets are named for the
preset GPU of the report's device (``tuned_table.PRESETS``), on the CPU.

    python -m benchmarks.maint.retune_sustained benchmarks/results/tuning-log/retune_m16384_b2b.json \\
        --out benchmarks/results/tuning-log/autotune_h200_r_sustained.json
    python -m benchmarks.maint.tuned_table <runs...> --superseding <...> \\
        benchmarks/results/tuning-log/autotune_h200_r_sustained.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

from benchmarks import shapes
from benchmarks.harness import default_problem, make_operands
from benchmarks.maint.sustained import parse_config, summary
from benchmarks.maint.tuned_table import gpu_named, load_run
from wsgemm.tuning import autotune

MIN_GAIN = 0.01  # two launches of one configuration differed by up to ~1 % back to back
SINGLE_TOLERANCE = 0.0
# Reports before the rows recorded their layout name only how B was passed.
LAYOUT_OF_B_TEXT = {"W.t()": "b_weight_t", "(K, N)": "b_row"}
CONFIG_PREFIX = "wsgemm "


def planned(report: dict, row: dict):
    """(autotune key, kernel problem) a default call on the report's operands looks up
    (``wsgemm.tuning.autotune.cache_key``) on the report's GPU, planned on meta tensors."""
    m, n, k = row["shape"]
    layout = row.get("layout") or LAYOUT_OF_B_TEXT[row["b"]]
    problem = shapes.Problem(row["label"], m, n, k, batch=row.get("batch", 1), layout=layout)
    a, b = make_operands(problem, torch.bfloat16, device="meta")
    gpu = gpu_named(report["environment"]["gpu"])
    kernel = default_problem(a, b, gpu)
    return autotune.cache_key(kernel, gpu), kernel


def new_winner(timed: dict, min_gain: float, single_tolerance: float):
    """(config text, back-to-back gain, single-call gain) of a row's best ``--configs``
    candidate where it beats the default plan in both protocols, else None. ``timed``:
    the row's ``sustained.summary``, medians per implementation as the report's table
    shows them."""
    if "wsgemm" not in timed or timed["wsgemm"]["single_ms"] is None:
        return None
    default = timed["wsgemm"]
    candidates = [name for name, t in timed.items() if name.startswith(CONFIG_PREFIX) and t["single_ms"] is not None]
    if not candidates:
        return None
    best = min(candidates, key=lambda name: timed[name]["ms"])
    sustained_gain = default["ms"] / timed[best]["ms"] - 1
    single_gain = default["single_ms"] / timed[best]["single_ms"] - 1
    if sustained_gain < min_gain or single_gain < -single_tolerance:
        return None
    return best.removeprefix(CONFIG_PREFIX), sustained_gain, single_gain


def entries_from(reports: list[dict], min_gain: float, single_tolerance: float) -> dict:
    """{autotune key: entry} of the buckets with a new winner."""
    _jsonable = autotune._jsonable

    entries = {}
    for report in reports:
        for row in report["shapes"]:
            timed = summary(row)
            won = new_winner(timed, min_gain, single_tolerance)
            kept = "default kept" if row.get("single_ms") else "no single calls: default kept"
            print(f"{row['label']}: " + (kept if won is None else
                                         f"{won[0]} (+{won[1]:.1%} back to back, {won[2]:+.1%} single)"))
            if won is None:
                continue
            # Times are keyed by what ran: the default plan as launched, the candidates by their text.
            ms = {f"default {row['wsgemm_plan']}": timed["wsgemm"]["ms"]}
            ms.update({name.removeprefix(CONFIG_PREFIX): t["ms"] for name, t in timed.items()
                       if name.startswith(CONFIG_PREFIX)})
            key, kernel = planned(report, row)
            entries[key] = {
                "config": _jsonable(parse_config(won[0])), "ms": ms, "timing": "sustained",
                "m": kernel.m, "single_ms": row["single_ms"], "source": report["command"]}
    return entries


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.maint.retune_sustained", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("reports", type=Path, nargs="+", help="sustained JSON reports")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--min-gain", type=float, default=MIN_GAIN)
    p.add_argument("--single-tolerance", type=float, default=SINGLE_TOLERANCE)
    args = p.parse_args(argv)
    entries = entries_from([load_run(path) for path in args.reports], args.min_gain, args.single_tolerance)
    text = json.dumps(entries, indent=1, sort_keys=True) + "\n"
    args.out.write_text(text)
    print(f"wrote {args.out}: {len(entries)} buckets")
    return 0


if __name__ == "__main__":
    sys.exit(main())
