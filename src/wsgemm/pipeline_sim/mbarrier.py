"""An mbarrier as a value: the CPU model of PTX's ``mbarrier`` object.

On the GPU an mbarrier is one 64-bit word in shared memory, and every operation on
it is an atomic read-modify-write. Here it is an immutable value and every operation
returns the new value, so a model state that holds barriers can be copied and
hashed for free (the checker relies on that).

What the word holds (PTX ISA, "mbarrier object"):

* the **current phase**; only its parity is visible to waiters;
* the **pending arrival count**, reset to the ``init`` count when a phase completes;
* the **tx-count**: bytes announced by ``expect_tx`` that ``complete_tx`` (TMA) has
  not delivered yet. It may dip below zero when bytes land before they are announced.

A phase completes when the pending arrivals reach zero *and* the tx-count is zero;
then the phase advances and both counts reset.

Waiting is by parity. ``test_wait(P)`` is true iff "the phase with parity P has
completed", which PTX defines as: the *current* phase's parity differs from P. A
fresh barrier is in phase 0, so ``test_wait(1)`` passes at once (the phase before
phase 0 counts as completed) and ``test_wait(0)`` passes after the first completion.

One check here has no hardware counterpart: arrivals and transactions may carry the
phase number their issuer meant them for (``for_phase``), computed from the issuer's
running counter. An arrival that lands in another phase means the barrier's count
and the arrivals issued disagree -- on the GPU that is a silent hang or race; here it
is an exception at the arrival that went wrong.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

# PTX ISA, mbarrier.init: the expected arrival count is in [1, 2^20 - 1].
MAX_ARRIVAL_COUNT = (1 << 20) - 1


class MbarrierError(Exception):
    """An operation that breaks the mbarrier's contract."""


class OverArrivalError(MbarrierError):
    """More arrivals reached a phase than the barrier was initialised to expect."""


class EarlyArrivalError(MbarrierError):
    """An arrival meant for a later phase reached a phase that has not completed:
    the barrier expects more arrivals per phase than its users issue."""


class WouldBlock(MbarrierError):
    """``wait`` on a phase that has not completed: a GPU thread would block here."""


@dataclass(frozen=True)
class Mbarrier:
    """One mbarrier. Build it with :meth:`init`; every operation returns a new value."""

    expected: int  # arrivals that complete a phase (the init count)
    phase: int  # phases completed so far; the current phase's parity is phase & 1
    pending: int  # arrivals still missing in the current phase
    tx: int  # announced transaction bytes not yet delivered (may be negative)

    @classmethod
    def init(cls, count: int) -> "Mbarrier":
        """``mbarrier.init``: phase 0, ``count`` arrivals expected, no transactions."""
        if not 1 <= count <= MAX_ARRIVAL_COUNT:
            raise ValueError(
                f"mbarrier.init count must be between 1 and {MAX_ARRIVAL_COUNT}, got {count}"
            )
        return cls(expected=count, phase=0, pending=count, tx=0)

    @property
    def parity(self) -> int:
        """Parity of the current (incomplete) phase."""
        return self.phase & 1

    # -- arrivals and transactions -----------------------------------------------------

    def arrive(self, count: int = 1, *, for_phase: int | None = None) -> "Mbarrier":
        """``mbarrier.arrive`` (``count`` arrivals at once, as PTX's count operand)."""
        self._check_phase("arrival", for_phase)
        if count > self.pending:
            raise OverArrivalError(
                f"{count} arrival(s) on a barrier with {self.pending} of {self.expected} "
                f"pending in phase {self.phase} (transactions outstanding: {self.tx} B)"
            )
        return replace(self, pending=self.pending - count)._settle()

    def expect_tx(self, nbytes: int) -> "Mbarrier":
        """``mbarrier.expect_tx``: announce ``nbytes`` that TMA will deliver."""
        return replace(self, tx=self.tx + nbytes)

    def arrive_expect_tx(self, nbytes: int, *, for_phase: int | None = None) -> "Mbarrier":
        """``mbarrier.arrive.expect_tx``: announce the bytes, then arrive once."""
        return self.expect_tx(nbytes).arrive(for_phase=for_phase)

    def complete_tx(self, nbytes: int, *, for_phase: int | None = None) -> "Mbarrier":
        """``complete_tx`` (what a TMA copy does as its bytes land)."""
        self._check_phase("complete_tx", for_phase)
        return replace(self, tx=self.tx - nbytes)._settle()

    # -- waiting ---------------------------------------------------------------------

    def test_wait(self, parity: int) -> bool:
        """``mbarrier.test_wait.parity``: has the phase with this parity completed?"""
        if parity not in (0, 1):
            raise ValueError(f"parity must be 0 or 1, got {parity!r}")
        return self.parity != parity

    def try_wait(self, parity: int) -> bool:
        """``mbarrier.try_wait.parity``.

        On the GPU the thread may be suspended until the phase completes or a
        system-dependent time limit expires; it returns false only if the phase was
        still incomplete when the limit expired. A value cannot change while it is
        being read, so here the answer is the state at the moment of the call; the
        checker covers "completed during the suspension" by also scheduling the
        completion before the probe.
        """
        return self.test_wait(parity)

    def wait(self, parity: int) -> None:
        """``mbarrier.wait`` (a ``try_wait`` retry loop): return if the phase has
        completed, else raise :class:`WouldBlock` -- a single-threaded model cannot
        wait for another thread."""
        if not self.test_wait(parity):
            raise WouldBlock(
                f"waiting for parity {parity} blocks: the barrier is still in phase "
                f"{self.phase} (parity {self.parity}) with {self.pending} arrival(s) and "
                f"{self.tx} B pending"
            )

    # -- internals -------------------------------------------------------------------

    def _check_phase(self, what: str, for_phase: int | None) -> None:
        if for_phase is None or for_phase == self.phase:
            return
        if for_phase < self.phase:
            raise OverArrivalError(
                f"{what} meant for phase {for_phase} reached phase {self.phase}: phase "
                f"{for_phase} completed without it, so more arrivals were issued for it than "
                f"the barrier's count of {self.expected}"
            )
        raise EarlyArrivalError(
            f"{what} meant for phase {for_phase} reached phase {self.phase}, which still "
            f"waits for {self.pending} of {self.expected} arrival(s): the barrier expects "
            "more arrivals per phase than are issued"
        )

    def _settle(self) -> "Mbarrier":
        if self.pending == 0 and self.tx == 0:
            return replace(self, phase=self.phase + 1, pending=self.expected)
        return self
