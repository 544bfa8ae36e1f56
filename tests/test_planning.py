"""How a call is planned, on meta tensors (no GPU): which kernel problem, majors and
mode ``wsgemm.plans`` derives, including the operand swap for decode shapes, and how
it runs what ``wsgemm.tuning.select`` chose (the packaged table's winners on the GPU
they were measured on, the launch rules, a caller's config as given).

The planner itself (candidates, cost model, ranking, the table's lookup) has its own
tests in tests/test_tuning.py."""

import dataclasses
import json

import pytest
import torch

from wsgemm import GemmConfig, api, devices, plans
from wsgemm import config as cfg
from wsgemm.tuning import H100_SXM, H200, Problem, autotune, best, launch, select, sm100_default, table

bf16 = torch.bfloat16
# An H200's numbers but for its HBM bandwidth: the packaged table has nothing measured
# for it, so the cost model decides.
UNMEASURED = dataclasses.replace(H200, hbm_peak_bytes_per_s=4.8e12, name="a GPU without measurements")
BLACKWELL = dataclasses.replace(H200, arch="sm100", sms=148, name="NVIDIA B200")


@pytest.fixture(autouse=True)
def no_autotune_cache(tmp_path, monkeypatch):
    """Plans here come from the packaged table or the cost model, never from winners
    this machine's autotuner remembered."""
    monkeypatch.setenv("WSGEMM_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(autotune, "_memory", None)


def plan(a, b, config=None, out=None, gpu=UNMEASURED, read_before_wait=""):
    shape, dtype, batched, batches = plans.validate_shapes_and_dtypes(a, b, out, None, config)
    return plans._kernel_for(a, b, out, None, config, shape, dtype, batched, batches, gpu, read_before_wait)


def meta(*shape):
    return torch.empty(*shape, dtype=bf16, device="meta")


def weights(m, n, k):
    """The problem of ``x @ w.t()`` for (m, k) activations and an (n, k) weight."""
    return Problem(m, n, k, can_swap=True)


def packaged_entries(gpu=H200) -> dict:
    """The packaged table's entries for ``gpu`` (src/wsgemm/tuning/tables/sm90.json),
    keyed by shape bucket."""
    entries = {}
    for t in json.loads((table.TABLES / "sm90.json").read_text())["tables"]:
        if t["gpu"] == gpu.table_key:
            entries.update(t.get("entries", {}))
    return entries


def table_fields(m, n, k):
    return packaged_entries()[table.bucket(weights(m, n, k))]


SHAPE_FIELDS = ("tile_m", "tile_n", "cluster_m", "cluster_n", "split_k", "swap_ab")


def shape_of(config: GemmConfig) -> tuple:
    return tuple(getattr(config, name) for name in SHAPE_FIELDS)


def fields_shape(fields: dict) -> tuple:
    return tuple(fields.get(name, getattr(GemmConfig(), name)) for name in SHAPE_FIELDS)


def planned_shape(m, n, k, gpu=H200) -> tuple:
    """(tile_m, tile_n, cluster_m, cluster_n, split_k, swap_ab) a default call plans
    for ``x @ w.t()`` (``swap_ab``: the plan's mode is "swap")."""
    mode, spec, _ = plan(meta(m, k), meta(n, k).t(), gpu=gpu)
    return shape_of(dataclasses.replace(spec.config, swap_ab=mode == "swap"))


# ----------------------------------------------------------------------------- mechanics


def test_the_table_has_nothing_for_the_unmeasured_gpu_and_the_h200s_key_matches_it():
    assert H200.table_key == "sm90/132sm/4.9TBps" and packaged_entries()
    assert UNMEASURED.table_key != H200.table_key and not packaged_entries(UNMEASURED)


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
    ring's stages (``wsgemm.tuning.launch.deep_k_blocks_for_decode``;
    docs/tuning-log/decode.md). The H200's table swaps all of these into 16 or 32
    token columns."""
    x, w = meta(tokens, k), meta(n, k).t()
    mode, spec, _ = plan(x, w, gpu=H200)
    assert mode == "swap" and spec.config.tile_n <= 32 and (spec.a_major, spec.b_major) == ("k", "k")
    # The ring the rule halves: the chosen tile's, 64 deep, with the epilogue buffers it had then.
    chosen = select(weights(tokens, n, k), H200)
    shallow = dataclasses.replace(chosen, tile_k=64, stages=None, epi_stages=GemmConfig().epi_stages, swap_ab=False)
    ring = cfg.smem_budget(cfg.make_spec("sm90", "bf16", "bf16", "k", "k", "n", shallow)).stages
    assert spec.config.tile_k == 128 and spec.config.stages == ring // 2


def test_one_unclustered_row_of_64_token_rows_streams_the_weight_in_128_deep_k_blocks():
    mode, spec, _ = plan(meta(48, 4096), meta(28672, 4096).t(), gpu=H200)
    assert mode == "direct" and (spec.config.tile_m, spec.config.cluster_m, spec.config.cluster_n) == (64, 1, 1)
    assert (spec.a_major, spec.b_major) == ("k", "k") and spec.config.tile_k == 128


@pytest.mark.parametrize("why, x, b", [
    ("two rows of token tiles, in clusters", meta(65, 4096), meta(4096, 4096).t()),
    ("an M-major weight (B given row-major)", meta(1, 4096), meta(4096, 6144)),
    ("M-major tokens", meta(4096, 48).t(), meta(28672, 4096).t()),
    ("a 64x48 token tile", meta(48, 4096), meta(6144, 4096).t()),
    ("K = 1024", meta(1, 1024), meta(6144, 1024).t()),
    ("K not a multiple of 128", meta(1, 4160), meta(6144, 4160).t()),
])
@pytest.mark.parametrize("gpu", [H200, UNMEASURED], ids=["H200", "unmeasured"])
def test_other_plans_keep_64_deep_k_blocks(why, x, b, gpu):
    _, spec, _ = plan(x, b, gpu=gpu)
    assert spec.config.tile_k == 64, why


def test_a_wide_token_tile_keeps_64_deep_k_blocks_where_halving_its_ring_leaves_too_few_stages():
    """64x256 tiles fit 5 stages at 64 deep: 128 deep, two would be left."""
    wide = GemmConfig(tile_m=64, tile_n=256)
    assert launch.deep_k_blocks_for_decode(Problem(48, 8192, 28672), wide, H200).tile_k == 64
    narrower = GemmConfig(tile_m=64, tile_n=224)
    assert launch.deep_k_blocks_for_decode(Problem(48, 28672, 4096), narrower, H200).tile_k == 128


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


@pytest.mark.parametrize("gpu", [H200, H100_SXM, UNMEASURED], ids=["H200", "H100", "unmeasured"])
def test_large_m_is_never_swapped(gpu):
    """From 512 tokens up the weight's rows stay the kernel's N, whatever chose the plan;
    operands that cannot swap (3-D, copied) never do."""
    for n, k in [(4096, 4096), (6144, 4096), (28672, 4096), (4096, 14336), (8192, 8192), (57344, 8192)]:
        for m in (512, 1024, 2048, 8192):
            assert not select(weights(m, n, k), gpu).swap_ab, (m, n, k)
    for m in (1, 16, 64):
        assert not select(Problem(m, 4096, 4096, can_swap=False), gpu).swap_ab


def test_the_problem_a_call_is_planned_for_names_its_layout_and_bucket(monkeypatch):
    """What ``tuning.select`` is asked about: the kernel's own problem, with the majors
    each layout maps onto (so a bucket of the table or the autotune cache)."""
    asked = []

    def spy(problem, gpu, config=None, trial=None):
        asked.append(problem)
        return select(problem, gpu, config, trial=trial)

    monkeypatch.setattr(plans.tuning, "select", spy)

    def bucket_of(a, b, out_dtype=None):
        shape, dtype, batched, batches = plans.validate_shapes_and_dtypes(a, b, None, out_dtype, None)
        plans._kernel_for(a, b, None, out_dtype, None, shape, dtype, batched, batches, H200)
        return table.bucket(asked[-1])

    x, w = meta(16384, 8192), meta(10240, 8192)
    assert bucket_of(x, w.t()) == "bf16->bf16|kkn|m<=16384|n=10240|k=8192|l=1"
    assert asked[-1].can_swap
    assert bucket_of(x, meta(8192, 10240)) == "bf16->bf16|knn|m<=16384|n=10240|k=8192|l=1"
    # Batched activations over one weight fold into one M (3 x 100 rows: bucket 512), unswappable.
    assert bucket_of(meta(3, 100, 4096), meta(2048, 4096).t()) == "bf16->bf16|kkn|m<=512|n=2048|k=4096|l=1"
    assert asked[-1].m == 300 and not asked[-1].can_swap
    # The output's dtype is part of the bucket.
    assert bucket_of(x, w.t(), out_dtype=torch.float32) == "bf16->fp32|kkn|m<=16384|n=10240|k=8192|l=1"
    assert bucket_of(meta(2, 64, 512), meta(2, 512, 256)) == "bf16->bf16|knn|m<=64|n=256|k=512|l=2"


@pytest.mark.parametrize("weight_layout", [True, False])
def test_precompile_plans_what_gemm_will_run(weight_layout, monkeypatch):
    built = []
    monkeypatch.setattr(devices, "gpu", lambda index: H200)

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
    assert len(built) == 2
    for (m, n, k), spec in zip([(1, 4096, 4096), (8192, 4096, 4096)], built):
        b = w.t() if weight_layout else meta(k, n)
        assert plan(meta(m, k), b, gpu=H200)[1] == spec


def test_a_cached_direct_plan_allocates_a_result_of_as_dtype_with_new_empty():
    """``a.new_empty`` parses no dtype or device (0.45 us less per call on the H200's
    host, docs/tuning-log/tile-shapes.md); a result of another dtype still gets
    ``torch.empty``."""
    launched = []
    kernel = lambda a, b, d, clusters: launched.append((d.shape, d.dtype, clusters))  # noqa: E731
    spec = cfg.make_spec("sm90", "bf16", "bf16", "k", "k", "n", GemmConfig())
    a, b = torch.randn(48, 32, dtype=bf16), torch.randn(32, 80, dtype=bf16)
    same = plans.Plan("direct", (48, 80), bf16, a.device, kernel, 3, spec)
    d = same.run(a, b, None)
    assert same.run.__name__ == "run_like_a" and (d.shape, d.dtype, d.is_contiguous()) == ((48, 80), bf16, True)
    fp32_spec = cfg.make_spec("sm90", "bf16", "fp32", "k", "k", "n", GemmConfig())
    other = plans.Plan("direct", (48, 80), torch.float32, a.device, kernel, 3, fp32_spec)
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
        monkeypatch.setattr(devices, "several_gpus", lambda several=several: several)
        for index in (0, 1):
            p = plans.Plan("trivial", (4, 6), bf16, torch.device("cuda", index))
            assert p.run(a, b, out) is out and not out.any()
            out.fill_(float("nan"))
    assert switched == [torch.device("cuda", 1)]


# ------------------------------------------------------- what the plan runs: the table


def test_measured_winners_are_the_default_on_the_gpu_they_were_measured_on():
    x, w = meta(16, 14336), meta(4096, 14336)  # 8B down projection, M bucket 16
    measured = table.winner(weights(16, 4096, 14336), H200)
    assert measured is not None
    assert fields_shape(table_fields(16, 4096, 14336)) == shape_of(measured)
    assert planned_shape(16, 4096, 14336) == shape_of(measured)
    # Another GPU: the model decides.
    assert table.winner(weights(16, 4096, 14336), H100_SXM) is None
    assert table.winner(weights(16, 4096, 14336), UNMEASURED) is None


def test_plans_run_what_the_planner_selects():
    """Whatever chose it (table or cost model), the plan runs ``tuning.select``'s
    answer, in the mode its orientation asks for."""
    for m, n, k in [(1, 4096, 4096), (16, 4096, 14336), (96, 4096, 4096), (136, 4096, 4096), (512, 4096, 4096),
                    (1536, 4096, 4096), (2048, 4096, 4096), (8192, 8192, 8192)]:
        for gpu in (H200, UNMEASURED):
            assert planned_shape(m, n, k, gpu) == shape_of(select(weights(m, n, k), gpu)), (m, n, k, gpu.name)


def test_a_winner_whose_waves_do_not_fit_a_smaller_m_gives_way_to_the_model():
    """The M = 2048 winner for 4096x4096 weights: 128x256 tiles in 2x1 clusters, 128
    of them for 66 slots. At M = 1900 its 15 tile rows make the same 128 clusters,
    and it serves; at M = 1536 it would make 96 (1.45 waves), and the cost model
    chooses (docs/tuning-log/packaged-table.md)."""
    assert fields_shape(table_fields(2048, 4096, 4096))[:3] == (128, 256, 2)
    assert planned_shape(2048, 4096, 4096)[:3] == (128, 256, 2)  # where it was measured
    assert planned_shape(1900, 4096, 4096)[:3] == (128, 256, 2)
    assert table.winner(weights(1536, 4096, 4096), H200) is None
    assert planned_shape(1536, 4096, 4096) == shape_of(best(weights(1536, 4096, 4096), H200))
    assert planned_shape(1536, 4096, 4096)[:3] != (128, 256, 2)


def test_a_one_wave_winner_gives_way_over_fewer_tile_rows_and_decode_winners_do_not():
    """M = 512's winner fills one wave with 128 CTAs over 4 tile rows; over the 3 rows
    of M = 320-384 it would leave SMs idle, and the model's pick serves
    (docs/tuning-log/packaged-table.md). At M <= 128 (memory-bound, where the model
    ranks least well) the table's winner serves its bucket whatever the model says."""
    expected = fields_shape(table_fields(512, 4096, 4096))
    assert planned_shape(512, 4096, 4096) == expected
    for m in (320, 384):
        assert table.winner(weights(m, 4096, 4096), H200) is None
        assert planned_shape(m, 4096, 4096) == shape_of(best(weights(m, 4096, 4096), H200)) != expected
    fields = table_fields(128, 6144, 4096)
    for m in (97, 112, 128):
        assert planned_shape(m, 6144, 4096) == fields_shape(fields), m


