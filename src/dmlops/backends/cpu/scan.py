"""Cumulative sums and products on the CPU, in one pass over memory for any axis, direction and exclusive setting.

The tensor is seen as 3-D views (P, L, Q): P lines before the axis, the axis of length L, Q lines after it
(dimensions merge where the strides allow; the rest are walked one index at a time). Reverse walks the axis from
its end and exclusive writes the tally before adding: neither flips nor shifts a copy.

Two engines scan such views. With numba installed (optional: ``pip install ".[fast]"``), a compiled loop walks
memory once, keeping the running values in a row that stays in L1 (rows of lines, a vector at a time: adding in the
order of the walk, as the reference does, so that its float results are the reference's bits), or walking a
contiguous line a vector at a time (a tree within the vector: deterministic bits within a running tally's bound;
short lines a block of lines at a time, one line a vector lane, longer or strided ones one element at a time, in
the walk's order); it converts FLOAT16 with the processor's own instructions, a vector at a time. On x86-64 a large
output is written past the cache along an outer axis (streaming stores: a store to a line not in cache otherwise
reads the line first, half as much traffic again as the scan's own). Without numba, NumPy does it:
whole rows at a time along an outer or short axis, ``ufunc.accumulate`` along long inner lines, and contiguous lines
of VECTOR_LINE or more a vector at a time as the compiled loop walks them (the same operations in the same order:
the two engines give the same bits, every type and layout). FLOAT16
(accumulated in float32) and exclusive scans in place, whose outputs overwrite inputs still to be added, go
through float32 / scratch blocks there, so that the whole tensor is never converted or copied at once.

The compiled loops (scan_loops) are loaded by the first call that could run them, in a background thread
(``LOOPS``, DMLOPS_NUMBA): numba's import and its first load of compiled code take about half a second, and calls
run NumPy's engine until they are loaded.

A large view is cut into independent pieces (lines before the axis, else lines after it) that threads scan at
once: both engines release the GIL. Contiguous lines of two chunks (CHUNK_BYTES) or more are cut into chunks
instead, each scanned from a carry made of the totals of the chunks before it, in both engines, so that the bits do
not depend on the number of cores. The compiled engine's threads take the chunks in order, on all cores, each chunk
read from memory once for its total and again from the cache for its scan (one thread alone makes the totals in its
scans' pass: scan_chunks).
"""

from __future__ import annotations

import functools
import itertools

import numpy as np

from ...ops.cumulative import ACCUMULATION_DTYPE, CumulativeOperation
from ...types import DataType
from .compiled import Loader, call, entry_point, viewer
from .pieces import CORES, PIECES_PER_CORE, cut, run_in_pieces
from .processor import STREAM_STORES, WALK_BYTES

# NumPy engine: elements per scratch block (float32: 256 KiB, so that a block in and a block out stay in L2).
BLOCK_ELEMENTS = 1 << 16
# NumPy engine: an axis up to this long is walked a whole row at a time even when it is the innermost one, where
# there are more than LINES_PER_STEP lines per element of the axis: ufunc.accumulate pays a fixed cost per line (about
# 35 ns), a row one ufunc call a step (about 1.2 µs). A 64-element line: 45 µs by rows, 6 by accumulate.
SHORT_AXIS = 64
LINES_PER_STEP = 32
# A view this large is scanned in pieces on all cores (both engines release the GIL); below it, threads cost more
# than they save. There are more pieces than cores, so that a core busy with other work takes fewer of them.
PARALLEL_ELEMENTS = 1 << 20

# Compiled engine: an output of this many bytes or more is written with streaming stores along an outer axis, where
# the rows loop takes it. Smaller ones are left in the cache for the next reader, which streaming stores would send
# to memory (a scan of 4-8 MiB float32 then a sum of its output: 5 % slower streamed; of 16 MiB: 10 % faster).
STREAM_BYTES = 16 << 20
# Compiled engine: rows along an outer axis of fewer lines of rows than cores (65536 × 1024 along axis 0: one) are cut
# into strips of a multiple of a cache line's length (from the row's start, which NumPy need not align to a line),
# STRIP_BYTES of a row or more each, one a core, where there are more than STRIP_CORES cores: one core reads and writes
# memory at a fraction of a many-core machine's bandwidth (a 16-core Xeon, 65536 × 1024 along axis 0: float32 12.5 →
# 35.6 GB/s, FLOAT16 10.0 → 19.4), while on 2 cores of a VM the strips ran slower than one thread (24.6 → 18.6 GB/s).
STRIP_BYTES = 512
STRIP_CORES = 2
LINE_BYTES = 64



