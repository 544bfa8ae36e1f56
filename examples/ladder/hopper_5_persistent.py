"""Hopper step 5 -- persistence: a fixed grid of CTAs that loop over the output tiles.

What changed since step 4, and why
----------------------------------
Step 4 launches one CTA per output tile, and each CTA pays its set-up (barrier
initialisation, descriptor fetches) and its ramp (the ring fills from empty, the
consumer waits for the first loads) once per tile; its consumer stores while its
producer has nothing left to load. Here the grid has ``num_ctas`` CTAs -- one per SM
is the usual choice -- and CTA ``c`` takes tiles ``c, c + num_ctas, c + 2 num_ctas, ...``
(``%nctaid.x`` in the PTX: the tile loop steps by the grid's size):

* both roles walk **the same tile sequence**, so each k-block the producer loads is the
  one the consumer expects next;
* the ring's position (slot, parity) **carries on across tiles**: it is initialised
  once, before the tile loop, not per tile. Tile t+1's first k-block goes into the
  slot after tile t's last, and its parity is whatever the lap count says;
* the producer runs on into the next tile's k-blocks while the consumer is still
  storing the last tile's accumulators: the next tile's loads overlap this tile's
  epilogue, which step 4 could not do.

The tile scheduler here is the simplest one (row by row over the tiles); the
library's (src/wsgemm/kernels/common/scheduler.py) adds clusters, a swizzled raster
for L2 reuse, and split-K / stream-K pieces of tiles.

It computes D = A @ B^T for A (M, K) and B (N, K), K-major; M and N multiples of 128,
K any multiple of 8.

Needs: nothing to compile; an SM90 GPU (H100 or H200) to run.
Run:   python examples/ladder/hopper_5_persistent.py
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
# The tile loop's stride: the number of CTAs in the grid.
INTRODUCES = ["%nctaid.x"]


@cute.struct
class SharedStorage:
    full: cute.struct.MemRange[cutlass.Int64, STAGES]  # the slot's bytes have landed
    empty: cute.struct.MemRange[cutlass.Int64, STAGES]  # the slot's wgmmas have retired
    sA: cute.struct.Align[cute.struct.MemRange[cutlass.BFloat16, BM * BK * STAGES], 1024]
    sB: cute.struct.Align[cute.struct.MemRange[cutlass.BFloat16, BN * BK * STAGES], 1024]


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
def consumer(full, empty, k_blocks: Int32, tiles_n: Int32, tiles: Int32, tiled_mma, tCrA, tCrB, tCgD):
    """Warpgroup 1: for each tile of this CTA, its wgmmas, then its store."""
    acc = cute.make_rmem_tensor(tCgD[(None, None, None, 0, 0)].shape, cutlass.Float32)
    slot = Int32(0)
    parity = Int32(0)
    tile = cute.arch.block_idx()[0]
    while tile < tiles:
        tiled_mma.set(warpgroup.Field.ACCUMULATE, False)  # a new tile: overwrite, do not add
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
        # Meanwhile the producer is already loading the next tile's first k-blocks.
        tCgD[(None, None, None, tile // tiles_n, tile % tiles_n)].store(acc.load().to(tCgD.element_type))
        tile += cute.arch.grid_dim()[0]


@cute.kernel
def gemm_persistent_kernel(tiled_mma: cute.TiledMma, tma_a: cute.CopyAtom, mA: cute.Tensor, tma_b: cute.CopyAtom,
                           mB: cute.Tensor, mD: cute.Tensor, a_smem: cute.ComposedLayout,
                           b_smem: cute.ComposedLayout):
    tidx, _, _ = cute.arch.thread_idx()
    warp = cute.arch.make_warp_uniform(cute.arch.warp_idx())

    storage = cutlass.memory.SmemAllocator().allocate(SharedStorage)
    full = storage.full.data_ptr()
    empty = storage.empty.data_ptr()
    sA = storage.sA.get_tensor(a_smem.outer, swizzle=a_smem.inner)
    sB = storage.sB.get_tensor(b_smem.outer, swizzle=b_smem.inner)
    if warp == 0:
        with cute.arch.elect_one():
            for s in cutlass.range_constexpr(STAGES):
                cute.arch.mbarrier_init(full + s, 1)
                cute.arch.mbarrier_init(empty + s, CONSUMER_WARPS)
    cute.arch.mbarrier_init_fence()
    cute.arch.sync_threads()

    gA = cute.local_tile(mA, (BM, BK), (None, None))  # (BM, BK, tiles_m, k_blocks)
    gB = cute.local_tile(mB, (BN, BK), (None, None))
    gD = cute.local_tile(mD, (BM, BN), (None, None))  # (BM, BN, tiles_m, tiles_n)
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
        consumer(full, empty, k_blocks, tiles_n, tiles, tiled_mma, tCrA, tCrB, thr_mma.partition_C(gD))


@cute.jit
def gemm_persistent(mA: cute.Tensor, mB: cute.Tensor, mD: cute.Tensor, num_ctas: Int32, stream):
    """D = A @ B^T for bf16 A (M, K), B (N, K), D (M, N); M and N multiples of 128."""
    tiled_mma = sm90_helpers.make_trivial_tiled_mma(
        cutlass.BFloat16, cutlass.BFloat16, cute.nvgpu.OperandMajorMode.K, cute.nvgpu.OperandMajorMode.K,
        cutlass.Float32, (1, 1, 1), tiler_mn=(64, BN))
    a_smem = sm90_helpers.make_smem_layout_a(LayoutEnum.ROW_MAJOR, (BM, BN, BK), cutlass.BFloat16, STAGES)
    b_smem = sm90_helpers.make_smem_layout_b(LayoutEnum.ROW_MAJOR, (BM, BN, BK), cutlass.BFloat16, STAGES)
    op = cpasync.CopyBulkTensorTileG2SOp()
    tma_a, mA_tma = cpasync.make_tiled_tma_atom(op, mA, cute.slice_(a_smem, (None, None, 0)), (BM, BK))
    tma_b, mB_tma = cpasync.make_tiled_tma_atom(op, mB, cute.slice_(b_smem, (None, None, 0)), (BN, BK))
    grid = (num_ctas, 1, 1)  # whatever the problem size: each CTA loops over tiles
    gemm_persistent_kernel(tiled_mma, tma_a, mA_tma, tma_b, mB_tma, mD, a_smem, b_smem).launch(
        grid=grid, block=(THREADS, 1, 1), stream=stream)


def build() -> harness.Build:
    m = harness.fake_matrix
    return harness.compile_kernel(gemm_persistent, m(), m(), m(), Int32(1), harness.fake_stream())


def run(built: harness.Build, m: int = 640, n: int = 384, k: int = 1032) -> str:
    """15 tiles over 4 CTAs (3 or 4 tiles each, the ring carried across them) and over
    one CTA per SM (most CTAs idle)."""
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
    return f"D = A @ B^T for {m} x {n} x {k} on 4 persistent CTAs and on one per SM: relative errors " + \
        ", ".join(f"{e:.1e}" for e in errors) + "."


if __name__ == "__main__":
    sys.exit(harness.main(build, run, "persistent CTAs looping over the tiles", INTRODUCES))
