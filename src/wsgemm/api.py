"""``wsgemm.gemm``: the PyTorch-facing entry point.

Validation, output allocation, operand layouts, dispatch by compute capability and
the launch on the current CUDA stream live here; kernels know nothing of torch.

A call is planned once per *call signature* (shapes, strides, dtypes, device,
alignment, ``out``/``out_dtype``/``config``): the plan holds the compiled kernel and
the persistent grid size, so a repeated call only looks the plan up, allocates the
result and launches through TVM-FFI (a few microseconds of host time).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import threading
import warnings
from dataclasses import dataclass

import torch

from . import autotune, fast_path
from . import compile as compile_mod
from . import config as cfg
from .autotune import AUTOTUNE
from .dispatch import HARDWARE_VERIFIED_ARCHS, arch_for_capability
from .errors import DeviceError, ShapeError, UnsupportedDtypeError
from .heuristics import as_launched, choose_config, table_winner_or_model
from .kernels.common import stream_k
from .kernels.common.scheduler import TileGrid
from .operands import padded_empty, readable, readable_view, tma_major, writable_major, writable_view
from .workspace import split_k_workspace

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

                with _primary_context(device_index):
                    value = cutlass.utils.HardwareInfo(device_index).get_max_active_clusters(cluster_size)
            _max_clusters[key] = max(1, int(value))
        return _max_clusters[key]


@contextlib.contextmanager
def _primary_context(device_index: int):
    """The device's primary context (torch's) current on this thread for a few driver
    calls. HardwareInfo asks the driver with the *current* context, and a thread has
    none until its first CUDA runtime call: asked first thing in a fresh process or
    a new thread, it failed with CUDA_ERROR_INVALID_CONTEXT. Retaining and pushing
    the primary context neither synchronizes nor touches a stream, so it is also
    safe while a CUDA graph is being captured."""
    import cuda.bindings.driver as driver

    def check(result):
        err, *value = result if isinstance(result, tuple) else (result,)
        if err != driver.CUresult.CUDA_SUCCESS:
            raise RuntimeError(f"CUDA driver error {err} while reading device {device_index}'s cluster occupancy")
        return value[0] if value else None

    check(driver.cuInit(0))
    device = check(driver.cuDeviceGet(device_index))
    context = check(driver.cuDevicePrimaryCtxRetain(device))
    try:
        check(driver.cuCtxPushCurrent(context))
        try:
            yield
        finally:
            check(driver.cuCtxPopCurrent())
    finally:
        check(driver.cuDevicePrimaryCtxRelease(device))


# --------------------------------------------------------------------------------------
# Validation (runs when a call signature is seen for the first time)
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


def _check_shapes(a: torch.Tensor, b: torch.Tensor) -> tuple[bool, int]:
    """(batched, batches) of ``a @ b``, or ``ShapeError``."""
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
    return batched, batches


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


def validate_shapes_and_dtypes(a, b, out, out_dtype, config) -> tuple[tuple, torch.dtype, bool, int]:
    """Check everything but devices; returns (result shape, result dtype, batched, batches).
    Also what ``torch.compile``'s fake implementation runs."""
    _check_tensor("a", a)
    _check_tensor("b", b)
    _check_input_dtype("a", a)
    _check_input_dtype("b", b)
    if a.dtype != b.dtype:
        raise UnsupportedDtypeError(f"a is {a.dtype} but b is {b.dtype}; both operands must have the same dtype")
    batched, batches = _check_shapes(a, b)
    if config is not None and not isinstance(config, cfg.GemmConfig) and config != AUTOTUNE:
        raise TypeError(f"config must be a wsgemm.GemmConfig, 'autotune' or None, got {type(config).__name__} "
                        f"{config!r}")
    if out_dtype is not None and out_dtype not in TORCH_DTYPES:
        raise UnsupportedDtypeError(
            f"out_dtype={out_dtype} is not supported; use torch.float16, torch.bfloat16 or torch.float32"
        )
    m, n = a.shape[-2], b.shape[-1]
    shape = (batches, m, n) if batched else (m, n)
    if out is not None:
        _check_out(out, out_dtype, shape)
    result_dtype = out.dtype if out is not None else (out_dtype or a.dtype)
    return shape, result_dtype, batched, batches


