"""Blackwell step 2 -- the warp-specialized ring: a TMA warp, an MMA warp, epilogue warps.

COMPILED AND CHECKED ONLY: no Blackwell GPU is available to this project; this kernel
has never run. The tests compile it for sm_100a and check its PTX.

What changed since blackwell_1_tcgen05_mma.py, and why
-----------------------------------------------------
Step 1 did one k-block. This kernel loops over K through a ring of STAGES slots, as
hopper_4_warp_specialized.py does, with three roles instead of two:

* the **producer** (warp 5) is Hopper's: wait on ``empty[s]``, ``expect_tx`` on
  ``full[s]``, issue the TMA copies;
* the **MMA warp** (warp 4) waits on ``full[s]`` and issues the k-block's
  ``tcgen05.mma``\\ s -- and then does not wait for them. It releases the slot with
  ``tcgen05.commit`` on ``empty[s]``: the arrival happens when those MMAs have
  completed, later, by the hardware. On Hopper the consumer warpgroup had to
  ``wgmma.wait_group`` before its release; here the MMA warp goes straight on to the
  next slot, so one thread keeps the tensor cores fed. After the tile's last k-block
  a second commit, on ``acc_full``, says the accumulator is complete;
* the **epilogue** (warps 0-3) waits on ``acc_full``, reads tensor memory
  (``tcgen05.ld``) and stores D.

``empty[s]`` now has an arrival count of 1 (one commit) instead of Hopper's one per
consumer warp. The parities work as on Hopper: the producer starts at 1 (the phase
before the first counts as complete), the MMA warp at 0.

Still one output tile per CTA; blackwell_3_acc_double_buffer.py makes the CTAs
persistent with two accumulators.

It computes D = A @ B^T for A (M, K) and B (N, K), K-major; M and N multiples of 128,
K any multiple of 8.

Needs: nothing (compile-only).
Run:   python examples/ladder/blackwell_2_warp_specialized.py
"""

import sys

import cutlass
import cutlass.cute as cute
import cutlass.memory
import cutlass.pipeline
import cutlass.utils.blackwell_helpers as sm100_helpers
from cutlass import Int32
from cutlass.cute.nvgpu import cpasync, tcgen05

import harness

BM, BN, BK = 128, 128, 64
STAGES = 4
EPILOGUE_WARPS = 4  # warps 0-3
MMA_WARP = 4
PRODUCER_WARP = 5
THREADS = 32 * 6
AB_BYTES = (BM + BN) * BK * 2
TMEM_ALLOC_BARRIER = 1  # the epilogue warps and the MMA warp wait for the allocation
EPILOGUE_BARRIER = 2
# tcgen05.commit now also releases ring slots: one commit per k-block plus one per tile.
INTRODUCES = ["tcgen05.commit", "mbarrier.try_wait.parity"]


@cute.struct
class SharedStorage:
    full: cute.struct.MemRange[cutlass.Int64, STAGES]
    empty: cute.struct.MemRange[cutlass.Int64, STAGES]
    acc_full: cutlass.Int64
    tmem_address: cutlass.Int32
    sA: cute.struct.Align[cute.struct.MemRange[cutlass.BFloat16, BM * BK * STAGES], 1024]
    sB: cute.struct.Align[cute.struct.MemRange[cutlass.BFloat16, BN * BK * STAGES], 1024]


@cute.jit
def producer(full, empty, k_blocks: Int32, tma_a, gA_boxes, sA_boxes, tma_b, gB_boxes, sB_boxes):
    slot = Int32(0)
    parity = Int32(1)
    for kb in cutlass.range(k_blocks, unroll=1):
        cute.arch.mbarrier_wait(empty + slot, parity)
        with cute.arch.elect_one():
            cute.arch.mbarrier_arrive_and_expect_tx(full + slot, AB_BYTES)
        cute.copy(tma_a, gA_boxes[(None, kb)], sA_boxes[(None, slot)], tma_bar_ptr=full + slot)
        cute.copy(tma_b, gB_boxes[(None, kb)], sB_boxes[(None, slot)], tma_bar_ptr=full + slot)
        slot += 1
        if slot == STAGES:
            slot = Int32(0)
            parity ^= 1


