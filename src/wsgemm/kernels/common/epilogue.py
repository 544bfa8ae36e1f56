"""Epilogue steps that both kernels share: shared memory -> global memory through TMA."""

from __future__ import annotations

import cutlass
import cutlass.cute as cute


@cute.jit
def tma_store_subtile(tma_d, smem_buffer, gmem_subtile, barrier, is_store_warp, epi_stages: cutlass.Constexpr):
    """Store one epilogue sub-tile that every epilogue thread has just written to
    ``smem_buffer`` (one of ``epi_stages`` rotating buffers).

    st.shared/stmatrix write through the generic proxy and the TMA store reads through
    the async proxy, so each thread fences before the barrier that makes all rows
    visible; one warp then issues the store. Its bulk-group wait keeps at most
    ``epi_stages - 1`` stores reading shared memory, so the buffer written next is
    free once the second barrier passes.
    """
    cute.arch.fence_proxy("async.shared", space="cta")
    barrier.arrive_and_wait()
    if is_store_warp:
        cute.copy(tma_d, smem_buffer, gmem_subtile)
        cute.arch.cp_async_bulk_commit_group()
        cute.arch.cp_async_bulk_wait_group(epi_stages - 1, read=True)
    barrier.arrive_and_wait()
