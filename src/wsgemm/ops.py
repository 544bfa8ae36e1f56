"""``torch.ops.wsgemm.gemm``: wsgemm as a PyTorch operator, and eager autograd.

Defined with a ``torch.library.Library`` schema, a fake implementation (shapes,
dtypes and strides, so that ``torch.compile`` traces it without graph breaks) and an
autograd formula that computes both gradients with wsgemm itself: dA = dD @ B^T and
dB = A^T @ dD, where the transposes are views (the kernels read either major mode),
so no operand is copied. Not with ``torch.library.custom_op``, which wraps the same
registrations in Python that checks the output for aliasing on every call (35.3
against 39.4 us per call on the H200's host, docs/tuning-log/host-overhead.md).

Where the C++ fast path is built, the backend and autograd kernels are its own
(``register_operator``): a cached direct or swapped plan is launched from C++ (other
cached plans run their ``run``, as the operator's: see ``wsgemm.workspace``), and the autograd kernel records
one C++ node, entering Python only in backward. A call through the operator took
10.23 us of host time at 64x64x64 on the H200 this way, 19.12 with the kernels in
Python (``_gemm_kernel`` and ``register_autograd``, which this module registers
without the fast path), 11.18 against 37.29 where an input requires grad
(docs/tuning-log/host-overhead.md).

``wsgemm.gemm`` calls the kernel directly in eager mode without autograd; with an
input that requires grad it records the same formula as one C++ autograd node (the
fast path's ``record_product``, :func:`gemm_with_autograd`), or, where that is not
built and for functorch transforms, runs :class:`EagerGemm`, a plain
``torch.autograd.Function``; only while ``torch.compile`` traces does it go through
the operator.
"""

from __future__ import annotations

import torch

from . import fast_path, fused, plans
from .gradients import product_gradients
from .workspace import operator_calls

# The package's own name: benchmarks/maint/baseline.py imports an older wsgemm beside this
# one as wsgemm_base, whose operator must not take (or clash with) this one's name.
_NAMESPACE = __name__.split(".")[0]
_OP = f"{_NAMESPACE}::gemm"
_library = torch.library.Library(_NAMESPACE, "DEF")  # kept alive: dropping it unregisters the operator
# No alias annotations: a new tensor, inputs unchanged (what custom_op's mutates_args=() says).
_library.define("gemm(Tensor a, Tensor b, ScalarType? out_dtype=None, str read_before_wait='') -> Tensor")


def _gemm_kernel(a: torch.Tensor, b: torch.Tensor, out_dtype: torch.dtype | None = None,
                 read_before_wait: str = "") -> torch.Tensor:
    """``a @ b``; see :func:`wsgemm.gemm` (``read_before_wait`` there: inference only,
    ``wsgemm.gemm`` refuses it where autograd records). Captured, a split-K or
    stream-K plan gets a workspace for this call alone: compiled graphs are captured
    into CUDA-graph trees, which allow nothing but outputs to outlive a call in their
    memory pool (``wsgemm.workspace``)."""
    with operator_calls():
        return plans.gemm_eager(a, b, None, out_dtype, None, read_before_wait)


