"""``wsgemm.timing``: the protocol shared by the autotuner and the benchmarks, without a GPU."""

import pytest
import torch

from wsgemm import timing


def test_graph_operand_copies_push_each_copy_out_of_l2_before_its_reuse():
    l2 = 50 << 20
    assert timing.graph_operand_copies(200 << 20, l2, 20) == 1  # larger than L2 already
    assert timing.graph_operand_copies(10 << 20, l2, 20) == 10  # 2 x L2 between reuses
    assert timing.graph_operand_copies(1 << 20, l2, 20) == 20  # never more than the calls
    assert timing.graph_operand_copies(32 << 20, 60 << 20, 20) == 4  # the suite's rule too (an H100's L2)


def test_an_unknown_flush_mode_is_refused_before_touching_a_gpu():
    with pytest.raises(ValueError, match="L2 flush mode must be one of"):
        timing.L2Flush(mode="memset")


def test_calls_are_timed_in_turns_with_the_flush_before_each(fake_cuda_events):
    log = []
    fake_cuda_events(log, lambda between: float(len(between)))  # calls made between the two events
    times = timing.time_in_turns({"x": lambda: log.append("x"), "y": lambda: log.append("y")}, 3,
                                 lambda: log.append("flush"))
    assert log == ["flush", "x", "flush", "y"] * 3
    assert times == {"x": [1.0] * 3, "y": [1.0] * 3}


def test_resting_after_each_round_idles_the_gpu_in_proportion_to_the_round(monkeypatch, fake_cuda_events):
    import torch

    clock = [0.0]
    log = []

    def call():
        clock[0] += 0.010  # each call: 10 ms of wall time
        log.append("call")

    fake_cuda_events(log, lambda between: 1.0)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: log.append("sync"))
    monkeypatch.setattr(timing.time, "perf_counter", lambda: clock[0])
    monkeypatch.setattr(timing.time, "sleep", lambda s: log.append(round(s, 6)))
    timing.time_in_turns({"x": call, "y": call}, 2, lambda: None, rest=2.0)
    # Each round: an untimed call to bring the clocks back, both timed calls, wait for
    # the GPU, then twice the timed calls' 20 ms idle.
    assert log == ["call", "call", "call", "sync", 0.04] * 2 + ["sync"]
    log.clear()
    timing.time_in_turns({"x": call}, 2, lambda: None)  # no rest: one synchronize at the end
    assert log == ["call", "call", "sync"]


def test_relative_error_is_the_frobenius_ratio_and_lets_nan_fail_the_check():
    ref = torch.randn(8, 8).to(torch.bfloat16)
    assert timing.relative_error(ref, ref) == 0.0
    assert timing.relative_error(2 * ref.float(), ref) == pytest.approx(1.0)
    poisoned = ref.clone()
    poisoned[3, 5] = float("nan")
    assert not timing.relative_error(poisoned, ref) < 1e-2
    assert timing.relative_error(torch.ones(2, 2), torch.zeros(2, 2)) == pytest.approx(2e30)  # no division by zero
