"""The checkout stays small: a device call carries the working tree (tracked files and
untracked ones git does not ignore) beside the larger of the DSL bundle's two parts
(~48 MiB), within 64 MiB, so the project keeps that tree under 12 MiB (results as
compressed JSON, small plots)."""

import re
import subprocess
import sys
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


def expand_braces(name: str) -> list[str]:
    """``sweep_{a,b}.json.gz`` -> the names it abbreviates, as a shell would."""
    match = re.search(r"\{([^{}]*)\}", name)
    if not match:
        return [name]
    return [full for choice in match.group(1).split(",")
            for full in expand_braces(name[:match.start()] + choice + name[match.end():])]


def test_every_result_the_code_and_notes_cite_is_in_the_tree():
    """A ``results/<name>`` cited in a doc, a docstring or a comment names a file under
    ``benchmarks/results/`` or a report in its archive; a table (``.md``) may be left to
    regenerate from its report. A line that says the file was removed is history."""
    if str(ROOT) not in sys.path:  # plain `pytest` puts tests/ on the path, `python -m pytest` the root
        sys.path.insert(0, str(ROOT))
    from benchmarks.maint import result_files
    results = ROOT / "benchmarks" / "results"
    kept = {path.name for path in results.iterdir()} | set(result_files.archived(results))
    cited = re.compile(r"results/([\w{},.-]+?\.(?:json\.gz|json|md|png))")
    missing = []
    for path in carried_files():
        if path.suffix not in (".md", ".py") or results in path.parents:
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if "removed in" in line or "left the tree" in line:
                continue
            for name in (full for written in cited.findall(line) for full in expand_braces(written)):
                report = result_files.report_name(name)
                stem = report.removesuffix(".md")
                if not ({name, report, name + ".gz"} & kept
                        or name.endswith(".md") and {stem + ".json", stem + ".json.gz"} & kept):
                    missing.append(f"{path.relative_to(ROOT)}:{number}: {name}")
    assert not missing, "cited but not in benchmarks/results/ or its archive:\n" + "\n".join(missing)


# The product speaks of its code, not of how it was developed: a numbered session means
# nothing to a reader, and a numbered section only inside the tuning log, where it is one.
SESSION = re.compile(rb"\bsessions? \d+", re.IGNORECASE)
SECTION = re.compile(rb"NOTES\.md|\b[Ss]ections? \d+")


def tracked_texts() -> dict[str, bytes]:
    """Every carried text file's contents, gzipped results unpacked and the results
    archive's reports listed as ``archive.tar.xz:NAME``."""
    from benchmarks.maint import result_files

    texts = {}
    for path in carried_files():
        name = str(path.relative_to(ROOT))
        if path.name == result_files.ARCHIVE:
            texts.update({f"{name}:{member}": data for member, data in result_files.archived(path.parent).items()})
        elif path.suffix not in {".png", ".o", ".so", ".cubin"}:
            texts[name] = result_files.read_bytes(path)
    return texts


def test_nothing_names_a_development_session_or_a_notes_section():
    texts = tracked_texts()
    sessions = [name for name, text in texts.items() if SESSION.search(text)]
    sections = [name for name, text in texts.items()
                if not name.startswith("docs/tuning-log/") and name != "tests/test_repository.py" and SECTION.search(text)]
    assert not sessions, f"numbered sessions in {sessions}"
    assert not sections, f"numbered sections outside docs/tuning-log/ in {sections}"
