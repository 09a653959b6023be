"""The CPU scans' compiled loops (numba): imported by scan's loader, in the background (``compiled.Loader``),
so that importing dmlops or a first call never waits for numba. scan decides which loop scans which views."""

from __future__ import annotations

import functools
import platform

import numba
import numpy as np
from llvmlite import binding, ir
from numba.core import cgutils
from numba.extending import intrinsic, register_jitable
from numba.np.arrayobj import load_item, store_item

from .atomics import memory_fence, publish, spin_pause, state_of, take_ticket
from .byte_moves import prefetch, splat
from .jit import callee, compiled, inlined
from .processor import HALF_LANES, STREAM_STORES, VECTOR_BYTES, WALK_BYTES, target_features

# One loop per layout: the running value of each line lives in a register (Q = 1; short contiguous lines in one lane
# of a vector, a block of lines at a time), or in a row that stays in L1 and is updated a vector at a time (Q > 1).
# The loops take the operation ("sum", "product") and the way elements are read and written ("value", "half") as
# string literals, so that ``combine``, ``load`` and ``store`` are compiled in: names rather than compiled functions,
# whose numba types the on-disk cache cannot keep from one process to the next (it failed to save its index, and grew
# by an entry a process). They are intrinsics, a few instructions in their caller's code, rather than compiled
# functions of their own: each of those took numba a tenth of a second to compile for each type and layout.
# The loops whose work is in intrinsics of their own (the vector walks, the blocks of short lines, the streamed rows)
# take the operation as a run-time flag instead (``product``): the intrinsics branch on it outside their loops (or,
# at memory's speed, make both results and keep one), so that one compiled variant serves both operations, where
# each variant took numba seconds to compile. The loops compiled from Python (lines walked element by element, rows
# of lines) keep it a literal, so that their inner loops neither test it nor make both results (the few lines left
# after the blocks of short lines are walked with the flag).
# FLOAT16 is read and written as its bits, converted by the processor's own instructions (F16C on x86), which round
# half to even as NumPy does; the first element is copied as it is, so that even a signalling NaN keeps its bits.
# Each element is read before its output is written (a block of lines: the whole block first), so out may be x
# itself, exclusive or not.


def literals(*arguments) -> bool:
    return all(isinstance(argument, numba.types.StringLiteral) for argument in arguments)


def item_pointer(context, builder, array_type, array, index_type, index):
    """The address of array[index] (1-D; index ≥ 0: no check for one below 0)."""
    made = context.make_array(array_type)(context, builder, array)
    at = context.cast(builder, index, index_type, numba.types.intp)
    return cgutils.get_item_pointer(context, builder, array_type, made, [at], wraparound=False)


@intrinsic
def load(typing_context, element, line, i):
    """line[i] read as element ("value", "half") says: as it is, or FLOAT16 bits widened to float32."""
    if not literals(element):
        return None
    half = element.literal_value == "half"

    def codegen(context, builder, signature, arguments):
        value = load_item(context, builder, line, item_pointer(context, builder, line, arguments[1], i, arguments[2]))
        return builder.fpext(builder.bitcast(value, ir.HalfType()), ir.FloatType()) if half else value

    return (numba.float32 if half else line.dtype)(element, line, i), codegen


@intrinsic
def store(typing_context, element, line, i, value):
    """line[i] = value written as element says: in line's type (integers wrap to it here), or float32 narrowed to
    FLOAT16 bits."""
    if not literals(element):
        return None
    half = element.literal_value == "half"

    def codegen(context, builder, signature, arguments):
        if half:
            item = builder.bitcast(builder.fptrunc(context.cast(builder, arguments[3], value, numba.float32),
                                                   ir.HalfType()), ir.IntType(16))
        else:
            item = context.cast(builder, arguments[3], value, line.dtype)
        store_item(context, builder, line, item, item_pointer(context, builder, line, arguments[1], i, arguments[2]))
        return context.get_dummy_value()

    return numba.types.none(element, line, i, value), codegen


@intrinsic
def combine(typing_context, operation, tally, value):
    """tally ⊕ value in tally's type: the running value keeps its own type, and integers wrap in it (numba's own
    int32 + int32 is an int64). operation is a literal name ("sum", "product"), or a run-time flag: whether it is
    the product."""
    if not (literals(operation) or isinstance(operation, numba.types.Boolean)):
        return None

    def codegen(context, builder, signature, arguments):
        chosen = operation.literal_value if literals(operation) else arguments[0]
        return combining(builder, chosen, tally)(arguments[1], context.cast(builder, arguments[2], value, tally))

    return tally(operation, tally, value), codegen


@compiled
def scan_lines_compiled(x, out, operation, element, identity, reverse, exclusive):
    """Q = 1 (x, out {P, L}): each line walks the axis with its running value in a register."""
    length = x.shape[1]
    step = -1 if reverse else 1
    for p in range(x.shape[0]):
        source, target = x[p], out[p]
        i = length - 1 if reverse else 0
        tally = load(element, source, i)  # the first element as it is: identity ⊕ x turns -0.0 into +0.0
        if exclusive:
            store(element, target, i, identity)
        else:
            target[i] = source[i]
        for _ in range(length - 1):
            i += step
            value = load(element, source, i)
            if exclusive:
                store(element, target, i, tally)
                tally = combine(operation, tally, value)
            else:
                tally = combine(operation, tally, value)
                store(element, target, i, tally)