def test_a_measured_swap_is_not_applied_where_operands_cannot_swap():
    swapped = [key for key, fields in packaged_entries().items() if fields.get("swap_ab")]
    assert swapped, "the table has swapped decode winners"
    for key in swapped[:4]:
        _, majors, bound, n, k, _ = key.split("|")
        m, n, k = int(bound.removeprefix("m<=")), int(n.removeprefix("n=")), int(k.removeprefix("k="))
        assert table.winner(Problem(m, n, k, can_swap=False), H200) is None
        x = meta(1, m, k)  # 3-D activations fold into one M: no swap possible
        mode, spec, _ = plan(x, meta(n, k).t(), gpu=H200)
        assert mode == "fold" and not spec.config.swap_ab


def test_m_65_to_96_is_planned_from_its_own_table_bucket():
    """96 tokens fill one swapped 96-wide tile; 128 would need a second, mostly empty
    one, so M = 65-96 has a bucket of its own (docs/tuning-log/tile-shapes.md). The
    packaged table has different winners for the two buckets of the 8B o-proj, and
    each M gets its own."""
    winners = {}
    for m in (96, 128):
        fields = table_fields(m, 4096, 4096)
        assert planned_shape(m, 4096, 4096) == fields_shape(fields)
        winners[m] = fields
    assert winners[96] != winners[128]
    assert table.bucket_bound(65) == table.bucket_bound(96) == 96 and table.bucket_bound(97) == 128


