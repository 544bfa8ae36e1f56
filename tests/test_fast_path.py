"""The C++ host fast path (``wsgemm.fast_path``): its plan lookup must key exactly
what the Python cache keys, and its autograd node must behave as
``torch.autograd.Function`` did (gradients, double backward, autograd's own errors).
CPU only: products are computed by ``torch.matmul`` standing in for the kernel."""

import types

import pytest
import torch

import wsgemm
from wsgemm import api, cache_files, fast_path, ops, plans


@pytest.fixture(scope="module")
def module():
    built = fast_path.load()
    assert built is not None, "the fast path did not build (see the RuntimeWarning)"
    return built


@pytest.fixture
def fresh_plans(module):
    api.forget_plans()
    yield
    api.forget_plans()


def operand(*shape, dtype=torch.bfloat16):
    return torch.randn(*shape).to(dtype)


def stand_in(run, kernel=None, *, mode="direct", clusters=3, shape=(), dtype=None, workspace_source=None):
    """A plan for ``plans.make_plan`` to return: what ``_remember_plan`` reads of an
    ``plans.Plan``. With a kernel, C++ launches it (modes direct and swap)."""
    return types.SimpleNamespace(launches_from_cpp=kernel is not None, mode=mode, kernel=kernel, clusters=clusters,
                                 shape=shape, dtype=dtype, run=run, workspace_source=lambda: workspace_source)


def test_lookup_keys_shape_stride_dtype_alignment_and_grad_like_the_python_signature(module, fresh_plans):
    a, b = operand(64, 32), operand(48, 32).t()
    run = object()
    assert module.remember(a, b, run)
    assert module.find(a, b) is run
    assert module.find(a.clone(), b.t().clone().t()) is run  # other tensors, same signature
    wide = operand(64, 40)
    others = {
        "other shape": (operand(64, 32)[:63], b),
        "other strides": (a.t().contiguous().t(), b),
        "other dtype": (a.half(), b),
        "other alignment": (wide[:, 1:33], b),  # base address 2 bytes past a 16-byte boundary
        "b's strides": (a, b.contiguous()),
        "batched": (a.unsqueeze(0), b),
    }
    for why, (x, y) in others.items():
        assert plans.call_signature(x, y, None, None, None) != plans.call_signature(a, b, None, None, None), why
        assert module.find(x, y) is None, why


def test_the_promise_of_unwritten_weights_is_part_of_the_key(module, fresh_plans):
    """``read_before_wait`` changes the kernel (which operand loads before the wait),
    so a promised call and a plain one never share a plan; a value the Python path
    rejects is never cached."""
    a, b = operand(64, 32), operand(32, 48)
    assert module.remember(a, b, "promised b", read_before_wait="b")
    assert module.find(a, b, "b") == "promised b"
    assert module.find(a, b) is None and module.find(a, b, "a") is None
    assert module.remember(a, b, "plain")
    assert module.find(a, b, "") == "plain" and module.find(a, b, "b") == "promised b"
    for invalid in ("w", "ab", None, 2, b"b"):
        assert module.find(a, b, invalid) is None, invalid
        assert not module.remember(a, b, "run", read_before_wait=invalid), invalid
    assert module.plans_remembered() == 2


def test_calls_that_need_the_python_path_are_never_cached(module, fresh_plans):
    a, b = operand(64, 32), operand(32, 48)
    assert module.remember(a, b, "run")
    assert module.find(a.detach().requires_grad_(), b) == "run"  # call() records it for autograd
    parameter = torch.nn.Parameter(b.clone(), requires_grad=False)
    assert module.find(a, parameter) == "run"  # a Parameter is a plain tensor

    class Subclass(torch.Tensor):
        pass

    assert module.find(a.as_subclass(Subclass), b) is None  # may override __torch_function__
    assert not module.remember(operand(32), b, "run")  # 1-D: validation's business
    assert not module.remember(a, "not a tensor", "run")
    module.forget()
    assert module.find(a, b) is None and module.plans_remembered() == 0


