"""Split-K and stream-K workspaces: one per (device, CUDA stream), reused across
calls; one per stream of each CUDA-graph capture, or one per captured call through
the operator.

A split-K or stream-K kernel needs int32 arrival flags that are zero when it starts,
and fp32 slots for partial sums (``kernels/common/split_k.py``, ``stream_k.py``).
Every launch leaves its flags at zero, so a workspace is zeroed once, when it is
allocated, and then reused by every later launch on the same stream; launches on one
stream run in order and never share a workspace concurrently. Another stream gets its own workspace, so
concurrent streams never race on the flags. When a call needs a larger workspace
the old one is dropped: the caching allocator reuses its memory only for later work
on the same stream, after the launches queued before.

These kept workspaces are allocated on a helper thread. Inductor's CUDA-graph trees
(``torch.compile(mode="reduce-overhead")``) warm a graph up on a stream of their own
with every allocation of the warming thread routed into the graph's memory pool, and
then check that nothing in the pool outlives the call but its outputs: a workspace
kept from there failed that check (docs/tuning-log/host-overhead.md). The routing is
per thread, so the helper's allocations stay in the ordinary pool, on the caller's
stream (the memset of the flags queued there, ahead of the caller's launch).

A CUDA graph is different: it replays the addresses it captured for as long as it
lives, and may be replayed on any stream. So the calls captured on one stream of one
capture share a workspace of their own, zeroed inside the graph by the first of them
(which also re-zeroes the flags on every replay), and kept alive by this module for
the life of the process: replacing it or sharing it with another capture would let a
later allocation or another graph scribble on it. Within the capture those calls run
in stream order, like eager calls on one stream. (A workspace per captured call puts
a memset node in front of every split-K call of a graph: about 1 us more per call on
an H200, docs/tuning-log/split-k.md.) Where the driver cannot name the capture,
each captured call does get its own workspace. So do calls through the
``torch.ops.wsgemm.gemm`` operator (``operator_calls``, or ``through_operator`` from
its C++ kernel's launches): the graphs they are captured
into are CUDA-graph trees', which allow nothing kept in their pool after recording
either; each such workspace is freed after its call, its memory the graph's.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import threading

import torch

_workspaces: dict[tuple[int, int], tuple[torch.Tensor, torch.Tensor]] = {}
# Captured calls' workspaces by (capture id, stream): every one stays referenced, since
# a graph may replay any of them (one grown within a capture included).
_captures: dict[tuple[int, int], tuple[torch.Tensor, torch.Tensor]] = {}
_captured: list[tuple[torch.Tensor, torch.Tensor]] = []
_lock = threading.RLock()  # re-entered when a captured workspace is grown and kept
_operator = threading.local()  # .active: inside operator_calls()
_helper = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="wsgemm-workspace")
# The current stream's handle: torch.cuda.current_stream() builds a Stream object
# first (3.2 of the 5.0 us a kept workspace took on the H200's host, docs/tuning-log/host-overhead.md).
_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)


@contextlib.contextmanager
def operator_calls():
    """Split-K and stream-K calls inside (on this thread) come through the operator:
    captured, each gets a workspace of its own, which nothing keeps after the call."""
    outer = getattr(_operator, "active", False)
    _operator.active = True
    try:
        yield
    finally:
        _operator.active = outer


def current_stream_handle(device: torch.device) -> int:
    if _raw_stream is not None:
        return _raw_stream(device.index)
    return torch.cuda.current_stream(device).cuda_stream


def split_k_workspace(device: torch.device, flag_elems: int, partial_elems: int, through_operator: bool = False):
    """(flags, partials) with at least the requested sizes, for the current stream.
    ``through_operator``: the call comes through the operator (as inside
    ``operator_calls``; the operator's C++ kernel says so here)."""
    stream = current_stream_handle(device)
    if torch.cuda.is_current_stream_capturing():
        if through_operator or getattr(_operator, "active", False):
            return _grown(None, device, flag_elems, partial_elems)
        capture = capture_id(stream)
        if capture is None:  # cannot tell captures apart: a workspace per call
            return _kept(_grown(None, device, flag_elems, partial_elems))
        with _lock:
            key = (capture, stream)
            found = _captures.get(key)
            if not _holds(found, flag_elems, partial_elems):
                found = _captures[key] = _kept(_grown(found, device, flag_elems, partial_elems))
            return found
    key = (device.index, stream)
    found = _workspaces.get(key)
    if _holds(found, flag_elems, partial_elems):
        return found
    with _lock:
        _workspaces[key] = _grown_outside_pools(_workspaces.get(key), device, stream, flag_elems, partial_elems)
        return _workspaces[key]


def _holds(found, flag_elems: int, partial_elems: int) -> bool:
    return found is not None and found[0].numel() >= flag_elems and found[1].numel() >= partial_elems


def _grown(found, device, flag_elems: int, partial_elems: int):
    """A new zeroed workspace at least as large as ``found`` and the request."""
    old_flags, old_partials = found if found is not None else (None, None)
    flags = torch.zeros(max(flag_elems, 0 if old_flags is None else old_flags.numel()),
                        dtype=torch.int32, device=device)
    partials = torch.empty(max(partial_elems, 0 if old_partials is None else old_partials.numel()),
                           dtype=torch.float32, device=device)
    return flags, partials


def _grown_outside_pools(found, device, stream: int, flag_elems: int, partial_elems: int):
    """``_grown`` on the helper thread, on ``stream`` (see the module's docstring)."""
    if device.type != "cuda":
        return _grown(found, device, flag_elems, partial_elems)

    def allocate():
        with torch.cuda.device(device), torch.cuda.stream(torch.cuda.ExternalStream(stream, device=device)):
            return _grown(found, device, flag_elems, partial_elems)

    return _helper.submit(allocate).result()


def _kept(workspace):
    with _lock:
        _captured.append(workspace)
    return workspace


def capture_id(stream: int) -> int | None:
    """The driver's id of the capture sequence ``stream`` is in (unique over the
    process's life), or None if the driver cannot say."""
    try:
        from cuda.bindings import driver

        result = driver.cuStreamGetCaptureInfo(driver.CUstream(stream))
        if result[0] != driver.CUresult.CUDA_SUCCESS:
            return None
        if result[1] != driver.CUstreamCaptureStatus.CU_STREAM_CAPTURE_STATUS_ACTIVE:
            return None
        return int(result[2])
    except (ImportError, RuntimeError, AttributeError, TypeError, ValueError, IndexError):  # no driver or bindings
        return None


def release_workspaces() -> None:
    """Drop the per-stream workspaces (re-created on the next split-K call). The
    workspaces of captured CUDA graphs stay: a graph may still be replayed."""
    with _lock:
        _workspaces.clear()
