"""Validation and plans: what a call signature resolves to, and the direct path that
launches it.

A call is planned once per *call signature* (shapes, strides, dtypes, device,
alignment, ``out``/``out_dtype``/``config``): the plan holds the compiled kernel and
the persistent grid size, so a repeated call only looks the plan up, allocates the
result and launches through TVM-FFI (a few microseconds of host time). Which kernel
configuration a plan runs is :func:`wsgemm.tuning.select`'s answer; this module turns
the caller's tensors into the problem it answers for, and its answer into a launch.
"""

from __future__ import annotations

import dataclasses
import functools
import threading
from dataclasses import dataclass

import torch

from . import compile as compile_mod
from . import config as cfg
from . import devices, fast_path, tuning
from .errors import DeviceError, ShapeError, UnsupportedDtypeError
from .grid import TileGrid, stream_k_fits_int32
from .operands import padded_empty, readable, readable_view, tma_major, writable_major, writable_view
from .tuning import AUTOTUNE, Problem
from .tuning.autotune import Trial
from .workspace import split_k_workspace

TORCH_DTYPES = {torch.float16: "fp16", torch.bfloat16: "bf16", torch.float32: "fp32"}
INPUT_TORCH_DTYPES = (torch.float16, torch.bfloat16)


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
    # What the kernel's epilogue computes besides the conversion (``wsgemm.fused``
    # launches such plans with ``run_fused``; ``run`` launches the others).
    epilogue: cfg.Epilogue = cfg.Epilogue()

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
        if self.launches_directly and not self.epilogue.fused:
            # The commonest cached call, with nothing left to decide: a closure over the
            # values it needs runs ~0.3 us faster than the general method below.
            result_like_a = self.spec is not None and TORCH_DTYPES[self.dtype] == self.spec.ab_dtype
            object.__setattr__(self, "run", _direct_runner(self.kernel, self.clusters, self.shape, self.dtype,
                                                           self.device, result_like_a))
        if devices.several_gpus():
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

    def run_fused(self, a, b, out, bias, alpha: float):
        """``run`` for a plan whose epilogue is fused: ``bias`` is (batches or 1, length)
        with unit stride along its length, or None (``wsgemm.fused`` prepares it)."""
        if devices.several_gpus() and self.device.index != torch.cuda.current_device():
            with torch.cuda.device(self.device):  # the kernel launches on the current device's stream
                return self.run_fused(a, b, out, bias, alpha)
        if out is None:
            out = torch.empty(*self.shape, dtype=self.dtype, device=self.device)
        fused = (bias, float(alpha))
        if self.mode == "direct":
            self._launch(a, b, out, fused)
        elif self.mode == "swap":
            self._launch(b.t(), a.t(), out.t(), fused)
        elif self.mode == "fold":
            self._launch(a.view(-1, a.shape[-1]), b, out.view(-1, out.shape[-1]), fused)
        else:
            self._run_with_copies(a, b, out, fused)
        return out

    def _launch(self, a, b, d, fused=None):
        if fused is not None:
            bias, alpha = fused
            flags, partials = split_k_workspace(self.device, *self.workspace) if self.workspace[0] else (d, d)
            self.kernel(a, b, d, flags, partials, d if bias is None else bias, alpha, self.clusters)
        elif self.workspace[0]:
            flags, partials = split_k_workspace(self.device, *self.workspace)
            self.kernel(a, b, d, flags, partials, self.clusters)
        else:
            self.kernel(a, b, d, self.clusters)

    def _run_with_copies(self, a, b, out, fused=None):
        batches = self.shape[0] if len(self.shape) == 3 else 1
        a3, _ = readable(_as_batched(a, batches))
        b3, _ = readable(_as_batched(b, batches))
        target = out if out.dim() == 3 else out.unsqueeze(0)
        d3 = writable_view(target)
        if d3 is None:  # the kernel cannot store into the output: compute into a staging buffer
            d3 = padded_empty(*target.shape, dtype=self.dtype, device=self.device)
        self._launch(a3, b3, d3, fused)
        if d3.data_ptr() != target.data_ptr():
            target.copy_(d3)


def _direct_runner(kernel, clusters: int, shape: tuple, dtype: torch.dtype, device: torch.device,
                   result_like_a: bool):
    """``Plan.run`` for mode ``"direct"`` without a workspace. ``result_like_a``: the
    result has ``a``'s dtype (and, always, its device), so ``a.new_empty`` allocates
    it without a dtype and a device argument to parse."""
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
_plans_lock = threading.RLock()  # store_plan takes it inside gemm_eager's hold
# Plans are small, but a process that sees endlessly many shapes must not grow without
# bound: past this many, start over (replanning is cheap; kernels stay compiled).
MAX_PLANS = 4096


