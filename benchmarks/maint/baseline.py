"""Export wsgemm as it was at another commit, importable beside the working tree's,
so a kernel change is timed against the code before it in one run.

    python -m benchmarks.maint.baseline HEAD~3 /tmp/base
    PYTHONPATH=/tmp/base python -m benchmarks.suite --suite shortk --impls wsgemm,wsgemm-base,torch.matmul

writes ``/tmp/base/wsgemm_base/`` (the package from ``src/wsgemm`` at that commit,
renamed: its imports are relative) and ``BASELINE_REV`` in it, which the suite
records beside the timings. Both packages compile into their own caches: the
in-process one is per package, and the disk cache keys on each package's code.
"""

from __future__ import annotations

import argparse
import io
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

PACKAGE = "wsgemm_base"
REPO = Path(__file__).resolve().parents[2]


def export(rev: str, dest: Path) -> Path:
    """Unpack ``src/wsgemm`` at ``rev`` into ``dest/wsgemm_base``; returns that folder."""
    sha = subprocess.run(["git", "rev-parse", "--verify", f"{rev}^{{commit}}"], cwd=REPO, check=True,
                         capture_output=True, text=True).stdout.strip()
    archive = subprocess.run(["git", "archive", "--format=tar", sha, "src/wsgemm"], cwd=REPO, check=True,
                             capture_output=True).stdout
    target = dest / PACKAGE
    if target.exists():
        shutil.rmtree(target)
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        for member in tar.getmembers():
            if not member.isfile():
                continue
            relative = Path(member.name).relative_to("src/wsgemm")
            out = target / relative
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_bytes(renamed(relative, tar.extractfile(member).read()))
    (target / "BASELINE_REV").write_text(f"{rev} {sha}\n")
    return target


def renamed(relative: Path, content: bytes) -> bytes:
    """A file of the exported package as ``wsgemm_base`` needs it: its imports are
    relative, but commits before the operator took its package's name registered
    ``wsgemm::gemm`` in ops.py, which the working tree's package defines too."""
    if relative == Path("ops.py"):
        return content.replace(b'"wsgemm::gemm"', f'"{PACKAGE}::gemm"'.encode())
    return content


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.maint.baseline", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("rev", help="a commit, e.g. HEAD~1 or a hash")
    p.add_argument("dest", help="folder to put on PYTHONPATH")
    args = p.parse_args(argv)
    print(export(args.rev, Path(args.dest)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