@cute.jit
def mma(full, empty, acc_full, k_blocks: Int32, tiled_mma, tCrA, tCrB, tAcc):
    """Warp 4: the MMAs of every k-block; a commit releases each slot, and one more
    marks the accumulator full."""
    slot = Int32(0)
    parity = Int32(0)
    tiled_mma.set(tcgen05.Field.ACCUMULATE, False)
    for kb in cutlass.range(k_blocks, unroll=1):
        cute.arch.mbarrier_wait(full + slot, parity)
        for ka in cutlass.range_constexpr(cute.size(tCrA, mode=[2])):
            cute.gemm(tiled_mma, tAcc, tCrA[(None, None, ka, slot)], tCrB[(None, None, ka, slot)], tAcc)
            tiled_mma.set(tcgen05.Field.ACCUMULATE, True)
        with cute.arch.elect_one():
            tcgen05.commit(empty + slot)  # the slot is free once these MMAs completed
        slot += 1
        if slot == STAGES:
            slot = Int32(0)
            parity ^= 1
    with cute.arch.elect_one():
        tcgen05.commit(acc_full)


@cute.kernel
def gemm_ws_kernel(tiled_mma: cute.TiledMma, tma_a: cute.CopyAtom, mA: cute.Tensor, tma_b: cute.CopyAtom,
                   mB: cute.Tensor, mD: cute.Tensor, a_smem: cute.ComposedLayout, b_smem: cute.ComposedLayout):
    tidx, _, _ = cute.arch.thread_idx()
    tile_m, tile_n, _ = cute.arch.block_idx()
    warp = cute.arch.make_warp_uniform(cute.arch.warp_idx())

    storage = cutlass.memory.SmemAllocator().allocate(SharedStorage)
    full, empty = storage.full.data_ptr(), storage.empty.data_ptr()
    acc_full = storage.acc_full.ptr
    sA = storage.sA.get_tensor(a_smem.outer, swizzle=a_smem.inner)
    sB = storage.sB.get_tensor(b_smem.outer, swizzle=b_smem.inner)
    if warp == PRODUCER_WARP:
        with cute.arch.elect_one():
            for s in cutlass.range_constexpr(STAGES):
                cute.arch.mbarrier_init(full + s, 1)  # the producer's expect_tx
                cute.arch.mbarrier_init(empty + s, 1)  # the MMA warp's commit
            cute.arch.mbarrier_init(acc_full, 1)
    cute.arch.mbarrier_init_fence()
    cute.arch.sync_threads()
    tmem = cutlass.memory.TmemAllocator(
        storage.tmem_address.ptr,
        barrier_for_retrieve=cutlass.pipeline.NamedBarrier(barrier_id=TMEM_ALLOC_BARRIER,
                                                           num_threads=32 * (EPILOGUE_WARPS + 1)),
        allocator_warp_id=0)

    thr_mma = tiled_mma.get_slice(0)
    gA = cute.local_tile(mA, (BM, BK), (None, None))  # (BM, BK, tiles_m, k_blocks)
    k_blocks = cute.size(gA, mode=[3])
    acc_layout = tiled_mma.make_fragment_C(tiled_mma.partition_shape_C((BM, BN))).layout

    if warp == PRODUCER_WARP:
        tAsA, tAgA = cpasync.tma_partition(tma_a, 0, cute.make_layout(1), cute.group_modes(sA, 0, 3),
                                           cute.group_modes(thr_mma.partition_A(gA), 0, 3))
        tBsB, tBgB = cpasync.tma_partition(
            tma_b, 0, cute.make_layout(1), cute.group_modes(sB, 0, 3),
            cute.group_modes(thr_mma.partition_B(cute.local_tile(mB, (BN, BK), (None, None))), 0, 3))
        producer(full, empty, k_blocks, tma_a, tAgA[(None, tile_m, None)], tAsA,
                 tma_b, tBgB[(None, tile_n, None)], tBsB)
    if warp == MMA_WARP:
        tmem.wait_for_alloc()
        tAcc = cute.make_tensor(tmem.retrieve_ptr(cutlass.Float32), acc_layout)
        mma(full, empty, acc_full, k_blocks, tiled_mma, tiled_mma.make_fragment_A(sA),
            tiled_mma.make_fragment_B(sB), tAcc)
    if warp < EPILOGUE_WARPS:
        tmem.allocate(BN)
        tmem.wait_for_alloc()
        tAcc = cute.make_tensor(tmem.retrieve_ptr(cutlass.Float32), acc_layout)
        tCgD = thr_mma.partition_C(cute.local_tile(mD, (BM, BN), (tile_m, tile_n)))
        t2r = tcgen05.make_tmem_copy(
            cute.make_copy_atom(tcgen05.Ld32x32bOp(tcgen05.Repetition.x128), cutlass.Float32), tAcc[(None, 0, 0)])
        thr_t2r = t2r.get_slice(tidx)
        tTR_gD = thr_t2r.partition_D(tCgD[(None, 0, 0)])
        acc = cute.make_rmem_tensor(tTR_gD.shape, cutlass.Float32)

        cute.arch.mbarrier_wait(acc_full, 0)
        cute.arch.inline_ptx("tcgen05.fence::after_thread_sync;")
        cute.copy(t2r, thr_t2r.partition_S(tAcc[(None, 0, 0)]), acc)
        cute.arch.fence_view_async_tmem_load()
        tTR_gD.store(acc.load().to(mD.element_type))

        cutlass.pipeline.NamedBarrier(barrier_id=EPILOGUE_BARRIER, num_threads=32 * EPILOGUE_WARPS).arrive_and_wait()
        tmem.relinquish_alloc_permit()
        tmem.free(tAcc.iterator)