def _run_cached_plan(run, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """A cached plan's ``run`` for the operator's C++ kernel (plans other than direct
    and swapped ones, which it launches itself), as a call through the operator, as
    above."""
    with operator_calls():
        return run(a, b, None)


@torch.library.register_fake(_OP)
def _(a: torch.Tensor, b: torch.Tensor, out_dtype: torch.dtype | None = None,
      read_before_wait: str = "") -> torch.Tensor:
    # The same checks as the real implementation, so a bad call fails at trace time.
    plans.check_read_before_wait(read_before_wait, None)
    shape, dtype, _, _ = plans.validate_shapes_and_dtypes(a, b, None, out_dtype, None)
    return a.new_empty(shape, dtype=dtype)  # contiguous, like the real result


gemm_op = getattr(torch.ops, _NAMESPACE).gemm.default

# The fused epilogue's operator (``wsgemm.fused``), in a library of its own: its kernels
# stay Python's when the fast path takes over ``gemm``'s.
_EPILOGUE_OP = f"{_NAMESPACE}::gemm_epilogue"
_library.define("gemm_epilogue(Tensor a, Tensor b, Tensor? bias, str activation, float alpha, "
                "ScalarType? out_dtype=None, str read_before_wait='') -> Tensor")
_epilogue_kernels = torch.library.Library(_NAMESPACE, "IMPL")


def _gemm_epilogue_kernel(a, b, bias, activation: str, alpha: float, out_dtype=None, read_before_wait: str = ""):
    """``act(alpha * a @ b + bias)``; see :mod:`wsgemm.fused`."""
    with operator_calls():
        return fused.gemm_fused_eager(a, b, bias, activation or None, alpha, None, out_dtype, None, read_before_wait)


_epilogue_kernels.impl("gemm_epilogue", _gemm_epilogue_kernel, "CompositeExplicitAutograd")


@torch.library.register_fake(_EPILOGUE_OP)
def _(a, b, bias, activation: str, alpha: float, out_dtype=None, read_before_wait: str = ""):
    plans.check_read_before_wait(read_before_wait, None)
    shape, dtype, _, _ = plans.validate_shapes_and_dtypes(a, b, None, out_dtype, None)
    fused.check_epilogue_args(bias, activation or None, alpha, shape)
    return a.new_empty(shape, dtype=dtype)


gemm_epilogue_op = getattr(torch.ops, _NAMESPACE).gemm_epilogue.default


def _epilogue_setup_context(ctx, inputs, output):
    a, b, bias, activation, alpha = inputs[:5]
    ctx.save_for_backward(a, b, bias, output)
    ctx.activation, ctx.alpha = activation, alpha


def _epilogue_product(x, y, out_dtype, bias=None, alpha=1.0):
    if bias is None and alpha == 1.0:
        return gemm_op(x, y, out_dtype)
    return gemm_epilogue_op(x, y, bias, "", alpha, out_dtype)


def _epilogue_backward(ctx, grad):
    a, b, bias, out = ctx.saved_tensors
    grads = fused.fused_backward(grad, a, b, bias, out, ctx.activation, ctx.alpha, ctx.needs_input_grad[:3],
                                 _epilogue_product)
    return (*grads, None, None, None, None)


torch.library.register_autograd(_EPILOGUE_OP, _epilogue_backward, setup_context=_epilogue_setup_context,
                                lib=_epilogue_kernels)


def _setup_context(ctx, inputs, output):
    a, b = inputs[:2]
    ctx.save_for_backward(a, b)


def _operator_backward(grad, a, b, needs_a: bool, needs_b: bool):
    """(dA, dB) of the operator: products through the operator itself, which
    ``torch.compile`` traces."""
    return product_gradients(a, b, grad, needs_a, needs_b, gemm_op)


def _backward(ctx, grad):
    a, b = ctx.saved_tensors
    return (*_operator_backward(grad, a, b, ctx.needs_input_grad[0], ctx.needs_input_grad[1]), None, None)


def _register_kernels(module) -> str:
    """Register the operator's backend kernel (for every backend: ``gemm_eager``
    itself says which devices and dtypes it takes) and its autograd kernel. In C++
    where the fast path is built: a compiled graph's cached call then runs without
    entering Python (``_gemm_kernel`` plans the others), and autograd enters Python
    only in backward. Else ``_gemm_kernel`` and a Python formula. Returns which."""
    global _python_kernels
    if module is not None:
        module.register_operator(_NAMESPACE, _gemm_kernel, _run_cached_plan, _operator_backward)
        return "C++"
    # A library of their own, so that adopt_fast_path can drop them for C++ ones.
    _python_kernels = torch.library.Library(_NAMESPACE, "IMPL")
    _python_kernels.impl("gemm", _gemm_kernel, "CompositeExplicitAutograd")
    torch.library.register_autograd(_OP, _backward, setup_context=_setup_context, lib=_python_kernels)
    return "Python"


_python_kernels = None
# Never waits for a build: imported while the fast path builds, the operator's kernels
# are Python's until adopt_fast_path (at the first wsgemm.gemm call after it is built).
_fast_path_module = fast_path.load(wait=False)
KERNELS_REGISTERED_IN = _register_kernels(_fast_path_module)


def _eager_product(x, y, out_dtype):
    """A gradient's product, as ``wsgemm.gemm`` runs it: straight to the kernel in a
    plain backward pass, recorded for autograd again under create_graph=True (double
    backward)."""
    if (x.requires_grad or y.requires_grad) and torch.is_grad_enabled():
        return gemm_with_autograd(x, y, out_dtype)
    return plans.gemm_eager(x, y, None, out_dtype, None)


def _eager_forward(a, b, out_dtype):
    """The product of eager autograd, run with autograd off (by EagerGemm and by the
    fast path's node alike)."""
    return plans.gemm_eager(a, b, None, out_dtype, None)


def _eager_backward(grad, a, b, needs_a, needs_b):
    """(dA, dB) of eager autograd (EagerGemm's backward and the fast path's node's)."""
    return product_gradients(a, b, grad, needs_a, needs_b, _eager_product)


class EagerGemm(torch.autograd.Function):
    """``a @ b`` with autograd, outside ``torch.compile``: the operator's formula
    without its dispatch (see the module docstring)."""

    @staticmethod
    def forward(ctx, a, b, out_dtype):
        ctx.save_for_backward(a, b)
        return _eager_forward(a, b, out_dtype)

    @staticmethod
    def backward(ctx, grad):
        a, b = ctx.saved_tensors
        return (*_eager_backward(grad, a, b, ctx.needs_input_grad[0], ctx.needs_input_grad[1]), None)


# ``autograd.Function.apply`` is a Python classmethod that, before the C++ apply that
# records the graph node, checks for a setup_context, then walks its arguments
# generically to unwrap tensors left over from finished functorch transforms (~1.6 us
# of the ~4.7 us it adds per call on the development CPU). Outside functorch
# transforms (vmap, grad, ...) the eager path does the same for its two tensors and
# calls the C++ apply directly; under a transform it keeps the full path.
_record_eager_gemm = torch._C._FunctionBase.__dict__["apply"].__get__(None, EagerGemm)
_unwrap_if_dead = getattr(torch._C._functorch, "unwrap_if_dead", None)  # private: checked once


def _fast_path_recorder(module):
    if module is None:
        return None
    module.set_backward(_eager_backward)
    return module.record_product


_record_product = _fast_path_recorder(_fast_path_module)


def adopt_fast_path(module) -> None:
    """The fast path finished building after this module was imported: the operator's
    kernels and eager autograd's node become ``module``'s C++ ones from now on."""
    global _record_product, _python_kernels, KERNELS_REGISTERED_IN
    if _python_kernels is not None:
        _python_kernels._destroy()  # unregisters the Python kernels
        _python_kernels = None
        KERNELS_REGISTERED_IN = _register_kernels(module)
    if _record_product is None:
        _record_product = _fast_path_recorder(module)


def gemm_with_autograd(a, b, out_dtype):
    """``a @ b`` recorded for autograd, outside ``torch.compile`` (``a`` and ``b`` are
    tensors: ``wsgemm.gemm`` read their ``requires_grad``). The C++ node of the fast
    path where it is built (it returns None for functorch transforms and wrappers and
    for tensor subclasses), else EagerGemm. Cached calls without ``out_dtype`` do not
    come here: the fast path's ``call`` records them."""
    if _record_product is not None:
        out = _record_product(_eager_forward, a, b, out_dtype)
        if out is not None:
            return out
    if _unwrap_if_dead is None or torch._C._are_functorch_transforms_active():
        return EagerGemm.apply(a, b, out_dtype)
    return _record_eager_gemm(_unwrap_if_dead(a), _unwrap_if_dead(b), out_dtype)