def validate(a, b, out, out_dtype, config) -> tuple[tuple, torch.dtype, bool, int]:
    """Check every argument; returns (result shape, result dtype, batched, batches)."""
    checked = validate_shapes_and_dtypes(a, b, out, out_dtype, config)
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
    return checked


# --------------------------------------------------------------------------------------
# Plans
# --------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Plan:
    """What a call signature resolves to.

    ``mode``: ``"direct"`` (the caller's tensors go to the kernel as they are),
    ``"swap"`` (2-D: the kernel computes D^T = B^T A^T on transposed views),
    ``"fold"`` ((L, M, K) @ (K, N) as one (L*M, K) @ (K, N) product), ``"copy"``
    (operands or output go through readable 3-D views and padded copies), or
    ``"trivial"`` (an empty result, or K = 0: all zeros; nothing to launch).
    """

    mode: str
    shape: tuple
    dtype: torch.dtype
    device: torch.device
    kernel: object | None = None  # the TVM-FFI compiled function
    clusters: int = 0
    spec: cfg.KernelSpec | None = None
    # Split-K and stream-K only: (int32 flags, fp32 partial-sum elements) of the workspace.
    workspace: tuple[int, int] = (0, 0)

    @property
    def launches_from_cpp(self) -> bool:
        """Modes ``"direct"`` and ``"swap"``: the C++ fast path can launch the kernel
        itself, making the transposed views of a swap (decode calls) and asking
        ``workspace_source`` for a split's workspace; the other modes copy or reshape
        their operands in ``run``."""
        return self.mode in ("direct", "swap")

    def workspace_source(self):
        """None without a workspace; else ``source(through_operator) -> (flags,
        partials)``, the fast path's way to the workspace of the stream it launches on."""
        if not self.workspace[0]:
            return None
        return functools.partial(split_k_workspace, self.device, *self.workspace)

    @property
    def launches_directly(self) -> bool:
        """The caller's tensors go straight to the kernel, with nothing else to launch
        or decide per call (no workspace): the commonest cached call."""
        return self.mode == "direct" and not self.workspace[0]

    def __post_init__(self):
        if self.launches_directly:
            # The commonest cached call, with nothing left to decide: a closure over the
            # values it needs runs ~0.3 us faster than the general method below.
            result_like_a = self.spec is not None and TORCH_DTYPES[self.dtype] == self.spec.ab_dtype
            object.__setattr__(self, "run", _direct_runner(self.kernel, self.clusters, self.shape, self.dtype,
                                                           self.device, result_like_a))
        if _several_gpus():
            object.__setattr__(self, "run", _on_own_device(self.run, self.device))

    def run(self, a, b, out):
        if out is None:
            # Sizes as separate arguments: cheaper to parse than a shape tuple (~0.4 us
            # on the development CPU; within the noise on the H200's host).
            out = torch.empty(*self.shape, dtype=self.dtype, device=self.device)
        if self.mode == "direct":
            self._launch(a, b, out)
        elif self.mode == "swap":
            self._launch(b.t(), a.t(), out.t())
        elif self.mode == "fold":
            self._launch(a.view(-1, a.shape[-1]), b, out.view(-1, out.shape[-1]))
        elif self.mode == "copy":
            self._run_with_copies(a, b, out)
        elif out.numel():
            out.zero_()
        return out

    def _launch(self, a, b, d):
        if self.workspace[0]:
            flags, partials = split_k_workspace(self.device, *self.workspace)
            self.kernel(a, b, d, flags, partials, self.clusters)
        else:
            self.kernel(a, b, d, self.clusters)

    def _run_with_copies(self, a, b, out):
        batches = self.shape[0] if len(self.shape) == 3 else 1
        a3, _ = readable(_as_batched(a, batches))
        b3, _ = readable(_as_batched(b, batches))
        target = out if out.dim() == 3 else out.unsqueeze(0)
        d3 = writable_view(target)
        if d3 is None:  # the kernel cannot store into the output: compute into a staging buffer
            d3 = padded_empty(*target.shape, dtype=self.dtype, device=self.device)
        self._launch(a3, b3, d3)
        if d3.data_ptr() != target.data_ptr():
            target.copy_(d3)


