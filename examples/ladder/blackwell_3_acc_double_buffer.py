"""Blackwell step 3 -- persistent CTAs and two accumulators in tensor memory: acc_full / acc_empty.

COMPILED AND CHECKED ONLY: no Blackwell GPU is available to this project; this kernel
has never run. The tests compile it for sm_100a and check its PTX.

What changed since blackwell_2_warp_specialized.py, and why
----------------------------------------------------------
The CTAs become persistent, as in hopper_5_persistent.py: ``num_ctas`` of them, each
looping over tiles ``c, c + num_ctas, ...`` in all three roles, the ring's (slot,
parity) carried across tiles. With one accumulator, the MMA warp could not start a
tile until the epilogue had read the previous one out of tensor memory. Tensor memory
has room for more (512 columns; a 128 x 128 fp32 accumulator takes 128), so there are
ACC_STAGES = 2 accumulator buffers, and a second ring between the MMA warp and the
epilogue, of two barriers per buffer:

* ``acc_full[b]`` (1 arrival): the MMA warp's ``tcgen05.commit`` after a tile's last
  k-block: buffer b holds a finished tile;
* ``acc_empty[b]`` (4 arrivals, one per epilogue warp): the warp has its rows in
  registers. Each warp waits for its loads (``tcgen05.wait::ld``), orders them before
  the arrival (``tcgen05.fence::before_thread_sync``) and arrives -- before it converts
  and stores, so the MMA warp may already overwrite the buffer. The MMA warp waits on
  it before a tile's first MMA (and ``tcgen05.fence::after_thread_sync`` after the
  wait), starting at parity 1 like every producer side.

While the epilogue drains tile t from buffer t % 2, the MMA warp accumulates tile t + 1
into the other: the epilogue overlaps the mainloop, which on Hopper needed a second
consumer warpgroup. The library's SM100 kernel (src/wsgemm/kernels/sm100.py) is this
with clusters and multicast loads, the 2-CTA MMA (``cta_group::2``), the look-ahead
probes, an epilogue in sub-tiles through shared memory and TMA stores, and the
producer's and MMA warp's tails that keep a CTA alive while its peers still need it.

It computes D = A @ B^T for A (M, K) and B (N, K), K-major; M and N multiples of 128,
K any multiple of 8.

Needs: nothing (compile-only).
Run:   python examples/ladder/blackwell_3_acc_double_buffer.py
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
ACC_STAGES = 2  # accumulator buffers in tensor memory
EPILOGUE_WARPS = 4  # warps 0-3
MMA_WARP = 4
PRODUCER_WARP = 5
THREADS = 32 * 6
AB_BYTES = (BM + BN) * BK * 2
TMEM_ALLOC_BARRIER = 1  # the epilogue warps and the MMA warp wait for the allocation
EPILOGUE_BARRIER = 2
# The epilogue's release of a buffer: ordered after its tensor-memory loads, then an
# arrival; the MMA warp's matching fence after its wait; the grid-stride tile loop.
INTRODUCES = ["tcgen05.fence::before_thread_sync", "tcgen05.fence::after_thread_sync", "mbarrier.arrive.shared.b64",
              "%nctaid.x"]


@cute.struct
class SharedStorage:
    full: cute.struct.MemRange[cutlass.Int64, STAGES]
    empty: cute.struct.MemRange[cutlass.Int64, STAGES]
    acc_full: cute.struct.MemRange[cutlass.Int64, ACC_STAGES]  # buffer b holds a finished tile
    acc_empty: cute.struct.MemRange[cutlass.Int64, ACC_STAGES]  # the epilogue has read buffer b
    tmem_address: cutlass.Int32
    sA: cute.struct.Align[cute.struct.MemRange[cutlass.BFloat16, BM * BK * STAGES], 1024]
    sB: cute.struct.Align[cute.struct.MemRange[cutlass.BFloat16, BN * BK * STAGES], 1024]


@cute.jit
def producer(full, empty, k_blocks: Int32, tiles_n: Int32, tiles: Int32, tma_a, tAgA, tAsA, tma_b, tBgB, tBsB):
    slot = Int32(0)
    parity = Int32(1)
    tile = cute.arch.block_idx()[0]
    while tile < tiles:
        for kb in cutlass.range(k_blocks, unroll=1):
            cute.arch.mbarrier_wait(empty + slot, parity)
            with cute.arch.elect_one():
                cute.arch.mbarrier_arrive_and_expect_tx(full + slot, AB_BYTES)
            cute.copy(tma_a, tAgA[(None, tile // tiles_n, kb)], tAsA[(None, slot)], tma_bar_ptr=full + slot)
            cute.copy(tma_b, tBgB[(None, tile % tiles_n, kb)], tBsB[(None, slot)], tma_bar_ptr=full + slot)
            slot += 1
            if slot == STAGES:
                slot = Int32(0)
                parity ^= 1
        tile += cute.arch.grid_dim()[0]


@cute.jit
def mma(full, empty, acc_full, acc_empty, k_blocks: Int32, tiles: Int32, tiled_mma, tCrA, tCrB, tAcc):
    """Warp 4: each tile into the next accumulator buffer, once the epilogue has read it."""
    slot = Int32(0)
    parity = Int32(0)
    buffer = Int32(0)
    acc_parity = Int32(1)  # acc_empty: the phase before the first counts as complete
    tile = cute.arch.block_idx()[0]
    while tile < tiles:
        cute.arch.mbarrier_wait(acc_empty + buffer, acc_parity)
        cute.arch.inline_ptx("tcgen05.fence::after_thread_sync;")  # the epilogue's reads come first
        tiled_mma.set(tcgen05.Field.ACCUMULATE, False)
        for kb in cutlass.range(k_blocks, unroll=1):
            cute.arch.mbarrier_wait(full + slot, parity)
            for ka in cutlass.range_constexpr(cute.size(tCrA, mode=[2])):
                cute.gemm(tiled_mma, tAcc[(None, None, None, buffer)], tCrA[(None, None, ka, slot)],
                          tCrB[(None, None, ka, slot)], tAcc[(None, None, None, buffer)])
                tiled_mma.set(tcgen05.Field.ACCUMULATE, True)
            with cute.arch.elect_one():
                tcgen05.commit(empty + slot)
            slot += 1
            if slot == STAGES:
                slot = Int32(0)
                parity ^= 1
        with cute.arch.elect_one():
            tcgen05.commit(acc_full + buffer)
        buffer += 1
        if buffer == ACC_STAGES:
            buffer = Int32(0)
            acc_parity ^= 1
        tile += cute.arch.grid_dim()[0]


@cute.jit
def epilogue(acc_full, acc_empty, tiles_n: Int32, tiles: Int32, t2r, tTR_tAcc, tTR_gD, acc):
    """Warps 0-3: each tile's accumulator buffer -> registers (then the buffer is
    released) -> D."""
    buffer = Int32(0)
    acc_parity = Int32(0)
    tile = cute.arch.block_idx()[0]
    while tile < tiles:
        cute.arch.mbarrier_wait(acc_full + buffer, acc_parity)
        cute.arch.inline_ptx("tcgen05.fence::after_thread_sync;")
        cute.copy(t2r, tTR_tAcc[(None, None, buffer)], acc)
        cute.arch.fence_view_async_tmem_load()  # tcgen05.wait::ld
        cute.arch.inline_ptx("tcgen05.fence::before_thread_sync;")
        with cute.arch.elect_one():  # one arrival per warp: acc_empty completes at 4
            cute.arch.mbarrier_arrive(acc_empty + buffer)
        tTR_gD[(None, None, tile // tiles_n, tile % tiles_n)].store(acc.load().to(tTR_gD.element_type))
        buffer += 1
        if buffer == ACC_STAGES:
            buffer = Int32(0)
            acc_parity ^= 1
        tile += cute.arch.grid_dim()[0]


@cute.kernel
def gemm_double_buffer_kernel(tiled_mma: cute.TiledMma, tma_a: cute.CopyAtom, mA: cute.Tensor,
                              tma_b: cute.CopyAtom, mB: cute.Tensor, mD: cute.Tensor, a_smem: cute.ComposedLayout,
                              b_smem: cute.ComposedLayout):
    tidx, _, _ = cute.arch.thread_idx()
    warp = cute.arch.make_warp_uniform(cute.arch.warp_idx())

    storage = cutlass.memory.SmemAllocator().allocate(SharedStorage)
    full, empty = storage.full.data_ptr(), storage.empty.data_ptr()
    acc_full, acc_empty = storage.acc_full.data_ptr(), storage.acc_empty.data_ptr()
    sA = storage.sA.get_tensor(a_smem.outer, swizzle=a_smem.inner)
    sB = storage.sB.get_tensor(b_smem.outer, swizzle=b_smem.inner)
    if warp == PRODUCER_WARP:
        with cute.arch.elect_one():
            for s in cutlass.range_constexpr(STAGES):
                cute.arch.mbarrier_init(full + s, 1)
                cute.arch.mbarrier_init(empty + s, 1)
            for b in cutlass.range_constexpr(ACC_STAGES):
                cute.arch.mbarrier_init(acc_full + b, 1)  # the MMA warp's commit
                cute.arch.mbarrier_init(acc_empty + b, EPILOGUE_WARPS)  # one per epilogue warp
    cute.arch.mbarrier_init_fence()
    cute.arch.sync_threads()
    tmem = cutlass.memory.TmemAllocator(
        storage.tmem_address.ptr,
        barrier_for_retrieve=cutlass.pipeline.NamedBarrier(barrier_id=TMEM_ALLOC_BARRIER,
                                                           num_threads=32 * (EPILOGUE_WARPS + 1)),
        allocator_warp_id=0)

    thr_mma = tiled_mma.get_slice(0)
    gA = cute.local_tile(mA, (BM, BK), (None, None))  # (BM, BK, tiles_m, k_blocks)
    gD = cute.local_tile(mD, (BM, BN), (None, None))  # (BM, BN, tiles_m, tiles_n)
    k_blocks = cute.size(gA, mode=[3])
    tiles_n = cute.size(gD, mode=[3])
    tiles = cute.size(gD, mode=[2]) * tiles_n
    # (MMA, 1, 1, ACC_STAGES): the accumulator buffers side by side in tensor memory.
    acc_shape = cute.append(tiled_mma.partition_shape_C((BM, BN)), ACC_STAGES)
    acc_layout = tiled_mma.make_fragment_C(acc_shape).layout

    if warp == PRODUCER_WARP:
        tAsA, tAgA = cpasync.tma_partition(tma_a, 0, cute.make_layout(1), cute.group_modes(sA, 0, 3),
                                           cute.group_modes(thr_mma.partition_A(gA), 0, 3))
        tBsB, tBgB = cpasync.tma_partition(
            tma_b, 0, cute.make_layout(1), cute.group_modes(sB, 0, 3),
            cute.group_modes(thr_mma.partition_B(cute.local_tile(mB, (BN, BK), (None, None))), 0, 3))
        producer(full, empty, k_blocks, tiles_n, tiles, tma_a, tAgA, tAsA, tma_b, tBgB, tBsB)
    if warp == MMA_WARP:
        tmem.wait_for_alloc()
        tAcc = cute.make_tensor(tmem.retrieve_ptr(cutlass.Float32), acc_layout)
        mma(full, empty, acc_full, acc_empty, k_blocks, tiles, tiled_mma, tiled_mma.make_fragment_A(sA),
            tiled_mma.make_fragment_B(sB), tAcc)
    if warp < EPILOGUE_WARPS:
        tmem.allocate(BN * ACC_STAGES)
        tmem.wait_for_alloc()
        tAcc = cute.make_tensor(tmem.retrieve_ptr(cutlass.Float32), acc_layout)
        t2r = tcgen05.make_tmem_copy(
            cute.make_copy_atom(tcgen05.Ld32x32bOp(tcgen05.Repetition.x128), cutlass.Float32),
            tAcc[(None, 0, 0, 0)])
        thr_t2r = t2r.get_slice(tidx)
        tTR_tAcc = thr_t2r.partition_S(tAcc[(None, 0, 0, None)])
        tTR_gD = thr_t2r.partition_D(thr_mma.partition_C(gD)[(None, 0, 0, None, None)])
        acc = cute.make_rmem_tensor(tTR_gD[(None, None, 0, 0)].shape, cutlass.Float32)
        epilogue(acc_full, acc_empty, tiles_n, tiles, t2r, tTR_tAcc, tTR_gD, acc)

        cutlass.pipeline.NamedBarrier(barrier_id=EPILOGUE_BARRIER, num_threads=32 * EPILOGUE_WARPS).arrive_and_wait()
        tmem.relinquish_alloc_permit()
        tmem.free(tAcc.iterator)


@cute.jit
def gemm_acc_double_buffer(mA: cute.Tensor, mB: cute.Tensor, mD: cute.Tensor, num_ctas: Int32, stream):
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
    grid = (num_ctas, 1, 1)
    gemm_double_buffer_kernel(tiled_mma, tma_a, mA_tma, tma_b, mB_tma, mD, a_smem, b_smem).launch(
        grid=grid, block=(THREADS, 1, 1), stream=stream)


def build(arch: str = harness.BLACKWELL) -> harness.Build:
    m = harness.fake_matrix
    return harness.compile_kernel(gemm_acc_double_buffer, m(), m(), m(), Int32(1), harness.fake_stream(),
                                  arch=arch)


if __name__ == "__main__":
    sys.exit(harness.main(build, None, "", INTRODUCES, arch=harness.BLACKWELL))
