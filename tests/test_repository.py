"""The checkout stays small: a device call carries the working tree (tracked files and
untracked ones git does not ignore) beside the ~62 MB DSL bundle, within 64 MiB, so
the project keeps that tree under 2 MiB (results as compressed JSON, small plots)."""

import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TREE_BUDGET_BYTES = 2 * 1024 * 1024


def carried_files() -> list[Path]:
    try:
        listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                                cwd=ROOT, capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    return [ROOT / name for name in listed.decode().split("\0") if name and (ROOT / name).is_file()]


def test_the_tree_a_device_call_carries_stays_under_two_mib():
    sizes = sorted(((path.stat().st_size, path.relative_to(ROOT)) for path in carried_files()), reverse=True)
    total = sum(size for size, _ in sizes)
    largest = ", ".join(f"{name} ({size} B)" for size, name in sizes[:5])
    assert total < TREE_BUDGET_BYTES, (f"the tree is {total} bytes, over {TREE_BUDGET_BYTES}: condense notes or "
                                       f"results before adding more; largest: {largest}")
