"""Exact integer GEMM of 8-bit matrices through 16-bit products, on x86 processors with AVX2 (numba installed).

The operands are shifted by their zero points into int16, ã = a − za and b̃ = b − zb (|ã|, |b̃| ≤ 255), and
Σ_k ã·b̃ is computed directly, with no correction terms: `vpmaddwd` multiplies 16 pairs of int16 and adds
neighbouring products into 8 int32 lanes, 16 multiply-adds an instruction, two instructions a cycle on Zen 3
(twice the rate of float32 FMAs). An int32 sum of products of magnitude ≤ 255² = 65 025 is exact for K up to
2^31 / 65 025 = 33 025 terms, so K is taken in chunks of INT32_CHUNK and longer products add their chunks in
float64 (exact below 2^53).

LLVM turns a dot product written in plain code into `vpmaddwd` only when each loaded value feeds one product;
in a register-blocked kernel each row of ã meets several columns of b̃, and the loop then compiles to `vpmulld`
(8 multiplies an instruction, at half the rate). So the inner loop is written as LLVM IR (``block_dots``):
ROWS × COLUMNS dot products over a run of K, each a <8 x i32> accumulator, ã packed as rows {M, K} and b̃
transposed as rows {N, K}, K contiguous in both and padded with zeros to a multiple of 16. With 6 × 2 the 12
accumulators, 2 columns, 1 row and 1 product fill the 16 vector registers without spilling.

Cache blocking: a run of K_BLOCK columns of ROWS rows of ã (12 KiB) stays in L1 while the kernel walks a panel of
COLUMN_PANEL rows of b̃ (256 KiB), which stays in L2 while the kernel walks the rows.
"""

from __future__ import annotations

import functools

import numpy as np

from .cpu_scan import run_on_cores

try:
    import numba
    from llvmlite import ir
    from numba.core import types
    from numba.extending import intrinsic
except ImportError:  # NumPy alone is enough; the float32 path is used instead
    numba = None

LANES = 16  # int16 in a 256-bit vector
ROWS, COLUMNS = 6, 2  # dot products of one kernel call
K_BLOCK = 1024  # multiple of LANES
COLUMN_PANEL = 128  # multiple of COLUMNS; K_BLOCK · COLUMN_PANEL int16 = 256 KiB
INT32_CHUNK = 32 * K_BLOCK  # 32 768 · 255² < 2^31: int32 sums of one chunk are exact


def madd_instructions() -> bool:
    """Whether the processor numba compiles for has AVX2 (`vpmaddwd` on 256-bit vectors)."""
    from numba.core import codegen, config

    features = config.CPU_FEATURES if config.CPU_FEATURES is not None else codegen.get_host_cpu_features()
    return "+avx2" in features.split(",")


MADD_INSTRUCTIONS = numba is not None and madd_instructions()


