"""Write ``src/wsgemm/tuned_table.py``: the autotuner's measured winners, shipped as
the default configuration for those shape buckets on that GPU.

    python benchmarks/tuned_table.py benchmarks/results/autotune_h200_suite.json

The input is an ``autotune.json`` written by ``config="autotune"`` (here: the LLM +
decode suite on an H200, benchmarks/results/suite_llm_decode.md, whose
wsgemm-autotune column ran exactly these configurations). Only fields that differ
from ``GemmConfig()``'s defaults are written.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

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


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("autotune_json", type=Path)
    args = p.parse_args(argv)
    entries = json.loads(args.autotune_json.read_text())
    source = args.autotune_json.resolve().relative_to(ROOT) if args.autotune_json.resolve().is_relative_to(ROOT) \
        else args.autotune_json.name
    TARGET.write_text(render(entries, str(source)))
    print(f"wrote {TARGET.relative_to(ROOT)}: {len(entries)} shape buckets")
    return 0


if __name__ == "__main__":
    sys.exit(main())
