"""Write ``src/wsgemm/tuning/tables/sm90.json``: the autotuner's measured winners,
shipped as the default configuration for those shape buckets on GPUs with the same
numbers (``wsgemm.tuning.table``).

    python -m benchmarks.maint.tuned_table benchmarks/results/tuning-log/autotune_h200_c.json \\
        benchmarks/results/tuning-log/autotune_h200_d.json [--superseding newer.json ...] \\
        [--measured "2026-11-20 to 2026-12-02"]

Each input is an ``autotune.json`` written by ``config="autotune"``
(``benchmarks.maint.tune`` keeps one per run; the committed ones are in
``benchmarks/results/tuning-log/``). Its keys are
``<Gpu.table_key>|<bucket>`` with the M each winner was timed at (``"m"``); runs
written before the planner was keyed by a GPU's numbers use
``<device name>|<arch>|<bucket>`` and no M (timed at the bucket's bound): both are
read, a device name mapped to its preset's table key (:data:`PRESETS`).

Where several runs measured a bucket, :func:`merge` picks among their winners. A
winner timed at its bucket's bound lands in the table's ``entries``, one timed at
another M in its ``points`` (keyed by that exact M). Only fields that differ from
``GemmConfig()``'s defaults are written. Tables of other GPUs already in the file are
kept as they are; the one of each GPU the runs measured is replaced, with its
provenance: ``measured_on`` (the device), ``source`` (the runs, from which
:func:`read_sources` gets both lists back) and ``measured`` (dates: ``--measured``,
else what the table said before).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from wsgemm.config import GemmConfig
from wsgemm.tuning import H100_SXM, H200
from wsgemm.tuning.autotune import _jsonable

ROOT = Path(__file__).resolve().parents[2]
TARGET = ROOT / "src" / "wsgemm" / "tuning" / "tables" / "sm90.json"
# The device names older runs were keyed by, and the GPU numbers they stand for.
PRESETS = {gpu.name: gpu for gpu in (H200, H100_SXM)}
ABOUT = ("Measured winners of config='autotune' per shape bucket, by the GPU numbers they were measured for "
         "(wsgemm.tuning.gpu.Gpu.table_key). A winner was timed at its bucket's largest M (entries) or at one "
         "exact M (points) and serves the bucket where its waves fit (wsgemm.tuning.table). Regenerate with "
         "python -m benchmarks.maint.tuned_table.")
BUCKET_FIELDS = 6  # dtypes, majors, m, n, k, l


def load_run(path: Path) -> dict:
    """An autotune file, as written."""
    return json.loads(Path(path).read_text())


def gpu_named(name: str):
    """The preset ``wsgemm.tuning.Gpu`` of a device name, as older runs and reports
    name it (``torch.cuda.get_device_name()``)."""
    try:
        return PRESETS[name]
    except KeyError:
        raise ValueError(f"no GPU preset for {name!r}; known: {sorted(PRESETS)}") from None


def split_key(key: str) -> tuple[str, str, str | None]:
    """(table key, bucket, device name or None) of an autotune file's key: either
    ``sm90/132sm/4.9TBps|<bucket>`` or, in older runs, ``NVIDIA H200|sm90|<bucket>``."""
    parts = key.split("|")
    prefix, bucket = parts[:-BUCKET_FIELDS], "|".join(parts[-BUCKET_FIELDS:])
    if len(prefix) == 2:
        name, arch = prefix
        gpu = gpu_named(name)
        if gpu.arch != arch:
            raise ValueError(f"{key!r}: {name} is {gpu.arch}, not {arch}")
        return gpu.table_key, bucket, name
    if len(prefix) != 1 or not bucket.split("|")[2].startswith("m<="):
        raise ValueError(f"{key!r} is no autotune key (<table key>|<bucket>)")
    return prefix[0], bucket, None


def slot(key: str, entry: dict) -> tuple[str, str, str]:
    """(table key, "entries" or "points", key in there) of a run's winner: the bucket
    where it was timed at the bucket's bound (or its M was not recorded), else its
    exact M in the bucket's place."""
    table_key, bucket, _ = split_key(key)
    bound = int(bucket.split("|")[2].removeprefix("m<="))
    m = int(entry.get("m", bound))
    if m == bound:
        return table_key, "entries", bucket
    return table_key, "points", bucket.replace(f"|m<={bound}|", f"|m={m}|")