@cute.jit
def gemm_warp_specialized(mA: cute.Tensor, mB: cute.Tensor, mD: cute.Tensor, stream):
    """D = A @ B^T for bf16 A (M, K), B (N, K), D (M, N); M and N multiples of 128."""
    tiled_mma = sm100_helpers.make_trivial_tiled_mma(
        cutlass.BFloat16, cutlass.BFloat16, cute.nvgpu.OperandMajorMode.K, cute.nvgpu.OperandMajorMode.K,
        cutlass.Float32, tcgen05.CtaGroup.ONE, (BM, BN))
    a_smem = sm100_helpers.make_smem_layout_a(tiled_mma, (BM, BN, BK), cutlass.BFloat16, STAGES)
    b_smem = sm100_helpers.make_smem_layout_b(tiled_mma, (BM, BN, BK), cutlass.BFloat16, STAGES)
    op = cpasync.CopyBulkTensorTileG2SOp(tcgen05.CtaGroup.ONE)
    tma_a, mA_tma = cute.nvgpu.make_tiled_tma_atom_A(op, mA, cute.slice_(a_smem, (None, None, None, 0)),
                                                     (BM, BN, BK), tiled_mma)
    tma_b, mB_tma = cute.nvgpu.make_tiled_tma_atom_B(op, mB, cute.slice_(b_smem, (None, None, None, 0)),
                                                     (BM, BN, BK), tiled_mma)
    grid = (cute.ceil_div(mD.shape[0], BM), cute.ceil_div(mD.shape[1], BN), 1)
    gemm_ws_kernel(tiled_mma, tma_a, mA_tma, tma_b, mB_tma, mD, a_smem, b_smem).launch(
        grid=grid, block=(THREADS, 1, 1), stream=stream)


def build(arch: str = harness.BLACKWELL) -> harness.Build:
    m = harness.fake_matrix
    return harness.compile_kernel(gemm_warp_specialized, m(), m(), m(), harness.fake_stream(),
                                  arch=arch)


if __name__ == "__main__":
    sys.exit(harness.main(build, None, "", INTRODUCES, arch=harness.BLACKWELL))
