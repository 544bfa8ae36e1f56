"""CPU tests of the benchmark suite (benchmarks/): problem suites, rendering of a
synthetic result, and the optional Triton import. Nothing here needs a GPU."""

from __future__ import annotations

import importlib.util
import json
import math
import re
import sys
from pathlib import Path

import pytest

BENCH_DIR = Path(__file__).resolve().parents[1] / "benchmarks"


def load(module: str, as_name: str | None = None):
    """Import benchmarks/<module>.py under a private name (benchmarks/ is no package)."""
    spec = importlib.util.spec_from_file_location(as_name or f"_bench_{module}", BENCH_DIR / f"{module}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod


shapes = load("shapes")
plot = load("plot")


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


def test_llm_suite_is_llama3_projections_with_weights_as_w_t():
    llm = shapes.SUITES["llm"]
    assert len(llm) <= 60
    assert all(p.layout == "b_weight_t" and p.batch == 1 for p in llm)
    assert {p.m for p in llm} == set(shapes.LLM_TOKENS)
    nk = {(p.n, p.k) for p in llm}
    # 8B: QKV (32 + 2 * 8) * 128, O, fused gate/up 2 * 14336, down.
    assert {(6144, 4096), (4096, 4096), (28672, 4096), (4096, 14336)} <= nk
    # 70B: QKV (64 + 2 * 8) * 128, O, fused gate/up 2 * 28672, down.
    assert {(10240, 8192), (8192, 8192), (57344, 8192), (8192, 28672)} <= nk
    assert len(nk) == 8


def test_decode_shortk_square_batched_ranges():
    decode = shapes.SUITES["decode"]
    assert all(1 <= p.m <= 128 and p.layout == "b_weight_t" for p in decode)
    llm_weights = {(p.n, p.k) for p in shapes.SUITES["llm"]}
    assert {(p.n, p.k) for p in decode} == llm_weights
    prefill = shapes.SUITES["prefill"]
    llm_tokens = set(shapes.LLM_TOKENS)
    # Off the llm suite's token grid, between its 128 and 2048, on the same weights.
    assert all(128 < p.m < 2048 and p.m not in llm_tokens and p.layout == "b_weight_t" for p in prefill)
    assert {(p.n, p.k) for p in prefill} == llm_weights
    # Qwen2.5 7B and 14B: QKV (28 + 2 * 4) * 128 and (40 + 2 * 8) * 128, off Llama's weights.
    qwen_weights = {(p.n, p.k) for p in shapes.SUITES["qwen"]}
    assert {(4608, 3584), (37888, 3584), (3584, 18944), (7168, 5120), (5120, 13824)} <= qwen_weights
    assert len(qwen_weights) == 8 and not qwen_weights & llm_weights
    assert all(128 <= p.k <= 1024 and min(p.m, p.n) >= 8192 for p in shapes.SUITES["shortk"])
    assert [p.m for p in shapes.SUITES["square"]] == [1024, 2048, 4096, 8192, 16384]
    assert all(p.m == p.n == p.k for p in shapes.SUITES["square"])
    assert all(p.batch > 1 for p in shapes.SUITES["batched"])
    assert shapes.SUITES["batched"][0].shape_text == "8x2048x2048x2048"


def test_select_concatenates_suites_and_filters_labels():
    both = shapes.select(["square", "shortk"])
    assert len(both) == len(shapes.SUITES["square"]) + len(shapes.SUITES["shortk"])
    downs = shapes.select(["llm"], "70B DOWN")
    assert downs and all("llama3-70b down" in p.label for p in downs)
    # A regular expression: the prefill rows of the LLM suite and two squares.
    picked = shapes.select(["llm", "square"], r"M=(512|16384)$|square/(4096|8192)\^")
    assert {p.label.split(" M=")[-1] for p in picked if p.label.startswith("llm/")} == {"512", "16384"}
    assert sorted(p.label for p in picked if p.label.startswith("square/")) == ["square/4096^3", "square/8192^3"]
    with pytest.raises(KeyError, match="nope"):
        shapes.select(["nope"])


# ----------------------------------------------------------------------- rendering


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
        "name": "synthetic", "command": "python benchmarks/suite.py --suite quick", "suites": ["quick"],
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


def test_summary_geometric_mean_min_and_slow_count():
    s = plot.summary(synthetic_report())
    assert s["shapes"] == 3
    assert s["geomean"] == pytest.approx(1.0)
    assert s["min"] == pytest.approx(0.5) and s["min_label"] == "t/slow"
    assert s["below_slow_ratio"] == 1
    # A geometric, not arithmetic, mean: 2x and 0.5x cancel, 1x leaves it at 1.
    assert math.prod([2.0, 0.5, 1.0]) ** (1 / 3) == pytest.approx(s["geomean"])


def test_ratio_compares_like_with_like():
    report = synthetic_report()
    graph_row = report["rows"][2]
    assert plot.ratio(graph_row, "wsgemm") == pytest.approx(1.0)  # graph 0.01 vs graph 0.01
    assert plot.ratio(graph_row, "triton") == pytest.approx(0.04 / 0.02)  # events vs events
    assert plot.ratio(report["rows"][0], "triton") is None  # wrong: not timed


def test_markdown_table_summary_and_failures():
    md = plot.render_markdown(synthetic_report())
    assert "| wsgemm | torch.matmul | triton |" in md and "| quack |" not in md
    assert "geometric mean **1.000x**, min 0.500x (t/slow), 1 below 0.9x" in md
    assert "| t/fast | 1024x1024x1024 | row-major | 2000.0 | 1000.0 | WRONG (3.0e-01) | 2.000x | 250% | 202% |" in md
    assert "(events)" in md and "graph x20" in md
    assert "t/slow / triton: raised, not timed: CompilationError: boom" in md
    assert "t/fast / triton: wrong result, not timed: relative error 3.00e-01" in md
    assert "t/graph / triton: CUDA-graph capture failed, events timing reported: RuntimeError: capture" in md
    assert "not installed (No module named 'quack')" in md
    assert "quick/not reached" in md
    assert "L2 flushed (512 MiB write) before every run" in md  # a report from before session 14


def test_markdown_names_the_flush_the_run_used():
    report = synthetic_report()
    report["timing"]["flush"] = "L2 flushed (100 MiB read, then a 200k-cycle spin)"
    assert "L2 flushed (100 MiB read, then a 200k-cycle spin) before every run" in plot.render_markdown(report)


def test_markdown_lists_the_configuration_each_wsgemm_row_ran():
    report = synthetic_report()
    assert "## Configurations" not in plot.render_markdown(report)  # older runs recorded none
    report["rows"][0]["results"]["wsgemm"]["config"] = "swap 128x16x64_c1x1_sauto_e2_along_m_w1_before_copy_split2"
    md = plot.render_markdown(report)
    assert "## Configurations" in md and "| label | wsgemm |" in md
    assert "| t/fast | `swap 128x16x64_c1x1_sauto_e2_along_m_w1_before_copy_split2` |" in md
    assert "| t/slow | `-` |" in md


def test_markdown_of_a_run_cut_short():
    report = synthetic_report()
    del report["gpu_after"], report["elapsed_s"]
    assert plot.CUT_SHORT in plot.render_markdown(report)


def test_plot_and_rerender_from_json(tmp_path):
    pytest.importorskip("matplotlib")
    report = synthetic_report(extra_rows=60)
    json_path = tmp_path / "synthetic.json"
    json_path.write_text(json.dumps(report))
    assert plot.main([str(json_path)]) == 0
    png = tmp_path / "synthetic.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert png.stat().st_size < 100_000
    assert (tmp_path / "synthetic.md").read_text() == plot.render_markdown(report)


def test_a_gzipped_result_renders_beside_itself(tmp_path):
    """Older ablations are kept as .json.gz; the table lands in <name>.md as for .json."""
    import gzip

    pytest.importorskip("matplotlib")
    report = synthetic_report()
    json_path = tmp_path / "ablation.json.gz"
    json_path.write_bytes(gzip.compress(json.dumps(report).encode()))
    assert plot.read_report(json_path) == report
    assert plot.main([str(json_path)]) == 0
    assert (tmp_path / "ablation.md").read_text() == plot.render_markdown(report)
    assert (tmp_path / "ablation.png").exists()


# -------------------------------------------------------------------------- triton


def test_triton_module_imports_without_triton(monkeypatch):
    # None in sys.modules makes `import triton` raise ImportError, as if not installed.
    monkeypatch.setitem(sys.modules, "triton", None)
    monkeypatch.setitem(sys.modules, "triton.language", None)
    tm = load("triton_matmul", "_bench_triton_matmul_without_triton")
    assert tm.triton is None
    assert tm.available() is False
    with pytest.raises(RuntimeError, match="Triton is not installed"):
        tm.matmul(None, None)


# --------------------------------------------------------------------------- suite


@pytest.fixture
def suite(monkeypatch):
    pytest.importorskip("torch")
    monkeypatch.syspath_prepend(str(BENCH_DIR))  # suite.py imports its siblings by name
    return load("suite")


def test_datasheet_peak_by_gpu_name(suite):
    assert suite.datasheet_peak("NVIDIA H200") == ("H200 SXM", 989.4)
    assert suite.datasheet_peak("NVIDIA H100 80GB HBM3") == ("H100 SXM", 989.4)
    assert suite.datasheet_peak("NVIDIA H100 PCIe") == (None, None)
    assert suite.datasheet_peak("NVIDIA H200 NVL") == (None, None)
    assert suite.datasheet_peak("NVIDIA A100-SXM4-80GB") == (None, None)


def test_an_output_is_correct_only_below_its_dtypes_tolerance(suite):
    """Every script's check: a NaN error (a NaN in the output) is wrong, not timed."""
    assert suite.within_tolerance(0.004) and suite.within_tolerance(0.004, "bf16")
    assert not suite.within_tolerance(0.004, "fp16")  # fp16 keeps 3 more mantissa bits
    assert not suite.within_tolerance(0.01) and not suite.within_tolerance(math.nan)
    assert not suite.within_tolerance(math.inf, "fp16")


def test_arguments(suite):
    args = suite.parse_args(["--suite", "llm", "--suite", "decode"])
    assert args.name == "suite_llm_decode" and args.reps == 30 and args.graph == "auto"
    assert suite.parse_args([]).suite == ["quick"]
    with pytest.raises(SystemExit):
        suite.parse_args(["--impls", "wsgemm,cublas"])
    # Ablations run only when named.
    assert "wsgemm-nopdl" not in suite.parse_args([]).impls
    assert suite.parse_args(["--impls", "wsgemm,wsgemm-nopdl,wsgemm-pdl"]).impls.count("pdl") == 2
    assert suite.parse_args(["--impls", "wsgemm,wsgemm-streamk,wsgemm-nostreamk"]).impls.count("streamk") == 2
    assert "wsgemm-epi4" in suite.parse_args(["--impls", "wsgemm,wsgemm-epi4"]).impls


def test_ablations_use_the_default_config_with_one_change(suite, monkeypatch):
    import torch

    from wsgemm import GemmConfig

    chosen = GemmConfig(tile_m=64, tile_n=64, stages=13, dependent_launch=True)
    plans, calls = [], []
    monkeypatch.setattr(suite.wsgemm.api, "make_plan", lambda *args: plans.append(args) or type(
        "Plan", (), {"spec": type("Spec", (), {"config": chosen})(), "mode": "swap"})())
    monkeypatch.setattr(suite.wsgemm, "gemm", lambda a, b, config: calls.append(config))
    gemm = suite.default_config_with(dependent_launch=False)
    a, b = torch.empty(2, 8), torch.empty(8, 4)
    gemm(a, b)
    gemm(a, b)
    assert len(plans) == 1  # planned once per shape and layout
    assert calls == [GemmConfig(tile_m=64, tile_n=64, stages=13, swap_ab=True, dependent_launch=False)] * 2
    # Stream-K forced on replaces a split with the streamed tail.
    chosen = GemmConfig(tile_m=128, tile_n=16, split_k=4)
    calls.clear()
    suite.default_config_with(split_k=1, stream_k=True)(a, b)
    assert calls == [GemmConfig(tile_m=128, tile_n=16, stream_k=True, swap_ab=True)]
    # Four epilogue buffers with as many ring stages as then fit.
    chosen = GemmConfig(tile_m=128, tile_n=192, stages=5)
    calls.clear()
    suite.default_config_with(epi_stages=4, stages=None)(a, b)
    assert calls == [GemmConfig(tile_m=128, tile_n=192, epi_stages=4, swap_ab=True)]
    # The default as planned with a policy constant changed, then restored.
    seen = []
    monkeypatch.setattr(suite.wsgemm.api, "make_plan", lambda *args: seen.append(
        suite.wsgemm.heuristics.PINGPONG_MAX_K_BLOCKS) or type(
        "Plan", (), {"spec": type("Spec", (), {"config": chosen})(), "mode": "direct"})())
    suite.default_config_with(policy={"PINGPONG_MAX_K_BLOCKS": 0})(a, b)
    assert seen == [0] and suite.wsgemm.heuristics.PINGPONG_MAX_K_BLOCKS == 24


# ------------------------------------------------------------------- config sweeps


def load_torch_script(monkeypatch, module: str):
    """A benchmark script that imports torch and its sibling scripts."""
    pytest.importorskip("torch")
    monkeypatch.syspath_prepend(str(BENCH_DIR))
    return load(module)


@pytest.fixture
def sweep(monkeypatch):
    return load_torch_script(monkeypatch, "sweep_configs")


def test_sweep_grid_names_every_combination(sweep):
    configs = sweep.grid("64x96,128x128", "1x1,2x1", "1,2", "auto,12", "0,1")
    assert len(configs) == 2 * 2 * 2 * 2 * 2
    c = configs["swap 64x96 c2x1 split2 s12"]
    assert (c.tile_m, c.tile_n, c.cluster_m, c.split_k, c.stages, c.swap_ab) == (64, 96, 2, 2, 12, True)
    assert configs["128x128 c1x1"].stages is None and not configs["128x128 c1x1"].swap_ab
    buffers = sweep.grid("128x256", "2x1", "1", epi_stages="2,4")
    assert sorted(buffers) == ["128x256 c2x1", "128x256 c2x1 e4"] and buffers["128x256 c2x1 e4"].epi_stages == 4


def test_sweep_keeps_microseconds_fastest_first(sweep):
    result = {"shape": [64, 4096, 4096], "b": "W.t()", "cublas_kernels": ["nvjet_sm90_tst_64x32"],
              "default_plan": "swap 64x64x64_c1x1_s13_e4_along_m_w1_before_copy_pdl",
              "skipped": {"64x64 c1x1 s16": "does not fit"},
              "rows": {"torch.matmul": {"median_ms": 0.0191, "p10_ms": 0.0186, "p90_ms": 0.0211},
                       "swap 64x64 c1x1": {"median_ms": 0.0185, "p10_ms": 0.0183, "p90_ms": 0.0211}}}
    kept = sweep.compact(result)
    assert list(kept["us"]) == ["swap 64x64 c1x1", "torch.matmul"]
    assert kept["us"]["torch.matmul"] == [19.1, 18.6, 21.1] and kept["skipped"] == ["64x64 c1x1 s16"]
    assert kept["default_plan"].startswith("swap 64x64x64")


def test_sweep_keeps_graph_times_when_it_took_them(sweep):
    rows = {"torch.matmul": {"median_ms": 0.0081, "p10_ms": 0.008, "p90_ms": 0.009, "graph_ms": 0.00512},
            "model#1 64x64": {"median_ms": 0.0079, "p10_ms": 0.0078, "p90_ms": 0.0085, "graph_ms": 0.00446}}
    kept = sweep.compact({"shape": [384, 1024, 1024], "b": "W.t()", "cublas_kernels": [], "default_plan": "",
                          "skipped": {}, "rows": rows})
    assert kept["graph_us"] == {"model#1 64x64": 4.46, "torch.matmul": 5.12}
    del rows["torch.matmul"]["graph_ms"], rows["model#1 64x64"]["graph_ms"]
    assert "graph_us" not in sweep.compact({**kept, "skipped": {}, "rows": rows})


def test_sweep_times_a_wrong_output_only_when_asked_and_lists_it(sweep, monkeypatch):
    """An ablation (a --base export that skips work on purpose) fails the check: it is
    left out unless --time-wrong, and then listed as wrong in the JSON."""
    timed = []
    monkeypatch.setattr(sweep, "time_interleaved",
                        lambda calls, reps, flush: timed.append(sorted(calls)) or {label: [0.01] * reps
                                                                                    for label in calls})
    monkeypatch.setattr(sweep, "cublas_kernels", lambda fn: [])
    monkeypatch.setattr(sweep, "wsgemm_config", lambda a, b, config: "")
    monkeypatch.setattr(sweep.torch, "randn", lambda *shape, device=None: sweep.torch.rand(*shape) + 0.5)
    candidates = {"right": lambda a, b: a @ b, "ablated": lambda a, b: 0.5 * (a @ b)}
    for time_wrong, expected in ((False, ["right", "torch.matmul"]), (True, ["ablated", "right", "torch.matmul"])):
        result = sweep.sweep_shape(4, 8, 16, sweep.torch.float32, candidates, 3, None, True, time_wrong=time_wrong)
        assert timed[-1] == expected
        assert sweep.compact(result).get("wrong", []) == (["ablated"] if time_wrong else [])


def test_sweep_model_candidates_are_launched_as_the_default_path_would(sweep):
    """The model's best configs and their other cluster shape, each once, as
    ``heuristics.as_launched`` turns them (here: dependent launch for 64-row tiles,
    no 2x1 clusters over three 128-row tile rows)."""
    from wsgemm import heuristics

    candidates = sweep.model_candidates(384, 1024, 1024, 8, True, 132, "bf16")
    ranked = [c for _, c in heuristics.ranked_sm90_configs(384, 1024, 1024, 1, 132, can_swap=True)[:8]]
    first = heuristics.as_launched("sm90", ranked[0], 384, 1024, 1024, 1, 132, "bf16", "bf16")
    assert next(iter(candidates.values())) == first and next(iter(candidates)).startswith("model#1 ")
    assert len(set(candidates.values())) == len(candidates)
    assert any(label.startswith("model#1 twin") for label in candidates)
    assert all(c.cluster_m == 1 for c in candidates.values() if c.tile_m == 128)  # three tile rows


def test_sweep_base_runs_a_config_by_its_non_default_fields(sweep, monkeypatch):
    import sys
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


def test_sweep_default_variants_change_clusters_or_ring_depth(sweep, monkeypatch):
    monkeypatch.setattr(sweep, "default_config_with", lambda **changes: changes)
    assert sweep.default_variants("1x1,1x2", "4,6") == {
        "default c1x1": {"cluster_m": 1, "cluster_n": 1}, "default c1x2": {"cluster_m": 1, "cluster_n": 2},
        "default s4": {"stages": 4}, "default s6": {"stages": 6}}
    assert sweep.default_variants("", "") == {}


def test_sweep_policy_settings_name_a_heuristics_constant_and_a_literal(sweep):
    assert sweep.policy_setting("SOLO_TILE_MIN_FILL=0.7", None) == ("SOLO_TILE_MIN_FILL", 0.7)
    assert sweep.policy_setting("PADDED_CLUSTER_MAX_ROWS=0", None) == ("PADDED_CLUSTER_MAX_ROWS", 0)

    def error(message):
        raise SystemExit(message)

    with pytest.raises(SystemExit, match="no constant 'NOT_A_KNOB'"):
        sweep.policy_setting("NOT_A_KNOB=1", error)
    with pytest.raises(SystemExit, match="not a Python literal"):
        sweep.policy_setting("SOLO_TILE_MIN_FILL=most", error)


def test_tune_autotunes_every_problem_and_keeps_the_autotune_file(monkeypatch, tmp_path, capsys):
    pytest.importorskip("torch")
    monkeypatch.syspath_prepend(str(BENCH_DIR))
    tune = load("tune")
    import types

    import wsgemm

    tuned = []
    cache = tmp_path / "autotune.json"
    cache.write_text('{"bucket": {"config": {}, "ms": {"a": 0.01}}}\n')
    monkeypatch.setattr(tune, "make_operands", lambda problem, dtype: (problem, None))
    monkeypatch.setattr(wsgemm, "gemm", lambda a, b, config=None: tuned.append((a.label, config)))
    plan = types.SimpleNamespace(spec=types.SimpleNamespace(config=wsgemm.GemmConfig()))
    monkeypatch.setattr(wsgemm.api, "make_plan", lambda *args: plan)
    monkeypatch.setattr(wsgemm.autotune, "cache_path", lambda: cache)
    saved = tmp_path / "runs" / "run.json"
    assert tune.main(["--suite", "decode", "--filter", "8b o", "--save", str(saved)]) == 0
    labels = [p.label for p in shapes.select(["decode"], "8b o")]
    assert [label for label, _ in tuned] == labels and {config for _, config in tuned} == {"autotune"}
    assert saved.read_text() == cache.read_text()
    assert f"[{len(labels)}/{len(labels)}]" in capsys.readouterr().out


# ----------------------------------------------------------------------------- kernel timeline

@pytest.fixture
def timeline(monkeypatch):
    return load_torch_script(monkeypatch, "kernel_timeline")


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
    """One wave split in two: a finisher stamps its contributors' arrival and the
    added partial sums, then stores; a contributor stores no tile and exits after
    publishing."""
    def cta(done, arrived, added, stored, exit_):
        row = [0] * timeline.WORDS_PER_CTA
        row[0], row[1], row[3], row[4], row[5], row[6], row[7] = 1000, 1300, done, stored, exit_, arrived, added
        for i in range(timeline.K_BLOCKS_KEPT):
            row[timeline.FIRST_K_BLOCK_WORD + i] = 3000 + 400 * i
        return row

    finisher = cta(30000, 32000, 33000, 33800, 34000)
    contributor = cta(29800, 0, 0, 0, 31300)
    summary = timeline.cta_timeline([finisher, contributor], k_blocks=64)
    assert summary["fixup_wait_us"] == pytest.approx(2.0)
    assert summary["fixup_add_us"] == pytest.approx(1.0)
    assert summary["publish_us"] == pytest.approx(1.5)
    assert summary["epilogue_us"] == pytest.approx(3.8)  # the finisher's: wait, add and store


def test_timeline_spreads_of_the_ctas_that_share_an_operand_tile(timeline):
    """One wave of 64x128 tiles in 2x1 clusters over 192x256: 3 x 2 tiles, 2 x 2
    clusters walked along M, the last cluster row's second CTA past the edge. A tile
    row's CTAs share an A tile, a column's a B tile; the spread is the latest minus
    the earliest landing of a k-block among them."""
    from wsgemm import GemmConfig
    from wsgemm.kernels.common.scheduler import TileGrid

    config = GemmConfig(tile_m=64, tile_n=128, cluster_m=2)
    grid = TileGrid.for_problem(192, 256, 1, config)
    tiles = timeline.cta_tiles(grid, clusters=4)
    assert tiles == [(0, 0), (1, 0), (2, 0), None, (0, 1), (1, 1), (2, 1), None]
    assert timeline.cta_tiles(grid, clusters=2) == []  # two tiles per cluster: not one wave
    # Tile row r, column c lands k-block kb at 10 kb + r + 3 c us (+ 5 us from the 9th
    # k-block on in column 1): A sharers 3 us apart at first, then 8; B sharers 2 us.
    # A CTA past the edge reads nothing; its stamps (here as tile (0, 0)'s) are ignored.
    arrivals = [[10.0 * kb + r + 3 * c + (5 if c and kb >= 8 else 0) for kb in range(12)]
                for r, c in (tile or (0, 0) for tile in tiles)]
    spreads = timeline.sharer_spreads(arrivals, tiles)
    assert spreads == {"a_sharers_spread_first_us": 3.0, "a_sharers_spread_us": 8.0,
                       "b_sharers_spread_first_us": 2.0, "b_sharers_spread_us": 2.0}


def test_timeline_cases_parse(timeline):
    (m, n, k), config = timeline.parse_case("512x4096x4096:128x128:2x1:6")
    assert (m, n, k) == (512, 4096, 4096)
    assert (config.tile_m, config.tile_n, config.cluster_m, config.cluster_n, config.stages) == (128, 128, 2, 1, 6)
    assert timeline.parse_case("8192x8192x8192:128x256:1x2:auto")[1].stages is None
    assert timeline.parse_case("320x2560x8192:128x128:1x1:auto:split2")[1].split_k == 2
    for case in timeline.DEFAULT_CASES:
        timeline.parse_case(case)


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


def test_the_traced_fix_up_stamp_waits_for_the_sums(timeline, tmp_path):
    """A warp waits for a load only where its value is used: the stamp after the
    finisher's adds first stores the last partial sum (which waits for every load
    before it) and fences, so the timer is read after the sums arrived. The shipped
    split-K kernel's PTX has none of it."""
    from wsgemm import GemmConfig
    from wsgemm import config as cfg
    from wsgemm.compile import compile_spec

    spec = cfg.make_spec("sm90", "bf16", "bf16", "k", "k", "n", GemmConfig(tile_m=64, tile_n=16, split_k=8))
    assert "globaltimer" not in compile_spec(spec, keep_artifacts=True).ptx
    timeline.compile_traced(spec, dump_dir=str(tmp_path))
    (ptx,) = [p.read_text() for p in tmp_path.rglob("*.ptx")]
    fix_up = ptx[ptx.rindex("ld.acquire.gpu.global"):]
    last_add = fix_up.rindex("add.f32", 0, fix_up.index("fence.acq_rel.cta"))
    stamp = fix_up[last_add:]
    assert re.search(r"cvt\.rzi\.s32\.f32[^;]*;\s*st\.global\.b32[^;]*;\s*fence\.acq_rel\.cta;\s*"
                     r"mov\.u32\s+%r\d+, %globaltimer_lo;", stamp), "the stamp does not wait for the last sum"


def test_timeline_reports_say_how_each_run_was_set_up(timeline):
    assert timeline.protocol({}) == "L2 flushed (256 MiB write) before each"
    assert timeline.protocol({"flush": "L2 flushed (120 MiB read)"}) == "L2 flushed (120 MiB read) before each"
    assert timeline.protocol({"protocol": "the last of 20 calls"}) == "the last of 20 calls"
    order = []
    timeline.after_each(lambda: order.append("flush"), lambda: order.append("call"), 2)()
    assert order == ["flush", "call", "flush", "call"]


def test_back_to_back_kernel_stats_take_medians_of_durations_and_gaps(monkeypatch):
    """back_to_back_kernels.kernel_stats: spans in any order; a gap is the next
    kernel's start minus this one's end."""
    b2b = load_torch_script(monkeypatch, "back_to_back_kernels")
    stats = b2b.kernel_stats([(20.0, 27.0), (0.0, 6.0), (6.5, 13.5), (14.0, 22.0)])
    assert stats == {"kernels": 4, "median_us": 7.0, "median_gap_us": 0.5}
    assert b2b.kernel_stats([(0.0, 3.0)])["median_gap_us"] == 0.0


def test_host_overhead_loops_take_turns(monkeypatch):
    """bench_overhead.per_call_us: after a warm-up, the implementations alternate loop
    by loop (a host disturbance then hits all of them), one synchronize per loop."""
    overhead = load_torch_script(monkeypatch, "bench_overhead")
    order, syncs = [], []
    monkeypatch.setattr(overhead.torch.cuda, "synchronize", lambda: syncs.append(len(order)))
    entered = []

    @overhead.contextlib.contextmanager
    def inside_y():  # a per-loop context, as without_fast_path is
        entered.append(len(order))
        yield

    impls = {"x": lambda: order.append("x"), "y": (lambda: order.append("y"), inside_y)}
    result = overhead.per_call_us(impls, calls=3, repeats=2)
    timed = order[100:]  # 50 warm-up calls each
    assert timed == ["x"] * 3 + ["y"] * 3 + ["x"] * 3 + ["y"] * 3
    assert syncs == [100, 103, 106, 109, 112]
    assert entered == [50, 103, 109]  # the warm-up and each timed loop of y, not each call
    assert set(result) == {"x", "y"} and all(r["min_us"] <= r["median_us"] <= r["max_us"] for r in result.values())



def test_host_overhead_report_is_named_by_its_kind_and_lists_every_call(monkeypatch, tmp_path):
    overhead = load_torch_script(monkeypatch, "bench_overhead")
    monkeypatch.setattr(overhead, "environment", lambda: {"gpu": "NVIDIA H200", "torch": "2.11"})
    rows = {"1x6144x4096 (swap)": {"torch.matmul(a, w.t())": {"median_us": 13.3, "min_us": 12.8, "max_us": 14.8},
                                   "wsgemm.gemm(a, w.t())": {"median_us": 11.8, "min_us": 11.6, "max_us": 12.6}}}
    args = overhead.argparse.Namespace(calls=100, repeats=15, out=str(tmp_path))
    assert overhead.write_report(rows, args, "host_overhead_decode", "Host time per call (decode)",
                                 "python benchmarks/bench_overhead.py --decode --calls 100") == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["host_overhead_decode.json.gz", "host_overhead_decode.md"]
    table = (tmp_path / "host_overhead_decode.md").read_text()
    assert "| 1x6144x4096 (swap) | `wsgemm.gemm(a, w.t())` | 11.80 | 11.60 | 12.60 |" in table
    assert "Regenerate: `python benchmarks/bench_overhead.py --decode --calls 100`" in table


def test_the_decode_overheads_twin_of_the_old_operator_gets_a_fresh_workspace_per_call(monkeypatch):
    overhead = load_torch_script(monkeypatch, "bench_overhead")
    kept = overhead.wsgemm.api.split_k_workspace
    with overhead.fresh_workspaces():
        one = overhead.wsgemm.api.split_k_workspace(overhead.torch.device("cpu"), 4, 100)
        two = overhead.wsgemm.api.split_k_workspace(overhead.torch.device("cpu"), 4, 100)
        assert one[0] is not two[0] and not one[0].any() and one[1].numel() == 100
    assert overhead.wsgemm.api.split_k_workspace is kept

def test_the_decode_overheads_twin_of_the_old_linear_forward_computes_the_layer(monkeypatch):
    overhead = load_torch_script(monkeypatch, "bench_overhead")
    torch = overhead.torch
    promises = []

    def gemm(a, b, read_before_wait=""):
        promises.append(read_before_wait)
        return a @ b

    monkeypatch.setattr(overhead.wsgemm, "gemm", gemm)
    ref = torch.nn.Linear(5, 6, dtype=torch.float64)
    twin = overhead.LinearBeforeSession44.from_linear(ref, read_weight_before_wait=True)
    x = torch.randn(2, 3, 5, dtype=torch.float64)
    with torch.no_grad():
        torch.testing.assert_close(twin(x), ref(x))
    assert promises == ["b"]

def test_deep_k_blocks_times_the_planned_decode_config_at_both_depths_on_the_same_bytes(monkeypatch):
    deep = load_torch_script(monkeypatch, "deep_k_blocks")
    GemmConfig = deep.cfg.GemmConfig
    planned = GemmConfig(tile_m=64, tile_n=16, tile_k=128, stages=8, epi_stages=4, dependent_launch=True)
    both = deep.both_depths(planned, swapped=True)
    assert (both["64-deep"].tile_k, both["64-deep"].stages) == (64, 16)
    assert (both["128-deep"].tile_k, both["128-deep"].stages) == (128, 8)
    assert all(c.swap_ab and c.epi_stages == 4 and c.dependent_launch for c in both.values())
    wide = deep.both_depths(GemmConfig(tile_m=64, tile_n=64, stages=13), swapped=True)  # M = 64: 64-deep
    assert (wide["64-deep"].stages, wide["128-deep"].stages) == (13, 6)
    # An unswapped plan keeps its orientation; a ring of "as many as fit" is resolved first.
    plain = deep.both_depths(GemmConfig(tile_m=64, tile_n=224), swapped=False)
    ring = deep.cfg.smem_budget(deep.cfg.KernelSpec("sm90", "bf16", "bf16", "k", "k", "n",
                                                    GemmConfig(tile_m=64, tile_n=224))).stages
    assert not any(c.swap_ab for c in plain.values()) and ring >= 4
    assert (plain["64-deep"].stages, plain["128-deep"].stages) == (ring, ring // 2)



def test_deep_k_blocks_takes_other_weights_and_names_its_report(monkeypatch, tmp_path):
    deep = load_torch_script(monkeypatch, "deep_k_blocks")
    timed, written = [], {}
    monkeypatch.setattr(deep, "bench_shape", lambda m, n, k, reps, flush: timed.append((m, n, k)) or {
        "plan": "p", "swapped": True, "configs": {}, "wrong": ["64-deep"], "single_us": {}, "graph_us": {}})
    monkeypatch.setattr(deep, "environment", dict)
    monkeypatch.setattr(deep, "gpu_state", dict)
    monkeypatch.setattr(deep.wsgemm.timing, "L2Flush", lambda: None)
    monkeypatch.setattr(deep, "write_results", lambda path, report: written.update({path: report}))
    argv = ["--tokens", "1,32", "--weights", "4608x3584,3584x18944", "--name", "qwen", "--out", str(tmp_path)]
    assert deep.main(argv) == 0
    assert timed == [(1, 4608, 3584), (1, 3584, 18944), (32, 4608, 3584), (32, 3584, 18944)]
    (path, report), = written.items()
    assert path == tmp_path / "qwen.json.gz" and list(report["rows"]) == ["1x4608x3584", "1x3584x18944",
                                                                         "32x4608x3584", "32x3584x18944"]


# ----------------------------------------------------------------------------- baseline


def test_a_baseline_exports_another_commits_package_beside_this_one(tmp_path):
    """benchmarks/baseline.py: wsgemm at a commit, importable as ``wsgemm_base`` next
    to the working tree's ``wsgemm``, with the commit recorded for the suite."""
    import os
    import subprocess

    baseline = load("baseline")
    target = baseline.export("HEAD", tmp_path)
    assert target == tmp_path / "wsgemm_base"
    assert (target / "kernels" / "sm90.py").is_file() and not (target / "wsgemm").exists()
    rev, sha = (target / "BASELINE_REV").read_text().split()
    assert rev == "HEAD" and len(sha) == 40
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    code = ("import torch, wsgemm, wsgemm_base, wsgemm.ops, wsgemm_base.ops; print(wsgemm_base.__file__); "
            "print(wsgemm_base.GemmConfig is not wsgemm.GemmConfig); "
            "print(torch.ops.wsgemm.gemm.default is not torch.ops.wsgemm_base.gemm.default)")
    out = subprocess.run([sys.executable, "-c", code], env=env, check=True, capture_output=True, text=True).stdout
    assert out.split() == [str(target / "__init__.py"), "True", "True"]  # each package its own operator
    with pytest.raises(subprocess.CalledProcessError):
        baseline.export("no-such-commit", tmp_path)
    older = b'_OP = "wsgemm::gemm"\n@torch.library.custom_op(_OP, mutates_args=())'
    assert baseline.renamed(Path("ops.py"), older).startswith(b'_OP = "wsgemm_base::gemm"')
    assert baseline.renamed(Path("api.py"), older) == older


def test_the_suite_offers_the_baseline_only_when_it_is_on_the_path(suite):
    fn, note = suite.baseline_gemm()
    assert fn is None and "benchmarks/baseline.py" in note
    assert "wsgemm-base" in suite.parse_args(["--impls", "wsgemm,wsgemm-base"]).impls


# ----------------------------------------------------------------------------- ncu summary

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


def test_the_ncu_summary_counts_opcodes_and_stalls_per_kernel(tmp_path):
    summary = load("ncu_summary")
    (tmp_path / "sass.csv").write_text(SASS_CSV)
    (tmp_path / "details.txt").write_text(DETAILS)
    out = tmp_path / "summary.json"
    summary.main([str(tmp_path / "sass.csv"), "--details", str(tmp_path / "details.txt"), "--out", str(out)])
    a, b = json.loads(out.read_text())["kernels"]
    assert a["kernel"] == "kernel_a" and a["instructions_executed"] == 250 and a["stall_samples"] == 8
    assert a["top_opcodes"] == {"R2UR": 200, "HGMMA": 50}  # predicated instructions count by opcode
    assert a["stall_reasons"] == {"wait": 6, "barrier": 2}  # "(Not Issued)" columns left out
    assert [s["index"] for s in a["most_stalled"]] == [0, 1, 2] and a["most_stalled"][0]["reasons"] == {"wait": 5}
    assert a["speed_of_light"] == {"elapsed_cycles": "99,376 cycle", "memory_throughput": "69.44 %",
                                   "duration": "57.70 us"}  # the first Memory Throughput row only
    assert b["top_opcodes"] == {"HGMMA": 50} and b["speed_of_light"] == {"duration": "53.57 us"}


def test_result_files_are_plain_or_gzipped_by_their_name(tmp_path):
    files = load("result_files")
    report = {"shape": [512, 4096, 4096], "us": [25.5, 25.1, 26.0]}
    for name in ("run.json", "run.json.gz"):
        files.write_text(tmp_path / name, json.dumps(report))
        assert files.load_json(tmp_path / name) == report
    assert (tmp_path / "run.json").read_text() == json.dumps(report)
    gzipped = (tmp_path / "run.json.gz").read_bytes()
    assert gzipped[:2] == b"\x1f\x8b"
    files.write_text(tmp_path / "run.json.gz", json.dumps(report))
    assert (tmp_path / "run.json.gz").read_bytes() == gzipped  # no timestamp: same report, same bytes


def test_reports_moved_into_the_archive_are_read_by_the_names_they_had(tmp_path):
    files = load("result_files")
    reports = {"sweep_a.json.gz": {"shape": [64, 4096, 4096], "us": {"128x64 c1x1": [12.5, 12.0, 13.1]}},
               "sweep_b.json": {"shape": [128, 8192, 4096], "us": {"64x128 c2x1": [20.25, 20.0, 21.0]}}}
    for name, report in reports.items():
        files.write_text(tmp_path / name, json.dumps(report))
    files.move_into_archive([tmp_path / "sweep_a.json.gz"])
    files.move_into_archive([tmp_path / "sweep_b.json"])
    assert sorted(p.name for p in tmp_path.iterdir()) == [files.ARCHIVE]
    for name, report in reports.items():
        assert files.load_json(tmp_path / name) == report
    assert [(name, json.loads(data)) for name, data in files.reports(tmp_path)] == [
        ("sweep_a.json", reports["sweep_a.json.gz"]), ("sweep_b.json", reports["sweep_b.json"])]
    # The same reports give the same bytes, whatever order they came in.
    packed = (tmp_path / files.ARCHIVE).read_bytes()
    files.write_archive(tmp_path, dict(reversed(list(files.archived(tmp_path).items()))))
    assert (tmp_path / files.ARCHIVE).read_bytes() == packed
    files.write_text(tmp_path / "sweep_a.json.gz", "{}")
    with pytest.raises(ValueError, match="sweep_a.json is archived already"):
        files.move_into_archive([tmp_path / "sweep_a.json.gz"])
    with pytest.raises(FileNotFoundError):
        files.read_bytes(tmp_path / "sweep_c.json.gz")


def test_result_files_show_prints_an_archived_report_and_names_a_missing_one(tmp_path, capsys):
    files = load("result_files")
    files.write_text(tmp_path / "run.json.gz", json.dumps({"us": [1.5]}))
    files.move_into_archive([tmp_path / "run.json.gz"])
    assert files.main(["show", str(tmp_path / "run.json.gz")]) == 0
    assert json.loads(capsys.readouterr().out) == {"us": [1.5]}
    with pytest.raises(SystemExit) as exit_info:
        files.main(["show", str(tmp_path / "other.json.gz")])
    assert exit_info.value.code == 1 and "no report other.json.gz" in capsys.readouterr().err


def test_clock_throttle_table_names_the_fastest_candidate_and_unsampled_phases():
    clock_throttle = load("clock_throttle")

    report = {"command": "python benchmarks/clock_throttle.py --shape 8x8x8 --rest 0",
              "environment": {"gpu": "NVIDIA H200", "torch": "2.11", "wsgemm": "0.1.0", "date": "today"},
              "runs": [{"shape": "8x8x8", "rest": 0.0,
                        "timings_us": {"suite": {"wsgemm default": 1.0, "torch.matmul": 2.0},
                                       "autotuner, 12 candidates": {"a": 3.0, "b": 2.5, "torch.matmul": 2.0}},
                        "sm_clock_mhz": {"suite": {"min": None, "max": None, "samples": []},
                                         "autotuner, 12 candidates": {"min": 1575, "max": 1980, "samples": [1980, 1575]}}}]}
    md = clock_throttle.render(report)
    assert "| 8x8x8 | 0 | suite | 1.0 | 2.0 | - | not sampled |" in md
    assert "| 8x8x8 | 0 | autotuner, 12 candidates | - | 2.0 | 2.5 (b) | 1575-1980 |" in md


def test_hbm_ceiling_table_reports_the_fastest_read_and_each_gemms_rate(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCH_DIR))  # hbm_ceiling.py imports its siblings by name
    pytest.importorskip("torch")
    hbm_ceiling = load("hbm_ceiling")

    assert hbm_ceiling.read_name(2048, 4, None) == "read b2048 w4 grid=blocks"
    assert hbm_ceiling.read_name(8192, 8, 16) == "read b8192 w8 grid=16/SM"
    row = {"n": 6144, "k": 4096, "weight_bytes": 50_331_648,
           "read_us": {"torch.sum": 19.5, "read b2048 w4 grid=16/SM": 14.1, "read b8192 w8 grid=blocks": 15.0},
           "gemm_us": {"1": {"wsgemm": 15.7, "torch.matmul": 16.3}}}
    assert hbm_ceiling.best_read(row) == ("read b2048 w4 grid=16/SM", 14.1)
    assert hbm_ceiling.rate(row, 14.1) == pytest.approx(3.57, abs=0.01)  # TB/s
    report = {"name": "hbm_ceiling", "command": "python benchmarks/hbm_ceiling.py --tokens 1", "replays": 15,
              "tokens": [1], "rows": [row],
              "environment": {"gpu": "NVIDIA H200", "driver": "580", "torch": "2.11", "cutlass_dsl": "4.8",
                              "date": "today"}}
    md = hbm_ceiling.markdown(report)
    assert "| weight (N x K) | MB | read (best) | torch.sum | wsgemm M=1 | cuBLAS M=1 |" in md
    assert "| 6144x4096 | 50 | 3.57 (b2048 w4 grid=16/SM) | 2.58 | 3.21 | 3.09 |" in md
    assert "Regenerate: `python benchmarks/hbm_ceiling.py --tokens 1`" in md


def test_sustained_table_compares_back_to_back_calls_and_single_calls(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCH_DIR))  # sustained.py imports its siblings by name
    pytest.importorskip("torch")
    sustained = load("sustained")

    def run(ms, mhz):
        return {"ms": ms, "calls": 10, "mhz": mhz, "watts": 690.0}

    report = {"name": "t", "command": "python benchmarks/sustained.py --shapes 8x8x8", "date": "today",
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
    assert "CuTe DSL 4.8.1" in md and md.rstrip().endswith("`python benchmarks/sustained.py --shapes 8x8x8`")
    # Reports since the untimed start out of rest say so; older ones (no such key) do not.
    assert "out of rest" not in md and "out of rest" in sustained.markdown({**report, "warm_start": True})
    assert [name for name in sustained.implementations([1, 8])] == ["torch.matmul", "wsgemm", "wsgemm-w1",
                                                                     "wsgemm-w8"]


def test_sustained_takes_a_suites_large_problems_with_their_layouts(monkeypatch):
    import argparse

    monkeypatch.syspath_prepend(str(BENCH_DIR))
    pytest.importorskip("torch")
    sustained = load("sustained")
    args = argparse.Namespace(suite=["llm", "square"], filter=None, min_gflop=500.0, shapes="")
    picked = sustained.problems(args)
    assert picked and all(p.flops >= 500e9 for p in picked)
    assert {p.layout for p in picked if p.label.startswith("llm/")} == {"b_weight_t"}
    assert "square/8192^3" in {p.label for p in picked} and "square/1024^3" not in {p.label for p in picked}
    args.suite, args.shapes = None, "16384x10240x8192"
    (only,) = sustained.problems(args)
    assert (only.m, only.n, only.k, only.layout) == (16384, 10240, 8192, "b_weight_t")


def test_sustained_configs_keep_the_band_width_they_name(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCH_DIR))
    torch = pytest.importorskip("torch")
    sustained = load("sustained")
    from wsgemm import GemmConfig

    assert sustained.parse_config("128x256:2x2:w8") == GemmConfig(tile_m=128, tile_n=256, cluster_m=2, cluster_n=2,
                                                                   swizzle=8)
    assert sustained.parse_config("128x224:1x1").swizzle == 1
    along_n = sustained.parse_config("128x256:2x1:w8:n")
    assert along_n.raster == sustained.wsgemm.Raster.ALONG_N and along_n.swizzle == 8
    with pytest.raises(ValueError, match="neither a band width"):
        sustained.parse_config("128x256:2x1:x8")
    ran = []
    monkeypatch.setattr(sustained.wsgemm, "gemm", lambda a, b, config=None: ran.append(config))
    h200 = type("Properties", (), {"multi_processor_count": 132})
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device: h200)
    gemm = sustained.launched_as_given(sustained.parse_config("128x256:2x1"))
    gemm(torch.empty(16384, 8192, device="meta"), torch.empty(8192, 10240, device="meta"))
    assert ran[0].swizzle == 1 and ran[0].stream_k  # launched as the default path would, band width as given
    assert list(sustained.implementations([], ["128x256:2x1:w8"])) == ["torch.matmul", "wsgemm",
                                                                       "wsgemm 128x256:2x1:w8"]


