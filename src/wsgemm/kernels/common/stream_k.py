"""Stream-K for the last, partial wave: every cluster streams the same number of k-blocks.

Split-K (``split_k.py``) cuts each tail tile into ``splits`` equal K ranges. That
balances the SMs only when ``tail * splits`` happens to fill the grid: 48 tiles of a
6144-wide decode weight on 132 SMs split 2 ways keep 96 SMs busy (and 3 ways need a
second round of items for 12 of them). Stream-K deals the tail's k-blocks out
instead: with ``tail`` tiles of ``k_blocks`` each, ``work = tail * k_blocks`` in all,
cluster ``c`` takes the contiguous run ``[c * work // S, (c + 1) * work // S)`` of the
tail's k-blocks in tile order, where ``S = min(clusters, work)`` clusters take part.
Every run is within one k-block of ``work / S`` long (23 or 24 k-blocks each in the
example, against 32 for split 2), and it may cross tile boundaries.

A run is cut at tile boundaries into **pieces**. The piece that holds a tile's first
k-block is the tile's **finisher**; the others (each the *first* piece of a later
cluster's run, because every later piece of a run starts on a boundary) are its
**contributors**:

* a contributor stores its fp32 partial sums to the slot numbered by its cluster (a
  cluster has at most one contributor piece) and counts itself in the tile's flag;
* the finisher waits for its tile's contributors, which are the clusters whose runs
  start strictly inside the tile (consecutive cluster numbers), adds their slots in
  cluster order and runs the epilogue; with none, it is a whole tile.

Why nobody waits long, or forever: a finisher is the *last* piece a cluster works
on but one whose contributors are *first* pieces of later clusters, which wait for
nothing; and the persistent grid never holds more clusters than are co-resident.
(The other choice, the piece with the tile's last k-block as finisher, would make a
cluster's first piece wait for the previous cluster's whole run.)

As in split-K, the whole tiles of full waves come first, one per cluster per wave,
and only the ``units % clusters`` left over are streamed. All of it is integer
arithmetic that runs on Python ints (host, tests, the CPU model) and on DSL
``Int32`` values (kernels), branch-free.
"""

from __future__ import annotations

import cutlass


def _at_least(x, y):
    """1 if x >= y else 0, without a branch."""
    return cutlass.min(cutlass.max(x - y + 1, 0), 1)


def phase(units, clusters, k_blocks):
    """(whole units, tail units, clusters that stream, k-blocks streamed) of a launch."""
    tail = units % clusters
    work = tail * k_blocks
    return units - tail, tail, cutlass.min(clusters, work), work


def run_of_cluster(cluster, streamers, work):
    """[begin, end) of the tail's k-blocks cluster ``cluster`` streams (empty for a
    cluster past the ``streamers`` that take part)."""
    c = cutlass.min(cluster, streamers)
    divisor = cutlass.max(streamers, 1)
    begin = c * work // divisor
    end = cutlass.min(c + 1, streamers) * work // divisor
    return begin, cutlass.max(end, begin)


def steps_of_cluster(cluster, units, clusters, k_blocks):
    """Work pieces cluster ``cluster`` runs: its whole units, then one piece per tile
    its run touches."""
    whole, _, streamers, work = phase(units, clusters, k_blocks)
    begin, end = run_of_cluster(cluster, streamers, work)
    touched = (end + k_blocks - 1) // k_blocks - begin // k_blocks
    return whole // clusters + cutlass.min(end - begin, 1) * touched


def contributors(tile, streamers, work, k_blocks):
    """(first cluster, count) of the contributors of tail tile ``tile``: the clusters
    whose runs begin strictly inside it."""
    divisor = cutlass.max(work, 1)
    first = ((tile * k_blocks + 1) * streamers + divisor - 1) // divisor
    last = cutlass.min(streamers - 1, ((tile + 1) * k_blocks * streamers - 1) // divisor)
    return first, cutlass.max(last - first + 1, 0)


def piece_of_step(step, cluster, units, clusters, k_blocks):
    """``(unit, first k-block, k-blocks, publish slot, waits, first slot, flag)`` of
    this cluster's ``step``-th piece. ``publish slot`` is -1 unless the piece is a
    contributor; ``waits`` counts the partial sums a finisher adds (from ``first
    slot`` on) before its epilogue; ``flag`` is the tail tile's arrival flag."""
    whole, _, streamers, work = phase(units, clusters, k_blocks)
    whole_steps = whole // clusters
    in_tail = _at_least(step, whole_steps)
    begin, end = run_of_cluster(cluster, streamers, work)
    tile = begin // k_blocks + cutlass.max(step - whole_steps, 0)
    start = cutlass.max(begin, tile * k_blocks)
    stop = cutlass.min(end, (tile + 1) * k_blocks)
    kb_first = in_tail * (start - tile * k_blocks)
    kb_count = k_blocks + in_tail * (stop - start - k_blocks)
    is_contributor = cutlass.min(kb_first, 1)
    first_slot, count = contributors(tile, streamers, work, k_blocks)
    whole_unit = cluster + step * clusters
    unit = whole_unit + in_tail * (whole + tile - whole_unit)
    publish_slot = is_contributor * (cluster + 1) - 1
    waits = in_tail * (1 - is_contributor) * count
    return unit, kb_first, kb_count, publish_slot, waits, first_slot, tile
