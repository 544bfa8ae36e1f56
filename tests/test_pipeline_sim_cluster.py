"""The SM100 kernel's protocol over a cluster (pipeline_sim.cluster): multicast copies,
a 2-CTA pair, remote arrivals, tensor memory per SM and co-resident clusters. The
kernel's protocol is safe in every interleaving for 1x1, 2x1 and 2x1 2-CTA clusters
(by the full explorer, and by the reduced one with the same result), and for 4x2
(1- and 2-CTA), 1x2 and 2x2 2-CTA clusters (by the reduced explorer,
pipeline_sim.reduction); each planted cluster bug is caught, in 2x1 and in 4x2."""

from dataclasses import replace

import pytest

from wsgemm import GemmConfig
from wsgemm import config as cfg
from wsgemm.config import Lookahead
from wsgemm.kernels.common.stages import empty_arrivals
from wsgemm.pipeline_sim import Machine, ProtocolViolation, Violation, explore_exhaustively
from wsgemm.pipeline_sim.cluster import ClusterFault, ClusterSpec, build_cluster
from wsgemm.pipeline_sim.machine import Step
from wsgemm.pipeline_sim.ops import ArriveExpectTx, Commit, IssueMma, TmaLoad, TmemAlloc, TmemDealloc

POLICIES = list(Lookahead)
ONE = dict()
ROW = dict(cluster_m=2)
PAIR = dict(cluster_m=2, two_cta=True)


def cluster(config, policy=Lookahead.BEFORE_COPY, stages=1, tiles=2, k_blocks=1, **kwargs):
    """The bf16 kernel make_spec builds for ``config``, at the model's sizes (one
    accumulator buffer unless told, so that tiles reuse it)."""
    kwargs.setdefault("acc_stages", 1)
    return ClusterSpec.of(GemmConfig(**config, lookahead=policy), stages=stages, tiles=tiles, k_blocks=k_blocks,
                          **kwargs)


def assert_proved_safe(spec, reduce=False):
    result = explore_exhaustively(spec, reduce=reduce)
    assert result.complete, f"{spec.short()}: state limit hit"
    assert result.safe, "\n".join(
        [spec.short()] + [f"{f.kind.value}: {f.message}\n  " + "\n  ".join(f.trace[-10:])
                          for f in result.findings.values()])
    assert result.completed_runs >= 1
    return result


def assert_proved_safe_both_ways(spec):
    """Safe by the full explorer, and by the reduced one on fewer states."""
    full = assert_proved_safe(spec)
    reduced = assert_proved_safe(spec, reduce=True)
    assert reduced.states < full.states


# -- the kernel's protocol is safe ------------------------------------------------------------

# (cluster, stages, tiles, k_blocks): each small enough to enumerate in a few seconds
# under every policy; together they wrap the ring, reuse the accumulator, and run the
# tensor-memory set-up and tear-down.
SAFE = [
    (ONE, 2, 2, 2),
    (ROW, 1, 1, 2),
    (PAIR, 1, 2, 2),
    (PAIR, 2, 1, 2),
]


@pytest.mark.parametrize("policy", POLICIES, ids=lambda p: p.value)
@pytest.mark.parametrize("case", SAFE, ids=lambda c: f"{cluster(c[0]).short().split(' s')[0]}-{c[1]}x{c[2]}x{c[3]}")
def test_every_interleaving_of_a_cluster_is_safe(case, policy):
    config, stages, tiles, k_blocks = case
    assert_proved_safe_both_ways(cluster(config, policy, stages, tiles, k_blocks))


def test_a_2x1_cluster_over_two_tiles_on_one_slot_is_safe():
    # Both CTAs refill their one slot and reuse their one accumulator buffer: every
    # refill waits for both MMAs' releases (empty counts 2), which the model checks.
    assert_proved_safe_both_ways(cluster(ROW, Lookahead.NONE, stages=1, tiles=2, k_blocks=1))


LARGER = [dict(cluster_m=4, cluster_n=2), dict(cluster_m=4, cluster_n=2, two_cta=True),
          dict(cluster_n=2), dict(cluster_m=2, cluster_n=2, two_cta=True)]


@pytest.mark.parametrize("policy", POLICIES, ids=lambda p: p.value)
@pytest.mark.parametrize("config", LARGER, ids=lambda c: cluster(c).short().split(" s")[0].replace(" ", "-"))
def test_every_interleaving_of_a_larger_cluster_is_safe(config, policy):
    # 4x2: eight CTAs, 20-24 roles with their copies, MMAs and commits -- far too many
    # interleavings for the full explorer, enumerated here with the reduction. Two
    # stages, two tiles of three k-blocks: every slot is refilled twice, the one
    # accumulator buffer reused.
    spec = cluster(config, policy, stages=2, tiles=2, k_blocks=3)
    result = assert_proved_safe(spec, reduce=True)
    assert result.states < 2_000