# --------------------------------------------------- what the plan runs: the launch rules


def test_the_default_path_launches_decode_plans_and_narrow_unsplit_tiles_as_dependents():
    """``tuning.launch.dependent_launch``: programmatic dependent launch for every plan
    of an unbatched problem of at most 1024 tokens (table, model or autotuner); never
    for a caller's config, nor for large problems."""
    x, w = meta(128, 4096), meta(4096, 4096)  # 8B o-proj, M = 128: the table's 64x64
    _, spec, _ = plan(x, w.t(), gpu=H200)
    assert (spec.config.tile_m, spec.config.tile_n, spec.config.split_k) == (64, 64, 1)
    assert spec.config.dependent_launch
    _, given, _ = plan(x, w.t(), GemmConfig(tile_m=64, tile_n=64), gpu=H200)
    assert not given.config.dependent_launch
    # Decode on the 8B down projection: the table's split swapped 128x16 tile.
    _, split, _ = plan(meta(1, 14336), meta(4096, 14336).t(), gpu=H200)
    assert split.config.split_k > 1 and split.config.dependent_launch
    # Small prefill, whatever the model chooses at M = 136.
    for gpu in (H200, UNMEASURED):
        _, prefill, _ = plan(meta(136, 4096), meta(4096, 4096).t(), gpu=gpu)
        assert prefill.config.dependent_launch
    _, large, _ = plan(meta(8192, 8192), meta(8192, 8192))
    assert large.config.tile_m == 128 and not large.config.dependent_launch


