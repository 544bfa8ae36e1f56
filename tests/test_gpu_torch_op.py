"""wsgemm as a PyTorch op on a Hopper GPU: autograd against torch.matmul's gradients,
torch.compile of a module, CUDA graphs through nn.Linear, and an MLP drop-in."""

import pytest
import torch

import wsgemm

pytestmark = pytest.mark.gpu


@pytest.fixture(autouse=True)
def exact_fp32_reference():
    old = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32 = old


def rel(x, ref):
    return ((x.float() - ref.float()).norm() / ref.float().norm()).item()


def leaf(*shape, dtype=torch.bfloat16):
    return torch.randn(*shape, device="cuda").to(dtype).requires_grad_()


@pytest.mark.parametrize(
    "make",
    [
        lambda: (leaf(256, 192), leaf(192, 320)),
        lambda: (leaf(256, 192), leaf(320, 192).detach().t().requires_grad_()),  # B = W^T
        lambda: (leaf(3, 100, 64), leaf(3, 64, 96)),
        lambda: (leaf(4, 100, 64), leaf(64, 96)),  # 2-D B broadcast over the batch
        lambda: (leaf(100, 64), leaf(2, 64, 96)),  # 2-D A broadcast
    ],
    ids=["plain", "weight-transposed", "batched", "broadcast-b", "broadcast-a"],
)
def test_gradients_match_torch_matmul(make):
    a, b = make()
    grad = torch.randn(torch.matmul(a, b).shape, device="cuda").to(torch.bfloat16)
    # The C++ node of the fast path where it could be built (else a warning said why).
    # Waited for first: in a fresh cache the first calls run in Python while it builds.
    fast = wsgemm.fast_path.load() is not None
    d = wsgemm.gemm(a, b)
    assert d.grad_fn.name() == ("WsgemmGemmBackward" if fast else "EagerGemmBackward")
    d.backward(grad)
    ga, gb = a.grad.clone(), b.grad.clone()
    a32, b32 = a.detach().float().requires_grad_(), b.detach().float().requires_grad_()
    torch.matmul(a32, b32).backward(grad.float())
    assert ga.dtype == a.dtype and gb.dtype == b.dtype and ga.shape == a.shape and gb.shape == b.shape
    assert rel(ga, a32.grad) < 1e-2 and rel(gb, b32.grad) < 1e-2


def make_mlp(cls, dtype=torch.bfloat16):
    torch.manual_seed(0)
    return torch.nn.Sequential(
        cls(256, 512, dtype=dtype, device="cuda"), torch.nn.GELU(), cls(512, 256, bias=False, dtype=dtype, device="cuda")
    )


def test_mlp_forward_and_backward_match_torch_linear():
    ref = make_mlp(torch.nn.Linear)
    ours = make_mlp(wsgemm.nn.Linear)
    ours.load_state_dict(ref.state_dict())
    x = torch.randn(4, 64, 256, device="cuda").to(torch.bfloat16)
    y_ref, y = ref(x), ours(x)
    assert rel(y, y_ref) < 2e-2
    y_ref.float().square().mean().backward()
    y.float().square().mean().backward()
    for (name, p_ref), p in zip(ref.named_parameters(), ours.parameters()):
        assert rel(p.grad, p_ref.grad) < 3e-2, name


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_torch_compile_runs_the_op(backend):
    model = make_mlp(wsgemm.nn.Linear)
    ref = make_mlp(torch.nn.Linear)
    ref.load_state_dict(model.state_dict())
    compiled = torch.compile(model, fullgraph=True, backend=backend)
    x = torch.randn(128, 256, device="cuda").to(torch.bfloat16)
    assert rel(compiled(x), ref(x)) < 2e-2
    x2 = torch.randn(128, 256, device="cuda").to(torch.bfloat16)
    assert rel(compiled(x2), ref(x2)) < 2e-2


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_torch_compile_carries_the_weights_read_before_the_wait(backend):
    """Decode-sized steps (dependent launches) whose weights load before the wait,
    compiled: each step reads the one before's output, never a stale one."""
    weights = [(torch.randn(1024, 1024, device="cuda") / 32).to(torch.bfloat16) for _ in range(3)]

    def decode_steps(x):
        for w in weights:
            x = torch.relu(wsgemm.gemm(x, w.t(), read_before_wait="b"))
        return x

    def reference(x):
        x = x.float()
        for w in weights:
            x = torch.relu(x @ w.float().t()).to(torch.bfloat16).float()
        return x

    compiled = torch.compile(decode_steps, fullgraph=True, backend=backend)
    with torch.inference_mode():
        for _ in range(3):
            x = torch.randn(16, 1024, device="cuda").to(torch.bfloat16)
            assert rel(compiled(x), reference(x)) < 2e-2