def test_a_cached_call_skips_the_python_signature_and_runs_the_same_plan(module, fresh_plans, monkeypatch):
    plans_made = []

    # A CPU stand-in, run by Python: the product, via torch.
    def make_plan(a, b, out, out_dtype, config, read_before_wait=""):
        plans_made.append((tuple(a.shape), tuple(b.shape)))
        return stand_in(lambda a, b, out: torch.matmul(a, b))

    monkeypatch.setattr(plans, "make_plan", make_plan)
    a, b = operand(64, 32, dtype=torch.float32), operand(48, 32, dtype=torch.float32).t()
    torch.testing.assert_close(wsgemm.gemm(a, b), a @ b)
    monkeypatch.setattr(plans, "call_signature", lambda *args: pytest.fail("a cached call built the Python key"))
    monkeypatch.setattr(wsgemm.ops, "gemm_with_autograd", lambda *args: pytest.fail("a cached call left C++"))
    a2 = operand(64, 32, dtype=torch.float32)
    torch.testing.assert_close(wsgemm.gemm(a2, b), a2 @ b)
    a3 = a2.clone().requires_grad_()  # recorded for autograd by the same C++ call
    d = wsgemm.gemm(a3, b)
    assert d.grad_fn.name() == "WsgemmGemmBackward"
    assert plans_made == [((64, 32), (32, 48))]
    assert module.plans_remembered() == 1
    with torch.no_grad():
        assert wsgemm.gemm(a3, b).grad_fn is None


@pytest.fixture
def cpu_products(monkeypatch, fresh_plans):
    """Direct plans whose kernel is torch.matmul into the result, so that wsgemm.gemm
    runs on the CPU, cached calls launched from C++ as on the GPU."""
    products = []

    def make_plan(a, b, out, out_dtype, config, read_before_wait=""):
        dtype = out_dtype or a.dtype
        shape = torch.matmul(a[..., :1, :], b).shape[:-2] + (a.shape[-2], b.shape[-1])

        def kernel(x, y, result, clusters):
            assert clusters == 3 and result.dtype == dtype and result.shape == shape
            products.append((tuple(x.shape), tuple(y.shape)))
            result.copy_(torch.matmul(x, y))

        def run(x, y, out):  # what Plan.run does for a direct plan
            products.append("run")
            result = torch.empty(shape, dtype=dtype)
            kernel(x, y, result, 3)
            return result

        return stand_in(run, kernel, shape=shape, dtype=dtype)

    monkeypatch.setattr(plans, "make_plan", make_plan)
    return products


def test_a_cached_direct_plan_is_launched_from_cpp(module, cpu_products, monkeypatch):
    a, w = torch.randn(7, 5, dtype=torch.float64), torch.randn(6, 5, dtype=torch.float64)
    torch.testing.assert_close(wsgemm.gemm(a, w.t()), a @ w.t())
    assert cpu_products == ["run", ((7, 5), (5, 6))]  # planned, then run by Python
    cpu_products.clear()
    a2 = torch.randn(7, 5, dtype=torch.float64)
    torch.testing.assert_close(wsgemm.gemm(a2, w.t()), a2 @ w.t())
    assert cpu_products == [((7, 5), (5, 6))]  # the kernel, called from C++ with a result it allocated
    a3 = a2.clone().requires_grad_()
    d = wsgemm.gemm(a3, w.t())
    assert d.grad_fn.name() == "WsgemmGemmBackward" and d.dtype == torch.float64

    def failing_kernel(*args):
        raise ValueError("the launch failed")

    plan = next(iter(plans._plans.values()))
    module.remember(a, w.t(), plan.run, failing_kernel, 3, list(plan.shape), plan.dtype)
    with pytest.raises(ValueError, match="the launch failed"):
        wsgemm.gemm(a, w.t())


def test_a_cached_swapped_plan_is_launched_from_cpp_with_transposed_views(module, fresh_plans, monkeypatch):
    """Decode plans swap the operands: the kernel computes D^T = B^T A^T from views
    the C++ launch makes (b^T, a^T and the result's transpose), as Plan.run does."""
    launched = []

    def make_plan(a, b, out, out_dtype, config, read_before_wait=""):
        shape = (a.shape[0], b.shape[1])

        def kernel(bt, at, dt, clusters):
            launched.append((tuple(bt.shape), tuple(at.shape), tuple(dt.shape), dt.stride(), clusters))
            dt.copy_(bt @ at)

        def run(x, y, out):
            launched.append("run")
            result = torch.empty(shape, dtype=x.dtype)
            kernel(y.t(), x.t(), result.t(), 2)
            return result

        return stand_in(run, kernel, mode="swap", clusters=2, shape=shape, dtype=a.dtype)

    monkeypatch.setattr(plans, "make_plan", make_plan)
    a, w = torch.randn(3, 5, dtype=torch.float64), torch.randn(8, 5, dtype=torch.float64)
    for _ in range(2):
        a.copy_(torch.randn(3, 5, dtype=torch.float64))
        torch.testing.assert_close(wsgemm.gemm(a, w.t()), a @ w.t())
    # Planned in Python, then launched from C++ into a (3, 8) result seen as its (8, 3) transpose.
    assert launched == ["run", ((8, 5), (5, 3), (8, 3), (1, 8), 2), ((8, 5), (5, 3), (8, 3), (1, 8), 2)]
    d = wsgemm.gemm(a.clone().requires_grad_(), w.t())
    assert d.grad_fn.name() == "WsgemmGemmBackward" and d.is_contiguous()


