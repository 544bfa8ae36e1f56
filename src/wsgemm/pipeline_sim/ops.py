"""The operations warp roles issue, and what each does to the model's state.

One op per kernel instruction that touches state another role can see: mbarrier
waits, probes and arrivals, TMA loads, MMA issue, accumulator reads, tile stores.
Purely local work (address arithmetic, loop counters) has no op: nothing else can
observe it, so it cannot change which interleavings are possible.

Each op answers two questions for the machine (:mod:`.machine`):

* ``ready(m, role)`` -- can the role execute it now? Only waits can say no.
* ``run(m, role)`` -- execute it: update barriers, slots, accumulators, and queue the
  asynchronous work it starts (TMA bytes landing, MMAs completing), which the
  machine later delivers as separate steps.

A role's only data-dependent decision is whether a blocking wait can be skipped
because an earlier probe said the phase was complete; that answer lives in the
role's ``token`` register (``TryWait`` writes it, ``Wait(unless_token=True)`` reads it).
"""

from __future__ import annotations

from dataclasses import dataclass


class Op:
    """Base class: an op that never blocks."""

    def ready(self, m, role: int) -> bool:
        return True

    def run(self, m, role: int) -> None:
        raise NotImplementedError

    def describe(self, m) -> str:
        """One line for traces; ``m`` names the barriers (a Machine or a KernelModel)."""
        raise NotImplementedError


# -- mbarrier operations ----------------------------------------------------------------

@dataclass(frozen=True)
class TryWait(Op):
    """``token = mbarrier.try_wait.parity(barrier, parity)``: a probe whose answer is
    only a hint for a later :class:`Wait`."""

    barrier: int
    parity: int

    def run(self, m, role):
        m.tokens[role] = m.barriers[self.barrier].try_wait(self.parity)

    def describe(self, m):
        return f"try_wait {m.barrier_names[self.barrier]} parity {self.parity}"


@dataclass(frozen=True)
class Wait(Op):
    """``mbarrier.wait.parity``; with ``unless_token`` it is skipped when the role's
    token (the last probe's answer) is true -- ``if not token: wait``."""

    barrier: int
    parity: int
    unless_token: bool = False

    def ready(self, m, role):
        if self.unless_token and m.tokens[role]:
            return True
        return m.barriers[self.barrier].test_wait(self.parity)

    def run(self, m, role):
        pass  # passing the wait is the whole effect

    def describe(self, m):
        prefix = "if not token: " if self.unless_token else ""
        return f"{prefix}wait {m.barrier_names[self.barrier]} parity {self.parity}"


@dataclass(frozen=True)
class Arrive(Op):
    """``mbarrier.arrive`` from ``count`` warps at once (they arrive back to back; only
    the last arrival can complete the phase, so issuing them together changes no
    outcome). ``phase``: the phase the arrivals are meant for, from the role's counter."""

    barrier: int
    count: int
    phase: int

    def run(self, m, role):
        m.check_alive(m.kernel.barrier_cta[self.barrier], f"an arrival on {m.barrier_names[self.barrier]}")
        m.barriers[self.barrier] = m.barriers[self.barrier].arrive(self.count, for_phase=self.phase)

    def describe(self, m):
        warps = f" x{self.count}" if self.count > 1 else ""
        return f"arrive{warps} on {m.barrier_names[self.barrier]} (phase {self.phase})"


@dataclass(frozen=True)
class ArriveExpectTx(Op):
    """``mbarrier.arrive.expect_tx``: announce a stage's bytes on ``full[s]`` and arrive."""

    barrier: int
    nbytes: int
    phase: int

    def run(self, m, role):
        m.check_alive(m.kernel.barrier_cta[self.barrier], f"an arrival on {m.barrier_names[self.barrier]}")
        m.barriers[self.barrier] = m.barriers[self.barrier].arrive_expect_tx(
            self.nbytes, for_phase=self.phase
        )

    def describe(self, m):
        return f"arrive.expect_tx {self.nbytes} B on {m.barrier_names[self.barrier]} (phase {self.phase})"


# -- data movement and math -------------------------------------------------------------

@dataclass(frozen=True)
class TmaLoad(Op):
    """One TMA copy (A or B) of k-block ``kblock`` into ring slot ``slot``; its bytes land
    later and ``complete_tx`` on ``barrier``.

    ``multicast``: further ``(slot, barrier)`` destinations of a ``.multicast::cluster``
    copy (the same slot of other CTAs); its bytes land in each of them separately."""

    slot: int
    kblock: int
    operand: str  # "A" or "B"
    barrier: int
    nbytes: int
    phase: int
    multicast: tuple[tuple[int, int], ...] = ()

    @property
    def destinations(self) -> tuple[tuple[int, int], ...]:
        return ((self.slot, self.barrier), *self.multicast)

    def run(self, m, role):
        m.start_copy(role, self)

    def describe(self, m):
        if not self.multicast:
            return f"TMA load {self.operand} of k-block {self.kblock} -> slot {self.slot}"
        slots = ", ".join(m.slot_name(slot) for slot, _ in self.destinations)
        return f"TMA load {self.operand} of k-block {self.kblock} -> {slots}"


@dataclass(frozen=True)
class IssueMma(Op):
    """Issue the MMAs of one k-block: read ring slot ``slot`` (which must hold k-block
    ``kblock``, fully landed) into accumulator ``acc``. ``first`` = the tile's first
    k-block, which overwrites the accumulator instead of adding to it.

    They complete later, in issue order, through the issuing role's queue (SM90:
    ``wgmma.commit_group`` makes each k-block one group; SM100: the MMA warp's
    ``tcgen05.mma`` stream).
    """

    slot: int
    kblock: int
    acc: int
    tile: int
    first: bool
    # A 2-CTA MMA (cta_group::2) also reads the same slot of the pair's peer CTA and
    # writes the peer's half of the accumulator, in the peer's tensor memory.
    peer_slots: tuple[int, ...] = ()
    peer_accs: tuple[int, ...] = ()

    def run(self, m, role):
        m.issue_mma(role, self)

    def describe(self, m):
        return f"MMA on slot {self.slot} (k-block {self.kblock}) into accumulator {self.acc} for tile {self.tile}"


