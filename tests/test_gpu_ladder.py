"""The Hopper steps of the kernel ladder (examples/ladder/) on an SM90 GPU: each step's
output against PyTorch, on fresh random inputs, into outputs filled with NaN first (an
element the kernel forgets to write stays NaN). The Blackwell steps are compiled and
checked on the CPU only (tests/test_ladder.py)."""

import importlib
import sys
from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.gpu

LADDER = Path(__file__).resolve().parents[1] / "examples" / "ladder"
BF16_TOLERANCE = 1e-2  # relative Frobenius error: fp32 accumulation, bf16 rounding of D (~4e-3)


def step(name: str):
    if str(LADDER) not in sys.path:
        sys.path.insert(0, str(LADDER))
    return importlib.import_module(name)


_BUILT = {}


def built(name: str):
    if name not in _BUILT:
        _BUILT[name] = step(name).build()
    return _BUILT[name]


def rand(*shape):
    return torch.randn(*shape, device="cuda").to(torch.bfloat16)


def nan_matrix(m, n):
    return torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)


def check_gemm(d, a, b):
    """D against A @ B^T in fp32: every element written, relative error and the worst
    row within bf16 rounding (a wrong tile shows as a row error near the row's norm)."""
    torch.cuda.synchronize()
    assert not torch.isnan(d).any(), f"{int(torch.isnan(d).sum())} elements never written"
    reference = torch.matmul(a.float(), b.float().t())
    diff = d.float() - reference
    error = (diff.norm() / reference.norm()).item()
    assert error < BF16_TOLERANCE, f"relative error {error:.2e}"
    row_rms = reference.norm() / reference.shape[0] ** 0.5
    worst_row = (diff.norm(dim=1).max() / row_rms).item()
    assert worst_row < 4 * BF16_TOLERANCE, f"worst row error {worst_row:.2e} of a typical row"


@pytest.mark.parametrize("m, n", [(64, 64), (256, 512), (1024, 192)])
def test_hopper_1_copies_every_tile_exactly(m, n):
    x = rand(m, n)
    y = nan_matrix(m, n)
    built("hopper_1_tma_load").fn(x, y)
    torch.cuda.synchronize()
    assert torch.equal(x, y)


@pytest.mark.parametrize("m, n", [(128, 128), (256, 384), (1024, 640)])
def test_hopper_2_one_k_block(m, n):
    a, b, d = rand(m, 64), rand(n, 64), nan_matrix(m, n)
    built("hopper_2_one_wgmma").fn(a, b, d)
    check_gemm(d, a, b)


@pytest.mark.parametrize("name", ["hopper_3_k_ring", "hopper_4_warp_specialized"])
@pytest.mark.parametrize("m, n, k", [
    (128, 128, 64),  # one k-block: the ring never wraps
    (128, 128, 256),  # exactly one lap of a 4-stage ring
    (256, 384, 1000),  # several laps (the parity flips), a partial last k-block
    (512, 256, 4104),
])
def test_hopper_3_and_4_k_loops(name, m, n, k):
    a, b, d = rand(m, k), rand(n, k), nan_matrix(m, n)
    built(name).fn(a, b, d)
    check_gemm(d, a, b)


def sm_count():
    return torch.cuda.get_device_properties(0).multi_processor_count


@pytest.mark.parametrize("name", ["hopper_5_persistent", "hopper_6_tma_store"])
@pytest.mark.parametrize("m, n, k, ctas", [
    (640, 384, 1032, 1),  # one CTA does all 15 tiles, the ring carried across them
    (640, 384, 1032, 4),
    (640, 384, 1032, None),  # one CTA per SM: most have one tile, many none
    (2048, 2048, 512, None),  # more tiles (256) than SMs
])
def test_hopper_5_and_6_persistent(name, m, n, k, ctas):
    a, b, d = rand(m, k), rand(n, k), nan_matrix(m, n)
    built(name).fn(a, b, d, ctas or sm_count())
    check_gemm(d, a, b)


@pytest.mark.parametrize("m, n, k", [(600, 328, 1032), (8, 8, 8), (130, 136, 72)])
def test_hopper_6_tma_store_clips_at_the_matrix_edge(m, n, k):
    """TMA stores clip the last row and column of tiles: any multiple of 8 works,
    and nothing past D is written (D is a view into a NaN-filled larger buffer)."""
    a, b = rand(m, k), rand(n, k)
    canvas = nan_matrix(m + 16, n + 16)
    d = canvas[:m, :n]
    built("hopper_6_tma_store").fn(a, b, d, 3)
    check_gemm(d, a, b)
    assert torch.isnan(canvas[m:, :]).all() and torch.isnan(canvas[:, n:]).all()


@pytest.mark.parametrize("name", ["hopper_1_tma_load", "hopper_2_one_wgmma", "hopper_3_k_ring",
                                  "hopper_4_warp_specialized", "hopper_5_persistent", "hopper_6_tma_store"])
def test_each_step_runs_its_own_check(name):
    message = step(name).run(built(name))
    assert message
