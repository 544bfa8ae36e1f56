"""Tests of benchmarks/: the user scripts (suites, rendering, host-overhead tables), the
shared harness, the maintainer tools (sweeps, the packaged table, back-to-back
re-tunes, traces, profiles, result files) and an import of every study. CPU only;
the GPU smoke test at the end skips without an SM90 GPU.

The scripts are modules of the ``benchmarks`` package, imported from the repository
root (``python -m pytest`` puts it on the path)."""

from __future__ import annotations

import importlib
import json
import math
import re
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import plot, shapes

ROOT = Path(__file__).resolve().parents[1]

BENCH_DIR = ROOT / "benchmarks"
USER_SCRIPTS = ("suite", "plot", "bench_overhead", "bench_compile", "bench_fused", "bench_first_call")
MAINT_TOOLS = ("sweep_configs", "tune", "tuned_table", "sustained", "retune_sustained", "baseline", "kernel_timeline",
               "ncu_kernels", "ncu_summary", "model_regret", "plan_diff")
# Measurements of the hardware the kernels rely on, each a script with its CUDA source beside it.
PROBES = ("trywait_probe",)
STUDIES = ("back_to_back_kernels", "bench_compiled_decode", "bench_lookahead", "clock_throttle", "deep_k_blocks",
           "hbm_ceiling", "trywait_microbench")


# ------------------------------------------------------------------------- the layout


def test_every_script_is_a_module_of_one_of_three_kinds():
    """User scripts and their library modules at the top, maintainer tools in maint/,
    studies in studies/; none edits sys.path (they import benchmarks.harness)."""
    top = {p.stem for p in BENCH_DIR.glob("*.py")} - {"__init__"}
    assert top == {*USER_SCRIPTS, *PROBES, "harness", "shapes", "triton_matmul"}
    assert {p.stem for p in (BENCH_DIR / "maint").glob("*.py")} - {"__init__"} == set(MAINT_TOOLS)
    assert {p.stem for p in (BENCH_DIR / "studies").glob("*.py")} - {"__init__"} == set(STUDIES)
    edits = [f"{p.relative_to(ROOT)}:{n}" for p in BENCH_DIR.rglob("*.py")
             for n, line in enumerate(p.read_text().splitlines(), 1) if re.search(r"sys\.path\.(insert|append)", line)]
    assert not edits, edits


def test_each_user_script_and_maintainer_tool_answers_help_from_the_repository_root():
    """``python -m benchmarks.<script> --help`` and ``python -m benchmarks.maint.<tool>
    --help``, all in one fresh process started in the repository root."""
    modules = [f"benchmarks.{m}" for m in (*USER_SCRIPTS, *PROBES)] + [f"benchmarks.maint.{m}" for m in MAINT_TOOLS]
    code = ("import runpy, sys\n"
            f"for module in {modules!r}:\n"
            "    sys.argv = [module, '--help']\n"
            "    try:\n"
            "        runpy.run_module(module, run_name='__main__', alter_sys=True)\n"
            "        code = 'no exit'\n"
            "    except SystemExit as exit:\n"
            "        code = exit.code\n"
            "    print(f'EXIT {module} {code}', flush=True)\n")
    run = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=600)
    exits = dict(line.split()[1:] for line in run.stdout.splitlines() if line.startswith("EXIT "))
    assert exits == {module: "0" for module in modules}, run.stderr[-3000:]
    assert run.stdout.count("usage: ") == len(modules)
    assert "usage: python -m benchmarks.suite" in run.stdout


@pytest.mark.parametrize("study", STUDIES)
def test_every_study_imports_and_says_what_it_found(study):
    module = importlib.import_module(f"benchmarks.studies.{study}")
    doc = module.__doc__
    assert doc.startswith("Study: ") and "**Question.**" in doc and "**Conclusion.**" in doc
    assert re.search(r"\*\*Run\*\* 20\d\d-\d\d-\d\d", doc)
    assert re.search(r"docs/tuning-log/[\w-]+\.md", doc), f"{study} links no tuning-log topic"


def test_study_topics_are_tuning_log_topics():
    """Each link names one of the tuning log's topic files."""
    topics = {"tile-shapes", "host-overhead", "decode", "lookahead", "split-k", "packaged-table", "timing",
              "cost-model", "profiling", "dependent-launch", "stream-k", "epilogue", "pingpong", "clusters",
              "raster-bands", "prefill"}
    for path in BENCH_DIR.rglob("*.py"):
        for topic in re.findall(r"docs/tuning-log/([\w-]+)\.md", path.read_text()):
            assert topic in topics, f"{path.relative_to(ROOT)} links docs/tuning-log/{topic}.md"


# ----------------------------------------------------------------------------- suites


def test_every_suite_is_well_formed():
    labels = []
    for name, problems in shapes.SUITES.items():
        assert problems, name
        for p in problems:
            assert min(p.m, p.n, p.k, p.batch) > 0, p
            assert p.layout in shapes.LAYOUTS, p
            assert p.label.startswith(f"{name}/"), p
            assert p.flops == 2.0 * p.batch * p.m * p.n * p.k
        labels += [p.label for p in problems]
    assert len(labels) == len(set(labels)), "labels must be unique across suites"


def test_llm_and_decode_suites_are_llama3_projections_with_weights_as_w_t():
    llm = shapes.SUITES["llm"]
    assert len(llm) <= 60 and all(p.layout == "b_weight_t" and p.batch == 1 for p in llm)
    nk = {(p.n, p.k) for p in llm}
    # 8B: QKV (32 + 2 * 8) * 128, O, fused gate/up 2 * 14336, down; 70B likewise.
    assert nk == {(6144, 4096), (4096, 4096), (28672, 4096), (4096, 14336),
                  (10240, 8192), (8192, 8192), (57344, 8192), (8192, 28672)}
    assert all(1 <= p.m <= 128 for p in shapes.SUITES["decode"])
    assert {(p.n, p.k) for p in shapes.SUITES["decode"]} == nk == {(p.n, p.k) for p in shapes.SUITES["prefill"]}
    assert not {(p.n, p.k) for p in shapes.SUITES["qwen"]} & nk  # off the packaged table's weights


def test_random_suites_are_reproducible_and_span_the_stated_ranges():
    again = shapes.random_problems(shapes.REPORT_SEEDS[0])
    assert again == shapes.SUITES[f"random{shapes.REPORT_SEEDS[0]}"]
    assert shapes.TUNING_SEED not in shapes.REPORT_SEEDS
    for seed in (shapes.TUNING_SEED, *shapes.REPORT_SEEDS):
        problems = shapes.SUITES[f"random{seed}"]
        plain = [p for p in problems if p.batch == 1]
        batched = [p for p in problems if p.batch > 1]
        assert len(plain) == 36 and len(batched) == 4
        assert all(1 <= p.m <= 8192 and 256 <= min(p.n, p.k) and max(p.n, p.k) <= 16384 for p in plain)
        assert all(p.n % 8 == 0 and p.k % 8 == 0 and p.layout == "b_weight_t" for p in plain)
        assert sum(p.m <= 64 for p in plain) >= 8  # the decode draws, at least
        assert all(2 <= p.batch <= 64 and p.layout == "b_row" for p in batched)
    assert shapes.SUITES["random1001"] != shapes.SUITES["random1002"]


def test_select_concatenates_suites_and_filters_labels():
    both = shapes.select(["square", "shortk"])
    assert len(both) == len(shapes.SUITES["square"]) + len(shapes.SUITES["shortk"])
    downs = shapes.select(["llm"], "70B DOWN")
    assert downs and all("llama3-70b down" in p.label for p in downs)
    with pytest.raises(KeyError, match="nope"):
        shapes.select(["nope"])


