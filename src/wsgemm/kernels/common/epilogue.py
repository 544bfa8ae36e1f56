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


# GELU's tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
GELU_TANH_SCALE = 0.7978845608028654  # sqrt(2 / pi)
GELU_TANH_CUBIC = 0.044715
INV_SQRT2 = 0.7071067811865476


# erf by Abramowitz and Stegun's 7.1.26: within 1.5e-7 of erf everywhere, with one
# exp, one reciprocal and five FMAs; libdevice's erff holds more values live, and a
# tile of 192 accumulators per thread then spilled registers.
ERF_P = 0.3275911
ERF_COEFFICIENTS = (1.061405429, -1.453152027, 1.421413741, -0.284496736, 0.254829592)


@cute.jit
def erf(x: cutlass.Float32) -> cutlass.Float32:
    ax = cute.math.absf(x)
    t = cute.arch.rcp_approx(1.0 + ERF_P * ax)
    poly = cutlass.Float32(ERF_COEFFICIENTS[0])
    for c in cutlass.range_constexpr(1, len(ERF_COEFFICIENTS)):
        poly = poly * t + ERF_COEFFICIENTS[c]
    y = 1.0 - poly * t * cute.math.exp(-ax * ax, fastmath=True)
    return cute.math.copysign(y, x)


@cute.jit
def activate(x: cutlass.Float32, activation: cutlass.Constexpr) -> cutlass.Float32:
    """``activation`` (one of ``config.ACTIVATIONS``) of one fp32 value."""
    y = x
    if cutlass.const_expr(activation == "relu"):
        y = cute.arch.fmax(x, cutlass.Float32(0.0))
    elif cutlass.const_expr(activation == "gelu"):
        y = 0.5 * x * (1.0 + erf(x * INV_SQRT2))
    elif cutlass.const_expr(activation == "gelu_tanh"):
        # tanh.approx.f32: relative error about 2^-11, below a bf16/fp16 output's rounding.
        inner = GELU_TANH_SCALE * (x + GELU_TANH_CUBIC * x * x * x)
        y = 0.5 * x * (1.0 + cute.math.tanh(inner, approx=True))
    elif cutlass.const_expr(activation == "silu"):
        y = x * cute.arch.rcp_approx(1.0 + cute.math.exp(-x, fastmath=True))
    return y


@cute.jit
def stage_bias(bias_tile: cute.Tensor, bias: cute.Tensor, batch, origin, extent, tidx, threads: cutlass.Constexpr,
               barrier):
    """Copy a tile's stretch of the bias, ``bias[batch, origin:origin + len]``, into
    ``bias_tile`` (fp32, shared memory), ``threads`` threads of the epilogue at once,
    then meet at ``barrier``. Every thread then reads its values at offsets fixed at
    compile time: read from global memory instead, each value needs its own clamped
    64-bit address, and a 128x192 tile's accumulators then spill. Elements past the
    edge repeat the last value (their results are never stored)."""
    length = cute.size(bias_tile)
    for i in cutlass.range_constexpr((length + threads - 1) // threads):
        j = tidx + i * threads
        if j < length:
            bias_tile[j] = bias[batch, cutlass.min(origin + j, extent - 1)].to(cutlass.Float32)
    barrier.arrive_and_wait()


@cute.jit
def fuse_epilogue(acc: cute.Tensor, coords: cute.Tensor, bias: cute.Tensor, alpha: cutlass.Float32, limit,
                  epilogue: cutlass.Constexpr, clamp: cutlass.Constexpr):
    """``acc[i] = act(alpha * acc[i] + bias[...])`` in place, once per accumulator, in
    fp32 before the one conversion to the output dtype (``config.Epilogue``).

    ``coords``: the (m, n, ...) of each accumulator, partitioned exactly as ``acc`` is.
    ``bias``: the 1-D vector the coordinate along the bias's axis (n, or m for a bias
    along the kernel's M) indexes. With ``clamp`` (a vector in global memory, indexed
    by D's coordinates) the index stops at ``limit - 1``: rows and columns past D's
    edge hold values the TMA store clips, and every load stays in bounds.
    """
    axis = 1 if cutlass.const_expr(epilogue.bias == "n") else 0
    for i in cutlass.range_constexpr(cute.size(acc)):
        x = acc[i]
        if cutlass.const_expr(epilogue.scaled):
            x = x * alpha
        if cutlass.const_expr(epilogue.bias != ""):
            j = coords[i][axis]
            if cutlass.const_expr(clamp):
                j = cutlass.min(j, limit - 1)
            x = x + bias[j].to(cutlass.Float32)
        acc[i] = activate(x, epilogue.activation)
