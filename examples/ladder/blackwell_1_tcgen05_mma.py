"""Blackwell step 1 -- one tile with tcgen05: the MMA writes tensor memory, a commit says when.

COMPILED AND CHECKED ONLY: no Blackwell GPU is available to this project; this kernel
has never run. The tests compile it for sm_100a and check its PTX.

What changes from Hopper (compare hopper_2_one_wgmma.py, the same single-tile GEMM)
-----------------------------------------------------------------------------------
The TMA half is unchanged: A and B tiles land on one mbarrier with ``expect_tx``. The
MMA half is new:

* **tensor memory (TMEM).** The accumulators no longer live in the registers of a
  warpgroup: ``tcgen05.mma`` writes them into a 128-lane x 512-column memory beside the
  tensor cores. A warp allocates columns (``tcgen05.alloc``: 128 columns hold a
  128 x 128 fp32 tile; the address comes back through shared memory) and frees them
  before the CTA exits (``tcgen05.dealloc``).
* **one thread issues the MMA.** ``tcgen05.mma`` is issued by a single thread for the
  whole 128 x 128 x 16 step (a wgmma needed all 128 threads of a warpgroup); the four
  k16 steps of the k-block are four instructions.
* **completion through an mbarrier.** There is no ``wait_group``: ``tcgen05.commit``
  makes an mbarrier arrival once every tcgen05 operation the thread issued before it
  has completed. Whoever needs the result waits on that barrier -- the same
  ``try_wait.parity`` as for a TMA load. This is what lets the MMA be handed between
  warps in step 2, as TMA loads were on Hopper.
* **tensor memory -> registers.** After the wait (and ``tcgen05.fence::after_thread_sync``
  to order the wait before what follows), each warp reads its 32 lanes (rows) with
  ``tcgen05.ld`` and waits for the load (``tcgen05.wait::ld``) before using the values.

It computes D = A @ B^T for A (M, 64) and B (N, 64), K-major; M and N multiples of 128.

Needs: nothing (compile-only).
Run:   python examples/ladder/blackwell_1_tcgen05_mma.py
"""

import sys

import cutlass
import cutlass.cute as cute
import cutlass.memory
import cutlass.pipeline
import cutlass.utils.blackwell_helpers as sm100_helpers
from cutlass.cute.nvgpu import cpasync, tcgen05

import harness

BM, BN, BK = 128, 128, 64
THREADS = 128  # four warps: warp w reads tensor-memory lanes 32w .. 32w + 31
TMEM_COLUMNS = BN  # one fp32 column per output column
AB_BYTES = (BM + BN) * BK * 2
TMEM_ALLOC_BARRIER = 1
INTRODUCES = ["tcgen05.alloc", "tcgen05.mma.cta_group::1.kind::f16", "tcgen05.commit", "tcgen05.ld",
              "tcgen05.wait::ld", "tcgen05.dealloc"]


@cute.struct
class SharedStorage:
    loaded: cutlass.Int64  # A and B are in shared memory
    multiplied: cutlass.Int64  # the MMAs have completed (tcgen05.commit)
    tmem_address: cutlass.Int32  # where tcgen05.alloc writes the allocation's address
    sA: cute.struct.Align[cute.struct.MemRange[cutlass.BFloat16, BM * BK], 1024]
    sB: cute.struct.Align[cute.struct.MemRange[cutlass.BFloat16, BN * BK], 1024]


