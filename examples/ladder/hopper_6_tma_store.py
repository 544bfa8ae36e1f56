"""Hopper step 6 -- the epilogue through shared memory and a TMA store, overlapping the next tile.

What changed since step 5, and why
----------------------------------
Step 5's consumer writes its accumulators to D itself: 128 threads each store pairs
of bf16 scattered over 128 rows, and the wgmmas of its next tile cannot start until
the last of those stores has issued. Here the consumer hands the tile to the TMA unit:

1. wait until the previous tile's TMA store has finished *reading* shared memory
   (``cp.async.bulk.wait_group.read 0``, the store warp alone, then a named barrier
   of the consumer warpgroup's 128 threads): the buffer is free;
2. convert to bf16 and write the tile into that buffer with ``stmatrix`` (a warp
   writes 8x8 blocks, in the swizzled layout TMA reads);
3. ``fence.proxy.async.shared::cta``: the threads wrote through the generic proxy and
   TMA reads through the async proxy; the fence, then the named barrier, makes every
   thread's writes visible to the copy engine;
4. one warp issues the store (``cp.async.bulk.tensor ... .global.shared::cta``) and
   commits it as a bulk group, and the warpgroup goes straight on to the next tile's
   wgmmas: the store drains while they run. Step 1 waits for it only when the buffer
   is needed again, a whole mainloop later; at exit, for the last one.

TMA clips the store at the matrix's edge (and zero-fills loads past it), so M and N
no longer have to be multiples of 128: any multiple of 8 (16-byte rows) will do.

Where the library's kernel goes further (src/wsgemm/kernels/sm90.py): two consumer
warpgroups (256-row tiles, or "ping-pong": each owns every other tile, so one's
epilogue overlaps the other's mainloop on the tensor cores), ``setmaxnreg`` moving
registers from the producer to the consumers, an epilogue in sub-tiles rotating
through several buffers, clusters whose CTAs multicast the A and B tiles they share,
the producer probing the next slot before issuing the current copies, a swizzled
tile order, split-K and stream-K.

Needs: nothing to compile; an SM90 GPU (H100 or H200) to run.
Run:   python examples/ladder/hopper_6_tma_store.py
"""

import sys

import cutlass
import cutlass.cute as cute
import cutlass.memory
import cutlass.pipeline
import cutlass.utils.hopper_helpers as sm90_helpers
from cutlass import Int32
from cutlass.cute.nvgpu import cpasync, warpgroup
from cutlass.tensor_utils import LayoutEnum

import harness

BM, BN, BK = 128, 128, 64
STAGES = 4
THREADS = 256  # warpgroup 0: producer, warpgroup 1: consumer
CONSUMER_WARPS = 4
AB_BYTES = (BM + BN) * BK * 2
EPILOGUE_BARRIER = 1  # named barrier 0 is the whole CTA's (bar.sync 0)
# registers -> shared memory, the TMA store and its bulk group, the proxy fence.
INTRODUCES = ["stmatrix", "cp.async.bulk.tensor.2d.global.shared::cta", "cp.async.bulk.commit_group",
              "cp.async.bulk.wait_group.read", "fence.proxy.async.shared::cta"]


@cute.struct
class SharedStorage:
    full: cute.struct.MemRange[cutlass.Int64, STAGES]  # the slot's bytes have landed
    empty: cute.struct.MemRange[cutlass.Int64, STAGES]  # the slot's wgmmas have retired
    sA: cute.struct.Align[cute.struct.MemRange[cutlass.BFloat16, BM * BK * STAGES], 1024]
    sB: cute.struct.Align[cute.struct.MemRange[cutlass.BFloat16, BN * BK * STAGES], 1024]
    sD: cute.struct.Align[cute.struct.MemRange[cutlass.BFloat16, BM * BN], 1024]  # the epilogue's buffer