@compiled
def scan_lines_blocks(x, out, product, element, identity, reverse, exclusive, length):
    """Q = 1, x and out {P, L} C-contiguous, L = int(length) (a literal string): blocks of as many lines as a
    vector of VECTOR_BYTES holds elements, each by one scan_lines_block; the lines left over by
    scan_lines_compiled, with the operation the same run-time flag (fewer than a block: one walk compiled here for
    both operations, where a literal of each made two)."""
    lanes = VECTOR_BYTES // x.itemsize
    whole = x.shape[0] - x.shape[0] % lanes
    size = x.shape[1]
    for first in range(0, whole, lanes):
        scan_lines_block(product, element, x, out, first * size, identity, length, reverse, exclusive)
    scan_lines_compiled(x[whole:], out[whole:], product, element, identity, reverse, exclusive)


@compiled
def scan_half_lines(x, out, operation, identity, reverse, exclusive, widened, scanned, heads):
    """Q = 1, FLOAT16 bits (x, out {P, L}, C-contiguous), lines shorter than VECTOR_LINE: blocks of lines widened
    to float32 a vector at a time (widened: {lines of a block, L}), scanned there by scan_lines_compiled into
    scanned, and narrowed back the same way; the first element of an inclusive scan keeps its bits (a
    signalling NaN too: heads holds them while out overwrites x)."""
    length = x.shape[1]
    head = length - 1 if reverse else 0
    flat_x, flat_out = x.ravel(), out.ravel()
    flat_widened, flat_scanned = widened.ravel(), scanned.ravel()
    for first in range(0, x.shape[0], widened.shape[0]):
        count = min(widened.shape[0], x.shape[0] - first)
        start, size = first * length, count * length
        convert(flat_x[start:start + size], flat_widened)
        for p in range(count):
            heads[p] = x[first + p, head]
        scan_lines_compiled(widened[:count], scanned[:count], operation, "value", identity, reverse, exclusive)
        convert(flat_scanned[:size], flat_out[start:start + size])
        if not exclusive:
            for p in range(count):
                out[first + p, head] = heads[p]


@compiled
def convert(source, target):
    """target[:source.size] = source converted, FLOAT16 bits to float32 or float32 to FLOAT16 bits, a vector at a
    time, then the elements left one at a time."""
    size = source.shape[0]
    whole = size - size % HALF_LANES
    for i in range(0, whole, HALF_LANES):
        convert_vector(source, target, i)
    for i in range(whole, size):
        convert_element(source, target, i)


@compiled
def scan_rows_compiled(x, out, operation, element, identity, reverse, exclusive, tally):
    """Q > 1: the axis walks rows of Q lines, carrying a row of running values ({Q}). The loops over a row are
    vectorised where it is contiguous; reverse walks it from its end, so that memory is read and written in one
    direction (a walk that goes back by rows but forwards within them is a third slower)."""
    length, width = x.shape[1], x.shape[2]
    step = -1 if reverse else 1
    for p in range(x.shape[0]):
        i = length - 1 if reverse else 0
        source, target = x[p, i], out[p, i]
        for q in range(width):
            tally[q] = load(element, source, q)
            if exclusive:
                store(element, target, q, identity)
            else:
                target[q] = source[q]
        for _ in range(length - 1):
            i += step
            source, target = x[p, i], out[p, i]
            for j in range(width):
                q = np.uint64(width - 1 - j) if reverse else np.uint64(j)  # unsigned: no check for q < 0
                if exclusive:
                    value, before = load(element, source, q), tally[q]
                    store(element, target, q, before)
                    tally[q] = combine(operation, before, value)
                else:
                    after = combine(operation, tally[q], load(element, source, q))
                    tally[q] = after
                    store(element, target, q, after)



def vector_access(context, builder, tally, half, lanes, at):
    """(load(array type, array), store(array type, array, vector)) of the lanes elements from index at, in
    tally's type (FLOAT16 arrays hold bits, converted on the way)."""
    vector = ir.VectorType(context.get_value_type(tally), lanes)
    memory = ir.VectorType(ir.IntType(16), lanes) if half else vector
    halves = ir.VectorType(ir.HalfType(), lanes)

    def pointer(array_type, array):
        data = context.make_array(array_type)(context, builder, array).data
        return builder.bitcast(builder.gep(data, [at]), memory.as_pointer())

    def load(array_type, array):
        loaded = builder.load(pointer(array_type, array), align=1)
        return builder.fpext(builder.bitcast(loaded, halves), vector) if half else loaded

    def store(array_type, array, value):
        if half:
            value = builder.bitcast(builder.fptrunc(value, halves), memory)
        builder.store(value, pointer(array_type, array), align=1)

    return load, store


