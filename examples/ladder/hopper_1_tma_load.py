"""Hopper step 1 -- one TMA load, completed by one mbarrier.

What this step adds (the first one: there is nothing before it)
---------------------------------------------------------------
The smallest asynchronous copy a GEMM kernel is built from. Each CTA copies one
64 x 64 tile of X into shared memory with the Tensor Memory Accelerator (TMA,
``cp.async.bulk.tensor``), waits for it on an mbarrier, and copies the tile back out
to Y with ordinary loads and stores: Y = X.

Why an mbarrier: the TMA copy runs on its own, after the issuing thread has moved on.
Its completion is counted in *bytes* on an mbarrier in shared memory:

1. one thread initialises the barrier with an arrival count of 1 (``mbarrier.init``);
2. one thread arrives on it and announces how many bytes will land
   (``mbarrier.arrive.expect_tx``): the barrier's phase now waits for 8192 bytes;
3. the same thread issues the copy, naming the barrier (``.mbarrier::complete_tx``):
   the copy engine counts the bytes down as they land;
4. every thread waits until phase 0 has completed (``mbarrier.try_wait.parity`` with
   parity 0, in a loop): then the tile is in shared memory and visible to it.

Every later step keeps this handshake; what changes is how many barriers there are,
who waits on them and how the parity is tracked.

Needs: nothing to compile; an SM90 GPU (H100 or H200) to run.
Run:   python examples/ladder/hopper_1_tma_load.py
"""

import sys

import cutlass
import cutlass.memory
import cutlass.cute as cute
from cutlass.cute.nvgpu import cpasync

import harness

TILE = (64, 64)  # a tile of bf16: 64 rows of 128 bytes
TILE_BYTES = TILE[0] * TILE[1] * 2
THREADS = 128
INTRODUCES = ["cp.async.bulk.tensor.2d.shared::cta.global", "mbarrier::complete_tx",
              "mbarrier.arrive.expect_tx",
              "mbarrier.try_wait.parity"]


@cute.struct
class SharedStorage:
    barrier: cutlass.Int64  # an mbarrier is one 8-byte word of shared memory
    tile: cute.struct.Align[cute.struct.MemRange[cutlass.BFloat16, TILE[0] * TILE[1]], 128]


@cute.kernel
def copy_tile_kernel(tma: cute.CopyAtom, mX_tma: cute.Tensor, mY: cute.Tensor, smem_layout: cute.Layout):
    tidx, _, _ = cute.arch.thread_idx()
    tile_m, tile_n, _ = cute.arch.block_idx()
    warp = cute.arch.make_warp_uniform(cute.arch.warp_idx())

    storage = cutlass.memory.SmemAllocator().allocate(SharedStorage)
    barrier = storage.barrier.ptr
    sX = storage.tile.get_tensor(smem_layout)

    # 1. One thread initialises the barrier: one arrival completes a phase (once the
    #    announced bytes have landed too). The fence and the CTA barrier make the
    #    initialised word visible to the copy engine and to every thread.
    if warp == 0:
        with cute.arch.elect_one():
            cute.arch.mbarrier_init(barrier, 1)
    cute.arch.mbarrier_init_fence()
    cute.arch.sync_threads()

    # The tile of X this CTA copies, as the TMA unit addresses it, and the matching
    # shared-memory tile.
    gX = cute.local_tile(mX_tma, TILE, (None, None))  # (64, 64, tiles_m, tiles_n)
    sX_box, gX_boxes = cpasync.tma_partition(tma, 0, cute.make_layout(1), cute.group_modes(sX, 0, 2),
                                             cute.group_modes(gX, 0, 2))

    # 2 and 3. One warp announces the bytes and issues the copy.
    if warp == 0:
        with cute.arch.elect_one():
            cute.arch.mbarrier_arrive_and_expect_tx(barrier, TILE_BYTES)
        cute.copy(tma, gX_boxes[(None, tile_m, tile_n)], sX_box, tma_bar_ptr=barrier)

    # 4. Everybody waits for the barrier's first phase (parity 0) to complete.
    cute.arch.mbarrier_wait(barrier, 0)

    # The tile is in shared memory: copy it out, each thread a strided share of it.
    gY = cute.local_tile(mY, TILE, (tile_m, tile_n))
    for i in cutlass.range_constexpr(TILE[0] * TILE[1] // THREADS):
        row = (tidx + i * THREADS) // TILE[1]
        col = (tidx + i * THREADS) % TILE[1]
        gY[row, col] = sX[row, col]


@cute.jit
def copy_tiles(mX: cute.Tensor, mY: cute.Tensor, stream):
    """Y = X for bf16 matrices whose sides are multiples of 64."""
    # A plain row-major tile in shared memory (no swizzle: nothing reads it but us).
    smem_layout = cute.make_layout(TILE, stride=(TILE[1], 1))
    # The TMA descriptor: X's address, sizes and strides, and the box it copies.
    tma, mX_tma = cpasync.make_tiled_tma_atom(cpasync.CopyBulkTensorTileG2SOp(), mX, smem_layout, TILE)
    grid = (cute.ceil_div(mY.shape[0], TILE[0]), cute.ceil_div(mY.shape[1], TILE[1]), 1)
    copy_tile_kernel(tma, mX_tma, mY, smem_layout).launch(grid=grid, block=(THREADS, 1, 1), stream=stream)


def build() -> harness.Build:
    return harness.compile_kernel(copy_tiles, harness.fake_matrix(), harness.fake_matrix(), harness.fake_stream())


def run(built: harness.Build, m: int = 256, n: int = 512) -> str:
    """Copy a random X on the GPU into a NaN-filled Y and check Y == X."""
    import torch

    x = torch.randn(m, n, device="cuda").to(torch.bfloat16)
    y = torch.full_like(x, float("nan"))
    built.fn(x, y)
    torch.cuda.synchronize()
    assert torch.equal(x, y), "the copied tile differs from X"
    return f"Y = X for a {m} x {n} matrix: {m * n // (TILE[0] * TILE[1])} tiles, each one TMA load and one mbarrier."


if __name__ == "__main__":
    sys.exit(harness.main(build, run, "a tiled copy through shared memory", INTRODUCES))
