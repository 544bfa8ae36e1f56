"""How a call is planned, on meta tensors (no GPU): which kernel problem, majors and
mode ``wsgemm.api`` derives, including the operand swap for decode shapes."""

import dataclasses

import pytest
import torch

from wsgemm import GemmConfig, api, autotune
from wsgemm.heuristics import choose_config, with_launch_policy
from wsgemm.tuned_table import MEASURED

H200_SMS = 132
bf16 = torch.bfloat16


def plan(a, b, config=None, out=None, gpu="a GPU without measurements", read_before_wait=""):
    shape, dtype, batched, batches = api.validate_shapes_and_dtypes(a, b, out, None, config)
    return api._kernel_for(a, b, out, None, config, shape, dtype, batched, batches, gpu, "sm90", H200_SMS,
                           read_before_wait)


def meta(*shape):
    return torch.empty(*shape, dtype=bf16, device="meta")


def test_decode_weight_product_is_swapped_so_tokens_are_the_mma_n():
    x, w = meta(4, 4096), meta(14336, 4096)  # nn.Linear: x @ w.t()
    mode, spec, problem = plan(x, w.t())
    assert mode == "swap" and problem == (14336, 4, 1)
    # Kernel A = w (K-major), kernel B = x^T (K-major), kernel D = out^T (M-major).
    assert (spec.a_major, spec.b_major, spec.d_major) == ("k", "k", "m")
    assert spec.config.tile_n <= 32 and not spec.config.swap_ab  # the kernel never sees the swap


@pytest.mark.parametrize("tokens, n, k", [(1, 6144, 4096), (16, 4096, 4096), (1, 4096, 14336), (1, 57344, 8192),
                                         (24, 6144, 4096), (32, 8192, 28672)])
def test_swapped_decode_tiles_stream_a_k_major_weight_in_128_deep_k_blocks(tokens, n, k):
    """At most 32 token columns beside a K-major weight: 128-deep k-blocks on half the
    ring's stages (heuristics.with_deep_weight_k_blocks, NOTES sections 62-63)."""
    x, w = meta(tokens, k), meta(n, k)
    mode, spec, _ = plan(x, w.t())
    shallow = dataclasses.replace(spec.config, tile_k=64, stages=None)
    ring = api.cfg.smem_budget(dataclasses.replace(spec, config=shallow)).stages
    assert mode == "swap" and spec.config.tile_n <= 32 and (spec.a_major, spec.b_major) == ("k", "k")
    assert spec.config.tile_k == 128 and spec.config.stages == ring // 2


def test_one_unclustered_row_of_64_token_rows_streams_the_weight_in_128_deep_k_blocks():
    mode, spec, _ = plan(meta(48, 4096), meta(28672, 4096).t())
    assert mode == "direct" and (spec.config.tile_m, spec.config.cluster_m, spec.config.cluster_n) == (64, 1, 1)
    assert (spec.a_major, spec.b_major) == ("k", "k") and spec.config.tile_k == 128


@pytest.mark.parametrize("why, x, b", [
    ("two rows of token tiles, in clusters", meta(65, 4096), meta(4096, 4096).t()),
    ("an M-major weight (B given row-major)", meta(1, 4096), meta(4096, 6144)),
    ("M-major tokens", meta(4096, 48).t(), meta(28672, 4096).t()),
    ("a 64x48 token tile", meta(48, 4096), meta(6144, 4096).t()),
    ("K = 1024", meta(1, 1024), meta(6144, 1024).t()),
    ("K not a multiple of 128", meta(1, 4160), meta(6144, 4160).t()),
    ("64x256 tiles: two 128-deep stages would fit", meta(48, 28672), meta(8192, 28672).t()),
])
def test_other_plans_keep_64_deep_k_blocks(why, x, b):
    _, spec, _ = plan(x, b)
    assert spec.config.tile_k == 64, why


def test_a_callers_config_keeps_its_k_blocks():
    x, w = meta(1, 4096), meta(6144, 4096)
    mode, spec, _ = plan(x, w.t(), config=GemmConfig(tile_m=64, tile_n=16, swap_ab=True))
    assert mode == "swap" and spec.config.tile_k == 64


def test_a_weight_read_before_the_wait_is_the_swapped_kernels_a_and_only_where_it_launches_dependent():
    x, w = meta(4, 4096), meta(14336, 4096)
    mode, spec, _ = plan(x, w.t(), read_before_wait="b")
    assert mode == "swap" and spec.config.dependent_launch and spec.config.read_before_wait == "a"
    x = meta(8192, 8192)  # many waves: launched plainly, so nothing to read early
    _, spec, _ = plan(x, x, read_before_wait="b")
    assert not spec.config.dependent_launch and spec.config.read_before_wait == ""


def test_swap_is_part_of_the_config_a_caller_can_turn_off():
    x, w = meta(4, 4096), meta(14336, 4096)
    mode, spec, problem = plan(x, w.t(), GemmConfig(tile_m=64, tile_n=64, split_k=2))
    assert mode == "direct" and problem == (4, 14336, 1)
    assert (spec.a_major, spec.b_major, spec.d_major) == ("k", "k", "n")


