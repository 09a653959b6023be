"""The operator's requantization of exact int32 sums, compiled (numba): element by element, the multiplier and the
product in the reference's order of operations, so that its bits are the reference's."""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba.core import types
from numba.extending import intrinsic

from .jit import callee, compiled, new_array


@compiled
def requantize_rows(product, row_terms, column_terms, a_scale, b_scale, output_scale, zero_point, low, high,
                    out, first, last):
    """requantize_sums of the product's rows [first, last), called from Python."""
    requantize_sums(product[first:], row_terms, column_terms, a_scale, b_scale, output_scale, zero_point, low, high,
                    out, first, last)


@callee
def requantize_sums(product, row_terms, column_terms, a_scale, b_scale, output_scale, zero_point, low, high,
                    out, first, last):
    """out[first:last] = requantize() of product (its row 0 is out's row ``first``) + row_terms @ column_terms
    ({M, 2} @ {2, N}; no rows, or None: no terms) there, element by element, in its order of operations: the
    multiplier (sa·sb)/so in float64, recomputed only where the row's scales change; rint rounds half to even. With
    row_terms None (a product's pieces: they have no terms) the loop that adds terms is not compiled."""
    columns = out.shape[1]
    multiplier, sums = new_array(columns, np.float64), new_array(columns, np.float64)
    for m in range(first, last):
        if m == first or a_scale[m] != a_scale[m - 1] or output_scale[m] != output_scale[m - 1]:
            sa, so = np.float64(a_scale[m]), np.float64(output_scale[m])
            for j in range(columns):
                multiplier[j] = (sa * np.float64(b_scale[j])) / so
        if row_terms is None or row_terms.shape[0] == 0:  # the sums as they are (a third faster than adding 0)
            requantize_row(product[m - first], multiplier, zero_point[m], low, high, out[m])
            continue
        row_sum, row_shift = row_terms[m, 0], row_terms[m, 1]
        source = product[m - first]
        for j in range(columns):
            sums[j] = np.float64(source[j]) + (row_sum * column_terms[0, j] + row_shift * column_terms[1, j])
        requantize_row(sums, multiplier, zero_point[m], low, high, out[m])


@callee
def requantize_row(sums, multiplier, zero, low, high, target):
    """target = clamp(rint(sums · multiplier) + zero, low, high), clamped before it is rounded, to the bounds less
    the zero point: they are integers, so clamping and rounding commute (NaN goes to low either way), and the value
    rounded is within int32's range, so that one instruction rounds and converts it (a fifth faster on Zen 4)."""
    low_less_zero, high_less_zero, shift = low - zero, high - zero, np.int32(zero)
    for j in range(target.shape[0]):
        value = np.float64(sums[j]) * multiplier[j]
        value = value if value > low_less_zero else low_less_zero  # (comparisons, not min/max: vectorised)
        value = value if value < high_less_zero else high_less_zero
        target[j] = rounded(value, shift)  # (the bits of an int8 into a uint8 view too)


@intrinsic
def rounded(typing_context, value, shift):
    """value (float64, within int32's range) rounded to an int32 as np.rint rounds, in the rounding mode of the
    processor (to nearest, ties to even), plus shift (int32), in int32 arithmetic: llvm.lrint, one instruction on x86
    (cvtsd2si; vectorised, cvtpd2dq), and a 32-bit add (numba's own add of two int32 is 64-bit, which the vectorised
    loop then keeps: widened, added and narrowed 8 lanes at a time)."""
    def codegen(context, builder, signature, arguments):
        lrint = builder.module.declare_intrinsic("llvm.lrint.i32.f64", fnty=ir.FunctionType(ir.IntType(32),
                                                                                            [ir.DoubleType()]))
        return builder.add(builder.call(lrint, arguments[:1]), arguments[1])
    return types.int32(types.float64, types.int32), codegen
