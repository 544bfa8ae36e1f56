"""Split-K on a Hopper GPU: every split's partial sum lands once, the arrival flags
reset themselves, and streams and CUDA graphs each keep their own workspace.

Same conventions as test_gpu_sm90.py: fresh random inputs, poisoned outputs, a
float32 reference with per-dtype bounds.
"""

import pytest
import torch

import wsgemm
from wsgemm import GemmConfig, tuning
from wsgemm import workspace as ws

from test_gpu_sm90 import check, check_graph_replays, default_path_on_weight, poison_allocator, rand, run

pytestmark = pytest.mark.gpu

SPLIT_CONFIGS = [
    GemmConfig(tile_m=64, tile_n=64, split_k=2),
    GemmConfig(tile_m=64, tile_n=128, split_k=4),
    GemmConfig(tile_m=128, tile_n=128, split_k=3),
    GemmConfig(tile_m=128, tile_n=256, split_k=8),
    GemmConfig(tile_m=128, tile_n=128, cluster_m=2, split_k=2),
    GemmConfig(tile_m=128, tile_n=128, cluster_n=2, split_k=4),
]


def selected_on_weight(m, n, k) -> GemmConfig:
    """What ``wsgemm.tuning.select`` chooses on this GPU for ``x @ w.t()``."""
    gpu = wsgemm.devices.gpu(torch.cuda.current_device())
    return tuning.select(tuning.Problem(m, n, k, can_swap=True), gpu)


def flags_are_zero():
    torch.cuda.synchronize()
    return all(int(flags.abs().sum()) == 0 for flags, _ in ws._workspaces.values())


@pytest.mark.parametrize("config", SPLIT_CONFIGS, ids=lambda c: c.short())
@pytest.mark.parametrize(
    "m, n, k",
    [(1, 4096, 4096), (512, 1024, 8192), (333, 517, 2000), (200, 300, 64 * 13), (1100, 2200, 1500)],
    ids=["decode", "even", "ragged", "blocks-not-divisible", "whole-waves-then-split-tail"],
)
def test_split_k_matches_reference(config, m, n, k):
    a, b = rand(m, k), rand(k, n)
    check(run(a, b, config=config), a, b)
    assert flags_are_zero(), "a split-K launch left an arrival flag set"


def test_more_splits_than_k_blocks_leaves_some_splits_empty():
    a, b = rand(256, 64 * 3), rand(64 * 3, 256)
    check(run(a, b, config=GemmConfig(tile_m=128, tile_n=128, split_k=8)), a, b)
    assert flags_are_zero()


@pytest.mark.parametrize("out_dtype", [torch.float32, torch.float16])
def test_split_k_other_output_dtypes(out_dtype):
    dtype = torch.float16 if out_dtype == torch.float16 else torch.bfloat16
    a, b = rand(100, 3000, dtype=dtype), rand(3000, 700, dtype=dtype)
    d = run(a, b, out_dtype=out_dtype, config=GemmConfig(tile_m=128, tile_n=128, split_k=4))
    check(d, a, b, out_dtype)


@pytest.mark.parametrize(
    "config, m, n, k",
    [(GemmConfig(tile_m=64, tile_n=16, swap_ab=True, split_k=6), 9, 1024, 8192),  # 5 slots, one round
     (GemmConfig(tile_m=64, tile_n=64, split_k=6), 64, 1024, 8192),  # 5 slots in rounds of 2, 2, 1
     (GemmConfig(tile_m=64, tile_n=32, swap_ab=True, split_k=8), 20, 2048, 4096)],  # 7 slots in rounds of 4, 3
    ids=lambda v: v.short() if isinstance(v, GemmConfig) else str(v),
)
def test_finisher_adds_each_slot_once_in_rounds(config, m, n, k):
    """A finisher loads several slots a round (``split_k.slots_in_flight``); the last
    round reloads the last slot past the end, which must not be added twice."""
    w, a = rand(n, k), rand(m, k)
    check(run(a, w.t(), config=config), a, w.t())
    assert flags_are_zero()


@pytest.mark.parametrize("config", [GemmConfig(tile_m=64, tile_n=16, swap_ab=True, split_k=6),
                                    GemmConfig(tile_m=64, tile_n=64, split_k=6)], ids=lambda c: c.short())
def test_infinite_partial_sums_stay_infinite(config):
    """A row whose products overflow fp32 is +inf in every split's partial sum; the
    finisher's skipped reload must not turn it into NaN (0 * inf)."""
    a, w = rand(16, 8192).abs(), rand(1024, 8192).abs()
    a[3] = 3e38  # bf16 holds it; its products with |w| overflow fp32
    d = run(a, w.t(), config=config)
    assert torch.isinf(d[3]).all() and (d[3] > 0).all(), "an overflowing row is not +inf"
    rest = torch.cat([a[:3], a[4:]])
    check(torch.cat([d[:3], d[4:]]), rest, w.t())