def test_swap_needs_2d_operands_else_it_is_dropped():
    x, w = meta(3, 4, 4096), meta(2048, 4096)  # batched activations: folded, not swapped
    mode, _spec, problem = plan(x, w.t(), GemmConfig(tile_m=128, tile_n=32, swap_ab=True))
    assert mode == "fold" and problem == (12, 2048, 1)


def test_an_output_whose_rows_end_between_16_byte_boundaries_is_computed_into_a_staging_buffer():
    """A TMA store would write such rows past their end (wsgemm.operands.writable_major);
    the same operands with an output that ends its rows on a boundary run directly."""
    a, b = meta(512, 256), meta(256, 1104)
    wide = meta(512, 1104)
    mode, _, _ = plan(a, b[:, :1100], out=wide[:, :1100])
    assert mode == "copy"
    mode, _, _ = plan(a, b[:, :1096], out=wide[:, :1096])
    assert mode == "direct"
    mode, _, _ = plan(a, b[:, :1100])  # a result wsgemm allocates: its odd pitch alone sends it there
    assert mode == "copy"


def test_large_m_is_never_swapped():
    for m in (65, 512, 8192):
        assert not choose_config("sm90", m, 4096, 4096, 1, H200_SMS, can_swap=True).swap_ab
    assert not choose_config("sm90", 1, 4096, 4096, 1, H200_SMS, can_swap=False).swap_ab


@pytest.mark.parametrize("weight_layout", [True, False])
def test_precompile_plans_what_gemm_will_run(weight_layout, monkeypatch):
    built = []
    monkeypatch.setattr(api, "_device_facts", lambda index: ("sm90", H200_SMS, "NVIDIA H200"))

    class FakeCache:
        def __contains__(self, spec):
            return False

        def get(self, spec):
            built.append(spec)
            return type("Compiled", (), {"compile_seconds": 0.0})()

    monkeypatch.setattr(api.compile_mod, "KERNEL_CACHE", FakeCache())
    api.precompile([(1, 4096, 4096), (8192, 4096, 4096)], weight_layout=weight_layout, device="cuda:0",
                   progress=False)
    w = meta(4096, 4096)
    for (m, n, k), spec in zip([(1, 4096, 4096), (8192, 4096, 4096)], built):
        b = w.t() if weight_layout else meta(k, n)
        assert plan(meta(m, k), b, gpu="NVIDIA H200")[1] == spec


def test_measured_winners_are_the_default_on_the_gpu_they_were_measured_on():
    x, w = meta(16, 14336), meta(4096, 14336)  # 8B down projection, M bucket 16
    key = "NVIDIA H200|sm90|bf16->bf16|kkn|m<=16|n=4096|k=14336|l=1"
    measured = autotune.measured_config(key)
    assert measured is not None
    mode, spec, _ = plan(x, w.t(), gpu="NVIDIA H200")
    assert (spec.config.tile_m, spec.config.tile_n, spec.config.split_k) == \
        (measured.tile_m, measured.tile_n, measured.split_k)
    assert mode == ("swap" if measured.swap_ab else "direct")
    # Another GPU, or an unmeasured shape: the model decides.
    assert autotune.measured_config(key.replace("H200", "H100")) is None


def table_fields(m, n, k):
    key = f"NVIDIA H200|sm90|bf16->bf16|kkn|m<={autotune.bucket_bound(m)}|n={n}|k={k}|l=1"
    return MEASURED[key]


def planned_tile(m, n, k):
    config = plan(meta(m, k), meta(n, k).t(), gpu="NVIDIA H200")[1].config
    return config.tile_m, config.tile_n, config.cluster_m


def test_a_winner_whose_waves_do_not_fit_a_smaller_m_gives_way_to_the_model():
    # The M = 2048 winner for 4096x4096 weights: 128x256 tiles in 2x1 clusters, 128
    # of them for 66 slots. At M = 1536 that is 96 clusters (1.45 waves); the model's
    # 128x192 tiles make 132 (two full waves), and ran 1.30x faster on an H200.
    assert table_fields(2048, 4096, 4096).get("tile_n", 256) == 256
    assert planned_tile(2048, 4096, 4096) == (128, 256, 2)  # where it was measured
    assert planned_tile(1536, 4096, 4096) == (128, 192, 2)


def test_a_one_wave_winner_gives_way_over_fewer_tile_rows_and_decode_winners_do_not():
    # M = 512's winner fills one wave with 128 CTAs over 4 tile rows; over the 3 rows
    # of M = 320-384 it would leave 36 SMs idle, and the model's pick serves (NOTES
    # section 31).
    fields = table_fields(512, 4096, 4096)
    expected = (fields.get("tile_m", 128), fields.get("tile_n", 256))
    assert planned_tile(512, 4096, 4096)[:2] == expected
    for m in (320, 384):
        config = choose_config("sm90", m, 4096, 4096, 1, 132, can_swap=True)
        assert planned_tile(m, 4096, 4096)[:2] == (config.tile_m, config.tile_n) != expected
    # M <= 128 (memory-bound): the table's winner, whatever the model says.
    fields = table_fields(128, 6144, 4096)
    assert planned_tile(112, 6144, 4096)[:2] == (fields.get("tile_m", 128), fields.get("tile_n", 256))


