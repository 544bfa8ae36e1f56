"""Hopper step 2 -- one output tile from one k-block: TMA loads of A and B, wgmma, store.

What changed since step 1, and why
----------------------------------
Step 1 moved one tile through shared memory. A GEMM tile needs two operand tiles and
the tensor cores:

* **two TMA loads on one barrier.** The 128 x 64 tile of A and the 128 x 64 tile of B
  complete on the same mbarrier; ``expect_tx`` announces both (32 KiB), so the phase
  completes only when every byte of both has landed.
* **swizzled shared-memory layouts.** ``wgmma`` reads its operands straight from
  shared memory through descriptors; the 128-byte swizzle (from
  ``hopper_helpers.make_smem_layout_a/b``) is the layout those descriptors describe, and
  TMA writes it as it copies.
* **wgmma.** One warpgroup (4 warps, 128 threads) multiplies the tile. Each
  ``wgmma.mma_async`` instruction is 64 x 128 x 16; the 128 x 128 x 64 tile takes
  2 (rows) x 4 (k16 steps) of them. They are asynchronous: ``wgmma.fence`` before,
  ``commit_group`` after, and ``wait_group 0`` before the accumulators (fp32, in
  registers) may be read.
* **a store from registers.** Each thread converts its accumulators to bf16 and writes
  them to D where the wgmma fragment layout puts them.

It computes D = A @ B^T for A (M, 64) and B (N, 64), both K-major (B as ``nn.Linear``
stores its weight); M and N multiples of 128, and K exactly one k-block of 64. Step 3
loops over K.

Needs: nothing to compile; an SM90 GPU (H100 or H200) to run.
Run:   python examples/ladder/hopper_2_one_wgmma.py
"""

import sys

import cutlass
import cutlass.cute as cute
import cutlass.memory
import cutlass.utils.hopper_helpers as sm90_helpers
from cutlass.cute.nvgpu import cpasync, warpgroup
from cutlass.tensor_utils import LayoutEnum

import harness

BM, BN, BK = 128, 128, 64
THREADS = 128  # one warpgroup
AB_BYTES = (BM + BN) * BK * 2  # what one k-block of A and B brings, bf16
INTRODUCES = ["wgmma.fence", "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16", "wgmma.commit_group",
              "wgmma.wait_group"]


@cute.struct
class SharedStorage:
    barrier: cutlass.Int64
    sA: cute.struct.Align[cute.struct.MemRange[cutlass.BFloat16, BM * BK], 1024]  # 1024: a whole swizzle atom
    sB: cute.struct.Align[cute.struct.MemRange[cutlass.BFloat16, BN * BK], 1024]


