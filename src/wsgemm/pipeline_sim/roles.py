"""The warp roles of both kernels, written the way the kernels write them, as Python
generators that yield one op (:mod:`.ops`) per instruction another role can observe.

Which role code each function mirrors:

* :func:`producer`, :func:`produce_k_blocks` -- ``Sm90Gemm.producer`` /
  ``Sm100Gemm.producer`` and ``kernels/common/pipeline.produce_k_blocks``;
* :func:`sm90_consumer` -- ``Sm90Gemm.consumer`` (its epilogue reduced to one store);
* :func:`sm90_pingpong_consumer` -- ``Sm90Gemm.consumer`` with ``config.pingpong``;
* :func:`sm100_mma`, :func:`sm100_epilogue` -- ``Sm100Gemm.mma`` / ``Sm100Gemm.epilogue``.

:class:`RingModel` plays ``SmemRing`` and ``AccRing``: the same calls, with slot and
parity from :mod:`wsgemm.kernels.common.stages`, the functions the kernels call.

A role's program depends only on the spec -- the one run-time decision, "skip this
wait because the probe said ready", is made by the ``Wait`` op from the role's token
register -- so each generator is unrolled once into a tuple of ops, and a role's
whole state is a program counter plus that token. That is what lets the checker copy
and hash states cheaply.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterator

from ..config import Lookahead, wgmma_batches_in_flight
from ..kernels.common import stages
from .ops import (
    Arrive,
    ArriveExpectTx,
    Commit,
    IssueMma,
    Op,
    PassTurn,
    ReadAccumulator,
    StoreTile,
    TmaLoad,
    TryWait,
    Wait,
    WaitMmas,
    WaitTurn,
)
from .spec import Fault, PipelineSpec, Structure

Program = Iterator[Op]


class RingModel:
    """A full/empty barrier ring of ``num_stages`` slots, as the roles call it.

    ``full`` and ``empty`` are the machine's barrier indices of each slot. The three
    keyword arguments after them exist to plant faults: the parities each side waits
    with, and a producer that never waits when it holds a token.

    In a cluster (:mod:`.cluster`) the machine numbers the slots of all CTAs in one
    list, this CTA's from ``slot_base``; and a ``tcgen05.commit`` may reach the same
    barrier of other CTAs: ``commit_full_to[s]`` / ``commit_release_to[s]`` are those
    further barriers of slot ``s``'s ``full`` / ``empty``.
    """

    def __init__(self, full: list[int], empty: list[int], num_stages: int, *,
                 producer_parity: Callable[[int, int], int] | None = None,
                 consumer_parity: Callable[[int, int], int] | None = None,
                 producer_trusts_token: bool = False,
                 slot_base: int = 0,
                 commit_full_to: list[tuple[int, ...]] | None = None,
                 commit_release_to: list[tuple[int, ...]] | None = None):
        self.full_ids = full
        self.empty_ids = empty
        self.num_stages = num_stages
        self.slot_base = slot_base
        self.commit_full_to = commit_full_to or [()] * num_stages
        self.commit_release_to = commit_release_to or [()] * num_stages
        # Looked up now, not at import: the model runs whatever stages.py says.
        self.producer_parity = producer_parity or stages.empty_wait_parity
        self.consumer_parity = consumer_parity or stages.full_wait_parity
        self.producer_trusts_token = producer_trusts_token

    def slot(self, count: int) -> int:
        """The machine's index of the slot hand-over ``count`` uses."""
        return self.slot_base + stages.stage_index(count, self.num_stages)

    def phase(self, count: int) -> int:
        """The barrier phase hand-over ``count`` belongs to (on both full and empty)."""
        return stages.ring_lap(count, self.num_stages)

    def full(self, count: int) -> int:
        return self.full_ids[stages.stage_index(count, self.num_stages)]

    def empty(self, count: int) -> int:
        return self.empty_ids[stages.stage_index(count, self.num_stages)]

    # -- producer side (SmemRing.producer_*, AccRing.mma_acquire / mma_tail) ------------

    def producer_try_acquire(self, count: int) -> Op:
        return TryWait(self.empty(count), self.producer_parity(count, self.num_stages))

    def producer_acquire(self, count: int, token_valid: bool, tx_bytes: int | None = None) -> Program:
        """``if not token: wait(empty)``, then (smem ring) ``arrive.expect_tx(full)``.
        ``token_valid``: the token holds a probe's answer (else it is plain false)."""
        if not self.producer_trusts_token:
            yield Wait(self.empty(count), self.producer_parity(count, self.num_stages), token_valid)
        if tx_bytes is not None:
            yield ArriveExpectTx(self.full(count), tx_bytes, self.phase(count))

    def producer_tail(self, count: int) -> Program:
        """Wait until every slot was released once more (nothing left in flight)."""
        for i in range(self.num_stages):
            yield Wait(self.empty(count + i), self.producer_parity(count + i, self.num_stages))

    def commit_full(self, count: int) -> Op:
        """``AccRing.mma_commit``: accumulator ``count`` is full once its MMAs complete."""
        index = stages.stage_index(count, self.num_stages)
        return Commit(self.full(count), self.phase(count), self.commit_full_to[index])

    # -- consumer side (SmemRing.consumer_*_slot, warp_release_slot, mma_release_slot;
    #    AccRing.epilogue_*). The kernels step (slot, parity) along their k-loops
    #    (SmemRing.next_slot), producer and consumers alike; the model names the same
    #    barrier phases by the running count they stand for.

    def consumer_try_wait(self, count: int) -> Op:
        return TryWait(self.full(count), self.consumer_parity(count, self.num_stages))

    def consumer_wait(self, count: int, token_valid: bool) -> Op:
        return Wait(self.full(count), self.consumer_parity(count, self.num_stages), token_valid)

    def release(self, count: int, warps: int) -> Op:
        """One arrival per releasing warp on ``empty`` (``warp_release_slot``, ``epilogue_release``)."""
        return Arrive(self.empty(count), warps, self.phase(count))

    def commit_release(self, count: int) -> Op:
        """``SmemRing.mma_release_slot``: ``tcgen05.commit`` -> ``empty`` once the MMAs that
        read the slot complete."""
        index = stages.stage_index(count, self.num_stages)
        return Commit(self.empty(count), self.phase(count), self.commit_release_to[index])