def test_linear_layers_reading_their_weights_before_the_wait_read_each_others_outputs():
    """A decode-sized chain of ``wsgemm.nn.Linear`` layers that promise their
    (initialised, then synchronized) weights: eager and replayed from a CUDA graph,
    each layer reads the output the layer before wrote."""
    layers = [wsgemm.nn.Linear(1024, 1024, bias=False, dtype=torch.bfloat16, device="cuda") for _ in range(4)]
    for layer in layers:
        layer.read_weight_before_wait = True
    torch.cuda.synchronize()  # the weights' initialisation wrote them

    def chain(x):
        for layer in layers:
            x = layer(x)
        return x

    def reference(x):
        x = x.float()
        for layer in layers:
            x = (x @ layer.weight.float().t()).to(torch.bfloat16).float()
        return x

    with torch.inference_mode():
        for _ in range(2):
            x = torch.randn(16, 1024, device="cuda").to(torch.bfloat16)
            assert rel(chain(x), reference(x)) < 2e-2
        check_graph_replays(chain, torch.randn(16, 1024, device="cuda").to(torch.bfloat16), reference, 2e-2)


def check_graph_replays(fn, x, reference, tolerance, replays=3):
    """Capture ``fn(x)`` (planned and compiled already) in a CUDA graph, then replay it
    on fresh values of ``x`` into a poisoned output, each checked against ``reference``."""
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y = fn(x)
    for _ in range(replays):
        x.copy_(torch.randn(x.shape, device="cuda").to(x.dtype))
        y.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        assert rel(y, reference(x)) < tolerance


def test_graph_capture_of_a_linear_layer_replays_new_inputs():
    layer = wsgemm.nn.Linear(256, 384, dtype=torch.bfloat16, device="cuda")
    x = torch.randn(64, 256, device="cuda").to(torch.bfloat16)
    with torch.no_grad():
        layer(x)  # plan and compile outside the capture
        check_graph_replays(layer, x, lambda x: torch.nn.functional.linear(x.float(), layer.weight.float(),
                                                                          layer.bias.float()), 1e-2, replays=2)


def test_cached_calls_of_other_layouts_and_alignments_get_their_own_plans():
    """The fast path's plan lookup keys strides and base alignment: calls of one shape
    whose B is row- or column-major, or whose A starts 2 bytes past a 16-byte
    boundary (a copied operand), interleave, each with the right result."""
    k, n = 192, 320
    wide = torch.randn(256, k + 8, device="cuda").to(torch.bfloat16)
    a_aligned, a_misaligned = wide[:, :k], wide[:, 1:k + 1]
    b_rows = torch.randn(k, n, device="cuda").to(torch.bfloat16)
    b_cols = torch.randn(n, k, device="cuda").to(torch.bfloat16).t()
    calls = [(a_aligned, b_rows), (a_aligned, b_cols), (a_misaligned, b_rows), (a_misaligned, b_cols)]
    for _ in range(3):
        for a, b in calls:
            ref = a.float() @ b.float()
            assert rel(wsgemm.gemm(a, b), ref) < 1e-2
            b.copy_(torch.randn_like(b))  # new contents under the same signature


def test_reduce_overhead_graphs_of_split_k_plans_replay_new_inputs():
    """torch.compile(mode="reduce-overhead") puts the operator in CUDA-graph trees,
    which warm a graph up with its allocations routed into the graph's pool and allow
    nothing but outputs to outlive a call there: a split-K workspace kept across calls
    failed that check (docs/tuning-log/host-overhead.md). Decode steps whose plans
    split K, eager calls on the same weights first (their kept workspace must not be
    the graph's)."""
    weights = [(torch.randn(n, k, device="cuda") / k ** 0.5).to(torch.bfloat16)
               for n, k in ((28672, 4096), (4096, 14336))]
    tokens = torch.randn(1, 4096, device="cuda").to(torch.bfloat16)
    plans = [wsgemm.plans.make_plan(tokens, weights[0].t(), None, None, None),
             wsgemm.plans.make_plan(torch.zeros(1, 14336, device="cuda", dtype=torch.bfloat16), weights[1].t(),
                                    None, None, None)]
    # The down projection's plan splits K (on an H100's numbers and an H200's; on an
    # H200 the gate_up's does too).
    assert plans[1].workspace[0], [plan.spec for plan in plans]

    def step(x):
        gate, up = wsgemm.gemm(x, weights[0].t()).chunk(2, dim=-1)
        return wsgemm.gemm(torch.nn.functional.silu(gate) * up, weights[1].t())

    def reference(x):
        gate, up = (x.float() @ weights[0].float().t()).to(torch.bfloat16).chunk(2, dim=-1)
        return (torch.nn.functional.silu(gate) * up).float() @ weights[1].float().t()

    compiled = torch.compile(step, mode="reduce-overhead", fullgraph=True)
    with torch.inference_mode():
        step(tokens)  # eager: the stream's own kept workspace
        for _ in range(4):  # warm-up, recording, then replays
            x = torch.randn(1, 4096, device="cuda").to(torch.bfloat16)
            out = compiled(x).clone()
            assert rel(out, reference(x)) < 2e-2
