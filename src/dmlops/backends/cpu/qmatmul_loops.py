"""The CPU quantized matmul's compiled code (numba): the integer GEMM's kernels (integer_gemm), the requantization
of exact sums and the product of one matrix in one compiled call. Imported by qmatmul's loader (``qmatmul.LOOPS``),
in the background by default, so that a first quantized matmul does not wait for numba: it runs qmatmul's NumPy path,
which gives the same bits, until this is loaded."""

from __future__ import annotations

import numba
import numpy as np

from . import integer_gemm
from .integer_gemm import as_vector

compiled = numba.njit(nogil=True, cache=True)


@compiled
def requantize_rows(product, row_terms, column_terms, a_scale, b_scale, output_scale, zero_point, low, high,
                    out, first, last):
    """out[first:last] = requantize() of product + row_terms @ column_terms ({M, 2} @ {2, N}; no rows: no terms)
    there, element by element, in its order of operations: the multiplier (sa·sb)/so in float64, recomputed only
    where the row's scales change; rint rounds half to even."""
    columns = out.shape[1]
    multiplier = np.empty(columns)
    sums = np.empty(columns)
    for m in range(first, last):
        if m == first or a_scale[m] != a_scale[m - 1] or output_scale[m] != output_scale[m - 1]:
            sa, so = np.float64(a_scale[m]), np.float64(output_scale[m])
            for j in range(columns):
                multiplier[j] = (sa * np.float64(b_scale[j])) / so
        if row_terms.shape[0] == 0:  # the sums as they are (a third faster than adding terms of 0)
            requantize_row(product[m], multiplier, zero_point[m], low, high, out[m])
            continue
        row_sum, row_shift = row_terms[m, 0], row_terms[m, 1]
        source = product[m]
        for j in range(columns):
            sums[j] = np.float64(source[j]) + (row_sum * column_terms[0, j] + row_shift * column_terms[1, j])
        requantize_row(sums, multiplier, zero_point[m], low, high, out[m])


@compiled
def requantize_row(sums, multiplier, zero, low, high, target):
    for j in range(target.shape[0]):
        value = np.rint(np.float64(sums[j]) * multiplier[j]) + zero
        value = value if value > low else low  # comparisons, not min/max, so that the loop is vectorised
        target[j] = value if value < high else high

@compiled
def product_in_one_call(kernel, path, a, a_scale, a_zero_point, b, b_scale, b_zero_point, output_scale,
                        output_zero_point, low, high, out, buffers):
    """prepare_one_call's product (``kernel`` and ``path`` literal strings, ``buffers`` the tuple of
    ``integer_gemm.scratch_layouts``): False, out unwritten, where a scale is zero, NaN or infinite. (Its
    cached machine code includes the loops of integer_gemm and compiled, but numba renews it only when
    this file changes: after editing those, delete this module's numba cache, ``__pycache__/qmatmul_loops.*``.)"""
    m, n = out.shape
    a_scale, output_scale = as_vector(a_scale, m, np.float32), as_vector(output_scale, m, np.float32)
    b_scale = as_vector(b_scale, n, np.float32)
    for scales in (a_scale, b_scale, output_scale):
        for value in scales:
            if value == 0 or not np.isfinite(value):
                return False
    sums = integer_gemm.exact_sums(kernel, path, a, a_zero_point, b, b_zero_point, buffers)
    requantize_rows(sums, np.zeros((0, 2)), np.zeros((2, n)), a_scale, b_scale, output_scale,
                    as_vector(output_zero_point, m, np.float64), low, high, out, 0, m)
    return True
