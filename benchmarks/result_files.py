"""The JSON files under ``benchmarks/results/``, plain (``.json``) or gzipped
(``.json.gz``) by their name: small reports that only their markdown tables, the
examples and the tests read are kept gzipped, to hold the tree under its 2 MiB
limit. No torch here, so the scripts that only read or summarize files start fast."""

from __future__ import annotations

import gzip
import json
import shlex
from pathlib import Path


def _gzipped(path) -> bool:
    return str(path).endswith(".gz")


def read_bytes(path) -> bytes:
    """The file's contents, gunzipped if its name ends in ``.gz``."""
    raw = Path(path).read_bytes()
    return gzip.decompress(raw) if _gzipped(path) else raw


def load_json(path):
    return json.loads(read_bytes(path))


def write_text(path, text: str) -> None:
    """Write ``text``, gzipped if the name ends in ``.gz`` (with no timestamp, so that
    the same report gives the same bytes)."""
    data = text.encode()
    Path(path).write_bytes(gzip.compress(data, mtime=0) if _gzipped(path) else data)


def regenerate_command(script: str, argv: list[str]) -> str:
    """The command line of ``benchmarks/<script>`` that wrote a report, quoted for a
    shell, without ``--out`` (the GPU machine's output folder, not where the report
    ends up)."""
    kept = [arg for arg, before in zip(argv, [None, *argv])
            if arg != "--out" and before != "--out" and not arg.startswith("--out=")]
    return shlex.join(["python", f"benchmarks/{script}", *kept])
