"""Drop-in layers built on ``wsgemm.gemm``."""

from __future__ import annotations

import torch

from .api import gemm, gemm_by_weight


class Linear(torch.nn.Linear):
    """``torch.nn.Linear`` with its matrix product done by wsgemm.

    Same parameters, initialisation and state dict as ``torch.nn.Linear`` (it is a
    subclass), so ``wsgemm.nn.Linear.from_linear(layer)`` or loading a state dict
    swaps it in. The weight (out_features, in_features) is read as ``weight.t()`` --
    a K-major B operand, no copy. Parameters and inputs must be float16 or bfloat16
    on a supported GPU. The bias is added in the kernel's epilogue, and so is
    ``activation`` (None, ``"relu"``, ``"gelu"``, ``"gelu_tanh"`` or ``"silu"``;
    ``wsgemm.fused``): one kernel, the result written once.

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
    activation: str | None = None

    def __init__(self, in_features: int, out_features: int, bias: bool = True, device=None, dtype=None, *,
                 activation: str | None = None):
        super().__init__(in_features, out_features, bias, device, dtype)
        self.activation = activation

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
        rows = x if two_d else x.reshape(-1, x.shape[-1])
        bias = self.bias
        if bias is None and self.activation is None:
            y = gemm_by_weight(rows, weight, promise)
        else:  # the fused epilogue's route, planned in Python
            y = gemm(rows, weight.t(), bias=bias, activation=self.activation, read_before_wait=promise)
        return y if two_d else y.view(*x.shape[:-1], self.out_features)

    @classmethod
    def from_linear(cls, layer: torch.nn.Linear, *, read_weight_before_wait: bool = False,
                    activation: str | None = None) -> "Linear":
        """A wsgemm layer sharing ``layer``'s parameters (no copy), applying
        ``activation`` after them."""
        new = cls.__new__(cls)
        torch.nn.Module.__init__(new)
        new.in_features, new.out_features = layer.in_features, layer.out_features
        new.weight = layer.weight
        new.bias = layer.bias
        new.read_weight_before_wait = read_weight_before_wait
        new.activation = activation
        return new

    def extra_repr(self) -> str:
        return super().extra_repr() + (f", activation={self.activation!r}" if self.activation else "")
