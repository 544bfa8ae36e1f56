"""Stage and phase arithmetic of an N-stage shared-memory ring.

Pure functions of a running counter, so that the same code runs in three places:
on plain Python ints in the CPU pipeline model (``wsgemm.pipeline_sim``), on DSL ``Int32``
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


# Which CTAs of a cluster a release reaches, and how many releases an empty barrier
# counts: plain integer arithmetic that the kernels, the host-side protocol check and
# the pipeline simulator share.


def release_mask(cta_m, cta_n, cluster_m: int, cluster_n: int, pair: int = 1):
    """Cluster CTAs (as a bit mask of ranks ``m + n * cluster_m``) whose ring slots a
    consumer of CTA (cta_m, cta_n) must release.

    A is multicast along cluster rows and B along cluster columns, so the data this
    consumer read came from its own row(s) and its own column. With a 2-CTA MMA
    (``pair == 2``) the MMA of a CTA pair reads both CTAs' shared memory, so both
    rows of the pair count. Plain integer arithmetic: runs on ints and DSL values.
    """
    first_row = (cta_m // pair) * pair
    mask = 0
    for v in range(pair):
        for n in range(cluster_n):
            mask = mask | (1 << (first_row + v + n * cluster_m))
    for m in range(cluster_m):
        mask = mask | (1 << (m + cta_n * cluster_m))
    return mask


def empty_arrivals(cluster_m: int, cluster_n: int, pair: int, arrivals_per_release: int) -> int:
    """Arrivals that complete one phase of an ``empty`` barrier.

    CTA (m, n) is released by every MMA group whose :func:`release_mask` contains it:
    the ``cluster_n`` groups of its row plus the ``cluster_m / pair`` groups of its
    column, minus its own, counted twice. SM90: each consumer warp releases
    (``arrivals_per_release`` = consumer warps); SM100: one ``tcgen05.commit``.
    """
    return (cluster_n + cluster_m // pair - 1) * arrivals_per_release
