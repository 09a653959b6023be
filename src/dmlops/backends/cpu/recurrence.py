"""The first-order linear recurrence of the cumulative product's gradient on the CPU (dmlops.ops.cumulative_gradient):
out = scale ⊙ R along one axis, R_k = a_p·R_p + (b_p if exclusive else b_k), p the element walked just before k.

With numba (and, for FLOAT16, the processor's conversion instructions) compiled loops walk the (P, L, Q) views of
scan: a line at a time, its running value in a register (Q = 1), or a row of Q lines at a time, their running
values in a small array that stays in L1; without it NumPy walks the axis a step at a
time over all other dimensions at once. Both accumulate in float32 for FLOAT16 and round once per output.
"""

from __future__ import annotations

import functools

import numpy as np

from ...ops.cumulative import accumulation_dtype
from .compiled import call
from .pieces import CORES, PIECES_PER_CORE, cut, run_in_pieces
from .scan import LOOPS, PARALLEL_ELEMENTS, views_3d

# The scans' compiled loops, which these build on: loaded here, at the first recurrence (None without numba).
scan_loops = LOOPS.wait()


def linear_recurrence(a: np.ndarray, b: np.ndarray, scale: np.ndarray, out: np.ndarray, axis: int, reverse: bool,
                      exclusive: bool, compiled: bool | None = None, pieces: int | None = None) -> None:
    """out = scale ⊙ R (see the module); a, b and out of one type, scale of its accumulation type, out apart from the
    others. ``compiled`` picks the engine (None: the compiled one where it can run out's type); ``pieces``, into how
    many independent runs (of lines before the axis) the compiled engine cuts each view for the cores (None: by the
    view's size)."""
    accumulation = accumulation_dtype(out.dtype)
    can_compile = scan_loops is not None and (out.dtype != np.float16 or scan_loops.HALF_INSTRUCTIONS)
    if not (can_compile if compiled is None else compiled and can_compile):
        recurrence_numpy(a, b, scale, out, axis, reverse, exclusive, accumulation)
        return
    element = "half" if out.dtype == np.float16 else "value"
    for a3, b3, scale3, out3 in views_3d((a, b, scale, out), axis):
        if element == "half":  # numba has no float16: the loop reads and writes its bits
            a3, b3, out3 = a3.view(np.uint16), b3.view(np.uint16), out3.view(np.uint16)
        count = pieces
        if count is None:
            count = PIECES_PER_CORE * CORES if CORES > 1 and a3.size >= PARALLEL_ELEMENTS else 1
        calls = []
        for first, last in cut(a3.shape[0], count, 1):
            views = [view[first:last] for view in (a3, b3, scale3, out3)]
            if a3.shape[2] == 1:  # 2-D, so that contiguous lines compile as such
                calls.append(functools.partial(call, recurrence_lines_compiled, *(view[:, :, 0] for view in views),
                                               element, reverse, exclusive))
            else:
                calls.append(functools.partial(call, recurrence_rows_compiled, *views, element, reverse, exclusive,
                                               np.empty(a3.shape[2], accumulation)))
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


if scan_loops is not None:
    from .scan_loops import compiled, load, store

    @compiled
    def recurrence_lines_compiled(a, b, scale, out, element, reverse, exclusive):
        """Q = 1 (a, b, scale, out {P, L}): each line walks the axis, its running value in a register."""
        length = a.shape[1]
        step = -1 if reverse else 1
        for p in range(a.shape[0]):
            k = length - 1 if reverse else 0
            state = scale.dtype.type(0) if exclusive else load(element, b[p], k)
            store(element, out[p], k, scale[p, k] * state)
            for _ in range(length - 1):
                previous, k = np.uint64(k), k + step  # unsigned: no check for an index < 0
                at = np.uint64(k)
                # both read before the chain's operations: a FLOAT16 read after them was widened in a register that
                # the processor took as waiting on the running value (a third slower)
                coefficient, term = load(element, a[p], previous), load(element, b[p], previous if exclusive else at)
                state = coefficient * state + term
                store(element, out[p], at, scale[p, at] * state)

    @compiled
    def recurrence_rows_compiled(a, b, scale, out, element, reverse, exclusive, state):
        """Q > 1: each row of Q lines walks the axis, their running values in ``state`` ({Q}), a vector at a time
        where the rows are contiguous."""
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
