"""Correctness of the SM90 kernel on a Hopper GPU, against a float32 reference.

Fresh random normal inputs for every case (never zeros), outputs poisoned with NaN
before each run (through ``out=``, and for allocated results by handing the
caching allocator NaN-filled memory first), relative Frobenius error bounds per
output dtype plus a row-wise bound that catches a single wrong tile.
"""

import dataclasses
import math
import subprocess
import sys

import pytest
import torch

import wsgemm
from wsgemm import DeviceError, GemmConfig, tuning

pytestmark = pytest.mark.gpu

# Relative Frobenius error bounds by output dtype: the kernel accumulates in fp32,
# so the error is the output rounding (bf16: 8 bits of mantissa, fp16: 11).
TOLERANCE = {torch.bfloat16: 1e-2, torch.float16: 2e-3, torch.float32: 1e-4}


@pytest.fixture(autouse=True)
def exact_fp32_reference():
    old = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False  # the reference must be true fp32
    yield
    torch.backends.cuda.matmul.allow_tf32 = old


def rand(*shape, dtype=torch.bfloat16):
    return torch.randn(*shape, device="cuda", dtype=torch.float32).to(dtype)


def poison_allocator(nbytes=1 << 28):
    """Leave NaN-filled blocks in torch's caching allocator, so a result tensor that
    the kernel forgets to write shows NaN instead of stale data."""
    junk = torch.full((nbytes // 4,), float("nan"), device="cuda")
    del junk


def check(d, a, b, dtype=None):
    ref = torch.matmul(a.float(), b.float())
    assert d.shape == ref.shape
    assert d.dtype == (dtype or a.dtype)
    assert not torch.isnan(d).any(), "unwritten (NaN-poisoned) output elements"
    if ref.numel() == 0:
        return
    diff = d.float() - ref
    rel = (diff.norm() / ref.norm()).item()
    tol = TOLERANCE[d.dtype]
    assert rel < tol, f"relative Frobenius error {rel:.3e} >= {tol:.0e}"
    # Each row's error against the typical (RMS) row norm: a wrong or unwritten tile
    # shows up as an error comparable to the row itself, while a row whose exact value
    # happens to be tiny (N = 1) cannot blow the ratio up.
    row_errors = diff.reshape(-1, diff.shape[-1]).norm(dim=-1)
    rms_row = ref.norm() / row_errors.numel() ** 0.5
    worst = (row_errors.max() / rms_row).item()
    assert worst < 5 * tol, f"worst row error {worst:.3e} of a typical row: a tile is wrong"


def run(a, b, **kwargs):
    poison_allocator()
    return wsgemm.gemm(a, b, **kwargs)


def default_path_on_weight(m, n, k):
    """Run the default path on random (m, k) tokens against an (n, k) weight passed as
    ``w.t()``, check the result, and return the plan it ran."""
    a, w = rand(m, k), rand(n, k)
    plan = wsgemm.plans.make_plan(a, w.t(), None, None, None)
    check(run(a, w.t()), a, w.t())
    return plan


def check_graph_replays(calls, inputs, outputs, verify, rounds=3):
    """Capture ``calls()`` in a CUDA graph (after one eager run, so compiling and
    loading happen outside the capture), then replay it ``rounds`` times, each on
    fresh random contents of ``inputs`` into NaN-poisoned ``outputs``, and
    ``verify()`` after each: a graph must read the tensors' current contents."""
    calls()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        calls()
    for _ in range(rounds):
        for t in inputs:
            t.copy_(rand(*t.shape, dtype=t.dtype))
        for t in outputs:
            t.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        verify()


SHAPES = [
    (128, 256, 64),  # exactly one tile
    (256, 512, 1024),
    (1000, 1000, 1000),  # not a multiple of any tile
    (1, 8, 8),  # tiny
    (8, 8, 8),
    (1, 4096, 4096),  # decode-like skinny M
    (4096, 1, 1024),  # one column
    (333, 517, 129),  # odd everything: padded copies of A, B and a staged D
    (64, 64, 32768),  # long K, a single output tile
    (2048, 2048, 2048),
]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("m, n, k", SHAPES, ids=[f"{m}x{n}x{k}" for m, n, k in SHAPES])
def test_shapes(m, n, k, dtype):
    a, b = rand(m, k, dtype=dtype), rand(k, n, dtype=dtype)
    check(run(a, b), a, b)


MAJOR_CASES = [("row", "row"), ("row", "col"), ("col", "row"), ("col", "col")]


def layout(t, major):
    """The same matrix (or batch of matrices) stored row-major or column-major."""
    return t.contiguous() if major == "row" else t.transpose(-1, -2).contiguous().transpose(-1, -2)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("a_major, b_major", MAJOR_CASES, ids=[f"a{x}-b{y}" for x, y in MAJOR_CASES])
@pytest.mark.parametrize("m, n, k", [(512, 384, 256), (200, 136, 72)], ids=["aligned", "ragged"])
def test_operand_majors(a_major, b_major, m, n, k, dtype):
    a = layout(rand(m, k, dtype=dtype), a_major)
    b = layout(rand(k, n, dtype=dtype), b_major)
    check(run(a, b), a, b)


# Tile widths that are not multiples of 64 (they exist to fit the waves, e.g.
# 10240 = 64 x 160, and the tokens of swapped tiles): their shared-memory rows of an
# N-major B are not a whole number of 128-byte swizzle atoms, and their epilogue walks
# 5 or 7 subtiles of 32 columns, or, at odd multiples of 16, 16-column subtiles.
@pytest.mark.parametrize("tile_n", [160, 224, 48, 80, 112, 144, 240])
@pytest.mark.parametrize("a_major, b_major", MAJOR_CASES, ids=[f"a{x}-b{y}" for x, y in MAJOR_CASES])
@pytest.mark.parametrize("d_major", ["row", "col"])
def test_wave_fitting_tile_widths(tile_n, a_major, b_major, d_major):
    m, n, k = 300, 3 * tile_n + 40, 520  # ragged in every dimension
    a = layout(rand(m, k), a_major)
    b = layout(rand(k, n), b_major)
    out = layout(torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16), d_major)
    config = GemmConfig(tile_m=128, tile_n=tile_n, cluster_m=2)
    wsgemm.gemm(a, b, out=out, config=config)
    check(out, a, b)


def test_weight_transpose_is_read_without_copy(monkeypatch):
    import wsgemm.operands as operands

    copies = []
    real = operands.padded_empty
    monkeypatch.setattr(operands, "padded_empty", lambda *a, **k: copies.append(a) or real(*a, **k))
    w = rand(384, 512)  # (N, K) like nn.Linear.weight
    x = rand(256, 512)
    check(run(x, w.t()), x, w.t())
    assert copies == []


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
def test_fp32_output(dtype):
    a, b = rand(300, 520, dtype=dtype), rand(520, 264, dtype=dtype)
    check(run(a, b, out_dtype=torch.float32), a, b, torch.float32)


def test_batched():
    a, b = rand(3, 300, 136), rand(3, 136, 200)
    check(run(a, b), a, b)


def test_batched_times_shared_matrix_and_back():
    a, b = rand(4, 100, 64), rand(64, 96)
    check(run(a, b), a, b)
    a2, b2 = rand(100, 64), rand(3, 64, 96)
    check(run(a2, b2), a2, b2)


def test_batched_transposed_operands():
    a = rand(2, 64, 160).transpose(1, 2)  # (2, 160, 64), M-major per batch
    b = rand(2, 96, 64).transpose(1, 2)  # (2, 64, 96), K-major per batch
    check(run(a, b), a, b)


def test_out_is_written_in_place():
    a, b = rand(500, 300), rand(300, 260)
    out = torch.full((500, 260), float("nan"), device="cuda", dtype=torch.bfloat16)
    d = wsgemm.gemm(a, b, out=out)
    assert d is out
    check(out, a, b)


def test_column_major_out():
    a, b = rand(256, 192), rand(192, 320)
    out = torch.full((320, 256), float("nan"), device="cuda", dtype=torch.float32).t()
    wsgemm.gemm(a, b, out=out)
    check(out, a, b, torch.float32)


def test_out_without_a_tensor_map_is_staged():
    a, b = rand(100, 64), rand(64, 45)
    storage = torch.full((100, 50), float("nan"), device="cuda", dtype=torch.bfloat16)
    out = storage[:, 1:46]  # base 2 bytes past 16-byte alignment
    wsgemm.gemm(a, b, out=out)
    check(out, a, b)
    assert torch.isnan(storage[:, 0]).all() and torch.isnan(storage[:, 46:]).all()


def test_zero_sized_dimensions():
    assert wsgemm.gemm(rand(0, 64), rand(64, 32)).shape == (0, 32)
    assert wsgemm.gemm(rand(16, 64), rand(64, 0)).shape == (16, 0)
    out = torch.full((16, 32), float("nan"), device="cuda", dtype=torch.bfloat16)
    assert torch.equal(wsgemm.gemm(rand(16, 0), rand(0, 32), out=out), torch.zeros_like(out))


CONFIGS = [
    GemmConfig(cluster_m=2),
    GemmConfig(cluster_n=2),
    GemmConfig(cluster_m=2, cluster_n=2),
    GemmConfig(lookahead="after_copy"),
    GemmConfig(lookahead="none"),
    GemmConfig(tile_m=64, tile_n=128),
    GemmConfig(tile_m=128, tile_n=128, stages=2, epi_stages=1),
    # Four epilogue buffers beside a full ring (what the default path picks for short K).
    GemmConfig(cluster_m=2, stages=4, epi_stages=4),
    GemmConfig(tile_m=128, tile_n=192),
    GemmConfig(tile_m=128, tile_n=160, cluster_m=2),
    GemmConfig(tile_m=64, tile_n=224, stream_k=True),
    GemmConfig(raster="along_n", swizzle=4),
    GemmConfig(raster="along_m", swizzle=8, cluster_m=2),
    # Multicast to four CTAs, 96-wide tiles, and a ring as deep as shared memory allows.
    GemmConfig(tile_m=64, tile_n=96, cluster_m=4),
    GemmConfig(tile_m=128, tile_n=128, cluster_n=4),
    GemmConfig(tile_m=64, tile_n=64, cluster_m=2, cluster_n=2, stages=13),
    # 256-row tiles: each consumer warpgroup stacks two wgmmas of 64 rows.
    GemmConfig(tile_m=256, tile_n=192),
    GemmConfig(tile_m=256, tile_n=128, cluster_m=2, stream_k=True),
    GemmConfig(tile_m=256, tile_n=144, cluster_n=2, split_k=2),
    # 192-row tiles: three consumer warpgroups of 64 rows.
    GemmConfig(tile_m=192, tile_n=192, cluster_m=2),
    GemmConfig(tile_m=192, tile_n=176, split_k=2),
]


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: c.short())
@pytest.mark.parametrize("m, n, k", [(1024, 1280, 640), (1000, 1100, 520)], ids=["even", "ragged"])
def test_configs(config, m, n, k):
    a, b = rand(m, k), rand(k, n)
    check(run(a, b, config=config), a, b)


