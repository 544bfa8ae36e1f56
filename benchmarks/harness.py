"""What the benchmark scripts share: operands, the correctness check, timing, the
environment, the default path's plans, and the report files.

The scripts import it as ``benchmarks.harness``: run them as modules from the
repository root (``python -m benchmarks.suite ...``), with wsgemm installed
(``pip install -e .``).

Protocol every script follows: random normal inputs; each output checked against a
float32 reference before it is timed (:func:`check`, :func:`within_tolerance`: a wrong
or NaN output is reported, not timed); implementations timed in turns, each run after
an L2 flush (``wsgemm.timing``; :func:`time_interleaved`), medians and p10/p90
(:func:`summarize`); GPU clocks and temperature recorded (:func:`gpu_state`).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import inspect
import json
import platform
import shlex
import statistics
import subprocess
import time
from pathlib import Path
from unittest import mock

import torch

import wsgemm
import wsgemm.timing
from benchmarks import RESULTS
from wsgemm import devices, plans, tuning

__all__ = [
    "DTYPES", "RESULTS", "TOLERANCE", "add_flush_option", "baseline_gemm", "check", "cuda_kernel_events",
    "default_config_with", "default_problem", "environment", "gpu_of", "gpu_state", "kernel_spans",
    "make_operands", "operands", "parse_shapes", "plan_text", "planning_policy", "policy_modules", "quack_gemm",
    "regenerate_command", "results_json", "rounded", "summarize", "time_interleaved", "within_tolerance",
    "write_results",
]

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
# The largest relative Frobenius error from the float32 reference a correct output has,
# per input dtype (bf16 keeps 8 mantissa bits, fp16 11).
TOLERANCE = {"bf16": 1e-2, "fp16": 2e-3}


def within_tolerance(error: float, dtype_name: str = "bf16") -> bool:
    """Whether an output with this relative error is correct; a NaN error is not."""
    return error < TOLERANCE[dtype_name]


def check(fn, a, b, ref, tol) -> dict:
    """``fn(a, b)`` against ``ref``: {"status": "ok" | "wrong" | "error", ...}. A kernel
    fault surfaces at the synchronize, charged to ``fn``."""
    try:
        d = fn(a, b)
        torch.cuda.synchronize()
    except Exception as exc:
        return {"status": "error", "error": f"{type(exc).__name__}: {exc}"[:500]}
    if d.shape != ref.shape:
        return {"status": "wrong", "error": f"shape {tuple(d.shape)}, expected {tuple(ref.shape)}"}
    err = wsgemm.timing.relative_error(d, ref)
    return {"status": "ok" if err < tol else "wrong", "rel_error": err}


# ----------------------------------------------------------------------------- operands


def parse_shapes(text: str) -> list[tuple[int, int, int]]:
    """``"MxNxK,MxNxK"`` -> [(M, N, K), ...]; ``ValueError`` for anything else."""
    shapes = [tuple(int(x) for x in s.split("x")) for s in text.split(",") if s]
    for shape in shapes:
        if len(shape) != 3 or min(shape) < 1:
            raise ValueError(f"{'x'.join(map(str, shape))!r} is no MxNxK shape")
    return shapes


def make_operands(problem, dtype: torch.dtype, device="cuda") -> tuple[torch.Tensor, torch.Tensor]:
    """Random normal A and B of a ``benchmarks.shapes.Problem`` in its layout
    (``device="meta"``: the layouts alone, for tools that plan without a GPU)."""
    lead = (problem.batch,) if problem.batch > 1 else ()
    a = torch.randn(*lead, problem.m, problem.k, device=device, dtype=dtype)
    if problem.layout == "b_weight_t":
        b = torch.randn(*lead, problem.n, problem.k, device=device, dtype=dtype).mT
    else:
        b = torch.randn(*lead, problem.k, problem.n, device=device, dtype=dtype)
    return a, b


def operands(m: int, n: int, k: int, dtype: torch.dtype = torch.bfloat16, weight: bool = True,
             device="cuda") -> tuple[torch.Tensor, torch.Tensor]:
    """Random normal A (M, K) and B: ``W.t()`` of an (N, K) weight, as ``nn.Linear``
    stores it (``weight``), else a row-major (K, N) tensor."""
    a = torch.randn(m, k, device=device).to(dtype)
    b = torch.randn(n, k, device=device).to(dtype).t() if weight else torch.randn(k, n, device=device).to(dtype)
    return a, b


# ------------------------------------------------------------------------------- timing


def add_flush_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--flush", default="read", choices=wsgemm.timing.L2Flush.MODES,
                        help="before each timed run: read twice the L2 and spin (the autotuner's protocol), "
                        "or write 512 MiB (the older protocol; leaves the L2 full of dirty lines)")


def time_interleaved(impls: dict, reps: int, flush) -> dict[str, list[float]]:
    """Milliseconds of every run, the implementations taking turns, each run after
    ``flush`` (``wsgemm.timing.time_in_turns``: the autotuner's protocol)."""
    return wsgemm.timing.time_in_turns(impls, reps, flush)


def summarize(ms: list[float], flops: float) -> dict:
    ms = sorted(ms)
    med = statistics.median(ms)
    return {
        "median_ms": med,
        "p10_ms": ms[len(ms) // 10],
        "p90_ms": ms[(9 * len(ms)) // 10],
        "min_ms": ms[0],
        "tflops": flops / med / 1e9,
        "runs": len(ms),
    }


def cuda_kernel_events(fn) -> list:
    """The CUDA kernels (profiler events) that ``fn`` launches, as CUPTI records them."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]


def kernel_spans(fn, leave_out=()) -> list[tuple[float, float]]:
    """(start, end) of every kernel ``fn`` launches, CUPTI's clock (us), but memsets and
    the kernels that each of ``leave_out`` (a flush, a scratch reset) launches alone."""
    skip = {e.name for other in leave_out for e in cuda_kernel_events(other)}
    return [(e.time_range.start, e.time_range.end) for e in cuda_kernel_events(fn)
            if e.name not in skip and "memset" not in e.name.lower()]


# -------------------------------------------------------------------------- environment


def gpu_state() -> dict:
    fields = "clocks.sm,clocks.mem,temperature.gpu,power.draw"
    try:
        out = subprocess.run(
            ["nvidia-smi", f"--query-gpu={fields}", "--format=csv,noheader,nounits"],
            capture_output=True, text=True, timeout=10,
        ).stdout.strip().splitlines()[0]
        return dict(zip(fields.split(","), [v.strip() for v in out.split(",")]))
    except Exception as exc:  # no nvidia-smi: record why
        return {"error": str(exc)}


def environment() -> dict:
    import cutlass

    props = torch.cuda.get_device_properties(0)
    try:
        driver = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                capture_output=True, text=True, timeout=10).stdout.strip()
    except Exception:
        driver = None
    return {
        "gpu": props.name,
        "sms": props.multi_processor_count,
        "driver": driver,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cutlass_dsl": getattr(cutlass, "__version__", None),
        "wsgemm": wsgemm.__version__,
        "python": platform.python_version(),
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
    }


# ------------------------------------------------------------------------- report files

# Significant digits a results file keeps of each float: run-to-run noise on the GPU
# is ~1 %, so more digits only make the committed files (and the tree) larger.
RESULT_DIGITS = 5


def rounded(value):
    """``value`` (JSON-like) with every float rounded to ``RESULT_DIGITS`` significant digits."""
    if isinstance(value, float):
        return float(f"{value:.{RESULT_DIGITS}g}")
    if isinstance(value, dict):
        return {key: rounded(item) for key, item in value.items()}
    if isinstance(value, list):
        return [rounded(item) for item in value]
    return value


def results_json(report: dict) -> str:
    """A results file's text: compact (no indentation), floats :func:`rounded`."""
    return json.dumps(rounded(report), separators=(",", ":")) + "\n"


def regenerate_command(module: str, argv: list[str]) -> str:
    """The command line that wrote a report, ``python -m <module> ...`` (``module``
    e.g. ``benchmarks.suite``, run from the repository root), quoted for a shell,
    without ``--out`` (the GPU machine's output folder, not where the report ends up)."""
    kept = [arg for arg, before in zip(argv, [None, *argv])
            if arg != "--out" and before != "--out" and not arg.startswith("--out=")]
    return shlex.join(["python", "-m", module, *kept])


def write_results(path: Path, report: dict) -> None:
    """Write ``report`` to ``path`` as :func:`results_json`, a plain JSON file."""
    Path(path).write_text(results_json(report))


# ------------------------------------------------------------- the default path's plans


def gpu_of(t: torch.Tensor) -> tuning.Gpu:
    """The planner's view of the GPU ``t`` lives on (``wsgemm.devices.gpu``)."""
    return devices.gpu(t.device.index if t.device.index is not None else torch.cuda.current_device())


def default_problem(a: torch.Tensor, b: torch.Tensor, gpu: tuning.Gpu, out_dtype=None) -> tuning.Problem:
    """The ``wsgemm.tuning.Problem`` a default call (``config=None``) on these operands
    plans for, in the caller's orientation: layouts, batch folding and whether A and B
    may swap, as ``wsgemm.plans`` decides them. Runs on meta tensors (no GPU), so tools
    name a shape bucket as a call on the GPU would."""
    seen = []
    select = tuning.select

    def spy(problem, gpu, config=None, *, trial=None):
        seen.append(problem)
        return select(problem, gpu, config, trial=trial)

    shape, dtype, batched, batches = plans.validate_shapes_and_dtypes(a, b, None, out_dtype, None)
    with mock.patch.object(tuning, "select", spy):
        plans._kernel_for(a, b, None, out_dtype, None, shape, dtype, batched, batches, gpu)
    return seen[0]


def policy_modules() -> tuple:
    """The modules of ``wsgemm.tuning`` whose constants :func:`planning_policy` sets."""
    from wsgemm.tuning import autotune, candidates, cost, launch, rank, table

    return tuning, launch, cost, candidates, rank, table, autotune


@contextlib.contextmanager
def planning_policy(policy: dict):
    """Plans made inside see constants of ``wsgemm.tuning`` (``PINGPONG_MAX_K_BLOCKS``,
    a cost-model rate, ...) set to ``policy``'s values, in every module of the package
    that holds the name; the cost model's cached rankings are forgotten on the way in
    and out. A name no module holds raises ``KeyError``."""
    modules = policy_modules()
    try:
        with contextlib.ExitStack() as stack:
            for name, value in policy.items():
                holders = [m for m in modules if name.isupper() and hasattr(m, name)]
                if not holders:
                    raise KeyError(f"wsgemm.tuning has no constant {name!r}")
                for module in holders:
                    stack.enter_context(mock.patch.object(module, name, value))
            tuning.rank.ranked.cache_clear()
            yield
    finally:
        tuning.rank.ranked.cache_clear()


def default_config_with(policy=None, **changes):
    """f(a, b): wsgemm with the configuration its default path picks for these
    operands, changed by ``changes``, looked up once per shape and layout.
    ``policy``: constants of ``wsgemm.tuning`` set to other values while the default is
    looked up (:func:`planning_policy`)."""
    configs = {}

    def gemm(a, b):
        key = (a.shape, a.stride(), b.shape, b.stride())
        if key not in configs:
            with planning_policy(policy or {}):
                plan = plans.make_plan(a, b, None, None, None)
            configs[key] = None if plan.spec is None else dataclasses.replace(
                plan.spec.config, swap_ab=plan.mode == "swap", **changes)
        return wsgemm.gemm(a, b, config=configs[key])

    return gemm


def plan_text(a, b, config=None) -> str:
    """What a wsgemm call on these operands runs: the plan's mode and kernel
    configuration (after a first call, so an autotuned bucket is cached)."""
    plan = plans.make_plan(a, b, None, None, config)
    return plan.mode if plan.spec is None else f"{plan.mode} {plan.spec.config.short()}"


# ------------------------------------------------------------ other implementations


def quack_gemm(autotune: bool):
    """QuACK's public GEMM entry point (``quack.gemm_interface.gemm``) as f(a, b),
    and a note; (None, reason) when it cannot be imported."""
    try:
        import quack
        from quack.gemm_interface import gemm
    except ModuleNotFoundError as exc:
        return None, f"not installed ({exc})"
    except Exception as exc:  # e.g. built against another CuTe DSL version
        return None, f"import failed: {type(exc).__name__}: {exc}"[:300]
    version = getattr(quack, "__version__", "?")
    if "tuned" not in inspect.signature(gemm).parameters:
        return gemm, f"quack {version}, quack.gemm_interface.gemm (this version has no tuned= switch)"
    # tuned=True compiles and times every config on each new shape (minutes per
    # shape); tuned=False is QuACK's heuristic choice, as wsgemm's is.
    note = "autotuned (tuned=True)" if autotune else "heuristic config (tuned=False)"
    return (lambda a, b: gemm(a, b, tuned=autotune)), f"quack {version}, quack.gemm_interface.gemm, {note}"


def baseline_gemm():
    """wsgemm as exported from another commit by ``benchmarks.maint.baseline``
    (package ``wsgemm_base`` on the path) as f(a, b), and a note naming that commit;
    (None, reason) when it is not on the path."""
    try:
        import wsgemm_base
    except ModuleNotFoundError as exc:
        return None, f"not on the path ({exc}); see benchmarks/maint/baseline.py"
    rev_file = Path(wsgemm_base.__file__).with_name("BASELINE_REV")
    rev = rev_file.read_text().strip() if rev_file.exists() else "unknown commit"
    return wsgemm_base.gemm, f"wsgemm at {rev} (benchmarks/maint/baseline.py), default config=None"
