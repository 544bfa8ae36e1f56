"""The timeline model: sane numbers, the conclusions docs/pipeline-sim.md draws from
it, and a small Gantt chart."""

import struct
from dataclasses import replace

import pytest

from wsgemm.config import Lookahead
from wsgemm.pipeline_sim import (
    Fault,
    Latencies,
    PipelineSpec,
    ProtocolViolation,
    Structure,
    compare_policies,
    draw_gantt,
    format_report,
    simulate,
    timeline_spec,
)

STRUCTURES = list(Structure)


@pytest.mark.parametrize("structure", STRUCTURES, ids=lambda s: s.value)
def test_tensor_core_does_exactly_the_work_of_every_k_block(structure):
    spec = timeline_spec(structure)
    lat = Latencies()
    t = simulate(spec, lat)
    work = spec.tiles * spec.k_blocks * lat.mma_us_per_kblock
    assert t.tensor_core_busy_us == pytest.approx(work)
    assert work < t.makespan_us < 3 * work
    busy = sorted(t.rows["tensor core"])
    assert all(a.end <= b.start + 1e-9 for a, b in zip(busy, busy[1:])), "one tensor core: no overlap"


@pytest.mark.parametrize("structure", STRUCTURES, ids=lambda s: s.value)
def test_every_interval_is_well_formed_and_every_copy_lands(structure):
    spec = timeline_spec(structure)
    t = simulate(spec)
    for row, intervals in t.rows.items():
        assert all(0 <= i.start <= i.end <= t.makespan_us + 1e-9 for i in intervals), row
    assert len(t.rows["TMA"]) == 2 * spec.tiles * spec.k_blocks  # A and B per k-block
    # Every refill after the first lap comes some time after its slot's release.
    assert len(t.refill_latencies_us) == spec.tiles * spec.k_blocks - spec.stages
    assert min(t.refill_latencies_us) >= 0


def test_stall_split_adds_up():
    t = simulate(timeline_spec())
    assert 0 <= t.producer_stall_exposed_us <= t.producer_stall_us
    assert t.producer_stall_hidden_us + t.producer_stall_exposed_us == pytest.approx(t.producer_stall_us)


def test_slower_loads_never_make_the_run_faster():
    spec = timeline_spec()
    times = [simulate(spec, Latencies(tma_latency_us=lat)).makespan_us for lat in (0.25, 0.5, 1.0, 2.0)]
    assert times == sorted(times)


def test_deeper_ring_hides_more_load_latency():
    spec = timeline_spec()
    shallow = simulate(replace(spec, stages=2)).makespan_us
    deep = simulate(replace(spec, stages=6)).makespan_us
    assert deep < shallow


def test_sm100_overlaps_the_epilogue_with_the_next_tile():
    # Two accumulator buffers: the MMA warp starts tile t+1 while the epilogue drains t.
    spec = timeline_spec(Structure.SM100)
    one = simulate(replace(spec, acc_stages=1)).makespan_us
    two = simulate(replace(spec, acc_stages=2)).makespan_us
    assert two < one


def test_pingpong_overlaps_each_epilogue_with_the_other_warpgroups_mainloop():
    # The same work as the cooperative SM90 kernel; the tensor cores idle less.
    cooperative = simulate(timeline_spec(Structure.SM90))
    pingpong = simulate(timeline_spec(Structure.SM90_PINGPONG))
    assert pingpong.makespan_us < cooperative.makespan_us
    assert pingpong.tensor_core_busy_us == pytest.approx(cooperative.tensor_core_busy_us)


@pytest.mark.parametrize("structure", STRUCTURES, ids=lambda s: s.value)
def test_with_measured_probe_behaviour_the_placement_barely_matters(structure):
    # The H200 microbenchmark: a pending probe does not stop the warp's issue.
    times = [t.makespan_us for t in compare_policies(timeline_spec(structure))]
    assert max(times) / min(times) < 1.01


@pytest.mark.parametrize("structure", STRUCTURES, ids=lambda s: s.value)
def test_if_a_probe_stopped_the_warp_before_copy_would_delay_the_copies(structure):
    # The other reading of PTX ("the thread may be suspended"), with a long limit:
    # probing the next, still busy slot before issuing this slot's copies holds them back.
    lat = Latencies(probe_blocks_issue=True, try_wait_limit_us=0.5)
    before, after, none = compare_policies(timeline_spec(structure), lat)
    assert before.mean_refill_latency_us > 5 * after.mean_refill_latency_us
    assert before.makespan_us > 1.05 * after.makespan_us
    assert after.makespan_us == pytest.approx(none.makespan_us, rel=0.01)


def test_report_is_labelled_a_model_and_names_each_policy():
    text = format_report(compare_policies(timeline_spec()))
    assert text.startswith("MODEL, not a measurement")
    for policy in Lookahead:
        assert policy.value in text


def test_a_deadlocking_spec_stops_the_simulation():
    with pytest.raises(RuntimeError, match="stopped before the end: deadlock"):
        simulate(PipelineSpec(Structure.SM90, 2, 2, 2, fault=Fault.PRODUCER_PARITY_FLIPPED))


@pytest.mark.parametrize("structure", STRUCTURES, ids=lambda s: s.value)
def test_a_racy_spec_raises_when_the_schedule_hits_the_race(structure):
    # A slot released as its MMA is issued: the producer refills it while the MMA,
    # which takes far longer than a wake-up, still reads it.
    spec = replace(timeline_spec(structure), fault=Fault.EARLY_SLOT_RELEASE)
    with pytest.raises(ProtocolViolation, match="stage overwritten"):
        simulate(spec)


def test_gantt_chart_is_a_small_png(tmp_path):
    pytest.importorskip("matplotlib")
    path = tmp_path / "timeline.png"
    draw_gantt(compare_policies(timeline_spec(Structure.SM100)), path)
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])  # the IHDR chunk
    assert (width, height) == (900, 500)
    assert len(data) < 100 * 1024
