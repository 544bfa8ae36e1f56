"""The work of one launch, on the host: output tiles, clusters, waves, and the split
or streamed last wave. Plain Python (no DSL), shared by the planner, the launch and
the kernels' own schedule (``kernels/common/scheduler.py``, ``split_k.py`` and
``stream_k.py`` walk the same numbers on the device).

A *unit* is one cluster's worth of output tiles. A persistent grid of ``clusters``
runs the units in waves, one per cluster per wave; with split-K or stream-K only the
``units % clusters`` left over for a last, partial wave (the *tail*) are cut into
pieces that meet in an fp32 workspace.
"""

from __future__ import annotations

from dataclasses import dataclass


def ceil_div(a, b):
    return (a + b - 1) // b


def tail_units(units, clusters, splits: int):
    """Work units left over for a last, partial wave: the ones split-K cuts up."""
    if splits == 1:
        return 0
    return units % clusters


def work_items(units, clusters, splits: int):
    """Work items of a split-K launch: the whole units, plus ``splits`` items per tail
    unit. Integer arithmetic the kernels run on DSL values too."""
    return units + tail_units(units, clusters, splits) * (splits - 1)


def stream_k_fits_int32(units, clusters: int, k_blocks: int) -> bool:
    """The kernels multiply (tail k-blocks) by (streaming clusters) in 32-bit
    integers: true when that cannot overflow (132 clusters and K up to ~1M do)."""
    tail = units % clusters
    return (tail * k_blocks + k_blocks) * clusters < 2**31


def split_k_workspace_elems(split_tiles: int, splits: int, tile_m: int, tile_n: int) -> tuple[int, int]:
    """(int32 flags, fp32 partial-sum elements) a launch that splits ``split_tiles``
    CTA tiles (tail units times CTAs per cluster) needs: a flag per tile, a slot per
    split but the last."""
    if splits <= 1 or split_tiles == 0:
        return 0, 0
    return split_tiles, split_tiles * (splits - 1) * tile_m * tile_n


def stream_k_workspace_elems(tail_tiles: int, clusters: int, ctas: int, tile_m: int,
                             tile_n: int) -> tuple[int, int]:
    """(int32 flags, fp32 partial-sum elements) of a stream-K launch: a flag per tail
    CTA tile, a slot per CTA of every cluster (at most one contributor piece each)."""
    if tail_tiles == 0:
        return 0, 0
    return tail_tiles, clusters * ctas * tile_m * tile_n


@dataclass(frozen=True)
class TileGrid:
    """The output tiles of one launch and how they are grouped and walked."""

    tiles_m: int
    tiles_n: int
    batches: int
    cluster_m: int = 1
    cluster_n: int = 1
    along_m: bool = True
    swizzle: int = 1
    split_k: int = 1  # work items per tail tile (kernels/common/split_k.py)
    stream_k: bool = False  # the tail's k-blocks dealt out evenly (kernels/common/stream_k.py)

    @classmethod
    def for_problem(cls, m: int, n: int, batches: int, config) -> "TileGrid":
        from .config import Raster

        return cls(
            ceil_div(m, config.tile_m),
            ceil_div(n, config.tile_n),
            batches,
            config.cluster_m,
            config.cluster_n,
            config.raster == Raster.ALONG_M,
            config.swizzle,
            config.split_k,
            config.stream_k,
        )

    @property
    def clusters_m(self) -> int:
        return ceil_div(self.tiles_m, self.cluster_m)

    @property
    def clusters_n(self) -> int:
        return ceil_div(self.tiles_n, self.cluster_n)

    @property
    def units(self) -> int:
        """Work units: cluster-sized groups of output tiles, including the padding up
        to whole clusters (the kernel loads zeros there and stores nothing)."""
        return self.clusters_m * self.clusters_n * self.batches

    def work_items(self, clusters: int) -> int:
        """Work items on a persistent grid of ``clusters`` (split-K adds the splits of
        the last wave's tiles)."""
        return work_items(self.units, clusters, self.split_k)

    def launch_clusters(self, max_active_clusters: int) -> int:
        """Persistent grid size: never more clusters than work, nor than fit at once.

        The split tail the kernel derives from this grid (``units % clusters``) is the
        one ``max_active_clusters`` gives: a grid smaller than that only happens when
        every unit is in the tail either way. Stream-K fills every resident cluster
        (the kernel leaves out those past one k-block each).
        """
        if self.stream_k:
            return max(1, max_active_clusters)
        return max(1, min(self.work_items(max_active_clusters), max_active_clusters))

    def split_tiles(self, clusters: int) -> int:
        """CTA tiles whose K range is split (or streamed) on a grid of ``clusters``:
        what the workspace's flags are sized by."""
        tail = self.units % clusters if self.split_k > 1 or self.stream_k else 0
        return tail * self.cluster_m * self.cluster_n

    def workspace_elems(self, clusters: int, tile_m: int, tile_n: int) -> tuple[int, int]:
        """(int32 flags, fp32 partial-sum elements) of a launch on ``clusters``;
        (0, 0) when nothing is split or streamed."""
        if self.stream_k:
            return stream_k_workspace_elems(self.split_tiles(clusters), clusters, self.cluster_m * self.cluster_n,
                                            tile_m, tile_n)
        return split_k_workspace_elems(self.split_tiles(clusters), self.split_k, tile_m, tile_n)