def test_the_launch_rules_are_sm90_only():
    narrow = GemmConfig(tile_m=64, tile_n=64)
    decode = Problem(128, 4096, 4096)  # 64 tiles of 64x64: less than a wave
    assert launch.as_launched(decode, narrow, H200).dependent_launch
    assert launch.as_launched(decode, narrow, BLACKWELL) == narrow
    # On sm100 the default is CUTLASS's shape, launched as it is.
    chosen = select(weights(128, 4096, 4096), BLACKWELL)
    assert chosen == sm100_default(weights(128, 4096, 4096), BLACKWELL)
    assert not chosen.dependent_launch and not chosen.swap_ab
    _, spec, _ = plan(meta(128, 4096), meta(4096, 4096).t(), gpu=BLACKWELL)
    assert not spec.config.dependent_launch and spec.arch == "sm100"


@pytest.mark.parametrize("config", [GemmConfig(tile_m=64, tile_n=256), GemmConfig(tile_m=64, tile_n=16),
                                    GemmConfig(tile_m=64, tile_n=64, split_k=2), GemmConfig(tile_m=128, tile_n=128),
                                    GemmConfig(tile_m=128, tile_n=16, split_k=4)], ids=lambda c: c.short())
def test_dependent_launch_covers_every_plan_up_to_1024_tokens_and_past_it_narrow_unsplit_tiles(config):
    """At most 128 on either side of the kernel problem, or at most 1024 tokens (M, or
    a swapped kernel's N): any plan; at 1025 tokens or in a batch, only unsplit 64-row
    tiles 64 to 128 wide, and none of these."""
    swapped = dataclasses.replace(config, swap_ab=True)

    def dependent(c, m, n, k, batches=1):
        return launch.as_launched(Problem(m, n, k, batches), c, H200).dependent_launch

    assert dependent(config, 128, 4096, 4096)
    assert dependent(config, 4096, 96, 4096)  # N = 96
    assert dependent(config, 1024, 4096, 4096)
    assert dependent(swapped, 4096, 1024, 4096)  # swapped: N = tokens
    assert not dependent(config, 1025, 4096, 4096)
    assert not dependent(swapped, 1024, 1025, 4096)
    assert not dependent(config, 4096, 4096, 4096)
    assert not dependent(config, 64, 4096, 4096, batches=2)
    narrow = GemmConfig(tile_m=64, tile_n=96)  # K = 2048: too short a k-loop to stream the last wave
    assert dependent(narrow, 4096, 4096, 2048) and dependent(narrow, 64, 4096, 2048, batches=2)


