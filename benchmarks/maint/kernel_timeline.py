"""Where a CTA's time goes: the SM90 kernel with its trace points switched on (H200).

``wsgemm.kernels.sm90.Sm90Gemm`` marks named moments of each CTA's life with
``trace_point`` calls that emit no code. This script builds a subclass whose trace
points store ``%globaltimer`` (nanoseconds, shared by all SMs) into a scratch array,
runs it on real operands (L2 flushed before every run: ``--flush``, by default the
suite's read, formerly a 256 MB write; or with ``--back-to-back N`` the last of N calls
captured back to back in a CUDA graph) and reports, per case, the median over
runs of:

* ``first_k_block_us``: launch (the first CTA's first instruction) to a CTA's first
  k-block landing in shared memory (median over CTAs): descriptor fetch, barrier
  set-up, cluster rendezvous and one cold TMA round trip;
* ``k_block_interval_us``: the steady rate, k-blocks 8 to the last recorded one,
  against the wgmma time the tile needs at the measured clock (``mma_bound_us``);
* ``epilogue_us``: last wgmma retired to last TMA store issued;
* ``span_us``: first CTA's first instruction to the last CTA's exit, beside the
  kernel durations CUPTI reports for this kernel and for ``torch.matmul``'s;
* on one wave of unsplit tiles (each CTA one tile): ``a_sharers_spread_us`` and
  ``b_sharers_spread_us``, for each operand tile and k-block from the 9th on, the
  latest minus the earliest landing among the CTAs that read that tile (its tile row
  for A, its column for B), median over tiles and k-blocks (``..._first_us``: the
  first 8 k-blocks). The L2 merges the reads of one line only when they arrive close
  together (docs/tuning-log/clusters.md);
* with split-K (``:splitS``; one-wave cases, where each CTA runs one work item):
  ``fixup_wait_us`` (a finisher's last wgmma to its contributors' arrival),
  ``fixup_add_us`` (adding their partial sums, stamped once the last sum is in a
  register) and ``publish_us`` (a contributor's last wgmma to its exit: storing its
  partial sums and counting itself in).

    python -m benchmarks.maint.kernel_timeline    # the default cases
    python -m benchmarks.maint.kernel_timeline --case 512x4096x4096:128x128:2x1:6
    python -m benchmarks.maint.kernel_timeline --case 320x2560x8192:128x128:1x1:auto:split2  # split-K

What the traces found: docs/tuning-log/profiling.md (the default cases) and
docs/tuning-log/split-k.md (the split-K fix-up). Trace points move a kernel by a few
tenths of a microsecond: variants that differ by less are compared untraced
(``benchmarks/studies/back_to_back_kernels.py``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path

import cutlass
import cutlass.cute as cute
import torch
from cutlass import Int32
from cutlass.cute.runtime import make_fake_compact_tensor

import wsgemm.timing
from benchmarks.harness import (
    RESULTS, add_flush_option, environment, gpu_state, kernel_spans, operands, regenerate_command, within_tolerance,
)
from wsgemm import GemmConfig, devices, hardware, plans
from wsgemm import compile as compile_mod
from wsgemm import config as cfg
from wsgemm.grid import TileGrid
from wsgemm.kernels.common.scheduler import cta_work
from wsgemm.kernels.sm90 import Sm90Gemm, TracePoint

# Scratch words per CTA: one per single-shot trace point, then the first K_BLOCKS_KEPT
# k-block arrivals.
FIRST_K_BLOCK_WORD = 8
K_BLOCKS_KEPT = 128
WORDS_PER_CTA = FIRST_K_BLOCK_WORD + K_BLOCKS_KEPT
# bf16 wgmma throughput of one SM, FLOP per clock (989.4 TFLOP/s dense at 1.83 GHz
# over 132 SMs, H100 SXM datasheet; the H200 has the same SM).
SM90_BF16_FLOP_PER_CLOCK = 4096

DEFAULT_CASES = (
    "512x4096x4096:128x128:2x1:6",  # cuBLAS's tile and ring for this shape
    "128x4096x4096:64x64:1x2:13",  # cuBLAS's tile and ring for this shape
    "2048x4096x4096:128x256:2x1:auto",
    "8192x8192x8192:128x256:2x1:auto",
)


class TracingSm90Gemm(Sm90Gemm):
    """The SM90 kernel with ``trace_point`` storing ``%globaltimer``'s low word."""

    @cute.jit
    def trace_point(self, point: cutlass.Constexpr, scratch: cute.Tensor, k_blocks_so_far=0, after=None):
        cta_m, cta_n, cluster_id = cute.arch.block_idx()
        grid_m, grid_n, grid_clusters = cute.arch.grid_dim()
        cm, cn = self.config.cluster_m, self.config.cluster_n
        # The stamps fill the end of the flags argument; with split-K the kernel's own
        # arrival flags come first.
        first_word = cute.size(scratch) - grid_m * grid_n * grid_clusters * WORDS_PER_CTA
        base = first_word + (cluster_id * (cm * cn) + cta_n * cm + cta_m) * WORDS_PER_CTA
        tidx, _, _ = cute.arch.thread_idx()
        if cutlass.const_expr(point in (TracePoint.ENTRY, TracePoint.BARRIERS_READY)):
            if tidx == 0:
                scratch[base + int(point)] = cute.arch.globaltimer_lo()
        else:
            # The first consumer thread speaks for its CTA.
            if tidx == hardware.THREADS_PER_WARPGROUP:
                if cutlass.const_expr(point == TracePoint.K_BLOCK_READY):
                    if k_blocks_so_far < K_BLOCKS_KEPT:
                        scratch[base + FIRST_K_BLOCK_WORD + k_blocks_so_far] = cute.arch.globaltimer_lo()
                elif cutlass.const_expr(point == TracePoint.EXIT):
                    scratch[base + int(point)] = cute.arch.globaltimer_lo()
                else:  # first tile only
                    if scratch[base + int(point)] == 0:
                        if cutlass.const_expr(after is not None):
                            # The store waits for the value; the fence keeps the timer
                            # read behind it (word 2 is otherwise unused: k-block stamps
                            # start at FIRST_K_BLOCK_WORD).
                            scratch[base + int(TracePoint.K_BLOCK_READY)] = Int32(after)
                            cute.arch.fence_acq_rel_cta()
                        scratch[base + int(point)] = cute.arch.globaltimer_lo()


