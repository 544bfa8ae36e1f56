"""The gradients of a product D = A @ B, shared by the operator's and eager
autograd's formulas (``wsgemm.ops``) and the fused epilogue's (``wsgemm.fused``)."""

from __future__ import annotations

import torch


def unbroadcast(grad: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """Sum the batch a 2-D operand was broadcast over."""
    return grad.sum(0) if grad.dim() == 3 and like.dim() == 2 else grad


def product_gradients(a, b, grad, needs_a: bool, needs_b: bool, product):
    """(dA, dB) of D = A @ B given dD, each computed by ``product(x, y, out_dtype)``
    on transposed views (None where not needed)."""
    grad = grad.to(a.dtype)  # the kernels multiply fp16/bf16; an fp32 output's gradient is rounded
    grad_a = grad_b = None
    if needs_a:
        grad_a = unbroadcast(product(grad, b.mT, a.dtype), a)
    if needs_b:
        if a.dim() == 3 and b.dim() == 2:  # sum over the batch inside one product
            grad_b = product(a.reshape(-1, a.shape[-1]).mT, grad.reshape(-1, grad.shape[-1]), b.dtype)
        else:
            grad_b = unbroadcast(product(a.mT, grad, b.dtype), b)
    return grad_a, grad_b