def test_split_k_batched_and_weight_layout():
    a = rand(3, 200, 3000)
    w = rand(500, 3000)  # nn.Linear weight, read K-major through w.t()
    check(run(a, w.t(), config=GemmConfig(tile_m=128, tile_n=64, split_k=3)), a, w.t())
    b = rand(3, 3000, 500)
    check(run(a, b, config=GemmConfig(tile_m=64, tile_n=128, split_k=2)), a, b)


def test_split_k_is_deterministic_and_reuses_its_workspace():
    config = GemmConfig(tile_m=64, tile_n=64, split_k=4)
    a, b = rand(64, 8192), rand(8192, 2048)
    first = wsgemm.gemm(a, b, config=config)
    for _ in range(5):
        assert torch.equal(wsgemm.gemm(a, b, config=config), first), "split-K results differ between runs"
    for _ in range(3):  # new contents, same cached workspace: no stale partial sums
        a2, b2 = rand(64, 8192), rand(8192, 2048)
        check(run(a2, b2, config=config), a2, b2)
    assert flags_are_zero()


def test_concurrent_streams_get_separate_workspaces():
    config = GemmConfig(tile_m=64, tile_n=128, split_k=4)
    pairs = [(rand(64, 16384), rand(16384, 4096)) for _ in range(2)]
    wsgemm.gemm(*pairs[0], config=config)  # compile first
    torch.cuda.synchronize()
    streams = [torch.cuda.Stream() for _ in pairs]
    results = []
    for stream, (a, b) in zip(streams, pairs):
        with torch.cuda.stream(stream):
            results.append([wsgemm.gemm(a, b, config=config) for _ in range(4)])
    torch.cuda.synchronize()
    for (a, b), outs in zip(pairs, results):
        for d in outs:
            check(d, a, b)
    keys = {key for key in ws._workspaces if key[1] in {s.cuda_stream for s in streams}}
    assert len(keys) == 2


def test_split_k_under_cuda_graph_replay():
    config = GemmConfig(tile_m=64, tile_n=64, split_k=4)
    a, b = rand(16, 8192), rand(8192, 1024)
    out = torch.empty(16, 1024, device="cuda", dtype=torch.bfloat16)
    check_graph_replays(lambda: wsgemm.gemm(a, b, out=out, config=config), [a, b], [out],
                        lambda: check(out, a, b))


def test_the_default_path_splits_a_long_k_shape_and_is_correct():
    # 64 tiles of 128x128 in 32 pairs for 66 cluster slots: the planner splits their
    # 224-k-block loops (on an H100's numbers and an H200's).
    plan = default_path_on_weight(256, 4096, 14336)
    assert plan.spec.config.split_k > 1 and plan.workspace[0] > 0


def test_only_the_last_partial_wave_is_split():
    """160 tiles of 128x256 on 132 SMs: one wave of whole tiles, then 28 tiles in
    4 splits each, whose workspace holds only those 28 tiles."""
    a, w = rand(512, 8192), rand(10240, 8192)
    config = GemmConfig(tile_m=128, tile_n=256, split_k=4)
    plan = wsgemm.plans.make_plan(a, w.t(), None, None, config)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    assert plan.clusters == sms and plan.workspace[0] == 160 % sms
    for _ in range(2):  # the second launch finds the flags the first one left at zero
        check(run(a, w.t(), config=config), a, w.t())
    assert flags_are_zero()


def test_split_k_config_on_tiles_that_fill_whole_waves_splits_nothing_and_runs():
    """Regression: with no partial wave there is nothing to split, and the plan once
    passed no workspace to the split-K entry point (a failed call)."""
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    a, b = rand(128, 1024), rand(1024, 128 * sms)  # exactly one 128x128 tile per SM
    config = GemmConfig(tile_m=128, tile_n=128, split_k=2)
    plan = wsgemm.plans.make_plan(a, b, None, None, config)
    assert plan.clusters == sms and plan.workspace == (1, 1)
    check(run(a, b, config=config), a, b)
    assert flags_are_zero()


