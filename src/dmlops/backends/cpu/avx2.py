"""The vector kernels of 16-bit products (`vpmaddwd`: AVX2 on 256-bit vectors, AVX-512BW on 512-bit ones), and the
register-blocked loop that the byte kernels (``vnni``) share (compiled code only, numba).

The operands are shifted by their zero points into int16, ã = a − za and b̃ = b − zb (|ã|, |b̃| ≤ 255); `vpmaddwd`
multiplies pairs of int16 and adds neighbouring products into int32 lanes, 16 multiply-adds an instruction on 256
bits.

Layout, as in BLAS kernels: A (ã, or A' of the byte kernels) stays in rows {M, K}; B (b̃ or B') is packed in blocks of
``columns``, each block K / group steps of ``columns`` × ``group`` consecutive k ({N / columns, K / group, columns,
group}; a group is the 32 bits of one lane: 2 int16 or 4 bytes). A step of the kernel broadcasts one group of each of
``rows`` rows of A and multiplies it with the block's groups: lane j gains Σ over the group of A[i, k]·B[k, j], so
the sums build up with columns along the lanes, need no horizontal reduction, and are stored as vectors. 6 rows ×
2 vectors of 256 bits fill the 16 vector registers of AVX2 (12 sums, 2 columns, a broadcast, a product); 6 rows ×
4 vectors of 512 bits take 30 of AVX-512's 32.

LLVM does not reach `vpmaddwd` or `vpdpbusd` from such a loop written in plain code (it matches only dot products
whose loaded values each feed one product, and compiles a register-blocked kernel to `vpmulld`, 8 multiplies an
instruction), so the kernel's loop is written as LLVM IR (``block_products``), calling the instruction's intrinsic.

Cache blocking: ``rows`` rows × ``k_block`` of A stay in L1 while the kernel walks a panel of column blocks of B
(PANEL_BYTES), which stays in L2 while the kernel walks the rows; a block of B is k_block × its columns
(BLOCK_BYTES: on Zen 5 the 512-bit kernel ran at 1049 GOPS a core on 32 KiB blocks, 0.96 of the 1089 that one core
issuing nothing but `vpdpbusd` reaches; on Zen 4, 0.89–0.98 of its peak, and 64 KiB blocks, at half speed with an
earlier loop, 3–8 % faster alone and level in whole products but for 2048³: benchmarks/RESULTS.md).
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba.core import types
from numba.extending import intrinsic

from .byte_moves import ByteMoves, prefetch
from .jit import callee
from .kernels import KERNELS_BY_NAME

TILE_ROWS = 32  # rows of B packed across its column blocks at a time (a multiple of 4)
# How far ahead B's rows are prefetched while B is packed: rows of a wide B lie a page or more apart, and a thread
# packing 128 or 256 columns of a 4096 × 4096 B from memory read 4.6-5.5 bytes a ns without, 7.2-9.0 with 16 rows
# (one Zen 4 core, the byte kernels' packing; 32 and 64 rows gained less)
PACK_AHEAD = 16
# The sums of a band of rows (all of its columns) that the register-blocked loop makes over all of K before the next
# band: they stay in L2 between runs of K. Taken whole, a 2048³ product's runs of K found a piece's 16 MiB of sums in
# L3 each time (one Zen 4 core: 372 GOPS so, 0.80 of its peak; 410-415 in bands).
SUMS_BAND_BYTES = 384 << 10
# The rows past the last whole kernel's (all of A's rows, where it has so few), if at most this many, are multiplied
# by a kernel of that many rows (one row, or FEW_ROWS) rather than with the padding to the kernel's rows: such a step
# loads as many vectors as it multiplies or more, which the padded rows' compute outweighs (B prepared, 4096 × 4096,
# on 2 Zen 4 cores, µs: 1 row 291-347 so, 146-153; 2 rows 252-264, 171-181; 3 rows 338-363, 179-183; ONNX Runtime
# 139-189; 8 rows, 6 + 2, 667 → 454). 4 and 5 rows were slower a row at a time than padded (430-652 µs against
# 327-434). Each kernel of fewer rows compiled is a first product's compile time more.
FEW_ROWS = 3
# A of at most this many kernels' rows takes each block of B over all of K in one run, the kernels' rows one after
# another: a stream of B that the prefetchers follow, which stays in L2 for the next kernel's rows (B prepared, 4096 ×
# 4096, 2 Zen 4 cores, µs, against runs of K in bands: 6 rows 318-345 → 294-303, 16 rows 814-854 → 754-784, 24 rows
# 1145-1215 → 1033-1078).
STREAM_KERNELS = 4
PAIR_COLUMNS = 16  # columns of B that ``pack_two_rows`` and ``pack_column_pairs`` pack at a time


@intrinsic
def block_products(typing_context, kernel, count, a, b, sums, row, block, start, steps, accumulate):
    """sums[row:row + count, block's columns] = (sums there, if accumulate, +) A[row:row + count, start:start +
    group·steps] @ B[start:start + group·steps, block's columns], A and B packed (C-contiguous), for the kernel
    named by the literal ``kernel``; ``count`` a literal, the kernel's rows or fewer."""
    if not (isinstance(kernel, types.StringLiteral) and isinstance(count, types.IntegerLiteral)):
        return None
    spec = KERNELS_BY_NAME[kernel.literal_value]
    rows = count.literal_value
    signature = types.none(kernel, count, a, b, sums, row, block, start, steps, accumulate)

    def codegen(context, builder, signature, arguments):
        int64, int32 = ir.IntType(64), ir.IntType(32)
        lanes = ir.VectorType(int32, spec.vector_bits // 32)
        vector_bytes = spec.vector_bits // 8
        a_size, b_size = (np.dtype(t).itemsize for t in spec.element)
        operand = ir.VectorType(ir.IntType(8 * b_size), vector_bytes // b_size)
        row, block, start, steps, accumulate = arguments[5:]
        a_array, b_array, sums_array = (context.make_array(kind)(context, builder, value)
                                        for kind, value in zip(signature.args[2:5], arguments[2:5]))

        moves = ByteMoves(builder, vector_bytes)
        constant = moves.constant

        def address(array, first, index, offset):
            """Byte address of array[first + index] plus offset bytes."""
            at = builder.mul(builder.add(first, constant(index)), moves.stride(array, 0))
            return moves.address(array, builder.add(at, offset))

        def load(at, kind):
            return builder.load(moves.pointer(at, kind), align=1)

        def splat(group):
            """The 32 bits of a group in each lane."""
            return moves.splat(group, lanes)

        a_rows = [address(a_array, row, r, builder.mul(start, constant(a_size))) for r in range(rows)]
        b_steps = address(b_array, block, 0, builder.mul(start, constant(b_size * spec.columns)))
        sums_at = [[address(sums_array, row, r, builder.add(builder.mul(block, constant(4 * spec.columns)),
                                                            constant(vector_bytes * v)))
                    for v in range(spec.vectors)] for r in range(rows)]
        if spec.bytes:  # vpdpbusd(sums, unsigned bytes, signed bytes)
            dot = builder.module.declare_intrinsic(spec.instruction,
                                                   fnty=ir.FunctionType(lanes, [lanes, lanes, lanes]))

            def multiply_add(total, group, column):
                return builder.call(dot, [total, group, builder.bitcast(column, lanes)])
        else:  # vpmaddwd(int16 pairs, int16 pairs), then an add
            madd = builder.module.declare_intrinsic(spec.instruction,
                                                    fnty=ir.FunctionType(lanes, [operand, operand]))

            def multiply_add(total, group, column):
                return builder.add(total, builder.call(madd, [builder.bitcast(group, operand), column]))

        entry, loop = builder.block, builder.append_basic_block("products")
        done = builder.append_basic_block("products_done")
        initial = [[builder.select(accumulate, load(at, lanes), ir.Constant(lanes, None)) for at in row_sums]
                   for row_sums in sums_at]
        builder.branch(loop)

        builder.position_at_end(loop)
        step = builder.phi(int64)
        totals = [[builder.phi(lanes) for _ in range(spec.vectors)] for _ in range(rows)]
        b_at = builder.add(b_steps, builder.mul(step, constant(4 * spec.columns)))
        columns = [load(builder.add(b_at, constant(vector_bytes * v)), operand) for v in range(spec.vectors)]
        new_totals = []
        for r in range(rows):
            group = splat(load(builder.add(a_rows[r], builder.mul(step, constant(4))), int32))
            new_totals.append([multiply_add(totals[r][v], group, columns[v]) for v in range(spec.vectors)])
        next_step = builder.add(step, constant(1))
        step.add_incoming(constant(0), entry)
        step.add_incoming(next_step, loop)
        for r in range(rows):
            for v in range(spec.vectors):
                totals[r][v].add_incoming(initial[r][v], entry)
                totals[r][v].add_incoming(new_totals[r][v], loop)
        builder.cbranch(builder.icmp_signed("<", next_step, steps), loop, done)

        builder.position_at_end(done)
        for r in range(rows):
            for v in range(spec.vectors):
                builder.store(new_totals[r][v], builder.inttoptr(sums_at[r][v], lanes.as_pointer()), align=4)
        return context.get_dummy_value()

    return signature, codegen


@callee
def multiply_rows(kernel, a, b, sums, first_row, end_row, first_block, end_block, end, accumulate, rows, columns,
                  k_block, group, panel_blocks):
    """sums[first_row:end_row, the column blocks [first_block, end_block)] = (those sums, if accumulate, +)
    A[first_row:end_row, :end] @ those blocks of B[:end] (int32), by runs of k_block and panels of panel_blocks
    column blocks; end a multiple of the group. The rows are taken a band at a time, all of K for each band,
    so that the band's sums stay in L2 between runs of K (SUMS_BAND_BYTES); A's rows padded to the kernel's, but
    for the FEW_ROWS rows or fewer past the last whole kernel's rows (all the rows, where A has so few); A of at most
    STREAM_KERNELS kernels' rows in one band, each block of B over all of K."""
    few = (end_row - first_row) % rows
    if few > FEW_ROWS:
        few = 0
    whole = end_row - few  # (the end of the whole kernels' rows)
    if few:  # (each block's K in one run, as below)
        for block in range(first_block, end_block):
            if few == 1:
                block_products(kernel, 1, a, b, sums, whole, block, 0, end // group, accumulate)
            else:
                block_products(kernel, FEW_ROWS, a, b, sums, whole, block, 0, end // group, accumulate)
    if whole - first_row <= STREAM_KERNELS * rows:  # a band of all the rows, a block of B at a time over all of K
        band, run, panel_blocks = max(rows, whole - first_row), end, 1
    else:
        band, run = max(rows, SUMS_BAND_BYTES // (4 * columns * (end_block - first_block)) // rows * rows), k_block
    for first in range(first_row, whole, band):
        for k in range(0, end, run):
            steps = min(run, end - k) // group
            for panel in range(first_block, end_block, panel_blocks):
                for i in range(first, min(first + band, whole), rows):
                    for block in range(panel, min(panel + panel_blocks, end_block)):
                        block_products(kernel, rows, a, b, sums, i, block, k, steps, accumulate or k != 0)


@callee
def pack_rows(a, sign, zero_point, packed, first, last):
    """packed[first:last] = a[first:last] − zero point (per row), int16, and 0 past the end of a: the padding
    adds nothing to the sums. a as its bits (uint8), ``sign`` 128 where its type is INT8, else 0: a's value is
    (its bits xor sign) − sign."""
    rows, length = a.shape
    for i in range(first, last):
        target = packed[i]
        if i < rows:
            shift = np.int16(zero_point[i] + np.int32(sign))
            for k in range(length):
                target[k] = np.int16(a[i, k] ^ sign) - shift
        target[length if i < rows else 0:] = 0


@intrinsic
def pack_two_rows(typing_context, b, sign, zero_point, pairs, pair, block, start, j):
    """pairs[block, pair, j:j + PAIR_COLUMNS] = b̃ of b's rows 2·pair and 2·pair + 1 (the low and high 16 bits, as
    pack_columns packs them) in the columns from start + j on, the block's first column ``start``, in vectors. b's
    rows contiguous, both rows within b, the columns within b and within the block; zero_point contiguous."""
    signature = types.none(b, sign, zero_point, pairs, pair, block, start, j)

    def codegen(context, builder, signature, arguments):
        int32 = ir.IntType(32)
        moves = ByteMoves(builder, PAIR_COLUMNS)
        wide = ir.VectorType(int32, PAIR_COLUMNS)
        b_array, zero_array, pairs_array = (context.make_array(signature.args[i])(context, builder, arguments[i])
                                            for i in (0, 2, 3))
        sign, pair, block, j = arguments[1], arguments[4], arguments[5], arguments[7]
        column = builder.add(arguments[6], j)
        constant, address, stride, pointer = moves.constant, moves.address, moves.stride, moves.pointer
        first_row = builder.mul(pair, constant(2))
        row_at = [address(b_array, builder.add(builder.mul(builder.add(first_row, constant(t)), stride(b_array, 0)),
                                               column)) for t in range(2)]
        for t in range(2):
            prefetch(builder, builder.add(row_at[t], builder.mul(constant(PACK_AHEAD), stride(b_array, 0))))
        shift = builder.add(builder.load(pointer(address(zero_array, builder.mul(column, constant(4))), wide),
                                         align=4), moves.splat(builder.zext(sign, int32), wide))
        values = [builder.sub(builder.zext(builder.xor(builder.load(pointer(at, moves.bytes), align=1),
                                                       moves.splat(sign, moves.bytes)), wide), shift)
                  for at in row_at]
        packed = packed_pair(builder, moves, *values)
        target = address(pairs_array, builder.add(builder.add(builder.mul(block, stride(pairs_array, 0)),
                                                              builder.mul(pair, stride(pairs_array, 1))),
                                                  builder.mul(j, constant(4))))
        builder.store(packed, pointer(target, wide), align=4)
        return context.get_dummy_value()

    return signature, codegen


@intrinsic
def pack_column_pairs(typing_context, b, sign, zero_point, pairs, block, start, j):
    """pairs[block, :2·(K // 4), j:j + PAIR_COLUMNS] = the pairs of b's rows [0, 4·(K // 4)) (as pack_columns packs
    them) in the columns from start + j on, the block's first column ``start``, where b's columns are contiguous (b
    a transposed view, as a layer's weights {N, K} are passed): rows 4·w to 4·w + 3 of a column are one word of
    memory, and a loop down the columns loads a word of each into a vector, which makes two pairs of them. Lanes
    past b's columns are 0 (their words loaded from its last column)."""
    signature = types.none(b, sign, zero_point, pairs, block, start, j)

    def codegen(context, builder, signature, arguments):
        int64, int32 = ir.IntType(64), ir.IntType(32)
        moves = ByteMoves(builder, 4 * PAIR_COLUMNS)
        constant, address, stride, pointer, splat = (moves.constant, moves.address, moves.stride, moves.pointer,
                                                     moves.splat)
        wide = moves.lanes
        b_array, zero_array, pairs_array = (context.make_array(signature.args[i])(context, builder, arguments[i])
                                            for i in (0, 2, 3))
        sign, block, j = arguments[1], arguments[4], arguments[6]
        first_column = builder.add(arguments[5], j)
        length, columns = (builder.extract_value(b_array.shape, d) for d in range(2))
        words = builder.sdiv(length, constant(4))
        in_b, zero = ir.Constant(ir.VectorType(ir.IntType(1), PAIR_COLUMNS), None), ir.Constant(wide, None)
        column_at = []
        for t in range(PAIR_COLUMNS):
            column = builder.add(first_column, constant(t))
            inside = builder.icmp_signed("<", column, columns)
            column = builder.select(inside, column, builder.sub(columns, constant(1)))
            in_b = builder.insert_element(in_b, inside, constant(t, int32))
            column_at.append(address(b_array, builder.mul(column, stride(b_array, 1))))
            zero = builder.insert_element(zero, builder.load(pointer(address(
                zero_array, builder.mul(column, stride(zero_array, 0))), int32)), constant(t, int32))
        shift = builder.add(zero, splat(builder.zext(sign, int32), wide))
        signs = splat(builder.mul(builder.zext(sign, int32), constant(0x01010101, int32)), wide)
        next_columns = builder.add(column_at[0], builder.mul(constant(PAIR_COLUMNS), stride(b_array, 1)))
        target_at = address(pairs_array, builder.add(builder.mul(block, stride(pairs_array, 0)),
                                                     builder.mul(j, constant(4))))

        entry, loop = builder.block, builder.append_basic_block("column_pairs")
        done = builder.append_basic_block("column_pairs_done")
        builder.cbranch(builder.icmp_signed(">", words, constant(0)), loop, done)
        builder.position_at_end(loop)
        word = builder.phi(int64)
        # word w prefetches line w // 16 of the next columns' column w % 16 (16 words a line): all of their lines
        # while these are read, each column's part a few lines on a page of its own
        line = builder.mul(builder.udiv(word, constant(16)), builder.mul(constant(64), stride(b_array, 0)))
        ahead = builder.add(builder.mul(builder.urem(word, constant(PAIR_COLUMNS)), stride(b_array, 1)), line)
        prefetch(builder, builder.add(next_columns, ahead))
        bits = ir.Constant(wide, None)
        row = builder.mul(builder.mul(word, constant(4)), stride(b_array, 0))
        for t, at in enumerate(column_at):
            bits = builder.insert_element(bits, builder.load(pointer(builder.add(at, row), int32), align=1),
                                          constant(t, int32))
        bits = builder.xor(bits, signs)
        for half in range(2):  # rows 4·w + 2·half and the one after, in the low and high 16 bits
            low, high = (builder.sub(builder.and_(builder.lshr(bits, splat(constant(16 * half + 8 * t, int32), wide)),
                                                  splat(constant(0xFF, int32), wide)), shift) for t in range(2))
            pair = builder.add(builder.mul(word, constant(2)), constant(half))
            builder.store(builder.select(in_b, packed_pair(builder, moves, low, high), ir.Constant(wide, 0)),
                          pointer(builder.add(target_at, builder.mul(pair, stride(pairs_array, 1))), wide), align=4)
        next_word = builder.add(word, constant(1))
        word.add_incoming(constant(0), entry)
        word.add_incoming(next_word, loop)
        builder.cbranch(builder.icmp_signed("<", next_word, words), loop, done)
        builder.position_at_end(done)
        return context.get_dummy_value()

    return signature, codegen


def packed_pair(builder, moves, low, high):
    """Vectors of int32 lanes as pairs: the low 16 bits of each of ``low``'s lanes, then of ``high``'s."""
    int32 = ir.IntType(32)
    return builder.or_(builder.and_(low, moves.splat(ir.Constant(int32, 0xFFFF), low.type)),
                       builder.shl(high, moves.splat(ir.Constant(int32, 16), high.type)))


@callee
def pack_columns(b, sign, zero_point, pairs, first, last, down_columns):
    """pairs[block, k // 2, j] = b̃[k, j] in the low 16 bits and b̃[k + 1, j] in the high 16 (b̃ = b − zero point,
    per column; j within the block; b as its bits and its sign as pack_rows takes them) for the column blocks
    [first, last), and 0 past the end of b. By tiles of TILE_ROWS rows of b, each walked block by block: the reads
    run along the tile's rows, which stay in cache, and the writes along each block (block by block over the whole
    of K, B was read at 8 GB/s; a tile's pairs across the blocks, at 2). Where b's rows are contiguous,
    PAIR_COLUMNS columns of two rows at a time (``pack_two_rows``); where its columns are (``down_columns`` True,
    not None: compiled only then), PAIR_COLUMNS columns of two pairs at a time down the columns
    (``pack_column_pairs``); the columns and rows left element by element."""
    length, columns = b.shape
    width_of_block = pairs.shape[2]
    vectors = b.strides[1] == 1 and zero_point.strides[0] == 4
    packed_pairs = 0
    if down_columns is not None:
        for block in range(first, last):
            for j in range(0, width_of_block, PAIR_COLUMNS):
                pack_column_pairs(b, sign, zero_point, pairs, block, block * width_of_block, j)
        packed_pairs = 2 * (length // 4)
    for first_pair in range(packed_pairs, (length + 1) // 2, TILE_ROWS // 2):
        for block in range(first, last):
            start = block * width_of_block
            width = min(width_of_block, columns - start)
            vector_width = width // PAIR_COLUMNS * PAIR_COLUMNS if vectors else 0
            for pair in range(first_pair, min(first_pair + TILE_ROWS // 2, (length + 1) // 2)):
                k = 2 * pair
                second = k + 1 < length
                done = vector_width if second else 0
                for j in range(0, done, PAIR_COLUMNS):
                    pack_two_rows(b, sign, zero_point, pairs, pair, block, start, j)
                if done == width_of_block:
                    continue
                row, next_row = b[k, start:], b[k + 1 if second else k, start:]
                target = pairs[block, pair]
                for j in range(done, width):
                    shift = np.int32(zero_point[start + j]) + np.int32(sign)
                    low = (np.int32(row[j] ^ sign) - shift) & 0xFFFF
                    target[j] = low | ((np.int32(next_row[j] ^ sign) - shift) << 16 if second else 0)
                target[width:] = 0
