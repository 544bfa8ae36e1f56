"""Hopper (SM90) persistent, warp-specialized GEMM: D = A @ B with wgmma.

Warp roles of a CTA (``1 + consumer_warpgroups`` warpgroups of 128 threads):

* **producer** (warpgroup 0, warp 0): walks the tile sequence and, for each k-block,
  acquires a slot of the shared-memory ring and issues the TMA copies of A and B into
  it (multicast across the cluster). It probes the *next* slot's empty barrier
  before issuing the current copies (``Lookahead.BEFORE_COPY``, CUTLASS's order).
  The warpgroup gives registers back to the consumers with ``setmaxnreg``.
* **consumer** (warpgroups 1..): wait for a slot's bytes, issue wgmma on it
  (fp32 accumulators in registers, 64 rows per warpgroup and wgmma; 128 with
  two wgmmas stacked in a 256-row tile), release the slot once the
  wgmma that read it retired, and after the last k-block run the **epilogue**:
  convert, store to shared memory (stmatrix), TMA-store to D.

  By default the consumer warpgroups are *cooperative*: each tile is theirs together,
  an equal share of its rows each, and the tensor cores idle while they run its
  epilogue. With ``config.pingpong`` each of the two owns whole tiles, every other
  work item of the CTA: one warpgroup's epilogue overlaps the other's mainloop.
  Their mainloops take turns through two named barriers, and not only for the tensor
  cores: both read one ring whose full barriers a parity wait can only tell apart
  one phase at a time, so a warpgroup must not wait on a slot before the other has
  passed its own waits on the k-blocks before it (docs/architecture.md).

With ``config.dependent_launch`` the kernel is a programmatic dependent launch:
``griddepcontrol.wait`` before any global-memory access, and the producer lets the
next kernel launch once it has issued its last load (docs/architecture.md). With
``config.read_before_wait`` as well, the producer loads the first stages of the operand
the caller promised no earlier kernel writes before its wait.

Pipelines: ``SmemRing`` (TMA -> wgmma, full/empty mbarriers) and the epilogue's
bulk-store groups (``cp.async.bulk.wait_group.read`` guards smem reuse).
Scheduling: :mod:`.common.scheduler`, identical in both roles. With
``config.split_k > 1`` the tiles of the last, partial wave are split, and with
``config.stream_k`` their k-blocks are dealt out evenly over the clusters: a work
piece is then one K range of a tile, and the consumers of a piece that does not
finish its tile publish fp32 partial sums instead of running the epilogue
(:mod:`.common.split_k`, :mod:`.common.stream_k`), which changes no barrier of the
pipeline.
"""

from __future__ import annotations

import enum

import cuda.bindings.driver as cuda_driver
import cutlass
import cutlass.cute as cute
import cutlass.pipeline
import cutlass.memory
import cutlass.utils.hopper_helpers as sm90_helpers
from cutlass import Boolean, Float32, Int32

from .. import config as cfg
from ..grid import ceil_div
from .. import hardware
from .common import scheduler, split_k, stages
from .common.base import GemmKernelBase
from .common.epilogue import fuse_epilogue, stage_bias, tma_store_subtile
from .common.pipeline import SmemRing, produce_k_blocks, publish_barrier_init
from .common.stages import empty_arrivals, release_mask
from .common.views import gemm_views

# Named barrier 0 is __syncthreads; the consumers' epilogue rendezvous uses 1 (with
# ping-pong consumers, 1 and 2: one per warpgroup).
EPILOGUE_BARRIER_ID = 1
# Ping-pong consumers hand the tensor cores to each other through 3 and 4: warpgroup
# w waits on ``MAINLOOP_TURN_BARRIER_ID + w`` for its turn.
MAINLOOP_TURN_BARRIER_ID = 3


class TracePoint(enum.IntEnum):
    """Moments of a CTA's life that :meth:`Sm90Gemm.trace_point` marks."""

    ENTRY = 0  # first instruction, every thread
    BARRIERS_READY = 1  # ring barriers initialised and published cluster-wide, every thread
    K_BLOCK_READY = 2  # a consumer thread saw a k-block's bytes land (full barrier passed)
    MAINLOOP_DONE = 3  # a consumer thread's last wgmma of a tile retired
    TILE_STORED = 4  # a consumer thread issued a tile's last TMA store
    EXIT = 5  # a consumer thread is done (the store warp waited for its stores' reads)
    CONTRIBUTORS_ARRIVED = 6  # a finisher (split-K, stream-K) saw its tile's flag count every contributor
    PARTIALS_ADDED = 7  # ... and added their partial sums to its accumulators


