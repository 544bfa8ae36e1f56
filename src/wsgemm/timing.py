"""How wsgemm times kernels: one protocol for the autotuner, which ranks candidates by
it, and the benchmarks, which report by it.

- **Single calls, in turns.** Each round calls every implementation once, in turn,
  with CUDA events around each call (:func:`time_in_turns`), so slow drift of the
  GPU's clocks or of a neighbour's load touches them all alike.
- **Cold L2, clean L2** (:class:`L2Flush`). Before each timed call a kernel *reads*
  a buffer twice the L2's size, so operands come from HBM as a model's weights do,
  then a spin kernel keeps the GPU busy while the host queues the timed call (a
  flush alone was not always longer than queueing a swapped or split decode call,
  and the host's time leaked into the timing: docs/tuning-log/timing.md). A
  memset flush would leave the L2 full of dirty lines whose write-back competes with
  the kernel timed (docs/tuning-log/decode.md); the suites' ``--flush write`` keeps
  that older protocol for comparison (docs/tuning-log/timing.md).
- **Short kernels in graphs.** Where the fastest single call takes under
  :data:`GRAPH_BELOW_MS`, launch latency is a large part of it, and only back-to-back
  calls let a programmatic dependent launch overlap the previous kernel
  (docs/tuning-log/dependent-launch.md):
  such kernels are timed again as CUDA-graph replays of back-to-back calls
  (:func:`capture_back_to_back`) over rotating operand copies
  (:func:`graph_operand_copies`).
- **Checked first.** Every implementation's output is compared with a reference
  before it is timed (:func:`relative_error`); a wrong one is reported, not timed.

What this protocol does not show: large GEMMs called back to back, as a model's forward
pass at large M calls them, hold an H200 at its power limit, where the clock follows
the power each kernel draws (its HBM traffic, for one); ``benchmarks/maint/sustained.py``
times that regime (docs/tuning-log/raster-bands.md).
"""

from __future__ import annotations

import statistics
import time

import torch

# Below this the single call of the fastest implementation is also timed in graphs.
GRAPH_BELOW_MS = 0.020
# GPU clock cycles of spinning after the flush: ~100 us at the H200's 1.98 GHz,
# several times the host time of queueing one call.
HOST_COVER_CYCLES = 200_000
# torch's spin kernel (private, present since torch 1.x); without it the flush alone
# has to cover the host's queueing time.
_spin = getattr(torch.cuda, "_sleep", None)
# The write flush: several times the 50-60 MB L2 of an H100/H200.
WRITE_FLUSH_BYTES = 512 * 1024 * 1024


def relative_error(result: torch.Tensor, reference: torch.Tensor) -> float:
    """||result - reference|| / ||reference|| in float32 (Frobenius norms); NaN where
    the result holds NaN, so ``not error < tolerance`` catches it. A zero reference
    gives the error's own norm over 1e-30, not a division by zero."""
    reference = reference.float()
    return ((result.float() - reference).norm() / reference.norm().clamp_min(1e-30)).item()


