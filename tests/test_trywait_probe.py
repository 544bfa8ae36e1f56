"""benchmarks/trywait_probe.py on the CPU: it refuses cleanly without a GPU, turns the
CUDA program's lines into the report, and its CUDA source compiles (where nvcc is
installed) into timed regions whose second clock read waits for the probe's answer."""

from __future__ import annotations

import json
import re
import shutil
import subprocess

import pytest

from benchmarks import trywait_probe as probe
from wsgemm.inspection import find_nvdisasm


def test_without_a_gpu_it_says_so_and_exits_with_status_2(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(probe.shutil, "which", lambda name: None)
    assert probe.main(["--out", str(tmp_path)]) == probe.NO_GPU == 2
    assert "cannot run here: no NVIDIA GPU" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


def test_a_gpu_other_than_hopper_is_refused(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(probe.shutil, "which", lambda name: f"/usr/bin/{name}")
    monkeypatch.setattr(probe.subprocess, "run", lambda *a, **k: subprocess.CompletedProcess(
        a, 0, stdout="NVIDIA B200, 10.0\n", stderr=""))
    assert probe.main(["--out", str(tmp_path)]) == 2
    assert "compute capability 10.0" in capsys.readouterr().err


def test_result_files_are_named_by_the_gpu():
    assert probe.gpu_slug("NVIDIA H100 80GB HBM3") == "h100"
    assert probe.gpu_slug("NVIDIA H200") == "h200"
    assert probe.gpu_slug("NVIDIA GH200 480GB") == "gh200"


def test_the_report_has_each_cases_cycles_statistics_and_the_measured_clock():
    lines = [
        {"device": "NVIDIA H100 80GB HBM3", "cc": "9.0", "reps": 3, "clock_cycles": 3960000, "clock_ns": 2000000},
        {"case": "hinted, selp", "form": 1, "flags": 0, "spacing": 0, "hint_ns": 1000, "cycles": [7880, 7870, 7900]},
        {"case": "unhinted, selp, spaced", "form": 0, "flags": 0, "spacing": 200, "hint_ns": 0,
         "cycles": [7768, 7779, 7770]},
        {"case": "old setup", "form": 2, "flags": 511, "spacing": 0, "hint_ns": 0, "cycles": [51, 51, 7773],
         "ns": [32, 32, 3900], "hinted_after_0_ns": [308, 300, 310]},
        {"case": "arrival, unhinted loop", "arrival_delay": 1000, "cycles": [150, 220, 180], "iterations": [1, 1, 1]},
    ]
    report = probe.summarise(lines)
    assert report["sm_clock_mhz"] == 1980
    labels = [c["label"] for c in report["cases"]]
    assert labels == ["hinted, selp 1000 ns", "unhinted, selp, spaced 200 cycles apart", "old setup",
                      "arrival, unhinted loop, arrival 1000 cycles in"]
    spaced = report["cases"][1]["cycles_stats"]
    assert (spaced["median"], spaced["min"], spaced["max"], spaced["n"]) == (7770, 7768, 7779, 3)
    assert report["cases"][2]["hinted_after_0_ns_stats"]["median"] == 308
    assert report["cases"][3]["iterations_stats"]["max"] == 1
    json.dumps(report)  # what --out writes
    text = probe.table(report)
    assert "1980 MHz" in text and "3.924" in text  # 7770 cycles at 1980 MHz, in us
    assert "try_waits per loop 1" in text and "0_ns: 308" in text



def test_the_committed_h100_run_says_what_producer_lookahead_md_reads_in_it():
    """benchmarks/results/trywait_probe_h100.json: a pending probe read at once takes the
    time limit in every call, unless lane 0's bulk-copy block (BULK_AFTER) ran before it
    in the same launch; then it answers in ~50 cycles, as in the older setup."""
    path = probe.SOURCE.parent / "results" / "trywait_probe_h100.json"
    report = json.loads(path.read_text())
    assert report["gpu"].startswith("NVIDIA H100") and report["sm_clock_mhz"] == 1980
    cases = {case["label"]: case["cycles"] for case in report["cases"]}
    took_the_limit = lambda cycles: all(7700 < c < 7800 for c in cycles)  # noqa: E731
    answered_at_once = lambda cycles: all(c < 100 for c in cycles)  # noqa: E731
    assert took_the_limit(cases["unhinted, selp"]) and took_the_limit(cases["unhinted, predicated store"])
    assert took_the_limit(cases["old setup - BULK_AFTER"])
    for label in ("clean + BULK_AFTER", "old setup", "old setup, selp"):
        first, *rest = cases[label]
        assert took_the_limit([first]) and answered_at_once(rest), label
    added = [label for label in cases if label.startswith("clean + ")]
    removed = [label for label in cases if label.startswith("old setup - ")]
    assert len(added) == len(removed) == 9
    assert [label for label in added if not took_the_limit(cases[label])] == ["clean + BULK_AFTER"]
    assert [label for label in removed if took_the_limit(cases[label])] == ["old setup - BULK_AFTER"]
    assert cases["unhinted, predicate read after the clock read"][0] < 100
    assert max(cases["lane 0: unhinted try_wait, then cp.async.bulk issue"]) < 200

@pytest.fixture(scope="module")
def probe_sass(tmp_path_factory):
    """The probe kernels' SASS: {form number: instructions of the clean case}."""
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc not installed")
    nvdisasm = find_nvdisasm()
    if nvdisasm is None:
        pytest.skip("nvdisasm not installed (pip install -e '.[sass]')")
    cubin = tmp_path_factory.mktemp("probe") / "probe.cubin"
    subprocess.run(["nvcc", "-O3", "-std=c++17", "-arch=sm_90a", "-cubin", "-o", str(cubin), str(probe.SOURCE)],
                   check=True, capture_output=True)
    sass = subprocess.run([nvdisasm, "-c", str(cubin)], check=True, capture_output=True, text=True).stdout
    kernels = re.findall(r"\n\.text\._Z12probe_kernelILi(\d+)ELj0E\w+:\n(.*?)(?=\n\.text\.|\Z)", sass, re.S)
    return {int(form): [ins.strip() for ins in re.findall(r"/\*[0-9a-f]{4}\*/\s+([^;]*);", body)]
            for form, body in kernels}


def timed_region(instructions: list[str]) -> list[str]:
    """From the probe's TRYWAIT to the next clock read."""
    start = next(i for i, ins in enumerate(instructions) if "TRYWAIT" in ins)
    end = next(i for i in range(start, len(instructions)) if "SR_CLOCKLO" in instructions[i])
    return instructions[start:end]


def reads_predicate(instruction: str, predicate: str) -> bool:
    return bool(re.match(rf"@!?{predicate}\b", instruction) or re.search(rf"SEL .*!?{predicate}$", instruction))


@pytest.mark.parametrize("form", [0, 1, 2], ids=["selp", "hinted selp", "predicated store"])
def test_a_timed_answer_is_read_before_the_closing_clock_read(probe_sass, form):
    """The instruction that reads the probe's predicate (a SEL and the store of its
    value, or the predicated store) sits between the TRYWAIT and the closing clock
    read, so the clock read cannot issue before the answer is there."""
    region = timed_region(probe_sass[form])
    predicate = re.search(r"TRYWAIT (P\d)", region[0]).group(1)
    assert any(reads_predicate(ins, predicate) for ins in region[1:]), region
    assert any(ins.startswith(("STS", "@P", "@!P")) and "STS" in ins for ins in region), region


@pytest.mark.parametrize("form", [5, 6], ids=["alone", "then a bulk copy"])
def test_an_unread_answer_is_read_only_after_the_closing_clock_read(probe_sass, form):
    region = timed_region(probe_sass[form])
    predicate = re.search(r"TRYWAIT (P\d)", region[0]).group(1)
    assert not any(reads_predicate(ins, predicate) for ins in region[1:]), region
    if form == 6:
        assert any(ins.startswith("UBLKCP") for ins in region), region