def test_plan_diffs_json_is_a_problem_list_for_the_suite(tmp_path):
    from benchmarks.suite import parse_args

    listed = tmp_path / "changed.json"  # the keys plan_diff --json writes
    listed.write_text('[{"label": "prefill/x M=136", "m": 136, "n": 6144, "k": 4096, "layout": "b_weight_t",'
                      ' "before": "a", "after": "b"}, {"label": "batched/y", "m": 8, "n": 8, "k": 8, "batch": 4}]')
    assert shapes.from_json(listed) == [shapes.Problem("prefill/x M=136", 136, 6144, 4096, layout="b_weight_t"),
                                        shapes.Problem("batched/y", 8, 8, 8, batch=4)]
    args = parse_args(["--problems", str(listed), "--suite", "random1001"])
    assert args.suite == ["random1001"] and args.name == "suite_random1001_changed"


def test_your_own_shapes_are_problems_too():
    mine = shapes.given([(8192, 8192, 8192), (16, 4096, 14336)], weight=True)
    assert [p.label for p in mine] == ["shapes/8192x8192x8192", "shapes/16x4096x14336"]
    assert {p.layout for p in mine} == {"b_weight_t"} and shapes.given([(1, 2, 3)])[0].layout == "b_row"


# -------------------------------------------------------------------------- rendering


def timing(ms: float, flops: float) -> dict:
    return {"median_ms": ms, "p10_ms": ms * 0.99, "p90_ms": ms * 1.01, "min_ms": ms * 0.98,
            "tflops": flops / ms / 1e9, "runs": 30}


def ok(ms: float, flops: float, method: str = "events", graph_ms: float | None = None) -> dict:
    timings = {"events": timing(ms, flops)}
    if graph_ms is not None:
        timings["cuda_graph"] = timing(graph_ms, flops)
    return {"status": "ok", "rel_error": 1e-3, "method": method, "timings": timings}


def make_row(label: str, results: dict, method: str = "events", flops: float = 2e12) -> dict:
    return {"label": label, "shape": "1024x1024x1024", "layout": "b_row", "m": 1024, "n": 1024, "k": 1024,
            "batch": 1, "flops": flops, "method": method, "results": results}


def synthetic_report(extra_rows: int = 0) -> dict:
    f = 2e12
    rows = [
        # wsgemm / torch = 2.0, 0.5, 1.0: geometric mean exactly 1.
        make_row("t/fast", {"wsgemm": ok(1.0, f), "torch.matmul": ok(2.0, f),
                            "triton": {"status": "wrong", "rel_error": 0.3, "kernel": "tma"}}),
        make_row("t/slow", {"wsgemm": ok(4.0, f), "torch.matmul": ok(2.0, f),
                            "triton": {"status": "error", "error": "CompilationError: boom"}}),
        # A graph row where triton's capture failed: it keeps events only.
        make_row("t/graph", {
            "wsgemm": ok(0.05, f, "cuda_graph", graph_ms=0.01),
            "torch.matmul": ok(0.04, f, "cuda_graph", graph_ms=0.01),
            "triton": {**ok(0.02, f), "graph_error": "RuntimeError: capture"},
        }, method="cuda_graph"),
    ]
    rows += [make_row(f"t/extra {i}", {"wsgemm": ok(1.0, f), "torch.matmul": ok(1.0 + i / 100, f),
                                       "triton": ok(1.1, f)}) for i in range(extra_rows)]
    return {
        "name": "synthetic", "command": "python -m benchmarks.suite --suite quick", "suites": ["quick"],
        "dtype": "bf16", "reps": 30,
        "environment": {"gpu": "NVIDIA H200", "sms": 132, "driver": "580", "torch": "2.11", "cuda": "13.0",
                        "cutlass_dsl": "4.8.1", "wsgemm": "0.1.0", "triton": "3.6.0", "quack": None,
                        "date": "today"},
        "timing": {"flush_bytes": 512 << 20, "graph": "auto", "graph_below_us": 20.0, "graph_calls": 20,
                   "l2_bytes": 60 << 20},
        "implementations": {
            "wsgemm": {"ran": True, "detail": "wsgemm 0.1.0"},
            "torch.matmul": {"ran": True, "detail": "cuBLAS"},
            "triton": {"ran": True, "detail": "persistent"},
            "quack": {"ran": False, "detail": "not installed (No module named 'quack')"},
        },
        "peak": {"measured_tflops": 800.0, "measured_what": "cuBLAS 8192^3", "measured_timing": {},
                 "datasheet_tflops": 989.4, "datasheet_source": "H200 SXM datasheet"},
        "gpu_before": {"clocks.sm": "1980"}, "gpu_after": {"clocks.sm": "1830"},
        "time_budget_s": 60, "rows": rows, "skipped": ["quick/not reached"], "elapsed_s": 12.0,
    }


def test_summary_is_a_geometric_mean_with_the_minimum_and_slow_count():
    s = plot.summary(synthetic_report())
    assert s["shapes"] == 3 and s["geomean"] == pytest.approx(1.0)
    assert s["min"] == pytest.approx(0.5) and s["min_label"] == "t/slow" and s["below_slow_ratio"] == 1


def test_ratio_compares_like_with_like():
    report = synthetic_report()
    graph_row = report["rows"][2]
    assert plot.ratio(graph_row, "wsgemm") == pytest.approx(1.0)  # graph 0.01 vs graph 0.01
    assert plot.ratio(graph_row, "triton") == pytest.approx(0.04 / 0.02)  # events vs events
    assert plot.ratio(report["rows"][0], "triton") is None  # wrong: not timed


def test_markdown_table_summary_failures_and_configurations():
    report = synthetic_report()
    md = plot.render_markdown(report)
    assert "| wsgemm | torch.matmul | triton |" in md and "| quack |" not in md
    assert "geometric mean **1.000x**, min 0.500x (t/slow), 1 below 0.9x" in md
    assert "| t/fast | 1024x1024x1024 | row-major | 2000.0 | 1000.0 | WRONG (3.0e-01) | 2.000x | 250% | 202% |" in md
    assert "(events)" in md and "graph x20" in md
    assert "t/slow / triton: raised, not timed: CompilationError: boom" in md
    assert "t/graph / triton: CUDA-graph capture failed, events timing reported: RuntimeError: capture" in md
    assert "quick/not reached" in md and "L2 flushed (512 MiB write) before every run" in md
    assert "re-render: `python -m benchmarks.plot <this>.json`" in md
    assert "## Configurations" not in md
    report["rows"][0]["results"]["wsgemm"]["config"] = "swap 128x16x64_c1x1_sauto_e2_along_m_w1_before_copy_split2"
    md = plot.render_markdown(report)
    assert "| t/fast | `swap 128x16x64_c1x1_sauto_e2_along_m_w1_before_copy_split2` |" in md
    del report["gpu_after"], report["elapsed_s"]
    assert plot.CUT_SHORT in plot.render_markdown(report)


def test_plot_renders_beside_its_report(tmp_path):
    pytest.importorskip("matplotlib")
    report = synthetic_report(extra_rows=60)
    json_path = tmp_path / "synthetic.json"
    json_path.write_text(json.dumps(report))
    assert plot.main([str(json_path)]) == 0
    png = tmp_path / "synthetic.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size < 100_000
    assert (tmp_path / "synthetic.md").read_text() == plot.render_markdown(report)