def test_a_cached_split_plan_asks_its_workspace_source_as_an_eager_call_or_the_operators(
        module, fresh_plans, monkeypatch):
    """A split-K decode plan (swapped, with a workspace) is launched from C++ too: one
    Python call fetches the stream's workspace, ``through_operator`` saying whose call
    it is (captured, the operator's gets its own, ``wsgemm.workspace``)."""
    asked, launched = [], []
    flags, partials = torch.zeros(4, dtype=torch.int32), torch.empty(64)

    def workspace_source(through_operator):
        asked.append(through_operator)
        return flags, partials

    def make_plan(a, b, out, out_dtype, config, read_before_wait=""):
        shape = (a.shape[0], b.shape[1])

        def kernel(bt, at, dt, got_flags, got_partials, clusters):
            assert got_flags is flags and got_partials is partials and clusters == 2
            launched.append(tuple(dt.shape))
            dt.copy_(bt @ at)

        def run(x, y, out):
            launched.append("run")
            result = torch.empty(shape, dtype=x.dtype)
            kernel(y.t(), x.t(), result.t(), *workspace_source(False), 2)
            return result

        return stand_in(run, kernel, mode="swap", clusters=2, shape=shape, dtype=a.dtype,
                        workspace_source=workspace_source)

    monkeypatch.setattr(plans, "make_plan", make_plan)
    a, w = torch.randn(3, 5, dtype=torch.float64), torch.randn(8, 5, dtype=torch.float64)
    torch.testing.assert_close(wsgemm.gemm(a, w.t()), a @ w.t())
    torch.testing.assert_close(wsgemm.gemm(a, w.t()), a @ w.t())
    torch.testing.assert_close(ops.gemm_op(a, w.t(), None, ""), a @ w.t())
    # Planned and run by Python (its kernel call included), then launched from C++ twice.
    assert launched == ["run", (8, 3), (8, 3), (8, 3)] and asked == [False, False, True]

    def bad_source(through_operator):
        return flags

    module.remember(a, w.t(), plans._plans[next(iter(plans._plans))].run, lambda *args: None, 2, [3, 8], a.dtype,
                    "", True, bad_source)
    with pytest.raises(RuntimeError, match="returns \\(flags, partials\\)"):
        wsgemm.gemm(a, w.t())


def test_direct_and_swapped_plans_launch_from_cpp_with_their_workspace_source():
    def plan(mode, workspace):
        return plans.Plan(mode, (1, 8), torch.bfloat16, torch.device("cpu"), workspace=workspace)

    assert plan("swap", (0, 0)).launches_from_cpp and plan("direct", (52, 53248)).launches_from_cpp
    assert not plan("copy", (0, 0)).launches_from_cpp and not plan("fold", (0, 0)).launches_from_cpp
    assert plan("swap", (0, 0)).workspace_source() is None
    source = plan("swap", (52, 53248)).workspace_source()
    assert source.func is plans.split_k_workspace and source.args == (torch.device("cpu"), 52, 53248)


def test_a_promised_call_is_launched_from_cpp_and_refused_where_autograd_records(module, cpu_products,
                                                                                 monkeypatch):
    """``gemm(x, w.t(), read_before_wait="b")`` is planned once in Python and then
    found and launched in C++, apart from the plain call's plan; with autograd
    recording, the C++ call hands it back to Python, which refuses the promise."""
    promises = []
    make_plan = plans.make_plan
    monkeypatch.setattr(plans, "make_plan", lambda *args: promises.append(args[5]) or make_plan(*args))
    a, w = torch.randn(7, 5, dtype=torch.float64), torch.randn(6, 5, dtype=torch.float64)
    for _ in range(2):
        torch.testing.assert_close(wsgemm.gemm(a, w.t(), read_before_wait="b"), a @ w.t())
    assert promises == ["b"] and cpu_products == ["run", ((7, 5), (5, 6)), ((7, 5), (5, 6))]
    wsgemm.gemm(a, w.t())
    assert promises == ["b", ""] and module.plans_remembered() == 2
    with pytest.raises(ValueError, match="read_before_wait= is for inference: an input requires grad"):
        wsgemm.gemm(a.clone().requires_grad_(), w.t(), read_before_wait="b")