def call_signature(a, b, out, out_dtype, config, read_before_wait=""):
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


def _choose_mode(a, b, out, shape, dtype, can_fold: bool = True) -> tuple[str, tuple]:
    """(mode, (a, b, d) unit-stride modes) for a launchable product. ``can_fold``:
    False where a per-batch bias needs the batch the fold would erase."""
    # Without out=, Plan.run allocates a contiguous result: reason about its layout.
    d = out if out is not None else torch.empty(shape, dtype=dtype, device="meta")
    a_major, b_major, d_major = tma_major(a), tma_major(b), writable_major(d)
    if a.dim() == b.dim() and a_major and b_major and d_major:
        return "direct", (a_major, b_major, d_major)
    if can_fold and a.dim() == 3 and b.dim() == 2 and a_major == "cols" and b_major and d_major == "cols":
        # Rows of every batch stack evenly: one (L*M, K) @ (K, N) product.
        if a.stride(0) == a.shape[1] * a.stride(1) and d.stride(0) == d.shape[1] * d.stride(1):
            return "fold", (a_major, b_major, d_major)
    batches = shape[0] if len(shape) == 3 else 1

    def copy_major(view):  # what Plan._run_with_copies will hand the kernel
        return "cols" if view is None else tma_major(view)  # copies are row-contiguous

    return "copy", (copy_major(readable_view(_as_batched(a, batches))),
                    copy_major(readable_view(_as_batched(b, batches))),
                    copy_major(writable_view(d if d.dim() == 3 else d.unsqueeze(0))))


