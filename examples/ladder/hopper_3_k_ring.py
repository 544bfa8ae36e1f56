"""Hopper step 3 -- a K-loop over a ring of shared-memory stages, in one warpgroup.

What changed since step 2, and why
----------------------------------
Step 2 handled one k-block. A real K runs to thousands, and loading each k-block only
when the tensor cores need it would leave them idle for a whole trip to memory each
time. So shared memory becomes a **ring of STAGES slots**, each holding one k-block of
A and B, with one mbarrier per slot (``full[s]``):

* before the loop, the ring is filled: k-blocks 0 .. STAGES-1 are in flight at once;
* k-block ``kb`` lives in slot ``kb % STAGES``. Its barrier completes a phase each
  time the slot is filled, so the wait must name *which* fill: the phase parity
  ``(kb // STAGES) % 2``. The loop keeps (slot, parity) and flips the parity each time
  the slot index wraps to 0 -- the **phase bit** every ring in the library tracks;
* once the wgmmas that read a slot have retired (``wait_group 0``), the same thread
  that loads refills the slot with k-block ``kb + STAGES``.

The one warpgroup does everything, so the "slot is free again" signal is its own
program order: wait for the wgmmas, then a CTA barrier (every warp has passed its
wait), then the refill. That barrier stalls all four warps at every k-block, and the
wgmmas wait for each other too; step 4 gives the loads a warp of their own and
replaces the barrier with an ``empty[s]`` mbarrier per slot.

It computes D = A @ B^T for A (M, K) and B (N, K), K-major; M and N multiples of 128,
K any multiple of 8 (TMA fills the part of the last k-block past K with zeros).

Needs: nothing to compile; an SM90 GPU (H100 or H200) to run.
Run:   python examples/ladder/hopper_3_k_ring.py
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
THREADS = 128
AB_BYTES = (BM + BN) * BK * 2
# The loop waits on full[slot] with a parity held in a register (step 2 waited for a
# constant 0); the loop over k-blocks is a real loop, not unrolled.
INTRODUCES = ["mbarrier.try_wait.parity.shared.b64"]


@cute.struct
class SharedStorage:
    full: cute.struct.MemRange[cutlass.Int64, STAGES]  # one mbarrier per slot
    sA: cute.struct.Align[cute.struct.MemRange[cutlass.BFloat16, BM * BK * STAGES], 1024]
    sB: cute.struct.Align[cute.struct.MemRange[cutlass.BFloat16, BN * BK * STAGES], 1024]


@cute.jit
def load_k_block(barrier, tma_a, gA_box, sA_box, tma_b, gB_box, sB_box):
    """One warp: a k-block of A and B into a slot, completing on that slot's barrier."""
    with cute.arch.elect_one():
        cute.arch.mbarrier_arrive_and_expect_tx(barrier, AB_BYTES)
    cute.copy(tma_a, gA_box, sA_box, tma_bar_ptr=barrier)
    cute.copy(tma_b, gB_box, sB_box, tma_bar_ptr=barrier)


