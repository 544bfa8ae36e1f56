"""The planner (``wsgemm.tuning``) on the CPU: its candidates, its cost model, the order
in which :func:`select` asks for an answer, the packaged table and the launch rules."""

import dataclasses
import json
import subprocess
import sys

import pytest

from wsgemm import GemmConfig, config as cfg
from wsgemm.grid import TileGrid
from wsgemm.tuning import H100_SXM, H200, Problem, autotune, best, launch, ranked, select, table
from wsgemm.tuning.candidates import candidates, tile_widths
from wsgemm.tuning.cost import Rates, estimate_seconds, tile_efficiency

# A GPU the packaged table has no entries for: an H200's SMs with a slower HBM.
UNMEASURED = dataclasses.replace(H200, hbm_peak_bytes_per_s=2.0e12, name="an unmeasured GPU")


def weight_problem(m, n, k):
    """``x @ w.t()`` with an nn.Linear weight: both operands K-major, swappable."""
    return Problem(m, n, k, can_swap=True)


def test_the_planner_imports_without_the_dsl_or_a_gpu():
    code = ("import builtins, sys\n"
            "real = builtins.__import__\n"
            "def guard(name, *a, **k):\n"
            "    if name.split('.')[0] in ('cutlass', 'cuda'):\n"
            "        raise ImportError('no DSL here: ' + name)\n"
            "    return real(name, *a, **k)\n"
            "builtins.__import__ = guard\n"
            "from wsgemm.tuning import H200, Problem, select\n"
            "print(select(Problem(4096, 4096, 4096), H200).short())\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.startswith("128x")


def test_a_swapped_problem_exchanges_the_operands_and_keeps_k_major_operands_k_major():
    p = Problem(16, 4096, 1024, a_major="k", b_major="k", d_major="n", can_swap=True)
    s = p.swapped()
    assert (s.m, s.n, s.k) == (4096, 16, 1024)
    assert (s.a_major, s.b_major, s.d_major) == ("k", "k", "m") and s.k_major and not s.can_swap
    row_major_b = Problem(16, 4096, 1024, b_major="n").swapped()
    assert row_major_b.a_major == "m"  # B (K, N) row-major: B^T is an M-major A


def test_gpus_are_told_apart_by_their_numbers_not_their_names():
    assert H200.table_key == "sm90/132sm/4.9TBps" and H100_SXM.table_key == "sm90/132sm/3.4TBps"
    renamed = dataclasses.replace(H200, name="something else")
    assert renamed.table_key == H200.table_key
    assert H200.clusters(1) == 132 and H200.clusters(2) == 66 and H200.clusters(4) == 30
    assert dataclasses.replace(H200, resident=()).clusters(4) == 33  # no driver answer: whole clusters


def test_rates_follow_the_gpus_own_numbers():
    h100, h200 = Rates.for_gpu(H100_SXM), Rates.for_gpu(H200)
    assert h100.mma_flops_per_sm == h200.mma_flops_per_sm
    assert h200.hbm_bytes_per_s / h100.hbm_bytes_per_s == pytest.approx(
        H200.hbm_peak_bytes_per_s / H100_SXM.hbm_peak_bytes_per_s)
    slower = Rates.for_gpu(dataclasses.replace(H200, sm_clock_hz=H200.sm_clock_hz / 2))
    assert slower.mma_flops_per_sm == pytest.approx(h200.mma_flops_per_sm / 2)


def test_tile_widths_are_the_narrowest_for_each_column_count():
    widths = tile_widths(6144)
    assert 256 in widths and 192 in widths and 128 in widths
    for width in widths:
        columns = -(-6144 // width)
        assert width == -(-(-(-6144 // columns)) // 16) * 16
    assert tile_widths(16) == (16,)
    assert tile_widths(100) == (16, 32, 48, 64, 112)  # 80 and 96 wide make two columns, as 64 does


@pytest.mark.parametrize("problem", [weight_problem(1, 4096, 4096), weight_problem(200, 10240, 8192),
                                     weight_problem(4096, 4096, 4096), Problem(512, 512, 512, batches=8),
                                     Problem(300, 700, 900, out_dtype="fp32")])
def test_every_candidate_is_a_config_the_kernel_builds(problem):
    configs = list(candidates(problem, H200))
    assert configs
    for config in configs:
        p = problem.kernel_problem(config.swap_ab)
        cfg.make_spec("sm90", p.ab_dtype, p.out_dtype, p.a_major, p.b_major, p.d_major, dataclasses.replace(
            config, swap_ab=False), batched=p.batches > 1)
        tiles_m, tiles_n = -(-p.m // config.tile_m), -(-p.n // config.tile_n)
        assert config.cluster_m <= tiles_m and config.cluster_n <= tiles_n
        if config.split_k > 1:
            units = TileGrid.for_problem(p.m, p.n, p.batches, config).units
            assert units % H200.clusters(config.cluster_size)  # only a partial last wave is split
    assert not any(c.swap_ab for c in configs if problem.batches > 1 or not problem.can_swap)


def test_the_cost_grows_with_the_work_and_shrinks_with_the_bandwidth():
    config = GemmConfig(tile_m=128, tile_n=256, cluster_m=2)
    short, long = (estimate_seconds(Problem(4096, 4096, k), config, H200) for k in (2048, 8192))
    assert long == pytest.approx(4 * short, rel=0.1)
    decode = GemmConfig(tile_m=64, tile_n=16, swap_ab=True)
    p = weight_problem(1, 8192, 8192)
    assert estimate_seconds(p, decode, H100_SXM) > 1.2 * estimate_seconds(p, decode, H200)  # HBM-bound
    big = GemmConfig(tile_m=128, tile_n=256)
    q = Problem(8192, 8192, 8192)
    assert estimate_seconds(q, big, H100_SXM) == pytest.approx(estimate_seconds(q, big, H200), rel=0.05)


def test_tile_efficiency_is_read_between_measured_widths():
    assert tile_efficiency(128, 256) == 0.80
    assert tile_efficiency(128, 224) < tile_efficiency(128, 240) < tile_efficiency(128, 256)
    assert tile_efficiency(192, 128) < tile_efficiency(128, 128)


def test_a_split_fills_idle_sms_and_is_charged_its_fix_up():
    # 32 tiles of 128x128 on 132 SMs, K = 16384: splitting four ways keeps 128 SMs busy.
    p = Problem(512, 1024, 16384)
    whole, split = (estimate_seconds(p, GemmConfig(tile_m=128, tile_n=128, split_k=s), H200) for s in (1, 4))
    assert split < 0.5 * whole
    # A full wave gains nothing from a split: it only pays the fix-up.
    assert best(Problem(2048, 8448, 4096), H200).split_k == 1


def test_decode_swaps_the_tokens_into_a_narrow_n_tile_and_large_m_never_swaps():
    chosen = best(weight_problem(4, 4096, 4096), H200)
    assert chosen.swap_ab and chosen.tile_n == 16
    assert not any(c.swap_ab for _, c in ranked(weight_problem(4096, 4096, 4096), H200)[:20])
    assert not best(weight_problem(8192, 8192, 8192), H200).swap_ab


def test_ranking_breaks_near_ties_towards_unsplit_unswapped_wide_tiles():
    seconds, first = ranked(Problem(8192, 8192, 8192), H200)[0]
    assert (first.tile_m, first.tile_n, first.split_k) == (128, 256, 1)
    assert all(s >= seconds * 0.98 for s, _ in ranked(Problem(8192, 8192, 8192), H200))


def test_select_asks_the_callers_config_then_the_autotune_cache_then_the_table_then_the_model(tmp_path,
                                                                                                monkeypatch):
    monkeypatch.setenv("WSGEMM_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(autotune, "_memory", None)
    mine = GemmConfig(tile_m=64, tile_n=64)
    p = weight_problem(2048, 6144, 4096)
    assert select(p, H200, mine) is mine
    # The packaged table has this bucket for the H200 (128x256, no cluster) ...
    assert table.winner(p, H200) == GemmConfig()
    # ... and an unmeasured GPU gets the cost model's plan.
    assert table.winner(p, UNMEASURED) is None
    assert select(p, UNMEASURED) == launch.as_launched(p.kernel_problem(best(p, UNMEASURED).swap_ab),
                                                        best(p, UNMEASURED), UNMEASURED)
    # A winner this machine's autotuner stored comes before the table.
    stored = GemmConfig(tile_m=128, tile_n=192, cluster_m=2)
    entries = {autotune.cache_key(p, H200): {"config": autotune._jsonable(stored), "m": 2048, "ms": {}}}
    (tmp_path / "autotune.json").write_text(json.dumps(entries))
    monkeypatch.setattr(autotune, "_memory", None)
    assert (select(p, H200).tile_n, select(p, H200).cluster_m) == (192, 2)
    with pytest.raises(TypeError, match="GemmConfig, 'autotune' or None"):
        select(p, H200, "fastest")
    with pytest.raises(ValueError, match="trial="):
        select(p, H200, "autotune")


def test_table_points_serve_their_bucket_from_the_smallest_measured_m_at_or_above(monkeypatch):
    bucket = "bf16->bf16|kkn|m<=256|n=6144|k=4096|l=1"
    tables = {"sm90/132sm/4.9TBps": {bucket: [(136, {"tile_m": 64, "tile_n": 144, "swap_ab": True}),
                                                (192, {"tile_m": 128, "tile_n": 96, "cluster_n": 2,
                                                       "swap_ab": True}),
                                                (256, {"tile_m": 128, "tile_n": 128})]}}
    monkeypatch.setattr(table, "_winners", lambda key: tables.get(key, {}))
    assert table.winner(weight_problem(130, 6144, 4096), H200).tile_n == 144
    assert table.winner(weight_problem(150, 6144, 4096), H200).tile_n == 96
    assert table.winner(weight_problem(256, 6144, 4096), H200).tile_n == 128
    # A swapped winner needs the operands to swap, and holds only the tokens it was timed with.
    assert table.winner(Problem(150, 6144, 4096), H200) is None
    assert table.bucket(weight_problem(150, 6144, 4096)) == bucket
    assert table.point(weight_problem(150, 6144, 4096)) == bucket.replace("m<=256", "m=150")


def test_the_packaged_table_is_data_with_its_provenance():
    doc = json.loads((table.TABLES / "sm90.json").read_text())
    for t in doc["tables"]:
        assert {"gpu", "measured_on", "source", "measured"} <= set(t)
        for key, fields in {**t.get("entries", {}), **t.get("points", {})}.items():
            GemmConfig(**fields)
            assert key.count("|") == 5
    assert any(t["gpu"] == H200.table_key for t in doc["tables"])


def test_bucket_bounds_are_powers_of_two_and_96():
    assert [table.bucket_bound(m) for m in (1, 2, 3, 64, 65, 96, 97, 128, 129, 3000)] == \
        [1, 2, 4, 64, 96, 96, 128, 128, 256, 4096]


def kernel(m, n, k, batches=1):
    return Problem(m, n, k, batches)


def test_short_k_loops_over_two_waves_run_on_pingpong_consumers():
    p = kernel(8192, 8192, 512)
    chosen = launch.pingpong_for_short_k(p, GemmConfig(tile_m=128, tile_n=256, cluster_m=2), H200)
    assert chosen.pingpong and chosen.tile_n in (128, 192) and chosen.epi_stages == 2
    assert not launch.pingpong_for_short_k(kernel(8192, 8192, 4096), GemmConfig(), H200).pingpong
    assert not launch.pingpong_for_short_k(kernel(512, 8192, 8192 // 16 * 0 + 512, 2), GemmConfig(), H200).pingpong
    assert not launch.pingpong_for_short_k(p, GemmConfig(split_k=2), H200).pingpong


def test_one_wave_of_128x128_tiles_over_a_long_k_loop_runs_one_warpgroup_per_tile():
    one_wave = GemmConfig(tile_m=128, tile_n=128, cluster_m=2)
    assert launch.pingpong_for_one_wave(kernel(1024, 2048, 8192), one_wave, H200).pingpong
    assert not launch.pingpong_for_one_wave(kernel(4096, 4096, 8192), one_wave, H200).pingpong  # 8 waves
    assert not launch.pingpong_for_one_wave(kernel(1024, 2048, 1024), one_wave, H200).pingpong  # short k-loop


def test_only_long_runs_stream_their_last_wave():
    c = GemmConfig(tile_m=128, tile_n=256, cluster_m=2)
    assert launch.stream_k_for_long_runs(kernel(8192, 8192, 8192), c, H200).stream_k  # 7.8 waves
    assert not launch.stream_k_for_long_runs(kernel(2048, 4096, 4096), c, H200).stream_k  # 2 waves
    assert not launch.stream_k_for_long_runs(kernel(8192, 8192, 512), c, H200).stream_k  # short k-loop


def test_tall_grids_with_long_k_loops_walk_in_bands():
    c = GemmConfig(tile_m=128, tile_n=256, cluster_m=2)
    assert launch.bands_for_long_grids(kernel(16384, 8192, 8192), c, H200).swizzle == launch.BAND_CLUSTERS
    assert launch.bands_for_long_grids(kernel(4096, 8192, 8192), c, H200).swizzle == 1
    assert launch.bands_for_long_grids(kernel(16384, 2048, 8192), c, H200).swizzle == 1  # 8 columns: one band


def test_one_wave_of_shared_64x128_tiles_runs_in_clusters_of_eight_or_on_a_shallower_ring():
    pairs = GemmConfig(tile_m=64, tile_n=128, cluster_m=2)
    eight = launch.clusters_for_shared_tiles(kernel(768, 1024, 4096), pairs, H200)  # 96 tiles, 48 pairs
    assert eight.cluster_size == 8
    ring = launch.clusters_for_shared_tiles(kernel(512, 1024, 4096), pairs, H200)
    assert ring.cluster_size == 2 and ring.stages == launch.SHARED_TILES_RING_STAGES


def test_decode_and_prefill_launch_as_dependents():
    assert launch.dependent_launch(kernel(4096, 16, 4096), GemmConfig(tile_n=16, swap_ab=True), H200).dependent_launch
    assert launch.dependent_launch(kernel(1024, 8192, 4096), GemmConfig(), H200).dependent_launch
    assert not launch.dependent_launch(kernel(4096, 8192, 4096), GemmConfig(), H200).dependent_launch
    assert not launch.dependent_launch(kernel(1024, 8192, 4096, 4), GemmConfig(), H200).dependent_launch


def test_decode_tiles_on_k_major_weights_load_128_deep_k_blocks_on_half_the_ring():
    swapped = GemmConfig(tile_m=64, tile_n=16, swap_ab=True)
    deep = launch.deep_k_blocks_for_decode(kernel(4096, 16, 4096), swapped, H200)
    full = cfg.smem_budget(cfg.KernelSpec("sm90", "bf16", "bf16", "k", "k", "n", swapped)).stages
    assert deep.tile_k == 128 and deep.stages == full // 2
    m_major = Problem(4096, 16, 4096, b_major="n")
    assert launch.deep_k_blocks_for_decode(m_major, swapped, H200).tile_k == 64
    assert launch.deep_k_blocks_for_decode(kernel(4096, 16, 1024), swapped, H200).tile_k == 64


def test_spare_shared_memory_holds_more_epilogue_buffers_without_costing_a_stage():
    c = GemmConfig(tile_m=128, tile_n=128)
    more = launch.spare_epilogue_buffers(kernel(4096, 4096, 4096), c, H200)
    ring = cfg.smem_budget(cfg.KernelSpec("sm90", "bf16", "bf16", "k", "k", "n", c)).stages
    assert more.epi_stages > 2 and more.stages == ring


def test_launch_rules_are_sm90_only_and_a_callers_config_skips_them():
    sm100 = dataclasses.replace(H200, arch="sm100")
    c = GemmConfig(tile_m=128, tile_n=256)
    assert launch.as_launched(kernel(8192, 8192, 512), c, sm100) == c
    assert select(kernel(8192, 8192, 512), H200, c) == c
    assert select(kernel(8192, 8192, 512), H200).pingpong


def test_autotune_times_both_orientations_spread_over_tile_shapes():
    picks = autotune.candidates_to_time(weight_problem(16, 6144, 4096), H200, 12)
    assert len(picks) == 12 and sum(c.swap_ab for c in picks) == 6
    shapes = [(c.tile_m, c.tile_n, c.cluster_m, c.cluster_n) for c in picks if not c.swap_ab]
    assert len(set(shapes)) >= 3