# The operations by the words the compiled loops take as literals: their ufuncs and identities (dmlops.ops).
UFUNCS = {operation.value: operation.ufunc for operation in CumulativeOperation}
IDENTITIES = {operation.value: operation.identity for operation in CumulativeOperation}


def cumulative(operation: str, x: np.ndarray, out: np.ndarray, axis: int, reverse: bool, exclusive: bool,
               compiled: bool | None = None, pieces: int | None = None, stream: bool | None = None) -> None:
    """out = the running sum or product of x along axis; out may be x itself (in place).

    ``compiled`` picks the engine (None: the compiled one where its loops are loaded, ``LOOPS``, and can run x's
    type; True waits for them to load);
    ``pieces``, into how many independent scans (of lines before the axis) each view is cut for the cores (None:
    by the view's size); ``stream``, whether the compiled engine may write rows with streaming stores (None: where
    out has STREAM_BYTES or more). Lines cut into chunks (chunk_length) are taken by ``pieces`` threads (None: one
    a core).
    """
    loops = compiled_loops(x.dtype, compiled)
    for stage in stages(operation, x, out, axis, reverse, exclusive, loops, pieces, stream):
        run_in_pieces([functools.partial(scan, x_view, out_view) for x_view, out_view, scan in stage], len(stage) > 1)


def prepare(operation: str, x: np.ndarray, out: np.ndarray, axis: int, reverse: bool, exclusive: bool,
            compiled: bool | None = None, pieces: int | None = None, stream: bool | None = None):
    """run(x, out): ``cumulative`` with these options, for arrays laid out as x and out are (dtypes, shapes,
    strides, alignment; out may be x or not). What depends on nothing else is decided here, once: the engine (NumPy's
    while the compiled loops are loading), the 3-D views, their pieces and the compiled loops' entry points; a run
    makes its arrays' views and calls the loops (a 64-element scan: under a microsecond of Python a view, where
    finding all that again took about 30 µs)."""
    loops = compiled_loops(x.dtype, compiled)
    kept = [[(viewer(x, x_view), viewer(out, out_view), scan) for x_view, out_view, scan in stage]
            for stage in stages(operation, x, out, axis, reverse, exclusive, loops, pieces, stream)]

    def run(x, out):
        for stage in kept:
            run_in_pieces([functools.partial(scan, x_view(x), out_view(out)) for x_view, out_view, scan in stage],
                          len(stage) > 1)

    return run


def compiled_loops(dtype: np.dtype, compiled: bool | None):
    """The compiled loops' module (scan_loops) where they scan arrays of dtype, ``compiled`` asking for them or
    not (None: where they are loaded, their loading started if it is not), else None: NumPy's engine."""
    loops = LOOPS.get() if compiled is None else LOOPS.wait() if compiled else None
    return loops if loops is not None and (dtype != np.float16 or loops.HALF_INSTRUCTIONS) else None


def warm_up(loops) -> None:
    """Load one loop (short float32 lines), so that numba's compiler is initialised before a call needs it."""
    sample = np.zeros((1, 2), np.float32)
    entry_point(loops.scan_lines_compiled, sample, sample, "sum", "value", np.float32(0), False, False,
                any_layout=(0, 1), read_only=(0,))  # (as kept_call types it)


# The compiled loops, loaded by the first call that could run them (DMLOPS_NUMBA: in the background by default).
def _import_loops():
    from . import scan_loops

    return scan_loops


LOOPS = Loader(_import_loops, warm_up)