def test_triton_module_imports_without_triton(monkeypatch):
    # None in sys.modules makes `import triton` raise ImportError, as if not installed.
    monkeypatch.setitem(sys.modules, "triton", None)
    monkeypatch.setitem(sys.modules, "triton.language", None)
    monkeypatch.delitem(sys.modules, "benchmarks.triton_matmul", raising=False)
    tm = importlib.import_module("benchmarks.triton_matmul")
    monkeypatch.delitem(sys.modules, "benchmarks.triton_matmul")  # the next import gets the real one
    assert tm.triton is None and tm.available() is False
    with pytest.raises(RuntimeError, match="Triton is not installed"):
        tm.matmul(None, None)


# ------------------------------------------------------------------------------ suite


@pytest.fixture(scope="module")
def suite():
    pytest.importorskip("torch")
    return importlib.import_module("benchmarks.suite")


@pytest.fixture(scope="module")
def harness():
    pytest.importorskip("torch")
    return importlib.import_module("benchmarks.harness")


def test_datasheet_peak_by_gpu_name(suite):
    assert suite.datasheet_peak("NVIDIA H200") == ("H200 SXM", 989.4)
    assert suite.datasheet_peak("NVIDIA H100 80GB HBM3") == ("H100 SXM", 989.4)
    assert suite.datasheet_peak("NVIDIA H100 PCIe") == (None, None)
    assert suite.datasheet_peak("NVIDIA A100-SXM4-80GB") == (None, None)


def test_suite_arguments(suite):
    args = suite.parse_args(["--suite", "llm", "--suite", "decode"])
    assert args.name == "suite_llm_decode" and args.reps == 30 and args.graph == "auto"
    assert args.out == suite.RESULTS == BENCH_DIR / "results"
    assert suite.parse_args([]).suite == ["quick"]
    mine = suite.parse_args(["--shapes", "8192x8192x8192,16x4096x4096", "--weight"])
    assert mine.suite == [] and mine.shapes == [(8192, 8192, 8192), (16, 4096, 4096)] and mine.name == "suite_shapes"
    with pytest.raises(SystemExit):
        suite.parse_args(["--shapes", "8192x8192"])
    with pytest.raises(SystemExit):
        suite.parse_args(["--impls", "wsgemm,cublas"])
    # Ablations run only when named.
    assert "wsgemm-nopdl" not in suite.parse_args([]).impls
    assert "wsgemm-epi4" in suite.parse_args(["--impls", "wsgemm,wsgemm-epi4"]).impls


def test_the_suite_offers_the_baseline_only_when_it_is_on_the_path(suite):
    fn, note = suite.baseline_gemm()
    assert fn is None and "benchmarks/maint/baseline.py" in note
    assert "wsgemm-base" in suite.parse_args(["--impls", "wsgemm,wsgemm-base"]).impls


# ---------------------------------------------------------------------------- harness


def test_an_output_is_correct_only_below_its_dtypes_tolerance(harness):
    """Every script's check: a NaN error (a NaN in the output) is wrong, not timed."""
    assert harness.within_tolerance(0.004) and harness.within_tolerance(0.004, "bf16")
    assert not harness.within_tolerance(0.004, "fp16")  # fp16 keeps 3 more mantissa bits
    assert not harness.within_tolerance(0.01) and not harness.within_tolerance(math.nan)


def test_operands_come_in_the_suites_layouts(harness):
    import torch

    problem = shapes.Problem("x/y", 16, 4096, 1024, layout="b_weight_t")
    a, b = harness.make_operands(problem, torch.bfloat16, device="meta")
    assert a.shape == (16, 1024) and b.shape == (1024, 4096) and b.stride() == (1, 1024)
    a, b = harness.make_operands(shapes.Problem("x/z", 8, 32, 64, batch=4), torch.float16, device="meta")
    assert a.shape == (4, 8, 64) and b.shape == (4, 64, 32) and b.is_contiguous()
    a, b = harness.operands(16, 4096, 1024, device="meta")
    assert b.stride() == (1, 1024) and harness.operands(16, 4096, 1024, weight=False, device="meta")[1].is_contiguous()
    assert harness.parse_shapes("8x16x32,1x2x3") == [(8, 16, 32), (1, 2, 3)]


def test_reports_round_their_floats_and_record_a_module_command(harness, tmp_path):
    report = {"ms": 0.123456789, "rows": [{"us": [12.3456789, 3]}], "name": "x"}
    assert json.loads(harness.results_json(report)) == {"ms": 0.12346, "rows": [{"us": [12.346, 3]}], "name": "x"}
    harness.write_results(tmp_path / "r.json", report)
    assert json.loads((tmp_path / "r.json").read_text())["ms"] == 0.12346
    assert harness.RESULTS == BENCH_DIR / "results"
    command = harness.regenerate_command("benchmarks.maint.sustained", [
        "--suite", "llm", "--bands", "", "--out", "/root/out", "--filter", "M=16384|16384\\^3", "--out=/tmp/x"])
    assert command == "python -m benchmarks.maint.sustained --suite llm --bands '' --filter 'M=16384|16384\\^3'"


def test_the_default_problem_is_what_the_planner_plans_for(harness):
    """Layouts, batch folding and whether A and B may swap, as wsgemm.plans decides
    them, on meta tensors."""
    import torch

    from wsgemm.tuning import H200, Problem
    from wsgemm.tuning.autotune import cache_key

    def meta(*shape):
        return torch.empty(*shape, dtype=torch.bfloat16, device="meta")

    weight = harness.default_problem(meta(384, 1024), meta(2048, 1024).t(), H200)
    assert weight == Problem(384, 2048, 1024, 1, "bf16", "bf16", "k", "k", "n", can_swap=True)
    row_major = harness.default_problem(meta(384, 1024), meta(1024, 2048), H200)
    assert (row_major.b_major, row_major.can_swap) == ("n", True)
    # Batched activations over one weight fold into one M (3 x 100 rows: bucket 512), no swap.
    folded = harness.default_problem(meta(3, 100, 4096), meta(2048, 4096).t(), H200)
    assert (folded.m, folded.batches, folded.can_swap) == (300, 1, False)
    assert cache_key(folded, H200) == "sm90/132sm/4.9TBps|bf16->bf16|kkn|m<=512|n=2048|k=4096|l=1"
    fp32 = harness.default_problem(meta(384, 1024), meta(2048, 1024).t(), H200, out_dtype=torch.float32)
    assert fp32.out_dtype == "fp32"