@cute.kernel
def tcgen05_tile_kernel(tiled_mma: cute.TiledMma, tma_a: cute.CopyAtom, mA: cute.Tensor, tma_b: cute.CopyAtom,
                        mB: cute.Tensor, mD: cute.Tensor, a_smem: cute.ComposedLayout, b_smem: cute.ComposedLayout):
    tidx, _, _ = cute.arch.thread_idx()
    tile_m, tile_n, _ = cute.arch.block_idx()
    warp = cute.arch.make_warp_uniform(cute.arch.warp_idx())

    storage = cutlass.memory.SmemAllocator().allocate(SharedStorage)
    loaded, multiplied = storage.loaded.ptr, storage.multiplied.ptr
    sA = storage.sA.get_tensor(a_smem.outer, swizzle=a_smem.inner)  # (MMA, MMA_M, MMA_K, 1)
    sB = storage.sB.get_tensor(b_smem.outer, swizzle=b_smem.inner)
    if warp == 0:
        with cute.arch.elect_one():
            cute.arch.mbarrier_init(loaded, 1)
            cute.arch.mbarrier_init(multiplied, 1)  # one arrival: the commit
    cute.arch.mbarrier_init_fence()
    cute.arch.sync_threads()

    # Warp 0 allocates the accumulator's columns; everybody learns the address after
    # a named barrier.
    tmem = cutlass.memory.TmemAllocator(
        storage.tmem_address.ptr,
        barrier_for_retrieve=cutlass.pipeline.NamedBarrier(barrier_id=TMEM_ALLOC_BARRIER, num_threads=THREADS),
        allocator_warp_id=0)
    tmem.allocate(TMEM_COLUMNS)

    # The MMA's view of this CTA's tiles of A, B and D (one MMA tile per CTA).
    thr_mma = tiled_mma.get_slice(0)
    tCgA = thr_mma.partition_A(cute.local_tile(mA, (BM, BK), (None, None)))  # (MMA, 1, 1, tiles_m, k_blocks)
    tCgB = thr_mma.partition_B(cute.local_tile(mB, (BN, BK), (None, None)))
    tCgD = thr_mma.partition_C(cute.local_tile(mD, (BM, BN), (tile_m, tile_n)))  # (MMA, 1, 1)
    tAsA, tAgA = cpasync.tma_partition(tma_a, 0, cute.make_layout(1), cute.group_modes(sA, 0, 3),
                                       cute.group_modes(tCgA, 0, 3))
    tBsB, tBgB = cpasync.tma_partition(tma_b, 0, cute.make_layout(1), cute.group_modes(sB, 0, 3),
                                       cute.group_modes(tCgB, 0, 3))
    if warp == 0:
        with cute.arch.elect_one():
            cute.arch.mbarrier_arrive_and_expect_tx(loaded, AB_BYTES)
        cute.copy(tma_a, tAgA[(None, tile_m, 0)], tAsA[(None, 0)], tma_bar_ptr=loaded)
        cute.copy(tma_b, tBgB[(None, tile_n, 0)], tBsB[(None, 0)], tma_bar_ptr=loaded)

    tmem.wait_for_alloc()
    acc_layout = tiled_mma.make_fragment_C(tiled_mma.partition_shape_C((BM, BN))).layout
    tAcc = cute.make_tensor(tmem.retrieve_ptr(cutlass.Float32), acc_layout)  # (MMA, 1, 1) in TMEM

    # Warp 0 issues the MMAs (one thread of it, elected inside cute.gemm) and commits.
    if warp == 0:
        tCrA = tiled_mma.make_fragment_A(sA)  # shared-memory descriptors
        tCrB = tiled_mma.make_fragment_B(sB)
        cute.arch.mbarrier_wait(loaded, 0)
        tiled_mma.set(tcgen05.Field.ACCUMULATE, False)
        for ka in cutlass.range_constexpr(cute.size(tCrA, mode=[2])):
            cute.gemm(tiled_mma, tAcc, tCrA[(None, None, ka, 0)], tCrB[(None, None, ka, 0)], tAcc)
            tiled_mma.set(tcgen05.Field.ACCUMULATE, True)
        with cute.arch.elect_one():
            tcgen05.commit(multiplied)  # arrives once the MMAs above have completed

    # Everybody: wait for the MMAs, then tensor memory -> registers -> D.
    cute.arch.mbarrier_wait(multiplied, 0)
    cute.arch.inline_ptx("tcgen05.fence::after_thread_sync;")
    t2r = tcgen05.make_tmem_copy(cute.make_copy_atom(tcgen05.Ld32x32bOp(tcgen05.Repetition.x128), cutlass.Float32),
                                 tAcc[(None, 0, 0)])
    thr_t2r = t2r.get_slice(tidx)
    tTR_tAcc = thr_t2r.partition_S(tAcc[(None, 0, 0)])
    tTR_gD = thr_t2r.partition_D(tCgD[(None, 0, 0)])
    acc = cute.make_rmem_tensor(tTR_gD.shape, cutlass.Float32)
    cute.copy(t2r, tTR_tAcc, acc)
    cute.arch.fence_view_async_tmem_load()  # tcgen05.wait::ld: the values are in registers
    tTR_gD.store(acc.load().to(mD.element_type))

    # Every warp has read tensor memory: warp 0 frees it.
    cute.arch.sync_threads()
    tmem.relinquish_alloc_permit()
    tmem.free(tAcc.iterator)


@cute.jit
def gemm_tcgen05_tile(mA: cute.Tensor, mB: cute.Tensor, mD: cute.Tensor, stream):
    """D = A @ B^T for bf16 A (M, 64), B (N, 64), D (M, N); M and N multiples of 128."""
    tiled_mma = sm100_helpers.make_trivial_tiled_mma(
        cutlass.BFloat16, cutlass.BFloat16, cute.nvgpu.OperandMajorMode.K, cute.nvgpu.OperandMajorMode.K,
        cutlass.Float32, tcgen05.CtaGroup.ONE, (BM, BN))
    a_smem = sm100_helpers.make_smem_layout_a(tiled_mma, (BM, BN, BK), cutlass.BFloat16, 1)
    b_smem = sm100_helpers.make_smem_layout_b(tiled_mma, (BM, BN, BK), cutlass.BFloat16, 1)
    op = cpasync.CopyBulkTensorTileG2SOp(tcgen05.CtaGroup.ONE)
    tma_a, mA_tma = cute.nvgpu.make_tiled_tma_atom_A(op, mA, cute.slice_(a_smem, (None, None, None, 0)),
                                                     (BM, BN, BK), tiled_mma)
    tma_b, mB_tma = cute.nvgpu.make_tiled_tma_atom_B(op, mB, cute.slice_(b_smem, (None, None, None, 0)),
                                                     (BM, BN, BK), tiled_mma)
    grid = (cute.ceil_div(mD.shape[0], BM), cute.ceil_div(mD.shape[1], BN), 1)
    tcgen05_tile_kernel(tiled_mma, tma_a, mA_tma, tma_b, mB_tma, mD, a_smem, b_smem).launch(
        grid=grid, block=(THREADS, 1, 1), stream=stream)


def build(arch: str = harness.BLACKWELL) -> harness.Build:
    m = harness.fake_matrix
    return harness.compile_kernel(gemm_tcgen05_tile, m(), m(), m(), harness.fake_stream(), arch=arch)


if __name__ == "__main__":
    sys.exit(harness.main(build, None, "", INTRODUCES, arch=harness.BLACKWELL))
