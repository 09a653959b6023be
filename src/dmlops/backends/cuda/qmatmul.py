"""DML_OPERATOR_QUANTIZED_LINEAR_MATRIX_MULTIPLY on int8 tensor cores, bit for bit with the CPU backend.

The kernel computes what ``dmlops.ops.quantized_matmul.reference`` means, in these steps:

- **int8 only.** Tensor cores multiply int8 by int8. A uint8 operand runs as int8 shifted by −128 (``x ^ 0x80`` is
  ``x − 128`` as int8), and its zero point moves with it, so that Σ (A − za)(B − zb) = Σ (A' − za')(B' − zb') with
  A' = A − 128 and za' = za − 128 for uint8 A (likewise B). Expanded:
  Σ A'B' − za'·(Σ_k B' − K·zb') − zb'·Σ_k A': the tensor-core product plus the column sums of B' (needed when za'
  can be non-zero) and the row sums of A' (when zb' can be).
- **K-major operands.** int8 tensor-core instructions read both operands with K contiguous, so B {…, K, N} is
  repacked to {…, N, K} (flipped to int8 on the way): once at initialization when B is OWNED_BY_DML (``persist_b``),
  else per call unless B already is int8 with stride 1 on K. A is read where it lies when K is contiguous and
  its rows are 16-byte aligned, as the tensor memory accelerator (TMA) wants; otherwise it is packed too.
- **Exact sums.** The int32 accumulator is exact while K·128·128 < 2^31; for longer K the kernel adds int32 partial
  products of K_SLICE-long slices in float64, where every integer below 2^53 is exact (|Σ| < 2^48 here).
- **The float64 epilogue** follows ``requantize`` operation by operation, each IEEE-rounded once: multiplier =
  (sa·sb)/so (``div.rn.f64``), y = acc·multiplier. Clamping y to the integers [lo − zo, hi − zo] before rounding
  gives what clamping after gives; then y + 1.5·2^52 rounds y half to even, and its low 32 bits are that integer.
  The compiler may fuse a multiply and an add into one FMA only where the multiply's result is added directly: that
  happens in the zero-point corrections alone, whose every value is an exact integer, never to a rounded product.
  Each tile computes the terms of its rows and columns from the scales and zero points it reads, and marks a zero,
  NaN or infinite scale among them on the device (``check_errors``): with B prepared and A read where it lies, a
  call is one launch.
- **Few rows** (M ≤ 16, LLM decoding): reading B is the work, and a tile per program leaves most SMs idle when N is
  small. ``_split_k_kernel`` splits K among programs as well (into up to ``split_k`` programs per SM), reads A where it
  lies (masked rows, padded to 16), folds −zb'·Σ_k A' into each program's int32 partial (|Σ A'(B' − zb')| ≤
  K·128·255 < 2^31), and adds the partials with int32 atomics into a kept workspace: integer addition is
  associative, so the sum, and the output, do not depend on the order. The tile's last program (a ticket counter
  says which) requantizes with the same helpers, then clears the workspace and its ticket for the next call.
- **On Hopper** (sm_90, compiled) the large problems run the Gluon kernel of ``qmatmul_hopper``, whose main loop keeps
  an int8 wgmma in flight (``tl.dot`` cannot, for int32 accumulators); both call the tile, row-term and
  requantization helpers of ``qmatmul_tiles``, so both kernels give the same bits.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

from ...core import plans
from ...ops.quantized_matmul import NAME, OUTPUT_RANGE
from ...types import ValidationError
from .common import INTERPRETED, WAVE_FILL, cdiv, check_devices, data_type, hardware, next_power_of_2, wave_fill
from .launch import current_raw_stream, kept_empty, kept_zeros, launch, replay
from .qmatmul_tiles import (KERNEL_ARGUMENTS_NOT_SPECIALIZED, _b_zero_points, _column_scales, _column_terms,
                            _requantize_columns, _row_terms, _tile_place)

# int32 sums of K_SLICE products of int8 values stay below 2^31 (65536 · 128 · 128 = 2^30).
K_SLICE = 65536
# TMA takes 16-byte aligned bases and row strides; packed operands pad K to this many bytes.
TMA_ALIGNMENT = 16
# TMA coordinates are signed 32-bit; a grid has at most 2^31 − 1 programs.
MAX_ROWS = MAX_PROGRAMS = 2**31 - 1


@dataclass(frozen=True)
class Config:
    """A tile shape and launch for one class of problem sizes."""

    block_m: int
    block_n: int
    block_k: int
    num_warps: int
    num_stages: int
    epilogue_n: int = 32  # columns requantized at a time
    group_m: int = 8  # row tiles that walk the columns together
    programs_per_sm: int = 0  # persistent: this many programs per SM walk the tiles; 0: one program per tile
    gluon: bool = False  # the kernel of qmatmul_hopper (sm_90 only): num_stages slots
    split_k: int = 0  # _split_k_kernel: K split among programs until there are this many per SM; 0: the tile kernel


# Hand-picked per shape class from benchmarks/qmatmul.py --configs on an H100 (benchmarks/RESULTS.md). int8 dots run
# synchronously in Triton (it keeps only float32 accumulators in flight), and a tile's float64 epilogue leaves the
# tensor cores idle, so a long K favours large tiles, a short K two tiles resident per SM whose epilogues and main
# loops overlap (persistent: two programs per SM walk the tiles, no block waits for a slot), and few output rows
# narrow tiles, enough of them to occupy every SM.
LARGE = Config(128, 256, 128, num_warps=8, num_stages=3, epilogue_n=64)
MEDIUM = Config(128, 128, 128, num_warps=8, num_stages=4)
PAIRED = Config(128, 128, 128, num_warps=4, num_stages=3, programs_per_sm=2)  # 96 KiB of shared memory: two per SM
NARROW = [Config(64, 128, 128, num_warps=4, num_stages=4), Config(64, 64, 256, num_warps=4, num_stages=4),
          Config(64, 32, 256, num_warps=4, num_stages=4)]
LONG_K = Config(64, 64, 128, num_warps=4, num_stages=3)  # K > K_SLICE: the float64 accumulator lives in registers
# On sm_90 the Gluon kernel keeps a wgmma in flight across K steps (qmatmul_hopper): 4 slots of 48 KiB, a program
# an SM walking the tiles. With K > 4096 it leads wherever its tiles fill the SMs' waves to WAVE_FILL: at 8192³ level
# with the kernel of one 256 × 128 tile a program (1158-1177 against 1172-1183 TOPS, uint8 A; the board at its
# power limit, 1.3-1.7 GHz), at 2048 × 8192 × 4096 and 1024 × 21760 × 8192 (256 tiles) 1123 and 1268 against
# MEDIUM's 887 and 918, at 1024 × 11008 × 4096 (128 tiles, one wave) 1203-1273 against 922 (benchmarks/RESULTS.md).
# At 4096³ it is level with PAIRED.
WGMMA_LARGE = Config(128, 256, 128, num_warps=8, num_stages=4, epilogue_n=32, programs_per_sm=1, gluon=True)
# Few rows: B streams through 16 KiB tiles (TMA, three buffered), A's rows beside them (cp.async); compiled for sm_90
# a program takes 64 KiB of shared memory and 128 registers a thread, so that two or three fit on an SM. Not yet
# timed on a GPU: benchmarks/qmatmul.py --few-rows and --configs compare it with the candidates there.
FEW_ROWS = Config(16, 64, 256, num_warps=4, num_stages=4, split_k=2)


def choose_config(batches: int, m: int, n: int, k: int, sm_count: int, wgmma_in_flight: bool = False) -> Config:
    """The configuration for a problem: by K, then by how many tiles of each size it makes; ``wgmma_in_flight``:
    whether the Gluon kernel can run (sm_90, compiled)."""
    def tiles(config):
        return batches * cdiv(m, config.block_m) * cdiv(n, config.block_n)

    if k > K_SLICE:
        return LONG_K
    if m <= FEW_ROWS.block_m:
        return FEW_ROWS
    large = WGMMA_LARGE if wgmma_in_flight else LARGE  # the same tiles
    count = tiles(large)
    waves_filled = wgmma_in_flight and wave_fill(count, sm_count) >= WAVE_FILL
    if k > 4096 and (count >= 2 * sm_count or waves_filled):
        return large
    if tiles(PAIRED) >= sm_count:
        return MEDIUM if k > 4096 else PAIRED
    return next((config for config in NARROW if tiles(config) >= sm_count), NARROW[-1])


# -- kernels ---------------------------------------------------------------------------------------------------


# Preparing an operand: each program takes a BLOCK_K × BLOCK_R tile of x {batch, channel, K, R} (A with R its rows,
# or B with R its columns), turns uint8 bits into int8 ones by flipping their top bit, and stores them K-major, one
# row of K per r, where the tensor memory accelerator can read them (PACK); it also adds each row's Σ_k into a
# float64 vector (SUM) with atomic additions, exact in any order since every partial sum is an integer below 2^53.
@triton.jit(do_not_specialize=["flip", "channels", "rows_b", "rows_c"])
def _prepare_kernel(x_ptr, packed_ptr, sums_ptr, flip, K, R, channels, rows_b, rows_c,
                    stride_xb, stride_xc, stride_xk, stride_xr, stride_p,
                    PACK: tl.constexpr, SUM: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_R: tl.constexpr):
    """x holds int8 bits (``flip`` = −128 turns uint8 into int8); x' goes to packed[row, k] and Σ_k x' is added to
    sums[row], row = b·rows_b + c·rows_c + r."""
    tiles_k = tl.cdiv(K, BLOCK_K)
    tiles_r = tl.cdiv(R, BLOCK_R)
    tile = tl.program_id(0)
    tile_k = tile % tiles_k
    tile_r = tile // tiles_k % tiles_r
    batch = tile // (tiles_k * tiles_r)
    b, c = batch // channels, batch % channels
    offs_k = tile_k * BLOCK_K + tl.arange(0, BLOCK_K)
    offs_r = tile_r * BLOCK_R + tl.arange(0, BLOCK_R)
    mask = (offs_k < K)[:, None] & (offs_r < R)[None, :]
    pointers = (x_ptr + b.to(tl.int64) * stride_xb + c.to(tl.int64) * stride_xc
                + offs_k.to(tl.int64)[:, None] * stride_xk + offs_r.to(tl.int64)[None, :] * stride_xr)
    x = tl.where(mask, tl.load(pointers, mask=mask, other=0) ^ flip, 0)
    rows = b.to(tl.int64) * rows_b + c.to(tl.int64) * rows_c + offs_r
    if PACK:
        tl.store(packed_ptr + rows[None, :] * stride_p + offs_k[:, None], x.to(tl.int8), mask=mask)
    if SUM:
        tl.atomic_add(sums_ptr + rows, tl.sum(x, axis=0).to(tl.float64), mask=offs_r < R)


@triton.jit
def _dot_slice(a_desc, b_desc, a_row, b_row, k_start, k_end,
               A_FLIP: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """Σ_k A'[a_row:, k] B'[b_row:, k] over [k_start, k_end), exact in int32 (TMA fills columns past K with 0)."""
    tl.assume(k_start < k_end)  # at least one step: no zero-trip path to keep registers for
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.int32)
    for k in range(k_start, k_end, BLOCK_K):
        a = a_desc.load([a_row, k])
        if A_FLIP:
            a = a ^ -128  # uint8 bits read as int8: flipping the top bit subtracts 128
        b = b_desc.load([b_row, k])
        acc = tl.dot(a, b.T, acc, out_dtype=tl.int32)
    return acc


@triton.jit
def _requantize_store(acc, n_start, rows, b_sums_ptr, staged_ptr, column_args, ROW_SCALES: tl.constexpr,
                      BLOCK_N: tl.constexpr, EPILOGUE_N: tl.constexpr):
    """Requantize and store the columns [n_start, n_start + BLOCK_N) of a tile, EPILOGUE_N at a time (halving
    until then), which bounds the float64 epilogue's registers; their multipliers and zb' read from ``staged_ptr``."""
    if BLOCK_N > EPILOGUE_N:
        left, right = acc.reshape(acc.shape[0], 2, BLOCK_N // 2).permute(0, 2, 1).split()
        _requantize_store(left, n_start, rows, b_sums_ptr, staged_ptr, column_args, ROW_SCALES, BLOCK_N // 2,
                          EPILOGUE_N)
        _requantize_store(right, n_start + BLOCK_N // 2, rows, b_sums_ptr, staged_ptr, column_args, ROW_SCALES,
                          BLOCK_N // 2, EPILOGUE_N)
    else:
        N, b_sums_stride = column_args[0], column_args[2]
        offs_n = (n_start + tl.arange(0, BLOCK_N)).to(tl.int64)
        mask_n = offs_n < N
        columns = (tl.load(staged_ptr + offs_n, mask=mask_n, other=1.0),
                   tl.load(staged_ptr + N + offs_n, mask=mask_n, other=0.0),
                   tl.load(b_sums_ptr + offs_n * b_sums_stride, mask=mask_n, other=0.0))
        _requantize_columns(acc, offs_n, rows, columns, column_args, ROW_SCALES)


@triton.jit
def _qmatmul_tile(tile, a_desc, b_desc, tiles, row_args, b_sums_ptr, b_sums_stride, column_args, staged_ptr,
                  A_FLIP: tl.constexpr, ROW_SCALES: tl.constexpr, LONG_K: tl.constexpr, K_SLICE: tl.constexpr,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
                  EPILOGUE_N: tl.constexpr):
    """out[b, c] = requantize(Σ_k (A − za)(B − zb)) for one BLOCK_M × BLOCK_N tile."""
    b, c, tile_m, tile_n, a_row, b_first_row = _tile_place(tile, tiles, BLOCK_M, BLOCK_N, GROUP_M)
    b_row = b_first_row + tile_n * BLOCK_N
    N, K = column_args[0], column_args[1]
    offs_n = (tile_n * BLOCK_N + tl.arange(0, BLOCK_N)).to(tl.int64)
    scales = _column_scales(offs_n, column_args)  # read here, used after the main loop
    if LONG_K:
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float64)
        for k_start in range(0, K, K_SLICE):
            acc += _dot_slice(a_desc, b_desc, a_row, b_row, k_start, min(k_start + K_SLICE, K),
                              A_FLIP, BLOCK_M, BLOCK_N, BLOCK_K).to(tl.float64)
    else:
        acc = _dot_slice(a_desc, b_desc, a_row, b_row, 0, K, A_FLIP, BLOCK_M, BLOCK_N, BLOCK_K)
    # The epilogue wants each column's terms in the accumulator's layout, where a thread holds many columns: they go
    # through the staging rows, one column a thread here (every tile of a column writes the same bits there).
    b_sums_ptr += b_first_row * b_sums_stride
    multiplier, zb, _ = _column_terms(scales, offs_n, b_sums_ptr, column_args, ROW_SCALES)
    tl.store(staged_ptr + offs_n, multiplier, mask=offs_n < N)
    tl.store(staged_ptr + N + offs_n, zb, mask=offs_n < N)
    tl.debug_barrier()  # the tile's threads read one another's stores
    rows = _row_terms(tl.arange(0, BLOCK_M), tile_m, a_row, b, c, row_args, ROW_SCALES, BLOCK_M)
    _requantize_store(acc, tile_n * BLOCK_N, rows, b_sums_ptr, staged_ptr, column_args, ROW_SCALES, BLOCK_N,
                      EPILOGUE_N)


# The tile kernel: out[b, c] = requantize(Σ_k (A − za)(B − zb)), one BLOCK_M × BLOCK_N tile at a time. A program
# finds its tile (groups of GROUP_M row tiles walk the columns together, so that B's tiles stay in L2), loads A's and
# B's K-major tiles through TMA descriptors and multiplies them on the int8 tensor cores into an exact int32
# accumulator (for K beyond K_SLICE, slice by slice into float64), then requantizes the accumulator in float64 with
# the zero-point corrections, the multiplier of each column and row, clamping and rounding half to even. A program
# takes one tile, or (PERSISTENT) tiles program_id, program_id + programs, …, so that two programs resident on an SM
# take their next tiles without waiting for a block to be scheduled.
@triton.jit(do_not_specialize=KERNEL_ARGUMENTS_NOT_SPECIALIZED)
def _qmatmul_kernel(a_desc, b_desc, M, N, K, channels, num_tiles, a_rows_b, a_rows_c, b_rows_b, b_rows_c,
                    a_sums_ptr, a_sums_stride, b_sums_ptr, b_sums_stride, b_scale_ptr, b_scale_stride, b_zero_ptr,
                    b_zero_stride, b_zero_mask, b_shift, a_scale_ptr, a_scale_stride, out_scale_ptr,
                    out_scale_stride, a_zero_ptr, a_zero_stride, a_zero_mask, a_shift, out_zero_ptr, out_zero_stride,
                    out_zero_mask, low, high, out_ptr, stride_ob, stride_oc, stride_om, stride_on, errors_ptr,
                    staged_ptr, A_FLIP: tl.constexpr, ROW_SCALES: tl.constexpr, LONG_K: tl.constexpr,
                    K_SLICE: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                    GROUP_M: tl.constexpr, EPILOGUE_N: tl.constexpr, PERSISTENT: tl.constexpr):
    """A is a 2-D descriptor of rows of K (int8 bits), B of K-major rows of N (int8); batch b, channel c start at row
    b·rows_b + c·rows_c of each, and the row sums of A' and B' (float64) are indexed by the same rows. Zero points
    are int8 bits: ``& mask`` (0xFF for uint8, −1 for int8, 0 when absent) gives their value, from which the
    operand's shift (128 for uint8) is taken. The float64 epilogue runs on EPILOGUE_N columns at a time, which
    bounds its registers.
    """
    tiles = (M, N, channels, a_rows_b, a_rows_c, b_rows_b, b_rows_c)
    row_args = (M, a_sums_ptr, a_sums_stride, a_scale_ptr, a_scale_stride, out_scale_ptr, out_scale_stride,
                a_zero_ptr, a_zero_stride, a_zero_mask, a_shift, out_zero_ptr, out_zero_stride, out_zero_mask, low,
                high, out_ptr, stride_ob, stride_oc, stride_om, errors_ptr)
    column_args = (N, K, b_sums_stride, b_scale_ptr, b_scale_stride, b_zero_ptr, b_zero_stride, b_zero_mask, b_shift,
                   a_scale_ptr, out_scale_ptr, errors_ptr, stride_on)
    if PERSISTENT:
        for tile in range(tl.program_id(0), num_tiles, tl.num_programs(0)):
            _qmatmul_tile(tile, a_desc, b_desc, tiles, row_args, b_sums_ptr, b_sums_stride, column_args, staged_ptr,
                          A_FLIP, ROW_SCALES, LONG_K, K_SLICE, BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, EPILOGUE_N)
    else:  # one tile, with no loop around it: the loop costs registers that a second resident block needs
        _qmatmul_tile(tl.program_id(0), a_desc, b_desc, tiles, row_args, b_sums_ptr, b_sums_stride, column_args,
                      staged_ptr, A_FLIP, ROW_SCALES, LONG_K, K_SLICE, BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, EPILOGUE_N)


@triton.jit
def _requantize_tile(acc, b, c, tile_m, tile_n, b_first_row, b_sums_ptr, row_args, column_args,
                     ROW_SCALES: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """Requantize and store a tile of ``_split_k_kernel``, acc = Σ A'(B' − zb') (the row sums of A' are folded in:
    ``row_args`` reads zeros for them), with the tile kernel's helpers."""
    offs_n = (tile_n * BLOCK_N + tl.arange(0, BLOCK_N)).to(tl.int64)
    columns = _column_terms(_column_scales(offs_n, column_args), offs_n, b_sums_ptr + b_first_row * column_args[2],
                            column_args, ROW_SCALES)
    rows = _row_terms(tl.arange(0, BLOCK_M), tile_m, tile_m * BLOCK_M, b, c, row_args, ROW_SCALES, BLOCK_M)
    _requantize_columns(acc, offs_n, rows, columns, column_args, ROW_SCALES)


