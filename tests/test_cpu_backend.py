"""The CPU backend's fast paths against the plain references of reference.py.

Scans run through both engines (the NumPy one, and the compiled one where numba is installed) on every axis class:
1-D, a long inner axis, a short inner axis, an outer axis, a middle axis; both directions, exclusive or not, in
place or not, strided, broadcast and padded. Block and segment boundaries of the NumPy engine are crossed by
shrinking its blocks; the compiled engine's rows written with streaming stores run on small tensors by request.
The quantized matmul is checked through every way of making its exact sums that can run here (float32 BLAS, and each
kernel of the integer GEMM whose instructions the processor has) across their K chunks, with zero points present
and absent, every signedness, strided and broadcast operands; the choice of kernel, by forcing each one. Outputs
are poisoned first, and memory beside them must stay as it was.
"""

from __future__ import annotations

import dataclasses
import functools
import gc
import itertools
import math
import multiprocessing
import os
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dmlops.backends import cpu
from dmlops.backends.cpu import integer_gemm as cpu_integer_gemm
from dmlops.backends.cpu import kernels as cpu_kernels
from dmlops.backends.cpu import pieces as cpu_pieces
from dmlops.backends.cpu import processor as cpu_processor
from dmlops.backends.cpu import qmatmul as cpu_qmatmul
from dmlops.backends.cpu import scan as cpu_scan
from dmlops import DataType
from dmlops.ops import cumulative as cumulative_op
from dmlops.ops import quantized_matmul as quantized_matmul_op

import dmlops
import reference
from checks import assert_cumulative_matches, rejects
from conftest import examples

# The scans' compiled loops, loaded now (None without numba, or with DMLOPS_NUMBA=off), so that calls that leave the
# engine to dmlops take them, as they do once loaded.
SCAN_LOOPS = cpu_scan.LOOPS.wait()
# The quantized matmul's compiled code, likewise (qmatmul_loops).
QMM_LOOPS = cpu_qmatmul.LOOPS.wait()
ENGINES = [pytest.param(False, id="numpy"),
           pytest.param(True, id="compiled", marks=pytest.mark.skipif(SCAN_LOOPS is None, reason="no numba"))]
SCAN_TYPES = [np.float32, np.float16, np.int32, np.uint32, np.int64, np.uint64]
VARIANTS = list(itertools.product(["sum", "product"], [False, True], [False, True]))  # operation, reverse, exclusive

# (shape, axis): every axis class, lengths on both sides of the NumPy engine's SHORT_AXIS.
AXIS_CLASSES = {
    "1-D": ((997,), 0),
    "long inner axis": ((3, 301), 1),
    "inner axis at SHORT_AXIS": ((5, cpu_scan.SHORT_AXIS), 1),
    "inner axis past SHORT_AXIS": ((5, cpu_scan.SHORT_AXIS + 1), 1),
    "short inner axis": ((203, 8), 1),
    "many short inner lines": ((401, 3), 1),  # more than LINES_PER_STEP a step: NumPy's engine walks rows
    "outer axis": ((211, 6), 0),
    "middle axis": ((3, 67, 5), 1),
    "axis of one": ((4, 1, 3), 1),
}


def random_values(rng, shape, dtype, operation="sum"):
    """Fresh values: full-range integers (so sums and products wrap); floats that keep a product finite."""
    dtype = np.dtype(dtype)
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return rng.integers(info.min, info.max, shape, dtype=dtype, endpoint=True)
    if operation == "product":
        values = rng.uniform(0.9, 1.1, shape) * rng.choice([-1.0, 1.0], shape)
    else:
        values = rng.standard_normal(shape)
    return values.astype(dtype)


def poisoned(shape, dtype):
    dtype = np.dtype(dtype)
    return np.full(shape, np.nan if dtype.kind == "f" else 0x5A, dtype)


def scan(compiled, operation, x, out, axis, reverse, exclusive):
    cpu_scan.cumulative(operation, x, out, axis, reverse, exclusive, compiled=compiled)


@pytest.mark.parametrize("compiled", ENGINES)
@pytest.mark.parametrize("dtype", SCAN_TYPES, ids=lambda t: np.dtype(t).name)
@pytest.mark.parametrize("axis_class", AXIS_CLASSES)
def test_every_axis_class(compiled, dtype, axis_class):
    shape, axis = AXIS_CLASSES[axis_class]
    rng = np.random.default_rng(abs(hash((np.dtype(dtype).name, axis_class))) % 2**32)
    for (operation, reverse, exclusive), in_place in itertools.product(VARIANTS, [False, True]):
        x = random_values(rng, shape, dtype, operation)
        out = x.copy() if in_place else poisoned(shape, dtype)
        scan(compiled, operation, out if in_place else x, out, axis, reverse, exclusive)
        assert_cumulative_matches(out, operation, x, axis, reverse, exclusive)


@pytest.mark.parametrize("block_elements", [1, 5, 64, 100])
@pytest.mark.parametrize("dtype", [np.float16, np.int32], ids=lambda t: np.dtype(t).name)
@pytest.mark.parametrize("shape, axis", [((250,), 0), ((3, 7, 71), 1), ((70, 9), 0), ((2, 250), 1), ((2, 5, 3), 2)])
def test_numpy_engine_blocks_and_segments(monkeypatch, block_elements, dtype, shape, axis):
    """FLOAT16 and exclusive scans in place go through scratch blocks walked in segments with a carry: blocks far
    smaller than the axis and the lines put every boundary and tail to work; segments of 100 > SHORT_AXIS take
    the accumulate path, shorter ones the row path."""
    monkeypatch.setattr(cpu_scan, "BLOCK_ELEMENTS", block_elements)
    rng = np.random.default_rng(block_elements)
    for operation, reverse, exclusive in VARIANTS:
        x = random_values(rng, shape, dtype, operation)
        out = x.copy()  # in place: staged for FLOAT16 always, for INT32 when exclusive
        scan(False, operation, out, out, axis, reverse, exclusive)
        assert_cumulative_matches(out, operation, x, axis, reverse, exclusive)


@st.composite
def strided_scans(draw):
    """x as a strided, reversed-free view or broadcast; out as a padded view of a larger poisoned buffer."""
    rank = draw(st.integers(1, 4))
    shape = tuple(draw(st.lists(st.integers(1, 9), min_size=rank, max_size=rank)))
    steps = [draw(st.sampled_from([1, 1, 2, 3])) for _ in shape]
    broadcast = [draw(st.integers(0, 4)) == 0 for _ in shape]
    pads = [draw(st.sampled_from([0, 0, 1, 4])) for _ in shape]
    permutation = draw(st.permutations(range(rank)))  # out's memory order
    return dict(shape=shape, steps=steps, broadcast=broadcast, pads=pads, permutation=permutation,
                axis=draw(st.integers(0, rank - 1)), dtype=draw(st.sampled_from(SCAN_TYPES)),
                variant=draw(st.sampled_from(VARIANTS)), compiled=draw(st.sampled_from(
                    [False] + ([True] if SCAN_LOOPS else []))), stream=draw(st.booleans()),
                seed=draw(st.integers(0, 2**32 - 1)))


@settings(max_examples=examples(80), deadline=None)
@given(strided_scans())
def test_strides_broadcasts_and_padded_outputs(case):
    rng = np.random.default_rng(case["seed"])
    shape, dtype = case["shape"], case["dtype"]
    operation, reverse, exclusive = case["variant"]
    base = random_values(rng, [size * step for size, step in zip(shape, case["steps"])], dtype, operation)
    x = base[tuple(slice(None, None, step) for step in case["steps"])]
    x = np.lib.stride_tricks.as_strided(  # broadcast dimensions repeat their first index
        x, shape, [0 if repeat else stride for repeat, stride in zip(case["broadcast"], x.strides)],
        writeable=False)
    order = case["permutation"]
    buffer = poisoned([shape[d] + case["pads"][d] for d in order], dtype)
    before = buffer.copy()
    out = np.transpose(buffer[tuple(slice(0, shape[d]) for d in order)], np.argsort(order))
    cpu_scan.cumulative(operation, x, out, case["axis"], reverse, exclusive, compiled=case["compiled"],
                        stream=case["stream"])
    assert_cumulative_matches(out, operation, x, case["axis"], reverse, exclusive)
    outside = np.ones(buffer.shape, bool)
    outside[tuple(slice(0, shape[d]) for d in order)] = False
    np.testing.assert_array_equal(buffer[outside], before[outside])


# (shape, axis, pieces): P = 7 lines before the axis cut in 2, 3 and 5 pieces, lines of Q > 1 (rows) or Q = 1; short
# lines in blocks, each piece with lines left over (53 lines in 3); more pieces than lines (P = 2); no lines to cut
# (P = 1).
PIECES = [((7, 5, 3), 1, 2), ((7, 5, 3), 1, 3), ((7, 41), 1, 5), ((53, 6), 1, 3), ((2, 30, 20), 1, 3),
          ((37, 83), 0, 3)]


@pytest.mark.parametrize("compiled", ENGINES)
@pytest.mark.parametrize("shape, axis, pieces", PIECES)
def test_pieces_on_cores(compiled, shape, axis, pieces):
    rng = np.random.default_rng(pieces)
    for (operation, reverse, exclusive), in_place in itertools.product(VARIANTS, [False, True]):
        for dtype in (np.float16, np.int32):
            x = random_values(rng, shape, dtype, operation)
            out = x.copy() if in_place else poisoned(shape, dtype)
            cpu_scan.cumulative(operation, out if in_place else x, out, axis, reverse, exclusive, compiled=compiled,
                                pieces=pieces)
            assert_cumulative_matches(out, operation, x, axis, reverse, exclusive)


def prepared_scan_arrays(rng, layout, dtype, operation):
    """(x, out, buffer out lies in, mask of out's elements in it) of a layout, with fresh values; out poisoned."""
    values = functools.partial(random_values, rng, dtype=dtype, operation=operation)
    if layout == "in place":
        x = values((5, 140))
        return x, x, x, np.ones(x.shape, bool)
    if layout == "misaligned":  # contiguous, a byte into its memory: the compiled loops' types differ
        x = values((6, 9))
        moved = np.frombuffer(bytearray(x.nbytes + 1), x.dtype, x.size, offset=1).reshape(x.shape)
        moved[...] = x
        x = moved
    else:
        x = {"contiguous": lambda: values((6, 9)), "strided": lambda: values((30, 14))[:, ::2],
             "dimensions left to loop over": lambda: values((3, 2, 4, 5)).transpose(1, 0, 2, 3)}[layout]()
    buffer = poisoned(x.shape[:-1] + (2 * x.shape[-1] + 1,), dtype)
    inside = np.zeros(buffer.shape, bool)
    inside[..., 1::2] = True
    return x, buffer[..., 1::2], buffer, inside


PREPARED_SCANS = {"contiguous": (1, None), "strided": (0, 3), "in place": (1, None),
                  "dimensions left to loop over": (2, None), "misaligned": (1, None)}  # axis, pieces


@pytest.mark.parametrize("compiled", ENGINES)
@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int64], ids=lambda t: np.dtype(t).name)
@pytest.mark.parametrize("layout", PREPARED_SCANS)
def test_prepared_scans_run_on_new_arrays_of_the_layout(compiled, dtype, layout):
    """A scan prepared for arrays of one layout (its views, pieces and compiled loops found once) gives the reference
    on new arrays of that layout, each with fresh values, writing out's elements only; an array laid out alike but
    misaligned (whose compiled loops differ) is prepared again."""
    axis, pieces = PREPARED_SCANS[layout]
    rng = np.random.default_rng(len(layout))
    for operation, reverse, exclusive in VARIANTS[::3]:
        x, out, _, _ = prepared_scan_arrays(rng, "contiguous" if layout == "misaligned" else layout, dtype, operation)
        run = cpu_scan.prepare(operation, x, out, axis, reverse, exclusive, compiled=compiled, pieces=pieces)
        for _ in range(3):
            x, out, buffer, inside = prepared_scan_arrays(rng, layout, dtype, operation)
            before, x_before = buffer.copy(), x.copy()
            run(x, out)
            assert_cumulative_matches(out, operation, x_before, axis, reverse, exclusive)
            np.testing.assert_array_equal(buffer[~inside], before[~inside])


def test_large_tensors_are_cut_into_pieces(monkeypatch):
    """By default a view of PARALLEL_ELEMENTS or more goes to the cores in PIECES_PER_CORE pieces per core."""
    monkeypatch.setattr(cpu_scan, "PARALLEL_ELEMENTS", 50)
    monkeypatch.setattr(cpu_scan, "CORES", 2)
    counts = []

    def run_in_pieces(calls, threads):
        counts.append(len(calls))
        for call in calls:
            call()

    monkeypatch.setattr(cpu_scan, "run_in_pieces", run_in_pieces)
    x = random_values(np.random.default_rng(13), (9, 11), np.float32)
    for rows, columns in [(9, 11), (3, 3)]:
        out = poisoned((rows, columns), np.float32)
        cpu_scan.cumulative("sum", x[:rows, :columns], out, 1, False, False)
        assert_cumulative_matches(out, "sum", x[:rows, :columns], 1, False, False)
    assert counts == [8, 1]


@pytest.mark.parametrize("cores", [1, 2, 16, 64])
def test_products_take_threads_by_their_work(monkeypatch, cores):
    """A product takes as many threads as its work pays for (on the pool's threads about the square root of its
    shares of work, at least two where it is large; on numba's, more than POOL_THREADS, a thread a share; never more
    than the cores), PIECES_PER_CORE pieces each; given pieces, as many threads, up to the cores."""
    for module in (cpu_qmatmul, cpu_pieces):
        monkeypatch.setattr(module, "CORES", cores)
    integer_gemm = cpu_integer_gemm

    def cut(m, k, n, pieces=None):
        return cpu_qmatmul.pieces_of_product(integer_gemm, m, k, n, pieces)

    assert cut(16, 256, 64) == (1, 1)
    assert cut(16, 256, 64, pieces=3) == (3, min(3, cores))
    threads = [cut(m, k, n)[1] for m, k, n in [(512, 512, 512), (1024, 1024, 1024), (128, 4096, 4096)]]
    assert threads == sorted(threads) and all(1 <= t <= cores for t in threads)
    if cores == 1:
        assert threads == [1, 1, 1]
        return
    assert min(threads) >= 2
    assert cut(512, 512, 512) == (cpu_pieces.PIECES_PER_CORE * threads[0], threads[0])
    assert cut(1, 4096, 4096)[1] >= 2  # (a large B: read on several cores)
    # (512³: 16 shares, √16 = 4 of the pool's threads or 16 of numba's; not dozens)
    assert threads[0] == {2: 2, 16: 16, 64: 16}[cores]


def test_pool_takes_no_more_than_its_threads(monkeypatch):
    """Work for more threads than the pool takes, where numba's threads are busy (or there is no entry on them),
    runs on POOL_THREADS threads: the calling one and POOL_THREADS − 1 of the pool's, however many cores there are."""
    given = []
    monkeypatch.setattr(cpu_pieces, "HELPERS", 15)
    monkeypatch.setattr(cpu_pieces, "POOL_THREADS", 3)
    monkeypatch.setattr(cpu_pieces, "give_to_pool", lambda *task, linger: given.append(task))
    monkeypatch.setattr(cpu_pieces, "keep_helpers_off_this_core", lambda: None)
    calls = []

    def entry(*arguments):
        calls.append(arguments)
        return "ran"

    wanted = int(cpu_pieces.DOORBELL[cpu_pieces.WANTED])
    try:
        assert cpu_pieces.run_on_cores(lambda arguments: entry, ("work",), 16) == "ran"
    finally:
        cpu_pieces.DOORBELL[cpu_pieces.WANTED] = wanted  # (no pool thread was given the work)
    assert len(given) == 2  # (two of the pool's threads, beside this one)
    [(work, doorbell, waits)] = calls
    assert work == "work" and doorbell is cpu_pieces.DOORBELL and waits is True


def test_errors_on_other_threads_are_raised():
    def fail():
        raise ValueError("from a piece")

    with pytest.raises(ValueError, match="from a piece"):
        cpu_pieces.run_in_pieces([lambda: None, fail, lambda: None], True)


@settings(max_examples=examples(100), deadline=None)
@given(st.integers(1, 300), st.integers(1, 9))
def test_pieces_cover_each_line_once(size, pieces):
    slices = [slice(*bounds) for bounds in cpu_pieces.cut(size, pieces, 1)]
    assert len(slices) == min(size, pieces)
    assert [s.start for s in slices] + [size] == [0] + [s.stop for s in slices]
    assert all(s.stop > s.start for s in slices)


