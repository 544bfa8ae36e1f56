"""How a torch tensor becomes a kernel operand: which mode is contiguous, its leading
dimension and batch stride, and when a copy is needed because TMA cannot read it.

The kernels see every operand as a batch of ``rows x cols`` matrices: A as
``M x K``, B as ``N x K`` (the transpose of torch's ``K x N``), D as ``M x N``.
TMA needs one unit-stride mode, the base address and every other stride a multiple
of 16 bytes, and strides that do not overlap rows (see ``hardware.TMA_ALIGNMENT_BYTES``).
A layout that breaks a rule is copied into a row-contiguous buffer whose leading
dimension is padded to the next multiple of 16 bytes (the kernels never read the
padding: TMA treats columns past ``cols`` as out of bounds).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .hardware import TMA_ALIGNMENT_BYTES


def round_up(x: int, multiple: int) -> int:
    return (x + multiple - 1) // multiple * multiple


@dataclass(frozen=True)
class MatrixOperand:
    """A (batches, rows, cols) operand as the kernel reads or writes it."""

    tensor: torch.Tensor  # what the kernel touches (the input, or a padded copy)
    cols_contiguous: bool  # True: unit stride along cols (K for A/B, N for D)
    ld: int  # stride, in elements, of the other mode
    batch_stride: int
    copied: bool  # tensor is a copy of the caller's

    @property
    def data_ptr(self) -> int:
        return self.tensor.data_ptr()


def _alignment_elems(t: torch.Tensor) -> int:
    return TMA_ALIGNMENT_BYTES // t.element_size()


def describe(t: torch.Tensor) -> MatrixOperand | None:
    """The TMA view of a (batches, rows, cols) tensor, or ``None`` if TMA can't read it."""
    batches, rows, cols = t.shape
    s_batch, s_rows, s_cols = t.stride()
    align = _alignment_elems(t)
    if t.data_ptr() % TMA_ALIGNMENT_BYTES:
        return None
    for cols_contiguous in (True, False):
        unit_stride, unit_extent = (s_cols, cols) if cols_contiguous else (s_rows, rows)
        other_stride, other_extent = (s_rows, rows) if cols_contiguous else (s_cols, cols)
        if unit_stride != 1 and unit_extent != 1:
            continue
        # A mode of extent 1 has no meaningful stride: give it one TMA accepts.
        ld = other_stride if other_extent > 1 else round_up(unit_extent, align)
        bstride = s_batch if batches > 1 else ld * other_extent
        # Zero strides (expanded tensors) and misaligned ones have no tensor map.
        if ld <= 0 or ld % align or bstride <= 0 or bstride % align:
            continue
        return MatrixOperand(t, cols_contiguous, ld, bstride, copied=False)
    return None


def padded_empty(batches: int, rows: int, cols: int, dtype: torch.dtype, device) -> torch.Tensor:
    """An uninitialised (batches, rows, cols) view whose rows start 16-byte aligned."""
    align = TMA_ALIGNMENT_BYTES // torch.empty((), dtype=dtype).element_size()
    storage = torch.empty((batches, rows, round_up(cols, align)), dtype=dtype, device=device)
    return storage[:, :, :cols]


def as_operand(t: torch.Tensor) -> MatrixOperand:
    """TMA view of ``t``; copies into a padded row-contiguous buffer when needed."""
    view = describe(t)
    if view is not None:
        return view
    copy = padded_empty(*t.shape, dtype=t.dtype, device=t.device)
    copy.copy_(t)
    view = describe(copy)
    assert view is not None, "a padded row-contiguous buffer is always TMA-readable"
    return MatrixOperand(copy, view.cols_contiguous, view.ld, view.batch_stride, copied=True)
