"""The CPU quantized matmul's compiled code (numba): the integer GEMM's kernels (integer_gemm), the requantization
of exact sums and the product of one matrix in one compiled call. Imported by qmatmul's loader (``qmatmul.LOOPS``),
in the background by default, so that a first quantized matmul does not wait for numba: it runs qmatmul's NumPy path,
which gives the same bits, until this is loaded."""

from __future__ import annotations

import numba
import numpy as np

from . import driver, integer_gemm, requantization  # noqa: F401  (integer_gemm, requantization: qmatmul's)
from .atomics import call_begins, call_ends
from .requantization import as_vector

compiled = numba.njit(nogil=True, cache=True)


@compiled
def product_in_one_call(kernel, layout, state, counts, a, a_sign, a_scale, a_zero_point, b, b_sign, b_scale,
                        b_zero_point, output_scale, output_zero_point, low, high, out, buffers, doorbell, wait):
    """This thread's part of prepare_one_call's product (``pieces.run_on_cores``: every thread of it gets the same
    arguments, ``wait`` and ``doorbell`` aside; ``kernel`` and ``layout`` literal strings, ``state`` and ``counts``
    as ``driver.product_pieces`` takes them, a, b and out C-contiguous and as their bits (uint8), the signs of a
    and b as ``integer_gemm.operand`` gives them, ``buffers`` the tuple of ``integer_gemm.scratch_layouts``; it
    begins and ends as ``atomics.call_begins`` and ``call_ends`` say): False, out unwritten, where a scale is
    zero, NaN or infinite. (Its cached machine code includes the loops of integer_gemm and compiled, but numba renews it only
    when this file changes: after editing those, delete this module's numba cache, ``__pycache__/qmatmul_loops.*``.)
    """
    call_begins(doorbell, wait)
    m, n = out.shape
    a_scale, output_scale = as_vector(a_scale, m, np.float32), as_vector(output_scale, m, np.float32)
    b_scale = as_vector(b_scale, n, np.float32)
    for scales in (a_scale, b_scale, output_scale):
        for value in scales:
            if value == 0 or not np.isfinite(value):
                call_ends(doorbell, wait)
                return False  # (every thread finds it: none takes a piece)
    finish = (a_scale, b_scale, output_scale, as_vector(output_zero_point, m, np.float64), low, high, out)
    driver.product_pieces(kernel, layout, state, counts, a, a_sign, as_vector(a_zero_point, m, np.int32), b, b_sign,
                          as_vector(b_zero_point, n, np.int32), buffers, finish, wait)
    call_ends(doorbell, wait)
    return True
