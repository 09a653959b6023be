"""Quantized linear matrix multiply on the CPU: the exact integer product, then the operator's requantization.

Where numba is installed and the processor has AVX2 or later, the exact sums come from an integer GEMM whose kernel
is picked from the processor (``kernels``: AMX's tiles, `vpdpbusd` where it has VNNI, else `vpmaddwd` on 16-bit
products), at two to four times the multiply-adds a cycle of float32 BLAS.

Elsewhere they come from float32 BLAS: NumPy never uses BLAS for integer matrices, so the integer product runs as a
float32 GEMM, which is exact as long as every partial sum is an integer of magnitude at most 2^24 (float32 has a
24-bit significand). To keep products small, each operand is centred first: ã = a − ca with ca = 128 for UINT8 and 0
for INT8, so |ã| ≤ 128, and the zero points move into a rank-2 correction:

    Σ_k (a − za)(b − zb) = Σ_k (ã + da)(b̃ + db),  da = ca − za (per row), db = cb − zb (per column)
                         = ã·b̃ + (Σ_k ã) ⊗ db + da ⊗ (Σ_k b̃ + K·db)

A product |ã·b̃| is at most max|ã|·max|b̃| (16 384 at full range), so the GEMM takes K in chunks of 2^24 //
(max|ã|·max|b̃|) (1 024 at full range, more for narrower values). Chunk results and corrections add up in float64,
which holds every integer below 2^53 exactly: |acc| ≤ K·255·255 < 2^53 for any K below 1.3e11, far beyond the 2^32
elements a tensor may hold. The exact sums (of either GEMM) are then requantized with the operator's own arithmetic,
so the bits are the reference's: by a compiled loop that reads each sum once (numba installed), or by the operator's
``requantize`` in blocks of rows that stay in cache.

A product of one matrix runs in one compiled call a thread: the scale checks, the integer kernel's packing, products
and corrections, and the requantization (``prepare_one_call``), with A's and the output's per-tensor scales and zero
points taken as numbers and B's as vectors (one compiled variant for every form). A repeated 16 × 256 × 64 product
through the array API cost 34 µs as a dozen NumPy calls and compiled loops each entered from Python, 11–12 µs so; a
512³ one on two cores spent 28 µs in Python before its threads started, 11–19 so (benchmarks/RESULTS.md).

The compiled code (qmatmul_loops: the integer GEMM, the compiled requantization, the product in one call) is loaded
by the first call that could run it, in a background thread (``LOOPS``, DMLOPS_NUMBA): numba's import and its first
load of compiled code take about half a second, and calls run the NumPy path, which gives the same bits, until it is
loaded. This module imports no numba.
"""

from __future__ import annotations

import functools
import math
import threading
import weakref

import numpy as np

from ...ops.quantized_matmul import OUTPUT_RANGE, SCALE_FIELDS, check_scale, requantize
from ...types import DataType, ValidationError
from .compiled import KeptCalls, Loader, call, entry_point, in_one_block, read_only, same
from .pieces import CORES, NO_RING, PIECES_PER_CORE, POOL_THREADS, cut, run_in_pieces, run_on_cores, threads_for

# Integers of magnitude up to this are exact in float32.
FLOAT32_EXACT = 1 << 24
# Output elements per requantization block of the NumPy path (float64: 256 KiB).
BLOCK_ELEMENTS = 1 << 15
# A product of this many multiply-adds (about 0.5 ms on one core) is cut into pieces for several cores
# (``pieces_of_product``); below it, threads cost more than they save.
PARALLEL_MULTIPLY_ADDS = 1 << 25
# A pool thread costs a product about 25 µs to join it (its wake-up, and Python with the GIL held, the threads one
# after another), so a product of S shares of that time runs fastest on about √S threads (S·25 µs/t + 25 µs·t). A
# share: this many multiply-adds, or elements of B read (a product of few rows reads B at memory speed). On 16 cores
# of a virtual Xeon, all 16 of the pool's threads made a 512³ product take 764 µs and 4 threads 366, 1 × 4096 × 4096
# 962 and 711. numba's threads (more than POOL_THREADS) start inside one compiled call, so there a thread a share
# pays: on 16 cores of a Xeon with AMX, 16 of them took 512³ in 152-156 µs against 4 pool threads' 291, 1 × 4096²
# in 219-228 against 8 pool threads' 346-398, 16 × 4096² 475 against 1029 (benchmarks/RESULTS.md).
MULTIPLY_ADDS_A_SHARE = 1 << 23
B_ELEMENTS_A_SHARE = 1 << 18
# The same for the compiled requantization: outputs (about 0.2 ms on one core).
PARALLEL_OUTPUTS = 1 << 18
# Scratch memory kept from one call to the next, one block a calling thread, where it is no larger than this.
KEPT_SCRATCH_BYTES = 32 << 20
KEPT_SCRATCH = threading.local()