def test_the_full_explorer_cannot_enumerate_a_4x2_cluster():
    # What the reduction is for: on the same 4x2 spec as above the full explorer is
    # not done after ten times the states the reduced one needs.
    spec = cluster(dict(cluster_m=4, cluster_n=2), Lookahead.NONE, stages=2, tiles=2, k_blocks=3)
    reduced = explore_exhaustively(spec, reduce=True)
    assert reduced.complete and reduced.safe
    assert not explore_exhaustively(spec, max_states=10 * reduced.states).complete


# -- the model is laid out from the kernel spec -----------------------------------------------

def test_barrier_counts_come_from_the_kernels_functions():
    for config in (ROW, PAIR, dict(cluster_m=4, cluster_n=2)):
        spec = cluster(config)
        model = build_cluster(spec)
        counts = dict(zip(model.barrier_names, model.barrier_counts))
        c = spec.kernel.config
        assert counts["CTA 1 empty[0]"] == empty_arrivals(c.cluster_m, c.cluster_n, spec.pair, 1)
        assert counts["CTA 0 acc_empty[0]"] == 4 * spec.pair  # both CTAs' epilogue warps
        assert counts["CTA 0 full[0]"] == 1


def test_a_pair_leader_announces_both_ctas_bytes_and_the_peers_copies_complete_there():
    spec = cluster(PAIR)
    model = build_cluster(spec)
    name = model.barrier_names
    leader, peer = (model.programs[model.role_names.index(f"CTA {r} producer")] for r in (0, 1))
    budget = cfg.smem_budget(spec.kernel)
    assert {op.nbytes for op in leader if isinstance(op, ArriveExpectTx)} == {2 * budget.stage_bytes}
    assert not any(isinstance(op, ArriveExpectTx) for op in peer)
    assert {name[op.barrier] for op in peer if isinstance(op, TmaLoad)} == {"CTA 0 full[0]"}
    # Only the leader runs the MMA loop; its MMAs read both CTAs' slots.
    assert "CTA 1 mma" not in model.role_names
    mma = model.programs[model.role_names.index("CTA 0 mma")]
    issue = next(op for op in mma if isinstance(op, IssueMma))
    assert (model.slot_cta(issue.slot), *map(model.slot_cta, issue.peer_slots)) == (0, 1)
    commits = [tuple(name[b] for b in op.barriers) for op in mma if isinstance(op, Commit)]
    assert ("CTA 0 empty[0]", "CTA 1 empty[0]") in commits  # the slot release, to both
    assert ("CTA 0 acc_full[0]", "CTA 1 acc_full[0]") in commits  # accumulator full, to both


