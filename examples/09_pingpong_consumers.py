"""09 -- Ping-pong consumers: one warpgroup's epilogue under the other's mainloop.

Teaches: what ``GemmConfig(pingpong=True)`` changes in the SM90 kernel and why it
needs a hand-over between its two consumer warpgroups. Cooperative consumers share
every tile (64 rows each), so while they convert and store a tile the tensor cores
idle; with a short k-loop that is a large share of the run. Ping-pong consumers own
alternate tiles whole: while warpgroup 0 stores tile 0, warpgroup 1 runs tile 1's
mainloop. Both wait on the same ring of full barriers, and a parity wait cannot tell
a phase from the one two laps earlier, so each warpgroup starts a mainloop only when
the other hands it over (a named barrier).

Part 1 compiles both kinds and reads the PTX: wgmma per k-block, the hand-over, the
per-warpgroup epilogue barriers, and the registers a whole tile's accumulators take.
Part 2 runs the CPU pipeline model: every interleaving of the ping-pong roles is
safe, the same roles without the hand-over read bytes that never landed, and the
timeline model shows the epilogue overlap. Part 3 times both on the GPU: on an H200
at 8192x8192x512, 128x256 cooperative took 116.3 us and 128x192 ping-pong 98.8 us
with four epilogue buffers per warpgroup (benchmarks/results/sweep_pp192_k.json.gz;
NOTES section 19); with section 20's kernel changes and three buffers, which keep a
fifth ring stage, the default ran this shape 3 % faster again (731.9 against 708.3
TFLOP/s for the code before, benchmarks/results/suite_shortk_batched.json.gz; NOTES
section 20). wsgemm's default path uses ping-pong for k-loops up to K = 1536,
and where 128x128 tiles fill one wave at K >= 2048: each CTA then has one tile,
which one warpgroup runs alone, faster than a cooperative pair (NOTES section 21).

Needs: any machine for parts 1 and 2 (compile only, CPU model); an SM90 GPU (H100 or
H200) for part 3, which is skipped with a message without one.
Run:   python examples/09_pingpong_consumers.py
"""

import re
import statistics

from wsgemm import GemmConfig
from wsgemm import config as cfg
from wsgemm.compile import compile_spec
from wsgemm.model import (
    Fault,
    PipelineSpec,
    Structure,
    Violation,
    explore_exhaustively,
    simulate,
    timeline_spec,
)

COOPERATIVE = GemmConfig(tile_m=128, tile_n=256, cluster_m=2, epi_stages=4)
# What the default path runs at 8192x8192x512: three epilogue buffers per warpgroup keep
# a fifth ring stage (benchmarks/NOTES.md section 20).
PINGPONG = GemmConfig(tile_m=128, tile_n=192, cluster_m=2, epi_stages=3, pingpong=True)


def part1() -> None:
    for config in (COOPERATIVE, PINGPONG):
        spec = cfg.make_spec("sm90", "bf16", "bf16", "k", "k", "n", config)
        ptx = compile_spec(spec, keep_artifacts=True).ptx
        regs = cfg.sm90_register_budget(config)
        budget = cfg.smem_budget(spec)
        wgmma = re.findall(r"wgmma\.mma_async\.sync\.aligned\.(m\d+n\d+k\d+)", ptx)
        syncs = sorted({int(n) for n in re.findall(r"bar\.sync\s+\S+,\s*(\d+)", ptx)})
        arrives = [int(n) for n in re.findall(r"bar\.arrive\s+\S+,\s*(\d+)", ptx)]
        print(spec.config.short())
        print(f"  wgmma per k-block per warpgroup: {len(wgmma)} x {wgmma[0]}"
              f"  ({cfg.tile_warpgroups(config)} warpgroup(s) share a tile)")
        print(f"  fp32 accumulators per consumer thread: {regs.accumulator_registers} of "
              f"{regs.consumer_registers} registers")
        print(f"  named barriers: bar.sync over {syncs} threads; bar.arrive over {arrives} threads")
        print(f"  shared memory: {budget.stages} stages, epilogue {budget.epi_bytes} B "
              f"({cfg.epilogue_buffer_sets(config)} set(s) of {config.epi_stages} buffers)\n")
    print("Cooperative: each k16 step is one 64x256 wgmma per warpgroup, and the epilogue's")
    print("barrier spans both warpgroups (256 threads). Ping-pong: one warpgroup issues both")
    print("64-row halves of its 128x192 tile; 128-thread barriers keep each epilogue to its")
    print("own warpgroup, and the 256-thread pair (bar.arrive by one, bar.sync by the other)")
    print("is the hand-over of the mainloop.\n")


def part2() -> None:
    spec = PipelineSpec(Structure.SM90_PINGPONG, stages=2, tiles=4, k_blocks=2)
    result = explore_exhaustively(spec)
    print(f"Model, {spec.short()}: {result.states} states, "
          f"{'no violation in any interleaving' if result.safe else result.summary()}")
    broken = explore_exhaustively(PipelineSpec(Structure.SM90_PINGPONG, 2, 2, 2, fault=Fault.SKIPS_MAINLOOP_TURN))
    finding = broken.findings[Violation.READ_BEFORE_LANDED]
    print(f"Without the hand-over: {finding.kind.value}: {finding.message}")
    print("  last steps:\n" + "\n".join(f"    {step}" for step in finding.trace[-4:]))
    print("  (consumer 1 waited for hand-over 2 -- slot 0, parity 1 -- earlier, while slot 0's")
    print("   full barrier was still in phase 0: a parity-1 wait passes at once there)\n")
    for structure in (Structure.SM90, Structure.SM90_PINGPONG):
        t = simulate(timeline_spec(structure))
        print(f"Timeline MODEL, {structure.value:13}: makespan {t.makespan_us:5.2f} us, "
              f"tensor core busy {t.tensor_core_busy_us / t.makespan_us:.0%}")
    print()


def part3() -> int:
    import torch

    if not (torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)):
        print("No SM90 GPU here (needs an H100 or H200): part 3 (timing) skipped.")
        return 0
    import wsgemm
    import wsgemm.timing

    m, n, k = 8192, 8192, 512
    a, b = torch.randn(m, k, device="cuda").bfloat16(), torch.randn(k, n, device="cuda").bfloat16()
    ref = torch.matmul(a.float(), b.float())
    flush = wsgemm.timing.L2Flush()  # the suite's and the autotuner's: read twice the L2, then spin
    runs = {"cooperative 128x256": lambda: wsgemm.gemm(a, b, config=COOPERATIVE),
            "ping-pong 128x192": lambda: wsgemm.gemm(a, b, config=PINGPONG),
            "default (config=None)": lambda: wsgemm.gemm(a, b),
            "torch.matmul": lambda: torch.matmul(a, b)}
    for name, fn in runs.items():
        err = ((fn().float() - ref).norm() / ref.norm()).item()
        assert err < 1e-2, (name, err)

    # Interleaved, so each sees the same GPU state.
    times = {name: [1000 * ms for ms in timed]
             for name, timed in wsgemm.timing.time_in_turns(runs, 20, flush).items()}
    print(f"{m}x{n}x{k} bf16, one call after an L2 flush (median of 20):")
    for name, us in times.items():
        median = statistics.median(us)
        print(f"  {name:24} {median:7.1f} us  {2 * m * n * k / median / 1e6:6.1f} TFLOP/s")
    print(f"\nThe default runs {wsgemm.api.make_plan(a, b, None, None, None).spec.config.short()}.")
    return 0


if __name__ == "__main__":
    part1()
    part2()
    raise SystemExit(part3())
