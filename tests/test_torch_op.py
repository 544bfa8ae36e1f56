"""wsgemm as a PyTorch operator, checked without a GPU: the fake implementation's
shapes, dtypes and strides, tracing by torch.compile without graph breaks, and the
nn.Linear drop-in's parameters."""

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

import wsgemm
import wsgemm.ops  # noqa: F401  (registers torch.ops.wsgemm.gemm)
from wsgemm import ShapeError, UnsupportedDtypeError


@pytest.mark.parametrize(
    "a_shape, b_shape, out_dtype, expected",
    [
        ((64, 32), (32, 48), None, ((64, 48), torch.bfloat16)),
        ((3, 64, 32), (3, 32, 48), torch.float32, ((3, 64, 48), torch.float32)),
        ((3, 64, 32), (32, 48), None, ((3, 64, 48), torch.bfloat16)),
        ((64, 32), (5, 32, 48), torch.float16, ((5, 64, 48), torch.float16)),
    ],
)
def test_fake_implementation_gives_shape_dtype_and_contiguous_strides(a_shape, b_shape, out_dtype, expected):
    with FakeTensorMode():
        a = torch.empty(a_shape, dtype=torch.bfloat16, device="cuda")
        b = torch.empty(b_shape, dtype=torch.bfloat16, device="cuda")
        d = torch.ops.wsgemm.gemm(a, b, out_dtype)
    shape, dtype = expected
    assert tuple(d.shape) == shape and d.dtype == dtype and d.is_contiguous()


def test_fake_implementation_rejects_what_the_kernel_rejects():
    with FakeTensorMode():
        a = torch.empty(64, 32, dtype=torch.bfloat16, device="cuda")
        with pytest.raises(ShapeError, match="K=32"):
            torch.ops.wsgemm.gemm(a, torch.empty(16, 8, dtype=torch.bfloat16, device="cuda"))
        with pytest.raises(UnsupportedDtypeError):
            torch.ops.wsgemm.gemm(a, torch.empty(32, 8, dtype=torch.float16, device="cuda"))