def test_ablations_use_the_default_config_with_one_change(harness, monkeypatch):
    import types

    import torch

    from wsgemm import GemmConfig, plans
    from wsgemm.tuning import launch, rank

    chosen = GemmConfig(tile_m=64, tile_n=64, stages=13, dependent_launch=True)
    planned, calls = [], []

    def make_plan(*args):
        planned.append(launch.PINGPONG_MAX_K_BLOCKS)
        return types.SimpleNamespace(spec=types.SimpleNamespace(config=chosen), mode="swap")

    monkeypatch.setattr(plans, "make_plan", make_plan)
    monkeypatch.setattr(harness.wsgemm, "gemm", lambda a, b, config: calls.append(config))
    gemm = harness.default_config_with(dependent_launch=False)
    a, b = torch.empty(2, 8), torch.empty(8, 4)
    gemm(a, b)
    gemm(a, b)
    assert len(planned) == 1  # planned once per shape and layout
    assert calls == [GemmConfig(tile_m=64, tile_n=64, stages=13, swap_ab=True, dependent_launch=False)] * 2
    # Stream-K forced on replaces a split with the streamed tail.
    chosen = GemmConfig(tile_m=128, tile_n=16, split_k=4)
    calls.clear()
    harness.default_config_with(split_k=1, stream_k=True)(a, b)
    assert calls == [GemmConfig(tile_m=128, tile_n=16, stream_k=True, swap_ab=True)]
    # The default as planned with a launch rule's constant changed, then restored.
    default = launch.PINGPONG_MAX_K_BLOCKS
    planned.clear()
    harness.default_config_with(policy={"PINGPONG_MAX_K_BLOCKS": 0})(a, b)
    assert planned == [0] and launch.PINGPONG_MAX_K_BLOCKS == default
    # A cost-model constant changes the ranking inside, and the cached ranking is forgotten.
    from wsgemm.tuning import H200, Problem

    problem = Problem(512, 4096, 4096, can_swap=True)
    before = rank.ranked(problem, H200)
    with harness.planning_policy({"TIE": 0.5}):
        assert rank.TIE == 0.5 and rank.ranked(problem, H200) is not before
    assert rank.TIE != 0.5 and rank.ranked(problem, H200) == before
    with pytest.raises(KeyError, match="NOT_A_KNOB"):
        with harness.planning_policy({"NOT_A_KNOB": 1}):
            pass


# --------------------------------------------------------------------- config sweeps


@pytest.fixture(scope="module")
def sweep():
    pytest.importorskip("torch")
    return importlib.import_module("benchmarks.maint.sweep_configs")


def test_sweep_grid_names_every_combination(sweep):
    configs = sweep.grid("64x96,128x128", "1x1,2x1", "1,2", "auto,12", "0,1")
    assert len(configs) == 2 * 2 * 2 * 2 * 2
    c = configs["swap 64x96 c2x1 split2 s12"]
    assert (c.tile_m, c.tile_n, c.cluster_m, c.split_k, c.stages, c.swap_ab) == (64, 96, 2, 2, 12, True)
    assert configs["128x128 c1x1"].stages is None and not configs["128x128 c1x1"].swap_ab
    buffers = sweep.grid("128x256", "2x1", "1", epi_stages="2,4")
    assert sorted(buffers) == ["128x256 c2x1", "128x256 c2x1 e4"] and buffers["128x256 c2x1 e4"].epi_stages == 4


def test_sweep_keeps_microseconds_fastest_first_and_graph_times(sweep):
    result = {"shape": [64, 4096, 4096], "b": "W.t()", "cublas_kernels": ["nvjet_sm90_tst_64x32"],
              "default_plan": "swap 64x64x64_c1x1_s13_e4_along_m_w1_before_copy_pdl",
              "skipped": {"64x64 c1x1 s16": "does not fit"},
              "rows": {"torch.matmul": {"median_ms": 0.0191, "p10_ms": 0.0186, "p90_ms": 0.0211, "graph_ms": 0.00512},
                       "swap 64x64 c1x1": {"median_ms": 0.0185, "p10_ms": 0.0183, "p90_ms": 0.0211,
                                           "graph_ms": 0.00446}}}
    kept = sweep.compact(result)
    assert list(kept["us"]) == ["swap 64x64 c1x1", "torch.matmul"]
    assert kept["us"]["torch.matmul"] == [19.1, 18.6, 21.1] and kept["skipped"] == ["64x64 c1x1 s16"]
    assert kept["graph_us"] == {"swap 64x64 c1x1": 4.46, "torch.matmul": 5.12}


def test_sweep_times_a_wrong_output_only_when_asked_and_lists_it(sweep, monkeypatch):
    """An ablation (a --base export that skips work on purpose) fails the check: it is
    left out unless --time-wrong, and then listed as wrong in the JSON."""
    timed = []
    monkeypatch.setattr(sweep, "time_interleaved",
                        lambda calls, reps, flush: timed.append(sorted(calls)) or {label: [0.01] * reps
                                                                                    for label in calls})
    monkeypatch.setattr(sweep, "cublas_kernels", lambda fn: [])
    monkeypatch.setattr(sweep, "plan_text", lambda a, b, config: "")
    monkeypatch.setattr(sweep, "operands", lambda m, n, k, dtype, weight: (
        sweep.torch.rand(m, k) + 0.5, sweep.torch.rand(k, n) + 0.5))
    candidates = {"right": lambda a, b: a @ b, "ablated": lambda a, b: 0.5 * (a @ b)}
    for time_wrong, expected in ((False, ["right", "torch.matmul"]), (True, ["ablated", "right", "torch.matmul"])):
        result = sweep.sweep_shape(4, 8, 16, sweep.torch.float32, candidates, 3, None, True, time_wrong=time_wrong)
        assert timed[-1] == expected
        assert sweep.compact(result).get("wrong", []) == (["ablated"] if time_wrong else [])


def test_sweep_model_candidates_are_launched_as_the_default_path_would(sweep, harness):
    """The cost model's best configs and their other cluster shape, each once, as the
    launch rules turn them, for the problem the default path plans."""
    import torch

    from wsgemm import tuning

    problem = sweep.sweep_problem(384, 1024, 1024, weight_layout=True)
    meta = lambda *shape: torch.empty(*shape, dtype=torch.bfloat16, device="meta")  # noqa: E731
    assert problem == harness.default_problem(meta(384, 1024), meta(1024, 1024).t(), tuning.H200)
    candidates = sweep.model_candidates(384, 1024, 1024, 8, True, tuning.H200)
    best = tuning.ranked(problem, tuning.H200)[0][1]
    first = tuning.as_launched(problem.kernel_problem(best.swap_ab), best, tuning.H200)
    assert next(iter(candidates.values())) == first and next(iter(candidates)).startswith("model#1 ")
    assert len(set(candidates.values())) == len(candidates)
    assert any(" twin " in label for label in candidates)
    assert any(c.swap_ab for c in candidates.values()) and any(not c.swap_ab for c in candidates.values())


def test_sweep_base_runs_a_config_by_its_non_default_fields(sweep, monkeypatch):
    import types

    from wsgemm import GemmConfig

    seen = {}
    stand_in = types.ModuleType("wsgemm_base")
    # An older GemmConfig: it knows only the fields it had (no pingpong, say).
    stand_in.GemmConfig = lambda **fields: ("old config", tuple(sorted(fields.items())))
    stand_in.gemm = lambda a, b, config: seen.setdefault("call", (a, b, config))
    monkeypatch.setitem(sys.modules, "wsgemm_base", stand_in)
    call = sweep.in_base_package(GemmConfig(tile_m=64, tile_n=256, cluster_m=2, raster="along_n"))  # 256: default
    call("a", "b")
    assert seen["call"] == ("a", "b", ("old config", (("cluster_m", 2), ("raster", "along_n"),
                                                      ("tile_m", 64))))


def test_sweep_policy_settings_name_a_tuning_constant_and_a_literal(sweep):
    assert sweep.policy_setting("PINGPONG_MAX_K_BLOCKS=0", None) == ("PINGPONG_MAX_K_BLOCKS", 0)
    assert sweep.policy_setting("WAVE_LOSS_MAX=1.1", None) == ("WAVE_LOSS_MAX", 1.1)  # wsgemm.tuning.table's

    def error(message):
        raise SystemExit(message)

    with pytest.raises(SystemExit, match="no constant 'NOT_A_KNOB'"):
        sweep.policy_setting("NOT_A_KNOB=1", error)
    with pytest.raises(SystemExit, match="not a Python literal"):
        sweep.policy_setting("TIE=most", error)