def padded(size: int, multiple: int) -> int:
    return -(-size // multiple) * multiple


def packed_shapes(m: int, k: int, n: int):
    """Shapes of ã {M, K} and b̃ᵀ {N, K} padded for the kernel, and of the int32 sums {M, N} it writes. Rows of ã
    and b̃ᵀ hold K padded to a multiple of LANES and one vector more, unread: rows a power of two of bytes apart
    would fall in the same L1 sets, and the 8 rows the kernel reads at once would evict each other."""
    row = padded(k, LANES) + LANES
    return (padded(m, ROWS), row), (padded(n, COLUMNS), row), (padded(m, ROWS), padded(n, COLUMNS))


def integer_product(a, a_zero_point, b, b_zero_point, a_packed, b_packed, sums, pieces: int = 1):
    """Σ_k (a − za)(b − zb) for a {M, K} and b {K, N}: int32 {M, N} where K ≤ INT32_CHUNK, else float64 {M, N}.

    a_packed, b_packed and sums are scratch arrays of ``packed_shapes``; the result is a view of sums, or a new
    float64 array. The rows (and, to pack them, the columns) are cut into ``pieces`` that threads take in turn
    (the compiled loops release the GIL)."""
    m, k = a.shape
    n = b.shape[1]
    za = np.zeros(1, a.dtype) if a_zero_point is None else a_zero_point
    zb = np.zeros(1, b.dtype) if b_zero_point is None else b_zero_point
    za, zb = np.broadcast_to(za, (m,)), np.broadcast_to(zb, (n,))
    for packed, size in ((a_packed, m), (b_packed, n)):  # the padding adds nothing to the sums
        packed[size:] = 0
        packed[:, k:] = 0
    run_in_pieces([functools.partial(pack_rows, a, za, a_packed, *rows) for rows in cut(m, pieces, 1)] +
                  [functools.partial(pack_columns, b, zb, b_packed, *columns) for columns in cut(n, pieces, LANES)],
                  pieces > 1)
    row_ranges = cut(a_packed.shape[0], pieces, ROWS)
    total = None
    length = padded(k, LANES)
    for start in range(0, length, INT32_CHUNK):
        end = min(start + INT32_CHUNK, length)
        run_in_pieces([functools.partial(multiply_rows, a_packed, b_packed, sums, *rows, start, end)
                       for rows in row_ranges], pieces > 1)
        if end < length or start > 0:
            total = sums[:m, :n].astype(np.float64) if total is None else total + sums[:m, :n]
    return sums[:m, :n] if total is None else total


def run_in_pieces(calls, threads: bool) -> None:
    """The calls on threads, or in turn."""
    if threads:
        run_on_cores(calls)
    else:
        for call in calls:
            call()


def cut(size: int, pieces: int, multiple: int):
    """Up to ``pieces`` ranges (first, last) of about the same length that cover range(size), none empty, their
    bounds multiples of ``multiple`` but the last."""
    blocks = -(-size // multiple)
    count = max(1, min(blocks, pieces))
    return [(multiple * (blocks * i // count), min(size, multiple * (blocks * (i + 1) // count))) for i in range(count)]


if MADD_INSTRUCTIONS:
    compiled = numba.njit(nogil=True, cache=True)

    @intrinsic
    def block_dots(typing_context, a, b, row, column, start, vectors):
        """(Σ a[row + r, k] · b[column + c, k] over k in [start, start + 16·vectors) for r < ROWS, c < COLUMNS),
        row-major, for C-contiguous int16 a and b; vectors ≥ 1."""
        signature = types.UniTuple(types.int32, ROWS * COLUMNS)(a, b, row, column, start, vectors)

        def codegen(context, builder, signature, arguments):
            int64, halves = ir.IntType(64), ir.VectorType(ir.IntType(16), LANES)
            lanes = ir.VectorType(ir.IntType(32), LANES // 2)
            row, column, start, vectors = arguments[2:]

            def row_addresses(array_type, array, first, count):
                """Byte addresses of array[first + i, start] for i < count."""
                array = context.make_array(array_type)(context, builder, array)
                base = builder.ptrtoint(array.data, int64)
                row_bytes = builder.extract_value(array.strides, 0)
                column_bytes = builder.mul(start, ir.Constant(int64, 2))
                return [builder.add(base, builder.add(builder.mul(builder.add(first, ir.Constant(int64, i)),
                                                                  row_bytes), column_bytes))
                        for i in range(count)]

            a_rows = row_addresses(signature.args[0], arguments[0], row, ROWS)
            b_rows = row_addresses(signature.args[1], arguments[1], column, COLUMNS)
            madd = builder.module.declare_intrinsic("llvm.x86.avx2.pmadd.wd",
                                                    fnty=ir.FunctionType(lanes, [halves, halves]))
            reduce = builder.module.declare_intrinsic("llvm.vector.reduce.add.v8i32",
                                                      fnty=ir.FunctionType(ir.IntType(32), [lanes]))
            entry, loop = builder.block, builder.append_basic_block("dots")
            done = builder.append_basic_block("dots_done")
            end = builder.mul(vectors, ir.Constant(int64, 2 * LANES))
            builder.branch(loop)

            builder.position_at_end(loop)
            offset = builder.phi(int64)
            sums = [builder.phi(lanes) for _ in range(ROWS * COLUMNS)]

            def load(address):
                pointer = builder.inttoptr(builder.add(address, offset), halves.as_pointer())
                return builder.load(pointer, align=2)

            columns = [load(address) for address in b_rows]
            new_sums = []
            for r, address in enumerate(a_rows):
                row_vector = load(address)
                new_sums += [builder.add(sums[r * COLUMNS + c], builder.call(madd, [row_vector, columns[c]]))
                             for c in range(COLUMNS)]
            next_offset = builder.add(offset, ir.Constant(int64, 2 * LANES))
            offset.add_incoming(ir.Constant(int64, 0), entry)
            offset.add_incoming(next_offset, loop)
            for phi, value in zip(sums, new_sums):
                phi.add_incoming(ir.Constant(lanes, None), entry)
                phi.add_incoming(value, loop)
            builder.cbranch(builder.icmp_signed("<", next_offset, end), loop, done)

            builder.position_at_end(done)
            totals = [builder.call(reduce, [value]) for value in new_sums]
            return context.make_tuple(builder, signature.return_type, totals)

        return signature, codegen

    @compiled
    def multiply_rows(a, b, sums, first_row, end_row, start, end):
        """sums[first_row:end_row] = a[first_row:end_row, start:end] @ b[:, start:end]ᵀ (int32), by panels of
        COLUMN_PANEL rows of b and runs of K_BLOCK."""
        columns = b.shape[0]
        for k in range(start, end, K_BLOCK):
            vectors = min(K_BLOCK, end - k) // LANES
            for panel in range(0, columns, COLUMN_PANEL):
                panel_end = min(panel + COLUMN_PANEL, columns)
                for i in range(first_row, end_row, ROWS):
                    for j in range(panel, panel_end, COLUMNS):
                        dots = block_dots(a, b, i, j, k, vectors)
                        for r in range(ROWS):
                            for c in range(COLUMNS):
                                if k == start:
                                    sums[i + r, j + c] = dots[r * COLUMNS + c]
                                else:
                                    sums[i + r, j + c] += dots[r * COLUMNS + c]

    @compiled
    def pack_rows(a, zero_point, packed, first, last):
        """packed[first:last, :K] = a[first:last] − zero point (per row)."""
        for i in range(first, last):
            shift = np.int16(zero_point[i])
            target = packed[i]
            for k in range(a.shape[1]):
                target[k] = np.int16(a[i, k]) - shift

    @compiled
    def pack_columns(b, zero_point, packed, first, last):
        """packed[first:last, :K] = (b[:, first:last] − zero point (per column))ᵀ, through a tile of LANES × LANES
        that stays in L1: read along rows of b, written along rows of packed."""
        length = b.shape[0]
        tile = np.empty((LANES, LANES), np.int16)
        for column in range(first, last, LANES):
            columns = min(LANES, last - column)
            for start in range(0, length, LANES):
                count = min(LANES, length - start)
                for k in range(count):
                    for j in range(columns):
                        tile[j, k] = np.int16(b[start + k, column + j]) - np.int16(zero_point[column + j])
                for j in range(columns):
                    target = packed[column + j]
                    for k in range(count):
                        target[start + k] = tile[j, k]