def test_copies_multicast_along_the_row_and_column():
    # 2x2 cluster, ranks m + 2n: CTA 0's A share goes to its row (0, 2), its B share to
    # its column (0, 1); each is half of the CTA's tile.
    spec = cluster(dict(cluster_m=2, cluster_n=2))
    model = build_cluster(spec)
    producer = model.programs[model.role_names.index("CTA 0 producer")]
    a, b = (next(op for op in producer if isinstance(op, TmaLoad) and op.operand == x) for x in "AB")
    assert sorted(model.slot_cta(slot) for slot, _ in a.destinations) == [0, 2]
    assert sorted(model.slot_cta(slot) for slot, _ in b.destinations) == [0, 1]
    assert (a.nbytes, b.nbytes) == (spec.a_bytes // 2, spec.b_bytes // 2)


def test_each_cta_allocates_its_columns_and_a_pair_deallocates_together():
    model = build_cluster(cluster(PAIR))
    epilogue = model.programs[model.role_names.index("CTA 1 epilogue")]
    alloc = next(op for op in epilogue if isinstance(op, TmemAlloc))
    assert (alloc.sm, alloc.columns) == (1, cfg.tmem_columns(cluster(PAIR).kernel))
    # The first op allocates and gives the permit up right after, as the kernel does;
    # there is no other allocation.
    assert epilogue[0] == TmemAlloc(1, 1, alloc.columns, relinquish=True)
    assert sum(isinstance(op, TmemAlloc) for op in epilogue) == 1
    ops = [type(op).__name__ for op in epilogue[-3:]]
    assert ops == ["Arrive", "Wait", "TmemDealloc"]
    assert epilogue[-1] == TmemDealloc(1, (1, 0))


def test_an_allocation_after_the_permit_is_given_up_is_caught():
    # The allocator gives the permit up with its allocation; one more tcgen05.alloc
    # after that (room for it on the SM: 256 of 512 columns) is what PTX forbids, and
    # the machine says so.
    spec = cluster(dict(tile_n=128), Lookahead.NONE, stages=1, tiles=1, k_blocks=1)
    model = build_cluster(spec)
    role = model.role_names.index("CTA 0 epilogue")
    alloc = model.programs[role][0]
    assert alloc.relinquish and alloc.columns == 256
    again = replace(model, programs=tuple((alloc, alloc) if r == role else program
                                          for r, program in enumerate(model.programs)))
    machine = Machine(again)
    machine.apply(Step("role", role))
    with pytest.raises(ProtocolViolation) as caught:
        machine.apply(Step("role", role))
    assert caught.value.kind is Violation.ALLOC_AFTER_RELINQUISH


# -- planted bugs are caught ----------------------------------------------------------------

CAUGHT = [
    # (cluster, fault, violation, what the finding says)
    (ROW, ClusterFault.SLOT_COMMIT_WITHOUT_PEER, Violation.DEADLOCK, "blocked at"),
    (PAIR, ClusterFault.SLOT_COMMIT_WITHOUT_PEER, Violation.DEADLOCK, "wait CTA 1 empty[0] parity 0'"),
    (PAIR, ClusterFault.ACC_COMMIT_WITHOUT_PEER, Violation.DEADLOCK, "CTA 1 epilogue blocked at 'wait CTA 1 acc_full"),
    (PAIR, ClusterFault.EXPECT_TX_OF_ONE_CTA, Violation.READ_BEFORE_LANDED, "CTA 0 mma read CTA 1 slot 0"),
    (PAIR, ClusterFault.DEALLOC_BEFORE_PEER_READ, Violation.TMEM_NOT_HELD, "CTA 1's tensor memory is freed"),
    # CTA 1 of a pair runs no MMA: the commit that arrives after it exited is the leader's.
    (PAIR, ClusterFault.DROPS_PRODUCER_TAIL, Violation.AFTER_EXIT,
     "CTA 0 mma's tcgen05.commit arrives on CTA 1 empty[0], but CTA 1 has exited"),
]


@pytest.mark.parametrize("policy", POLICIES, ids=lambda p: p.value)
@pytest.mark.parametrize("config, fault, expected, says", CAUGHT,
                         ids=[f"{'pair' if c.get('two_cta') else '2x1'}-{f.value}" for c, f, _, _ in CAUGHT])
def test_planted_cluster_bug_is_caught(config, fault, expected, says, policy):
    result = explore_exhaustively(cluster(config, policy, fault=fault))
    assert result.complete
    assert expected in result.kinds, result.summary()
    assert says in result.findings[expected].message
    assert result.findings[expected].trace
    # The reduced explorer finds every kind of violation the full one does.
    reduced = explore_exhaustively(cluster(config, policy, fault=fault), reduce=True)
    assert reduced.complete and reduced.kinds == result.kinds, reduced.summary()


# The same bugs in 4x2 clusters (the pair faults in 4x2 2-CTA), found by the reduced
# explorer, which stops at the first finding of the expected kind: a broken protocol
# leaves much less for the reduction to merge, and one counterexample is the point.
CAUGHT_4X2 = [
    (dict(cluster_m=4, cluster_n=2), ClusterFault.SLOT_COMMIT_WITHOUT_PEER, Violation.DEADLOCK, "blocked at"),
    (dict(cluster_m=4, cluster_n=2), ClusterFault.DROPS_PRODUCER_TAIL, Violation.AFTER_EXIT,
     "arrives on CTA 1 empty[0], but CTA 1 has exited"),
    (dict(cluster_m=4, cluster_n=2, two_cta=True), ClusterFault.SLOT_COMMIT_WITHOUT_PEER, Violation.DEADLOCK,
     "blocked at"),
    (dict(cluster_m=4, cluster_n=2, two_cta=True), ClusterFault.ACC_COMMIT_WITHOUT_PEER, Violation.DEADLOCK,
     "epilogue blocked at 'wait CTA 1 acc_full"),
    (dict(cluster_m=4, cluster_n=2, two_cta=True), ClusterFault.EXPECT_TX_OF_ONE_CTA, Violation.READ_BEFORE_LANDED,
     "when 2 of its 4 copies had landed"),
    (dict(cluster_m=4, cluster_n=2, two_cta=True), ClusterFault.DEALLOC_BEFORE_PEER_READ, Violation.TMEM_NOT_HELD,
     "tensor memory is freed"),
    (dict(cluster_m=4, cluster_n=2, two_cta=True), ClusterFault.DROPS_PRODUCER_TAIL, Violation.AFTER_EXIT,
     "arrives on CTA 1 empty[0], but CTA 1 has exited"),
]


@pytest.mark.parametrize("config, fault, expected, says", CAUGHT_4X2,
                         ids=[f"{'4x2-pair' if c.get('two_cta') else '4x2'}-{f.value}" for c, f, _, _ in CAUGHT_4X2])
def test_planted_cluster_bug_is_caught_in_a_4x2_cluster(config, fault, expected, says):
    result = explore_exhaustively(cluster(config, Lookahead.BEFORE_COPY, fault=fault), reduce=True, until=expected)
    assert result.stopped_at is expected, result.summary()
    assert says in result.findings[expected].message
    assert result.findings[expected].trace


@pytest.mark.parametrize("config", LARGER[:2], ids=["4x2", "4x2-pair"])
def test_without_the_fault_the_same_4x2_cluster_is_safe(config):
    assert_proved_safe(cluster(config, Lookahead.BEFORE_COPY), reduce=True)


def test_an_expect_tx_of_one_ctas_bytes_also_corrupts_the_next_phase():
    # The pair's four copies deliver twice what the leader announced: when half of them
    # complete the phase, the rest land in the next one.
    result = explore_exhaustively(cluster(PAIR, fault=ClusterFault.EXPECT_TX_OF_ONE_CTA))
    assert Violation.OVER_ARRIVAL in result.kinds


@pytest.mark.parametrize("fault", [f for f in ClusterFault if f.name != "DROPS_PRODUCER_TAIL"], ids=lambda f: f.value)
def test_without_the_fault_the_same_cluster_is_safe(fault):
    assert_proved_safe(cluster(PAIR if fault.name != "SLOT_COMMIT_WITHOUT_PEER" else ROW, Lookahead.NONE))


@pytest.mark.parametrize("kwargs, message", [
    (dict(config=ROW, fault="expect_tx_of_one_cta"), "needs a 2-CTA pair"),
    (dict(config=ONE, fault="slot_commit_without_peer"), "needs a cluster of more than one CTA"),
    (dict(config=ONE, stages=0), "stages must be a positive int"),
])
def test_cluster_spec_rejects_what_cannot_be_modelled(kwargs, message):
    with pytest.raises(ValueError, match=message):
        cluster(**kwargs)


# -- tensor memory per SM: co-resident clusters --------------------------------------------

def unchecked(**config) -> cfg.KernelSpec:
    """A kernel spec built without make_spec's check of tensor memory per SM."""
    return cfg.KernelSpec("sm100", "bf16", "bf16", "k", "k", "n", GemmConfig(**config))


def test_two_clusters_sharing_sms_that_each_take_an_sms_tensor_memory_deadlock():
    # GemmConfig(cluster_m=2, stages=2): two CTAs fit an SM's shared memory, each
    # allocates 512 columns. With the other cluster's CTAs on the same two SMs, one
    # CTA of each cluster gets its SM's columns; the others wait for them, and CTA 1's
    # MMA, which releases CTA 0's slots too, never starts: CTA 0 never finishes either.
    spec = ClusterSpec(unchecked(cluster_m=2, stages=2, lookahead="none"), stages=1, tiles=1, k_blocks=2, acc_stages=1)
    assert spec.residency.clusters == 2 and spec.residency.columns == 512
    result = explore_exhaustively(spec)
    assert result.complete and Violation.DEADLOCK in result.kinds
    message = result.findings[Violation.DEADLOCK].message
    assert "tcgen05.alloc 512 columns on SM" in message and "(cluster 1) blocked at" in message
    reduced = explore_exhaustively(spec, reduce=True)
    assert reduced.complete and reduced.kinds == result.kinds
    # Alone on its SMs the same cluster finishes.
    assert_proved_safe(ClusterSpec(spec.kernel, stages=1, tiles=1, k_blocks=2, acc_stages=1, co_resident=False))


def test_co_resident_ctas_whose_columns_fit_side_by_side_are_safe():
    spec = cluster(dict(tile_n=128, stages=2), stages=2, tiles=2, k_blocks=1)
    assert (spec.residency.clusters, spec.residency.columns) == (2, 256)
    assert_proved_safe_both_ways(spec)
