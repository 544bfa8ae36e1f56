import inspect
import textwrap
from collections import Counter
from types import SimpleNamespace

from hypothesis import given, settings
from hypothesis import strategies as st

from wsgemm.kernels.common import stages
from wsgemm.grid import TileGrid
from wsgemm.kernels.common.scheduler import (cluster_coord_of_work, cta_pieces, cta_work, edge_tile_offset,
                                              edge_tile_overhang)


def test_stage_index_and_parities_walk_the_ring():
    n = 3
    got = [(stages.stage_index(c, n), stages.full_wait_parity(c, n), stages.empty_wait_parity(c, n)) for c in range(7)]
    assert got == [
        (0, 0, 1), (1, 0, 1), (2, 0, 1),  # lap 0: consumers wait phase 0; producer passes (parity 1)
        (0, 1, 0), (1, 1, 0), (2, 1, 0),  # lap 1: consumers wait phase 1; producer waits release 0
        (0, 0, 1),
    ]


def test_producer_parity_is_the_consumers_parity_one_lap_earlier():
    for n in (2, 3, 4, 7):
        for c in range(n, 50):
            assert stages.empty_wait_parity(c, n) == stages.full_wait_parity(c - n, n)


def test_stepping_the_ring_position_walks_the_running_counts_slots_and_parities():
    """From ``SmemRing.producer_start`` / ``consumer_start``, ``SmemRing.next_slot``
    (the kernels' roles step their position with it instead of dividing a running
    count) visits what the count-based functions, which the CPU model uses, give for
    every count. ``next_slot``'s source runs as plain Python here, ``Int32`` as int
    (calling the jit function itself outside a kernel would trace it)."""
    from wsgemm.kernels.common import pipeline

    namespace = {"Int32": int, "cute": SimpleNamespace(jit=lambda fn: fn)}
    exec(textwrap.dedent(inspect.getsource(pipeline.SmemRing.next_slot)), namespace)  # noqa: S102 (our own source)
    next_slot = namespace["next_slot"]
    for n in (1, 2, 3, 5, 7):
        ring = SimpleNamespace(num_stages=n)
        starts = {stages.full_wait_parity: pipeline.SmemRing.consumer_start,
                  stages.empty_wait_parity: pipeline.SmemRing.producer_start}
        for parity_of, start in starts.items():
            slot, parity = (int(v) for v in start(ring))
            for count in range(4 * n + 1):
                assert (slot, parity) == (stages.stage_index(count, n), parity_of(count, n))
                slot, parity = next_slot(ring, slot, parity)


@settings(max_examples=200, deadline=None)
@given(
    tiles_m=st.integers(1, 12),
    tiles_n=st.integers(1, 12),
    batches=st.integers(1, 3),
    cluster_m=st.sampled_from([1, 2]),
    cluster_n=st.sampled_from([1, 2]),
    along_m=st.booleans(),
    swizzle=st.sampled_from([1, 2, 4, 8]),
    clusters=st.integers(1, 40),
)
def test_every_output_tile_is_computed_exactly_once(tiles_m, tiles_n, batches, cluster_m, cluster_n, along_m, swizzle, clusters):
    grid = TileGrid(tiles_m, tiles_n, batches, cluster_m, cluster_n, along_m, swizzle)
    clusters = grid.launch_clusters(clusters)
    seen = Counter()
    for c in range(clusters):
        for cm in range(cluster_m):
            for cn in range(cluster_n):
                for m, n, l, split, splits in cta_work(grid, c, clusters, cm, cn):
                    assert (split, splits) == (0, 1)
                    seen[(m, n, l)] += 1
    real = {(m, n, l): 1 for m in range(tiles_m) for n in range(tiles_n) for l in range(batches)}
    assert {t: v for t, v in seen.items() if t[0] < tiles_m and t[1] < tiles_n} == real
    # Padding tiles appear only past the edges, and only to complete a cluster.
    assert all(m < grid.clusters_m * cluster_m and n < grid.clusters_n * cluster_n for m, n, _ in seen)


@settings(max_examples=400, deadline=None)
@given(extent=st.integers(1, 2000), tile_size=st.sampled_from([64, 96, 128, 160, 192, 256]),
       granule=st.sampled_from([1, 8]), padding=st.integers(0, 3))