def test_one_wave_of_64x128_pairs_over_512_rows_or_more_runs_a_7_stage_ring():
    """The CTAs sharing an operand tile stay closer together with a shallower ring, so
    the L2 merges more of their reads (docs/tuning-log/clusters.md): one wave of
    unswapped, unsplit 64x128 tiles in 2x1 clusters at M >= 512 runs 7 stages instead
    of the 9 that fit, and then has room for four epilogue buffers. Fewer rows, other
    tiles or clusters, a second wave, a shallower ring already and a caller's config
    keep theirs."""
    def stages(config, m, n, k=4096):
        return launch.clusters_for_shared_tiles(Problem(m, n, k), config, H200).stages

    pair = GemmConfig(tile_m=64, tile_n=128, cluster_m=2)
    assert stages(pair, 1024, 1024) == 7
    assert stages(pair, 512, 2048, 1024) == 7
    assert stages(pair, 384, 2560, 2048) is None  # M < 512
    assert stages(pair, 1024, 2048) is None  # 128 units: two waves of 66
    assert stages(dataclasses.replace(pair, stages=6), 1024, 1024) == 6
    for other in (GemmConfig(tile_m=64, tile_n=128, cluster_m=2, cluster_n=2), GemmConfig(tile_m=64, tile_n=128),
                  GemmConfig(tile_m=64, tile_n=96, cluster_m=2), GemmConfig(tile_m=64, tile_n=128, cluster_m=2,
                                                                            split_k=2)):
        assert stages(other, 1024, 1024) is None, other.short()
    assert launch.as_launched(Problem(1024, 1024, 4096), pair, BLACKWELL).stages is None
    x, w = meta(1024, 4096), meta(1024, 4096)
    _, spec, _ = plan(x, w.t(), gpu=H200)
    assert (spec.config.tile_m, spec.config.tile_n, spec.config.cluster_m) == (64, 128, 2)
    assert (spec.config.stages, spec.config.epi_stages) == (7, 4)
    _, given, _ = plan(x, w.t(), pair, gpu=H200)
    assert given.config.stages != 7  # a caller's config runs as given