# -- the producer (both kernels) ---------------------------------------------------------

# A CTA's TMA copies of one hand-over: ``copies(count)`` -> the TmaLoad ops.
Copies = Callable[[int], Iterator[Op]]


def producer(spec: PipelineSpec, ring: RingModel, *, copies: Copies | None = None,
             announced: int | None = None, tail: bool = True) -> Program:
    """The TMA producer. In a cluster (:mod:`.cluster`) ``copies`` issues the CTA's
    multicast copies, ``announced`` is what its ``arrive.expect_tx`` announces (None: a
    pair's peer, which does not announce) and ``tail`` drops the final waits when false."""
    count = 0  # k-blocks handed to the ring so far, across all tiles
    probed = False  # does the token hold a probe's answer? (else it is plain false)
    if spec.lookahead is Lookahead.BEFORE_COPY:
        yield ring.producer_try_acquire(count)
        probed = True
    for tile in range(spec.tiles):
        count, probed = yield from produce_k_blocks(spec, ring, count, probed, tile,
                                                    copies=copies, announced=announced)
    if tail:
        yield from ring.producer_tail(count)


def produce_k_blocks(spec: PipelineSpec, ring: RingModel, count: int, probed: bool, tile: int = 0, *,
                     copies: Copies | None = None, announced: int | None = None):
    """The producer's k-loop for one tile; returns the advanced counter and whether the
    token holds a probe's answer. With ``Lookahead.NONE`` nothing ever probes, so the
    token stays false and every acquire waits. A tile whose A box is all padding
    (``spec.padded_tiles``) loads and announces only B (``Sm90Gemm.producer``).
    ``copies`` and ``announced``: see :func:`producer`."""
    if copies is None:
        loads_a = spec.loads_a(tile)
        announced = spec.stage_bytes if loads_a or spec.fault is Fault.ANNOUNCES_SKIPPED_BOX else spec.b_bytes

        def copies(this):
            phase = ring.phase(this)
            if loads_a:
                yield TmaLoad(ring.slot(this), this, "A", ring.full(this), spec.a_bytes, phase)
            yield TmaLoad(ring.slot(this), this, "B", ring.full(this), spec.b_bytes, phase)

    for kb in range(spec.k_blocks):
        yield from ring.producer_acquire(count, probed, announced)
        this = count
        count += 1
        if spec.lookahead is Lookahead.BEFORE_COPY:
            yield ring.producer_try_acquire(count)
            probed = True
        yield from copies(this)
        if spec.lookahead is Lookahead.AFTER_COPY:
            probed = kb + 1 < spec.k_blocks
            if probed:
                yield ring.producer_try_acquire(count)
    return count, probed