@pytest.mark.parametrize("m", [1, 5, 16, 17, 32, 64])
@pytest.mark.parametrize(
    "config",
    [GemmConfig(tile_m=64, tile_n=16, split_k=2, swap_ab=True),
     GemmConfig(tile_m=128, tile_n=32, swap_ab=True),
     GemmConfig(tile_m=128, tile_n=64, split_k=3, swap_ab=True)],
    ids=lambda c: c.short(),
)
def test_swap_ab_computes_the_transposed_product(config, m):
    x, w = rand(m, 3000), rand(1000, 3000)  # nn.Linear layout: x @ w.t()
    plan = wsgemm.plans.make_plan(x, w.t(), None, None, config)
    assert plan.mode == "swap"
    check(run(x, w.t(), config=config), x, w.t())
    b = rand(3000, 1000)  # row-major B too
    check(run(x, b, config=config), x, b)


@pytest.mark.parametrize("m", [65, 96, 128])
@pytest.mark.parametrize(
    "config",
    [GemmConfig(tile_m=64, tile_n=96, swap_ab=True),
     GemmConfig(tile_m=64, tile_n=64, cluster_n=2, swap_ab=True),
     GemmConfig(tile_m=128, tile_n=64, cluster_n=2, split_k=2, swap_ab=True)],
    ids=lambda c: c.short(),
)
def test_swap_ab_with_tokens_in_two_multicast_n_tiles(config, m):
    """Up to M = 128 tokens take one 96/128-wide N tile, or two whose cluster
    multicasts each weight tile to both."""
    x, w = rand(m, 3000), rand(1000, 3000)
    assert wsgemm.plans.make_plan(x, w.t(), None, None, config).mode == "swap"
    check(run(x, w.t(), config=config), x, w.t())


@pytest.mark.parametrize("m", [136, 200, 260, 300, 320])
@pytest.mark.parametrize(
    "config",
    [GemmConfig(tile_m=128, tile_n=160, cluster_n=2, swap_ab=True),
     GemmConfig(tile_m=64, tile_n=160, cluster_n=2, split_k=2, swap_ab=True),
     GemmConfig(tile_m=128, tile_n=96, cluster_n=2, swap_ab=True),
     GemmConfig(tile_m=128, tile_n=80, cluster_n=2, split_k=2, swap_ab=True),
     GemmConfig(tile_m=128, tile_n=112, cluster_n=2, swap_ab=True),
     GemmConfig(tile_m=128, tile_n=144, cluster_n=2, swap_ab=True)],
    ids=lambda c: c.short(),
)
def test_swap_ab_with_more_tokens_in_two_wide_n_tiles(config, m):
    """Past M = 128 the tokens take two N tiles up to 160 wide, fitted to them in steps
    of 16 (M = 257-320 in two 144- or 160-wide tiles, the second one partly past the
    edge)."""
    if not config.tile_n < m <= 2 * config.tile_n:
        pytest.skip("the tokens do not take exactly two tiles of this width")
    x, w = rand(m, 3000), rand(1000, 3000)
    assert wsgemm.plans.make_plan(x, w.t(), None, None, config).mode == "swap"
    check(run(x, w.t(), config=config), x, w.t())
    out = torch.full((m, 1000), float("nan"), device="cuda", dtype=torch.float32)
    wsgemm.gemm(x, w.t(), out=out, config=config)
    check(out, x, w.t(), torch.float32)
    b = rand(3000, 1000)  # row-major B too
    check(run(x, b, config=config), x, b)


def test_the_default_path_swaps_three_tile_rows_of_tokens_into_two_n_tiles():
    """300 tokens in two 160-wide N tiles (the second partly past the edge) in 1x2
    clusters, beside 64 weight tiles of 128 rows: one wave of 128 CTAs."""
    x, w = rand(300, 8192), rand(8192, 8192)
    plan = wsgemm.plans.make_plan(x, w.t(), None, None, None)
    # The kernel runs on the transposed views: its config's N tile holds the tokens.
    assert plan.mode == "swap" and (plan.spec.config.tile_n, plan.spec.config.cluster_n) == (160, 2), plan
    check(run(x, w.t()), x, w.t())


@pytest.mark.parametrize("m, tile_n", [(300, 80), (352, 96), (440, 112)])
def test_the_default_path_swaps_four_token_tiles_on_a_4096_row_weight(m, tile_n):
    """Past 256 tokens, on a weight of 4096 rows, four N tiles fitted to the tokens
    (the last partly past the edge) in 1x2 clusters fill one wave with 128-row weight
    tiles; here with a long enough k-loop, at K = 4096, and a launch as a programmatic
    dependent."""
    x, w = rand(m, 4096), rand(4096, 4096)
    plan = wsgemm.plans.make_plan(x, w.t(), None, None, None)
    config = plan.spec.config
    assert plan.mode == "swap" and (config.tile_m, config.tile_n, config.cluster_n) == (128, tile_n, 2), plan
    assert config.split_k == 1 and config.dependent_launch
    check(run(x, w.t()), x, w.t())
    out = torch.full((m, 4096), float("nan"), device="cuda", dtype=torch.float32)
    wsgemm.gemm(x, w.t(), out=out)
    check(out, x, w.t(), torch.float32)