# A cluster pads the tile grid to whole clusters; a CTA whose tile lies wholly past M
# (or N) skips loading that operand (the producer in kernels/sm90.py), so its
# consumers multiply whatever the ring slot held. None of that may reach D: the
# rows and columns past the output's edge stay poisoned.
PADDED = [
    (GemmConfig(tile_m=128, tile_n=128, cluster_m=2), (384, 512, 1024)),  # 3 tile rows of 4
    (GemmConfig(tile_m=64, tile_n=256, cluster_m=4), (320, 512, 512)),  # 5 of 8: 3 CTAs without rows
    (GemmConfig(tile_m=128, tile_n=128, cluster_n=2), (256, 384, 512)),  # 3 tile columns of 4
    (GemmConfig(tile_m=128, tile_n=128, cluster_m=2, cluster_n=2), (384, 384, 520)),  # both
    (GemmConfig(tile_m=128, tile_n=128, cluster_m=2, pingpong=True), (640, 256, 1024)),
    (GemmConfig(tile_m=128, tile_n=128, cluster_m=2, split_k=2), (384, 512, 2048)),
    (GemmConfig(tile_m=128, tile_n=256, cluster_m=2, stream_k=True), (1152, 4096, 1024)),
    (GemmConfig(tile_m=256, tile_n=128, cluster_m=2), (384, 512, 1024)),  # the second warpgroup's rows: none
    (GemmConfig(tile_m=192, tile_n=128, cluster_m=2), (400, 512, 1024)),  # 3 tile rows of 4, the third 16 rows
]