@cute.jit
def producer(full, empty, k_blocks: Int32, tiles_n: Int32, tiles: Int32, tma_a, tAgA, tAsA, tma_b, tBgB, tBsB):
    """Warp 0: every k-block of every tile of this CTA into the ring."""
    slot = Int32(0)  # the ring's position, kept across tiles
    parity = Int32(1)
    tile = cute.arch.block_idx()[0]
    while tile < tiles:
        tile_m, tile_n = tile // tiles_n, tile % tiles_n
        for kb in cutlass.range(k_blocks, unroll=1):
            cute.arch.mbarrier_wait(empty + slot, parity)
            with cute.arch.elect_one():
                cute.arch.mbarrier_arrive_and_expect_tx(full + slot, AB_BYTES)
            cute.copy(tma_a, tAgA[(None, tile_m, kb)], tAsA[(None, slot)], tma_bar_ptr=full + slot)
            cute.copy(tma_b, tBgB[(None, tile_n, kb)], tBsB[(None, slot)], tma_bar_ptr=full + slot)
            slot += 1
            if slot == STAGES:
                slot = Int32(0)
                parity ^= 1
        tile += cute.arch.grid_dim()[0]


@cute.jit
def consumer(full, empty, k_blocks: Int32, tiles_n: Int32, tiles: Int32, tiled_mma, tCrA, tCrB, acc,
             r2s, tRS_sD, tma_d, tDsD, tDgD, is_store_warp):
    """Warpgroup 1: for each tile of this CTA, its wgmmas, then its epilogue."""
    epilogue_barrier = cutlass.pipeline.NamedBarrier(barrier_id=EPILOGUE_BARRIER, num_threads=128)
    tRS_acc = r2s.retile(acc)  # the accumulators, in the order the stmatrix copy takes them
    tRS_rAcc = cute.make_rmem_tensor(tRS_sD.shape, cutlass.Float32)  # ... shaped like its source
    tRS_rD = cute.make_rmem_tensor(tRS_sD.shape, cutlass.BFloat16)
    slot = Int32(0)
    parity = Int32(0)
    tile = cute.arch.block_idx()[0]
    while tile < tiles:
        tiled_mma.set(warpgroup.Field.ACCUMULATE, False)
        for kb in cutlass.range(k_blocks, unroll=1):
            cute.arch.mbarrier_wait(full + slot, parity)
            warpgroup.fence()
            for ka in cutlass.range_constexpr(cute.size(tCrA, mode=[2])):
                cute.gemm(tiled_mma, acc, tCrA[(None, None, ka, slot)], tCrB[(None, None, ka, slot)], acc)
                tiled_mma.set(warpgroup.Field.ACCUMULATE, True)
            warpgroup.commit_group()
            warpgroup.wait_group(0)
            with cute.arch.elect_one():
                cute.arch.mbarrier_arrive(empty + slot)
            slot += 1
            if slot == STAGES:
                slot = Int32(0)
                parity ^= 1

        # 1. The previous tile's store has read the buffer (a no-op on the first tile).
        if is_store_warp:
            cute.arch.cp_async_bulk_wait_group(0, read=True)
        epilogue_barrier.arrive_and_wait()
        # 2. Registers -> shared memory, as bf16.
        # The accumulators run along N first, then down the tile's two 64-row blocks:
        # ((8 values, 8 column steps), 2 row blocks). The copy's source is (8 values, 2
        # row blocks, 8 column steps). Same values, other order: match them up.
        frag, rows, cols = (cute.size(tRS_rAcc, mode=[i]) for i in range(3))
        for m in cutlass.range_constexpr(rows):
            for n in cutlass.range_constexpr(cols):
                for v in cutlass.range_constexpr(frag):
                    tRS_rAcc[v + frag * m + frag * rows * n] = tRS_acc[v + frag * n + frag * cols * m]
        tRS_rD.store(tRS_rAcc.load().to(cutlass.BFloat16))
        cute.copy(r2s, tRS_rD, tRS_sD)
        # 3. Generic-proxy writes made visible to the async proxy, from every thread.
        cute.arch.fence_proxy("async.shared", space="cta")
        epilogue_barrier.arrive_and_wait()
        # 4. One warp stores the tile; nobody waits for it here.
        if is_store_warp:
            cute.copy(tma_d, tDsD, tDgD[(None, tile // tiles_n, tile % tiles_n)])
            cute.arch.cp_async_bulk_commit_group()
        tile += cute.arch.grid_dim()[0]
    if is_store_warp:
        cute.arch.cp_async_bulk_wait_group(0, read=True)  # shared memory outlives the last store's reads


@cute.kernel
def gemm_tma_store_kernel(tiled_mma: cute.TiledMma, tma_a: cute.CopyAtom, mA: cute.Tensor, tma_b: cute.CopyAtom,
                          mB: cute.Tensor, tma_d: cute.CopyAtom, mD: cute.Tensor, a_smem: cute.ComposedLayout,
                          b_smem: cute.ComposedLayout, d_smem: cute.ComposedLayout):
    tidx, _, _ = cute.arch.thread_idx()
    warp = cute.arch.make_warp_uniform(cute.arch.warp_idx())

    storage = cutlass.memory.SmemAllocator().allocate(SharedStorage)
    full = storage.full.data_ptr()
    empty = storage.empty.data_ptr()
    sA = storage.sA.get_tensor(a_smem.outer, swizzle=a_smem.inner)
    sB = storage.sB.get_tensor(b_smem.outer, swizzle=b_smem.inner)
    sD = storage.sD.get_tensor(d_smem.outer, swizzle=d_smem.inner)  # (BM, BN, 1)
    if warp == 0:
        with cute.arch.elect_one():
            for s in cutlass.range_constexpr(STAGES):
                cute.arch.mbarrier_init(full + s, 1)
                cute.arch.mbarrier_init(empty + s, CONSUMER_WARPS)
    cute.arch.mbarrier_init_fence()
    cute.arch.sync_threads()

    gA = cute.local_tile(mA, (BM, BK), (None, None))  # (BM, BK, tiles_m, k_blocks)
    gB = cute.local_tile(mB, (BN, BK), (None, None))
    gD = cute.local_tile(mD, (BM, BN), (None, None))  # (BM, BN, tiles_m, tiles_n), of the TMA view
    k_blocks = cute.size(gA, mode=[3])
    tiles_n = cute.size(gD, mode=[3])
    tiles = cute.size(gD, mode=[2]) * tiles_n
    if warp == 0:
        tAsA, tAgA = cpasync.tma_partition(tma_a, 0, cute.make_layout(1), cute.group_modes(sA, 0, 2),
                                           cute.group_modes(gA, 0, 2))
        tBsB, tBgB = cpasync.tma_partition(tma_b, 0, cute.make_layout(1), cute.group_modes(sB, 0, 2),
                                           cute.group_modes(gB, 0, 2))
        producer(full, empty, k_blocks, tiles_n, tiles, tma_a, tAgA, tAsA, tma_b, tBgB, tBsB)
    if warp >= 4:
        thr_mma = tiled_mma.get_slice(tidx - 128)
        tCrA = tiled_mma.make_fragment_A(thr_mma.partition_A(sA))
        tCrB = tiled_mma.make_fragment_B(thr_mma.partition_B(sB))
        acc = cute.make_rmem_tensor(thr_mma.partition_C(gD)[(None, None, None, 0, 0)].shape, cutlass.Float32)
        # Registers -> shared memory with stmatrix, in the fragment layout of the wgmma.
        r2s = cute.make_tiled_copy_S(
            sm90_helpers.get_smem_store_op(LayoutEnum.ROW_MAJOR, cutlass.BFloat16, cutlass.Float32),
            cute.make_tiled_copy_C_atom(
                cute.make_copy_atom(cute.nvgpu.warp.StMatrix8x8x16bOp(False, 4), cutlass.BFloat16), tiled_mma))
        tRS_sD = r2s.get_slice(tidx - 128).partition_D(sD)[(None, None, None, 0)]
        # The TMA store's view: the buffer, and every tile of D.
        tDsD, tDgD = cpasync.tma_partition(tma_d, 0, cute.make_layout(1), cute.group_modes(sD, 0, 2),
                                           cute.group_modes(cute.local_tile(mD, (BM, BN), (None, None)), 0, 2))
        consumer(full, empty, k_blocks, tiles_n, tiles, tiled_mma, tCrA, tCrB, acc, r2s, tRS_sD,
                 tma_d, tDsD[(None, 0)], tDgD, warp == 4)


@cute.jit
def gemm_tma_store(mA: cute.Tensor, mB: cute.Tensor, mD: cute.Tensor, num_ctas: Int32, stream):
    """D = A @ B^T for bf16 A (M, K), B (N, K), D (M, N); any M, N, K that are multiples of 8."""
    tiled_mma = sm90_helpers.make_trivial_tiled_mma(
        cutlass.BFloat16, cutlass.BFloat16, cute.nvgpu.OperandMajorMode.K, cute.nvgpu.OperandMajorMode.K,
        cutlass.Float32, (1, 1, 1), tiler_mn=(64, BN))
    a_smem = sm90_helpers.make_smem_layout_a(LayoutEnum.ROW_MAJOR, (BM, BN, BK), cutlass.BFloat16, STAGES)
    b_smem = sm90_helpers.make_smem_layout_b(LayoutEnum.ROW_MAJOR, (BM, BN, BK), cutlass.BFloat16, STAGES)
    op = cpasync.CopyBulkTensorTileG2SOp()
    tma_a, mA_tma = cpasync.make_tiled_tma_atom(op, mA, cute.slice_(a_smem, (None, None, 0)), (BM, BK))
    tma_b, mB_tma = cpasync.make_tiled_tma_atom(op, mB, cute.slice_(b_smem, (None, None, 0)), (BN, BK))
    d_smem = sm90_helpers.make_smem_layout_epi(cutlass.BFloat16, LayoutEnum.ROW_MAJOR, (BM, BN), 1)
    tma_d, mD_tma = cpasync.make_tiled_tma_atom(cpasync.CopyBulkTensorTileS2GOp(), mD,
                                                cute.slice_(d_smem, (None, None, 0)), (BM, BN))
    grid = (num_ctas, 1, 1)
    gemm_tma_store_kernel(tiled_mma, tma_a, mA_tma, tma_b, mB_tma, tma_d, mD_tma, a_smem, b_smem, d_smem).launch(
        grid=grid, block=(THREADS, 1, 1), stream=stream)


def build() -> harness.Build:
    m = harness.fake_matrix
    return harness.compile_kernel(gemm_tma_store, m(), m(), m(), Int32(1), harness.fake_stream())


def run(built: harness.Build, m: int = 600, n: int = 328, k: int = 1032) -> str:
    """15 tiles, the last row and column of them cut by the matrix's edge, over 4 CTAs
    and over one CTA per SM."""
    import torch

    a = torch.randn(m, k, device="cuda").to(torch.bfloat16)
    b = torch.randn(n, k, device="cuda").to(torch.bfloat16)
    reference = torch.matmul(a.float(), b.float().t())
    errors = []
    for num_ctas in (4, torch.cuda.get_device_properties(0).multi_processor_count):
        d = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
        built.fn(a, b, d, num_ctas)
        errors.append(harness.relative_error(d, reference))
        assert errors[-1] < 1e-2, f"{num_ctas} CTAs: relative error {errors[-1]:.2e}"
    return f"D = A @ B^T for {m} x {n} x {k} with TMA stores, on 4 CTAs and one per SM: relative errors " + \
        ", ".join(f"{e:.1e}" for e in errors) + "."


if __name__ == "__main__":
    sys.exit(harness.main(build, run, "persistent CTAs storing each tile with TMA", INTRODUCES))
