"""Exact integer GEMM of 8-bit matrices (numba installed): the driver, which prepares a product's arguments, its
scratch memory and its pieces for the cores, and runs it on the kernel picked from the processor at run time
(``kernels``). The kernels are in a module per instruction set: ``avx2`` (16-bit products, `vpmaddwd`), ``vnni``
(byte products, `vpdpbusd`), ``amx`` (AMX's tiles), B's packing for the last two in ``byte_packing``; the compiled
driver that runs them in ``driver``, the requantization in ``requantization``.

An int32 sum of products of magnitude ≤ 255² = 65 025 is exact for K up to 2^31 / 65 025 = 33 025 terms: a call
takes K up to INT32_CHUNK, and the caller adds longer products chunk by chunk.

Threads: a product is one compiled call a thread (``driver.product_pieces``), whose stages of pieces the threads take
by tickets (the pool's threads, or for many threads numba's, started in one compiled call: ``pieces.run_on_cores``);
each piece of rows is requantized into the output (``requantize_rows``) as soon as its sums are made, while they are
in cache. The compiled product takes the operands and the output as their bits, with the signs of the operands as
numbers (128 for INT8: a value is (its bits xor 128) − 128), so that one compiled variant serves every type (AMX's
tiles read each operand as its type: their instruction is picked by the signs, at run time).
"""

from __future__ import annotations

import math

import numpy as np

from .compiled import KeptCalls, call, in_one_block, read_only
from .kernels import KERNEL, KERNELS_BY_NAME, RUNNABLE, Kernel, kernel_for_rows, kernel_named  # noqa: F401
from .pieces import CORES, NO_RING, run_on_cores, threads_for

try:
    from .atomics import run_on_numba_threads
    from .driver import few_sums, multiply_in_pieces, pack_whole_b
    from .requantization import requantize_rows
except ImportError:  # NumPy alone is enough; the float32 path is used instead
    few_sums = multiply_in_pieces = pack_whole_b = requantize_rows = run_on_numba_threads = None

# The positions of requantize_rows' inputs (the sums, their terms, the scales and the zero point), typed as read-only
# where it is called from Python, so that one compiled variant serves writable and read-only arrays.
REQUANTIZATION_INPUTS = (0, 1, 2, 3, 4, 5, 6)
INT32_CHUNK = 32 * 1024  # 32 768 · 255² < 2^31: the int32 sums of a call are exact
PARALLEL_PACKING = 1 << 20  # B of this many elements or more is work for many cores, however few rows A has
# B's packing is cut into pieces of at least this many elements (a few µs each), up to a piece a core, each of whole
# runs of the kernel's packing (``Kernel.pack_blocks``): every piece of rows waits for the whole of B
PACKING_PIECE = 1 << 14
# A B of at most OWN_PACKING_ELEMENTS elements, multiplied by the vector kernels with at least OWN_PACKING_ROWS rows
# of A a core, is packed by each thread for itself, before its first piece of rows: no thread waits for the others'
# packing, and none writes lines that the other cores' kernels read in the call before (512³ on 2 Zen 4 cores: the
# packing 5.1 % of both threads' time so, 1.8 %; uint8 × int8 in a loop 427-435 µs a call so, 402-429). AMX's tiles,
# whose products take less time than B's packing, share it.
OWN_PACKING_ELEMENTS = 1 << 19
OWN_PACKING_ROWS = 128
# A product on AMX's tiles, on GRID_THREADS threads or more, of a B of at most GRID_B_ELEMENTS elements, is cut into
# a grid, a piece a thread: each packs its own group of B's columns and its own rows of A, makes their sums and
# requantizes them. No thread waits for another's packing, and none reads lines that the other cores wrote: on 16
# cores of a Xeon with AMX, B's packing in a stage of its own, read by every piece after it, took 40 of a 512³
# product's 108 µs (B packed already: 68); in a grid, 119-148 → 85-118 µs. 1024³ ran as fast either way, 2048³
# (1 MiB of B a thread) twice as slow in a grid (benchmarks/RESULTS.md). The vector kernels' grid is unmeasured.
GRID_THREADS = 8
GRID_B_ELEMENTS = 1 << 19
# A of at most this many rows is multiplied with B as it lies (``vnni.direct_products``), where the kernel can:
# packing B would be most of the call (a 16 × 256 × 64 product through the array API: 12 µs so, 15.6 packing B).
# Each 4 rows of A read and interleave B again, which costs more than packing it where B comes from memory, B of
# PARALLEL_PACKING elements or more: then at most DIRECT_ROWS_OF_LARGE_B rows (4096 × 4096 B on 2 Zen 4 cores, ms: 8
# rows 2.1 direct against 2.2 packed, 0.9-1.5 direct in the direct kernel's short bands; then 9 rows 2.3-3.7 direct
# against 1.3-1.7 packed, 16 rows 2.2-2.7 against 1.5-2.9; benchmarks/RESULTS.md).
DIRECT_ROWS = 16
DIRECT_ROWS_OF_LARGE_B = 8
# Scratch memory is bounded by pieces of the output, not by M × N (a 65535 × 1 × 65535 product asked for 16 GiB of
# int32 sums): a product is cut by rows into pieces whose own packed rows of A and sums take at most PIECE_BYTES, each
# requantized from the piece's own sums (``own_sums``), and by columns (its strips of B sharing every sum) only where
# all of its sums take at most COLUMN_CUT_BYTES.
PIECE_BYTES = 32 << 20
# A product of K > INT32_CHUNK and at most this many outputs is made by ``driver.few_sums`` in one pass over K (a
# kernel's call a chunk of K cost about 1.3 ms at M = N = 1, most of it packing B for 64 columns: K = 2^24 took 680 ms)
FEW_OUTPUTS = 64
COLUMN_CUT_BYTES = 256 << 20
# ``product_pieces``' finish where a product requantizes nothing (its sums left in the call's sums): requantize_rows'
# arguments of the types that a product that requantizes passes (the vectors read-only, typed as of any layout), out
# of no rows (``driver.finish_rows`` requantizes none of them), so that one compiled variant serves both
NO_FINISH = (*(read_only(np.zeros(0, dtype)) for dtype in (np.float32, np.float32, np.float32, np.float64)), 0.0, 0.0,
             np.zeros((0, 0), np.uint8))