STREAMED = pytest.mark.skipif(SCAN_LOOPS is None or not cpu_processor.STREAM_STORES,
                              reason="no numba, or no streaming stores on this processor")
# (shape, axis): rows narrower than a vector, of one vector, of vectors and elements left over, rows that start at
# every alignment (13 × 4 bytes apart), several lines before the axis (cut into pieces), long rows.
STREAMED_CASES = [((40, 3), 0), ((33, 8), 0), ((29, 13), 0), ((3, 21, 37), 1), ((9, 200), 0)]


def streamed_rows_taken(monkeypatch) -> list:
    """Calls of the compiled rows loop that writes with streaming stores, from now on."""
    calls = []
    call = cpu_scan.call

    def counted(kernel, *arguments, **options):
        if kernel is SCAN_LOOPS.scan_rows_streamed:
            calls.append(arguments[0].shape)
        call(kernel, *arguments, **options)

    monkeypatch.setattr(cpu_scan, "call", counted)
    return calls


@STREAMED
@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.uint32, np.int64, np.uint64, np.float64],
                         ids=lambda t: np.dtype(t).name)
@pytest.mark.parametrize("shape, axis", STREAMED_CASES)
def test_streamed_rows(monkeypatch, dtype, shape, axis):
    """Rows written with streaming stores: the reference's bits, into outputs that start at several alignments
    inside a larger buffer whose other elements stay as they were, in place or not, on pieces of the lines."""
    calls = streamed_rows_taken(monkeypatch)
    rng = np.random.default_rng(shape[-1])
    for (operation, reverse, exclusive), offset, in_place in itertools.product(VARIANTS, [0, 1, 3], [False, True]):
        x = random_values(rng, shape, dtype, operation)
        if x.dtype.kind == "f":
            x.flat[0] = x.flat[-1] = -0.0  # at either end, kept as it is
        buffer = poisoned(shape[:-1] + (shape[-1] + 4,), dtype)
        before = buffer.copy()
        out = buffer[..., offset:offset + shape[-1]]
        if in_place:
            out[...] = x
        cpu_scan.cumulative(operation, out if in_place else x, out, axis, reverse, exclusive, compiled=True,
                            pieces=2, stream=True)
        assert_cumulative_matches(out, operation, x, axis, reverse, exclusive)
        expected = cumulative_op.reference(operation, x, axis, reverse, exclusive)
        np.testing.assert_array_equal(out.view(f"u{out.itemsize}"), expected.view(f"u{out.itemsize}"))
        outside = np.ones(buffer.shape, bool)
        outside[..., offset:offset + shape[-1]] = False
        np.testing.assert_array_equal(buffer[outside], before[outside])
    assert len(calls) >= len(VARIANTS) * 6


@pytest.mark.skipif(SCAN_LOOPS is None or cpu_pieces.CORES < 2, reason="no numba, or one core")
@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int32, np.uint8], ids=lambda t: np.dtype(t).name)
@pytest.mark.parametrize("shape, axis, stream",
                         [((300, 200), 0, False), ((70, 1000), 0, True), ((1, 90, 333), 1, True)])
def test_rows_in_strips_of_whole_lines(monkeypatch, dtype, shape, axis, stream):
    """Rows along an outer axis of one line of rows, cut into strips of whole cache lines for the cores
    (scan.STRIP_CORES, STRIP_BYTES; the last strip partial), streamed or not, in place or not: the reference's
    bits, every element of out written."""
    monkeypatch.setattr(cpu_scan, "STRIP_CORES", 0)
    monkeypatch.setattr(cpu_scan, "STRIP_BYTES", 64)
    monkeypatch.setattr(cpu_scan, "PARALLEL_ELEMENTS", 1)
    monkeypatch.setattr(cpu_scan, "STREAM_BYTES", 0 if stream else 1 << 40)
    strips = cpu_scan.stages("sum", np.empty(shape, dtype), np.empty(shape, dtype), axis, False, False,
                             loops=SCAN_LOOPS)[0]
    assert len(strips) > 1
    rng = np.random.default_rng(shape[-1])
    for (operation, reverse, exclusive), in_place in itertools.product(VARIANTS, [False, True]):
        x = random_values(rng, shape, dtype, operation)
        out = x.copy() if in_place else poisoned(shape, dtype)
        cpu_scan.cumulative(operation, out if in_place else x, out, axis, reverse, exclusive, compiled=True)
        assert_cumulative_matches(out, operation, x, axis, reverse, exclusive)


@STREAMED
@pytest.mark.parametrize("shape, axis", [((33, 8), 0), ((3, 21, 40), 1), ((9, 200), 0)])
def test_streamed_float16_rows(monkeypatch, shape, axis):
    """FLOAT16 rows stream where every row of out is whole 16-byte vectors on their boundaries (8 halves converted
    at a time): the reference's bits, in place or not, for every variant, out's neighbours untouched; an out one
    element off those boundaries takes the ordinary rows loop, with the same bits."""
    calls = streamed_rows_taken(monkeypatch)
    rng = np.random.default_rng(shape[-1] + 16)
    for (operation, reverse, exclusive), offset, in_place in itertools.product(VARIANTS, [0, 1], [False, True]):
        x = random_values(rng, shape, np.float16, operation)
        x.flat[0] = x.flat[-1] = -0.0  # at either end, kept as it is
        buffer = poisoned(shape[:-1] + (shape[-1] + 16,), np.float16)  # (rows of a multiple of 16 bytes)
        before = buffer.copy()
        start = -buffer.ctypes.data % 16 // 2 + offset
        out = buffer[..., start:start + shape[-1]]
        if in_place:
            out[...] = x
        del calls[:]
        cpu_scan.cumulative(operation, out if in_place else x, out, axis, reverse, exclusive, compiled=True,
                            pieces=2, stream=True)
        assert bool(calls) == (offset == 0)
        expected = cumulative_op.reference(operation, x, axis, reverse, exclusive)
        np.testing.assert_array_equal(out.view(np.uint16), expected.view(np.uint16))
        outside = np.ones(buffer.shape, bool)
        outside[..., start:start + shape[-1]] = False
        np.testing.assert_array_equal(buffer[outside].view(np.uint16), before[outside].view(np.uint16))
    # a run kept for an out of whole vectors, given one of the same layout an element off them (its elements up to
    # the first boundary, and after the last, stored one at a time)
    x = random_values(rng, shape, np.float16)
    buffer = poisoned(shape[:-1] + (shape[-1] + 16,), np.float16)
    start = -buffer.ctypes.data % 16 // 2
    run = cpu_scan.prepare("sum", x, buffer[..., start:start + shape[-1]], axis, True, True, compiled=True,
                           stream=True)
    out = buffer[..., start + 1:start + 1 + shape[-1]]
    del calls[:]
    run(x, out)
    assert calls
    expected = cumulative_op.reference("sum", x, axis, True, True)
    np.testing.assert_array_equal(out.view(np.uint16), expected.view(np.uint16))


COMPILED = pytest.mark.skipif(SCAN_LOOPS is None, reason="no numba")
CACHED_SCANS = """
import sys
import numpy as np
from dmlops.backends.cpu import scan as cpu_scan, scan_loops as cpu_scan_loops
x = np.arange(1.0, 25.0, dtype=np.float32).reshape(2, 3, 4)
for axis, operation, dtype in [(2, "sum", np.float32), (0, "product", np.float16)]:
    out = np.empty_like(x, dtype)
    cpu_scan.cumulative(operation, x.astype(dtype), out, axis, True, True, compiled=True, pieces=1)
line = np.ones(cpu_scan.VECTOR_LINE, np.float32)
cpu_scan.cumulative("sum", line, np.empty_like(line), 0, False, False, compiled=True, pieces=1)
kernels = (cpu_scan_loops.scan_lines_compiled, cpu_scan_loops.scan_rows_compiled, cpu_scan_loops.scan_lines_vectors)
print(sum(kernel.stats.cache_hits.total() for kernel in kernels),
      sum(kernel.stats.cache_misses.total() for kernel in kernels))
"""


@COMPILED
def test_compiled_scans_cached_across_processes(tmp_path):
    """A second process loads the compiled loops from numba's on-disk cache rather than compiling them again (and
    its cache index, keyed by the loops' argument types, can be saved again: no compiled functions among them)."""
    environment = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path)}
    runs = [subprocess.run([sys.executable, "-c", CACHED_SCANS], env=environment, capture_output=True, text=True,
                           check=True).stdout.split() for _ in range(2)]
    (first_hits, compiled), (hits, misses) = runs
    # (a loop compiled inside another's compile, such as the lines left over by a block of lines, is loaded with
    # that other's machine code: its own dispatcher counts no hit for it)
    assert (first_hits, misses) == ("0", "0") and int(compiled) >= int(hits) >= 3


@STREAMED
def test_large_outputs_stream(monkeypatch):
    """By default rows stream where out has STREAM_BYTES or more, and only where the rows of x and out are
    contiguous, out's elements on boundaries of their size (x's may be anywhere), and FLOAT16 only in rows of
    whole vectors (test_streamed_float16_rows)."""
    calls = streamed_rows_taken(monkeypatch)
    monkeypatch.setattr(cpu_scan, "STREAM_BYTES", 40 * 16 * 4)
    rng = np.random.default_rng(14)
    for shape, dtype, step, misaligned, streams in [
            ((40, 16), np.int32, 1, None, True), ((40, 15), np.int32, 1, None, False),
            ((40, 16), np.int32, 2, None, False), ((80, 12), np.float16, 1, None, False),
            ((40, 16), np.int32, 1, "x", True), ((40, 16), np.int32, 1, "out", False)]:
        x = random_values(rng, (shape[0], shape[1] * step), dtype)[:, ::step]
        out = poisoned(shape, dtype)
        if misaligned:  # a copy one byte into a buffer
            moved = np.frombuffer(bytearray(x.nbytes + 1), np.dtype(dtype), x.size, offset=1).reshape(shape)
            moved[...] = x if misaligned == "x" else out
            x, out = (moved, out) if misaligned == "x" else (x, moved)
        del calls[:]
        cpu_scan.cumulative("sum", x, out, 0, False, False)
        assert_cumulative_matches(out, "sum", x, 0, False, False)
        assert calls == ([(1,) + shape] if streams else [])


@pytest.mark.parametrize("compiled", ENGINES)
@pytest.mark.parametrize("shape, axis", [((6000,), 0), ((5000, 3), 0), ((2, 4100), 1)])
def test_float16_long_axes_accumulate_in_float32(compiled, shape, axis):
    """A float16 tally stalls once its step exceeds the values added (2048 + 1 = 2048); a float32 one does not."""
    rng = np.random.default_rng(7)
    x = rng.uniform(0.5, 1.5, shape).astype(np.float16)
    for reverse, exclusive in itertools.product([False, True], repeat=2):
        out = poisoned(shape, np.float16)
        scan(compiled, "sum", x, out, axis, reverse, exclusive)
        assert_cumulative_matches(out, "sum", x, axis, reverse, exclusive)
    ones = np.ones(shape, np.float16)
    scan(compiled, "sum", ones, out, axis, False, False)
    np.testing.assert_array_equal(out, np.cumsum(np.ones(shape), axis=axis).astype(np.float16))


# Axis classes whose compiled scans walk rows of lines (Q > 1) one element after another.
ROWS_CLASSES = ["outer axis", "middle axis", "axis of one"]


@COMPILED
@pytest.mark.parametrize("dtype", [np.float32, np.float16], ids=lambda t: np.dtype(t).name)
def test_compiled_rows_give_the_reference_bits(dtype):
    """The compiled rows loop adds in the order of the walk, as dmlops.ops' reference does, -0.0 and all."""
    rng = np.random.default_rng(8)
    for name, (operation, reverse, exclusive) in itertools.product(ROWS_CLASSES, VARIANTS):
        shape, axis = AXIS_CLASSES[name]
        x = random_values(rng, shape, dtype, operation)
        x.flat[0] = x.flat[-1] = -0.0
        out = poisoned(shape, dtype)
        scan(True, operation, x, out, axis, reverse, exclusive)
        expected = cumulative_op.reference(operation, x, axis, reverse, exclusive)
        np.testing.assert_array_equal(out.view(f"u{out.itemsize}"), expected.view(f"u{out.itemsize}"))


# Short contiguous lines scanned a block of lines at a time (as many as a VECTOR_BYTES vector holds elements: 4, 8
# or 16): lengths on both sides of SHORT_LINE, powers of two and not; 8-byte types never take the blocks.
SHORT_LINES = {np.float32: [2, 3, 5, 8, 13, 16, 17], np.float16: [2, 3, 5, 8, 13, 16, 17], np.int32: [2, 7, 16],
               np.uint32: [3, 8], np.int64: [2, 8, 9], np.uint64: [5, 8], np.float64: [2, 7, 8, 9]}


@COMPILED
@pytest.mark.parametrize("dtype, length", [(dtype, length) for dtype, lengths in SHORT_LINES.items()
                                           for length in lengths], ids=str)
@pytest.mark.parametrize("in_place", [False, True])
def test_short_lines_in_blocks_give_the_reference_bits(dtype, length, in_place):
    """Blocks of lines, one line a vector lane, and the lines left over (35 lines, a multiple of no block): the
    walk's own bits (dmlops.ops' reference, NumPy's engine), every variant, in place too; an inclusive line's first
    element keeps its bits (a signalling NaN)."""
    rng = np.random.default_rng(length)
    shape = (35, length)
    signalling_nan = {2: 0x7C01, 4: 0x7F800001, 8: 0x7FF0000000000001}
    for operation, reverse, exclusive in VARIANTS:
        x = random_values(rng, shape, dtype, operation)
        with_specials = x.copy()
        first = -1 if reverse else 0
        if x.dtype.kind == "f":
            with_specials[::3, first].view(f"u{x.itemsize}")[...] = signalling_nan[x.itemsize]
            with_specials[1::3, first] = -0.0
        for values in (x, with_specials):  # against tests/reference.py, then bit for bit (NaNs and all)
            source = values.copy()
            out = source if in_place else poisoned(shape, dtype)
            scan(True, operation, source, out, 1, reverse, exclusive)
            if values is x:
                assert_cumulative_matches(out, operation, x, 1, reverse, exclusive)
            numpy_out = poisoned(shape, dtype)
            scan(False, operation, values, numpy_out, 1, reverse, exclusive)
            with np.errstate(invalid="ignore"):
                reference_out = cumulative_op.reference(operation, values, 1, reverse, exclusive)
            for expected in (reference_out, numpy_out):
                # a NaN's payload after the first element is the processor's (quieted), not a rule's
                nan = np.isnan(expected) if x.dtype.kind == "f" else np.zeros(shape, bool)
                nan[:, first] = False
                assert np.isnan(out[nan]).all()
                np.testing.assert_array_equal(np.where(nan, 0, out.view(f"u{x.itemsize}")),
                                              np.where(nan, 0, expected.view(f"u{x.itemsize}")))