def test_moved_edge_tiles_cover_every_row_and_read_less_past_the_edge(extent, tile_size, granule, padding):
    """Tiles start at ``tile * tile_size + edge_tile_offset(...)``: with two or more
    tiles the last one moves back by whole granules, as far as it can without
    starting before 0, so that fewer than ``granule`` of its rows lie past the edge;
    the others stay; together they cover ``[0, extent)``. A single tile stays where
    it is (it cannot move); tiles a cluster pads the grid with (``tile >= tiles``)
    never move into the output."""
    tiles = -(-extent // tile_size)
    overhang = edge_tile_overhang(tiles, extent, tile_size, granule)
    starts = [t * tile_size + edge_tile_offset(t, tiles, overhang) for t in range(tiles + padding)]
    real = starts[:tiles]
    assert real[:-1] == [t * tile_size for t in range(tiles - 1)]
    if tiles == 1:
        assert real == [0]
    else:
        assert all(s >= 0 and s % granule == 0 for s in real)
        assert 0 <= real[-1] + tile_size - extent < granule
    covered = set().union(*(range(s, min(s + tile_size, extent)) for s in real))
    assert covered == set(range(extent))
    assert starts[tiles:] == [t * tile_size for t in range(tiles, tiles + padding)]


def test_swizzle_visits_band_columns_side_by_side_walking_down_m():
    order = [cluster_coord_of_work(w, 3, 4, True, 2)[:2] for w in range(12)]
    assert order == [(0, 0), (0, 1), (1, 0), (1, 1), (2, 0), (2, 1),
                     (0, 2), (0, 3), (1, 2), (1, 3), (2, 2), (2, 3)]


def test_last_band_may_be_narrower():
    order = [cluster_coord_of_work(w, 2, 3, True, 2)[:2] for w in range(6)]
    assert order == [(0, 0), (0, 1), (1, 0), (1, 1), (0, 2), (1, 2)]


def test_raster_along_n_steps_along_n():
    order = [cluster_coord_of_work(w, 2, 3, False, 1)[:2] for w in range(6)]
    assert order == [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2)]


def test_persistent_grid_never_exceeds_work_or_residency():
    grid = TileGrid(3, 2, 1)
    assert grid.launch_clusters(132) == 6
    assert TileGrid(64, 32, 1).launch_clusters(132) == 132


@settings(max_examples=150, deadline=None)
@given(
    tiles_m=st.integers(1, 8),
    tiles_n=st.integers(1, 8),
    batches=st.integers(1, 2),
    cluster_m=st.sampled_from([1, 2]),
    split_k=st.integers(2, 5),
    clusters=st.integers(1, 30),
)
def test_split_k_covers_every_split_once_and_cannot_deadlock(tiles_m, tiles_n, batches, cluster_m, split_k,
                                                              clusters):
    """Each (tile, split) runs once; only the last partial wave's tiles are split; and
    with every cluster resident and walking its items in order, a last split (which
    waits for the tile's other splits) never waits forever: simulate the clusters
    stepping in lock-step rounds."""
    grid = TileGrid(tiles_m, tiles_n, batches, cluster_m, 1, True, 1, split_k)
    clusters = grid.launch_clusters(clusters)
    queues = [list(cta_work(grid, c, clusters, 0, 0)) for c in range(clusters)]
    items = Counter(item for q in queues for item in q)
    assert set(items.values()) == {1}
    tiles = {(m, n, l) for m in range(grid.clusters_m * cluster_m) if m % cluster_m == 0
             for n in range(tiles_n) for l in range(batches)}
    assert {(m, n, l) for m, n, l, _, _ in items} == tiles
    split_tiles = {(m, n, l) for m, n, l, _, splits in items if splits > 1}
    assert len(split_tiles) == grid.split_tiles(clusters) // cluster_m == len(tiles) % clusters
    for m, n, l in split_tiles:
        assert sorted(s for tm, tn, tl, s, _ in items if (tm, tn, tl) == (m, n, l)) == list(range(split_k))
    done = Counter()
    while any(queues):
        progressed = False
        for q in queues:
            if not q:
                continue
            m, n, l, split, splits = q[0]
            if split == splits - 1 and done[(m, n, l)] < splits - 1:
                continue  # the last split spins on the tile's arrival flag
            done[(m, n, l)] += 1
            q.pop(0)
            progressed = True
        assert progressed, "every remaining cluster is waiting: deadlock"


def test_split_k_splits_only_the_last_partial_wave():
    # 160 tiles on 132 clusters: 132 whole tiles, then 28 tiles in 4 splits each.
    grid = TileGrid(4, 40, 1, split_k=4)
    assert grid.launch_clusters(132) == 132
    assert grid.work_items(132) == 132 + 28 * 4
    assert grid.split_tiles(132) == 28
    # Fewer tiles than clusters: every tile is split (classic split-K) ...
    assert TileGrid(2, 16, 1, split_k=4).launch_clusters(132) == 128
    assert TileGrid(2, 16, 1, split_k=4).split_tiles(128) == 32
    # ... and tiles that fill whole waves are not split at all.
    assert TileGrid(4, 66, 1, split_k=4).split_tiles(132) == 0
    assert TileGrid(4, 66, 1, split_k=4).work_items(132) == 264