def test_tune_autotunes_every_problem_and_keeps_the_autotune_file(monkeypatch, tmp_path, capsys):
    pytest.importorskip("torch")
    import types

    import wsgemm
    from wsgemm import plans
    from wsgemm.tuning import autotune

    tune = importlib.import_module("benchmarks.maint.tune")
    tuned = []
    cache = tmp_path / "autotune.json"
    cache.write_text('{"sm90/132sm/4.9TBps|bucket": {"config": {}, "m": 1, "ms": {"a": 0.01}}}\n')
    monkeypatch.setattr(tune, "make_operands", lambda problem, dtype: (problem, None))
    monkeypatch.setattr(wsgemm, "gemm", lambda a, b, config=None: tuned.append((a.label, config)))
    plan = types.SimpleNamespace(spec=types.SimpleNamespace(config=wsgemm.GemmConfig()))
    monkeypatch.setattr(plans, "make_plan", lambda *args: plan)
    monkeypatch.setattr(autotune, "cache_path", lambda: cache)
    saved = tmp_path / "runs" / "run.json"
    assert tune.main(["--suite", "decode", "--filter", "8b o", "--save", str(saved)]) == 0
    labels = [p.label for p in shapes.select(["decode"], "8b o")]
    assert [label for label, _ in tuned] == labels and {config for _, config in tuned} == {"autotune"}
    assert saved.read_text() == cache.read_text()  # the autotuner's file as it wrote it
    assert f"[{len(labels)}/{len(labels)}]" in capsys.readouterr().out


# ------------------------------------------------------------------ the packaged table


@pytest.fixture(scope="module")
def tuned_table():
    pytest.importorskip("torch")
    return importlib.import_module("benchmarks.maint.tuned_table")


TUNING_LOG_RESULTS = BENCH_DIR / "results" / "tuning-log"
TABLE_RUNS = [TUNING_LOG_RESULTS / f"autotune_h200_{run}.json" for run in "cdefg"]
TABLE_SUPERSEDING = [TUNING_LOG_RESULTS / f"autotune_h200_{run}.json" for run in ("i", "j", "q", "r_sustained", "s")]


def test_the_packaged_table_is_what_the_tool_merges_from_the_committed_runs(tuned_table, tmp_path):
    """The committed autotune runs, in the older key format, give the
    packaged table's winners; regenerating over the packaged file keeps its
    provenance and states the runs it read."""
    packaged = json.loads(tuned_table.TARGET.read_text())
    out = tmp_path / "sm90.json"
    out.write_text(tuned_table.TARGET.read_text())
    assert tuned_table.main([*map(str, TABLE_RUNS), "--superseding", *map(str, TABLE_SUPERSEDING),
                             "--out", str(out)]) == 0
    written = json.loads(out.read_text())
    (old,), (new,) = packaged["tables"], written["tables"]
    assert new["entries"] == old["entries"] and "points" not in new
    assert (new["gpu"], new["measured_on"], new["measured"]) == (old["gpu"], old["measured_on"], old["measured"])
    assert written["about"] == packaged["about"]
    runs, newer = tuned_table.read_sources(new["source"])
    assert runs[-1] == "benchmarks/results/tuning-log/autotune_h200_g.json" and len(newer) == 5
    # One winner a line, as the packaged file is written.
    assert tuned_table.render(written) == out.read_text()
    assert '    "bf16->bf16|kkn|m<=128|n=10240|k=8192|l=1": {"cluster_m": 2, "tile_m": 64, "tile_n": 160},\n' \
        in out.read_text()


def test_autotune_keys_of_both_formats_name_a_table_and_a_slot(tuned_table):
    bucket = "bf16->bf16|kkn|m<=256|n=6144|k=4096|l=1"
    assert tuned_table.split_key("NVIDIA H200|sm90|" + bucket) == ("sm90/132sm/4.9TBps", bucket, "NVIDIA H200")
    assert tuned_table.split_key("sm90/132sm/3.4TBps|" + bucket) == ("sm90/132sm/3.4TBps", bucket, None)
    with pytest.raises(ValueError, match="no GPU preset"):
        tuned_table.split_key("NVIDIA A100|sm80|" + bucket)
    key = "sm90/132sm/4.9TBps|" + bucket
    assert tuned_table.slot(key, {"m": 256}) == ("sm90/132sm/4.9TBps", "entries", bucket)
    assert tuned_table.slot(key, {}) == ("sm90/132sm/4.9TBps", "entries", bucket)  # older runs: the bound
    assert tuned_table.slot(key, {"m": 136}) == ("sm90/132sm/4.9TBps", "points", bucket.replace("m<=256", "m=136"))


def test_merging_runs_averages_relative_times_and_writes_winners_at_other_m_as_points(tuned_table):
    key = "sm90/132sm/4.9TBps|bf16->bf16|kkn|m<={m}|n=4096|k=4096|l=1"
    first = {key.format(m=128): {"config": {"tile_n": 64}, "m": 128, "ms": {"a": 0.015, "b": 0.016}},
             key.format(m=256): {"config": {"tile_n": 96, "swap_ab": True}, "m": 136, "ms": {"c": 0.05}}}
    second = {key.format(m=128): {"config": {"tile_n": 128}, "m": 128, "ms": {"a": 0.031, "b": 0.030}}}
    merged = tuned_table.merge([first, second])
    # a is 1.000 and 1.033 of each run's fastest, b 1.067 and 1.000: a, although the
    # second run, disturbed (everything twice as slow), picked b.
    assert merged[("sm90/132sm/4.9TBps", "entries", key.format(m=128).split("|", 1)[1])]["config"] == {"tile_n": 64}
    point = ("sm90/132sm/4.9TBps", "points", key.format(m=256).split("|", 1)[1].replace("m<=256", "m=136"))
    assert merged[point]["config"]["swap_ab"]  # a point serves the M it was timed at: kept
    # A swapped winner timed at the bound must hold it in its N tiles.
    narrow = {key.format(m=128): {"config": {"tile_n": 64, "swap_ab": True}, "ms": {"x": 1.0}}}
    assert tuned_table.merge([narrow]) == {}
    doc = tuned_table.build([first], [], "config='autotune' runs x.json", "today", {})
    (table,) = doc["tables"]
    assert set(table["entries"]) == {key.format(m=128).split("|", 1)[1]} and len(table["points"]) == 1
    # Tables of GPUs the runs did not measure are kept as they are.
    other = {"gpu": "sm90/132sm/3.4TBps", "measured_on": "NVIDIA H100 80GB HBM3", "source": "s", "measured": "m",
             "entries": {}}
    assert tuned_table.build([first], [], "config='autotune' runs x.json", None,
                             {"about": "a", "tables": [other]})["tables"][0] == other


# ------------------------------------------------------------ back to back, re-tuned


@pytest.fixture(scope="module")
def sustained():
    pytest.importorskip("torch")
    return importlib.import_module("benchmarks.maint.sustained")


