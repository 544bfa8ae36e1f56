"""Every example runs: the ones that need no GPU here, the GPU ones either for real (on
an SM90 GPU) or to their "no GPU" message. Each example says what it needs in a
``Needs:`` line of its docstring; that line decides how it is run.

The examples are one ladder, 01 to 06: the mbarrier ring, the producer's look-ahead,
a GEMM from PyTorch, reading the compiled kernel, a policy switch on the GPU, the ring
stepped through with a fault planted. The
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


def run_example(name: str, *args: str, cwd) -> subprocess.CompletedProcess:
    path = next(p for p in EXAMPLES if p.name == name)
    return subprocess.run([sys.executable, str(path), *args], capture_output=True, text=True, timeout=180, cwd=cwd)


def test_stepping_through_the_ring_prints_each_barrier_word_and_ends_clean(tmp_path):
    done = run_example("06_step_through_the_ring.py", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout
    # The producer's announcement leaves no arrival missing but the stage's bytes expected.
    assert "arrive.expect_tx 49152 B on full[0] (phase 0)\n        *full[0]      phase 0 (parity 0)  pending 0/1  tx  49152 B" in out
    # Lap 0's probe asks for parity 1, which a fresh barrier counts as completed.
    assert "producer: try_wait empty[0] parity 1  -> phase of parity 1 completed" in out
    assert "*acc_empty[0] phase 2 (parity 0)  pending 4/4" in out  # two laps of the accumulator ring
    assert "ran to the end" in out and "safe (exhaustive" in out


def test_a_missing_phase_flip_stops_the_ring_and_the_checker_catches_it(tmp_path):
    done = run_example("06_step_through_the_ring.py", "--fault", "missing-phase-flip", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout
    assert "STOPPED: early arrival: producer: arrive.expect_tx 49152 B on full[0] (phase 1)" in out
    caught = next(line for line in out.splitlines() if "caught:" in line)
    assert "stage overwritten" in caught and "accumulator overwritten" in caught


def test_the_step_through_refuses_a_fault_its_structure_cannot_take(tmp_path):
    done = run_example("06_step_through_the_ring.py", "--structure", "sm90", "--fault", "early-acc-release", cwd=tmp_path)
    assert done.returncode == 2 and "sm90 takes one of" in done.stderr
