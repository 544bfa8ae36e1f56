"""Which torch layouts the kernels read directly, and which are copied (CPU tensors suffice)."""

import pytest
import torch

from wsgemm.operands import as_operand, describe


def test_row_major_is_cols_contiguous():
    t = torch.randn(3, 64, 32, dtype=torch.bfloat16)
    op = describe(t)
    assert op.cols_contiguous and op.ld == 32 and op.batch_stride == 64 * 32 and not op.copied


def test_transposed_view_is_rows_contiguous_without_copy():
    w = torch.randn(1, 48, 64, dtype=torch.float16)  # (L, N, K) row-major weight
    b = w.transpose(1, 2)  # (L, K, N) view
    op = describe(b)
    assert op is not None and not op.cols_contiguous and op.ld == 64


def test_single_row_gets_an_aligned_leading_dimension():
    op = describe(torch.randn(1, 1, 8, dtype=torch.bfloat16))
    assert op.cols_contiguous and op.ld == 8


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
    assert describe(t) is None
    op = as_operand(t)
    assert op.copied and op.cols_contiguous
    assert op.ld % 8 == 0 and op.ld >= t.shape[2]
    assert torch.equal(op.tensor, t)  # same values, readable layout