def test_a_measured_swap_is_not_applied_where_operands_cannot_swap():
    swapped = [key for key, fields in MEASURED.items() if fields.get("swap_ab")]
    assert swapped, "the table has swapped decode winners"
    key = swapped[0]
    m, n, k, _ = autotune.bucket_shape(key)
    x = meta(1, m, k)  # 3-D activations fold into one M: no swap possible
    mode, spec, _ = plan(x, meta(n, k).t(), gpu="NVIDIA H200")
    assert mode == "fold" and spec.config.tile_n >= 64


def test_the_packaged_table_is_what_the_script_writes_from_the_committed_results():
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    sys.path.insert(0, str(root / "benchmarks"))
    import result_files
    import tuned_table

    packaged = (root / "src" / "wsgemm" / "tuned_table.py").read_text()
    # The table names its sources; each must be a committed autotune report, a file or
    # one moved into its folder's archive.
    runs, newer = tuned_table.read_sources(packaged)
    assert runs[-1] == "benchmarks/results/autotune_h200_g.json.gz"
    archived = result_files.archived(root / "benchmarks" / "results")
    assert all((root / run).is_file() or result_files.report_name(run) in archived for run in runs + newer)
    entries = tuned_table.merge([tuned_table.load_run(root / run) for run in runs],
                                [tuned_table.load_run(root / run) for run in newer])
    source = tuned_table.sources_line([root / run for run in runs], [root / run for run in newer])
    assert tuned_table.render(entries, source) == packaged


def test_merging_autotune_runs_averages_relative_times_of_the_runs_winners():
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
    import tuned_table

    first = {"x": {"config": "a", "ms": {"a": 0.015, "b": 0.016}}, "y": {"config": "c", "ms": {"c": 0.05}}}
    second = {"x": {"config": "b", "ms": {"a": 0.031, "b": 0.030}}, "y": {"config": "d", "ms": {"d": 0.04}}}
    merged = tuned_table.merge([first, second])
    # x: a is 1.000 and 1.033 of each run's fastest, b 1.067 and 1.000: a, although the
    # second run, disturbed (everything twice as slow), picked b. y: each contender
    # timed once, at 1.0: the lower absolute time.
    assert (merged["x"]["config"], merged["y"]["config"]) == ("a", "d")
    third = {"x": {"config": "b", "ms": {"a": 0.0160, "b": 0.0150}}}
    assert tuned_table.merge([first, second, third])["x"]["config"] == "b"
    # A swapped winner too narrow for the bucket's largest M is no contender.
    key = "H200|sm90|bf16->bf16|kkn|m<=128|n=4096|k=4096|l=1"
    narrow = {key: {"config": {"swap_ab": True, "tile_n": 96}, "ms": {"s": 0.010, "p": 0.012}}}
    plain = {key: {"config": {"tile_n": 64}, "ms": {"s": 0.011, "p": 0.010}}}
    assert tuned_table.merge([narrow, plain])[key]["config"] == {"tile_n": 64}
    assert tuned_table.merge([narrow]) == {}
    # The same tile serves the M = 65-96 bucket, which holds no more than 96 tokens.
    key96 = key.replace("m<=128", "m<=96")
    assert tuned_table.merge([{key96: narrow[key]}, {key96: plain[key]}])[key96]["config"]["swap_ab"]
    # A run that timed x in CUDA graphs outranks both single-call runs.
    graphed = {"x": {"config": "c", "ms": {"a": 0.0140, "c": 0.0130}, "timing": "graph"}}
    assert tuned_table.merge([first, second, graphed])["x"]["config"] == "c"
    assert tuned_table.merge([first, second, graphed])["y"]["config"] == "d"
    # A run on a newer kernel decides the buckets it timed alone, even against a
    # graph-timed older run; the older runs still decide the others.
    newer = {"x": {"config": "b", "ms": {"a": 0.0200, "b": 0.0150}}}
    merged = tuned_table.merge([first, second, graphed], [newer])
    assert (merged["x"]["config"], merged["y"]["config"]) == ("b", "d")


def test_the_default_path_launches_decode_plans_and_narrow_unsplit_tiles_as_dependents():
    """``heuristics.with_launch_policy``: programmatic dependent launch for every plan
    of an unbatched problem of at most 1024 tokens and, past that, for unsplit 64-row
    tiles 64 to 128 wide (table, model or autotuner); never for a caller's config,
    nor for larger problems' split-K, narrower or wider tiles."""
    x, w = meta(128, 4096), meta(4096, 4096)  # 8B o-proj, M = 128: the table's 64x64
    _, spec, _ = plan(x, w.t(), gpu="NVIDIA H200")
    assert (spec.config.tile_m, spec.config.tile_n, spec.config.split_k) == (64, 64, 1)
    assert spec.config.dependent_launch
    _, given, _ = plan(x, w.t(), GemmConfig(tile_m=64, tile_n=64), gpu="NVIDIA H200")
    assert not given.config.dependent_launch
    # Decode on the 8B down projection: the table's split swapped 128x16 tile.
    _, split, _ = plan(meta(1, 14336), meta(4096, 14336).t(), gpu="NVIDIA H200")
    assert split.config.split_k > 1 and split.config.dependent_launch
    # Small prefill: the model's two swapped 80-wide token tiles at M = 136, split.
    mode, prefill, _ = plan(meta(136, 4096), meta(4096, 4096).t(), gpu="NVIDIA H200")
    assert mode == "swap" and prefill.config.split_k > 1 and prefill.config.dependent_launch
    _, large, _ = plan(meta(8192, 8192), meta(8192, 8192))
    assert large.config.tile_m == 128 and not large.config.dependent_launch