def test_one_wave_of_64x128_tiles_over_512_rows_or_more_takes_clusters_of_eight_where_they_fit():
    """The H200 holds 15 clusters of 8 (docs/tuning-log/clusters.md): where 96-120
    tiles make one wave of 2x4 or 4x2 clusters, that replaces the 2x1 or 2x2 clusters,
    the orientation that pads less (2x4 on a tie). Not at M < 512, on 128 tiles (16
    clusters of 8), on fewer than 96 tiles, in a batch, nor with other tiles; the
    7-stage ring is for 2x1 clusters only."""
    def clusters(config, m, n, k=4096, batches=1):
        launched = launch.clusters_for_shared_tiles(Problem(m, n, k, batches), config, H200)
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
    _, spec, _ = plan(x, w.t(), gpu=H200)
    assert (spec.config.tile_m, spec.config.tile_n, spec.config.cluster_m, spec.config.cluster_n) == (64, 128, 2, 4)
    _, given, _ = plan(x, w.t(), pair, gpu=H200)
    assert (given.config.cluster_m, given.config.cluster_n) == (2, 1)  # a caller's config runs as given


def test_the_launch_rules_stream_the_last_wave_of_long_runs_only():
    """Stream-K from six whole waves up, when the last wave is partial (8192^3 in
    128x256 tiles paired by 2x1 clusters: 512 units on 66 clusters, 7 waves and 50
    left over); never with fewer waves, a full last wave, a k-loop under 64 k-blocks,
    a split config or on sm100."""
    pair = GemmConfig(tile_m=128, tile_n=256, cluster_m=2)

    def launched(config, m, n, k, gpu=H200):
        return launch.as_launched(Problem(m, n, k), config, gpu)

    streamed = launched(pair, 8192, 8192, 8192)
    assert streamed.stream_k and not streamed.dependent_launch
    assert not launched(pair, 2048, 4096, 4096).stream_k  # 128 units: 1 wave + 62
    assert not launched(pair, 128 * 2 * 66, 256 * 6, 4096).stream_k  # 6 full waves
    # Short k-loops: the fp32 fix-up costs more than the idle wave (docs/tuning-log/stream-k.md).
    assert not launched(pair, 8192, 8192, 2048).stream_k
    assert launched(pair, 8192, 8192, 4096).stream_k
    # K too long for the kernel's 32-bit stream-K arithmetic: left whole, not an error.
    assert not launched(pair, 8192, 8192, 2**26).stream_k
    assert not launched(GemmConfig(split_k=2), 8192, 8192, 8192).stream_k
    assert not launched(pair, 8192, 8192, 8192, BLACKWELL).stream_k
    x, w = meta(8192, 8192), meta(8192, 8192)
    _, spec, _ = plan(x, w.t(), gpu=H200)
    assert spec.config.stream_k and spec.config.tile_n == 256
    _, given, _ = plan(x, w.t(), GemmConfig(tile_m=128, tile_n=256, cluster_m=2), gpu=H200)
    assert not given.config.stream_k


