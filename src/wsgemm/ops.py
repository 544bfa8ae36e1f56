"""``torch.ops.wsgemm.gemm``: wsgemm as a PyTorch operator.

Registered with ``torch.library.custom_op`` so that ``torch.compile`` traces it
without graph breaks (the fake implementation gives shapes, dtypes and strides),
and with an autograd formula that computes both gradients with wsgemm itself:
dA = dD @ B^T and dB = A^T @ dD, where the transposes are views (the kernels read
either major mode), so no operand is copied.

``wsgemm.gemm`` calls the kernel directly in eager mode without autograd (the
dispatcher costs microseconds per call) and goes through this operator while
``torch.compile`` traces or when an input requires grad.
"""

from __future__ import annotations

import torch

from . import api

_OP = "wsgemm::gemm"


@torch.library.custom_op(_OP, mutates_args=())
def gemm_op(a: torch.Tensor, b: torch.Tensor, out_dtype: torch.dtype | None = None) -> torch.Tensor:
    """``a @ b``; see :func:`wsgemm.gemm`."""
    return api.gemm_eager(a, b, None, out_dtype, None)


@gemm_op.register_fake
def _(a: torch.Tensor, b: torch.Tensor, out_dtype: torch.dtype | None = None) -> torch.Tensor:
    # The same checks as the real implementation, so a bad call fails at trace time.
    shape, dtype, _, _ = api.validate_shapes_and_dtypes(a, b, None, out_dtype, None)
    return a.new_empty(shape, dtype=dtype)  # contiguous, like the real result


def _setup_context(ctx, inputs, output):
    a, b, _ = inputs
    ctx.save_for_backward(a, b)


def _unbroadcast(grad: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """Sum the batch a 2-D operand was broadcast over."""
    return grad.sum(0) if grad.dim() == 3 and like.dim() == 2 else grad


def _backward(ctx, grad):
    a, b = ctx.saved_tensors
    grad = grad.to(a.dtype)  # the kernels multiply fp16/bf16; an fp32 output's gradient is rounded
    grad_a = grad_b = None
    if ctx.needs_input_grad[0]:
        grad_a = _unbroadcast(gemm_op(grad, b.mT, a.dtype), a)
    if ctx.needs_input_grad[1]:
        if a.dim() == 3 and b.dim() == 2:  # sum over the batch inside one product
            grad_b = gemm_op(a.reshape(-1, a.shape[-1]).mT, grad.reshape(-1, grad.shape[-1]), b.dtype)
        else:
            grad_b = _unbroadcast(gemm_op(a.mT, grad, b.dtype), b)
    return grad_a, grad_b, None


gemm_op.register_autograd(_backward, setup_context=_setup_context)
