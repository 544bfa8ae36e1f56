"""Study: what does ``mbarrier.try_wait`` do to the issuing warp? Cycle measurements on the GPU.

**Question.** The producer probes the ring's next stage with ``try_wait`` before it
issues the current stage's copies (CUTLASS's order). PTX calls ``try_wait``
"potentially blocking": does a pending probe stall the warp, and does it delay the
independent work issued after it?

**Run** 2026-11-29 on an H200 (``results/trywait_microbench.md``).

**Result.** In this kernel's setup a pending ``try_wait`` without a time hint answered
in ~50 cycles (51 pending, 50 complete; maximum 7,773), and the warp kept issuing: a
pending probe whose predicate is not read costs 3 cycles, a shared-memory load after it
26 cycles (24 alone), a bulk copy's issue 19 (14 alone). With a ``suspendTimeHint`` the
warp slept (308 cycles at 0 ns, ~14,000 at 10 us).

**Conclusion.** The ~50-cycle answer holds in this setup only, and comes from the bulk
copies its loop issues (each waited for with a blocking wait) after the timed probes,
so before the next repetition's: ``benchmarks/trywait_probe.py``, varying this setup's
conditions one at a time on an H100 (``results/trywait_probe_h100.json``), found that
this block alone makes the pending answer ~50 cycles and that without it every call
takes the limit. On a warp that has not issued bulk copies the answer waits for the
phase, up to a time limit of 7,772 cycles (3.9 us). Where the probe sits in the
producer's loop barely matters (``benchmarks/studies/bench_lookahead.py``: 0-3 %);
``before_copy`` stays. Tuning log: docs/tuning-log/lookahead.md; the whole answer:
docs/producer-lookahead.md.

PTX says ``try_wait`` "causes the executing thread to wait until the specified phase
completes or a system-dependent time limit expires" and that it is a "potentially
blocking instruction"; ``test_wait`` is its non-blocking sibling. This kernel (one
warp, CuTe DSL with inline PTX where the DSL has no wrapper) measures, in SM clock
cycles (``%%clock64``) and nanoseconds (``%%globaltimer``):

1. ``try_wait`` on a phase that completed, its predicate used at once (fast path);
2. ``try_wait`` on a phase that never completes, predicate used at once: how long it
   waits before returning false (the time limit), with and without a
   ``suspendTimeHint``;
3. the same ``try_wait`` with its predicate NOT used before the second clock read:
   does the warp stall at the instruction, or only where the predicate is read?
4. a shared-memory load issued right after a pending ``try_wait`` (and consumed):
   is independent work delayed?
5. a bulk copy (the TMA engine's ``cp.async.bulk``) issued right after a pending
   ``try_wait``: is the copy's issue delayed?
6. ``test_wait`` on the never-completing phase, used at once.

Each measurement is repeated ``REPS`` times inside the kernel; the median is reported.
The SASS of the kernel is written next to the results so the instruction order the
numbers rely on can be checked (``--sass``).

    python -m benchmarks.studies.trywait_microbench
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import cutlass
import cutlass.cute as cute
import cutlass.memory
from cutlass import Int32, Int64

from benchmarks import RESULTS

REPS = 64
HINTS_NS = (0, 1_000, 10_000, 100_000)  # suspendTimeHint values tried in (2)
NAMES = [
    "try_wait, phase complete, used at once",
    "try_wait, phase pending, used at once (no hint)",
    *[f"try_wait, phase pending, used at once, suspendTimeHint={h} ns" for h in HINTS_NS],
    "try_wait, phase pending, predicate not used before the clock read",
    "ld.shared alone (consumed)",
    "ld.shared after a pending try_wait (consumed)",
    "cp.async.bulk issue alone",
    "cp.async.bulk issue after a pending try_wait",
    "test_wait, phase pending, used at once",
]
COLUMNS = len(NAMES)
BULK_BYTES = 1024


def _timed(body) -> tuple:
    """Run ``body()`` between two reads of the SM clock and the global timer; returns
    (cycles, nanoseconds, whatever body returned). Clock reads are volatile, so the
    compiler keeps them in program order around the body (check the SASS)."""
    g0 = cute.arch.globaltimer()
    c0 = cute.arch.clock64()
    value = body()
    c1 = cute.arch.clock64()
    g1 = cute.arch.globaltimer()
    return c1 - c0, g1 - g0, value


def _ptx(code: str, *args) -> Int32:
    """Inline PTX that leaves its result in ``{$w0}`` (an Int32)."""
    return cute.arch.inline_ptx(code, write_only_types=[Int32], read_only_args=list(args))


# "Used at once": a store predicated on the result sits right behind the wait, and
# ptxas must have the predicate before it can issue that store. (A selp would not
# do: ptxas sinks it past the clock read, as the SASS shows.)
TRY_USED = (
    "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [{$r0}], {$r1};\n"
    " @p st.shared.b32 [{$r2}], 1;\n mov.b32 {$w0}, 0;\n}\n"
)
TRY_HINT_USED = (
    "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [{$r0}], {$r1}, {$r3};\n"
    " @p st.shared.b32 [{$r2}], 1;\n mov.b32 {$w0}, 0;\n}\n"
)
TEST_USED = (
    "{\n .reg .pred p;\n mbarrier.test_wait.parity.shared::cta.b64 p, [{$r0}], {$r1};\n"
    " @p st.shared.b32 [{$r2}], 1;\n mov.b32 {$w0}, 0;\n}\n"
)
# The loaded value is stored right away, so the store waits for the load.
LOAD = "{\n .reg .b32 x;\n ld.shared.b32 x, [{$r0}];\n st.shared.b32 [{$r1}], x;\n mov.b32 {$w0}, x;\n}\n"
BULK = (
    " mbarrier.arrive.expect_tx.shared::cta.b64 _, [{$r2}], {$r3};\n"
    " cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [{$r0}], [{$r1}], {$r3}, [{$r2}];\n"
    " mov.b32 {$w0}, 0;\n"
)


@cute.kernel
def _kernel(out: cute.Tensor, src: cute.Tensor):
    tidx, _, _ = cute.arch.thread_idx()

    @cute.struct
    class Storage:
        bars: cute.struct.MemRange[Int64, 4]
        word: cute.struct.Align[cute.struct.MemRange[Int32, 32], 128]
        dst: cute.struct.Align[cute.struct.MemRange[Int32, BULK_BYTES // 4], 128]

    storage = cutlass.memory.SmemAllocator().allocate(Storage)
    bars = storage.bars.data_ptr()
    pending, done, bulk = bars, bars + 1, bars + 2
    word = storage.word.data_ptr()
    dst = storage.dst.data_ptr()
    with cute.arch.elect_one():
        cute.arch.mbarrier_init(pending, 2)  # two arrivals expected, one ever comes
        cute.arch.mbarrier_init(done, 1)
        cute.arch.mbarrier_init(bulk, 1)
    cute.arch.mbarrier_init_fence()
    cute.arch.sync_threads()
    with cute.arch.elect_one():
        cute.arch.mbarrier_arrive(done)  # phase 0 of `done` completes now
        cute.arch.mbarrier_arrive(pending)  # `pending` stays at phase 0, incomplete
    cute.arch.sync_threads()

    sink = Int32(0)
    is_lane0 = tidx == 0
    zero = Int32(0)
    flag = word + 1  # where the predicated stores land
    for r in cutlass.range(REPS, unroll=1):
        row = r * COLUMNS
        timings = []
        c, g, v = _timed(lambda: _ptx(TRY_USED, done, zero, flag))
        timings.append((c, g))
        c, g, v = _timed(lambda: _ptx(TRY_USED, pending, zero, flag))
        timings.append((c, g))
        for hint in cutlass.range_constexpr(len(HINTS_NS)):
            c, g, v = _timed(lambda: _ptx(TRY_HINT_USED, pending, zero, flag, Int32(HINTS_NS[hint])))
            timings.append((c, g))
        # The predicate stays unread until after the second clock read.
        c, g, ready = _timed(lambda: cute.arch.mbarrier_try_wait(pending, 0))
        timings.append((c, g))
        if ready:
            sink += 1
        c, g, v = _timed(lambda: _ptx(LOAD, word, flag))
        timings.append((c, g))
        sink += v
        c, g, pair = _timed(lambda: (cute.arch.mbarrier_try_wait(pending, 0), _ptx(LOAD, word, flag)))
        timings.append((c, g))
        sink += pair[1]
        if pair[0]:
            sink += 1
        for i in cutlass.range_constexpr(len(timings)):
            if is_lane0:
                out[row + i, 0] = timings[i][0]
                out[row + i, 1] = timings[i][1]
        col = len(timings)
        # One lane issues the bulk copies (the TMA engine), alone and behind a pending probe.
        if is_lane0:
            c, g, v = _timed(lambda: _ptx(BULK, dst, src.iterator, bulk, Int32(BULK_BYTES)))
            out[row + col, 0] = c
            out[row + col, 1] = g
            cute.arch.mbarrier_wait(bulk, 0)
            c, g, pair = _timed(lambda: (cute.arch.mbarrier_try_wait(pending, 0),
                                         _ptx(BULK, dst, src.iterator, bulk, Int32(BULK_BYTES))))
            out[row + col + 1, 0] = c
            out[row + col + 1, 1] = g
            if pair[0]:
                sink += 1
            cute.arch.mbarrier_wait(bulk, 1)
        c, g, v = _timed(lambda: _ptx(TEST_USED, pending, zero, flag))
        if is_lane0:
            out[row + col + 2, 0] = c
            out[row + col + 2, 1] = g
    if sink == -12345:  # never true; keeps the consumed predicates alive
        out[0, 0] = Int64(sink)


@cute.jit
def _launch(out: cute.Tensor, src: cute.Tensor, stream):
    _kernel(out, src).launch(grid=(1, 1, 1), block=(32, 1, 1), stream=stream)


def compile_only(target: str = "sm_90a"):
    """Compile for ``target`` without a GPU (to read the SASS)."""
    from cutlass.cute.runtime import make_fake_compact_tensor, make_fake_stream

    out = make_fake_compact_tensor(Int64, (REPS * COLUMNS, 2), stride_order=(1, 0), assumed_align=16)
    src = make_fake_compact_tensor(Int32, (BULK_BYTES // 4,), assumed_align=16)
    return cute.compile(_launch, out, src, make_fake_stream(), options=f"--gpu-arch {target} --keep-cubin")


def run() -> dict:
    import torch
    from cutlass.cute.runtime import from_dlpack

    out = torch.zeros(REPS * COLUMNS, 2, dtype=torch.int64, device="cuda")
    src = torch.arange(BULK_BYTES // 4, dtype=torch.int32, device="cuda")
    stream = torch.cuda.current_stream()
    import cuda.bindings.driver as cuda_driver

    fn = cute.compile(_launch, from_dlpack(out, assumed_align=16), from_dlpack(src, assumed_align=16),
                      cuda_driver.CUstream(stream.cuda_stream))
    for _ in range(2):  # the first launch warms the instruction cache
        fn(from_dlpack(out, assumed_align=16), from_dlpack(src, assumed_align=16),
           cuda_driver.CUstream(stream.cuda_stream))
    torch.cuda.synchronize()
    table = out.view(REPS, COLUMNS, 2).cpu()
    results = {}
    for j, name in enumerate(NAMES):
        cycles = table[1:, j, 0].tolist()  # drop the first repetition (cold)
        ns = table[1:, j, 1].tolist()
        results[name] = {
            "cycles_median": statistics.median(cycles),
            "cycles_min": min(cycles),
            "cycles_max": max(cycles),
            "ns_median": statistics.median(ns),
        }
    return {"gpu": torch.cuda.get_device_name(), "reps": REPS - 1, "results": results,
            "sm_clock_mhz": torch.cuda.clock_rate() if hasattr(torch.cuda, "clock_rate") else None}


def markdown(report: dict) -> str:
    lines = [
        "# mbarrier.try_wait microbenchmark",
        "",
        f"{report['gpu']}; one warp; median over {report['reps']} repetitions inside one kernel. "
        "Cycles from %clock64 (SM clock), ns from %globaltimer (coarse: ~32 ns ticks on recent GPUs).",
        "",
        "| measurement | cycles (median) | min | max | ns (median) |",
        "|---|---|---|---|---|",
    ]
    for name, r in report["results"].items():
        lines.append(f"| {name} | {r['cycles_median']:.0f} | {r['cycles_min']:.0f} | {r['cycles_max']:.0f} | {r['ns_median']:.0f} |")
    lines += ["", "Regenerate on a Hopper GPU: `python -m benchmarks.studies.trywait_microbench`"]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.studies.trywait_microbench", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default=str(RESULTS), help="output folder (default: benchmarks/results/)")
    p.add_argument("--sass", action="store_true", help="also write the kernel's SASS (needs nvdisasm)")
    args = p.parse_args(argv)
    report = run()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "trywait_microbench.json").write_text(json.dumps(report, indent=2) + "\n")
    (out / "trywait_microbench.md").write_text(markdown(report))
    print(markdown(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
