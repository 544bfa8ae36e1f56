"""Explore the interleavings of a modelled CTA and report every protocol violation.

Two ways to explore the same machine (:mod:`.machine`):

* :func:`explore_exhaustively` -- depth-first over *every* choice of the next step
  (any role's next op, any TMA copy landing, any MMA group or commit completing),
  remembering each state it has seen so that orders reaching the same state are
  explored once. For small rings, tile and k-block counts this visits the whole
  state space: no deadlock and no violation there is a proof for that size. With
  ``reduce=True`` it takes at each state only a persistent subset of the steps
  (:mod:`.reduction`), which reaches the same verdict on far fewer states: enough to
  enumerate a 4x2 cluster.
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
from .reduction import Reduction
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
    complete: bool  # exhaustive search visited all it set out to (always False for random)
    findings: dict[Violation, Finding] = field(default_factory=dict)
    reduced: bool = False  # exhaustive over a persistent subset of the steps (.reduction)
    stopped_at: Violation | None = None  # ended at the first finding of this kind

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
        if not self.exhaustive:
            how = f"random, {self.completed_runs} runs, {self.states} steps"
        else:
            how = "exhaustive" + (", reduced" if self.reduced else "") + f", {self.states} states"
            if self.stopped_at is not None:
                how += f" (stopped at the first {self.stopped_at.value})"
            elif not self.complete:
                how += " (state limit hit)"
        verdict = "safe" if self.safe else "caught: " + ", ".join(sorted(k.value for k in self.kinds))
        return f"{verdict} ({how})"


def explore_exhaustively(spec: PipelineSpec | ClusterSpec, max_states: int = 500_000, *, reduce: bool = False,
                         until: Violation | None = None) -> CheckResult:
    """Visit every reachable state of ``spec`` (depth-first, memoised).

    ``reduce``: at each state take only a persistent subset of the enabled steps and
    merge states that differ only in tokens no op will act on (:mod:`.reduction`);
    the verdict and the kinds of violation found are the same. ``until``: stop at the
    first finding of that kind (a counterexample, not a proof of anything else).
    """
    kernel = build_model(spec)
    reduction = Reduction(kernel) if reduce else None
    result = CheckResult(spec, exhaustive=True, states=1, completed_runs=0, complete=True, reduced=reduce)
    root = Machine(kernel)
    seen = {root.key()}

    def choices(machine: Machine):
        steps = machine.enabled_steps()
        return steps, reduction.persistent(machine, steps) if reduction else steps

    def stop() -> bool:
        if until is not None and until in result.findings:
            result.complete, result.stopped_at = False, until
            return True
        return False

    enabled, chosen = choices(root)
    if not enabled:  # every role blocked at its first instruction
        _judge_end(root, result, [])
        return result
    # Each frame: a state, the steps to try there, how many were tried, and all its
    # enabled steps (to fall back on when a chosen step raises).
    stack = [[root, chosen, 0, enabled]]
    path: list[str] = []  # path[i] = the step from stack[i] to stack[i + 1]
    while stack:
        frame = stack[-1]
        machine, steps, tried, enabled = frame
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
            if stop():
                break
            if len(steps) < len(enabled):  # no other violation may hide behind this one
                frame[1] = steps + [s for s in enabled if s not in steps]
            continue
        if reduction:
            reduction.forget_tokens(child)
        key = child.key()
        if key in seen:
            continue
        seen.add(key)
        if len(seen) > max_states:
            result.complete = False
            break
        child_enabled, child_chosen = choices(child)
        if child_enabled:
            stack.append([child, child_chosen, 0, child_enabled])
            path.append(machine.describe(step))
        else:
            _judge_end(child, result, path + [machine.describe(step)])
            if stop():
                break
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
