"""The pipeline model: every interleaving of the kernels' roles is safe under all three
look-ahead policies, and each planted bug is caught as the violation it causes."""

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wsgemm import GemmConfig
from wsgemm import config as cfg
from wsgemm.config import Lookahead
from wsgemm.kernels.common import stages
from wsgemm.kernels.common.stages import empty_arrivals
from wsgemm.pipeline_sim import (
    Fault,
    PipelineSpec,
    Structure,
    Violation,
    build_kernel,
    explore_exhaustively,
    explore_randomly,
    fault_applies,
)
from wsgemm.pipeline_sim.__main__ import main as model_main
from wsgemm.pipeline_sim.ops import Arrive, ArriveExpectTx, TmaLoad, TryWait, Wait
from wsgemm.pipeline_sim.residency import Residency, check

POLICIES = list(Lookahead)
# (stages, tiles, k_blocks): small enough to enumerate every interleaving.
SM90_SIZES = [(2, 2, 2), (2, 3, 3), (3, 2, 3), (2, 2, 4)]
SM100_SIZES = [(2, 2, 2), (2, 3, 2), (2, 2, 3)]


def assert_proved_safe(spec):
    result = explore_exhaustively(spec)
    assert result.complete, f"{spec.short()}: state limit hit"
    assert result.safe, "\n".join(
        [spec.short()] + [f"{f.kind.value}: {f.message}\n  " + "\n  ".join(f.trace[-8:])
                          for f in result.findings.values()]
    )
    assert result.completed_runs >= 1
    return result


# -- the kernels' protocol is safe -----------------------------------------------------------

@pytest.mark.parametrize("policy", POLICIES, ids=lambda p: p.value)
@pytest.mark.parametrize("size", SM90_SIZES, ids=lambda s: "x".join(map(str, s)))
def test_sm90_every_interleaving_is_safe(size, policy):
    assert_proved_safe(PipelineSpec(Structure.SM90, *size, policy))


@pytest.mark.parametrize("policy", POLICIES, ids=lambda p: p.value)
@pytest.mark.parametrize("size", SM100_SIZES, ids=lambda s: "x".join(map(str, s)))
def test_sm100_every_interleaving_is_safe(size, policy):
    assert_proved_safe(PipelineSpec(Structure.SM100, *size, policy))


@pytest.mark.parametrize("policy", POLICIES, ids=lambda p: p.value)
def test_sm90_two_consumer_warpgroups_are_safe(policy):
    assert_proved_safe(PipelineSpec(Structure.SM90, 2, 2, 3, policy, consumer_warpgroups=2))


@pytest.mark.parametrize("policy", POLICIES, ids=lambda p: p.value)
@pytest.mark.parametrize("size", [(2, 2, 2), (2, 4, 2), (3, 3, 3)], ids=lambda s: "x".join(map(str, s)))
def test_pingpong_consumers_are_safe_over_several_turns(size, policy):
    assert_proved_safe(PipelineSpec(Structure.SM90_PINGPONG, *size, policy))


def test_pingpong_slots_belong_to_their_tiles_warpgroup():
    """Tile i's k-blocks are read, and their slots released, by consumer i % 2 alone:
    empty[s] counts one warpgroup's 4 warps; each tile is stored whole, once."""
    kernel = build_kernel(PipelineSpec(Structure.SM90_PINGPONG, 2, 3, 2))
    assert [kernel.readers(kb) for kb in range(6)] == [{1}, {1}, {2}, {2}, {1}, {1}]
    assert kernel.barrier_counts[kernel.barrier_names.index("empty[0]")] == 4
    assert kernel.tile_parts == 1
    releases = [op for op in kernel.programs[2] if isinstance(op, Arrive)]
    assert [(kernel.barrier_names[op.barrier], op.phase) for op in releases] == [("empty[0]", 1), ("empty[1]", 1)]


def test_pingpong_without_turns_passes_a_parity_wait_two_phases_early():
    """Consumer 1's first wait is for k-block 2 (slot 0, phase 1, parity 1). Without
    its turn, it can wait before slot 0's barrier completed phase 0, and a fresh
    barrier's parity-1 wait passes at once: it reads bytes that never landed."""
    spec = PipelineSpec(Structure.SM90_PINGPONG, 2, 2, 2, fault=Fault.SKIPS_MAINLOOP_TURN)
    finding = explore_exhaustively(spec).findings[Violation.READ_BEFORE_LANDED]
    assert "consumer1 read slot 0 for k-block 2" in finding.message


@pytest.mark.parametrize("acc_stages", [1, 3])
def test_sm100_any_number_of_accumulator_buffers_is_safe(acc_stages):
    assert_proved_safe(PipelineSpec(Structure.SM100, 2, 3, 2, acc_stages=acc_stages))


