"""Fused epilogues without a GPU: argument errors before any launch, the kernels'
epilogue specs, compiled SM90 and SM100 kernels (the epilogue's math once per
accumulator, no local memory), the operator's fake implementation and the backward
formula against PyTorch's autograd."""

import re

import pytest
import torch

import wsgemm
from wsgemm import ConfigError, GemmConfig, ShapeError, UnsupportedDtypeError
from wsgemm import config as cfg
from wsgemm import fused
from wsgemm.compile import compile_spec
from wsgemm.inspection import cubin_resources

A = torch.randn(4, 8, dtype=torch.bfloat16)
B = torch.randn(8, 16, dtype=torch.bfloat16)


# --------------------------------------------------------------------------------------
# Errors, raised before anything is planned
# --------------------------------------------------------------------------------------

@pytest.mark.parametrize("kwargs, error, message", [
    (dict(activation="tanh"), ValueError, "activation='tanh' is not supported"),
    (dict(activation="gelu", bias=torch.randn(15)), ShapeError, "bias has 15 elements; the result has N=16"),
    (dict(bias=torch.randn(16, dtype=torch.float64)), UnsupportedDtypeError, "bias has dtype torch.float64"),
    (dict(bias=torch.randn(2, 16)), ShapeError, "it must be (16,)"),
    (dict(bias=[0.0] * 16), TypeError, "bias must be a torch.Tensor or None, got list"),
    (dict(alpha="2"), TypeError, "alpha must be a Python float"),
    (dict(alpha=True), TypeError, "alpha must be a Python float"),
])
def test_bad_epilogue_arguments_are_refused_by_type_and_message(kwargs, error, message):
    with pytest.raises(error, match=re.escape(message)):
        wsgemm.gemm(A, B, **kwargs)


def test_a_per_batch_bias_must_match_the_batch():
    a = torch.randn(3, 4, 8, dtype=torch.bfloat16)
    with pytest.raises(ShapeError, match=re.escape("must be (16,) or (3, 16)")):
        wsgemm.gemm(a, B, bias=torch.randn(2, 16))


def test_read_before_wait_is_refused_where_autograd_records():
    with pytest.raises(ValueError, match="read_before_wait= is for inference"):
        wsgemm.gemm(A, B.clone().requires_grad_(), bias=torch.randn(16), read_before_wait="b")


def test_a_linear_layer_fuses_its_bias_and_activation_and_keeps_its_promise(monkeypatch):
    calls = []

    def gemm(a, b, **kwargs):
        calls.append(kwargs)
        return torch.addmm(kwargs["bias"], a, b)

    monkeypatch.setattr(wsgemm.nn, "gemm", gemm)
    layer = wsgemm.nn.Linear(8, 4, dtype=torch.float64, activation="relu")
    layer.read_weight_before_wait = True
    with torch.no_grad():
        layer(torch.randn(2, 3, 8, dtype=torch.float64))
    assert calls == [dict(bias=layer.bias, activation="relu", read_before_wait="b")]


def test_epilogue_spec_is_part_of_the_kernel_name_and_checked():
    ep = cfg.Epilogue(activation="silu", bias="n", bias_dtype="bf16", scaled=True)
    spec = cfg.make_spec("sm90", "bf16", "bf16", "k", "k", "n", GemmConfig(), epilogue=ep)
    assert spec.short().endswith("_biasnbf16_silu_alpha")
    assert not cfg.Epilogue().fused and ep.fused
    with pytest.raises(ConfigError, match="activation='tanh' is not supported"):
        cfg.make_spec("sm90", "bf16", "bf16", "k", "k", "n", GemmConfig(), epilogue=cfg.Epilogue(activation="tanh"))
    with pytest.raises(ConfigError, match="a bias along the kernel's M"):
        cfg.make_spec("sm90", "bf16", "bf16", "k", "k", "n", GemmConfig(), batched=True,
                      epilogue=cfg.Epilogue(bias="m"))


# --------------------------------------------------------------------------------------
# Compiled kernels
# --------------------------------------------------------------------------------------

def _accumulators_per_thread(spec) -> int:
    c = spec.config
    if spec.arch == "sm100":
        return c.tile_n  # an epilogue thread drains one TMEM lane: a row of the tile
    threads = 128 if c.pingpong else 128 * cfg.consumer_warpgroups(c)
    return c.tile_m * c.tile_n // threads