def test_the_launch_policy_is_sm90_only():
    narrow = GemmConfig(tile_m=64, tile_n=64)
    decode = (128, 4096, 4096, 1, 132)  # 64 tiles of 64x64: less than a wave
    assert with_launch_policy("sm90", narrow, *decode).dependent_launch
    assert not with_launch_policy("sm100", narrow, *decode).dependent_launch


@pytest.mark.parametrize("config", [GemmConfig(tile_m=64, tile_n=256), GemmConfig(tile_m=64, tile_n=16),
                                    GemmConfig(tile_m=64, tile_n=64, split_k=2), GemmConfig(tile_m=128, tile_n=128),
                                    GemmConfig(tile_m=128, tile_n=16, split_k=4)], ids=lambda c: c.short())
def test_dependent_launch_covers_every_plan_up_to_1024_tokens_and_past_it_narrow_unsplit_tiles(config):
    """At most 128 on either side of the kernel problem, or at most 1024 tokens (M, or
    a swapped kernel's N): any plan; at 1025 tokens or in a batch, only unsplit 64-row
    tiles 64 to 128 wide, and none of these."""
    swapped = dataclasses.replace(config, swap_ab=True)
    assert with_launch_policy("sm90", config, 128, 4096, 4096, 1, 132).dependent_launch
    assert with_launch_policy("sm90", config, 4096, 96, 4096, 1, 132).dependent_launch  # N = 96
    assert with_launch_policy("sm90", config, 1024, 4096, 4096, 1, 132).dependent_launch
    assert with_launch_policy("sm90", swapped, 4096, 1024, 4096, 1, 132).dependent_launch  # swapped: N = tokens
    assert not with_launch_policy("sm90", config, 1025, 4096, 4096, 1, 132).dependent_launch
    assert not with_launch_policy("sm90", swapped, 1024, 1025, 4096, 1, 132).dependent_launch
    assert not with_launch_policy("sm90", config, 4096, 4096, 4096, 1, 132).dependent_launch
    assert not with_launch_policy("sm90", config, 64, 4096, 4096, 2, 132).dependent_launch


def test_the_launch_policy_drops_2x1_clusters_over_one_or_three_tile_rows():
    """A 2x1 cluster of 128-row tiles over an odd number of tile rows has a CTA without
    rows in the last cluster row; over 3 rows that ran up to 40 % slower than no
    clusters (NOTES section 25; 2-4 % since the producer skips all-padding boxes),
    over 7 as fast. Whatever chose the config: the table's M <= 512 entry for
    28672x4096 weights (128x224 in 2x1 clusters) runs unclustered at M = 384."""
    pair = GemmConfig(tile_m=128, tile_n=128, cluster_m=2)
    for m in (128, 384, 300):
        assert with_launch_policy("sm90", pair, m, 4096, 4096, 1, 132).cluster_m == 1
    for m in (256, 512, 640, 896):  # even rows, or odd past three
        assert with_launch_policy("sm90", pair, m, 4096, 4096, 1, 132).cluster_m == 2
    swapped = GemmConfig(tile_m=64, tile_n=32, cluster_n=2, swap_ab=True)
    assert with_launch_policy("sm90", swapped, 4096, 48, 4096, 1, 132).cluster_n == 2
    # 64-row tiles keep theirs since the producer skips all-padding boxes (NOTES section 26).
    short = GemmConfig(tile_m=64, tile_n=64, cluster_m=2)
    assert with_launch_policy("sm90", short, 192, 2048, 4096, 1, 132).cluster_m == 2
    x, w = meta(384, 4096), meta(28672, 4096)
    _, spec, _ = plan(x, w.t(), gpu="NVIDIA H200")
    assert (spec.config.tile_m, spec.config.tile_n, spec.config.cluster_m) == (128, 224, 1)
    _, at_512, _ = plan(meta(512, 4096), w.t(), gpu="NVIDIA H200")
    assert at_512.config.cluster_m == 2
    _, given, _ = plan(x, w.t(), pair, gpu="NVIDIA H200")
    assert given.config.cluster_m == 2  # a caller's config runs as given