def test_sustained_table_compares_back_to_back_calls_and_single_calls(sustained):
    def run(ms, mhz):
        return {"ms": ms, "calls": 10, "mhz": mhz, "watts": 690.0}

    report = {"name": "t", "command": "python -m benchmarks.maint.sustained --shapes 8x8x8", "date": "today",
              "environment": {"gpu": "NVIDIA H200", "torch": "2.11", "cutlass_dsl": "4.8.1"},
              "seconds": 1.0, "rounds": 2, "single": 10,
              "shapes": [{"shape": [8, 8, 8], "wsgemm_plan": "direct 128x256",
                          "sustained": {"torch.matmul": [run(2.0, 1450), run(2.2, 1460)],
                                        "wsgemm-w1": [run(2.5, 1250), run(2.3, 1270)]},
                          "single_ms": {"torch.matmul": 2.0, "wsgemm-w1": 1.6}}]}
    rows = sustained.summary(report["shapes"][0])
    assert rows["wsgemm-w1"]["mhz"] == 1260 and rows["wsgemm-w1"]["x_torch"] == pytest.approx(2.1 / 2.4)
    md = sustained.markdown(report)
    assert "| 8x8x8 | W.t() | `direct 128x256` | wsgemm-w1 | 2400 | 1260 | 690 | 0.875x | 1600 | 1.250x |" in md
    assert "wsgemm-w1 0.875x; wsgemm-w1, single 1.250x" in md


def test_sustained_takes_a_suites_large_problems_with_their_layouts(sustained):
    import argparse

    args = argparse.Namespace(suite=["llm", "square"], filter=None, min_gflop=500.0, shapes="")
    picked = sustained.problems(args)
    assert picked and all(p.flops >= 500e9 for p in picked)
    assert "square/8192^3" in {p.label for p in picked} and "square/1024^3" not in {p.label for p in picked}
    args.suite, args.shapes = None, "16384x10240x8192"
    (only,) = sustained.problems(args)
    assert (only.m, only.n, only.k, only.layout) == (16384, 10240, 8192, "b_weight_t")


def test_sustained_configs_are_launched_as_the_default_path_would_with_their_band_and_ring(sustained, monkeypatch):
    """``--configs`` text: the launch rules run on it (stream-K on a long grid), but
    the band width and the ring depth it names stay (then with the epilogue buffers
    that fit)."""
    import torch

    from wsgemm import GemmConfig
    from wsgemm.tuning import H200

    assert sustained.parse_config("128x256:2x2:w8") == GemmConfig(tile_m=128, tile_n=256, cluster_m=2, cluster_n=2,
                                                                   swizzle=8)
    along_n = sustained.parse_config("128x256:2x1:w8:n")
    assert along_n.raster == sustained.wsgemm.Raster.ALONG_N and along_n.swizzle == 8
    assert sustained.parse_config("64x128:2x1:s9:w2").stages == 9 and sustained.parse_config("192x96:4x1:x").swap_ab
    with pytest.raises(ValueError, match="neither a band width"):
        sustained.parse_config("128x256:2x1:x8")
    ran = []
    monkeypatch.setattr(sustained.wsgemm, "gemm", lambda a, b, config=None: ran.append(config))
    meta = lambda *shape: torch.empty(*shape, dtype=torch.bfloat16, device="meta")  # noqa: E731
    sustained.launched_as_given(sustained.parse_config("128x256:2x1"), H200)(meta(16384, 8192), meta(10240, 8192).t())
    assert ran[-1].swizzle == 1 and ran[-1].stream_k
    a, b = meta(1024, 4096), meta(1024, 4096).t()
    for text in ("64x128:2x1", "64x128:2x1:s9", "64x128:2x1:s6"):
        sustained.launched_as_given(sustained.parse_config(text), H200)(a, b)
    assert [(c.stages, c.epi_stages) for c in ran[-3:]] == [(7, 4), (9, 2), (6, 4)]
    assert list(sustained.implementations([1], ["128x256:2x1:w8"])) == ["torch.matmul", "wsgemm", "wsgemm-w1",
                                                                        "wsgemm 128x256:2x1:w8"]


def test_sustained_configs_that_swap_plan_on_the_kernels_problem(sustained, monkeypatch):
    import torch

    from wsgemm.tuning import H200

    planned = []
    monkeypatch.setattr(sustained.launch, "as_launched", lambda p, config, gpu: planned.append((p.m, p.n, p.k))
                        or config)
    monkeypatch.setattr(sustained.wsgemm, "gemm", lambda a, b, config=None: None)
    a = torch.empty(192, 8192, dtype=torch.bfloat16, device="meta")
    b = torch.empty(10240, 8192, dtype=torch.bfloat16, device="meta").t()
    sustained.launched_as_given(sustained.parse_config("192x96:4x1:x"), H200)(a, b)
    sustained.launched_as_given(sustained.parse_config("128x160:2x1"), H200)(a, b)
    assert planned == [(10240, 192, 8192), (192, 10240, 8192)]  # the weight's rows on the kernel's M when swapped


def _sustained_row(label, shape, b, runs: dict, single: dict | None):
    row = {"label": label, "shape": shape, "batch": 1, "b": b, "wsgemm_plan": "direct 128x224x64_c1x1",
           "sustained": {name: [{"ms": ms, "mhz": 1400.0, "watts": 690.0}] for name, ms in runs.items()}}
    if single is not None:
        row["single_ms"] = single
    return row


def test_retune_sustained_takes_a_config_only_where_it_wins_both_protocols():
    pytest.importorskip("torch")
    retune = importlib.import_module("benchmarks.maint.retune_sustained")
    wins = {"torch.matmul": 1.0, "wsgemm": 1.05, "wsgemm 128x256:2x1:w8": 1.02, "wsgemm 128x192:2x1:w8": 1.08}
    report = {"command": "python -m benchmarks.maint.sustained ...", "environment": {"gpu": "NVIDIA H200"}, "shapes": [
        _sustained_row("wins", [16384, 10240, 8192], "W.t()", wins,
                       {"torch.matmul": 1.0, "wsgemm": 1.01, "wsgemm 128x256:2x1:w8": 1.00,
                        "wsgemm 128x192:2x1:w8": 1.1}),
        _sustained_row("loses single calls", [16384, 8192, 8192], "W.t()", wins,
                       {"torch.matmul": 1.0, "wsgemm": 1.0, "wsgemm 128x256:2x1:w8": 1.01,
                        "wsgemm 128x192:2x1:w8": 1.1}),
        _sustained_row("within the noise", [16384, 28672, 4096], "W.t()",
                       {"wsgemm": 1.005, "wsgemm 128x256:2x1:w8": 1.0}, {"wsgemm": 1.0, "wsgemm 128x256:2x1:w8": 0.9}),
        _sustained_row("no single calls", [16384, 16384, 16384], "(K, N)", wins, None)]}
    entries = retune.entries_from([report], retune.MIN_GAIN, retune.SINGLE_TOLERANCE)
    (key,) = entries
    assert key == "sm90/132sm/4.9TBps|bf16->bf16|kkn|m<=16384|n=10240|k=8192|l=1"
    entry = entries[key]
    assert (entry["config"]["tile_n"], entry["config"]["cluster_m"], entry["config"]["swizzle"]) == (256, 2, 8)
    assert entry["timing"] == "sustained" and entry["m"] == 16384
    assert min(entry["ms"], key=entry["ms"].get) == "128x256:2x1:w8"  # the merge's score reads the winner here


def test_the_committed_sustained_retune_regenerates_and_ships_in_the_table(tuned_table):
    """``autotune_h200_r_sustained.json`` (older keys) follows from the committed
    back-to-back reports, and the packaged table holds its winners."""
    retune = importlib.import_module("benchmarks.maint.retune_sustained")
    reports = [retune.load_run(TUNING_LOG_RESULTS / f"{name}.json")
               for name in ("retune_m16384_b2b", "retune_m4096_b2b")]
    entries = retune.entries_from(reports, retune.MIN_GAIN, retune.SINGLE_TOLERANCE)
    committed = retune.load_run(TUNING_LOG_RESULTS / "autotune_h200_r_sustained.json")
    assert entries == {"|".join(tuned_table.split_key(key)[:2]): entry for key, entry in committed.items()}
    assert len(entries) == 6
    (table,) = json.loads(tuned_table.TARGET.read_text())["tables"]
    for key, entry in entries.items():
        gpu_key, bucket, _ = tuned_table.split_key(key)
        assert table["gpu"] == gpu_key and table["entries"][bucket] == tuned_table.non_default_fields(entry["config"])


