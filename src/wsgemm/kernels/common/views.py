"""From the tensors the caller passes to the views the kernels tile.

The compiled kernels take PyTorch's own layouts -- A (M, K), B (K, N), D (M, N), each
with a leading batch mode L when batched -- so the host passes torch tensors through
without building views (each torch view op costs about a microsecond of Python).
Inside the kernel's host function these become the (rows, cols, batch) views the
kernels tile: A as (M, K, L), B as (N, K, L), D as (M, N, L). Only layouts change;
no data moves.
"""

from __future__ import annotations

import cutlass.cute as cute


def _with_unit_batch(t: cute.Tensor) -> cute.Tensor:
    """(R, C) -> (R, C, 1). The batch stride of a single matrix is never used to
    address memory, but TMA wants it non-zero and 16-byte aligned: the product of the
    two extents-times-strides is, because one of the strides is the aligned leading
    dimension."""
    (rows, cols), (s_rows, s_cols) = t.layout.shape, t.layout.stride
    batch_stride = (s_rows * rows) * (s_cols * cols)
    return cute.make_tensor(t.iterator, cute.make_layout((rows, cols, 1), stride=(s_rows, s_cols, batch_stride)))


def gemm_views(mA: cute.Tensor, mB: cute.Tensor, mD: cute.Tensor, batched: bool):
    """(M, K, L), (N, K, L), (M, N, L) views of torch-layout A, B and D."""
    if batched:  # (L, M, K), (L, K, N), (L, M, N)
        a = cute.make_tensor(mA.iterator, cute.select(mA.layout, mode=[1, 2, 0]))
        b = cute.make_tensor(mB.iterator, cute.select(mB.layout, mode=[2, 1, 0]))
        d = cute.make_tensor(mD.iterator, cute.select(mD.layout, mode=[1, 2, 0]))
        return a, b, d
    b_nk = cute.make_tensor(mB.iterator, cute.select(mB.layout, mode=[1, 0]))
    return _with_unit_batch(mA), _with_unit_batch(b_nk), _with_unit_batch(mD)
