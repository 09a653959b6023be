"""The integer GEMM's kernels on AMX's tiles (Intel Sapphire Rapids and later; compiled code only, numba).

A tile register holds 16 rows of 64 bytes. `tdpb[su][su]d` multiplies a tile of A (16 rows × 64 consecutive k, as
bytes) by a tile of B (16 groups of 4 consecutive k × 16 columns: each 32-bit element holds B[k..k + 3, j]) and adds
the products into a tile of 16 × 16 int32 sums: 16 384 multiply-adds an instruction. Each of the four instructions
reads A and B as signed or unsigned bytes, so every pair of operand types runs as it is, with no move into range:
the sums are Σ_k a·b, and the zero points enter through A's row sums and B's column terms (the driver's
``correct_rows``):

    Σ_k (a − za)(b − zb) = Σ_k a·b − zb·Σ_k a − za·Σ_k (b − zb)

A UINT8 A whose zero point is 128 in every row (ONNX's usual activations) is the one moved: packed as a − 128 (its
bits xor 128) and read as INT8, its za is 0 and its last term is not made (``driver.flip_of_a``).

A block of 32 × 32 sums is kept in four tiles while K is walked, its A in two tiles, its B in two
(``tile_block``); the eight tile registers hold no more. A (packed rows of K padded to 64 bytes, each with a vector
more, as the vector kernels' A) is read straight into tiles; B is packed into tiles' layout: {N / 16, K / 4, 16, 4}
(``byte_packing``'s loop, with the pieces here), rows of b four at a time interleaved in vector registers
(``byte_moves``).

Blocking: a run of K_RUN bytes of K at a time, the 32 rows × K_RUN of A that a block reads kept in L1 and L2 while the
kernel walks a panel of PANEL_BLOCKS column blocks of B, which stays in L2 while the kernel walks the rows. A block's
sums are loaded and stored once a run: a tile load costs about as much as a product here (four loads and four products
a step), so runs of 2048 bytes (as MLAS's) made products of K = 4096 15–40 % faster than runs of 512, on a 16-core
Sapphire Rapids (benchmarks/RESULTS.md).

Each thread configures its tiles (``start_tiles``: palette 1, 8 tiles of 16 rows × 64 bytes) at the start of its
call, and releases them at its end. Linux lets a process use the tiles once it asked for them
(``processor.amx_granted``): the driver runs these kernels only then.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba.core import types
from numba.extending import intrinsic

from .byte_moves import ByteMoves
from .jit import callee, compiled
from .kernels import KERNELS_BY_NAME
from .processor import amx_granted

amx_granted()  # (the tile state asked for before any of these kernels can run; once a process)

# The kernel's shape (``kernels``): rows of a block of sums (2 tiles), columns of a tile of B (a column block of
# packed B), bytes of K a tile of A holds (K is padded to it), bytes of K a block takes between loading and storing
# its sums
TILES = KERNELS_BY_NAME["amx"]
ROWS, COLUMNS, DEPTH, K_RUN = TILES.rows, TILES.columns, TILES.depth, TILES.k_block
PANEL_BLOCKS = 16  # column blocks of B walked by every row of a piece (K_RUN × 16 × 16: 512 KiB, in L2)
ROW_BLOCK = 256  # rows whose sums of a panel stay in L2 while K is walked (256 × 256 × 4 bytes: 256 KiB)
# the instruction of A's and B's signs ("s": INT8, "u": UINT8)
INSTRUCTIONS = {"ss": "llvm.x86.tdpbssd", "su": "llvm.x86.tdpbsud", "us": "llvm.x86.tdpbusd",
                "uu": "llvm.x86.tdpbuud"}

INT8, INT64 = ir.IntType(8), ir.IntType(64)
BYTES = ir.PointerType(INT8)


def tile_intrinsic(builder, name: str, arguments: list):
    """Call AMX's LLVM intrinsic ``llvm.x86.<name>``, whose tile numbers are immediates."""
    kinds = [argument.type for argument in arguments]
    function = builder.module.declare_intrinsic(f"llvm.x86.{name}", fnty=ir.FunctionType(ir.VoidType(), kinds))
    return builder.call(function, arguments)


def tile(number: int):
    return ir.Constant(INT8, number)


@intrinsic
def release_tiles(typing_context):
    """tilerelease: the tile state back to its initial state (the next context switch saves nothing of it)."""
    def codegen(context, builder, signature, arguments):
        tile_intrinsic(builder, "tilerelease", [])
        return context.get_dummy_value()
    return types.none(), codegen