def compile_traced(spec: cfg.KernelSpec, dump_dir: str | None = None):
    """The traced kernel through the workspace entry point: the scratch words ride at
    the end of its int32 flags argument (after the split-K or stream-K flags, if any).
    With ``dump_dir`` the PTX is kept there."""
    kernel = TracingSm90Gemm(spec)
    a, b, d, *_, _clusters, stream = compile_mod._example_args(spec)  # a workspace's two, if any, replaced here
    scratch = make_fake_compact_tensor(cutlass.Int32, (cute.sym_int(),), assumed_align=16)
    unused = make_fake_compact_tensor(cutlass.Float32, (cute.sym_int64(),), assumed_align=16)
    options = f"--gpu-arch {spec.facts.compile_target} --enable-tvm-ffi"
    if dump_dir:
        options += f" --keep-ptx --dump-dir {dump_dir}"
    return cute.compile(kernel.call_with_workspace, a, b, d, scratch, unused, Int32(1), stream, options=options)


def parse_case(text: str) -> tuple[tuple[int, int, int], GemmConfig]:
    """``MxNxK:TMxTN:CMxCN:STAGES|auto[:splitS]``."""
    shape, tile, cluster, stages, *split = text.split(":")
    m, n, k = (int(v) for v in shape.split("x"))
    tile_m, tile_n = (int(v) for v in tile.split("x"))
    cluster_m, cluster_n = (int(v) for v in cluster.split("x"))
    split_k = int(split[0].removeprefix("split")) if split else 1
    return (m, n, k), GemmConfig(tile_m=tile_m, tile_n=tile_n, cluster_m=cluster_m, cluster_n=cluster_n,
                                 stages=None if stages == "auto" else int(stages), split_k=split_k)