def _direct_runner(kernel, clusters: int, shape: tuple, dtype: torch.dtype, device: torch.device,
                   result_like_a: bool):
    """``Plan.run`` for mode ``"direct"`` without a workspace. ``result_like_a``: the
    result has ``a``'s dtype (and, always, its device), so ``a.new_empty`` allocates
    it without a dtype and a device argument to parse (benchmarks/NOTES.md section 17)."""
    if result_like_a:
        new_empty = torch.Tensor.new_empty

        def run_like_a(a, b, out):
            if out is None:
                out = new_empty(a, *shape)
            kernel(a, b, out, clusters)
            return out

        return run_like_a
    empty = torch.empty

    def run(a, b, out):
        if out is None:
            out = empty(*shape, dtype=dtype, device=device)
        kernel(a, b, out, clusters)
        return out

    return run


def _on_own_device(run, device: torch.device):
    """``run`` with ``device`` current: the kernel launches on the current device's
    stream, so switch devices if the operands live elsewhere (a question only worth
    its ~0.3 us with several GPUs, so single-GPU plans skip it)."""

    def run_on_device(a, b, out):
        if device.index != torch.cuda.current_device():
            with torch.cuda.device(device):
                return run(a, b, out)
        return run(a, b, out)

    return run_on_device


_plans: dict = {}
_plans_lock = threading.Lock()
# Plans are small, but a process that sees endlessly many shapes must not grow without
# bound: past this many, start over (replanning is cheap; kernels stay compiled).
MAX_PLANS = 4096


def _signature(a, b, out, out_dtype, config, read_before_wait=""):
    """Everything a plan depends on. Raises AttributeError/TypeError for non-tensors,
    which sends the call down the validating path."""
    # get_device(): an int, cheaper than building a torch.device; -1 for CPU and meta
    # tensors, which never get a plan (validation rejects them first).
    key = (a.shape, a.stride(), a.dtype, a.get_device(), a.data_ptr() & 15,
           b.shape, b.stride(), b.dtype, b.get_device(), b.data_ptr() & 15, out_dtype, config, read_before_wait)
    if out is not None:
        key += (out.shape, out.stride(), out.dtype, out.get_device(), out.data_ptr() & 15)
    return key


# Kernel major of a torch-layout operand, by operand and unit-stride mode.
_KERNEL_MAJOR = {("a", "cols"): "k", ("a", "rows"): "m", ("b", "cols"): "n", ("b", "rows"): "k",
                 ("d", "cols"): "n", ("d", "rows"): "m"}


def _choose_mode(a, b, out, shape, dtype) -> tuple[str, tuple]:
    """(mode, (a, b, d) unit-stride modes) for a launchable product."""
    # Without out=, Plan.run allocates a contiguous result: reason about its layout.
    d = out if out is not None else torch.empty(shape, dtype=dtype, device="meta")
    a_major, b_major, d_major = tma_major(a), tma_major(b), writable_major(d)
    if a.dim() == b.dim() and a_major and b_major and d_major:
        return "direct", (a_major, b_major, d_major)
    if a.dim() == 3 and b.dim() == 2 and a_major == "cols" and b_major and d_major == "cols":
        # Rows of every batch stack evenly: one (L*M, K) @ (K, N) product.
        if a.stride(0) == a.shape[1] * a.stride(1) and d.stride(0) == d.shape[1] * d.stride(1):
            return "fold", (a_major, b_major, d_major)
    batches = shape[0] if len(shape) == 3 else 1

    def copy_major(view):  # what Plan._run_with_copies will hand the kernel
        return "cols" if view is None else tma_major(view)  # copies are row-contiguous

    return "copy", (copy_major(readable_view(_as_batched(a, batches))),
                    copy_major(readable_view(_as_batched(b, batches))),
                    copy_major(writable_view(d if d.dim() == 3 else d.unsqueeze(0))))


