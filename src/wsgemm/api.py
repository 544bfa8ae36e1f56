"""``wsgemm.gemm``: the PyTorch-facing entry point.

Validation, output allocation, operand layouts, dispatch by compute capability and
the launch on the current CUDA stream live here; kernels know nothing of torch.
"""

from __future__ import annotations

import functools
import threading
import warnings

import torch

from . import compile as compile_mod
from . import config as cfg
from .dispatch import HARDWARE_VERIFIED_ARCHS, arch_for_capability
from .errors import DeviceError, ShapeError, UnsupportedDtypeError, WsgemmError
from .heuristics import choose_config
from .kernels.common.scheduler import TileGrid
from .operands import MatrixOperand, as_operand, describe, padded_empty

TORCH_DTYPES = {torch.float16: "fp16", torch.bfloat16: "bf16", torch.float32: "fp32"}
INPUT_TORCH_DTYPES = (torch.float16, torch.bfloat16)


# --------------------------------------------------------------------------------------
# Per-device facts, read once
# --------------------------------------------------------------------------------------

@functools.lru_cache(maxsize=None)
def _device_facts(index: int) -> tuple[str, int, str]:
    props = torch.cuda.get_device_properties(index)
    arch = arch_for_capability((props.major, props.minor), props.name)
    if arch not in HARDWARE_VERIFIED_ARCHS:
        warnings.warn(
            f"wsgemm: the {arch} kernel has been compiled and statically checked but never run "
            f"on hardware by its authors; check its results on your {props.name} against "
            "torch.matmul before relying on it (tests/test_gpu_sm90.py shows how)",
            RuntimeWarning,
            stacklevel=3,
        )
    return arch, props.multi_processor_count, props.name


_clusters_lock = threading.Lock()
_max_clusters: dict[tuple[int, int], int] = {}


def max_active_clusters(device_index: int, cluster_size: int) -> int:
    """How many clusters of ``cluster_size`` CTAs (one per SM) can be resident at once.

    Asked of the driver (cuOccupancyMaxActiveClusters, through the DSL's
    ``HardwareInfo``): GPCs limit which SMs can pair, so it is not simply
    ``SMs / cluster_size``.
    """
    key = (device_index, cluster_size)
    with _clusters_lock:
        if key not in _max_clusters:
            _, sms, _ = _device_facts(device_index)
            if cluster_size == 1:
                value = sms
            else:
                import cutlass.utils

                with torch.cuda.device(device_index):
                    value = cutlass.utils.HardwareInfo(device_index).get_max_active_clusters(cluster_size)
            _max_clusters[key] = max(1, int(value))
        return _max_clusters[key]


# --------------------------------------------------------------------------------------
# Validation
# --------------------------------------------------------------------------------------

def _check_tensor(name: str, t) -> None:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")


def _check_input_dtype(name: str, t: torch.Tensor) -> None:
    if t.dtype not in INPUT_TORCH_DTYPES:
        raise UnsupportedDtypeError(
            f"{name} has dtype {t.dtype}; wsgemm multiplies torch.float16 and torch.bfloat16 "
            f"(convert with {name}.to(torch.bfloat16))"
        )


def _check_cuda(name: str, t: torch.Tensor) -> None:
    if t.device.type != "cuda":
        raise DeviceError(
            f"{name} is on {t.device}; wsgemm runs on CUDA tensors (move it with {name}.cuda())"
        )