def test_sustained_configs_can_swap_a_and_b_and_plan_on_the_kernels_problem(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCH_DIR))
    torch = pytest.importorskip("torch")
    sustained = load("sustained")
    from wsgemm import heuristics

    swapped = sustained.parse_config("192x96:4x1:x")
    assert swapped.swap_ab and (swapped.tile_m, swapped.tile_n, swapped.cluster_m) == (192, 96, 4)
    assert not sustained.parse_config("192x96:4x1").swap_ab
    planned = []
    monkeypatch.setattr(heuristics, "as_launched", lambda arch, config, m, n, k, *rest: planned.append((m, n, k))
                        or config)
    monkeypatch.setattr(sustained.wsgemm, "gemm", lambda a, b, config=None: None)
    h200 = type("Properties", (), {"multi_processor_count": 132})
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device: h200)
    a, b = torch.empty(192, 8192, device="meta"), torch.empty(8192, 10240, device="meta")
    sustained.launched_as_given(swapped)(a, b)
    sustained.launched_as_given(sustained.parse_config("128x160:2x1"))(a, b)
    assert planned == [(10240, 192, 8192), (192, 10240, 8192)]  # the weight's rows on the kernel's M when swapped


def test_sustained_configs_keep_the_ring_depth_they_name(monkeypatch):
    """``:sD`` names a ring depth the launch policy would change (here its 7-stage ring
    for one wave of shared 64x128 tiles); the epilogue then gets the buffers that fit."""
    monkeypatch.syspath_prepend(str(BENCH_DIR))
    torch = pytest.importorskip("torch")
    sustained = load("sustained")
    assert sustained.parse_config("64x128:2x1:s9:w2").stages == 9
    assert sustained.parse_config("64x128:2x1").stages is None
    ran = []
    monkeypatch.setattr(sustained.wsgemm, "gemm", lambda a, b, config=None: ran.append(config))
    h200 = type("Properties", (), {"multi_processor_count": 132})
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device: h200)
    a, b = torch.empty(1024, 4096, device="meta"), torch.empty(4096, 1024, device="meta")
    for text in ("64x128:2x1", "64x128:2x1:s9", "64x128:2x1:s6"):
        sustained.launched_as_given(sustained.parse_config(text))(a, b)
    assert [(c.stages, c.epi_stages) for c in ran] == [(7, 4), (9, 2), (6, 4)]