def test_short_k_plans_get_spare_epilogue_buffers_and_a_callers_config_does_not():
    """8192x8192x2048 writes a 64 KB output tile per 32 k-blocks: the chosen 128x256
    tile gets four epilogue buffers (docs/tuning-log/epilogue.md); a caller's config
    is used as given."""
    a, b = meta(8192, 2048), meta(2048, 8192)
    _, spec, _ = plan(a, b, gpu=H200)
    assert (spec.config.tile_n, spec.config.stages, spec.config.epi_stages, spec.config.pingpong) == (256, 4, 4, False)
    _, given, _ = plan(a, b, GemmConfig(tile_m=128, tile_n=256, cluster_m=2), gpu=H200)
    assert given.config.epi_stages == 2


def test_the_launch_rules_run_short_k_loops_on_pingpong_consumers():
    """Up to 24 k-blocks, unbatched, two waves of tiles or more: the chosen config's
    ping-pong variant (128x256 -> 128x192 or 128x128, the cluster kept;
    docs/tuning-log/pingpong.md), which the plan then gives three epilogue buffers per
    warpgroup beside a five-stage ring. Not at 25 k-blocks, not for batched problems
    or a single wave, not for split tiles, never for a caller's config or on sm100."""
    pair = GemmConfig(tile_m=128, tile_n=256, cluster_m=2)

    def pingpong(config, m, n, k, batches=1):
        return launch.pingpong_for_short_k(Problem(m, n, k, batches), config, H200)

    short = pingpong(pair, 8192, 8192, 24 * 64)
    assert short == GemmConfig(tile_m=128, tile_n=192, cluster_m=2, pingpong=True)
    assert pingpong(GemmConfig(tile_m=64, tile_n=256), 8192, 8192, 128).pingpong
    assert not pingpong(pair, 8192, 8192, 24 * 64 + 1).pingpong
    assert not pingpong(pair, 8192, 8192, 256, batches=8).pingpong
    # 1024x4096 in 128x192 or 128x128 tiles paired along M: 88 or 128 units, under two
    # waves of 66 clusters.
    assert not pingpong(pair, 1024, 4096, 256).pingpong
    assert pingpong(pair, 2048, 4096, 256).pingpong
    assert not pingpong(GemmConfig(split_k=2), 8192, 8192, 256).pingpong
    assert not launch.as_launched(Problem(8192, 8192, 256), pair, BLACKWELL).pingpong
    a, b = meta(8192, 256), meta(256, 8192)
    _, spec, _ = plan(a, b, gpu=H200)
    assert spec.config == GemmConfig(tile_m=128, tile_n=192, cluster_m=2, stages=5, epi_stages=3, pingpong=True)
    _, given, _ = plan(a, b, pair, gpu=H200)
    assert not given.config.pingpong and given.config.tile_n == 256
    # Ping-pong tiles are never streamed: their pieces would have to meet in a workspace.
    assert not launch.as_launched(Problem(8192, 8192, 8192), short, H200).stream_k


