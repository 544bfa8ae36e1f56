"""Blackwell (SM100) persistent, warp-specialized GEMM: D = A @ B with tcgen05.

COMPILED AND STATICALLY CHECKED ONLY: no Blackwell GPU is available to this project,
so this kernel has never run on hardware. See docs/sm100-kernel.md.

Warp roles of a CTA (6 warps, 192 threads), following CUTLASS's
``sm100_mma_warpspecialized`` collective and kernel:

* **producer** (warp 5): the same TMA k-loop as the Hopper kernel
  (:func:`.common.pipeline.produce_k_blocks`), including the look-ahead probe of the
  next slot before the current copies; with a 2-CTA MMA each CTA of the pair loads
  its half and only the pair leader announces the bytes.
* **mma** (warp 4): one elected thread issues ``tcgen05.mma`` from shared memory into
  tensor memory (TMEM). After each k-block a ``tcgen05.commit`` releases the slot
  (arriving on ``empty`` once those MMAs completed, multicast to every CTA that fed
  them); after a tile's last k-block a commit marks the accumulator buffer full. It
  peeks the next ``full`` barrier with ``try_wait`` the same way the producer looks
  ahead. With a 2-CTA MMA only the pair leader runs this loop.
* **epilogue** (warps 0-3, one TMEM lane quarter each): wait for an accumulator
  buffer, ``tcgen05.ld`` it sub-tile by sub-tile, convert, ``st.shared`` and TMA-store
  D, releasing the buffer once the last sub-tile is in shared memory (before its
  TMA store, as CUTLASS's epilogue releases before its last store); ``acc_stages >= 2``
  buffers let the epilogue of one tile overlap the mainloop of the next. Warp 0 allocates TMEM before the loop,
  relinquishes the allocation permit right after (the CTA's one allocation), and frees
  the columns at the end.

Pipelines: ``SmemRing`` (TMA -> UMMA) and ``AccRing`` (UMMA -> epilogue), both from
:mod:`.common.pipeline`; scheduling from :mod:`.common.scheduler`, as on SM90.
"""

from __future__ import annotations

import cuda.bindings.driver as cuda_driver
import cutlass
import cutlass.cute as cute
import cutlass.memory
import cutlass.pipeline
import cutlass.utils.blackwell_helpers as sm100_helpers
from cutlass import Boolean, Float32, Int32
from cutlass.cute.nvgpu import cpasync, tcgen05

from .. import config as cfg
from ..grid import ceil_div
from .common.base import GemmKernelBase
from .common.epilogue import fuse_epilogue, tma_store_subtile
from .common.pipeline import AccRing, SmemRing, produce_k_blocks, publish_barrier_init
from .common.stages import empty_arrivals, release_mask
from .common.views import gemm_views

EPILOGUE_WARPS = (0, 1, 2, 3)  # tcgen05.ld: warp w reads TMEM lanes 32*(w%4) .. +31
MMA_WARP = 4
PRODUCER_WARP = 5
THREADS = 32 * 6

EPILOGUE_BARRIER_ID = 1  # named barrier among the epilogue warps
TMEM_ALLOC_BARRIER_ID = 2  # MMA + epilogue warps wait for the allocation