def test_one_wave_of_64x128_pairs_over_512_rows_or_more_runs_a_7_stage_ring():
    """The CTAs sharing an operand tile stay closer together with a shallower ring, so
    the L2 merges more of their reads (NOTES section 45): one wave of unswapped,
    unsplit 64x128 tiles in 2x1 clusters at M >= 512 runs 7 stages instead of the 9
    that fit, and then has room for four epilogue buffers. Fewer rows, other tiles or
    clusters, a second wave, a shallower ring already and a caller's config keep theirs."""
    pair = GemmConfig(tile_m=64, tile_n=128, cluster_m=2)
    assert with_launch_policy("sm90", pair, 1024, 1024, 4096, 1, 132).stages == 7
    assert with_launch_policy("sm90", pair, 512, 2048, 1024, 1, 132).stages == 7
    assert with_launch_policy("sm90", pair, 384, 2560, 2048, 1, 132).stages is None  # M < 512
    assert with_launch_policy("sm90", pair, 1024, 2048, 4096, 1, 132).stages is None  # 128 units: two waves of 66
    assert with_launch_policy("sm90", dataclasses.replace(pair, stages=6), 1024, 1024, 4096, 1, 132).stages == 6
    for other in (GemmConfig(tile_m=64, tile_n=128, cluster_m=2, cluster_n=2), GemmConfig(tile_m=64, tile_n=128),
                  GemmConfig(tile_m=64, tile_n=96, cluster_m=2), GemmConfig(tile_m=64, tile_n=128, cluster_m=2,
                                                                            split_k=2)):
        assert with_launch_policy("sm90", other, 1024, 1024, 4096, 1, 132).stages is None, other.short()
    assert with_launch_policy("sm100", pair, 1024, 1024, 4096, 1, 132).stages is None
    x, w = meta(1024, 4096), meta(1024, 4096)
    _, spec, _ = plan(x, w.t(), gpu="NVIDIA H200")
    assert (spec.config.tile_m, spec.config.tile_n, spec.config.cluster_m) == (64, 128, 2)
    assert (spec.config.stages, spec.config.epi_stages) == (7, 4)
    _, given, _ = plan(x, w.t(), pair, gpu="NVIDIA H200")
    assert given.config.stages != 7  # a caller's config runs as given


def test_one_wave_of_64x128_tiles_over_512_rows_or_more_takes_clusters_of_eight_where_they_fit():
    """The H200 holds 15 clusters of 8 (NOTES section 45): where 96-120 tiles make one
    wave of 2x4 or 4x2 clusters, that replaces the 2x1 or 2x2 clusters, the
    orientation that pads less (2x4 on a tie). Not at M < 512, on 128 tiles (16
    clusters of 8), on fewer than 96 tiles, in a batch, nor with other tiles; the
    7-stage ring is for 2x1 clusters only."""
    def clusters(config, m, n, k=4096, batches=1):
        launched = with_launch_policy("sm90", config, m, n, k, batches, 132)
        return launched.cluster_m, launched.cluster_n, launched.stages

    pair, four = GemmConfig(tile_m=64, tile_n=128, cluster_m=2), GemmConfig(tile_m=64, tile_n=128, cluster_m=2,
                                                                            cluster_n=2)
    assert clusters(pair, 640, 1536) == clusters(four, 640, 1536) == (2, 4, None)  # 10 x 12 tiles: 5 x 3 clusters
    assert clusters(pair, 768, 1280) == (4, 2, None)  # 12 x 10 tiles: 3 x 5 clusters; 2x4 would need 6 x 3
    assert clusters(pair, 640, 1280, 2048) == (2, 4, None)  # 10 x 10: both pad to 15 clusters
    assert clusters(pair, 1024, 1024) == (2, 1, 7)  # 16 x 8 tiles: 16 clusters of 8, a second wave
    assert clusters(pair, 384, 2560, 2048) == (2, 1, None)  # M < 512
    assert clusters(pair, 512, 1408) == (2, 1, 7)  # 88 tiles: under 80 % of 15 clusters of 8
    assert clusters(pair, 512, 1536) == (2, 4, None)  # 96 tiles
    assert clusters(pair, 640, 1536, batches=2) == (2, 1, None)
    assert clusters(GemmConfig(tile_m=64, tile_n=96, cluster_m=2), 640, 1536)[:2] == (2, 1)
    assert clusters(GemmConfig(tile_m=64, tile_n=128), 640, 1536)[:2] == (1, 1)  # unclustered: as chosen
    x, w = meta(640, 4096), meta(1536, 4096)
    _, spec, _ = plan(x, w.t(), gpu="NVIDIA H200")
    assert (spec.config.tile_m, spec.config.tile_n, spec.config.cluster_m, spec.config.cluster_n) == (64, 128, 2, 4)
    _, given, _ = plan(x, w.t(), pair, gpu="NVIDIA H200")
    assert (given.config.cluster_m, given.config.cluster_n) == (2, 1)  # a caller's config runs as given


