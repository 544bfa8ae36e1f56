"""A persistent Triton matmul, the Triton column of ``benchmarks/suite.py``.

``matmul(a, b)``: (M, K) @ (K, N) or (L, M, K) @ (L, K, N), fp16/bf16 in and out,
fp32 accumulation, any strides (``b = w.t()`` included). One program per SM walks
the output tiles (grouped along M so the tiles running together share operands in
L2). Two kernels:

- ``tma``: operands read and the result written through TMA tensor descriptors made
  on the device (``tl.make_tensor_descriptor``, where the installed Triton has it,
  on compute capability >= 9.0) when every operand has a unit-stride dimension and
  16-byte aligned strides and base;
- ``pointers``: plain masked ``tl.load``/``tl.store`` with explicit strides, for
  every other layout and Triton version.

Triton is optional: without it ``available()`` is False and ``matmul`` raises.
"""

from __future__ import annotations

import torch

try:
    import triton
    import triton.language as tl
except ImportError:  # the suite reports "not installed"
    triton = None

TMA_ALIGNMENT_BYTES = 16  # TMA base address and non-unit strides (cuTensorMapEncodeTiled)


def available() -> bool:
    return triton is not None and torch.cuda.is_available()


def _has_tensor_descriptors() -> bool:
    return available() and hasattr(tl, "make_tensor_descriptor") and hasattr(triton, "set_allocator")