def covers_bucket(where: tuple[str, str, str], entry: dict) -> bool:
    """Whether a winner timed at its bucket's bound serves every M of the bucket: a
    swapped kernel puts the tokens in its N tiles, and one 96-wide tile measured at
    M = 96 became two mostly empty, unpaired tiles at M = 128, 2x slower
    (docs/tuning-log/tile-shapes.md). Plain kernels tile M like any other dimension; a
    point serves only the M it was timed at and those ``wsgemm.tuning.table.serves``
    allows."""
    config = entry["config"]
    _, kind, key = where
    if kind == "points" or not (isinstance(config, dict) and config.get("swap_ab")):
        return True
    bound = int(key.split("|")[2].removeprefix("m<="))
    return config["tile_n"] * config.get("cluster_n", 1) >= bound


def merge(runs: list[dict], superseding: list[dict] = ()) -> dict:
    """One winner per table slot (:func:`slot`). Each run's winner of the slot is a
    contender; the one with the best time relative to each run's fastest candidate,
    averaged over the runs that timed it, wins. Relative times because a disturbed
    run slows every candidate of a bucket alike (one run timed a whole bucket at
    twice what the next run found); averaged because two candidates within a few
    percent swap places from run to run. A tie goes to the contender whose own run
    measured less.

    Runs that timed a bucket with CUDA-graph replays (``"timing": "graph"``, the
    autotuner's protocol for short kernels) outrank runs that timed it with single
    calls: the suite times those buckets in graphs, and the two protocols disagree
    there (docs/tuning-log/timing.md).

    A swapped winner whose N tiles cannot hold the bucket's largest M is left out
    (:func:`covers_bucket`).

    ``superseding`` runs were measured on a newer kernel: for the slots they timed,
    the older runs' timings no longer describe what ships and are left out (averaged
    in, they kept a split kernel that the new kernel runs 4-6 % slower than an
    unsplit one; docs/tuning-log/split-k.md).

    Returns {(table key, kind, key): the winning run entry}.
    """
    def by_slot(entries: dict) -> dict:
        return {slot(key, entry): entry for key, entry in entries.items()}

    runs, superseding = [by_slot(r) for r in runs], [by_slot(r) for r in superseding]
    merged: dict = {}
    newer = {where for entries in superseding for where in entries}
    for where in dict.fromkeys(where for entries in [*runs, *superseding] for where in entries):
        pool = superseding if where in newer else runs
        timed = [entries[where] for entries in pool if where in entries and covers_bucket(where, entries[where])]
        graphed = [entry for entry in timed if entry.get("timing") == "graph"]
        contenders = graphed or timed
        if not contenders:  # no winner serves the whole bucket: the model decides there
            continue
        timings = [entry["ms"] for entry in contenders]

        def score(entry):
            name = min(entry["ms"], key=entry["ms"].get)
            relative = [ms[name] / min(ms.values()) for ms in timings if name in ms]
            return sum(relative) / len(relative), min(entry["ms"].values())

        merged[where] = min(contenders, key=score)
    return merged


def non_default_fields(config: dict) -> dict:
    """A run's config (``autotune._jsonable``'s encoding) less ``GemmConfig()``'s defaults."""
    defaults = _jsonable(GemmConfig())
    return {name: value for name, value in sorted(config.items()) if defaults.get(name) != value}


SUPERSEDED_BY = "; superseded bucket by bucket by "
RUNS = "config='autotune' runs "


def cited(path: Path) -> str:
    """A run as the table names it: relative to the repository where it lies in it."""
    path = Path(path).resolve()
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else path.name


def sources_line(runs: list[Path], superseding: list[Path]) -> str:
    """A table's ``source``, from which :func:`read_sources` gets both lists back."""
    text = RUNS + ", ".join(map(cited, runs))
    return text + (SUPERSEDED_BY + ", ".join(map(cited, superseding)) if superseding else "")