def converting(lanes: int):
    """An intrinsic convert(source, target, at): target[at:at + lanes] = source[at:at + lanes] converted, FLOAT16
    bits to float32 or float32 to FLOAT16 bits (8 lanes: one vcvtph2ps / vcvtps2ph, where LLVM leaves conversion
    loops element by element)."""
    @intrinsic
    def convert(typing_context, source, target, at):
        widen = source.dtype == numba.types.uint16

        def codegen(context, builder, signature, arguments):
            load, _ = vector_access(context, builder, numba.types.float32, widen, lanes, arguments[2])
            _, store = vector_access(context, builder, numba.types.float32, not widen, lanes, arguments[2])
            store(signature.args[1], arguments[1], load(signature.args[0], arguments[0]))
            return context.get_dummy_value()

        return numba.types.none(source, target, at), codegen

    return convert


convert_vector, convert_element = converting(HALF_LANES), converting(1)


def combining(builder, operation, tally):
    """combine(a, b): the operation on values or vectors of tally's numba type: a name ("sum", "product"), or an i1
    read at run time (whether it is the product), both results then made and one selected."""
    if not isinstance(operation, str):
        product, total = combining(builder, "product", tally), combining(builder, "sum", tally)
        return lambda a, b: builder.select(operation, product(a, b), total(a, b))
    instruction = {"sum": ("fadd", "add"), "product": ("fmul", "mul")}[operation]
    name = instruction[0 if isinstance(tally, numba.types.Float) else 1]
    return lambda a, b: getattr(builder, name)(a, b)


def each_operation(builder, product, emit) -> None:
    """emit(name) on each branch of product (an i1 read at run time: whether the operation is the product, else the
    sum), so that each branch is compiled for its operation and the loops emitted there test nothing."""
    with builder.if_else(product) as (products, sums):
        with products:
            emit("product")
        with sums:
            emit("sum")


def walk_lanes(tally) -> int:
    """The lanes of the line walk's vectors (WALK_BYTES) of tally's numba type."""
    return WALK_BYTES // (tally.bitwidth // 8)


@intrinsic
def add_vectors(typing_context, product, element, source, at, groups, reverse, totals):
    """totals[k] ⊕= the vectors k, k + 4, k + 8, ... of source from index at (reverse: of those that end at at,
    walked down; each read as it lies), 4 × groups vectors in all, lane by lane (totals {4, lanes}, the
    accumulation type): four chains in registers, so that one vector's operation need not wait for the last one's.
    product: whether the operation is the product (else the sum)."""
    if not literals(element):
        return None
    tally = totals.dtype

    def codegen(context, builder, signature, arguments):
        lanes = walk_lanes(tally)
        int64 = ir.IntType(64)
        access = functools.partial(vector_access, context, builder, tally)
        chains = [cgutils.alloca_once_value(builder, access(False, lanes, int64(k * lanes))[0](
            signature.args[6], arguments[6])) for k in range(4)]

        def walk(operation):
            combine = combining(builder, operation, tally)
            with cgutils.for_range(builder, arguments[4]) as loop:
                group = builder.mul(loop.index, int64(4 * lanes))
                for k, chain in enumerate(chains):
                    at = builder.select(arguments[5],
                                        builder.sub(arguments[3], builder.add(group, int64((k + 1) * lanes))),
                                        builder.add(arguments[3], builder.add(group, int64(k * lanes))))
                    load, _ = access(element.literal_value == "half", lanes, at)
                    builder.store(combine(builder.load(chain), load(signature.args[2], arguments[2])), chain)

        each_operation(builder, arguments[0], walk)
        for k, chain in enumerate(chains):
            access(False, lanes, int64(k * lanes))[1](signature.args[6], arguments[6], builder.load(chain))
        return context.get_dummy_value()

    return numba.types.none(product, element, source, at, groups, reverse, totals), codegen


