"""Benchmark suites side by side: wsgemm (default and autotuned), torch.matmul (cuBLAS), Triton, QuACK.

    python -m benchmarks.suite --suite quick
    python -m benchmarks.suite --suite llm --suite decode --time-budget 900
    python -m benchmarks.suite --shapes 8192x8192x8192,4096x14336x4096 --weight

Suites are defined in ``benchmarks/shapes.py``; ``--shapes`` times your own (B
row-major, or with ``--weight`` the ``W.t()`` of an ``nn.Linear`` weight). All
implementations run in one process on the same inputs. Protocol
(``benchmarks.harness``): random normal inputs; each output is checked against a
float32 reference before it is timed (a wrong or failing implementation is reported,
not timed); warm-up; ``--reps`` rounds in which the implementations take turns, each
run timed with CUDA events and preceded by an L2 flush (``--flush``: by default
``wsgemm.timing``'s, the autotuner's protocol: read twice the L2, then spin while the
host queues the run; ``write``: a 512 MiB memset, the older protocol); median and
p10/p90. Problems whose fastest run is under ``--graph-below-us`` are timed again as
CUDA-graph replays of back-to-back calls on rotating input copies, so neither launch
overhead nor an L2-resident weight flatters anyone; each row records the method it
reports. The roofline references are measured in the same run (cuBLAS on 8192^3 bf16)
and taken from NVIDIA's datasheet.

Writes ``<out>/<name>.json`` after every problem (a cut-short run keeps what it
measured), then ``<name>.md`` and ``<name>.png`` (``benchmarks/plot.py``); ``--out``
defaults to ``benchmarks/results/``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

import wsgemm
import wsgemm.timing
from benchmarks import plot, shapes, triton_matmul
from benchmarks.harness import (
    DTYPES, RESULTS, TOLERANCE, add_flush_option, baseline_gemm, check, default_config_with, environment,
    gpu_state, make_operands, parse_shapes, plan_text, quack_gemm, regenerate_command, summarize,
    time_interleaved, within_tolerance, write_results,
)

IMPLEMENTATIONS = ("wsgemm", "wsgemm-autotune", "torch.matmul", "triton", "quack")
# Run only when named in --impls: wsgemm with one feature switched on or off, for side-by-side ablations.
ABLATIONS = ("wsgemm-pdl", "wsgemm-nopdl", "wsgemm-early", "wsgemm-streamk", "wsgemm-nostreamk",
             "wsgemm-epi3", "wsgemm-epi4", "wsgemm-pingpong", "wsgemm-cooperative", "wsgemm-base")
PEAK_SIZE = 8192  # the "measured peak": cuBLAS on a bf16 cube large enough to saturate the GPU

# Dense BF16 tensor-core peak in TFLOP/s. NVIDIA H100 Tensor Core GPU datasheet (H100
# SXM) and NVIDIA H200 Tensor Core GPU datasheet (H200 SXM, same SMs and clocks):
# "BF16 Tensor Core 1,979 teraFLOPS" with sparsity; dense is half, 989.4 in the H100
# architecture whitepaper (132 SMs x 4096 dense BF16 FLOP/clock x 1.83 GHz boost).
# Other parts (PCIe, NVL) run lower clocks and power and are left out, not guessed.
DATASHEET_BF16_DENSE_TFLOPS = {"H100 SXM": 989.4, "H200 SXM": 989.4}
DATASHEET_SOURCE = "NVIDIA H100 / H200 Tensor Core GPU datasheets, dense BF16 = sparse 1,979 / 2"


def datasheet_peak(gpu_name: str) -> tuple[str | None, float | None]:
    """(datasheet part, dense BF16 TFLOP/s) for a ``torch.cuda.get_device_name()``, or Nones.

    torch names the SXM parts "NVIDIA H100 80GB HBM3" and "NVIDIA H200"; the PCIe
    and NVL parts carry "PCIe"/"NVL" in their names."""
    if "PCIe" in gpu_name or "NVL" in gpu_name:
        return None, None
    for part in DATASHEET_BF16_DENSE_TFLOPS:
        if part.split()[0] in gpu_name:
            return part, DATASHEET_BF16_DENSE_TFLOPS[part]
    return None, None


def build_implementations(wanted: list[str], quack_autotune: bool) -> tuple[dict, dict]:
    """({name: f(a, b) -> d} of the implementations that can run, {name: {ran, detail}})."""
    fns, info = {}, {}

    def offer(name, fn, detail):
        if name in wanted and fn is not None:
            fns[name] = fn
        ran = name in fns
        info[name] = {"ran": ran, "detail": detail if ran or fn is None else f"skipped (--impls); {detail}"}

    offer("wsgemm", wsgemm.gemm, f"wsgemm {wsgemm.__version__}, default config=None: the packaged table of "
          "measured winners where it has this GPU and shape bucket, else the throughput model")
    offer("wsgemm-autotune", lambda a, b: wsgemm.gemm(a, b, config="autotune"),
          f"wsgemm {wsgemm.__version__}, config='autotune': {wsgemm.tuning.autotune.TOP_CANDIDATES} of the model's "
          "candidates timed on the first call per shape bucket (in turns, single calls after an L2 flush), "
          "the winner cached on disk")
    for name, pdl in (("wsgemm-pdl", True), ("wsgemm-nopdl", False)):
        offer(name, default_config_with(dependent_launch=pdl), "wsgemm's default configuration for each shape, "
              f"with GemmConfig.dependent_launch={pdl} (programmatic dependent launch) everywhere")
    # The suite never writes B (a weight), which keeps read_before_wait's promise.
    offer("wsgemm-early", lambda a, b: wsgemm.gemm(a, b, read_before_wait="b"),
          "wsgemm.gemm(a, b, read_before_wait='b'): where the default configuration launches dependent, "
          "B's first stages load before griddepcontrol.wait")
    offer("wsgemm-streamk", default_config_with(split_k=1, stream_k=True),
          "wsgemm's default configuration for each shape, with its last partial wave streamed "
          "(GemmConfig.stream_k=True, split_k=1) instead of split or left whole")
    offer("wsgemm-nostreamk", default_config_with(stream_k=False),
          "wsgemm's default configuration for each shape, with GemmConfig.stream_k=False (the launch "
          "policy's stream-K for long runs turned off)")
    for buffers in (3, 4):
        offer(f"wsgemm-epi{buffers}", default_config_with(epi_stages=buffers, stages=None),
              f"wsgemm's default configuration for each shape, with {buffers} epilogue buffers "
              f"(GemmConfig.epi_stages={buffers}) and as many ring stages as then fit")
    offer("wsgemm-pingpong", default_config_with(policy={"PINGPONG_MAX_K_BLOCKS": 2**31}),
          "wsgemm's default configuration for each shape as chosen with ping-pong consumers at any K "
          "(wsgemm.tuning.launch.PINGPONG_MAX_K_BLOCKS unbounded: every unbatched problem of two or more waves "
          "whose chosen tiles are not split)")
    offer("wsgemm-cooperative", default_config_with(policy={"PINGPONG_MAX_K_BLOCKS": 0}),
          "wsgemm's default configuration for each shape as chosen without ping-pong consumers "
          "(wsgemm.tuning.launch.PINGPONG_MAX_K_BLOCKS = 0)")
    offer("wsgemm-base", *baseline_gemm())
    offer("torch.matmul", torch.matmul, f"cuBLAS via torch {torch.__version__}, TF32 off")
    if triton_matmul.available():
        offer("triton", triton_matmul.matmul, "benchmarks/triton_matmul.py: persistent, TMA descriptors "
              "where the layout allows (row 'kernel' in the JSON), autotuned over 4 configs")
    else:
        offer("triton", None, "not installed")
    offer("quack", *quack_gemm(quack_autotune))
    return fns, info


def replay_error(results: list, operands: list) -> float:
    """Worst relative error of a graph's results after its replays: a replay must
    compute what the checked eager call did (it reuses captured addresses, e.g. a
    split-K workspace, that an eager call never sees)."""
    worst = 0.0
    for index, d in results:
        a, b = operands[index]
        ref = torch.matmul(a.float(), b.float())
        worst = max(worst, wsgemm.timing.relative_error(d, ref))
    return worst


def time_graphs(good: dict, problem, operands, args, flush) -> tuple[dict, dict]:
    """({name: per-call timing summary from graph replays}, {name: capture or replay error})."""
    graphs, outputs, errors = {}, {}, {}
    for name, fn in good.items():
        try:
            graphs[name], outputs[name] = wsgemm.timing.capture_back_to_back(fn, operands, args.graph_calls)
            graphs[name].replay()
        except Exception as exc:
            errors[name] = f"{type(exc).__name__}: {exc}"[:500]
            graphs.pop(name, None)
    torch.cuda.synchronize()
    per_replay = time_interleaved({name: g.replay for name, g in graphs.items()}, args.reps, flush.evict)
    for name in list(per_replay):
        err = replay_error(outputs[name], operands)
        if not within_tolerance(err, args.dtype):
            errors[name] = f"graph replays computed a wrong result (relative error {err:.2e}); not timed"
            del per_replay[name]
    timed = {name: summarize([ms / args.graph_calls for ms in runs], problem.flops)
             for name, runs in per_replay.items()}
    return timed, errors


# The configuration argument behind each wsgemm implementation (see build_implementations).
WSGEMM_CONFIGS = {"wsgemm": None, "wsgemm-autotune": "autotune"}


def check_all(impls: dict, a, b, dtype_name: str) -> dict:
    """{name: check result}; the float32 reference lives only as long as the checks."""
    ref = torch.matmul(a.float(), b.float())
    results = {}
    for name, fn in impls.items():
        results[name] = check(fn, a, b, ref, TOLERANCE[dtype_name])
        if name == "triton":
            results[name]["kernel"] = triton_matmul.kernel_for(a, b)
        if name in WSGEMM_CONFIGS and results[name]["status"] != "error":
            results[name]["config"] = plan_text(a, b, WSGEMM_CONFIGS[name])
    return results


def run_problem(problem: shapes.Problem, impls: dict, args, flush, l2_bytes: int) -> dict:
    dtype = DTYPES[args.dtype]
    a, b = make_operands(problem, dtype)
    results = check_all(impls, a, b, args.dtype)
    row = {
        "label": problem.label, "shape": problem.shape_text, "layout": problem.layout,
        "m": problem.m, "n": problem.n, "k": problem.k, "batch": problem.batch,
        "flops": problem.flops, "method": "events", "results": results,
    }
    good = {name: fn for name, fn in impls.items() if results[name]["status"] == "ok"}
    if not good:
        return row
    for _ in range(args.warmup):
        for fn in good.values():
            fn(a, b)
    runs = time_interleaved({name: (lambda fn=fn: fn(a, b)) for name, fn in good.items()}, args.reps, flush)
    for name, ms in runs.items():
        results[name].update(method="events", timings={"events": summarize(ms, problem.flops)})
    fastest_us = 1000 * min(results[name]["timings"]["events"]["median_ms"] for name in good)
    if args.graph == "never" or (args.graph == "auto" and fastest_us >= args.graph_below_us):
        return row
    operand_bytes = (a.numel() + b.numel()) * a.element_size()
    # Input copies a graph of back-to-back calls rotates through: the autotuner's rule.
    copies = wsgemm.timing.graph_operand_copies(operand_bytes, l2_bytes, args.graph_calls)
    operands = [(a, b)] + [make_operands(problem, dtype) for _ in range(copies - 1)]
    timed, errors = time_graphs(good, problem, operands, args, flush)
    row.update(method="cuda_graph", graph_input_copies=copies)
    for name, summary in timed.items():
        results[name]["timings"]["cuda_graph"] = summary
        results[name]["method"] = "cuda_graph"
    for name, error in errors.items():
        results[name]["graph_error"] = error
    return row


def measure_peak(args, flush) -> dict:
    a = torch.randn(PEAK_SIZE, PEAK_SIZE, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(PEAK_SIZE, PEAK_SIZE, device="cuda", dtype=torch.bfloat16)
    for _ in range(args.warmup):
        torch.matmul(a, b)
    ms = time_interleaved({"peak": lambda: torch.matmul(a, b)}, args.reps, flush)["peak"]
    measured = summarize(ms, 2.0 * PEAK_SIZE**3)
    part, datasheet = datasheet_peak(torch.cuda.get_device_name())
    return {
        "measured_tflops": measured["tflops"],
        "measured_what": f"torch.matmul (cuBLAS) {PEAK_SIZE}^3 bf16, median of {args.reps} runs",
        "measured_timing": measured,
        "datasheet_tflops": datasheet,
        "datasheet_source": f"{part}: {DATASHEET_SOURCE}" if part else "GPU not in the datasheet table",
    }


def _progress(problems):
    try:
        from tqdm import tqdm
    except ImportError:
        return None
    return tqdm(total=len(problems), unit="shape", dynamic_ncols=True)


def _versions() -> dict:
    versions = {}
    for module in ("triton", "quack"):
        try:
            versions[module] = getattr(__import__(module), "__version__", "?")
        except Exception:  # absent, or broken (build_implementations says which)
            versions[module] = None
    return versions


def parse_args(argv):
    p = argparse.ArgumentParser(prog="python -m benchmarks.suite", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--suite", action="append", choices=sorted(shapes.SUITES),
                   help="suite to run (repeat for several); default: quick, unless --shapes is given")
    p.add_argument("--shapes", default="", help="your own problems, MxNxK[,MxNxK...] (labelled shapes/MxNxK)")
    p.add_argument("--weight", action="store_true",
                   help="with --shapes: B = W.t() of an (N, K) weight, as nn.Linear stores it (else B row-major)")
    p.add_argument("--problems", type=Path, default=None,
                   help="a JSON list of problems (label, m, n, k[, batch, layout]), e.g. plan_diff --json's")
    p.add_argument("--filter", default=None, help="keep problems whose label matches this regular expression (case-insensitive)")
    p.add_argument("--dtype", default="bf16", choices=sorted(DTYPES))
    p.add_argument("--impls", default=",".join(IMPLEMENTATIONS),
                   help="comma-separated implementations to run (torch.matmul is every ratio's reference); "
                        f"also accepts the ablations {', '.join(ABLATIONS)}")
    p.add_argument("--reps", type=int, default=30)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--graph", default="auto", choices=("auto", "always", "never"),
                   help="CUDA-graph replay timing: for problems under --graph-below-us (auto), all, or none")
    p.add_argument("--graph-below-us", type=float, default=wsgemm.timing.GRAPH_BELOW_MS * 1000)
    p.add_argument("--graph-calls", type=int, default=20, help="back-to-back calls captured per graph")
    p.add_argument("--quack-autotune", action="store_true",
                   help="let QuACK autotune every shape (slow: compiles all its configs per shape)")
    p.add_argument("--time-budget", type=float, default=None,
                   help="seconds; no new problem is started once this much time has passed")
    p.add_argument("--name", default=None, help="output file stem; default suite_<suites>")
    p.add_argument("--out", type=Path, default=RESULTS, help="output folder (default: benchmarks/results/)")
    add_flush_option(p)
    args = p.parse_args(argv)
    unknown = set(args.impls.split(",")) - set(IMPLEMENTATIONS) - set(ABLATIONS)
    if unknown:
        p.error(f"unknown --impls {sorted(unknown)}; choose from {', '.join(IMPLEMENTATIONS + ABLATIONS)}")
    try:
        args.shapes = parse_shapes(args.shapes)
    except ValueError:
        p.error(f"--shapes {args.shapes!r}: give MxNxK[,MxNxK...], e.g. 4096x4096x4096")
    args.suite = args.suite or ([] if args.shapes or args.problems else ["quick"])
    own = (["shapes"] if args.shapes else []) + ([args.problems.stem] if args.problems else [])
    args.name = args.name or "suite_" + "_".join(args.suite + own)
    return args


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    problems = shapes.select(args.suite, args.filter) + shapes.given(args.shapes, args.weight)
    if args.problems:
        problems += shapes.from_json(args.problems)
    torch.backends.cuda.matmul.allow_tf32 = False  # the fp32 reference must be fp32
    start = time.monotonic()
    impls, impl_info = build_implementations(args.impls.split(","), args.quack_autotune)
    flush = wsgemm.timing.L2Flush(mode=args.flush)
    l2_bytes = getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 64 << 20)
    report = {
        "name": args.name,
        "command": regenerate_command("benchmarks.suite", argv),
        "suites": args.suite + (["shapes"] if args.shapes else []) + ([str(args.problems)] if args.problems else []),
        "dtype": args.dtype,
        "environment": {**environment(), **_versions()},
        "reps": args.reps,
        "timing": {"flush": flush.describe(), "flush_bytes": flush.bytes, "graph": args.graph,
                   "graph_below_us": args.graph_below_us, "graph_calls": args.graph_calls, "l2_bytes": l2_bytes},
        "implementations": impl_info,
        "gpu_before": gpu_state(),
        "peak": measure_peak(args, flush),
        "time_budget_s": args.time_budget,
        "rows": [],
        "skipped": [],
    }
    args.out.mkdir(parents=True, exist_ok=True)
    json_path = args.out / f"{args.name}.json"
    bar = _progress(problems)
    for i, problem in enumerate(problems):
        if args.time_budget is not None and time.monotonic() - start > args.time_budget:
            report["skipped"] = [p.label for p in problems[i:]]
            break
        row = run_problem(problem, impls, args, flush, l2_bytes)
        report["rows"].append(row)
        write_results(json_path, report)
        r = plot.ratio(row, plot.SUBJECT)
        status = f"{problem.label}: wsgemm/torch " + ("-" if r is None else f"{r:.3f}x")
        if bar is None:
            print(f"[{i + 1}/{len(problems)}] {status}", flush=True)
        else:
            bar.set_postfix_str(status)
            bar.update()
    if bar is not None:
        bar.close()
    report["gpu_after"] = gpu_state()
    report["elapsed_s"] = time.monotonic() - start
    write_results(json_path, report)
    md_path, png_path = plot.write_outputs(report, json_path)
    print(md_path.read_text())
    print(f"wrote {json_path}, {md_path}, {png_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
