"""Hopper step 4 -- warp specialization: a producer warp, a consumer warpgroup, full[s] and empty[s].

What changed since step 3, and why
----------------------------------
In step 3 the warpgroup that multiplies also loads, so at every k-block all four warps
stop at a CTA barrier before the slot they just read can be refilled. Here the CTA
gets a second warpgroup and each has one **role**:

* the **producer** (warpgroup 0; only its warp 0 works) loops over the k-blocks:
  wait until slot ``s`` is empty, announce its bytes on ``full[s]``, issue the TMA
  copies. It runs ahead of the consumer by up to STAGES k-blocks, on its own;
* the **consumer** (warpgroup 1) loops over the same k-blocks: wait on ``full[s]``,
  issue the wgmmas, wait for them to retire, and **release** the slot: one arrival
  per consumer warp on ``empty[s]`` (initialised with a count of 4).

Two barriers per slot, and each role waits on one and arrives on the other. The
producer's first lap finds every slot empty without anybody having released it: it
waits for the parity of the phase *before* the barrier's first (parity 1), which an
mbarrier reports as complete. So the producer starts at parity 1 and the consumer at
parity 0, and each flips its own when its slot index wraps.

The release comes *after* ``wgmma.wait_group``: the wgmmas read shared memory
asynchronously, and a slot released before they retire could be overwritten under
them (tests/test_release_order.py checks the library's kernel for this order).

Still one output tile per CTA; step 5 makes the CTAs persistent.

It computes D = A @ B^T for A (M, K) and B (N, K), K-major; M and N multiples of 128,
K any multiple of 8.

Needs: nothing to compile; an SM90 GPU (H100 or H200) to run.
Run:   python examples/ladder/hopper_4_warp_specialized.py
"""

import sys

import cutlass
import cutlass.cute as cute
import cutlass.memory
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
# The consumer's release: a plain arrive on empty[s] (steps 1-3 only ever arrived
# with expect_tx, from the thread that loads).
INTRODUCES = ["mbarrier.arrive.shared.b64"]


@cute.struct
class SharedStorage:
    full: cute.struct.MemRange[cutlass.Int64, STAGES]  # the slot's bytes have landed
    empty: cute.struct.MemRange[cutlass.Int64, STAGES]  # the slot's wgmmas have retired
    sA: cute.struct.Align[cute.struct.MemRange[cutlass.BFloat16, BM * BK * STAGES], 1024]
    sB: cute.struct.Align[cute.struct.MemRange[cutlass.BFloat16, BN * BK * STAGES], 1024]


@cute.jit
def producer(full, empty, k_blocks: Int32, tma_a, gA_boxes, sA_boxes, tma_b, gB_boxes, sB_boxes):
    """Warp 0: every k-block of this tile into the ring, as fast as slots free up."""
    slot = Int32(0)
    parity = Int32(1)  # the phase before empty[s]'s first: complete, so lap 0 never waits
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
def consumer(full, empty, k_blocks: Int32, tiled_mma, tCrA, tCrB, acc):
    """Warpgroup 1: the wgmmas of every k-block, each slot released once they retired."""
    tiled_mma.set(warpgroup.Field.ACCUMULATE, False)
    slot = Int32(0)
    parity = Int32(0)
    for kb in cutlass.range(k_blocks, unroll=1):
        cute.arch.mbarrier_wait(full + slot, parity)
        warpgroup.fence()
        for ka in cutlass.range_constexpr(cute.size(tCrA, mode=[2])):
            cute.gemm(tiled_mma, acc, tCrA[(None, None, ka, slot)], tCrB[(None, None, ka, slot)], acc)
            tiled_mma.set(warpgroup.Field.ACCUMULATE, True)
        warpgroup.commit_group()
        warpgroup.wait_group(0)
        with cute.arch.elect_one():  # one arrival per warp: empty[s] completes at 4
            cute.arch.mbarrier_arrive(empty + slot)
        slot += 1
        if slot == STAGES:
            slot = Int32(0)
            parity ^= 1