def padded(size: int, multiple: int) -> int:
    return -(-size // multiple) * multiple


def scratch_layouts(kernel: Kernel, m: int, k: int, n: int, own_sums: bool = False, b_packed: bool = False):
    """(shape, dtype) of the scratch arrays of a call: A packed, B packed in blocks, the int32 sums, and the byte
    kernels' row sums of A' and column terms (Σ_k B' + K·β; every kernel has them, so that each takes the same
    arrays), padded for the kernel. B's blocks of the vector kernels hold int32 groups, as their packing writes them
    ({blocks, K / group, columns}; AMX's, its bits as uint8). Rows of A hold K padded
    to the kernel's multiple and one vector more, unread: rows a power of two of bytes apart would fall in the same
    L1 sets, and the rows the kernel reads at once would evict each other (AMX's 2048³ product ran at a third of its
    speed with its sums' rows 8 KiB apart). With ``own_sums`` (``own_sums``: every piece keeps its own), the call's
    sums have no rows; with ``b_packed`` (a kept B's packing read instead: ``with_packing``), B's packing and column
    terms have no elements."""
    a_type = kernel.element[0]
    length = padded(k, kernel.k_multiple)
    rows, columns = padded(m, kernel.rows), padded(n, kernel.columns)
    vector = kernel.vector_bits // 8 // np.dtype(a_type).itemsize
    # (AMX's tiles of sums are loaded and stored 16 rows at a time: those rows too a vector more apart)
    sums_row = columns + (vector // 4 if kernel.tiles else 0)
    packed_columns = 0 if b_packed else columns
    blocks, steps = packed_columns // kernel.columns, length // kernel.group
    packed_b = ((blocks, steps, kernel.columns, kernel.group), np.uint8) if kernel.tiles else \
        ((blocks, steps, kernel.columns), np.int32)
    return [((rows, length + vector), a_type), packed_b,
            ((0 if own_sums else rows, sums_row), np.int32), ((rows,), np.int32), ((packed_columns,), np.int32)]


def packed_b(kernel: Kernel, b, b_zero_point, layouts):
    """B {K, N} (K ≤ INT32_CHUNK) packed once for the products that read it packed (``b_packed``): (its packing,
    its column terms) in new arrays of ``scratch_layouts``' packed B and column terms, ``layouts`` (their
    (shape, dtype)), the zero point a vector of N or None (0)."""
    groups, terms = in_one_block(layouts)  # (aligned to a cache line, as the kernels read them best)
    call(pack_whole_b, kernel.name, packing_path(kernel, b), *operand(b, b_zero_point, b.shape[1]), groups, terms,
         read_only=(2,))
    return groups, terms


def with_packing(buffers, packing) -> tuple:
    """A call's scratch arrays with B's packing and column terms those of ``packing`` (``packed_b``'s)."""
    return (buffers[0], packing[0], buffers[2], buffers[3], packing[1])


def packing_path(kernel: Kernel, b=None) -> str:
    """How B is packed for the kernel, as ``driver.pack_b``'s layout reads it: " transposed" added where it is
    packed down its columns, which are contiguous (b a transposed view, as a layer's weights {N, K} are passed;
    ``avx2.pack_column_pairs``, ``vnni.pack_column_words``)."""
    path = "tiles" if kernel.tiles else "bytes" if kernel.bytes else "words"
    down_columns = b is not None and b.strides[0] == 1 and b.strides[1] != 1
    return f"{path} transposed" if down_columns else path


def integer_product(kernel: Kernel, a, a_zero_point, b, b_zero_point, buffers, pieces: int = 1, finish=None,
                    calls=None, threads: int | None = None, packing=None):
    """Σ_k (a − za)(b − zb) for a {M, K} and b {K, N}, the zero points vectors of M and N or None (0): int32 {M, N}
    (a view of the sums buffer) where K ≤ INT32_CHUNK, else float64 {M, N}, the chunks' sums added exactly.

    ``buffers`` are scratch arrays of ``scratch_layouts`` (for min(K, INT32_CHUNK) or more). The work is cut into
    stages of pieces (``product_pieces``; their layout ``products_layout``, their numbers ``stage_counts``), which
    this thread and, where ``threads`` > 1 (None: ``pieces.threads_for(pieces)``), the pool's threads take in
    turn, each thread in one compiled call. Where
    ``finish`` gives requantize_rows' arguments (a_scale, b_scale, output_scale, zero_point, low, high, out), each
    piece of rows requantizes its sums into out while they are in cache. ``calls`` is a run's ``KeptCalls`` (None:
    new ones)."""
    calls = KeptCalls() if calls is None else calls
    m, k = a.shape
    if k > INT32_CHUNK:
        total = np.zeros((m, b.shape[1]))
        if m * b.shape[1] <= FEW_OUTPUTS:
            call(few_sums, *operand(a, a_zero_point, m), *operand(b, b_zero_point, b.shape[1]), total)
        for start in range(0, k if m * b.shape[1] > FEW_OUTPUTS else 0, INT32_CHUNK):
            # (the chunks may be of other types than one another: not ``calls``)
            total += integer_product(kernel, a[:, start:start + INT32_CHUNK], a_zero_point,
                                     b[start:start + INT32_CHUNK], b_zero_point, buffers, pieces, threads=threads)
        if finish is not None:
            call(requantize_rows, total, np.zeros((0, 2)), np.zeros((2, 1)), *finish, 0, m,
                 read_only=REQUANTIZATION_INPUTS)
        return total
    n = b.shape[1]
    b_packed = packing is not None
    layout = products_layout(kernel, a, b, b_packed)
    threads = threads_for(pieces) if threads is None else threads
    counts = stage_counts(kernel, layout, m, k, n, pieces, b_packed, threads, finish is not None)
    if b_packed:
        buffers = with_packing(buffers, packing)
    # the operands and the output as bits, zero points as int32 vectors, the operands and the requantization's
    # arrays typed as of any layout (their loops run as fast either way) and the operands as read-only: a compiled
    # variant of the whole product takes a second or two to compile, and each type, layout and writability of each
    # argument would make another (as would a finish of None: NO_FINISH instead)
    finish = NO_FINISH if finish is None else (*finish[:-1], finish[-1].view(np.uint8))
    arguments = (kernel.name, layout, np.zeros(1 + len(counts), np.int64), counts, *operand(a, a_zero_point, m),
                 *operand(b, b_zero_point, n), tuple(buffers), b_packed, finish)
    types = {"any_layout": (4, 7, 12), "read_only": (4, 7)}  # a, b, finish; a, b
    run_on_cores(lambda arguments: calls.entry(multiply_in_pieces, *arguments, NO_RING, True, **types), arguments,
                 threads, run_on_numba_threads)
    return buffers[2][:m, :n]


def operand(x, zero_point, length: int):
    """(bits, sign, zero points) of an operand as ``product_pieces`` takes them: its bits (uint8), 128 where it is
    INT8 else 0, and its zero point vector (or None: 0) as a contiguous int32 vector of ``length``."""
    return (x.view(np.uint8), np.uint8(128 if x.dtype == np.int8 else 0),
            np.zeros(length, np.int32) if zero_point is None else np.ascontiguousarray(zero_point, np.int32))


def products_layout(kernel: Kernel, a, b, b_packed: bool = False) -> str:
    """``product_pieces``' layout: "direct" (``products_path``), else the path and the cut: by rows where A has at
    least as many rows as B has columns or the sums are many (COLUMN_CUT_BYTES), else by columns (strips of B, each
    read once by all of A). ``b_packed``: B is packed already (never direct)."""
    path = products_path(kernel, a, b, b_packed)
    if path == "direct":
        return path
    m, n = a.shape[0], b.shape[1]
    return f"{path} {'columns' if m < n and 4 * m * n <= COLUMN_CUT_BYTES else 'rows'}"


def own_sums(layout: str, k: int, finished: bool) -> bool:
    """Whether each piece of a product requantizes its own sums, so that the call keeps none (``scratch_layouts``):
    where it is cut by rows, requantized as it goes (``finished``) and of one chunk of K."""
    return finished and layout.endswith("rows") and k <= INT32_CHUNK


def stage_counts(kernel: Kernel, layout: str, m: int, k: int, n: int, pieces: int, b_packed: bool = False,
                 threads: int = 1, finished: bool = False):
    """The pieces of each of ``product_pieces``' stages (int64), for a product cut into about ``pieces`` pieces
    (one: every stage in one piece) on ``threads`` threads, its pieces requantizing their sums where ``finished``.
    B is packed in pieces of PACKING_PIECE elements or more, a core at most; strips of B's columns are two a core at
    most (a piece's strip of B is read a part of each row at a time, and narrower strips were read slower: 128 ×
    4096 × 4096 on 2 Zen 4 cores, 6.9 ms in 4 pieces, 7.6 in 8, 9.2 in 64). A B packed already (``b_packed``) has
    no stage of packing in the rows cut. The rows cut's last count is its groups of B's columns (``grid_groups``):
    its pieces are then the blocks of a grid, rows by groups."""
    def count(size, wanted, multiple=1):
        return max(1, min(-(-size // multiple), wanted))

    if layout == "direct":
        return np.array([1, count(n // 64, pieces), count(m, pieces)], np.int64)
    blocks = padded(n, kernel.columns) // kernel.columns
    if layout.endswith("columns"):
        return np.array([1, count(blocks, min(pieces, 2 * CORES)), count(m, pieces)], np.int64)
    rows = padded(m, kernel.rows)
    groups = grid_groups(kernel, k, n, threads, b_packed, finished)
    # (the packed rows of A and the sums of a group's columns, of all of A's rows: their pieces take PIECE_BYTES)
    piece_bytes = rows * (4 * padded(n, kernel.columns) // groups + padded(min(k, INT32_CHUNK), kernel.k_multiple))
    scratch_pieces = -(-piece_bytes // PIECE_BYTES)
    if groups > 1:
        return np.array([0, groups * count(rows, max(threads // groups, scratch_pieces), kernel.rows), groups],
                        np.int64)
    own_packing = (pieces > 1 and not kernel.tiles and k * n <= OWN_PACKING_ELEMENTS
                   and m >= OWN_PACKING_ROWS * min(CORES, pieces))
    b_pieces = 0 if b_packed or own_packing else \
        count(blocks, min(CORES, k * n // PACKING_PIECE), kernel.pack_blocks) if pieces > 1 else 1
    return np.array([b_pieces, count(rows, max(pieces, scratch_pieces), kernel.rows), 1], np.int64)


def grid_groups(kernel: Kernel, k: int, n: int, threads: int, b_packed: bool, finished: bool) -> int:
    """Into how many groups of B's columns a product cut by rows is cut: on AMX's tiles (the grid was measured on
    them alone), on GRID_THREADS threads or more, where B is not packed already, K is one chunk, B has at most
    GRID_B_ELEMENTS elements and the pieces requantize their sums, the divisor of the threads nearest their square
    root from below (at most B's runs of packed blocks); else 1."""
    if not kernel.tiles or threads < GRID_THREADS or b_packed or not finished or k > INT32_CHUNK or \
            k * n > GRID_B_ELEMENTS:
        return 1
    groups = math.isqrt(threads)
    while threads % groups:
        groups -= 1
    return min(groups, -(-padded(n, kernel.columns) // (kernel.columns * kernel.pack_blocks)))


def products_path(kernel: Kernel, a, b, b_packed: bool = False) -> str:
    """How the sums of a {M, K} and b {K, N} are made: "direct" (the byte kernel reads B as it lies: A of at most
    DIRECT_ROWS rows, DIRECT_ROWS_OF_LARGE_B for a large B; B's rows contiguous, K a multiple of 4, N of 64; B not
    packed already), else how B is packed for the kernel (``packing_path``)."""
    (m, k), n = a.shape, b.shape[1]
    rows = DIRECT_ROWS if k * n < PARALLEL_PACKING else DIRECT_ROWS_OF_LARGE_B
    if kernel.direct and not b_packed and m <= rows and k % 4 == 0 and n % 64 == 0 and b.strides[1] == 1:
        return "direct"
    return packing_path(kernel, None if b_packed else b)


