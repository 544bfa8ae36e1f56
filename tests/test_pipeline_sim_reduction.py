"""The partial-order reduction (pipeline_sim.reduction) against the full explorer and
against its own definition: on small models the reduced explorer reaches the same
verdict and the same kinds of violation (each single-CTA kernel, every planted bug);
on sampled states the set it explores is persistent, checked by enumerating the
sequences of steps outside it; and a token it clears makes no difference. The cluster
configurations, co-resident clusters and cluster bugs are cross-checked in
test_pipeline_sim_cluster.py."""

import random

import pytest

from wsgemm import GemmConfig
from wsgemm.config import Lookahead
from wsgemm.pipeline_sim import (
    Fault,
    Machine,
    PipelineSpec,
    ProtocolViolation,
    Structure,
    explore_exhaustively,
    fault_applies,
)
from wsgemm.pipeline_sim.checker import build_model
from wsgemm.pipeline_sim.cluster import ClusterFault, ClusterSpec
from wsgemm.pipeline_sim.reduction import Reduction

POLICIES = list(Lookahead)


def cluster(config, policy=Lookahead.BEFORE_COPY, stages=1, tiles=2, k_blocks=1, **kwargs):
    kwargs.setdefault("acc_stages", 1)
    return ClusterSpec.of(GemmConfig(**config, lookahead=policy), stages=stages, tiles=tiles, k_blocks=k_blocks,
                          **kwargs)


# -- the same verdict as the full explorer ------------------------------------------------------

SINGLE_CTA = [PipelineSpec(structure, 2, 2, 2, policy) for structure in Structure for policy in POLICIES]
PLANTED = [PipelineSpec(structure, 2, 2, 2, policy, acc_stages=1, fault=fault)
           for structure in Structure for fault in Fault if fault_applies(fault, structure)
           for policy in (Lookahead.NONE, Lookahead.BEFORE_COPY)]


@pytest.mark.parametrize("spec", SINGLE_CTA + PLANTED, ids=lambda s: s.short())
def test_the_reduced_explorer_reaches_the_full_explorers_verdict(spec):
    full = explore_exhaustively(spec)
    reduced = explore_exhaustively(spec, reduce=True)
    assert full.complete and reduced.complete
    assert reduced.kinds == full.kinds, (full.summary(), reduced.summary())
    # Ends reached without a violation: both or neither.
    assert (reduced.completed_runs > 0) == (full.completed_runs > 0)
    assert reduced.states <= full.states
    if spec.fault is not None:
        assert not reduced.safe


# -- the chosen sets are persistent ------------------------------------------------------------

def identity(machine: Machine, step) -> tuple:
    """What a step is, independent of the state it is taken in: a role's op by its pc,
    an MMA completion by how many of the queue's groups completed before it."""
    if step.kind == "role":
        return "role", step.arg, machine.pcs[step.arg]
    if step.kind == "mma":
        return "mma", step.arg, machine.mmas_completed[step.arg]
    return step.kind, step.arg


def take(machine: Machine, step, reduction: Reduction):
    """(the next state, None) or (None, the kind of violation the step raises)."""
    after = machine.clone()
    try:
        after.apply(step)
    except ProtocolViolation as v:
        return None, v.kind
    reduction.forget_tokens(after)
    return after, None


def find(machine: Machine, wanted: tuple):
    return next((s for s in machine.enabled_steps() if identity(machine, s) == wanted), None)


def persistence_failure(machine: Machine, reduction: Reduction, limit: int) -> str | None:
    """Why the set the reduction chooses at ``machine`` is not persistent (None if it is,
    up to ``limit`` states reached by steps outside it): along any such sequence each
    chosen step stays enabled, and commutes with the next outside step -- same state,
    and a violation on either side raised either way."""
    enabled = machine.enabled_steps()
    chosen = {identity(machine, s) for s in reduction.persistent(machine, enabled)}
    if len(chosen) == len(enabled):
        return None
    stack, seen = [machine], {machine.key()}
    while stack and len(seen) < limit:
        state = stack.pop()
        for t_id in chosen:
            if find(state, t_id) is None:
                return f"{t_id} disabled by steps outside the set"
        for u in state.enabled_steps():
            u_id = identity(state, u)
            if u_id in chosen:
                continue
            after_u, u_violates = take(state, u, reduction)
            for t_id in chosen:
                t = find(state, t_id)
                after_t, t_violates = take(state, t, reduction)
                if t_violates is None and u_violates is None:
                    t_next, u_next = find(after_u, t_id), find(after_t, u_id)
                    if t_next is None or u_next is None:
                        return f"{t_id} and {u_id} disable each other"
                    (tu, tu_v), (ut, ut_v) = take(after_u, t_next, reduction), take(after_t, u_next, reduction)
                    if tu_v or ut_v or tu.key() != ut.key():
                        return f"{state.describe(t)!r} and {state.describe(u)!r} do not commute"
                elif t_violates is not None and u_violates is None:
                    t_next = find(after_u, t_id)
                    if t_next is None or take(after_u, t_next, reduction)[1] is not t_violates:
                        return f"{state.describe(u)!r} prevents the {t_violates.value} of {state.describe(t)!r}"
                elif u_violates is not None and t_violates is None:
                    u_next = find(after_t, u_id)
                    if u_next is None or take(after_t, u_next, reduction)[1] is not u_violates:
                        return f"{state.describe(t)!r} prevents the {u_violates.value} of {state.describe(u)!r}"
            if after_u is not None and after_u.key() not in seen:
                seen.add(after_u.key())
                stack.append(after_u)
    return None