# This thread's tile configuration: palette 1, tiles 0 to 7 of 16 rows × 64 bytes (the bytes a row as 16 bits from
# byte 16 on, little-endian; the rows as bytes from byte 48 on).
TILE_CONFIG = bytes([1] + [0] * 15 + [DEPTH, 0] * 8 + [0] * 16 + [16] * 8 + [0] * 8)


@intrinsic
def start_tiles(typing_context):
    """ldtilecfg of TILE_CONFIG, a constant of the compiled code (an intrinsic, not a compiled function of its own:
    each of those costs a first call a quarter of a second or more to compile)."""
    def codegen(context, builder, signature, arguments):
        kind = ir.ArrayType(INT8, len(TILE_CONFIG))
        config = builder.module.globals.get("dmlops_tile_config")
        if config is None:
            config = ir.GlobalVariable(builder.module, kind, "dmlops_tile_config")
            config.global_constant, config.linkage = True, "internal"
            config.initializer = ir.Constant(kind, bytearray(TILE_CONFIG))
            config.align = 64
        tile_intrinsic(builder, "ldtilecfg", [builder.bitcast(config, BYTES)])
        return context.get_dummy_value()
    return types.none(), codegen


@intrinsic
def tile_block(typing_context, a_sign, b_sign, blocks, a, b, sums, row, block, start, steps, accumulate):
    """sums[row:row + 32, 16·block:16·(block + blocks)] = (those sums, if accumulate, +) A[row:row + 32, start:start
    + 64·steps] @ B[the same k, those columns], by the instruction of the operands' signs (128 where the type is
    INT8, else 0; ``INSTRUCTIONS``): a loop of each instruction, the one of the signs taken at run time, so that one
    compiled product serves every pair of operand types. ``blocks`` a literal "1" or "2". a packed rows of bytes, b
    packed {N / 16, K / 4, 16, 4}, sums int32 rows: each of them with rows of any stride, b's last two dimensions
    contiguous. Tiles: sums 0 to 3 (2 × blocks), A 4 and 5, B 6 and 7; steps ≥ 1."""
    if not isinstance(blocks, types.StringLiteral):
        return None
    count = int(blocks.literal_value)
    signature = types.none(a_sign, b_sign, blocks, a, b, sums, row, block, start, steps, accumulate)

    def codegen(context, builder, signature, arguments):
        a_array, b_array, sums_array = (context.make_array(kind)(context, builder, value)
                                        for kind, value in zip(signature.args[3:6], arguments[3:6]))
        row, block, start, steps, accumulate = arguments[6:]

        def constant(value):
            return ir.Constant(INT64, value)

        def base(array):
            return builder.ptrtoint(array.data, INT64)

        def stride(array, dimension):
            return builder.extract_value(array.strides, dimension)

        def pointer(at):
            return builder.inttoptr(at, BYTES)

        a_stride, b_block_stride, b_group_stride, sums_stride = (stride(a_array, 0), stride(b_array, 0),
                                                                 stride(b_array, 1), stride(sums_array, 0))
        a_rows = [builder.add(base(a_array), builder.add(builder.mul(builder.add(row, constant(16 * r)), a_stride),
                                                         start)) for r in range(2)]
        b_blocks = [builder.add(base(b_array), builder.add(builder.mul(builder.add(block, constant(c)),
                                                                       b_block_stride),
                                                           builder.mul(builder.udiv(start, constant(4)),
                                                                       b_group_stride)))
                    for c in range(count)]
        sums_at = [[pointer(builder.add(base(sums_array), builder.add(
            builder.mul(builder.add(row, constant(16 * r)), sums_stride),
            builder.mul(builder.add(block, constant(c)), constant(4 * COLUMNS))))) for c in range(count)]
            for r in range(2)]

        def sums_tile(r, c):
            return tile(count * r + c)

        with builder.if_else(accumulate) as (then, otherwise):
            with then:
                for r in range(2):
                    for c in range(count):
                        tile_intrinsic(builder, "tileloadd64", [sums_tile(r, c), sums_at[r][c], sums_stride])
            with otherwise:
                for r in range(2):
                    for c in range(count):
                        tile_intrinsic(builder, "tilezero", [sums_tile(r, c)])

        def products(instruction):
            """The loop over K's steps, by ``instruction``."""
            entry, loop = builder.block, builder.append_basic_block("tiles")
            done = builder.append_basic_block("tiles_done")
            builder.branch(loop)
            builder.position_at_end(loop)
            step = builder.phi(INT64)
            a_offset = builder.mul(step, constant(DEPTH))
            b_offset = builder.mul(step, builder.mul(b_group_stride, constant(DEPTH // 4)))
            # each product as soon as its operands are loaded (the order of Intel's optimization manual): a tile is
            # loaded again only once the products before have read it. (No prefetch of the next call's B: its 32
            # prefetches a step made 2048³ products 12 % slower on a Xeon with AMX, operands aligned.)
            for r in range(2):
                tile_intrinsic(builder, "tileloadd64", [tile(4 + r), pointer(builder.add(a_rows[r], a_offset)),
                                                        a_stride])
                for c in range(count):
                    if r == 0:
                        tile_intrinsic(builder, "tileloadd64", [tile(6 + c), pointer(builder.add(b_blocks[c],
                                                                                                 b_offset)),
                                                                b_group_stride])
                    tile_intrinsic(builder, instruction, [sums_tile(r, c), tile(4 + r), tile(6 + c)])
            next_step = builder.add(step, constant(1))
            step.add_incoming(constant(0), entry)
            step.add_incoming(next_step, loop)
            builder.cbranch(builder.icmp_signed("<", next_step, steps), loop, done)
            builder.position_at_end(done)

        a_signed, b_signed = (builder.icmp_unsigned("!=", sign, ir.Constant(sign.type, 0)) for sign in arguments[:2])
        with builder.if_else(a_signed) as a_branches:
            for a_branch, a_letter in zip(a_branches, "su"):
                with a_branch:
                    with builder.if_else(b_signed) as b_branches:
                        for b_branch, b_letter in zip(b_branches, "su"):
                            with b_branch:
                                products(INSTRUCTIONS[a_letter + b_letter].split(".")[-1])
        for r in range(2):
            for c in range(count):
                tile_intrinsic(builder, "tilestored64", [sums_tile(r, c), sums_at[r][c], sums_stride])
        return context.get_dummy_value()

    return signature, codegen


@callee
def multiply(a, a_sign, b, b_sign, sums, first_row, last_row, first_block, last_block, length, accumulate):
    """sums[first_row:last_row, the column blocks [first_block, last_block)] = (those sums, if accumulate, +)
    A[those rows, :length] @ B[:length, those blocks], by runs of K_RUN and panels of PANEL_BLOCKS, by the
    instruction of the operands' signs (``tile_block``); rows a multiple of 32 apart, length of 64."""
    for panel in range(first_block, last_block, PANEL_BLOCKS):
        end = min(panel + PANEL_BLOCKS, last_block)
        for rows in range(first_row, last_row, ROW_BLOCK):
            for k in range(0, length, K_RUN):
                steps = min(K_RUN, length - k) // DEPTH
                again = accumulate or k > 0
                for i in range(rows, min(rows + ROW_BLOCK, last_row), ROWS):
                    j = panel
                    while j + 2 <= end:
                        tile_block(a_sign, b_sign, "2", a, b, sums, i, j, k, steps, again)
                        j += 2
                    if j < end:
                        tile_block(a_sign, b_sign, "1", a, b, sums, i, j, k, steps, again)


@callee
def pack_a(a, sign, flip, packed, row_sums, first, last):
    """packed[first:last] = the bits of a[first:last] xor ``flip`` (0, or 128: A read as a − 128, an INT8 for a
    UINT8 A, ``driver.flip_of_a``), and 0 past the end of a; row_sums = Σ_k of the values packed (their bits xor
    sign xor flip, less that; sign 128 where a's type is INT8). Where a's rows are contiguous, 64 bytes at a time
    (``copy_row``: 512 × 512 on one core of a Xeon with AMX in 7 µs so, 23 byte by byte), else byte by byte."""
    rows, length = a.shape
    packed_sign = np.uint8(sign ^ flip)
    centre, width = np.int32(packed_sign), packed.shape[1]
    for i in range(first, last):
        if a.strides[1] == 1 or i >= rows:  # (the bytes past a's, 0, add sign - sign: nothing)
            row_sums[i] = copy_row(a, packed_sign, flip, packed, i, length if i < rows else 0) - \
                centre * np.int32(width)
            continue
        total = np.int32(0)
        for k in range(length):
            bits = a[i, k] ^ flip
            packed[i, k] = bits
            total += np.int32(bits ^ packed_sign) - centre
        for k in range(length, width):
            packed[i, k] = 0
        row_sums[i] = total


@intrinsic
def copy_row(typing_context, a, sign, flip, packed, row, length):
    """packed's row ``row`` = a's xor ``flip``, its first ``length`` bytes (contiguous), and 0 after them; the sum
    of the packed row's bytes after an xor with ``sign``, as unsigned bytes (int32). 64 bytes at a time: each read
    with a mask of the lanes before ``length`` (none read past it), summed by `vpsadbw` against 0."""
    signature = types.int32(a, sign, flip, packed, row, length)

    def codegen(context, builder, signature, arguments):
        moves = ByteMoves(builder, 64)
        a_array, packed_array = (context.make_array(signature.args[i])(context, builder, arguments[i]) for i in (0, 3))
        sign, flip, row, length = arguments[1], arguments[2], arguments[4], arguments[5]
        sums, mask_type = ir.VectorType(INT64, 8), ir.VectorType(ir.IntType(1), 64)
        sad = builder.module.declare_intrinsic("llvm.x86.avx512.psad.bw.512",
                                               fnty=ir.FunctionType(sums, [moves.bytes, moves.bytes]))
        masked_load = builder.module.declare_intrinsic(
            "llvm.masked.load.v64i8.p0", fnty=ir.FunctionType(moves.bytes, [moves.bytes.as_pointer(),
                                                                            ir.IntType(32), mask_type, moves.bytes]))
        signs, flips, zeros = moves.splat(sign, moves.bytes), moves.splat(flip, moves.bytes), ir.Constant(moves.bytes,
                                                                                                            None)
        source = moves.address(a_array, builder.mul(row, moves.stride(a_array, 0)))
        target = moves.address(packed_array, builder.mul(row, moves.stride(packed_array, 0)))
        vectors = builder.udiv(builder.extract_value(packed_array.shape, 1), INT64(64))
        entry, loop, done = builder.block, builder.append_basic_block("copy"), builder.append_basic_block("copied")
        builder.cbranch(builder.icmp_signed(">", vectors, INT64(0)), loop, done)
        builder.position_at_end(loop)
        step, total = builder.phi(INT64), builder.phi(sums)
        offset = builder.mul(step, INT64(64))
        left = builder.sub(length, offset)  # (bytes of a's row from here: the mask's lanes, up to 64)
        left = builder.select(builder.icmp_signed("<", left, INT64(0)), INT64(0), left)
        bits = builder.select(builder.icmp_signed("<", left, INT64(64)),
                              builder.sub(builder.shl(INT64(1), left), INT64(1)), INT64(-1))
        lanes = builder.bitcast(bits, mask_type)
        bytes_ = builder.call(masked_load, [moves.pointer(builder.add(source, offset), moves.bytes),
                                            ir.Constant(ir.IntType(32), 1), lanes, zeros])
        bytes_ = builder.select(lanes, builder.xor(bytes_, flips), zeros)  # (the bytes past a's stay 0)
        builder.store(bytes_, moves.pointer(builder.add(target, offset), moves.bytes), align=1)
        added = builder.add(total, builder.call(sad, [builder.xor(bytes_, signs), zeros]))
        next_step = builder.add(step, INT64(1))
        step.add_incoming(INT64(0), entry)
        step.add_incoming(next_step, loop)
        total.add_incoming(ir.Constant(sums, None), entry)
        total.add_incoming(added, loop)
        builder.cbranch(builder.icmp_signed("<", next_step, vectors), loop, done)
        builder.position_at_end(done)
        result = builder.phi(sums)
        result.add_incoming(ir.Constant(sums, None), entry)
        result.add_incoming(added, loop)
        reduce = builder.module.declare_intrinsic("llvm.vector.reduce.add.v8i64", fnty=ir.FunctionType(INT64, [sums]))
        return builder.trunc(builder.call(reduce, [result]), ir.IntType(32))

    return signature, codegen


@intrinsic
def pack_four_rows(typing_context, count, b, flip, groups, terms, group, column):
    """groups[column // 16 + u, g] = the bits of b's rows 4·g to 4·g + 3 in columns [column + 16·u, column + 16·u +
    16), u < 4 (byte t of each 32-bit element from row 4·g + t), for the literal ``count`` groups g from ``group`` on,
    and terms there += their sums (Σ int8(bits xor flip) + 4·flip: flip 0 where b is INT8, 128 where UINT8), kept in
    registers across the groups. b's rows contiguous. Each row is first permuted (one `vpermb`) so that unpacking
    bytes, then words, within 128-bit lanes leaves 16 consecutive columns in each vector, in order."""
    if not isinstance(count, types.StringLiteral):
        return None
    groups_count = int(count.literal_value)
    signature = types.none(count, b, flip, groups, terms, group, column)

    def codegen(context, builder, signature, arguments):
        int32 = ir.IntType(32)
        moves = ByteMoves(builder, 64)
        lanes = moves.lanes
        b_array, groups_array, terms_array = (context.make_array(signature.args[i])(context, builder, arguments[i])
                                              for i in (1, 3, 4))
        flip, group, column = arguments[2], arguments[5], arguments[6]
        constant = moves.constant

        address, stride, pointer = moves.address, moves.stride, moves.pointer

        # byte 16·L + 4·w + i of a permuted row is column 16·w + 4·L + i: after the unpacks, vector w holds, in
        # 128-bit lane L, columns 16·w + 4·L to 16·w + 4·L + 3, each a group of 4 rows
        order = [16 * w + 4 * lane + i for lane in range(4) for w in range(4) for i in range(4)]
        dot = builder.module.declare_intrinsic("llvm.x86.avx512.vpdpbusd.512",
                                               fnty=ir.FunctionType(lanes, [lanes] * 3))
        ones = moves.splat(constant(0x01010101, int32), lanes)
        flips = moves.splat(builder.mul(builder.zext(flip, int32), constant(0x01010101, int32)), lanes)
        centres = moves.splat(builder.mul(builder.zext(flip, int32), constant(4 * groups_count, int32)), lanes)
        first_block = builder.udiv(column, constant(COLUMNS))
        terms_at = [pointer(address(terms_array, builder.mul(builder.add(column, constant(COLUMNS * u)),
                                                             constant(4))), lanes) for u in range(4)]
        totals = [builder.load(at, align=4) for at in terms_at]
        for g in range(groups_count):
            first_row = builder.mul(builder.add(group, constant(g)), constant(4))
            rows = [moves.shuffle(builder.load(pointer(address(b_array, builder.add(builder.mul(
                builder.add(first_row, constant(t)), stride(b_array, 0)), column)), moves.bytes), align=1),
                ir.Constant(moves.bytes, None), order) for t in range(4)]
            for u, vector in enumerate(moves.interleaved(rows)):
                target = address(groups_array, builder.add(builder.mul(builder.add(first_block, constant(u)),
                                                                       stride(groups_array, 0)),
                                                           builder.mul(builder.add(group, constant(g)),
                                                                       stride(groups_array, 1))))
                builder.store(vector, pointer(target, lanes), align=4)
                totals[u] = builder.call(dot, [totals[u], ones, builder.xor(vector, flips)])
        for at, total in zip(terms_at, totals):
            builder.store(builder.add(total, centres), at, align=4)
        return context.get_dummy_value()

    return signature, codegen


@callee
def pack_group(b, flip, groups, terms, group, block, start, width):
    """groups[block, group] for the columns [start, start + width) of b, element by element (b's rows of any
    stride, or fewer than 4 rows left: bytes past b are 0), and 0 for the block's columns past b's; terms there +=
    Σ of b's values (int8(bits xor flip) + flip, as pack_four_rows reads them)."""
    length = b.shape[0]
    first = 4 * group
    target = groups[block, group]
    centre = np.int32(flip)
    for j in range(width):
        total = np.int32(0)
        for t in range(4):
            k = first + t
            if k < length:
                bits = b[k, start + j]
                target[j, t] = bits
                total += np.int32(np.int8(bits ^ flip)) + centre
            else:
                target[j, t] = 0
        terms[start + j] += total
    target[width:] = 0


@intrinsic
def tile_products_only(typing_context, steps):
    """``steps`` times four tdpbssd on tiles already configured, nothing loaded or stored: the instruction's own
    rate, which benchmarks/cpu.py measures the kernels against."""
    def codegen(context, builder, signature, arguments):
        for number in range(8):
            tile_intrinsic(builder, "tilezero", [tile(number)])
        entry, loop = builder.block, builder.append_basic_block("peak")
        done = builder.append_basic_block("peak_done")
        builder.branch(loop)
        builder.position_at_end(loop)
        step = builder.phi(INT64)
        for r in range(2):
            for c in range(2):
                tile_intrinsic(builder, "tdpbssd", [tile(2 * r + c), tile(4 + r), tile(6 + c)])
        next_step = builder.add(step, ir.Constant(INT64, 1))
        step.add_incoming(ir.Constant(INT64, 0), entry)
        step.add_incoming(next_step, loop)
        builder.cbranch(builder.icmp_signed("<", next_step, arguments[0]), loop, done)
        builder.position_at_end(done)
        return context.get_dummy_value()
    return types.none(steps), codegen


@compiled
def tile_peak(steps):
    """Multiply-adds of ``steps`` × 4 tdpbssd on this thread's tiles (``tile_products_only``)."""
    start_tiles()
    tile_products_only(steps)
    release_tiles()
    return steps * 4 * 16 * 16 * DEPTH
