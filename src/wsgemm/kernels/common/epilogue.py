"""Epilogue steps that both kernels share: shared memory -> global memory through TMA."""

from __future__ import annotations

import cutlass
import cutlass.cute as cute


@cute.jit
def tma_store_subtile(tma_d, smem_buffer, gmem_subtile, barrier, is_store_warp, epi_stages: cutlass.Constexpr,
                      wait_after_store: cutlass.Constexpr = True):
    """Store one epilogue sub-tile that every epilogue thread has just written to
    ``smem_buffer`` (one of ``epi_stages`` rotating buffers).

    st.shared/stmatrix write through the generic proxy and the TMA store reads through
    the async proxy, so each thread fences before the barrier that makes all rows
    visible; one warp then issues the store. With ``wait_after_store`` its bulk-group
    wait keeps at most ``epi_stages - 1`` stores reading shared memory, so the buffer
    written next is free once the second barrier passes; without it the caller runs
    :func:`wait_for_free_buffer` before writing the next buffer.
    """
    cute.arch.fence_proxy("async.shared", space="cta")
    barrier.arrive_and_wait()
    if is_store_warp:
        cute.copy(tma_d, smem_buffer, gmem_subtile)
        cute.arch.cp_async_bulk_commit_group()
        if cutlass.const_expr(wait_after_store):
            cute.arch.cp_async_bulk_wait_group(epi_stages - 1, read=True)
    if cutlass.const_expr(wait_after_store):
        barrier.arrive_and_wait()


@cute.jit
def wait_for_free_buffer(barrier, is_store_warp, epi_stages: cutlass.Constexpr):
    """Before the epilogue threads write the next sub-tile: the store warp waits until
    at most ``epi_stages - 1`` of its stores still read shared memory (the buffer about
    to be written was read by the oldest), and the barrier holds the other threads
    until it has. Later than the wait in :func:`tma_store_subtile`, so the conversion
    of the sub-tile, or a whole mainloop after a tile's last one, overlaps the store."""
    if is_store_warp:
        cute.arch.cp_async_bulk_wait_group(epi_stages - 1, read=True)
    barrier.arrive_and_wait()