@pytest.mark.parametrize("config, shape", PADDED, ids=[c.short() for c, _ in PADDED])
def test_clusters_over_tiles_past_the_edge(config, shape):
    m, n, k = shape
    a, b = rand(m, k), rand(k, n)
    backing = torch.full((m + 256, n + 256), float("nan"), device="cuda", dtype=torch.bfloat16)
    out = backing[:m, :n]
    wsgemm.gemm(a, b, out=out, config=config)
    check(out, a, b)
    assert torch.isnan(backing[m:]).all() and torch.isnan(backing[:, n:]).all(), "wrote past the output"


# TMA stores whole 16-byte chunks: into an output whose rows end between two 16-byte
# boundaries a direct store would write past each row's end, over the neighbouring
# columns of a wider tensor (wsgemm.operands.writable_major). Such outputs are
# computed into a staging buffer and copied.
@pytest.mark.parametrize("n", [1100, 1101, 1096])
@pytest.mark.parametrize("d_dtype", [torch.bfloat16, torch.float32], ids=["bf16", "fp32"])
@pytest.mark.parametrize("config", [None, GemmConfig(tile_m=128, tile_n=128)], ids=["default", "128x128"])
def test_outputs_that_end_between_16_byte_boundaries_keep_their_neighbours(n, d_dtype, config):
    m, k = 300, 256
    a, b = rand(m, k), rand(k, n)
    backing = torch.full((m, 1152), float("nan"), device="cuda", dtype=d_dtype)
    out = backing[:, :n]
    wsgemm.gemm(a, b, out=out, config=config)
    check(out, a, b, dtype=d_dtype)
    assert torch.isnan(backing[:, n:]).all(), "wrote past the output's rows"