def quantized_linear_matmul(a, a_scale, a_zero_point, b, b_scale, b_zero_point, output_scale, output_zero_point,
                            out, compiled: bool | None = None, products: str | None = None,
                            pieces: int | None = None) -> None:
    """a {B, C, M, K}, b {B, C, K, N}, out {B, C, M, N}; scales and zero points are vectors of M or N, or None.

    ``compiled`` picks the requantization (None: the compiled one where the compiled code is loaded, ``LOOPS``;
    True waits for it); ``products``, how the exact sums are made: the name of an integer GEMM kernel that can run
    here (``kernels``: "amx", "avx512-vnni", "avx-vnni", "avx512bw", "avx2"; it waits for the compiled code) or
    "float32" (BLAS); None: ``kernels.kernel_for_rows``, the fastest one, where the compiled code is loaded;
    ``pieces``, into how many pieces of rows the integer GEMM and the compiled requantization are cut for the cores
    (None: by their size).
    """
    arrays = (a, a_scale, a_zero_point, b, b_scale, b_zero_point, output_scale, output_zero_point, out)
    prepare(*arrays, compiled=compiled, products=products, pieces=pieces)(*arrays)


def prepare(a, a_scale, a_zero_point, b, b_scale, b_zero_point, output_scale, output_zero_point, out,
            compiled: bool | None = None, products: str | None = None, pieces: int | None = None):
    """run(a, a_scale, a_zero_point, b, b_scale, b_zero_point, output_scale, output_zero_point, out):
    ``quantized_linear_matmul`` with these options, for arrays laid out as these are (dtypes, shapes, strides, the
    same ones None). What depends on nothing else is decided here, once: the products' kernel, the pieces, the
    scratch memory's layout and the compiled loops' entry points (``KeptCalls``). (The array API's products of one
    matrix whose parameters are per tensor, or B's per column, take ``prepare_one_call`` instead.)"""
    m, k = a.shape[2:]
    n = b.shape[3]
    loops = compiled_code(compiled, products)
    compiled = loops is not None if compiled is None else compiled
    zero = np.zeros(m, out.dtype)  # the output zero point where there is none
    batches = list(np.ndindex(*out.shape[:2]))
    kernel = products_kernel(loops, products, m, k, n)
    if kernel is not None:
        integer_gemm = loops.integer_gemm
        calls = KeptCalls()
        # the packed operands and the int32 sums, written afresh for each matrix of the batch; each piece of rows is
        # requantized (compiled) as soon as its sums are made, while they are in cache
        layout = integer_gemm.products_layout(kernel, a[0, 0], b[0, 0])  # (the same for every matrix of the batch)
        layouts = integer_gemm.scratch_layouts(kernel, m, min(k, integer_gemm.INT32_CHUNK), n,
                                               integer_gemm.own_sums(layout, k, compiled))
        product_pieces, threads = pieces_of_product(integer_gemm, m, k, n, pieces)
        low, high = output_bounds(out.dtype)
        may_be_kept = not b.flags.writeable  # (as in prepare_one_call)

        def run(a, a_scale, a_zero_point, b, b_scale, b_zero_point, output_scale, output_zero_point, out):
            buffers = scratch(layouts)
            zero_point = zero if output_zero_point is None else output_zero_point
            # contiguous read-only vectors, so that one compiled variant serves every parameter form and writability
            requantization = (*(read_only(np.ascontiguousarray(vector, dtype)) for vector, dtype in (
                (a_scale, np.float32), (b_scale, np.float32), (output_scale, np.float32), (zero_point, np.float64))),
                              low, high)
            for index in batches:
                packed = packing(integer_gemm, kernel, b[index], b_zero_point) if may_be_kept else None
                sums = integer_gemm.integer_product(kernel, a[index], a_zero_point, b[index], b_zero_point, buffers,
                                                    product_pieces, (*requantization, out[index]) if compiled else None,
                                                    calls, threads, packed)
                if not compiled:
                    requantize_numpy(sums, [], a_scale, b_scale, output_scale, zero_point, out[index])
        return run
    requantize_pieces = pieces_for(m * n >= PARALLEL_OUTPUTS, pieces)

    def run_float32(a, a_scale, a_zero_point, b, b_scale, b_zero_point, output_scale, output_zero_point, out):
        zero_point = zero if output_zero_point is None else output_zero_point
        # ã, b̃, the GEMM's result and, where K takes more than one GEMM, the float64 sum of their results
        sums = (m, n) if exact_chunk(a, b) < k else (0, 0)
        buffers = scratch([((m, k), np.float32), ((k, n), np.float32), ((m, n), np.float32), (sums, np.float64)])
        for index in batches:
            product, corrections = integer_product(a[index], a_zero_point, b[index], b_zero_point, buffers)
            if compiled:
                # (its sums are float32 or float64 by the values: no KeptCalls)
                requantize_compiled(product, corrections, a_scale, b_scale, output_scale, zero_point, out[index],
                                    requantize_pieces)
            else:
                requantize_numpy(product, corrections, a_scale, b_scale, output_scale, zero_point, out[index])
    return run_float32


