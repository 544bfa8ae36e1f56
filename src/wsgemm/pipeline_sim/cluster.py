"""The SM100 kernel's roles over a whole cluster of CTAs, and the SMs they share.

:mod:`.roles` models one CTA whose own copies fill its ring and whose own MMA releases
it. In a cluster that is not so, and this module lays out what is different, from a
:class:`wsgemm.config.KernelSpec` (the cluster shape, the 2-CTA pair, the bytes of each
stage, the tensor-memory columns and how many CTAs share an SM all come from the spec
and the functions the kernel calls):

* **multicast copies**: CTA (m, n) loads a share of its A tile and multicasts it along
  its cluster row (to every CTA with the same m), and a share of its B tile along its
  column (every CTA with the same n -- in a pair, the same pair position); each share
  lands in every destination and ``complete_tx``-es there;
* **a 2-CTA pair** (``two_cta``, ``tcgen05 cta_group::2``): only the even CTA (the
  leader) runs the MMA loop; its MMAs read both CTAs' slots and write both CTAs'
  tensor memory. The leader alone announces the stage, with both CTAs' bytes, on its
  ``full`` barrier, and the peer's copies complete there (the peer-bit mask on the
  barrier address);
* **remote arrivals**: the MMA's slot-release commit reaches ``empty`` of every CTA in
  :func:`wsgemm.kernels.common.stages.release_mask`; a pair's "accumulator full" commit
  reaches both CTAs' ``acc_full``; both CTAs' epilogue warps release the leader's
  ``acc_empty``;
* **tensor memory per SM**: each CTA's epilogue allocates its columns
  (``tcgen05.alloc`` blocks while its SM has too few free) and relinquishes the
  allocation permit right after, the MMA warp waits for the allocation, and at the end
  the allocator deallocates; a pair first hand-shakes on its ``tmem_dealloc`` barriers
  so that neither frees the pair's columns while the other still reads them
  (``TmemAllocator.free``);
* **co-resident clusters**: when shared memory lets several CTAs share an SM
  (:class:`.residency.Residency`), the other clusters' CTAs are there too, reduced to
  what :mod:`.residency` keeps of them: allocate on their SM, run until all of their
  cluster allocated, free;
* **exit**: a CTA exits once all its roles finished; an arrival or TMA bytes that reach
  it afterwards are a violation (what the producer's final waits prevent).

The machine (:mod:`.machine`) and the checker (:mod:`.checker`) run the result like a
single CTA's. Sizes (ring depth, tiles, k-blocks) are the model's, smaller than the
kernel's, to keep every interleaving enumerable.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field, replace

from .. import config as cfg
from .. import hardware
from ..config import Lookahead
from ..kernels.common.protocol import SM100_EPILOGUE_WARPS
from ..kernels.common.stages import empty_arrivals, release_mask
from .ops import Arrive, TmaLoad, TmemAlloc, TmemDealloc, Wait, WaitTmemAllocated
from .residency import Residency
from .roles import KernelModel, RingModel, producer, sm100_epilogue, sm100_mma


class ClusterFault(str, enum.Enum):
    """A deliberate bug in the cluster's protocol, planted to show the checker finds it."""

    # The MMA's slot-release commit reaches only its own CTA, not the peers whose
    # copies fed it (mask without the peer).
    SLOT_COMMIT_WITHOUT_PEER = "slot_commit_without_peer"
    # Pair only: the "accumulator full" commit reaches only the leader.
    ACC_COMMIT_WITHOUT_PEER = "acc_commit_without_peer"
    # Pair only: the leader's expect_tx announces one CTA's bytes, not the pair's.
    EXPECT_TX_OF_ONE_CTA = "expect_tx_of_one_cta"
    # Pair only: the allocator deallocates without the handshake with its peer.
    DEALLOC_BEFORE_PEER_READ = "dealloc_before_peer_read"
    # The producer of CTA 1 (a pair's peer, which runs no MMA) drops its final waits
    # on its empty barriers, so the CTA may exit while other CTAs' commits are on
    # their way to it.
    DROPS_PRODUCER_TAIL = "drops_producer_tail"


# Faults that need a pair (the others need a cluster of more than one CTA).
PAIR_ONLY = {ClusterFault.ACC_COMMIT_WITHOUT_PEER, ClusterFault.EXPECT_TX_OF_ONE_CTA,
             ClusterFault.DEALLOC_BEFORE_PEER_READ}