def test_the_cpp_node_gives_gradients_and_second_order_gradients(module, cpu_products):
    a = torch.randn(7, 5, dtype=torch.float64, requires_grad=True)
    b = torch.randn(6, 5, dtype=torch.float64).t().detach().requires_grad_()
    d = wsgemm.gemm(a, b)
    assert d.grad_fn.name() == "WsgemmGemmBackward"
    assert torch.autograd.gradcheck(wsgemm.gemm, (a, b))
    assert torch.autograd.gradgradcheck(wsgemm.gemm, (a, b))


def test_the_cpp_node_computes_only_the_gradients_asked_for(module, cpu_products):
    a = torch.randn(7, 5, dtype=torch.float64, requires_grad=True)
    w = torch.randn(5, 6, dtype=torch.float64)  # a constant
    wsgemm.gemm(a, w).sum().backward()
    assert len([p for p in cpu_products if p != "run"]) == 2  # the product and dA: no dB
    torch.testing.assert_close(a.grad, torch.ones(7, 6, dtype=torch.float64) @ w.t())
    b = w.clone().requires_grad_()
    cpu_products.clear()
    (grad_b,) = torch.autograd.grad(wsgemm.gemm(a, b).sum(), b)  # a requires grad, but only dB is asked for
    assert len([p for p in cpu_products if p != "run"]) == 2
    torch.testing.assert_close(grad_b, a.detach().t() @ torch.ones(7, 6, dtype=torch.float64))


def test_the_cpp_node_raises_autograds_errors(module, cpu_products):
    a = torch.randn(7, 5, dtype=torch.float64, requires_grad=True)
    b = torch.randn(5, 6, dtype=torch.float64)
    d = wsgemm.gemm(a, b)
    d.sum().backward()
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        d.sum().backward()
    d = wsgemm.gemm(a, b)
    b.add_(1.0)  # the saved operand changes before backward
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        d.sum().backward()


def test_an_error_in_backward_keeps_its_type(module, cpu_products, monkeypatch):
    def failing(grad, a, b, needs_a, needs_b):
        raise ValueError("no gradient today")

    module.set_backward(failing)
    try:
        d = wsgemm.gemm(torch.randn(4, 3, dtype=torch.float64, requires_grad=True),
                        torch.randn(3, 2, dtype=torch.float64))
        with pytest.raises(ValueError, match="no gradient today"):
            d.sum().backward()
    finally:
        module.set_backward(ops._eager_backward)


def test_functorch_and_subclasses_keep_the_python_function(module, cpu_products):
    a = torch.randn(8, 6, dtype=torch.float64)
    w = torch.randn(6, 5, dtype=torch.float64)
    # EagerGemm has no setup_context, which functorch requires: its error, as before.
    with pytest.raises(RuntimeError, match="setup_context"):
        torch.func.grad(lambda x: wsgemm.gemm(x, w).sum())(a)

    class Subclass(torch.Tensor):
        pass

    sub = a.clone().as_subclass(Subclass).requires_grad_()
    assert type(wsgemm.gemm(sub, w).grad_fn).__name__ == "EagerGemmBackward"


def test_without_fast_path_runs_the_python_path_inside_and_restores_it_after(module, cpu_products):
    """``api.without_fast_path`` (benchmarks/bench_overhead.py times both paths in one
    process): inside, a call records autograd's Python node and is planned in Python
    every time; after, the C++ node again."""
    a = torch.randn(7, 5, dtype=torch.float64, requires_grad=True)
    b = torch.randn(6, 5, dtype=torch.float64).t()
    with api.without_fast_path():
        inside = wsgemm.gemm(a, b)
        assert inside.grad_fn.name() == "EagerGemmBackward"
        torch.testing.assert_close(inside, a @ b)
    assert wsgemm.gemm(a, b).grad_fn.name() == "WsgemmGemmBackward"
    with torch.no_grad():
        wsgemm.gemm(a, b)  # plans the call; the next one is found in C++
        cached = len(cpu_products)
        with api.without_fast_path():
            wsgemm.gemm(a, b)
        assert cpu_products[cached:][0] == "run"  # Plan.run from Python, not the C++ launch


