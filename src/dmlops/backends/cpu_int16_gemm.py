"""Exact integer GEMM of 8-bit matrices through 16-bit products, on x86 processors with AVX2 (numba installed).

The operands are shifted by their zero points into int16, ã = a − za and b̃ = b − zb (|ã|, |b̃| ≤ 255), and
Σ_k ã·b̃ is computed directly, with no correction terms: `vpmaddwd` multiplies 16 pairs of int16 and adds
neighbouring products into 8 int32 lanes, 16 multiply-adds an instruction, about two instructions a cycle on Zen 3
(twice the rate of float32 FMAs). An int32 sum of products of magnitude ≤ 255² = 65 025 is exact for K up to
2^31 / 65 025 = 33 025 terms, so K is taken in chunks of INT32_CHUNK and longer products add their chunks in
float64 (exact below 2^53).

Layout, as in BLAS kernels: ã stays in rows {M, K}; b̃ is packed in blocks of 16 columns, each block K/2 steps of
16 columns × 2 consecutive k ({N/16, K/2, 16, 2}). A step of the kernel broadcasts one pair (ã[i, k], ã[i, k + 1])
of each of ROWS rows and multiplies it with the block's 16 pairs (b̃[k, j], b̃[k + 1, j]): `vpmaddwd` then yields
ã[i, k]·b̃[k, j] + ã[i, k + 1]·b̃[k + 1, j] in lane j, so the sums build up with columns along the lanes, need no
horizontal reduction, and are stored as vectors. 6 rows × 16 columns are 12 accumulators, which with 2 column
vectors, 1 broadcast and 1 product fill the 16 vector registers without spilling.

LLVM does not reach `vpmaddwd` from such a loop written in plain code (it matches only dot products whose loaded
values each feed one product, and compiles a register-blocked kernel to `vpmulld`, 8 multiplies an instruction),
so the kernel's loop is written as LLVM IR (``block_products``).

Cache blocking: ROWS rows × K_BLOCK of ã (12 KiB) stay in L1 while the kernel walks a panel of PANEL_BLOCKS
column blocks of b̃ (256 KiB), which stays in L2 while the kernel walks the rows.
"""

from __future__ import annotations

import functools
import os

import numpy as np

from .cpu_pieces import CORES, cut, run_in_pieces

try:
    import numba
    from llvmlite import ir
    from numba.core import types
    from numba.extending import intrinsic
except ImportError:  # NumPy alone is enough; the float32 path is used instead
    numba = None