# -- SM90 consumers ---------------------------------------------------------------------

def _sm90_k_loop(spec: PipelineSpec, ring: RingModel, warpgroup: int, tile: int, first_read: int,
                 in_flight: int) -> Program:
    """One tile's k-loop in a wgmma warpgroup (both SM90 consumers). With
    ``in_flight`` 1 (alone on its tile) it keeps one k-block's MMAs in flight and
    releases the *previous* slot once they retired; with 0 (cooperative warpgroups)
    it waits for all of them and releases this k-block's slot."""
    warps = spec.warps_per_warpgroup
    early = spec.fault is Fault.EARLY_SLOT_RELEASE
    read = first_read  # the running hand-over counter, across tiles
    for kb in range(spec.k_blocks):
        yield ring.consumer_try_wait(read)
        yield ring.consumer_wait(read, token_valid=True)
        yield IssueMma(ring.slot(read), read, warpgroup, tile, first=kb == 0)
        if early:
            yield ring.release(read, warps)  # FAULT: its wgmma may still be reading
        yield WaitMmas(in_flight)
        if kb >= in_flight and not early:
            yield ring.release(read - in_flight, warps)
        read += 1


def _sm90_retire(spec: PipelineSpec, ring: RingModel, last_read: int, in_flight: int) -> Program:
    """After a tile's k-loop: ``wait_group(0)``, then release the slots still held."""
    yield WaitMmas(0)
    if spec.fault is not Fault.EARLY_SLOT_RELEASE:
        for back in reversed(range(min(in_flight, spec.k_blocks))):
            yield ring.release(last_read - back, spec.warps_per_warpgroup)


def sm90_consumer(spec: PipelineSpec, ring: RingModel, warpgroup: int) -> Program:
    """One cooperative wgmma warpgroup: every tile's k-loop, then the store of its
    rows of the tile."""
    in_flight = wgmma_batches_in_flight(spec.consumer_warpgroups)
    for tile in range(spec.tiles):
        read = tile * spec.k_blocks
        yield from _sm90_k_loop(spec, ring, warpgroup, tile, read, in_flight)
        yield from _sm90_retire(spec, ring, read + spec.k_blocks - 1, in_flight)
        yield StoreTile(tile, warpgroup, warpgroup, reads_accumulator=True)


def sm90_pingpong_consumer(spec: PipelineSpec, ring: RingModel, warpgroup: int) -> Program:
    """One of two ping-pong wgmma warpgroups: the CTA's tiles ``warpgroup``,
    ``warpgroup + 2``, ... whole, each mainloop after the other warpgroup handed its
    turn over, and the whole tile stored from its own accumulators."""
    takes_turns = spec.fault is not Fault.SKIPS_MAINLOOP_TURN
    in_flight = wgmma_batches_in_flight(1)  # alone on each of its tiles
    for tile in range(warpgroup, spec.tiles, 2):
        read = tile * spec.k_blocks  # the other warpgroup's k-blocks sit in between
        if tile > 0 and takes_turns:
            yield WaitTurn(tile)
        yield from _sm90_k_loop(spec, ring, warpgroup, tile, read, in_flight)
        if tile + 1 < spec.tiles and takes_turns:
            yield PassTurn(tile)
        yield from _sm90_retire(spec, ring, read + spec.k_blocks - 1, in_flight)
        yield StoreTile(tile, 0, warpgroup, reads_accumulator=True)


