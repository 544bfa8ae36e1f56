"""Static persistent tile scheduler, shared by the SM90 and SM100 kernels.

The grid is ``(cluster_m, cluster_n, number of clusters)`` with clusters of shape
``(cluster_m, cluster_n, 1)``: ``blockIdx.z`` names the cluster and
``(blockIdx.x, blockIdx.y)`` the CTA's place inside it. Cluster ``c`` processes the
work items ``c, c + clusters, c + 2 * clusters, ...``; a work item is one cluster's
worth of output tiles. Every role of a CTA (producer, MMA, epilogue) walks the same
sequence independently, so the roles never exchange tile coordinates.

On SM90 the last, partial wave may be split (``split_k``) or streamed (``stream_k``);
a cluster's walk is then a sequence of *pieces*, each one K range of a tile, which
:func:`piece_of_step` gives step by step in one form for both schedules (the kernel
runs one loop for all three).

:func:`cluster_coord_of_work` and :func:`piece_of_step` are plain integer arithmetic:
they run on Python ints (tests, the CPU model, the host) and on DSL ``Int32`` values
in the kernels.
"""

from __future__ import annotations

from typing import Iterator, NamedTuple

import cutlass

from ...grid import TileGrid, work_items
from . import split_k, stream_k


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


def edge_tile_overhang(tiles, extent, tile_size, granule: int = 1):
    """How far the last of ``tiles`` tiles moves back (see :func:`edge_tile_offset`):
    the rows (or columns) it would cover past ``extent``, rounded down to a multiple
    of ``granule``; 0 when the tiles divide the extent, or when there is only one
    tile (nothing to move it onto).

    ``granule`` (compile-time): where the dimension is an operand's contiguous one, a
    TMA box must start on a 16-byte boundary (a box of 2-byte elements moved back by
    52 columns stopped an H200 kernel with an illegal instruction), so the tile
    moves back by whole 16-byte groups and may still read up to ``granule - 1`` rows
    past the edge."""
    overhang = (tiles * tile_size - extent) * cutlass.min(tiles - 1, 1)
    return overhang // granule * granule


def edge_tile_offset(tile, tiles, overhang):
    """Where tile ``tile`` starts relative to ``tile * tile_size``: ``-overhang`` for the
    last tile, which moves back so that its box ends at the edge instead of reading
    past it, and 0 for every other tile, also those a cluster pads the grid with
    (``tile >= tiles``), which must never land inside the output. Branch-free integer
    arithmetic, as :func:`cluster_coord_of_work`.

    Why: TMA fills the rows of a box that lie past the tensor's edge with zeros, and
    on an H200 a box straddling the edge is slow. 128x128 tiles at 576x2560x8192
    (whose last tile row holds 64 rows) ran 61.1 us against 45.7 at 640x2560x8192,
    the same grid with every box inside (docs/tuning-log/tile-shapes.md). The moved
    tile recomputes rows its neighbour also computes, with the same instructions in
    the same order, and stores the same values over them.
    """
    is_last = cutlass.min(cutlass.max(tile - tiles + 2, 0), 1) - cutlass.min(cutlass.max(tile - tiles + 1, 0), 1)
    return -overhang * is_last


def steps_of_cluster(cluster, units, clusters, k_blocks, splits: int, stream: bool):
    """Work pieces cluster ``cluster`` runs (``splits`` and ``stream`` are compile-time):
    whole units, then its share of the last partial wave, split (``split_k``) or
    streamed (``stream_k``)."""
    if stream:
        return stream_k.steps_of_cluster(cluster, units, clusters, k_blocks)
    return split_k.steps_of_cluster(cluster, units, clusters, splits)


def piece_of_step(step, cluster, units, clusters, k_blocks, splits: int, stream: bool):
    """``(unit, first k-block, k-blocks, publish slot, waits, first slot, flag)`` of
    cluster ``cluster``'s ``step``-th piece; see ``split_k.piece_of_step`` and
    ``stream_k.piece_of_step``. Without a tail schedule a piece is a whole unit."""
    if stream:
        return stream_k.piece_of_step(step, cluster, units, clusters, k_blocks)
    return split_k.piece_of_step(step, cluster, units, clusters, k_blocks, splits)


class Piece(NamedTuple):
    """One step of a CTA's walk (host side: tests, examples, the CPU model)."""

    tile_m: int
    tile_n: int
    batch: int
    kb_first: int
    kb_count: int
    publish_slot: int  # -1 unless the piece stores partial sums instead of D
    waits: int  # partial sums the piece adds before its epilogue
    first_slot: int
    flag: int


def cta_pieces(grid: TileGrid, cluster: int, clusters: int, cta_m: int, cta_n: int,
               k_blocks: int) -> Iterator[Piece]:
    """The pieces CTA ``(cta_m, cta_n)`` of cluster ``cluster`` runs, in order: the
    kernel's own walk (``piece_of_step``), with output tile coordinates."""
    steps = steps_of_cluster(cluster, grid.units, clusters, k_blocks, grid.split_k, grid.stream_k)
    for step in range(steps):
        unit, *rest = piece_of_step(step, cluster, grid.units, clusters, k_blocks, grid.split_k, grid.stream_k)
        cm, cn, batch = cluster_coord_of_work(unit, grid.clusters_m, grid.clusters_n, grid.along_m, grid.swizzle)
        yield Piece(cm * grid.cluster_m + cta_m, cn * grid.cluster_n + cta_n, batch, *rest)


def cta_work(grid: TileGrid, cluster: int, clusters: int, cta_m: int, cta_n: int) -> Iterator[tuple[int, ...]]:
    """``(tile_m, tile_n, batch, split, splits)`` of the work items CTA ``(cta_m, cta_n)``
    of cluster ``cluster`` visits, in order; ``splits`` is 1 for a whole tile (always,
    without split-K).

    Includes the padding tiles past the edge when the tile count is not a multiple of
    the cluster shape (the kernel loads zeros there and stores nothing).
    """
    for work in range(cluster, work_items(grid.units, clusters, grid.split_k), clusters):
        unit, split, splits, _ = split_k.item_of_work(work, grid.units, clusters, grid.split_k)
        cm, cn, batch = cluster_coord_of_work(unit, grid.clusters_m, grid.clusters_n, grid.along_m, grid.swizzle)
        yield cm * grid.cluster_m + cta_m, cn * grid.cluster_n + cta_n, batch, split, splits