def cupti_kernel_us(fn, calls: int, others=()) -> float:
    """Median duration of the longest kernel of each of the ``calls`` calls ``fn``
    makes, as CUPTI records it; the kernels ``others`` launch (a flush, a scratch
    reset), found by profiling each alone, are left out."""
    durations = [end - start for start, end in kernel_spans(fn, others)]
    return statistics.median(sorted(durations)[-calls:])


def after_each(before, call, runs: int):
    """``runs`` times: ``before``, then ``call``."""
    def calls():
        for _ in range(runs):
            before()
            call()
    return calls


def cta_tiles(grid: TileGrid, clusters: int) -> list[tuple[int, int] | None]:
    """Each stamped CTA's (tile row, tile column) (``scheduler.cta_work``), in the
    stamps' order, where every cluster runs one work item (None for a CTA whose tile
    lies wholly past the edge, or that has no work); [] where clusters run more than one."""
    if grid.units > clusters or grid.split_k > 1 or grid.stream_k:
        return []
    tiles = []
    for cluster in range(clusters):
        for cta_n in range(grid.cluster_n):
            for cta_m in range(grid.cluster_m):
                tile_m, tile_n, *_ = next(cta_work(grid, cluster, clusters, cta_m, cta_n), (grid.tiles_m, 0))
                tiles.append((tile_m, tile_n) if tile_m < grid.tiles_m and tile_n < grid.tiles_n else None)
    return tiles


def sharer_spreads(arrivals: list[list[float]], tiles: list[tuple[int, int] | None],
                   first: int = 8) -> dict:
    """Median over operand tiles and k-blocks of the latest minus the earliest landing
    among the CTAs that read the tile: A tiles by tile row, B by tile column; k-blocks
    from ``first`` on, and (``..._first_us``) before it."""
    out = {}
    for operand, axis in (("a", 0), ("b", 1)):
        readers = defaultdict(list)
        for landed, tile in zip(arrivals, tiles):
            if tile is not None:
                readers[tile[axis]].append(landed)
        spreads = {True: [], False: []}  # by "among the first k-blocks"
        for rows in readers.values():
            if len(rows) > 1:
                for kb in range(min(map(len, rows))):
                    spreads[kb < first].append(max(r[kb] for r in rows) - min(r[kb] for r in rows))
        out[f"{operand}_sharers_spread_first_us"] = statistics.median(spreads[True]) if spreads[True] else 0.0
        out[f"{operand}_sharers_spread_us"] = statistics.median(spreads[False]) if spreads[False] else 0.0
    return out


def cta_timeline(words: list[list[int]], k_blocks: int, tiles: list[tuple[int, int] | None] = ()) -> dict:
    """One run's per-CTA stamps -> microsecond summary (32-bit timer, wrap-safe);
    with ``tiles`` (:func:`cta_tiles`), the sharers' spreads too."""
    t0 = min(row[TracePoint.ENTRY] for row in words)
    us = lambda t: ((t - t0) & 0xFFFFFFFF) / 1e3  # noqa: E731
    kept = min(k_blocks, K_BLOCKS_KEPT)
    arrivals = [[us(row[FIRST_K_BLOCK_WORD + i]) for i in range(kept)] for row in words]
    med = statistics.median
    # First tiles only: a CTA whose first item stored a tile, finished a split tile,
    # or only published partial sums (then its exit follows the publish).
    stored = [row for row in words if row[TracePoint.TILE_STORED]] or words
    finishers = [row for row in words if row[TracePoint.CONTRIBUTORS_ARRIVED]]
    contributors = [row for row in words if not row[TracePoint.TILE_STORED]]
    return {
        "launch_skew_us": max(us(row[TracePoint.ENTRY]) for row in words),
        "barriers_ready_us": med(us(row[TracePoint.BARRIERS_READY]) for row in words),
        "first_k_block_us": med(a[0] for a in arrivals),
        "k_block_interval_us": med((a[-1] - a[8]) / (kept - 9) for a in arrivals),
        "mainloop_done_us": med(us(row[TracePoint.MAINLOOP_DONE]) for row in words),
        "epilogue_us": med(us(row[TracePoint.TILE_STORED]) - us(row[TracePoint.MAINLOOP_DONE]) for row in stored),
        # Split-K and stream-K: what a finisher's fix-up takes, and a contributor's publish.
        "fixup_wait_us": med([us(row[TracePoint.CONTRIBUTORS_ARRIVED]) - us(row[TracePoint.MAINLOOP_DONE])
                              for row in finishers] or [0.0]),
        "fixup_add_us": med([us(row[TracePoint.PARTIALS_ADDED]) - us(row[TracePoint.CONTRIBUTORS_ARRIVED])
                             for row in finishers] or [0.0]),
        "publish_us": med([us(row[TracePoint.EXIT]) - us(row[TracePoint.MAINLOOP_DONE]) for row in contributors]
                          or [0.0]),
        "first_exit_us": min(us(row[TracePoint.EXIT]) for row in words),
        "span_us": max(us(row[TracePoint.EXIT]) for row in words),
        **(sharer_spreads(arrivals, tiles) if tiles else {}),
    }


