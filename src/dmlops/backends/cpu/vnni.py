"""The vector kernels of byte products (`vpdpbusd`: AVX-512 VNNI on 512-bit vectors; AVX-VNNI, or AVX-512 VNNI with
VL, on 256-bit ones), compiled code only (numba). Their products run in ``avx2``'s register-blocked loop; here are
their packing (of B, the pieces: their loop over B, which AMX's tiles share, is ``byte_packing``'s) and the kernel
that reads B as it lies (``direct_products``).

`vpdpbusd` multiplies unsigned bytes by signed bytes and adds four neighbouring products into each int32 lane, 32
multiply-adds an instruction on 256 bits. The operands are moved into those ranges, A' = a + ca (ca = 128 for INT8,
else 0: the bits xor 0x80) and B' = b − cb (cb = 128 for UINT8), and the zero points into corrections:

    Σ_k (a − za)(b − zb) = Σ_k (A' − α)(B' + β),   α = ca + za (per row), β = cb − zb (per column)
                         = Σ_k A'·B' + β·Σ_k A' − α·(Σ_k B' + K·β)

with the row sums of A' made while packing A, the column sums of B' while packing B (the driver's ``correct_rows``
adds the terms, in int32 arithmetic, which wraps: the result is exact wherever the true sum fits in int32).
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba.core import types
from numba.extending import intrinsic

from .avx2 import PACK_AHEAD
from .byte_moves import ByteMoves, prefetch
from .jit import callee
from .kernels import KERNELS_BY_NAME

# How far ahead ``pack_column_words`` prefetches the columns of a B whose columns are contiguous: each column's part
# is a few lines on a page of its own (one Zen 4 core packing 1024-column strips of a transposed 4096 × 4096 B, runs of
# 512 rows: 1.9 bytes a ns without, 3.1 with 2 columns ahead; 4 and 8 no better)
COLUMNS_AHEAD = 2
# A direct run reads a band of B's rows across a piece's column blocks, and each of its kernel calls loads and stores
# its sums (4 vectors a row of A). A piece of WIDE_PIECE_BLOCKS blocks or more takes bands of ALONG_STEPS steps of 4
# rows of B for each row of A, and prefetches PREFETCH_BYTES further along the same rows: few of B's rows in flight,
# read along their length (2 Zen 4 cores, pieces of 8 blocks: 1 × 4096 × 4096 1051-1102 µs in bands of 64 steps,
# 585-800 of 2, 697-870 of 4; 4 rows 1016-1114, 675-758 of 32 steps, 715-834 of 16). A narrower piece takes bands of
# DIRECT_STEPS steps and prefetches PREFETCH_ROWS rows down (16 AMX cores, pieces of one block: 1 row 157-161 µs so,
# 196-251 in short bands; 8 rows 225-267, 288-307). Prefetches past the end are harmless.
WIDE_PIECE_BLOCKS = 8
ALONG_STEPS = 4
PREFETCH_BYTES = 256
DIRECT_STEPS = 64
PREFETCH_ROWS = 32


@intrinsic
def direct_products(typing_context, kernel, rows, a, b, flip, sums, column_sums, row, column, start, steps,
                    accumulate, last, ahead):
    """sums[row:row + rows, column:column + 64] = (those sums, if accumulate, +) A'[row:row + rows, k] @ B'[k,
    column:column + 64] and column_sums[column:column + 64] = (the same) Σ_k B' there, k in [4·start,
    4·(start + steps)), for the 512-bit byte kernel named by ``kernel``; rows a literal "1" to "4", "+" after it
    where the column sums are made too (4 rows: 16 sums, 4 column sums, 4 rows of B and 4 interleaved take 28
    of the 32 zmm). B' = the bits of b xor flip, read from b's rows as they lie: each step loads 4 rows of 64
    bytes and interleaves them (unpack bytes, then words, within 128-bit lanes) into 4 vectors whose lanes hold
    4 consecutive k of one column, column 16·L + 4·v + i in lane i of 128-bit lane L of vector v; the sums stay
    in that order from one run of K to the next, and are put in column order by the last run (``last``). Each
    step prefetches ``ahead`` bytes on from each of its rows' lines."""
    if not (isinstance(kernel, types.StringLiteral) and isinstance(rows, types.StringLiteral)):
        return None
    spec = KERNELS_BY_NAME[kernel.literal_value]
    count, with_column_sums = int(rows.literal_value[0]), rows.literal_value.endswith("+")
    signature = types.none(kernel, rows, a, b, flip, sums, column_sums, row, column, start, steps, accumulate, last,
                           ahead)

    def codegen(context, builder, signature, arguments):
        int64, int32 = ir.IntType(64), ir.IntType(32)
        moves = ByteMoves(builder, spec.vector_bits // 8)
        size, lanes, byte_vector = moves.size, moves.lanes, moves.bytes
        a_array, b_array, sums_array, column_array = (
            context.make_array(kind)(context, builder, value)
            for kind, value in zip((signature.args[i] for i in (2, 3, 5, 6)), (arguments[i] for i in (2, 3, 5, 6))))
        flip, (row, column, start, steps, accumulate, last, ahead) = arguments[4], arguments[7:]
        constant, splat, in_column_order = moves.constant, moves.splat, moves.in_column_order
        address, pointer = moves.address, moves.pointer

        def stride(array):
            return moves.stride(array, 0)

        def load(at, kind):
            return builder.load(pointer(at, kind), align=1)

        dot = builder.module.declare_intrinsic(spec.instruction, fnty=ir.FunctionType(lanes, [lanes] * 3))
        flips = splat(flip, byte_vector)
        ones = splat(constant(0x01010101, int32), lanes)
        a_rows = [address(a_array, builder.mul(builder.add(row, constant(r)), stride(a_array))) for r in range(count)]
        b_at = address(b_array, column)
        b_stride = stride(b_array)
        targets = [address(sums_array, builder.add(builder.mul(builder.add(row, constant(r)), stride(sums_array)),
                                                   builder.mul(column, constant(4))))
                   for r in range(count)]
        if with_column_sums:
            targets.append(address(column_array, builder.mul(column, constant(4))))
        initial = [[builder.select(accumulate, load(builder.add(target, constant(size * v)), lanes),
                                   ir.Constant(lanes, None)) for v in range(4)] for target in targets]
        entry, loop = builder.block, builder.append_basic_block("direct")
        done = builder.append_basic_block("direct_done")
        builder.branch(loop)

        builder.position_at_end(loop)
        step = builder.phi(int64)
        totals = [[builder.phi(lanes) for _ in range(4)] for _ in targets]  # the last: column sums, if made
        k = builder.mul(step, constant(4))
        for t in range(4):  # ahead bytes on from each row's line
            prefetch(builder, builder.add(b_at, builder.add(builder.mul(builder.add(k, constant(t)), b_stride),
                                                            ahead)))
        groups = moves.interleaved([builder.xor(load(builder.add(b_at, builder.mul(builder.add(k, constant(t)),
                                                                                  b_stride)), byte_vector), flips)
                                    for t in range(4)])
        new_totals = []
        for r in range(count):
            group = splat(load(builder.add(a_rows[r], k), int32), lanes)
            new_totals.append([builder.call(dot, [totals[r][v], group, groups[v]]) for v in range(4)])
        if with_column_sums:
            new_totals.append([builder.call(dot, [totals[count][v], ones, groups[v]]) for v in range(4)])
        next_step = builder.add(step, constant(1))
        step.add_incoming(start, entry)
        step.add_incoming(next_step, loop)
        for r in range(len(targets)):
            for v in range(4):
                totals[r][v].add_incoming(initial[r][v], entry)
                totals[r][v].add_incoming(new_totals[r][v], loop)
        builder.cbranch(builder.icmp_signed("<", next_step, builder.add(start, steps)), loop, done)

        builder.position_at_end(done)

        def store(order):
            for r in range(len(targets)):
                for v, vector in enumerate(order(new_totals[r])):
                    at = builder.add(targets[r], constant(size * v))
                    builder.store(vector, pointer(at, lanes), align=4)
        with builder.if_else(last) as (in_columns, as_interleaved):
            with in_columns:
                store(in_column_order)
            with as_interleaved:
                store(lambda vectors: vectors)
        return context.get_dummy_value()

    return signature, codegen


@callee
def multiply_direct(kernel, a, b, flip, sums, column_sums, rows, first_block, last_block, steps):
    """direct_products for every row of A and the column blocks of 64 [first_block, last_block), by runs of
    steps across the blocks, each a band of B's rows (WIDE_PIECE_BLOCKS; later: every run after the first; last:
    the last)."""
    wide = last_block - first_block >= WIDE_PIECE_BLOCKS
    band = ALONG_STEPS * rows if wide else DIRECT_STEPS
    ahead = PREFETCH_BYTES if wide else PREFETCH_ROWS * b.strides[0]
    for start in range(0, steps, band):
        run = min(band, steps - start)
        later, last = start > 0, start + run == steps
        for block in range(first_block, last_block):
            column = 64 * block
            if rows >= 4:  # the first strip makes B's column sums too
                direct_products(kernel, "4+", a, b, flip, sums, column_sums, 0, column, start, run, later, last,
                                    ahead)
            for row in range(4, rows - rows % 4, 4):
                direct_products(kernel, "4", a, b, flip, sums, column_sums, row, column, start, run, later, last,
                                    ahead)
            row = rows - rows % 4
            if rows % 4 == 1:
                if rows < 4:
                    direct_products(kernel, "1+", a, b, flip, sums, column_sums, row, column, start, run, later, last,
                                    ahead)
                else:
                    direct_products(kernel, "1", a, b, flip, sums, column_sums, row, column, start, run, later, last,
                                    ahead)
            elif rows % 4 == 2:
                if rows < 4:
                    direct_products(kernel, "2+", a, b, flip, sums, column_sums, row, column, start, run, later, last,
                                    ahead)
                else:
                    direct_products(kernel, "2", a, b, flip, sums, column_sums, row, column, start, run, later, last,
                                    ahead)
            elif rows % 4 == 3:
                if rows < 4:
                    direct_products(kernel, "3+", a, b, flip, sums, column_sums, row, column, start, run, later, last,
                                    ahead)
                else:
                    direct_products(kernel, "3", a, b, flip, sums, column_sums, row, column, start, run, later, last,
                                    ahead)


@callee
def pack_rows_bytes(a, flip, packed, row_sums, first, last):
    """packed[first:last] = A' = the bits of a[first:last] xor flip, and 0 past the end of a; row_sums = Σ_k A'."""
    rows, length = a.shape
    for i in range(first, last):
        target = packed[i]
        total = 0
        if i < rows:
            for k in range(length):
                value = a[i, k] ^ flip
                target[k] = value
                total += value
        target[length if i < rows else 0:] = 0
        row_sums[i] = total


@intrinsic
def pack_four_rows(typing_context, kernel, b, flip, groups, column_terms, group, column):
    """groups[column's block, group, its columns] = B' of b's rows 4·group to 4·group + 3 (B' = the bits of b xor
    flip, read as int8: byte t of a group holds row 4·group + t; b as its bits, flip 128 where its type is UINT8)
    for the columns [column, column + C), C the vector bytes of the byte kernel named by ``kernel`` (a literal);
    column_terms there += Σ of those rows of b (Σ B' + 4·flip).
    b's rows contiguous, C columns of them from column on; column a multiple of the kernel's lanes. Rows loaded
    whole and interleaved in registers (``ByteMoves``), the sums by the kernel's instruction against ones."""
    if not isinstance(kernel, types.StringLiteral):
        return None
    spec = KERNELS_BY_NAME[kernel.literal_value]
    signature = types.none(kernel, b, flip, groups, column_terms, group, column)

    def codegen(context, builder, signature, arguments):
        int32 = ir.IntType(32)
        moves = ByteMoves(builder, spec.vector_bits // 8)
        lanes, count = moves.lanes, moves.lanes.count
        b_array, groups_array, terms_array = (context.make_array(signature.args[i])(context, builder, arguments[i])
                                              for i in (1, 3, 4))
        flip, group, column = arguments[2], arguments[5], arguments[6]
        constant = moves.constant

        address, stride, pointer = moves.address, moves.stride, moves.pointer

        flips = moves.splat(flip, moves.bytes)
        first_row = builder.mul(group, constant(4))
        rows = [builder.xor(builder.load(pointer(address(b_array, builder.add(
            builder.mul(builder.add(first_row, constant(t)), stride(b_array, 0)), column)), moves.bytes), align=1),
            flips) for t in range(4)]
        for t in range(4):
            prefetch(builder, address(b_array, builder.add(builder.mul(builder.add(first_row, constant(PACK_AHEAD + t)),
                                                                       stride(b_array, 0)), column)))
        dot = builder.module.declare_intrinsic(spec.instruction, fnty=ir.FunctionType(lanes, [lanes] * 3))
        ones = moves.splat(constant(0x01010101, int32), lanes)
        centres = moves.splat(builder.mul(builder.zext(flip, int32), constant(4, int32)), lanes)
        for u, vector in enumerate(moves.in_column_order(moves.interleaved(rows))):
            at = builder.add(column, constant(u * count))
            block = builder.udiv(at, constant(spec.columns))
            within = builder.urem(at, constant(spec.columns))
            target = address(groups_array, builder.add(builder.add(builder.mul(block, stride(groups_array, 0)),
                                                                   builder.mul(group, stride(groups_array, 1))),
                                                       builder.mul(within, constant(4))))
            builder.store(vector, pointer(target, lanes), align=4)
            terms = pointer(address(terms_array, builder.mul(at, constant(4))), lanes)
            total = builder.add(builder.call(dot, [builder.load(terms, align=4), ones, vector]), centres)
            builder.store(total, terms, align=4)
        return context.get_dummy_value()

    return signature, codegen


@callee
def pack_group(b, flip, groups, column_terms, group, block, start, width):
    """pack_four_rows for the columns [start, start + width) of a block, element by element (b's rows of any
    stride, or fewer than 4 rows left: bytes past b are 0), and 0 for the block's columns past b's. (b's value
    is int8(bits xor flip) + flip.)"""
    first = 4 * group
    rows = min(4, b.shape[0] - first)
    # (views from the group's first element: indices from 0 up, which need no wraparound, so that LLVM vectorises
    # the loop along the columns)
    columns, target, terms = b[first:, start:], groups[block, group], column_terms[start:]
    centre = np.int32(flip)
    for j in range(width):
        word, total = np.uint32(0), rows * centre
        for t in range(4):
            # (one loop for whole and partial groups: a row past b reads b's last row again, and is left out)
            value = np.uint32(columns[min(t, rows - 1), j] ^ flip)
            if t < rows:
                word |= value << (8 * t)
                total += np.int32(np.int8(value))
        terms[j] += total
        target[j] = word
    target[width:] = 0


def element_address(context, builder, signature, arguments, count):
    """The address (int64) of x[i0, ..., i(count - 1)], for an intrinsic whose first arguments are x and those
    indices (an array of more dimensions: the first element of the rest)."""
    moves = ByteMoves(builder, 4)
    array = context.make_array(signature.args[0])(context, builder, arguments[0])
    offset = moves.constant(0)
    for dimension in range(count):
        offset = builder.add(offset, builder.mul(arguments[1 + dimension], moves.stride(array, dimension)))
    return moves.address(array, offset)


@intrinsic
def column_word(typing_context, b, k, j):
    """The bits of b[k:k + 4, j] as one uint32 (byte t from row k + t): one load, where b's columns are
    contiguous."""
    def codegen(context, builder, signature, arguments):
        at = element_address(context, builder, signature, arguments, 2)
        return builder.load(builder.inttoptr(at, ir.IntType(32).as_pointer()), align=1)

    return types.uint32(b, k, j), codegen


@intrinsic
def store_word(typing_context, groups, block, group, j, word):
    """groups[block, group, j] = word (uint32), or, where groups holds bytes {blocks, K / 4, columns, 4} (AMX's
    tiles), its 4 bytes groups[block, group, j, 0:4] (byte t: bits 8·t to 8·t + 7); the last dimension contiguous.
    word: an integer, its low 32 bits stored."""
    def codegen(context, builder, signature, arguments):
        at = element_address(context, builder, signature, arguments, 3)
        word = context.cast(builder, arguments[4], signature.args[4], types.uint32)  # (4 bytes whatever its type)
        builder.store(word, builder.inttoptr(at, ir.IntType(32).as_pointer()), align=1)
        return context.get_dummy_value()

    return types.none(groups, block, group, j, word), codegen


@intrinsic
def fetch_element(typing_context, b, k, j):
    """Prefetches the cache line of b[k, j] (a hint: anywhere)."""
    def codegen(context, builder, signature, arguments):
        prefetch(builder, element_address(context, builder, signature, arguments, 2))
        return context.get_dummy_value()

    return types.none(b, k, j), codegen


@callee
def pack_column_words(b, flip, stored_flip, groups, column_terms, first, last):
    """The groups of 4 whole rows of b for every column of the blocks [first, last), each the bits of its 4 rows
    (byte t: row 4·group + t) xor stored_flip in each byte, and column_terms there += Σ int8(bits xor flip) + flip
    over those rows, where b's columns are contiguous (b a transposed view, as a layer's weights {N, K} are
    passed): each group of a column is one word of memory, read down the column; and 0 for the blocks' columns past
    b's. groups as ``store_word`` takes them: the byte kernels' words (pack_group's, stored_flip = flip) or AMX's
    tiles of bytes (its pack_group's, stored_flip = 0)."""
    length, columns = b.shape
    width_of_block = groups.shape[2]
    # a byte's int8(bits xor flip) + 128 is its bits xor flip xor 128, as an unsigned byte
    biases, stored = (np.uint32(flip ^ 128) * np.uint32(0x01010101), np.uint32(stored_flip) * np.uint32(0x01010101))
    whole = length // 4
    for block in range(first, last):
        start = block * width_of_block
        width = min(width_of_block, columns - start)
        target = groups[block]
        for j in range(width):
            for k in range(0, length, 64):
                fetch_element(b, k, start + j + COLUMNS_AHEAD)
            total = 0
            for group in range(whole):
                bits = column_word(b, 4 * group, start + j)
                store_word(groups, block, group, j, bits ^ stored)
                biased = bits ^ biases
                halves = (biased & 0x00FF00FF) + (biased >> 8 & 0x00FF00FF)  # the 4 bytes' sum, in two halves
                total += (halves & 0xFFFF) + (halves >> 16)
            column_terms[start + j] += np.int32(total - whole * (512 - 4 * np.int32(flip)))
        for group in range(whole):
            target[group, width:] = 0
