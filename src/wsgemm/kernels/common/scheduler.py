"""Static persistent tile scheduler, shared by the SM90 and SM100 kernels.

The grid is ``(cluster_m, cluster_n, number of clusters)`` with clusters of shape
``(cluster_m, cluster_n, 1)``: ``blockIdx.z`` names the cluster and
``(blockIdx.x, blockIdx.y)`` the CTA's place inside it. Cluster ``c`` processes the
work items ``c, c + clusters, c + 2 * clusters, ...``; a work item is one cluster's
worth of output tiles. Every role of a CTA (producer, MMA, epilogue) walks the same
sequence independently, so the roles never exchange tile coordinates.

:func:`cluster_coord_of_work` is plain integer arithmetic: it runs on Python ints
(tests, the CPU model, the host) and on DSL ``Int32`` values in the kernels.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

import cutlass

from . import split_k


def ceil_div(a, b):
    return (a + b - 1) // b


def cluster_coord_of_work(work, clusters_m, clusters_n, along_m: bool, swizzle: int):
    """Map a linear work index to ``(cluster_tile_m, cluster_tile_n, batch)``.

    ``along_m`` and ``swizzle`` are compile-time. Work items walk the output in bands
    ``swizzle`` clusters wide: along M, each band covers ``swizzle`` cluster columns
    and the walk goes down M, visiting the band's columns side by side before the
    next row, so ``swizzle`` B tiles stay hot in L2 while A streams past (and the
    other way round along N). The last band may be narrower.
    """
    per_batch = clusters_m * clusters_n
    batch = work // per_batch
    rest = work - batch * per_batch
    if along_m:
        walk_extent, band_extent = clusters_m, clusters_n
    else:
        walk_extent, band_extent = clusters_n, clusters_m
    band = rest // (swizzle * walk_extent)
    band_start = band * swizzle
    band_width = cutlass.min(swizzle, band_extent - band_start)
    within = rest - band_start * walk_extent
    walk_idx = within // band_width
    band_idx = band_start + within - walk_idx * band_width
    if along_m:
        return walk_idx, band_idx, batch
    return band_idx, walk_idx, batch


@dataclass(frozen=True)
class TileGrid:
    """Host-side description of the work of one launch (plain Python)."""

    tiles_m: int
    tiles_n: int
    batches: int
    cluster_m: int = 1
    cluster_n: int = 1
    along_m: bool = True
    swizzle: int = 1
    split_k: int = 1  # work items per output tile (kernels/common/split_k.py)

    @classmethod
    def for_problem(cls, m: int, n: int, batches: int, config) -> "TileGrid":
        from ...config import Raster

        return cls(
            ceil_div(m, config.tile_m),
            ceil_div(n, config.tile_n),
            batches,
            config.cluster_m,
            config.cluster_n,
            config.raster == Raster.ALONG_M,
            config.swizzle,
            config.split_k,
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
        the last wave's tiles, see ``split_k``)."""
        return split_k.work_items(self.units, clusters, self.split_k)

    def launch_clusters(self, max_active_clusters: int) -> int:
        """Persistent grid size: never more clusters than work, nor than fit at once.

        The split tail the kernel derives from this grid (``units % clusters``) is the
        one ``max_active_clusters`` gives: a grid smaller than that only happens when
        every unit is in the tail either way.
        """
        return max(1, min(self.work_items(max_active_clusters), max_active_clusters))

    def split_tiles(self, clusters: int) -> int:
        """CTA tiles whose K range is split on a grid of ``clusters`` (what the split-K
        workspace is sized by)."""
        return split_k.tail_units(self.units, clusters, self.split_k) * self.cluster_m * self.cluster_n

    def cta_work(self, cluster: int, clusters: int, cta_m: int, cta_n: int) -> Iterator[tuple[int, ...]]:
        """``(tile_m, tile_n, batch, split, splits)`` of the work items CTA
        ``(cta_m, cta_n)`` of cluster ``cluster`` visits, in order; ``splits`` is 1 for
        a whole tile (always, without split-K).

        Includes the padding tiles past the edge when the tile count is not a
        multiple of the cluster shape (the kernel loads zeros there and stores nothing).
        """
        for work in range(cluster, self.work_items(clusters), clusters):
            unit, split, splits, _ = split_k.item_of_work(work, self.units, clusters, self.split_k)
            cm, cn, batch = cluster_coord_of_work(
                unit, self.clusters_m, self.clusters_n, self.along_m, self.swizzle
            )
            yield cm * self.cluster_m + cta_m, cn * self.cluster_n + cta_n, batch, split, splits