def test_one_wave_of_swapped_256_row_tiles_beside_one_token_tile_runs_in_clusters_of_four():
    """Every CTA reads the one token tile; clusters of 4 along the weight multicast it
    to 4 CTAs instead of 2, as cuBLAS runs these tiles (NOTES section 46). Only where
    the clusters of 4 make one wave of whole clusters, for pairs of unsplit 256-row
    tiles; 192-row tiles, a second token tile and a caller's config keep theirs."""
    def clusters(config, weight_rows, tokens, k=4096):
        launched = with_launch_policy("sm90", config, weight_rows, tokens, k, 1, 132)
        return launched.cluster_m, launched.cluster_n

    tall = GemmConfig(tile_m=256, tile_n=144, cluster_m=2, swap_ab=True)
    assert clusters(tall, 28672, 136) == (4, 1)  # 112 weight tiles: 28 clusters of 4
    assert clusters(tall, 16384, 136) == (4, 1)  # 64 tiles
    assert clusters(tall, 28160, 136) == (2, 1)  # 110 tiles: the last cluster of 4 half empty
    assert clusters(tall, 32768, 136) == (2, 1)  # 128 tiles: 32 clusters of 4, 30 fit
    assert clusters(tall, 28672, 200) == (2, 1)  # two token tiles
    assert clusters(dataclasses.replace(tall, split_k=2), 28672, 136) == (2, 1)
    assert clusters(dataclasses.replace(tall, tile_m=192), 24576, 136) == (2, 1)
    assert clusters(dataclasses.replace(tall, swap_ab=False), 28672, 136) == (2, 1)
    assert clusters(dataclasses.replace(tall, cluster_m=1), 28672, 136) == (1, 1)
    x, w = meta(136, 4096), meta(28672, 4096)
    mode, spec, _ = plan(x, w.t(), gpu="NVIDIA H200")
    assert mode == "swap" and (spec.config.tile_m, spec.config.cluster_m, spec.config.cluster_n) == (256, 4, 1)
    _, given, _ = plan(x, w.t(), tall, gpu="NVIDIA H200")
    assert given.config.cluster_m == 2  # a caller's config runs as given


def test_the_launch_policy_streams_the_last_wave_of_long_runs_only():
    """Stream-K from six whole waves up, when the last wave is partial (8192^3 in
    128x256 tiles paired by 2x1 clusters: 512 units on 66 clusters, 7 waves and 50
    left over); never with fewer waves, a full last wave, a k-loop under 64 k-blocks,
    a split config or on sm100."""
    pair = GemmConfig(tile_m=128, tile_n=256, cluster_m=2)
    streamed = with_launch_policy("sm90", pair, 8192, 8192, 8192, 1, 132)
    assert streamed.stream_k and not streamed.dependent_launch
    assert not with_launch_policy("sm90", pair, 2048, 4096, 4096, 1, 132).stream_k  # 128 units: 1 wave + 62
    assert not with_launch_policy("sm90", pair, 128 * 2 * 66, 256 * 6, 4096, 1, 132).stream_k  # 6 full waves
    # Short k-loops: the fp32 fix-up costs more than the idle wave (NOTES section 18).
    assert not with_launch_policy("sm90", pair, 8192, 8192, 2048, 1, 132).stream_k
    assert with_launch_policy("sm90", pair, 8192, 8192, 4096, 1, 132).stream_k
    # K too long for the kernel's 32-bit stream-K arithmetic: left whole, not an error.
    assert not with_launch_policy("sm90", pair, 8192, 8192, 2**26, 1, 132).stream_k
    assert not with_launch_policy("sm90", GemmConfig(split_k=2), 8192, 8192, 8192, 1, 132).stream_k
    assert not with_launch_policy("sm100", pair, 8192, 8192, 8192, 1, 132).stream_k
    x, w = meta(8192, 8192), meta(8192, 8192)
    _, spec, _ = plan(x, w.t(), gpu="NVIDIA H200")
    assert spec.config.stream_k and spec.config.tile_n == 256
    _, given, _ = plan(x, w.t(), GemmConfig(tile_m=128, tile_n=256, cluster_m=2), gpu="NVIDIA H200")
    assert not given.config.stream_k


def test_short_k_plans_get_spare_epilogue_buffers_and_a_callers_config_does_not():
    """8192x8192x2048 writes a 64 KB output tile per 32 k-blocks: the chosen 128x256
    tile gets four epilogue buffers (NOTES section 18); a caller's config is used as
    given."""
    a, b = meta(8192, 2048), meta(2048, 8192)
    _, spec, _ = plan(a, b, gpu="NVIDIA H200")
    assert (spec.config.tile_n, spec.config.stages, spec.config.epi_stages, spec.config.pingpong) == (256, 4, 4, False)
    _, given, _ = plan(a, b, GemmConfig(tile_m=128, tile_n=256, cluster_m=2), gpu="NVIDIA H200")
    assert given.config.epi_stages == 2


