"""Turn back-to-back measurements (``benchmarks/sustained.py`` reports) into an
autotune-format run that ``benchmarks/tuned_table.py`` takes with ``--superseding``.

The autotuner ranks a bucket's candidates in single calls at rest. The largest
problems run at the GPU's power limit when called back to back, where a candidate
that draws less power per FLOP keeps a higher clock (benchmarks/NOTES.md sections
35-36). A bucket gets a new winner here only where the report's fastest ``--configs``
candidate back to back beat the default plan in **both** protocols: by at least
``--min-gain`` back to back, while losing no more than ``--single-tolerance`` (none by
default) in the suite's single calls, so the scoreboard never pays for the sustained
regime. Reports without single calls cannot change a bucket. The reports are bf16
problems on an SM90 GPU, as ``sustained.py`` times them.

    python benchmarks/retune_sustained.py benchmarks/results/retune_m16384_b2b.json.gz \\
        --out benchmarks/results/autotune_h200_r_sustained.json.gz
    python benchmarks/tuned_table.py <runs...> --superseding <...> benchmarks/results/autotune_h200_r_sustained.json.gz
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import shapes  # noqa: E402
import torch  # noqa: E402
from result_files import write_text  # noqa: E402
from suite import make_operands  # noqa: E402
from sustained import parse_config, summary  # noqa: E402
from tuned_table import load_run  # noqa: E402

import wsgemm  # noqa: E402

MIN_GAIN = 0.01  # two launches of one configuration differed by up to ~1 % back to back
SINGLE_TOLERANCE = 0.0
# Reports before the rows recorded their layout name only how B was passed.
LAYOUT_OF_B_TEXT = {"W.t()": "b_weight_t", "(K, N)": "b_row"}
CONFIG_PREFIX = "wsgemm "


def bucket(report: dict, row: dict) -> str:
    """The bucket a default call on the report's operands looks up, as wsgemm names it."""
    m, n, k = row["shape"]
    layout = row.get("layout") or LAYOUT_OF_B_TEXT[row["b"]]
    problem = shapes.Problem(row["label"], m, n, k, batch=row.get("batch", 1), layout=layout)
    a, b = make_operands(problem, torch.bfloat16, device="meta")
    return wsgemm.api.bucket_key_for(a, b, gpu=report["environment"]["gpu"], arch="sm90")


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
    """{bucket key: autotune entry} of the buckets with a new winner."""
    from wsgemm.autotune import _jsonable

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
            entries[bucket(report, row)] = {
                "config": _jsonable(parse_config(won[0])), "ms": ms, "timing": "sustained",
                "m": row["shape"][0], "single_ms": row["single_ms"], "source": report["command"]}
    return entries


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("reports", type=Path, nargs="+", help="sustained.py JSON reports (.json or .json.gz)")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--min-gain", type=float, default=MIN_GAIN)
    p.add_argument("--single-tolerance", type=float, default=SINGLE_TOLERANCE)
    args = p.parse_args(argv)
    entries = entries_from([load_run(path) for path in args.reports], args.min_gain, args.single_tolerance)
    text = json.dumps(entries, indent=1, sort_keys=True) + "\n"
    write_text(args.out, text)
    print(f"wrote {args.out}: {len(entries)} buckets")
    return 0


if __name__ == "__main__":
    sys.exit(main())
