"""Stream-K on a Hopper GPU: the last wave's k-blocks dealt out over every SM, pieces
of a tile meeting in the workspace, flags left at zero, graphs and dependent launch.

Same conventions as test_gpu_sm90.py: fresh random inputs, poisoned outputs, a
float32 reference with per-dtype bounds.
"""

import pytest
import torch

import wsgemm
from wsgemm import GemmConfig

from test_gpu_sm90 import check, check_graph_replays, rand, run
from test_gpu_split_k import flags_are_zero

pytestmark = pytest.mark.gpu

STREAM_CONFIGS = [
    GemmConfig(tile_m=64, tile_n=64, stream_k=True),
    GemmConfig(tile_m=128, tile_n=128, stream_k=True),
    GemmConfig(tile_m=128, tile_n=256, stream_k=True),
    GemmConfig(tile_m=128, tile_n=128, cluster_m=2, stream_k=True),
    GemmConfig(tile_m=64, tile_n=128, cluster_n=2, stream_k=True),
]


@pytest.mark.parametrize("config", STREAM_CONFIGS, ids=lambda c: c.short())
@pytest.mark.parametrize(
    "m, n, k",
    [(1, 4096, 4096), (512, 1024, 8192), (333, 517, 2000), (200, 300, 64 * 13), (1100, 2200, 1500),
     (130, 130, 64 * 2)],
    ids=["decode", "even", "ragged", "blocks-not-divisible", "whole-waves-then-streamed-tail",
         "fewer-k-blocks-than-sms"],
)
def test_stream_k_matches_reference(config, m, n, k):
    a, b = rand(m, k), rand(k, n)
    check(run(a, b, config=config), a, b)
    assert flags_are_zero(), "a stream-K launch left an arrival flag set"


@pytest.mark.parametrize("m", [1, 7, 16, 32])
@pytest.mark.parametrize(
    "config",
    [GemmConfig(tile_m=128, tile_n=16, stream_k=True, swap_ab=True),
     GemmConfig(tile_m=64, tile_n=32, stream_k=True, swap_ab=True),
     GemmConfig(tile_m=64, tile_n=64, cluster_n=2, stream_k=True, swap_ab=True)],
    ids=lambda c: c.short(),
)
def test_stream_k_swapped_decode_layouts(config, m):
    x, w = rand(m, 4096), rand(6144, 4096)  # 8B QKV: 48 tiles of 128 weight rows
    assert wsgemm.plans.make_plan(x, w.t(), None, None, config).mode == "swap"
    check(run(x, w.t(), config=config), x, w.t())


@pytest.mark.parametrize("out_dtype", [torch.float32, torch.float16])
def test_stream_k_other_output_dtypes_and_batches(out_dtype):
    dtype = torch.float16 if out_dtype == torch.float16 else torch.bfloat16
    a, b = rand(100, 3000, dtype=dtype), rand(3000, 700, dtype=dtype)
    config = GemmConfig(tile_m=128, tile_n=128, stream_k=True)
    check(run(a, b, out_dtype=out_dtype, config=config), a, b, out_dtype)
    a3, b3 = rand(3, 200, 3000, dtype=dtype), rand(3, 3000, 300, dtype=dtype)
    check(run(a3, b3, out_dtype=out_dtype, config=config), a3, b3, out_dtype)


def test_stream_k_is_deterministic_and_every_sm_streams():
    """A fixed summation order (finisher, then its contributors by cluster), so equal
    inputs give equal bits; and the plan launches one cluster per SM."""
    config = GemmConfig(tile_m=128, tile_n=16, stream_k=True, swap_ab=True)
    x, w = rand(4, 4096), rand(6144, 4096)
    plan = wsgemm.plans.make_plan(x, w.t(), None, None, config)
    assert plan.clusters == torch.cuda.get_device_properties(0).multi_processor_count
    first = wsgemm.gemm(x, w.t(), config=config)
    for _ in range(5):
        assert torch.equal(wsgemm.gemm(x, w.t(), config=config), first), "stream-K results differ between runs"
    for _ in range(3):  # new contents, same cached workspace: no stale partial sums
        x2 = rand(4, 4096)
        check(run(x2, w.t(), config=config), x2, w.t())
    assert flags_are_zero()


@pytest.mark.parametrize("dependent_launch", [False, True], ids=["plain", "pdl"])
def test_stream_k_under_cuda_graph_replay(dependent_launch):
    config = GemmConfig(tile_m=128, tile_n=16, stream_k=True, swap_ab=True, dependent_launch=dependent_launch)
    x, w = rand(8, 4096), rand(6144, 4096)
    outs = [torch.empty(8, 6144, device="cuda", dtype=torch.bfloat16) for _ in range(4)]

    def calls():  # back to back: each launch reuses the flags the previous one reset
        for out in outs:
            wsgemm.gemm(x, w.t(), out=out, config=config)

    def verify():
        for out in outs:
            check(out, x, w.t())

    check_graph_replays(calls, [x, w], outs, verify)
    assert flags_are_zero()
