"""The JSON files under ``benchmarks/results/``, plain (``.json``) or gzipped
(``.json.gz``) by their name, to hold the tree under its 2 MiB limit. Reports that
nothing links to (the tuning log, docs/tuning-log/, and source comments cite them, the
examples read them through :func:`load_json`) live in one ``archive.tar.xz`` beside
them (xz finds the structure they share: a third smaller than gzipped one by one);
they are read by the name they are cited by, as if they were files:

    python -m benchmarks.maint.result_files show sweep_pp192_llm.json.gz   # the JSON
    python -m benchmarks.maint.result_files archive NAME.json.gz ...       # move reports in

No torch here, so the scripts that only read or summarize files start fast."""

from __future__ import annotations

import argparse
import gzip
import io
import json
import lzma
import shlex
import sys
import tarfile
from pathlib import Path

RESULTS = Path(__file__).resolve().parents[1] / "results"
ARCHIVE = "archive.tar.xz"


def report_name(path) -> str:
    """The name a report is kept under in the archive: its file name less ``.gz``."""
    name = Path(path).name
    return name[:-3] if name.endswith(".gz") else name


def archived(folder=RESULTS) -> dict[str, bytes]:
    """The archive's reports in ``folder``, by ``report_name`` (none if it has no archive)."""
    path = Path(folder) / ARCHIVE
    if not path.exists():
        return {}
    with tarfile.open(path, "r:xz") as tar:
        return {member.name: tar.extractfile(member).read() for member in tar.getmembers() if member.isfile()}


def _gzipped(path) -> bool:
    return str(path).endswith(".gz")


def read_bytes(path) -> bytes:
    """The file's contents, gunzipped if its name ends in ``.gz``; a report moved into
    its folder's archive is read from there."""
    path = Path(path)
    if not path.exists():
        kept = archived(path.parent).get(report_name(path))
        if kept is not None:
            return kept
    raw = path.read_bytes()
    return gzip.decompress(raw) if _gzipped(path) else raw


def load_json(path):
    return json.loads(read_bytes(path))


def write_text(path, text: str) -> None:
    """Write ``text``, gzipped if the name ends in ``.gz`` (with no timestamp, so that
    the same report gives the same bytes)."""
    data = text.encode()
    Path(path).write_bytes(gzip.compress(data, mtime=0) if _gzipped(path) else data)


def regenerate_command(module: str, argv: list[str]) -> str:
    """The command line that wrote a report, ``python -m <module> ...`` (``module``
    e.g. ``benchmarks.suite``, run from the repository root), quoted for a shell,
    without ``--out`` (the GPU machine's output folder, not where the report ends up)."""
    kept = [arg for arg, before in zip(argv, [None, *argv])
            if arg != "--out" and before != "--out" and not arg.startswith("--out=")]
    return shlex.join(["python", "-m", module, *kept])


def reports(folder=RESULTS):
    """Every JSON report in ``folder``, files then archived ones: (file name, bytes)."""
    for path in sorted(Path(folder).glob("*.json*")):
        yield path.name, read_bytes(path)
    for name, data in sorted(archived(folder).items()):
        yield name, data


def write_archive(folder, contents: dict[str, bytes]) -> None:
    """Write ``folder``'s archive holding ``contents``, byte for byte the same for the
    same reports (sorted, no times or owners)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for name in sorted(contents):
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(contents[name]), 0o644
            tar.addfile(info, io.BytesIO(contents[name]))
    packed = lzma.compress(buffer.getvalue(), preset=9 | lzma.PRESET_EXTREME)
    (Path(folder) / ARCHIVE).write_bytes(packed)


def move_into_archive(paths) -> None:
    """Move reports (files of one folder) into that folder's archive."""
    paths = [Path(p) for p in paths]
    folders = {p.resolve().parent for p in paths}
    if len(folders) != 1:
        raise ValueError(f"reports of one folder at a time, not {sorted(map(str, folders))}")
    folder = folders.pop()
    contents = archived(folder)
    for path in paths:
        if report_name(path) in contents:
            raise ValueError(f"{report_name(path)} is archived already")
        contents[report_name(path)] = read_bytes(path)
    write_archive(folder, contents)
    for path in paths:
        path.unlink()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.maint.result_files",
                                     description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    show = commands.add_parser("show", help="print a report, a file or archived, as JSON")
    show.add_argument("name", help="as cited, e.g. sweep_pp192_llm.json.gz")
    move = commands.add_parser("archive", help="move report files into their folder's archive")
    move.add_argument("paths", nargs="+")
    args = parser.parse_args(argv)
    if args.command == "show":
        path = Path(args.name) if Path(args.name).parent != Path(".") else RESULTS / args.name
        try:
            sys.stdout.write(read_bytes(path).decode())
        except FileNotFoundError:
            parser.exit(1, f"no report {path.name} in {path.parent} or its {ARCHIVE}\n")
        return 0
    move_into_archive(args.paths)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