@dataclass(frozen=True)
class ClusterSpec:
    """One cluster of the SM100 kernel ``kernel`` at the model's sizes.

    ``stages``, ``tiles`` (per CTA), ``k_blocks`` and ``acc_stages`` (None: the kernel's)
    size the model; ``co_resident``: include the other clusters whose CTAs share the SMs.
    """

    kernel: cfg.KernelSpec
    stages: int = 2
    tiles: int = 2
    k_blocks: int = 2
    acc_stages: int | None = None
    co_resident: bool = True
    fault: ClusterFault | None = None
    lookahead: Lookahead = field(init=False)

    def __post_init__(self) -> None:
        if self.kernel.arch != "sm100":
            raise ValueError(f"the cluster model is the SM100 kernel's; got {self.kernel.arch}")
        object.__setattr__(self, "lookahead", self.kernel.config.lookahead)
        if self.acc_stages is None:
            object.__setattr__(self, "acc_stages", self.kernel.config.acc_stages)
        if self.fault is not None:
            object.__setattr__(self, "fault", ClusterFault(self.fault))
            if self.fault in PAIR_ONLY and self.pair == 1:
                raise ValueError(f"ClusterFault.{self.fault.name} needs a 2-CTA pair (two_cta=True)")
            if self.cluster_size == 1:
                raise ValueError(f"ClusterFault.{self.fault.name} needs a cluster of more than one CTA")
        for name in ("stages", "tiles", "k_blocks", "acc_stages"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"ClusterSpec.{name} must be a positive int, got {value!r}")

    @classmethod
    def of(cls, config: cfg.GemmConfig, **sizes) -> "ClusterSpec":
        """The cluster of the bf16 kernel ``make_spec`` builds for ``config``."""
        return cls(cfg.make_spec("sm100", "bf16", "bf16", "k", "k", "n", config), **sizes)

    def with_policy(self, policy: Lookahead) -> "ClusterSpec":
        return replace(self, kernel=replace(self.kernel, config=replace(self.kernel.config, lookahead=policy)))

    # -- what the kernel spec says -----------------------------------------------------------

    @property
    def cluster_m(self) -> int:
        return self.kernel.config.cluster_m

    @property
    def cluster_n(self) -> int:
        return self.kernel.config.cluster_n

    @property
    def cluster_size(self) -> int:
        return self.kernel.config.cluster_size

    @property
    def pair(self) -> int:
        return cfg.cta_pair(self.kernel.config)

    @property
    def a_bytes(self) -> int:
        """Bytes of one CTA's A tile per stage."""
        return cfg.smem_budget(self.kernel).a_stage_bytes

    @property
    def b_bytes(self) -> int:
        """Bytes of one CTA's B tile per stage (half the MMA's B in a pair)."""
        return cfg.smem_budget(self.kernel).b_stage_bytes

    @property
    def stage_bytes(self) -> int:
        return self.a_bytes + self.b_bytes

    @property
    def epilogue_warps(self) -> int:
        """Warps of each CTA's epilogue, each arriving once on the leader's ``acc_empty``."""
        return SM100_EPILOGUE_WARPS

    @property
    def announced_bytes(self) -> int:
        """What the leader's ``arrive.expect_tx`` announces: both CTAs' bytes in a pair
        (the kernel's ``tx_bytes``)."""
        ctas = 1 if self.fault is ClusterFault.EXPECT_TX_OF_ONE_CTA else self.pair
        return self.stage_bytes * ctas

    @property
    def residency(self) -> Residency:
        return Residency.of(self.kernel)

    def short(self) -> str:
        c = self.kernel.config
        name = f"sm100 cluster {c.cluster_m}x{c.cluster_n}" + (" 2-CTA" if c.two_cta else "")
        name += f" s{self.stages} t{self.tiles} k{self.k_blocks} acc{self.acc_stages} {self.lookahead.value}"
        if self.co_resident and self.residency.clusters > 1:
            name += f" +{self.residency.clusters - 1} co-resident"
        if self.fault is not None:
            name += f" fault={self.fault.value}"
        return name