def _configs() -> list:
    # Few on purpose: each is compiled and timed on the first call of every shape.
    # 128x256 for large problems, 128x128 / 64x128 for mid-size ones, 64x64 with a
    # deep K block for few tokens (more tiles along N to spread over the SMs).
    shapes = [(128, 256, 64, 3, 8), (128, 128, 64, 4, 8), (64, 128, 64, 4, 4), (64, 64, 128, 4, 4)]
    return [
        triton.Config({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": 8}, num_stages=s, num_warps=w)
        for bm, bn, bk, s, w in shapes
    ]


if triton is not None:

    @triton.jit
    def _tile_coords(tile_id, tiles_m, tiles_n, GROUP_M: tl.constexpr):
        """(batch, tile row, tile column) of a linear tile id. Within a batch entry,
        bands of GROUP_M tile rows are walked column by column, so consecutive tiles
        share B columns and the band's A rows stay in L2."""
        tiles_per_batch = tiles_m * tiles_n
        batch = tile_id // tiles_per_batch
        t = tile_id % tiles_per_batch
        tiles_per_band = GROUP_M * tiles_n
        first_row = (t // tiles_per_band) * GROUP_M
        band_rows = tl.minimum(tiles_m - first_row, GROUP_M)
        in_band = t % tiles_per_band
        return batch, first_row + in_band % band_rows, in_band // band_rows

    @triton.autotune(configs=_configs(), key=["L", "M", "N", "K"])
    @triton.jit
    def _matmul_pointers(
        a_ptr, b_ptr, c_ptr, L, M, N, K,
        s_al, s_am, s_ak, s_bl, s_bk, s_bn, s_cl, s_cm, s_cn,
        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
        GROUP_M: tl.constexpr, NUM_SMS: tl.constexpr,
    ):
        tiles_m = tl.cdiv(M, BLOCK_M)
        tiles_n = tl.cdiv(N, BLOCK_N)
        for tile_id in tl.range(tl.program_id(0), L * tiles_m * tiles_n, NUM_SMS):
            batch, tile_m, tile_n = _tile_coords(tile_id, tiles_m, tiles_n, GROUP_M)
            batch = batch.to(tl.int64)  # batch * batch stride can pass 2^31 elements
            rows = tile_m * BLOCK_M + tl.arange(0, BLOCK_M)
            cols = tile_n * BLOCK_N + tl.arange(0, BLOCK_N)
            ks = tl.arange(0, BLOCK_K)
            a_tile = a_ptr + batch * s_al + rows[:, None] * s_am + ks[None, :] * s_ak
            b_tile = b_ptr + batch * s_bl + ks[:, None] * s_bk + cols[None, :] * s_bn
            acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
            for k0 in range(0, K, BLOCK_K):
                a = tl.load(a_tile, mask=(rows[:, None] < M) & (ks[None, :] < K - k0), other=0.0)
                b = tl.load(b_tile, mask=(ks[:, None] < K - k0) & (cols[None, :] < N), other=0.0)
                acc = tl.dot(a, b, acc)
                a_tile += BLOCK_K * s_ak
                b_tile += BLOCK_K * s_bk
            c_tile = c_ptr + batch * s_cl + rows[:, None] * s_cm + cols[None, :] * s_cn
            tl.store(c_tile, acc.to(c_ptr.dtype.element_ty), mask=(rows[:, None] < M) & (cols[None, :] < N))

    @triton.jit
    def _descriptor(ptr, L, rows, cols, s_batch, s_row, BATCHED: tl.constexpr,
                    BLOCK_ROWS: tl.constexpr, BLOCK_COLS: tl.constexpr):
        """A TMA descriptor over a (rows, cols) matrix with unit column stride, or
        over L of them; out-of-range elements read as zero and are not written."""
        if BATCHED:
            desc = tl.make_tensor_descriptor(ptr, shape=[L, rows, cols], strides=[s_batch, s_row, 1],
                                             block_shape=[1, BLOCK_ROWS, BLOCK_COLS])
        else:
            desc = tl.make_tensor_descriptor(ptr, shape=[rows, cols], strides=[s_row, 1],
                                             block_shape=[BLOCK_ROWS, BLOCK_COLS])
        return desc

    @triton.jit
    def _load_block(desc, batch, row, col, BATCHED: tl.constexpr,
                    BLOCK_ROWS: tl.constexpr, BLOCK_COLS: tl.constexpr):
        if BATCHED:
            block = desc.load([batch, row, col]).reshape(BLOCK_ROWS, BLOCK_COLS)
        else:
            block = desc.load([row, col])
        return block

    @triton.autotune(configs=_configs(), key=["L", "M", "N", "K", "A_K_MAJOR", "B_K_MAJOR"])
    @triton.jit
    def _matmul_tma(
        a_ptr, b_ptr, c_ptr, L, M, N, K,
        s_al, s_a_outer, s_bl, s_b_outer, s_cl, s_cm,
        A_K_MAJOR: tl.constexpr, B_K_MAJOR: tl.constexpr, BATCHED: tl.constexpr,
        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
        GROUP_M: tl.constexpr, NUM_SMS: tl.constexpr,
    ):
        # A is (M, K) with unit K stride (K-major) or (K, M) with unit M stride, B
        # (N, K) or (K, N) likewise; the MMA reads a transposed block in place.
        if A_K_MAJOR:
            a_desc = _descriptor(a_ptr, L, M, K, s_al, s_a_outer, BATCHED, BLOCK_M, BLOCK_K)
        else:
            a_desc = _descriptor(a_ptr, L, K, M, s_al, s_a_outer, BATCHED, BLOCK_K, BLOCK_M)
        if B_K_MAJOR:
            b_desc = _descriptor(b_ptr, L, N, K, s_bl, s_b_outer, BATCHED, BLOCK_N, BLOCK_K)
        else:
            b_desc = _descriptor(b_ptr, L, K, N, s_bl, s_b_outer, BATCHED, BLOCK_K, BLOCK_N)
        c_desc = _descriptor(c_ptr, L, M, N, s_cl, s_cm, BATCHED, BLOCK_M, BLOCK_N)
        tiles_m = tl.cdiv(M, BLOCK_M)
        tiles_n = tl.cdiv(N, BLOCK_N)
        for tile_id in tl.range(tl.program_id(0), L * tiles_m * tiles_n, NUM_SMS):
            batch, tile_m, tile_n = _tile_coords(tile_id, tiles_m, tiles_n, GROUP_M)
            off_m = tile_m * BLOCK_M
            off_n = tile_n * BLOCK_N
            acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
            for k0 in range(0, K, BLOCK_K):
                if A_K_MAJOR:
                    a = _load_block(a_desc, batch, off_m, k0, BATCHED, BLOCK_M, BLOCK_K)
                else:
                    a = _load_block(a_desc, batch, k0, off_m, BATCHED, BLOCK_K, BLOCK_M).T
                if B_K_MAJOR:
                    b = _load_block(b_desc, batch, off_n, k0, BATCHED, BLOCK_N, BLOCK_K).T
                else:
                    b = _load_block(b_desc, batch, k0, off_n, BATCHED, BLOCK_K, BLOCK_N)
                acc = tl.dot(a, b, acc)
            c = acc.to(c_ptr.dtype.element_ty)
            if BATCHED:
                c_desc.store([batch, off_m, off_n], c.reshape(1, BLOCK_M, BLOCK_N))
            else:
                c_desc.store([off_m, off_n], c)


def _unit_stride_dim(t: torch.Tensor) -> int | None:
    """-1 if the last dim has unit stride, -2 if the one before does, else None."""
    for dim in (-1, -2):
        if t.stride(dim) == 1:
            return dim
    return None


def _tma_compatible(t: torch.Tensor) -> bool:
    dim = _unit_stride_dim(t)
    if dim is None or t.data_ptr() % TMA_ALIGNMENT_BYTES:
        return False
    other_strides = [t.stride(d) for d in range(t.dim()) if d != t.dim() + dim]
    # A zero stride (a broadcast operand) is no valid tensor-map stride.
    return all(s > 0 and s * t.element_size() % TMA_ALIGNMENT_BYTES == 0 for s in other_strides)


def kernel_for(a: torch.Tensor, b: torch.Tensor) -> str:
    """Which kernel ``matmul(a, b)`` runs: "tma" or "pointers"."""
    n = b.shape[-1]
    # The output is allocated row-major; TMA stores need its row stride aligned too.
    out_ok = n * a.element_size() % TMA_ALIGNMENT_BYTES == 0
    use_tma = (
        _has_tensor_descriptors()
        and torch.cuda.get_device_capability(a.device)[0] >= 9
        and out_ok
        and _tma_compatible(a)
        and _tma_compatible(b)
    )
    return "tma" if use_tma else "pointers"


def _scratch_for_descriptors(size: int, alignment: int, stream):
    # Device-side TMA descriptors are written to global memory that Triton asks for
    # at launch; the caching allocator makes this cheap and CUDA-graph safe.
    return torch.empty(size, device="cuda", dtype=torch.int8)


def matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    if not available():
        raise RuntimeError("Triton is not installed (or no CUDA device): benchmarks/triton_matmul.py cannot run")
    if a.dim() != b.dim() or a.dim() not in (2, 3):
        raise ValueError(f"a and b must both be 2-D or both 3-D, got {tuple(a.shape)} and {tuple(b.shape)}")
    if a.shape[-1] != b.shape[-2] or a.shape[:-2] != b.shape[:-2]:
        raise ValueError(f"cannot multiply {tuple(a.shape)} by {tuple(b.shape)}")
    if a.dtype != b.dtype or a.dtype not in (torch.float16, torch.bfloat16):
        raise ValueError(f"a and b must both be float16 or both bfloat16, got {a.dtype} and {b.dtype}")
    batched = a.dim() == 3
    a3, b3 = (a, b) if batched else (a.unsqueeze(0), b.unsqueeze(0))
    L, M, K = a3.shape
    N = b3.shape[-1]
    c3 = torch.empty(L, M, N, device=a.device, dtype=a.dtype)
    num_sms = torch.cuda.get_device_properties(a.device).multi_processor_count

    def grid(meta):
        tiles = L * triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"])
        return (min(num_sms, tiles),)

    if kernel_for(a, b) == "tma":
        triton.set_allocator(_scratch_for_descriptors)
        a_k_major = _unit_stride_dim(a3) == -1
        b_k_major = _unit_stride_dim(b3) == -2
        _matmul_tma[grid](
            a3, b3, c3, L, M, N, K,
            a3.stride(0), a3.stride(1) if a_k_major else a3.stride(2),
            b3.stride(0), b3.stride(2) if b_k_major else b3.stride(1),
            c3.stride(0), c3.stride(1),
            A_K_MAJOR=a_k_major, B_K_MAJOR=b_k_major, BATCHED=batched, NUM_SMS=num_sms,
        )
    else:
        _matmul_pointers[grid](
            a3, b3, c3, L, M, N, K,
            *a3.stride(), *b3.stride(), *c3.stride(),
            NUM_SMS=num_sms,
        )
    return c3 if batched else c3[0]