PERSISTENCE = [
    cluster(dict(cluster_m=2, two_cta=True), Lookahead.BEFORE_COPY),
    cluster(dict(cluster_m=2), Lookahead.AFTER_COPY, stages=1, tiles=1, k_blocks=2),
    cluster(dict(cluster_m=2, two_cta=True), Lookahead.NONE, fault=ClusterFault.EXPECT_TX_OF_ONE_CTA),
    cluster(dict(cluster_m=2), Lookahead.BEFORE_COPY, fault=ClusterFault.DROPS_PRODUCER_TAIL),
    PipelineSpec(Structure.SM90, 2, 2, 2, Lookahead.NONE, fault=Fault.CONSUMER_PARITY_FLIPPED),
    PipelineSpec(Structure.SM90_PINGPONG, 2, 2, 2, Lookahead.BEFORE_COPY),
    PipelineSpec(Structure.SM100, 2, 2, 2, Lookahead.AFTER_COPY, acc_stages=1, fault=Fault.EARLY_ACC_RELEASE),
]


@pytest.mark.parametrize("spec", PERSISTENCE, ids=lambda s: s.short())
def test_the_chosen_sets_are_persistent(spec):
    # The first 60 states the reduced explorer visits, each against up to 300 states
    # reached by steps outside its chosen set.
    reduction = Reduction(build_model(spec))
    root = Machine(reduction.kernel)
    stack, seen, checked = [root], {root.key()}, 0
    while stack and checked < 60:
        machine = stack.pop()
        failure = persistence_failure(machine, reduction, limit=300)
        assert failure is None, failure
        checked += 1
        for step in reduction.persistent(machine, machine.enabled_steps()):
            after, _ = take(machine, step, reduction)
            if after is not None and after.key() not in seen:
                seen.add(after.key())
                stack.append(after)
    assert checked == 60


# -- a cleared token makes no difference ----------------------------------------------------------

def outcomes(machine: Machine) -> tuple[set, set]:
    """Every kind of violation reachable from ``machine``, and every end state (tokens
    aside: all are dead at the end), by the full explorer's rules."""
    kinds, ends = set(), set()
    stack, seen = [machine], {machine.key()}
    while stack:
        state = stack.pop()
        steps = state.enabled_steps()
        if not steps:
            key = state.key()
            ends.add((state.finished(), key[:1] + key[2:]))  # key[1]: the tokens
        for step in steps:
            after = state.clone()
            try:
                after.apply(step)
            except ProtocolViolation as v:
                kinds.add(v.kind)
                continue
            if after.key() not in seen:
                seen.add(after.key())
                stack.append(after)
    return kinds, ends


TOKENS = [
    PipelineSpec(Structure.SM100, 2, 2, 2, Lookahead.BEFORE_COPY, acc_stages=1),
    PipelineSpec(Structure.SM90, 2, 2, 2, Lookahead.AFTER_COPY),
    cluster(dict(cluster_m=2, two_cta=True), Lookahead.BEFORE_COPY, tiles=1, k_blocks=2),
    # Faults under which a true token can go stale (a phase completes again before the
    # Wait reads it): there it must be kept.
    PipelineSpec(Structure.SM100, 2, 2, 2, Lookahead.AFTER_COPY, acc_stages=1, fault=Fault.CONSUMER_PARITY_FLIPPED),
    PipelineSpec(Structure.SM90_PINGPONG, 2, 2, 2, Lookahead.BEFORE_COPY, fault=Fault.SKIPS_MAINLOOP_TURN),
]


@pytest.mark.parametrize("spec", TOKENS, ids=lambda s: s.short())
def test_a_cleared_token_changes_nothing_that_can_happen(spec):
    # States (of random walks) where a role holds a true token that a Wait will still
    # read: where the reduction clears it, the same violations and the same ends are
    # reachable with the token as without it.
    reduction = Reduction(build_model(spec))
    rng = random.Random(1)
    compared = 0
    for _ in range(300):
        machine = Machine(reduction.kernel)
        while (steps := machine.enabled_steps()) and compared < 6:
            try:
                machine.apply(rng.choice(steps))
            except ProtocolViolation:
                break
            live = [r for r, token in enumerate(machine.tokens)
                    if token and reduction.token_reader[r][machine.pcs[r]] is not None]
            cleared = machine.clone()
            reduction.forget_tokens(cleared)
            if any(not cleared.tokens[r] for r in live):
                assert outcomes(machine) == outcomes(cleared)
                compared += 1
    assert compared == 6