def pieces_for(parallel: bool, pieces: int | None) -> int:
    """Into how many pieces work is cut for the cores: ``pieces`` where given; else PIECES_PER_CORE a core where it
    is large enough (``parallel``), one otherwise."""
    if pieces is not None:
        return pieces
    return PIECES_PER_CORE * CORES if CORES > 1 and parallel else 1


def pieces_of_product(integer_gemm, m: int, k: int, n: int, pieces: int | None) -> tuple[int, int]:
    """(pieces, threads) of the integer GEMM of {M, K} and {K, N}: ``pieces`` where given, on as many threads (up to
    the cores); else, where it is large (PARALLEL_MULTIPLY_ADDS, or B of PARALLEL_PACKING elements: reading a large
    B is work for every core, however few rows A has), on a thread a share of work where that is more threads than
    the pool takes (numba's then, up to the cores), else on the square root of its shares (at least 2, at most the
    cores), PIECES_PER_CORE pieces a thread; else one piece."""
    if pieces is not None:
        return pieces, threads_for(pieces)
    if CORES == 1 or (m * n * k < PARALLEL_MULTIPLY_ADDS and k * n < integer_gemm.PARALLEL_PACKING):
        return 1, 1
    shares = max(m * n * k // MULTIPLY_ADDS_A_SHARE, k * n // B_ELEMENTS_A_SHARE)
    threads = min(CORES, shares)
    if threads <= POOL_THREADS:
        threads = min(CORES, max(2, math.isqrt(shares)))
    return PIECES_PER_CORE * threads, threads


# The positions of prepare_one_call's product's inputs among product_in_one_call's arguments: A, its scale and zero
# point, B, its scale and zero point, the output's scale and zero point.
ONE_CALL_INPUTS = (4, 6, 7, 8, 10, 11, 12, 13)
# Those typed as of any layout: A, B and B's scale and zero point (A and B packed as fast so, on 2 Zen 1 cores)
ONE_CALL_ANY_LAYOUT = (4, 8, 10, 11)


def prepare_one_call(a, a_scale, a_zero_point, b, b_scale, b_zero_point, output_scale, output_zero_point, out,
                     compiled: bool | None = None, products: str | None = None, pieces: int | None = None):
    """product(a, a_scale, a_zero_point, b, b_scale, b_zero_point, output_scale, output_zero_point, out) for one
    matrix, a {M, K}, b {K, N}, out {M, N} laid out as these are, with ``prepare``'s options: the scale checks, the
    integer kernel's exact sums (``driver.product_pieces``) and their requantization in one compiled call a
    thread, on the calling thread alone or with the pool's (``pieces.run_on_cores``). A's and the output's scales
    and zero points are per tensor, B's per tensor or per column: each a number or an array (of one value, or of
    one a column), of the same form at each call; a zero point may be None (0). A zero, NaN or infinite scale
    raises before out is written. None where the product is not one for an integer kernel and the compiled
    requantization (K ≤ INT32_CHUNK), where A's or the output's parameters have a value a row, or where the
    compiled code is not loaded."""
    (m, k), n = a.shape, b.shape[1]
    loops = compiled_code(compiled, products)
    kernel = products_kernel(loops, products, m, k, n)
    if kernel is None or compiled is False or k > loops.integer_gemm.INT32_CHUNK or \
            not all(map(one_value, (a_scale, a_zero_point, output_scale, output_zero_point))):
        return None
    integer_gemm, product_in_one_call = loops.integer_gemm, loops.product_in_one_call
    low, high = output_bounds(out.dtype)
    product_pieces, threads = pieces_of_product(integer_gemm, m, k, n, pieces)

    def way(b_packed):
        """(layout, stage counts, scratch layouts, the getter of the entry point that each thread calls) of the
        product with B as it is given, or with a kept B's packing (``packing``)."""
        layout = integer_gemm.products_layout(kernel, a, b, b_packed)
        found = {}  # the entry points, each found at its first use

        def getter(function, *last):
            def entry(arguments):
                if function not in found:
                    found[function] = entry_point(function, *arguments, *last, any_layout=ONE_CALL_ANY_LAYOUT,
                                                  read_only=ONE_CALL_INPUTS)
                return found[function]
            return entry
        return (layout, integer_gemm.stage_counts(kernel, layout, m, k, n, product_pieces, b_packed, threads, True),
                integer_gemm.scratch_layouts(kernel, m, k, n, integer_gemm.own_sums(layout, k, True), b_packed),
                getter(product_in_one_call, NO_RING, True))

    ways = (way(False), way(True))
    may_be_kept = not b.flags.writeable  # (a kept B is read-only: the products of writable ones look for none)
    a_sign, b_sign = (integer_gemm.operand(x, None, 0)[1] for x in (a, b))
    a_bits, b_bits, out_bits = (bits_of(x.dtype) for x in (a, b, out))
    # A's and the output's parameters as numbers, B's scale as a float32 vector and its zero point as its bits, of
    # one value or one a column: one compiled variant serves every form and type of each (a variant takes seconds
    # to compile)
    read_a_scale, read_a_zero, read_output_scale, read_output_zero = map(number_reader, (
        a_scale, a_zero_point, output_scale, output_zero_point))
    read_b_scale, read_b_zero = vector_reader(b_scale, FLOAT32), vector_reader(b_zero_point, b.dtype, bits=True)

    def product(a, a_scale, a_zero_point, b, b_scale, b_zero_point, output_scale, output_zero_point, out):
        b_zero_bits = read_b_zero(b_zero_point)
        packed = packing(integer_gemm, kernel, b, b_zero_bits.view(b.dtype)) if may_be_kept else None
        layout, counts, layouts, pool_entry = ways[packed is not None]
        buffers = scratch(layouts)
        if packed is not None:
            buffers = integer_gemm.with_packing(buffers, packed)
        # the operands and the output as their bits (their types are in their signs and bounds) and the inputs
        # typed as read-only: one compiled variant serves every type and writability of each, the same sums
        arguments = (kernel.name, layout, np.zeros(1 + len(counts), np.int64), counts, a_bits(a), a_sign,
                     read_a_scale(a_scale), read_a_zero(a_zero_point), b_bits(b), b_sign, read_b_scale(b_scale),
                     b_zero_bits, read_output_scale(output_scale), read_output_zero(output_zero_point), low, high,
                     out_bits(out), buffers, packed is not None)
        if not run_on_cores(pool_entry, arguments, threads, loops.run_on_numba_threads):
            check_scales(*(arguments[position] for position in (6, 10, 12)))
    return product


# The Bs kept for many products (OWNED_BY_DML, ``prepare_b``): the id of each kept copy → its packings for the
# integer kernels, by kernel and zero point, each made by the first product that reads it (``packing``). An entry
# goes with its copy.
PACKINGS: dict[int, dict] = {}


def persist_b(array: np.ndarray) -> np.ndarray:
    """The copy kept of an OWNED_BY_DML B: read-only, as DirectML's is to its user; the products that read it pack
    it once for their kernel and zero point and read the packing after (``packing``)."""
    kept = array.copy()
    kept.flags.writeable = False
    PACKINGS[id(kept)] = {}
    weakref.finalize(kept, PACKINGS.pop, id(kept), None)
    return kept


def packing(integer_gemm, kernel, b, zero_point):
    """The packing (``integer_gemm.packed_b``) of b for ``kernel`` and ``zero_point`` (an array of B's type, of one
    value or one a column, or None: 0) where b is all of a kept B of one matrix (``persist_b``) and K ≤
    INT32_CHUNK: made by the first call that asks for it, and kept with B. Else None."""
    owner = b if b.base is None else b.base
    packings = PACKINGS.get(id(owner))  # (an entry's id is that of a live kept copy: owner is that copy)
    # the same sizes and strides as all of a contiguous copy: the same elements
    if packings is None or owner.size != b.size or owner.shape[-2:] != b.shape or owner.strides[-2:] != b.strides \
            or b.shape[0] > integer_gemm.INT32_CHUNK:
        return None
    if zero_point is None:
        zero_point = ZERO_BITS.view(b.dtype)
    key = (kernel.name, zero_point.tobytes())
    found = packings.get(key)
    if found is None:
        layouts = integer_gemm.scratch_layouts(kernel, 1, *b.shape)
        zero_points = np.broadcast_to(zero_point, b.shape[1:])
        found = packings.setdefault(key, integer_gemm.packed_b(kernel, b, zero_points, (layouts[1], layouts[4])))
    return found


FLOAT32 = np.dtype(np.float32)
ZERO_BITS = np.zeros(1, np.uint8)  # an absent zero point of B: 0, of either type


def one_value(parameter) -> bool:
    """Whether a parameter (a number, an array or None) has one value (per tensor): an array of one element, or whose
    every stride is 0."""
    return not isinstance(parameter, np.ndarray) or parameter.size == 1 or not any(parameter.strides)


def number_reader(sample):
    """How prepare_one_call's product passes a parameter of A or the output given as ``sample`` is (a number, an
    array of one value, or None: 0): as a number."""
    if sample is None:
        return lambda value: 0
    return first_value if isinstance(sample, np.ndarray) else same


def first_value(array: np.ndarray):
    return array.item(0)


def vector_reader(sample, dtype: np.dtype, bits: bool = False):
    """How prepare_one_call's product passes a parameter of B given as ``sample`` is (a number, an array, or None:
    0): as a vector of dtype, of one value or one a column, a zero point (``bits``) as its bits (uint8). An array is
    passed as it is or as a view; only a number makes an array."""
    if sample is None:
        return lambda value: ZERO_BITS
    as_bits = bits_of(dtype) if bits else same
    if not isinstance(sample, np.ndarray):
        return lambda value: as_bits(np.array((value,), dtype))
    if sample.ndim == 1:
        return as_bits
    return lambda value: as_bits(value.reshape(-1))


UINT8 = np.dtype(np.uint8)


def bits_of(dtype: np.dtype):
    """The function that gives an 8-bit array of ``dtype`` as its bits (uint8): for uint8 the array itself (a view
    costs half a microsecond, a thirtieth of a small product)."""
    if dtype == UINT8:
        return same
    return lambda array: array.view(UINT8)


def compiled_code(compiled: bool | None, products: str | None):
    """The compiled code's module (qmatmul_loops) where a call may run it: loaded now where ``compiled`` or
    ``products`` (an integer kernel) asks for it, else where it is loaded (its loading started if it is not);
    None: the NumPy path."""
    if not compiled and products in (None, "float32"):
        return LOOPS.get()
    loops = LOOPS.wait()
    if loops is None:
        raise ValidationError("CPU quantized matmul: compiled code asked for (compiled requantization or an integer "
                              "kernel), but numba is not installed or DMLOPS_NUMBA is off")
    return loops


def products_kernel(loops, products: str | None, m: int, k: int, n: int):
    """The integer GEMM kernel that makes the exact sums of A {M, K} and B {K, N} (``products`` as ``prepare`` takes
    it), or None: float32 BLAS, as without the compiled code."""
    if loops is None or products == "float32":
        return None
    if products is None:
        return loops.integer_gemm.kernel_for_rows(m, k * n >= loops.integer_gemm.PARALLEL_PACKING)
    return loops.integer_gemm.kernel_named(products)


def warm_up(loops) -> None:
    """Load one compiled function, so that numba's compiler is initialised before a call needs it: where the pool
    has threads, their wait for the doorbell (``atomics.wait_for_ring``), which a first product's pool thread would
    otherwise compile as the call ends, the calling thread waiting for the GIL meanwhile; else the doorbell's ring
    as Python calls it (``atomics.ring``), a small one. (Each compiles in a tenth of a second where numba's cache
    is empty.)"""
    if CORES > 1:
        entry_point(loops.wait_for_ring, NO_RING, 0, 0)  # (typed as the pool's calls: NO_RING as the doorbell)
    else:
        entry_point(loops.ring, NO_RING, 0)


# The compiled code, loaded by the first call that could run it (DMLOPS_NUMBA: in the background by default).
def _import_loops():
    from . import qmatmul_loops

    return qmatmul_loops


LOOPS = Loader(_import_loops, warm_up)


def check_scales(a_scale, b_scale, output_scale) -> None:
    """Raise the ValidationError of a zero, NaN or infinite scale; each a vector or a number."""
    for field, values in zip(SCALE_FIELDS, (a_scale, b_scale, output_scale)):
        if one_value(values):  # (per tensor: checked as a number, in a tenth of the time)
            value = float(first_value(values) if isinstance(values, np.ndarray) else values)
            if value != 0 and math.isfinite(value):
                continue
        check_scale(field, np.asarray(values))


def integer_product(a, a_zero_point, b, b_zero_point, buffers=(None, None, None, None)):
    """(product, corrections) for a {M, K} and b {K, N}: Σ_k (a − za)(b − zb) = product + Σ row ⊗ column over the
    corrections (at most two), every term an integer held exactly in float32 or float64. ``buffers`` (float32
    {M, K}, {K, N}, {M, N}, then float64 {M, N} where K takes more than one GEMM) receive ã, b̃, the GEMM's result
    and the sum of the GEMMs instead of new arrays."""
    a_buffer, b_buffer, product_buffer, sum_buffer = buffers
    a_centred, a_shift = centre(a, a_zero_point, a_buffer)
    b_centred, b_shift = centre(b, b_zero_point, b_buffer)
    k = a.shape[1]
    chunk = exact_chunk(a, b)
    if chunk >= k:
        product = np.matmul(a_centred, b_centred, out=product_buffer)
    else:
        product = np.empty((a.shape[0], b.shape[1]), np.float64) if sum_buffer is None else sum_buffer
        for start in range(0, k, chunk):
            part = np.matmul(a_centred[:, start:start + chunk], b_centred[start:start + chunk], out=product_buffer)
            if start == 0:
                product[...] = part
            else:
                product += part
    corrections = []
    if b_shift is not None:
        corrections.append((a_centred.sum(axis=1, dtype=np.float64), b_shift))
    if a_shift is not None:
        b_sums = b_centred.sum(axis=0, dtype=np.float64)
        corrections.append((np.broadcast_to(a_shift, a.shape[:1]), b_sums if b_shift is None else b_sums + k * b_shift))
    return product, corrections


def scratch(layouts):
    """in_one_block(layouts), or the same arrays again where this thread's last call asked for the same layouts and
    they hold at most KEPT_SCRATCH_BYTES: allocating a 512³ call's 2 MiB takes 20–30 µs after a pause, 2 % of the
    call. The calls write every element they read (padding included) before reading it."""
    kept = getattr(KEPT_SCRATCH, "layouts", None)
    if kept is layouts or kept == layouts:  # (a kept run asks with the same list each time)
        return KEPT_SCRATCH.arrays
    arrays = in_one_block(layouts)
    if sum(array.nbytes for array in arrays) <= KEPT_SCRATCH_BYTES:
        KEPT_SCRATCH.layouts, KEPT_SCRATCH.arrays = layouts, arrays
    return arrays


def centre(x, zero_point, buffer):
    """(x − c in buffer, as float32; c − zero point as float64, or None where that is 0), with c = 128 for UINT8,
    0 for INT8. The zero point is a vector along A's rows or B's columns; so is the shift, or it has one element."""
    c = centre_of(x.dtype)
    shift = np.full(1, c, np.float64) if zero_point is None else c - zero_point.astype(np.float64)
    return np.subtract(x, c, out=buffer, dtype=np.float32), shift if shift.any() else None


def centre_of(dtype) -> int:
    return 128 if dtype == np.uint8 else 0


def exact_chunk(a, b) -> int:
    """How much of K one float32 GEMM of ã and b̃ takes, its partial sums staying exact: 2^24 // max|ã|·max|b̃|."""
    largest_product = largest_magnitude(a) * largest_magnitude(b)
    return a.shape[-1] if largest_product == 0 else max(1, FLOAT32_EXACT // largest_product)


def largest_magnitude(x) -> int:
    """max |x − c|, read from the 8-bit values (a pass over bytes, not over their float32 copy)."""
    c = centre_of(x.dtype)
    return max(c - int(x.min()), int(x.max()) - c)


# -- requantization ---------------------------------------------------------------------------------------------


def requantize_numpy(product, corrections, a_scale, b_scale, output_scale, zero_point, out) -> None:
    """out = the operator's requantize of product + the corrections, in blocks of rows that stay in cache."""
    output_type = DataType.from_numpy(out.dtype)
    rows = max(1, BLOCK_ELEMENTS // out.shape[1])
    for start in range(0, out.shape[0], rows):
        block = slice(start, start + rows)
        acc = product[block]
        if corrections:
            acc = acc.astype(np.float64)
            for row_term, column_term in corrections:
                acc += row_term[block, None] * column_term
        out[block] = requantize(acc, a_scale[block, None], b_scale, output_scale[block, None],
                                zero_point[block, None], output_type)


def requantize_compiled(product, corrections, a_scale, b_scale, output_scale, zero_point, out, pieces=1,
                        calls=call) -> None:
    """The same bits as requantize_numpy, in one compiled pass over the product; its rows cut into ``pieces`` for
    the cores. ``calls`` calls the compiled loop (``compiled.call``, or a run's ``KeptCalls``)."""
    requantize_slice = rows_requantization(True, corrections, a_scale, b_scale, output_scale, zero_point, out, calls)
    run_in_pieces([functools.partial(requantize_slice, product, slice(*rows))
                                  for rows in cut(out.shape[0], pieces, 1)], pieces > 1)


def rows_requantization(compiled, corrections, a_scale, b_scale, output_scale, zero_point, out, calls=call):
    """requantize_slice(product, rows): out[rows] = the requantization of product[rows] + the corrections' rows,
    compiled (the vectors it reads prepared once for every slice; ``calls`` calls the loop) or by NumPy."""
    if not compiled:
        def requantize_slice(product, rows):
            requantize_numpy(product[rows], [(row_term[rows], column_term) for row_term, column_term in corrections],
                             a_scale[rows], b_scale, output_scale[rows], zero_point[rows], out[rows])
        return requantize_slice
    integer_gemm = LOOPS.wait().integer_gemm
    requantize_rows, read_only = integer_gemm.requantize_rows, integer_gemm.REQUANTIZATION_INPUTS
    low, high = output_bounds(out.dtype)
    row_terms, column_terms = np.zeros((out.shape[0] if corrections else 0, 2)), np.zeros((2, out.shape[1]))
    for i, (row_term, column_term) in enumerate(corrections):
        row_terms[:, i], column_terms[i] = row_term, column_term
    # contiguous vectors, so that one compiled loop serves every parameter form
    a_scale, b_scale, output_scale = (np.ascontiguousarray(v, np.float32) for v in (a_scale, b_scale, output_scale))
    zero_point = np.ascontiguousarray(zero_point, np.float64)
    bits = out.view(UINT8)  # (the output's bits, as the integer kernels' pieces write them: one variant for both)

    def requantize_slice(product, rows):  # whole arrays and a range: a slice of one row would be of another type
        calls(requantize_rows, product, row_terms, column_terms, a_scale, b_scale, output_scale, zero_point, low,
              high, bits, rows.start, rows.stop, read_only=read_only)
    return requantize_slice


@functools.cache
def output_bounds(dtype: np.dtype) -> tuple[float, float]:
    """The range of an output type, as floats (kept by dtype: finding it took 2 µs, a tenth of a small product)."""
    low, high = OUTPUT_RANGE[DataType.from_numpy(dtype)]
    return float(low), float(high)