SPLIT_K_ARGUMENTS_NOT_SPECIALIZED = [
    "channels", "b_rows_b", "b_rows_c", "splits", "split_steps", "b_sums_stride", "b_scale_stride",
    "b_zero_stride", "b_zero_mask", "b_shift", "a_sums_stride", "a_scale_stride", "out_scale_stride", "a_zero_stride",
    "out_zero_stride", "a_zero_mask", "out_zero_mask", "a_shift", "low", "high"]


# The split-K kernel: out[b, c] = requantize(Σ_k (A − za)(B − zb)) for few rows (M ≤ 16), where reading B is the
# work. K is split among programs as well as the tiles: program p adds the products of the K range
# split_steps·BLOCK_K·[s, s + 1), s = p mod splits, to tile p div splits, exactly in int32 with the −zb'·Σ_k A'
# correction folded in, and the programs of a tile add their partial sums into a workspace with integer atomics,
# whose order does not matter. The last of them (a ticket counter says which) requantizes the tile as the tile kernel
# does, with the column terms computed in place, and leaves the workspace zero for the next call.
@triton.jit(do_not_specialize=SPLIT_K_ARGUMENTS_NOT_SPECIALIZED)
def _split_k_kernel(a_ptr, stride_ab, stride_ac, stride_am, stride_ak, b_ptr, stride_b, M, N, K, channels, b_rows_b,
                    b_rows_c, splits, split_steps, tickets_ptr, partials_ptr, b_sums_ptr, b_sums_stride, b_scale_ptr,
                    b_scale_stride, b_zero_ptr, b_zero_stride, b_zero_mask, b_shift, a_sums_ptr, a_sums_stride,
                    a_scale_ptr, a_scale_stride, out_scale_ptr, out_scale_stride, a_zero_ptr, a_zero_stride,
                    a_zero_mask, a_shift, out_zero_ptr, out_zero_stride, out_zero_mask, low, high,
                    out_ptr, stride_ob, stride_oc, stride_om, stride_on, errors_ptr,
                    A_FLIP: tl.constexpr, B_ZERO: tl.constexpr, ROW_SCALES: tl.constexpr, SPLIT: tl.constexpr,
                    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """A {batch, channel, M, K} is read where it lies (int8 bits, flipped if A_FLIP); B's K-major rows (those of
    ``_qmatmul_kernel``, row stride stride_b) by plain pointer loads, which the compiler pipelines: a tensor-memory
    descriptor would cost its encoding on the host at every call.
    B_ZERO: zb' may be non-zero, so each program subtracts zb'[n]·Σ_k A'[m, k] of its range from its partial.
    With SPLIT (splits > 1) the partials meet in partials[tile] {BLOCK_M, BLOCK_N} (int32, zero before the call)
    through atomic additions; the program that draws the last ticket of tickets[tile] reads the sum, sets both back
    to zero and requantizes. Without, each program requantizes its own tile.
    """
    split = tl.program_id(0) % splits
    tile = tl.program_id(0) // splits
    b, c, tile_m, tile_n, _, b_first_row = _tile_place(tile, (M, N, channels, 0, 0, b_rows_b, b_rows_c), BLOCK_M,
                                                       BLOCK_N, 1)
    offs_m = tile_m * BLOCK_M + tl.arange(0, BLOCK_M)
    a_rows = a_ptr + b.to(tl.int64) * stride_ab + c.to(tl.int64) * stride_ac + offs_m.to(tl.int64)[:, None] * stride_am
    offs_bn = tile_n * BLOCK_N + tl.arange(0, BLOCK_N)
    mask_bn = offs_bn < N
    b_rows = b_ptr + (b_first_row + offs_bn).to(tl.int64)[:, None] * stride_b
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.int32)
    a_sums = tl.zeros((BLOCK_M,), dtype=tl.int32)
    k_start = split * split_steps * BLOCK_K  # a multiple of BLOCK_K, as the compiler sees: aligned loads of A
    for k in range(k_start, min(k_start + split_steps * BLOCK_K, K), BLOCK_K):
        offs_k = k + tl.arange(0, BLOCK_K)
        mask = (offs_m < M)[:, None] & (offs_k < K)[None, :]
        a = tl.load(a_rows + offs_k.to(tl.int64)[None, :] * stride_ak, mask=mask, other=0)
        if A_FLIP:
            a = tl.where(mask, a ^ -128, 0)  # uint8 bits as int8, and 0 where masked
        b_tile = tl.load(b_rows + offs_k.to(tl.int64)[None, :], mask=mask_bn[:, None] & (offs_k < K)[None, :],
                         other=0)
        acc = tl.dot(a, b_tile.T, acc, out_dtype=tl.int32)
        if B_ZERO:
            a_sums += tl.sum(a.to(tl.int32), axis=1)
    if B_ZERO:
        offs_n = (tile_n * BLOCK_N + tl.arange(0, BLOCK_N)).to(tl.int64)
        zb = _b_zero_points(offs_n, offs_n < N, b_zero_ptr, b_zero_stride, b_zero_mask, b_shift)
        acc -= a_sums[:, None] * zb[None, :]

    row_args = (M, a_sums_ptr, a_sums_stride, a_scale_ptr, a_scale_stride, out_scale_ptr, out_scale_stride,
                a_zero_ptr, a_zero_stride, a_zero_mask, a_shift, out_zero_ptr, out_zero_stride, out_zero_mask, low,
                high, out_ptr, stride_ob, stride_oc, stride_om, errors_ptr)
    column_args = (N, K, b_sums_stride, b_scale_ptr, b_scale_stride, b_zero_ptr, b_zero_stride, b_zero_mask, b_shift,
                   a_scale_ptr, out_scale_ptr, errors_ptr, stride_on)
    if SPLIT:
        partials = (partials_ptr + tile.to(tl.int64) * (BLOCK_M * BLOCK_N)
                    + tl.arange(0, BLOCK_M)[:, None] * BLOCK_N + tl.arange(0, BLOCK_N)[None, :])
        tl.atomic_add(partials, acc, sem="relaxed")
        tl.debug_barrier()  # every thread's additions come before the ticket, whose release publishes them
        if tl.atomic_add(tickets_ptr + tile, 1, sem="acq_rel") == splits - 1:  # the others have added theirs
            acc = tl.load(partials, cache_modifier=".cg")  # from L2, where the atomic additions happened
            tl.debug_barrier()  # every thread has read before any clears
            tl.store(partials, tl.zeros_like(acc))
            tl.store(tickets_ptr + tile, 0)
            _requantize_tile(acc, b, c, tile_m, tile_n, b_first_row, b_sums_ptr, row_args, column_args, ROW_SCALES,
                             BLOCK_M, BLOCK_N)
    else:
        _requantize_tile(acc, b, c, tile_m, tile_n, b_first_row, b_sums_ptr, row_args, column_args, ROW_SCALES,
                         BLOCK_M, BLOCK_N)