@dataclass(frozen=True)
class WaitMmas(Op):
    """SM90 ``wgmma.wait_group(pending)``: wait until at most ``pending`` of this
    warpgroup's MMA groups are still running."""

    pending: int

    def ready(self, m, role):
        return m.mmas_in_flight(role) <= self.pending

    def run(self, m, role):
        pass

    def describe(self, m):
        return f"wgmma.wait_group({self.pending})"


@dataclass(frozen=True)
class Commit(Op):
    """SM100 ``tcgen05.commit``: arrive once on ``barrier`` when every MMA this warp
    issued so far has completed. ``multicast``: the same barrier of the other CTAs in
    the commit's mask, which get one arrival each at the same time."""

    barrier: int
    phase: int
    multicast: tuple[int, ...] = ()

    @property
    def barriers(self) -> tuple[int, ...]:
        return (self.barrier, *self.multicast)

    def run(self, m, role):
        m.queue_commit(role, self)

    def describe(self, m):
        names = ", ".join(m.barrier_names[b] for b in self.barriers)
        return f"tcgen05.commit -> {names} (phase {self.phase})"


@dataclass(frozen=True)
class ReadAccumulator(Op):
    """SM100 epilogue: ``tcgen05.ld`` the whole accumulator buffer ``acc`` of ``tile``."""

    acc: int
    tile: int

    def run(self, m, role):
        m.read_accumulator(self.acc, self.tile)

    def describe(self, m):
        return f"read accumulator {self.acc} (tile {self.tile})"


# -- ping-pong turns ------------------------------------------------------------------------

@dataclass(frozen=True)
class WaitTurn(Op):
    """Ping-pong: ``bar.sync`` on this warpgroup's turn barrier before the mainloop of
    the CTA's ``tile``-th work item: the mainloops of tiles 0..tile-1 were handed over."""

    tile: int

    def ready(self, m, role):
        return m.turns_handed_over >= self.tile

    def run(self, m, role):
        pass

    def describe(self, m):
        return f"wait for the turn of tile {self.tile}"


@dataclass(frozen=True)
class PassTurn(Op):
    """Ping-pong: ``bar.arrive`` on the other warpgroup's turn barrier once this one has
    issued its tile's last MMA."""

    tile: int

    def run(self, m, role):
        m.turns_handed_over += 1

    def describe(self, m):
        return f"hand the mainloop over after tile {self.tile}"


@dataclass(frozen=True)
class StoreTile(Op):
    """Write this role's part of output tile ``tile`` from accumulator ``acc``.

    ``reads_accumulator``: the accumulator is the role's own registers (SM90), read
    as part of the store; the SM100 epilogue read it with ``ReadAccumulator`` before.
    """

    tile: int
    part: int
    acc: int
    reads_accumulator: bool

    def run(self, m, role):
        if self.reads_accumulator:
            m.read_accumulator(self.acc, self.tile)
        m.store_tile(self.tile, self.part)

    def describe(self, m):
        return f"store tile {self.tile} (part {self.part})"


# -- tensor memory (SM100): a per-SM pool of columns ------------------------------------------

@dataclass(frozen=True)
class TmemAlloc(Op):
    """``tcgen05.alloc``: take ``columns`` of SM ``sm``'s tensor memory for CTA ``cta``;
    blocks until that many are free. With ``relinquish``, followed by
    ``tcgen05.relinquish_alloc_permit`` (the CTA will allocate no more) as one step: the
    permit is read only by the CTA's own later allocations, so no other step can tell
    the two instructions apart in time."""

    cta: int
    sm: int
    columns: int
    relinquish: bool = False

    def ready(self, m, role):
        return m.tmem_free[self.sm] >= self.columns

    def run(self, m, role):
        m.tmem_allocate(self)
        if self.relinquish:
            m.tmem_relinquish(self.cta)

    def describe(self, m):
        text = f"tcgen05.alloc {self.columns} columns on SM {self.sm}"
        return text + "; tcgen05.relinquish_alloc_permit" if self.relinquish else text


@dataclass(frozen=True)
class WaitTmemAllocated(Op):
    """Wait until every CTA in ``ctas`` holds its tensor memory: the MMA warp's
    ``tmem.wait_for_alloc`` (a named barrier with the allocating warp); for abstract
    CTAs of another cluster, that all of their cluster allocated."""

    ctas: tuple[int, ...]

    def ready(self, m, role):
        return all(m.tmem_state[c] != TMEM_NONE for c in self.ctas)

    def run(self, m, role):
        pass

    def describe(self, m):
        return "wait until CTA" + "s" * (len(self.ctas) > 1) + " " + ", ".join(map(str, self.ctas)) + " allocated"


@dataclass(frozen=True)
class TmemDealloc(Op):
    """``tcgen05.dealloc``: free the columns CTA ``cta`` allocated; with
    ``cta_group::2`` (``pair`` of more than one CTA) the pair's allocation, in every
    CTA of the pair."""

    cta: int
    pair: tuple[int, ...]

    def run(self, m, role):
        m.tmem_deallocate(self)

    def describe(self, m):
        return "tcgen05.dealloc" + (".cta_group::2" if len(self.pair) > 1 else "")


# What a CTA's tensor memory holds (Machine.tmem_state).
TMEM_NONE, TMEM_HELD, TMEM_FREED = 0, 1, 2
