"""``wsgemm.timing``: the protocol shared by the autotuner and the benchmarks, without a GPU."""

import pytest

from wsgemm import timing


def test_graph_operand_copies_push_each_copy_out_of_l2_before_its_reuse():
    l2 = 50 << 20
    assert timing.graph_operand_copies(200 << 20, l2, 20) == 1  # larger than L2 already
    assert timing.graph_operand_copies(10 << 20, l2, 20) == 10  # 2 x L2 between reuses
    assert timing.graph_operand_copies(1 << 20, l2, 20) == 20  # never more than the calls


def test_an_unknown_flush_mode_is_refused_before_touching_a_gpu():
    with pytest.raises(ValueError, match="L2 flush mode must be one of"):
        timing.L2Flush(mode="memset")


def test_calls_are_timed_in_turns_with_the_flush_before_each(monkeypatch):
    import torch

    log = []

    class Event:
        def __init__(self, enable_timing=False):
            self.at = None

        def record(self):
            self.at = len(log)

        def elapsed_time(self, end):
            return float(end.at - self.at)  # calls made between the two events

    monkeypatch.setattr(torch.cuda, "Event", Event)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    times = timing.time_in_turns({"x": lambda: log.append("x"), "y": lambda: log.append("y")}, 3,
                                 lambda: log.append("flush"))
    assert log == ["flush", "x", "flush", "y"] * 3
    assert times == {"x": [1.0] * 3, "y": [1.0] * 3}
