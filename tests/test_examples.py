"""Every example runs: the ones that need no GPU here, the GPU ones either for real (on
an SM90 GPU) or to their "no GPU" message. Each example says what it needs in a
``Needs:`` line of its docstring; that line decides how it is run.

The examples are one ladder, 01 to 05: the mbarrier ring, the producer's look-ahead,
a GEMM from PyTorch, reading the compiled kernel, a policy switch on the GPU. The
tuning case studies that used to follow them are in docs/tuning-log/."""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = sorted((Path(__file__).resolve().parents[1] / "examples").glob("[0-9][0-9]_*.py"))
NO_GPU_MESSAGE = "No SM90 GPU here"


def needs(path: Path) -> str:
    doc = ast.get_docstring(ast.parse(path.read_text()))
    lines = [line for line in (doc or "").splitlines() if line.startswith("Needs:")]
    assert lines, f"{path.name}: the docstring must say what the example needs ('Needs: ...')"
    return lines[0]


def sm90_gpu_present() -> bool:
    import torch

    return torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)


def test_the_ladder_is_numbered_without_gaps():
    numbers = [int(p.name[:2]) for p in EXAMPLES]
    assert numbers == list(range(1, len(EXAMPLES) + 1)) and len(numbers) >= 5


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_example_runs(path, tmp_path):
    gpu_example = "SM90 GPU" in needs(path)
    # Examples that write files get a directory of their own (02 takes it as argv[1]).
    args = [str(tmp_path)] if path.name.startswith("02_") else []
    done = subprocess.run([sys.executable, str(path), *args], capture_output=True, text=True,
                          timeout=600 if gpu_example else 180, cwd=tmp_path)
    assert done.returncode == 0, f"{path.name} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    if gpu_example and not sm90_gpu_present():
        assert NO_GPU_MESSAGE in done.stdout
    if path.name.startswith("02_") and "No charts" not in done.stdout:
        assert sorted(p.name for p in tmp_path.glob("*.png")) == [
            "lookahead-sm100.png", "lookahead-sm90.png", "lookahead-sm90_pingpong.png"]