def stages(operation, x, out, axis, reverse, exclusive, loops=None, pieces=None, stream=None):
    """``cumulative``'s scan of x into out as stages run one after another, each a list of pieces (view of x, view
    of out, scan(x view, out view)) run at once; ``loops``: the compiled loops that scan them (None: NumPy's
    engine)."""
    use_compiled = loops is not None
    if use_compiled and stream is None:
        stream = out.nbytes >= STREAM_BYTES
    accumulation = ACCUMULATION_DTYPE.get(DataType.from_numpy(x.dtype), x.dtype)
    found = []
    for x3, out3 in views_3d((x, out), axis):
        lanes = vector_lanes(x3, out3, accumulation)
        chunk = chunk_length(x3, lanes)
        parallel = CORES > 1 and x3.size >= PARALLEL_ELEMENTS
        if use_compiled and chunk:  # every line at once, its chunks taken by a thread a core
            found.append([compiled_chunks(loops, operation, x3, out3, accumulation, reverse, exclusive, lanes, chunk,
                                          pieces or (CORES if parallel else 1))])
            continue
        count = pieces
        if count is None:
            count = PIECES_PER_CORE * CORES if parallel else 1
        strips = min(CORES, x3.shape[2] * x3.itemsize // STRIP_BYTES) if CORES > STRIP_CORES else 1
        if use_compiled and parallel and pieces is None and x3.shape[0] < CORES and strips > 1:
            found.append([compiled_scan(loops, operation, x3[:, :, first:last], out3[:, :, first:last], accumulation,
                                        reverse, exclusive, stream and STREAM_STORES)
                          for first, last in cut(x3.shape[2], strips, LINE_BYTES // x3.itemsize)])
            continue
        stage = []
        for first, last in cut(x3.shape[0], count, 1):
            if use_compiled:
                stage.append(compiled_scan(loops, operation, x3[first:last], out3[first:last], accumulation,
                                           reverse, exclusive, stream and STREAM_STORES))
            else:
                stage.append((x3[first:last], out3[first:last], functools.partial(
                    scan_numpy, operation, accumulation=accumulation, reverse=reverse, exclusive=exclusive,
                    lanes=lanes, chunk=chunk)))
        found.append(stage)
    return found


# -- 3-D views ----------------------------------------------------------------------------------------------------


def views_3d(arrays, axis: int):
    """Tuples of (P, L, Q) views of the arrays (of one shape) that together cover them.

    The dimensions before the axis merge into P and those after it into Q, from the innermost outwards, while
    every array's strides allow; the dimensions left over are walked one index at a time.
    """
    shape = arrays[0].shape
    before_size, before_strides, before_loop = merge(arrays, range(axis))
    after_size, after_strides, after_loop = merge(arrays, range(axis + 1, len(shape)))
    loop = before_loop + after_loop
    for index in np.ndindex(*(shape[d] for d in loop)):
        at = [slice(None)] * len(shape)
        for d, i in zip(loop, index):
            at[d] = slice(i, i + 1)
        yield tuple(
            np.lib.stride_tricks.as_strided(
                view, (before_size, shape[axis], after_size),
                (before_strides[k], view.strides[axis], after_strides[k]), writeable=view.flags.writeable)
            for k, view in enumerate(array[tuple(at)] for array in arrays))


def merge(arrays, dims):
    """(size, each array's stride, dimensions left to loop over) for the dimensions ``dims`` merged as one."""
    size, strides, loop = 1, (0,) * len(arrays), []
    for d in reversed(dims):
        if arrays[0].shape[d] == 1:
            continue
        d_strides = tuple(array.strides[d] for array in arrays)
        if size == 1:
            size, strides = arrays[0].shape[d], d_strides
        elif not loop and d_strides == tuple(stride * size for stride in strides):
            size *= arrays[0].shape[d]
        else:
            loop.insert(0, d)
    return size, strides, loop


# -- the NumPy engine ---------------------------------------------------------------------------------------------


def scan_numpy(operation, x3, out3, accumulation, reverse, exclusive, lanes=0, chunk=0) -> None:
    """Scan (P, L, Q) views with NumPy calls, through scratch blocks where the input must be converted (FLOAT16)
    or kept (exclusive in place): blocks of lines, each walked along the axis in segments with a carry. Lines of
    ``vector_lanes`` (lanes > 0) walk vectors, as the compiled engine does, to its bits, in chunks of
    ``chunk_length`` (chunk > 0). As quiet as the compiled loops: no warnings of overflows or NaNs."""
    with np.errstate(all="ignore"):
        scan_views_numpy(operation, x3, out3, accumulation, reverse, exclusive, lanes, chunk)


def scan_views_numpy(operation, x3, out3, accumulation, reverse, exclusive, lanes, chunk) -> None:
    if lanes:
        x2, out2 = x3[:, :, 0], out3[:, :, 0]
        if reverse:
            x2, out2 = x2[:, ::-1], out2[:, ::-1]
        scan_vectors_numpy(operation, x2, out2, accumulation, exclusive, lanes, chunk)
        return
    p_size, length, q_size = x3.shape
    if accumulation == x3.dtype and not (exclusive and np.shares_memory(x3, out3)):
        scan_stretch(operation, x3, out3, np.empty((p_size, q_size), accumulation), True, reverse, exclusive)
        return
    q_block = min(q_size, BLOCK_ELEMENTS)
    segment = min(length, max(1, BLOCK_ELEMENTS // q_block))
    p_block = min(p_size, max(1, BLOCK_ELEMENTS // (q_block * segment)))
    scratch_in = np.empty((p_block, segment, q_block), accumulation)
    scratch_out = np.empty_like(scratch_in)
    carry = np.empty((p_block, q_block), accumulation)
    starts = range(0, length, segment)
    for p0, q0 in itertools.product(range(0, p_size, p_block), range(0, q_size, q_block)):
        p1, q1 = min(p0 + p_block, p_size), min(q0 + q_block, q_size)
        for number, start in enumerate(reversed(starts) if reverse else starts):
            stop = min(start + segment, length)
            block = np.s_[:p1 - p0, :stop - start, :q1 - q0]
            scratch_in[block] = x3[p0:p1, start:stop, q0:q1]
            scan_stretch(operation, scratch_in[block], scratch_out[block], carry[:p1 - p0, :q1 - q0], number == 0,
                         reverse, exclusive)
            out3[p0:p1, start:stop, q0:q1] = scratch_out[block]


def scan_stretch(operation, x, out, carry, fresh, reverse, exclusive) -> None:
    """Scan a stretch of the axis. x and out have the accumulation type and do not overlap when exclusive; carry
    {P, Q} holds the running values before the stretch (unless ``fresh``: it starts the axis) and gets those after."""
    ufunc, identity = UFUNCS[operation], IDENTITIES[operation]
    if reverse:
        x, out = x[:, ::-1], out[:, ::-1]
    if x.shape[2] == 1 and (x.shape[1] > SHORT_AXIS or x.shape[0] <= LINES_PER_STEP * x.shape[1]):
        scan_lines_numpy(ufunc, identity, x[:, :, 0], out[:, :, 0], carry[:, 0], fresh, exclusive)
    else:
        scan_rows_numpy(ufunc, identity, x, out, carry, fresh, exclusive)


def scan_rows_numpy(ufunc, identity, x, out, carry, fresh, exclusive) -> None:
    """One ufunc call per step along the axis, over all P × Q lines at once."""
    length = x.shape[1]
    if exclusive:
        out[:, 0] = identity if fresh else carry
    tally = None if fresh else carry  # the running value before step i
    for i in range(length):
        # where the running value after step i goes: the next output (exclusive) or this one
        target = (out[:, i + 1] if i + 1 < length else carry) if exclusive else out[:, i]
        if tally is None:
            target[...] = x[:, i]  # the first element as it is: identity ⊕ x would turn -0.0 into +0.0
        else:
            ufunc(tally, x[:, i], out=target)
        tally = target
    carry[...] = tally


def scan_lines_numpy(ufunc, identity, x, out, carry, fresh, exclusive) -> None:
    """Lines along the axis (x, out {P, L}), long or few (scan_stretch): ufunc.accumulate walks each line, and the carry
    of the previous stretch is added afterwards."""
    if exclusive:  # out[:, i] is the tally of x[:, :i]
        out[:, 0] = identity if fresh else carry
        head, tallies = x[:, :-1], out[:, 1:]
    else:
        head, tallies = x, out
    ufunc.accumulate(head, axis=1, out=tallies)
    if not fresh:
        ufunc(tallies, carry[:, None], out=tallies)
    if exclusive:
        ufunc(out[:, -1], x[:, -1], out=carry)
    else:
        carry[...] = out[:, -1]


def scan_vectors_numpy(operation, x, out, accumulation, exclusive, lanes, chunk) -> None:
    """The compiled engine's walk of contiguous lines (scan_span, VECTOR_LINE) in NumPy calls, the same operations
    in the same order, so that its bits do not depend on the engine: x, out {P, L} walked forwards (a reverse walk
    comes as flipped views); out may be x. Lines cut into chunks (chunk > 0, chunk_length) walk each chunk from the
    carry before it, carry_c = carry_{c-1} ⊕ the total of chunk c (chunk_totals_numpy), as scan_chunks does."""
    ufunc = UFUNCS[operation]
    identity, neutral = accumulation.type(IDENTITIES[operation]), neutral_of(operation, accumulation)
    count, length = x.shape
    head = x[:, 0].copy()  # the first output of an inclusive line: the input as it is
    rows = max(1, BLOCK_ELEMENTS // length)
    step = chunk or length
    for p0 in range(0, count, rows):
        lines = slice(p0, min(p0 + rows, count))
        carry = np.full(lines.stop - lines.start, neutral, accumulation)
        for start in range(0, length, step):
            span = slice(start, min(start + step, length))
            last = span.stop == length  # (nobody needs the carry after the last chunk)
            total = None if last else chunk_totals_numpy(ufunc, x[lines, span], accumulation, neutral, lanes)
            walk_vectors_numpy(ufunc, x[lines, span], out[lines, span], accumulation, exclusive, lanes, carry)
            if not last:
                carry = ufunc(carry, total)
    out[:, 0] = identity if exclusive else head


def walk_vectors_numpy(ufunc, x, out, accumulation, exclusive, lanes, tally) -> None:
    """x, out {lines, n} walked a vector of lanes at a time from the running values ``tally`` {lines}, then the
    elements after the last vector one after another (scan_span). Blocks of lines and vectors are copied lanes
    first ({lines, lanes, vectors}: each lane a contiguous row), so that the tree within each vector is log2(lanes)
    calls on rows, and the running value before each vector one ``accumulate`` over the vectors' totals."""
    size, length = x.shape
    vectors = length // lanes
    per_block = max(1, BLOCK_ELEMENTS // (size * lanes))  # vectors of a block
    for v0 in range(0, vectors, per_block):
        block = min(per_block, vectors - v0)
        span = slice(v0 * lanes, (v0 + block) * lanes)
        values = np.empty((size, lanes, block), accumulation)
        values[...] = x[:, span].reshape(size, block, lanes).transpose(0, 2, 1)
        by = 1
        while by < lanes:  # lane j ⊕= lane j - by (NumPy reads the overlapping rows before writing them)
            ufunc(values[:, by:], values[:, :-by], out=values[:, by:])
            by *= 2
        # the running value before each vector, then the one after the block: tally ⊕ total, in order
        chain = np.empty((size, block + 1), accumulation)
        chain[:, 0], chain[:, 1:] = tally, values[:, -1]
        ufunc.accumulate(chain, axis=1, out=chain)
        before = chain[:, None, :-1]
        if exclusive:  # lane j gets the tally ⊕ lane j - 1; lane 0, the tally (⊕ the neutral element)
            ufunc(before, values[:, :-1], out=values[:, 1:])
            values[:, 0] = before[:, 0]
        else:
            ufunc(before, values, out=values)
        out[:, span].reshape(size, block, lanes)[...] = values.transpose(0, 2, 1)
        tally = chain[:, -1]
    rest = slice(vectors * lanes, length)  # elements after the last vector, one after another
    if rest.stop > rest.start:
        chain = np.empty((size, rest.stop - rest.start + 1), accumulation)
        chain[:, 0], chain[:, 1:] = tally, x[:, rest]
        ufunc.accumulate(chain, axis=1, out=chain)
        out[:, rest] = chain[:, :-1] if exclusive else chain[:, 1:]


def chunk_totals_numpy(ufunc, x, accumulation, neutral, lanes) -> np.ndarray:
    """The totals {lines} of x {lines, n} combined as chunk_total combines them: groups of four vectors into four
    chains of lanes (each from the neutral element, one group after another: a reduction over the groups' axis,
    which NumPy makes row by row where that axis is not the innermost), then those lanes chain by chain, then the
    elements left, in order."""
    size, length = x.shape
    width = 4 * lanes
    groups = length // width
    rows = np.empty((size, groups, width), accumulation)
    rows[...] = x[:, :groups * width].reshape(size, groups, width)
    rest = np.empty((size, 1 + width + length - groups * width), accumulation)
    rest[:, 0], rest[:, width + 1:] = neutral, x[:, groups * width:]
    ufunc.reduce(rows, axis=1, dtype=accumulation, out=rest[:, 1:width + 1], initial=neutral)
    ufunc.accumulate(rest, axis=1, out=rest)
    return rest[:, -1]


def vector_lanes(x3, out3, accumulation: np.dtype) -> int:
    """The elements of a vector for (P, L, Q) views whose lines walk a vector at a time (Q = 1, contiguous lines of
    VECTOR_LINE or more: see there), in both engines; else 0 (one element after another)."""
    if x3.shape[2] == 1 and x3.shape[1] >= VECTOR_LINE and contiguous_lines(x3[:, :, 0], out3[:, :, 0]):
        return WALK_BYTES // accumulation.itemsize
    return 0


# -- the compiled engine: which of its loops (scan_loops) scans which views ------------------------------------

# Contiguous lines (Q = 1) walk a vector of WALK_BYTES at a time: its elements' running values within the
# vector come from log2(lanes) shifted copies combined (a tree, not a chain), then the running value before the
# vector is combined with each lane. The chain from one vector to the next is one operation, not one an element: the
# loop runs at the speed of memory rather than at one addition's latency an element, and FLOAT16 converts a vector at
# a time. The float results are deterministic but not the walk's own bits: element i of a vector is c ⊕ (x0 ⊕ ... ⊕
# xi) in a tree's order, within the accumulation bound of a running tally. The running values start at a neutral
# element (−0.0 for float sums: −0.0 + x is x for every x, +0.0 included), and a line's first output is written as
# the walk writes it (the input's own bits, or the identity where exclusive). NumPy's engine walks them the same way
# (scan_vectors_numpy), so that the bits do not depend on the engine.
# Lines this long or longer walk vectors; shorter ones one element after another (or in blocks, SHORT_LINE), which
# the processor overlaps from line to line (lines of 8: 16 GB/s that way, 2 by vectors; of 1024: 6 against 31).
VECTOR_LINE = 128
# Contiguous lines of 2 to SHORT_LINE elements of 2 or 4 bytes are scanned a block of lines at a time, one line a
# vector lane (scan_lines_block): as many lines as a VECTOR_BYTES vector holds elements, loaded and transposed in
# registers so that vector j holds element j of every line; each lane's running values are then a chain of vector
# operations in the walk's order (the walk's own bits), transposed back. One element after another, a core fell
# well short of memory's speed on such lines, FLOAT16 most; longer blocks spill registers, and lines of 8-byte
# elements keep up with memory one element after another (benchmarks/RESULTS.md).
SHORT_LINE = 16
# Other FLOAT16 lines shorter than VECTOR_LINE are scanned in float32 blocks of about this many elements (8 KiB in
# and 8 KiB out, in L1), converted a vector at a time on the way in and out (4M × 8 converting element by element:
# 4.8 GB/s).
HALF_BLOCK = 2048
# Contiguous lines (walked by vectors) of two chunks or more are cut into chunks of this many bytes of input, in the
# walk's order, the last one shorter: each chunk is scanned from a carry, the running value after the chunks before
# it made of their totals (carry_c = carry_{c-1} ⊕ total_c), in both engines, whatever the number of cores, so that
# the bits depend on the line's type and length only. The compiled engine's threads take the chunks in order
# (scan_chunks): a chunk read from memory for its total stays in L2 (1 MiB a core: the chunk in and out) for its scan.
CHUNK_BYTES = 256 << 10
# Pauses a thread spins for the carry before its chunk before it makes that carry itself (about 100 µs on Zen 4, where
# a chunk's total takes 10-20): a thread that is not running (the cores busy with other work) holds up no other.
PATIENCE = 4096


def chunk_length(x3, lanes: int) -> int:
    """The elements of a chunk for (P, L, Q) views whose lines are cut into chunks (walked by vectors:
    ``vector_lanes`` > 0; L of two chunks or more), else 0."""
    chunk = max(1, CHUNK_BYTES // x3.itemsize)
    return chunk if lanes and x3.shape[1] >= 2 * chunk else 0


def compiled_chunks(loops, operation, x3, out3, accumulation, reverse, exclusive, lanes, chunk, threads):
    """(view of x3, view of out3, scan(x view, out view)): lines cut into chunks scanned by scan_chunks on
    ``threads`` threads at once (no more than there are chunks), each call with tickets, states, totals and carries
    of its own, and each thread with its own scratch."""
    x3, out3, element, accumulation = compiled_views(x3, out3, accumulation)
    x2, out2 = x3[:, :, 0], out3[:, :, 0]
    count, length = x2.shape
    tickets = count * -(-length // chunk)
    threads = min(threads, tickets)
    constants = (operation == "product", element, accumulation.type(IDENTITIES[operation]),
                 neutral_of(operation, accumulation), reverse, exclusive, lanes, chunk, PATIENCE, threads)

    def shared():  # tickets taken; each chunk's state, total and carry
        return (np.zeros(1, np.int64), np.zeros(tickets, np.int64), np.empty(tickets, accumulation),
                np.empty(tickets, accumulation))

    def scratch():
        return np.empty((4, lanes), accumulation)

    entry = entry_point(loops.scan_chunks, x2, out2, *constants, *shared(), scratch(), read_only=(0,))

    def scan(x2, out2):
        state = shared()
        run_in_pieces([lambda: entry(x2, out2, *constants, *state, scratch()) for _ in range(threads)], threads > 1)
    return x2, out2, scan


def neutral_of(operation: str, accumulation: np.dtype):
    """``CumulativeOperation.neutral`` in the accumulation type."""
    return accumulation.type(CumulativeOperation(operation).neutral(accumulation.kind == "f"))


def contiguous_lines(x2, out2) -> bool:
    return x2.strides[1] == x2.itemsize and out2.strides[1] == out2.itemsize


def compiled_scan(loops, operation, x3, out3, accumulation, reverse, exclusive, stream=False):
    """(view of x3, view of out3, scan(x view, out view)): the compiled loop that scans (P, L, Q) views such as x3
    and out3 in one pass, and the views of them it takes; x3 may be out3 (in place). ``stream``: streaming stores
    pay (on x86: STREAM_STORES); the rows take them where both x3's and out3's are contiguous."""
    x3, out3, element, accumulation = compiled_views(x3, out3, accumulation)
    identity = accumulation.type(IDENTITIES[operation])
    product = operation == "product"  # (the loops that take it as a run-time flag: scan_loops)
    width = x3.shape[2]
    # rows streamed where every element goes past the cache: elements of 32 and 64 bits alone through movnti,
    # FLOAT16 in rows of whole vectors only (``whole_vectors``)
    vector_bytes = loops.streamed_bytes(element == "half") if stream else 0
    if stream and width > 1 and out3.flags.aligned and x3.strides[2] == out3.strides[2] == x3.itemsize and \
            (element != "half" or whole_vectors(out3, vector_bytes)):
        # (x3 and out3 typed as of any layout: the steps address the rows' elements themselves, which are contiguous)
        def scan_streamed(x3, out3):  # its running row as aligned as each call's out
            call(loops.scan_rows_streamed, x3, out3, product, element, identity, reverse, exclusive,
                 running_row(width, accumulation, out3, vector_bytes), any_layout=(0, 1), read_only=(0,))
        return x3, out3, scan_streamed
    x2, out2 = x3[:, :, 0], out3[:, :, 0]  # 2-D where Q = 1, so that contiguous lines compile as such
    lanes = vector_lanes(x3, out3, accumulation)
    if lanes:
        return x2, out2, kept_call(loops.scan_lines_vectors, x2, out2, product, element, identity,
                                   neutral_of(operation, accumulation), reverse, exclusive, lanes)
    length = x3.shape[1]
    if width == 1 and x2.flags.c_contiguous and out2.flags.c_contiguous and 2 <= length <= SHORT_LINE and \
            x2.itemsize <= 4:
        return x2, out2, kept_call(loops.scan_lines_blocks, x2, out2, product, element, identity, reverse,
                                   exclusive, str(length))
    if width == 1 and element == "half" and x2.flags.c_contiguous and out2.flags.c_contiguous:
        lines = max(1, HALF_BLOCK // length)
        return x2, out2, kept_call(loops.scan_half_lines, x2, out2, operation, identity, reverse, exclusive,
                                   scratch=lambda: (np.empty((lines, length), np.float32),
                                                    np.empty((lines, length), np.float32),
                                                    np.empty(lines, np.uint16)))
    if width == 1:
        return x2, out2, kept_call(loops.scan_lines_compiled, x2, out2, operation, element, identity, reverse,
                                   exclusive, any_layout=True)
    # (these two walk their lines through strides as fast typed as of any layout, but FLOAT16 rows, whose conversions
    # LLVM vectorises only where it knows their elements' stride: benchmarks/RESULTS.md)
    return x3, out3, kept_call(loops.scan_rows_compiled, x3, out3, operation, element, identity, reverse, exclusive,
                               scratch=lambda: (np.empty(width, accumulation),), any_layout=element != "half")


def whole_vectors(out3, vector_bytes: int) -> bool:
    """Whether every row of out3 ({P, L, Q}, rows contiguous) is whole vectors on boundaries of ``vector_bytes``
    (FLOAT16 streams only so: its single elements are stored as usual, and a row of a few such stores among
    streaming ones ran slower than one of ordinary stores, 8-15 against 18-19 GB/s)."""
    return all(size % vector_bytes == 0 for size in (out3.ctypes.data, out3.shape[2] * out3.itemsize,
                                                      *out3.strides[:2]))


def compiled_views(x3, out3, accumulation: np.dtype):
    """(x3, out3, element, accumulation) as the compiled loops take them: FLOAT16 as its bits ("half": numba has no
    float16, the loops convert it), unsigned integers as the signed ones of their width (sums and products wrap
    to the same bits in either, so that one compiled loop serves both), other types as they are ("value")."""
    if x3.dtype == np.float16:
        return x3.view(np.uint16), out3.view(np.uint16), "half", accumulation
    if x3.dtype.kind == "u":
        signed = np.dtype(f"i{x3.itemsize}")
        return x3.view(signed), out3.view(signed), "value", signed
    return x3, out3, "value", accumulation


def kept_call(kernel, x, out, *constants, scratch=tuple, any_layout: bool = False):
    """scan(x, out) = kernel(x, out, *constants, *scratch()) for arrays of the types of x and out, through the entry
    point compiled for them (x typed as read-only: one compiled loop for writable and read-only inputs; with
    ``any_layout``, x and out typed as of any layout: one for contiguous and strided views), found once.
    ``scratch`` returns the scratch arrays of one call, made for each call, so that calls on several threads keep
    apart."""
    entry = entry_point(kernel, x, out, *constants, *scratch(), any_layout=(0, 1) if any_layout else (),
                        read_only=(0,))
    return lambda x, out: entry(x, out, *constants, *scratch())


def running_row(size: int, dtype: np.dtype, out, vector_bytes: int) -> np.ndarray:
    """An empty array of ``size`` (the rows' running values, of dtype) whose vectors fall on boundaries of their
    size where out's do on boundaries of ``vector_bytes`` (element i starting a vector in both), so that the running
    row's vectors are as aligned as the output's (a vector split across two cache lines costs both)."""
    lanes = vector_bytes // out.itemsize
    phase = out.ctypes.data % vector_bytes // out.itemsize * dtype.itemsize  # (out's element index, as bytes)
    block = np.empty(size + lanes, dtype)
    start = (phase - block.ctypes.data) % (lanes * dtype.itemsize) // dtype.itemsize
    return block[start:start + size]