# The last tile row and column move back so that their boxes end at the edge
# (scheduler.edge_tile_offset), recomputing rows and columns their neighbours also
# compute and storing over them; along an operand's contiguous dimension only by whole
# 16-byte groups (TMA boxes start on 16-byte boundaries). What they store must equal,
# bit for bit, what the same config computes on larger operands whose extra rows and
# columns put every tile in place; and nothing past the output's edge may be written.
MOVED_EDGES = [
    # (config, (batches, M, N, K), A column-major, D column-major, D dtype)
    (GemmConfig(tile_m=128, tile_n=128), (1, 576, 2496, 1024), False, False, torch.bfloat16),
    (GemmConfig(tile_m=64, tile_n=256), (1, 200, 1000, 512), False, False, torch.bfloat16),
    (GemmConfig(tile_m=128, tile_n=96, cluster_n=2), (1, 320, 4096, 1024), False, False, torch.bfloat16),
    (GemmConfig(tile_m=128, tile_n=128, cluster_m=2), (1, 680, 1288, 512), False, False, torch.bfloat16),
    # N = 1100: the last column would move back 52 columns, D's contiguous ones: 48.
    (GemmConfig(tile_m=128, tile_n=192, pingpong=True), (1, 1000, 1100, 520), False, False, torch.bfloat16),
    (GemmConfig(tile_m=128, tile_n=64, swap_ab=True), (1, 300, 1000, 256), False, False, torch.bfloat16),
    (GemmConfig(tile_m=128, tile_n=128), (3, 300, 400, 256), False, False, torch.bfloat16),
    # M = 1003 along column-major A and D (contiguous M), fp32 D.
    (GemmConfig(tile_m=128, tile_n=128), (1, 1003, 1000, 256), True, False, torch.bfloat16),
    (GemmConfig(tile_m=128, tile_n=128), (1, 1003, 1000, 256), False, True, torch.float32),
    # Split-K in one wave: every tile split alike, so the moved tile sums its shared
    # rows as its neighbour does (and so do the in-place operands: one wave too).
    (GemmConfig(tile_m=128, tile_n=128, split_k=2), (1, 320, 2560, 1024), False, False, torch.bfloat16),
    (GemmConfig(tile_m=128, tile_n=192, cluster_m=2, split_k=3), (1, 200, 4096, 1536), False, False, torch.bfloat16),
    (GemmConfig(tile_m=256, tile_n=144, swap_ab=True), (1, 136, 3000, 1024), False, False, torch.bfloat16),
    (GemmConfig(tile_m=256, tile_n=96), (1, 1003, 1000, 256), True, True, torch.float32),
    (GemmConfig(tile_m=192, tile_n=176, cluster_m=2, swap_ab=True), (1, 176, 2200, 1024), False, False, torch.bfloat16),
]


@pytest.mark.parametrize("config, shape, a_col, d_col, d_dtype", MOVED_EDGES,
                         ids=[f"{c.short()}-{'x'.join(map(str, s))}{'-acol' * a}{'-dcol' * d}-{str(t)[6:]}"
                              for c, s, a, d, t in MOVED_EDGES])