LANES = 16  # int16 in a 256-bit vector
ROWS = 6  # rows of one kernel call
COLUMNS = 16  # columns of one kernel call (a block of b̃): two vectors of 8 int32 sums
K_BLOCK = 1024  # even
PANEL_BLOCKS = 8  # column blocks of a panel: K_BLOCK · COLUMNS · PANEL_BLOCKS int16 = 256 KiB
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
    """Shapes of ã {M, K}, b̃ in blocks {N/16, K/2, 16, 2} and the int32 sums {M, N}, padded for the kernel. Rows
    of ã hold K padded to even and one vector more, unread: rows a power of two of bytes apart would fall in the
    same L1 sets, and the ROWS rows the kernel reads at once would evict each other."""
    length = padded(k, 2)
    rows, columns = padded(m, ROWS), padded(n, COLUMNS)
    return (rows, length + LANES), (columns // COLUMNS, length // 2, COLUMNS, 2), (rows, columns)


def integer_product(a, a_zero_point, b, b_zero_point, a_packed, b_packed, sums, pieces: int = 1, finish=None):
    """Σ_k (a − za)(b − zb) for a {M, K} and b {K, N}, the zero points vectors of M and N or None (0): int32 {M, N}
    where K ≤ INT32_CHUNK, else float64 {M, N}.

    a_packed, b_packed and sums are scratch arrays of ``packed_shapes``; the result is a view of sums, or a new
    float64 array. b̃ is packed on the cores, then the rows are cut into ``pieces`` that each pack their rows of ã,
    make their sums and, where given, call ``finish(result, rows)`` (a slice) while those sums are in cache.
    Threads take the pieces in turn (the compiled loops release the GIL)."""
    m, k = a.shape
    n = b.shape[1]
    za = np.zeros(m, a.dtype) if a_zero_point is None else a_zero_point
    zb = np.zeros(n, b.dtype) if b_zero_point is None else b_zero_point
    length = padded(k, 2)
    chunks = [(start, min(start + INT32_CHUNK, length)) for start in range(0, length, INT32_CHUNK)]
    result = sums[:m, :n] if len(chunks) == 1 else np.zeros((m, n))

    def rows_piece(first, last):
        rows = slice(first, min(last, m))  # every piece holds rows of a: there is less than a piece of padding
        pack_rows(a, za, a_packed, first, last)
        for start, end in chunks:
            multiply_rows(a_packed, b_packed, sums, first, last, start, end)
            if len(chunks) > 1:
                result[rows] += sums[rows, :n]
        if finish is not None:
            finish(result, rows)

    # b̃ in one piece a core (packing is short, and a piece costs about 10 µs to hand out), then the rows, in one
    # hand-out: the threads are woken once, and the rows start as soon as b̃ is packed
    b_pairs = b_packed.view(np.int32).reshape(b_packed.shape[:3])  # each pair (b̃[k, j], b̃[k + 1, j]) in one int32
    run_in_pieces([functools.partial(pack_columns, b, zb, b_pairs, *pairs)
                   for pairs in cut(b_packed.shape[1], min(pieces, CORES), 1)], pieces > 1,
                  then=[functools.partial(rows_piece, *rows) for rows in cut(a_packed.shape[0], pieces, ROWS)])
    return result


if MADD_INSTRUCTIONS:
    compiled = numba.njit(nogil=True, cache=True)

    @intrinsic
    def block_products(typing_context, a, b, sums, row, block, start, pairs, accumulate):
        """sums[row:row + ROWS, 16·block:16·(block + 1)] = (sums there, if accumulate, +) ã[row:row + ROWS, start:
        start + 2·pairs] @ b̃[start:start + 2·pairs, 16·block:16·(block + 1)], ã and b̃ packed (C-contiguous)."""
        signature = types.none(a, b, sums, row, block, start, pairs, accumulate)

        def codegen(context, builder, signature, arguments):
            int64, int32 = ir.IntType(64), ir.IntType(32)
            halves, lanes = ir.VectorType(ir.IntType(16), LANES), ir.VectorType(int32, LANES // 2)
            row, block, start, pairs, accumulate = arguments[3:]
            a_array, b_array, sums_array = (context.make_array(kind)(context, builder, value)
                                            for kind, value in zip(signature.args[:3], arguments[:3]))

            def constant(value):
                return ir.Constant(int64, value)

            def address(array, first, index, offset):
                """Byte address of array[first + index] plus offset bytes."""
                row_bytes = builder.extract_value(array.strides, 0)
                at = builder.mul(builder.add(first, constant(index)), row_bytes)
                return builder.add(builder.ptrtoint(array.data, int64), builder.add(at, offset))

            def load(at, kind):
                return builder.load(builder.inttoptr(at, kind.as_pointer()), align=2)

            def splat(pair):
                """The 32 bits of a pair of int16 in each of the 8 lanes."""
                vector = builder.insert_element(ir.Constant(lanes, None), pair, ir.Constant(int32, 0))
                spread = builder.shuffle_vector(vector, ir.Constant(lanes, None), ir.Constant(lanes, [0] * 8))
                return builder.bitcast(spread, halves)

            a_rows = [address(a_array, row, r, builder.mul(start, constant(2))) for r in range(ROWS)]
            b_steps = address(b_array, block, 0, builder.mul(start, constant(2 * COLUMNS)))
            sums_at = [[address(sums_array, row, r, builder.add(builder.mul(block, constant(4 * COLUMNS)),
                                                                constant(2 * LANES * half)))
                        for half in range(2)] for r in range(ROWS)]
            madd = builder.module.declare_intrinsic("llvm.x86.avx2.pmadd.wd",
                                                    fnty=ir.FunctionType(lanes, [halves, halves]))
            entry, loop = builder.block, builder.append_basic_block("products")
            done = builder.append_basic_block("products_done")
            initial = [[builder.select(accumulate, load(at, lanes), ir.Constant(lanes, None)) for at in row_sums]
                       for row_sums in sums_at]
            builder.branch(loop)

            builder.position_at_end(loop)
            step = builder.phi(int64)
            sums = [[builder.phi(lanes) for _ in range(2)] for _ in range(ROWS)]
            b_at = builder.add(b_steps, builder.mul(step, constant(4 * COLUMNS)))
            columns = [load(builder.add(b_at, constant(2 * LANES * half)), halves) for half in range(2)]
            new_sums = []
            for r in range(ROWS):
                pair = splat(load(builder.add(a_rows[r], builder.mul(step, constant(4))), int32))
                new_sums.append([builder.add(sums[r][half], builder.call(madd, [pair, columns[half]]))
                                 for half in range(2)])
            next_step = builder.add(step, constant(1))
            step.add_incoming(constant(0), entry)
            step.add_incoming(next_step, loop)
            for r in range(ROWS):
                for half in range(2):
                    sums[r][half].add_incoming(initial[r][half], entry)
                    sums[r][half].add_incoming(new_sums[r][half], loop)
            builder.cbranch(builder.icmp_signed("<", next_step, pairs), loop, done)

            builder.position_at_end(done)
            for r in range(ROWS):
                for half in range(2):
                    builder.store(new_sums[r][half], builder.inttoptr(sums_at[r][half], lanes.as_pointer()),
                                  align=4)
            return context.get_dummy_value()

        return signature, codegen

    @compiled
    def multiply_rows(a, b, sums, first_row, end_row, start, end):
        """sums[first_row:end_row] = ã[first_row:end_row, start:end] @ b̃[start:end] (int32), by runs of K_BLOCK
        and panels of PANEL_BLOCKS column blocks; start and end even."""
        for k in range(start, end, K_BLOCK):
            pairs = min(K_BLOCK, end - k) // 2
            for panel in range(0, b.shape[0], PANEL_BLOCKS):
                for i in range(first_row, end_row, ROWS):
                    for block in range(panel, min(panel + PANEL_BLOCKS, b.shape[0])):
                        block_products(a, b, sums, i, block, k, pairs, k != start)

    @compiled
    def pack_rows(a, zero_point, packed, first, last):
        """packed[first:last] = a[first:last] − zero point (per row), and 0 past the end of a: the padding adds
        nothing to the sums."""
        rows, length = a.shape
        for i in range(first, last):
            target = packed[i]
            if i < rows:
                shift = np.int16(zero_point[i])
                for k in range(length):
                    target[k] = np.int16(a[i, k]) - shift
            target[length if i < rows else 0:] = 0

    @compiled
    def pack_columns(b, zero_point, pairs, first, last):
        """pairs[j // 16, k // 2, j % 16] = b̃[k, j] in the low 16 bits and b̃[k + 1, j] in the high 16 (b̃ = b − zero
        point, per column) for k // 2 in [first, last), and 0 past the end of b. Block by block, so that the writes
        run along memory and the 16 columns of a step are stored as one vector (pair by pair across the blocks, and
        as 16-bit halves, it took 2.8 times as long)."""
        length, columns = b.shape
        for block in range(pairs.shape[0]):
            start = block * COLUMNS
            width = min(COLUMNS, columns - start)
            for pair in range(first, last):
                k = 2 * pair
                second = k + 1 < length
                row, next_row = b[k], b[k + 1 if second else k]
                target = pairs[block, pair]
                for j in range(width):
                    shift = np.int32(zero_point[start + j])
                    low = (np.int32(row[start + j]) - shift) & 0xFFFF
                    target[j] = low | ((np.int32(next_row[start + j]) - shift) << 16 if second else 0)
                for j in range(width, COLUMNS):
                    target[j] = 0
