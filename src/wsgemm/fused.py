"""Fused epilogues: ``act(alpha * (a @ b) + bias)`` in the GEMM kernel's epilogue.

``wsgemm.gemm(a, b, bias=..., activation=..., alpha=...)`` comes here. The kernel
applies the epilogue to its fp32 accumulators before the one conversion to the
output dtype (``config.Epilogue``, ``kernels/common/epilogue.py``), so the result is
written once and never read back: no second kernel, no second pass over D. With
split-K and stream-K the tile's last piece applies it, once, after the partial sums
are added.

Three routes, as for the plain product (``wsgemm.api``): eager calls plan once per
call signature and launch from Python (the C++ fast path does not take fused calls);
a call that records autograd runs :class:`FusedGemm`; under ``torch.compile`` the
call goes through the ``torch.ops.wsgemm.gemm_epilogue`` operator.

The backward is unfused: for ``gelu``, ``gelu_tanh`` and ``silu`` it recomputes the
pre-activation ``alpha * a @ b + bias`` (one more GEMM, with an fp32 result), then
PyTorch's activation backward and the two gradient products; ``relu`` and no
activation need no recompute (``relu``'s derivative is read off the output).
"""

from __future__ import annotations

import torch

from . import config as cfg
from . import plans
from .errors import DeviceError, ShapeError, UnsupportedDtypeError
from .gradients import product_gradients

ACTIVATIONS = tuple(a for a in cfg.ACTIVATIONS if a)
BIAS_TORCH_DTYPES = {torch.float16: "fp16", torch.bfloat16: "bf16", torch.float32: "fp32"}


def asks_for_epilogue(bias, activation, alpha) -> bool:
    """Whether a call passed any of the epilogue's arguments (a value other than the
    float 1.0 for ``alpha``: the epilogue's validation then sees it)."""
    return bias is not None or activation is not None or type(alpha) is not float or alpha != 1.0


# --------------------------------------------------------------------------------------
# Validation: every argument checked before anything is planned or compiled
# --------------------------------------------------------------------------------------

def check_epilogue_args(bias, activation, alpha, shape: tuple) -> None:
    """Raise for a bias, activation or alpha that the epilogue cannot take (``shape``:
    the result's); also what the operator's fake implementation runs."""
    if activation is not None and activation not in ACTIVATIONS:
        raise ValueError(f"activation={activation!r} is not supported; choose one of {list(ACTIVATIONS)} or None "
                         "('gelu' is the exact erf form, 'gelu_tanh' torch's approximate='tanh')")
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)):
        raise TypeError(f"alpha must be a Python float, got {type(alpha).__name__} {alpha!r}")
    if bias is None:
        return
    if not isinstance(bias, torch.Tensor):
        raise TypeError(f"bias must be a torch.Tensor or None, got {type(bias).__name__}")
    if bias.dtype not in BIAS_TORCH_DTYPES:
        raise UnsupportedDtypeError(f"bias has dtype {bias.dtype}; it must be float16, bfloat16 or float32")
    n = shape[-1]
    if bias.dim() == 1:
        if bias.shape[0] != n:
            raise ShapeError(f"bias has {bias.shape[0]} elements; the result has N={n} columns, one bias each")
    elif bias.dim() == 2 and len(shape) == 3:
        if tuple(bias.shape) != (shape[0], n):
            raise ShapeError(f"bias has shape {tuple(bias.shape)}; for a batched result of shape {tuple(shape)} it "
                             f"must be ({n},) or ({shape[0]}, {n})")
    else:
        expected = f"({n},) or ({shape[0]}, {n})" if len(shape) == 3 else f"({n},)"
        raise ShapeError(f"bias has shape {tuple(bias.shape)}; for a result of shape {tuple(shape)} it must be "
                         f"{expected}")


def epilogue_spec(bias, activation, alpha) -> cfg.Epilogue:
    """The kernel's epilogue for validated arguments, its bias along the caller's N."""
    return cfg.Epilogue(activation=activation or "", bias="n" if bias is not None else "",
                        bias_dtype=BIAS_TORCH_DTYPES[bias.dtype] if bias is not None else "fp32",
                        scaled=alpha != 1.0)


def kernel_bias(bias, plan: plans.Plan):
    """The bias as the kernel reads it: (batches or 1, length), unit stride along its
    length; one vector for every batch is broadcast with batch stride 0."""
    if bias is None:
        return None
    if bias.stride(-1) != 1:
        bias = bias.contiguous()
    if bias.dim() == 2:
        return bias
    spec = plan.spec
    batches = plan.shape[0] if spec is not None and spec.batched and len(plan.shape) == 3 else 1
    return bias.unsqueeze(0).expand(batches, bias.shape[0])


# --------------------------------------------------------------------------------------
# The eager route
# --------------------------------------------------------------------------------------

