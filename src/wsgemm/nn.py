"""Drop-in layers built on ``wsgemm.gemm``."""

from __future__ import annotations

import torch

from .api import gemm


class Linear(torch.nn.Linear):
    """``torch.nn.Linear`` with its matrix product done by wsgemm.

    Same parameters, initialisation and state dict as ``torch.nn.Linear`` (it is a
    subclass), so ``wsgemm.nn.Linear.from_linear(layer)`` or loading a state dict
    swaps it in. The weight (out_features, in_features) is read as ``weight.t()`` --
    a K-major B operand, no copy. Parameters and inputs must be float16 or bfloat16
    on a supported GPU. The bias is added by PyTorch after the product.
    """

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = gemm(x.reshape(-1, x.shape[-1]), self.weight.t())
        if self.bias is not None:
            y = y + self.bias
        return y.view(*x.shape[:-1], self.out_features)

    @classmethod
    def from_linear(cls, layer: torch.nn.Linear) -> "Linear":
        """A wsgemm layer sharing ``layer``'s parameters (no copy)."""
        new = cls.__new__(cls)
        torch.nn.Module.__init__(new)
        new.in_features, new.out_features = layer.in_features, layer.out_features
        new.weight = layer.weight
        new.bias = layer.bias
        return new