class Sm90Gemm(GemmKernelBase):
    """Builds the SM90 kernel for one :class:`wsgemm.config.KernelSpec`."""

    arch = "sm90"

    def __init__(self, spec: cfg.KernelSpec):
        super().__init__(spec)
        c = self.config
        self.tile_mnk = (c.tile_m, c.tile_n, c.tile_k)
        self.epi_tile = cfg.epilogue_tile(spec)
        self.consumer_wgs = cfg.consumer_warpgroups(c)
        self.tile_wgs = cfg.tile_warpgroups(c)  # consumer warpgroups sharing one tile
        self.mma_batches_in_flight = cfg.wgmma_batches_in_flight(self.tile_wgs)
        self.pingpong = c.pingpong
        self.consumer_threads = self.consumer_wgs * hardware.THREADS_PER_WARPGROUP
        self.threads = (1 + self.consumer_wgs) * hardware.THREADS_PER_WARPGROUP
        regs = cfg.sm90_register_budget(c)
        self.producer_regs = regs.producer_registers
        self.consumer_regs = regs.consumer_registers

    # ------------------------------------------------------------------------------
    # Host side: tensors, TMA descriptors, shared-memory plan, launch
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
        # Without split-K or stream-K there is no workspace, and without a fused
        # epilogue no bias: D stands in for them, unused.
        self.launch(mA_torch, mB_torch, mD_torch, mD_torch, mD_torch, mD_torch, Float32(1.0), num_clusters,
                    stream)

    @cute.jit
    def call_with_workspace(
        self,
        mA_torch: cute.Tensor,
        mB_torch: cute.Tensor,
        mD_torch: cute.Tensor,
        flags: cute.Tensor,
        partials: cute.Tensor,
        num_clusters: Int32,
        stream: cuda_driver.CUstream,
    ):
        """Host side of a split-K or stream-K kernel: also takes the workspace (int32
        arrival flags, fp32 partial sums; sizes from ``TileGrid.workspace_elems``)."""
        self.launch(mA_torch, mB_torch, mD_torch, flags, partials, mD_torch, Float32(1.0), num_clusters, stream)

    @cute.jit
    def launch(self, mA_torch, mB_torch, mD_torch, flags, partials, bias, alpha: Float32, num_clusters: Int32,
               stream: cuda_driver.CUstream):
        mA, mB, mD = gemm_views(mA_torch, mB_torch, mD_torch, self.spec.batched)
        m, k, batches = mA.shape
        n = mB.shape[0]

        tiled_mma = sm90_helpers.make_trivial_tiled_mma(
            self.ab_dtype,
            self.ab_dtype,
            self.a_layout.sm90_mma_major_mode(),
            self.b_layout.sm90_mma_major_mode(),
            self.acc_dtype,
            (self.tile_wgs, 1, 1),  # 64 rows per warpgroup, repeated down a ping-pong or 256-row tile
            tiler_mn=(64, self.tile_mnk[1]),
        )
        a_smem = sm90_helpers.make_smem_layout_a(
            self.a_layout, self.tile_mnk, self.ab_dtype, self.num_stages
        )
        b_smem = sm90_helpers.make_smem_layout_b(
            self.b_layout, self.tile_mnk, self.ab_dtype, self.num_stages
        )
        d_smem = sm90_helpers.make_smem_layout_epi(
            self.d_dtype, self.d_layout, self.epi_tile, self.epi_stages * cfg.epilogue_buffer_sets(self.config)
        )
        a_smem_one = cute.slice_(a_smem, (None, None, 0))
        b_smem_one = cute.slice_(b_smem, (None, None, 0))
        d_smem_one = cute.slice_(d_smem, (None, None, 0))

        cp = cute.nvgpu.cpasync
        # A is shared by the CTAs of a cluster row (same m): multicast across cluster_n.
        tma_a, tma_tensor_a = cp.make_tiled_tma_atom(
            cp.CopyBulkTensorTileG2SMulticastOp() if self.config.cluster_n > 1 else cp.CopyBulkTensorTileG2SOp(),
            mA,
            a_smem_one,
            (self.tile_mnk[0], self.tile_mnk[2]),
            num_multicast=self.config.cluster_n,
        )
        # B is shared by the CTAs of a cluster column (same n): multicast across cluster_m.
        tma_b, tma_tensor_b = cp.make_tiled_tma_atom(
            cp.CopyBulkTensorTileG2SMulticastOp() if self.config.cluster_m > 1 else cp.CopyBulkTensorTileG2SOp(),
            mB,
            b_smem_one,
            (self.tile_mnk[1], self.tile_mnk[2]),
            num_multicast=self.config.cluster_m,
        )
        tma_d, tma_tensor_d = cp.make_tiled_tma_atom(
            cp.CopyBulkTensorTileS2GOp(), mD, d_smem_one, self.epi_tile
        )

        ab_stage_bytes = cute.size_in_bytes(self.ab_dtype, a_smem_one) + cute.size_in_bytes(
            self.ab_dtype, b_smem_one
        )

        fields = {
            "ring_barriers": cute.struct.MemRange[cutlass.Int64, 2 * self.num_stages],
            "sA": self.swizzled_buffer(self.ab_dtype, a_smem),
            "sB": self.swizzled_buffer(self.ab_dtype, b_smem),
            "sD": self.swizzled_buffer(self.d_dtype, d_smem),
        }
        if cutlass.const_expr(cfg.bias_tile_elems(self.spec) > 0):
            # The fused epilogue's bias: one tile's stretch per set of epilogue buffers.
            fields["sBias"] = self.bias_buffer(cfg.bias_tile_elems(self.spec))
        SharedStorage = self.shared_storage(fields)
        self.shared_storage = SharedStorage
        # Recorded at trace time for the budget checks (compile.py, tests).
        self.smem_bytes = SharedStorage.size_in_bytes()
        self.tx_bytes = ab_stage_bytes
        self.a_stage_bytes = cute.size_in_bytes(self.ab_dtype, a_smem_one)
        self.b_stage_bytes = cute.size_in_bytes(self.ab_dtype, b_smem_one)

        tiles_m = ceil_div(m, self.tile_mnk[0])
        tiles_n = ceil_div(n, self.tile_mnk[1])
        clusters_m = ceil_div(tiles_m, self.config.cluster_m)
        clusters_n = ceil_div(tiles_n, self.config.cluster_n)
        k_blocks = ceil_div(k, self.tile_mnk[2])

        self.kernel(
            tiled_mma,
            tma_a,
            tma_tensor_a,
            tma_b,
            tma_tensor_b,
            tma_d,
            tma_tensor_d,
            a_smem,
            b_smem,
            d_smem,
            ab_stage_bytes,
            clusters_m,
            clusters_n,
            batches,
            k_blocks,
            flags,
            partials,
            bias,
            alpha,
        ).launch(
            grid=(self.config.cluster_m, self.config.cluster_n, num_clusters),
            block=(self.threads, 1, 1),
            cluster=self.cluster_shape_mnk,
            min_blocks_per_mp=1,  # a register cap at entry, so setmaxnreg takes effect
            stream=stream,
            use_pdl=self.config.dependent_launch,
        )

    # ------------------------------------------------------------------------------
    # Device side
    # ------------------------------------------------------------------------------

    @cute.kernel
    def kernel(
        self,
        tiled_mma: cute.TiledMma,
        tma_a: cute.CopyAtom,
        mA: cute.Tensor,
        tma_b: cute.CopyAtom,
        mB: cute.Tensor,
        tma_d: cute.CopyAtom,
        mD: cute.Tensor,
        a_smem: cute.ComposedLayout,
        b_smem: cute.ComposedLayout,
        d_smem: cute.ComposedLayout,
        ab_stage_bytes: cutlass.Constexpr,
        clusters_m: Int32,
        clusters_n: Int32,
        batches: Int32,
        k_blocks: Int32,
        flags: cute.Tensor,
        partials: cute.Tensor,
        bias: cute.Tensor,
        alpha: Float32,
    ):
        self.trace_point(TracePoint.ENTRY, flags)
        warp = cute.arch.make_warp_uniform(cute.arch.warp_idx())
        tidx, _, _ = cute.arch.thread_idx()
        warpgroup = warp // hardware.WARPS_PER_WARPGROUP

        if warp == 0:
            cp = cute.nvgpu.cpasync
            cp.prefetch_descriptor(tma_a)
            cp.prefetch_descriptor(tma_b)
            cp.prefetch_descriptor(tma_d)

        smem = cutlass.memory.SmemAllocator()
        storage = smem.allocate(self.shared_storage)
        cm, cn = self.config.cluster_m, self.config.cluster_n
        ring = SmemRing(
            storage.ring_barriers.data_ptr(),
            self.num_stages,
            ab_stage_bytes,
            empty_arrivals(cm, cn, 1, self.tile_wgs * hardware.WARPS_PER_WARPGROUP),
        )
        if warp == 0:
            ring.init()
        # Barrier initialisation must be visible cluster-wide before any peer arrives
        # on these barriers or multicasts into this CTA.
        publish_barrier_init(cm * cn)
        self.trace_point(TracePoint.BARRIERS_READY, flags)

        sA = storage.sA.get_tensor(a_smem.outer, swizzle=a_smem.inner)
        sB = storage.sB.get_tensor(b_smem.outer, swizzle=b_smem.inner)
        sD = storage.sD.get_tensor(d_smem.outer, swizzle=d_smem.inner)
        sBias = sD  # stands in where the epilogue adds no bias
        if cutlass.const_expr(cfg.bias_tile_elems(self.spec) > 0):
            sBias = storage.sBias.get_tensor(cute.make_layout(cfg.bias_tile_elems(self.spec)))

        # Where this CTA sits in its cluster, and which output tile each work item is.
        cta_m, cta_n, cluster_id = cute.arch.block_idx()
        num_clusters = cute.arch.grid_dim()[2]
        sched = (clusters_m, clusters_n, batches, cta_m, cta_n, cluster_id, num_clusters)
        # The producer loads and the consumers store each tile at the same origin.
        edges = self.tile_edges(mD.shape[0], mD.shape[1], clusters_m * clusters_n * batches, num_clusters)

        if warpgroup == 0:
            cute.arch.setmaxregister_decrease(self.producer_regs)
            if warp == 0:
                self.producer(ring, tma_a, mA, tma_b, mB, sA, sB, sched, edges, k_blocks)
        else:
            cute.arch.setmaxregister_increase(self.consumer_regs)
            self.consumer(
                ring, tiled_mma, sA, sB, sD, tma_d, mD, sched, edges, k_blocks, tidx, warp, flags, partials,
                bias, sBias, alpha,
            )

    # -- producer (TMA warp) -----------------------------------------------------------

    @cute.jit
    def producer(self, ring: SmemRing, tma_a, mA, tma_b, mB, sA, sB, sched, edges, k_blocks: Int32):
        clusters_m, clusters_n, batches, cta_m, cta_n, cluster_id, num_clusters = sched
        tiles_m, tiles_n, overhang_m, overhang_n = edges
        cm, cn = self.config.cluster_m, self.config.cluster_n
        cluster_layout = cute.make_layout(self.cluster_shape_mnk)
        my_coord = (cta_m, cta_n, 0)
        a_mask = cute.make_layout_image_mask(cluster_layout, my_coord, mode=1) if cn > 1 else 0
        b_mask = cute.make_layout_image_mask(cluster_layout, my_coord, mode=0) if cm > 1 else 0

        # The smem side of each box; the gmem side is built per tile, at its origin.
        tAsA, _ = self.operand_boxes(tma_a, mA, sA, self.tile_mnk[0], cta_n, cn, 0)
        tBsB, _ = self.operand_boxes(tma_b, mB, sB, self.tile_mnk[1], cta_m, cm, 0)

        # A cluster pads the tile grid to whole clusters: with an odd number of tile
        # rows in 2x1 clusters, a CTA of each last-row cluster has an A box that is all
        # padding. TMA zero-fills such a box slowly, and the CTA's partner waits for it
        # through the B tile they share (on an H200, one half-empty cluster row made
        # 384x4096x8192 slower than four full ones at the same work; docs/tuning-log/
        # packaged-table.md). The box is skipped and not announced; the consumers' products of
        # whatever the slot held land in rows past M, which the epilogue never stores.
        # B tiles past N likewise where clusters pad along N (``operand_loads_of_tile``).

        # The ring position of the next k-block to load, across tiles.
        slot, parity = ring.producer_start()
        early = self.config.read_before_wait  # "", or the operand the previous kernel does not write
        token = Boolean(False)
        if cutlass.const_expr(self.lookahead == cfg.Lookahead.BEFORE_COPY and not early):
            # (An early read fills the first stages itself and probes the slot after them.)
            token = ring.producer_try_acquire(slot, parity)

        splits, stream = self.config.split_k, self.config.stream_k
        units = clusters_m * clusters_n * batches
        steps = scheduler.steps_of_cluster(cluster_id, units, num_clusters, k_blocks, splits, stream)
        step = Int32(0)
        if cutlass.const_expr(self.config.dependent_launch and not early):
            # Launched while the previous kernel may still be writing: no global
            # memory access before it has finished and flushed. (With an early read the
            # wait comes among the first piece's loads, load_first_stages_around_wait.)
            cute.arch.griddepcontrol_wait()
        while step < steps:
            unit, kb_first, kb_count, _, _, _, _ = scheduler.piece_of_step(
                step, cluster_id, units, num_clusters, k_blocks, splits, stream)
            tile_m, tile_n, batch = self.tile_of(unit, sched)
            # Offsets are 0 except for a moved last tile row or column (0 everywhere
            # where tiles never move, which the compiler folds away).
            _, a_boxes = self.operand_boxes(tma_a, mA, sA, self.tile_mnk[0], cta_n, cn,
                                            scheduler.edge_tile_offset(tile_m, tiles_m, overhang_m))
            _, b_boxes = self.operand_boxes(tma_b, mB, sB, self.tile_mnk[1], cta_m, cm,
                                            scheduler.edge_tile_offset(tile_n, tiles_n, overhang_n))
            loads_a, loads_b, tx_bytes = self.operand_loads_of_tile(ring, tile_m, tile_n, tiles_m, tiles_n)

            def issue_a(kb, slot, full):
                if loads_a:
                    cute.copy(tma_a, a_boxes[(None, tile_m, kb, batch)], tAsA[(None, slot)],
                              tma_bar_ptr=full, mcast_mask=a_mask)

            def issue_b(kb, slot, full):
                if loads_b:
                    cute.copy(tma_b, b_boxes[(None, tile_n, kb, batch)], tBsB[(None, slot)],
                              tma_bar_ptr=full, mcast_mask=b_mask)

            # k-blocks of this piece already loaded (the first ones, under an early read).
            kb_loaded = Int32(0)
            if cutlass.const_expr(early):
                if step == 0:
                    slot, parity, token, kb_loaded = self.load_first_stages_around_wait(
                        ring, slot, parity, kb_first, kb_count, tx_bytes,
                        issue_a if early == "a" else issue_b, issue_b if early == "a" else issue_a)

            def issue_copies(kb, slot, full):
                issue_a(kb_first + kb_loaded + kb, slot, full)
                issue_b(kb_first + kb_loaded + kb, slot, full)

            slot, parity, token = produce_k_blocks(
                ring, slot, parity, token, kb_count - kb_loaded, self.lookahead, Boolean(True), issue_copies,
                tx_bytes
            )
            step += 1
        if cutlass.const_expr(self.config.dependent_launch):
            # This CTA reads no more operands: the next kernel on the stream may launch
            # (onto SMs this grid leaves) once every CTA has said so.
            cute.arch.griddepcontrol_launch_dependents()
        ring.producer_tail(slot, parity)

    @cute.jit
    def load_first_stages_around_wait(self, ring: SmemRing, slot, parity, kb_first, kb_count, tx_bytes,
                                      issue_early: cutlass.Constexpr, issue_late: cutlass.Constexpr):
        """The producer's first k-blocks under ``config.read_before_wait``, from the
        ring's start (``slot, parity``: slot 0 of the first lap): returns the ring
        position after them, the look-ahead token and how many there were.

        The operand the previous kernel does not write (a weight, at inference) goes
        into the first stages of the still-empty ring before ``griddepcontrol.wait``,
        while that kernel finishes; the other operand's boxes follow the wait into the
        same slots. One ``expect_tx`` per slot announces both, so the consumers see no
        difference. It takes a trip to HBM off the critical path of a kernel launched
        while its predecessor runs. Not every stage: where the wait is short (no
        predecessor left running) the other operand's first box queues behind them
        (``cfg.READ_BEFORE_WAIT_BYTES``)."""
        count = cutlass.min(kb_count, cfg.stages_read_before_wait(self.spec))
        # Slots of the ring's first lap are empty: acquiring them never waits, and
        # k-block kb of the piece goes into slot kb.
        for kb in cutlass.range(count, unroll=1):
            ring.producer_acquire(kb, parity, Boolean(True), Boolean(True), tx_bytes)
            issue_early(kb_first + kb, kb, ring.full_base + kb)
        cute.arch.griddepcontrol_wait()
        for kb in cutlass.range(count, unroll=1):
            issue_late(kb_first + kb, kb, ring.full_base + kb)
            slot, parity = ring.next_slot(slot, parity)
        token = Boolean(False)
        if cutlass.const_expr(self.lookahead == cfg.Lookahead.BEFORE_COPY):
            token = ring.producer_try_acquire(slot, parity)
        return slot, parity, token, count

    @cute.jit
    def operand_loads_of_tile(self, ring: SmemRing, tile_m, tile_n, tiles_m, tiles_n):
        """(loads A, loads B, bytes each stage announces) for a tile: a padding tile
        of a cluster skips the operand box that lies wholly past the edge (see the
        producer). ``None`` bytes: every stage's full count, without clusters, where
        no tile is padding."""
        loads_a = Boolean(True)
        loads_b = Boolean(True)
        tx_bytes = None
        if cutlass.const_expr(self.config.cluster_m > 1 or self.config.cluster_n > 1):
            # Every CTA of a multicast group has the same tile of the operand it
            # shares, so all of them skip it or none.
            loads_a = tile_m < tiles_m
            loads_b = tile_n < tiles_n
            tx_bytes = Int32(ring.tx_bytes)
            if not loads_a:
                tx_bytes -= self.a_stage_bytes
            if not loads_b:
                tx_bytes -= self.b_stage_bytes
        return loads_a, loads_b, tx_bytes

    @cute.jit
    def operand_boxes(self, tma, mX, sX, rows: int, rank, group: int, row_offset):
        """(smem, gmem) TMA views of operand X ((rows, K, batches) tensor ``mX``): for every
        stage and every (tile, k-block, batch), the box this CTA loads, its share of the
        tile when ``group`` CTAs multicast it. ``row_offset`` moves the tiles' origin
        (see ``scheduler.edge_tile_offset``)."""
        gX = cute.local_tile(cute.domain_offset((row_offset, 0, 0), mX), (rows, self.tile_mnk[2]),
                             (None, None, None))
        return cute.nvgpu.cpasync.tma_partition(
            tma, rank, cute.make_layout(group), cute.group_modes(sX, 0, 2), cute.group_modes(gX, 0, 2)
        )

    @property
    def moves_edge_tiles(self) -> bool:
        """The last tile row and column may move back to end at the edge instead of
        reading past it (``scheduler.edge_tile_offset``). Not with stream-K: a moved
        tile and its neighbour would sum their shared rows over different k-ranges,
        in different orders, and whichever stored last would decide their low bits.
        With split-K, only where that cannot happen (``tile_edges``)."""
        return not self.config.stream_k

    def tile_edges(self, m, n, units, num_clusters):
        """``(tiles_m, tiles_n, overhang_m, overhang_n)`` of an ``m`` x ``n`` output:
        its tile rows and columns, and how far the last row and column move back
        (``scheduler.edge_tile_overhang``): along M in whole 16-byte groups where A or
        D is M-major, along N where B or D is N-major. With split-K, only when every
        unit is split alike, so that all tiles sum the same k-ranges in the same order:
        all of them (fewer units than clusters: one wave) or none (whole waves); a
        launch that splits only its last wave keeps its tiles in place."""
        tiles_m = ceil_div(m, self.tile_mnk[0])
        tiles_n = ceil_div(n, self.tile_mnk[1])
        if not self.moves_edge_tiles:
            return tiles_m, tiles_n, 0, 0
        spec = self.spec
        elems = hardware.TMA_ALIGNMENT_BYTES // min(cfg.DTYPE_BYTES[spec.ab_dtype], cfg.DTYPE_BYTES[spec.out_dtype])
        granule_m = elems if "m" in (spec.a_major, spec.d_major) else 1
        granule_n = elems if "n" in (spec.b_major, spec.d_major) else 1
        overhang_m = scheduler.edge_tile_overhang(tiles_m, m, self.tile_mnk[0], granule_m)
        overhang_n = scheduler.edge_tile_overhang(tiles_n, n, self.tile_mnk[1], granule_n)
        if cutlass.const_expr(self.config.split_k > 1):
            every_unit_split = cutlass.min(cutlass.max(num_clusters - units, 0), 1)
            none_split = 1 - cutlass.min(units % num_clusters, 1)
            alike = cutlass.min(every_unit_split + none_split, 1)
            overhang_m, overhang_n = overhang_m * alike, overhang_n * alike
        return tiles_m, tiles_n, overhang_m, overhang_n

    # -- consumers (wgmma warpgroups) + epilogue -----------------------------------------

    @cute.jit
    def consumer(self, ring: SmemRing, tiled_mma, sA, sB, sD, tma_d, mD, sched, edges, k_blocks: Int32,
                 tidx: Int32, warp: Int32, flags: cute.Tensor, partials: cute.Tensor, bias: cute.Tensor,
                 sBias: cute.Tensor, alpha: Float32):
        clusters_m, clusters_n, batches, cta_m, cta_n, cluster_id, num_clusters = sched
        tiles_m, tiles_n, overhang_m, overhang_n = edges
        cm, cn = self.config.cluster_m, self.config.cluster_n
        consumer_tidx = tidx - hardware.THREADS_PER_WARPGROUP
        # From the warp index, which the kernel made warp-uniform: the ring position and
        # slot arithmetic derived from it then stays in uniform registers, where wgmma
        # reads its shared-memory descriptors (from the thread index, every descriptor
        # took four R2UR moves; docs/tuning-log/pingpong.md).
        consumer_wg = warp // hardware.WARPS_PER_WARPGROUP - 1
        if cutlass.const_expr(self.config.dependent_launch):
            # The consumers' first global access (D, the split-K workspace) follows a
            # k-block the producer loaded after its own wait; waiting here as well
            # keeps that true for a work item with no k-blocks.
            cute.arch.griddepcontrol_wait()

        # Lane i of each consumer warp releases the slot of cluster CTA i, if that CTA
        # multicasts into this one.
        mask = release_mask(cta_m, cta_n, cm, cn)
        lane = cute.arch.lane_idx()
        lane_signals = lane < cm * cn and ((mask >> lane) & 1) == 1

        # The threads that share a tile: every consumer thread, or with ping-pong
        # consumers those of this warpgroup, which runs every other work item.
        tile_threads = self.tile_wgs * hardware.THREADS_PER_WARPGROUP
        tile_tidx = consumer_tidx
        wg_slice = consumer_wg * hardware.THREADS_PER_WARPGROUP
        if cutlass.const_expr(self.pingpong):
            tile_tidx = consumer_tidx % tile_threads
            wg_slice = 0
        thr_mma = tiled_mma.get_slice(wg_slice)
        tCsA = thr_mma.partition_A(sA)
        tCsB = thr_mma.partition_B(sB)
        tCrA = tiled_mma.make_fragment_A(tCsA)
        tCrB = tiled_mma.make_fragment_B(tCsB)
        gD = cute.local_tile(mD, (self.tile_mnk[0], self.tile_mnk[1]), (None, None, None))
        tCgD = thr_mma.partition_C(gD)
        acc = cute.make_rmem_tensor(tCgD.shape[:3], self.acc_dtype)
        k_atoms = cute.size(tCrA, mode=[2])

        # Epilogue plumbing that does not depend on the tile: registers -> smem copy.
        r2s_atom = sm90_helpers.get_smem_store_op(self.d_layout, self.d_dtype, self.acc_dtype)
        stmatrix = cute.make_copy_atom(
            cute.nvgpu.warp.StMatrix8x8x16bOp(self.d_layout.is_m_major_c(), 4), self.d_dtype
        )
        r2s = cute.make_tiled_copy_S(r2s_atom, cute.make_tiled_copy_C_atom(stmatrix, tiled_mma))
        thr_r2s = r2s.get_slice(tile_tidx)
        tRS_sD = thr_r2s.partition_D(sD)
        tRS_acc = r2s.retile(acc)
        frag_shape = cute.shape(thr_r2s.partition_S(sD))[:3]
        tRS_rAcc = cute.make_rmem_tensor(frag_shape, self.acc_dtype)
        tRS_rD = cute.make_rmem_tensor(frag_shape, self.d_dtype)
        frag_size = cute.size(tRS_rAcc)
        epi_barrier = cutlass.pipeline.NamedBarrier(barrier_id=EPILOGUE_BARRIER_ID, num_threads=tile_threads)
        is_store_warp = warp == hardware.WARPS_PER_WARPGROUP  # first consumer warp
        first_buffer = 0  # of this warpgroup's set of epilogue buffers
        step = Int32(0)
        step_stride = 1
        if cutlass.const_expr(self.pingpong):
            # Warpgroup ``turn`` runs work items turn, turn + 2, ... with its own
            # epilogue buffers, barrier and store warp, so neither epilogue waits for
            # the other's; the two mainloops take turns through a pair of barriers.
            turn = consumer_wg
            epi_barrier = cutlass.pipeline.NamedBarrier(barrier_id=EPILOGUE_BARRIER_ID + turn,
                                                        num_threads=tile_threads)
            is_store_warp = warp % hardware.WARPS_PER_WARPGROUP == 0
            first_buffer = turn * self.epi_stages
            step = turn
            step_stride = 2
            both = 2 * hardware.THREADS_PER_WARPGROUP
            my_turn = cutlass.pipeline.NamedBarrier(barrier_id=MAINLOOP_TURN_BARRIER_ID + turn, num_threads=both)
            their_turn = cutlass.pipeline.NamedBarrier(barrier_id=MAINLOOP_TURN_BARRIER_ID + 1 - turn,
                                                       num_threads=both)

        read = Int32(0)  # k-blocks consumed so far, across tiles
        epi_count = Int32(0)  # epilogue sub-tiles stored so far, rotates sD buffers
        splits, stream = self.config.split_k, self.config.stream_k
        units = clusters_m * clusters_n * batches
        steps = scheduler.steps_of_cluster(cluster_id, units, num_clusters, k_blocks, splits, stream)
        cta_rank = cta_m * cn + cta_n  # the workspace interleaves a cluster's CTAs
        while step < steps:
            unit, _, kb_count, publish_slot, waits, first_slot, flag = scheduler.piece_of_step(
                step, cluster_id, units, num_clusters, k_blocks, splits, stream)
            tile_m, tile_n, batch = self.tile_of(unit, sched)
            if cutlass.const_expr(self.config.has_workspace):
                if kb_count == 0:  # a piece with no k-blocks contributes zeros
                    acc.fill(0.0)
            if cutlass.const_expr(self.pingpong):
                # Whole tiles, in the producer's order: the other warpgroup's tiles'
                # k-blocks sit between this one's in the ring.
                read = step * k_blocks
                if step > 0:
                    # Not before the other warpgroup has passed its last full barrier:
                    # every slot's full barrier has then completed the phase before the
                    # one this warpgroup waits for, and a parity wait can only tell a
                    # phase from the one before it.
                    my_turn.arrive_and_wait()
            # The tile's first wgmma overwrites the accumulators (scale-d = 0) instead of
            # adding to zeros: no 2-register clears per tile on the path to the tensor cores.
            tiled_mma.set(cute.nvgpu.warpgroup.Field.ACCUMULATE, False)
            # Alone on its tile, a warpgroup keeps one wgmma batch in flight: it waits
            # for the previous k-block's wgmmas (not this one's) and releases the
            # previous slot. Two warpgroups sharing a tile each wait for all of theirs
            # and release this k-block's slot (``cfg.wgmma_batches_in_flight``). The
            # slot and the parity to wait for step along with ``read`` (one division
            # per tile, none between the wgmmas of a k-block).
            slot = stages.stage_index(read, self.num_stages)
            parity = stages.full_wait_parity(read, self.num_stages)
            prev_slot = slot
            for kb in cutlass.range(kb_count, unroll=1):
                ring.consumer_wait_slot(slot, parity, ring.consumer_try_wait_slot(slot, parity))
                self.trace_point(TracePoint.K_BLOCK_READY, flags, read)
                cute.nvgpu.warpgroup.fence()
                for ka in cutlass.range_constexpr(k_atoms):
                    coord = (None, None, ka, slot)
                    cute.gemm(tiled_mma, acc, tCrA[coord], tCrB[coord], acc)
                    tiled_mma.set(cute.nvgpu.warpgroup.Field.ACCUMULATE, True)
                cute.nvgpu.warpgroup.commit_group()
                cute.nvgpu.warpgroup.wait_group(self.mma_batches_in_flight)
                if cutlass.const_expr(self.mma_batches_in_flight == 0):
                    ring.warp_release_slot(slot, lane_signals, cm * cn > 1)
                else:
                    if kb > 0:
                        ring.warp_release_slot(prev_slot, lane_signals, cm * cn > 1)
                prev_slot = slot
                slot, parity = ring.next_slot(slot, parity)
                read += 1
            if cutlass.const_expr(self.pingpong):
                if step + 1 < steps:
                    their_turn.arrive()  # the next tile is theirs; this one's epilogue overlaps it
            cute.nvgpu.warpgroup.wait_group(0)
            if cutlass.const_expr(self.mma_batches_in_flight > 0):
                if kb_count > 0:  # the tile's last slot, which the loop left in prev_slot
                    ring.warp_release_slot(prev_slot, lane_signals, cm * cn > 1)
            self.trace_point(TracePoint.MAINLOOP_DONE, flags, read)

            finishes_tile = Boolean(True)
            if cutlass.const_expr(self.config.has_workspace):
                finishes_tile = publish_slot < 0
                if waits > 0:
                    split_k.wait_for_contributors(flags, flag, waits, cm * cn, cta_rank, consumer_tidx, epi_barrier)
                    self.trace_point(TracePoint.CONTRIBUTORS_ARRIVED, flags, read)
                    split_k.add_partials(acc, partials, first_slot, waits, cm * cn, cta_rank, consumer_tidx,
                                         self.consumer_threads)
                    self.trace_point(TracePoint.PARTIALS_ADDED, flags, read, after=acc[cute.size(acc) - 1])
                if not finishes_tile:
                    split_k.publish_partial(acc, partials, flags, publish_slot, flag, cm * cn, cta_rank,
                                            consumer_tidx, self.consumer_threads, epi_barrier)
            if finishes_tile:
                # ---- epilogue: registers -> smem -> TMA store, one sub-tile at a time ----
                # Store where the producer loaded (a moved edge tile at its moved origin).
                origin_offset = (scheduler.edge_tile_offset(tile_m, tiles_m, overhang_m),
                                 scheduler.edge_tile_offset(tile_n, tiles_n, overhang_n), 0)
                gD_tile = self.tile_at(cute.domain_offset(origin_offset, mD), tile_m, tile_n, batch)
                gD_epi = cute.zipped_divide(gD_tile, self.epi_tile)
                bias_tile = sBias
                if cutlass.const_expr(self.spec.epilogue.bias != ""):
                    # The tile's stretch of the bias into shared memory, read below by
                    # the tile-local coordinate of each value.
                    along_n = self.spec.epilogue.bias == "n"
                    length = self.tile_mnk[1] if along_n else self.tile_mnk[0]
                    bias_tile = cute.make_tensor(sBias.iterator + first_buffer // self.epi_stages * length,
                                                 cute.make_layout(length))
                    origin = (tile_n * self.tile_mnk[1] + origin_offset[1] if along_n
                              else tile_m * self.tile_mnk[0] + origin_offset[0])
                    stage_bias(bias_tile, bias, batch, origin, mD.shape[1] if along_n else mD.shape[0],
                               tile_tidx, tile_threads, epi_barrier)
                # Where each sub-tile's values sit in the tile.
                cD_epi = cute.flat_divide(cute.make_identity_tensor((self.tile_mnk[0], self.tile_mnk[1])),
                                          self.epi_tile)
                tDsD, tDgD = cute.nvgpu.cpasync.tma_partition(
                    tma_d, 0, cute.make_layout(1), cute.group_modes(sD, 0, 2), gD_epi
                )
                epi_subtiles = cute.size(gD_epi, mode=[1])
                # The accumulator fragment runs along N first, then down the 64-row
                # blocks a ping-pong tile repeats; gD_epi counts sub-tiles down M first.
                rows_of_subtiles = cute.size(gD_epi, mode=[1, 0])
                columns_of_subtiles = epi_subtiles // rows_of_subtiles
                for e in cutlass.range_constexpr(epi_subtiles):
                    e_d = e // columns_of_subtiles + rows_of_subtiles * (e % columns_of_subtiles)
                    for v in cutlass.range_constexpr(frag_size):
                        tRS_rAcc[v] = tRS_acc[e * frag_size + v]
                    if cutlass.const_expr(self.spec.epilogue.fused):
                        e_m, e_n = e_d % rows_of_subtiles, e_d // rows_of_subtiles
                        fuse_epilogue(tRS_rAcc, thr_r2s.partition_S(cD_epi[(None, None, e_m, e_n)]), bias_tile,
                                      alpha, 0, self.spec.epilogue, False)
                    tRS_rD.store(tRS_rAcc.load().to(self.d_dtype))
                    buf = first_buffer + epi_count % self.epi_stages
                    cute.copy(r2s, tRS_rD, tRS_sD[(None, None, None, buf)])
                    tma_store_subtile(tma_d, tDsD[(None, buf)], tDgD[(None, e_d)], epi_barrier, is_store_warp,
                                      self.epi_stages)
                    epi_count += 1
                self.trace_point(TracePoint.TILE_STORED, flags, read)
            step += step_stride
        if is_store_warp:
            cute.arch.cp_async_bulk_wait_group(0, read=True)
        self.trace_point(TracePoint.EXIT, flags, read)

    def tile_at(self, mX: cute.Tensor, tile_m, tile_n, batch) -> cute.Tensor:
        """The (tile_m, tile_n) output tile of batch ``batch`` of an (M, N, L) tensor."""
        return cute.local_tile(mX, (self.tile_mnk[0], self.tile_mnk[1]), (None, None, None))[
            (None, None, tile_m, tile_n, batch)]

    # -- trace points ---------------------------------------------------------------------

    def trace_point(self, point: "TracePoint", scratch: cute.Tensor, k_blocks_so_far=0, after=None):
        """A named moment of a CTA's timeline; emits no code here.

        ``benchmarks/maint/kernel_timeline.py`` builds a subclass that records
        ``%globaltimer`` at each point into ``scratch`` (the split-K flags argument,
        which a ``split_k = 1`` kernel never touches), to measure where a CTA's time
        goes: launch to first data, the steady k-block rate, the epilogue.
        ``k_blocks_so_far`` is the consumer's running k-block count (0 before the
        consumers start). ``after``: a register the moment waits for. A warp issues in
        order but waits for a load only where its value is used, so a stamp after the
        fix-up's adds would otherwise be taken before their loads return; the last
        partial sum depends on every load before it.
        """