@dataclass(frozen=True)
class ClusterModel(KernelModel):
    """A :class:`KernelModel` over several CTAs: which CTA owns each role, barrier,
    slot and accumulator, which SM each CTA runs on, and the columns it allocates."""

    ctas: int = 1  # modelled CTAs, the cluster's first, then co-resident ones
    owners_of_roles: tuple[int, ...] = ()
    owners_of_barriers: tuple[int, ...] = ()
    sm_of_cta: tuple[int, ...] = ()
    columns_of_cta: tuple[int, ...] = ()
    sm_columns: tuple[int, ...] = ()
    slot_readers_by_cta: tuple[frozenset[int], ...] = ()
    copies_per_slot: int = 2

    @property
    def cta_count(self) -> int:
        return self.ctas

    @property
    def role_cta(self) -> tuple[int, ...]:
        return self.owners_of_roles

    @property
    def barrier_cta(self) -> tuple[int, ...]:
        return self.owners_of_barriers

    @property
    def cta_sm(self) -> tuple[int, ...]:
        return self.sm_of_cta

    @property
    def tmem_columns(self) -> tuple[int, ...]:
        return self.columns_of_cta

    @property
    def slot_count(self) -> int:
        return self.spec.stages * len(self.slot_readers_by_cta)

    @property
    def tmem_columns_per_sm(self) -> tuple[int, ...]:
        return self.sm_columns

    def roles_of(self, cta: int) -> list[int]:
        return [r for r, c in enumerate(self.owners_of_roles) if c == cta]

    def slot_cta(self, slot: int) -> int:
        return slot // self.spec.stages

    def slot_name(self, slot: int) -> str:
        return f"CTA {self.slot_cta(slot)} slot {slot % self.spec.stages}"

    def acc_cta(self, acc: int) -> int:
        return acc // self.spec.acc_stages

    def copies_needed(self, kblock: int, slot: int = 0) -> int:
        return self.copies_per_slot

    def readers(self, kblock: int, slot: int = 0) -> frozenset[int]:
        return self.slot_readers_by_cta[self.slot_cta(slot)]


