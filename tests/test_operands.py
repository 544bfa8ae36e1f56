"""Which torch layouts the kernels read directly, and which are copied (CPU tensors suffice)."""

import pytest
import torch

from wsgemm.operands import readable, readable_view, tma_major, writable_major, writable_view


def test_row_major_is_cols_contiguous():
    assert tma_major(torch.randn(3, 64, 32, dtype=torch.bfloat16)) == "cols"
    assert tma_major(torch.randn(64, 32, dtype=torch.bfloat16)) == "cols"


def test_transposed_view_is_rows_contiguous_without_copy():
    w = torch.randn(48, 64, dtype=torch.float16)  # (N, K) like nn.Linear.weight
    assert tma_major(w.t()) == "rows"
    view, copied = readable(w.t().unsqueeze(0))
    assert not copied and view.data_ptr() == w.data_ptr()


def test_single_row_gets_an_aligned_stride():
    # (1, 1, 8): torch reports strides TMA would reject for the unit modes.
    t = torch.randn(8, dtype=torch.bfloat16).view(1, 1, 8)
    view = readable_view(t)
    assert view is not None and view.stride()[1] % 8 == 0 and view.stride()[0] % 8 == 0
    assert torch.equal(view, t)


def test_unsqueezed_column_major_matrix_keeps_its_memory():
    a = torch.randn(64, 24, dtype=torch.bfloat16).t()[:13]  # (13, 64) column-major, leading dim 24
    a3 = a.unsqueeze(0)  # torch gives the batch mode stride 13: not a multiple of 8 elements
    assert tma_major(a3) is None
    view = readable_view(a3)
    assert view is not None and view.data_ptr() == a.data_ptr() and tma_major(view) == "rows"


@pytest.mark.parametrize(
    "make",
    [
        lambda: torch.randn(1, 5, 13, dtype=torch.bfloat16),  # row pitch 26 B: not a multiple of 16
        lambda: torch.randn(1, 8, 64, dtype=torch.bfloat16)[:, :, ::2],  # no unit stride
        lambda: torch.randn(1, 1, 64, dtype=torch.bfloat16).expand(1, 8, 64),  # zero stride
        lambda: torch.randn(1, 8, 65, dtype=torch.bfloat16)[:, :, 1:],  # base not 16-byte aligned
        lambda: torch.randn(8, 64, dtype=torch.bfloat16).unsqueeze(0).expand(3, 8, 64),  # zero batch stride
    ],
    ids=["odd-pitch", "strided", "expanded", "misaligned-base", "broadcast-batch"],
)
def test_unreadable_layouts_are_copied_into_a_padded_buffer(make):
    t = make()
    assert readable_view(t) is None
    copy, copied = readable(t)
    assert copied and tma_major(copy) == "cols"
    assert copy.stride(1) % 8 == 0 and copy.stride(1) >= t.shape[2]
    assert torch.equal(copy, t)  # same values, readable layout


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_outputs_are_stored_in_place_only_if_their_rows_end_on_16_byte_boundaries(dtype):
    """TMA stores whole 16-byte chunks: a view whose rows end between two boundaries
    would be written past its end, over its neighbour's columns."""
    wide = torch.empty(64, 1104, dtype=dtype)  # 16-byte aligned row pitch either way
    ragged = 1100 if dtype == torch.bfloat16 else 1102  # 2200 or 4408 bytes
    assert tma_major(wide[:, :ragged]) == "cols"  # readable as an operand...
    assert writable_major(wide[:, :ragged]) is None  # ...but not a result to store into in place
    assert writable_major(wide[:, :1096]) == "cols"
    assert writable_major(wide.t()[:ragged]) is None  # the same columns, column-major
    assert writable_major(wide.t()[:1096]) == "rows"
    assert writable_view(wide[:, :ragged].unsqueeze(0)) is None
    view = writable_view(wide[:, :1096].unsqueeze(0))
    assert view is not None and view.data_ptr() == wide.data_ptr()