def test_reports_record_a_quoted_command_without_the_output_folder():
    """sustained.py and kernel_timeline.py record how to regenerate their report; the
    GPU machine's output folder is not part of it."""
    files = load("result_files")
    command = files.regenerate_command("sustained.py", ["--suite", "llm", "--bands", "", "--out", "/root/out",
                                                        "--filter", "M=16384|16384\\^3", "--out=/tmp/x"])
    assert command == "python benchmarks/sustained.py --suite llm --bands '' --filter 'M=16384|16384\\^3'"


RAW_CSV = '''"Kernel Name","launch__grid_size","gpu__time_duration.sum","dram__bytes.sum.per_second",\
"lts__t_requests_srcunit_tex_op_read.sum","other"
"","","ms","Tbyte/s","request",""
"kernel_a","132","3.968160","1.709955","966841","1"
"nvjet_b","132","3.877984","0.864009","663851","2"
'''


def test_the_ncu_summary_keeps_raw_traffic_metrics_with_labels(tmp_path):
    summary = load("ncu_summary")
    (tmp_path / "raw.csv").write_text(RAW_CSV)
    out = tmp_path / "traffic.json"
    summary.main(["--raw", str(tmp_path / "raw.csv"), "--labels", "ours", "--out", str(out), "--note", "n"])
    a, b = json.loads(out.read_text())["kernels"]
    assert a == {"kernel": "kernel_a", "label": "ours",
                 "metrics": {"launch__grid_size": "132", "gpu__time_duration.sum": "3.968160 ms",
                             "dram__bytes.sum.per_second": "1.709955 Tbyte/s",
                             "lts__t_requests_srcunit_tex_op_read.sum": "966841 request"}}  # only RAW_METRICS
    assert b["kernel"] == "nvjet_b" and b["label"] is None
    with pytest.raises(SystemExit):  # the SASS page or --raw, not both
        summary.main([str(tmp_path / "raw.csv"), "--raw", str(tmp_path / "raw.csv")])


