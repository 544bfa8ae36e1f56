"""Programmatic dependent launch (``GemmConfig(dependent_launch=True)``) on a Hopper
GPU: a kernel that starts before its predecessor on the stream has finished must
still read that predecessor's result, and must not overwrite memory the predecessor
is still reading.

Each case chains wsgemm calls so that a missing ``griddepcontrol.wait`` would show:
every output is poisoned with NaN before the chain runs, so a step that read its
input too early reads NaN (or the previous contents) and fails the check.
"""

import pytest
import torch

import wsgemm
from wsgemm import GemmConfig

from test_gpu_sm90 import check, rand

pytestmark = pytest.mark.gpu

# Configurations of one chain step, (M tokens) x K @ K x K: plain tiles with and
# without a cluster, split-K (its workspace is reused call after call), swapped A/B.
STEP_CONFIGS = [
    GemmConfig(tile_m=128, tile_n=128, cluster_m=2, dependent_launch=True),
    GemmConfig(tile_m=64, tile_n=64, split_k=4, dependent_launch=True),
    GemmConfig(tile_m=128, tile_n=16, split_k=2, swap_ab=True, dependent_launch=True),
    GemmConfig(tile_m=64, tile_n=256, stages=5, dependent_launch=True),
]
STEPS = 6

# The chain's weights (B) are never written, so each step may read them before its
# wait (``read_before_wait="b"``); its A is the step before's output, which it must
# not. Swapped, the weight is the kernel's A. K = 256 has fewer k-blocks than the
# ring has stages, K = 4096 more.
EARLY_CONFIGS = [
    GemmConfig(tile_m=128, tile_n=128, cluster_m=2, dependent_launch=True, read_before_wait="b"),
    GemmConfig(tile_m=64, tile_n=64, cluster_n=2, split_k=4, dependent_launch=True, read_before_wait="b"),
    GemmConfig(tile_m=64, tile_n=16, split_k=8, swap_ab=True, dependent_launch=True, read_before_wait="b"),
    GemmConfig(tile_m=128, tile_n=16, cluster_n=2, swap_ab=True, dependent_launch=True, read_before_wait="b"),
    GemmConfig(tile_m=128, tile_n=16, stream_k=True, swap_ab=True, dependent_launch=True, read_before_wait="b"),
]


def weights(k, steps, dtype=torch.bfloat16):
    # Scaled so that values neither grow nor shrink along the chain.
    return [(torch.randn(k, k, device="cuda") / k**0.5).to(dtype) for _ in range(steps)]


def run_chain(x0, ws, outs, config):
    """``config``: one for every step, or a list of one per step."""
    configs = config if isinstance(config, list) else [config] * len(ws)
    x = x0
    for w, out, step_config in zip(ws, outs, configs):
        x = wsgemm.gemm(x, w, out=out, config=step_config)
    return x


def check_chain(x0, ws, outs):
    inputs = [x0, *outs[:-1]]
    for step, (x, w, out) in enumerate(zip(inputs, ws, outs)):
        try:
            check(out, x, w)  # each step against its own input, as the kernel saw it
        except AssertionError as e:
            raise AssertionError(f"chain step {step}: {e}") from None