def test_torch_compile_traces_a_module_without_graph_breaks():
    class MLP(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.up = wsgemm.nn.Linear(32, 64, bias=True, dtype=torch.bfloat16, device="meta")
            self.down = wsgemm.nn.Linear(64, 32, bias=False, dtype=torch.bfloat16, device="meta")

        def forward(self, x):
            return self.down(torch.relu(self.up(x)))

    model = MLP()
    x = torch.empty(2, 8, 32, dtype=torch.bfloat16, device="meta")
    explanation = torch._dynamo.explain(model)(x)
    assert explanation.graph_break_count == 0 and explanation.graph_count == 1
    ops = [n.target for g in explanation.graphs for n in g.graph.nodes if n.op == "call_function"]
    assert any("wsgemm" in str(op) for op in ops)
    y = torch.compile(model, fullgraph=True, backend="eager")(x)  # meta tensors: the fake impl runs
    assert y.shape == (2, 8, 32) and y.dtype == torch.bfloat16


def test_out_and_config_are_eager_only():
    a = torch.empty(8, 8, dtype=torch.bfloat16, requires_grad=True)
    with pytest.raises(ValueError, match="out= is not supported when an input requires grad"):
        wsgemm.gemm(a, a, out=torch.empty(8, 8, dtype=torch.bfloat16))
    with pytest.raises(ValueError, match="config= is eager-only"):
        wsgemm.gemm(a, a, config=wsgemm.GemmConfig())


def test_the_operator_checks_read_before_wait_at_trace_time():
    with FakeTensorMode():
        x = torch.empty(64, 32, dtype=torch.bfloat16, device="cuda")
        w = torch.empty(48, 32, dtype=torch.bfloat16, device="cuda")
        assert torch.ops.wsgemm.gemm(x, w.t(), None, "b").shape == (64, 48)
        with pytest.raises(ValueError, match=r"read_before_wait='w' must be '', 'a' or 'b'"):
            torch.ops.wsgemm.gemm(x, w.t(), None, "w")


def test_torch_compile_carries_read_before_wait_to_the_kernel(monkeypatch):
    promised = []

    def gemm_eager(a, b, out=None, out_dtype=None, config=None, read_before_wait=""):
        promised.append(read_before_wait)
        return torch.matmul(a, b).to(out_dtype or a.dtype)

    monkeypatch.setattr(wsgemm.plans, "gemm_eager", gemm_eager)  # the operator's kernel
    x = torch.randn(6, 32).to(torch.bfloat16)
    w = torch.randn(48, 32).to(torch.bfloat16)

    def decode_step(x, w):
        return torch.relu(wsgemm.gemm(x, w.t(), read_before_wait="b"))

    with torch.no_grad():
        explanation = torch._dynamo.explain(decode_step)(x, w)
        y = torch.compile(decode_step, fullgraph=True, backend="eager")(x, w)
    assert explanation.graph_break_count == 0
    calls = [n for g in explanation.graphs for n in g.graph.nodes if "wsgemm" in str(n.target)]
    assert len(calls) == 1 and "b" in calls[0].args  # the operator, with the promise among its arguments
    assert promised and set(promised) == {"b"}
    torch.testing.assert_close(y, torch.relu(x @ w.t()))


def test_linear_is_a_drop_in_for_torch_linear():
    ref = torch.nn.Linear(32, 16, dtype=torch.bfloat16)
    layer = wsgemm.nn.Linear(32, 16, dtype=torch.bfloat16)
    layer.load_state_dict(ref.state_dict())
    assert isinstance(layer, torch.nn.Linear)
    assert torch.equal(layer.weight, ref.weight) and torch.equal(layer.bias, ref.bias)
    shared = wsgemm.nn.Linear.from_linear(ref)
    assert shared.weight is ref.weight and shared.bias is ref.bias
    assert set(shared.state_dict()) == {"weight", "bias"}


def test_linear_promises_its_weight_only_where_asked_and_no_autograd_records(monkeypatch):
    promised = []

    def gemm_by_weight(a, weight, read_before_wait=""):
        promised.append(read_before_wait)
        return torch.matmul(a, weight.t())

    def gemm(a, b, *, bias=None, activation=None, read_before_wait=""):  # a layer with a bias fuses it
        promised.append(read_before_wait)
        return torch.addmm(bias, a, b) if bias is not None else torch.matmul(a, b)

    monkeypatch.setattr(wsgemm.nn, "gemm_by_weight", gemm_by_weight)
    monkeypatch.setattr(wsgemm.nn, "gemm", gemm)
    ref = torch.nn.Linear(32, 16, dtype=torch.float64)
    x = torch.randn(3, 5, 32, dtype=torch.float64)
    plain = wsgemm.nn.Linear.from_linear(ref)
    promising = wsgemm.nn.Linear.from_linear(ref, read_weight_before_wait=True)
    assert not plain.read_weight_before_wait and promising.read_weight_before_wait
    with torch.no_grad():
        torch.testing.assert_close(plain(x), ref(x))
        torch.testing.assert_close(promising(x), ref(x))
    with torch.inference_mode():
        promising(x)
    promising(x)  # the weight requires grad: autograd records, so no promise
    frozen = wsgemm.nn.Linear(32, 16, dtype=torch.float64).requires_grad_(False)
    frozen.read_weight_before_wait = True
    frozen(x)  # nothing requires grad: nothing records
    frozen(x.requires_grad_())
    assert promised == ["", "b", "b", "", "b", ""]


def test_a_compiled_linear_carries_its_promise_into_the_traced_operator(traced_calls):
    layer = wsgemm.nn.Linear(32, 64, bias=False, dtype=torch.bfloat16, device="meta")
    layer.read_weight_before_wait = True
    x = torch.empty(8, 32, dtype=torch.bfloat16, device="meta")
    graph_breaks, calls = traced_calls(layer, x, "wsgemm")
    assert graph_breaks == 0
    assert len(calls) == 1 and "b" in calls[0].args


def _fake_kernel(monkeypatch):
    """Stand in for the GPU kernel on the CPU (the exact product, in the inputs'
    dtype), so the autograd plumbing runs without a GPU."""
    calls = []

    def gemm_eager(a, b, out=None, out_dtype=None, config=None, read_before_wait=""):
        calls.append((tuple(a.shape), tuple(b.shape)))
        return torch.matmul(a, b).to(out_dtype or a.dtype)

    monkeypatch.setattr(wsgemm.api, "gemm_eager", gemm_eager)  # eager calls
    monkeypatch.setattr(wsgemm.plans, "gemm_eager", gemm_eager)  # the operator's kernel
    return calls


@pytest.mark.parametrize(
    "a_shape, b_shape, b_transposed",
    [((24, 16), (16, 40), False), ((24, 16), (40, 16), True), ((3, 24, 16), (3, 16, 40), False),
     ((4, 24, 16), (16, 40), False), ((24, 16), (2, 16, 40), False)],
    ids=["plain", "weight-transposed", "batched", "broadcast-b", "broadcast-a"],
)
def test_eager_autograd_gives_torch_matmuls_gradients_without_the_dispatcher(monkeypatch, a_shape, b_shape,
                                                                             b_transposed):
    calls = _fake_kernel(monkeypatch)

    def dispatcher(*_):
        raise AssertionError("eager autograd must not go through torch.ops.wsgemm.gemm")

    monkeypatch.setattr(wsgemm.ops, "gemm_op", dispatcher)
    a = torch.randn(*a_shape, dtype=torch.float64).requires_grad_()
    b0 = torch.randn(*b_shape, dtype=torch.float64)
    b = (b0.t() if b_transposed else b0).detach().requires_grad_()
    grad = torch.randn(torch.matmul(a, b).shape, dtype=torch.float64)
    wsgemm.gemm(a, b).backward(grad)
    assert len(calls) == 3  # the product, then one product per gradient
    a_ref, b_ref = a.detach().clone().requires_grad_(), b.detach().clone().requires_grad_()
    torch.matmul(a_ref, b_ref).backward(grad)
    assert a.grad.shape == a.shape and b.grad.shape == b.shape
    torch.testing.assert_close(a.grad, a_ref.grad)
    torch.testing.assert_close(b.grad, b_ref.grad)


def test_eager_autograd_skips_gradients_nobody_needs_and_supports_double_backward(monkeypatch):
    calls = _fake_kernel(monkeypatch)
    a = torch.randn(8, 6, dtype=torch.float64).requires_grad_()
    w = torch.randn(6, 5, dtype=torch.float64)  # a constant: no dB product
    wsgemm.gemm(a, w).sum().backward()
    assert len(calls) == 2
    torch.testing.assert_close(a.grad, torch.ones(8, 5, dtype=torch.float64) @ w.t())
    # Second order: d/da of sum((dL/da)^2) with L = sum((a @ w)^2), through wsgemm both times.
    a.grad = None
    (grad_a,) = torch.autograd.grad(wsgemm.gemm(a, w).square().sum(), a, create_graph=True)
    grad_a.square().sum().backward()
    a_ref = a.detach().clone().requires_grad_()
    (g_ref,) = torch.autograd.grad((a_ref @ w).square().sum(), a_ref, create_graph=True)
    g_ref.square().sum().backward()
    torch.testing.assert_close(a.grad, a_ref.grad)


def test_the_operator_keeps_its_own_autograd(monkeypatch):
    """torch.compile traces torch.ops.wsgemm.gemm, whose registered formula must
    give the same gradients."""
    _fake_kernel(monkeypatch)
    a = torch.randn(4, 24, 16, dtype=torch.float64).requires_grad_()
    b = torch.randn(16, 40, dtype=torch.float64).requires_grad_()
    grad = torch.randn(4, 24, 40, dtype=torch.float64)
    torch.ops.wsgemm.gemm(a, b, None).backward(grad)
    a_ref, b_ref = a.detach().clone().requires_grad_(), b.detach().clone().requires_grad_()
    torch.matmul(a_ref, b_ref).backward(grad)
    torch.testing.assert_close(a.grad, a_ref.grad)
    torch.testing.assert_close(b.grad, b_ref.grad)


def test_without_the_fast_path_autograd_records_the_function_node_and_leaves_functorch_to_the_full_apply(
        monkeypatch):
    """Without the C++ fast path (no compiler), the eager path calls
    ``autograd.Function``'s C++ apply directly (``ops.gemm_with_autograd``); the node
    it records is EagerGemm's, and under a functorch transform the call takes
    ``Function.apply`` with its checks (EagerGemm has no ``setup_context``, which
    functorch requires: the same error as before the shortcut)."""
    _fake_kernel(monkeypatch)
    monkeypatch.setattr(wsgemm.ops, "_record_product", None)
    a = torch.randn(8, 6, dtype=torch.float64).requires_grad_()
    w = torch.randn(6, 5, dtype=torch.float64)
    assert type(wsgemm.gemm(a, w).grad_fn).__name__ == "EagerGemmBackward"
    with pytest.raises(RuntimeError, match="setup_context"):
        torch.func.grad(lambda x: wsgemm.gemm(x, w).sum())(a.detach())