def test_linear_layers_transpose_their_weight_in_cpp_on_cached_calls(module, cpu_products, monkeypatch):
    """``wsgemm.nn.Linear`` without a bias hands its (out, in) weight to
    ``api.gemm_by_weight``: the first call is planned through ``gemm(x, weight.t())``,
    later ones are found and launched by ``call_transposed`` without entering ``gemm``;
    1-D and 3-D inputs are flattened to the cached 2-D call and their results shaped
    back. (A layer with a bias fuses it: ``wsgemm.fused``'s route.)"""
    layer = wsgemm.nn.Linear(5, 6, bias=False, dtype=torch.float64)
    x = torch.randn(7, 5, dtype=torch.float64)
    with torch.no_grad():
        torch.testing.assert_close(layer(x), torch.nn.functional.linear(x, layer.weight, layer.bias))
        assert cpu_products == ["run", ((7, 5), (5, 6))]
        cpu_products.clear()

        def no_python_gemm(*args, **kwargs):
            raise AssertionError("a cached layer call entered wsgemm.gemm")

        with monkeypatch.context() as patch:
            patch.setattr(api, "gemm", no_python_gemm)
            for shape in ((7, 5), (1, 7, 5)):
                x = torch.randn(shape, dtype=torch.float64)
                torch.testing.assert_close(layer(x), torch.nn.functional.linear(x, layer.weight, layer.bias))
        assert cpu_products == [((7, 5), (5, 6))] * 2  # launched from C++
        x = torch.randn(5, dtype=torch.float64)  # one token: another (1, 5) call, planned first
        y = layer(x)
        assert y.shape == (6,)
        torch.testing.assert_close(y, torch.nn.functional.linear(x, layer.weight, layer.bias))


def test_linear_layers_through_call_transposed_record_gradients_for_the_weight(module, cpu_products):
    layer = wsgemm.nn.Linear(5, 6, bias=False, dtype=torch.float64)
    ref = torch.nn.Linear(5, 6, bias=False, dtype=torch.float64)
    ref.load_state_dict(layer.state_dict())
    with torch.no_grad():
        layer(torch.randn(7, 5, dtype=torch.float64))  # planned: the next calls are cached
    x = torch.randn(7, 5, dtype=torch.float64, requires_grad=True)
    x_ref = x.detach().clone().requires_grad_()
    y = layer(x)
    assert y.grad_fn.name() == "WsgemmGemmBackward"
    grad = torch.randn(7, 6, dtype=torch.float64)
    y.backward(grad)
    ref(x_ref).backward(grad)
    torch.testing.assert_close(x.grad, x_ref.grad)
    torch.testing.assert_close(layer.weight.grad, ref.weight.grad)


def test_call_transposed_leaves_other_weights_to_python(module, cpu_products):
    """A weight subclass may define its own ``t()``, and only 2-D weights transpose as
    a Linear's does: both are left to ``gemm(x, weight.t())`` (None here)."""
    x, w = torch.randn(7, 5, dtype=torch.float64), torch.randn(6, 5, dtype=torch.float64)
    with torch.no_grad():
        wsgemm.gemm(x, w.t())  # planned: call_transposed(x, w) is now a cached call
        assert module.call_transposed(x, w) is not None

        class Subclass(torch.Tensor):
            pass

        assert module.call_transposed(x, w.clone().as_subclass(Subclass)) is None
        assert module.call_transposed(x, w.unsqueeze(0)) is None
        assert module.call_transposed(x, w[0]) is None
        with api.without_fast_path():
            cached = len(cpu_products)
            torch.testing.assert_close(api.gemm_by_weight(x, w), x @ w.t())
            assert cpu_products[cached] == "run"  # planned in Python, not found in C++


def test_the_operator_runs_cached_plans_from_cpp_and_records_its_own_node(module, cpu_products):
    """torch.ops.wsgemm.gemm (what compiled graphs call): its kernels are the fast
    path's. A call the cache does not serve is planned in Python; the next one is
    launched from C++. Where autograd records, one C++ node whose gradients are
    products through the operator; under no_grad none."""
    assert ops.KERNELS_REGISTERED_IN == "C++"
    a, w = torch.randn(7, 5, dtype=torch.float64), torch.randn(6, 5, dtype=torch.float64)
    torch.testing.assert_close(ops.gemm_op(a, w.t(), None, ""), a @ w.t())
    assert cpu_products == ["run", ((7, 5), (5, 6))]  # planned, then run by Python
    cpu_products.clear()
    a2 = torch.randn(7, 5, dtype=torch.float64)
    with torch.no_grad():
        d = ops.gemm_op(a2.requires_grad_(), w.t(), None, "")
    torch.testing.assert_close(d, a2.detach() @ w.t())
    assert cpu_products == [((7, 5), (5, 6))] and d.grad_fn is None  # the kernel, called from C++
    cpu_products.clear()
    d = ops.gemm_op(a2, w.t(), None, "")
    assert d.grad_fn.name() == "WsgemmGemmBackward" and cpu_products == [((7, 5), (5, 6))]
    grad = torch.randn(7, 6, dtype=torch.float64)
    d.backward(grad)
    torch.testing.assert_close(a2.grad, grad @ w)
    assert cpu_products[1] == "run"  # dA = grad @ w, planned through the operator's Python kernel
    assert torch.autograd.gradcheck(lambda x, y: ops.gemm_op(x, y, None, ""),
                                    (a2.detach().requires_grad_(), w.t().detach().requires_grad_()))
    # The C++ autograd kernel also serves functorch's grad transform.
    torch.testing.assert_close(torch.func.grad(lambda x: ops.gemm_op(x, w.t(), None, "").sum())(a),
                               torch.ones(7, 6, dtype=torch.float64) @ w)
    # out_dtype= is never cached: planned in Python every time.
    cpu_products.clear()
    for _ in range(2):
        assert ops.gemm_op(a, w.t(), torch.float32, "").dtype == torch.float32
    assert cpu_products.count("run") == 2


