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

from .api import gemm, precompile  # noqa: E402  (imports torch and the DSL)
from . import nn  # noqa: E402

__all__ = [
    "gemm",
    "precompile",
    "nn",
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