@cute.kernel
def gemm_ws_kernel(tiled_mma: cute.TiledMma, tma_a: cute.CopyAtom, mA: cute.Tensor, tma_b: cute.CopyAtom,
                   mB: cute.Tensor, mD: cute.Tensor, a_smem: cute.ComposedLayout, b_smem: cute.ComposedLayout):
    tidx, _, _ = cute.arch.thread_idx()
    tile_m, tile_n, _ = cute.arch.block_idx()
    warp = cute.arch.make_warp_uniform(cute.arch.warp_idx())

    storage = cutlass.memory.SmemAllocator().allocate(SharedStorage)
    full = storage.full.data_ptr()
    empty = storage.empty.data_ptr()
    sA = storage.sA.get_tensor(a_smem.outer, swizzle=a_smem.inner)
    sB = storage.sB.get_tensor(b_smem.outer, swizzle=b_smem.inner)
    if warp == 0:
        with cute.arch.elect_one():
            for s in cutlass.range_constexpr(STAGES):
                cute.arch.mbarrier_init(full + s, 1)  # the producer's expect_tx arrival
                cute.arch.mbarrier_init(empty + s, CONSUMER_WARPS)
    cute.arch.mbarrier_init_fence()
    cute.arch.sync_threads()

    gA = cute.local_tile(mA, (BM, BK), (None, None))
    gB = cute.local_tile(mB, (BN, BK), (None, None))
    k_blocks = cute.size(gA, mode=[3])
    if warp == 0:
        tAsA, tAgA = cpasync.tma_partition(tma_a, 0, cute.make_layout(1), cute.group_modes(sA, 0, 2),
                                           cute.group_modes(gA, 0, 2))
        tBsB, tBgB = cpasync.tma_partition(tma_b, 0, cute.make_layout(1), cute.group_modes(sB, 0, 2),
                                           cute.group_modes(gB, 0, 2))
        producer(full, empty, k_blocks, tma_a, tAgA[(None, tile_m, None)], tAsA,
                 tma_b, tBgB[(None, tile_n, None)], tBsB)
    if warp >= 4:
        thr_mma = tiled_mma.get_slice(tidx - 128)
        tCrA = tiled_mma.make_fragment_A(thr_mma.partition_A(sA))
        tCrB = tiled_mma.make_fragment_B(thr_mma.partition_B(sB))
        tCgD = thr_mma.partition_C(cute.local_tile(mD, (BM, BN), (tile_m, tile_n)))
        acc = cute.make_rmem_tensor(tCgD.shape, cutlass.Float32)
        consumer(full, empty, k_blocks, tiled_mma, tCrA, tCrB, acc)
        tCgD.store(acc.load().to(mD.element_type))


@cute.jit
def gemm_warp_specialized(mA: cute.Tensor, mB: cute.Tensor, mD: cute.Tensor, stream):
    """D = A @ B^T for bf16 A (M, K), B (N, K), D (M, N); M and N multiples of 128."""
    tiled_mma = sm90_helpers.make_trivial_tiled_mma(
        cutlass.BFloat16, cutlass.BFloat16, cute.nvgpu.OperandMajorMode.K, cute.nvgpu.OperandMajorMode.K,
        cutlass.Float32, (1, 1, 1), tiler_mn=(64, BN))
    a_smem = sm90_helpers.make_smem_layout_a(LayoutEnum.ROW_MAJOR, (BM, BN, BK), cutlass.BFloat16, STAGES)
    b_smem = sm90_helpers.make_smem_layout_b(LayoutEnum.ROW_MAJOR, (BM, BN, BK), cutlass.BFloat16, STAGES)
    op = cpasync.CopyBulkTensorTileG2SOp()
    tma_a, mA_tma = cpasync.make_tiled_tma_atom(op, mA, cute.slice_(a_smem, (None, None, 0)), (BM, BK))
    tma_b, mB_tma = cpasync.make_tiled_tma_atom(op, mB, cute.slice_(b_smem, (None, None, 0)), (BN, BK))
    grid = (cute.ceil_div(mD.shape[0], BM), cute.ceil_div(mD.shape[1], BN), 1)
    gemm_ws_kernel(tiled_mma, tma_a, mA_tma, tma_b, mB_tma, mD, a_smem, b_smem).launch(
        grid=grid, block=(THREADS, 1, 1), stream=stream)


def build() -> harness.Build:
    m = harness.fake_matrix
    return harness.compile_kernel(gemm_warp_specialized, m(), m(), m(), harness.fake_stream())


def run(built: harness.Build, m: int = 384, n: int = 256, k: int = 2056) -> str:
    import torch

    a = torch.randn(m, k, device="cuda").to(torch.bfloat16)
    b = torch.randn(n, k, device="cuda").to(torch.bfloat16)
    d = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    built.fn(a, b, d)
    error = harness.relative_error(d, torch.matmul(a.float(), b.float().t()))
    assert error < 1e-2, f"relative error {error:.2e}"
    return f"D = A @ B^T for {m} x {n} x {k}, producer warp and consumer warpgroup: relative error {error:.1e}."


if __name__ == "__main__":
    sys.exit(harness.main(build, run, "a producer warp feeding a consumer warpgroup", INTRODUCES))
