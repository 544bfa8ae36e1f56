"""Explore the interleavings of a modelled CTA and report every protocol violation.

Two ways to explore the same machine (:mod:`.machine`):

* :func:`explore_exhaustively` -- depth-first over *every* choice of the next step
  (any role's next op, any TMA copy landing, any MMA group or commit completing),
  remembering each state it has seen so that orders reaching the same state are
  explored once. For small rings, tile and k-block counts this visits the whole
  state space: no deadlock and no violation there is a proof for that size.
* :func:`explore_randomly` -- many random schedules to completion, for sizes whose
  state space is too large to enumerate; finding nothing is evidence, not proof.
  Each run gives every role and the hardware its own random speed, so slow
  hardware and slow roles both get their turn.

A probe (``try_wait``) answers with the barrier's state when it runs. A probe that
the hardware would have suspended until the phase completed is the same as the
completion being scheduled before the probe, so every answer a probe can give is
covered by the interleavings.
"""

from __future__ import annotations

import random
from collections import deque
from dataclasses import dataclass, field

from .cluster import ClusterSpec, build_cluster
from .machine import Machine, ProtocolViolation, Violation
from .roles import KernelModel, build_kernel
from .spec import PipelineSpec

TRACE_TAIL = 40  # steps kept before a finding (the start of a long run rarely matters)


@dataclass(frozen=True)
class Finding:
    kind: Violation
    message: str
    trace: tuple[str, ...]  # the last steps before it, oldest first


def build_model(spec: PipelineSpec | ClusterSpec) -> KernelModel:
    """One CTA's roles (:mod:`.roles`) or a cluster's (:mod:`.cluster`)."""
    return build_cluster(spec) if isinstance(spec, ClusterSpec) else build_kernel(spec)


@dataclass
class CheckResult:
    spec: PipelineSpec | ClusterSpec
    exhaustive: bool  # True: every interleaving (up to the state limit); False: random runs
    states: int  # distinct states visited (exhaustive) or steps executed (random)
    completed_runs: int  # executions that reached the end (distinct end states when exhaustive)
    complete: bool  # exhaustive search ended before the state limit (always False for random)
    findings: dict[Violation, Finding] = field(default_factory=dict)

    @property
    def kinds(self) -> set[Violation]:
        return set(self.findings)

    @property
    def safe(self) -> bool:
        """No violation found (a proof only when ``exhaustive and complete``)."""
        return not self.findings

    def record(self, violation: ProtocolViolation, trace) -> None:
        if violation.kind not in self.findings:
            self.findings[violation.kind] = Finding(violation.kind, violation.message, tuple(trace)[-TRACE_TAIL:])

    def summary(self) -> str:
        how = (f"exhaustive, {self.states} states" + ("" if self.complete else " (state limit hit)")
               if self.exhaustive else f"random, {self.completed_runs} runs, {self.states} steps")
        verdict = "safe" if self.safe else "caught: " + ", ".join(sorted(k.value for k in self.kinds))
        return f"{verdict} ({how})"


def explore_exhaustively(spec: PipelineSpec | ClusterSpec, max_states: int = 500_000) -> CheckResult:
    """Visit every reachable state of ``spec`` (depth-first, memoised)."""
    result = CheckResult(spec, exhaustive=True, states=1, completed_runs=0, complete=True)
    root = Machine(build_model(spec))
    seen = {root.key()}
    if not root.enabled_steps():  # every role blocked at its first instruction
        _judge_end(root, result, [])
        return result
    # Each frame: a state, its enabled steps, and how many of them were tried.
    stack = [[root, root.enabled_steps(), 0]]
    path: list[str] = []  # path[i] = the step from stack[i] to stack[i + 1]
    while stack:
        frame = stack[-1]
        machine, steps, tried = frame
        if tried == len(steps):
            stack.pop()
            if path:
                path.pop()
            continue
        frame[2] += 1
        step = steps[tried]
        child = machine.clone()
        try:
            child.apply(step)
        except ProtocolViolation as v:
            result.record(v, path + [machine.describe(step)])
            continue
        key = child.key()
        if key in seen:
            continue
        seen.add(key)
        if len(seen) > max_states:
            result.complete = False
            break
        child_steps = child.enabled_steps()
        if child_steps:
            stack.append([child, child_steps, 0])
            path.append(machine.describe(step))
        else:
            _judge_end(child, result, path + [machine.describe(step)])
    result.states = len(seen)
    return result


def explore_randomly(spec: PipelineSpec | ClusterSpec, runs: int = 200, seed: int = 0) -> CheckResult:
    """Run ``runs`` random executions.

    Races show up when one side is slow: a release before its MMA completed is only
    caught if the MMA completes late, an epilogue that releases before reading only
    if it then reads late. So each run gives every role, and the asynchronous
    hardware as a whole, its own random speed, and picks each next step with
    probability proportional to the speed of whoever takes it.
    """
    result = CheckResult(spec, exhaustive=False, states=0, completed_runs=0, complete=False)
    kernel = build_model(spec)
    rng = random.Random(seed)
    for _ in range(runs):
        machine = Machine(kernel)
        role_speed = [rng.random() for _ in kernel.role_names]
        hardware_speed = rng.random()
        trace: deque[str] = deque(maxlen=TRACE_TAIL)
        while True:
            steps = machine.enabled_steps()
            if not steps:
                _judge_end(machine, result, trace)
                break
            speeds = [role_speed[s.arg] if s.kind == "role" else hardware_speed for s in steps]
            step = rng.choices(steps, weights=speeds)[0] if sum(speeds) > 0 else rng.choice(steps)
            trace.append(machine.describe(step))
            result.states += 1
            try:
                machine.apply(step)
            except ProtocolViolation as v:
                result.record(v, trace)
                break
    return result


def _judge_end(machine: Machine, result: CheckResult, trace) -> None:
    if not machine.finished():
        result.record(machine.deadlock(), trace)
        return
    try:
        machine.check_final()
    except ProtocolViolation as v:
        result.record(v, trace)
        return
    result.completed_runs += 1