def make_plan(a, b, out, out_dtype, config, read_before_wait: str = "", epilogue: cfg.Epilogue = cfg.Epilogue(),
              per_batch_bias: bool = False) -> Plan:
    """The plan of a validated-at-first-sight call. ``epilogue``: the fused epilogue
    with its bias along the caller's N (``wsgemm.fused``; a swapped plan moves it to
    the kernel's M); ``per_batch_bias``: the bias has one row per batch."""
    check_read_before_wait(read_before_wait, config)
    shape, dtype, batched, batches = validate(a, b, out, out_dtype, config)
    m, k, n = a.shape[-2], a.shape[-1], b.shape[-1]
    if m * n * batches == 0 or k == 0:
        return Plan("trivial", shape, dtype, a.device, epilogue=epilogue)
    gpu = devices.gpu(a.device.index or 0)
    mode, spec, (kernel_m, kernel_n, kernel_batches) = _kernel_for(
        a, b, out, out_dtype, config, shape, dtype, batched, batches, gpu, read_before_wait, epilogue,
        per_batch_bias)
    grid = TileGrid.for_problem(kernel_m, kernel_n, kernel_batches, spec.config)
    clusters = grid.launch_clusters(gpu.clusters(spec.config.cluster_size))
    if spec.config.stream_k and not stream_k_fits_int32(grid.units, clusters, -(-k // spec.config.tile_k)):
        raise cfg.ConfigError(f"stream_k=True: K={k} is too long for the kernel's 32-bit stream-K arithmetic "
                              f"on {clusters} clusters; use split_k instead")
    workspace = launch_workspace_elems(grid, clusters, spec.config)
    kernel = compile_mod.launcher(compile_mod.KERNEL_CACHE.get(spec).fn)
    return Plan(mode, shape, dtype, a.device, kernel, clusters, spec, workspace, spec.epilogue)


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


def _kernel_for(a, b, out, out_dtype, config, shape, dtype, batched, batches, gpu: tuning.Gpu,
                read_before_wait="", epilogue: cfg.Epilogue = cfg.Epilogue(), per_batch_bias: bool = False):
    """(mode, KernelSpec, kernel problem (M, N, batches)) for validated operands; also
    runs on meta tensors (``precompile``, ``benchmarks/maint/plan_diff.py``), except for
    ``config="autotune"``, which times candidates on the operands."""
    m, k, n = a.shape[-2], a.shape[-1], b.shape[-1]
    mode, (a_major, b_major, d_major) = _choose_mode(a, b, out, shape, dtype, can_fold=not per_batch_bias)
    kernel_batched = {"direct": batched, "fold": False, "copy": True}[mode]
    kernel_m, kernel_n, kernel_batches = _kernel_problem(mode, m, n, batches)
    # D^T = B^T A^T runs the same kernel on transposed views (2-D, readable operands).
    can_swap = mode == "direct" and a.dim() == 2 and b.dim() == 2
    problem = Problem(kernel_m, n, k, kernel_batches, TORCH_DTYPES[a.dtype], TORCH_DTYPES[dtype],
                      _KERNEL_MAJOR["a", a_major], _KERNEL_MAJOR["b", b_major], _KERNEL_MAJOR["d", d_major],
                      can_swap)
    trial = _trial(a, b, out, out_dtype) if config == AUTOTUNE else None
    chosen_here = not isinstance(config, cfg.GemmConfig)  # a caller's GemmConfig is used as given
    config = tuning.select(problem, gpu, config, trial=trial)
    if config.swap_ab and can_swap:
        mode, kernel_m, kernel_n = "swap", n, m
        a_major, b_major, d_major = _swapped_majors(a, b, out, shape, dtype)
        if epilogue.bias:  # the caller's N is the kernel's M
            epilogue = dataclasses.replace(epilogue, bias="m")
    if chosen_here and read_before_wait and config.dependent_launch:  # only a dependent launch waits
        config = dataclasses.replace(config, read_before_wait=read_before_wait)
    spec = cfg.make_spec(
        gpu.arch, TORCH_DTYPES[a.dtype], TORCH_DTYPES[dtype],
        _KERNEL_MAJOR["a", a_major], _KERNEL_MAJOR["b", b_major], _KERNEL_MAJOR["d", d_major],
        config, batched=kernel_batched, epilogue=epilogue,
    )
    return mode, spec, (kernel_m, kernel_n, kernel_batches)


def _trial(a, b, out, out_dtype) -> Trial:
    """How ``config="autotune"`` runs a candidate on this call's operands: as a call with
    that config would, into a scratch result (``out`` is left alone until the winner runs)."""
    scratch = torch.empty_like(out) if out is not None else None
    return Trial(a, b, lambda config: (lambda x, y: gemm_eager(x, y, scratch, out_dtype, config)))


def _swapped_majors(a, b, out, shape, dtype) -> tuple[str, str, str]:
    """Unit-stride modes of B^T, A^T and D^T (2-D, all TMA-readable when A, B, D are)."""
    d = out if out is not None else torch.empty(shape, dtype=dtype, device="meta")
    return tma_major(b.t()), tma_major(a.t()), writable_major(d.t())


def _kernel_problem(mode, m, n, batches) -> tuple[int, int, int]:
    """The (M, N, batches) the kernel runs: a folded batch stacks its rows."""
    return (m * batches, n, 1) if mode == "fold" else (m, n, batches)


def _as_batched(t: torch.Tensor, batches: int) -> torch.Tensor:
    return t if t.dim() == 3 else t.unsqueeze(0).expand(batches, *t.shape)


# --------------------------------------------------------------------------------------
# The direct path
# --------------------------------------------------------------------------------------

def gemm_eager(a, b, out=None, out_dtype=None, config=None, read_before_wait="") -> torch.Tensor:
    """The direct path: plan lookup, result allocation, launch."""
    try:
        key = call_signature(a, b, out, out_dtype, config, read_before_wait)
        plan = _plans.get(key)
    except (AttributeError, TypeError):
        key, plan = None, None
    if plan is None:
        plan = make_plan(a, b, out, out_dtype, config, read_before_wait)  # raises the argument errors
        if key is not None:
            with _plans_lock:
                store_plan(key, plan)
                # The calls gemm() hands to the C++ path (the same condition there):
                # only theirs are remembered for it.
                if out is None and out_dtype is None and config is None:
                    _remember_plan(a, b, plan, read_before_wait)
    return plan.run(a, b, out)


def lookup_plan(key) -> Plan | None:
    return _plans.get(key)


def store_plan(key, plan: Plan) -> None:
    """Remember ``plan`` under ``key`` (a call signature, or one extended by
    ``wsgemm.fused``); past ``MAX_PLANS``, start over."""
    with _plans_lock:
        if len(_plans) >= MAX_PLANS:
            forget_plans()
        _plans[key] = plan


def forget_plans() -> None:
    """Drop every plan (Python's and the fast path's); kernels stay compiled."""
    _plans.clear()
    module = fast_path.loaded()
    if module is not None:
        module.forget()


def _remember_plan(a, b, plan: Plan, read_before_wait: str) -> None:
    """The plan for the fast path's lookup; a direct or swapped plan (on one GPU:
    several need a device switch first) is launched from C++ itself."""
    module = fast_path.loaded()
    if module is None:
        return
    if plan.launches_from_cpp and not devices.several_gpus():
        module.remember(a, b, plan.run, plan.kernel, plan.clusters, plan.shape, plan.dtype, read_before_wait,
                        plan.mode == "swap", plan.workspace_source())
    else:
        module.remember(a, b, plan.run, read_before_wait=read_before_wait)