def test_the_launch_policy_runs_short_k_loops_on_pingpong_consumers():
    """Up to 24 k-blocks, unbatched, two waves of tiles or more: the chosen config's
    ping-pong variant (128x256 -> 128x192 or 128x128, the cluster kept; NOTES section
    19), which the plan then gives three epilogue buffers per warpgroup beside a
    five-stage ring (NOTES section 20). Not at 25 k-blocks, not for
    batched problems or a single wave, not for split tiles, never for a caller's
    config or on sm100."""
    pair = GemmConfig(tile_m=128, tile_n=256, cluster_m=2)
    short = with_launch_policy("sm90", pair, 8192, 8192, 24 * 64, 1, 132)
    assert short == GemmConfig(tile_m=128, tile_n=192, cluster_m=2, pingpong=True)
    assert with_launch_policy("sm90", GemmConfig(tile_m=64, tile_n=256), 8192, 8192, 128, 1, 132).pingpong
    assert not with_launch_policy("sm90", pair, 8192, 8192, 24 * 64 + 1, 1, 132).pingpong
    assert not with_launch_policy("sm90", pair, 8192, 8192, 256, 8, 132).pingpong  # batched
    # 1024x4096 in 128x192 or 128x128 tiles paired along M: 88 or 128 units, under two
    # waves of 66 clusters.
    assert not with_launch_policy("sm90", pair, 1024, 4096, 256, 1, 132).pingpong
    assert with_launch_policy("sm90", pair, 2048, 4096, 256, 1, 132).pingpong
    assert not with_launch_policy("sm90", GemmConfig(split_k=2), 8192, 8192, 256, 1, 132).pingpong
    assert not with_launch_policy("sm100", pair, 8192, 8192, 256, 1, 132).pingpong
    a, b = meta(8192, 256), meta(256, 8192)
    _, spec, _ = plan(a, b, gpu="NVIDIA H200")
    assert spec.config == GemmConfig(tile_m=128, tile_n=192, cluster_m=2, stages=5, epi_stages=3, pingpong=True)
    _, given, _ = plan(a, b, pair, gpu="NVIDIA H200")
    assert not given.config.pingpong and given.config.tile_n == 256
    # Ping-pong tiles are never streamed: their pieces would have to meet in a workspace.
    assert not with_launch_policy("sm90", short, 8192, 8192, 8192, 1, 132).stream_k


def test_one_wave_long_k_loops_run_one_warpgroup_per_128x128_tile():
    """32 k-blocks or more, unbatched, and 128x128 tiles that fill one wave of 2x1
    clusters (at least 90 % of the CTAs): ping-pong consumers with one tile per CTA,
    whatever tile was chosen (NOTES section 21). Not at 31 k-blocks, not when the
    tiles leave SMs idle or need a second wave, not for swapped or batched problems."""
    solo = GemmConfig(tile_m=128, tile_n=128, cluster_m=2, pingpong=True)
    split = GemmConfig(tile_m=128, tile_n=256, cluster_m=2, split_k=2)
    assert with_launch_policy("sm90", split, 512, 4096, 32 * 64, 1, H200_SMS) == solo
    assert with_launch_policy("sm90", GemmConfig(tile_n=160), 1024, 1920, 14336, 1, H200_SMS) == solo  # 120 tiles
    kept = with_launch_policy("sm90", split, 512, 4096, 31 * 64, 1, H200_SMS)
    assert dataclasses.replace(kept, dependent_launch=False) == split  # (M = 512 launches dependent)
    assert not with_launch_policy("sm90", split, 256, 4096, 14336, 1, H200_SMS).pingpong  # 64 tiles
    assert not with_launch_policy("sm90", split, 512, 4480, 14336, 1, H200_SMS).pingpong  # 140 tiles
    assert not with_launch_policy("sm90", split, 64, 8192, 28672, 1, H200_SMS).pingpong  # 64 rows: 64 tiles
    assert not with_launch_policy("sm90", split, 512, 4096, 14336, 2, H200_SMS).pingpong
    swapped = GemmConfig(tile_m=128, tile_n=128, swap_ab=True)
    assert not with_launch_policy("sm90", swapped, 4096, 512, 14336, 1, H200_SMS).pingpong
    assert not with_launch_policy("sm100", split, 512, 4096, 14336, 1, H200_SMS).pingpong
    # The default path, through the plan: the 8B down projection at M = 512, with the
    # four epilogue buffers per warpgroup that keep its six stages.
    _, spec, _ = plan(meta(512, 14336), meta(4096, 14336).t(), gpu="NVIDIA H200")
    assert (spec.config.tile_n, spec.config.pingpong, spec.config.stages, spec.config.epi_stages) == (128, True, 6, 4)


def test_m_65_to_96_is_planned_from_its_own_table_bucket():
    """96 tokens fill one swapped 96-wide tile; 128 would need a second, mostly empty
    one, so M = 65-96 has a bucket of its own (NOTES section 17). The packaged table
    has different winners for the two buckets of the 8B o-proj, and each M gets its own."""
    w = meta(4096, 4096)  # Llama-3 8B o-proj
    winners = {}
    for m in (96, 128):
        fields = MEASURED[f"NVIDIA H200|sm90|bf16->bf16|kkn|m<={m}|n=4096|k=4096|l=1"]
        mode, spec, _ = plan(meta(m, 4096), w.t(), gpu="NVIDIA H200")
        assert mode == ("swap" if fields.get("swap_ab") else "direct")
        shape = ("tile_m", "tile_n", "cluster_m", "cluster_n", "split_k")
        assert all(getattr(spec.config, name) == fields.get(name, getattr(GemmConfig(), name)) for name in shape)
        winners[m] = fields
    assert winners[96] != winners[128]
    assert autotune.bucket_bound(96) == 96 and autotune.bucket_bound(97) == 128


