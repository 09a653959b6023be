"""The operator's requantization of exact int32 sums, compiled (numba): element by element (in vectors of LANES
elements, each lane as one element), the multiplier and the product in the reference's order of operations, so that
its bits are the reference's."""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba.core import types
from numba.extending import intrinsic

from .byte_moves import ByteMoves
from .jit import callee, compiled, new_array

# Columns requantized at once by ``requantize_lanes``: two vectors of 8 float64 with AVX-512, four of 4 with AVX2
LANES = 16


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
    rounded is within int32's range, so that one instruction rounds and converts it (a fifth faster on Zen 4).
    LANES columns at a time in vectors (``requantize_lanes``) where sums and target are contiguous, the rest one by
    one."""
    low_less_zero, high_less_zero, shift = low - zero, high - zero, np.int32(zero)
    columns = target.shape[0]
    whole = 0
    if sums.strides[0] == sums.itemsize and target.strides[0] == 1:
        whole = columns - columns % LANES
        for j in range(0, whole, LANES):
            requantize_lanes(sums, multiplier, low_less_zero, high_less_zero, shift, target, j)
    for j in range(whole, columns):
        value = np.float64(sums[j]) * multiplier[j]
        value = value if value > low_less_zero else low_less_zero  # (comparisons, not min/max: NaN goes low)
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


@intrinsic
def requantize_lanes(typing_context, sums, multiplier, low, high, shift, target, column):
    """requantize_row's columns [column, column + LANES) in vectors of LANES: the same operations in the same order,
    lane by lane (llvm.lrint of a vector rounds as the scalar one; LLVM's own vectoriser kept these loops to 256-bit
    vectors on Intel processors, which prefer them). sums int32, float32 or float64, multiplier float64 and target
    bytes, each contiguous."""
    signature = types.none(sums, multiplier, low, high, shift, target, column)

    def codegen(context, builder, signature, arguments):
        int32, int64, double = ir.IntType(32), ir.IntType(64), ir.DoubleType()
        doubles, words = ir.VectorType(double, LANES), ir.VectorType(int32, LANES)
        sums_array, multiplier_array, target_array = (context.make_array(signature.args[i])(context, builder,
                                                                                             arguments[i])
                                                      for i in (0, 1, 5))
        low, high, shift, column = arguments[2], arguments[3], arguments[4], arguments[6]
        moves = ByteMoves(builder, 64)  # (its addresses and splats, for vectors of any type)
        splat = moves.splat

        def lanes_at(array, kind, size):
            return moves.pointer(moves.address(array, builder.mul(column, ir.Constant(int64, size))), kind)

        kind = signature.args[0].dtype  # (float64 as it is; float32 widened, int32 converted: exactly)
        element = {types.float64: double, types.float32: ir.FloatType(), types.int32: int32}[kind]
        values = builder.load(lanes_at(sums_array, ir.VectorType(element, LANES), kind.bitwidth // 8),
                              align=kind.bitwidth // 8)
        values = values if kind == types.float64 else builder.fpext(values, doubles) if kind == types.float32 \
            else builder.sitofp(values, doubles)
        value = builder.fmul(values, builder.load(lanes_at(multiplier_array, doubles, 8), align=8))
        lows, highs = splat(low, doubles), splat(high, doubles)
        value = builder.select(builder.fcmp_ordered(">", value, lows), value, lows)
        value = builder.select(builder.fcmp_ordered("<", value, highs), value, highs)
        lrint = builder.module.declare_intrinsic(f"llvm.lrint.v{LANES}i32.v{LANES}f64",
                                                 fnty=ir.FunctionType(words, [doubles]))
        total = builder.add(builder.call(lrint, [value]), splat(shift, words))
        builder.store(builder.trunc(total, ir.VectorType(ir.IntType(8), LANES)),
                      lanes_at(target_array, ir.VectorType(ir.IntType(8), LANES), 1), align=1)
        return context.get_dummy_value()

    return signature, codegen
