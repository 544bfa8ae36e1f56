"""Host time per call on tiny problems, side by side with torch.matmul.

Times ``--calls`` back-to-back calls with a host clock and synchronizes once at the
end, so the number is what the CPU spends per call (launch included) while the GPU
keeps up; the GEMMs are tiny and the loop shorter than the launch queue, so the GPU
never throttles it. Median of ``--repeats`` such loops. Rows marked "parts" time
the pieces of a cached call on their own. ``--decode`` times decode-sized calls
(Llama-3 8B's projections at one token), whose plans swap A and B or split K, and
``nn.Linear`` layers beside them.

    python -m benchmarks.bench_overhead
    python -m benchmarks.bench_overhead --decode --calls 100

Prints a table and writes ``results/host_overhead.md`` (``host_overhead_decode.md``
with ``--decode``) and the report beside it (``--out`` elsewhere). What the numbers
have shown over time: docs/tuning-log/host-overhead.md.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import time
from pathlib import Path

import torch

import wsgemm
import wsgemm.api
import wsgemm.fast_path
import wsgemm.nn
from benchmarks.harness import RESULTS, environment, write_results
from wsgemm import plans


def per_call_us(impls: dict, calls: int, repeats: int) -> dict:
    """{name: median/min/max host microseconds per call}. An implementation is a
    function, or (function, context manager factory) to time it inside that context.
    The implementations take turns loop by loop, so a disturbance of the host (these
    are shared machines: one run's medians moved 2x for every call timed during a few
    seconds) hits them alike instead of whichever happened to be timed then."""
    impls = {name: impl if isinstance(impl, tuple) else (impl, contextlib.nullcontext)
             for name, impl in impls.items()}
    for fn, context in impls.values():
        with context():
            for _ in range(50):
                fn()
    torch.cuda.synchronize()
    samples = {name: [] for name in impls}
    for _ in range(repeats):
        for name, (fn, context) in impls.items():
            with context():
                start = time.perf_counter()
                for _ in range(calls):
                    fn()
                samples[name].append((time.perf_counter() - start) / calls * 1e6)
            torch.cuda.synchronize()
    return {name: {"median_us": statistics.median(v), "min_us": min(v), "max_us": max(v)}
            for name, v in samples.items()}


def python_kernels_twin():
    """``torch.ops.wsgemm.gemm`` as it was registered before its kernels moved to C++:
    the same schema and fake, with the backend kernel (``wsgemm.ops._gemm_kernel``) and
    the autograd formula (``torch.library.register_autograd``) in Python, on the same
    kernel path: what the C++ registrations of the fast path save per call."""
    from wsgemm import ops

    library = torch.library.Library("wsgemm_bench", "DEF")
    library.define("gemm(Tensor a, Tensor b, ScalarType? out_dtype=None, str read_before_wait='') -> Tensor")
    library.impl("gemm", ops._gemm_kernel, "CompositeExplicitAutograd")
    torch.library.register_fake("wsgemm_bench::gemm", lambda a, b, out_dtype=None, read_before_wait="": a.new_empty(a.shape[-2], b.shape[-1]),
                                lib=library)
    torch.library.register_autograd("wsgemm_bench::gemm", ops._backward, setup_context=ops._setup_context,
                                    lib=library)
    return library, torch.ops.wsgemm_bench.gemm.default


@contextlib.contextmanager
def fresh_workspaces():
    """``Plan.run`` inside gets a new zeroed workspace per call, as a captured operator
    call does (``wsgemm.workspace``)."""
    from wsgemm import workspace

    kept = plans.split_k_workspace
    plans.split_k_workspace = lambda device, flags, partials, *_: workspace._grown(None, device, flags, partials)
    try:
        yield
    finally:
        plans.split_k_workspace = kept


class LinearTransposingInPython(wsgemm.nn.Linear):
    """``wsgemm.nn.Linear``'s older forward, before the fast path made the weight's
    transposed view in C++: the weight transposed in Python, the input reshaped and the
    result viewed even where both are 2-D (docs/tuning-log/host-overhead.md)."""

    def forward(self, x):
        records_autograd = torch.is_grad_enabled() and (x.requires_grad or self.weight.requires_grad)
        promise = "b" if self.read_weight_before_wait and not records_autograd else ""
        y = wsgemm.gemm(x.reshape(-1, x.shape[-1]), self.weight.t(), read_before_wait=promise)
        if self.bias is not None:
            y = y + self.bias
        return y.view(*x.shape[:-1], self.out_features)


# Llama-3 8B's projections at one token: the default path swaps the operands of all
# four and splits K for gate_up and down (results/suite_llm_decode.md).
DECODE_SHAPES = ((1, 6144, 4096), (1, 4096, 4096), (1, 28672, 4096), (1, 4096, 14336))


def decode_rows(calls: int, repeats: int) -> dict:
    """Host time of decode-sized calls, whose plans are not direct (swapped operands,
    split-K workspaces): the steps that run in Python per call, piece by piece."""
    from wsgemm import workspace

    rows = {}
    for m, n, k in DECODE_SHAPES:
        a = torch.randn(m, k, device="cuda").to(torch.bfloat16)
        w = torch.randn(n, k, device="cuda").to(torch.bfloat16)
        wt = w.t()
        plan = plans.make_plan(a, wt, None, None, None)
        out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        layer = torch.nn.Linear(k, n, bias=False, device="cuda", dtype=torch.bfloat16)
        ours, before = wsgemm.nn.Linear.from_linear(layer), LinearTransposingInPython.from_linear(layer)
        impls = {
            "torch.matmul(a, w.t())": lambda: torch.matmul(a, wt),
            "wsgemm.gemm(a, w.t())": lambda: wsgemm.gemm(a, wt),
            "torch.ops.wsgemm.gemm": lambda: torch.ops.wsgemm.gemm(a, wt, None),
            # What a model's layer costs: nn.Module's call, the forward, the product.
            "torch.nn.Linear(a)": lambda: layer(a),
            "wsgemm.nn.Linear(a)": lambda: ours(a),
            "wsgemm.nn.Linear(a), its older forward (w.t() in Python)": lambda: before(a),
            f"parts: Plan.run ({plan.mode}, workspace {plan.workspace})": lambda: plan.run(a, wt, None),
            "parts: the views of a swap (b.t(), a.t(), out.t())": lambda: (wt.t(), a.t(), out.t()),
            "parts: torch.empty(result) alone": lambda: torch.empty(m, n, device="cuda", dtype=torch.bfloat16),
        }
        if plan.workspace[0]:
            device = a.device
            impls["parts: the stream's kept workspace (split_k_workspace)"] = \
                lambda: workspace.split_k_workspace(device, *plan.workspace)
            impls["parts: torch.cuda.current_stream()"] = lambda: torch.cuda.current_stream(device)
            impls["parts: torch.cuda.is_current_stream_capturing()"] = torch.cuda.is_current_stream_capturing
            impls["parts: a fresh zeroed workspace (a captured operator call's)"] = \
                lambda: workspace._grown(None, device, *plan.workspace)
            # The operator's split calls once ran Plan.run with a workspace of their own
            # even where nothing was captured.
            impls["parts: Plan.run, a fresh workspace per call (the operator's older way)"] = \
                (lambda: plan.run(a, wt, None), fresh_workspaces)
        with torch.inference_mode():
            rows[f"{m}x{n}x{k} ({plan.spec.short() if plan.spec else plan.mode})"] = per_call_us(
                impls, calls, repeats)
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.bench_overhead", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    # Fewer calls than the launch queue holds (~1024): with more, a slow GPU would
    # throttle the host loop and the number would be GPU time, not host time.
    p.add_argument("--calls", type=int, default=500)
    p.add_argument("--repeats", type=int, default=15)
    p.add_argument("--decode", action="store_true",
                   help="decode-sized calls instead (use --calls 100: each launches GPU work of 10-60 us)")
    p.add_argument("--out", default=str(RESULTS), help="output folder (default: benchmarks/results/)")
    args = p.parse_args(argv)
    if args.decode:
        return write_report(decode_rows(args.calls, args.repeats), args, "host_overhead_decode",
                            "Host time per call (decode-sized GEMMs, bf16, under inference_mode)",
                            "python -m benchmarks.bench_overhead --decode --calls 100")
    rows = {}
    _library, twin = python_kernels_twin()  # the library is kept: dropping it unregisters the twin
    for m, n, k in ((64, 64, 64), (128, 256, 128)):
        a = torch.randn(m, k, device="cuda").to(torch.bfloat16)
        w = torch.randn(n, k, device="cuda").to(torch.bfloat16)
        out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        a_grad = a.detach().requires_grad_()
        impls = {
            "torch.matmul(a, w.t())": lambda: torch.matmul(a, w.t()),
            "torch.matmul(a, w.t(), out=)": lambda: torch.matmul(a, w.t(), out=out),
            "wsgemm.gemm(a, w.t())": lambda: wsgemm.gemm(a, w.t()),
            "wsgemm.gemm(a, w.t(), out=)": lambda: wsgemm.gemm(a, w.t(), out=out),
            # The operator (what compiled graphs call), its kernels registered in C++,
            # beside its twin with Python kernels; torch.no_grad() still enters the
            # autograd kernel, torch.inference_mode() skips it.
            "torch.ops.wsgemm.gemm": lambda: torch.ops.wsgemm.gemm(a, w.t(), None),
            "torch.ops.wsgemm.gemm, Python kernels": lambda: twin(a, w.t(), None),
            "torch.ops.wsgemm.gemm under no_grad": (lambda: torch.ops.wsgemm.gemm(a, w.t(), None), torch.no_grad),
            "torch.ops.wsgemm.gemm under no_grad, Python kernels": (lambda: twin(a, w.t(), None), torch.no_grad),
            "torch.ops.wsgemm.gemm under inference_mode":
                (lambda: torch.ops.wsgemm.gemm(a, w.t(), None), torch.inference_mode),
            "torch.ops.wsgemm.gemm under inference_mode, Python kernels":
                (lambda: twin(a, w.t(), None), torch.inference_mode),
            "torch.ops.wsgemm.gemm, a requires grad": lambda: torch.ops.wsgemm.gemm(a_grad, w.t(), None),
            "torch.ops.wsgemm.gemm, a requires grad, Python kernels": lambda: twin(a_grad, w.t(), None),
            # Training: the forward of a layer whose input requires grad (records the graph).
            "torch.matmul(a, w.t()), a requires grad": lambda: torch.matmul(a_grad, w.t()),
            "wsgemm.gemm(a, w.t()), a requires grad": lambda: wsgemm.gemm(a_grad, w.t()),
            # Inference's promise of an unwritten weight: its own plan, found in C++ too.
            'wsgemm.gemm(a, w.t(), read_before_wait="b")': lambda: wsgemm.gemm(a, w.t(), read_before_wait="b"),
            # The same calls without the C++ fast path (wsgemm.fast_path).
            "wsgemm.gemm(a, w.t()), without the fast path":
                (lambda: wsgemm.gemm(a, w.t()), wsgemm.api.without_fast_path),
            'wsgemm.gemm(a, w.t(), read_before_wait="b"), without the fast path':
                (lambda: wsgemm.gemm(a, w.t(), read_before_wait="b"), wsgemm.api.without_fast_path),
            "wsgemm.gemm(a, w.t()), a requires grad, without the fast path":
                (lambda: wsgemm.gemm(a_grad, w.t()), wsgemm.api.without_fast_path),
        }
        # Where a cached wsgemm call spends its time, piece by piece.
        wt = w.t()
        fast_path = wsgemm.fast_path.load()  # None if it could not be built (a warning said why)
        # The heuristic's plan for this call (no operand swap at these sizes).
        plan = plans.make_plan(a, wt, out, None, None)
        assert plan.mode == "direct", plan.mode
        impls.update({
            "parts: w.t() alone": lambda: w.t(),
            "parts: torch.empty(result) alone": lambda: torch.empty(m, n, device="cuda", dtype=torch.bfloat16),
            "parts: a.new_empty(result) alone": lambda: a.new_empty(m, n),
            "parts: plan signature + lookup": lambda: plans._plans.get(plans.call_signature(a, wt, out, None, None)),
            **({"parts: plan lookup in C++ (fast path)": lambda: fast_path.find(a, wt)} if fast_path else {}),
            "parts: TVM-FFI kernel call alone": lambda: plan.kernel(a, wt, out, plan.clusters),
            "parts: gemm_eager(out=), no dispatch checks": lambda: plans.gemm_eager(a, wt, out),
        })
        rows[f"{m}x{n}x{k}"] = per_call_us(impls, args.calls, args.repeats)
    return write_report(rows, args, "host_overhead", "Host time per call (tiny GEMMs, bf16)",
                        "python -m benchmarks.bench_overhead")


def write_report(rows: dict, args, name: str, title: str, command: str) -> int:
    report = {"environment": environment(), "calls": args.calls, "repeats": args.repeats, "rows": rows}
    lines = [f"# {title}", "",
             f"{report['environment']['gpu']}, torch {report['environment']['torch']}; median of {args.repeats} "
             f"loops of {args.calls} back-to-back calls, one synchronize per loop, the calls of a shape taking "
             "turns loop by loop; microseconds per call.", "",
             "| shape | call | median us | min | max |", "|---|---|---|---|---|"]
    for shape, impls in rows.items():
        for call, r in impls.items():
            lines.append(f"| {shape} | `{call}` | {r['median_us']:.2f} | {r['min_us']:.2f} | {r['max_us']:.2f} |")
    lines += ["", f"Regenerate: `{command}`"]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    write_results(out / f"{name}.json", report)
    (out / f"{name}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
