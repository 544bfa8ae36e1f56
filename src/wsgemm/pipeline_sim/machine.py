"""The state of one modelled CTA, the steps that can change it, and the ground truth
that judges each step.

A **step** is either one op of one role (:mod:`.ops`) or one piece of asynchronous
hardware work finishing: a TMA copy's bytes landing, an issuer's oldest MMA group
completing, a ``tcgen05.commit`` arriving. Any enabled step may come next; the
checker tries them all, the timeline picks by time.

Besides the barriers, the machine tracks what the barriers are supposed to protect,
independently of them:

* each ring slot: which k-block is in it (or on its way), how many of its copies
  landed, and which readers have not finished with it (an MMA reads the slot until
  that MMA completes);
* each accumulator: which tile it holds, how many k-blocks completed into it, and
  whether it still waits to be read;
* how often each part of each output tile was stored;
* in a cluster (:mod:`.cluster`): which CTAs hold their tensor memory, how many
  columns each SM has free, and which CTAs have exited -- a CTA exits as soon as all
  its roles have finished, and nothing may arrive on its barriers or land in its
  shared memory after that.

A step that breaks one of these raises :class:`ProtocolViolation`.
"""

from __future__ import annotations

import enum
from typing import NamedTuple

from .mbarrier import EarlyArrivalError, Mbarrier, MbarrierError, OverArrivalError
from .ops import TMEM_FREED, TMEM_HELD, TMEM_NONE, TmaLoad
from .roles import KernelModel


class Violation(str, enum.Enum):
    """What the checker can find, and what it means."""

    DEADLOCK = "deadlock"  # no step is enabled, yet some role has not finished
    STAGE_OVERWRITTEN = "stage overwritten"  # a TMA copy into a slot a reader is still using
    READ_BEFORE_LANDED = "read before landed"  # an MMA read a slot whose bytes had not all landed
    KBLOCK_OUT_OF_ORDER = "k-block out of order"  # an MMA read another k-block than its turn
    ACC_OVERWRITTEN = "accumulator overwritten"  # a tile's first MMA into an unread accumulator
    ACC_READ_EARLY = "accumulator read early"  # read before all of its tile's MMAs completed
    TILE_NOT_STORED_ONCE = "tile not stored exactly once"
    OVER_ARRIVAL = "over-arrival"  # more arrivals than a barrier phase expects
    EARLY_ARRIVAL = "early arrival"  # an arrival for a phase that has not started
    # Clusters only:
    TMEM_NOT_HELD = "tensor memory not held"  # an MMA or tcgen05.ld on columns not (or no longer) allocated
    AFTER_EXIT = "arrival after exit"  # an arrival or TMA bytes reached a CTA that has exited
    ALLOC_AFTER_RELINQUISH = "alloc after relinquish"  # tcgen05.alloc after giving up the permit


class ProtocolViolation(Exception):
    def __init__(self, kind: Violation, message: str):
        super().__init__(f"{kind.value}: {message}")
        self.kind = kind
        self.message = message


class Slot(NamedTuple):
    kblock: int | None  # the hand-over whose bytes are in, or on their way into, the slot
    landed: int  # copies of it that have landed
    readers: frozenset  # roles that still have to finish reading it


class Accumulator(NamedTuple):
    tile: int | None
    kblocks_done: int  # k-blocks whose MMAs completed into it
    unread: bool  # holds a tile nobody has read yet


class TmaCopy(NamedTuple):
    issuer: int  # the role that issued it (a slot of a cluster gets copies from several)
    slot: int
    kblock: int
    operand: str
    barrier: int
    nbytes: int
    phase: int


class MmaGroup(NamedTuple):
    reader: int  # the role that issued it
    slots: tuple[int, ...]  # the slots it reads (a 2-CTA MMA: one in each CTA of the pair)
    kblock: int
    accs: tuple[int, ...]  # the accumulators it writes


class PendingCommit(NamedTuple):
    queue: int
    barriers: tuple[int, ...]  # one arrival on each (a multicast commit)
    phase: int
    after: int  # arrives once this many of the queue's MMA groups have completed


class Step(NamedTuple):
    kind: str  # "role", "tma", "mma" or "commit"
    arg: object  # role index, TmaCopy, queue index, PendingCommit


