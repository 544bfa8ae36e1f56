"""The CPU mbarrier model follows PTX: phases, parity waits, transaction bytes, and
errors for arrivals the barrier's count does not expect."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wsgemm.pipeline_sim.mbarrier import EarlyArrivalError, Mbarrier, OverArrivalError, WouldBlock


def test_fresh_barrier_counts_the_phase_before_phase_0_as_complete():
    bar = Mbarrier.init(1)
    assert (bar.phase, bar.parity, bar.pending, bar.tx) == (0, 0, 1, 0)
    assert bar.try_wait(1) and bar.test_wait(1)  # passes at once: the producer's lap-0 wait
    assert not bar.try_wait(0) and not bar.test_wait(0)  # the first completion is still to come


def test_phase_completes_on_the_last_expected_arrival_and_counts_reset():
    bar = Mbarrier.init(3).arrive().arrive()
    assert bar.phase == 0 and bar.pending == 1 and not bar.try_wait(0)
    bar = bar.arrive()
    assert bar.phase == 1 and bar.pending == 3
    assert bar.try_wait(0) and not bar.try_wait(1)


def test_arrive_with_a_count_is_several_arrivals():
    assert Mbarrier.init(4).arrive(4).phase == 1
    assert Mbarrier.init(4).arrive(3).pending == 1


def test_transaction_bytes_hold_the_phase_until_they_all_land():
    bar = Mbarrier.init(1).arrive_expect_tx(48 * 1024)
    assert bar.pending == 0 and bar.tx == 48 * 1024 and bar.phase == 0  # arrived, bytes pending
    bar = bar.complete_tx(16 * 1024)
    assert bar.phase == 0 and not bar.try_wait(0)
    bar = bar.complete_tx(32 * 1024)
    assert bar.phase == 1 and bar.tx == 0 and bar.try_wait(0)


def test_bytes_may_land_before_they_are_announced():
    # A multicast peer's bytes can reach this CTA's barrier before its own expect_tx.
    bar = Mbarrier.init(1).complete_tx(100)
    assert bar.tx == -100 and bar.phase == 0
    assert bar.arrive_expect_tx(100).phase == 1


def test_parity_cannot_tell_a_phase_from_the_one_two_later():
    bar = Mbarrier.init(1)
    for _ in range(2):
        bar = bar.arrive()
    assert bar.phase == 2
    assert bar.try_wait(1)  # "phase 1 completed" -- and so did every odd phase before it
    assert not bar.try_wait(0)  # phase 2 (parity 0) is the current one


def test_more_arrivals_than_pending_is_an_over_arrival():
    with pytest.raises(OverArrivalError, match="2 arrival"):
        Mbarrier.init(3).arrive(2).arrive(2)
    # Arrived completely, but bytes outstanding: one more arrival has nowhere to go.
    with pytest.raises(OverArrivalError):
        Mbarrier.init(1).arrive_expect_tx(64).arrive()


def test_an_arrival_for_a_completed_phase_is_an_over_arrival():
    bar = Mbarrier.init(1).arrive(for_phase=0)
    with pytest.raises(OverArrivalError, match="phase 0 completed without it"):
        bar.arrive(for_phase=0)


def test_an_arrival_for_a_future_phase_is_an_early_arrival():
    with pytest.raises(EarlyArrivalError, match="meant for phase 1"):
        Mbarrier.init(2).arrive(for_phase=1)
    with pytest.raises(EarlyArrivalError):
        Mbarrier.init(1).complete_tx(8, for_phase=1)


def test_wait_returns_on_a_completed_phase_and_would_block_otherwise():
    bar = Mbarrier.init(1)
    bar.wait(1)
    with pytest.raises(WouldBlock, match="parity 0"):
        bar.wait(0)


def test_operations_return_new_values_and_leave_the_old_one_alone():
    bar = Mbarrier.init(2)
    after = bar.arrive()
    assert bar.pending == 2 and after.pending == 1
    assert hash(bar) != hash(after) and Mbarrier.init(2) == bar


@pytest.mark.parametrize("count", [0, 1 << 20])
def test_init_rejects_counts_ptx_forbids(count):
    with pytest.raises(ValueError, match="mbarrier.init count"):
        Mbarrier.init(count)


def test_parity_must_be_a_bit():
    with pytest.raises(ValueError, match="parity must be 0 or 1"):
        Mbarrier.init(1).try_wait(2)


@settings(max_examples=100, deadline=None)
@given(count=st.integers(1, 8), arrivals=st.integers(0, 40))
def test_phases_completed_is_arrivals_over_count(count, arrivals):
    bar = Mbarrier.init(count)
    for i in range(arrivals):
        bar = bar.arrive(for_phase=i // count)
    assert bar.phase == arrivals // count
    assert bar.pending == count - arrivals % count
    # try_wait(P) passes iff the current phase's parity is not P.
    assert [bar.try_wait(p) for p in (0, 1)] == [bar.phase % 2 != 0, bar.phase % 2 != 1]
