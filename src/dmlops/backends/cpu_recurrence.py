"""The first-order linear recurrence of the cumulative product's gradient on the CPU (dmlops.ops.cumulative_gradient):
out = scale ⊙ R along one axis, R_k = a_p·R_p + (b_p if exclusive else b_k), p the element walked just before k.

With numba (and, for FLOAT16, the processor's conversion instructions) one compiled loop walks the (P, L, Q) views
of cpu_scan, the running values of a row of Q lines in a small array; without it NumPy walks the axis a step at a
time over all other dimensions at once. Both accumulate in float32 for FLOAT16 and round once per output.
"""

from __future__ import annotations

import functools

import numpy as np

from ..ops.cumulative import ACCUMULATION_DTYPE
from ..types import DataType
from .cpu_pieces import CORES, PIECES_PER_CORE, cut, run_in_pieces
from .cpu_scan import HALF_INSTRUCTIONS, PARALLEL_ELEMENTS, call, numba, views_3d


def linear_recurrence(a: np.ndarray, b: np.ndarray, scale: np.ndarray, out: np.ndarray, axis: int, reverse: bool,
                      exclusive: bool, compiled: bool | None = None) -> None:
    """out = scale ⊙ R (see the module); a, b and out of one type, scale of its accumulation type, out apart from the
    others. ``compiled`` picks the engine (None: the compiled one where it can run out's type)."""
    accumulation = ACCUMULATION_DTYPE.get(DataType.from_numpy(out.dtype), out.dtype)
    can_compile = numba is not None and (out.dtype != np.float16 or HALF_INSTRUCTIONS)
    if not (can_compile if compiled is None else compiled and can_compile):
        recurrence_numpy(a, b, scale, out, axis, reverse, exclusive, accumulation)
        return
    element = "half" if out.dtype == np.float16 else "value"
    for a3, b3, scale3, out3 in views_3d((a, b, scale, out), axis):
        if element == "half":  # numba has no float16: the loop reads and writes its bits
            a3, b3, out3 = a3.view(np.uint16), b3.view(np.uint16), out3.view(np.uint16)
        count = PIECES_PER_CORE * CORES if CORES > 1 and a3.size >= PARALLEL_ELEMENTS else 1
        calls = [functools.partial(call, recurrence_compiled, a3[first:last], b3[first:last], scale3[first:last],
                                   out3[first:last], element, reverse, exclusive, np.empty(a3.shape[2], accumulation))
                 for first, last in cut(a3.shape[0], count, 1)]
        run_in_pieces(calls, len(calls) > 1)


def recurrence_numpy(a, b, scale, out, axis, reverse, exclusive, accumulation) -> None:
    """One step along the axis at a time, over every line at once."""
    a, b, scale, out = (np.moveaxis(array, axis, 0) for array in (a, b, scale, out))
    walk = range(len(a) - 1, -1, -1) if reverse else range(len(a))
    previous = None
    for k in walk:
        if previous is None:
            state = np.zeros(a.shape[1:], accumulation) if exclusive else b[k].astype(accumulation)
        else:
            state = a[previous].astype(accumulation) * state + b[previous if exclusive else k]
        out[k] = scale[k] * state  # rounded to out's type here, once
        previous = k


if numba is not None:
    from .cpu_scan import compiled, load, store

    @compiled
    def recurrence_compiled(a, b, scale, out, element, reverse, exclusive, state):
        """(P, L, Q) views: each row of Q lines walks the axis, its running values in ``state`` ({Q})."""
        length, width = a.shape[1], a.shape[2]
        step = -1 if reverse else 1
        for p in range(a.shape[0]):
            k = length - 1 if reverse else 0
            term, factor, target = b[p, k], scale[p, k], out[p, k]
            for q in range(width):
                state[q] = 0 if exclusive else load(element, term, q)
                store(element, target, q, factor[q] * state[q])
            for _ in range(length - 1):
                previous, k = k, k + step
                coefficient, term = a[p, previous], b[p, previous] if exclusive else b[p, k]
                factor, target = scale[p, k], out[p, k]
                for q in range(width):
                    state[q] = load(element, coefficient, q) * state[q] + load(element, term, q)
                    store(element, target, q, factor[q] * state[q])
