"""The checkout stays small: a device call carries the working tree (tracked files and
untracked ones git does not ignore) beside the larger of the DSL bundle's two parts
(~48 MiB), within 64 MiB, so the project keeps that tree under 12 MiB (results as plain
JSON, small plots; no archives or compressed files to dodge the limit)."""

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TREE_BUDGET_BYTES = 12 * 1024 * 1024


def carried_files() -> list[Path]:
    try:
        listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                                cwd=ROOT, capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    return [ROOT / name for name in listed.decode().split("\0") if name and (ROOT / name).is_file()]


def test_the_tree_a_device_call_carries_stays_under_twelve_mib():
    sizes = sorted(((path.stat().st_size, path.relative_to(ROOT)) for path in carried_files()), reverse=True)
    total = sum(size for size, _ in sizes)
    largest = ", ".join(f"{name} ({size} B)" for size, name in sizes[:5])
    assert total < TREE_BUDGET_BYTES, (f"the tree is {total} bytes, over {TREE_BUDGET_BYTES}: condense notes or "
                                       f"results before adding more; largest: {largest}")


RESULTS = ROOT / "benchmarks" / "results"
# Archives and compressed files: the tree holds plain files, measured as they are.
PACKED_SUFFIXES = (".gz", ".xz", ".bz2", ".zst", ".zip", ".tar", ".tgz", ".7z")


def test_the_tree_holds_no_archive_or_compressed_file():
    packed = [str(path.relative_to(ROOT)) for path in carried_files() if path.name.endswith(PACKED_SUFFIXES)]
    assert not packed, f"archived or compressed: {packed}"


def test_each_report_name_is_one_file():
    """A report cited by its name alone is unambiguous: ``results/`` and
    ``results/tuning-log/`` hold no two files of one name."""
    names = sorted(path.name for path in RESULTS.rglob("*") if path.is_file())
    assert len(names) == len(set(names)), sorted({name for name in names if names.count(name) > 1})


def expand_braces(name: str) -> list[str]:
    """``sweep_{a,b}.json`` -> the names it abbreviates, as a shell would."""
    match = re.search(r"\{([^{}]*)\}", name)
    if not match:
        return [name]
    return [full for choice in match.group(1).split(",")
            for full in expand_braces(name[:match.start()] + choice + name[match.end():])]


CITED = re.compile(r"results/([\w{},*/-]+?\.(?:json|md|png))\b")
LINK = re.compile(r"\]\(([^()\s#]+)(?:#[^()\s]*)?\)")
GZIPPED = re.compile(r"\w\.json\.gz\b")


def test_every_result_the_code_and_notes_cite_is_in_the_tree():
    """A ``results/<path>`` cited in a doc, a docstring or a comment, and every markdown
    link into ``benchmarks/results/``, names a file there (a ``*`` at least one); a
    table (``.md``) may be left to regenerate from its report. No report is cited by a
    gzipped name. A line that says the file was removed is history."""
    missing, gzipped = [], []
    for path in carried_files():
        if path.suffix not in (".md", ".py"):
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            where = f"{path.relative_to(ROOT)}:{number}"
            if GZIPPED.search(line):
                gzipped.append(where)
            if "removed in" in line or "left the tree" in line:
                continue
            for name in (full for written in CITED.findall(line) for full in expand_braces(written)):
                if not (list(RESULTS.glob(name))
                        or name.endswith(".md") and (RESULTS / name).with_suffix(".json").exists()):
                    missing.append(f"{where}: results/{name}")
            if path.suffix == ".md":
                for target in LINK.findall(line):
                    resolved = (path.parent / target).resolve()
                    if (resolved == RESULTS or RESULTS in resolved.parents) and not resolved.exists():
                        missing.append(f"{where}: link {target}")
    assert not missing, "cited but not in benchmarks/results/:\n" + "\n".join(missing)
    assert not gzipped, "cited by a .json.gz name, not the plain file's: " + ", ".join(gzipped)


# The product speaks of its code, not of how it was developed: a numbered session means
# nothing to a reader, and a numbered section only inside the tuning log, where it is one.
SESSION = re.compile(rb"\bsessions? \d+", re.IGNORECASE)
SECTION = re.compile(rb"NOTES\.md|\b[Ss]ections? \d+")


def tracked_texts() -> dict[str, bytes]:
    """Every carried text file's contents, by its path."""
    return {str(path.relative_to(ROOT)): path.read_bytes() for path in carried_files()
            if path.suffix not in {".png", ".o", ".so", ".cubin"}}


def test_nothing_names_a_development_session_or_a_notes_section():
    texts = tracked_texts()
    sessions = [name for name, text in texts.items() if SESSION.search(text)]
    sections = [name for name, text in texts.items()
                if not name.startswith("docs/tuning-log/") and name != "tests/test_repository.py" and SECTION.search(text)]
    assert not sessions, f"numbered sessions in {sessions}"
    assert not sections, f"numbered sections outside docs/tuning-log/ in {sections}"