# -- errors found on the device ----------------------------------------------------------------------------------

# Kernels that find a value DirectML rejects (a zero, NaN or infinite scale) set a bit of their device's error
# word rather than wait for the host to read the value; ``check_errors`` reads and clears the words.
ERROR_FIELDS = {1: "a_scale_tensor", 2: "b_scale_tensor", 4: "output_scale_tensor"}
_error_words: dict = {}


def error_word(device):
    word = _error_words.get(device)
    if word is None:
        word = _error_words[device] = kept_zeros(1, torch.int32, device)
    return word


def check_errors() -> None:
    """Wait for the GPUs, then raise the ValidationError of the scales that kernels found bad since the last
    check (their outputs hold no defined values)."""
    bad = 0
    for word in _error_words.values():
        bad |= int(word.item())  # waits for the device
        word.zero_()
    if bad:
        fields = [field for bit, field in ERROR_FIELDS.items() if bad & bit]
        raise ValidationError(f"{NAME}.{fields[0]}: scales must be finite and non-zero; a call on the GPU found "
                              f"{' and '.join(fields)} zero, NaN or infinite, and its output is undefined")


# -- operands --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Operand:
    """A or B as the kernel reads it: int8 bits in rows of K (``rows`` {row count, K}, row stride a multiple of 16
    bytes), batch b and channel c starting at row b·rows_b + c·rows_c; ``sums`` the per-row Σ_k of the int8
    values in float64 (or None); ``flip`` whether the rows still hold uint8 bits the kernel must flip."""

    rows: torch.Tensor
    rows_b: int
    rows_c: int
    sums: torch.Tensor | None
    flip: bool