def test_the_operator_runs_other_cached_plans_as_its_own_calls(module, fresh_plans, monkeypatch):
    """A cached plan neither direct nor swapped (copied or reshaped operands, perhaps a
    split-K workspace) runs its Python ``run`` from the operator's C++ kernel inside
    ``workspace.operator_calls``: captured into CUDA-graph trees, its workspace must be
    its own (workspace.py)."""
    from wsgemm import workspace

    runs = []

    def make_plan(a, b, out, out_dtype, config, read_before_wait=""):
        def run(x, y, out):
            runs.append(getattr(workspace._operator, "active", False))
            return torch.matmul(x, y)

        return stand_in(run, mode="copy")

    monkeypatch.setattr(plans, "make_plan", make_plan)
    a, w = torch.randn(3, 5, dtype=torch.float64), torch.randn(4, 5, dtype=torch.float64)
    for _ in range(2):
        torch.testing.assert_close(ops.gemm_op(a, w.t(), None, ""), a @ w.t())
    assert module.plans_remembered() == 1 and runs == [True, True]  # planned, then found in C++
    runs.clear()
    wsgemm.gemm(a, w.t())
    assert runs == [False]  # the eager call


def test_the_operators_errors_keep_their_type_through_the_dispatcher(module, fresh_plans):
    cpu = torch.randn(4, 4).to(torch.bfloat16)
    with pytest.raises(wsgemm.DeviceError, match="a is on cpu; wsgemm runs on CUDA tensors"):
        ops.gemm_op(cpu, cpu, None, "")
    with pytest.raises(wsgemm.UnsupportedDtypeError, match="a has dtype torch.float32"):
        ops.gemm_op(cpu.float(), cpu, None, "")
    with pytest.raises(ValueError, match="read_before_wait='c' must be '', 'a' or 'b'"):
        ops.gemm_op(cpu, cpu, None, "c")


def test_without_the_fast_path_the_operators_kernels_are_pythons():
    """WSGEMM_FAST_PATH=0 (or no compiler): the operator's backend kernel and its
    autograd formula are registered in Python, with the same gradients."""
    import os
    import subprocess
    import sys

    code = (
        "import torch, wsgemm\n"
        "from wsgemm import ops, plans\n"
        "plans.gemm_eager = lambda a, b, out=None, out_dtype=None, config=None, read_before_wait='': a @ b\n"
        "a = torch.randn(5, 4, dtype=torch.float64, requires_grad=True)\n"
        "w = torch.randn(4, 3, dtype=torch.float64, requires_grad=True)\n"
        "d = ops.gemm_op(a, w, None, '')\n"
        "grad = torch.randn(5, 3, dtype=torch.float64)\n"
        "d.backward(grad)\n"
        "torch.testing.assert_close(a.grad, grad @ w.detach().t())\n"
        "torch.testing.assert_close(w.grad, a.detach().t() @ grad)\n"
        "print(ops.KERNELS_REGISTERED_IN, 'Wsgemm' in d.grad_fn.name())\n")
    env = dict(os.environ, WSGEMM_FAST_PATH="0")
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300,
                            check=False)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split() == ["Python", "False"]


def test_disabled_by_the_environment(monkeypatch):
    monkeypatch.setenv("WSGEMM_FAST_PATH", "0")
    assert not fast_path.enabled_by_environment()
    monkeypatch.setenv("WSGEMM_FAST_PATH", "1")
    assert fast_path.enabled_by_environment()


