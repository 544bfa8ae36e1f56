"""Stage and phase arithmetic of an N-stage shared-memory ring.

Pure functions of a running counter, so that the same code runs in three places:
on plain Python ints in the CPU pipeline model (``wsgemm.model``), on DSL ``Int32``
values inside the kernels, and in the tests that check one against the other.

Every role has one running count per ring: the number of stages it has handed over
so far (k-blocks loaded for the producer, k-blocks consumed for a consumer). The
count never resets between output tiles of a persistent kernel, so the ring
simply keeps turning. The shared-memory ring's k-loops step the (slot, parity) of
that count instead of dividing it (``SmemRing.next_slot``, a test checks both walks
agree); the model, the accumulator ring and the consumers' start of a tile use these.

An mbarrier's phase starts at 0 and flips each time its pending-arrival count
(and, for TMA, its transaction count) reaches zero. ``mbarrier.try_wait.parity P``
returns true once the phase with parity P has completed; on a fresh barrier the
phase "before" phase 0 counts as completed, so waiting for parity 1 passes at once.
"""


def stage_index(count, num_stages: int):
    """Slot of the ring that the ``count``-th hand-over uses."""
    return count % num_stages


def ring_lap(count, num_stages: int):
    """How many times the ring has wrapped before the ``count``-th hand-over."""
    return count // num_stages


def full_wait_parity(count, num_stages: int):
    """Parity a consumer waits for on ``full[stage]`` before reading hand-over ``count``.

    Lap 0 waits for the first completion of the barrier (phase 0), lap 1 for the
    second (phase 1), and so on alternating.
    """
    return ring_lap(count, num_stages) & 1


def empty_wait_parity(count, num_stages: int):
    """Parity the producer waits for on ``empty[stage]`` before refilling it.

    On lap 0 the slot has never been filled, so the producer must not wait: it asks
    for parity 1, the phase that counts as already completed on a fresh barrier. On
    lap L >= 1 it waits for the consumers' L-th release, phase L-1, parity (L-1)&1.
    """
    return (ring_lap(count, num_stages) & 1) ^ 1