@intrinsic
def scan_vectors(typing_context, product, element, source, target, at, count, tally, neutral, reverse, exclusive,
                 ahead, chains):
    """target = the scan of ``count`` vectors of source from index at (reverse: of those that end at at, walked
    down, each from its end) from the running value tally (exclusive: each lane gets the running value before it),
    in tally's type (FLOAT16 read and written as its bits); returns the running value after them. Within a vector,
    the running values come from log2(lanes) shifted copies combined (a tree); the running value is kept as a
    vector of its copies (one operation from one vector to the next, no trip through a scalar register). With
    ``ahead`` > 0, source ``ahead`` elements further in the walk is fetched into the cache meanwhile (a prefetch: a
    hint that never faults, wherever it points). Where ``chains`` is an array ({4, lanes}, not None), the vectors of
    whole groups of four are also combined into its rows as add_vectors combines them (the chunk's total made in
    the same pass). product: whether the operation is the product (else the sum)."""
    if not literals(element):
        return None
    half = element.literal_value == "half"
    with_chains = isinstance(chains, numba.types.Array)

    def codegen(context, builder, signature, arguments):
        lanes = walk_lanes(tally)
        int32, int64 = ir.IntType(32), ir.IntType(64)
        mask = ir.VectorType(int32, lanes)
        reverse, exclusive = arguments[8], arguments[9]

        def shifted(value, by):
            """The lanes moved by ``by`` away from the walk's start, the neutral element coming in."""
            indices = [[lanes + i if i < by else i - by for i in range(lanes)],
                       [i + by if i + by < lanes else lanes + i for i in range(lanes)]]
            forward, backward = (builder.shuffle_vector(value, neutrals, ir.Constant(mask, index))
                                 for index in indices)
            return builder.select(reverse, backward, forward)

        def lane(value, index):  # every lane a copy of lane ``index``
            return builder.shuffle_vector(value, value, ir.Constant(mask, [index] * lanes))

        neutrals = splat(builder, context.cast(builder, arguments[7], signature.args[7], tally), lanes)
        running = cgutils.alloca_once_value(builder, splat(builder, arguments[6], lanes))
        ahead = arguments[10]
        data = context.make_array(signature.args[2])(context, builder, arguments[2]).data
        if with_chains:
            chain_rows = context.make_array(signature.args[11])(context, builder, arguments[11]).data
            grouped = builder.and_(arguments[5], int64(-4))  # the vectors of whole groups of four

        def walk(operation):
            combine = combining(builder, operation, tally)
            with cgutils.for_range(builder, arguments[5]) as loop:
                step = builder.mul(loop.index, int64(lanes))
                at = builder.select(reverse, builder.sub(arguments[4], builder.add(step, int64(lanes))),
                                    builder.add(arguments[4], step))
                with builder.if_then(builder.icmp_signed(">", ahead, int64(0)), likely=True):
                    later = builder.gep(data, [builder.select(reverse, builder.sub(at, ahead),
                                                              builder.add(at, ahead))])
                    prefetch(builder, builder.ptrtoint(later, int64))
                load, store = vector_access(context, builder, tally, half, lanes, at)
                value = load(signature.args[2], arguments[2])
                if with_chains:
                    with builder.if_then(builder.icmp_signed("<", loop.index, grouped), likely=True):
                        row = builder.gep(chain_rows, [builder.mul(builder.and_(loop.index, int64(3)), int64(lanes))])
                        row = builder.bitcast(row, value.type.as_pointer())
                        builder.store(combine(builder.load(row, align=1), value), row, align=1)  # (any alignment)
                by = 1
                while by < lanes:
                    value = combine(value, shifted(value, by))
                    by *= 2
                before = builder.load(running)
                store(signature.args[3], arguments[3],
                      combine(before, builder.select(exclusive, shifted(value, 1), value)))
                builder.store(combine(before, builder.select(reverse, lane(value, 0), lane(value, lanes - 1))),
                              running)

        each_operation(builder, arguments[0], walk)
        return builder.extract_element(builder.load(running), int32(0))

    return (tally(product, element, source, target, at, count, tally, neutral, reverse, exclusive, ahead, chains),
            codegen)


# Transposes of blocks whose lines are not a power of two long: one shuffle a vector up to this many lines and
# elements a line, padded to powers of two beyond (FLOAT16 lines of 5 to 7 ran slower padded, of 10 to 14 faster).
PADDED_SIDE = 8


# How far ahead of a FLOAT16 block of short lines its input is fetched, in bytes: without it, a 4M × 8 scan's blocks
# waited for their loads (21.7 against 26.8 GB/s on 2 cores of a Xeon; float32's blocks, 3-7 % slower with it, keep
# up with memory as they are)
LINES_AHEAD = 2048


@intrinsic
def scan_lines_block(typing_context, product, element, source, target, at, identity, length, reverse, exclusive):
    """The scans of the lines of ``length`` (a literal string of the number) elements from source[at] on
    (contiguous), as many lines as a vector of VECTOR_BYTES holds elements, into target from at on; one line a
    vector lane: the block is loaded and transposed in registers so that vector j holds element j of every line,
    the running values are a chain of vector operations in the walk's order (in each lane, one line's tally: the
    walk's own bits), then transposed back and stored. The running values in identity's type (FLOAT16 read and
    written as its bits, converted a vector at a time); the first element of an inclusive line keeps its input's
    bits. The whole block is read before any of it is written: target may be source. product: whether the
    operation is the product (else the sum)."""
    if not literals(element, length):
        return None
    tally = identity
    half = element.literal_value == "half"
    size, lanes = int(length.literal_value), VECTOR_BYTES // (source.dtype.bitwidth // 8)  # lines a block

    def codegen(context, builder, signature, arguments):
        # transposed as loaded (FLOAT16 as its bits: half the shuffles' bytes), then converted a column at a time
        accessors = [vector_access(context, builder, numba.types.uint16 if half else tally, False, lanes,
                                   builder.add(arguments[4], ir.Constant(arguments[4].type, k * lanes)))
                     for k in range(size)]
        columns = transposed(builder, [load(signature.args[2], arguments[2]) for load, _ in accessors], lanes, size)
        if half:  # (FLOAT16's blocks waited for their loads: the lines LINES_AHEAD bytes on fetched meanwhile)
            int64 = ir.IntType(64)
            data = context.make_array(signature.args[2])(context, builder, arguments[2]).data
            block_at = builder.ptrtoint(builder.gep(data, [arguments[4]]), int64)
            for line in range(0, 2 * size * lanes, 64):
                prefetch(builder, builder.add(block_at, ir.Constant(int64, LINES_AHEAD + line)))
        values = ir.VectorType(context.get_value_type(tally), lanes)
        halves = ir.VectorType(ir.HalfType(), lanes)

        def widened(bits):
            return builder.fpext(builder.bitcast(bits, halves), values) if half else bits

        def narrowed(value):
            return builder.bitcast(builder.fptrunc(value, halves), columns[0].type) if half else value

        identities = narrowed(splat(builder, arguments[5], lanes))
        wide = [widened(column) for column in columns]
        # the output columns, from whichever branch below made them: transposed back and stored once, after them
        outputs = [cgutils.alloca_once(builder, columns[0].type) for _ in range(size)]

        def scan(operation, reverse, exclusive):
            # the first output column: the identity, or the input's column as loaded (its bits, a signalling NaN's
            # too); the others the running values in the walk's order
            order = list(reversed(range(size))) if reverse else list(range(size))
            builder.store(identities if exclusive else columns[order[0]], outputs[order[0]])
            running = wide[order[0]]
            combine = combining(builder, operation, tally)
            for j in order[1:]:
                if exclusive:
                    builder.store(narrowed(running), outputs[j])
                running = combine(running, wide[j])
                if not exclusive:
                    builder.store(narrowed(running), outputs[j])

        def scan_each(operation):
            with builder.if_else(arguments[7]) as (backwards, forwards):
                for branch, reverse in ((forwards, False), (backwards, True)):
                    with branch:
                        with builder.if_else(arguments[8]) as (excluding, including):
                            with including:
                                scan(operation, reverse, False)
                            with excluding:
                                scan(operation, reverse, True)

        each_operation(builder, arguments[0], scan_each)
        for (_, store), vector in zip(accessors, transposed(builder, [builder.load(column) for column in outputs],
                                                              size, lanes)):
            store(signature.args[3], arguments[3], vector)
        return context.get_dummy_value()

    return numba.types.none(product, element, source, target, at, identity, length, reverse, exclusive), codegen