@cute.kernel
def gemm_tile_kernel(tiled_mma: cute.TiledMma, tma_a: cute.CopyAtom, mA: cute.Tensor, tma_b: cute.CopyAtom,
                     mB: cute.Tensor, mD: cute.Tensor, a_smem: cute.ComposedLayout, b_smem: cute.ComposedLayout):
    tidx, _, _ = cute.arch.thread_idx()
    tile_m, tile_n, _ = cute.arch.block_idx()
    warp = cute.arch.make_warp_uniform(cute.arch.warp_idx())

    storage = cutlass.memory.SmemAllocator().allocate(SharedStorage)
    barrier = storage.barrier.ptr
    sA = storage.sA.get_tensor(a_smem.outer, swizzle=a_smem.inner)  # (BM, BK, 1)
    sB = storage.sB.get_tensor(b_smem.outer, swizzle=b_smem.inner)  # (BN, BK, 1)
    if warp == 0:
        with cute.arch.elect_one():
            cute.arch.mbarrier_init(barrier, 1)
    cute.arch.mbarrier_init_fence()
    cute.arch.sync_threads()

    # Step 1's handshake, with two copies on the barrier.
    gA = cute.local_tile(mA, (BM, BK), (None, None))  # (BM, BK, tiles_m, k_blocks)
    gB = cute.local_tile(mB, (BN, BK), (None, None))
    tAsA, tAgA = cpasync.tma_partition(tma_a, 0, cute.make_layout(1), cute.group_modes(sA, 0, 2),
                                       cute.group_modes(gA, 0, 2))
    tBsB, tBgB = cpasync.tma_partition(tma_b, 0, cute.make_layout(1), cute.group_modes(sB, 0, 2),
                                       cute.group_modes(gB, 0, 2))
    if warp == 0:
        with cute.arch.elect_one():
            cute.arch.mbarrier_arrive_and_expect_tx(barrier, AB_BYTES)
        cute.copy(tma_a, tAgA[(None, tile_m, 0)], tAsA[(None, 0)], tma_bar_ptr=barrier)
        cute.copy(tma_b, tBgB[(None, tile_n, 0)], tBsB[(None, 0)], tma_bar_ptr=barrier)
    cute.arch.mbarrier_wait(barrier, 0)

    # The warpgroup's view of the operands (wgmma descriptors) and of its output tile.
    thr_mma = tiled_mma.get_slice(tidx)
    tCrA = tiled_mma.make_fragment_A(thr_mma.partition_A(sA))  # (MMA, MMA_M, MMA_K, 1)
    tCrB = tiled_mma.make_fragment_B(thr_mma.partition_B(sB))
    tCgD = thr_mma.partition_C(cute.local_tile(mD, (BM, BN), (tile_m, tile_n)))
    acc = cute.make_rmem_tensor(tCgD.shape, cutlass.Float32)

    # The first wgmma overwrites the accumulators (no zero fill), the rest add to them.
    tiled_mma.set(warpgroup.Field.ACCUMULATE, False)
    warpgroup.fence()  # the accumulator registers are ready to be written by wgmma
    for ka in cutlass.range_constexpr(cute.size(tCrA, mode=[2])):
        cute.gemm(tiled_mma, acc, tCrA[(None, None, ka, 0)], tCrB[(None, None, ka, 0)], acc)
        tiled_mma.set(warpgroup.Field.ACCUMULATE, True)
    warpgroup.commit_group()
    warpgroup.wait_group(0)  # every wgmma of the group has finished: acc may be read

    tCgD.store(acc.load().to(mD.element_type))


@cute.jit
def gemm_one_k_block(mA: cute.Tensor, mB: cute.Tensor, mD: cute.Tensor, stream):
    """D = A @ B^T for bf16 A (M, 64), B (N, 64), D (M, N); M and N multiples of 128."""
    tiled_mma = sm90_helpers.make_trivial_tiled_mma(
        cutlass.BFloat16, cutlass.BFloat16, cute.nvgpu.OperandMajorMode.K, cute.nvgpu.OperandMajorMode.K,
        cutlass.Float32, (1, 1, 1), tiler_mn=(64, BN))
    a_smem = sm90_helpers.make_smem_layout_a(LayoutEnum.ROW_MAJOR, (BM, BN, BK), cutlass.BFloat16, 1)
    b_smem = sm90_helpers.make_smem_layout_b(LayoutEnum.ROW_MAJOR, (BM, BN, BK), cutlass.BFloat16, 1)
    op = cpasync.CopyBulkTensorTileG2SOp()
    tma_a, mA_tma = cpasync.make_tiled_tma_atom(op, mA, cute.slice_(a_smem, (None, None, 0)), (BM, BK))
    tma_b, mB_tma = cpasync.make_tiled_tma_atom(op, mB, cute.slice_(b_smem, (None, None, 0)), (BN, BK))
    grid = (cute.ceil_div(mD.shape[0], BM), cute.ceil_div(mD.shape[1], BN), 1)
    gemm_tile_kernel(tiled_mma, tma_a, mA_tma, tma_b, mB_tma, mD, a_smem, b_smem).launch(
        grid=grid, block=(THREADS, 1, 1), stream=stream)


def build() -> harness.Build:
    m = harness.fake_matrix
    return harness.compile_kernel(gemm_one_k_block, m(), m(), m(), harness.fake_stream())


def run(built: harness.Build, m: int = 256, n: int = 384) -> str:
    import torch

    a = torch.randn(m, BK, device="cuda").to(torch.bfloat16)
    b = torch.randn(n, BK, device="cuda").to(torch.bfloat16)
    d = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    built.fn(a, b, d)
    error = harness.relative_error(d, torch.matmul(a.float(), b.float().t()))
    assert error < 1e-2, f"relative error {error:.2e}"
    return f"D = A @ B^T for {m} x {n} x {BK}: relative error {error:.1e} against torch.matmul."


if __name__ == "__main__":
    sys.exit(harness.main(build, run, "one wgmma tile per CTA", INTRODUCES))
