"""Drop-in layers built on ``wsgemm.gemm``."""

from __future__ import annotations

import torch

from .api import gemm_by_weight


class Linear(torch.nn.Linear):
    """``torch.nn.Linear`` with its matrix product done by wsgemm.

    Same parameters, initialisation and state dict as ``torch.nn.Linear`` (it is a
    subclass), so ``wsgemm.nn.Linear.from_linear(layer)`` or loading a state dict
    swaps it in. The weight (out_features, in_features) is read as ``weight.t()`` --
    a K-major B operand, no copy. Parameters and inputs must be float16 or bfloat16
    on a supported GPU. The bias is added by PyTorch after the product.

    ``read_weight_before_wait`` (off by default; set it on the layer, or through
    ``from_linear``) makes ``gemm(..., read_before_wait="b")``'s promise for the
    weight in calls that record no autograd: in a decode step the weight's first
    stages then load while the previous wsgemm kernel finishes (docs/tuning-log/
    dependent-launch.md). Set it only for inference on weights already written: after writing
    them (``load_state_dict``, ``copy_``), synchronize before the next forward, or a
    forward may read the old values without an error. Calls that record autograd
    never make the promise (an optimizer step writes the weight between them).
    """

    read_weight_before_wait: bool = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # At decode the host's time is the step's time (docs/tuning-log/
        # host-overhead.md), so the forward does as little as it can in Python: it reads the weight
        # once, looks at grad mode only for a promise, reshapes only inputs that are
        # not 2-D, and leaves the weight's transpose to the cached call's C++.
        weight = self.weight
        promise = ""
        if self.read_weight_before_wait and not (torch.is_grad_enabled()
                                                 and (x.requires_grad or weight.requires_grad)):
            promise = "b"
        two_d = x.dim() == 2
        y = gemm_by_weight(x if two_d else x.reshape(-1, x.shape[-1]), weight, promise)
        bias = self.bias
        if bias is not None:
            y = y + bias
        return y if two_d else y.view(*x.shape[:-1], self.out_features)

    @classmethod
    def from_linear(cls, layer: torch.nn.Linear, *, read_weight_before_wait: bool = False) -> "Linear":
        """A wsgemm layer sharing ``layer``'s parameters (no copy)."""
        new = cls.__new__(cls)
        torch.nn.Module.__init__(new)
        new.in_features, new.out_features = layer.in_features, layer.out_features
        new.weight = layer.weight
        new.bias = layer.bias
        new.read_weight_before_wait = read_weight_before_wait
        return new