def transposed(builder, rows, count, width):
    """The vectors of the transposed matrix: rows holds a count × width matrix (row-major) in vectors of the same
    number of lanes each; the result holds its transpose (width × count) in as many vectors of as many lanes.
    Sides that are powers of two: in stages of two-vector shuffles (a matrix's flat index is its row bits then its
    column bits; deinterleaving the sequence rotates them right by one bit, interleaving it left by one). A side
    that is not, up to PADDED_SIDE: each vector one shuffle of the elements it takes (LLVM lowers it as shuffles of
    the vectors they come from); longer, padded to a power of two, which costs fewer shuffles there."""
    lanes = rows[0].type.count
    sides = [1 << (n - 1).bit_length() for n in (count, width)]
    uneven = [n for n, side in zip((count, width), sides) if n != side]
    if uneven and max(uneven) <= PADDED_SIDE:
        return [gathered(builder, rows, [o % count * width + o // count for o in range(k * lanes, k * lanes + lanes)])
                for k in range(len(rows))]
    if uneven:
        padded = [gathered(builder, rows, [p * width + j if p < count and j < width else None
                                           for j in range(sides[1])]) for p in range(sides[0])]
        padded = transposed(builder, padded, *sides)
        return [gathered(builder, padded, [o // count * sides[0] + o % count
                                           for o in range(k * lanes, k * lanes + lanes)])
                for k in range(len(rows))]
    right, left = width.bit_length() - 1, count.bit_length() - 1
    for _ in range(min(right, left)):
        rows = (deinterleaved if right < left else interleaved)(builder, rows)
    return rows


def gathered(builder, vectors, indices):
    """A vector of the elements at ``indices`` (None: any) of the sequence of the vectors' lanes."""
    lanes = vectors[0].type.count
    known = [i for i in indices if i is not None]
    if not known:
        return ir.Constant(ir.VectorType(vectors[0].type.element, len(indices)), None)
    sources = sorted({i // lanes for i in known})
    whole = concatenated(builder, [vectors[source] for source in sources])
    place = {source: n * lanes for n, source in enumerate(sources)}
    mask = [place[i // lanes] + i % lanes for i in (known[0] if i is None else i for i in indices)]
    return builder.shuffle_vector(whole, ir.Constant(whole.type, None),
                                  ir.Constant(ir.VectorType(ir.IntType(32), len(indices)), mask))


def interleaved(builder, vectors):
    """The sequence of the vectors' lanes perfectly shuffled: element i of its first half to 2i, of its second
    half to 2i + 1."""
    lanes, half = vectors[0].type.count, len(vectors) // 2
    masks = [ir.Constant(ir.VectorType(ir.IntType(32), lanes), [offset + i // 2 + i % 2 * lanes for i in range(lanes)])
             for offset in (0, lanes // 2)]
    return [builder.shuffle_vector(a, b, mask) for a, b in zip(vectors[:half], vectors[half:]) for mask in masks]


def deinterleaved(builder, vectors):
    """The sequence of the vectors' lanes unshuffled: its even elements, then its odd ones."""
    lanes = vectors[0].type.count
    masks = [ir.Constant(ir.VectorType(ir.IntType(32), lanes), [2 * i + odd for i in range(lanes)]) for odd in (0, 1)]
    return [builder.shuffle_vector(a, b, mask) for mask in masks for a, b in zip(vectors[::2], vectors[1::2])]


def concatenated(builder, vectors):
    """One vector of the vectors' lanes, in order (shuffles of pairs; undefined lanes pad to a power of two)."""
    int32 = ir.IntType(32)
    while len(vectors) > 1:
        if len(vectors) % 2:
            vectors = vectors + [ir.Constant(vectors[0].type, None)]
        width = 2 * vectors[0].type.count
        vectors = [builder.shuffle_vector(a, b, ir.Constant(ir.VectorType(int32, width), list(range(width))))
                   for a, b in zip(vectors[::2], vectors[1::2])]
    return vectors[0]


@callee
def scan_span(source, target, product, element, tally, neutral, reverse, exclusive, first, last, lanes, ahead,
              chains):
    """Scan source[first:last] (1-D, contiguous) into target from the running value tally, vectors of lanes
    elements then single ones, in the walk's direction, fetching source ``ahead`` elements further meanwhile and
    combining its vectors into ``chains`` where it is not None (scan_vectors); returns the running value after."""
    vectors = (last - first) // lanes
    if reverse:
        tally = scan_vectors(product, element, source, target, last, vectors, tally, neutral, True, exclusive,
                             ahead, chains)
        for j in range(last - vectors * lanes - 1, first - 1, -1):
            tally = scan_element(product, element, source, target, j, tally, exclusive)
    else:
        tally = scan_vectors(product, element, source, target, first, vectors, tally, neutral, False, exclusive,
                             ahead, chains)
        for j in range(first + vectors * lanes, last):
            tally = scan_element(product, element, source, target, j, tally, exclusive)
    return tally


@inlined
def scan_element(product, element, source, target, i, tally, exclusive):
    value = load(element, source, i)
    after = combine(product, tally, value)
    store(element, target, i, tally if exclusive else after)
    return after


@compiled
def scan_lines_vectors(x, out, product, element, identity, neutral, reverse, exclusive, lanes):
    """Q = 1, lines contiguous (x, out {P, L}): each line by scan_span from the neutral element; its first output
    then as the walk writes it."""
    length = x.shape[1]
    first = length - 1 if reverse else 0
    for p in range(x.shape[0]):
        source, target = x[p], out[p]
        head = source[first]
        scan_span(source, target, product, element, neutral, neutral, reverse, exclusive, 0, length, lanes, 0, None)
        if exclusive:
            store(element, target, first, identity)
        else:
            target[first] = head


@callee
def chunk_total(source, product, element, neutral, reverse, first, last, chains):
    """source[first:last] combined in the walk's order of its positions (reverse: from last - 1 down): vector by
    vector into the rows of chains ({4, lanes}: four independent chains, so that one vector's operation need not
    wait for the last one's; chain k takes vectors k, k + 4, ...), then the lanes chain by chain, then the elements
    left, each in the walk's order (NumPy's engine combines them so: chunk_totals_numpy)."""
    chains[:] = neutral
    groups = (last - first) // (4 * chains.shape[1])
    add_vectors(product, element, source, last if reverse else first, groups, reverse, chains)
    return chains_total(source, product, element, neutral, reverse, first, last, chains)


@callee
def chains_total(source, product, element, neutral, reverse, first, last, chains):
    """chunk_total's end: the lanes of chains (the groups of four vectors of source[first:last] combined) chain by
    chain, then the elements after the groups."""
    lanes = chains.shape[1]
    width = 4 * lanes
    groups = (last - first) // width
    total = neutral
    for chain in range(4):
        for j in range(lanes):
            lane = lanes - 1 - j if reverse else j  # a vector read backwards holds the walk's lanes last first
            total = combine(product, total, chains[chain, lane])
    for k in range(groups * width, last - first):
        i = last - 1 - k if reverse else first + k
        total = combine(product, total, load(element, source, i))
    return total


# A chunk's states: its total published (TOTAL), then its carry (CARRY).
TOTAL, CARRY = 1, 2


@inlined
def chunk_bounds(length, chunk, c, reverse):
    """(first, last): the indices of chunk c of a line of length, chunks counted in the walk's order."""
    start, stop = c * chunk, min(c * chunk + chunk, length)
    return (length - stop, length - start) if reverse else (start, stop)


@compiled
def scan_chunks(x, out, product, element, identity, neutral, reverse, exclusive, lanes, chunk, patience, threads,
                tickets, states, totals, carries, scratch):
    """Q = 1, lines contiguous (x, out {P, L}), each cut into chunks of ``chunk`` elements in the walk's order (the
    last one shorter), scanned by every thread that runs this at once: each takes the next ticket, (line, chunk c)
    in order, makes the chunk's total (chunk_total: from memory into the cache), publishes it, finds the running
    value after chunk c - 1 (carry_before), publishes carry_c = carry_{c-1} ⊕ total_c, then scans the chunk from
    carry_{c-1} (scan_span, reading it again from the cache, and fetching the chunk it is likely to take next). A
    thread alone makes the total of a chunk of whole groups of four vectors in its scan's pass instead, the chunk
    read once. The carries are one sequence whoever makes them: the bits depend on neither the number of threads
    nor their timing. tickets ({1}) and states ({P × chunks}) are int64 and start at 0; totals and carries
    ({P × chunks}) are of the accumulation type; scratch ({4, lanes}) is this thread's own."""
    count, length = x.shape
    chunks = (length + chunk - 1) // chunk
    while True:
        ticket = take_ticket(tickets)
        if ticket >= count * chunks:
            return
        p, c = ticket // chunks, ticket % chunks
        source, target = x[p], out[p]
        first, last = chunk_bounds(length, chunk, c, reverse)
        head = length - 1 if reverse else 0
        kept = source[head]
        needed = c + 1 < chunks  # (nobody needs the last chunk's carry)
        # a thread alone makes the total of a chunk of whole groups of four vectors in its scan's pass, the chunk
        # read once (elements after the groups would be read after their outputs are written: in place, overwritten)
        if threads == 1 and ((last - first) % (4 * lanes) == 0 or not needed):
            carry = neutral if c == 0 else carries[ticket - 1]
            scratch[:] = neutral
            scan_span(source, target, product, element, carry, neutral, reverse, exclusive, first, last, lanes, 0,
                      scratch)
            if needed:  # (published as the others are, though nobody waits)
                totals[ticket] = chains_total(source, product, element, neutral, reverse, first, last, scratch)
                carries[ticket] = combine(product, carry, totals[ticket])
                publish(states, ticket, CARRY)
        else:
            total = neutral
            if needed:
                total = chunk_total(source, product, element, neutral, reverse, first, last, scratch)
                totals[ticket] = total
                publish(states, ticket, TOTAL)
            carry = carry_before(source, product, element, neutral, reverse, chunk, patience, ticket, c, states,
                                 totals, carries, scratch)
            if needed:
                carries[ticket] = combine(product, carry, total)
                publish(states, ticket, CARRY)
            memory_fence()  # the chunk's outputs written after its state is seen (see carry_before)
            # the chunk this thread is likely to take next (threads tickets on: the line's, or the next line's where
            # lines follow one another in memory) fetched into the cache meanwhile, for its total
            scan_span(source, target, product, element, carry, neutral, reverse, exclusive, first, last, lanes,
                      threads * chunk, None)
        if c == 0:  # the line's first output as the walk writes it
            if exclusive:
                store(element, target, head, identity)
            else:
                target[head] = kept


@callee
def carry_before(source, product, element, neutral, reverse, chunk, patience, ticket, c, states, totals, carries,
                 scratch):
    """The running value after chunk c - 1 of the line (the neutral element before chunk 0): its carry once
    published. A thread that has waited ``patience`` pauses for it makes it itself, as its owner does, from the latest
    carry published before it and the totals after that one (its own total where one is not published yet): the
    same operations on the same values, so the same bits, and no thread waits long for one that is not running."""
    if c == 0:
        return neutral
    for _ in range(patience):
        if state_of(states, ticket - 1) == CARRY:
            return carries[ticket - 1]
        spin_pause()
    line_start = ticket - c  # the ticket of the line's chunk 0
    known = ticket - 1  # the latest chunk before whose carry is published, else line_start - 1
    while known >= line_start and state_of(states, known) != CARRY:
        known -= 1
    carry = neutral if known < line_start else carries[known]
    length = source.shape[0]
    for m in range(known + 1, ticket):
        total = neutral
        if state_of(states, m) < TOTAL:
            first, last = chunk_bounds(length, chunk, m - line_start, reverse)
            total = chunk_total(source, product, element, neutral, reverse, first, last, scratch)
            # read while its owner had not published the chunk's total, so before it wrote any output there (in
            # place, over the input): unless it has published it since
            memory_fence()
        if state_of(states, m) >= TOTAL:
            total = totals[m]
        carry = combine(product, carry, total)
    return carry


if STREAM_STORES:
    # Rows of the outer axis written past the cache. Each step of a row is one intrinsic, so that its vectors are
    # the code's own and need no vectoriser (numba's will not emit streaming stores, and a streaming store of
    # values computed lane by lane stops the loop around it vectorising).
    binding.initialize_native_asmparser()  # (numba's JIT reads inline assembly only with it: movnti below)

    def streamed_step(vector: bool):
        """An intrinsic step(product, source, tally, target, q, exclusive): for the elements of a streamed vector
        from q on (``streamed_bytes``; one if not ``vector``), tally ⊕= source, and target = the tally after
        (before, if exclusive) through a streaming store, which needs target[q] on a boundary of its size. product:
        whether the operation is the product (else the sum; both results made and one kept, at memory's speed).
        FLOAT16 (source and target its bits, the tally float32) is converted on the way, and a single one is
        stored as usual: no instruction streams two bytes."""
        @intrinsic
        def step(typing_context, product, source, tally, target, q, exclusive):
            dtype, tally_type = source.dtype, tally.dtype
            half = tally_type != dtype
            lanes = streamed_bytes(half) // (dtype.bitwidth // 8) if vector else 1

            def codegen(context, builder, signature, arguments):
                def pointer(array_type, array, value_type):
                    data = context.make_array(array_type)(context, builder, array).data
                    return builder.bitcast(builder.gep(data, [arguments[4]]), value_type.as_pointer())

                def typed(element):
                    return ir.VectorType(element, lanes) if vector else element

                bits, value_type = typed(context.get_data_type(dtype)), typed(context.get_data_type(tally_type))
                halves = typed(ir.HalfType())
                source_at, target_at = (pointer(signature.args[k], arguments[k], bits) for k in (1, 3))
                tally_at = pointer(signature.args[2], arguments[2], value_type)
                value = builder.load(source_at, align=1)  # x may sit anywhere
                if half:
                    value = builder.fpext(builder.bitcast(value, halves), value_type)
                alignment = tally_type.bitwidth // 8
                before = builder.load(tally_at, align=alignment)
                after = combining(builder, arguments[0], tally_type)(before, value)
                builder.store(after, tally_at, align=alignment)
                result = builder.select(arguments[5], before, after)
                if half:
                    result = builder.bitcast(builder.fptrunc(result, halves), bits)
                if half and vector:
                    # FLOAT16's vector through vmovntdq in inline assembly: with AVX512-FP16, LLVM stores a vector
                    # of halves as such, and drops the streaming hint (vmovdqu: the rows ran at half of float32's
                    # speed on a Xeon with AMX)
                    words = builder.bitcast(result, ir.VectorType(ir.IntType(64), 2))
                    builder.asm(ir.FunctionType(ir.VoidType(), [words.type, target_at.type]), "vmovntdq $0, ($1)",
                                "x,r,~{memory}", [words, target_at], side_effect=True)
                    return context.get_dummy_value()
                if not vector and not half and isinstance(dtype, numba.types.Float):
                    # one float alone as its bits, through movnti (SSE2's: movntss / movntsd are SSE4A's only, and
                    # LLVM turns a streaming store of a float's bits back into one of the float)
                    word = builder.bitcast(result, ir.IntType(dtype.bitwidth))
                    builder.asm(ir.FunctionType(ir.VoidType(), [word.type, target_at.type]), "movnti $0, ($1)",
                                "r,r,~{memory}", [word, target_at], side_effect=True)
                    return context.get_dummy_value()
                stored = builder.store(result, target_at, align=lanes * dtype.bitwidth // 8)
                if not half:
                    stored.set_metadata("nontemporal", builder.module.add_metadata([ir.IntType(32)(1)]))
                return context.get_dummy_value()

            return numba.types.none(product, source, tally, target, q, exclusive), codegen

        return step

    stream_vector, stream_element = streamed_step(True), streamed_step(False)

    @intrinsic
    def store_fence(typing_context):
        """sfence: streaming stores are weakly ordered; it makes them visible before any later store (the
        thread pool's signal that a piece is done)."""
        def codegen(context, builder, signature, arguments):
            fence = builder.module.declare_intrinsic("llvm.x86.sse.sfence", fnty=ir.FunctionType(ir.VoidType(), []))
            builder.call(fence, [])
            return context.get_dummy_value()

        return numba.types.none(), codegen

    @compiled
    def scan_rows_streamed(x, out, product, element, identity, reverse, exclusive, tally):
        """scan_rows_compiled for rows contiguous in x and out, rows after the first written with streaming
        stores: elements one at a time up to a boundary of a streamed vector of out (``streamed_bytes``),
        vectors, and the elements left, in the direction of the walk. tally ({Q}) is as aligned as out's rows."""
        length, width = x.shape[1], x.shape[2]
        vector_bytes = streamed_bytes(element == "half")
        lanes = vector_bytes // x.itemsize
        step = -1 if reverse else 1
        for p in range(x.shape[0]):
            i = length - 1 if reverse else 0
            source, target = x[p, i], out[p, i]
            for q in range(width):
                tally[q] = load(element, source, q)  # the first row as it is (identity ⊕ x: -0.0 to +0.0)
                if exclusive:
                    store(element, target, q, identity)
                else:
                    target[q] = source[q]
            for _ in range(length - 1):
                i += step
                source, target = x[p, i], out[p, i]
                head = min(width, (vector_bytes - target.ctypes.data % vector_bytes) % vector_bytes // x.itemsize)
                tail = head + (width - head) // lanes * lanes
                # the vectors in while loops: a range of step ``lanes`` made the loop slower (28 against 32 GB/s)
                if reverse:
                    for q in range(width - 1, tail - 1, -1):
                        stream_element(product, source, tally, target, q, exclusive)
                    q = tail - lanes
                    while q >= head:
                        stream_vector(product, source, tally, target, q, exclusive)
                        q -= lanes
                    for q in range(head - 1, -1, -1):
                        stream_element(product, source, tally, target, q, exclusive)
                else:
                    for q in range(head):
                        stream_element(product, source, tally, target, q, exclusive)
                    q = head
                    while q < tail:
                        stream_vector(product, source, tally, target, q, exclusive)
                        q += lanes
                    for q in range(tail, width):
                        stream_element(product, source, tally, target, q, exclusive)
        store_fence()



@register_jitable  # (called from Python too)
def streamed_bytes(half):
    """The bytes of a vector of the streamed rows: VECTOR_BYTES, or HALF_LANES halves for FLOAT16 (16 bytes, the
    boundaries on which NumPy's large arrays lie: 16 bytes past a page)."""
    return 2 * HALF_LANES if half else VECTOR_BYTES


def half_instructions() -> bool:
    """Whether the processor numba compiles for converts FLOAT16 in instructions: F16C on x86, always on ARM64.
    Elsewhere LLVM would call conversion routines that numba does not link, so FLOAT16 takes the NumPy engine."""
    return "f16c" in target_features() or platform.machine().lower() in ("aarch64", "arm64")


HALF_INSTRUCTIONS = half_instructions()