# ------------------------------------------------------------------------ the tracer


@pytest.fixture(scope="module")
def timeline():
    pytest.importorskip("torch")
    return importlib.import_module("benchmarks.maint.kernel_timeline")


def test_timeline_summary_is_wrap_safe_and_per_cta(timeline):
    def cta(entry, ready, first, interval, done, stored, exit_):
        row = [0] * timeline.WORDS_PER_CTA
        row[0], row[1], row[3], row[4], row[5] = entry, ready, done, stored, exit_
        for i in range(timeline.K_BLOCKS_KEPT):
            row[timeline.FIRST_K_BLOCK_WORD + i] = (first + interval * i) & 0xFFFFFFFF
        return row

    near_wrap = 2**32 - 500  # %globaltimer_lo wraps every 4.3 s; the first CTA starts just before
    words = [cta(near_wrap, near_wrap + 300, near_wrap + 2500, 350, 1000, 1800, 2000),
             cta(near_wrap + 100, near_wrap + 380, near_wrap + 2700, 350, 1200, 2000, 2600)]
    summary = timeline.cta_timeline(words, k_blocks=64)
    assert summary["launch_skew_us"] == 0.1
    assert summary["first_k_block_us"] == pytest.approx(2.6)  # median of 2.5 and 2.7
    assert summary["k_block_interval_us"] == pytest.approx(0.35)
    assert summary["epilogue_us"] == pytest.approx(0.8)
    assert summary["span_us"] == pytest.approx((2600 + 500) / 1e3)


def test_timeline_summary_of_a_split_wave_separates_wait_add_and_publish(timeline):
    def cta(done, arrived, added, stored, exit_):
        row = [0] * timeline.WORDS_PER_CTA
        row[0], row[1], row[3], row[4], row[5], row[6], row[7] = 1000, 1300, done, stored, exit_, arrived, added
        for i in range(timeline.K_BLOCKS_KEPT):
            row[timeline.FIRST_K_BLOCK_WORD + i] = 3000 + 400 * i
        return row

    summary = timeline.cta_timeline([cta(30000, 32000, 33000, 33800, 34000), cta(29800, 0, 0, 0, 31300)], k_blocks=64)
    assert summary["fixup_wait_us"] == pytest.approx(2.0) and summary["fixup_add_us"] == pytest.approx(1.0)
    assert summary["publish_us"] == pytest.approx(1.5) and summary["epilogue_us"] == pytest.approx(3.8)


def test_timeline_spreads_of_the_ctas_that_share_an_operand_tile(timeline):
    """One wave of 64x128 tiles in 2x1 clusters over 192x256: 3 x 2 tiles, 2 x 2
    clusters walked along M, the last cluster row's second CTA past the edge."""
    from wsgemm import GemmConfig
    from wsgemm.grid import TileGrid

    grid = TileGrid.for_problem(192, 256, 1, GemmConfig(tile_m=64, tile_n=128, cluster_m=2))
    tiles = timeline.cta_tiles(grid, clusters=4)
    assert tiles == [(0, 0), (1, 0), (2, 0), None, (0, 1), (1, 1), (2, 1), None]
    assert timeline.cta_tiles(grid, clusters=2) == []  # two tiles per cluster: not one wave
    arrivals = [[10.0 * kb + r + 3 * c + (5 if c and kb >= 8 else 0) for kb in range(12)]
                for r, c in (tile or (0, 0) for tile in tiles)]
    assert timeline.sharer_spreads(arrivals, tiles) == {
        "a_sharers_spread_first_us": 3.0, "a_sharers_spread_us": 8.0,
        "b_sharers_spread_first_us": 2.0, "b_sharers_spread_us": 2.0}


def test_timeline_cases_parse_and_reports_say_how_each_run_was_set_up(timeline):
    (m, n, k), config = timeline.parse_case("512x4096x4096:128x128:2x1:6")
    assert (m, n, k) == (512, 4096, 4096)
    assert (config.tile_m, config.tile_n, config.cluster_m, config.cluster_n, config.stages) == (128, 128, 2, 1, 6)
    assert timeline.parse_case("320x2560x8192:128x128:1x1:auto:split2")[1].split_k == 2
    for case in timeline.DEFAULT_CASES:
        timeline.parse_case(case)
    assert timeline.protocol({}) == "L2 flushed (256 MiB write) before each"
    assert timeline.protocol({"protocol": "the last of 20 calls"}) == "the last of 20 calls"


@pytest.mark.slow
def test_trace_points_emit_code_only_in_the_tracing_build(timeline, tmp_path):
    """The shipped kernel's trace points are empty: no timer read in its PTX; the
    tracing subclass stores %globaltimer at every point."""
    from wsgemm import GemmConfig
    from wsgemm import config as cfg
    from wsgemm.compile import compile_spec

    spec = cfg.make_spec("sm90", "bf16", "bf16", "k", "k", "n", GemmConfig(tile_n=128, cluster_m=2, stages=6))
    assert "globaltimer" not in compile_spec(spec, keep_artifacts=True).ptx
    timeline.compile_traced(spec, dump_dir=str(tmp_path))
    (ptx,) = [p.read_text() for p in tmp_path.rglob("*.ptx")]
    assert ptx.count("%globaltimer_lo") >= 6  # entry, barriers, k-block, mainloop, tile stored, exit


# ------------------------------------------------------------------------ host overhead


@pytest.fixture(scope="module")
def overhead():
    pytest.importorskip("torch")
    return importlib.import_module("benchmarks.bench_overhead")


def test_host_overhead_loops_take_turns(overhead, monkeypatch):
    """After a warm-up, the implementations alternate loop by loop (a host disturbance
    then hits all of them), one synchronize per loop."""
    order, syncs, entered = [], [], []
    monkeypatch.setattr(overhead.torch.cuda, "synchronize", lambda: syncs.append(len(order)))

    @overhead.contextlib.contextmanager
    def inside_y():  # a per-loop context, as without_fast_path is
        entered.append(len(order))
        yield

    impls = {"x": lambda: order.append("x"), "y": (lambda: order.append("y"), inside_y)}
    result = overhead.per_call_us(impls, calls=3, repeats=2)
    assert order[100:] == ["x"] * 3 + ["y"] * 3 + ["x"] * 3 + ["y"] * 3  # after 50 warm-up calls each
    assert syncs == [100, 103, 106, 109, 112] and entered == [50, 103, 109]
    assert set(result) == {"x", "y"} and all(r["min_us"] <= r["median_us"] <= r["max_us"] for r in result.values())