@pytest.mark.parametrize("structure", list(Structure), ids=lambda s: s.value)
@pytest.mark.parametrize("policy", POLICIES, ids=lambda p: p.value)
def test_the_real_shape_survives_random_schedules(structure, policy):
    spec = PipelineSpec(structure, stages=4, tiles=4, k_blocks=8, lookahead=policy, consumer_warpgroups=2)
    result = explore_randomly(spec, runs=30, seed=7)
    assert result.safe, [f.message for f in result.findings.values()]
    assert result.completed_runs == 30


@settings(max_examples=25, deadline=None)
@given(
    structure=st.sampled_from(list(Structure)),
    policy=st.sampled_from(POLICIES),
    stages_=st.integers(2, 3),
    tiles=st.integers(1, 2),
    k_blocks=st.integers(1, 3),
)
def test_small_specs_are_safe(structure, policy, stages_, tiles, k_blocks):
    assert_proved_safe(PipelineSpec(structure, stages_, tiles, k_blocks, policy))


def test_sm90_needs_two_stages_and_sm100_does_not():
    # With one slot the SM90 consumer holds slot 0 (its wgmma may still read it) while
    # it waits for slot 0's next fill: why config.py asks for at least 2 stages. The
    # SM100 MMA warp hands its slot back through tcgen05.commit without waiting.
    result = explore_exhaustively(PipelineSpec(Structure.SM90, 1, 2, 2))
    assert result.kinds == {Violation.DEADLOCK}
    assert "consumer0 blocked at" in result.findings[Violation.DEADLOCK].message
    assert_proved_safe(PipelineSpec(Structure.SM100, 1, 2, 2))


# SM90 tiles whose A box lies wholly past M (a cluster over an odd number of tile rows):
# the producer skips the box and announces only B's bytes (Sm90Gemm.producer).
PADDED = [(2, 3, 2, (1,)), (2, 2, 2, (0, 1)), (2, 3, 3, (0,))]


@pytest.mark.parametrize("policy", POLICIES, ids=lambda p: p.value)
@pytest.mark.parametrize("structure", [Structure.SM90, Structure.SM90_PINGPONG], ids=lambda s: s.value)
@pytest.mark.parametrize("size", PADDED, ids=lambda s: "x".join(map(str, s[:3])) + f"-padded{s[3]}")
def test_tiles_that_skip_an_all_padding_box_are_safe(size, structure, policy):
    stages_, tiles, k_blocks, padded = size
    assert_proved_safe(PipelineSpec(structure, stages_, tiles, k_blocks, policy, padded_tiles=padded))


def test_a_padded_tile_loads_and_announces_b_alone():
    spec = PipelineSpec(Structure.SM90, 2, 2, 2, padded_tiles=(1,))
    producer = build_kernel(spec).programs[0]
    loads = [(op.kblock, op.operand) for op in producer if isinstance(op, TmaLoad)]
    assert loads == [(0, "A"), (0, "B"), (1, "A"), (1, "B"), (2, "B"), (3, "B")]
    announced = [op.nbytes for op in producer if isinstance(op, ArriveExpectTx)]
    assert announced == [spec.stage_bytes] * 2 + [spec.b_bytes] * 2
    assert_proved_safe(PipelineSpec(Structure.SM90, 2, 3, 2, consumer_warpgroups=2, padded_tiles=(2,)))


# -- planted bugs are caught ----------------------------------------------------------------

FAULTS = [
    # (fault, what it must be caught as)
    (Fault.TRUSTS_UNREADY_TOKEN, Violation.STAGE_OVERWRITTEN),
    (Fault.RELEASE_COUNT_LOW, Violation.OVER_ARRIVAL),
    (Fault.RELEASE_COUNT_HIGH, Violation.DEADLOCK),
    (Fault.PRODUCER_PARITY_FLIPPED, Violation.DEADLOCK),
    (Fault.CONSUMER_PARITY_FLIPPED, Violation.READ_BEFORE_LANDED),
    (Fault.EARLY_SLOT_RELEASE, Violation.STAGE_OVERWRITTEN),
    (Fault.EARLY_ACC_RELEASE, Violation.ACC_OVERWRITTEN),
    (Fault.SKIPS_MAINLOOP_TURN, Violation.READ_BEFORE_LANDED),
    (Fault.ANNOUNCES_SKIPPED_BOX, Violation.DEADLOCK),
    (Fault.SKIPS_REAL_BOX, Violation.READ_BEFORE_LANDED),
]
FAULT_CASES = [
    (structure, fault, expected, policy)
    for (fault, expected), structure, policy in itertools.product(FAULTS, Structure, POLICIES)
    if fault_applies(fault, structure)
]


