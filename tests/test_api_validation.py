"""Every bad input gets a clear exception naming the argument (no GPU needed: the
checks run before anything touches a device)."""

import pytest
import torch

import wsgemm
from wsgemm import DeviceError, ShapeError, UnsupportedDtypeError

bf16 = torch.bfloat16


def t(*shape, dtype=bf16):
    return torch.randn(*shape, dtype=torch.float32).to(dtype)


@pytest.mark.parametrize(
    "a, b, kwargs, exc, message",
    [
        ([[1.0]], t(4, 4), {}, TypeError, "a must be a torch.Tensor, got list"),
        (t(4, 4), None, {}, TypeError, "b must be a torch.Tensor, got NoneType"),
        (t(4, 4, dtype=torch.float32), t(4, 4), {}, UnsupportedDtypeError, r"a has dtype torch.float32; wsgemm multiplies torch.float16 and torch.bfloat16"),
        (t(4, 4), t(4, 4, dtype=torch.int8), {}, UnsupportedDtypeError, r"b has dtype torch.int8"),
        (t(4, 4), t(4, 4, dtype=torch.float16), {}, UnsupportedDtypeError, r"a is torch.bfloat16 but b is torch.float16; both operands must have the same dtype"),
        (t(4), t(4, 4), {}, ShapeError, r"a must be 2-D \(M, K\) or 3-D \(L, M, K\), got shape \(4,\)"),
        (t(4, 4), t(2, 2, 4, 4), {}, ShapeError, r"b must be 2-D \(K, N\) or 3-D \(L, K, N\)"),
        (t(4, 5), t(6, 4), {}, ShapeError, r"a's last dimension \(K=5\) must equal b's second to last \(K=6\)"),
        (t(2, 4, 8), t(3, 8, 4), {}, ShapeError, r"batch sizes differ: a has 2 matrices, b has 3"),
        (t(4, 8), t(8, 4), {"out_dtype": torch.int32}, UnsupportedDtypeError, r"out_dtype=torch.int32 is not supported"),
        (t(4, 8), t(8, 4), {"config": {"tile_m": 64}}, TypeError,
         r"config must be a wsgemm.GemmConfig, 'autotune' or None, got dict"),
        (t(4, 8), t(8, 4), {"config": "fastest"}, TypeError,
         r"config must be a wsgemm.GemmConfig, 'autotune' or None, got str 'fastest'"),
        (t(4, 8), t(8, 4), {"out": t(4, 5)}, ShapeError, r"out has shape \(4, 5\); the product of a and b is \(4, 4\)"),
        (t(4, 8), t(8, 4), {"out": t(4, 4, dtype=torch.int32)}, UnsupportedDtypeError, r"out has dtype torch.int32"),
        (t(4, 8), t(8, 4), {"out": t(4, 4, dtype=torch.float32), "out_dtype": bf16}, UnsupportedDtypeError, r"out has dtype torch.float32 but out_dtype is torch.bfloat16"),
        (t(2, 4, 8), t(8, 4), {"out": t(4, 4)}, ShapeError, r"the product of a and b is \(2, 4, 4\)"),
        (t(4, 8), t(8, 4), {"out": t(1, 4).expand(4, 4)}, ValueError, r"out has overlapping memory"),
        (t(4, 8), t(8, 4), {}, DeviceError, r"a is on cpu; wsgemm runs on CUDA tensors \(move it with a.cuda\(\)\)"),
        (t(4, 8), t(8, 4), {"read_before_wait": "w"}, ValueError, r"read_before_wait='w' must be '', 'a' or 'b'"),
        (t(4, 8), t(8, 4), {"read_before_wait": "b", "config": wsgemm.GemmConfig()}, ValueError,
         r"read_before_wait='b' with a GemmConfig: the config says it itself; pass "
         r"GemmConfig\(read_before_wait='b', dependent_launch=True"),
        (t(4, 8).requires_grad_(), t(8, 4), {"read_before_wait": "b"}, ValueError,
         r"read_before_wait= is for inference: an input requires grad"),
    ],
)
def test_bad_inputs_raise_clear_errors(a, b, kwargs, exc, message):
    with pytest.raises(exc, match=message):
        wsgemm.gemm(a, b, **kwargs)


def test_error_classes_are_also_builtin_exceptions():
    assert issubclass(ShapeError, ValueError)
    assert issubclass(UnsupportedDtypeError, TypeError)
    assert issubclass(DeviceError, ValueError)
    assert issubclass(wsgemm.UnsupportedDeviceError, RuntimeError)
    assert issubclass(wsgemm.ConfigError, ValueError)
    for cls in (ShapeError, UnsupportedDtypeError, DeviceError, wsgemm.ConfigError):
        assert issubclass(cls, wsgemm.WsgemmError)