@cute.kernel
def gemm_ring_kernel(tiled_mma: cute.TiledMma, tma_a: cute.CopyAtom, mA: cute.Tensor, tma_b: cute.CopyAtom,
                     mB: cute.Tensor, mD: cute.Tensor, a_smem: cute.ComposedLayout, b_smem: cute.ComposedLayout):
    tidx, _, _ = cute.arch.thread_idx()
    tile_m, tile_n, _ = cute.arch.block_idx()
    warp = cute.arch.make_warp_uniform(cute.arch.warp_idx())

    storage = cutlass.memory.SmemAllocator().allocate(SharedStorage)
    full = storage.full.data_ptr()
    sA = storage.sA.get_tensor(a_smem.outer, swizzle=a_smem.inner)  # (BM, BK, STAGES)
    sB = storage.sB.get_tensor(b_smem.outer, swizzle=b_smem.inner)
    if warp == 0:
        with cute.arch.elect_one():
            for s in cutlass.range_constexpr(STAGES):
                cute.arch.mbarrier_init(full + s, 1)
    cute.arch.mbarrier_init_fence()
    cute.arch.sync_threads()

    gA = cute.local_tile(mA, (BM, BK), (None, None))  # (BM, BK, tiles_m, k_blocks)
    gB = cute.local_tile(mB, (BN, BK), (None, None))
    tAsA, tAgA = cpasync.tma_partition(tma_a, 0, cute.make_layout(1), cute.group_modes(sA, 0, 2),
                                       cute.group_modes(gA, 0, 2))
    tBsB, tBgB = cpasync.tma_partition(tma_b, 0, cute.make_layout(1), cute.group_modes(sB, 0, 2),
                                       cute.group_modes(gB, 0, 2))
    k_blocks = cute.size(gA, mode=[3])

    # Fill the ring: up to STAGES k-blocks in flight before the first wgmma.
    if warp == 0:
        for s in cutlass.range_constexpr(STAGES):
            if s < k_blocks:
                load_k_block(full + s, tma_a, tAgA[(None, tile_m, s)], tAsA[(None, s)],
                             tma_b, tBgB[(None, tile_n, s)], tBsB[(None, s)])

    thr_mma = tiled_mma.get_slice(tidx)
    tCrA = tiled_mma.make_fragment_A(thr_mma.partition_A(sA))  # (MMA, MMA_M, MMA_K, STAGES)
    tCrB = tiled_mma.make_fragment_B(thr_mma.partition_B(sB))
    tCgD = thr_mma.partition_C(cute.local_tile(mD, (BM, BN), (tile_m, tile_n)))
    acc = cute.make_rmem_tensor(tCgD.shape, cutlass.Float32)
    tiled_mma.set(warpgroup.Field.ACCUMULATE, False)

    slot = Int32(0)
    parity = Int32(0)  # the phase of full[slot] that k-block kb's bytes complete
    for kb in cutlass.range(k_blocks, unroll=1):
        cute.arch.mbarrier_wait(full + slot, parity)
        warpgroup.fence()
        for ka in cutlass.range_constexpr(cute.size(tCrA, mode=[2])):
            cute.gemm(tiled_mma, acc, tCrA[(None, None, ka, slot)], tCrB[(None, None, ka, slot)], acc)
            tiled_mma.set(warpgroup.Field.ACCUMULATE, True)
        warpgroup.commit_group()
        warpgroup.wait_group(0)
        # Every warp has seen its wgmmas on this slot retire: the slot may be refilled.
        cute.arch.sync_threads()
        if warp == 0:
            if kb + STAGES < k_blocks:
                load_k_block(full + slot, tma_a, tAgA[(None, tile_m, kb + STAGES)], tAsA[(None, slot)],
                             tma_b, tBgB[(None, tile_n, kb + STAGES)], tBsB[(None, slot)])
        slot += 1
        if slot == STAGES:  # the ring wraps: the next fill of each slot is the next phase
            slot = Int32(0)
            parity ^= 1

    tCgD.store(acc.load().to(mD.element_type))


@cute.jit
def gemm_k_ring(mA: cute.Tensor, mB: cute.Tensor, mD: cute.Tensor, stream):
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
    gemm_ring_kernel(tiled_mma, tma_a, mA_tma, tma_b, mB_tma, mD, a_smem, b_smem).launch(
        grid=grid, block=(THREADS, 1, 1), stream=stream)


def build() -> harness.Build:
    m = harness.fake_matrix
    return harness.compile_kernel(gemm_k_ring, m(), m(), m(), harness.fake_stream())


def run(built: harness.Build, m: int = 256, n: int = 384, k: int = 1000) -> str:
    import torch

    a = torch.randn(m, k, device="cuda").to(torch.bfloat16)
    b = torch.randn(n, k, device="cuda").to(torch.bfloat16)
    d = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    built.fn(a, b, d)
    error = harness.relative_error(d, torch.matmul(a.float(), b.float().t()))
    assert error < 1e-2, f"relative error {error:.2e}"
    return f"D = A @ B^T for {m} x {n} x {k} through a {STAGES}-stage ring: relative error {error:.1e}."


if __name__ == "__main__":
    sys.exit(harness.main(build, run, f"a K-loop over a {STAGES}-stage ring", INTRODUCES))