def test_edge_tiles_move_inside_and_store_what_their_neighbours_do(config, shape, a_col, d_col, d_dtype):
    batches, m, n, k = shape
    lead = (batches,) if batches > 1 else ()
    # Larger operands whose every tile is in place (kernel M and N are N and M if swapped).
    step = math.lcm(config.tile_m, config.tile_n)
    a_whole, b_whole = rand(*lead, step * -(-m // step), k), rand(*lead, k, step * -(-n // step))
    if a_col:
        a_whole = layout(a_whole, "col")
    a, b = a_whole[..., :m, :], b_whole[..., :n]
    # Room past both edges, with 16-byte aligned strides so that D goes to the kernel as it is.
    backing = torch.full((*lead, 8 * -(-(m + 256) // 8), 8 * -(-(n + 256) // 8)), float("nan"), device="cuda",
                         dtype=d_dtype)
    if d_col:
        backing = layout(backing, "col")
    out = backing[..., :m, :n]
    wsgemm.gemm(a, b, out=out, config=config)
    check(out, a, b, dtype=d_dtype)
    assert torch.isnan(backing[..., m:, :]).all() and torch.isnan(backing[..., n:]).all(), "wrote past the output"
    in_place = wsgemm.gemm(a_whole, b_whole, out_dtype=d_dtype, config=config)[..., :m, :n]
    assert torch.equal(out, in_place), "a moved tile stored other values than its neighbour computed"


# Ping-pong consumers: each warpgroup runs every other tile of its CTA, so the cases
# cover a CTA with one tile (the second warpgroup idle), odd and even tile counts per
# CTA, a k-loop of one k-block (the turns hand over every k-block), clusters, and
# 64-row tiles (one wgmma row block per tile) beside 128-row ones (two).
PINGPONG_CONFIGS = [
    GemmConfig(tile_m=128, tile_n=128, pingpong=True),
    GemmConfig(tile_m=128, tile_n=128, cluster_m=2, pingpong=True),
    GemmConfig(tile_m=128, tile_n=192, cluster_m=2, pingpong=True),  # 192 accumulators per thread
    # What the default path runs for short K: three buffers per warpgroup, five stages.
    GemmConfig(tile_m=128, tile_n=192, cluster_m=2, stages=5, epi_stages=3, pingpong=True),
    GemmConfig(tile_m=64, tile_n=256, cluster_n=2, pingpong=True),
    GemmConfig(tile_m=64, tile_n=128, stages=3, epi_stages=4, pingpong=True),
]
PINGPONG_SHAPES = [(128, 128, 4096), (1000, 1100, 520), (3000, 2900, 1000), (4096, 4096, 64), (8192, 1024, 200)]


@pytest.mark.parametrize("config", PINGPONG_CONFIGS, ids=lambda c: c.short())
@pytest.mark.parametrize("m, n, k", PINGPONG_SHAPES, ids=[f"{m}x{n}x{k}" for m, n, k in PINGPONG_SHAPES])
def test_pingpong_consumers(config, m, n, k):
    a, b = rand(m, k), rand(k, n)
    check(run(a, b, config=config), a, b)


@pytest.mark.parametrize("a_major, b_major", MAJOR_CASES, ids=[f"a{x}-b{y}" for x, y in MAJOR_CASES])
def test_pingpong_operand_majors_fp32_out_and_batches(a_major, b_major):
    config = GemmConfig(tile_m=128, tile_n=128, cluster_m=2, pingpong=True)
    a = torch.stack([layout(rand(700, 390), a_major) for _ in range(3)])
    b = torch.stack([layout(rand(390, 900), b_major) for _ in range(3)])
    out = torch.full((3, 900, 700), float("nan"), device="cuda", dtype=torch.float32).transpose(1, 2)
    wsgemm.gemm(a, b, out=out, config=config)
    check(out, a, b, dtype=torch.float32)


def test_the_default_path_runs_short_k_loops_on_pingpong_consumers():
    a, b = rand(4096, 256), rand(256, 4096)
    assert wsgemm.plans.make_plan(a, b, None, None, None).spec.config.pingpong
    check(run(a, b), a, b)
    out = torch.full((4096, 4096), float("nan"), device="cuda", dtype=torch.bfloat16)
    check_graph_replays(lambda: wsgemm.gemm(a, b, out=out), [a, b], [out], lambda: check(out, a, b))


def test_the_default_path_runs_one_wave_long_k_loops_one_tile_per_warpgroup():
    # 4 x 33 tiles of 128x128 (one wave of 2x1 clusters), ragged in M, N and K.
    a, b = rand(500, 8200), rand(8200, 4200)
    config = wsgemm.plans.make_plan(a, b, None, None, None).spec.config
    assert config.pingpong and (config.tile_m, config.tile_n) == (128, 128), config
    check(run(a, b), a, b)


def test_the_default_path_runs_one_wave_of_64x128_pairs_on_a_7_stage_ring():
    # 16 x 8 tiles of 64x128 (the last row 40 rows, the last column 104 wide, the last
    # k-block 8 deep) in 2x1 clusters, one wave; 7 stages and four epilogue buffers
    # (docs/tuning-log/clusters.md).
    config = default_path_on_weight(1000, 1000, 2056).spec.config
    assert (config.tile_m, config.tile_n, config.cluster_m, config.stages, config.epi_stages) == (64, 128, 2, 7, 4)


# Kernels at ragged edges: each case was once the default path's plan for its shape
# (launched as a programmatic dependent); run here as that config, its edges stay
# covered whatever the planner chooses for the shape now
# (test_the_default_path_runs_what_the_planner_selects runs the planner's choice).
EDGE_CASES = {
    # M = 300: three token tiles of 112 (the last 76); 43 weight tiles of 256 rows (the
    # last 248) in pairs, the last pair's second CTA all padding.
    "three token tiles beside 256-row weight tiles": (
        300, 11000, 4096, GemmConfig(tile_m=256, tile_n=112, cluster_m=2, stages=4, epi_stages=4, swap_ab=True)),
    # M = 150: two token tiles of 80 (the second 70); 53 weight tiles of 192 rows (the
    # last 16), each in a 1x2 cluster multicasting it to both token tiles; K ragged.
    "two token tiles of 80 beside 192-row weight tiles": (
        150, 10000, 4104, GemmConfig(tile_m=192, tile_n=80, cluster_n=2, stages=6, epi_stages=3, swap_ab=True)),
    # M = 210: two of 112 (the second 98) beside 58 weight tiles (the last 56 rows), a
    # 160-k-block loop whose last k-block holds 8 columns.
    "two token tiles of 112 beside 192-row weight tiles": (
        210, 11000, 10184, GemmConfig(tile_m=192, tile_n=112, cluster_n=2, stages=5, epi_stages=4, swap_ab=True)),
    # M = 230: two rows of 128-row tiles (the second 102 rows) in 2x1 clusters; 63
    # columns of 144 (the last 72 wide) on a 9000-row weight, 126 CTAs; K ragged.
    "two rows of 128-row tiles, 144 wide": (
        230, 9000, 4104, GemmConfig(tile_n=144, cluster_m=2, stages=6, epi_stages=4)),
    # M = 150: the second row 22 rows; 63 columns of 80 (the last 40) on 5000 rows.
    "two rows of 128-row tiles, 80 wide": (
        150, 5000, 8200, GemmConfig(tile_n=80, cluster_m=2, stages=8, epi_stages=4)),
    # 170 tokens in one token tile of 176; 40 weight tiles of 128 rows (the last 8),
    # each k-loop of 219 k-blocks (the last 48 columns deep) split three ways: 120 CTAs.
    "one token tile of 176, split three ways": (
        170, 5000, 14000, GemmConfig(tile_n=176, stages=5, epi_stages=4, split_k=3, swap_ab=True)),
    # 150 tokens in two of 80 (the second 70) beside 32 weight tiles of 192 rows (the
    # last 48), each pair in a 1x2 cluster, split two ways: 128 CTAs.
    "two token tiles of 80 beside 192-row weight tiles, split two ways": (
        150, 6000, 14000,
        GemmConfig(tile_m=192, tile_n=80, cluster_n=2, stages=6, epi_stages=3, split_k=2, swap_ab=True)),
    # M = 300: two 192-row tiles, the second 108 rows; 64 columns of 96 (one wave of
    # pairs); K = 4100 rows are not 16-byte aligned, so the operands are copied first.
    "two rows of 192-row tiles in pairs": (
        300, 6144, 4100, GemmConfig(tile_m=192, tile_n=96, cluster_m=2, stages=5, epi_stages=3)),
    # 10 x 12 tiles in 2x4 clusters (the last row 44 rows, the last column 88 wide) and
    # 11 x 10 in 4x2 (padded to 12 x 10; the last column 48 wide), the last k-block 8
    # deep: each A box multicast to 4 CTAs and each B box to 2, or the other way round.
    "64x128 tiles in 2x4 clusters": (620, 1496, 2056, GemmConfig(tile_m=64, tile_n=128, cluster_m=2, cluster_n=4)),
    "64x128 tiles in 4x2 clusters": (700, 1200, 2056, GemmConfig(tile_m=64, tile_n=128, cluster_m=4, cluster_n=2)),
    # 131 tokens in one token tile of 144; 112 weight tiles of 256 rows (the last 184)
    # in 28 clusters of 4 that multicast the token tile; the last k-block 8 deep
    # (docs/tuning-log/clusters.md).
    "swapped 256-row tiles in clusters of four": (
        131, 28600, 4104, GemmConfig(tile_m=256, tile_n=144, cluster_m=4, stages=4, epi_stages=4, swap_ab=True)),
    # One 64-row tile row, its last columns and k-block ragged: 125 CTAs.
    "one tile row of 64x80 tiles": (40, 10000, 4104, GemmConfig(tile_m=64, tile_n=80, epi_stages=4)),
    "one tile row of 64x48 tiles": (56, 6000, 8200, GemmConfig(tile_m=64, tile_n=48, epi_stages=4)),
    # 33 to 64 tokens swapped into one fitted tile, the weight's last 64-row tile and the
    # last k-block ragged, the token tile padded past M: 47, 32 and 79 CTAs.
    "48 tokens in one tile of 48": (48, 3000, 2056, GemmConfig(tile_m=64, tile_n=48, epi_stages=4, swap_ab=True)),
    "37 tokens in one tile of 48": (37, 2000, 2056, GemmConfig(tile_m=64, tile_n=48, epi_stages=4, swap_ab=True)),
    "61 tokens in one tile of 64": (61, 5000, 3080, GemmConfig(tile_m=64, tile_n=64, epi_stages=4, swap_ab=True)),
}


@pytest.mark.parametrize("case", list(EDGE_CASES))
def test_kernels_at_ragged_edges(case):
    m, n, k, config = EDGE_CASES[case]
    config = dataclasses.replace(config, dependent_launch=True)  # as the default path launched them
    a, w = rand(m, k), rand(n, k)
    plan = wsgemm.plans.make_plan(a, w.t(), None, None, config)
    assert (plan.mode == "swap") == config.swap_ab, plan
    check(run(a, w.t(), config=config), a, w.t())


def selected_on_weight(m, n, k) -> GemmConfig:
    """What ``wsgemm.tuning.select`` chooses on this GPU for ``x @ w.t()``."""
    gpu = wsgemm.devices.gpu(torch.cuda.current_device())
    return tuning.select(tuning.Problem(m, n, k, can_swap=True), gpu)


PLANNED_FIELDS = ("tile_m", "tile_n", "tile_k", "cluster_m", "cluster_n", "split_k", "stream_k", "pingpong",
                  "swizzle", "dependent_launch")


@pytest.mark.parametrize("case", list(EDGE_CASES))
def test_the_default_path_runs_what_the_planner_selects(case):
    """The same shapes through the default path: the plan runs ``tuning.select``'s
    choice for this GPU (operands that need copies aside), and computes the product."""
    m, n, k, _ = EDGE_CASES[case]
    plan = default_path_on_weight(m, n, k)
    if plan.mode in ("direct", "swap"):
        chosen = selected_on_weight(m, n, k)
        assert (plan.mode == "swap") == chosen.swap_ab, (plan, chosen)
        assert all(getattr(plan.spec.config, f) == getattr(chosen, f) for f in PLANNED_FIELDS), (plan, chosen)


def test_results_are_deterministic():
    a, b = rand(1536, 1536), rand(1536, 1536)
    first = wsgemm.gemm(a, b)
    for _ in range(3):
        assert torch.equal(wsgemm.gemm(a, b), first), "results differ between runs: a race"


def test_cuda_graph_capture_and_replay():
    a, b = rand(512, 768), rand(768, 384)
    out = torch.empty(512, 384, device="cuda", dtype=torch.bfloat16)
    check_graph_replays(lambda: wsgemm.gemm(a, b, out=out), [a, b], [out], lambda: check(out, a, b))


def test_runs_on_the_current_stream():
    a = torch.full((1024, 1024), float("nan"), device="cuda", dtype=torch.bfloat16)
    b = torch.full((1024, 1024), float("nan"), device="cuda", dtype=torch.bfloat16)
    a_val, b_val = rand(1024, 1024), rand(1024, 1024)
    wsgemm.gemm(a_val, b_val)  # compile outside the timed region
    torch.cuda.synchronize()
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        torch.cuda._sleep(50_000_000)  # ~tens of ms: a kernel on another stream would run first
        a.copy_(a_val)
        b.copy_(b_val)
        d = wsgemm.gemm(a, b)
    side.synchronize()
    check(d, a_val, b_val)


def test_out_on_another_device_is_rejected():
    a, b = rand(8, 8), rand(8, 8)
    with pytest.raises(DeviceError, match="out is on cpu but the operands are on cuda:0"):
        wsgemm.gemm(a, b, out=torch.empty(8, 8, dtype=torch.bfloat16))


def test_cpu_operand_next_to_a_gpu_one_is_rejected():
    with pytest.raises(DeviceError, match="b is on cpu"):
        wsgemm.gemm(rand(8, 8), torch.randn(8, 8, dtype=torch.bfloat16))


def test_a_new_process_loads_the_kernel_from_the_disk_cache(tmp_path):
    import os

    script = (
        "import torch, wsgemm, wsgemm.compile as c\n"
        "a = torch.randn(640, 320, device='cuda').bfloat16(); b = torch.randn(320, 192, device='cuda').bfloat16()\n"
        "d = wsgemm.gemm(a, b, config=wsgemm.GemmConfig(tile_m=64, tile_n=192))\n"
        "ref = a.float() @ b.float()\n"
        "entry = next(iter(c.KERNEL_CACHE._entries.values()))\n"
        "print(entry.extra.get('from_disk', False), ((d.float() - ref).norm() / ref.norm()).item())\n"
    )
    env = {**os.environ, "WSGEMM_CACHE_DIR": str(tmp_path)}
    runs = [subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
            for _ in range(2)]
    for r in runs:
        assert r.returncode == 0, r.stderr[-2000:]
    (first_disk, first_err), (second_disk, second_err) = (r.stdout.split() for r in runs)
    assert first_disk == "False" and second_disk == "True"
    assert float(first_err) < 1e-2 and float(second_err) < 1e-2
    assert list(tmp_path.glob("k*.o"))


def test_cluster_occupancy_is_read_in_a_fresh_process_and_a_new_thread():
    """Regression: max_active_clusters asked the driver with the thread's current
    context, which a fresh process or a new thread does not have yet
    (CUDA_ERROR_INVALID_CONTEXT)."""
    import threading

    from wsgemm import devices

    code = "import wsgemm.devices as devices; print(devices.max_active_clusters(0, 2))"
    fresh = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert fresh.returncode == 0, fresh.stderr[-2000:]
    assert 0 < int(fresh.stdout.split()[-1]) <= torch.cuda.get_device_properties(0).multi_processor_count // 2
    devices._max_clusters.clear()
    seen = []
    worker = threading.Thread(target=lambda: seen.append(devices.max_active_clusters(0, 4)))
    worker.start()
    worker.join()
    assert len(seen) == 1 and 0 < seen[0] <= torch.cuda.get_device_properties(0).multi_processor_count // 4


def test_the_planners_view_of_this_gpu_reads_the_drivers_numbers():
    """``wsgemm.devices.gpu``: the SM count, clock, HBM bandwidth, L2 size and cluster
    residency the planner chooses by; an H100 SXM or H200 gets its preset's table key."""
    gpu = wsgemm.devices.gpu(0)
    props = torch.cuda.get_device_properties(0)
    assert (gpu.arch, gpu.sms, gpu.l2_bytes) == ("sm90", props.multi_processor_count, props.L2_cache_size)
    assert gpu.clusters(1) == gpu.sms and 0 < gpu.clusters(2) <= gpu.sms // 2
    assert 0 < gpu.clusters(8) <= gpu.sms // 8
    presets = {"H200": tuning.H200, "H100 80GB HBM3": tuning.H100_SXM}
    for name, preset in presets.items():
        if name in props.name and gpu.sms == preset.sms:
            assert gpu.table_key == preset.table_key, (gpu, preset)
