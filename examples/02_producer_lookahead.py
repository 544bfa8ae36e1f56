"""02 -- The producer's look-ahead probe: three placements, checked and timed in the model.

Teaches: CUTLASS's SM100 ``load()`` probes the *next* slot (``producer_try_acquire``)
before issuing the current slot's TMA copies. Is that needed for correctness? The
checker says no: all three placements (before the copies, after them, none) are
safe in every interleaving, because a probe's answer is only a hint. A planted bug
(trusting a "not ready" answer) is caught. The timeline model then shows what the
placement can change -- the producer's reaction time -- and that with the probe
behaviour measured on H100 and H200 (docs/producer-lookahead.md, part 2) it barely
matters: the warp keeps issuing after a probe and waits only where it reads the
answer. Last, what the early probe would cost if the warp stopped at the probe itself.

Needs: any machine (CPU model, no GPU); matplotlib for the charts (optional).
Run:   python examples/02_producer_lookahead.py [OUT_DIR]   (charts: a temp dir by default)
"""

import sys
import tempfile
from pathlib import Path

from wsgemm import Lookahead
from wsgemm.pipeline_sim import (
    Fault,
    Latencies,
    PipelineSpec,
    Structure,
    Violation,
    build_kernel,
    compare_policies,
    draw_gantt,
    explore_exhaustively,
    format_report,
    timeline_spec,
)

print("1. Where each policy puts the probe: the producer's first k-block, as the model runs it")
for policy in Lookahead:
    kernel = build_kernel(PipelineSpec(Structure.SM90, stages=2, tiles=1, k_blocks=2, lookahead=policy))
    ops = [op.describe(kernel) for op in kernel.programs[0][:6]]
    print(f"   {policy.value:12} " + "\n   {:12} ".format("").join(ops))

print("\n2. Every interleaving, every policy (stages x tiles x k-blocks = 3 x 2 x 3)")
for structure in Structure:
    for policy in Lookahead:
        result = explore_exhaustively(PipelineSpec(structure, 3, 2, 3, policy))
        print(f"   {structure.value:13} {policy.value:12} {result.summary()}")

print("\n3. A planted bug: the producer skips the wait although its probe said 'not ready'")
result = explore_exhaustively(PipelineSpec(Structure.SM90, 2, 2, 2, fault=Fault.TRUSTS_UNREADY_TOKEN))
finding = result.findings[Violation.STAGE_OVERWRITTEN]
print(f"   {finding.kind.value}: {finding.message}\n   last steps:")
print("\n".join(f"     {step}" for step in finding.trace[-6:]))

print("\n4. Timeline MODEL of the default kernel shape (latencies: wsgemm.pipeline_sim.timeline.Latencies)")
spec = timeline_spec(Structure.SM90)
timelines = compare_policies(spec)
print("   " + format_report(timelines).replace("\n", "\n   "))
print("\n   What if a probe that finds its phase pending stopped the warp (the literal reading")
print("   of PTX; measured, it does not), for up to LIMIT us? The last LIMIT is the measured")
print("   time limit of an unhinted try_wait (Latencies.try_wait_limit_us).")
for limit in (0.1, 0.5, 1.0, Latencies().try_wait_limit_us):
    before, after, none = compare_policies(spec, Latencies(probe_blocks_issue=True, try_wait_limit_us=limit))
    print(f"   LIMIT {limit:4} us: before_copy {before.makespan_us:6.2f} us, after_copy "
          f"{after.makespan_us:6.2f} us, none {none.makespan_us:6.2f} us "
          f"(refill latency {before.mean_refill_latency_us:.2f} vs {after.mean_refill_latency_us:.2f} us)")

out_dir = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp(prefix="wsgemm-model-"))
try:
    out_dir.mkdir(parents=True, exist_ok=True)
    for structure in Structure:
        path = out_dir / f"lookahead-{structure.value}.png"
        draw_gantt(compare_policies(timeline_spec(structure)), path)
        print(f"\nGantt chart ({structure.value}, one panel per policy): {path}")
except ImportError as missing:
    print(f"\nNo charts: {missing}")