@pytest.mark.parametrize("m, n, tile_m, tile_n, cluster_m", [(136, 28672, 256, 144, 4), (192, 28672, 256, 192, 4),
                                                             (176, 22016, 192, 176, 2)])
def test_one_token_tile_beside_tall_weight_tiles(m, n, tile_m, tile_n, cluster_m):
    """From 129 to 192 tokens, on a weight of 28672 rows 112 weight tiles of 256 rows,
    on one of 22016 rows 115 of 192 (the last past the edge), beside one token tile
    (past the edge at M = 136) make one wave, in clusters that share it: of 4 for the
    256-row tiles, of 2 for the 192-row ones (the default path's plans for these
    shapes once, run here as configs)."""
    config = GemmConfig(tile_m=tile_m, tile_n=tile_n, cluster_m=cluster_m, swap_ab=True, dependent_launch=True)
    x, w = rand(m, 4096), rand(n, 4096)
    assert wsgemm.plans.make_plan(x, w.t(), None, None, config).mode == "swap"
    check(run(x, w.t(), config=config), x, w.t())
    out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.float32)
    wsgemm.gemm(x, w.t(), out=out, config=config)
    check(out, x, w.t(), torch.float32)


@pytest.mark.parametrize("m, n", [(136, 28672), (192, 28672), (176, 22016)])
def test_the_default_path_runs_the_planners_choice_beside_tall_weights(m, n):
    x, w = rand(m, 4096), rand(n, 4096)
    plan = wsgemm.plans.make_plan(x, w.t(), None, None, None)
    chosen = selected_on_weight(m, n, 4096)
    assert (plan.mode == "swap") == chosen.swap_ab, (plan, chosen)
    assert (plan.spec.config.tile_m, plan.spec.config.tile_n, plan.spec.config.cluster_m) == (
        chosen.tile_m, chosen.tile_n, chosen.cluster_m), (plan, chosen)
    check(run(x, w.t()), x, w.t())
    out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.float32)
    wsgemm.gemm(x, w.t(), out=out)
    check(out, x, w.t(), torch.float32)


def test_swap_ab_with_out_and_fp32_output():
    config = GemmConfig(tile_m=128, tile_n=16, split_k=2, swap_ab=True)
    x, w = rand(7, 4096), rand(2048, 4096)
    out = torch.full((7, 2048), float("nan"), device="cuda", dtype=torch.float32)
    wsgemm.gemm(x, w.t(), out=out, config=config)
    check(out, x, w.t(), torch.float32)


def test_the_default_path_swaps_decode_shapes():
    x, w = rand(4, 4096), rand(4096, 4096)
    plan = wsgemm.plans.make_plan(x, w.t(), None, None, None)
    assert plan.mode == "swap"
    check(run(x, w.t()), x, w.t())


def test_cached_decode_plans_launched_from_cpp_compute_new_inputs_on_each_stream():
    """From the second call on, the fast path's C++ launches swapped and split-K
    default plans itself, a split's workspace fetched per call for the current
    stream (docs/tuning-log/host-overhead.md): eager calls and the operator's, new
    inputs every call, on the default stream and another, NaN-poisoned results, the
    flags left at zero."""
    if wsgemm.fast_path.load() is None:
        pytest.skip("the C++ fast path is not built here")
    weights = [rand(n, k) for n, k in ((28672, 4096), (4096, 14336), (6144, 4096))]
    plans = [wsgemm.plans.make_plan(rand(1, w.shape[1]), w.t(), None, None, None) for w in weights]
    assert all(plan.launches_from_cpp for plan in plans), [plan.spec for plan in plans]
    # On an H200 (the packaged table) all three swap and the two long ones split K; on
    # an H100 the planner still swaps and splits the down projection's.
    assert plans[1].mode == "swap" and plans[1].workspace[0], plans[1].spec
    assert plans[2].mode == "swap" and not plans[2].workspace[0], plans[2].spec
    side = torch.cuda.Stream()
    for stream in (torch.cuda.current_stream(), side):
        with torch.cuda.stream(stream):
            for _ in range(3):
                for w in weights:
                    x = rand(1, w.shape[1])
                    poison_allocator()
                    check(wsgemm.gemm(x, w.t()), x, w.t())
                    poison_allocator()
                    check(torch.ops.wsgemm.gemm(x, w.t(), None), x, w.t())
        stream.synchronize()
    assert {key[1] for key in ws._workspaces} >= {torch.cuda.current_stream().cuda_stream, side.cuda_stream}
    assert flags_are_zero()