def build_cluster(spec: ClusterSpec) -> ClusterModel:
    """Lay out every CTA's barriers, slots and accumulators and unroll its roles."""
    cm, cn, pair, n = spec.cluster_m, spec.cluster_n, spec.pair, spec.stages
    size = spec.cluster_size
    ranks = range(size)  # rank = m + n * cluster_m, as block_idx_in_cluster

    def coords(rank):
        return rank % cm, rank // cm

    def leader(rank):
        return rank - coords(rank)[0] % pair

    names: list[str] = []
    counts: list[int] = []
    owners: list[int] = []

    def barriers(cta: int, kind: str, count: int, k: int) -> list[int]:
        first = len(names)
        names.extend(f"CTA {cta} {kind}[{i}]" for i in range(k))
        counts.extend([count] * k)
        owners.extend([cta] * k)
        return list(range(first, first + k))

    full = {r: barriers(r, "full", 1, n) for r in ranks}
    empty = {r: barriers(r, "empty", empty_arrivals(cm, cn, pair, 1), n) for r in ranks}
    acc_full = {r: barriers(r, "acc_full", 1, spec.acc_stages) for r in ranks}
    acc_empty = {r: barriers(r, "acc_empty", SM100_EPILOGUE_WARPS * pair, spec.acc_stages) for r in ranks}
    # TmemAllocator.free: the allocator warp's 32 threads arrive on the peer's barrier.
    dealloc = {r: barriers(r, "tmem_dealloc", hardware.WARP_SIZE, 1)[0] for r in ranks} if pair == 2 else {}

    def mask_ranks(mask: int) -> list[int]:
        return [r for r in ranks if mask >> r & 1]

    # Whom each CTA's commits reach, besides itself.
    def release_targets(r: int) -> list[int]:
        if spec.fault is ClusterFault.SLOT_COMMIT_WITHOUT_PEER:
            return []
        return [t for t in mask_ranks(release_mask(*coords(r), cm, cn, pair)) if t != r] if size > 1 else []

    def acc_targets(r: int) -> list[int]:
        if pair == 1 or spec.fault is ClusterFault.ACC_COMMIT_WITHOUT_PEER:
            return []
        return [r ^ 1]

    # Multicast groups: A along the cluster row (same m), B along the column (same n,
    # same pair position); each member loads 1/group of the tile for all of them.
    def a_group(r):
        m, _ = coords(r)
        return [t for t in ranks if coords(t)[0] == m]

    def b_group(r):
        m, c = coords(r)
        return [t for t in ranks if coords(t)[1] == c and coords(t)[0] % pair == m % pair]

    rings = {}
    acc_rings = {}
    for r in ranks:
        rings[r] = RingModel(full[r], empty[r], n, slot_base=r * n,
                             commit_release_to=[tuple(empty[t][s] for t in release_targets(r)) for s in range(n)])
        # The epilogue waits on its own acc_full and releases the leader's acc_empty.
        acc_rings[r] = RingModel(acc_full[r], acc_empty[leader(r)], spec.acc_stages, slot_base=r * spec.acc_stages,
                                 commit_full_to=[tuple(acc_full[t][b] for t in acc_targets(r))
                                                 for b in range(spec.acc_stages)])

    def copies_of(r):
        ring = rings[r]

        def copies(count):
            s, phase = count % n, ring.phase(count)
            for operand, group, nbytes in (("A", a_group(r), spec.a_bytes), ("B", b_group(r), spec.b_bytes)):
                # The bytes land in each destination's slot and complete on the
                # barrier of that destination's pair leader.
                dests = [(t * n + s, full[leader(t)][s]) for t in group]
                (slot, barrier), *rest = dests
                yield TmaLoad(slot, count, operand, barrier, nbytes // len(group), phase, tuple(rest))
        return copies

    role_names: list[str] = []
    programs: list[tuple] = []
    role_owner: list[int] = []
    queues: list[int | None] = []
    readers_by_cta: list[frozenset[int]] = [frozenset()] * size
    columns = cfg.tmem_columns(spec.kernel)

    def add(cta, name, program, queue=None):
        role_names.append(f"CTA {cta} {name}")
        programs.append(tuple(program))
        role_owner.append(cta)
        queues.append(queue)
        return len(programs) - 1

    for r in ranks:
        is_leader = leader(r) == r
        tail = not (spec.fault is ClusterFault.DROPS_PRODUCER_TAIL and r == 1)
        add(r, "producer", producer(spec, rings[r], copies=copies_of(r),
                                    announced=spec.announced_bytes if is_leader else None, tail=tail))
        if is_leader:
            pair_ctas = tuple(range(r, r + pair))
            mma = (WaitTmemAllocated(pair_ctas),
                   *sm100_mma(spec, rings[r], acc_rings[r],
                              peer_rings=tuple(rings[t] for t in pair_ctas[1:]),
                              peer_acc_rings=tuple(acc_rings[t] for t in pair_ctas[1:])))
            role = add(r, "mma", mma, queue=sum(q is not None for q in queues))
            for t in pair_ctas:
                readers_by_cta[t] = frozenset({role})
        # The allocator relinquishes the permit right after its one allocation.
        add(r, "epilogue", (TmemAlloc(r, r, columns, relinquish=True), *sm100_epilogue(spec, acc_rings[r], part=r),
                            *_release_tmem(spec, r, dealloc)))

    # Other clusters on the same SMs, as residency.py models them.
    co_resident = spec.residency.clusters - 1 if spec.co_resident else 0
    for k in range(1, 1 + co_resident):
        theirs = tuple(k * size + i for i in ranks)
        for i in ranks:
            cta = k * size + i
            add(cta, f"(cluster {k})", (TmemAlloc(cta, i, columns), WaitTmemAllocated(theirs),
                                        TmemDealloc(cta, (cta,))))
    ctas = size * (1 + co_resident)
    return ClusterModel(
        spec=spec,
        role_names=tuple(role_names),
        programs=tuple(programs),
        barrier_names=tuple(names),
        barrier_counts=tuple(counts),
        slot_readers=frozenset(),
        readers_by_tile=None,
        accumulators=size * spec.acc_stages,
        role_queues=tuple(queues),
        tile_parts=size,
        ctas=ctas,
        owners_of_roles=tuple(role_owner),
        owners_of_barriers=tuple(owners),
        sm_of_cta=tuple(c % size for c in range(ctas)),
        columns_of_cta=(columns,) * ctas,
        sm_columns=(spec.kernel.facts.tmem_columns,) * size,
        slot_readers_by_cta=tuple(readers_by_cta),
        copies_per_slot=len(a_group(0)) + len(b_group(0)),
    )


def _release_tmem(spec: ClusterSpec, r: int, dealloc: dict[int, int]):
    """The end of the epilogue (``Sm100Gemm.epilogue``, ``TmemAllocator.free``):
    hand-shake with the pair's peer, deallocate."""
    if spec.pair == 2:
        if spec.fault is not ClusterFault.DEALLOC_BEFORE_PEER_READ:
            yield Arrive(dealloc[r ^ 1], hardware.WARP_SIZE, 0)
            yield Wait(dealloc[r], 0)
        yield TmemDealloc(r, (r, r ^ 1))
    else:
        yield TmemDealloc(r, (r,))