@pytest.mark.parametrize(
    "structure, fault, expected, policy", FAULT_CASES,
    ids=[f"{s.value}-{f.value}-{p.value}" for s, f, _, p in FAULT_CASES],
)
def test_planted_bug_is_caught(structure, fault, expected, policy):
    # One accumulator buffer, so the second tile reuses it (EARLY_ACC_RELEASE).
    spec = PipelineSpec(structure, 2, 2, 2, policy, acc_stages=1, fault=fault)
    result = explore_exhaustively(spec)
    assert result.complete
    assert expected in result.kinds, result.summary()
    finding = result.findings[expected]
    assert finding.trace, "a finding comes with the steps that led to it"


def test_a_finding_explains_itself():
    result = explore_exhaustively(PipelineSpec(Structure.SM90, 2, 2, 2, fault=Fault.TRUSTS_UNREADY_TOKEN))
    finding = result.findings[Violation.STAGE_OVERWRITTEN]
    assert "TMA load of k-block 2 into slot 0 while consumer0 still read k-block 0" in finding.message
    assert finding.trace[-1] == "producer: TMA load A of k-block 2 -> slot 0"


RANDOM_FAULT_CASES = sorted({(s, f, e) for s, f, e, _ in FAULT_CASES})


@pytest.mark.parametrize(
    "structure, fault, expected", RANDOM_FAULT_CASES,
    ids=[f"{s.value}-{f.value}" for s, f, _ in RANDOM_FAULT_CASES],
)
def test_random_exploration_catches_planted_bugs_at_larger_sizes(structure, fault, expected):
    spec = PipelineSpec(structure, 3, 3, 4, fault=fault)
    assert expected in explore_randomly(spec, runs=50, seed=1).kinds


def test_a_wrong_parity_function_in_stages_py_is_caught(monkeypatch):
    # The model calls the kernels' own stage arithmetic: break it, and the model breaks.
    monkeypatch.setattr(stages, "full_wait_parity", lambda count, n: stages.ring_lap(count, n) & 1 ^ 1)
    result = explore_exhaustively(PipelineSpec(Structure.SM90, 2, 2, 2))
    assert Violation.READ_BEFORE_LANDED in result.kinds


def test_a_start_where_every_role_blocks_is_a_deadlock_not_safe(monkeypatch):
    # Without a look-ahead the SM100 producer's first instruction is the wait on empty[0];
    # with the wrong parity it never returns, and the MMA and epilogue warps wait behind
    # it: the very first state has no step to take, and that is a deadlock.
    right = stages.empty_wait_parity
    monkeypatch.setattr(stages, "empty_wait_parity", lambda count, n: right(count, n) ^ 1)
    result = explore_exhaustively(PipelineSpec(Structure.SM100, 2, 2, 2, lookahead=Lookahead.NONE))
    assert result.kinds == {Violation.DEADLOCK} and result.states == 1


def test_state_limit_is_reported_not_hidden():
    result = explore_exhaustively(PipelineSpec(Structure.SM100, 3, 3, 3), max_states=1000)
    assert not result.complete and result.safe
    assert "state limit hit" in result.summary()


# -- the model is built from the kernels' counts and programs ------------------------------

def test_barrier_counts_come_from_the_kernel_code():
    sm90 = build_kernel(PipelineSpec(Structure.SM90, consumer_warpgroups=2))
    empty = sm90.barrier_names.index("empty[0]")
    assert sm90.barrier_counts[empty] == empty_arrivals(1, 1, 1, 8) == 8
    assert sm90.barrier_counts[sm90.barrier_names.index("full[0]")] == 1
    sm100 = build_kernel(PipelineSpec(Structure.SM100))
    assert sm100.barrier_counts[sm100.barrier_names.index("empty[1]")] == 1  # one tcgen05.commit
    assert sm100.barrier_counts[sm100.barrier_names.index("acc_empty[0]")] == 4  # epilogue warps
    low = build_kernel(PipelineSpec(Structure.SM90, fault=Fault.RELEASE_COUNT_LOW))
    assert low.barrier_counts[low.barrier_names.index("empty[0]")] == 3


def test_producer_program_places_the_probe_per_policy():
    def producer_ops(policy):
        kernel = build_kernel(PipelineSpec(Structure.SM90, 2, 1, 2, policy))
        return [type(op).__name__ for op in kernel.programs[0]]

    # k-block 0 of a 2-k-block tile, then the tail's waits.
    assert producer_ops(Lookahead.BEFORE_COPY)[:6] == [
        "TryWait", "Wait", "ArriveExpectTx", "TryWait", "TmaLoad", "TmaLoad"]
    assert producer_ops(Lookahead.AFTER_COPY)[:5] == ["Wait", "ArriveExpectTx", "TmaLoad", "TmaLoad", "TryWait"]
    assert "TryWait" not in producer_ops(Lookahead.NONE)
    # AFTER_COPY does not probe after a tile's last k-block.
    assert producer_ops(Lookahead.AFTER_COPY).count("TryWait") == 1


