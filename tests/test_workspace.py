"""Which split-K workspace a call gets (``wsgemm.workspace``), on the CPU: the CUDA
stream and capture queries are stand-ins, the workspaces CPU tensors."""

import contextlib
import threading
from types import SimpleNamespace

import pytest
import torch

from wsgemm import workspace as ws

CPU = torch.device("cpu")


@pytest.fixture
def cuda_streams(monkeypatch):
    """A settable current stream handle and capture id (None: not capturing)."""
    state = SimpleNamespace(stream=7, capture=None, capture_known=True)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: SimpleNamespace(cuda_stream=state.stream))
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: state.capture is not None)
    monkeypatch.setattr(ws, "capture_id", lambda stream: state.capture if state.capture_known else None)
    monkeypatch.setattr(ws, "_raw_stream", None)  # the handle from the stand-in current_stream
    monkeypatch.setattr(ws, "_workspaces", {})
    monkeypatch.setattr(ws, "_captures", {})
    monkeypatch.setattr(ws, "_captured", [])
    return state


def test_eager_calls_on_one_stream_share_a_zeroed_workspace_that_only_grows(cuda_streams):
    flags, partials = ws.split_k_workspace(CPU, 4, 100)
    assert flags.dtype == torch.int32 and not flags.any() and partials.numel() == 100
    assert ws.split_k_workspace(CPU, 2, 50)[0] is flags  # smaller request: the same one
    bigger = ws.split_k_workspace(CPU, 8, 50)
    assert bigger[0].numel() == 8 and bigger[1].numel() == 100  # grown, never shrunk
    cuda_streams.stream = 9
    assert ws.split_k_workspace(CPU, 2, 50)[0] is not bigger[0]  # another stream: its own


def test_calls_captured_on_one_stream_of_one_capture_share_one_workspace(cuda_streams):
    """One memset node per capture and stream, not one per call (docs/tuning-log/split-k.md)."""
    eager = ws.split_k_workspace(CPU, 4, 100)
    cuda_streams.capture = 11
    first = ws.split_k_workspace(CPU, 4, 100)
    assert first[0] is not eager[0]  # never the eager workspace: the graph outlives it
    assert ws.split_k_workspace(CPU, 4, 100)[0] is first[0]
    cuda_streams.stream = 9  # a forked stream of the same capture
    assert ws.split_k_workspace(CPU, 4, 100)[0] is not first[0]
    cuda_streams.stream, cuda_streams.capture = 7, 12  # another capture on the first stream
    assert ws.split_k_workspace(CPU, 4, 100)[0] is not first[0]
    cuda_streams.capture = 11
    grown = ws.split_k_workspace(CPU, 16, 100)
    assert grown[0].numel() == 16 and any(kept[0] is first[0] for kept in ws._captured)  # still referenced
    cuda_streams.capture = None
    assert ws.split_k_workspace(CPU, 4, 100)[0] is eager[0]  # eager calls unaffected


def test_captured_calls_get_a_workspace_each_when_the_capture_has_no_name(cuda_streams):
    cuda_streams.capture, cuda_streams.capture_known = 11, False
    one, two = ws.split_k_workspace(CPU, 4, 100), ws.split_k_workspace(CPU, 4, 100)
    assert one[0] is not two[0] and len(ws._captured) == 2


def test_the_capture_id_query_never_fails_a_call():
    assert ws.capture_id(0) is None  # no GPU here, or not capturing: None, not an error


def test_calls_through_the_operator_get_a_workspace_each_only_where_captured(cuda_streams):
    """Captured into CUDA-graph trees, a kept workspace in the graph's pool fails their
    check that only outputs outlive a call (docs/tuning-log/host-overhead.md); uncaptured, the
    operator's calls share the stream's kept workspace with eager ones."""
    import weakref

    eager = ws.split_k_workspace(CPU, 4, 100)
    with ws.operator_calls():
        assert ws.split_k_workspace(CPU, 4, 100) is eager
        cuda_streams.capture = 11
        one = ws.split_k_workspace(CPU, 4, 100)
        with ws.operator_calls():  # nested: still the operator's, and still after the inner one
            two = ws.split_k_workspace(CPU, 4, 100)
        three = ws.split_k_workspace(CPU, 4, 100)
    assert not one[0].any() and one[1].numel() == 100
    assert len({id(one[0]), id(two[0]), id(three[0]), id(eager[0])}) == 4
    assert ws._captures == {} and ws._captured == []
    gone = weakref.ref(one[0])
    del one
    assert gone() is None
    assert ws.split_k_workspace(CPU, 4, 100) is ws.split_k_workspace(CPU, 4, 100)  # eager capture: shared again


def test_the_operators_cpp_launches_say_through_operator_instead_of_the_context(cuda_streams):
    """The operator's C++ kernel launches cached plans without entering operator_calls():
    it passes through_operator, which means the same."""
    eager = ws.split_k_workspace(CPU, 4, 100, through_operator=True)
    assert ws.split_k_workspace(CPU, 4, 100) is eager  # uncaptured: the stream's kept one
    cuda_streams.capture = 11
    one = ws.split_k_workspace(CPU, 4, 100, through_operator=True)
    two = ws.split_k_workspace(CPU, 4, 100, through_operator=True)
    assert len({id(one[0]), id(two[0]), id(eager[0])}) == 3 and ws._captured == []
    shared = ws.split_k_workspace(CPU, 4, 100)  # an eager capture: the capture's shared one
    assert ws.split_k_workspace(CPU, 4, 100) is shared and len(ws._captured) == 1


def test_kept_workspaces_are_allocated_on_the_helper_thread_on_the_callers_stream(cuda_streams, monkeypatch):
    """Inductor's CUDA-graph trees route a warm-up's allocations into the graph's pool
    per thread: a kept workspace comes from another one, on the caller's stream."""
    allocated, streams = [], []

    def grown(found, device, flag_elems, partial_elems):
        allocated.append((threading.get_ident(), streams[-1]))
        return torch.zeros(flag_elems, dtype=torch.int32), torch.empty(partial_elems)

    def on_stream(stream):
        streams.append(stream.handle)
        return contextlib.nullcontext()

    monkeypatch.setattr(ws, "_grown", grown)
    monkeypatch.setattr(torch.cuda, "device", lambda device: contextlib.nullcontext())
    monkeypatch.setattr(torch.cuda, "stream", on_stream)
    monkeypatch.setattr(torch.cuda, "ExternalStream", lambda handle, device=None: SimpleNamespace(handle=handle))
    gpu = torch.device("cuda", 0)
    flags, _ = ws.split_k_workspace(gpu, 4, 100)
    helper = ws._helper.submit(threading.get_ident).result()
    assert allocated == [(helper, 7)] and helper != threading.get_ident()
    assert ws.split_k_workspace(gpu, 4, 100)[0] is flags and len(allocated) == 1


def test_the_operators_python_kernel_marks_its_calls(monkeypatch):
    from wsgemm import ops, plans

    seen = []
    monkeypatch.setattr(plans, "gemm_eager", lambda *args: seen.append(getattr(ws._operator, "active", False)))
    ops._gemm_kernel(torch.ones(2, 2), torch.ones(2, 2))
    assert seen == [True] and not getattr(ws._operator, "active", False)