def _broadcast_batches(a: torch.Tensor, b: torch.Tensor):
    """(L, M, K) and (L, K, N) views of a and b, and whether the result is 3-D."""
    if a.dim() not in (2, 3):
        raise ShapeError(f"a must be 2-D (M, K) or 3-D (L, M, K), got shape {tuple(a.shape)}")
    if b.dim() not in (2, 3):
        raise ShapeError(f"b must be 2-D (K, N) or 3-D (L, K, N), got shape {tuple(b.shape)}")
    if a.shape[-1] != b.shape[-2]:
        raise ShapeError(
            f"a is {tuple(a.shape)} and b is {tuple(b.shape)}: a's last dimension (K={a.shape[-1]}) "
            f"must equal b's second to last (K={b.shape[-2]})"
        )
    if a.dim() == 3 and b.dim() == 3 and a.shape[0] != b.shape[0]:
        raise ShapeError(
            f"batch sizes differ: a has {a.shape[0]} matrices, b has {b.shape[0]}; "
            "they must match (or one operand must be 2-D)"
        )
    batched = a.dim() == 3 or b.dim() == 3
    batches = a.shape[0] if a.dim() == 3 else (b.shape[0] if b.dim() == 3 else 1)
    return a, b, batched, batches


def _check_out(out, out_dtype, shape) -> None:
    _check_tensor("out", out)
    if out.dtype not in TORCH_DTYPES:
        raise UnsupportedDtypeError(f"out has dtype {out.dtype}; it must be float16, bfloat16 or float32")
    if out_dtype is not None and out.dtype != out_dtype:
        raise UnsupportedDtypeError(f"out has dtype {out.dtype} but out_dtype is {out_dtype}")
    if tuple(out.shape) != shape:
        raise ShapeError(f"out has shape {tuple(out.shape)}; the product of a and b is {shape}")
    if torch._debug_has_internal_overlap(out) == 1:
        raise ValueError("out has overlapping memory (e.g. an expanded tensor); pass a writable tensor")


def _result_shape(a, b, batched, batches):
    m, n = a.shape[-2], b.shape[-1]
    return (batches, m, n) if batched else (m, n)


# --------------------------------------------------------------------------------------
# The entry point
# --------------------------------------------------------------------------------------

def gemm(a: torch.Tensor, b: torch.Tensor, *, out: torch.Tensor | None = None,
         out_dtype: torch.dtype | None = None, config: cfg.GemmConfig | None = None) -> torch.Tensor:
    """``a @ b`` on a Hopper GPU with wsgemm's warp-specialized kernel.

    ``a``: (M, K) or (L, M, K); ``b``: (K, N) or (L, K, N); float16 or bfloat16, the
    same for both. A 2-D operand is broadcast over the other's batch, like
    ``torch.matmul``. Products accumulate in float32; the result has ``a``'s dtype
    unless ``out_dtype`` (float16, bfloat16 or float32) says otherwise. ``out``
    receives the result in place. Row- and column-major operands are read without a
    copy; layouts TMA cannot read are copied first (see ``wsgemm.operands``).
    The kernel runs on the inputs' device and its current CUDA stream.
    """
    _check_tensor("a", a)
    _check_tensor("b", b)
    _check_input_dtype("a", a)
    _check_input_dtype("b", b)
    if a.dtype != b.dtype:
        raise UnsupportedDtypeError(
            f"a is {a.dtype} but b is {b.dtype}; both operands must have the same dtype"
        )
    a, b, batched, batches = _broadcast_batches(a, b)
    if config is not None and not isinstance(config, cfg.GemmConfig):
        raise TypeError(f"config must be a wsgemm.GemmConfig or None, got {type(config).__name__}")
    if out_dtype is not None and out_dtype not in TORCH_DTYPES:
        raise UnsupportedDtypeError(
            f"out_dtype={out_dtype} is not supported; use torch.float16, torch.bfloat16 or torch.float32"
        )
    shape = _result_shape(a, b, batched, batches)
    if out is not None:
        _check_out(out, out_dtype, shape)

    _check_cuda("a", a)
    _check_cuda("b", b)
    if a.device != b.device:
        raise DeviceError(f"a is on {a.device} but b is on {b.device}; put both on one GPU")
    if out is not None:
        if out.device != a.device:
            raise DeviceError(f"out is on {out.device} but the operands are on {a.device}")
        for name, t in (("a", a), ("b", b)):
            if t.numel() and out.numel() and out.untyped_storage().data_ptr() == t.untyped_storage().data_ptr():
                raise ValueError(f"out shares memory with {name}; the kernel would overwrite its own input")
        result = out
    else:
        result = torch.empty(shape, dtype=out_dtype or a.dtype, device=a.device)

    m, k = a.shape[-2], a.shape[-1]
    n = b.shape[-1]
    if result.numel() == 0:
        return result
    if k == 0:
        return result.zero_()

    arch, sm_count, _ = _device_facts(a.device.index or 0)
    _launch(a, b, result, batched, batches, m, n, k, arch, sm_count, config)
    return result