def test_a_failed_build_warns_with_the_compilers_error(monkeypatch):
    def failing_build():
        raise RuntimeError("Error building extension:\nfast_path.cpp:3:1: error: 'x' was not declared\n"
                           "ninja: build stopped: subcommand failed.")

    monkeypatch.setattr(fast_path, "_build", failing_build)
    monkeypatch.setattr(fast_path, "_import_published", lambda: None)  # as in a fresh cache directory
    monkeypatch.setattr(fast_path, "_state", {})
    with pytest.warns(RuntimeWarning, match="fast_path.cpp:3:1: error: 'x' was not declared"):
        assert fast_path.load() is None


def test_a_second_process_imports_the_build_without_rebuilding(module, tmp_path):
    """The build directory is keyed by source, PyTorch and Python; a process that finds
    the library there imports it (no ninja run, no build message)."""
    import os
    import subprocess
    import sys

    code = ("import time, wsgemm.fast_path as f; t = time.perf_counter(); m = f.load(); "
            "d = f.build_directory(); print(m is not None, m.__file__ == str(d / (f.extension_name(d) + '.so')), "
            "round(time.perf_counter() - t, 3))")
    result = subprocess.run([sys.executable, "-c", code], env=dict(os.environ), capture_output=True, text=True,
                            timeout=300, check=False)
    assert result.returncode == 0, result.stderr[-2000:]
    loaded, same_file, _seconds = result.stdout.split()
    assert loaded == "True" and same_file == "True"
    assert "building" not in result.stderr


def test_a_second_wsgemm_package_in_the_process_keeps_its_own_plan_cache(module, tmp_path):
    """The plan cache is a global of the loaded library. benchmarks/maint/baseline.py's
    ``wsgemm_base`` beside ``wsgemm`` in one process must load its own, or its cached
    calls run the plans ``wsgemm`` remembered for the same operands (an A/B of two
    default paths then times one of them twice: docs/tuning-log/dependent-launch.md).
    A copy of the package under another name stands in for the exported one."""
    import os
    import shutil
    import subprocess
    import sys

    shutil.copytree(os.path.dirname(wsgemm.__file__), tmp_path / "wsgemm_twin",
                    ignore=shutil.ignore_patterns("__pycache__"))
    code = ("import torch, wsgemm, wsgemm_twin; "
            "own, twin = wsgemm.fast_path.load(), wsgemm_twin.fast_path.load(); "
            "a, b = torch.randn(4, 8), torch.randn(8, 16); "
            "own.remember(a, b, lambda x, y, out=None: x @ y); "
            "print(own is twin, twin.find(a, b) is None, own.find(a, b) is not None)")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), *sys.path]))
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600,
                            check=False)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split() == ["False", "True", "True"]


# --------------------------------------------------------------------------------------
# First use and a damaged cache: the library is built out of the way and never loaded
# unchecked
# --------------------------------------------------------------------------------------

def cache_holding_this_build(module, cache_dir):
    """A copy of this process's fast path build (library and record) in ``cache_dir``,
    where a process with ``WSGEMM_CACHE_DIR=cache_dir`` looks for it; its path."""
    import shutil
    from pathlib import Path

    library = Path(module.__file__)
    target = cache_dir / "fast_path" / library.parent.name
    target.mkdir(parents=True)
    for path in (library, cache_files.record_path(library)):
        shutil.copy2(path, target / path.name)
    return target / library.name


def run_in_new_process(code: str, cache_dir, timeout: float = 600):
    import os
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-c", code], env=dict(os.environ, WSGEMM_CACHE_DIR=str(cache_dir)),
                          capture_output=True, text=True, timeout=timeout, check=False)


LOAD_WITHOUT_A_COMPILER = """
import warnings
from wsgemm import fast_path

def no_compiler():
    raise RuntimeError("error: no C++ compiler here")

fast_path._build = no_compiler
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    module = fast_path.load()
print(module is None)
for w in caught:
    print(w.category.__name__, w.message)
"""