def _sustained_row(label, shape, b, runs: dict, single: dict | None):
    row = {"label": label, "shape": shape, "batch": 1, "b": b, "wsgemm_plan": "direct 128x224x64_c1x1",
           "sustained": {name: [{"ms": ms, "mhz": 1400.0, "watts": 690.0}] for name, ms in runs.items()}}
    if single is not None:
        row["single_ms"] = single
    return row


def test_retune_sustained_takes_a_config_only_where_it_wins_both_protocols(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCH_DIR))
    pytest.importorskip("torch")
    retune = load("retune_sustained")
    wins = {"torch.matmul": 1.0, "wsgemm": 1.05, "wsgemm 128x256:2x1:w8": 1.02, "wsgemm 128x192:2x1:w8": 1.08}
    report = {"command": "python benchmarks/sustained.py ...", "environment": {"gpu": "NVIDIA H200"}, "shapes": [
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
    assert key == "NVIDIA H200|sm90|bf16->bf16|kkn|m<=16384|n=10240|k=8192|l=1"
    entry = entries[key]
    assert (entry["config"]["tile_n"], entry["config"]["cluster_m"], entry["config"]["swizzle"]) == (256, 2, 8)
    assert entry["timing"] == "sustained" and entry["m"] == 16384
    assert min(entry["ms"], key=entry["ms"].get) == "128x256:2x1:w8"  # the merge's score reads the winner here


def test_the_committed_sustained_retune_regenerates_and_ships_in_the_table(monkeypatch):
    """``autotune_h200_r_sustained.json.gz`` follows from the committed back-to-back
    reports, and the packaged table holds its winners."""
    monkeypatch.syspath_prepend(str(BENCH_DIR))
    pytest.importorskip("torch")
    retune = load("retune_sustained")
    results = BENCH_DIR / "results"
    reports = [retune.load_run(results / f"{name}.json.gz") for name in ("retune_m16384_b2b", "retune_m4096_b2b")]
    entries = retune.entries_from(reports, retune.MIN_GAIN, retune.SINGLE_TOLERANCE)
    committed = retune.load_run(results / "autotune_h200_r_sustained.json.gz")
    assert entries == committed and len(entries) == 6
    from wsgemm.autotune import _jsonable
    from wsgemm.config import GemmConfig
    from wsgemm.tuned_table import MEASURED

    defaults = _jsonable(GemmConfig())
    for key, entry in entries.items():
        assert MEASURED[key] == {name: v for name, v in entry["config"].items() if defaults[name] != v}


# ------------------------------------------------------------------- model regret


def test_model_regret_reads_sweep_labels_as_the_plans_they_name():
    regret = load("model_regret")
    plan = regret.parse_label("swap 128x80 c1x2 split2", None)
    assert (plan.swap_ab, plan.tile_m, plan.tile_n, plan.cluster_m, plan.cluster_n, plan.split_k) == (
        True, 128, 80, 1, 2, 2)
    default = regret.parse_label("default", "direct 64x128x64_c2x1_s9_e2_along_m_w1_before_copy_split4_pdl")
    assert default == regret.Plan(False, 64, 128, 2, 1, 4)
    # Plans the model does not tell apart from others are left out.
    for label in ("128x256 c2x1 s7", "base default", "128x192 c2x1 pingpong"):
        assert regret.parse_label(label, None) is None


def test_model_regret_is_the_picks_time_over_the_fastest(tmp_path):
    regret = load("model_regret")
    plans = {"128x256 c2x1": [100.0, 99, 101], "64x64 c1x1 split8": [300.0, 299, 301]}
    sweep = {"runs": [{"shapes": [{"shape": [4096, 4096, 4096], "b": "W.t()", "us": plans,
                                   "graph_us": {"128x256 c2x1": 90.0}}]}]}
    (tmp_path / "sweep.json").write_text(json.dumps(sweep))
    problems = regret.load_sweeps(tmp_path)
    assert len(problems) == 1 and problems[0][1] == (4096, 4096, 4096)
    rows = regret.regrets(problems, regret.heuristics.H200, graph=False)
    assert rows[0][0] == 1.0 and rows[0][3] == rows[0][4] == regret.Plan(False, 128, 256, 2, 1, 1)
    # Slower timings for the model's pick show as regret; one graph timing is no comparison.
    plans["128x256 c2x1"][0] = 600.0
    (tmp_path / "sweep.json").write_text(json.dumps(sweep))
    assert regret.regrets(regret.load_sweeps(tmp_path), regret.heuristics.H200, graph=False)[0][0] == 2.0
    assert regret.regrets(problems, regret.heuristics.H200, graph=True) == []
    # --ranked: the default path's first plan as launched (128x256 in 2x1 clusters here),
    # where timed.
    ranked = regret.regrets(regret.load_sweeps(tmp_path), regret.heuristics.H200, graph=False, ranked=True)
    assert ranked[0][0] == 2.0 and ranked[0][3] == regret.Plan(False, 128, 256, 2, 1, 1)
    del plans["128x256 c2x1"]
    plans["128x128 c1x1"] = [150.0, 149, 151]
    (tmp_path / "sweep.json").write_text(json.dumps(sweep))
    assert regret.regrets(regret.load_sweeps(tmp_path), regret.heuristics.H200, graph=False, ranked=True) == []


def test_compiled_decode_table_gives_both_ratios_and_names_a_wrong_run():
    decode = load("bench_compiled_decode")
    ok = lambda us: {"status": "ok", "rel_error": 0.004, "median_us": us, "p10_us": us - 1, "p90_us": us + 1}  # noqa: E731
    rows = {f"{model} | {mode}": ok(us) for model, us in (("torch", 300.0), ("wsgemm", 250.0), ("wsgemm-promise", 240.0))
            for mode in decode.MODES}
    rows["wsgemm-promise | compiled"] = {"status": "wrong", "rel_error": 0.5}
    rows["torch | compiled, reduce-overhead"]["host_us"] = 42.25
    report = {"environment": {"gpu": "NVIDIA H200", "torch": "2.11", "cutlass_dsl": "4.8.1", "wsgemm": "0.1.0",
                              "date": "2026-12-02"},
              "layers": 2, "steps": 50, "reps": 15, "rows": {"16": rows}, "gpu_before": {}, "gpu_after": {},
              "command": "python benchmarks/bench_compiled_decode.py --tokens 16"}
    table = decode.markdown(report)
    assert "| 16 | eager | 300.0 (299.0-301.0) | 250.0 (249.0-251.0) | 1.200x | 240.0 (239.0-241.0) | 1.250x |" in table
    assert "| 16 | compiled | 300.0 (299.0-301.0) | 250.0 (249.0-251.0) | 1.200x | wrong (rel. error 0.5) | - |" in table
    assert "| 16 | compiled, reduce-overhead | 300.0 (299.0-301.0; host 42.2) | 250.0 (249.0-251.0) |" in table
    assert "Regenerate: `python benchmarks/bench_compiled_decode.py --tokens 16`" in table


def test_compiled_decode_loops_record_the_hosts_time_to_issue_their_steps(monkeypatch):
    """The host time stops when the last step is issued, before the end event and the
    wait for the GPU; the event time spans the whole loop."""
    decode = load("bench_compiled_decode")
    clock, calls = iter([1.0, 1.004, 2.0, 2.010]), []

    class Event:
        def __init__(self, enable_timing):
            pass

        def record(self):
            pass

        def synchronize(self):
            calls.append("sync")

        def elapsed_time(self, end):
            return 30.0

    monkeypatch.setattr(decode.time, "perf_counter", lambda: next(clock))
    monkeypatch.setattr(decode.torch.cuda, "Event", Event)
    runs = {"torch": lambda x: calls.append("torch"), "wsgemm": lambda x: calls.append("wsgemm")}
    times, host = decode.step_loops(runs, None, steps=2, reps=1)
    assert calls == ["torch", "torch", "sync", "wsgemm", "wsgemm", "sync"]
    assert times == {"torch": [15.0], "wsgemm": [15.0]}
    assert host["torch"] == [pytest.approx(2.0)] and host["wsgemm"] == [pytest.approx(5.0)]


def test_compiled_decode_ratios_pair_the_loops_of_each_round():
    """A host disturbance that slows both runs' loops of one round cancels in their
    ratio; the ratio of the medians would keep it."""
    decode = load("bench_compiled_decode")
    theirs = {"median_us": 300.0, "loops_us": [300.0, 600.0, 300.0, 900.0, 600.0]}
    ours = {"median_us": 500.0, "loops_us": [250.0, 500.0, 250.0, 750.0, 500.0]}
    assert decode.paired_ratio(ours, theirs) == pytest.approx(1.2)
    assert decode.paired_ratio({"median_us": 250.0}, {"median_us": 300.0}) == pytest.approx(1.2)  # older reports


def test_plan_diff_groups_changed_plans_by_weight_with_token_ranges():
    diff = load("plan_diff")
    assert (len(diff.shape_set("sweep")), len(diff.shape_set("held-out"))) == (3510, 4032)  # NOTES' counts
    before = {(m, 3584, 3584): "split2" for m in (1, 2, 3, 9)} | {(1, 4096, 4096): "unsplit"}
    after = dict(before) | {(1, 3584, 3584): "unsplit", (2, 3584, 3584): "unsplit", (9, 3584, 3584): "unsplit"}
    assert diff.grouped_changes(before, after) == {(3584, 3584, "split2", "unsplit"): [1, 2, 9]}
    assert diff.token_ranges([1, 2, 3, 7, 9, 10]) == "1-3, 7, 9-10"
    spread = {(3584, 3584, "a", "b"): [1, 2, 3, 4, 5, 6, 7, 8, 9], (2048, 4096, "c", "d"): [16]}
    assert diff.ab_sample(spread, 3) == ["1x3584x3584", "5x3584x3584", "9x3584x3584", "16x2048x4096"]
    the_same = diff.planned(pytest.importorskip("wsgemm"), [(1, 3584, 3584)])
    assert the_same[1, 3584, 3584].startswith("swap ")