def gemm_fused_eager(a, b, bias=None, activation=None, alpha=1.0, out=None, out_dtype=None, config=None,
                     read_before_wait=""):
    """The eager route of a fused call: plan once per signature, then launch."""
    try:
        key = (plans.call_signature(a, b, out, out_dtype, config, read_before_wait),
               None if bias is None else (bias.shape, bias.stride(), bias.dtype, bias.get_device()),
               activation, type(alpha), alpha != 1.0)
        plan = plans.lookup_plan(key)
    except (AttributeError, TypeError):
        key, plan = None, None
    if plan is None:
        shape, _, _, _ = plans.validate_shapes_and_dtypes(a, b, out, out_dtype, config)
        check_epilogue_args(bias, activation, alpha, shape)
        plans.validate(a, b, out, out_dtype, config)  # devices
        if bias is not None and bias.device != a.device:
            raise DeviceError(f"bias is on {bias.device} but the operands are on {a.device}")
        epilogue = epilogue_spec(bias, activation, alpha)
        if not epilogue.fused:  # alpha=1, say: the plain product's route
            return plans.gemm_eager(a, b, out, out_dtype, config, read_before_wait)
        per_batch = bias is not None and bias.dim() == 2
        plan = plans.make_plan(a, b, out, out_dtype, config, read_before_wait, epilogue, per_batch)
        if key is not None:
            plans.store_plan(key, plan)
    if plan.mode == "trivial":
        return _trivial(plan, bias, activation, alpha, out)
    return plan.run_fused(a, b, out, kernel_bias(bias, plan), alpha)


def _trivial(plan, bias, activation, alpha, out):
    """An empty result, or K = 0: the product is zeros, the result ``act(bias)``."""
    if out is None:
        out = torch.empty(*plan.shape, dtype=plan.dtype, device=plan.device)
    if out.numel():
        z = torch.zeros(plan.shape, dtype=torch.float32, device=plan.device)
        if bias is not None:
            z = z + (bias.float().unsqueeze(-2) if bias.dim() == 2 else bias.float())
        out.copy_(reference_activation(z, activation or ""))
    return out


# --------------------------------------------------------------------------------------
# Autograd and the operator
# --------------------------------------------------------------------------------------

def reference_activation(z: torch.Tensor, activation: str) -> torch.Tensor:
    """PyTorch's own ``activation`` of ``z``: the reference the kernels' math matches."""
    f = torch.nn.functional
    if activation == "relu":
        return f.relu(z)
    if activation == "gelu":
        return f.gelu(z)
    if activation == "gelu_tanh":
        return f.gelu(z, approximate="tanh")
    if activation == "silu":
        return f.silu(z)
    return z


def _activation_backward(grad, z, out, activation: str):
    """d(loss)/d(pre-activation) from d(loss)/d(output); ``z`` is the pre-activation
    (fp32) where the derivative needs it, ``out`` the forward's result."""
    aten = torch.ops.aten
    if activation == "relu":
        return aten.threshold_backward(grad, out, 0)
    if activation == "gelu":
        return aten.gelu_backward(grad, z)
    if activation == "gelu_tanh":
        return aten.gelu_backward(grad, z, approximate="tanh")
    if activation == "silu":
        return aten.silu_backward(grad, z)
    return grad


def needs_pre_activation(activation) -> bool:
    return activation in ("gelu", "gelu_tanh", "silu")


def fused_backward(grad, a, b, bias, out, activation, alpha, needs, product):
    """(dA, dB, dBias) of ``out = act(alpha * a @ b + bias)``; ``product(x, y,
    out_dtype, bias=None, alpha=1.0)`` runs the GEMMs (the recompute and the gradients)."""
    activation = activation or ""
    z = None
    if needs_pre_activation(activation):
        z = product(a, b, torch.float32, bias, alpha)
    grad_z = _activation_backward(grad.float(), z, out, activation)
    grad_bias = None
    if needs[2]:
        # One vector for every row (and batch), or one row per batch.
        summed = grad_z.reshape(-1, grad_z.shape[-1]).sum(0) if bias.dim() == 1 else grad_z.sum(-2)
        grad_bias = summed.to(bias.dtype)
    grad_a = grad_b = None
    if needs[0] or needs[1]:
        scaled = grad_z * alpha if alpha != 1.0 else grad_z
        grad_a, grad_b = product_gradients(a, b, scaled, needs[0], needs[1],
                                           lambda x, y, dtype: product(x, y, dtype, None, 1.0))
    return grad_a, grad_b, grad_bias


def _eager_product(x, y, out_dtype, bias=None, alpha=1.0):
    if (x.requires_grad or y.requires_grad or (bias is not None and bias.requires_grad)) and torch.is_grad_enabled():
        return FusedGemm.apply(x, y, bias, None, alpha, out_dtype)
    return gemm_fused_eager(x, y, bias, None, alpha, None, out_dtype)


class FusedGemm(torch.autograd.Function):
    """``act(alpha * a @ b + bias)`` with autograd, outside ``torch.compile``."""

    @staticmethod
    def forward(ctx, a, b, bias, activation, alpha, out_dtype):
        out = gemm_fused_eager(a, b, bias, activation, alpha, None, out_dtype)
        ctx.save_for_backward(a, b, bias, out)
        ctx.activation, ctx.alpha = activation, alpha
        return out

    @staticmethod
    def backward(ctx, grad):
        a, b, bias, out = ctx.saved_tensors
        needs = ctx.needs_input_grad[:3]
        return (*fused_backward(grad, a, b, bias, out, ctx.activation, ctx.alpha, needs, _eager_product),
                None, None, None)


def gemm_fused(a, b, bias, activation, alpha, out, out_dtype, config, needs_autograd: bool, read_before_wait=""):
    """Where ``wsgemm.gemm`` sends a fused call outside ``torch.compile``."""
    if needs_autograd:
        if out is not None:
            raise ValueError("out= is not supported when an input requires grad (autograd needs a fresh result "
                             "tensor); drop out= or run under torch.no_grad()")
        if config is not None:
            raise ValueError("config= is for calls without autograd; drop config= or run under torch.no_grad()")
        return FusedGemm.apply(a, b, bias, activation, alpha, out_dtype)
    return gemm_fused_eager(a, b, bias, activation, alpha, out, out_dtype, config, read_before_wait)
