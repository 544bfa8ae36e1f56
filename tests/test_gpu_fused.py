"""Fused epilogues on a Hopper GPU: ``act(alpha * a @ b + bias)`` against a float32
reference, on every activation x bias x alpha combination, ragged shapes, both
operand majors, swapped (decode), split-K and stream-K plans, batched calls,
``out=``, autograd, CUDA graphs and ``torch.compile``.

Inputs are fresh random normals; results are poisoned (NaN in the caching allocator,
or in ``out``) before each run.
"""

import itertools

import pytest
import torch

import wsgemm
from wsgemm import GemmConfig
from wsgemm.fused import reference_activation

pytestmark = pytest.mark.gpu

# Relative Frobenius error bounds by output dtype (fp32 accumulation; the output
# rounding dominates). gelu_tanh's tanh.approx adds ~2^-11 relative: fp32 results
# get a looser bound for it.
TOLERANCE = {torch.bfloat16: 1e-2, torch.float16: 2e-3, torch.float32: 1e-4}
APPROX_TOLERANCE = {torch.float32: 1e-3}
ACTIVATIONS = [None, "relu", "gelu", "gelu_tanh", "silu"]


@pytest.fixture(autouse=True)
def exact_fp32_reference():
    old = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32 = old


def rand(*shape, dtype=torch.bfloat16):
    return torch.randn(*shape, device="cuda", dtype=torch.float32).to(dtype)


