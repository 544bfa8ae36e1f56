"""06 -- Step through the ring: every barrier's word at every step, then plant a fault.

Teaches: what the mbarriers of the pipeline hold while it runs. The model of the
kernel (wsgemm.pipeline_sim) is stepped one operation at a time -- a role's next
instruction, a TMA copy landing, an MMA completing, a commit arriving -- and after
each step every barrier is printed with the fields of its 64-bit word (PTX defines
what the word holds, not where): the phase (and its parity bit), the arrivals still
missing in that phase, and the transaction bytes still expected. Waits and probes
print the parity they ask for and the answer. Same schedule as the diagram in
docs/pipeline.md: the roles in order, before the hardware.

Then plant a bug with --fault and watch it go wrong: the step-through stops where it
breaks (or where nothing can move: a deadlock), and the checker, exploring every
interleaving, names the violation. ``missing-phase-flip`` replaces the kernels' own
``stages.empty_wait_parity`` (which the model calls) with one that forgets to flip the
parity when a role wraps around its ring: on lap 1 the producer asks empty[s] for
lap 0's parity again, which a barrier still in phase 0 counts as completed, so it
refills the slot without waiting for its release (the MMA warp's wait on
acc_empty[b] does the same). The other faults are the model's planted bugs
(``wsgemm.pipeline_sim.Fault``).

Needs: any machine (CPU model, no GPU).
Run:   python examples/06_step_through_the_ring.py [--structure sm100|sm90|sm90_pingpong]
                                                   [--fault missing-phase-flip|...] [--list-faults]
"""

import argparse
import sys

from wsgemm import Lookahead
from wsgemm.kernels.common import stages
from wsgemm.pipeline_sim import (
    Fault,
    Machine,
    PipelineSpec,
    ProtocolViolation,
    Structure,
    build_kernel,
    explore_exhaustively,
    fault_applies,
)
from wsgemm.pipeline_sim.ops import TryWait, Wait

MISSING_PHASE_FLIP = "missing-phase-flip"


def fault_names(structure: Structure) -> list[str]:
    return [MISSING_PHASE_FLIP] + [f.value.replace("_", "-") for f in Fault if fault_applies(f, structure)]


def make_spec(structure: Structure, fault: str | None) -> PipelineSpec:
    """Two laps of a 2-slot ring: 2 tiles of 2 k-blocks (SM100: 1 accumulator buffer)."""
    planted = None if fault in (None, MISSING_PHASE_FLIP) else Fault(fault.replace("-", "_"))
    return PipelineSpec(structure, stages=2, tiles=2, k_blocks=2, acc_stages=1,
                        lookahead=Lookahead.BEFORE_COPY, fault=planted)


def plant_missing_phase_flip() -> None:
    """Every wait on an empty barrier asks for lap 0's parity, lap after lap."""
    first_lap = stages.empty_wait_parity(0, 2)
    stages.empty_wait_parity = lambda count, num_stages: first_lap


def barrier_words(m: Machine, changed: set[int]) -> str:
    cells = []
    for b, (name, bar) in enumerate(zip(m.barrier_names, m.barriers)):
        mark = "*" if b in changed else " "
        cells.append(f"{mark}{name:<12} phase {bar.phase} (parity {bar.parity})  "
                     f"pending {bar.pending}/{bar.expected}  tx {bar.tx:>6} B")
    return "\n".join(f"        {cell}" for cell in cells)


def describe(m: Machine, step) -> str:
    """The step, with the parity a wait or probe asks for and what it gets."""
    text = m.describe(step)
    if step.kind != "role":
        return text
    op = m.next_op(step.arg)
    if isinstance(op, (TryWait, Wait)):
        done = m.barriers[op.barrier].test_wait(op.parity)
        text += f"  -> phase of parity {op.parity} {'completed' if done else 'pending'}"
        if isinstance(op, Wait) and op.unless_token:
            text += f", token {m.tokens[step.arg]}"
    return text


def step_through(spec: PipelineSpec) -> ProtocolViolation | None:
    """Run ``spec`` once, printing every step and the barrier words after it."""
    m = Machine(build_kernel(spec))
    print(f"barriers at the start ({spec.short()}):")
    print(barrier_words(m, set()))
    number = 0
    while not m.finished():
        steps = m.enabled_steps()
        if not steps:
            return m.deadlock()
        step = steps[0]  # the roles in order, then the hardware
        number += 1
        line = describe(m, step)
        before = list(m.barriers)
        try:
            m.apply(step)
        except ProtocolViolation as violation:
            print(f"\nstep {number:3}: {line}")
            return violation
        changed = {b for b, old in enumerate(before) if m.barriers[b] != old}
        print(f"\nstep {number:3}: {line}")
        if changed:
            print(barrier_words(m, changed))
    try:
        m.check_final()
    except ProtocolViolation as violation:
        return violation
    return None


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--structure", default=Structure.SM100.value, choices=[s.value for s in Structure])
    parser.add_argument("--fault", help="plant a bug (see --list-faults)")
    parser.add_argument("--list-faults", action="store_true", help="the faults this structure can take")
    args = parser.parse_args(argv)
    structure = Structure(args.structure)
    if args.list_faults:
        print("\n".join(fault_names(structure)))
        return 0
    if args.fault is not None and args.fault not in fault_names(structure):
        parser.error(f"--fault {args.fault}: {structure.value} takes one of {', '.join(fault_names(structure))}")
    if args.fault == MISSING_PHASE_FLIP:
        plant_missing_phase_flip()
    spec = make_spec(structure, args.fault)

    print("1. One schedule, step by step (* marks the barriers the step changed)\n")
    violation = step_through(spec)
    if violation is None:
        print("\n   ran to the end: every tile stored once, no protocol violation")
    else:
        print(f"\n   STOPPED: {violation}")

    print("\n2. The checker: every interleaving of the same roles and hardware")
    result = explore_exhaustively(spec)
    print(f"   {result.summary()}")
    for finding in result.findings.values():
        print(f"   {finding.kind.value}: {finding.message}\n   last steps:")
        print("\n".join(f"     {step}" for step in finding.trace[-6:]))
    if args.fault is None:
        return 0 if result.safe and violation is None else 1
    return 0 if not result.safe else 1  # a planted fault must be caught


if __name__ == "__main__":
    sys.exit(main())
