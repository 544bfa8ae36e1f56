"""What one run of the pipeline model describes: which kernel structure, how big,
which look-ahead policy, and (optionally) which deliberate bug to plant.

The barrier counts come from the functions the kernels call
(:func:`wsgemm.kernels.common.pipeline.empty_arrivals`), so a change there changes
the model too; the faults shift them on purpose.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from .. import hardware
from ..config import Lookahead
from ..kernels.common.stages import empty_arrivals


class Structure(str, enum.Enum):
    """Which kernel's roles the model runs."""

    # TMA producer -> smem ring -> wgmma consumer warpgroups, each storing its own rows.
    SM90 = "sm90"
    # The same ring read by two wgmma warpgroups that own alternate tiles whole and
    # take turns at the mainloop (GemmConfig.pingpong).
    SM90_PINGPONG = "sm90_pingpong"
    # TMA producer -> smem ring -> MMA warp -> accumulator ring (tensor memory) -> epilogue warps.
    SM100 = "sm100"


class Fault(str, enum.Enum):
    """A deliberate bug, planted to show the checker finds it. ``None`` = the kernels' code."""

    # (a) The producer skips the empty-slot wait even when its probe said "not ready"
    #     (with Lookahead.NONE there is no probe, so it never waits).
    TRUSTS_UNREADY_TOKEN = "trusts_unready_token"
    # (b) The barrier that collects several warps' releases -- SM90 empty[s] (consumer
    #     warps), SM100 acc_empty[b] (epilogue warps) -- is initialised with one
    #     arrival fewer / more than the warps issue.
    RELEASE_COUNT_LOW = "release_count_low"
    RELEASE_COUNT_HIGH = "release_count_high"
    # (c) A role waits with the other side's parity: the producer waits on empty[s]
    #     with full_wait_parity, or the consumer (SM100: MMA warp) waits on full[s]
    #     with empty_wait_parity.
    PRODUCER_PARITY_FLIPPED = "producer_parity_flipped"
    CONSUMER_PARITY_FLIPPED = "consumer_parity_flipped"
    # (d) A slot is released before its reader is done with it: SM90 consumers arrive
    #     on empty[s] right after issuing the wgmma that reads it; the SM100 MMA warp
    #     arrives at issue instead of through tcgen05.commit (which waits for the MMAs).
    EARLY_SLOT_RELEASE = "early_slot_release"
    # (d) SM100 only: the epilogue releases an accumulator buffer before reading it.
    EARLY_ACC_RELEASE = "early_acc_release"
    # (e) Ping-pong only: a warpgroup starts its tile's mainloop without waiting for
    #     its turn, so its parity waits on the shared full[s] may see a phase two laps
    #     old as the one it wants.
    SKIPS_MAINLOOP_TURN = "skips_mainloop_turn"
    # (f) SM90 only, whose producer skips a box that lies wholly past the operand's
    #     edge (``PipelineSpec.padded_tiles``): it skips a padded tile's A box but
    #     announces the whole stage's bytes (the last tile is made padded if none is) ...
    ANNOUNCES_SKIPPED_BOX = "announces_skipped_box"
    #     ... or its edge test is off by one: it also skips (and does not announce) the
    #     A box of the first tile that has rows.
    SKIPS_REAL_BOX = "skips_real_box"


_SM90_STRUCTURES = (Structure.SM90, Structure.SM90_PINGPONG)
# Faults that exist in some structures only: (those structures, why).
FAULT_ONLY_IN = {
    Fault.EARLY_ACC_RELEASE: ((Structure.SM100,), "SM90 has no accumulator ring"),
    Fault.SKIPS_MAINLOOP_TURN: ((Structure.SM90_PINGPONG,), "only ping-pong consumers take turns"),
    Fault.ANNOUNCES_SKIPPED_BOX: (_SM90_STRUCTURES, "only the SM90 producer skips all-padding boxes"),
    Fault.SKIPS_REAL_BOX: (_SM90_STRUCTURES, "only the SM90 producer skips all-padding boxes"),
}


def fault_applies(fault: Fault, structure: Structure) -> bool:
    """Whether ``fault`` can be planted in ``structure``'s roles."""
    return structure in FAULT_ONLY_IN.get(fault, ((structure,), ""))[0]


