"""``wsgemm.gemm``: the PyTorch-facing entry point, and its three routes.

A call takes one of three routes:

* **cached**: a call signature seen before, without ``out=``/``out_dtype=``/``config=``,
  is looked up, launched and (if autograd records) recorded in C++ (``wsgemm.fast_path``);
* **eager**: any other call without autograd plans (once per signature, see
  :mod:`wsgemm.plans`) and launches from Python;
* **autograd or tracing**: an input that requires grad, or ``torch.compile``, goes
  through ``wsgemm.ops`` (the ``torch.ops.wsgemm.gemm`` operator and its backward).

Kernels know nothing of torch; validation and plans live in :mod:`wsgemm.plans`,
device facts in :mod:`wsgemm.devices`, the choice of configuration in
:mod:`wsgemm.tuning`.
"""

from __future__ import annotations

import contextlib

import torch

from . import compile as compile_mod
from . import config as cfg
from . import devices, fast_path, fused
from .plans import _kernel_for, forget_plans, gemm_eager, validate_shapes_and_dtypes


# --------------------------------------------------------------------------------------
# The entry point
# --------------------------------------------------------------------------------------

def gemm(a: torch.Tensor, b: torch.Tensor, *, bias: torch.Tensor | None = None, activation: str | None = None,
         alpha: float = 1.0, out: torch.Tensor | None = None, out_dtype: torch.dtype | None = None,
         config: cfg.GemmConfig | str | None = None, read_before_wait: str = "") -> torch.Tensor:
    """``a @ b`` on a Hopper GPU with wsgemm's warp-specialized kernel; with ``bias``,
    ``activation`` or ``alpha``, ``act(alpha * (a @ b) + bias)`` in one kernel.

    ``a``: (M, K) or (L, M, K); ``b``: (K, N) or (L, K, N); float16 or bfloat16, the
    same for both. A 2-D operand is broadcast over the other's batch, like
    ``torch.matmul``. Products accumulate in float32; the result has ``a``'s dtype
    unless ``out_dtype`` (float16, bfloat16 or float32) says otherwise. ``out``
    receives the result in place. Row- and column-major operands are read without a
    copy; layouts TMA cannot read are copied first (see ``wsgemm.operands``).
    The kernel runs on the inputs' device and its current CUDA stream.

    The fused epilogue (``wsgemm.fused``) computes in fp32 before the one conversion
    to the result's dtype: ``alpha`` a float; ``bias`` (N,), or (L, N) for a batched
    result, float16, bfloat16 or float32; ``activation`` one of ``"relu"``,
    ``"gelu"`` (exact), ``"gelu_tanh"`` (``approximate="tanh"``), ``"silu"``. Such
    calls are planned and launched from Python (a few microseconds more host time
    than a cached plain call); the backward is unfused.

    ``config``: ``None`` lets :func:`wsgemm.tuning.select` choose (a winner the
    autotuner remembered, the packaged table of measured winners, else the cost
    model's best plan); a :class:`GemmConfig` forces one; ``"autotune"`` times the cost
    model's best few on these inputs the first time a shape bucket is seen (with a
    progress bar) and remembers the winner on disk (``wsgemm.tuning.autotune``). For
    ``None`` and ``"autotune"``, the launch rules (``wsgemm.tuning.launch``) then decide
    stream-K, ping-pong consumers, whether the kernel is launched as a programmatic
    dependent of the previous kernel on the stream, and the epilogue's buffers; a forced
    :class:`GemmConfig` says so itself (``stream_k``, ``dependent_launch``, ``epi_stages``).

    ``read_before_wait="b"`` (or ``"a"``) is a promise: no kernel before this call on
    the stream writes that operand, as for a weight at inference. Where the kernel is
    launched as a programmatic dependent (decode-sized problems), it then loads the
    operand's first stages while a previous kernel that launches its dependents early
    (as wsgemm's do) finishes: decode GEMMs back to back in CUDA graphs ran 1.040x
    faster on an H200, single calls level (docs/tuning-log/dependent-launch.md). A false
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
    if fused.asks_for_epilogue(bias, activation, alpha):
        return _fused(a, b, bias, activation, alpha, out, out_dtype, config, read_before_wait, compiling)
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


def _fused(a, b, bias, activation, alpha, out, out_dtype, config, read_before_wait, compiling: bool):
    if compiling:
        if out is not None or config is not None:
            raise ValueError("out= and config= are eager-only: under torch.compile the operator always uses the "
                             "heuristic and returns a fresh tensor")
        return _ops().gemm_epilogue_op(a, b, bias, activation or "", float(alpha), out_dtype, read_before_wait)
    try:
        needs_autograd = torch.is_grad_enabled() and (
            a.requires_grad or b.requires_grad or (bias is not None and bias.requires_grad))
    except AttributeError:  # not tensors: the eager route's validation says what is wrong
        needs_autograd = False
    if read_before_wait and needs_autograd:  # as for the plain product (below)
        raise ValueError("read_before_wait= is for inference: an input requires grad, and in training an "
                         "optimizer step writes the weights the promise covers; drop it or run under "
                         "torch.no_grad() or torch.inference_mode()")
    return fused.gemm_fused(a, b, bias, activation, alpha, out, out_dtype, config, needs_autograd, read_before_wait)


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


def _load_cached_calls() -> bool:
    """The first cached call loads the fast path, or starts building it in the
    background, and binds both entries to it once it is decided; later calls go
    straight to C++. False while it builds: the call takes the Python path and the
    next one asks again (a check of a dictionary)."""
    global _call_cached, _call_cached_transposed
    module = fast_path.load(wait=False)
    if module is None and not fast_path.decided():
        return False
    if module is not None:
        _ops().adopt_fast_path(module)  # sets the node's backward before a node can be recorded
        # Plans made in Python while it was building were not remembered for C++:
        # planned again, they are.
        forget_plans()
        _call_cached, _call_cached_transposed = module.call, module.call_transposed
    else:
        _call_cached = _call_cached_transposed = _no_cached_call
    return True


def _call_cached_first(a, b, read_before_wait=""):
    if not _load_cached_calls():
        return None
    return _call_cached(a, b, read_before_wait)


def _call_cached_transposed_first(a, weight, read_before_wait=""):
    if not _load_cached_calls():
        return None
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


_call_cached = _call_cached_first
_call_cached_transposed = _call_cached_transposed_first


def precompile(shapes, dtype: torch.dtype = torch.bfloat16, *, weight_layout: bool = True,
               out_dtype: torch.dtype | None = None, device=None, progress: bool = True) -> dict:
    """Compile, ahead of time, the kernels that ``gemm`` will need for ``shapes``.

    ``shapes``: (M, N, K) or (L, M, N, K) tuples; ``weight_layout``: B is an
    ``nn.Linear``-style weight passed as ``w.t()`` (else a row-major (K, N) tensor).
    Kernels land in the in-process and disk caches, so a later process loads them
    instead of compiling. The C++ host fast path (``wsgemm.fast_path``) is built (in
    a background process, while the kernels compile) or loaded here too, so the first
    call does not run through Python. Returns ``{shape: seconds}`` (compile or load
    time).
    """
    fast_path.load(wait=False)
    device = torch.device(device or "cuda")
    index = device.index if device.index is not None else torch.cuda.current_device()
    gpu = devices.gpu(index)
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
        _, spec, _ = _kernel_for(a, b, None, out_dtype, None, result_shape, result_dtype, batched, batches, gpu)
        known = spec in compile_mod.KERNEL_CACHE
        seconds[shape] = 0.0 if known else compile_mod.KERNEL_CACHE.get(spec).compile_seconds
    fast_path.load()  # waits for the build started above
    return seconds


def _progress(items, enabled: bool):
    if not enabled:
        return items
    try:
        from tqdm import tqdm

        return tqdm(items, desc="wsgemm: compiling", unit="kernel")
    except ImportError:
        return items


__all__ = ["forget_plans", "gemm", "gemm_by_weight", "gemm_eager", "precompile", "without_fast_path"]