def read_sources(source: str) -> tuple[list[str], list[str]]:
    """(runs, superseding runs) a table's ``source`` (:func:`sources_line`) names."""
    if not source.startswith(RUNS):
        raise ValueError(f"not a source line tuned_table wrote: {source[:80]!r}")
    runs, _, newer = source.removeprefix(RUNS).partition(SUPERSEDED_BY)
    return runs.split(", "), newer.split(", ") if newer else []


def tables(merged: dict, source: str, devices: dict[str, str], measured: str | None, before: dict) -> list[dict]:
    """One table per GPU key of ``merged``; ``before``: the file's tables by GPU key,
    whose ``measured`` and ``measured_on`` are kept where the runs do not say."""
    out = []
    for gpu_key in sorted({where[0] for where in merged}):
        old = before.get(gpu_key, {})
        table = {"gpu": gpu_key, "measured_on": devices.get(gpu_key) or old.get("measured_on", ""),
                 "source": source, "measured": measured or old.get("measured", "not recorded")}
        for kind in ("entries", "points"):
            found = {key: non_default_fields(entry["config"]) for (g, k, key), entry in merged.items()
                     if g == gpu_key and k == kind}
            if found:
                table[kind] = dict(sorted(found.items()))
        out.append(table)
    return out


def render(doc: dict) -> str:
    """The table file: JSON indented by one, a winner on each line."""
    def value(v, indent: int) -> str:
        pad = " " * indent
        if isinstance(v, dict) and v and all(isinstance(x, dict) for x in v.values()) and indent >= 3:
            lines = [f'{pad} {json.dumps(k)}: {json.dumps(x, sort_keys=True)}' for k, x in v.items()]
            return "{\n" + ",\n".join(lines) + f"\n{pad}}}"
        if isinstance(v, dict):
            lines = [f"{pad} {json.dumps(k)}: {value(x, indent + 1)}" for k, x in v.items()]
            return "{\n" + ",\n".join(lines) + f"\n{pad}}}"
        if isinstance(v, list):
            lines = [f"{pad} {value(x, indent + 1)}" for x in v]
            return "[\n" + ",\n".join(lines) + f"\n{pad}]"
        return json.dumps(v)

    return value(doc, 0) + "\n"


def build(runs: list[dict], superseding: list[dict], source: str, measured: str | None, before_doc: dict) -> dict:
    """The table file's document: ``before_doc``'s tables of other GPUs, and one per GPU
    the runs measured."""
    merged = merge(runs, superseding)
    devices = {}
    for entries in [*runs, *superseding]:
        for key in entries:
            gpu_key, _, name = split_key(key)
            if name:
                devices.setdefault(gpu_key, name)
    before = {t["gpu"]: t for t in before_doc.get("tables", [])}
    new = tables(merged, source, devices, measured, before)
    kept = [t for t in before_doc.get("tables", []) if t["gpu"] not in {t["gpu"] for t in new}]
    return {"about": before_doc.get("about", ABOUT), "tables": sorted(kept + new, key=lambda t: t["gpu"])}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.maint.tuned_table", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("autotune_json", type=Path, nargs="+")
    p.add_argument("--superseding", type=Path, nargs="+", default=[],
                   help="runs on a newer kernel: for the buckets they timed, only they count")
    p.add_argument("--measured", help="when the runs were measured (default: what the table said before)")
    p.add_argument("--out", type=Path, default=TARGET, help="the table file (default: the packaged sm90.json)")
    args = p.parse_args(argv)
    before = json.loads(args.out.read_text()) if args.out.exists() else {}
    doc = build([load_run(path) for path in args.autotune_json], [load_run(path) for path in args.superseding],
                sources_line(args.autotune_json, args.superseding), args.measured, before)
    args.out.write_text(render(doc))
    counts = ", ".join(f"{t['gpu']}: {len(t.get('entries', {}))} buckets, {len(t.get('points', {}))} points"
                       for t in doc["tables"])
    print(f"wrote {cited(args.out)} ({counts})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
