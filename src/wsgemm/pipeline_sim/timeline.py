"""A timeline of the modelled pipeline: the same roles and machine as the checker,
scheduled by time under a simple latency model. THIS IS A MODEL, NOT A MEASUREMENT.

Every number in :class:`Latencies` is either measured by this project's
microbenchmarks (one warp, on an H100 or an H200) or an assumption, and says which,
next to where it comes from. The simulation answers "under these costs, where does
each role wait, and does the look-ahead placement change what the tensor core
sees?" -- it cannot say what a GPU does. Use it to reason about orders of magnitude
and about which parameter a conclusion depends on; sweep the assumptions.

How time is modelled:

* a role issues its ops one after another; each op costs an issue time;
* ``try_wait`` costs an issue slot; its answer arrives ``probe_us`` later if the
  phase is complete, else when the phase completes (+ ``wake_us``) or after
  ``try_wait_limit_us``, whichever is first (PTX: the thread "may be suspended"
  until then, up to a "system-dependent time limit"). Whether the warp keeps
  issuing the instructions after the probe meanwhile, PTX does not say; the
  measurements say it does (``probe_blocks_issue=False``: it stalls only where
  the answer is used). ``True`` models the other reading, under which the
  placement of the look-ahead probe matters;
* a blocking wait that passes at once costs one probe round trip; one that blocks
  resumes ``wake_us`` after the phase completes;
* TMA: each copy's first byte arrives ``tma_latency_us`` after issue, then its bytes
  stream through one per-SM channel at ``tma_bytes_per_us`` (copies queue for it);
* MMA: one tensor-core queue per SM, ``mma_us_per_kblock`` per k-block (SM90: split
  evenly between the consumer warpgroups, each issuing its share);
* epilogue: ``acc_read_us`` (SM100 tensor-memory load) and ``store_us_per_tile``.

The simulation runs the checker's :class:`~.machine.Machine`, so a timeline is also
one more checked interleaving: a protocol violation raises.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field, replace
from typing import NamedTuple

from ..config import Lookahead
from ..kernels.common import stages
from .machine import Machine, Step
from .ops import IssueMma, ReadAccumulator, StoreTile, TmaLoad, TryWait, Wait, WaitMmas
from .roles import build_kernel
from .spec import PipelineSpec, Structure


@dataclass(frozen=True)
class Latencies:
    """Costs in microseconds, for an H200 at its 1.98 GHz SM clock. Each is either
    MEASURED (benchmarks/results/trywait_microbench.md, one warp on an H200) or an
    ASSUMPTION, with the reasoning behind it."""

    # ASSUMPTION: global/L2 -> shared memory first-byte latency of a TMA load under
    # load, ~1 us (unloaded global-memory latency is a few hundred ns; a GEMM's
    # loads queue behind each other).
    tma_latency_us: float = 1.0
    # ASSUMPTION: bytes per us one SM's TMA loads stream at, 100 GB/s (1e5 B/us).
    # GEMM operands mostly hit L2; HBM alone (4.8 TB/s / 132 SMs = 36 GB/s per SM)
    # could not feed a 128x256x64 stage per MMA time.
    tma_bytes_per_us: float = 1.0e5
    # ASSUMPTION (from the datasheet): one 128x256x64 bf16 k-block, 2*128*256*64 =
    # 4.19 MFLOP, at H200's dense bf16 peak of ~989 TFLOP/s over 132 SMs: 0.56 us.
    mma_us_per_kblock: float = 0.56
    # MEASURED: try_wait on a completed phase, answer used at once: 50 cycles.
    probe_us: float = 0.025
    # MEASURED (benchmarks/results/trywait_probe_h100.json; H200 independently ~7,760):
    # try_wait on a pending phase without a suspendTimeHint (what the kernels issue),
    # on a warp that has not issued bulk copies, answers false after 7,772 cycles,
    # 3.925 us at 1,980 MHz, unless the phase completes first. After the warp has
    # issued bulk copies and waited for them it answered false in ~50 cycles; the model's
    # times are the same either way (docs/producer-lookahead.md, parts 2 and 4).
    try_wait_limit_us: float = 3.925
    # MEASURED: a pending try_wait whose answer is not read yet does not stop the warp
    # (H100: 55 cycles to the next clock read on a clean barrier, 60 with a bulk copy's
    # issue behind it; H200 microbenchmark: 3 cycles, an ld.shared or cp.async.bulk
    # after it not delayed): the warp only waits where the answer is read. True models
    # the literal reading of PTX's "the thread may be suspended" instead.
    probe_blocks_issue: bool = False
    # ASSUMPTION: a warp resumes ~100 cycles after the phase it blocks on completes
    # (the blocking wait is a try_wait loop with a 10 ms suspend hint).
    wake_us: float = 0.05
    # ASSUMPTION: issuing one instruction-level op (TMA copy, arrive, MMA batch,
    # commit) takes ~20 cycles; the microbenchmark's cp.async.bulk issue took 14.
    issue_us: float = 0.01
    # ASSUMPTION: SM100 tcgen05.ld of a 128x256 fp32 accumulator into registers.
    acc_read_us: float = 0.2
    # ASSUMPTION: convert and TMA-store a 128x256 bf16 tile (64 KiB) at ~100 GB/s,
    # plus the register -> shared-memory copy.
    store_us_per_tile: float = 0.8


class Interval(NamedTuple):
    start: float
    end: float
    kind: str  # issue | wait | probe | mma-wait | epilogue | copy | mma


# Interval kinds that count as a role stalling (not doing its own work).
STALL_KINDS = ("wait", "probe")


@dataclass
class Timeline:
    """Per-row intervals of one simulated run, with the numbers derived from them."""

    spec: PipelineSpec
    latencies: Latencies
    rows: dict[str, list[Interval]]  # roles, then "TMA" and "tensor core"
    makespan_us: float
    refill_latencies_us: list[float] = field(default_factory=list)

    def total(self, row: str, kinds) -> float:
        return sum(i.end - i.start for i in self.rows[row] if i.kind in kinds)

    @property
    def tensor_core_busy_us(self) -> float:
        return self.total("tensor core", ("mma",))

    @property
    def producer_stall_us(self) -> float:
        return self.total("producer", STALL_KINDS)

    @property
    def producer_stall_exposed_us(self) -> float:
        """Producer stall during which the tensor core was idle too: the stall the
        pipeline did *not* hide behind math."""
        stalls = [i for i in self.rows["producer"] if i.kind in STALL_KINDS]
        return _overlap(stalls, _gaps(self.rows["tensor core"], self.makespan_us))

    @property
    def producer_stall_hidden_us(self) -> float:
        return self.producer_stall_us - self.producer_stall_exposed_us

    @property
    def mean_refill_latency_us(self) -> float:
        """Mean time from a slot's release to the first TMA copy that refills it."""
        if not self.refill_latencies_us:
            return math.nan
        return sum(self.refill_latencies_us) / len(self.refill_latencies_us)


