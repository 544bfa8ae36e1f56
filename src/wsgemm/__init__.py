"""wsgemm: warp-specialized GEMM kernels in the CuTe Python DSL, callable from PyTorch.

>>> import torch, wsgemm
>>> d = wsgemm.gemm(a, b)          # a (M, K), b (K, N): fp16/bf16 CUDA tensors

See README.md for what runs where, and docs/ for how the pipeline works.
"""

from .config import GemmConfig, KernelSpec, Lookahead, Raster
from .errors import (
    ConfigError,
    DeviceError,
    ShapeError,
    UnsupportedDeviceError,
    UnsupportedDtypeError,
    WsgemmError,
)

__version__ = "0.1.0"


def gemm(a, b, *, out=None, out_dtype=None, config=None):
    """``a @ b`` with wsgemm's kernel; see :func:`wsgemm.api.gemm` for the full contract."""
    from .api import gemm as _gemm

    return _gemm(a, b, out=out, out_dtype=out_dtype, config=config)


__all__ = [
    "gemm",
    "GemmConfig",
    "KernelSpec",
    "Lookahead",
    "Raster",
    "WsgemmError",
    "ConfigError",
    "DeviceError",
    "ShapeError",
    "UnsupportedDeviceError",
    "UnsupportedDtypeError",
    "__version__",
]