def test_programs_use_the_stage_arithmetic():
    kernel = build_kernel(PipelineSpec(Structure.SM90, 2, 2, 2, Lookahead.NONE))
    waits = [op for op in kernel.programs[0] if isinstance(op, Wait)]
    names = [(kernel.barrier_names[w.barrier], w.parity) for w in waits]
    # Four acquires (laps 0, 0, 1, 1), then the tail waits for lap 2's releases.
    assert names == [("empty[0]", 1), ("empty[1]", 1), ("empty[0]", 0), ("empty[1]", 0),
                     ("empty[0]", 1), ("empty[1]", 1)]
    loads = [op for op in kernel.programs[0] if isinstance(op, TmaLoad)]
    assert [(op.slot, op.phase) for op in loads[::2]] == [(0, 0), (1, 0), (0, 1), (1, 1)]
    releases = [op for op in kernel.programs[1] if isinstance(op, Arrive)]
    assert [(kernel.barrier_names[op.barrier], op.count, op.phase) for op in releases] == [
        ("empty[0]", 4, 0), ("empty[1]", 4, 0), ("empty[0]", 4, 1), ("empty[1]", 4, 1)]
    assert not any(isinstance(op, TryWait) for op in kernel.programs[0])


@pytest.mark.parametrize("kwargs, message", [
    (dict(stages=0), "stages must be a positive int"),
    (dict(structure="sm90", fault="early_acc_release"), "needs Structure.SM100"),
    (dict(structure="sm90", fault="skips_mainloop_turn"), "needs Structure.SM90_PINGPONG"),
    (dict(structure="sm90", warps_per_warpgroup=1, fault="release_count_low"), "at least 2 arrivals"),
    (dict(structure="sm100", fault="announces_skipped_box"), "needs Structure.SM90 or Structure.SM90_PINGPONG"),
    (dict(structure="sm100", padded_tiles=(0,)), "the SM100 producer loads every box"),
    (dict(structure="sm90", tiles=2, padded_tiles=(2,)), "padded_tiles must be tiles of this CTA"),
    (dict(structure="sm90", tiles=2, padded_tiles=(0, 1), fault="skips_real_box"), "needs a tile with rows"),
])
def test_spec_rejects_what_cannot_be_modelled(kwargs, message):
    with pytest.raises(ValueError, match=message):
        PipelineSpec(**kwargs)


def test_spec_accepts_the_enums_string_values():
    spec = PipelineSpec("sm100", lookahead="after_copy", fault="early_slot_release")
    assert (spec.structure, spec.lookahead, spec.fault) == (
        Structure.SM100, Lookahead.AFTER_COPY, Fault.EARLY_SLOT_RELEASE)


def test_command_line_quick_run_passes(capsys):
    assert model_main(["--quick"]) == 0
    out = capsys.readouterr().out
    assert "all checks passed" in out and "MODEL, not a measurement" in out


# -- several clusters on the same SMs: tensor memory per SM ----------------------------------

def test_co_resident_clusters_that_each_hold_one_sms_tensor_memory_deadlock():
    # GemmConfig(cluster_m=2, stages=2) as it was before make_spec checked residency: two
    # CTAs fit an SM's shared memory, each allocates all 512 columns.
    unchecked = cfg.KernelSpec("sm100", "bf16", "bf16", "k", "k", "n", GemmConfig(cluster_m=2, stages=2))
    residency = Residency.of(unchecked)
    assert (residency.clusters, residency.cluster_size, residency.columns) == (2, 2, 512)
    result = check(residency)
    assert not result.safe
    waits = [line for line in result.deadlock if "waits" in line]  # one CTA of each cluster
    assert len(waits) == 2 and all(line.endswith("waits for 512 columns (0 free)") for line in waits)
    # Single-CTA "clusters" only queue: the second CTA allocates when the first ends.
    assert check(Residency(clusters=2, cluster_size=1, columns=512)).safe


@pytest.mark.parametrize("config", [
    dict(), dict(cluster_m=2), dict(cluster_m=2, two_cta=True), dict(cluster_m=4, cluster_n=2),
    dict(tile_n=64, stages=2, cluster_m=2), dict(tile_n=128, acc_stages=1, stages=2, cluster_m=2, cluster_n=2),
], ids=str)
def test_every_config_make_spec_accepts_allocates_without_deadlock(config):
    spec = cfg.make_spec("sm100", "bf16", "bf16", "k", "k", "n", GemmConfig(**config))
    assert check(Residency.of(spec)).safe
