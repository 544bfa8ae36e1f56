"""docs/pipeline.md's ring diagram is what the model's steps give today, and it shows
two laps of both rings with every kind of barrier operation labelled."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from wsgemm.pipeline_sim import diagram

DOC = Path(__file__).resolve().parents[1] / "docs" / "pipeline.md"


def test_the_committed_diagram_is_what_the_model_generates():
    text = DOC.read_text()
    assert diagram.update(text) == text, (
        "docs/pipeline.md's diagram is out of date: run python -m wsgemm.pipeline_sim.diagram docs/pipeline.md")


def test_every_barrier_completes_two_phases_and_the_run_ends_clean():
    lines = diagram.diagram_lines()
    completed = set(re.findall(r"Note over (\w+): phase (\d+) complete", "\n".join(lines)))
    barriers = ("full0", "full1", "empty0", "empty1", "acc_full0", "acc_empty0")
    assert completed == {(b, phase) for b in barriers for phase in ("0", "1")}


def test_each_kind_of_barrier_operation_is_labelled_on_its_participants():
    text = "\n".join(diagram.diagram_lines())
    assert re.search(r"producer->>full\d: arrive\.expect_tx 49152 B", text)
    assert re.search(r"TMA->>full\d: complete_tx 16384 B \(A of k-block 0 landed\)", text)
    assert re.search(r"TMA->>full\d: complete_tx 32768 B \(B of k-block 0 landed\)", text)
    assert re.search(r"mma->>TC: tcgen05\.commit to empty\[0\]", text)
    assert re.search(r"TC->>acc_full0: arrive \(tcgen05\.commit", text)
    assert re.search(r"epilogue->>acc_empty0: arrive x4", text)
    assert re.search(r"producer->>empty1: try_wait\.parity 1\n\s+empty1-->>producer: token true", text)
    assert re.search(r"empty0-->>producer: wait\.parity 0 passes", text)  # lap 1 waits for the first release
    assert "Note over producer: blocked: wait empty[0] parity 0" in text


def test_the_generator_refuses_a_file_without_markers_and_check_reports_a_stale_one(tmp_path, capsys):
    with pytest.raises(ValueError, match="markers"):
        diagram.update("# no markers here\n")
    stale = tmp_path / "pipeline.md"
    stale.write_text(f"intro\n{diagram.BEGIN}\nold picture\n{diagram.END}\nafter\n")
    assert diagram.main([str(stale), "--check"]) == 1
    assert diagram.main([str(stale)]) == 0
    assert diagram.main([str(stale), "--check"]) == 0
    assert stale.read_text().startswith("intro\n") and stale.read_text().endswith(f"{diagram.END}\nafter\n")
