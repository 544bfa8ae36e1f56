"""Split-K and stream-K workspaces: one per (device, CUDA stream), reused across
calls; a private one for every call captured into a CUDA graph.

A split-K or stream-K kernel needs int32 arrival flags that are zero when it starts,
and fp32 slots for partial sums (``kernels/common/split_k.py``, ``stream_k.py``).
Every launch leaves its flags at zero, so a workspace is zeroed once, when it is
allocated, and then reused by every later launch on the same stream; launches on one
stream run in order and never share a workspace concurrently. Another stream gets its own workspace, so
concurrent streams never race on the flags. When a call needs a larger workspace
the old one is dropped: the caching allocator reuses its memory only for later work
on the same stream, after the launches queued before.

A CUDA graph is different: it replays the addresses it captured for as long as it
lives, and may be replayed on any stream. So a call made during capture gets its
own workspace (zeroed inside the graph, which also re-zeroes the flags on every
replay), kept alive by this module for the life of the process: replacing or
sharing it would let a later allocation or another graph scribble on it.
"""

from __future__ import annotations

import threading

import torch

_workspaces: dict[tuple[int, int], tuple[torch.Tensor, torch.Tensor]] = {}
_captured: list[tuple[torch.Tensor, torch.Tensor]] = []  # referenced by CUDA graphs
_lock = threading.Lock()


def split_k_workspace(device: torch.device, flag_elems: int, partial_elems: int):
    """(flags, partials) with at least the requested sizes, for the current stream."""
    if torch.cuda.is_current_stream_capturing():
        captured = (torch.zeros(flag_elems, dtype=torch.int32, device=device),
                    torch.empty(partial_elems, dtype=torch.float32, device=device))
        with _lock:
            _captured.append(captured)
        return captured
    key = (device.index, torch.cuda.current_stream(device).cuda_stream)
    found = _workspaces.get(key)
    if found is not None and found[0].numel() >= flag_elems and found[1].numel() >= partial_elems:
        return found
    with _lock:
        old_flags, old_partials = found if found is not None else (None, None)
        flags = torch.zeros(max(flag_elems, 0 if old_flags is None else old_flags.numel()),
                            dtype=torch.int32, device=device)
        partials = torch.empty(max(partial_elems, 0 if old_partials is None else old_partials.numel()),
                               dtype=torch.float32, device=device)
        _workspaces[key] = (flags, partials)
        return flags, partials


def release_workspaces() -> None:
    """Drop the per-stream workspaces (re-created on the next split-K call). The
    workspaces of captured CUDA graphs stay: a graph may still be replayed."""
    with _lock:
        _workspaces.clear()
