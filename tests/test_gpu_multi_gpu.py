"""wsgemm on a host with two or more Hopper GPUs: a call runs on its operands' GPU
whichever GPU is current (the kernel and its stream belong to one device), cached
calls included, and split-K workspaces are kept per device and stream.

Skipped with fewer than two GPUs (the project's device tool lends two H200s as
``nvidia-h200-x2``). Same conventions as test_gpu_sm90.py: fresh random inputs,
NaN-poisoned results, a float32 reference with per-dtype bounds.
"""

import pytest
import torch

import wsgemm
from wsgemm import workspace as ws

from test_gpu_sm90 import check

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two or more GPUs"),
]


def rand_on(device, *shape):
    return torch.randn(*shape, device=device).to(torch.bfloat16)


def poisoned(device):
    """NaN-filled blocks left in the caching allocator of ``device``: a result the
    kernel forgets to write shows NaN."""
    junk = torch.full((1 << 26,), float("nan"), device=device)
    del junk


# Decode on an H200 (the packaged table): swapped, then swapped with K split in 2 and in 4.
@pytest.mark.parametrize("m, n, k", [(256, 512, 1024), (1, 4096, 4096), (1, 28672, 4096), (1, 4096, 14336)],
                         ids=["direct", "decode", "decode-gate-up", "decode-down"])
def test_calls_on_the_second_gpu_run_there_with_the_first_current(m, n, k):
    """The first call plans (Python), the next ones are cached (the fast path): every
    one computes on cuda:1 while cuda:0 is current, and leaves cuda:0 current."""
    second = torch.device("cuda", 1)
    weight = rand_on(second, n, k)
    with torch.cuda.device(0):
        for _ in range(3):
            x = rand_on(second, m, k)
            poisoned(second)
            d = wsgemm.gemm(x, weight.t())
            assert d.device == second and torch.cuda.current_device() == 0
            check(d, x, weight.t())
            poisoned(second)
            d = torch.ops.wsgemm.gemm(x, weight.t(), None)
            assert d.device == second and torch.cuda.current_device() == 0
            check(d, x, weight.t())


def test_the_same_shape_on_both_gpus_in_turns_keeps_a_plan_and_a_workspace_each():
    """One call signature per device (the key holds the device): split-K calls that
    alternate between the GPUs each use their own device's workspace."""
    devices = [torch.device("cuda", 0), torch.device("cuda", 1)]
    weights = {d: rand_on(d, 28672, 4096) for d in devices}
    for _ in range(3):
        for device in devices:
            x = rand_on(device, 1, 4096)
            poisoned(device)
            check(wsgemm.gemm(x, weights[device].t()), x, weights[device].t())
    for device in devices:
        torch.cuda.synchronize(device)
    streams = {torch.cuda.current_stream(d).cuda_stream for d in devices}
    assert {key[1] for key in ws._workspaces} >= streams
    assert {key[0] for key in ws._workspaces} >= {0, 1}
    assert all(int(flags.abs().sum()) == 0 for flags, _ in ws._workspaces.values())