class L2Flush:
    """What runs before each timed call: ``"read"`` (the protocol above) or
    ``"write"`` (a 512 MiB memset, the suites' older protocol)."""

    MODES = ("read", "write")

    def __init__(self, device=None, mode: str = "read"):
        if mode not in self.MODES:
            raise ValueError(f"L2 flush mode must be one of {self.MODES}, got {mode!r}")
        device = torch.device(device or "cuda")
        l2_bytes = torch.cuda.get_device_properties(device).L2_cache_size
        self.mode = mode
        self.bytes = 2 * l2_bytes if mode == "read" else WRITE_FLUSH_BYTES
        self._buffer = torch.zeros(self.bytes // 4, dtype=torch.float32, device=device)

    def __call__(self) -> None:
        self.evict()
        # The write flush is long enough (~150 us) to cover the host by itself.
        if self.mode == "read" and _spin is not None:
            _spin(HOST_COVER_CYCLES)

    def evict(self) -> None:
        """Evict the L2 without covering the host: before a graph replay, which the
        host queues in one call."""
        if self.mode == "write":
            self._buffer.zero_()
        else:
            self._buffer.sum()

    def describe(self) -> str:
        if self.mode == "write":
            return f"L2 flushed ({self.bytes >> 20} MiB write)"
        return f"L2 flushed ({self.bytes >> 20} MiB read, then a {HOST_COVER_CYCLES // 1000}k-cycle spin)"


def time_in_turns(fns: dict, rounds: int, before_each, rest: float = 0.0) -> dict[str, list[float]]:
    """Milliseconds of every call, timed with CUDA events around it: each round calls
    every function once, in turn, with ``before_each()`` queued ahead of each timed
    call (an :class:`L2Flush`, say).

    ``rest``: after each round, wait for the GPU and leave it idle ``rest`` times as
    long as the round took. Under ~0.1 s or more of back-to-back large GEMMs an H200
    drops its SM clock from 1980 to 1575-1665 MHz, and every call is then timed 8-18 %
    slower (docs/tuning-log/timing.md); resting keeps the clocks where a short
    burst of calls (the suite's timing of most shapes) finds them. The first large
    kernel after a rest ran up to 30 % slower than its twin later in the round (the
    clocks come back from the idle), so with ``rest`` each round starts with an
    untimed call of its first function."""
    events = {name: [] for name in fns}
    first = next(iter(fns.values()), None)
    for _ in range(rounds):
        if rest and first is not None:
            before_each()
            first()
        started = time.perf_counter()
        for name, fn in fns.items():
            before_each()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            events[name].append((start, end))
        if rest:
            torch.cuda.synchronize()
            time.sleep(rest * (time.perf_counter() - started))
    torch.cuda.synchronize()
    return {name: [start.elapsed_time(end) for start, end in pairs] for name, pairs in events.items()}


def graph_operand_copies(operand_bytes: int, l2_bytes: int, calls: int) -> int:
    """Operand copies to rotate through in a graph of ``calls`` back-to-back GEMMs, so
    that each call reads operands that the previous ones pushed out of L2 (twice the
    L2 size between reuses), as in a model where each layer has its own weights."""
    return max(1, min(calls, -(-2 * l2_bytes // operand_bytes)))


def capture_back_to_back(fn, operands: list, calls: int) -> tuple[torch.cuda.CUDAGraph, list]:
    """A CUDA graph of ``calls`` back-to-back calls ``fn(*operands[i % len(operands)])``,
    and (operand index, result) of the last call on each operand copy, to check after
    replays (a replay reuses captured addresses, e.g. a split-K workspace, that an
    eager call never sees: docs/tuning-log/split-k.md)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # a first call off the capture stream, as torch's graph docs ask
        fn(*operands[0])
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    results = {}
    with torch.cuda.graph(graph):
        for i in range(calls):
            results[i % len(operands)] = fn(*operands[i % len(operands)])
    return graph, list(results.items())


def time_graph_replays(calls: dict, a: torch.Tensor, b: torch.Tensor, flush: L2Flush, calls_per_graph: int,
                       replays: int) -> dict[str, float]:
    """Median milliseconds per call of each ``calls[name](a, b)`` in CUDA-graph replays
    of ``calls_per_graph`` back-to-back calls, the graphs' replays taking turns, each
    after ``flush.evict()``. The calls rotate over copies of the operands, enough that
    the operands come from HBM and not from the previous call's L2 lines."""
    l2_bytes = torch.cuda.get_device_properties(a.device).L2_cache_size
    per_copy = a.numel() * a.element_size() + b.numel() * b.element_size()
    copies = graph_operand_copies(per_copy, l2_bytes, calls_per_graph)
    operands = [(a, b)] + [(a.clone(), b.clone()) for _ in range(copies - 1)]  # clone keeps strides
    graphs = {name: capture_back_to_back(call, operands, calls_per_graph)[0] for name, call in calls.items()}
    times = time_in_turns({name: graph.replay for name, graph in graphs.items()}, replays, flush.evict)
    return {name: statistics.median(ms) / calls_per_graph for name, ms in times.items()}
