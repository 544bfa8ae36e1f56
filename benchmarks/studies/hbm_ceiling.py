"""Study: how fast can any kernel read a weight from the H200's HBM? The ceiling for decode.

**Question.** A decode GEMM (M tokens against an N x K weight, M <= 64) reads the
weight once and little else, so its time is the weight's bytes over the rate the HBM
delivers them. The suite reports wsgemm and cuBLAS against each other; how far are
both from the fastest read the GPU does at all?

**Run** 2026-12-01 on an H200, the LLM suite's eight Llama-3 weights
(``results/hbm_ceiling.md``).

**Result.** The fastest of 18 Triton read-only kernels reads 3.24 TB/s (8B o, 34 MB)
to 4.45 TB/s (70B gate_up), faster for larger weights. At M = 1, 16 and 64 wsgemm
reaches 0.86-0.98 of it (geometric mean 0.929), cuBLAS 0.75-0.97.

**Conclusion.** A bound, not a change: the 20 LLM rows with M <= 64 run at the
ceiling would lift the suite's geometric mean from 1.020x only to 1.049x of cuBLAS;
the rest must come from M >= 128. Tuning log: docs/tuning-log/decode.md.

What it measures: for each weight, as CUDA-graph replays of back-to-back calls over
rotating copies after an L2 eviction (``wsgemm.timing.time_graph_replays``, so launch
latency is not counted):

- ``read``: a Triton kernel that only reads the weight (16-byte loads, fp32 sums, one
  partial sum per program), over a grid of block sizes, warps and grid shapes; the
  fastest of them is the ceiling this script reports;
- ``torch.sum``: PyTorch's reduction over the same bytes, a second, independent read;
- ``wsgemm`` and ``torch.matmul`` (cuBLAS) at each ``--tokens`` M, B = W.t() as the
  suite's LLM rows.

Rates are the weight's bytes per second (the GEMMs' token and output bytes, under
1 % of the weight's at M <= 64, are not counted).

    python -m benchmarks.studies.hbm_ceiling --weights 6144x4096,28672x4096 --tokens 1,16,64

Writes ``results/<name>.json`` and ``.md``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

import wsgemm
import wsgemm.timing
from benchmarks.harness import (
    RESULTS, TOLERANCE, check, environment, gpu_state, regenerate_command, write_results,
)

try:
    import triton
    import triton.language as tl
except ImportError:  # the GPU image has it; without it only torch.sum gives a ceiling
    triton = None

CALLS_PER_GRAPH = 10
# (elements per program step, warps, programs per SM or None for one program per block)
READ_CONFIGS = [(block, warps, per_sm) for block in (2048, 8192, 32768) for warps in (4, 8)
                for per_sm in (None, 4, 16)]

if triton is not None:
    @triton.jit
    def _read_kernel(src, partial, numel, stride, BLOCK: tl.constexpr):
        # Each program sums the blocks pid, pid + grid, ...; the store of its sum keeps
        # the compiler from dropping the loads.
        pid = tl.program_id(0)
        acc = tl.zeros([BLOCK], dtype=tl.float32)
        for start in range(pid * BLOCK, numel, stride):
            offsets = start + tl.arange(0, BLOCK)
            acc += tl.load(src + offsets, mask=offsets < numel, other=0.0).to(tl.float32)
        tl.store(partial + pid, tl.sum(acc))


def read_call(block: int, warps: int, per_sm: int | None, sms: int):
    """``fn(a, b)`` that reads ``b``'s storage (a transposed weight) with one config."""
    def call(a, b):
        flat = b.t() if not b.is_contiguous() else b
        flat = flat.reshape(-1)
        blocks = -(-flat.numel() // block)
        programs = blocks if per_sm is None else min(blocks, per_sm * sms)
        partial = torch.empty(programs, device=flat.device, dtype=torch.float32)
        _read_kernel[(programs,)](flat, partial, flat.numel(), programs * block, BLOCK=block,
                                  num_warps=warps)
        return partial
    return call


def read_name(block: int, warps: int, per_sm: int | None) -> str:
    return f"read b{block} w{warps} " + ("grid=blocks" if per_sm is None else f"grid={per_sm}/SM")


def time_weight(n: int, k: int, tokens: list[int], replays: int, flush) -> dict:
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    weight = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
    b = weight.t()
    weight_bytes = weight.numel() * weight.element_size()
    reads = {"torch.sum": lambda a, b: b.sum(dtype=torch.float32)}
    if triton is not None:
        reads.update({read_name(*c): read_call(*c, sms) for c in READ_CONFIGS})
    row = {"n": n, "k": k, "weight_bytes": weight_bytes, "read_us": {}, "gemm_us": {}}
    a1 = torch.randn(1, k, device="cuda", dtype=torch.bfloat16)
    times = wsgemm.timing.time_graph_replays(reads, a1, b, flush, CALLS_PER_GRAPH, replays)
    row["read_us"] = {name: ms * 1e3 for name, ms in times.items()}
    for m in tokens:
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        ref = a.float() @ b.float()
        calls = {"wsgemm": lambda a, b: wsgemm.gemm(a, b), "torch.matmul": torch.matmul}
        for name, fn in calls.items():  # a wrong answer is reported, not timed
            verdict = check(fn, a, b, ref, TOLERANCE["bf16"])
            if verdict["status"] != "ok":
                raise SystemExit(f"{name} at {m}x{n}x{k}: {verdict}")
        times = wsgemm.timing.time_graph_replays(calls, a, b, flush, CALLS_PER_GRAPH, replays)
        row["gemm_us"][str(m)] = {name: ms * 1e3 for name, ms in times.items()}
    return row


def rate(row: dict, us: float) -> float:
    return row["weight_bytes"] / us / 1e6  # TB/s


def best_read(row: dict) -> tuple[str, float]:
    name = min(row["read_us"], key=row["read_us"].get)
    return name, row["read_us"][name]


def markdown(report: dict) -> str:
    env = report["environment"]
    lines = [f"# {report['name']}", "",
             (f"{env['gpu']}, driver {env['driver']}, torch {env['torch']}, CuTe DSL {env['cutlass_dsl']}; "
             f"{env['date']}. Median of {report['replays']} graph replays of {CALLS_PER_GRAPH} back-to-back "
             "calls over rotating weight copies, L2 evicted before each replay. TB/s = the weight's bytes "
             "per second; \"read\" is the fastest of the Triton read-only kernels (its config named)."), "",
             "| weight (N x K) | MB | read (best) | torch.sum | "
             + " | ".join(f"wsgemm M={m} | cuBLAS M={m}" for m in report["tokens"]) + " |",
             "|---|---|---|---|" + "---|---|" * len(report["tokens"])]
    for row in report["rows"]:
        name, us = best_read(row)
        cells = [f"{row['n']}x{row['k']}", f"{row['weight_bytes'] / 1e6:.0f}",
                 f"{rate(row, us):.2f} ({name.removeprefix('read ')})", f"{rate(row, row['read_us']['torch.sum']):.2f}"]
        for m in report["tokens"]:
            gemm = row["gemm_us"][str(m)]
            cells += [f"{rate(row, gemm['wsgemm']):.2f}", f"{rate(row, gemm['torch.matmul']):.2f}"]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", f"Regenerate: `{report['command']}`", ""]
    return "\n".join(lines)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(prog="python -m benchmarks.studies.hbm_ceiling", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--weights", default="6144x4096,10240x8192,28672x4096,57344x8192",
                        help="N x K weights, comma-separated")
    parser.add_argument("--tokens", default="1,16,64", help="M of the GEMMs timed beside the reads")
    parser.add_argument("--replays", type=int, default=15)
    parser.add_argument("--name", default="hbm_ceiling")
    parser.add_argument("--out", default=str(RESULTS), help="output folder (default: benchmarks/results/)")
    args = parser.parse_args(argv)
    weights = [tuple(int(x) for x in w.split("x")) for w in args.weights.split(",")]
    tokens = [int(m) for m in args.tokens.split(",")]
    flush = wsgemm.timing.L2Flush()
    report = {"name": args.name, "command": regenerate_command("benchmarks.studies.hbm_ceiling", argv),
              "environment": environment(), "replays": args.replays, "tokens": tokens,
              "gpu_before": gpu_state(), "rows": []}
    for i, (n, k) in enumerate(weights, 1):
        row = time_weight(n, k, tokens, args.replays, flush)
        name, us = best_read(row)
        print(f"[{i}/{len(weights)}] {n}x{k}: read {rate(row, us):.2f} TB/s ({name}), "
              + ", ".join(f"M={m} wsgemm {rate(row, g['wsgemm']):.2f} cuBLAS {rate(row, g['torch.matmul']):.2f}"
                          for m, g in row["gemm_us"].items()), flush=True)
        report["rows"].append(row)
    report["gpu_after"] = gpu_state()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    write_results(out / f"{args.name}.json", report)
    (out / f"{args.name}.md").write_text(markdown(report))
    print(markdown(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