def _as_3d(t: torch.Tensor, batches: int) -> torch.Tensor:
    return t if t.dim() == 3 else t.unsqueeze(0).expand(batches, *t.shape)


def _launch(a, b, result, batched, batches, m, n, k, arch, sm_count, config):
    device = a.device
    # (L, M, K) @ (K, N) is one (L*M, K) @ (K, N) product when A's rows stack evenly.
    if a.dim() == 3 and b.dim() == 2:
        a = a.reshape(batches * m, k)
        result_view = result.view(batches * m, n) if result.is_contiguous() else None
        if result_view is not None:
            m, batches, result = batches * m, 1, result_view
        else:
            a = a.view(batches, m, k)
    a3 = _as_3d(a, batches)
    b3 = _as_3d(b, batches).transpose(1, 2)  # (L, N, K): B as the kernel reads it
    d3 = result if result.dim() == 3 else result.unsqueeze(0)

    op_a = as_operand(a3)
    op_b = as_operand(b3)
    op_d = describe(d3)
    staging = None
    if op_d is None:  # the caller's out (or an odd N) has no tensor map: write a staging copy
        staging = padded_empty(*d3.shape, dtype=d3.dtype, device=device)
        op_d = describe(staging)

    ab_dtype = TORCH_DTYPES[a.dtype]
    config = config or choose_config(arch, m, n, k, batches, sm_count)
    spec = cfg.make_spec(
        arch,
        ab_dtype,
        TORCH_DTYPES[d3.dtype],
        "k" if op_a.cols_contiguous else "m",
        "k" if op_b.cols_contiguous else "n",
        "n" if op_d.cols_contiguous else "m",
        config,
    )
    kernel = compile_mod.KERNEL_CACHE.get(spec)
    grid = TileGrid.for_problem(m, n, batches, spec.config)
    clusters = grid.launch_clusters(max_active_clusters(device.index, spec.config.cluster_size))
    _run(kernel, spec, op_a, op_b, op_d, m, n, k, batches, clusters, device)
    if staging is not None:
        d3.copy_(staging)


def _run(kernel, spec, op_a: MatrixOperand, op_b: MatrixOperand, op_d: MatrixOperand,
         m, n, k, batches, clusters, device) -> None:
    import cuda.bindings.driver as cuda_driver
    import cutlass.cute as cute
    from cutlass.cute.runtime import make_ptr

    from .kernels.sm90 import CUTLASS_DTYPES

    def ptr(op: MatrixOperand, dtype_name: str):
        return make_ptr(CUTLASS_DTYPES[dtype_name], op.data_ptr, cute.AddressSpace.gmem, assumed_align=16)

    with torch.cuda.device(device):
        stream = cuda_driver.CUstream(torch.cuda.current_stream(device).cuda_stream)
        kernel(
            ptr(op_a, spec.ab_dtype),
            ptr(op_b, spec.ab_dtype),
            ptr(op_d, spec.out_dtype),
            m, n, k, batches,
            op_a.ld, op_a.batch_stride,
            op_b.ld, op_b.batch_stride,
            op_d.ld, op_d.batch_stride,
            clusters,
            stream,
        )


__all__ = ["gemm", "max_active_clusters", "WsgemmError"]