def poison_allocator(nbytes=1 << 28):
    junk = torch.full((nbytes // 4,), float("nan"), device="cuda")
    del junk


def reference(a, b, bias, activation, alpha):
    z = alpha * torch.matmul(a.float(), b.float())
    if bias is not None:
        z = z + (bias.float().unsqueeze(-2) if bias.dim() == 2 else bias.float())
    return reference_activation(z, activation or "")


def check(d, ref, activation=None):
    assert d.shape == ref.shape
    assert not torch.isnan(d).any(), "unwritten (NaN-poisoned) output elements"
    diff = d.float() - ref
    rel = (diff.norm() / ref.norm().clamp_min(1e-30)).item()
    tol = TOLERANCE[d.dtype]
    if activation == "gelu_tanh":
        tol = APPROX_TOLERANCE.get(d.dtype, tol)
    assert rel < tol, f"relative Frobenius error {rel:.3e} >= {tol:.0e}"
    rows = diff.reshape(-1, diff.shape[-1]).norm(dim=-1)
    rms_row = ref.norm() / rows.numel() ** 0.5
    assert (rows.max() / rms_row).item() < 5 * tol, "a tile is wrong"


def run(a, b, **kwargs):
    poison_allocator()
    return wsgemm.gemm(a, b, **kwargs)


@pytest.mark.parametrize("activation", ACTIVATIONS)
@pytest.mark.parametrize("bias_dtype", [None, torch.float32, torch.bfloat16])
@pytest.mark.parametrize("alpha", [1.0, 0.5])
def test_every_activation_bias_and_alpha_on_a_ragged_shape(activation, bias_dtype, alpha):
    if activation is None and bias_dtype is None and alpha == 1.0:
        pytest.skip("the plain product")
    m, n, k = 333, 1000, 520
    a, w = rand(m, k), rand(n, k)
    bias = rand(n, dtype=bias_dtype) if bias_dtype else None
    d = run(a, w.t(), bias=bias, activation=activation, alpha=alpha)
    check(d, reference(a, w.t(), bias, activation, alpha), activation)


@pytest.mark.parametrize("out_dtype", [torch.float16, torch.float32])
@pytest.mark.parametrize("activation", ["gelu", "gelu_tanh", "silu"])
def test_output_dtypes(out_dtype, activation):
    a, w = rand(256, 512, dtype=torch.float16), rand(384, 512, dtype=torch.float16)
    bias = rand(384, dtype=torch.float16)
    d = run(a, w.t(), bias=bias, activation=activation, out_dtype=out_dtype)
    assert d.dtype == out_dtype
    check(d, reference(a, w.t(), bias, activation, 1.0), activation)


@pytest.mark.parametrize("a_major,b_major", list(itertools.product(["k", "m"], ["k", "n"])))
def test_operand_majors(a_major, b_major):
    m, n, k = 200, 264, 392
    a = rand(m, k) if a_major == "k" else rand(k, m).t()
    b = rand(n, k).t() if b_major == "k" else rand(k, n)
    bias = rand(n, dtype=torch.float32)
    check(run(a, b, bias=bias, activation="relu"), reference(a, b, bias, "relu", 1.0))


@pytest.mark.parametrize("m", [1, 7, 32, 64])
def test_decode_shapes_take_the_swapped_plan_with_the_bias_along_its_rows(m):
    n, k = 4096, 4096
    a, w = rand(m, k), rand(n, k)
    bias = rand(n)
    d = run(a, w.t(), bias=bias, activation="silu")
    check(d, reference(a, w.t(), bias, "silu", 1.0), "silu")
    forced = run(a, w.t(), bias=bias, activation="silu",
                 config=GemmConfig(tile_m=128, tile_n=16 if m <= 16 else 64, swap_ab=True))
    check(forced, reference(a, w.t(), bias, "silu", 1.0), "silu")


@pytest.mark.parametrize("config", [GemmConfig(tile_m=128, tile_n=128, split_k=3),
                                    GemmConfig(tile_m=128, tile_n=128, stream_k=True),
                                    GemmConfig(tile_m=128, tile_n=192, pingpong=True),
                                    GemmConfig(tile_m=128, tile_n=128, cluster_m=2),
                                    GemmConfig(tile_m=256, tile_n=128)])
def test_split_streamed_and_other_plans_apply_the_epilogue_once(config):
    # Few tiles over a long K: the split and streamed plans really split; a second
    # application of the epilogue (or bias per piece) would show as a large error.
    m, n, k = 256, 384, 8192
    a, w = rand(m, k), rand(n, k)
    bias = rand(n) * 10
    d = run(a, w.t(), bias=bias, activation="gelu", alpha=0.25, config=config)
    check(d, reference(a, w.t(), bias, "gelu", 0.25), "gelu")


@pytest.mark.parametrize("b_batched", [True, False])
@pytest.mark.parametrize("bias_rows", [0, 1])
def test_batched_calls_with_one_bias_or_one_per_batch(b_batched, bias_rows):
    batches, m, n, k = 3, 100, 136, 256
    a = rand(batches, m, k)
    b = rand(batches, k, n) if b_batched else rand(n, k).t()
    bias = rand(batches, n) if bias_rows else rand(n)
    check(run(a, b, bias=bias, activation="relu"), reference(a, b, bias, "relu", 1.0))


def test_out_receives_the_result_in_place():
    a, w = rand(300, 256), rand(520, 256)
    bias = rand(520)
    out = torch.full((300, 520), float("nan"), device="cuda", dtype=torch.bfloat16)
    d = wsgemm.gemm(a, w.t(), bias=bias, activation="gelu_tanh", out=out)
    assert d.data_ptr() == out.data_ptr()
    check(out, reference(a, w.t(), bias, "gelu_tanh", 1.0), "gelu_tanh")


def test_k_zero_gives_the_activation_of_the_bias():
    a, b = rand(8, 0), rand(0, 24)
    bias = rand(24)
    d = wsgemm.gemm(a, b, bias=bias, activation="silu")
    torch.testing.assert_close(d.float(), torch.nn.functional.silu(bias.float()).expand(8, 24),
                               rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("activation", ACTIVATIONS)
def test_gradients_match_torch(activation):
    m, n, k = 96, 160, 128
    a = rand(m, k).requires_grad_()
    w = rand(n, k).requires_grad_()
    bias = rand(n, dtype=torch.float32).requires_grad_()
    d = wsgemm.gemm(a, w.t(), bias=bias, activation=activation, alpha=0.5)
    grad = rand(m, n)
    d.backward(grad)
    a2, w2, b2 = (t.detach().float().requires_grad_() for t in (a, w, bias))
    ref = reference(a2, w2.t(), b2, activation, 0.5)
    ref.backward(grad.float())
    for got, want in ((a.grad, a2.grad), (w.grad, w2.grad), (bias.grad, b2.grad)):
        rel = ((got.float() - want).norm() / want.norm()).item()
        assert rel < 2e-2, rel


def test_linear_fuses_its_bias_and_activation():
    layer = torch.nn.Linear(256, 384, device="cuda", dtype=torch.bfloat16)
    fused = wsgemm.nn.Linear.from_linear(layer, activation="gelu")
    x = rand(4, 33, 256)
    y = fused(x)
    assert y.shape == (4, 33, 384)
    check(y, torch.nn.functional.gelu(layer(x).float()), "gelu")


@pytest.mark.parametrize("backend", ["inductor", "aot_eager"])
def test_torch_compile_traces_the_fused_operator(backend):
    a, w, bias = rand(64, 256), rand(512, 256), rand(512)

    def f(x, weight, b):
        return wsgemm.gemm(x, weight.t(), bias=b, activation="silu", alpha=2.0)

    compiled = torch.compile(f, backend=backend, fullgraph=True)
    check(compiled(a, w, bias), reference(a, w.t(), bias, "silu", 2.0), "silu")


def test_cuda_graph_replays_new_inputs():
    a, w, bias = rand(48, 512), rand(1024, 512), rand(1024)
    out = wsgemm.gemm(a, w.t(), bias=bias, activation="relu")  # plans and compiles outside the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = wsgemm.gemm(a, w.t(), bias=bias, activation="relu")
    for _ in range(2):
        a.copy_(rand(48, 512))
        bias.copy_(rand(1024))
        graph.replay()
        torch.cuda.synchronize()
        check(out, reference(a, w.t(), bias, "relu", 1.0))