# -- SM100 MMA warp and epilogue ------------------------------------------------------------

def sm100_mma(spec: PipelineSpec, ring: RingModel, acc_ring: RingModel, *,
              peer_rings: tuple[RingModel, ...] = (), peer_acc_rings: tuple[RingModel, ...] = ()) -> Program:
    """The MMA warp: per tile, acquire an accumulator buffer, issue each k-block's MMAs
    and release its slot by ``tcgen05.commit``, then commit the buffer as full. With a
    look-ahead policy other than NONE it probes the next ``full`` barrier after issuing
    (not after a tile's last k-block) and at the start of each tile.

    A pair leader's 2-CTA MMA (:mod:`.cluster`) also reads the slot of ``peer_rings``
    and writes the accumulator buffer of ``peer_acc_rings`` (the peer CTA's)."""
    peeks = spec.lookahead is not Lookahead.NONE
    read = 0  # k-blocks consumed so far, across tiles
    for tile in range(spec.tiles):  # tile == accumulator counter
        probed = False
        if peeks:
            yield ring.consumer_try_wait(read)
            probed = True
        yield from acc_ring.producer_acquire(tile, token_valid=False)
        for kb in range(spec.k_blocks):
            yield ring.consumer_wait(read, probed)
            yield IssueMma(ring.slot(read), read, acc_ring.slot(tile), tile, first=kb == 0,
                           peer_slots=tuple(r.slot(read) for r in peer_rings),
                           peer_accs=tuple(r.slot(tile) for r in peer_acc_rings))
            if spec.fault is Fault.EARLY_SLOT_RELEASE:
                yield ring.release(read, 1)  # FAULT: arrives now, not when the MMAs complete
            else:
                yield ring.commit_release(read)
            read += 1
            probed = peeks and kb + 1 < spec.k_blocks
            if probed:
                yield ring.consumer_try_wait(read)
        yield acc_ring.commit_full(tile)
    yield from acc_ring.producer_tail(spec.tiles)


def sm100_epilogue(spec: PipelineSpec, acc_ring: RingModel, part: int = 0) -> Program:
    """The epilogue warps (one role; each warp arrives once on ``acc_empty``): the
    buffer is released once read (after the tile's last ``tcgen05.ld`` completed),
    before the tile is stored. ``part``: which part of each tile this CTA stores (its
    rank, in a cluster)."""
    early = spec.fault is Fault.EARLY_ACC_RELEASE
    for tile in range(spec.tiles):
        buffer = acc_ring.slot(tile)
        yield acc_ring.consumer_wait(tile, token_valid=False)
        if early:
            yield acc_ring.release(tile, spec.epilogue_warps)  # FAULT: not read yet
        yield ReadAccumulator(buffer, tile)
        if not early:
            yield acc_ring.release(tile, spec.epilogue_warps)
        yield StoreTile(tile, part, buffer, reads_accumulator=False)


# -- assembling a kernel --------------------------------------------------------------------