def simulate(spec: PipelineSpec, latencies: Latencies | None = None) -> Timeline:
    """Run ``spec`` once, every role as early as its dependencies allow."""
    return _Simulation(spec, latencies or Latencies()).run()


def compare_policies(spec: PipelineSpec, latencies: Latencies | None = None) -> list[Timeline]:
    """``simulate`` for each look-ahead policy, everything else equal."""
    return [simulate(replace(spec, lookahead=policy), latencies) for policy in Lookahead]


def timeline_spec(structure: Structure = Structure.SM90) -> PipelineSpec:
    """The default 128x256x64 bf16 kernel's shape: 4 stages; SM90 with its 2 consumer
    warpgroups; a few tiles of 8 k-blocks, enough to see the steady state."""
    return PipelineSpec(structure, stages=4, tiles=3, k_blocks=8, consumer_warpgroups=2)


def format_report(timelines: list[Timeline]) -> str:
    """A table: per run, the makespan, tensor-core use and the producer's stalls."""
    header = (f"{'policy':12} {'makespan us':>11} {'tensor core busy':>16} {'producer stall us':>17} "
              f"{'hidden':>7} {'refill latency us':>17}")
    lines = ["MODEL, not a measurement (latencies: wsgemm.pipeline_sim.timeline.Latencies, measured or assumed)",
             header]
    for t in timelines:
        hidden = t.producer_stall_hidden_us / t.producer_stall_us if t.producer_stall_us else 1.0
        lines.append(
            f"{t.spec.lookahead.value:12} {t.makespan_us:11.2f} "
            f"{t.tensor_core_busy_us / t.makespan_us:16.1%} {t.producer_stall_us:17.2f} "
            f"{hidden:7.1%} {t.mean_refill_latency_us:17.3f}"
        )
    return "\n".join(lines)


