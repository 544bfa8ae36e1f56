"""Time many ``GemmConfig``s of wsgemm against torch.matmul on a few shapes, interleaved.

Used to choose the planner's defaults (``wsgemm.tuning``: the cost model, the launch
rules, the packaged table); results go to ``benchmarks/results/<name>.json`` and the
findings to the tuning log (docs/tuning-log/).

A hand-picked set (``--set``: the 8192^3 candidates, the default when nothing else
is asked for, or knobs at cuBLAS's own config for 512x4096x4096); with ``--tiles`` (and
optionally ``--clusters``, ``--splits``, ``--stages``, ``--epi-stages``, ``--swap``, ``--swizzles``) every
combination that the kernel accepts:

    python -m benchmarks.maint.sweep_configs --shapes 8192x8192x8192
    python -m benchmarks.maint.sweep_configs --shapes 512x4096x4096,128x4096x4096 --weight \\
        --tiles 128x128,128x256 --clusters 1x1,2x1,2x2 --splits 1,2 --name sweep_mid_m

For the model's own ranking: ``--model-top N`` adds, per shape, the cost model's N
best configurations (``wsgemm.tuning.ranked``) and the other cluster shape of each
(2x1 for 1x1 and back), launched as the default path would launch them
(``wsgemm.tuning.as_launched``); ``--default-twins 1x1,1x2`` adds the default path's
configuration with other clusters, ``--default-stages 4,6`` with other ring depths;
``--policy NAME=VALUE`` (repeatable) adds the default path as planned with a constant
of ``wsgemm.tuning`` set to VALUE (e.g. ``SHARED_TILES_RING_STAGES=9``);
``--graph`` also times every implementation in CUDA-graph replays of
back-to-back calls (``wsgemm.timing.time_graph_replays``, the autotuner's protocol for
short kernels):

    python -m benchmarks.maint.sweep_configs --weight --model-top 8 --graph --reps 15 \\
        --shapes 384x1024x1024,1024x1024x1024 --name sweep_small_problems

``--base`` times ``benchmarks.maint.baseline``'s export of another commit beside the
working tree: its default path, and with ``--tiles`` every grid config in both
(a kernel change at fixed configs):

    python -m benchmarks.maint.baseline HEAD~1 /tmp/base
    PYTHONPATH=/tmp/base python -m benchmarks.maint.sweep_configs --weight --base --default \
        --tiles 128x128 --clusters 1x1,2x1 --shapes 384x4096x8192 --name padded_tiles_ab

``--weight`` passes B as ``W.t()`` of an (N, K) weight, as ``nn.Linear`` stores it
(the LLM suite's layout). For each shape the JSON also records the names of the
kernels torch.matmul launched (cuBLAS names carry their tile shape), so a gap to
cuBLAS can be read against what cuBLAS chose.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import itertools
import json
import re
import sys
from pathlib import Path

import torch

import wsgemm
import wsgemm.timing
from benchmarks.harness import (
    DTYPES, RESULTS, baseline_gemm, cuda_kernel_events, default_config_with, environment, gpu_of, gpu_state,
    operands, parse_shapes, plan_text, policy_modules, regenerate_command, summarize,
    time_interleaved, within_tolerance,
)
from wsgemm import GemmConfig, tuning
from wsgemm.config import ConfigError
from wsgemm.tuning.autotune import GRAPH_CALLS

_PAIR = dict(tile_m=128, tile_n=128, cluster_m=2)

HAND_PICKED = {
    # cuBLAS's tile and ring for 512x4096x4096 (128x128, 6 stages; docs/tuning-log/tile-shapes.md),
    # in our faster cluster orientation: which knob of ours closes the gap?
    "cublas-512": {
        "c2x1": GemmConfig(**_PAIR),
        "c2x1 s5": GemmConfig(**_PAIR, stages=5), "c2x1 s4": GemmConfig(**_PAIR, stages=4),
        "c2x1 e1": GemmConfig(**_PAIR, epi_stages=1), "c2x1 e4": GemmConfig(**_PAIR, epi_stages=4),
        "c2x1 none": GemmConfig(**_PAIR, lookahead="none"),
        "c2x1 after_copy": GemmConfig(**_PAIR, lookahead="after_copy"),
        "c2x1 along_n": GemmConfig(**_PAIR, raster="along_n"), "c2x1 sw2": GemmConfig(**_PAIR, swizzle=2),
        "128x256 c2x1": GemmConfig(tile_n=256, cluster_m=2),
    },
    # The last partial wave of many-wave problems streamed (stream-K) against left
    # whole (docs/tuning-log/stream-k.md).
    "streamk": {
        "128x256 c2x1": GemmConfig(cluster_m=2),
        "128x256 c2x1 streamk": GemmConfig(cluster_m=2, stream_k=True),
        "128x256 c1x1": GemmConfig(),
        "128x256 c1x1 streamk": GemmConfig(stream_k=True),
    },
    # Large tiles, clusters, raster and look-ahead at 8192^3 (docs/tuning-log/tile-shapes.md).
    "8192": {
        "128x256 c1x1": GemmConfig(),
        "128x256 c2x1": GemmConfig(cluster_m=2),
        "128x256 c1x2": GemmConfig(cluster_n=2),
        "128x256 c2x1 along_n": GemmConfig(cluster_m=2, raster="along_n"),
        "128x256 c2x1 sw4": GemmConfig(cluster_m=2, swizzle=4),
        "128x256 c2x1 sw8 along_n": GemmConfig(cluster_m=2, swizzle=8, raster="along_n"),
        "128x256 c2x1 e1": GemmConfig(cluster_m=2, epi_stages=1),
        "128x256 c2x1 after_copy": GemmConfig(cluster_m=2, lookahead="after_copy"),
        "128x256 c2x1 none": GemmConfig(cluster_m=2, lookahead="none"),
        "128x192 c2x1": GemmConfig(tile_n=192, cluster_m=2),
        "128x128 c2x1": GemmConfig(tile_n=128, cluster_m=2),
    },
}


def grid(tiles: str, clusters: str, splits: str, stages: str = "auto", swaps: str = "0",
         swizzles: str = "1", epi_stages: str = "2", pingpongs: str = "0", pdls: str = "0") -> dict[str, GemmConfig]:
    """Every combination; a swapped config's tile and cluster are in the kernel's terms
    (its M is the problem's N)."""
    pairs = lambda text: [tuple(int(v) for v in item.split("x")) for item in text.split(",") if item]  # noqa: E731
    depths = [None if s == "auto" else int(s) for s in stages.split(",")]
    configs = {}
    for swap, (tm, tn), (cm, cn), split, depth, swizzle, epi, pingpong, pdl in itertools.product(
            [bool(int(s)) for s in swaps.split(",")], pairs(tiles), pairs(clusters),
            [int(s) for s in splits.split(",")], depths, [int(s) for s in swizzles.split(",")],
            [int(s) for s in epi_stages.split(",")], [bool(int(s)) for s in pingpongs.split(",")],
            [bool(int(s)) for s in pdls.split(",")]):
        label = (("swap " if swap else "") + f"{tm}x{tn} c{cm}x{cn}" + (f" split{split}" if split > 1 else "")
                 + (f" s{depth}" if depth else "") + (f" sw{swizzle}" if swizzle > 1 else "")
                 + (f" e{epi}" if epi != 2 else "") + (" pingpong" if pingpong else "") + (" pdl" if pdl else ""))
        configs[label] = GemmConfig(tile_m=tm, tile_n=tn, cluster_m=cm, cluster_n=cn, split_k=split, stages=depth,
                                    swap_ab=swap, swizzle=swizzle, epi_stages=epi, pingpong=pingpong,
                                    dependent_launch=pdl)
    return configs


def sweep_problem(m: int, n: int, k: int, weight_layout: bool, dtype_name: str = "bf16") -> tuning.Problem:
    """The planner's problem for ``A (M, K) @ B``, B = ``W.t()`` (K-major) with
    ``weight_layout``, else row-major, D row-major: 2-D, so A and B may swap, as the
    default path plans it."""
    return tuning.Problem(m, n, k, 1, dtype_name, dtype_name, "k", "k" if weight_layout else "n", "n",
                          can_swap=True)


def model_candidates(m, n, k, top: int, weight_layout: bool, gpu: tuning.Gpu,
                     dtype_name: str = "bf16") -> dict[str, GemmConfig]:
    """The cost model's ``top`` best configurations for this problem and the other
    cluster shape of each unswapped one, as the default path would launch them."""
    problem = sweep_problem(m, n, k, weight_layout, dtype_name)
    ranked = [c for _, c in tuning.ranked(problem, gpu)[:top]]
    candidates = {}
    for rank, config in enumerate(ranked, 1):
        twins = [config]
        if not config.swap_ab and -(-m // config.tile_m) >= 2:
            twins.append(dataclasses.replace(config, cluster_m=3 - config.cluster_m, cluster_n=1))
        for twin in twins:
            launched = tuning.as_launched(problem.kernel_problem(twin.swap_ab), twin, gpu)
            if launched not in candidates.values():  # a twin may be another rank's config
                candidates[f"model#{rank}{'' if twin is config else ' twin'} {launched.short()}"] = launched
    return candidates


def policy_setting(text: str, error) -> tuple[str, object]:
    """``NAME=VALUE`` -> (NAME, VALUE as a Python literal) for a constant that a module
    of ``wsgemm.tuning`` has (``harness.planning_policy``); ``error(message)`` otherwise."""
    import ast

    name, _, value = text.partition("=")
    if not name.isupper() or not any(hasattr(module, name) for module in policy_modules()):
        error(f"--policy: wsgemm.tuning has no constant {name!r}")
    try:
        return name, ast.literal_eval(value)
    except (ValueError, SyntaxError):
        error(f"--policy {name}: {value!r} is not a Python literal")


def in_base_package(config: GemmConfig):
    """f(a, b): ``config`` run by ``benchmarks.maint.baseline``'s export (``wsgemm_base``),
    given by its fields that differ from the defaults (enums by value), so that a
    field added since that commit need not exist there."""
    import wsgemm_base

    fields = {f.name: getattr(config, f.name) for f in dataclasses.fields(config)
              if getattr(config, f.name) != f.default}
    fields = {name: getattr(value, "value", value) for name, value in fields.items()}
    base_config = wsgemm_base.GemmConfig(**fields)
    return lambda a, b: wsgemm_base.gemm(a, b, config=base_config)


def default_variants(clusters: str, depths: str) -> dict:
    """f(a, b) per label: the default path's configuration with other clusters
    (``--default-twins 1x1,1x2``) or other ring depths (``--default-stages 4,6``)."""
    variants = {}
    for cluster in filter(None, clusters.split(",")):
        cm, cn = (int(v) for v in cluster.split("x"))
        variants[f"default c{cm}x{cn}"] = default_config_with(cluster_m=cm, cluster_n=cn)
    for depth in filter(None, depths.split(",")):
        variants[f"default s{int(depth)}"] = default_config_with(stages=int(depth))
    return variants


def as_ab_call(candidate):
    """f(a, b) of a sweep candidate: a GemmConfig, None (the default path) or another
    package's f(a, b)."""
    if callable(candidate):
        return candidate
    return lambda a, b: wsgemm.gemm(a, b, config=candidate)


def cublas_kernels(fn) -> list[str]:
    """Names of the CUDA kernels one call of ``fn`` launches."""
    return sorted({e.name for e in cuda_kernel_events(fn)})


def sweep_shape(m, n, k, dtype, candidates, reps, flush, weight_layout, graph: bool = False,
                time_wrong: bool = False) -> dict:
    a, b = operands(m, n, k, dtype, weight_layout)
    ref = a.float() @ b.float()
    calls = {"torch.matmul": torch.matmul}
    errors, skipped = {}, {}
    for label, candidate in candidates.items():
        call = as_ab_call(candidate)
        try:
            d = call(a, b)
        except ConfigError as exc:  # e.g. a split past the k-blocks, a cluster past the tiles
            skipped[label] = str(exc)
            continue
        errors[label] = wsgemm.timing.relative_error(d, ref)
        # bf16's bound whatever --dtype: fp16 outputs are held to it too.
        correct = within_tolerance(errors[label])
        if correct or time_wrong:
            calls[label] = call
        if not correct:
            print(f"  {label}: WRONG (rel error {errors[label]:.2e}), " + ("timed anyway" if time_wrong else "not timed"),
                  flush=True)
    flops = 2.0 * m * n * k
    times = time_interleaved({label: functools.partial(call, a, b) for label, call in calls.items()}, reps, flush)
    rows = {label: {**summarize(ms, flops), "rel_error": errors.get(label)} for label, ms in times.items()}
    if graph:
        replayed = wsgemm.timing.time_graph_replays(calls, a, b, flush, GRAPH_CALLS, reps)
        for label, ms in replayed.items():
            rows[label]["graph_ms"] = ms
    return {"shape": [m, n, k], "b": "W.t()" if weight_layout else "row-major",
            "cublas_kernels": cublas_kernels(functools.partial(torch.matmul, a, b)), "rows": rows,
            "skipped": skipped, "default_plan": plan_text(a, b, None)}


def compact(result: dict) -> dict:
    """What the JSON keeps of a shape's sweep: microseconds (median, p10, p90) per
    label (the labels name the configs: see :func:`grid`), with ``--graph`` the
    microseconds per call in graph replays, and what cuBLAS ran."""
    ordered = sorted(result["rows"].items(), key=lambda kv: kv[1]["median_ms"])
    kept = {"shape": result["shape"], "b": result["b"], "cublas_kernels": result["cublas_kernels"],
            "default_plan": result["default_plan"],
            "skipped": sorted(result["skipped"]),
            "us": {label: [round(r[key] * 1e3, 2) for key in ("median_ms", "p10_ms", "p90_ms")]
                   for label, r in ordered}}
    wrong = sorted(label for label, r in ordered if r.get("rel_error") is not None
                   and not within_tolerance(r["rel_error"]))
    if wrong:  # timed with --time-wrong
        kept["wrong"] = wrong
    if any("graph_ms" in r for _, r in ordered):
        kept["graph_us"] = {label: round(r["graph_ms"] * 1e3, 3) for label, r in ordered if "graph_ms" in r}
    return kept


def print_shape(result: dict, reps: int) -> None:
    m, n, k = result["shape"]
    rows = result["rows"]
    base = rows["torch.matmul"]["median_ms"]
    print(f"\n{m}x{n}x{k} (B {result['b']}): median of {reps} interleaved runs; cuBLAS ran "
          f"{', '.join(result['cublas_kernels'])}")
    graph_base = rows["torch.matmul"].get("graph_ms")
    for label, r in sorted(rows.items(), key=lambda kv: kv[1]["median_ms"]):
        graph = (f"  graph {r['graph_ms'] * 1e3:7.2f} us {graph_base / r['graph_ms']:.3f}x torch"
                 if graph_base else "")
        print(f"  {label:24s} {r['median_ms'] * 1e3:8.1f} us {r['tflops']:7.1f} TFLOP/s  "
              f"{base / r['median_ms']:.3f}x torch  [{r['p10_ms'] * 1e3:.1f}-{r['p90_ms'] * 1e3:.1f} us]{graph}",
              flush=True)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.maint.sweep_configs", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shapes", "--shape", default="8192x8192x8192", help="MxNxK[,MxNxK...]")
    p.add_argument("--dtype", default="bf16")
    p.add_argument("--weight", action="store_true", help="B = W.t() of an (N, K) weight")
    p.add_argument("--set", choices=sorted(HAND_PICKED),
                   help="a hand-picked set of configs (default: 8192, when nothing else is asked for)")
    p.add_argument("--tiles", help="grid of tile shapes, e.g. 128x128,128x256 (default: --set)")
    p.add_argument("--clusters", default="1x1")
    p.add_argument("--splits", default="1")
    p.add_argument("--stages", default="auto", help="ring depths, e.g. auto,12")
    p.add_argument("--epi-stages", default="2", help="epilogue buffers, e.g. 2,4")
    p.add_argument("--pingpong", default="0", help="0: cooperative consumers, 1: ping-pong, 0,1: both")
    p.add_argument("--swap", default="0", help="0: as given, 1: swap_ab (D^T = B^T A^T), 0,1: both")
    p.add_argument("--pdl", default="0", help="0: plain launch, 1: programmatic dependent launch, 0,1: both")
    p.add_argument("--swizzles", default="1", help="raster band widths in clusters, e.g. 1,4,8")
    p.add_argument("--default", action="store_true",
                   help="also time the default path (config=None: the tuned table, else the model)")
    p.add_argument("--base", action="store_true",
                   help="also time the default path of benchmarks.maint.baseline's export (wsgemm_base on "
                        "the path), and with --tiles each grid config there too")
    p.add_argument("--model-top", type=int, default=0,
                   help="also time the model's N best configs per shape and their other cluster shape")
    p.add_argument("--policy", action="append", default=[], metavar="NAME=VALUE",
                   help="also time the default path planned with this wsgemm.tuning constant changed "
                        "(repeatable; one candidate each)")
    p.add_argument("--default-twins", default="",
                   help="also time the default path's config with these clusters, e.g. 1x1,1x2")
    p.add_argument("--default-stages", default="",
                   help="also time the default path's config with these ring depths, e.g. 4,6,8")
    p.add_argument("--graph", action="store_true", help="also time CUDA-graph replays of back-to-back calls")
    p.add_argument("--time-wrong", action="store_true",
                   help="time configs whose output fails the check too, listed as wrong in the JSON: for "
                        "ablations that skip work on purpose (a --base export of a commit that does)")
    p.add_argument("--reps", type=int, default=20)
    p.add_argument("--name", default="sweep_8192_bf16")
    p.add_argument("--out", default=str(RESULTS), help="output folder (default: benchmarks/results/)")
    args = p.parse_args(argv)
    asked_other = (args.tiles or args.default or args.base or args.model_top or args.default_twins
                   or args.default_stages or args.policy)
    hand_picked = args.set or (None if asked_other else "8192")
    candidates = dict(HAND_PICKED[hand_picked]) if hand_picked else {}
    grid_configs = grid(args.tiles, args.clusters, args.splits, args.stages, args.swap, args.swizzles,
                        args.epi_stages, args.pingpong, args.pdl) if args.tiles else {}
    candidates.update(grid_configs)
    if args.default:
        candidates["default"] = None
    if args.base:
        base_gemm, note = baseline_gemm()
        if base_gemm is None:
            p.error(f"--base: {note}")
        candidates["base default"] = base_gemm
        # The grid's configs in the exported package too: a kernel change at fixed configs.
        candidates.update({f"base {label}": in_base_package(config) for label, config in grid_configs.items()})
    for setting in args.policy:
        name, value = policy_setting(setting, p.error)
        candidates[f"default {name}={value!r}"] = default_config_with(policy={name: value})
    candidates.update(default_variants(args.default_twins, args.default_stages))
    dtype = DTYPES[args.dtype]
    flush = wsgemm.timing.L2Flush()  # the autotuner's protocol
    shapes = parse_shapes(args.shapes)
    results = []
    gpu = gpu_of(torch.empty(0, device="cuda"))
    for i, (m, n, k) in enumerate(shapes, 1):
        shape_candidates = dict(candidates)
        if args.model_top:
            shape_candidates.update(model_candidates(m, n, k, args.model_top, args.weight, gpu, args.dtype))
        print(f"[{i}/{len(shapes)}] {m}x{n}x{k}: compiling and checking {len(shape_candidates)} configs", flush=True)
        results.append(sweep_shape(m, n, k, dtype, shape_candidates, args.reps, flush, args.weight, args.graph,
                                   args.time_wrong))
        print_shape(results[-1], args.reps)
    report = {"command": regenerate_command("benchmarks.maint.sweep_configs",
                                            sys.argv[1:] if argv is None else argv),
              "dtype": args.dtype, "reps": args.reps, "environment": environment(), "gpu_state": gpu_state(),
              **({"baseline": note} if args.base else {}),
              "units": {"us": "[median, p10, p90] microseconds of single calls",
                        "graph_us": "median microseconds per call in graph replays"},
              "shapes": [compact(r) for r in results]}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    # One line per config: [median, p10, p90] us.
    text = re.sub(r"\[\s+([-0-9.e]+),\s+([-0-9.e]+),\s+([-0-9.e]+)\s+\]", r"[\1, \2, \3]", json.dumps(report, indent=1))
    (out / f"{args.name}.json").write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
