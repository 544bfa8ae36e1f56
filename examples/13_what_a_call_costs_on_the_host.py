"""13 -- What a call costs on the host: the plan cache and the autograd node in C++.

Teaches: a small GEMM runs for a few microseconds on the GPU, so what the CPU spends
to launch it matters as much. A repeated ``wsgemm.gemm`` call has three host steps
before the kernel: find the plan of this call signature (shapes, strides, dtypes,
device, base alignment of both operands), allocate the result, and, if an input
requires grad, record the product for autograd. In Python the first and the last
cost microseconds each (a tuple key to build and hash; ``torch.autograd.Function``'s
Python context object); ``wsgemm.fast_path`` does them in C++
(``src/wsgemm/csrc/fast_path.cpp``), built on first use. It also registers the
kernels of ``torch.ops.wsgemm.gemm``, the operator compiled graphs call, so that
those calls take the same C++ steps instead of Python at two dispatch keys. Decode
calls take them too: their plans swap the operands (the kernel computes
D^T = B^T A^T from views the C++ launch makes) and may split K, whose workspace is
the one Python call left (``wsgemm.workspace`` keys it by stream and capture).

Shown four ways, on this machine's CPU with stand-in plans (no GPU needed): the
lookup, Python key against C++ key; the autograd node, ``autograd.Function`` against
the C++ node, and what autograd sees of it; a decode plan's launch, what its kernel
receives and who asks for its workspace; then the H200's numbers for whole calls,
read from the committed reports host_overhead.json.gz and host_overhead_decode.json.gz
(in benchmarks/results/archive.tar.xz; benchmarks/NOTES.md sections 28, 57, 59 and 60).

Needs: any machine (a C++ compiler builds the fast path the first time, ~15 s).
Run:   python examples/13_what_a_call_costs_on_the_host.py
"""

import statistics
import sys
import time
from pathlib import Path

import torch

from wsgemm import api, fast_path
from wsgemm import ops  # noqa: F401  (importing it gives the fast path its backward)

RESULTS = Path(__file__).resolve().parents[1] / "benchmarks" / "results"
sys.path.insert(0, str(RESULTS.parent))
from result_files import load_json  # noqa: E402  (reads reports moved into results/archive.tar.xz too)


def microseconds(fn, calls: int = 20000, repeats: int = 5) -> float:
    """Median over ``repeats`` loops of the host time of one call."""
    per_call = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        per_call.append((time.perf_counter() - start) / calls * 1e6)
    return statistics.median(per_call)


def the_lookup(module) -> None:
    print("1. Finding a call's plan (api._signature in Python; PlanKey in C++):")
    a = torch.randn(64, 64).to(torch.bfloat16)
    w_t = torch.randn(64, 64).to(torch.bfloat16).t()  # an nn.Linear weight, as gemm(x, w.t()) sees it
    python_plans = {api._signature(a, w_t, None, None, None): "the plan"}
    module.remember(a, w_t, "the plan")
    python_us = microseconds(lambda: python_plans.get(api._signature(a, w_t, None, None, None)))
    cpp_us = microseconds(lambda: module.find(a, w_t))
    print(f"   Python: a tuple of {len(api._signature(a, w_t, None, None, None))} fields (shapes and strides "
          f"as tuples), built and hashed per call: {python_us:.2f} us")
    print(f"   C++:    15 integers, hashed without Python objects: {cpp_us:.2f} us "
          f"({python_us / cpp_us:.0f}x less)")
    other = a.t().contiguous().t()  # the same values and shape, column-major: another kernel
    print(f"   the same shape, column-major: {module.find(other, w_t)!r} (another plan: the key holds strides)")
    module.forget()
    print()


class ProductFunction(torch.autograd.Function):
    """The same product through torch.autograd.Function, as without the fast path."""

    @staticmethod
    def forward(ctx, a, b):
        ctx.save_for_backward(a, b)
        return a @ b

    @staticmethod
    def backward(ctx, grad):
        a, b = ctx.saved_tensors
        return grad @ b.mT, a.mT @ grad


def the_autograd_node(module) -> None:
    print("2. Recording the product for autograd:")
    a = torch.randn(8, 8, requires_grad=True)
    b = torch.randn(8, 8)
    product = lambda x, y, out_dtype: x @ y  # noqa: E731  (a stand-in forward; wsgemm's launches the kernel)
    function_us = microseconds(lambda: ProductFunction.apply(a, b))
    node_us = microseconds(lambda: module.record_product(product, a, b, None))
    plain_us = microseconds(lambda: a.detach() @ b)
    print(f"   the product alone: {plain_us:.2f} us; through autograd.Function: {function_us:.2f} us; "
          f"recorded by the C++ node: {node_us:.2f} us")
    d = module.record_product(product, a, b, None)
    print(f"   d.grad_fn: {d.grad_fn.name()}, whose inputs are {[type(f).__name__ for f, _ in d.grad_fn.next_functions]}"
          " (a's gradient accumulator; b needs none)")
    print("   Its backward is Python (wsgemm.ops._eager_backward): dA = dD B^T and dB = A^T dD as wsgemm")
    print("   products on transposed views, called only for the gradients asked for.\n")