class Sm100Gemm(GemmKernelBase):
    """Builds the SM100 kernel for one :class:`wsgemm.config.KernelSpec`."""

    arch = "sm100"

    def __init__(self, spec: cfg.KernelSpec):
        super().__init__(spec)
        c = self.config
        self.cta_group = tcgen05.CtaGroup.TWO if c.two_cta else tcgen05.CtaGroup.ONE
        self.mma_tiler = (c.tile_m * self.pair, c.tile_n, c.tile_k)
        self.acc_stages = c.acc_stages
        self.tmem_columns = cfg.tmem_columns(spec)

    # ------------------------------------------------------------------------------
    # Host side
    # ------------------------------------------------------------------------------

    @cute.jit
    def __call__(
        self,
        mA_torch: cute.Tensor,
        mB_torch: cute.Tensor,
        mD_torch: cute.Tensor,
        num_clusters: Int32,
        stream: cuda_driver.CUstream,
    ):
        """Host side. Operands arrive in torch layouts (see ``common.views``)."""
        # No workspace (this kernel has no split-K or stream-K) and, without a fused
        # epilogue, no bias: D stands in for them, unused.
        self.launch(mA_torch, mB_torch, mD_torch, mD_torch, mD_torch, mD_torch, Float32(1.0), num_clusters,
                    stream)

    @cute.jit
    def launch(self, mA_torch, mB_torch, mD_torch, flags, partials, bias, alpha: Float32, num_clusters: Int32,
               stream: cuda_driver.CUstream):
        """``flags`` and ``partials``: unused (the SM90 kernel's workspace, kept for one
        entry-point signature)."""
        mA, mB, mD = gemm_views(mA_torch, mB_torch, mD_torch, self.spec.batched)
        m, k, batches = mA.shape
        n = mB.shape[0]

        tiled_mma = sm100_helpers.make_trivial_tiled_mma(
            self.ab_dtype,
            self.ab_dtype,
            self.a_layout.mma_major_mode(),
            self.b_layout.mma_major_mode(),
            self.acc_dtype,
            self.cta_group,
            self.mma_tiler[:2],
        )
        # (pair, cluster_m / pair, cluster_n, 1): the V mode names the CTA in its MMA pair.
        cluster_vmnk = cute.tiled_divide(cute.make_layout(self.cluster_shape_mnk), (tiled_mma.thr_id.shape,))
        a_smem = sm100_helpers.make_smem_layout_a(tiled_mma, self.mma_tiler, self.ab_dtype, self.num_stages)
        b_smem = sm100_helpers.make_smem_layout_b(tiled_mma, self.mma_tiler, self.ab_dtype, self.num_stages)
        cta_tile = (self.mma_tiler[0] // self.pair, self.mma_tiler[1], self.mma_tiler[2])
        epi_tile = sm100_helpers.compute_epilogue_tile_shape(cta_tile, self.config.two_cta, self.d_layout, self.d_dtype)
        d_smem = sm100_helpers.make_smem_layout_epi(self.d_dtype, self.d_layout, epi_tile, self.epi_stages)
        a_smem_one = cute.slice_(a_smem, (None, None, None, 0))
        b_smem_one = cute.slice_(b_smem, (None, None, None, 0))

        tma_a, tma_tensor_a = cute.nvgpu.make_tiled_tma_atom_A(
            sm100_helpers.cluster_shape_to_tma_atom_A(self.cluster_shape_mnk[:2], tiled_mma.thr_id),
            mA, a_smem_one, self.mma_tiler, tiled_mma, cluster_vmnk.shape,
        )
        tma_b, tma_tensor_b = cute.nvgpu.make_tiled_tma_atom_B(
            sm100_helpers.cluster_shape_to_tma_atom_B(self.cluster_shape_mnk[:2], tiled_mma.thr_id),
            mB, b_smem_one, self.mma_tiler, tiled_mma, cluster_vmnk.shape,
        )
        tma_d, tma_tensor_d = cpasync.make_tiled_tma_atom(
            cpasync.CopyBulkTensorTileS2GOp(), mD, cute.select(d_smem, mode=[0, 1]), epi_tile
        )
        # Bytes that land on the (leader's) full barrier per stage: both CTAs' halves.
        tx_bytes = (cute.size_in_bytes(self.ab_dtype, a_smem_one)
                    + cute.size_in_bytes(self.ab_dtype, b_smem_one)) * self.pair

        @cute.struct
        class SharedStorage:
            ring_barriers: cute.struct.MemRange[cutlass.Int64, 2 * self.num_stages]
            acc_barriers: cute.struct.MemRange[cutlass.Int64, 2 * self.acc_stages]
            tmem_dealloc_barrier: cutlass.Int64
            tmem_address: cutlass.Int32
            sA: self.swizzled_buffer(self.ab_dtype, a_smem)
            sB: self.swizzled_buffer(self.ab_dtype, b_smem)
            sD: self.swizzled_buffer(self.d_dtype, d_smem)

        self.shared_storage = SharedStorage
        # Recorded at trace time for the budget checks (compile.py, tests).
        self.smem_bytes = SharedStorage.size_in_bytes()
        self.tx_bytes = tx_bytes

        tiles_m = ceil_div(m, cta_tile[0])
        tiles_n = ceil_div(n, cta_tile[1])
        self.kernel(
            tiled_mma, cluster_vmnk, tma_a, tma_tensor_a, tma_b, tma_tensor_b, tma_d, tma_tensor_d,
            a_smem, b_smem, d_smem, epi_tile, tx_bytes,
            ceil_div(tiles_m, self.config.cluster_m),
            ceil_div(tiles_n, self.config.cluster_n),
            batches,
            ceil_div(k, self.mma_tiler[2]),
            bias,
            alpha,
        ).launch(
            grid=(self.config.cluster_m, self.config.cluster_n, num_clusters),
            block=(THREADS, 1, 1),
            cluster=self.cluster_shape_mnk,
            stream=stream,
        )

    # ------------------------------------------------------------------------------
    # Device side
    # ------------------------------------------------------------------------------

    @cute.kernel
    def kernel(
        self,
        tiled_mma: cute.TiledMma,
        cluster_vmnk: cute.Layout,
        tma_a: cute.CopyAtom,
        mA: cute.Tensor,
        tma_b: cute.CopyAtom,
        mB: cute.Tensor,
        tma_d: cute.CopyAtom,
        mD: cute.Tensor,
        a_smem: cute.ComposedLayout,
        b_smem: cute.ComposedLayout,
        d_smem: cute.ComposedLayout,
        epi_tile: cute.Tile,
        tx_bytes: cutlass.Constexpr,
        clusters_m: Int32,
        clusters_n: Int32,
        batches: Int32,
        k_blocks: Int32,
        bias: cute.Tensor,
        alpha: Float32,
    ):
        warp = cute.arch.make_warp_uniform(cute.arch.warp_idx())
        tidx, _, _ = cute.arch.thread_idx()
        if warp == PRODUCER_WARP:
            cpasync.prefetch_descriptor(tma_a)
            cpasync.prefetch_descriptor(tma_b)
            cpasync.prefetch_descriptor(tma_d)

        cm, cn = self.config.cluster_m, self.config.cluster_n
        cta_m, cta_n, cluster_id = cute.arch.block_idx()
        rank = cute.arch.make_warp_uniform(cute.arch.block_idx_in_cluster())
        coord_vmnk = cluster_vmnk.get_flat_coord(rank)
        # The even CTA of a 2-CTA pair issues its MMAs; alone, every CTA leads.
        is_leader = cta_m % self.pair == 0

        smem = cutlass.memory.SmemAllocator()
        storage = smem.allocate(self.shared_storage)
        ring = SmemRing(storage.ring_barriers.data_ptr(), self.num_stages, tx_bytes,
                        empty_arrivals(cm, cn, self.pair, 1))
        acc = AccRing(storage.acc_barriers.data_ptr(), self.acc_stages, len(EPILOGUE_WARPS) * self.pair)
        if warp == PRODUCER_WARP:
            ring.init()
            acc.init()
        tmem = cutlass.memory.TmemAllocator(
            storage.tmem_address.ptr,
            barrier_for_retrieve=cutlass.pipeline.NamedBarrier(
                barrier_id=TMEM_ALLOC_BARRIER_ID, num_threads=32 * (1 + len(EPILOGUE_WARPS))
            ),
            allocator_warp_id=EPILOGUE_WARPS[0],
            is_two_cta=self.config.two_cta,
            two_cta_tmem_dealloc_mbar_ptr=storage.tmem_dealloc_barrier.ptr,
        )
        publish_barrier_init(cm * cn)

        sA = storage.sA.get_tensor(a_smem.outer, swizzle=a_smem.inner)
        sB = storage.sB.get_tensor(b_smem.outer, swizzle=b_smem.inner)
        sD = storage.sD.get_tensor(d_smem.outer, swizzle=d_smem.inner)

        # Global tiles in MMA units: (mma_m, tile_k, mma tiles, k-blocks, batches) etc.
        gA = cute.local_tile(mA, cute.slice_(self.mma_tiler, (None, 0, None)), (None, None, None))
        gB = cute.local_tile(mB, cute.slice_(self.mma_tiler, (0, None, None)), (None, None, None))
        gD = cute.local_tile(mD, cute.slice_(self.mma_tiler, (None, None, 0)), (None, None, None))
        # The same tiles of D's coordinates: where each accumulator lands, for the bias.
        cD = cute.local_tile(cute.make_identity_tensor(mD.shape), cute.slice_(self.mma_tiler, (None, None, 0)),
                             (None, None, None))
        thr_mma = tiled_mma.get_slice(cta_m % self.pair)
        acc_shape = tiled_mma.partition_shape_C(self.mma_tiler[:2])
        acc_layout = tiled_mma.make_fragment_C(cute.append(acc_shape, self.acc_stages)).layout

        sched = (clusters_m, clusters_n, batches, cta_m, cta_n, cluster_id, cute.arch.grid_dim()[2])
        if warp == PRODUCER_WARP:
            self.producer(ring, thr_mma, cluster_vmnk, coord_vmnk, tma_a, gA, tma_b, gB, sA, sB,
                          sched, k_blocks, is_leader)
        elif warp == MMA_WARP:
            self.mma(ring, acc, tmem, tiled_mma, acc_layout, sA, sB, sched, k_blocks, is_leader, rank)
        else:
            self.epilogue(acc, tmem, thr_mma, acc_layout, gD, sD, tma_d, epi_tile, sched, tidx, warp, rank,
                          cD, mD.shape[0], mD.shape[1], bias, alpha)

    # -- producer (TMA warp) -----------------------------------------------------------

    @cute.jit
    def producer(self, ring: SmemRing, thr_mma, cluster_vmnk, coord_vmnk, tma_a, gA, tma_b, gB,
                 sA, sB, sched, k_blocks: Int32, is_leader):
        _, _, batches, _, _, cluster_id, num_clusters = sched
        clusters_m, clusters_n = sched[0], sched[1]
        a_mask = None
        b_mask = None
        if cutlass.const_expr(cute.size(cluster_vmnk) > 1):
            a_mask = cpasync.create_tma_multicast_mask(cluster_vmnk, coord_vmnk, mcast_mode=2)
            b_mask = cpasync.create_tma_multicast_mask(cluster_vmnk, coord_vmnk, mcast_mode=1)
        # Each CTA of a multicast group loads its share of the tile for all of them.
        tAsA, tAgA = cpasync.tma_partition(
            tma_a, coord_vmnk[2], cute.make_layout(cute.slice_(cluster_vmnk, (0, 0, None, 0)).shape),
            cute.group_modes(sA, 0, 3), cute.group_modes(thr_mma.partition_A(gA), 0, 3),
        )
        tBsB, tBgB = cpasync.tma_partition(
            tma_b, coord_vmnk[1], cute.make_layout(cute.slice_(cluster_vmnk, (0, None, 0, 0)).shape),
            cute.group_modes(sB, 0, 3), cute.group_modes(thr_mma.partition_B(gB), 0, 3),
        )

        # The ring position of the next k-block to load, across tiles.
        slot, parity = ring.producer_start()
        token = Boolean(False)
        if cutlass.const_expr(self.lookahead == cfg.Lookahead.BEFORE_COPY):
            token = ring.producer_try_acquire(slot, parity)
        work = cluster_id
        while work < clusters_m * clusters_n * batches:
            mma_m, tile_n, batch = self.tile_of(work, sched)

            def issue_copies(kb, slot, full):
                cute.copy(tma_a, tAgA[(None, mma_m, kb, batch)], tAsA[(None, slot)],
                          tma_bar_ptr=full, mcast_mask=a_mask)
                cute.copy(tma_b, tBgB[(None, tile_n, kb, batch)], tBsB[(None, slot)],
                          tma_bar_ptr=full, mcast_mask=b_mask)

            slot, parity, token = produce_k_blocks(
                ring, slot, parity, token, k_blocks, self.lookahead, is_leader, issue_copies
            )
            work += num_clusters
        ring.producer_tail(slot, parity)

    # -- MMA warp ----------------------------------------------------------------------

    @cute.jit
    def mma(self, ring: SmemRing, acc: AccRing, tmem, tiled_mma, acc_layout, sA, sB, sched,
            k_blocks: Int32, is_leader, rank):
        _, _, batches, cta_m, cta_n, cluster_id, num_clusters = sched
        clusters_m, clusters_n = sched[0], sched[1]
        cm, cn = self.config.cluster_m, self.config.cluster_n
        tmem.wait_for_alloc()
        tAcc_all = cute.make_tensor(tmem.retrieve_ptr(self.acc_dtype), acc_layout)
        tCrA = tiled_mma.make_fragment_A(sA)
        tCrB = tiled_mma.make_fragment_B(sB)
        k_atoms = cute.size(tCrA, mode=[2])
        # Where the commits land: slot releases go to every CTA that fed these MMAs;
        # "accumulator full" goes to both CTAs of the pair (each drains its own rows).
        slot_mask = None
        acc_mask = None
        if cutlass.const_expr(cm * cn > 1):
            slot_mask = release_mask(cta_m, cta_n, cm, cn, self.pair)
            if cutlass.const_expr(self.pair == 2):
                acc_mask = (1 << rank) | (1 << (rank ^ 1))
        peeks = self.lookahead != cfg.Lookahead.NONE

        # The ring position of the next k-block and the parity its full barrier
        # completes with, stepped along the k-loop across tiles (``SmemRing.next_slot``).
        slot, parity = ring.consumer_start()
        acc_count = Int32(0)  # tiles accumulated
        work = cluster_id
        while work < clusters_m * clusters_n * batches:
            if is_leader:
                peek = Boolean(False)
                if cutlass.const_expr(peeks):
                    peek = ring.consumer_try_wait_slot(slot, parity)
                acc.mma_acquire(acc_count)
                tAcc = tAcc_all[(None, None, None, acc.buffer(acc_count))]
                tiled_mma.set(tcgen05.Field.ACCUMULATE, False)
                for kb in cutlass.range(k_blocks, unroll=1):
                    ring.consumer_wait_slot(slot, parity, peek)
                    for ka in cutlass.range_constexpr(k_atoms):
                        coord = (None, None, ka, slot)
                        cute.gemm(tiled_mma, tAcc, tCrA[coord], tCrB[coord], tAcc)
                        tiled_mma.set(tcgen05.Field.ACCUMULATE, True)
                    ring.mma_release_slot(slot, slot_mask, self.cta_group)
                    slot, parity = ring.next_slot(slot, parity)
                    peek = Boolean(False)
                    if cutlass.const_expr(peeks):
                        if kb + 1 < k_blocks:
                            # Like the producer's look-ahead: probe the next slot while
                            # the MMAs just issued run.
                            peek = ring.consumer_try_wait_slot(slot, parity)
                acc.mma_commit(acc_count, acc_mask, self.cta_group)
            acc_count += 1
            work += num_clusters
        if is_leader:
            acc.mma_tail(acc_count)

    # -- epilogue warps ----------------------------------------------------------------

    @cute.jit
    def epilogue(self, acc: AccRing, tmem, thr_mma, acc_layout, gD, sD, tma_d, epi_tile, sched,
                 tidx: Int32, warp: Int32, rank, cD, extent_m: Int32, extent_n: Int32, bias: cute.Tensor,
                 alpha: Float32):
        _, _, batches, _, _, cluster_id, num_clusters = sched
        clusters_m, clusters_n = sched[0], sched[1]
        tmem.allocate(self.tmem_columns)
        # The CTA's one allocation: give the permit up at once, as CUTLASS does, before
        # the named barrier that lets the MMA warp start.
        tmem.relinquish_alloc_permit()
        tmem.wait_for_alloc()
        tmem_ptr = tmem.retrieve_ptr(self.acc_dtype)
        # ((atom_m, mma_m), (atom_n, mma_n), buffers): accumulators as an M x N tile.
        tAcc = _group_mma_modes(cute.make_tensor(tmem_ptr, acc_layout))
        tCgD = _group_mma_modes(thr_mma.partition_C(gD))

        # TMEM -> registers, one epilogue sub-tile at a time.
        t2r_atom = sm100_helpers.get_tmem_load_op(
            (self.mma_tiler[0] // self.pair, *self.mma_tiler[1:]), self.d_layout, self.d_dtype,
            self.acc_dtype, epi_tile, self.config.two_cta,
        )
        tAcc_epi = cute.flat_divide(tAcc, epi_tile)  # (EPI_M, EPI_N, epi_m, epi_n, buffers)
        t2r = tcgen05.make_tmem_copy(t2r_atom, tAcc_epi[(None, None, 0, 0, 0)])
        thr_t2r = t2r.get_slice(tidx)
        tTR_tAcc = thr_t2r.partition_S(tAcc_epi)
        tCgD_epi = cute.flat_divide(tCgD, epi_tile)
        tTR_gD = thr_t2r.partition_D(tCgD_epi)
        tTR_cD = thr_t2r.partition_D(cute.flat_divide(_group_mma_modes(thr_mma.partition_C(cD)), epi_tile))
        tTR_rAcc = cute.make_rmem_tensor(tTR_gD[(None, None, None, 0, 0, 0, 0, 0)].shape, self.acc_dtype)
        tTR_rD = cute.make_rmem_tensor(tTR_rAcc.shape, self.d_dtype)
        # Registers -> shared memory, in the layout the TMA store reads.
        r2s = cute.make_tiled_copy_D(
            sm100_helpers.get_smem_store_op(self.d_layout, self.d_dtype, self.acc_dtype, t2r), t2r
        )
        thr_r2s = r2s.get_slice(tidx)
        tRS_sD = thr_r2s.partition_D(sD)
        tRS_rD = r2s.retile(tTR_rD)
        tDsD, tDgD_all = cpasync.tma_partition(
            tma_d, 0, cute.make_layout(1), cute.group_modes(sD, 0, 2), cute.group_modes(tCgD_epi, 0, 2)
        )
        epi_barrier = cutlass.pipeline.NamedBarrier(
            barrier_id=EPILOGUE_BARRIER_ID, num_threads=32 * len(EPILOGUE_WARPS)
        )
        is_store_warp = warp == EPILOGUE_WARPS[0]
        leader_rank = rank // self.pair * self.pair
        subtiles = cute.size(tTR_tAcc, mode=[3]) * cute.size(tTR_tAcc, mode=[4])

        acc_count = Int32(0)
        epi_count = Int32(0)  # sub-tiles stored, rotates the sD buffers
        work = cluster_id
        while work < clusters_m * clusters_n * batches:
            mma_m, tile_n, batch = self.tile_of(work, sched)
            acc.epilogue_wait(acc_count)
            tTR_tile = cute.group_modes(tTR_tAcc[(None, None, None, None, None, acc.buffer(acc_count))], 3, 5)
            tDgD = cute.group_modes(tDgD_all[(None, None, None, mma_m, tile_n, batch)], 1, 3)
            tTR_cD_tile = cute.group_modes(tTR_cD[(None, None, None, None, None, mma_m, tile_n, batch)], 3, 5)
            for e in cutlass.range_constexpr(subtiles):
                cute.copy(t2r, tTR_tile[(None, None, None, e)], tTR_rAcc)
                if cutlass.const_expr(self.spec.epilogue.fused):
                    fuse_epilogue(tTR_rAcc, tTR_cD_tile[(None, None, None, e)], bias[(batch, None)], alpha,
                                  extent_n if self.spec.epilogue.bias == "n" else extent_m, self.spec.epilogue,
                                  True)
                tRS_rD.store(r2s.retile(tTR_rAcc).load().to(self.d_dtype))
                buf = epi_count % self.epi_stages
                cute.copy(r2s, tRS_rD, tRS_sD[(None, None, None, buf)])
                if cutlass.const_expr(e == subtiles - 1):
                    # The tile's last sub-tile is in shared memory: its tcgen05.ld
                    # completed long since (the release still waits for it), and the
                    # buffer can take the next tile's MMAs while the sub-tile is stored.
                    acc.epilogue_release(acc_count, leader_rank, self.config.cluster_size > 1)
                tma_store_subtile(tma_d, tDsD[(None, buf)], tDgD[(None, e)], epi_barrier, is_store_warp,
                                  self.epi_stages)
                epi_count += 1
            acc_count += 1
            work += num_clusters
        if is_store_warp:
            cute.arch.cp_async_bulk_wait_group(0, read=True)
        epi_barrier.arrive_and_wait()  # every warp finished reading TMEM before it is freed
        # The address again from shared memory, not kept in a register across the tile
        # loop: there it sat in the way of the 32 consecutive registers of each
        # tcgen05.ld, and ptxas spilled it to local memory in some configurations.
        tmem.free(tmem.retrieve_ptr(self.acc_dtype))


def _group_mma_modes(t: cute.Tensor) -> cute.Tensor:
    """((atom_m, atom_n), mma_m, mma_n, rest...) -> ((atom_m, mma_m), (atom_n, mma_n), rest...):
    view an MMA-partitioned accumulator as a plain M x N tile."""
    layout = t.layout
    shape, stride = layout.shape, layout.stride
    new_shape = ((shape[0][0], shape[1]), (shape[0][1], shape[2]), *shape[3:])
    new_stride = ((stride[0][0], stride[1]), (stride[0][1], stride[2]), *stride[3:])
    return cute.make_tensor(t.iterator, cute.make_layout(new_shape, stride=new_stride))