def run_case(text: str, runs: int, flush: wsgemm.timing.L2Flush, back_to_back: int = 0) -> dict:
    """One case's summary; with ``back_to_back`` calls in a CUDA graph and the stamps
    of the last, instead of one call after a flush."""
    (m, n, k), config = parse_case(text)
    spec = cfg.make_spec("sm90", "bf16", "bf16", "k", "k", "n", config)  # A (M,K), B = W.t(), D (M,N)
    config = spec.config
    k_blocks = -(-k // config.tile_k) // config.split_k  # per work item (splits differ by at most one)
    if k_blocks < 10:
        raise SystemExit(f"{text}: need at least 10 k-blocks for a steady rate")
    a, b = operands(m, n, k)
    d = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    grid = TileGrid.for_problem(m, n, 1, config)
    clusters = grid.launch_clusters(devices.max_active_clusters(a.device.index or 0, config.cluster_size))
    ctas = clusters * config.cluster_size
    flags, partial_elems = plans.launch_workspace_elems(grid, clusters, config)
    scratch = torch.zeros(flags + ctas * WORDS_PER_CTA, dtype=torch.int32, device="cuda")
    partials = torch.zeros(max(1, partial_elems), dtype=torch.float32, device="cuda")
    tiles = cta_tiles(grid, clusters)
    kernel = compile_traced(spec)
    traced = lambda: kernel(a, b, d, scratch, partials, clusters)  # noqa: E731
    traced()
    ref = a.float() @ b.float()
    rel_error = wsgemm.timing.relative_error(d, ref)
    if not within_tolerance(rel_error):
        raise SystemExit(f"{text}: traced kernel is wrong (relative error {rel_error:.2e})")
    reset = scratch.zero_
    if back_to_back:
        # One operand copy: back to back, the operands stay in L2.
        graph, _ = wsgemm.timing.capture_back_to_back(lambda: (reset(), traced()), [()], back_to_back)
        matmul_graph, _ = wsgemm.timing.capture_back_to_back(lambda: torch.matmul(a, b), [()], back_to_back)
        run = graph.replay
    else:
        run = after_each(flush, lambda: (reset(), traced()), 1)
    per_run = []
    for _ in range(runs):
        run()
        torch.cuda.synchronize()
        per_run.append(cta_timeline(scratch[flags:].view(ctas, WORDS_PER_CTA).tolist(), k_blocks, tiles))
    summary = {key: round(statistics.median(r[key] for r in per_run), 3) for key in per_run[0]}
    clock_mhz = float(gpu_state().get("clocks.sm", "nan"))
    flop_per_k_block = 2 * config.tile_m * config.tile_n * config.tile_k
    summary["mma_bound_us"] = round(flop_per_k_block / SM90_BF16_FLOP_PER_CLOCK / clock_mhz, 3)
    if back_to_back:
        replays = lambda graph: after_each(lambda: None, graph.replay, runs)  # noqa: E731
        summary["kernel_us"] = round(cupti_kernel_us(replays(graph), runs * back_to_back, (reset,)), 2)
        summary["torch_matmul_kernel_us"] = round(cupti_kernel_us(replays(matmul_graph), runs * back_to_back), 2)
    else:
        summary["kernel_us"] = round(cupti_kernel_us(after_each(flush, traced, runs), runs, (flush,)), 2)
        summary["torch_matmul_kernel_us"] = round(
            cupti_kernel_us(after_each(flush, lambda: torch.matmul(a, b), runs), runs, (flush,)), 2)
    return {"case": text, "config": config.short(), "ctas": ctas, "k_blocks": k_blocks, "clock_mhz": clock_mhz,
            "rel_error": rel_error, **summary}


COLUMNS = ("first_k_block_us", "k_block_interval_us", "mma_bound_us", "mainloop_done_us", "epilogue_us",
           "fixup_wait_us", "fixup_add_us", "publish_us", "a_sharers_spread_us", "b_sharers_spread_us", "span_us",
           "kernel_us", "torch_matmul_kernel_us")


def protocol(report: dict) -> str:
    """How each traced run was set up (the oldest reports say nothing: a 256 MB write
    flush; the first read-flush reports name only the flush)."""
    if "protocol" in report:
        return report["protocol"]
    return f"{report.get('flush', 'L2 flushed (256 MiB write)')} before each"


def markdown(report: dict) -> str:
    env = report["environment"]
    lines = ["# Where a CTA's time goes (SM90 kernel, trace points on)\n",
             f"{env['gpu']}, torch {env['torch']}; median of {report['runs']} runs, "
             f"{protocol(report)}; "
             "B is an (N, K) weight passed as `w.t()`. Times in microseconds from the first CTA's first "
             "instruction (see `benchmarks/maint/kernel_timeline.py`).\n",
             "| case | config | CTAs | " + " | ".join(COLUMNS) + " |", "|---" * (3 + len(COLUMNS)) + "|"]
    for row in report["cases"]:
        lines.append(f"| {row['case']} | `{row['config']}` | {row['ctas']} | "
                     + " | ".join(f"{row.get(c, '-')}" for c in COLUMNS) + " |")
    lines.append(f"\nRegenerate: `{report.get('command', 'python -m benchmarks.maint.kernel_timeline')}`")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.maint.kernel_timeline", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--case", action="append", help="MxNxK:TMxTN:CMxCN:STAGES|auto[:splitS] (repeatable)")
    p.add_argument("--runs", type=int, default=15)
    p.add_argument("--name", default="kernel_timeline")
    p.add_argument("--out", type=Path, default=RESULTS, help="output folder (default: benchmarks/results/)")
    add_flush_option(p)
    p.add_argument("--back-to-back", type=int, default=0, metavar="CALLS",
                   help="trace the last of CALLS calls captured back to back in a CUDA graph, no flush")
    args = p.parse_args(argv)
    flush = wsgemm.timing.L2Flush(mode=args.flush)
    cases = []
    for i, text in enumerate(args.case or DEFAULT_CASES, 1):
        print(f"[{i}/{len(args.case or DEFAULT_CASES)}] {text}: compiling the traced kernel, {args.runs} runs",
              flush=True)
        cases.append(run_case(text, args.runs, flush, args.back_to_back))
        print("  " + ", ".join(f"{c} {cases[-1].get(c, '-')}" for c in COLUMNS), flush=True)
    report = {"command": regenerate_command("benchmarks.maint.kernel_timeline",
                                            sys.argv[1:] if argv is None else argv),
              "environment": environment(), "runs": args.runs,
              "protocol": (f"the last of {args.back_to_back} calls back to back in a CUDA graph, no L2 flush"
                           if args.back_to_back else f"{flush.describe()} before each"), "cases": cases}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{args.name}.json").write_text(json.dumps(report, indent=1) + "\n")
    (args.out / f"{args.name}.md").write_text(markdown(report))
    print(markdown(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