def make_plan(a, b, out, out_dtype, config, read_before_wait: str = "") -> Plan:
    check_read_before_wait(read_before_wait, config)
    shape, dtype, batched, batches = validate(a, b, out, out_dtype, config)
    m, k, n = a.shape[-2], a.shape[-1], b.shape[-1]
    if m * n * batches == 0 or k == 0:
        return Plan("trivial", shape, dtype, a.device)
    arch, sm_count, gpu = _device_facts(a.device.index or 0)
    mode, spec, (kernel_m, kernel_n, kernel_batches) = _kernel_for(
        a, b, out, out_dtype, config, shape, dtype, batched, batches, gpu, arch, sm_count, read_before_wait)
    grid = TileGrid.for_problem(kernel_m, kernel_n, kernel_batches, spec.config)
    clusters = grid.launch_clusters(max_active_clusters(a.device.index or 0, spec.config.cluster_size))
    if spec.config.stream_k and not stream_k.fits_int32(grid.units, clusters, -(-k // spec.config.tile_k)):
        raise cfg.ConfigError(f"stream_k=True: K={k} is too long for the kernel's 32-bit stream-K arithmetic "
                              f"on {clusters} clusters; use split_k instead")
    workspace = launch_workspace_elems(grid, clusters, spec.config)
    kernel = compile_mod.launcher(compile_mod.KERNEL_CACHE.get(spec).fn)
    return Plan(mode, shape, dtype, a.device, kernel, clusters, spec, workspace)


def launch_workspace_elems(grid: TileGrid, clusters: int, config: cfg.GemmConfig) -> tuple[int, int]:
    """(int32 flags, fp32 partial-sum elements) a launch hands the kernel; (0, 0)
    without split-K or stream-K.

    Only the last wave's tiles are split or streamed, so this is at most one wave of
    fp32 tiles (split-K: 132 x 15 x 128 KiB = 248 MiB at split_k = 16 on an H200;
    stream-K: one tile per CTA), whatever M and N. When the tiles fill whole waves
    nothing is split, but the kernel's entry point still takes a workspace: one
    element each, never touched.
    """
    if not config.has_workspace:
        return 0, 0
    flags, partials = grid.workspace_elems(clusters, config.tile_m, config.tile_n)
    return max(flags, 1), max(partials, 1)


def check_read_before_wait(read_before_wait, config) -> None:
    """``read_before_wait=``'s checks, shared with the operator's fake implementation."""
    if read_before_wait not in cfg.READ_BEFORE_WAIT_OPERANDS:
        raise ValueError(f"read_before_wait={read_before_wait!r} must be '', 'a' or 'b'")
    if read_before_wait and isinstance(config, cfg.GemmConfig):
        raise ValueError(f"read_before_wait={read_before_wait!r} with a GemmConfig: the config says it itself; "
                         f"pass GemmConfig(read_before_wait={read_before_wait!r}, dependent_launch=True, ...)")


def _kernel_for(a, b, out, out_dtype, config, shape, dtype, batched, batches, gpu, arch, sm_count,
                read_before_wait=""):
    """(mode, KernelSpec, kernel problem (M, N, batches)) for validated operands; also
    runs on meta tensors (``precompile``), except for ``config="autotune"``."""
    m, k, n = a.shape[-2], a.shape[-1], b.shape[-1]
    mode, (a_major, b_major, d_major) = _choose_mode(a, b, out, shape, dtype)
    kernel_batched = {"direct": batched, "fold": False, "copy": True}[mode]
    kernel_m, kernel_n, kernel_batches = _kernel_problem(mode, m, n, batches)
    # D^T = B^T A^T runs the same kernel on transposed views (2-D, readable operands).
    can_swap = mode == "direct" and a.dim() == 2 and b.dim() == 2
    chosen_here = config is None or config == AUTOTUNE  # a caller's GemmConfig is used as given
    if config == AUTOTUNE:
        config = _autotuned(a, b, out, out_dtype, gpu, arch, (a_major, b_major, d_major), kernel_m, n, k,
                            kernel_batches, sm_count, dtype, can_swap)
    if config is None:
        # A winner measured on this GPU for this shape bucket (unless its waves fit this M
        # badly), else the model's choice.
        key = _bucket_key(gpu, arch, a.dtype, dtype, (a_major, b_major, d_major), kernel_m, n, k, kernel_batches)
        measured = autotune.measured_config(key)
        if measured is not None and (can_swap or not measured.swap_ab):
            config = table_winner_or_model(measured, autotune.bucket_bound(kernel_m), kernel_m, n, k,
                                           kernel_batches, sm_count, can_swap)
        else:
            config = choose_config(arch, kernel_m, n, k, kernel_batches, sm_count, can_swap)
    if config.swap_ab and can_swap:
        mode, kernel_m, kernel_n = "swap", n, m
        a_major, b_major, d_major = _swapped_majors(a, b, out, shape, dtype)
    if chosen_here:
        config = as_launched(arch, config, kernel_m, kernel_n, k, kernel_batches, sm_count,
                             TORCH_DTYPES[a.dtype], TORCH_DTYPES[dtype], _both_k_major(a_major, b_major))
        if read_before_wait and config.dependent_launch:  # only a dependent launch has a wait to read before
            config = dataclasses.replace(config, read_before_wait=read_before_wait)
    spec = cfg.make_spec(
        arch, TORCH_DTYPES[a.dtype], TORCH_DTYPES[dtype],
        _KERNEL_MAJOR["a", a_major], _KERNEL_MAJOR["b", b_major], _KERNEL_MAJOR["d", d_major],
        config, batched=kernel_batched,
    )
    return mode, spec, (kernel_m, kernel_n, kernel_batches)


def _both_k_major(a_major, b_major) -> bool:
    """Whether the kernel reads both operands, given their unit-stride modes, along K."""
    return _KERNEL_MAJOR["a", a_major] == "k" and _KERNEL_MAJOR["b", b_major] == "k"


def _swapped_majors(a, b, out, shape, dtype) -> tuple[str, str, str]:
    """Unit-stride modes of B^T, A^T and D^T (2-D, all TMA-readable when A, B, D are)."""
    d = out if out is not None else torch.empty(shape, dtype=dtype, device="meta")
    return tma_major(b.t()), tma_major(a.t()), writable_major(d.t())


def _kernel_problem(mode, m, n, batches) -> tuple[int, int, int]:
    """The (M, N, batches) the kernel runs: a folded batch stacks its rows."""
    return (m * batches, n, 1) if mode == "fold" else (m, n, batches)


def bucket_key_for(a, b, out=None, out_dtype=None, *, gpu: str, arch: str = "sm90") -> str:
    """The shape bucket that ``gemm(a, b, out, out_dtype)`` with the default config
    looks up (packaged table, then the autotuner's cache) on a ``gpu`` of ``arch``.

    Runs on meta tensors, so tools off the GPU (``benchmarks/retune_sustained.py``)
    name a bucket the way a call on the GPU would, layouts and batch folding included.
    """
    shape, dtype, _, batches = validate_shapes_and_dtypes(a, b, out, out_dtype, None)
    mode, majors = _choose_mode(a, b, out, shape, dtype)
    kernel_m, _, kernel_batches = _kernel_problem(mode, a.shape[-2], b.shape[-1], batches)
    return _bucket_key(gpu, arch, a.dtype, dtype, majors, kernel_m, b.shape[-1], a.shape[-1], kernel_batches)


def _bucket_key(gpu, arch, ab_dtype, out_dtype, majors, m, n, k, batches) -> str:
    kernel_majors = tuple(_KERNEL_MAJOR[operand, mode] for operand, mode in zip("abd", majors))
    return autotune.bucket_key(gpu, arch, TORCH_DTYPES[ab_dtype], TORCH_DTYPES[out_dtype], kernel_majors,
                               m, n, k, batches)


def _autotuned(a, b, out, out_dtype, gpu, arch, majors, m, n, k, batches, sm_count, dtype,
               can_swap) -> cfg.GemmConfig:
    if arch != "sm90":
        raise cfg.ConfigError(f"config='autotune' times kernels on the GPU; it is available on sm90, not {arch}")
    from .heuristics import candidates_to_time

    key = _bucket_key(gpu, arch, a.dtype, dtype, majors, m, n, k, batches)
    # The winner serves the whole bucket: swapped tiles up to M = 128 hold its largest M
    # (past it they hold this M, and give way where they cannot: table_winner_or_model).
    candidates = candidates_to_time(m, n, k, batches, sm_count, can_swap, autotune.TOP_CANDIDATES,
                                    tokens_up_to=autotune.bucket_bound(m))

    # The kernel's operands: the caller's A and B, or B^T and A^T where a candidate
    # swaps (2-D only).
    k_major = {False: _both_k_major(*majors[:2]),
               True: can_swap and _both_k_major(tma_major(b.t()), tma_major(a.t()))}

    def launch(config):  # as _kernel_for will launch the winner
        kernel_m, kernel_n = (n, m) if config.swap_ab else (m, n)
        return as_launched(arch, config, kernel_m, kernel_n, k, batches, sm_count, TORCH_DTYPES[a.dtype],
                           TORCH_DTYPES[dtype], k_major[config.swap_ab])

    winner = autotune.tuned_config(a, b, out, out_dtype, key=key, candidates=candidates, launch=launch, m=m)
    # Timed at one M of the bucket, it serves the others as a packaged winner does.
    return table_winner_or_model(winner, autotune.tuned_at_m(key), m, n, k, batches, sm_count, can_swap)


def _as_batched(t: torch.Tensor, batches: int) -> torch.Tensor:
    return t if t.dim() == 3 else t.unsqueeze(0).expand(batches, *t.shape)


# --------------------------------------------------------------------------------------
# The entry point
# --------------------------------------------------------------------------------------

def gemm(a: torch.Tensor, b: torch.Tensor, *, out: torch.Tensor | None = None,
         out_dtype: torch.dtype | None = None, config: cfg.GemmConfig | str | None = None,
         read_before_wait: str = "") -> torch.Tensor:
    """``a @ b`` on a Hopper GPU with wsgemm's warp-specialized kernel.

    ``a``: (M, K) or (L, M, K); ``b``: (K, N) or (L, K, N); float16 or bfloat16, the
    same for both. A 2-D operand is broadcast over the other's batch, like
    ``torch.matmul``. Products accumulate in float32; the result has ``a``'s dtype
    unless ``out_dtype`` (float16, bfloat16 or float32) says otherwise. ``out``
    receives the result in place. Row- and column-major operands are read without a
    copy; layouts TMA cannot read are copied first (see ``wsgemm.operands``).
    The kernel runs on the inputs' device and its current CUDA stream.

    ``config``: ``None`` picks a configuration with the throughput model of
    ``wsgemm.heuristics``; a :class:`GemmConfig` forces one; ``"autotune"`` times the
    model's best few on these inputs the first time a shape bucket is seen (with a
    progress bar) and remembers the winner on disk (``wsgemm.autotune``). For ``None``
    and ``"autotune"``, ``heuristics.as_launched`` then decides stream-K, whether the
    kernel is launched as a programmatic dependent of the previous kernel on the
    stream, and the epilogue's buffers; a forced :class:`GemmConfig` says so itself
    (``stream_k``, ``dependent_launch``, ``epi_stages``).

    ``read_before_wait="b"`` (or ``"a"``) is a promise: no kernel before this call on
    the stream writes that operand, as for a weight at inference. Where the kernel is
    launched as a programmatic dependent (decode-sized problems), it then loads the
    operand's first stages while a previous kernel that launches its dependents early
    (as wsgemm's do) finishes: decode GEMMs back to back in CUDA graphs ran 1.040x
    faster on an H200, single calls level (benchmarks/NOTES.md section 53). A false
    promise gives a wrong result without an error (say, right after an optimizer step
    or a weight load wrote the operand), so it is off unless asked for; with a
    :class:`GemmConfig`, its own ``read_before_wait`` field says so.

    When an input requires grad, the call records both gradients for autograd
    (computed by wsgemm too); under ``torch.compile`` it goes through the
    ``torch.ops.wsgemm.gemm`` operator. ``out`` and ``config`` are for eager calls
    without autograd only; ``read_before_wait`` for calls without autograd, eager or
    under ``torch.compile``.
    """
    compiling = torch.compiler.is_compiling()
    if out is None and out_dtype is None and config is None and not compiling:
        # A cached call: its plan found, run and (if autograd records) recorded in C++
        # (wsgemm.fast_path); None if the Python path below must decide.
        result = _call_cached(a, b, read_before_wait)
        if result is not None:
            return result
    try:
        needs_autograd = (a.requires_grad or b.requires_grad) and torch.is_grad_enabled()
    except AttributeError:  # not tensors: gemm_eager's validation says what is wrong
        needs_autograd = False
    if needs_autograd or compiling:
        return _with_autograd_or_tracing(a, b, out, out_dtype, config, read_before_wait, needs_autograd, compiling)
    return gemm_eager(a, b, out, out_dtype, config, read_before_wait)


def _with_autograd_or_tracing(a, b, out, out_dtype, config, read_before_wait, needs_autograd: bool,
                              compiling: bool):
    if out is not None:
        raise ValueError("out= is not supported when an input requires grad or under torch.compile "
                         "(autograd needs a fresh result tensor); drop out= or run under torch.no_grad()")
    if config is not None:
        raise ValueError("config= is eager-only: torch.ops.wsgemm.gemm always uses the heuristic; "
                         "drop config= or call wsgemm.gemm outside torch.compile and autograd")
    if read_before_wait and needs_autograd:
        # Where gradients are recorded, an optimizer step writes the weights between
        # calls: the promise would be false right after it.
        raise ValueError("read_before_wait= is for inference: an input requires grad, and in training an "
                         "optimizer step writes the weights the promise covers; drop it or run under "
                         "torch.no_grad() or torch.inference_mode()")
    ops = _ops()
    if compiling:
        return ops.gemm_op(a, b, out_dtype, read_before_wait)
    return ops.gemm_with_autograd(a, b, out_dtype)


_ops_module = None


def _ops():
    """``wsgemm.ops``, imported on first use (it registers ``torch.ops.wsgemm.gemm``
    and gives the fast path its backward): by the first call that needs autograd or
    ``torch.compile``, or by the first call at all where the fast path is built. Kept
    in a global, not a ``functools.lru_cache``: torch.compile traces through this
    function and warns of a cache wrapper it has to ignore."""
    global _ops_module
    if _ops_module is None:
        from . import ops

        _ops_module = ops
    return _ops_module


def gemm_eager(a, b, out=None, out_dtype=None, config=None, read_before_wait="") -> torch.Tensor:
    """The direct path: plan lookup, result allocation, launch."""
    try:
        key = _signature(a, b, out, out_dtype, config, read_before_wait)
        plan = _plans.get(key)
    except (AttributeError, TypeError):
        key, plan = None, None
    if plan is None:
        plan = make_plan(a, b, out, out_dtype, config, read_before_wait)  # raises the argument errors
        if key is not None:
            with _plans_lock:
                if len(_plans) >= MAX_PLANS:
                    forget_plans()
                _plans[key] = plan
                # The calls gemm() hands to the C++ path (the same condition there):
                # only theirs are remembered for it.
                if out is None and out_dtype is None and config is None:
                    _remember_plan(a, b, plan, read_before_wait)
    return plan.run(a, b, out)


def forget_plans() -> None:
    """Drop every plan (Python's and the fast path's); kernels stay compiled."""
    _plans.clear()
    module = fast_path.load()
    if module is not None:
        module.forget()


def gemm_by_weight(a: torch.Tensor, weight: torch.Tensor, read_before_wait: str = "") -> torch.Tensor:
    """``gemm(a, weight.t(), read_before_wait=...)`` for a 2-D ``a`` and an
    (out_features, in_features) weight, as ``wsgemm.nn.Linear`` calls it. A cached
    call makes the transposed view in C++ (``call_transposed``), a fraction of
    Python's ``weight.t()``; any other goes through :func:`gemm`."""
    if not torch.compiler.is_compiling():
        result = _call_cached_transposed(a, weight, read_before_wait)
        if result is not None:
            return result
    return gemm(a, weight.t(), read_before_wait=read_before_wait)


def _load_cached_calls() -> None:
    """The first cached call loads (or builds) the fast path and binds both entries
    to it; later calls go straight to C++."""
    global _call_cached, _call_cached_transposed
    module = fast_path.load()
    if module is not None:
        _ops()  # sets the node's backward (ops.py) before a node can be recorded
        _call_cached, _call_cached_transposed = module.call, module.call_transposed
    else:
        _call_cached = _call_cached_transposed = _no_cached_call


def _call_cached_first(a, b, read_before_wait=""):
    _load_cached_calls()
    return _call_cached(a, b, read_before_wait)


def _call_cached_transposed_first(a, weight, read_before_wait=""):
    _load_cached_calls()
    return _call_cached_transposed(a, weight, read_before_wait)


def _no_cached_call(a, b, read_before_wait=""):
    return None


@contextlib.contextmanager
def without_fast_path():
    """Calls inside run as with ``WSGEMM_FAST_PATH=0``: the Python path decides and
    launches, and autograd records its own node. For timing both paths side by side
    in one process (``benchmarks/bench_overhead.py``); not thread-safe."""
    global _call_cached, _call_cached_transposed
    ops = _ops()
    kept = _call_cached, _call_cached_transposed, ops._record_product
    _call_cached, _call_cached_transposed, ops._record_product = _no_cached_call, _no_cached_call, None
    try:
        yield
    finally:
        _call_cached, _call_cached_transposed, ops._record_product = kept


def _remember_plan(a, b, plan: Plan, read_before_wait: str) -> None:
    """The plan for the fast path's lookup; a direct or swapped plan (on one GPU:
    several need a device switch first) is launched from C++ itself."""
    module = fast_path.load()
    if module is None:
        return
    if plan.launches_from_cpp and not _several_gpus():
        module.remember(a, b, plan.run, plan.kernel, plan.clusters, plan.shape, plan.dtype, read_before_wait,
                        plan.mode == "swap", plan.workspace_source())
    else:
        module.remember(a, b, plan.run, read_before_wait=read_before_wait)


_call_cached = _call_cached_first
_call_cached_transposed = _call_cached_transposed_first


@functools.lru_cache(maxsize=1)
def _several_gpus() -> bool:
    return torch.cuda.device_count() > 1


def precompile(shapes, dtype: torch.dtype = torch.bfloat16, *, weight_layout: bool = True,
               out_dtype: torch.dtype | None = None, device=None, progress: bool = True) -> dict:
    """Compile, ahead of time, the kernels that ``gemm`` will need for ``shapes``.

    ``shapes``: (M, N, K) or (L, M, N, K) tuples; ``weight_layout``: B is an
    ``nn.Linear``-style weight passed as ``w.t()`` (else a row-major (K, N) tensor).
    Kernels land in the in-process and disk caches, so a later process loads them
    instead of compiling. The C++ host fast path (``wsgemm.fast_path``) is built or
    loaded here too, so the first call does not pay for it. Returns
    ``{shape: seconds}`` (compile or load time).
    """
    fast_path.load()
    device = torch.device(device or "cuda")
    index = device.index if device.index is not None else torch.cuda.current_device()
    arch, sm_count, gpu = _device_facts(index)
    shapes = [tuple(s) for s in shapes]
    bar = _progress(shapes, progress)
    seconds = {}
    for shape in bar:
        *lead, m, n, k = shape
        # Meta tensors with the layouts gemm will see: the same planning picks the kernel.
        a = torch.empty(*lead, m, k, dtype=dtype, device="meta")
        b = torch.empty(n, k, dtype=dtype, device="meta").t() if weight_layout else \
            torch.empty(k, n, dtype=dtype, device="meta")
        result_shape, result_dtype, batched, batches = validate_shapes_and_dtypes(a, b, None, out_dtype, None)
        _, spec, _ = _kernel_for(a, b, None, out_dtype, None, result_shape, result_dtype, batched, batches,
                                 gpu, arch, sm_count)
        known = spec in compile_mod.KERNEL_CACHE
        seconds[shape] = 0.0 if known else compile_mod.KERNEL_CACHE.get(spec).compile_seconds
    return seconds


def _progress(items, enabled: bool):
    if not enabled:
        return items
    try:
        from tqdm import tqdm

        return tqdm(items, desc="wsgemm: compiling", unit="kernel")
    except ImportError:
        return items


__all__ = ["gemm", "gemm_eager", "make_plan", "max_active_clusters", "precompile", "validate"]
