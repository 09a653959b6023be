"""Quantized linear matrix multiply on the CPU: the exact integer product at float32 BLAS speed.

NumPy never uses BLAS for integer matrices, so the integer product runs as a float32 GEMM, which is exact as long as
every partial sum is an integer of magnitude at most 2^24 (float32 has a 24-bit significand). To keep products
small, each operand is centred first: ã = a − ca with ca = 128 for UINT8 and 0 for INT8, so |ã| ≤ 128, and the
zero points move into a rank-2 correction:

    Σ_k (a − za)(b − zb) = Σ_k (ã + da)(b̃ + db),  da = ca − za (per row), db = cb − zb (per column)
                         = ã·b̃ + (Σ_k ã) ⊗ db + da ⊗ (Σ_k b̃ + K·db)

A product |ã·b̃| is at most max|ã|·max|b̃| (16 384 at full range), so the GEMM takes K in chunks of
2^24 // (max|ã|·max|b̃|) (1 024 at full range, more for narrower values). Chunk results and corrections add up in
float64, which holds every integer below 2^53 exactly: |acc| ≤ K·255·255 < 2^53 for any K below 1.3e11, far beyond
the 2^32 elements a tensor may hold. The exact sums are then requantized by the operator's own ``requantize``, in
blocks of rows that stay in cache, so the bits are the reference's.
"""

from __future__ import annotations

import numpy as np

from ..ops.quantized_matmul import requantize
from ..types import DataType

# Integers of magnitude up to this are exact in float32.
FLOAT32_EXACT = 1 << 24
# Output elements per requantization block (float64: 256 KiB).
BLOCK_ELEMENTS = 1 << 15


def quantized_linear_matmul(a, a_scale, a_zero_point, b, b_scale, b_zero_point, output_scale, output_zero_point,
                            out) -> None:
    """a {B, C, M, K}, b {B, C, K, N}, out {B, C, M, N}; scales and zero points are vectors of M or N, or None."""
    output_type = DataType.from_numpy(out.dtype)
    m, n = out.shape[2:]
    rows = max(1, BLOCK_ELEMENTS // n)
    for index in np.ndindex(*out.shape[:2]):
        product, corrections = integer_product(a[index], a_zero_point, b[index], b_zero_point)
        for start in range(0, m, rows):
            block = slice(start, start + rows)
            acc = product[block]
            if corrections:
                acc = acc.astype(np.float64)
                for row_term, column_term in corrections:
                    acc += row_term[block, None] * column_term
            out[index][block] = requantize(
                acc, a_scale[block, None], b_scale, output_scale[block, None],
                0 if output_zero_point is None else output_zero_point[block, None], output_type)


def integer_product(a, a_zero_point, b, b_zero_point):
    """(product, corrections) for a {M, K} and b {K, N}: Σ_k (a − za)(b − zb) = product + Σ row ⊗ column over the
    corrections, every term an integer held exactly in float32 or float64."""
    a_centred, a_shift = centred(a, a_zero_point)
    b_centred, b_shift = centred(b, b_zero_point)
    k = a.shape[1]
    largest_product = int(np.abs(a_centred).max()) * int(np.abs(b_centred).max())
    chunk = k if largest_product == 0 else max(1, FLOAT32_EXACT // largest_product)
    if chunk >= k:
        product = a_centred @ b_centred
    else:
        product = np.zeros((a.shape[0], b.shape[1]), np.float64)
        for start in range(0, k, chunk):
            product += a_centred[:, start:start + chunk] @ b_centred[start:start + chunk]
    corrections = []
    if b_shift is not None:
        corrections.append((a_centred.sum(axis=1, dtype=np.float64), b_shift))
    if a_shift is not None:
        b_sums = b_centred.sum(axis=0, dtype=np.float64)
        corrections.append((np.broadcast_to(a_shift, a.shape[:1]), b_sums if b_shift is None else b_sums + k * b_shift))
    return product, corrections


def centred(x, zero_point):
    """(x − c as float32, c − zero point as float64, or None where that is 0), with c = 128 for UINT8, 0 for INT8.

    The zero point is a vector along A's rows or B's columns; so is the shift, or it has one element.
    """
    centre = 128 if x.dtype == np.uint8 else 0
    shift = np.full(1, centre, np.float64) if zero_point is None else centre - zero_point.astype(np.float64)
    return np.subtract(x, centre, dtype=np.float32), shift if shift.any() else None
