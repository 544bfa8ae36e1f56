"""How a torch tensor becomes a kernel operand: which mode is contiguous, and when a
copy is needed because TMA cannot read it.

The compiled kernels take operands in torch's own layouts -- A (M, K), B (K, N),
D (M, N), with a leading batch mode when batched -- and need one unit-stride mode,
the base address and every other stride a non-zero multiple of 16 bytes
(``hardware.TMA_ALIGNMENT_BYTES``). The compiled signature states exactly these
rules and the TVM-FFI call checks them; :func:`tma_major` is the same rule on the
Python side. A layout that breaks it is copied into a buffer whose rows are padded
to the next multiple of 16 bytes (the kernels never read the padding: TMA treats
columns past ``cols`` as out of bounds). An output must also end its rows (or
columns) on a 16-byte boundary (:func:`writable_major`), else the kernel computes into
such a padded buffer, which is then copied into it.
"""

from __future__ import annotations

import torch

from .hardware import TMA_ALIGNMENT_BYTES


def round_up(x: int, multiple: int) -> int:
    return (x + multiple - 1) // multiple * multiple


def alignment_elems(dtype: torch.dtype) -> int:
    return TMA_ALIGNMENT_BYTES // torch.empty((), dtype=dtype).element_size()


def tma_major(t: torch.Tensor) -> str | None:
    """``"cols"`` or ``"rows"`` -- which of the last two modes has unit stride -- if the
    kernels can read ``t`` as it is, else ``None``. Columns win when both qualify."""
    if t.data_ptr() % TMA_ALIGNMENT_BYTES:
        return None
    align = alignment_elems(t.dtype)
    strides = t.stride()
    batch_ok = t.dim() == 2 or (strides[0] > 0 and strides[0] % align == 0)
    if not batch_ok:
        return None
    s_rows, s_cols = strides[-2], strides[-1]
    if s_cols == 1 and s_rows > 0 and s_rows % align == 0:
        return "cols"
    if s_rows == 1 and s_cols > 0 and s_cols % align == 0:
        return "rows"
    return None


def readable_view(t: torch.Tensor) -> torch.Tensor | None:
    """A view of a 3-D ``t`` that the kernels can read without a copy, or ``None``.

    Modes of extent 1 have no meaningful stride; torch may report one TMA rejects
    (e.g. the batch stride of ``x.unsqueeze(0)``), so give them one it accepts.
    """
    batches, rows, cols = t.shape
    s_batch, s_rows, s_cols = t.stride()
    align = alignment_elems(t.dtype)
    if rows == 1:
        s_rows = round_up(cols, align) if s_cols == 1 else s_rows
    if cols == 1:
        s_cols = round_up(rows, align) if s_rows == 1 else s_cols
    if batches == 1:
        s_batch = max(s_rows * rows, s_cols * cols)
    view = t.as_strided(t.shape, (s_batch, s_rows, s_cols)) if (s_batch, s_rows, s_cols) != t.stride() else t
    return view if tma_major(view) is not None else None


def writable_major(t: torch.Tensor) -> str | None:
    """:func:`tma_major` of an output the kernels may store into in place: TMA stores
    whole 16-byte chunks, so the extent of the unit-stride mode must also fill whole
    chunks, or each row (column) is written past its end up to the next 16-byte
    boundary, over whatever lies there (on an H200, zeros landed in the four columns
    past N = 1100 of a view into a wider tensor; Triton issue 11583 documents the same
    hardware behaviour)."""
    major = tma_major(t)
    if major is None:
        return None
    extent = t.shape[-1] if major == "cols" else t.shape[-2]
    return major if extent % alignment_elems(t.dtype) == 0 else None


def writable_view(t: torch.Tensor) -> torch.Tensor | None:
    """A view of a 3-D output the kernels can store into in place, or ``None``
    (:func:`readable_view` and :func:`writable_major`)."""
    view = readable_view(t)
    return view if view is not None and writable_major(view) is not None else None


def padded_empty(batches: int, rows: int, cols: int, dtype: torch.dtype, device) -> torch.Tensor:
    """An uninitialised (batches, rows, cols) view whose rows start 16-byte aligned."""
    storage = torch.empty((batches, rows, round_up(cols, alignment_elems(dtype))), dtype=dtype, device=device)
    return storage[:, :, :cols]


def readable(t: torch.Tensor) -> tuple[torch.Tensor, bool]:
    """A 3-D view the kernels can read, copying into a padded buffer if needed.
    Returns (tensor, copied)."""
    view = readable_view(t)
    if view is not None:
        return view, False
    copy = padded_empty(*t.shape, dtype=t.dtype, device=t.device)
    copy.copy_(t)
    return copy, True