# Colours of the Gantt chart, by interval kind.
COLOURS = {"issue": "#2ca02c", "wait": "#d62728", "probe": "#ff7f0e", "mma-wait": "#aec7e8",
           "epilogue": "#9467bd", "copy": "#7f7f7f", "mma": "#1f77b4"}


def draw_gantt(timelines: list[Timeline], path, *, width_px: int = 900, height_px: int = 500,
               dpi: int = 80) -> None:
    """Draw one Gantt panel per timeline (e.g. per policy) into a small PNG at ``path``."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
        from matplotlib.patches import Patch
    except ImportError as e:
        raise ImportError("draw_gantt needs matplotlib: pip install matplotlib") from e

    fig = Figure(figsize=(width_px / dpi, height_px / dpi), dpi=dpi)
    FigureCanvasAgg(fig)
    axes = fig.subplots(len(timelines), 1, sharex=True, squeeze=False)[:, 0]
    end = max(t.makespan_us for t in timelines)
    for ax, t in zip(axes, timelines):
        names = list(t.rows)
        for y, name in enumerate(names):
            for kind in COLOURS:
                bars = [(i.start, i.end - i.start) for i in t.rows[name] if i.kind == kind]
                if bars:
                    ax.broken_barh(bars, (y - 0.4, 0.8), facecolors=COLOURS[kind], linewidth=0)
        ax.set_yticks(range(len(names)), names, fontsize=7)
        ax.invert_yaxis()
        ax.set_xlim(0, end)
        ax.tick_params(axis="x", labelsize=7)
        ax.set_title(f"{t.spec.short()}: {t.makespan_us:.1f} us, tensor core "
                     f"{t.tensor_core_busy_us / t.makespan_us:.0%} busy", fontsize=8, loc="left")
    axes[-1].set_xlabel("time (us) -- a MODEL (Latencies: measured or assumed), not a measurement", fontsize=8)
    fig.legend(handles=[Patch(color=c, label=k) for k, c in COLOURS.items()], loc="upper right",
               ncol=len(COLOURS), fontsize=7, frameon=False)
    fig.tight_layout(rect=(0, 0, 1, 0.95))
    fig.savefig(path, dpi=dpi)


# -- the simulation ---------------------------------------------------------------------

class _RoleClock:
    """Where one role is in time."""

    def __init__(self):
        self.free_at = 0.0  # when it can issue its next op
        self.token_ready_at = 0.0  # when its last probe's answer arrives
        self.probe: TryWait | None = None  # a probe still waiting for its phase
        self.probe_deadline = math.inf  # ... until then, when it answers false
        self.state = "running"  # running | blocked (in a wait) | suspended (in try_wait)
        self.since = 0.0  # when it blocked or was suspended
        self.suspended_until = math.inf  # suspended: when its try_wait gives up
        self.woken_at: float | None = None  # when the awaited condition (+ wake-up) holds


# Ties at equal times: completions before the roles that wait for them.
_ORDER = {"mma": 0, "commit": 1, "tma": 2, "role": 3}


class _Simulation:
    def __init__(self, spec: PipelineSpec, lat: Latencies):
        self.spec = spec
        self.lat = lat
        self.kernel = build_kernel(spec)
        self.machine = Machine(self.kernel)
        self.clocks = [_RoleClock() for _ in self.kernel.role_names]
        self.rows: dict[str, list[Interval]] = {n: [] for n in (*self.kernel.role_names, "TMA", "tensor core")}
        self.now = 0.0
        self.copy_lands: dict = {}
        self.mma_ends = [deque() for _ in range(self.kernel.mma_queues)]
        self.commit_times: dict = {}
        self.tma_free = 0.0
        self.tensor_core_free = 0.0
        self.phases = [b.phase for b in self.machine.barriers]
        self.completed_at: dict[tuple[int, int], float] = {}  # (barrier, phase) -> time
        self.refills: list[float] = []

    def run(self) -> Timeline:
        m = self.machine
        while (event := self._next_event()) is not None:
            self.now, kind, arg = event
            if kind == "role":
                self._role_event(arg)
            else:
                m.apply(Step(kind, arg))
                if kind == "tma":
                    del self.copy_lands[arg]
                elif kind == "mma":
                    self.mma_ends[arg].popleft()
                else:
                    del self.commit_times[arg]
            self._after_step()
        if not m.finished():
            raise RuntimeError(f"the simulation stopped before the end: {m.deadlock()}")
        m.check_final()
        makespan = max((i.end for row in self.rows.values() for i in row), default=0.0)
        return Timeline(self.spec, self.lat, self.rows, makespan, self.refills)

    def _next_event(self):
        m = self.machine
        events = []
        for role, clock in enumerate(self.clocks):
            op = m.next_op(role)
            if op is None:
                continue
            if clock.state == "running":
                t = clock.free_at
                if isinstance(op, Wait) and op.unless_token:
                    t = max(t, clock.token_ready_at)  # the branch needs the probe's answer
            elif clock.state == "blocked":
                if clock.woken_at is None:
                    continue
                t = clock.woken_at
            else:
                t = min(clock.suspended_until, math.inf if clock.woken_at is None else clock.woken_at)
            events.append((t, _ORDER["role"], role))
        events.extend((t, _ORDER["tma"], c) for c, t in self.copy_lands.items())
        events.extend((ends[0], _ORDER["mma"], q) for q, ends in enumerate(self.mma_ends) if ends)
        events.extend((t, _ORDER["commit"], c) for c, t in self.commit_times.items()
                      if m.mmas_completed[c.queue] >= c.after)
        if not events:
            return None
        t, order, arg = min(events, key=lambda e: (e[0], e[1]))
        kind = next(k for k, v in _ORDER.items() if v == order)
        return t, kind, arg

    def _role_event(self, role: int) -> None:
        m, lat, clock, t = self.machine, self.lat, self.clocks[role], self.now
        op = m.next_op(role)
        row = self.rows[self.kernel.role_names[role]]
        if clock.state == "running":
            if clock.free_at < t:
                row.append(Interval(clock.free_at, t, "probe"))  # waited for a probe's answer
            if isinstance(op, TryWait) or (isinstance(op, Wait) and op.unless_token):
                clock.probe = None  # a new probe replaces it; this wait uses its answer
            if not op.ready(m, role):
                clock.state, clock.since, clock.woken_at = "blocked", t, None
                return
            incomplete = isinstance(op, TryWait) and not m.barriers[op.barrier].test_wait(op.parity)
            if incomplete and lat.try_wait_limit_us > 0 and lat.probe_blocks_issue:
                clock.state, clock.since, clock.woken_at = "suspended", t, None
                clock.suspended_until = t + lat.try_wait_limit_us
                return
            cost = self._cost(op, role)
            if isinstance(op, TryWait):
                clock.token_ready_at = t + lat.probe_us
                if incomplete and lat.try_wait_limit_us > 0:
                    # Suspended in the background: the answer comes when the phase
                    # completes or the limit expires (see _after_step).
                    clock.probe, clock.probe_deadline = op, t + lat.try_wait_limit_us
                    clock.token_ready_at = clock.probe_deadline
        else:
            if clock.state == "suspended":
                kind, clock.token_ready_at = "probe", t  # its answer is known now
            else:
                kind = "mma-wait" if isinstance(op, WaitMmas) else "wait"
            row.append(Interval(clock.since, t, kind))
            clock.state = "running"
            cost = 0.0  # the wake-up was already counted
        copies, commits = m.copies_in_flight, m.commits_in_flight
        m.apply(Step("role", role))
        self._start_async_work(role, op, t, copies, commits)
        if cost:
            row.append(Interval(t, t + cost, "epilogue" if isinstance(op, (ReadAccumulator, StoreTile)) else "issue"))
        clock.free_at = t + cost

    def _cost(self, op, role: int) -> float:
        lat = self.lat
        if isinstance(op, Wait):
            skipped = op.unless_token and self.machine.tokens[role]
            return 0.0 if skipped else lat.probe_us  # a wait that passes at once: one probe
        if isinstance(op, WaitMmas):
            return 0.0
        if isinstance(op, ReadAccumulator):
            return lat.acc_read_us
        if isinstance(op, StoreTile):
            return lat.store_us_per_tile
        return lat.issue_us

    def _start_async_work(self, role: int, op, t: float, copies_before, commits_before) -> None:
        m, lat = self.machine, self.lat
        for copy in m.copies_in_flight - copies_before:
            start = max(t + lat.tma_latency_us, self.tma_free)
            self.tma_free = start + copy.nbytes / lat.tma_bytes_per_us
            self.copy_lands[copy] = self.tma_free
            self.rows["TMA"].append(Interval(start, self.tma_free, "copy"))
        if isinstance(op, TmaLoad) and op.operand == "A" and op.kblock >= self.spec.stages:
            empty = self.kernel.barrier_names.index(f"empty[{op.slot}]")
            released = self.completed_at[(empty, stages.ring_lap(op.kblock, self.spec.stages) - 1)]
            self.refills.append(t - released)
        if isinstance(op, IssueMma):
            queue = self.kernel.role_queues[role]
            start = max(t, self.tensor_core_free)
            # Cooperative warpgroups each issue their rows' share of a k-block.
            share = len(self.kernel.readers(op.kblock))
            self.tensor_core_free = start + lat.mma_us_per_kblock / share
            self.mma_ends[queue].append(self.tensor_core_free)
            self.rows["tensor core"].append(Interval(start, self.tensor_core_free, "mma"))
        for commit in m.commits_in_flight - commits_before:
            ends = self.mma_ends[commit.queue]
            self.commit_times[commit] = ends[-1] if ends else t

    def _after_step(self) -> None:
        m = self.machine
        for b, barrier in enumerate(m.barriers):
            while self.phases[b] < barrier.phase:
                self.completed_at[(b, self.phases[b])] = self.now
                self.phases[b] += 1
        for role, clock in enumerate(self.clocks):
            probe = clock.probe
            if probe is not None and self.now <= clock.probe_deadline and m.barriers[probe.barrier].test_wait(probe.parity):
                # The phase completed while the probe was suspended: it answers true.
                # Reading the token later than program order is safe: a completed
                # phase stays completed until this role itself acts on it.
                m.tokens[role] = True
                clock.token_ready_at = min(clock.token_ready_at, self.now + self.lat.wake_us)
                clock.probe = None
            if clock.state == "running" or clock.woken_at is not None:
                continue
            op = m.next_op(role)
            if clock.state == "blocked" and op.ready(m, role):
                clock.woken_at = self.now + (0.0 if isinstance(op, WaitMmas) else self.lat.wake_us)
            elif clock.state == "suspended" and m.barriers[op.barrier].test_wait(op.parity):
                clock.woken_at = self.now + self.lat.wake_us


def _gaps(busy: list[Interval], end: float) -> list[Interval]:
    """The complement of ``busy`` within [0, end]."""
    gaps, t = [], 0.0
    for i in sorted(busy):
        if i.start > t:
            gaps.append(Interval(t, i.start, "idle"))
        t = max(t, i.end)
    if t < end:
        gaps.append(Interval(t, end, "idle"))
    return gaps


def _overlap(a: list[Interval], b: list[Interval]) -> float:
    return sum(max(0.0, min(x.end, y.end) - max(x.start, y.start)) for x in a for y in b)