@COMPILED
@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.float64], ids=lambda t: np.dtype(t).name)
@pytest.mark.parametrize("length", [2, 9, cpu_scan.VECTOR_LINE, cpu_scan.VECTOR_LINE + 7, 301])
def test_compiled_lines_are_deterministic_and_keep_the_first_element(dtype, length):
    """Contiguous lines walk a vector at a time (a tree within it): the same bits on every run, within the bound
    of a running tally, and the first output as the walk writes it (-0.0 kept; the identity where exclusive);
    -0.0 inputs elsewhere leave the running value as it was."""
    rng = np.random.default_rng(length)
    for operation, reverse, exclusive in VARIANTS:
        x = random_values(rng, (3, length), dtype, operation)
        x[:, 0] = x[:, -1] = -0.0
        x[1, length // 2] = -0.0
        runs = []
        for _ in range(2):
            out = poisoned(x.shape, dtype)
            scan(True, operation, x, out, 1, reverse, exclusive)
            runs.append(out.view(f"u{out.itemsize}"))
        np.testing.assert_array_equal(runs[0], runs[1])
        assert_cumulative_matches(out, operation, x, 1, reverse, exclusive)
        expected = cumulative_op.reference(operation, x, 1, reverse, exclusive)
        first = -1 if reverse else 0
        np.testing.assert_array_equal(out[:, first].view(f"u{out.itemsize}"),
                                      expected[:, first].view(f"u{out.itemsize}"))


# Chunks of 32 and of 37 eight-byte elements: float32 lines cut every 64 or 74 elements, FLOAT16 every 128 or 148,
# 8-byte types every 32 or 37 (whole groups of four vectors, whose totals a thread makes in its scans' pass where it
# can, or not a multiple of a vector); lines of one chunk and a bit, of two and a bit, of many and a tail.
TEST_CHUNK_BYTES = [32 * 8, 37 * 8]


@pytest.mark.parametrize("compiled", ENGINES)
@pytest.mark.parametrize("dtype", SCAN_TYPES + [np.float64], ids=lambda t: np.dtype(t).name)
@pytest.mark.parametrize("shape, axis", [((150,), 0), ((301,), 0), ((3, 1000), 1), ((2, 2, 301), 2)])
@pytest.mark.parametrize("chunk_bytes", TEST_CHUNK_BYTES)
def test_long_lines_in_chunks(monkeypatch, compiled, dtype, shape, axis, chunk_bytes):
    """Contiguous lines of two chunks or more (CHUNK_BYTES shrunk), scanned chunk by chunk from the carries of the
    chunks' totals: the reference's values, in place too; the same bits from one thread as from several that take
    the chunks (and the lines) by ticket, run after run, and as from threads that make the carries they wait for
    themselves at once (PATIENCE 0)."""
    monkeypatch.setattr(cpu_scan, "CHUNK_BYTES", chunk_bytes)
    rng = np.random.default_rng(shape[axis])
    waiting = cpu_scan.PATIENCE
    for operation, reverse, exclusive in VARIANTS:
        x = random_values(rng, shape, dtype, operation)
        runs = []
        for pieces, in_place, patience in [(1, False, waiting), (3, True, 0), (1, True, waiting), (2, False, 0)]:
            monkeypatch.setattr(cpu_scan, "PATIENCE", patience)
            out = x.copy() if in_place else poisoned(shape, dtype)
            cpu_scan.cumulative(operation, out if in_place else x, out, axis, reverse, exclusive, compiled=compiled,
                                pieces=pieces)
            runs.append(out.view(f"u{out.itemsize}"))
        for run in runs[1:]:
            np.testing.assert_array_equal(run, runs[0])
        assert_cumulative_matches(out, operation, x, axis, reverse, exclusive)


@COMPILED
def test_compiled_entry_points_follow_the_arguments_types():
    """Entry points are kept by the arguments' types: one kernel called in turn with arrays that differ only in
    layout, writability (a broadcast input is read-only) or type takes the entry point compiled for each."""
    rng = np.random.default_rng(9)
    base = rng.integers(-50, 50, (6, 10)).astype(np.int32)
    inputs = [base, base[:, ::3], base.T, np.broadcast_to(base[:1], (6, 10)), base.astype(np.int64),
              base.astype(np.float32)[::-1]]
    for x in inputs * 2:
        out = poisoned(x.shape, x.dtype)
        cpu_scan.cumulative("sum", x, out, 0, False, False, compiled=True)
        np.testing.assert_array_equal(out, np.cumsum(x, axis=0, dtype=x.dtype))


COMPILED_HALF = pytest.mark.skipif(SCAN_LOOPS is None or not SCAN_LOOPS.HALF_INSTRUCTIONS,
                                   reason="no numba, or no FLOAT16 instructions")


@COMPILED_HALF
@pytest.mark.parametrize("shape", [(10, 17), (7, 21), (3, 40)])
@pytest.mark.parametrize("in_place", [False, True])
def test_short_float16_lines_in_float32_blocks(monkeypatch, shape, in_place):
    """FLOAT16 lines too long for blocks of lines a vector lane and short of VECTOR_LINE go through float32 blocks
    of lines (shrunk to 48 elements: several blocks, the last one short, conversions with elements left over);
    every variant, in place too; an inclusive scan's signalling NaN first keeps its bits."""
    monkeypatch.setattr(cpu_scan, "HALF_BLOCK", 48)
    rng = np.random.default_rng(shape[1])
    for operation, reverse, exclusive in VARIANTS:
        x = random_values(rng, shape, np.float16, operation)
        source = x.copy()
        out = source if in_place else poisoned(shape, np.float16)
        scan(True, operation, source, out, 1, reverse, exclusive)
        assert_cumulative_matches(out, operation, x, 1, reverse, exclusive)
    first = -1 if reverse else 0
    x.view(np.uint16)[:, first] = 0x7C01
    out = poisoned(shape, np.float16)
    scan(True, "sum", x, out, 1, reverse, False)
    np.testing.assert_array_equal(out.view(np.uint16)[:, first], 0x7C01)


@COMPILED_HALF
def test_compiled_float16_rounding_matches_numpy():
    """Every float16, its float32 neighbours, the midpoints between float16 values, and random float32 bits. A
    signalling NaN comes out quiet (the instruction's rule; NumPy keeps it signalling); it cannot come out of an
    addition or a product, and an input copied as it is keeps its bits (test_compiled_float16_copies_the_first)."""
    halves = np.arange(1 << 16, dtype=np.uint16).view(np.float16)
    wide = halves.astype(np.float32)
    finite = halves[np.isfinite(halves)].astype(np.float64)
    finite.sort()
    with np.errstate(invalid="ignore"):
        values = np.concatenate([
            wide, np.nextafter(wide, np.float32(np.inf)), np.nextafter(wide, np.float32(-np.inf)),
            ((finite[:-1] + finite[1:]) / 2).astype(np.float32), np.float32([65504, 65519.996, 65520, 1e30]),
            np.random.default_rng(9).integers(0, 2**32, 1 << 20, dtype=np.uint64).astype(np.uint32).view(
                np.float32)])
    rounded = np.empty(values.shape, np.uint16)
    round_all(values, rounded)
    signalling = np.isnan(values) & (values.view(np.uint32) & 0x400000 == 0)
    with np.errstate(over="ignore"):
        expected = values.astype(np.float16)
    np.testing.assert_array_equal(rounded[~signalling], expected.view(np.uint16)[~signalling])
    assert np.isnan(rounded[signalling].view(np.float16)).all()


@COMPILED_HALF
def test_compiled_float16_widening_matches_numpy():
    bits = np.arange(1 << 16, dtype=np.uint16)
    wide = np.empty(bits.shape, np.float32)
    widen_all(bits, wide)
    expected = bits.view(np.float16).astype(np.float32)
    signalling = np.isnan(expected) & (expected.view(np.uint32) & 0x400000 == 0)
    np.testing.assert_array_equal(wide.view(np.uint32)[~signalling], expected.view(np.uint32)[~signalling])
    assert np.isnan(wide[signalling]).all()


@COMPILED_HALF
@pytest.mark.parametrize("shape", [(5,), (cpu_scan.VECTOR_LINE + 3,), (5, 40)], ids=["a line", "a long line", "rows"])
def test_compiled_float16_copies_the_first(shape):
    """The first element of an inclusive scan is the input's, bit for bit, a signalling NaN included."""
    x = np.random.default_rng(12).standard_normal(shape).astype(np.float16)
    x.view(np.uint16)[0] = x.view(np.uint16)[-1] = 0x7C01  # a signalling NaN at both ends of axis 0
    for reverse in (False, True):
        out = poisoned(shape, np.float16)
        scan(True, "sum", x, out, 0, reverse, False)
        np.testing.assert_array_equal(out.view(np.uint16)[-1 if reverse else 0], 0x7C01)


if SCAN_LOOPS is not None:
    @SCAN_LOOPS.numba.njit
    def round_all(values, rounded):
        for i in range(values.size):
            SCAN_LOOPS.store("half", rounded, i, values[i])

    @SCAN_LOOPS.numba.njit
    def widen_all(bits, wide):
        for i in range(bits.size):
            wide[i] = SCAN_LOOPS.load("half", bits, i)


# -- quantized matmul ------------------------------------------------------------------------------------------

QMM_TYPES = [np.int8, np.uint8]


# (array made from a base, strides within the array's memory)
@pytest.mark.parametrize("make, strides", [
    pytest.param(lambda base: base, (1, 2), id="contiguous"),
    pytest.param(lambda base: base, (0, 1), id="contiguous, broadcast"),
    pytest.param(lambda base: np.frombuffer(base.tobytes(), base.dtype).reshape(base.shape), (1, 2),
                 id="contiguous, read-only"),
    pytest.param(lambda base: base[:, ::2], (1, 2), id="strided"),
    pytest.param(lambda base: base[::-1], (1, 2), id="negative strides"),
    pytest.param(lambda base: np.broadcast_to(base[2:3, 1:2], (4, 6)), (0, 0), id="broadcast, read-only"),
    pytest.param(lambda base: base[1:2, 3:4], (0, 0), id="one element"),
])
def test_restride_views_the_same_memory_from_the_first_element(make, strides):
    """A restrided view starts at the array's first element, has the sizes and element strides asked for, writes
    through to the array's memory, and is read-only where the array is."""
    base = np.arange(48, dtype=np.int32).reshape(8, 6)  # each element holds its offset in the memory
    array = make(base)
    first = array[(0,) * array.ndim]
    view = cpu.restride(array, (2, 3), strides)
    assert view.shape == (2, 3) and cpu.BACKEND.element_strides(view) == strides
    np.testing.assert_array_equal(view, first + np.arange(2)[:, None] * strides[0] + np.arange(3) * strides[1])
    assert view.flags.writeable == array.flags.writeable
    if view.flags.writeable:
        view[1, 2] = -1
        assert base.reshape(-1)[first + strides[0] + 2 * strides[1]] == -1


@pytest.mark.parametrize("make", [
    pytest.param(lambda base: base, id="contiguous"),
    pytest.param(lambda base: np.frombuffer(base.tobytes(), base.dtype).reshape(base.shape), id="read-only"),
    pytest.param(lambda base: base[:, 1::2], id="strided"),
    pytest.param(lambda base: base.T, id="transposed"),
    pytest.param(lambda base: np.broadcast_to(base[2], (5, 6)), id="broadcast, read-only"),
])
@pytest.mark.parametrize("view", [
    pytest.param(lambda array: array[1:, 1:3], id="offset"),
    pytest.param(lambda array: array[None, :, :2], id="new axis"),
    pytest.param(lambda array: array[2:3, ::2].view(np.uint32), id="other type"),
])
def test_viewers_make_the_same_view_of_new_arrays(make, view):
    """A viewer found on one array makes, of another array laid out alike, the view the sample's view is of the
    sample: the same elements of its memory, writable where it is."""
    from dmlops.backends.cpu.compiled import viewer

    sample = make(np.arange(48, dtype=np.int32).reshape(8, 6))
    view_of = viewer(sample, view(sample))
    base = np.arange(100, 148, dtype=np.int32).reshape(8, 6)
    array = make(base)
    made, expected = view_of(array), view(array)
    assert (made.dtype, made.shape, made.strides) == (expected.dtype, expected.shape, expected.strides)
    np.testing.assert_array_equal(made, expected)
    assert made.flags.writeable == array.flags.writeable
    if made.flags.writeable:
        made[(0,) * made.ndim] = 7
        assert expected[(0,) * made.ndim] == 7


def quantized_case(rng, a_type, b_type, out_type, k, zero_points, per_element, batch=(1, 1), m=3, n=4):
    """Backend arguments (a, vectors, out) and the reference's output for one random case."""
    def values(dtype, shape):
        return random_values(rng, shape, dtype)

    def vector(length, make):
        return make(length) if per_element else np.broadcast_to(make(1), (length,))

    a, b = values(a_type, batch + (m, k)), values(b_type, batch + (k, n))
    a_scale = vector(m, lambda size: rng.uniform(0.01, 0.05, size).astype(np.float32))
    b_scale = vector(n, lambda size: rng.uniform(0.01, 0.05, size).astype(np.float32))
    # spread the outputs over the type's range, a few saturating
    output_scale = vector(m, lambda size: rng.uniform(0.3, 1.0, size).astype(np.float32) * 0.02 * k ** 0.5)
    zero_a, zero_b, zero_out = (vector(length, lambda size, t=t: values(t, size)) if present else None
                                for present, length, t in zip(zero_points, (m, n, m), (a_type, b_type, out_type)))
    expected = reference.quantized_matmul(
        a, a_scale[:, None], None if zero_a is None else zero_a[:, None], b, b_scale, zero_b,
        output_scale[:, None], None if zero_out is None else zero_out[:, None], out_type)
    return (a, a_scale, zero_a, b, b_scale, zero_b, output_scale, zero_out), expected


ZERO_POINTS = list(itertools.product([False, True], repeat=3))  # A, B, output
REQUANTIZATIONS = [False] + ([True] if QMM_LOOPS else [])  # compiled or not
PRODUCT_ENGINES = ["float32"] + [kernel.name for kernel in cpu_integer_gemm.RUNNABLE]


@pytest.mark.parametrize("k", [1, 2, 257, 258, 259, 1023, 1024, 1025, 2100])
@settings(max_examples=examples(12), deadline=None)
@given(types=st.tuples(*[st.sampled_from(QMM_TYPES)] * 3), zero_points=st.sampled_from(ZERO_POINTS),
       per_element=st.booleans(), compiled=st.sampled_from(REQUANTIZATIONS), seed=st.integers(0, 2**32 - 1),
       products=st.sampled_from(PRODUCT_ENGINES))
def test_quantized_matmul_across_k_chunks(k, types, zero_points, per_element, compiled, seed, products):
    """1024 is the chunk of full-range centred values (128 · 128 · 1024 = 2^24); 258 that of uncentred ones."""
    rng = np.random.default_rng(seed)
    arguments, expected = quantized_case(rng, *types, k, zero_points, per_element, batch=(2, 1))
    out = poisoned(expected.shape, types[2])
    cpu_qmatmul.quantized_linear_matmul(*arguments, out, compiled=compiled, products=products)
    np.testing.assert_array_equal(out, expected)


@pytest.mark.parametrize("exact_limit", [1 << 15, 40_000, 1 << 17])
@pytest.mark.parametrize("zero_points", ZERO_POINTS[::3])
def test_small_chunks_add_up_exactly(monkeypatch, exact_limit, zero_points):
    """The float32 products: chunks of 2, 2 and 8 at full range: many chunks and a short last one, all added in
    float64."""
    monkeypatch.setattr(cpu_qmatmul, "FLOAT32_EXACT", exact_limit)
    rng = np.random.default_rng(exact_limit)
    for types in itertools.product(QMM_TYPES, repeat=3):
        arguments, expected = quantized_case(rng, *types, 37, zero_points, True)
        out = poisoned(expected.shape, types[2])
        cpu_qmatmul.quantized_linear_matmul(*arguments, out, products="float32")
        np.testing.assert_array_equal(out, expected)


def test_narrow_values_take_one_long_chunk():
    """The float32 products: values within ±3 of the zero point allow chunks of 2^24 / 9: K = 5000 in one float32
    GEMM, still exact."""
    rng = np.random.default_rng(10)
    arguments, _ = quantized_case(rng, np.uint8, np.int8, np.int8, 5000, (True, True, True), True)
    a, a_scale, zero_a, b, b_scale, zero_b, output_scale, zero_out = arguments
    a = (zero_a[:, None] + rng.integers(-3, 4, a.shape)).clip(0, 255).astype(np.uint8)
    b = (zero_b + rng.integers(-3, 4, b.shape)).clip(-128, 127).astype(np.int8)
    out = poisoned(a.shape[:2] + (a.shape[2], b.shape[3]), np.int8)
    cpu_qmatmul.quantized_linear_matmul(a, a_scale, zero_a, b, b_scale, zero_b, output_scale / 50, zero_out, out,
                                        products="float32")
    expected = reference.quantized_matmul(a, a_scale[:, None], zero_a[:, None], b, b_scale, zero_b,
                                          output_scale[:, None] / 50, zero_out[:, None], np.int8)
    np.testing.assert_array_equal(out, expected)
    assert len(np.unique(out)) > 10  # not all saturated


@pytest.mark.parametrize("compiled", ENGINES)
def test_batches_through_zero_strides_into_a_padded_output(monkeypatch, compiled):
    """B repeats over the batch (stride 0), A over the channel; out is a view of a larger poisoned buffer;
    the NumPy path's requantization blocks end inside the rows (blocks of 5 rows at N = 100, M = 19)."""
    monkeypatch.setattr(cpu_qmatmul, "BLOCK_ELEMENTS", 512)
    rng = np.random.default_rng(11)
    m, k, n = 19, 300, 100
    arguments, expected = quantized_case(rng, np.int8, np.uint8, np.uint8, k, (True, True, True), True, m=m, n=n)
    a, a_scale, zero_a, b, b_scale, zero_b, output_scale, zero_out = arguments
    a = np.broadcast_to(a[0], (2, 3, m, k))  # the same A in every channel
    b = np.broadcast_to(b[0, 0][None, None], (2, 3, k, n))
    buffer = poisoned((2, 3, m + 2, n + 3), np.uint8)
    before = buffer.copy()
    out = buffer[:, :, 1:m + 1, :n]
    cpu_qmatmul.quantized_linear_matmul(a, a_scale, zero_a, b, b_scale, zero_b, output_scale, zero_out, out,
                                        compiled=compiled)
    np.testing.assert_array_equal(out, np.broadcast_to(expected, out.shape))
    outside = np.ones(buffer.shape, bool)
    outside[:, :, 1:m + 1, :n] = False
    np.testing.assert_array_equal(buffer[outside], before[outside])


def test_scratch_arrays_share_one_block_without_overlapping():
    layouts = [((3, 5), np.float32), ((0, 0), np.float64), ((7,), np.float64), ((2, 3), np.float32)]
    arrays = cpu_qmatmul.in_one_block(layouts)
    assert [(x.shape, x.dtype) for x in arrays] == [(shape, np.dtype(dtype)) for shape, dtype in layouts]
    assert all(x.flags.c_contiguous and x.flags.writeable for x in arrays)
    assert all(x.ctypes.data % 64 == 0 for x in arrays if x.size)
    for x, y in itertools.combinations(arrays, 2):
        assert not np.shares_memory(x, y)



def test_scratch_is_kept_for_the_next_call_only_where_small():
    small = [((3, 5), np.int16), ((7,), np.int32)]
    assert cpu_qmatmul.scratch(small)[0] is cpu_qmatmul.scratch(list(small))[0]
    assert cpu_qmatmul.scratch(small)[0] is not cpu_qmatmul.scratch([((3, 5), np.int16), ((8,), np.int32)])[0]
    large = [((cpu_qmatmul.KEPT_SCRATCH_BYTES // 2 + 1,), np.int16)]
    assert cpu_qmatmul.scratch(large)[0] is not cpu_qmatmul.scratch(large)[0]


@pytest.mark.parametrize("products", PRODUCT_ENGINES)
def test_calls_through_kept_scratch_give_the_operators_bits(products):
    """Calls of the same sizes one after another reuse their scratch memory: nothing of one call's values, zero
    points or data types may reach the next (sizes that are multiples of no block, so that padding is read)."""
    rng = np.random.default_rng(23)
    for types, zero_points in [((np.uint8, np.int8, np.uint8), (True, True, True)),
                               ((np.int8, np.uint8, np.int8), (False, False, False)),
                               ((np.uint8, np.uint8, np.int8), (True, False, True))]:
        arguments, expected = quantized_case(rng, *types, 37, zero_points, True, m=29, n=21)
        out = poisoned(expected.shape, types[2])
        cpu_qmatmul.quantized_linear_matmul(*arguments, out, products=products, pieces=3)
        np.testing.assert_array_equal(out, expected)

@pytest.mark.parametrize("compiled", REQUANTIZATIONS)
@pytest.mark.parametrize("products", PRODUCT_ENGINES)
@pytest.mark.parametrize("m, k, n", [(16, 256, 64), (7, 37, 5)])  # B read as it lies (VNNI), or packed
def test_prepared_products_run_on_new_arrays_of_the_layout(compiled, products, m, k, n):
    """A product prepared for arrays of one layout gives the operator's bits on new arrays of that layout (A strided,
    B repeated over the batch, out a view of a larger poisoned buffer), each with fresh values, zero points and
    scales, writing out's elements only."""
    rng = np.random.default_rng(m)

    def arrays():
        arguments, expected = quantized_case(rng, np.int8, np.uint8, np.uint8, k, (True, True, False), False,
                                             batch=(2, 1), m=m, n=n)
        a, a_scale, zero_a, b, b_scale, zero_b, output_scale, zero_out = arguments
        a = np.repeat(a, 2, axis=-1)[..., ::2]
        a[...] = arguments[0]
        b = np.broadcast_to(b[:1], b.shape)
        expected = reference.quantized_matmul(a, a_scale[:, None], zero_a[:, None], b, b_scale, zero_b,
                                              output_scale[:, None], None, np.uint8)
        buffer = poisoned((2, 1, m, n + 3), np.uint8)
        return (a, a_scale, zero_a, b, b_scale, zero_b, output_scale, zero_out, buffer[..., 1:n + 1]), expected, buffer

    run = cpu_qmatmul.prepare(*arrays()[0], compiled=compiled, products=products)
    for _ in range(3):
        arguments, expected, buffer = arrays()
        before = buffer.copy()
        run(*arguments)
        np.testing.assert_array_equal(arguments[-1], expected)
        np.testing.assert_array_equal(buffer[..., [0, -2, -1]], before[..., [0, -2, -1]])


# -- products in one compiled call (prepare_one_call) --

ONE_CALL = pytest.mark.skipif(QMM_LOOPS is None or not cpu_integer_gemm.RUNNABLE, reason="no integer kernel")


def wait_for_the_pool():
    """Return once every pool thread has ended the tasks it took before: each takes one of these, which meet (the
    pool takes its tasks in order)."""
    meeting = threading.Barrier(cpu_pieces.HELPERS + 1)
    for _ in range(cpu_pieces.HELPERS):
        cpu_pieces.give_to_pool(meeting.wait, 10)
    cpu_pieces.ring_from_python(cpu_pieces.HELPERS)
    meeting.wait(10)
TYPE_TRIPLES = list(itertools.product(QMM_TYPES, repeat=3))  # A, B, output
# How each of a_scale, zero_a, b_scale, zero_b, output_scale, zero_out is given: a number (per tensor), an array of
# one value (per tensor, as the array API's prepared run hands it), a vector (B's: per column) or None (a zero point
# of 0).
PARAMETER_FORMS = {
    "numbers": ("number", "number", "number", "number", "number", "number"),
    "vectors": ("array", "array", "vector", "vector", "array", "array"),
    "mixed": ("number", "array", "vector", None, "array", "number"),
}


def one_call_case(rng, types, m, k, n, form):
    """Arguments of a one-call product (a {M, K} strided, b {K, N}, each scale and zero point as ``form`` says,
    out a view of a larger poisoned buffer), the reference's output, and the buffer."""
    a_type, b_type, out_type = types
    a = random_values(rng, (m, 2 * k), a_type)[:, ::2]
    b = random_values(rng, (k, n), b_type)
    a_scale, b_scale, output_scale = scale_makers(rng, k)
    makers = [a_scale, lambda size: random_values(rng, size, a_type), b_scale,
              lambda size: random_values(rng, size, b_type), output_scale,
              lambda size: random_values(rng, size, out_type)]
    arguments, columns = [], []  # as given, and as the reference takes them (rows of A and the output: {M, 1})
    for kind, make, length, along_rows in zip(PARAMETER_FORMS[form], makers, (m, m, n, n, m, m), [True, True, False,
                                                                                                    False, True, True]):
        value = None if kind is None else make(length if kind == "vector" else 1)
        if kind == "number":
            value = value[0].item()
        arguments.append(value)
        columns.append(value[:, None] if kind == "vector" and along_rows else value)
    expected = reference.quantized_matmul(a, columns[0], columns[1], b, columns[2], columns[3], columns[4],
                                          columns[5], out_type)
    # (out contiguous, as the backend hands it to the one-call product, amid poisoned elements)
    buffer = poisoned(m * n + 4, out_type)
    a_scale, zero_a, b_scale, zero_b, output_scale, zero_out = arguments
    return (a, a_scale, zero_a, b, b_scale, zero_b, output_scale, zero_out, buffer[2:-2].reshape(m, n)), expected, \
        buffer


def scale_makers(rng, k):
    """Makers of FLOAT32 scales of A, B and the output whose products spread over the 8-bit range, a few
    saturating."""
    return (lambda size: rng.uniform(0.01, 0.05, size).astype(np.float32),
            lambda size: rng.uniform(0.01, 0.05, size).astype(np.float32),
            lambda size: (rng.uniform(0.3, 1.0, size) * 0.02 * k ** 0.5).astype(np.float32))


def assert_one_call_products(rng, types, m, k, n, form, products=None, pieces=None):
    """A product prepared for one case gives the reference's bits on fresh cases of the same layout, writing out's
    elements only."""
    product = cpu_qmatmul.prepare_one_call(*one_call_case(rng, types, m, k, n, form)[0], products=products,
                                           pieces=pieces)
    assert product is not None
    for _ in range(3):
        arguments, expected, buffer = one_call_case(rng, types, m, k, n, form)
        before = buffer.copy()
        product(*arguments)
        np.testing.assert_array_equal(arguments[-1], expected)
        np.testing.assert_array_equal(buffer[[0, 1, -2, -1]], before[[0, 1, -2, -1]])


@ONE_CALL
@pytest.mark.parametrize("form", ["numbers", "vectors"])
@pytest.mark.parametrize("types", TYPE_TRIPLES, ids=lambda types: "-".join(np.dtype(t).name for t in types))
def test_one_call_products_give_the_operators_bits(types, form):
    """Every type combination, per-tensor values as numbers or per row / column vectors, with the kernel picked for
    this processor (16 × 256 × 64: B read as it lies where the kernel can)."""
    assert_one_call_products(np.random.default_rng(len(form)), types, 16, 256, 64, form)


@ONE_CALL
@pytest.mark.parametrize("index, kernel", list(enumerate(cpu_integer_gemm.RUNNABLE)),
                         ids=lambda x: getattr(x, "name", ""))
@pytest.mark.parametrize("half", [0, 1])
def test_one_call_products_of_every_kernel(index, kernel, half):
    """Every runnable kernel on B packed (sizes of no block), parameters of mixed forms; the type combinations
    shared out among the kernels (each combination compiles a function of its own)."""
    types = TYPE_TRIPLES[(2 * index + half) % len(TYPE_TRIPLES)]
    assert_one_call_products(np.random.default_rng(index), types, 7, 37, 19, "mixed", products=kernel.name)


@ONE_CALL
# by rows, by rows with B packed in pieces (of whole runs of the kernel's packing, but the last), by columns, direct
@pytest.mark.parametrize("m, k, n", [(40, 70, 33), (200, 300, 150), (7, 301, 200), (3, 64, 128)])
def test_one_call_products_in_pieces_on_the_pool(m, k, n):
    """A one-call product cut into pieces that the pool's threads take beside the calling one, each thread in one
    compiled call: the reference's bits, out's other elements untouched; a bad scale rejected before any thread
    writes."""
    rng = np.random.default_rng(m)
    types = (np.int8, np.uint8, np.uint8)
    assert_one_call_products(rng, types, m, k, n, "mixed", pieces=3)
    arguments, _, buffer = one_call_case(rng, types, m, k, n, "mixed")
    product = cpu_qmatmul.prepare_one_call(*arguments, pieces=3)
    arguments = list(arguments)
    arguments[4] = arguments[4].copy()  # B's scale, a vector in this form
    arguments[4][-1] = np.nan
    before = buffer.copy()
    rejects(["b_scale_tensor", "finite and non-zero"], lambda: product(*arguments))
    wait_for_the_pool()  # (a pool thread that started late has looked at the scales too)
    np.testing.assert_array_equal(buffer, before)


@pytest.mark.skipif(QMM_LOOPS is None, reason="no numba")
def test_numbas_threads_call_the_entry_once_for_each_and_pass_on_what_it_returned():
    """run_on_numba_threads calls an entry point once for each of the threads asked for, however many threads numba
    has: True where every call returned True, False where one returned False, a RuntimeError where one raised."""
    import numba
    from dmlops.backends.cpu import atomics, compiled

    @numba.njit(nogil=True)
    def entry(tickets, raising, doorbell, caller):
        ticket = atomics.take_ticket(tickets)
        if ticket == raising:
            raise ValueError("raised")
        return ticket != tickets[1]

    no_doorbell = np.zeros(0, np.int64)
    for threads in (1, 5, 37):
        for false_at, raising in ((-1, -1), (threads - 1, -1), (-1, threads // 2)):
            tickets = np.array([0, false_at])
            compiled_entry = compiled.entry_point(entry, tickets, raising, no_doorbell, False)
            if raising >= 0:
                with pytest.raises(RuntimeError, match="raised"):
                    atomics.run_on_numba_threads(compiled_entry, (tickets, raising), threads)
            else:
                assert atomics.run_on_numba_threads(compiled_entry, (tickets, raising), threads) == (false_at < 0)
            assert tickets[0] == threads


CACHED_THREADS = """
import numba
import numpy as np
from dmlops.backends.cpu import atomics, compiled

@numba.njit(nogil=True)
def entry(tickets, doorbell, caller):
    return atomics.take_ticket(tickets) >= 0

tickets = np.zeros(1, np.int64)
compiled_entry = compiled.entry_point(entry, tickets, np.zeros(0, np.int64), False)
print(atomics.run_on_numba_threads(compiled_entry, (tickets,), 5), tickets[0],
      atomics.run_on_threads.stats.cache_hits.total())
"""


@pytest.mark.skipif(QMM_LOOPS is None, reason="no numba")
def test_numbas_threads_run_from_numbas_cache(tmp_path):
    """The call on numba's threads loaded from numba's cache by a second process starts numba's threading layer
    before numba links in the layer's functions, as when it was compiled."""
    environment = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path)}
    runs = [subprocess.run([sys.executable, "-c", CACHED_THREADS], env=environment, capture_output=True, text=True,
                           check=True).stdout.split() for _ in range(2)]
    assert runs == [["True", "5", "0"], ["True", "5", "1"]]


@ONE_CALL
def test_products_on_numbas_threads(monkeypatch):
    """Work for more threads than the pool takes (POOL_THREADS) runs on numba's threads, in one compiled call (numba's
    threading layer calling the pool's entry on each), through the one-call product and the general one (parameters per
    row): the reference's bits, out's other elements untouched, a bad scale rejected before a thread writes; and,
    while another call holds numba's threads, or in a forked child, on the pool's."""
    monkeypatch.setattr(cpu_pieces, "POOL_THREADS", 1)
    m, k, n = 40, 70, 33
    rng = np.random.default_rng(m)
    types = (np.uint8, np.int8, np.int8)
    assert_one_call_products(rng, types, m, k, n, "mixed", pieces=3)
    arguments, _, buffer = one_call_case(rng, types, m, k, n, "mixed")
    arguments = list(arguments)
    arguments[4] = arguments[4].copy()
    arguments[4][0] = 0
    before = buffer.copy()
    rejects(["b_scale_tensor", "finite and non-zero"], lambda: cpu_qmatmul.prepare_one_call(*arguments, pieces=3)(
        *arguments))
    np.testing.assert_array_equal(buffer, before)
    arguments, expected = quantized_case(rng, *types, k, (True, True, True), True, m=m, n=n)
    for held in (False, True):
        out = poisoned(expected.shape, types[2])
        if held:
            assert cpu_pieces.NUMBA_THREADS[0].acquire(blocking=False)
        try:
            cpu_qmatmul.quantized_linear_matmul(*arguments, out, compiled=True, pieces=3)
        finally:
            if held:
                cpu_pieces.NUMBA_THREADS[0].release()
        np.testing.assert_array_equal(out, expected)
    if hasattr(os, "fork"):  # a child forked once numba's threads have run takes the pool (theirs are not in it)
        assert_product_in_a_forked_child(cpu_integer_gemm.RUNNABLE[0], rng)


@ONE_CALL
def test_pool_keeps_no_arrays_after_a_call():
    """Once a product on the pool's threads has returned, no pool thread (lingering or asleep) holds its arrays: a
    caller's arrays are freed when the caller drops them."""
    import gc
    import weakref

    rng = np.random.default_rng(8)
    arguments, _, _ = one_call_case(rng, (np.int8, np.uint8, np.uint8), 40, 70, 33, "mixed")
    product = cpu_qmatmul.prepare_one_call(*arguments, pieces=3)
    product(*arguments)
    wait_for_the_pool()
    kept = [weakref.ref(array) for array in (arguments[0], arguments[3])]
    del arguments
    gc.collect()
    assert all(array() is None for array in kept)


@ONE_CALL
@pytest.mark.parametrize("form", ["numbers", "vectors"])
@pytest.mark.parametrize("field, position", [("a_scale_tensor", 1), ("b_scale_tensor", 4),
                                             ("output_scale_tensor", 6)])
@pytest.mark.parametrize("bad", [0.0, np.nan, -np.inf])
def test_one_call_rejects_bad_scales_before_writing(form, field, position, bad):
    rng = np.random.default_rng(3)
    types = (np.uint8,) * 3
    arguments, _, buffer = one_call_case(rng, types, 16, 256, 64, form)
    product = cpu_qmatmul.prepare_one_call(*arguments)
    arguments = list(arguments)
    if form == "numbers":
        arguments[position] = bad
    else:
        arguments[position] = arguments[position].copy()
        arguments[position][-1] = bad
    before = buffer.copy()
    rejects([field, "finite and non-zero"], lambda: product(*arguments))
    np.testing.assert_array_equal(buffer, before)


@ONE_CALL
@pytest.mark.parametrize("parameters", ["NumPy scalars", "Python numbers", "one-element arrays", "vectors",
                                        "DirectML shapes"])
def test_array_api_products_of_one_call_on_new_arrays(parameters):
    """Repeated array API calls (kept plans, their runs handing the bound arrays to one compiled call) give the
    reference's bits on fresh values of the same layout, A strided, into a poisoned out."""
    rng = np.random.default_rng(len(parameters))
    m, k, n = 16, 256, 64

    def given(values, along_rows):
        vector = np.asarray(values)
        if parameters == "NumPy scalars":
            return vector.reshape(-1)[0]
        if parameters == "Python numbers":
            return vector.reshape(-1)[0].item()
        if parameters == "one-element arrays":
            return vector.reshape(-1)[:1]
        if parameters == "vectors":
            return vector
        return vector.reshape((-1, 1) if along_rows else (1, -1))

    per_tensor = parameters in ("NumPy scalars", "Python numbers", "one-element arrays")
    for _ in range(3):
        a = random_values(rng, (m, 2 * k), np.int8)[:, ::2]
        b = random_values(rng, (k, n), np.uint8)
        values = [rng.uniform(0.01, 0.05, 1 if per_tensor else m).astype(np.float32),
                  random_values(rng, 1 if per_tensor else m, np.int8),
                  rng.uniform(0.01, 0.05, 1 if per_tensor else n).astype(np.float32),
                  random_values(rng, 1 if per_tensor else n, np.uint8),
                  (rng.uniform(0.3, 1.0, 1 if per_tensor else m) * 0.02 * k ** 0.5).astype(np.float32),
                  random_values(rng, 1 if per_tensor else m, np.int8)]
        along_rows = [True, True, False, False, True, True]
        out = poisoned((m, n), np.int8)
        result = dmlops.quantized_linear_matmul(a, *(given(v, rows) for v, rows in zip(values[:2], along_rows)), b,
                                                *(given(v, rows) for v, rows in zip(values[2:], along_rows[2:])),
                                                out=out)
        assert result is out
        columns = [v[:, None] if rows and not per_tensor else v for v, rows in zip(values, along_rows)]
        np.testing.assert_array_equal(out, reference.quantized_matmul(a, columns[0], columns[1], b, columns[2],
                                                                      columns[3], columns[4], columns[5], np.int8))


@pytest.mark.parametrize("out_type", QMM_TYPES, ids=lambda t: np.dtype(t).name)
def test_ties_round_half_to_even(out_type):
    """sa · sb / so = 0.5: every odd accumulator is a tie."""
    a = np.arange(-6, 6, dtype=np.int8).reshape(1, 1, 12, 1)
    b = np.ones((1, 1, 1, 1), np.int8)
    out = poisoned((1, 1, 12, 1), out_type)
    half, one = np.full(12, 0.5, np.float32), np.ones(1, np.float32)
    zero = None if out_type == np.int8 else np.full(12, 10, np.uint8)
    cpu_qmatmul.quantized_linear_matmul(a, half, None, b, one, None, np.ones(12, np.float32), zero, out)
    expected = np.array([-3, -2, -2, -2, -1, 0, 0, 0, 1, 2, 2, 2]) + (0 if zero is None else 10)
    np.testing.assert_array_equal(out[0, 0, :, 0], expected)


@st.composite
def requantizations(draw):
    """Exact sums (float32 up to 2^4 or 2^24, float64 up to 2^50) with 0 to 2 corrections; scales per element or per
    tensor over a wide range of magnitudes, or powers of two (whose multipliers make ties); a padded output."""
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    m, n = draw(st.integers(1, 40)), draw(st.integers(1, 40))
    out_type = draw(st.sampled_from(QMM_TYPES))
    limit = 1 << draw(st.sampled_from([4, 24, 50]))  # small sums (ties are frequent), float32's and float64's
    product = rng.integers(-limit, limit, (m, n), endpoint=True).astype(np.float32 if limit <= 1 << 24 else np.float64)
    corrections = [(rng.integers(-limit, limit, m).astype(np.float64),
                    rng.integers(-3, 4, draw(st.sampled_from([1, n]))).astype(np.float64))
                   for _ in range(draw(st.integers(0, 2)))]

    powers = draw(st.booleans())

    def scales(length, low, high):
        """f · 2^e for e in [low, high) and f = 1 (powers) or in [1, 2); per element or per tensor."""
        count = length if draw(st.booleans()) else 1
        values = np.ldexp(1.0 if powers else rng.uniform(1, 2, count), rng.integers(low, high, count))
        return np.broadcast_to(values.astype(np.float32), (length,))

    # output scales that bring |acc| · multiplier near the output range: many values round, some saturate
    exponent, bits = int(rng.integers(-40, 40)), limit.bit_length() - 6
    a_scale, b_scale = scales(m, exponent - 3, exponent + 3), scales(n, -3, 3)
    output_scale = scales(m, exponent + bits - 3, exponent + bits + 3)
    zero_point = random_values(rng, m, out_type)
    pad = draw(st.sampled_from([0, 3]))
    return product, corrections, a_scale, b_scale, output_scale, zero_point, out_type, pad


@pytest.mark.skipif(QMM_LOOPS is None, reason="no numba")
@settings(max_examples=examples(150), deadline=None)
@given(requantizations())
def test_compiled_requantization_gives_the_operators_bits(case):
    product, corrections, a_scale, b_scale, output_scale, zero_point, out_type, pad = case
    m, n = product.shape
    acc = product.astype(np.float64)
    for row_term, column_term in corrections:
        acc += row_term[:, None] * column_term
    expected = quantized_matmul_op.requantize(acc, a_scale[:, None], b_scale, output_scale[:, None],
                                              zero_point[:, None], DataType.from_numpy(np.dtype(out_type)))
    in_pieces = functools.partial(cpu_qmatmul.requantize_compiled, pieces=3)  # rows cut for the cores
    for requantize_sums in (cpu_qmatmul.requantize_numpy, cpu_qmatmul.requantize_compiled, in_pieces):
        buffer = poisoned((m, n + pad), out_type)
        requantize_sums(product, corrections, a_scale, b_scale, output_scale, zero_point, buffer[:, :n])
        np.testing.assert_array_equal(buffer[:, :n], expected)
        np.testing.assert_array_equal(buffer[:, n:], 0x5A)


@pytest.mark.parametrize("k", [1024, 1025, 2100])
@pytest.mark.parametrize("a_type, b_type", list(itertools.product(QMM_TYPES, repeat=2)))
@pytest.mark.parametrize("zero_points", ["absent", "lowest", "highest"])
def test_extreme_values_stay_exact(k, a_type, b_type, zero_points):
    """Every product at the largest centred magnitude (128 · 128) but one odd one (127 · 127) per row: a float32
    partial sum past 2^24 would round, so a chunk one term too long shows in the integer product."""
    def extreme(dtype, shape, last_axis):
        values = np.full(shape, np.iinfo(dtype).min, dtype)
        index = [slice(None)] * 2
        index[last_axis] = -1
        values[tuple(index)] += 1
        return values

    a, b = extreme(a_type, (3, k), 1), extreme(b_type, (k, 2), 0)
    def zero_point(dtype, length):
        if zero_points == "absent":
            return None
        info = np.iinfo(dtype)
        return np.full(length, info.min if zero_points == "lowest" else info.max, dtype)

    zero_a, zero_b = zero_point(a_type, 3), zero_point(b_type, 2)
    product, corrections = cpu_qmatmul.integer_product(a, zero_a, b, zero_b)
    acc = product.astype(np.float64)
    for row_term, column_term in corrections:
        acc += row_term[:, None] * column_term
    exact = (a.astype(np.int64) - (0 if zero_a is None else zero_a[:, None])) @ \
        (b.astype(np.int64) - (0 if zero_b is None else zero_b))
    np.testing.assert_array_equal(acc, exact)


# -- the integer GEMM -----------------------------------------------------------------------------------------------

# Every kernel whose instructions this processor has (none without numba).
KERNELS = [pytest.param(kernel, id=kernel.name) for kernel in cpu_integer_gemm.RUNNABLE]


def exact_product(a, zero_a, b, zero_b):
    """Σ_k (a − za)(b − zb) in int64, for a {M, K} and b {K, N}; zero points per row / column, or None."""
    a = a.astype(np.int64) - (0 if zero_a is None else zero_a.astype(np.int64)[:, None])
    return a @ (b.astype(np.int64) - (0 if zero_b is None else zero_b.astype(np.int64)))


def kernel_product(kernel, a, zero_a, b, zero_b, pieces):
    """cpu_integer_gemm.integer_product into poisoned scratch arrays, whose padding must not change the result."""
    layouts = cpu_integer_gemm.scratch_layouts(kernel, a.shape[0], min(a.shape[1], cpu_integer_gemm.INT32_CHUNK),
                                               b.shape[1])
    buffers = [np.full(shape, 0x5A, dtype) for shape, dtype in layouts]
    return cpu_integer_gemm.integer_product(kernel, a, zero_a, b, zero_b, buffers, pieces)


@st.composite
def strided_operands(draw):
    """a {M, K} and b {K, N} of any types, as views with steps, transposed or broadcast along a dimension (stride
    0); sizes that are multiples of no block (6 rows, 16 or 64 columns, 2 or 4 along K, the kernels' K blocks);
    zero points per row / column, per tensor (stride 0) or absent."""
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    m, n = draw(st.integers(1, 70)), draw(st.integers(1, 70))
    k = draw(st.sampled_from([1, 2, 3, 15, 17, 100, 1045, 2069]))

    def operand(dtype, rows, columns):
        layout = draw(st.sampled_from(["contiguous", "steps", "transposed", "broadcast"]))
        if layout == "steps":
            return random_values(rng, (2 * rows, 3 * columns), dtype)[::2, ::3]
        if layout == "transposed":
            return random_values(rng, (columns, rows), dtype).T
        if layout == "broadcast":
            return np.broadcast_to(random_values(rng, (1, columns), dtype), (rows, columns))
        return random_values(rng, (rows, columns), dtype)

    def zero_point(dtype, length):
        form = draw(st.sampled_from(["absent", "per tensor", "per element"]))
        if form == "absent":
            return None
        if form == "per tensor":
            return np.broadcast_to(random_values(rng, 1, dtype), (length,))
        return random_values(rng, length, dtype)

    a_type, b_type = draw(st.sampled_from(QMM_TYPES)), draw(st.sampled_from(QMM_TYPES))
    return (operand(a_type, m, k), zero_point(a_type, m), operand(b_type, k, n), zero_point(b_type, n),
            draw(st.sampled_from([1, 3])))


@pytest.mark.parametrize("kernel", KERNELS)
@settings(max_examples=examples(40), deadline=None)
@given(strided_operands())
def test_kernel_product_is_exact(kernel, case):
    a, zero_a, b, zero_b, pieces = case
    np.testing.assert_array_equal(kernel_product(kernel, a, zero_a, b, zero_b, pieces),
                                  exact_product(a, zero_a, b, zero_b))


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("m, k, n", [(5, 101, 130), (20, 64, 200), (40, 9, 257), (300, 66, 131), (7, 3, 64)])
@pytest.mark.parametrize("b_layout", ["contiguous", "rows apart", "columns apart"])
@pytest.mark.parametrize("pieces", [1, 3])
def test_kernel_product_of_wide_b(kernel, m, k, n, b_layout, pieces):
    """B several vectors wide, packed a vector of columns and four rows at a time where its rows are contiguous (the
    columns and rows left one at a time), by pieces of columns (fewer rows of A than columns of B) or of rows."""
    rng = np.random.default_rng(m * n + k)
    for a_type, b_type in itertools.product(QMM_TYPES, repeat=2):
        a = random_values(rng, (m, k), a_type)
        b = random_values(rng, (2 * k, 2 * n), b_type)
        b = {"contiguous": b[:k, :n], "rows apart": b[::2, :n], "columns apart": b[:k, ::2]}[b_layout]
        zero_a, zero_b = random_values(rng, m, a_type), random_values(rng, n, b_type)
        np.testing.assert_array_equal(kernel_product(kernel, a, zero_a, b, zero_b, pieces),
                                      exact_product(a, zero_a, b, zero_b))


@pytest.mark.parametrize("kernel", [pytest.param(kernel, id=kernel.name) for kernel in cpu_integer_gemm.RUNNABLE
                                    if not kernel.tiles])
@pytest.mark.parametrize("m, k, n", [(400, 2100, 300), (397, 2100, 300), (130, 2100, 1600), (8, 2100, 1600),
                                     (22, 2100, 300), (2, 2100, 300), (3, 2100, 1600)])
def test_vector_kernels_take_rows_in_bands_or_few_together(kernel, m, k, n):
    """More K than a run (Kernel.k_block), and more rows than a band of sums (avx2.SUMS_BAND_BYTES; the last band
    partial, of no multiple of the kernel's rows), by rows and by columns; the few rows past the last whole kernel's
    (all of A's, where it has so few) on a kernel of one row or of FEW_ROWS over all of K (avx2.FEW_ROWS), or padded
    to the kernel's rows where they are more; A of few kernels' rows (avx2.STREAM_KERNELS) in one band, each block of
    B over all of K."""
    from dmlops.backends.cpu.avx2 import STREAM_KERNELS, SUMS_BAND_BYTES
    assert k > kernel.k_block and (m <= STREAM_KERNELS * 6 or m * 4 * n > SUMS_BAND_BYTES)
    rng = np.random.default_rng(m + k + n)
    a, b = random_values(rng, (m, k), np.uint8), random_values(rng, (k, n), np.int8)
    zero_a, zero_b = random_values(rng, m, np.uint8), random_values(rng, n, np.int8)
    # (float64's products and sums of these are exact: |sums| < 2^53)
    exact = (a - zero_a[:, None].astype(np.float64)) @ (b - zero_b.astype(np.float64))
    np.testing.assert_array_equal(kernel_product(kernel, a, zero_a, b, zero_b, 1), exact.astype(np.int64))


@pytest.mark.parametrize("kernel", KERNELS)
def test_calling_thread_waits_for_pieces_it_did_not_take(kernel, monkeypatch):
    """A product's calling thread returns once every piece has ended, also where the pool's threads took every
    ticket, its first included, before it ran (a busy machine): here the tickets are all taken and the last stage's
    pieces not yet ended when the call starts, and it returns only once they are."""
    calls = []

    def tickets_taken(pool_entry, arguments, threads, on_numba_threads=None):
        state, counts = arguments[2], arguments[3]
        state[0] = counts.sum()  # every ticket taken, by threads that have not ended their pieces
        entry = pool_entry(arguments)
        call = threading.Thread(target=entry, args=(*arguments, cpu_pieces.NO_RING, True))
        call.start()
        call.join(0.3)
        calls.append(call.is_alive())  # waiting
        state[1 + len(counts) - 1] = counts[-1]  # the last stage's pieces end
        call.join(60)
        calls.append(call.is_alive())

    monkeypatch.setattr(cpu_integer_gemm, "run_on_cores", tickets_taken)
    rng = np.random.default_rng(8)
    a, b = random_values(rng, (5, 64), np.uint8), random_values(rng, (64, 70), np.int8)
    kernel_product(kernel, a, None, b, None, 1)
    assert calls == [True, False]


DIRECT_KERNELS = [kernel for kernel in KERNELS if kernel.values[0].direct]


@pytest.mark.parametrize("kernel", DIRECT_KERNELS)
@pytest.mark.parametrize("m", list(range(1, cpu_integer_gemm.DIRECT_ROWS + 1)))
@pytest.mark.parametrize("a_type, b_type", list(itertools.product(QMM_TYPES, repeat=2)))
def test_direct_product_is_exact(kernel, m, a_type, b_type):
    """Few rows of A against B as it lies (rows contiguous, strided between them; K a multiple of 4, N of 64),
    zero points per element or absent, every strip of rows, pieces of few column blocks and a piece of
    vnni.WIDE_PIECE_BLOCKS; the poisoned scratch must not show."""
    from dmlops.backends.cpu.vnni import WIDE_PIECE_BLOCKS
    rng = np.random.default_rng(m)
    for k, n, zero_points, pieces in [(4, 64, True, 3), (100, 192, False, 3), (1028, 128, True, 3),
                                      (1028, 64 * WIDE_PIECE_BLOCKS, False, 1)]:
        a = random_values(rng, (m, k), a_type)
        b = random_values(rng, (k, 2 * n), b_type)[:, n:]  # rows 2N apart
        zero_a = random_values(rng, m, a_type) if zero_points else None
        zero_b = random_values(rng, n, b_type) if zero_points else None
        np.testing.assert_array_equal(kernel_product(kernel, a, zero_a, b, zero_b, pieces),
                                      exact_product(a, zero_a, b, zero_b))


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("a_type, b_type", list(itertools.product(QMM_TYPES, repeat=2)))
def test_kernel_product_at_the_extremes(kernel, a_type, b_type):
    """Every product at ±255² (the zero point at the other end of the range) but a few: the int32 sums and the
    byte kernels' corrections at their largest, K = INT32_CHUNK, the longest one call takes; 7 rows × 64 columns,
    so that a kernel that reads B as it lies does."""
    k = cpu_integer_gemm.INT32_CHUNK
    lowest, highest = np.iinfo(a_type).min, np.iinfo(a_type).max
    a = np.full((7, k), lowest, a_type)
    a[1::2] = highest
    a[2, ::5] = highest
    zero_a = np.array([highest, lowest] * 3 + [lowest], a_type)
    b = np.full((k, 64), np.iinfo(b_type).max, b_type)  # 7 × 64: the direct kernel's too, where there is one
    b[::7, 1::3] = np.iinfo(b_type).min
    zero_b = np.array([np.iinfo(b_type).min, np.iinfo(b_type).max] * 32, b_type)
    exact = exact_product(a, zero_a, b, zero_b)
    assert np.abs(exact).max() > 2**31 - 2**26
    np.testing.assert_array_equal(kernel_product(kernel, a, zero_a, b, zero_b, 1), exact)


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("a_type, b_type", list(itertools.product(QMM_TYPES, repeat=2)))
def test_kernel_product_past_the_int32_chunk(kernel, a_type, b_type):
    """K = 40 000 > 33 025: every product at ±255², so an int32 sum over the whole of K would wrap; two chunks,
    added in float64, do not."""
    k = 40_000
    lowest, highest = np.iinfo(a_type).min, np.iinfo(a_type).max
    a = np.full((3, k), lowest, a_type)
    a[1] = highest
    zero_a = np.array([highest, lowest, highest], a_type)
    b = np.full((k, 2), np.iinfo(b_type).max, b_type)
    b[::7, 1] = np.iinfo(b_type).min
    zero_b = np.array([np.iinfo(b_type).min, np.iinfo(b_type).max], b_type)
    product = kernel_product(kernel, a, zero_a, b, zero_b, 1)
    exact = exact_product(a, zero_a, b, zero_b)
    assert np.abs(exact).max() > 2**31
    np.testing.assert_array_equal(product, exact)


@pytest.mark.parametrize("kernel", KERNELS)
def test_kernel_product_adds_many_chunks(monkeypatch, kernel):
    """Chunks of 48 along K = 1001 (the last one short), random values."""
    monkeypatch.setattr(cpu_integer_gemm, "INT32_CHUNK", 48)
    rng = np.random.default_rng(12)
    a, b = random_values(rng, (13, 1001), np.uint8), random_values(rng, (1001, 9), np.int8)
    zero_a, zero_b = random_values(rng, 13, np.uint8), random_values(rng, 9, np.int8)
    np.testing.assert_array_equal(kernel_product(kernel, a, zero_a, b, zero_b, 3),
                                  exact_product(a, zero_a, b, zero_b))


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("m, k, n", [(40, 70, 33), (7, 301, 200), (3, 64, 128)])  # by rows, by columns, direct
@pytest.mark.parametrize("helper", ["takes every piece", "starts after the call"])
@pytest.mark.parametrize("b_packing", ["shared", "each thread's own"])
def test_product_pieces_whoever_takes_them(monkeypatch, kernel, m, k, n, helper, b_packing):
    """The pieces of a product (``product_pieces``) taken in either extreme order: a pool thread that takes every
    ticket before the calling thread starts (which then waits for its pieces only), or one that starts after the
    call has returned, finds no ticket left and writes nothing, neither the output nor the scratch memory; B
    packed in pieces of a stage, or by each thread for itself (OWN_PACKING_ROWS)."""
    monkeypatch.setattr(cpu_integer_gemm, "OWN_PACKING_ROWS", 0 if b_packing == "each thread's own" else 1 << 30)
    def run_on_cores(pool_entry, arguments, threads, on_numba_threads=None):
        assert threads
        entry = pool_entry(arguments)
        if helper == "takes every piece":
            entry(*arguments, cpu_pieces.NO_RING, False)
            entry(*arguments, cpu_pieces.DOORBELL, True)
            return
        entry(*arguments, cpu_pieces.DOORBELL, True)
        out, buffers = arguments[-1][-1], arguments[-3]  # (finish's output; before b_packed)
        before = [array.copy() for array in (out, *buffers)]
        entry(*arguments, cpu_pieces.NO_RING, False)
        for array, kept in zip((out, *buffers), before):
            np.testing.assert_array_equal(array, kept)

    monkeypatch.setattr(cpu_integer_gemm, "run_on_cores", run_on_cores)
    rng = np.random.default_rng(m * k + n)
    arguments, expected = quantized_case(rng, np.int8, np.uint8, np.uint8, k, (True, True, True), True, m=m, n=n)
    out = poisoned(expected.shape, np.uint8)
    cpu_qmatmul.quantized_linear_matmul(*arguments, out, compiled=True, products=kernel.name, pieces=3)
    np.testing.assert_array_equal(out, expected)


def test_a_small_b_is_packed_by_each_thread_of_the_vector_kernels(monkeypatch):
    """No stage packs a small B for a product of many rows a core (OWN_PACKING_ELEMENTS, OWN_PACKING_ROWS) on the
    vector kernels; a large one, or one of few rows a core, or one on AMX's tiles, is packed in pieces."""
    monkeypatch.setattr(cpu_integer_gemm, "CORES", 2)
    vnni, amx = (cpu_kernels.KERNELS_BY_NAME[name] for name in ("avx512-vnni", "amx"))
    assert cpu_integer_gemm.stage_counts(vnni, "bytes rows", 512, 512, 512, 8)[0] == 0
    assert cpu_integer_gemm.stage_counts(vnni, "bytes rows", 1024, 1024, 1024, 8)[0] > 0
    assert cpu_integer_gemm.stage_counts(vnni, "bytes rows", 200, 512, 512, 8)[0] > 0
    assert cpu_integer_gemm.stage_counts(amx, "tiles rows", 512, 512, 512, 8)[0] > 0


def test_a_grid_for_many_threads_and_a_small_b():
    """A product on AMX's tiles cut by rows on GRID_THREADS threads or more is cut into a grid of rows by groups of
    B's columns, the divisor of the threads nearest their square root from below, a piece a thread; not where B is
    packed already, K is more than one chunk, B is large, the pieces do not requantize their sums, the threads are
    few, or the kernel is a vector kernel."""
    amx, vnni = (cpu_kernels.KERNELS_BY_NAME[name] for name in ("amx", "avx512-vnni"))
    threads = cpu_integer_gemm.GRID_THREADS
    assert [cpu_integer_gemm.grid_groups(amx, 512, 512, t, False, True) for t in (16, 12, threads)] == [4, 3, 2]
    assert cpu_integer_gemm.grid_groups(vnni, 512, 512, 16, False, True) == 1
    assert list(cpu_integer_gemm.stage_counts(amx, "tiles rows", 512, 512, 512, 64, False, 16, True)) == [0, 16, 4]
    large = cpu_integer_gemm.GRID_B_ELEMENTS // 512 + 1  # (B's rows, of 512 columns)
    for arguments in [(512, 512, 16, True, True), (cpu_integer_gemm.INT32_CHUNK + 1, 16, 16, False, True),
                      (large, 512, 16, False, True), (512, 512, 16, False, False),
                      (512, 512, threads - 1, False, True)]:
        assert cpu_integer_gemm.grid_groups(amx, *arguments) == 1


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("groups", [2, 3])
def test_products_in_a_grid_of_rows_by_groups_of_columns(monkeypatch, kernel, groups):
    """A product cut into a grid (``grid_groups``), each piece packing its own group of B's columns and its own rows
    of A, correcting and requantizing its block of the output: the operator's bits, every element of out written,
    through the backend and through the array API's one call, for groups of columns of unequal widths, a last block
    of B in part, and rows that are not a multiple of the kernel's; on one thread, which packs each group in turn,
    and on two."""
    monkeypatch.setattr(cpu_integer_gemm, "grid_groups", lambda *arguments: groups)
    rng = np.random.default_rng(groups)
    for m, k, n, types in [(400, 70, 333, (np.uint8, np.int8, np.uint8)), (150, 33, 130, (np.int8, np.int8, np.int8))]:
        assert list(cpu_integer_gemm.stage_counts(kernel, "x rows", m, k, n, 4, False, 4, True))[::2] == [0, groups]
        arguments, expected = quantized_case(rng, *types, k, (True, True, True), True, m=m, n=n)
        assert cpu_integer_gemm.products_layout(kernel, arguments[0][0, 0], arguments[3][0, 0]).endswith("rows")
        for pieces in (1, 4):
            out = poisoned(expected.shape, types[2])
            cpu_qmatmul.quantized_linear_matmul(*arguments, out, compiled=True, products=kernel.name, pieces=pieces)
            np.testing.assert_array_equal(out, expected)
        a, _, _, b, b_scale, b_zero = (x if x is None or x.ndim < 3 else x[0, 0] for x in arguments[:6])
        out = poisoned(expected.shape[2:], types[2])
        one_call = cpu_qmatmul.prepare_one_call(a, np.float32(0.02), types[0](3), b, b_scale, b_zero, np.float32(0.5),
                                                types[2](5), out, compiled=True, products=kernel.name)
        one_call(a, np.float32(0.02), types[0](3), b, b_scale, b_zero, np.float32(0.5), types[2](5), out)
        np.testing.assert_array_equal(out, reference.quantized_matmul(
            a, np.float32(0.02), types[0](3), b, b_scale, b_zero, np.float32(0.5), types[2](5), types[2]))


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("compiled", REQUANTIZATIONS)
def test_kernel_chunks_requantized(monkeypatch, kernel, compiled):
    """Chunks of 48 along K = 301, added in float64, then requantized."""
    monkeypatch.setattr(cpu_integer_gemm, "INT32_CHUNK", 48)
    rng = np.random.default_rng(14)
    arguments, expected = quantized_case(rng, np.int8, np.uint8, np.int8, 301, (True, True, True), True, m=40, n=33)
    out = poisoned(expected.shape, np.int8)
    cpu_qmatmul.quantized_linear_matmul(*arguments, out, compiled=compiled, products=kernel.name, pieces=3)
    np.testing.assert_array_equal(out, expected)


def test_scratch_is_bounded_by_pieces_not_by_the_output():
    """A 65535 × 1 × 65535 product (a 4 GiB output) asks for scratch memory of pieces of its rows (their packed A and
    int32 sums, PIECE_BYTES each), not for M × N sums; in a grid too."""
    m = n = 65535
    a, b = np.empty((m, 1), np.uint8), np.empty((1, n), np.int8)
    for kernel in cpu_integer_gemm.RUNNABLE:
        layout = cpu_integer_gemm.products_layout(kernel, a, b)
        layouts = cpu_integer_gemm.scratch_layouts(kernel, m, 1, n, cpu_integer_gemm.own_sums(layout, 1, True))
        assert sum(math.prod(shape) * np.dtype(dtype).itemsize for shape, dtype in layouts) < 64 << 20
        rows = cpu_integer_gemm.padded(m, kernel.rows)
        counts = cpu_integer_gemm.stage_counts(kernel, layout, m, 1, n, 1)
        pieces = counts[1] if layout.endswith("rows") else counts[-1]  # (its pieces of rows)
        assert -(-rows // pieces) * 4 * n <= 2 * cpu_integer_gemm.PIECE_BYTES
    amx = cpu_kernels.KERNELS_BY_NAME["amx"]  # (a grid on 16 threads: B is small; its pieces' scratch is bounded too)
    _, pieces, groups = cpu_integer_gemm.stage_counts(amx, "tiles rows", m, 1, n, 1, False, 16, True)
    assert groups > 1
    assert -(-cpu_integer_gemm.padded(m, amx.rows) // (pieces // groups)) * 4 * -(-n // groups) <= \
        2 * cpu_integer_gemm.PIECE_BYTES


@pytest.mark.parametrize("kernel", KERNELS)
def test_products_in_pieces_of_bounded_scratch(monkeypatch, kernel):
    """Pieces of rows cut small for their scratch (PIECE_BYTES), each requantized from its own sums, and a product
    too large to share its sums among strips of columns (COLUMN_CUT_BYTES): the operator's bits."""
    monkeypatch.setattr(cpu_integer_gemm, "PIECE_BYTES", 1 << 14)
    monkeypatch.setattr(cpu_integer_gemm, "COLUMN_CUT_BYTES", 1 << 12)
    rng = np.random.default_rng(21)
    for m, k, n in [(300, 5, 200), (40, 70, 300)]:
        arguments, expected = quantized_case(rng, np.uint8, np.int8, np.uint8, k, (True, True, True), True, m=m, n=n)
        assert cpu_integer_gemm.products_layout(kernel, arguments[0][0, 0], arguments[3][0, 0]).endswith("rows")
        out = poisoned(expected.shape, np.uint8)
        cpu_qmatmul.quantized_linear_matmul(*arguments, out, compiled=True, products=kernel.name)
        np.testing.assert_array_equal(out, expected)
        # (in one compiled call: A's and the output's parameters per tensor)
        arguments, expected = quantized_case(rng, np.uint8, np.int8, np.uint8, k, (True, True, True), False, m=m, n=n)
        one_matrix = [x[0, 0] if x.ndim == 4 else x for x in arguments] + [poisoned(expected.shape[2:], np.uint8)]
        cpu_qmatmul.prepare_one_call(*one_matrix, products=kernel.name)(*one_matrix)
        np.testing.assert_array_equal(one_matrix[-1], expected[0, 0])


# -- B kept for many products (OWNED_BY_DML, prepare_b): packed once --------------------------------------------


@ONE_CALL
@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("m, k, n", [(40, 70, 33), (7, 301, 200), (1, 37, 130)])  # by rows, by columns (A of one row)
def test_kept_b_is_packed_once_for_each_zero_point(kernel, m, k, n):
    """A kept B (``persist_b``) is packed at the first product that reads it, for the kernel and B's zero point, and
    read from there after: in one compiled call (A's parameters per tensor) and on the general path (per row), in
    one piece and in three; fresh A each call, the operator's bits, nothing of out's buffer written beside it."""
    rng = np.random.default_rng(m + k + n)
    for a_type, b_type, out_type in TYPE_TRIPLES[::3]:
        kept = cpu_qmatmul.persist_b(random_values(rng, (k, n), b_type))
        packings = cpu_qmatmul.PACKINGS[id(kept)]
        for zero_b in (random_values(rng, n, b_type), None):
            for pieces in (1, 3):
                arguments, expected, buffer = one_call_case(rng, (a_type, b_type, out_type), m, k, n, "numbers")
                arguments = (*arguments[:3], kept, rng.uniform(0.01, 0.05, n).astype(np.float32), zero_b,
                             *arguments[6:])
                expected = reference.quantized_matmul(arguments[0], *arguments[1:3], kept, *arguments[4:8], out_type)
                before = buffer.copy()
                cpu_qmatmul.prepare_one_call(*arguments, products=kernel.name, pieces=pieces)(*arguments)
                np.testing.assert_array_equal(arguments[-1], expected)
                np.testing.assert_array_equal(buffer[[0, 1, -2, -1]], before[[0, 1, -2, -1]])
                # the general path: every parameter a vector, A's and the output's per row
                vectors = [np.full(length, value) for value, length in zip(
                    (arguments[1], arguments[2], arguments[6], arguments[7]), (m, m, m, m))]
                out = poisoned((1, 1, m, n), out_type)
                cpu_qmatmul.quantized_linear_matmul(arguments[0][None, None], vectors[0], vectors[1].astype(a_type),
                                                    kept[None, None], arguments[4], zero_b, vectors[2],
                                                    vectors[3].astype(out_type), out, compiled=True,
                                                    products=kernel.name, pieces=pieces)
                np.testing.assert_array_equal(out[0, 0], expected)
        assert len(packings) == 2  # one a zero point, made once


@ONE_CALL
def test_a_part_of_a_kept_b_is_read_as_it_lies():
    """Some columns or rows of a kept B are other matrices than the one its packing holds: not read from it."""
    rng = np.random.default_rng(5)
    kept = cpu_qmatmul.persist_b(random_values(rng, (64, 96), np.int8))
    for part in (kept[:, 5:70], kept[::2], kept[:32]):
        m, (k, n) = 6, part.shape
        arguments, expected, _ = one_call_case(rng, (np.uint8, np.int8, np.uint8), m, k, n, "numbers")
        arguments = (*arguments[:3], part, *arguments[4:])
        expected = reference.quantized_matmul(arguments[0], *arguments[1:3], part, *arguments[4:8], np.uint8)
        cpu_qmatmul.prepare_one_call(*arguments)(*arguments)
        np.testing.assert_array_equal(arguments[-1], expected)
    assert not cpu_qmatmul.PACKINGS[id(kept)]


def test_a_kept_b_is_read_only_and_its_packings_go_with_it():
    kept = cpu_qmatmul.persist_b(np.arange(12, dtype=np.int8).reshape(3, 4))
    with pytest.raises(ValueError, match="read-only"):
        kept[0, 0] = 1
    key = id(kept)
    assert key in cpu_qmatmul.PACKINGS
    del kept
    gc.collect()
    assert key not in cpu_qmatmul.PACKINGS


@ONE_CALL
def test_prepare_b_packs_b_for_the_array_api():
    """dmlops.prepare_b on the CPU: B packed at the first product, the operator's bits at every call after."""
    rng = np.random.default_rng(8)
    k, n = 300, 130
    b, b_scale = random_values(rng, (k, n), np.int8), rng.uniform(0.01, 0.05, n).astype(np.float32)
    prepared = dmlops.prepare_b(b, b_scale, np.int8(3))
    for m in (1, 1, 20):
        a = random_values(rng, (m, k), np.uint8)
        expected = reference.quantized_matmul(a, np.float32(0.02), np.uint8(100), b, b_scale, np.int8(3),
                                              np.float32(0.5), np.uint8(128), np.uint8)
        np.testing.assert_array_equal(dmlops.quantized_linear_matmul(
            a, np.float32(0.02), np.uint8(100), prepared, None, None, np.float32(0.5), np.uint8(128)), expected)
    assert cpu_qmatmul.PACKINGS[id(prepared.b)]


# -- AMX's tiles (every test above that takes KERNELS runs them too, where they can run) --------------------------

AMX = pytest.mark.skipif("amx" not in [kernel.name for kernel in cpu_integer_gemm.RUNNABLE],
                         reason="no AMX here, or Linux did not grant the tile state")


@AMX
@pytest.mark.parametrize("a_type, b_type", list(itertools.product(QMM_TYPES, repeat=2)))
@pytest.mark.parametrize("m, k, n", [(45, 131, 77), (33, 64, 16), (100, 65, 35), (17, 200, 300), (70, 1000, 49),
                                     (40, 4173, 50)])  # (K: two of amx.K_RUN and a part)
@pytest.mark.parametrize("form", ["per tensor", "per row and column"])
def test_amx_products_of_every_sign_pair(a_type, b_type, m, k, n, form):
    """Each of the four tile instructions (by the operands' signs), sizes that are multiples of no tile (16 rows or
    columns, 64 bytes of K), K of several runs of the kernel's sums, cut by rows (M ≥ N) and by columns, parameters
    per tensor or per row and column, into either output type: the operator's bits."""
    rng = np.random.default_rng(m * k + n)
    for out_type in QMM_TYPES:
        arguments, expected = quantized_case(rng, a_type, b_type, out_type, k, (True, True, True),
                                             form != "per tensor", m=m, n=n)
        for pieces in (1, 3):
            out = poisoned(expected.shape, out_type)
            cpu_qmatmul.quantized_linear_matmul(*arguments, out, compiled=True, products="amx", pieces=pieces)
            np.testing.assert_array_equal(out, expected)


@AMX
@pytest.mark.parametrize("b_type", QMM_TYPES)
@pytest.mark.parametrize("m, k, n", [(45, 131, 77), (17, 200, 300), (40, 4173, 50)])
def test_amx_products_of_uint8_a_with_zero_point_128(b_type, m, k, n):
    """A UINT8 A whose zero point is 128 in every row is read by the tiles as a − 128 (``driver.flip_of_a``: no
    correction for it); one row of another zero point, not. Cut by rows and by columns, B with zero points and
    without: the operator's bits."""
    rng = np.random.default_rng(m + k + n)
    for b_zero_point, odd_row in itertools.product((False, True), repeat=2):
        (a, a_scale, _, b, b_scale, zero_b, output_scale, zero_out), _ = quantized_case(
            rng, np.uint8, b_type, np.uint8, k, (True, b_zero_point, True), True, m=m, n=n)
        zero_a = np.full(m, 128, np.uint8)
        zero_a[m // 2] = 127 if odd_row else 128
        expected = reference.quantized_matmul(a, a_scale[:, None], zero_a[:, None], b, b_scale, zero_b,
                                              output_scale[:, None], zero_out[:, None], np.uint8)
        for pieces in (1, 3):
            out = poisoned(expected.shape, np.uint8)
            cpu_qmatmul.quantized_linear_matmul(a, a_scale, zero_a, b, b_scale, zero_b, output_scale, zero_out, out,
                                                compiled=True, products="amx", pieces=pieces)
            np.testing.assert_array_equal(out, expected)


@AMX
@pytest.mark.parametrize("a_layout", ["contiguous", "steps", "transposed"])
@pytest.mark.parametrize("b_layout", ["contiguous", "rows apart", "steps", "transposed"])
def test_amx_products_of_strided_operands(a_layout, b_layout):
    """A and B as views: their elements and rows apart, or transposed; B's rows whole vectors and not."""
    rng = np.random.default_rng(len(a_layout) * 7 + len(b_layout))
    m, k, n = 37, 150, 140
    for a_type, b_type in itertools.product(QMM_TYPES, repeat=2):
        a = {"contiguous": random_values(rng, (m, k), a_type),
             "steps": random_values(rng, (2 * m, 3 * k), a_type)[::2, ::3],
             "transposed": random_values(rng, (k, m), a_type).T}[a_layout]
        b = {"contiguous": random_values(rng, (k, n), b_type),
             "rows apart": random_values(rng, (2 * k, n + 64), b_type)[::2, :n],
             "steps": random_values(rng, (k, 2 * n), b_type)[:, ::2],
             "transposed": random_values(rng, (n, k), b_type).T}[b_layout]
        zero_a, zero_b = random_values(rng, m, a_type), random_values(rng, n, b_type)
        np.testing.assert_array_equal(kernel_product(cpu_integer_gemm.KERNELS_BY_NAME["amx"], a, zero_a, b, zero_b, 3),
                                      exact_product(a, zero_a, b, zero_b))


@AMX
def test_amx_takes_products_of_more_than_few_rows(monkeypatch):
    """AMX's tiles take A of more than FEWEST_TILE_ROWS rows (FEWEST_TILE_ROWS_OF_LARGE_B with a large B); fewer go
    to the fastest kernel of vectors, unless DMLOPS_CPU_KERNEL forces AMX's."""
    monkeypatch.delenv("DMLOPS_CPU_KERNEL", raising=False)
    monkeypatch.setattr(cpu_kernels, "KERNEL", cpu_integer_gemm.KERNELS_BY_NAME["amx"])
    for few, large_b in ((cpu_kernels.FEWEST_TILE_ROWS, False), (cpu_kernels.FEWEST_TILE_ROWS_OF_LARGE_B, True)):
        assert cpu_kernels.kernel_for_rows(few + 1, large_b).name == "amx"
        assert not cpu_kernels.kernel_for_rows(few, large_b).tiles
    monkeypatch.setenv("DMLOPS_CPU_KERNEL", "amx")
    assert cpu_kernels.kernel_for_rows(1).name == "amx"


def test_amx_needs_the_tile_state_granted(monkeypatch):
    """A processor with AMX's features runs its kernels only where Linux granted this process the tile state."""
    features = {"avx2", "avx512f", "avx512bw", "avx512vl", "avx512vnni", "amx-tile", "amx-int8"}
    monkeypatch.setattr(cpu_kernels, "NUMBA", True)
    monkeypatch.setattr(cpu_kernels, "target_features", lambda: features)
    for granted in (True, False):
        monkeypatch.setattr(cpu_kernels, "amx_granted", lambda granted=granted: granted)
        names = [kernel.name for kernel in cpu_kernels.runnable_kernels()]
        assert names == (["amx"] if granted else []) + ["avx512-vnni", "avx-vnni", "avx512bw", "avx2"]


def test_processor_features_by_their_llvm_names(monkeypatch):
    """Linux's flags in LLVM's names; NUMBA_CPU_FEATURES, where set, decides (numba compiles for it)."""
    from dmlops.backends.cpu import processor

    assert [processor.llvm_name(flag) for flag in ("avx512_vnni", "avx_vnni", "amx_int8", "sse4_2", "avx2")] == \
        ["avx512vnni", "avxvnni", "amx-int8", "sse4.2", "avx2"]
    monkeypatch.setenv("NUMBA_CPU_FEATURES", "+avx2,-avx512f,+amx-tile")
    assert processor.target_features.__wrapped__() == {"avx2", "amx-tile"}


@pytest.mark.parametrize("features, expected", [
    ({"avx", "avx2", "f16c"}, ["avx2"]),
    ({"avx2", "avxvnni"}, ["avx-vnni", "avx2"]),
    ({"avx2", "avx512f", "avx512bw", "avx512vl"}, ["avx512bw", "avx2"]),
    ({"avx2", "avx512f", "avx512bw", "avx512vnni"}, ["avx512-vnni", "avx512bw", "avx2"]),
    ({"avx2", "avx512f", "avx512bw", "avx512vl", "avx512vnni"}, ["avx512-vnni", "avx-vnni", "avx512bw", "avx2"]),
    ({"sse4.2", "neon"}, []),
])
def test_kernels_follow_the_processors_features(monkeypatch, features, expected):
    monkeypatch.setattr(cpu_kernels, "NUMBA", True)
    monkeypatch.setattr(cpu_kernels, "target_features", lambda: features)
    assert [kernel.name for kernel in cpu_kernels.runnable_kernels()] == expected


@pytest.mark.parametrize("kernel", cpu_kernels.KERNELS, ids=lambda kernel: kernel.name)
def test_kernel_shapes_that_b_packing_cannot_serve_are_refused(kernel):
    """A retuned kernel's block of B is a whole number of the packer's vectors, or a vector whole blocks, and a run of
    K whole groups: else the packer would store across blocks and the runs split groups (wrong sums, writes past the
    scratch)."""
    for rows, vectors in itertools.product((2, 4, 6, 8), (1, 2, 3, 4, 5, 6)):
        try:
            shaped = dataclasses.replace(kernel, rows=rows, vectors=vectors)
        except ValueError:
            assert kernel.bytes and vectors * kernel.vector_bits // 32 % (kernel.vector_bits // 8)
            continue
        assert shaped.k_block % shaped.group == 0


@pytest.mark.parametrize("name", [kernel.name for kernel in cpu_integer_gemm.RUNNABLE] + ["float32", None])
def test_a_named_kernel_is_chosen(monkeypatch, name):
    """DMLOPS_CPU_KERNEL forces any kernel that can run here, or the float32 path; unset, the fastest one runs."""
    if name is None:
        monkeypatch.delenv("DMLOPS_CPU_KERNEL", raising=False)
    else:
        monkeypatch.setenv("DMLOPS_CPU_KERNEL", name)
    chosen = cpu_kernels.chosen_kernel()
    runnable = cpu_integer_gemm.RUNNABLE
    assert chosen == (runnable[0] if runnable else None) if name is None else \
        (chosen is None if name == "float32" else chosen.name == name)


@pytest.mark.parametrize("name", ["avx512-vnni", "avx-vnni", "avx512bw", "avx2", "sse2", ""])
def test_kernels_that_cannot_run_are_rejected(monkeypatch, name):
    monkeypatch.setattr(cpu_kernels, "RUNNABLE", [])
    with pytest.raises(dmlops.ValidationError, match="CPU quantized matmul: kernel .* cannot run here"):
        cpu_kernels.kernel_named(name)


@pytest.mark.parametrize("name", PRODUCT_ENGINES)
def test_each_kernel_forced_through_the_array_api(monkeypatch, name):
    """The array API runs whichever kernel is chosen, and every one gives the operator's bits."""
    monkeypatch.setattr(cpu_kernels, "KERNEL", cpu_integer_gemm.kernel_named(name))
    rng = np.random.default_rng(16)
    for types, zero_points in [((np.uint8, np.int8, np.uint8), (True, False, True)),
                               ((np.int8, np.uint8, np.int8), (True, True, False))]:
        arguments, expected = quantized_case(rng, *types, 77, zero_points, True, batch=(2,), m=23, n=70)
        a, a_scale, zero_a, b, b_scale, zero_b, output_scale, zero_out = arguments
        out = dmlops.quantized_linear_matmul(a, a_scale, zero_a, b, b_scale, zero_b, output_scale, zero_out,
                                             output_dtype=types[2])
        np.testing.assert_array_equal(out, expected)


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity"), reason="no thread affinity")
def test_pieces_leave_the_calling_threads_cores_as_they_were():
    """The calling thread's cores stay as they were while it takes pieces and after, also where a piece fails."""
    allowed = os.sched_getaffinity(0)
    caller = threading.get_native_id()
    seen = []

    def record():
        if threading.get_native_id() == caller:
            seen.append(os.sched_getaffinity(0))
        time.sleep(0.001)

    pieces = 8 * cpu_pieces.CORES  # more than the helper threads can take before the caller takes its first
    cpu_pieces.run_in_pieces([record] * pieces, True, then=[record] * pieces)
    assert seen and all(cores == allowed for cores in seen)
    assert os.sched_getaffinity(0) == allowed
    rng = np.random.default_rng(15)
    a, b = random_values(rng, (50, 40), np.int8), random_values(rng, (40, 30), np.uint8)
    for kernel in cpu_integer_gemm.RUNNABLE:
        np.testing.assert_array_equal(kernel_product(kernel, a, None, b, None, 3), exact_product(a, None, b, None))
        assert os.sched_getaffinity(0) == allowed

    def fail():
        raise ZeroDivisionError

    with pytest.raises(ZeroDivisionError):
        cpu_pieces.run_in_pieces([fail] * 3, True)
    assert os.sched_getaffinity(0) == allowed


@COMPILED
def test_waiting_thread_goes_on_at_a_ring():
    """A pool thread waiting for the doorbell (``atomics.wait_for_ring``) goes on once it rings, from compiled code
    or from Python, while it lingers awake, and where the system has futexes, also once asleep (rung from compiled
    code: a ring wakes the threads asleep); elsewhere it returns once its cycles have passed."""
    from dmlops.backends.cpu import atomics

    doorbell = np.zeros(len(cpu_pieces.DOORBELL), np.int64)
    doorbell[cpu_pieces.THREADS] = 1

    def ring(doorbell):
        atomics.ring(doorbell, 1)

    def ring_from_python(doorbell):
        doorbell[cpu_pieces.CALLED] = 1
        doorbell[cpu_pieces.RINGS] += 1

    awake = 1 << 34  # (seconds at any clock rate: it goes on at the ring)
    waits = [(ring, awake), (ring_from_python, awake)]
    if atomics.SYSTEM_FUTEX is not None:
        waits.append((ring, 0))  # (asleep at once)
    else:
        start = time.perf_counter()
        atomics.wait_for_ring(doorbell, 0, 1 << 20)  # no ring: its cycles, a fraction of a second at any clock rate
        assert time.perf_counter() - start < 5
    for ring_it, cycles in waits:
        heard = doorbell[cpu_pieces.RINGS]
        ringer = threading.Timer(0.05, ring_it, (doorbell,))
        ringer.start()
        start = time.perf_counter()
        atomics.wait_for_ring(doorbell, heard, cycles)
        assert time.perf_counter() - start < 1
        ringer.join()
        assert doorbell[cpu_pieces.RINGS] == heard + 1
        assert doorbell[cpu_pieces.SLEEPERS] == doorbell[cpu_pieces.INSIDE] == 0
    atomics.ring(np.zeros(0, np.int64), 1)  # a doorbell of no elements: nothing rings


@COMPILED
def test_ring_calls_the_threads_it_asks_for():
    """A ring for one pool thread lets one of two waiting threads go on; the other waits for the next ring."""
    from dmlops.backends.cpu import atomics

    doorbell = np.zeros(len(cpu_pieces.DOORBELL), np.int64)
    gone = []
    one_gone, both_gone = threading.Event(), threading.Event()

    def wait():
        atomics.wait_for_ring(doorbell, 0, 1 << 34)
        gone.append(1)
        (both_gone if len(gone) == 2 else one_gone).set()

    waiters = [threading.Thread(target=wait) for _ in range(2)]
    for waiter in waiters:
        waiter.start()
    atomics.ring(doorbell, 1)
    assert one_gone.wait(5)
    assert not both_gone.wait(0.1)  # the other still waits
    assert len(gone) == 1
    atomics.ring(doorbell, 1)
    for waiter in waiters:
        waiter.join(5)
    assert len(gone) == 2


@COMPILED
def test_call_waits_a_while_for_pool_threads_in_python():
    """A call that shared its work returns (``atomics.call_ends``), however long a pool thread stays in Python:
    it waits for it a fraction of a millisecond at most."""
    import numba

    from dmlops.backends.cpu.atomics import call_begins, call_ends

    # (called from compiled code only, as a product's call calls them)
    begins = numba.njit(lambda doorbell, caller: call_begins(doorbell, caller))
    ends = numba.njit(lambda doorbell, caller: call_ends(doorbell, caller))
    doorbell = np.zeros(len(cpu_pieces.DOORBELL), np.int64)
    doorbell[cpu_pieces.THREADS] = 1  # one pool thread, never in compiled code
    begins(doorbell, False)  # a pool thread enters its call, and leaves it
    assert doorbell[cpu_pieces.INSIDE] == 1
    ends(doorbell, False)
    assert doorbell[cpu_pieces.INSIDE] == 0
    start = time.perf_counter()
    begins(doorbell, True)
    ends(doorbell, True)
    assert time.perf_counter() - start < 1
    assert doorbell[cpu_pieces.RINGS] == 1


@pytest.mark.parametrize("threads", [False, True])
def test_pieces_then_start_after_every_first_piece(threads):
    """``then`` calls start only once every first call has ended, whichever thread took it; a failed first call
    counts as ended (no thread waits forever) and its error is raised."""
    events = []
    ended = [threading.Event() for _ in range(4)]

    def first(index):
        if index:  # the later ones end last, on whichever thread
            assert ended[index - 1].wait(10)
        events.append(("first", index))
        ended[index].set()

    cpu_pieces.run_in_pieces([functools.partial(first, i) for i in range(4)], threads,
                                 then=[functools.partial(events.append, ("then", i)) for i in range(4)])
    assert sorted(events[:4]) == [("first", i) for i in range(4)]
    assert sorted(events[4:]) == [("then", i) for i in range(4)]

    def fail():
        raise ZeroDivisionError

    with pytest.raises(ZeroDivisionError):
        cpu_pieces.run_in_pieces([fail, functools.partial(first, 1)], threads, then=[lambda: None] * 2)


def product_in_pieces(kernel, a, b, exact):
    """Exit status 0 where the product, cut into pieces for the threads, is exact."""
    os._exit(0 if np.array_equal(kernel_product(kernel, a, None, b, None, 3), exact) else 1)


def assert_product_in_a_forked_child(kernel, rng):
    """A product in pieces, exact here and in a child forked after it. (Compiled here first: a child compiles
    nothing, since a thread of the parent may hold numba's compiler lock as it forks.)"""
    a, b = random_values(rng, (50, 40), np.int8), random_values(rng, (40, 30), np.uint8)
    exact = exact_product(a, None, b, None)
    np.testing.assert_array_equal(kernel_product(kernel, a, None, b, None, 3), exact)
    child = multiprocessing.get_context("fork").Process(target=product_in_pieces, args=(kernel, a, b, exact))
    child.start()
    child.join(60)
    if child.exitcode is None:
        child.kill()
    assert child.exitcode == 0


@pytest.mark.parametrize("kernel", KERNELS[:1])
@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork")
def test_kernel_product_in_a_forked_child(kernel):
    """A child forked after a product has run has none of its parent's threads: it must start its own."""
    assert_product_in_a_forked_child(kernel, np.random.default_rng(13))


@pytest.mark.skipif(QMM_LOOPS is None, reason="no numba")
@pytest.mark.skipif(QMM_LOOPS is not None and "avx512vnni" not in cpu_processor.target_features(),
                    reason="AMX's packing sums B's columns with vpdpbusd (which every AMX processor has)")
@settings(max_examples=examples(30), deadline=None)
@given(layout=st.sampled_from(["contiguous", "transposed", "steps"]), k=st.sampled_from([1, 3, 4, 17, 130]),
       n=st.sampled_from([1, 15, 16, 70, 130]), dtype=st.sampled_from([np.int8, np.uint8]),
       seed=st.integers(0, 2**32 - 1))
def test_amx_packing_of_b_on_any_processor_with_vnni(layout, k, n, dtype, seed):
    """AMX's packing of B ({N / 16, K / 4, 16, 4}: the bits of b[4·g + t, 16·block + j] at [block, g, j, t], 0 past
    b) and its column terms (Σ_k b[k, j] − K·zero point[j]), into poisoned arrays: plain numba and vector code, so
    that it is checked where the tile products cannot run; rows contiguous, columns contiguous (a transposed view)
    and neither."""
    import numba
    from dmlops.backends.cpu import byte_packing

    @numba.njit
    def pack(b, flip, zero_point, groups, terms, down_columns):
        byte_packing.pack_columns_bytes("amx", 64, b, flip, zero_point, groups, terms, 0, groups.shape[0],
                                        down_columns)

    rng = np.random.default_rng(seed)
    values = random_values(rng, (2 * k, 2 * n), dtype)
    b = {"contiguous": values[:k, :n], "transposed": random_values(rng, (n, k), dtype).T,
         "steps": values[::2, ::2]}[layout]
    zero_point = rng.integers(-300, 300, n, dtype=np.int32)
    blocks, groups_count = -(-n // 16), -(-k // 4)
    groups = np.full((blocks, groups_count, 16, 4), 0x5A, np.uint8)
    terms = np.full(blocks * 16, 0x5A5A, np.int32)
    down_columns = True if b.strides[0] == 1 and b.strides[1] != 1 else None  # (as integer_gemm.packing_path)
    pack(b.view(np.uint8), np.uint8(0 if dtype == np.int8 else 128), zero_point, groups, terms, down_columns)
    padded = np.zeros((4 * groups_count, 16 * blocks), np.uint8)
    padded[:k, :n] = b.view(np.uint8)
    expected = padded.reshape(groups_count, 4, blocks, 16).transpose(2, 0, 3, 1)
    np.testing.assert_array_equal(groups, expected)
    np.testing.assert_array_equal(terms[:n], b.astype(np.int64).sum(axis=0) - k * zero_point.astype(np.int64))


@pytest.mark.skipif(QMM_LOOPS is None, reason="no numba")
@pytest.mark.skipif(QMM_LOOPS is not None and "avx512bw" not in cpu_processor.target_features(),
                    reason="AMX's packing of A reads and sums 64 bytes at a time (AVX-512BW, which every AMX processor "
                           "has)")
@settings(max_examples=examples(30), deadline=None)
@given(layout=st.sampled_from(["contiguous", "steps"]), m=st.sampled_from([1, 31, 32, 40]),
       k=st.sampled_from([1, 63, 64, 65, 130]), dtype=st.sampled_from([np.int8, np.uint8]),
       flip=st.sampled_from([0, 128]), seed=st.integers(0, 2**32 - 1))
def test_amx_packing_of_a_on_any_processor_with_avx512bw(layout, m, k, dtype, flip, seed):
    """AMX's packing of A (rows of K padded to 64, a vector more, and rows padded to 32: 0 past a; the bits xor
    ``flip``) and its row sums (Σ_k of the values packed), into poisoned arrays, so that it is checked where the
    tile products cannot run; rows contiguous (64 bytes at a time) and not (byte by byte)."""
    import numba
    from dmlops.backends.cpu import amx, integer_gemm

    @numba.njit
    def pack(a, sign, flip, packed, row_sums):
        amx.pack_a(a, sign, flip, packed, row_sums, 0, packed.shape[0])

    rng = np.random.default_rng(seed)
    values = random_values(rng, (2 * m, 2 * k), dtype)
    a = {"contiguous": values[:m, :k], "steps": values[::2, ::2]}[layout]
    (shape, _), _, _, (sums_shape, _), _ = integer_gemm.scratch_layouts(integer_gemm.KERNELS_BY_NAME["amx"], m, k, 16)
    packed, row_sums = np.full(shape, 0x5A, np.uint8), np.full(sums_shape, 0x5A5A, np.int32)
    sign = 128 if dtype == np.int8 else 0
    pack(a.view(np.uint8), np.uint8(sign), np.uint8(flip), packed, row_sums)
    expected = np.zeros(shape, np.uint8)
    expected[:m, :k] = a.view(np.uint8) ^ flip
    np.testing.assert_array_equal(packed, expected)
    stored = expected[:m, :k].view(np.int8 if sign ^ flip else np.uint8)  # (the values the tiles read)
    np.testing.assert_array_equal(row_sums, np.pad(stored.astype(np.int64).sum(axis=1), (0, shape[0] - m)))


@pytest.mark.skipif(QMM_LOOPS is None, reason="no numba")
def test_arrays_of_compiled_code_lie_on_cache_lines():
    """new_array's arrays start on a cache line (compiled.ALIGNMENT: AMX's tiles and 512-bit vectors read a line
    at a time), whatever their size and type; numba's own are 32-byte aligned."""
    import numba
    from dmlops.backends.cpu import compiled, jit

    @numba.njit
    def offsets(sizes):
        found = np.empty(2 * sizes.shape[0], np.int64)
        for i in range(sizes.shape[0]):
            found[2 * i] = jit.new_array((sizes[i], 3), np.int32).ctypes.data % compiled.ALIGNMENT
            found[2 * i + 1] = jit.new_array(sizes[i], np.uint8).ctypes.data % compiled.ALIGNMENT
        return found

    if not jit.LINKED:
        pytest.skip("new_array is np.empty where numba's internals are not the known ones")
    assert not offsets(np.array([1, 3, 7, 100, 4097, 1 << 20])).any()


@pytest.mark.skipif(QMM_LOOPS is None, reason="no numba")
@settings(max_examples=examples(30), deadline=None)
@given(layout=st.sampled_from(["contiguous", "transposed", "steps"]), k=st.sampled_from([1, 2, 3, 4, 7, 130, 1027]),
       n=st.sampled_from([1, 15, 16, 17, 70, 130]), dtype=st.sampled_from([np.int8, np.uint8]),
       columns=st.sampled_from([16, 64]), seed=st.integers(0, 2**32 - 1))
def test_packing_of_b_into_pairs(layout, k, n, dtype, columns, seed):
    """The 16-bit kernels' packing of B ({N / columns, K / 2, columns}: b̃[2·p, j] in the low 16 bits of [block, p,
    j] and b̃[2·p + 1, j] in the high 16, b̃ = b − zero point, 0 past b), into poisoned pairs, for the blocks of
    avx2 (16 columns) and avx512bw (64); rows contiguous, columns contiguous (a transposed view, packed down them)
    and neither, the zero point per column or per tensor (stride 0)."""
    import numba
    from dmlops.backends.cpu import avx2

    @numba.njit
    def pack(b, sign, zero_point, pairs, down_columns):
        avx2.pack_columns(b, sign, zero_point, pairs, 0, pairs.shape[0], down_columns)

    rng = np.random.default_rng(seed)
    values = random_values(rng, (2 * k, 2 * n), dtype)
    b = {"contiguous": values[:k, :n], "transposed": random_values(rng, (n, k), dtype).T,
         "steps": values[::2, ::2]}[layout]
    info = np.iinfo(dtype)
    zero_point = rng.integers(info.min, info.max + 1, n if rng.random() < 0.5 else 1, dtype=np.int32)
    zero_point = np.broadcast_to(zero_point, (n,))
    blocks, pair_count = -(-n // columns), -(-k // 2)
    pairs = np.full((blocks, pair_count, columns), 0x5A5A5A5A, np.int32)
    down_columns = True if b.strides[0] == 1 and b.strides[1] != 1 else None  # (as integer_gemm.packing_path)
    pack(b.view(np.uint8), np.uint8(128 if dtype == np.int8 else 0), zero_point, pairs, down_columns)
    shifted = np.zeros((2 * pair_count, blocks * columns), np.int64)
    shifted[:k, :n] = b.astype(np.int64) - zero_point
    expected = (shifted[0::2] & 0xFFFF | shifted[1::2] << 16).astype(np.uint32).view(np.int32)
    np.testing.assert_array_equal(pairs, expected.reshape(pair_count, blocks, columns).transpose(1, 0, 2))


@pytest.mark.skipif(QMM_LOOPS is None, reason="no numba")
def test_cached_entries_are_stamped_by_every_module_of_the_backend():
    """A compiled entry in numba's cache holds the code of its callees, which are in other modules of the backend:
    its stamp covers all of them, so that an edited callee never runs as it was before from the cache."""
    from dmlops.backends.cpu import jit, requantization
    locator = requantization.requantize_rows._cache._impl._locator
    assert locator.get_source_stamp() == jit.backend_sources_hash()


@pytest.mark.parametrize("products", PRODUCT_ENGINES)
@settings(max_examples=examples(25), deadline=None)
@given(types=st.tuples(*[st.sampled_from(QMM_TYPES)] * 3), zero_points=st.sampled_from(ZERO_POINTS),
       per_element=st.booleans(), compiled=st.sampled_from(REQUANTIZATIONS), seed=st.integers(0, 2**32 - 1),
       k=st.sampled_from([1, 31, 300, 1100]), m=st.integers(1, 20), n=st.integers(1, 20),
       pieces=st.sampled_from([None, 1, 5]))
def test_both_products_through_batches_give_the_operators_bits(products, types, zero_points, per_element, compiled,
                                                                 seed, k, m, n, pieces):
    """A batch of 2 × 3 with B repeated over the batch (stride 0) and A over the channel; out is a view of a larger
    poisoned buffer, whose other bytes must stay as they were."""
    rng = np.random.default_rng(seed)
    arguments, _ = quantized_case(rng, *types, k, zero_points, per_element, batch=(2, 3), m=m, n=n)
    a, a_scale, zero_a, b, b_scale, zero_b, output_scale, zero_out = arguments
    a = np.broadcast_to(a[:, :1], a.shape)
    b = np.broadcast_to(b[:1], b.shape)
    buffer = poisoned((2, 3, m + 1, n + 2), types[2])
    before = buffer.copy()
    out = buffer[:, :, 1:, 1:n + 1]
    cpu_qmatmul.quantized_linear_matmul(a, a_scale, zero_a, b, b_scale, zero_b, output_scale, zero_out, out,
                                        compiled=compiled, products=products, pieces=pieces)
    expected = reference.quantized_matmul(
        a, a_scale[:, None], None if zero_a is None else zero_a[:, None], b, b_scale, zero_b, output_scale[:, None],
        None if zero_out is None else zero_out[:, None], types[2])
    np.testing.assert_array_equal(out, expected)
    outside = np.ones(buffer.shape, bool)
    outside[:, :, 1:, 1:n + 1] = False
    np.testing.assert_array_equal(buffer[outside], before[outside])


@ONE_CALL
def test_one_call_products_take_a_and_output_parameters_per_tensor():
    """A product whose A or output parameters have a value a row is not one for a compiled call (prepare's path
    takes it); one value in a vector of zero strides is per tensor."""
    arguments = list(one_call_case(np.random.default_rng(5), (np.uint8,) * 3, 16, 256, 64, "numbers")[0])
    for position, length in ((1, 16), (2, 16), (6, 16), (7, 16)):
        per_row = list(arguments)
        per_row[position] = np.full(length, per_row[position], np.float32 if position in (1, 6) else np.uint8)
        assert cpu_qmatmul.prepare_one_call(*per_row) is None
        per_row[position] = np.broadcast_to(per_row[position][:1], (length,))
        assert cpu_qmatmul.prepare_one_call(*per_row) is not None