@dataclass(frozen=True)
class PipelineSpec:
    """One configuration of the model. Sizes are per CTA; clusters are not modelled
    (a single CTA: its own copies fill its ring, its own warps release it)."""

    structure: Structure = Structure.SM90
    stages: int = 2  # shared-memory ring depth
    tiles: int = 2  # output tiles this CTA computes (persistent kernel)
    k_blocks: int = 2  # k-blocks per output tile
    lookahead: Lookahead = Lookahead.BEFORE_COPY
    # SM90: consumer warpgroups, each releasing a slot with one arrival per warp
    # (ping-pong: always two, and a slot is released by the one that read it).
    consumer_warpgroups: int = 1
    warps_per_warpgroup: int = hardware.WARPS_PER_WARPGROUP
    # SM100: tensor-memory accumulator buffers and the warps that drain them (one per
    # 32-lane quarter of tensor memory, i.e. one warpgroup).
    acc_stages: int = 2
    epilogue_warps: int = hardware.WARPS_PER_WARPGROUP
    # Bytes the two TMA copies of a stage deliver (default: 128x64 and 256x64 bf16).
    a_bytes: int = 128 * 64 * 2
    b_bytes: int = 256 * 64 * 2
    # SM90: this CTA's tiles whose A box lies wholly past M -- the CTA without rows in
    # a 2x1 cluster over an odd number of tile rows. The producer skips that box and
    # announces only B's bytes; the consumers multiply whatever the slot's A part
    # held, into rows the epilogue never stores.
    padded_tiles: tuple[int, ...] = ()
    fault: Fault | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "structure", Structure(self.structure))
        object.__setattr__(self, "lookahead", Lookahead(self.lookahead))
        if self.fault is not None:
            object.__setattr__(self, "fault", Fault(self.fault))
        for name in ("stages", "tiles", "k_blocks", "consumer_warpgroups",
                     "warps_per_warpgroup", "acc_stages", "epilogue_warps", "a_bytes", "b_bytes"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"PipelineSpec.{name} must be a positive int, got {value!r}")
        if self.fault is not None and not fault_applies(self.fault, self.structure):
            only, why = FAULT_ONLY_IN[self.fault]
            names = " or ".join(f"Structure.{structure.name}" for structure in only)
            raise ValueError(f"Fault.{self.fault.name} needs {names}: {why}")
        object.__setattr__(self, "padded_tiles", tuple(sorted(set(self.padded_tiles))))
        if self.padded_tiles and self.structure not in _SM90_STRUCTURES:
            raise ValueError("padded_tiles: the SM100 producer loads every box")
        if any(not 0 <= tile < self.tiles for tile in self.padded_tiles):
            raise ValueError(f"padded_tiles must be tiles of this CTA (0-{self.tiles - 1}), got {self.padded_tiles}")
        if self.fault is Fault.ANNOUNCES_SKIPPED_BOX and not self.padded_tiles:
            object.__setattr__(self, "padded_tiles", (self.tiles - 1,))
        if self.fault is Fault.SKIPS_REAL_BOX and len(self.padded_tiles) == self.tiles:
            raise ValueError("Fault.SKIPS_REAL_BOX needs a tile with rows")
        if self.structure is Structure.SM90_PINGPONG:
            object.__setattr__(self, "consumer_warpgroups", 2)
        if self.fault is Fault.RELEASE_COUNT_LOW and self.release_arrivals < 2:
            raise ValueError(
                f"Fault.RELEASE_COUNT_LOW needs at least 2 arrivals per release (got "
                f"{self.release_arrivals}); one fewer would be mbarrier.init(0), which PTX forbids"
            )

    # -- barrier counts ----------------------------------------------------------------

    @property
    def release_arrivals(self) -> int:
        """Arrivals the releasing warps issue per phase on the multi-warp barrier
        (SM90 empty[s], SM100 acc_empty[b])."""
        if self.structure is Structure.SM90:
            return self.consumer_warpgroups * self.warps_per_warpgroup
        if self.structure is Structure.SM90_PINGPONG:
            return self.warps_per_warpgroup  # only the warpgroup that read the slot
        return self.epilogue_warps

    @property
    def _release_count_shift(self) -> int:
        return {Fault.RELEASE_COUNT_LOW: -1, Fault.RELEASE_COUNT_HIGH: 1}.get(self.fault, 0)

    @property
    def empty_count(self) -> int:
        """``mbarrier.init`` count of each ``empty[s]``, as the kernel computes it
        for a single CTA (SM90: one arrival per consumer warp; SM100: one commit)."""
        if self.structure is not Structure.SM100:
            return empty_arrivals(1, 1, 1, self.release_arrivals) + self._release_count_shift
        return empty_arrivals(1, 1, 1, 1)

    @property
    def acc_empty_count(self) -> int:
        """SM100: ``mbarrier.init`` count of each ``acc_empty[b]`` (one per epilogue warp)."""
        return self.epilogue_warps + self._release_count_shift

    @property
    def stage_bytes(self) -> int:
        return self.a_bytes + self.b_bytes

    def loads_a(self, tile: int) -> bool:
        """Whether the producer loads tile ``tile``'s A box (with ``SKIPS_REAL_BOX``: not
        that of the first tile with rows either)."""
        if tile in self.padded_tiles:
            return False
        first_real = min(set(range(self.tiles)) - set(self.padded_tiles))
        return not (self.fault is Fault.SKIPS_REAL_BOX and tile == first_real)

    def copies_needed(self, tile: int) -> int:
        """The copies a k-block of ``tile`` must have landed before it is read: B, and A
        unless the tile's A box is padding (whatever the slot's A part holds then)."""
        return 1 if tile in self.padded_tiles else 2

    def short(self) -> str:
        """A compact name, e.g. ``sm90 s2 t2 k3 before_copy``."""
        name = f"{self.structure.value} s{self.stages} t{self.tiles} k{self.k_blocks}"
        if self.structure is Structure.SM90 and self.consumer_warpgroups > 1:
            name += f" wg{self.consumer_warpgroups}"
        if self.structure is Structure.SM100:
            name += f" acc{self.acc_stages}"
        name += f" {self.lookahead.value}"
        if self.padded_tiles:
            name += " padded=" + ",".join(map(str, self.padded_tiles))
        if self.fault is not None:
            name += f" fault={self.fault.value}"
        return name
