"""What the quantized matmul kernels (``qmatmul``'s two and the Gluon one of ``qmatmul_hopper``) share: where a tile
lies, its per-row and per-column terms and its float64 requantization, so that all compute the same operations in
the same order and give the same bits. A tile computes its terms from the scales and zero points it reads, and marks
the bad scales among them in the device's error word, so that a call is one launch when B is prepared."""

from __future__ import annotations

import triton
import triton.language as tl

# Both kernels take one list of arguments (``qmatmul._tile_arguments``), as flat parameters rather than tuples:
# Triton 3.6 specializes every integer inside a tuple argument (a value of 1 becomes a constant, a multiple of 16 is
# marked so) whatever ``do_not_specialize`` says, which would compile a kernel per shape class. These are the
# integers left unspecialized, so that one compiled kernel serves every size.
KERNEL_ARGUMENTS_NOT_SPECIALIZED = [
    "M", "K", "channels", "num_tiles", "a_rows_b", "a_rows_c", "b_rows_b", "b_rows_c", "a_sums_stride",
    "b_sums_stride", "b_scale_stride", "b_zero_stride", "b_zero_mask", "b_shift", "a_scale_stride", "out_scale_stride",
    "a_zero_stride", "out_zero_stride", "a_zero_mask", "out_zero_mask", "a_shift", "low", "high"]


@triton.jit
def _tile_place(tile, tiles, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GROUP_M: tl.constexpr):
    """Where a tile lies: (batch b, channel c, row tile, column tile, A's first row, B's row of column 0 of this
    batch and channel). Groups of GROUP_M row tiles walk the columns together, so that B's tiles are reused from L2."""
    M, N, channels, a_rows_b, a_rows_c, b_rows_b, b_rows_c = tiles
    tiles_m, tiles_n = tl.cdiv(M, BLOCK_M), tl.cdiv(N, BLOCK_N)
    tiles_per_matrix = tiles_m * tiles_n
    batch = tile // tiles_per_matrix
    within = tile % tiles_per_matrix
    first_m = within // (GROUP_M * tiles_n) * GROUP_M
    group_m = min(tiles_m - first_m, GROUP_M)
    tile_m, tile_n = first_m + within % group_m, within % (GROUP_M * tiles_n) // group_m
    b, c = batch // channels, batch % channels
    return b, c, tile_m, tile_n, b * a_rows_b + c * a_rows_c + tile_m * BLOCK_M, b * b_rows_b + c * b_rows_c


@triton.jit
def _mark_bad_scales(scale, mask, bit, errors_ptr):
    """Sets ``bit`` in the device's error word (read by ``qmatmul.check_errors``, so that no call waits for the host)
    where a scale of ``scale`` (loaded where ``mask``) is zero, NaN or infinite. No atomic runs where all are good."""
    bad = mask & ((scale == 0) | (scale != scale) | (tl.abs(scale) == float("inf")))
    marks = bad.to(tl.int32)  # tensors in the layout of ``scale``, which Gluon callers choose
    tl.atomic_or(errors_ptr + marks * 0, marks * bit, mask=bad)


@triton.jit
def _row_terms(in_tile, tile_m, a_row, b, c, row_args, ROW_SCALES: tl.constexpr, BLOCK_M: tl.constexpr):
    """The per-row terms of the tile's rows tile_m·BLOCK_M + in_tile (``in_tile``: 0 … BLOCK_M − 1, in the layout
    the epilogue wants), whose A rows start at a_row, for ``_requantize_columns``; marks their bad A and output
    scales (error bits 1 and 4)."""
    (M, a_sums_ptr, a_sums_stride, a_scale_ptr, a_scale_stride, out_scale_ptr, out_scale_stride, a_zero_ptr,
     a_zero_stride, a_zero_mask, a_shift, out_zero_ptr, out_zero_stride, out_zero_mask, low, high, out_ptr, stride_ob,
     stride_oc, stride_om, errors_ptr) = row_args
    offs_m = (tile_m * BLOCK_M + in_tile).to(tl.int64)  # 64-bit: strides may be large
    mask_m = offs_m < M
    za = (tl.load(a_zero_ptr + offs_m * a_zero_stride, mask=mask_m, other=0).to(tl.int32) & a_zero_mask) - a_shift
    zo = tl.load(out_zero_ptr + offs_m * out_zero_stride, mask=mask_m, other=0).to(tl.int32) & out_zero_mask
    a_sums = tl.load(a_sums_ptr + (a_row + in_tile) * a_sums_stride, mask=mask_m, other=0.0)
    a_scale = tl.load(a_scale_ptr + offs_m * a_scale_stride, mask=mask_m, other=1.0)
    out_scale = tl.load(out_scale_ptr + offs_m * out_scale_stride, mask=mask_m, other=1.0)
    _mark_bad_scales(a_scale, mask_m, 1, errors_ptr)
    _mark_bad_scales(out_scale, mask_m, 4, errors_ptr)
    if ROW_SCALES:
        a_scale = a_scale.to(tl.float64)
        out_scale = out_scale.to(tl.float64)
    else:  # the column terms hold the whole multiplier
        a_scale = 1.0
        out_scale = 1.0
    # Clamping to the integers [lo − zo, hi − zo] before rounding equals clamping after adding zo.
    return (za.to(tl.float64), a_sums, a_scale, out_scale, zo, (low - zo).to(tl.float64), (high - zo).to(tl.float64),
            out_ptr + b.to(tl.int64) * stride_ob + c.to(tl.int64) * stride_oc + offs_m * stride_om, mask_m)