SM90_CONFIGS = [GemmConfig(), GemmConfig(tile_m=128, tile_n=192, pingpong=True),
                GemmConfig(tile_m=128, tile_n=128, split_k=4), GemmConfig(tile_m=128, tile_n=128, stream_k=True),
                GemmConfig(tile_m=256, tile_n=128, cluster_m=2)]


@pytest.mark.parametrize("config", SM90_CONFIGS, ids=lambda c: c.short())
def test_sm90_epilogue_applies_each_step_once_per_accumulator(config):
    ep = cfg.Epilogue(activation="gelu_tanh", bias="n", bias_dtype="bf16", scaled=True)
    spec = cfg.make_spec("sm90", "bf16", "bf16", "k", "k", "n", config, epilogue=ep)
    compiled = compile_spec(spec, keep_artifacts=True)
    ptx = compiled.ptx
    per_thread = _accumulators_per_thread(spec)
    # One tanh per accumulator: no second pass over D.
    assert len(re.findall(r"tanh\.approx\.f32", ptx)) == per_thread
    # The bias reaches shared memory once per tile, a few values per thread; the
    # accumulators then read it there.
    threads = 128 if config.pingpong else 128 * cfg.consumer_warpgroups(config)
    assert len(re.findall(r"ld\.global[.\w]*\.b16", ptx)) == -(-config.tile_n // threads)
    (res,) = cubin_resources(compiled.cubin_path)
    assert res.stack_frame_bytes == 0, "local memory in use: spills"


@pytest.mark.parametrize("config", [GemmConfig(tile_m=128, tile_n=192, pingpong=True),
                                    GemmConfig(tile_m=256, tile_n=192)], ids=lambda c: c.short())
def test_sm90_exact_gelu_on_the_widest_tiles_spills_at_most_a_few_registers(config):
    # 192 accumulators per thread leave ptxas 40 registers for everything else; exact
    # gelu's erf (one exp, one reciprocal, five FMAs per value) then spills a few bytes
    # in some kernels. Within 16 bytes: a few local loads per tile, in the epilogue.
    ep = cfg.Epilogue(activation="gelu", bias="n", bias_dtype="bf16", scaled=True)
    compiled = compile_spec(cfg.make_spec("sm90", "bf16", "bf16", "k", "k", "n", config, epilogue=ep),
                            keep_artifacts=True)
    (res,) = cubin_resources(compiled.cubin_path)
    assert res.stack_frame_bytes <= 16


@pytest.mark.parametrize("activation, instruction", [("relu", r"max\.f32"), ("silu", r"ex2\.approx"),
                                                     ("gelu", r"erf|ex2")])
def test_sm90_activations_compile_to_their_math(activation, instruction):
    spec = cfg.make_spec("sm90", "fp16", "fp32", "m", "n", "m", GemmConfig(tile_n=128),
                         epilogue=cfg.Epilogue(activation=activation, bias="m", bias_dtype="fp32"))
    compiled = compile_spec(spec, keep_artifacts=True)
    assert re.search(instruction, compiled.ptx)
    (res,) = cubin_resources(compiled.cubin_path)
    assert res.stack_frame_bytes == 0


@pytest.mark.parametrize("config", [GemmConfig(tile_m=128, tile_n=256),
                                    GemmConfig(tile_m=128, tile_n=256, cluster_m=2, two_cta=True)],
                         ids=lambda c: c.short())
def test_sm100_epilogue_applies_each_step_once_per_accumulator(config):
    ep = cfg.Epilogue(activation="gelu_tanh", bias="n", bias_dtype="fp32", scaled=True)
    spec = cfg.make_spec("sm100", "bf16", "bf16", "k", "k", "n", config, epilogue=ep)
    compiled = compile_spec(spec, keep_artifacts=True)
    assert len(re.findall(r"tanh\.approx\.f32", compiled.ptx)) == _accumulators_per_thread(spec)
    (res,) = cubin_resources(compiled.cubin_path)
    assert res.stack_frame_bytes == 0


def test_unfused_kernels_take_no_epilogue_arguments():
    spec = cfg.make_spec("sm90", "bf16", "bf16", "k", "k", "n", GemmConfig())
    assert not spec.epilogue.fused
    ptx = compile_spec(spec, keep_artifacts=True).ptx
    assert "tanh" not in ptx and not re.search(r"ld\.global", ptx)


# --------------------------------------------------------------------------------------
# The operator's fake implementation and the backward formula
# --------------------------------------------------------------------------------------

def test_the_operator_traces_shapes_and_checks_arguments():
    from torch._subclasses.fake_tensor import FakeTensorMode

    import wsgemm.ops  # noqa: F401  (registers the operators)

    op = torch.ops.wsgemm.gemm_epilogue
    with FakeTensorMode():
        a = torch.empty(3, 5, 64, dtype=torch.bfloat16)
        b = torch.empty(64, 40, dtype=torch.bfloat16)
        out = op(a, b, torch.empty(40), "silu", 2.0, torch.float32)
        assert out.shape == (3, 5, 40) and out.dtype == torch.float32
        with pytest.raises(ShapeError):
            op(a, b, torch.empty(41), "silu", 1.0, None)


def _torch_product(x, y, out_dtype, bias=None, alpha=1.0):
    z = alpha * torch.matmul(x.float(), y.float())
    if bias is not None:
        z = z + (bias.float().unsqueeze(-2) if bias.dim() == 2 else bias.float())
    return z.to(out_dtype)


@pytest.mark.parametrize("activation", [None, "relu", "gelu", "gelu_tanh", "silu"])
@pytest.mark.parametrize("batched_bias", [False, True])
def test_backward_formula_matches_autograd(activation, batched_bias):
    torch.manual_seed(0)
    a = torch.randn(2, 6, 8, dtype=torch.float32, requires_grad=True)
    b = torch.randn(8, 5, dtype=torch.float32, requires_grad=True)
    bias = torch.randn(*((2, 5) if batched_bias else (5,)), requires_grad=True)
    alpha = 0.75
    z = alpha * a @ b + (bias.unsqueeze(-2) if batched_bias else bias)
    out = fused.reference_activation(z, activation or "")
    grad = torch.randn_like(out)
    out.backward(grad)
    got = fused.fused_backward(grad, a.detach(), b.detach(), bias.detach(), out.detach(), activation, alpha,
                               (True, True, True), _torch_product)
    for g, want in zip(got, (a.grad, b.grad, bias.grad)):
        torch.testing.assert_close(g.float(), want, rtol=1e-4, atol=1e-4)


def test_linear_keeps_its_activation():
    layer = torch.nn.Linear(8, 4)
    fused_layer = wsgemm.nn.Linear.from_linear(layer, activation="gelu")
    assert fused_layer.activation == "gelu" and "activation='gelu'" in repr(fused_layer)
    assert wsgemm.nn.Linear(8, 4, activation="silu").activation == "silu"


def test_a_compiled_fused_linear_traces_into_one_operator_call(traced_calls):
    layer = wsgemm.nn.Linear(32, 64, dtype=torch.bfloat16, device="meta", activation="gelu")
    x = torch.empty(8, 32, dtype=torch.bfloat16, device="meta")
    graph_breaks, calls = traced_calls(layer, x, "gemm_epilogue")
    assert graph_breaks == 0
    assert len(calls) == 1 and "gelu" in calls[0].args


def _torch_fused_eager(a, b, bias=None, activation=None, alpha=1.0, out=None, out_dtype=None, config=None,
                       read_before_wait=""):
    """The fused route's kernel on the CPU: the exact result, in the result's dtype."""
    z = _torch_product(a, b, torch.float32, bias, alpha)
    return fused.reference_activation(z, activation or "").to(out_dtype or a.dtype)


@pytest.mark.parametrize("activation", [None, "relu", "silu"])
def test_eager_autograd_records_the_fused_call_and_its_backward(monkeypatch, activation):
    monkeypatch.setattr(fused, "gemm_fused_eager", _torch_fused_eager)
    a = torch.randn(6, 8, dtype=torch.float64, requires_grad=True)
    w = torch.randn(5, 8, dtype=torch.float64, requires_grad=True)
    bias = torch.randn(5, dtype=torch.float64, requires_grad=True)
    y = wsgemm.gemm(a, w.t(), bias=bias, activation=activation, alpha=2.0)
    assert y.grad_fn.name() == "FusedGemmBackward"
    grad = torch.randn_like(y)
    y.backward(grad)
    a2, w2, b2 = (t.detach().clone().requires_grad_() for t in (a, w, bias))
    fused.reference_activation(2.0 * a2 @ w2.t() + b2, activation or "").backward(grad)
    for got, want in ((a.grad, a2.grad), (w.grad, w2.grad), (bias.grad, b2.grad)):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)  # the stand-in multiplies in fp32