@dataclass(frozen=True)
class KernelModel:
    """Everything static about one modelled CTA: its barriers and the roles' programs."""

    spec: PipelineSpec
    role_names: tuple[str, ...]
    programs: tuple[tuple[Op, ...], ...]
    barrier_names: tuple[str, ...]
    barrier_counts: tuple[int, ...]  # mbarrier.init count of each barrier
    slot_readers: frozenset[int]  # roles whose MMAs read every ring slot
    # Ping-pong: the roles that read the k-blocks of the CTA's tile i are
    # ``readers_by_tile[i % 2]`` (None: ``slot_readers`` read every k-block).
    readers_by_tile: tuple[frozenset[int], ...] | None
    accumulators: int  # SM90: one per consumer warpgroup; SM100: acc_stages buffers
    # The in-order MMA completion queue each role issues into (None: issues no MMAs).
    role_queues: tuple[int | None, ...]
    tile_parts: int  # how many roles store a part of each tile

    # One CTA: every role, barrier and slot is CTA 0's, and tensor memory is not
    # modelled. A cluster (:mod:`.cluster`) overrides these.
    @property
    def cta_count(self) -> int:
        return 1

    @property
    def role_cta(self) -> tuple[int, ...]:
        return (0,) * len(self.programs)

    @property
    def barrier_cta(self) -> tuple[int, ...]:
        return (0,) * len(self.barrier_names)

    @property
    def slot_count(self) -> int:
        return self.spec.stages

    @property
    def tmem_columns_per_sm(self) -> tuple[int, ...]:
        return ()

    def roles_of(self, cta: int) -> range:
        return range(len(self.programs))

    def slot_cta(self, slot: int) -> int:
        return 0

    def slot_name(self, slot: int) -> str:
        return f"slot {slot}"

    def acc_cta(self, acc: int) -> int | None:
        """The CTA whose tensor memory holds accumulator ``acc`` (None: not modelled)."""
        return None

    @property
    def mma_queues(self) -> int:
        return len({q for q in self.role_queues if q is not None})

    def copies_needed(self, kblock: int, slot: int = 0) -> int:
        """Copies (A and B, or B alone for a padded tile) that hand-over ``kblock``
        must have landed before an MMA may read its slot."""
        return self.spec.copies_needed(kblock // self.spec.k_blocks)

    def readers(self, kblock: int, slot: int = 0) -> frozenset[int]:
        """Roles whose MMAs will read the slot that hand-over ``kblock`` fills."""
        if self.readers_by_tile is None:
            return self.slot_readers
        return self.readers_by_tile[kblock // self.spec.k_blocks % len(self.readers_by_tile)]


def build_kernel(spec: PipelineSpec) -> KernelModel:
    """Lay out the barriers the kernel initialises and unroll every role's program."""
    names: list[str] = []
    counts: list[int] = []

    def barriers(kind: str, n: int, count: int) -> list[int]:
        first = len(names)
        names.extend(f"{kind}[{i}]" for i in range(n))
        counts.extend([count] * n)
        return list(range(first, first + n))

    n = spec.stages
    full, empty = barriers("full", n, 1), barriers("empty", n, spec.empty_count)
    ring = RingModel(
        full, empty, n,
        producer_parity=stages.full_wait_parity if spec.fault is Fault.PRODUCER_PARITY_FLIPPED else None,
        consumer_parity=stages.empty_wait_parity if spec.fault is Fault.CONSUMER_PARITY_FLIPPED else None,
        producer_trusts_token=spec.fault is Fault.TRUSTS_UNREADY_TOKEN,
    )
    if spec.structure is Structure.SM90:
        wgs = spec.consumer_warpgroups
        role_names = ("producer", *(f"consumer{w}" for w in range(wgs)))
        programs = [producer(spec, ring), *(sm90_consumer(spec, ring, w) for w in range(wgs))]
        readers, accumulators, parts = frozenset(range(1, 1 + wgs)), wgs, wgs
        queues = (None, *range(wgs))
    elif spec.structure is Structure.SM90_PINGPONG:
        role_names = ("producer", "consumer0", "consumer1")
        programs = [producer(spec, ring), *(sm90_pingpong_consumer(spec, ring, w) for w in (0, 1))]
        readers, accumulators, parts = frozenset({1, 2}), 2, 1
        queues = (None, 0, 1)
    else:
        acc_ring = RingModel(barriers("acc_full", spec.acc_stages, 1),
                             barriers("acc_empty", spec.acc_stages, spec.acc_empty_count),
                             spec.acc_stages)
        role_names = ("producer", "mma", "epilogue")
        programs = [producer(spec, ring), sm100_mma(spec, ring, acc_ring), sm100_epilogue(spec, acc_ring)]
        readers, accumulators, parts = frozenset({1}), spec.acc_stages, 1
        queues = (None, 0, None)
    return KernelModel(
        spec=spec,
        role_names=role_names,
        programs=tuple(tuple(p) for p in programs),
        barrier_names=tuple(names),
        barrier_counts=tuple(counts),
        slot_readers=readers,
        readers_by_tile=(frozenset({1}), frozenset({2})) if spec.structure is Structure.SM90_PINGPONG else None,
        accumulators=accumulators,
        role_queues=queues,
        tile_parts=parts,
    )
