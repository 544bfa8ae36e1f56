"""Write ``src/wsgemm/tuned_table.py``: the autotuner's measured winners, shipped as
the default configuration for those shape buckets on that GPU.

    python benchmarks/tuned_table.py benchmarks/results/autotune_h200_c.json.gz \
        benchmarks/results/autotune_h200_d.json.gz [--superseding newer.json ...]

Each input is an ``autotune.json`` written by ``config="autotune"`` (here: two runs
of the LLM + decode suite on an H200, benchmarks/NOTES.md section 13). Where several
runs measured a bucket, :func:`merge` picks among their winners. Only fields that
differ from ``GemmConfig()``'s defaults are written.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))
from result_files import load_json  # noqa: E402

TARGET = ROOT / "src" / "wsgemm" / "tuned_table.py"


def render(entries: dict, source: str) -> str:
    from wsgemm.autotune import _jsonable
    from wsgemm.config import GemmConfig

    defaults = _jsonable(GemmConfig())  # the same encoding as the autotune file's entries
    lines = [
        '"""Measured best configurations per autotune shape bucket (generated; do not edit).',
        "",
        f"Source: {source}, by benchmarks/tuned_table.py. Keys are",
        "``wsgemm.autotune.bucket_key`` strings; values the non-default GemmConfig fields.",
        '"""',
        "",
        "MEASURED = {",
    ]
    for key in sorted(entries):
        config = entries[key]["config"]
        fields = {name: value for name, value in config.items() if defaults.get(name) != value}
        lines.append(f"    {key!r}: {fields!r},")
    lines.append("}")
    return "\n".join(lines) + "\n"


def load_run(path: Path) -> dict:
    """An autotune file, as written or gzipped (``.json.gz``: the committed results
    keep the repository small)."""
    return load_json(path)


SUPERSEDED_BY = "; superseded where they timed a bucket by "


def sources_line(runs: list[Path], superseding: list[Path]) -> str:
    """The table's "Source:" text, from which :func:`read_sources` gets both lists back."""
    def name(path: Path) -> str:
        path = path.resolve()
        return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else path.name

    text = ", ".join(map(name, runs))
    return text + (SUPERSEDED_BY + ", ".join(map(name, superseding)) if superseding else "")


def read_sources(table_text: str) -> tuple[list[str], list[str]]:
    """(runs, superseding runs) named by a packaged table's "Source:" line."""
    text = table_text.split("Source: ", 1)[1].split(", by benchmarks/tuned_table.py", 1)[0]
    runs, _, newer = text.partition(SUPERSEDED_BY)
    return runs.split(", "), newer.split(", ") if newer else []


def covers_bucket(key: str, entry: dict) -> bool:
    """Whether the bucket's winner serves every M of the bucket (``m<=B`` in the key):
    a swapped kernel puts the tokens in its N tiles, and one 96-wide tile measured at
    M = 96 became two mostly empty, unpaired tiles at M = 128, 2x slower
    (benchmarks/NOTES.md section 16). Plain kernels tile M like any other dimension."""
    config = entry["config"]
    if not (isinstance(config, dict) and config.get("swap_ab")) or "|m<=" not in key:
        return True
    from wsgemm.autotune import bucket_shape

    return config["tile_n"] * config.get("cluster_n", 1) >= bucket_shape(key).m_bound


def merge(runs: list[dict], superseding: list[dict] = ()) -> dict:
    """One entry per shape bucket. Each run's winner of the bucket is a contender; the
    one with the best time relative to each run's fastest candidate, averaged over
    the runs that timed it, wins. Relative times because a disturbed run slows every
    candidate of a bucket alike (one run timed a whole bucket at twice what the next
    run found); averaged because two candidates within a few percent swap places
    from run to run. A tie goes to the contender whose own run measured less.

    Runs that timed a bucket with CUDA-graph replays (``"timing": "graph"``, the
    autotuner's protocol for short kernels since session 7) outrank runs that timed
    it with single calls: the suite times those buckets in graphs, and the two
    protocols disagree there (benchmarks/NOTES.md sections 13 and 16).

    A swapped winner whose N tiles cannot hold the bucket's largest M is left out
    (:func:`covers_bucket`): a bucket is tuned at the first M the suite has in it.

    ``superseding`` runs were measured on a newer kernel: for the buckets they timed,
    the older runs' timings no longer describe what ships and are left out (averaged
    in, they kept a split kernel that the new kernel runs 4-6 % slower than an
    unsplit one; benchmarks/NOTES.md section 22).
    """
    merged: dict = {}
    newer_keys = {key for entries in superseding for key in entries}
    for key in dict.fromkeys(key for entries in [*runs, *superseding] for key in entries):
        pool = superseding if key in newer_keys else runs
        timed = [entries[key] for entries in pool if key in entries and covers_bucket(key, entries[key])]
        graphed = [entry for entry in timed if entry.get("timing") == "graph"]
        contenders = graphed or timed
        if not contenders:  # no winner serves the whole bucket: the model decides there
            continue
        timings = [entry["ms"] for entry in contenders]

        def score(entry):
            name = min(entry["ms"], key=entry["ms"].get)
            relative = [ms[name] / min(ms.values()) for ms in timings if name in ms]
            return sum(relative) / len(relative), min(entry["ms"].values())

        merged[key] = min(contenders, key=score)
    return merged


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("autotune_json", type=Path, nargs="+")
    p.add_argument("--superseding", type=Path, nargs="+", default=[],
                   help="runs on a newer kernel: for the buckets they timed, only they count")
    args = p.parse_args(argv)
    entries = merge([load_run(path) for path in args.autotune_json], [load_run(path) for path in args.superseding])
    TARGET.write_text(render(entries, sources_line(args.autotune_json, args.superseding)))
    print(f"wrote {TARGET.relative_to(ROOT)}: {len(entries)} shape buckets")
    return 0


if __name__ == "__main__":
    sys.exit(main())