@triton.jit
def _b_zero_points(offs_n, mask_n, b_zero_ptr, b_zero_stride, b_zero_mask, b_shift):
    """zb'[n] of the columns offs_n (int64), in int32: the zero point's int8 bits ``& b_zero_mask``, less B's shift."""
    return (tl.load(b_zero_ptr + offs_n * b_zero_stride, mask=mask_n, other=0).to(tl.int32) & b_zero_mask) - b_shift


@triton.jit
def _column_scales(offs_n, column_args):
    """What the terms of the columns offs_n (int64) are computed from, as read from memory: B's scales, zb' (int32)
    and the first A and output scales. ``qmatmul``'s kernel reads them before its main loop, whose time hides the
    reads' latency, and computes the terms after it."""
    (N, K, b_sums_stride, b_scale_ptr, b_scale_stride, b_zero_ptr, b_zero_stride, b_zero_mask, b_shift, a_scale_ptr,
     out_scale_ptr, errors_ptr, stride_on) = column_args
    mask_n = offs_n < N
    return (tl.load(b_scale_ptr + offs_n * b_scale_stride, mask=mask_n, other=1.0),
            _b_zero_points(offs_n, mask_n, b_zero_ptr, b_zero_stride, b_zero_mask, b_shift), tl.load(a_scale_ptr),
            tl.load(out_scale_ptr))


@triton.jit
def _column_terms(scales, offs_n, b_sums_ptr, column_args, ROW_SCALES: tl.constexpr):
    """The per-column terms of the columns offs_n (int64), for ``_requantize_columns``, in float64, from their
    ``_column_scales``: the multiplier (sa·sb[n])/so when the A and output scales are per tensor (sb[n] otherwise:
    the rows' scales join it there), zb' and B's column sums (of the batch and channel at ``b_sums_ptr``); marks the
    bad B scales among them (error bit 2)."""
    (N, K, b_sums_stride, b_scale_ptr, b_scale_stride, b_zero_ptr, b_zero_stride, b_zero_mask, b_shift, a_scale_ptr,
     out_scale_ptr, errors_ptr, stride_on) = column_args
    b_scale, zb, a_scale, out_scale = scales
    mask_n = offs_n < N
    _mark_bad_scales(b_scale, mask_n, 2, errors_ptr)
    multiplier = b_scale.to(tl.float64)
    if not ROW_SCALES:
        multiplier = (a_scale.to(tl.float64) * multiplier) / out_scale.to(tl.float64)
    return multiplier, zb.to(tl.float64), tl.load(b_sums_ptr + offs_n * b_sums_stride, mask=mask_n, other=0.0)


@triton.jit
def _requantize_columns(acc, offs_n, rows, columns, column_args, ROW_SCALES: tl.constexpr):
    """Requantize and store acc, the tile's columns offs_n (int64); ``rows`` holds the tile's per-row terms,
    ``columns`` those of the columns (``_column_terms``). Elementwise operations only: the Gluon kernel calls it
    too, with offs_n, rows and columns in its accumulator's layout."""
    N, K, stride_on = column_args[0], column_args[1], column_args[-1]
    za, a_sums, a_scale, out_scale, zo, low, high, out_rows, mask_m = rows
    multiplier, zb, b_sums = columns
    mask_n = offs_n < N
    multiplier = multiplier[None, :]
    # Σ(A' − za')(B' − zb') = Σ A'B' − za'·(Σ B' − K·zb') − zb'·Σ A', every term an integer below 2^53
    y = acc.to(tl.float64) - za[:, None] * (b_sums - K * zb)[None, :] - a_sums[:, None] * zb[None, :]
    if ROW_SCALES:
        multiplier = (a_scale[:, None] * multiplier) / out_scale[:, None]
    y = y * multiplier
    y = tl.minimum(tl.maximum(y, low[:, None]), high[:, None])
    rounded = (y + 6755399441055744.0).to(tl.int64, bitcast=True).to(tl.int32)  # + 1.5·2^52: half to even
    tl.store(out_rows[:, None] + offs_n[None, :] * stride_on, (rounded + zo[:, None]).to(tl.int8),
             mask=mask_m[:, None] & mask_n[None, :])