def test_one_wave_long_k_loops_run_one_warpgroup_per_128x128_tile():
    """32 k-blocks or more, unbatched, and unsplit 128x128 tiles in one wave: ping-pong
    consumers with one tile per CTA (docs/tuning-log/pingpong.md). Not at 31 k-blocks,
    not over a second wave, not for split or batched problems, not on sm100."""
    pair = GemmConfig(tile_m=128, tile_n=128, cluster_m=2)
    solo = GemmConfig(tile_m=128, tile_n=128, cluster_m=2, pingpong=True)

    def one_wave(config, m, n, k, batches=1):
        return launch.pingpong_for_one_wave(Problem(m, n, k, batches), config, H200)

    assert one_wave(pair, 512, 4096, 32 * 64) == solo  # 128 tiles: 64 clusters of 66
    assert one_wave(pair, 512, 4096, 31 * 64) == pair
    assert one_wave(pair, 512, 4480, 14336) == pair  # 140 tiles: 70 clusters, a second wave
    assert one_wave(pair, 512, 4096, 14336, batches=2) == pair
    assert one_wave(dataclasses.replace(pair, split_k=2), 512, 4096, 14336).split_k == 2
    assert one_wave(GemmConfig(tile_m=128, tile_n=256, cluster_m=2), 512, 4096, 14336).tile_n == 256
    assert not launch.as_launched(Problem(512, 4096, 14336), pair, BLACKWELL).pingpong
    # The default path, through the plan: the 8B o-proj at M = 512 (the table's 128x128
    # tiles), with the four epilogue buffers per warpgroup that keep its six stages.
    _, spec, _ = plan(meta(512, 4096), meta(4096, 4096).t(), gpu=H200)
    assert (spec.config.tile_n, spec.config.pingpong, spec.config.stages, spec.config.epi_stages) == (128, True, 6, 4)
    _, given, _ = plan(meta(512, 4096), meta(4096, 4096).t(), pair, gpu=H200)
    assert not given.config.pingpong  # a caller's config runs as given


def test_long_grids_walk_in_raster_bands_whatever_was_chosen():
    """M >= 8192 at K >= 4096 over 16 or more cluster columns: a configuration that
    would walk all of M before moving along N walks in bands of 8 cluster columns
    (docs/tuning-log/raster-bands.md: back to back, the re-reads of A cost clock at
    the H200's power limit). A band width already chosen is kept; shorter M or K,
    narrow grids, swapped and batched problems keep what was chosen; a caller's
    config is used as given."""
    pair = GemmConfig(tile_m=128, tile_n=224, cluster_m=2)

    def swizzle(config, m, n, k, batches=1):
        return launch.as_launched(Problem(m, n, k, batches), config, H200).swizzle

    banded = launch.as_launched(Problem(16384, 10240, 8192), pair, H200)
    assert (banded.swizzle, banded.tile_n, banded.cluster_m) == (8, 224, 2)
    assert swizzle(GemmConfig(tile_m=128, tile_n=256), 8192, 8192, 4096) == 8
    assert swizzle(GemmConfig(tile_m=128, tile_n=256, swizzle=4), 16384, 8192, 8192) == 4
    unchanged = [
        (pair, 4096, 10240, 8192, 1),  # M = 4096: bands within -1.0 to +0.7 % there
        (pair, 16384, 10240, 2048, 1),  # 32 k-blocks
        (pair, 16384, 2048, 8192, 1),  # 10 cluster columns
        (pair, 16384, 10240, 8192, 2),  # batched
        (GemmConfig(tile_m=128, tile_n=224, cluster_m=2, swap_ab=True), 16384, 10240, 8192, 1),
    ]
    for config, m, n, k, batches in unchanged:
        assert swizzle(config, m, n, k, batches) == 1, (m, n, k, batches)
    x, w = meta(16384, 8192), meta(10240, 8192)
    assert plan(x, w.t(), gpu=H200)[1].config.swizzle == 8
    assert plan(x, w.t(), pair, gpu=H200)[1].config.swizzle == 1