def test_linear_layers_cached_decode_calls_transpose_their_weight_in_cpp():
    """wsgemm.nn.Linear at decode sizes: from the second call on, ``call_transposed``
    makes the weight's view in C++ and launches the swapped or split plan itself
    (docs/tuning-log/host-overhead.md); new tokens every call, 2-D and 3-D, NaN-poisoned results."""
    if wsgemm.fast_path.load() is None:
        pytest.skip("the C++ fast path is not built here")
    layers = [wsgemm.nn.Linear(k, n, bias=False, dtype=torch.bfloat16, device="cuda")
              for n, k in ((28672, 4096), (4096, 14336), (6144, 4096))]
    with torch.inference_mode():
        for _ in range(3):
            for layer in layers:
                x = rand(1, layer.in_features)
                poison_allocator()
                y = layer(x)
                check(y, x, layer.weight.t())
                poison_allocator()
                y3 = layer(x.unsqueeze(0))
                assert y3.shape == (1, 1, layer.out_features)
                check(y3[0], x, layer.weight.t())
    assert flags_are_zero()


def test_cached_split_plans_launched_from_cpp_replay_in_a_captured_graph():
    """Eager calls of cached split-K decode plans (the C++ launch, results allocated
    there) captured in a torch.cuda.graph share the capture's workspace, and every
    replay computes the new inputs' products."""
    if wsgemm.fast_path.load() is None:
        pytest.skip("the C++ fast path is not built here")
    weights = [rand(28672, 4096), rand(4096, 14336)]
    tokens = [rand(1, w.shape[1]) for w in weights]
    for x, w in zip(tokens, weights):
        for _ in range(2):  # planned in Python, then remembered for the C++ launch
            check(wsgemm.gemm(x, w.t()), x, w.t())
    before = set(ws._captures)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        results = [wsgemm.gemm(x, w.t()) for x, w in zip(tokens, weights)]
    assert len(set(ws._captures) - before) == 1  # one workspace for the capture's stream
    for _ in range(3):
        for x in tokens:
            x.copy_(rand(*x.shape))
        for d in results:
            d.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        for d, x, w in zip(results, tokens, weights):
            check(d, x, w.t())
    assert flags_are_zero()


def test_a_captured_graph_keeps_its_workspace_when_later_calls_need_a_bigger_one():
    """Regression: a graph replays the workspace addresses it captured; growing the
    stream's workspace later must not free them (it did, and a replay then hit
    freed memory: an illegal address, or a last split waiting on garbage flags)."""
    small = GemmConfig(tile_m=64, tile_n=64, split_k=2)
    big = GemmConfig(tile_m=128, tile_n=256, split_k=8)
    a, b = rand(16, 4096), rand(4096, 1024)
    out = torch.empty(16, 1024, device="cuda", dtype=torch.bfloat16)
    stream = torch.cuda.Stream()
    wsgemm.gemm(a, b, out=out, config=small)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        wsgemm.gemm(a, b, out=out, config=small)
    with torch.cuda.stream(stream):  # eager calls on the capture stream, needing more
        a2, b2 = rand(512, 8192), rand(8192, 2048)
        check(wsgemm.gemm(a2, b2, config=big), a2, b2)
    torch.cuda.synchronize()
    junk = [torch.full((1 << 22,), -1, device="cuda", dtype=torch.int32) for _ in range(8)]
    for _ in range(3):
        a.copy_(rand(16, 4096))
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        check(out, a, b)
    del junk


def test_calls_captured_in_one_graph_share_one_workspace_and_replay_correctly():
    """The split-K calls captured on one stream of one capture share a workspace (one
    memset node in the graph, not one per call), and every replay still computes
    each call's product: the calls run in stream order and leave the flags at zero."""
    config = GemmConfig(tile_m=64, tile_n=64, split_k=3)
    pairs = [(rand(16, 4096), rand(4096, 1024)) for _ in range(3)]
    outs = [torch.empty(16, 1024, device="cuda", dtype=torch.bfloat16) for _ in pairs]
    before = set(ws._captures)

    def calls():
        for (a, b), out in zip(pairs, outs):
            wsgemm.gemm(a, b, out=out, config=config)

    def verify():
        for (a, b), out in zip(pairs, outs):
            check(out, a, b)

    check_graph_replays(calls, [t for pair in pairs for t in pair], outs, verify)
    assert len(set(ws._captures) - before) == 1  # the driver named the capture
