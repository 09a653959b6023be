"""The CPU quantized matmul's compiled code (numba): the integer GEMM's kernels (integer_gemm), the requantization
of exact sums and the product of one matrix in one compiled call. Imported by qmatmul's loader (``qmatmul.LOOPS``),
in the background by default, so that a first quantized matmul does not wait for numba: it runs qmatmul's NumPy path,
which gives the same bits, until this is loaded."""

from __future__ import annotations

import numpy as np
from numba.core import types
from numba.core.imputils import impl_ret_borrowed
from numba.extending import intrinsic

from . import driver, integer_gemm, requantization  # noqa: F401  (integer_gemm, requantization: qmatmul's)
from .atomics import call_begins, call_ends, ring, run_on_numba_threads, wait_for_ring  # noqa: F401  (qmatmul's)
from .jit import callee, compiled, new_array


@compiled
def product_in_one_call(kernel, layout, state, counts, a, a_sign, a_scale, a_zero_point, b, b_sign, b_scale,
                        b_zero_point, output_scale, output_zero_point, low, high, out, buffers, b_packed, doorbell,
                        wait):
    """This thread's part of prepare_one_call's product (``pieces.run_on_cores``: every thread of it gets the same
    arguments, ``wait`` and ``doorbell`` aside; ``kernel`` and ``layout`` literal strings, ``state`` and ``counts``
    as ``driver.product_pieces`` takes them, a, b and out as their bits (uint8), the signs of a and b as
    ``integer_gemm.operand`` gives them, A's and the output's scales and zero points numbers (per tensor), B's scale
    a float32 vector and its zero point's bits (uint8), each of one value or one a column, ``buffers`` the tuple of
    ``integer_gemm.scratch_layouts`` and ``b_packed`` as ``driver.product_pieces`` takes them; it begins and ends
    as ``atomics.call_begins`` and ``call_ends`` say): False, out unwritten, where a scale is zero, NaN or
    infinite. (Its cached machine code includes the loops of integer_gemm and compiled, but numba renews it only
    when this file changes: after editing those, delete this module's numba cache, ``__pycache__/qmatmul_loops.*``.)
    """
    call_begins(doorbell, wait)
    valid, a_zero, b_zero, finish = one_call_parameters(a_scale, a_zero_point, b_sign, b_scale, b_zero_point,
                                                        output_scale, output_zero_point, low, high, out)
    if valid:  # (else every thread finds it: none takes a piece)
        driver.product_pieces(kernel, layout, state, counts, a, a_sign, a_zero, b, b_sign, b_zero, buffers,
                              b_packed, finish, wait)
    call_ends(doorbell, wait)
    return valid


@callee
def one_call_parameters(a_scale, a_zero_point, b_sign, b_scale, b_zero_point, output_scale, output_zero_point, low,
                        high, out):
    """(whether every scale is non-zero and finite, A's and B's zero points as int32 vectors, the requantization's
    arguments as ``driver.finish_rows`` takes them) of product_in_one_call's parameters."""
    m, n = out.shape
    # A's and the output's, one a row, and B's, one a column: a loop for each (np.full, astype, slices and tuples of
    # arrays compile several times the code, a tenth of a second or more at a first product)
    a_scales, output_scales = new_array(m, np.float32), new_array(m, np.float32)
    a_zero, zero_point = new_array(m, np.int32), new_array(m, np.float64)
    for i in range(m):
        a_scales[i], output_scales[i], a_zero[i], zero_point[i] = (a_scale, output_scale, a_zero_point,
                                                                    output_zero_point)
    # (a scale is valid where 0 < |scale| < ∞: NaN compares false; the tests joined by &, not `and`: each `and` is a
    # branch more to compile)
    a_size, output_size = abs(np.float32(a_scale)), abs(np.float32(output_scale))
    valid = (0 < a_size) & (a_size < np.inf) & (0 < output_size) & (output_size < np.inf)
    # (B's vectors of one element or of n, each in a loop of its own that LLVM vectorises: one loop that read
    # b_scale[min(j, last)] took 13 µs for 4096 columns)
    b_scales, b_zero = new_array(n, np.float32), new_array(n, np.int32)
    per_column_scale, per_column_zero = b_scale.shape[0] == n, b_zero_point.shape[0] == n
    for j in range(n):
        b_scales[j] = b_scale[j if per_column_scale else 0]
    for j in range(n):
        size = abs(b_scales[j])
        valid &= (0 < size) & (size < np.inf)
    for j in range(n):  # (a zero point's bits with its type's sign, 128 for INT8: a value is (its bits xor 128) − 128)
        b_zero[j] = np.int32(b_zero_point[j if per_column_zero else 0] ^ b_sign) - np.int32(b_sign)
    finish = (a_scales, b_scales, output_scales, zero_point, low, high, out)
    return valid, a_zero, b_zero, typed_as_passed(finish)


@intrinsic
def typed_as_passed(typing_context, finish):
    """finish (requantize_rows' arguments: four vectors, low, high, out) typed as integer_gemm passes it to the
    product's pieces from Python: its vectors read-only and of any layout, its out of any layout (the same arrays),
    so that the pieces (``driver.product_pieces``) compile once for both (a second or two for each kernel and
    layout)."""
    passed = types.Tuple([kind.copy(layout="A", readonly=True) for kind in finish.types[:4]] + list(finish.types[4:6])
                         + [finish.types[6].copy(layout="A")])

    def codegen(context, builder, signature, arguments):
        return impl_ret_borrowed(context, builder, passed, context.cast(builder, arguments[0], finish, passed))

    return passed(finish), codegen