def _own_batch(x4):
    """Sizes of x4's batch and channel dimensions that hold distinct data (1 where the stride is 0)."""
    return [size if stride else 1 for size, stride in zip(x4.shape[:2], x4.stride()[:2])]


def _rows_in_place(x4, can_flip: bool):
    """(rows, rows_b, rows_c) reading x4 {batch, channel, R, K} where it lies, or None if TMA cannot."""
    (_, _, r, k), (stride_b, stride_c, stride_r, stride_k) = x4.shape, x4.stride()
    if x4.dtype != torch.int8 and not can_flip:
        return None
    if k > 1 and stride_k != 1 or r > 1 and stride_r < k:
        return None
    stride_r = stride_r if r > 1 else -(-k // TMA_ALIGNMENT) * TMA_ALIGNMENT
    sizes = x4.shape[:2]
    if stride_r % TMA_ALIGNMENT or x4.data_ptr() % TMA_ALIGNMENT or \
            any(size > 1 and stride % stride_r for size, stride in zip(sizes, (stride_b, stride_c))):
        return None
    rows_b, rows_c = (stride // stride_r if size > 1 else 0 for size, stride in zip(sizes, (stride_b, stride_c)))
    count = (sizes[0] - 1) * rows_b + (sizes[1] - 1) * rows_c + r
    if count > MAX_ROWS:
        return None
    rows = x4.view(torch.int8).as_strided((count, k), (stride_r, 1), x4.storage_offset())
    return rows, rows_b, rows_c


def _prepare(x4, *, can_flip: bool, pack: bool, sum_rows: bool, kept: dict | None = None, site: str = "",
             empty=torch.empty) -> Operand:
    """The kernel's view of x4 {batch, channel, R, K} (int8 or uint8): where it lies if TMA can read it (and
    ``can_flip`` or it is int8) unless ``pack``, else packed K-major; with per-row sums if ``sum_rows``. ``kept``
    and ``site``: where a plan keeps its launch (``launch.launch``); ``empty`` makes the memory it writes (a plan's
    first call keeps it: ``launch.kept_empty``)."""
    batches, channels, r, k = x4.shape
    in_place = None if pack else _rows_in_place(x4, can_flip)
    own_b, own_c = _own_batch(x4)
    if in_place is None:
        row_stride = -(-k // TMA_ALIGNMENT) * TMA_ALIGNMENT
        count = own_b * own_c * r
        if count > MAX_ROWS:
            raise ValidationError(f"{NAME}: the cuda backend reads at most {MAX_ROWS} rows of an operand "
                                  f"({own_b}·{own_c}·{r} here)")
        rows = empty((count, row_stride), dtype=torch.int8, device=x4.device)[:, :k]
        rows_b, rows_c = own_c * r if own_b > 1 else 0, r if own_c > 1 else 0
    else:
        rows, rows_b, rows_c = in_place
    flip = x4.dtype == torch.uint8
    sums = empty(rows.shape[0], dtype=torch.float64, device=x4.device).zero_() if sum_rows else None
    if in_place is None or sum_rows:
        source = x4.view(torch.int8)[:own_b, :own_c].transpose(-1, -2)  # {batch, channel, K, R}
        block_k, block_r = 128, 64
        grid = (_grid_size(cdiv(k, block_k) * cdiv(r, block_r) * own_b * own_c),)
        launch(kept, site, _prepare_kernel, grid,
               (source, rows, sums, -128 if flip else 0, k, r, own_c, rows_b, rows_c, *source.stride(),
                rows.stride(0)),
               dict(PACK=in_place is None, SUM=sum_rows, BLOCK_K=block_k, BLOCK_R=block_r), zeroed=sums)
    return Operand(rows, rows_b, rows_c, sums, flip and in_place is not None)


def _padded_to_4d(x):
    """x {…, rows, columns} with leading dimensions of size 1 (stride 0), as the operator passes it to the backend."""
    pad = 4 - x.dim()
    return x.as_strided((1,) * pad + tuple(x.shape), (0,) * pad + tuple(x.stride()), x.storage_offset())


@dataclass(frozen=True, eq=False)
class PersistedB:
    """An OWNED_BY_DML B as the backend keeps it (``persist_b``): ``array``, B {…, K, N} in the sizes and strides
    the desc says, and ``operand``, its K-major packing with its column sums, which the matmul reads instead of B.
    It goes where B's array goes (the compiled operator's bindings, the array API's ``PreparedB``) and reads as that
    array for its sizes, strides, type and place; its packing lives as long as it does."""

    array: torch.Tensor
    operand: Operand

    @functools.cached_property
    def planned_layout(self) -> tuple:
        """Its layout for the array API's plans (``core.plans.layout``): its array's, read once (it never changes)."""
        return PersistedB, plans.layout(self.array)

    @property
    def shape(self):
        return self.array.shape

    @property
    def dtype(self):
        return self.array.dtype

    @property
    def device(self):
        return self.array.device

    def stride(self):
        return self.array.stride()

    def data_ptr(self) -> int:
        return self.array.data_ptr()

    def element_size(self) -> int:
        return self.array.element_size()

    def restrided(self, sizes, strides) -> PersistedB:
        """The same B in other sizes and element strides from the same first element (the operator's layouts)."""
        return PersistedB(self.array.as_strided(tuple(sizes), tuple(strides), self.array.storage_offset()),
                          self.operand)


def persist_b(array) -> PersistedB:
    """An OWNED_BY_DML B, packed K-major (with its column sums) once here. For int8 the array kept is the packing
    itself, viewed as B {…, K, N}; a uint8 B keeps its own copy beside the flipped packing."""
    b4 = _padded_to_4d(array)
    operand = _prepare(b4.transpose(-1, -2), can_flip=False, pack=True, sum_rows=True, empty=kept_empty)
    if array.dtype == torch.int8:
        rows = operand.rows
        row_stride = rows.stride(0)
        strides = (operand.rows_b * row_stride, operand.rows_c * row_stride, 1, row_stride)[4 - array.dim():]
        kept = rows.as_strided(array.shape, strides, rows.storage_offset())
    else:
        kept = array.clone()
    return PersistedB(kept, operand)


# -- launcher --------------------------------------------------------------------------------------------------


def prepare_quantized_linear_matmul(arrays: tuple, kernel_tensors):
    """Run on ``arrays`` (binding order, the output last; of the layouts the desc says), and return run(*arrays) for
    arrays of the same layouts and alignment: the kept launches replayed on their addresses (``launch.replay``), else
    the launcher on ``kernel_tensors(arrays)`` through the launches kept here. A persisted B is read from its
    packing: a replay takes the packed rows and column sums of the ``PersistedB`` each call is given."""
    kept = {}

    def run_again(*arrays):
        quantized_linear_matmul(*kernel_tensors(arrays), kept=kept)

    def plan_again(*arrays):
        return prepare_quantized_linear_matmul(arrays, kernel_tensors)

    run_again(*arrays)
    if type(arrays[B_POSITION]) is not PersistedB:
        return replay(kept, arrays, run_again, plan_again)

    def plan_again_with_packing(*tensors):
        run = plan_again(*tensors[:-2])
        return lambda *tensors: run(*tensors[:-2])

    # the packing as two more tensors, after the output; B itself is not read
    replayed = replay(kept, (*arrays[:B_POSITION], None, *arrays[B_POSITION + 1:], *_packing(arrays[B_POSITION])),
                      lambda *tensors: run_again(*tensors[:-2]), plan_again_with_packing)
    return lambda *arrays: replayed(*arrays, *_packing(arrays[B_POSITION]))


B_POSITION = 3  # B's place among the operator's arrays


def _packing(b: PersistedB) -> tuple:
    operand = b.operand
    return operand.rows, operand.sums


@functools.cache
def _zeros(device):
    """Zero bits standing in for an absent zero point or sum vector (read with stride 0)."""
    return kept_zeros(1, torch.float64, device)


def _grid_size(programs: int) -> int:
    if programs > MAX_PROGRAMS:
        raise ValidationError(f"{NAME}: the cuda backend launches at most {MAX_PROGRAMS} tiles ({programs} here)")
    return programs


def _sm_count(device) -> int:
    return 4 if INTERPRETED else hardware(device).processors  # (interpreted: a few, so that programs walk tiles)


@functools.cache
def _wgmma_in_flight(device) -> bool:
    """Whether the Gluon kernel of qmatmul_hopper runs here: compiled (not interpreted), on sm_90."""
    return not INTERPRETED and torch.cuda.get_device_capability(device) == (9, 0)


# -- the kernels' arguments: one record per operand, each kernel's list written once from them ---------------


def _vector(vector, device) -> tuple:
    """A vector's (pointer, stride); a zero read with stride 0 when absent."""
    return (_zeros(device), 0) if vector is None else (vector, vector.stride(0))


def _zero_point(vector, device) -> tuple:
    """A zero-point vector's (int8 bits, stride, mask), the mask giving the value from the bits; 0 when absent."""
    if vector is None:
        return _zeros(device).view(torch.int8), 0, 0
    return vector.view(torch.int8), vector.stride(0), 0xFF if vector.dtype == torch.uint8 else -1


@dataclass(frozen=True)
class Requantization:
    """What every kernel's epilogue reads besides the sums: scales and zero points (``_vector``, ``_zero_point``),
    the +128 shifts of unsigned operands, the output's bounds, the output (int8 bits and four strides) and the
    device's error word."""

    a_scale: tuple
    b_scale: tuple
    out_scale: tuple
    a_zero: tuple
    b_zero: tuple
    out_zero: tuple
    a_shift: int
    b_shift: int
    bounds: tuple
    out: tuple
    errors: torch.Tensor


def _tile_arguments(q: Requantization, a_desc, b_desc, sizes: tuple, num_tiles: int, a_operand: Operand,
                    b_operand: Operand, staged, device) -> tuple:
    """The arguments of the tile kernels (``_qmatmul_kernel`` and qmatmul_hopper's, which take the same list)."""
    return (a_desc, b_desc, *sizes, num_tiles, a_operand.rows_b, a_operand.rows_c, b_operand.rows_b, b_operand.rows_c,
            *_vector(a_operand.sums, device), *_vector(b_operand.sums, device), *q.b_scale, *q.b_zero, q.b_shift,
            *q.a_scale, *q.out_scale, *q.a_zero, q.a_shift, *q.out_zero, *q.bounds, *q.out, q.errors, staged)


# Per device and stream: the zeroed int32 tickets and partial sums of _split_k_kernel (its calls on one stream run one
# after another, and each leaves them zero). Grown on demand; outgrown ones are kept, for CUDA graphs that use them.
_SPLIT_K_WORKSPACES: dict = {}


def _split_k_workspace(device, size: int):
    stream = current_raw_stream(device.index) if device.type == "cuda" else 0
    kept = _SPLIT_K_WORKSPACES.setdefault((device, stream), [])
    if not kept or kept[-1].numel() < size:
        kept.append(kept_zeros(next_power_of_2(size), torch.int32, device))
    return kept[-1]


def _split_k(a, b_operand: Operand, q: Requantization, n: int, b_zero: bool, row_scales: bool, config: Config,
             kept):
    """Launches _split_k_kernel: K split into as many ranges (of whole BLOCK_K steps) as bring the programs to
    ``config.split_k`` per SM."""
    device = a.device
    batches, channels, m, k = a.shape
    tiles = batches * channels * cdiv(m, config.block_m) * cdiv(n, config.block_n)
    steps = cdiv(k, config.block_k)
    split_steps = cdiv(steps, min(steps, cdiv(config.split_k * _sm_count(device), tiles)))
    splits = cdiv(steps, split_steps)
    if splits > 1:
        ticket_space = cdiv(tiles, 32) * 32  # the partial sums start 128-byte aligned
        workspace = _split_k_workspace(device, ticket_space + tiles * config.block_m * config.block_n)
        tickets, partials = workspace, workspace[ticket_space:]
    else:
        tickets = partials = _zeros(device).view(torch.int32)
    arguments = (a.view(torch.int8), *a.stride(), b_operand.rows, b_operand.rows.stride(0), m, n, k, channels,
                 b_operand.rows_b, b_operand.rows_c, splits, split_steps, tickets, partials,
                 *_vector(b_operand.sums, device), *q.b_scale, *q.b_zero, q.b_shift,
                 *_vector(None, device),  # A's row sums: folded into the partial sums
                 *q.a_scale, *q.out_scale, *q.a_zero, q.a_shift, *q.out_zero, *q.bounds, *q.out, q.errors)
    launch(kept, "split k", _split_k_kernel, (_grid_size(tiles * splits),), arguments,
           dict(A_FLIP=a.dtype == torch.uint8, B_ZERO=b_zero, ROW_SCALES=row_scales, SPLIT=splits > 1,
                BLOCK_M=config.block_m, BLOCK_N=config.block_n, BLOCK_K=config.block_k, num_warps=config.num_warps,
                num_stages=config.num_stages))


def quantized_linear_matmul(a, a_scale, a_zero_point, b, b_scale, b_zero_point, output_scale, output_zero_point,
                            out, config: Config | None = None, kept: dict | None = None) -> None:
    """a {B, C, M, K}, b {B, C, K, N} (a tensor or a ``PersistedB``), out {B, C, M, N} (int8 or uint8 each, any
    strides); scales float32 vectors of M (A, output) or N (B), zero points vectors like them or None, stride 0 when
    per tensor. A zero, NaN or infinite scale is marked on the device (``check_errors``). ``kept``: a plan's
    launches, for calls of one layout (the memory of its first call is kept with them)."""
    empty = kept_empty if kept == {} else torch.empty
    b_operand = None
    if type(b) is PersistedB:
        b_operand, b = b.operand, b.array
    given = dict(a_tensor=a, a_scale_tensor=a_scale, a_zero_point_tensor=a_zero_point, b_tensor=b,
                 b_scale_tensor=b_scale, b_zero_point_tensor=b_zero_point, output_scale_tensor=output_scale,
                 output_zero_point_tensor=output_zero_point, output_tensor=out)
    check_devices(NAME, **{field: tensor for field, tensor in given.items() if tensor is not None})
    device = a.device
    batches, channels, m, k = a.shape
    n = b.shape[-1]
    a_unsigned, b_unsigned = a.dtype == torch.uint8, b.dtype == torch.uint8
    a_zero, b_zero = a_zero_point is not None or a_unsigned, b_zero_point is not None or b_unsigned  # za', zb' ≠ 0?
    config = config or choose_config(batches * channels, m, n, k, _sm_count(device), _wgmma_in_flight(device))
    # Column sums of B' are needed when za' can be non-zero, row sums of A' when zb' can be.
    b_operand = b_operand or _prepare(b.transpose(-1, -2), can_flip=False, pack=False, sum_rows=a_zero, kept=kept,
                                      site="b", empty=empty)
    row_scales = m > 1 and (a_scale.stride(0) != 0 or output_scale.stride(0) != 0)
    q = Requantization(_vector(a_scale, device), _vector(b_scale, device), _vector(output_scale, device),
                       _zero_point(a_zero_point, device), _zero_point(b_zero_point, device),
                       _zero_point(output_zero_point, device), 128 if a_unsigned else 0, 128 if b_unsigned else 0,
                       OUTPUT_RANGE[data_type(out)], (out.view(torch.int8), *out.stride()), error_word(device))
    if config.split_k:
        _split_k(a, b_operand, q, n, b_zero, row_scales, config, kept)
        return

    # The Gluon kernel reads A from shared memory straight into the tensor cores: a uint8 A is flipped in a copy.
    a_operand = _prepare(a, can_flip=not config.gluon, pack=False, sum_rows=b_zero, kept=kept, site="a", empty=empty)
    staged = empty((2, n), dtype=torch.float64, device=device)  # the tile kernel's staging rows of column terms
    num_tiles = _grid_size(batches * channels * cdiv(m, config.block_m) * cdiv(n, config.block_n))
    programs = min(num_tiles, config.programs_per_sm * _sm_count(device)) if config.programs_per_sm else num_tiles
    if config.gluon:
        from . import qmatmul_hopper

        kernel = qmatmul_hopper._qmatmul_kernel
        descriptors = (qmatmul_hopper.operand_descriptor(a_operand.rows, config.block_m, config.block_k),
                       qmatmul_hopper.operand_descriptor(b_operand.rows, config.block_n, config.block_k))
        launch(kept, "gluon", kernel, (programs,),
               _tile_arguments(q, *descriptors, (m, n, k, channels), num_tiles, a_operand, b_operand, staged, device),
               dict(ROW_SCALES=row_scales, GROUP_M=config.group_m, EPILOGUE_N=config.epilogue_n,
                    INSTR_N=math.gcd(config.block_n, 128), STAGES=config.num_stages, num_warps=config.num_warps))
        return
    descriptors = (TensorDescriptor.from_tensor(a_operand.rows, [config.block_m, config.block_k]),
                   TensorDescriptor.from_tensor(b_operand.rows, [config.block_n, config.block_k]))
    launch(kept, "tiles", _qmatmul_kernel, (programs,),
           _tile_arguments(q, *descriptors, (m, n, k, channels), num_tiles, a_operand, b_operand, staged, device),
           dict(A_FLIP=a_operand.flip, ROW_SCALES=row_scales, LONG_K=k > K_SLICE, K_SLICE=K_SLICE,
                BLOCK_M=config.block_m, BLOCK_N=config.block_n, BLOCK_K=config.block_k, GROUP_M=config.group_m,
                EPILOGUE_N=config.epilogue_n, PERSISTENT=programs < num_tiles, num_warps=config.num_warps,
                num_stages=config.num_stages))