def test_a_truncated_library_is_never_loaded(module, tmp_path):
    """The library truncated to a third, then loaded by a new process: without the
    check, ``dlopen`` dies of a bus error (exit status 135). With it, the process warns
    naming the file, sets it aside, and (here without a compiler) runs in Python."""
    library = cache_holding_this_build(module, tmp_path)
    library.write_bytes(library.read_bytes()[: library.stat().st_size // 3])
    result = run_in_new_process(LOAD_WITHOUT_A_COMPILER, tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.splitlines()
    assert lines[0] == "True"
    assert lines[1].startswith(f"CacheWarning wsgemm: the cache file {library} cannot be used (it is ")
    assert lines[2] == ("RuntimeWarning wsgemm: could not build the C++ host fast path (RuntimeError: error: no C++ "
                        "compiler here); cached calls run the same steps in Python, a few microseconds slower each. "
                        "Install a C++ compiler and ninja, or set WSGEMM_FAST_PATH=0 to skip the attempt.")
    assert len(lines) == 3 and not library.exists()
    assert len(list(library.parent.glob(library.name + ".damaged-*"))) == 2  # the library and its record


def test_an_intact_copy_loads_in_a_new_process_without_building(module, tmp_path):
    cache_holding_this_build(module, tmp_path)
    result = run_in_new_process(LOAD_WITHOUT_A_COMPILER, tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.splitlines() == ["False"] and "building" not in result.stderr


def test_processes_sharing_a_damaged_cache_set_it_aside_once_and_build_once(module, tmp_path):
    """The issue's reproduction with three processes at once: each loads the fast path
    from a cache whose library was truncated. One sets it aside (one warning, naming
    it), one builds it, the others wait for that build; all load the published library."""
    import os
    import subprocess
    import sys

    library = cache_holding_this_build(module, tmp_path)
    library.write_bytes(library.read_bytes()[: library.stat().st_size // 3])
    code = "import wsgemm.fast_path as f; m = f.load(); print(m is not None, m.__file__)"
    env = dict(os.environ, WSGEMM_CACHE_DIR=str(tmp_path))
    workers = [subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True) for _ in range(3)]
    results = [w.communicate(timeout=900) for w in workers]
    stderr = "".join(err for _, err in results)
    assert [w.returncode for w in workers] == [0, 0, 0], stderr[-3000:]
    assert [out.split() for out, _ in results] == [["True", str(library)]] * 3
    assert stderr.count(f"CacheWarning: wsgemm: the cache file {library} cannot be used") == 1
    assert stderr.count("wsgemm: built the C++ host fast path in") == 1, stderr
    assert cache_files.verified(library)


def test_the_first_call_runs_in_python_while_the_fast_path_builds(module, cpu_products, monkeypatch):
    """No build in the cache: the first call starts one in the background and runs in
    Python; once the build is done, the next call binds the C++ entry and launches from
    C++ (plans made meanwhile are planned again, to be remembered there)."""
    import threading

    gate = threading.Event()

    def slow_build():
        assert gate.wait(timeout=60)
        return Path(module.__file__), True

    from pathlib import Path

    monkeypatch.setattr(fast_path, "_state", {})
    monkeypatch.setattr(fast_path, "_import_published", lambda: None)
    monkeypatch.setattr(fast_path, "_build", slow_build)
    monkeypatch.setattr(fast_path, "_import_verified", lambda path: module)
    monkeypatch.setattr(api, "_call_cached", api._call_cached_first)
    monkeypatch.setattr(api, "_call_cached_transposed", api._call_cached_transposed_first)
    a, w = torch.randn(7, 5, dtype=torch.float64), torch.randn(6, 5, dtype=torch.float64)
    for _ in range(2):
        torch.testing.assert_close(wsgemm.gemm(a, w.t()), a @ w.t())
    assert cpu_products == ["run", ((7, 5), (5, 6))] * 2  # planned once, both run by Python
    assert not fast_path.decided() and fast_path.loaded() is None and api._call_cached is api._call_cached_first
    gate.set()
    fast_path._state["build"].join(timeout=60)
    cpu_products.clear()
    for _ in range(2):
        torch.testing.assert_close(wsgemm.gemm(a, w.t()), a @ w.t())
    assert api._call_cached == module.call
    assert cpu_products == ["run", ((7, 5), (5, 6)), ((7, 5), (5, 6))]  # planned again, then launched from C++


def test_a_build_process_that_dies_is_a_warning_not_a_crash(monkeypatch):
    import subprocess

    def died(args, **kwargs):
        return subprocess.CompletedProcess(args, -7, stdout="", stderr="")

    monkeypatch.setattr(fast_path, "_state", {})
    monkeypatch.setattr(fast_path, "_import_published", lambda: None)
    monkeypatch.setattr(fast_path.subprocess, "run", died)
    with pytest.warns(RuntimeWarning, match=r"could not build the C\+\+ host fast path \(RuntimeError: the build "
                                            r"process died of signal 7\)"):
        assert fast_path.load() is None


def test_python_m_wsgemm_build_names_the_library_it_built(module, monkeypatch, capsys):
    from wsgemm.cli import main

    monkeypatch.setattr(fast_path, "load", lambda: module)
    assert main(["build"]) == 0
    assert capsys.readouterr().out.startswith(f"fast path: {module.__file__} (")
    monkeypatch.setenv("WSGEMM_FAST_PATH", "0")
    assert main(["build"]) == 1
    assert "WSGEMM_FAST_PATH is off" in capsys.readouterr().err