def check_graph_replays(chain, x0, ws, outs):
    """Capture ``chain()`` (planned and compiled already) in a CUDA graph, then replay
    it on fresh inputs into poisoned outputs and check every step."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(side), torch.cuda.graph(graph):
        chain()
    for _ in range(3):
        x0.copy_(rand(*x0.shape))
        for out in outs:
            out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        check_chain(x0, ws, outs)


@pytest.mark.parametrize("config", STEP_CONFIGS, ids=lambda c: c.short())
@pytest.mark.parametrize("m", [16, 512])
def test_each_call_reads_its_predecessors_result(config, m):
    k = 1024
    x0, ws = rand(m, k), weights(k, STEPS)
    outs = [torch.full((m, k), float("nan"), device="cuda", dtype=torch.bfloat16) for _ in range(STEPS)]
    run_chain(x0, ws, outs, config)
    torch.cuda.synchronize()
    check_chain(x0, ws, outs)


@pytest.mark.parametrize("config", STEP_CONFIGS[:3] + EARLY_CONFIGS[2:4], ids=lambda c: c.short())
def test_a_captured_chain_reads_each_predecessors_result_on_every_replay(config):
    m, k = 64, 1024
    x0, ws = rand(m, k), weights(k, STEPS)
    outs = [torch.empty(m, k, device="cuda", dtype=torch.bfloat16) for _ in range(STEPS)]
    run_chain(x0, ws, outs, config)  # compile and plan outside the capture
    check_graph_replays(lambda: run_chain(x0, ws, outs, config), x0, ws, outs)


@pytest.mark.parametrize("config", EARLY_CONFIGS, ids=lambda c: c.short())
@pytest.mark.parametrize("m, k", [(16, 256), (16, 4096), (512, 1024)])
def test_weights_read_before_the_wait_leave_each_step_reading_its_predecessors_result(config, m, k):
    x0, ws = rand(m, k), weights(k, STEPS)
    outs = [torch.full((m, k), float("nan"), device="cuda", dtype=torch.bfloat16) for _ in range(STEPS)]
    run_chain(x0, ws, outs, config)
    torch.cuda.synchronize()
    check_chain(x0, ws, outs)


def test_the_default_plans_promise_of_unwritten_weights_in_eager_calls_and_graph_replays():
    """``gemm(x, w.t(), read_before_wait="b")``: decode-sized steps whose default plans
    launch dependent, so each reads its weight early and its activations after the wait."""
    m, k = 16, 4096
    x0 = rand(m, k)
    ws = [w.t() for w in weights(k, STEPS)]  # nn.Linear's layout: B = W.t()
    outs = [torch.full((m, k), float("nan"), device="cuda", dtype=torch.bfloat16) for _ in range(STEPS)]

    def chain():
        x = x0
        for w, out in zip(ws, outs):
            x = wsgemm.gemm(x, w, out=out, read_before_wait="b")

    chain()
    torch.cuda.synchronize()
    check_chain(x0, ws, outs)
    plan = wsgemm.plans.make_plan(x0, ws[0], outs[0], None, None, "b")
    assert plan.spec.config.dependent_launch and plan.spec.config.read_before_wait in ("a", "b")
    check_graph_replays(chain, x0, ws, outs)


def test_promised_calls_found_in_cpp_read_each_predecessors_result():
    """The same promise without ``out=``: the first chain plans each step in Python,
    the later ones find and launch them in C++ (``wsgemm.fast_path``), each step's
    weight loaded before its wait and its activations after."""
    m, k = 16, 4096
    ws = [w.t() for w in weights(k, STEPS)]
    module = wsgemm.fast_path.load()
    for _ in range(3):
        x0 = rand(m, k)
        outs, x = [], x0
        for w in ws:
            x = wsgemm.gemm(x, w, read_before_wait="b")
            outs.append(x)
        torch.cuda.synchronize()
        check_chain(x0, ws, outs)
    if module is not None:  # built here; else the Python path ran all three chains
        assert module.find(x0, ws[0], "b") is not None and module.find(x0, ws[0]) is None


def test_a_call_does_not_overwrite_what_its_predecessor_still_reads():
    """Write after read: the second call's output is the first call's input. The
    first call is long (K = 16384) and the second short, so an early store would
    land while the first still streams its A."""
    m, n, k = 256, 256, 16384
    a, b = rand(m, k), rand(k, n)
    a_before = a.clone()
    first = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    x, w = rand(m, 128), rand(128, k)
    for _ in range(5):
        a.copy_(a_before)
        first.fill_(float("nan"))
        wsgemm.gemm(a, b, out=first, config=GemmConfig(tile_m=64, tile_n=64, dependent_launch=True))
        wsgemm.gemm(x, w, out=a, config=GemmConfig(dependent_launch=True))  # overwrites the first call's A
        torch.cuda.synchronize()
        check(first, a_before, b)
        check(a, x, w)


def test_a_dependent_launch_after_a_plain_launch_and_before_one():
    """Mixed neighbours: a plain launch (the default) in between, so each wait is on a
    kernel that never signals early."""
    m, k = 512, 1024
    plain = GemmConfig(tile_m=128, tile_n=128, cluster_m=2)
    configs = [plain if step % 2 else STEP_CONFIGS[0] for step in range(STEPS)]
    x0, ws = rand(m, k), weights(k, STEPS)
    outs = [torch.full((m, k), float("nan"), device="cuda", dtype=torch.bfloat16) for _ in range(STEPS)]
    run_chain(x0, ws, outs, configs)
    torch.cuda.synchronize()
    check_chain(x0, ws, outs)