def test_a_split_k_launch_always_gets_a_workspace_even_with_nothing_to_split():
    """The split-K entry point takes flags and partial sums on every call: a config
    with split_k > 1 on tiles that fill whole waves (no tail) must still pass some
    (it used to pass none, and the call failed on the argument count)."""
    from wsgemm import GemmConfig
    from wsgemm.plans import launch_workspace_elems

    config = GemmConfig(tile_m=128, tile_n=256, split_k=4)
    whole_waves = TileGrid.for_problem(4 * 128, 66 * 256, 1, config)  # 264 tiles on 132 SMs
    assert whole_waves.split_tiles(132) == 0
    assert launch_workspace_elems(whole_waves, 132, config) == (1, 1)
    tail = TileGrid.for_problem(4 * 128, 40 * 256, 1, config)  # 160 tiles: a tail of 28
    assert launch_workspace_elems(tail, 132, config) == (28, 28 * 3 * 128 * 256)
    assert launch_workspace_elems(tail, 132, GemmConfig()) == (0, 0)


@settings(max_examples=200, deadline=None)
@given(
    tiles_m=st.integers(1, 9),
    tiles_n=st.integers(1, 9),
    batches=st.integers(1, 2),
    cluster_m=st.sampled_from([1, 2]),
    clusters=st.integers(1, 40),
    k_blocks=st.sampled_from([1, 2, 3, 7, 64]),
)
def test_stream_k_covers_every_k_block_once_and_cannot_deadlock(tiles_m, tiles_n, batches, cluster_m, clusters,
                                                                 k_blocks):
    """Stream-K (kernels/common/stream_k.py), walked as the kernel walks it: every
    k-block of every tile runs once; full waves of whole tiles first; each tail tile
    has one finisher that adds exactly the slots its contributors published (each a
    later cluster's first tail piece, one slot per cluster); the runs of the tail
    differ by at most one k-block; and clusters stepping in lock-step rounds, a
    finisher spinning until its contributors are done, always finish."""
    grid = TileGrid(tiles_m, tiles_n, batches, cluster_m, 1, True, 1, 1, stream_k=True)
    clusters = grid.launch_clusters(clusters)
    queues = [list(cta_pieces(grid, c, clusters, 0, 0, k_blocks)) for c in range(clusters)]
    covered = Counter((p.tile_m, p.tile_n, p.batch, kb) for q in queues for p in q
                      for kb in range(p.kb_first, p.kb_first + p.kb_count))
    tiles = {(m, n, l) for m in range(0, grid.clusters_m * cluster_m, cluster_m) for n in range(tiles_n)
             for l in range(batches)}
    assert set(covered.values()) == {1} and len(covered) == len(tiles) * k_blocks
    tail = grid.units % clusters
    whole_steps = (grid.units - tail) // clusters
    published = {}  # tile -> [slot]
    tail_blocks = []
    for c, q in enumerate(queues):
        assert all(p.kb_count == k_blocks and p.publish_slot < 0 and p.waits == 0 for p in q[:whole_steps])
        tail_blocks.append(sum(p.kb_count for p in q[whole_steps:]))
        for i, p in enumerate(q[whole_steps:]):
            if p.publish_slot >= 0:
                assert i == 0 and p.publish_slot == c and p.kb_first > 0
                published.setdefault(p[:3], []).append(c)
    if tail:
        active = [b for b in tail_blocks if b]
        assert max(active) - min(active) <= 1 and sum(active) == tail * k_blocks
    finishers = [p for q in queues for p in q[whole_steps:] if p.publish_slot < 0]
    assert sorted(p[:3] for p in finishers) == sorted({p[:3] for q in queues for p in q[whole_steps:]})
    for p in finishers:
        assert p.kb_first == 0
        assert published.get(p[:3], []) == list(range(p.first_slot, p.first_slot + p.waits))
    done = Counter()
    while any(queues):
        progressed = False
        for q in queues:
            if q and done[q[0][:3]] >= q[0].waits:
                p = q.pop(0)
                done[p[:3]] += p.publish_slot >= 0
                progressed = True
        assert progressed, "every remaining cluster is waiting: deadlock"


def test_stream_k_deals_a_decode_tail_evenly():
    """48 tiles of 64 k-blocks (a 6144-wide decode weight, 128-row tiles) on 132 SMs:
    split 2 keeps 96 SMs streaming 32 k-blocks each; stream-K keeps all 132 at 23-24."""
    grid = TileGrid(48, 1, 1, stream_k=True)
    assert grid.launch_clusters(132) == 132
    runs = [sum(p.kb_count for p in cta_pieces(grid, c, 132, 0, 0, 64)) for c in range(132)]
    assert set(runs) == {23, 24} and sum(runs) == 48 * 64
    assert grid.workspace_elems(132, 128, 16) == (48, 132 * 128 * 16)