def the_decode_launch(module) -> None:
    print("3. A decode plan launched from C++: swapped operands, split K:")
    a = torch.randn(1, 64)  # one token
    w_t = torch.randn(256, 64).t()  # a (256, 64) weight as gemm(x, w.t()) sees it
    seen, asked = [], []

    def kernel(x, y, d, flags, partials, clusters):  # stands in for the TVM-FFI kernel
        seen.append(f"x {tuple(x.shape)}, y {tuple(y.shape)}, d {tuple(d.shape)} with strides {d.stride()}, "
                    f"flags {tuple(flags.shape)}, partials {tuple(partials.shape)}")
        d.copy_(x @ y)

    def workspace_source(through_operator):  # stands in for api.Plan.workspace_source()
        asked.append("the operator" if through_operator else "an eager call")
        return torch.zeros(4, dtype=torch.int32), torch.empty(4 * 256)

    module.remember(a, w_t, None, kernel, 1, [1, 256], a.dtype, "", True, workspace_source)
    eager = module.call(a, w_t)
    compiled = torch.ops.wsgemm.gemm(a, w_t, None)  # what a compiled graph calls: the same plan
    print(f"   the kernel received {seen[0]}")
    print(f"   (b^T, a^T and the result's transpose: the weight's rows fill the MMA's M, the token its N)")
    print(f"   the workspace asked for by {asked[0]}, then by {asked[1]}, which says so: captured in a graph,")
    print("   the operator's call gets one of its own, as CUDA-graph trees require (NOTES section 58)")
    print(f"   results match a @ w.t(): {torch.allclose(eager, a @ w_t) and torch.allclose(compiled, a @ w_t)}")
    module.forget()
    print()


def the_h200_numbers() -> None:
    print("4. Whole calls on the H200's host (benchmarks/results/host_overhead.json.gz, 64x64x64, bf16):")
    rows = load_json(RESULTS / "host_overhead.json.gz")["rows"]["64x64x64"]
    us = {name: row["median_us"] for name, row in rows.items()}
    for call, ours, without, theirs in (
        ("a new result", "wsgemm.gemm(a, w.t())", "wsgemm.gemm(a, w.t()), without the fast path",
         "torch.matmul(a, w.t())"),
        ("an input requires grad", "wsgemm.gemm(a, w.t()), a requires grad",
         "wsgemm.gemm(a, w.t()), a requires grad, without the fast path", "torch.matmul(a, w.t()), a requires grad"),
    ):
        print(f"   {call:24s} wsgemm {us[ours]:5.2f} us (Python path {us[without]:5.2f}), "
              f"torch.matmul {us[theirs]:5.2f} us")
    # What compiled graphs call: the operator, its kernels registered by the fast path.
    print(f"   torch.ops.wsgemm.gemm    {us['torch.ops.wsgemm.gemm']:5.2f} us "
          f"(its kernels in Python {us['torch.ops.wsgemm.gemm, Python kernels']:5.2f}), requires grad "
          f"{us['torch.ops.wsgemm.gemm, a requires grad']:5.2f} us "
          f"({us['torch.ops.wsgemm.gemm, a requires grad, Python kernels']:5.2f})")
    print(f"   of which the TVM-FFI call (argument checks, TMA descriptors, the launch) "
          f"{us['parts: TVM-FFI kernel call alone']:.2f} us")
    print("   Llama-3 8B's projections at one token (host_overhead_decode.json.gz, another run: compare within a row):")
    decode = load_json(RESULTS / "host_overhead_decode.json.gz")["rows"]
    for shape, rows in decode.items():
        us = {name: row["median_us"] for name, row in rows.items()}
        split = next((us[name] for name in us if "fresh workspace per call" in name), None)
        before = f", Python launch with a workspace per call {split:5.2f}" if split else ""
        print(f"   {shape.split(' ')[0]:13s} wsgemm {us['wsgemm.gemm(a, w.t())']:5.2f} us, operator "
              f"{us['torch.ops.wsgemm.gemm']:5.2f}, torch.matmul {us['torch.matmul(a, w.t())']:5.2f}{before}")
        print(f"   {'':13s} as a layer: wsgemm.nn.Linear {us['wsgemm.nn.Linear(a)']:5.2f} us (its forward "
              f"before session 44 {us['wsgemm.nn.Linear(a), its forward before session 44']:5.2f}), "
              f"torch.nn.Linear {us['torch.nn.Linear(a)']:5.2f}")
    print("   A layer's forward adds nn.Module's call and the weight's transpose, which the cached call")
    print("   makes in C++ (call_transposed): Python's weight.t() alone costs microseconds (NOTES section 60).")


def main() -> None:
    module = fast_path.load()
    if module is None:
        print("The fast path could not be built here (see the warning above); wsgemm runs the same steps in Python.")
        the_h200_numbers()
        return
    print(f"The fast path: {Path(module.__file__).name} in {fast_path.build_directory()}\n")
    the_lookup(module)
    the_autograd_node(module)
    the_decode_launch(module)
    the_h200_numbers()


if __name__ == "__main__":
    main()