def test_host_overhead_report_is_named_by_its_kind_and_lists_every_call(overhead, monkeypatch, tmp_path):
    monkeypatch.setattr(overhead, "environment", lambda: {"gpu": "NVIDIA H200", "torch": "2.11"})
    rows = {"1x6144x4096 (swap)": {"wsgemm.gemm(a, w.t())": {"median_us": 11.8, "min_us": 11.6, "max_us": 12.6}}}
    args = overhead.argparse.Namespace(calls=100, repeats=15, out=str(tmp_path))
    assert overhead.write_report(rows, args, "host_overhead_decode", "Host time per call (decode)",
                                 "python -m benchmarks.bench_overhead --decode --calls 100") == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["host_overhead_decode.json", "host_overhead_decode.md"]
    table = (tmp_path / "host_overhead_decode.md").read_text()
    assert "| 1x6144x4096 (swap) | `wsgemm.gemm(a, w.t())` | 11.80 | 11.60 | 12.60 |" in table
    assert "Regenerate: `python -m benchmarks.bench_overhead --decode --calls 100`" in table


def test_host_overhead_twins_of_older_host_paths(overhead, monkeypatch):
    """A fresh zeroed workspace per call (the operator's older way), restored after;
    the layer's older forward computes the layer."""
    from wsgemm import plans

    torch = overhead.torch
    kept = plans.split_k_workspace
    with overhead.fresh_workspaces():
        one = plans.split_k_workspace(torch.device("cpu"), 4, 100)
        two = plans.split_k_workspace(torch.device("cpu"), 4, 100)
        assert one[0] is not two[0] and not one[0].any() and one[1].numel() == 100
    assert plans.split_k_workspace is kept
    promises = []
    monkeypatch.setattr(overhead.wsgemm, "gemm", lambda a, b, read_before_wait="": promises.append(
        read_before_wait) or a @ b)
    ref = torch.nn.Linear(5, 6, dtype=torch.float64)
    twin = overhead.LinearTransposingInPython.from_linear(ref, read_weight_before_wait=True)
    x = torch.randn(2, 3, 5, dtype=torch.float64)
    with torch.no_grad():
        torch.testing.assert_close(twin(x), ref(x))
    assert promises == ["b"]


# ------------------------------------------------------------------ profiles, baseline


SASS_CSV = '''"Kernel Name","kernel_a",
"Address","Source","Warp Stall Sampling (All Samples)","Instructions Executed","stall_wait","stall_wait (Not Issued)","stall_barrier"
"0x1","      R2UR UR4, R16","5","100","5","4","0"
"0x2","      HGMMA.64x192x16.F32.BF16 R24, gdesc[UR4].tnspB, R24","2","50","0","0","2"
"0x3","@!P0  R2UR UR5, R17","1","100","1","1","0"
"Kernel Name","kernel_b",
"Address","Source","Warp Stall Sampling (All Samples)","Instructions Executed","stall_wait","stall_wait (Not Issued)","stall_barrier"
"0x1","      HGMMA.64x192x16.F32.BF16 R24, gdesc[UR4].tnspB, R24","7","50","0","0","7"
'''
DETAILS = """  kernel_a (2, 1, 66)x(384, 1, 1), Context 1
    Section: GPU Speed Of Light Throughput
    Elapsed Cycles                cycle       99,376
    Memory Throughput                 %        69.44
    Duration                         us        57.70
    Memory Throughput                          Tbyte/s         2.06
  kernel_b (2, 1, 66)x(384, 1, 1), Context 1
    Duration                         us        53.57
"""
RAW_CSV = '''"Kernel Name","launch__grid_size","gpu__time_duration.sum","dram__bytes.sum.per_second",\
"lts__t_requests_srcunit_tex_op_read.sum","other"
"","","ms","Tbyte/s","request",""
"kernel_a","132","3.968160","1.709955","966841","1"
"nvjet_b","132","3.877984","0.864009","663851","2"
'''


def test_the_ncu_summary_counts_opcodes_stalls_and_raw_traffic(tmp_path):
    summary = importlib.import_module("benchmarks.maint.ncu_summary")
    (tmp_path / "sass.csv").write_text(SASS_CSV)
    (tmp_path / "details.txt").write_text(DETAILS)
    out = tmp_path / "summary.json"
    summary.main([str(tmp_path / "sass.csv"), "--details", str(tmp_path / "details.txt"), "--out", str(out)])
    a, b = json.loads(out.read_text())["kernels"]
    assert a["kernel"] == "kernel_a" and a["instructions_executed"] == 250 and a["stall_samples"] == 8
    assert a["top_opcodes"] == {"R2UR": 200, "HGMMA": 50}  # predicated instructions count by opcode
    assert a["stall_reasons"] == {"wait": 6, "barrier": 2}  # "(Not Issued)" columns left out
    assert a["speed_of_light"] == {"elapsed_cycles": "99,376 cycle", "memory_throughput": "69.44 %",
                                   "duration": "57.70 us"}
    assert b["top_opcodes"] == {"HGMMA": 50} and b["speed_of_light"] == {"duration": "53.57 us"}
    (tmp_path / "raw.csv").write_text(RAW_CSV)
    summary.main(["--raw", str(tmp_path / "raw.csv"), "--labels", "ours", "--out", str(out)])
    a, b = json.loads(out.read_text())["kernels"]
    assert a["label"] == "ours" and a["metrics"]["dram__bytes.sum.per_second"] == "1.709955 Tbyte/s"
    assert "other" not in a["metrics"] and b["label"] is None
    with pytest.raises(SystemExit):  # the SASS page or --raw, not both
        summary.main([str(tmp_path / "raw.csv"), "--raw", str(tmp_path / "raw.csv")])


def test_a_baseline_exports_another_commits_package_beside_this_one(tmp_path):
    """wsgemm at a commit, importable as ``wsgemm_base`` next to the working tree's
    ``wsgemm``, with the commit recorded for the suite."""
    import os

    baseline = importlib.import_module("benchmarks.maint.baseline")
    target = baseline.export("HEAD", tmp_path)
    assert target == tmp_path / "wsgemm_base"
    assert (target / "kernels" / "sm90.py").is_file() and not (target / "wsgemm").exists()
    rev, sha = (target / "BASELINE_REV").read_text().split()
    assert rev == "HEAD" and len(sha) == 40
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    code = ("import wsgemm, wsgemm_base; print(wsgemm_base.__file__); "
            "print(wsgemm_base.GemmConfig is not wsgemm.GemmConfig)")
    out = subprocess.run([sys.executable, "-c", code], env=env, check=True, capture_output=True, text=True).stdout
    assert out.split() == [str(target / "__init__.py"), "True"]
    with pytest.raises(subprocess.CalledProcessError):
        baseline.export("no-such-commit", tmp_path)
    older = b'_OP = "wsgemm::gemm"\n@torch.library.custom_op(_OP, mutates_args=())'
    assert baseline.renamed(Path("ops.py"), older).startswith(b'_OP = "wsgemm_base::gemm"')
    assert baseline.renamed(Path("api.py"), older) == older


# ------------------------------------------------------------------------------ GPU


@pytest.mark.gpu
def test_the_quick_suite_runs_and_reports_on_the_gpu(tmp_path):
    """The user's first command, end to end: every problem checked and timed, the
    report, its table and its plot written."""
    run = subprocess.run([sys.executable, "-m", "benchmarks.suite", "--suite", "quick", "--impls",
                          "wsgemm,torch.matmul", "--reps", "3", "--warmup", "1", "--out", str(tmp_path)],
                         cwd=ROOT, capture_output=True, text=True, timeout=1800)
    assert run.returncode == 0, run.stderr[-3000:]
    report = json.loads((tmp_path / "suite_quick.json").read_text())
    assert len(report["rows"]) == len(shapes.SUITES["quick"])
    assert all(row["results"]["wsgemm"]["status"] == "ok" for row in report["rows"])
    assert (tmp_path / "suite_quick.md").exists()