def test_a_cached_direct_plan_allocates_a_result_of_as_dtype_with_new_empty():
    """``a.new_empty`` parses no dtype or device (0.45 us less per call on the H200's
    host, NOTES section 17); a result of another dtype still gets ``torch.empty``."""
    from wsgemm import config as cfg

    launched = []
    kernel = lambda a, b, d, clusters: launched.append((d.shape, d.dtype, clusters))
    spec = cfg.make_spec("sm90", "bf16", "bf16", "k", "k", "n", GemmConfig())
    a, b = torch.randn(48, 32, dtype=bf16), torch.randn(32, 80, dtype=bf16)
    same = api.Plan("direct", (48, 80), bf16, a.device, kernel, 3, spec)
    d = same.run(a, b, None)
    assert same.run.__name__ == "run_like_a" and (d.shape, d.dtype, d.is_contiguous()) == ((48, 80), bf16, True)
    fp32_spec = cfg.make_spec("sm90", "bf16", "fp32", "k", "k", "n", GemmConfig())
    other = api.Plan("direct", (48, 80), torch.float32, a.device, kernel, 3, fp32_spec)
    d32 = other.run(a, b, None)
    assert other.run.__name__ == "run" and d32.dtype == torch.float32
    assert launched == [((48, 80), bf16, 3), ((48, 80), torch.float32, 3)]


def test_plans_switch_devices_only_with_several_gpus_and_only_when_another_is_current(monkeypatch):
    """The kernel launches on the current device's stream, so a plan for GPU 1 runs
    with GPU 1 current; on a one-GPU host the plan's run skips that check."""
    import contextlib

    switched = []
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "device", lambda d: contextlib.nullcontext(switched.append(d)))
    a, b = torch.randn(4, 8, dtype=bf16), torch.randn(8, 6, dtype=bf16)
    out = torch.full((4, 6), float("nan"), dtype=bf16)
    for several in (False, True):
        monkeypatch.setattr(api, "_several_gpus", lambda several=several: several)
        for index in (0, 1):
            plan = api.Plan("trivial", (4, 6), bf16, torch.device("cuda", index))
            assert plan.run(a, b, out) is out and not out.any()
            out.fill_(float("nan"))
    assert switched == [torch.device("cuda", 1)]


def test_long_grids_walk_in_raster_bands_whatever_was_chosen():
    """M >= 8192 at K >= 4096 over 16 or more cluster columns: a configuration that
    would walk all of M before moving along N walks in bands of 8 cluster columns
    (NOTES section 35: back to back, the re-reads of A cost clock at the H200's power
    limit). A band width already chosen is kept; shorter M or K, narrow grids,
    swapped and batched problems keep what was chosen; a caller's config is used as
    given."""
    pair = GemmConfig(tile_m=128, tile_n=224, cluster_m=2)
    banded = with_launch_policy("sm90", pair, 16384, 10240, 8192, 1, 132)
    assert (banded.swizzle, banded.tile_n, banded.cluster_m) == (8, 224, 2)
    assert with_launch_policy("sm90", GemmConfig(tile_m=128, tile_n=256), 8192, 8192, 4096, 1, 132).swizzle == 8
    assert with_launch_policy("sm90", GemmConfig(tile_m=128, tile_n=256, swizzle=4), 16384, 8192, 8192, 1,
                              132).swizzle == 4
    unchanged = [
        (pair, 4096, 10240, 8192, 1),  # M = 4096: bands within -1.0 to +0.7 % there
        (pair, 16384, 10240, 2048, 1),  # 32 k-blocks
        (pair, 16384, 2048, 8192, 1),  # 10 cluster columns
        (pair, 16384, 10240, 8192, 2),  # batched
        (GemmConfig(tile_m=128, tile_n=224, cluster_m=2, swap_ab=True), 16384, 10240, 8192, 1),
    ]
    for config, m, n, k, batches in unchanged:
        assert with_launch_policy("sm90", config, m, n, k, batches, 132).swizzle == 1, (m, n, k, batches)
    x, w = meta(16384, 8192), meta(10240, 8192)
    assert plan(x, w.t(), gpu="NVIDIA H200")[1].config.swizzle == 8
    assert plan(x, w.t(), pair, gpu="NVIDIA H200")[1].config.swizzle == 1


def test_bucket_key_for_names_the_bucket_a_default_call_looks_up():
    """Tools off the GPU (benchmarks/retune_sustained.py) get a bucket from the operands
    themselves, so how each layout maps onto kernel modes lives in wsgemm.api alone."""
    def key(majors, m, n, k, batches=1):
        return autotune.bucket_key("NVIDIA H200", "sm90", "bf16", "bf16", majors, m, n, k, batches)

    x, w = meta(16384, 8192), meta(10240, 8192)
    assert api.bucket_key_for(x, w.t(), gpu="NVIDIA H200") == key(("k", "k", "n"), 16384, 10240, 8192)
    assert api.bucket_key_for(x, meta(8192, 10240), gpu="NVIDIA H200") == key(("k", "n", "n"), 16384, 10240, 8192)
    # Batched activations over one weight fold into one M (3 x 100 rows: bucket 512).
    folded = api.bucket_key_for(meta(3, 100, 4096), meta(2048, 4096).t(), gpu="NVIDIA H200")
    assert folded == key(("k", "k", "n"), 300, 2048, 4096) == key(("k", "k", "n"), 512, 2048, 4096)
    # The output's dtype is part of the bucket.
    fp32 = api.bucket_key_for(x, w.t(), out_dtype=torch.float32, gpu="NVIDIA H200")
    assert fp32 == autotune.bucket_key("NVIDIA H200", "sm90", "bf16", "fp32", ("k", "k", "n"), 16384, 10240, 8192, 1)