class Machine:
    """Mutable state of one CTA; :meth:`clone` and :meth:`key` make it explorable."""

    def __init__(self, kernel: KernelModel):
        self.kernel = kernel
        self.barrier_names = kernel.barrier_names
        self.pcs = [0] * len(kernel.programs)
        self.tokens = [False] * len(kernel.programs)
        self.barriers = [Mbarrier.init(c) for c in kernel.barrier_counts]
        self.slots = [Slot(None, 0, frozenset())] * kernel.slot_count
        self.accumulators = [Accumulator(None, 0, False)] * kernel.accumulators
        self.copies_in_flight: frozenset[TmaCopy] = frozenset()
        self.mma_queues: list[tuple[MmaGroup, ...]] = [()] * kernel.mma_queues
        self.mmas_completed = [0] * kernel.mma_queues
        self.commits_in_flight: frozenset[PendingCommit] = frozenset()
        self.stores = [0] * (kernel.spec.tiles * kernel.tile_parts)
        self.turns_handed_over = 0  # ping-pong: mainloops handed to the other warpgroup
        self.tmem_free = list(kernel.tmem_columns_per_sm)  # free columns of each SM
        self.tmem_state = [TMEM_NONE] * kernel.cta_count
        self.relinquished: frozenset[int] = frozenset()  # CTAs that gave up the alloc permit
        self.exited: frozenset[int] = frozenset()  # CTAs whose roles have all finished

    def clone(self) -> "Machine":
        other = object.__new__(Machine)
        other.__dict__.update(self.__dict__)
        for name in ("pcs", "tokens", "barriers", "slots", "accumulators", "mma_queues",
                     "mmas_completed", "stores", "tmem_free", "tmem_state"):
            setattr(other, name, list(getattr(self, name)))
        return other

    def key(self) -> tuple:
        """Everything that decides what can happen next, as one hashable value."""
        return (tuple(self.pcs), tuple(self.tokens), tuple(self.barriers), tuple(self.slots),
                tuple(self.accumulators), self.copies_in_flight, tuple(self.mma_queues),
                tuple(self.mmas_completed), self.commits_in_flight, tuple(self.stores),
                self.turns_handed_over, tuple(self.tmem_free), tuple(self.tmem_state),
                self.relinquished, self.exited)

    # -- stepping ------------------------------------------------------------------

    def next_op(self, role: int):
        program = self.kernel.programs[role]
        pc = self.pcs[role]
        return program[pc] if pc < len(program) else None

    def enabled_steps(self) -> list[Step]:
        steps = []
        for role in range(len(self.pcs)):
            op = self.next_op(role)
            if op is not None and op.ready(self, role):
                steps.append(Step("role", role))
        steps.extend(Step("tma", c) for c in sorted(self.copies_in_flight))
        steps.extend(Step("mma", q) for q, groups in enumerate(self.mma_queues) if groups)
        steps.extend(Step("commit", c) for c in sorted(self.commits_in_flight)
                     if self.mmas_completed[c.queue] >= c.after)
        return steps

    def apply(self, step: Step) -> None:
        """Execute ``step``; raises :class:`ProtocolViolation` if it breaks the protocol."""
        try:
            if step.kind == "role":
                self.next_op(step.arg).run(self, step.arg)
                self.pcs[step.arg] += 1
                self._exit_if_done(self.kernel.role_cta[step.arg])
            elif step.kind == "tma":
                self._land(step.arg)
            elif step.kind == "mma":
                self._complete_mma(step.arg)
            else:
                self._arrive_commit(step.arg)
        except OverArrivalError as e:
            raise ProtocolViolation(Violation.OVER_ARRIVAL, f"{self.describe(step)}: {e}") from None
        except EarlyArrivalError as e:
            raise ProtocolViolation(Violation.EARLY_ARRIVAL, f"{self.describe(step)}: {e}") from None
        except MbarrierError as e:  # any other misuse is a bug in the model itself
            raise AssertionError(f"{self.describe(step)}: {e}") from e

    def describe(self, step: Step) -> str:
        if step.kind == "role":
            return f"{self.kernel.role_names[step.arg]}: {self.next_op(step.arg).describe(self)}"
        if step.kind == "tma":
            c = step.arg
            return f"TMA {c.operand} of k-block {c.kblock} lands in {self.slot_name(c.slot)}"
        if step.kind == "mma":
            g = self.mma_queues[step.arg][0]
            return f"MMA of k-block {g.kblock} ({self.kernel.role_names[g.reader]}) completes"
        return "commit arrives on " + ", ".join(self.barrier_names[b] for b in step.arg.barriers)

    def slot_name(self, slot: int) -> str:
        return self.kernel.slot_name(slot)

    def finished(self) -> bool:
        return (all(self.next_op(r) is None for r in range(len(self.pcs)))
                and not self.copies_in_flight and not any(self.mma_queues)
                and not self.commits_in_flight)

    def check_final(self) -> None:
        """At the end: every part of every tile stored exactly once."""
        wrong = [i for i, n in enumerate(self.stores) if n != 1]
        if wrong:
            parts = self.kernel.tile_parts
            raise ProtocolViolation(
                Violation.TILE_NOT_STORED_ONCE,
                ", ".join(f"tile {i // parts} part {i % parts} stored {self.stores[i]} times" for i in wrong),
            )

    def deadlock(self) -> ProtocolViolation:
        """The violation for a state with no enabled step that has not finished."""
        blocked = []
        for role, name in enumerate(self.kernel.role_names):
            op = self.next_op(role)
            if op is not None:
                blocked.append(f"{name} blocked at '{op.describe(self)}'")
        barriers = ", ".join(
            f"{n}: phase {b.phase}, {b.pending}/{b.expected} pending"
            for n, b in zip(self.barrier_names, self.barriers)
        )
        return ProtocolViolation(Violation.DEADLOCK, "; ".join(blocked) + f" [{barriers}]")

    # -- what ops do (called from ops.py) -----------------------------------------------

    def mmas_in_flight(self, role: int) -> int:
        return len(self.mma_queues[self.kernel.role_queues[role]])

    def start_copy(self, role: int, op: TmaLoad) -> None:
        for dest, barrier in op.destinations:
            slot = self.slots[dest]
            if slot.kblock != op.kblock:  # the stage's first copy: the slot gets new contents
                if slot.readers:
                    names = ", ".join(self.kernel.role_names[r] for r in sorted(slot.readers))
                    raise ProtocolViolation(
                        Violation.STAGE_OVERWRITTEN,
                        f"TMA load of k-block {op.kblock} into {self.slot_name(dest)} while {names} "
                        f"still read k-block {slot.kblock} there",
                    )
                self.slots[dest] = Slot(op.kblock, 0, self.kernel.readers(op.kblock, dest))
            copy = TmaCopy(role, dest, op.kblock, op.operand, barrier, op.nbytes, op.phase)
            self.copies_in_flight = self.copies_in_flight | {copy}

    def issue_mma(self, role: int, op) -> None:
        slots = (op.slot, *op.peer_slots)
        for index in slots:
            slot = self.slots[index]
            where = f"{self.kernel.role_names[role]} read {self.slot_name(index)} for k-block {op.kblock}"
            needed = self.kernel.copies_needed(op.kblock, index)
            if slot.kblock is None or (slot.kblock == op.kblock and slot.landed < needed):
                state = "nothing" if slot.kblock is None else f"{slot.landed} of its {needed} copies"
                raise ProtocolViolation(Violation.READ_BEFORE_LANDED, f"{where} when {state} had landed")
            if slot.kblock != op.kblock:
                raise ProtocolViolation(Violation.KBLOCK_OUT_OF_ORDER, f"{where}, but it holds k-block {slot.kblock}")
        accs = (op.acc, *op.peer_accs)
        for index in accs:
            self._check_tmem_held(index, f"{self.kernel.role_names[role]}'s MMA writes accumulator {index}")
            if op.first:
                acc = self.accumulators[index]
                if acc.unread:
                    raise ProtocolViolation(
                        Violation.ACC_OVERWRITTEN,
                        f"tile {op.tile}'s first MMA overwrites accumulator {index}, which holds "
                        f"tile {acc.tile} that has not been read",
                    )
                self.accumulators[index] = Accumulator(op.tile, 0, True)
        queue = self.kernel.role_queues[role]
        self.mma_queues[queue] = self.mma_queues[queue] + (MmaGroup(role, slots, op.kblock, accs),)

    def queue_commit(self, role: int, op) -> None:
        queue = self.kernel.role_queues[role]
        issued = self.mmas_completed[queue] + len(self.mma_queues[queue])
        self.commits_in_flight = self.commits_in_flight | {PendingCommit(queue, op.barriers, op.phase, issued)}

    def read_accumulator(self, acc_index: int, tile: int) -> None:
        self._check_tmem_held(acc_index, f"tcgen05.ld of accumulator {acc_index} (tile {tile})")
        acc = self.accumulators[acc_index]
        k_blocks = self.kernel.spec.k_blocks
        if acc.tile != tile or acc.kblocks_done < k_blocks:
            raise ProtocolViolation(
                Violation.ACC_READ_EARLY,
                f"accumulator {acc_index} read for tile {tile} while it holds tile {acc.tile} "
                f"with {acc.kblocks_done} of {k_blocks} k-blocks completed",
            )
        self.accumulators[acc_index] = acc._replace(unread=False)

    def tmem_allocate(self, op) -> None:
        if op.cta in self.relinquished:
            raise ProtocolViolation(Violation.ALLOC_AFTER_RELINQUISH,
                                    f"CTA {op.cta} allocates after relinquishing its permit")
        self.tmem_free[op.sm] -= op.columns
        self.tmem_state[op.cta] = TMEM_HELD

    def tmem_relinquish(self, cta: int) -> None:
        self.relinquished = self.relinquished | {cta}

    def tmem_deallocate(self, op) -> None:
        """Return the columns to their SM; a pair's dealloc frees the allocation in both
        CTAs at once, and the other CTA's half of the collective frees nothing more."""
        for cta in op.pair:
            if self.tmem_state[cta] == TMEM_HELD:
                self.tmem_state[cta] = TMEM_FREED
                self.tmem_free[self.kernel.cta_sm[cta]] += self.kernel.tmem_columns[cta]

    def _check_tmem_held(self, acc_index: int, what: str) -> None:
        cta = self.kernel.acc_cta(acc_index)
        if cta is None or self.tmem_state[cta] == TMEM_HELD:
            return
        state = "freed" if self.tmem_state[cta] == TMEM_FREED else "not yet allocated"
        raise ProtocolViolation(Violation.TMEM_NOT_HELD, f"{what}: CTA {cta}'s tensor memory is {state}")

    def _exit_if_done(self, cta: int) -> None:
        if cta in self.exited:
            return
        if all(self.next_op(r) is None for r in self.kernel.roles_of(cta)):
            self.exited = self.exited | {cta}

    def check_alive(self, cta: int, what: str) -> None:
        if cta in self.exited:
            raise ProtocolViolation(Violation.AFTER_EXIT, f"{what}, but CTA {cta} has exited")

    def store_tile(self, tile: int, part: int) -> None:
        index = tile * self.kernel.tile_parts + part
        self.stores[index] += 1
        if self.stores[index] > 1:
            raise ProtocolViolation(Violation.TILE_NOT_STORED_ONCE, f"tile {tile} part {part} stored twice")

    # -- asynchronous completions ----------------------------------------------------------

    def _land(self, copy: TmaCopy) -> None:
        self.copies_in_flight = self.copies_in_flight - {copy}
        slot = self.slots[copy.slot]
        # A copy cannot outlive its slot's contents: refilling needs every reader done,
        # and a reader needs every copy landed.
        assert slot.kblock == copy.kblock, (slot, copy)
        what = f"TMA {copy.operand} of k-block {copy.kblock} lands in {self.slot_name(copy.slot)}"
        self.check_alive(self.kernel.slot_cta(copy.slot), what)
        self.check_alive(self.kernel.barrier_cta[copy.barrier], what)
        self.slots[copy.slot] = slot._replace(landed=slot.landed + 1)
        self.barriers[copy.barrier] = self.barriers[copy.barrier].complete_tx(
            copy.nbytes, for_phase=copy.phase
        )

    def _complete_mma(self, queue: int) -> None:
        group, *rest = self.mma_queues[queue]
        self.mma_queues[queue] = tuple(rest)
        self.mmas_completed[queue] += 1
        for index in group.slots:
            slot = self.slots[index]
            assert slot.kblock == group.kblock, (slot, group)  # overwriting raised before
            self.slots[index] = slot._replace(readers=slot.readers - {group.reader})
        for index in group.accs:
            acc = self.accumulators[index]
            self.accumulators[index] = acc._replace(kblocks_done=acc.kblocks_done + 1)

    def _arrive_commit(self, commit: PendingCommit) -> None:
        self.commits_in_flight = self.commits_in_flight - {commit}
        for barrier in commit.barriers:
            issuer = self.kernel.role_names[self.kernel.role_queues.index(commit.queue)]
            self.check_alive(self.kernel.barrier_cta[barrier],
                             f"{issuer}'s tcgen05.commit arrives on {self.barrier_names[barrier]}")
            self.barriers[barrier] = self.barriers[barrier].arrive(for_phase=commit.phase)
