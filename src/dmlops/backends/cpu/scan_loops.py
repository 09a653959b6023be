"""The CPU scans' compiled loops (numba): imported by scan's loader, in the background (``compiled.Loader``),
so that importing dmlops or a first call never waits for numba. scan decides which loop scans which views."""

from __future__ import annotations

import platform

import numba
import numpy as np
from llvmlite import ir
from numba.extending import intrinsic, overload

from .compiled import target_features
from .scan import HALF_LANES, STREAM_STORES, VECTOR_BYTES

# One loop per layout: the running value of each line lives in a register (Q = 1; short contiguous lines in one lane
# of a vector, a block of lines at a time), or in a row that stays in L1 and is updated a vector at a time (Q > 1).
# The loops take the operation ("sum", "product") and the way elements are
# read and written ("value", "half") as string literals, so that ``combine``, ``load`` and
# ``store`` are compiled in: names rather than compiled functions, whose numba types the on-disk cache cannot keep
# from one process to the next (it failed to save its index, and grew by an entry a process).
# FLOAT16 is read and written as its bits, converted by the processor's own instructions (F16C on x86), which round
# half to even as NumPy does; the first element is copied as it is, so that even a signalling NaN keeps its bits.
# Each element is read before its output is written (a block of lines: the whole block first), so out may be x
# itself, exclusive or not.

compiled = numba.njit(nogil=True, cache=True)


@intrinsic
def half_to_float(typing_context, bits):
    def codegen(context, builder, signature, arguments):
        return builder.fpext(builder.bitcast(arguments[0], ir.HalfType()), ir.FloatType())
    return numba.float32(numba.uint16), codegen


@intrinsic
def float_to_half(typing_context, value):
    def codegen(context, builder, signature, arguments):
        return builder.bitcast(builder.fptrunc(arguments[0], ir.HalfType()), ir.IntType(16))
    return numba.uint16(numba.float32), codegen


@compiled
def add(a, b):
    return a + b


@compiled
def multiply(a, b):
    return a * b


@compiled
def load_value(line, i):
    return line[i]


@compiled
def load_half(line, i):
    return half_to_float(line[i])


@compiled
def store_value(line, i, value):
    line[i] = value  # integers wrap to the output type here


@compiled
def store_half(line, i, value):
    line[i] = float_to_half(value)


def chosen_by_name(functions: dict):
    """A compiled function f(name, *args) = functions[name](*args), for a name known when compiling."""
    def chosen(name, *args):
        raise NotImplementedError("compiled code only")

    @overload(chosen)
    def choose(name, *args):
        if isinstance(name, numba.types.StringLiteral):
            function = functions[name.literal_value]
            return lambda name, *args: function(*args)

    return chosen

combine = chosen_by_name({"sum": add, "product": multiply})
load = chosen_by_name({"value": load_value, "half": load_half})
store = chosen_by_name({"value": store_value, "half": store_half})


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
            at = np.uint64(i)  # unsigned: no check for i < 0
            value = load(element, source, at)
            if exclusive:
                store(element, target, at, tally)
                tally = combine(operation, tally, value)
            else:
                tally = combine(operation, tally, value)
                store(element, target, at, tally)


@compiled
def scan_lines_blocks(x, out, operation, element, identity, reverse, exclusive, length):
    """Q = 1, x and out {P, L} C-contiguous, L = int(length) (a literal string): blocks of as many lines as a
    vector of VECTOR_BYTES holds elements, each by one scan_lines_block; the lines left over by
    scan_lines_compiled."""
    lanes = VECTOR_BYTES // x.itemsize
    whole = x.shape[0] - x.shape[0] % lanes
    size = x.shape[1]
    for first in range(0, whole, lanes):
        scan_lines_block(operation, element, x, out, first * size, identity, length, reverse, exclusive)
    scan_lines_compiled(x[whole:], out[whole:], operation, element, identity, reverse, exclusive)


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
        widen(flat_x[start:start + size], flat_widened)
        for p in range(count):
            heads[p] = x[first + p, head]
        scan_lines_compiled(widened[:count], scanned[:count], operation, "value", identity, reverse, exclusive)
        narrow(flat_scanned[:size], flat_out[start:start + size])
        if not exclusive:
            for p in range(count):
                out[first + p, head] = heads[p]


@compiled
def widen(bits, values):
    """values[:bits.size] = the FLOAT16 bits as float32, a vector at a time."""
    size = bits.shape[0]
    for i in range(0, size - size % HALF_LANES, HALF_LANES):
        convert_vector(bits, values, i)
    for i in range(size - size % HALF_LANES, size):
        values[i] = half_to_float(bits[i])


@compiled
def narrow(values, bits):
    """bits[:values.size] = the float32 values rounded to FLOAT16 bits, a vector at a time."""
    size = values.shape[0]
    for i in range(0, size - size % HALF_LANES, HALF_LANES):
        convert_vector(values, bits, i)
    for i in range(size - size % HALF_LANES, size):
        bits[i] = float_to_half(values[i])


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


@intrinsic
def convert_vector(typing_context, source, target, at):
    """target[at:at + 8] = source[at:at + 8] converted: FLOAT16 bits to float32, or float32 to FLOAT16 bits
    (one vcvtph2ps / vcvtps2ph: LLVM leaves the conversion loops element by element)."""
    widen = source.dtype == numba.types.uint16

    def codegen(context, builder, signature, arguments):
        lanes = HALF_LANES
        if widen:
            load, _ = vector_access(context, builder, numba.types.float32, True, lanes, arguments[2])
            _, store = vector_access(context, builder, numba.types.float32, False, lanes, arguments[2])
        else:
            load, _ = vector_access(context, builder, numba.types.float32, False, lanes, arguments[2])
            _, store = vector_access(context, builder, numba.types.float32, True, lanes, arguments[2])
        store(signature.args[1], arguments[1], load(signature.args[0], arguments[0]))
        return context.get_dummy_value()

    return numba.types.none(source, target, at), codegen


@intrinsic
def add_vector(typing_context, operation, element, source, at, totals):
    """totals ⊕= source[at:at + lanes] lane by lane (totals: lanes elements of the accumulation type)."""
    if not (isinstance(operation, numba.types.StringLiteral) and isinstance(element, numba.types.StringLiteral)):
        return None
    tally = totals.dtype
    lanes = VECTOR_BYTES // (tally.bitwidth // 8)
    instruction = {"sum": ("fadd", "add"), "product": ("fmul", "mul")}[operation.literal_value]

    def codegen(context, builder, signature, arguments):
        load, _ = vector_access(context, builder, tally, element.literal_value == "half", lanes, arguments[3])
        _, store_totals = vector_access(context, builder, tally, False, lanes, ir.Constant(ir.IntType(64), 0))
        load_totals, _ = vector_access(context, builder, tally, False, lanes, ir.Constant(ir.IntType(64), 0))
        combined = getattr(builder, instruction[0 if isinstance(tally, numba.types.Float) else 1])(
            load_totals(signature.args[4], arguments[4]), load(signature.args[2], arguments[2]))
        store_totals(signature.args[4], arguments[4], combined)
        return context.get_dummy_value()

    return numba.types.none(operation, element, source, at, totals), codegen


@intrinsic
def scan_vector(typing_context, operation, element, source, target, at, tally, neutral, reverse, exclusive):
    """target[at:at + lanes] = the scan of source[at:at + lanes] from tally (reverse: walked from its end;
    exclusive: each lane gets the running value before it), in tally's type (FLOAT16 read and written as its
    bits); returns the running value after the vector. lanes = VECTOR_BYTES // tally's size."""
    if not (isinstance(operation, numba.types.StringLiteral) and isinstance(element, numba.types.StringLiteral)):
        return None
    floating = isinstance(tally, numba.types.Float)
    half = element.literal_value == "half"
    lanes = VECTOR_BYTES // (tally.bitwidth // 8)
    instruction = {"sum": ("fadd", "add"), "product": ("fmul", "mul")}[operation.literal_value]

    def codegen(context, builder, signature, arguments):
        int32 = ir.IntType(32)
        mask = ir.VectorType(int32, lanes)
        load, store = vector_access(context, builder, tally, half, lanes, arguments[4])

        def combine(a, b):
            return getattr(builder, instruction[0 if floating else 1])(a, b)

        def shifted(value, by):
            """The lanes moved by ``by`` away from the walk's start, the neutral element coming in."""
            indices = [[lanes + i if i < by else i - by for i in range(lanes)],
                       [i + by if i + by < lanes else lanes + i for i in range(lanes)]]
            forward, backward = (builder.shuffle_vector(value, neutrals, ir.Constant(mask, index))
                                 for index in indices)
            return builder.select(arguments[7], backward, forward)

        neutrals = splat(builder, context.cast(builder, arguments[6], signature.args[6], tally), lanes)
        value = load(signature.args[2], arguments[2])
        by = 1
        while by < lanes:
            value = combine(value, shifted(value, by))
            by *= 2
        total = builder.select(arguments[7], builder.extract_element(value, int32(0)),
                               builder.extract_element(value, int32(lanes - 1)))
        store(signature.args[3], arguments[3],
              combine(splat(builder, arguments[5], lanes), builder.select(arguments[8], shifted(value, 1), value)))
        return combine(arguments[5], total)

    return tally(operation, element, source, target, at, tally, neutral, reverse, exclusive), codegen


# Transposes of blocks whose lines are not a power of two long: one shuffle a vector up to this many lines and
# elements a line, padded to powers of two beyond (FLOAT16 lines of 5 to 7 ran slower padded, of 10 to 14 faster).
PADDED_SIDE = 8


@intrinsic
def scan_lines_block(typing_context, operation, element, source, target, at, identity, length, reverse, exclusive):
    """The scans of the lines of ``length`` (a literal string of the number) elements from source[at] on
    (contiguous), as many lines as a vector of VECTOR_BYTES holds elements, into target from at on; one line a
    vector lane: the block is loaded and transposed in registers so that vector j holds element j of every line,
    the running values are a chain of vector operations in the walk's order (in each lane, one line's tally: the
    walk's own bits), then transposed back and stored. The running values in identity's type (FLOAT16 read and
    written as its bits, converted a vector at a time); the first element of an inclusive line keeps its input's
    bits. The whole block is read before any of it is written: target may be source."""
    if not all(isinstance(literal, numba.types.StringLiteral) for literal in (operation, element, length)):
        return None
    tally = identity
    floating = isinstance(tally, numba.types.Float)
    half = element.literal_value == "half"
    size, lanes = int(length.literal_value), VECTOR_BYTES // (source.dtype.bitwidth // 8)  # lines a block
    instruction = {"sum": ("fadd", "add"), "product": ("fmul", "mul")}[operation.literal_value]

    def codegen(context, builder, signature, arguments):
        # transposed as loaded (FLOAT16 as its bits: half the shuffles' bytes), then converted a column at a time
        accessors = [vector_access(context, builder, numba.types.uint16 if half else tally, False, lanes,
                                   builder.add(arguments[4], ir.Constant(arguments[4].type, k * lanes)))
                     for k in range(size)]
        columns = transposed(builder, [load(signature.args[2], arguments[2]) for load, _ in accessors], lanes, size)
        values = ir.VectorType(context.get_value_type(tally), lanes)
        halves = ir.VectorType(ir.HalfType(), lanes)

        def widened(bits):
            return builder.fpext(builder.bitcast(bits, halves), values) if half else bits

        def narrowed(value):
            return builder.bitcast(builder.fptrunc(value, halves), columns[0].type) if half else value

        identities = narrowed(splat(builder, arguments[5], lanes))

        def write(reverse, exclusive):
            # the first output column: the identity, or the input's column as loaded (its bits, a signalling NaN's
            # too); the others the running values in the walk's order
            order = list(reversed(range(size))) if reverse else list(range(size))
            outputs = {order[0]: identities if exclusive else columns[order[0]]}
            running = widened(columns[order[0]])
            for j in order[1:]:
                if exclusive:
                    outputs[j] = narrowed(running)
                running = getattr(builder, instruction[0 if floating else 1])(running, widened(columns[j]))
                if not exclusive:
                    outputs[j] = narrowed(running)
            for (_, store), vector in zip(accessors, transposed(builder, [outputs[j] for j in range(size)], size,
                                                                  lanes)):
                store(signature.args[3], arguments[3], vector)

        with builder.if_else(arguments[7]) as (backwards, forwards):
            for branch, reverse in ((forwards, False), (backwards, True)):
                with branch:
                    with builder.if_else(arguments[8]) as (excluding, including):
                        with including:
                            write(reverse, False)
                        with excluding:
                            write(reverse, True)
        return context.get_dummy_value()

    return numba.types.none(operation, element, source, target, at, identity, length, reverse, exclusive), codegen


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
        return [gathered(builder, padded, [o // count * sides[0] + o % count for o in range(k * lanes, k * lanes + lanes)])
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


def splat(builder, value, lanes):
    """A vector of lanes copies of value."""
    int32 = ir.IntType(32)
    vector = ir.VectorType(value.type, lanes)
    one = builder.insert_element(ir.Constant(vector, None), value, int32(0))
    return builder.shuffle_vector(one, ir.Constant(vector, None), ir.Constant(ir.VectorType(int32, lanes), [0] * lanes))


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


@intrinsic
def as_type_of(typing_context, value, like):
    """value in like's type (numba widens int32 ⊕ int32 to int64: the running value must keep its own type,
    and wrap in it)."""
    def codegen(context, builder, signature, arguments):
        return context.cast(builder, arguments[0], value, like)
    return like(value, like), codegen


@compiled
def scan_span(source, target, operation, element, tally, neutral, reverse, exclusive, first, last, lanes):
    """Scan source[first:last] (1-D, contiguous) into target from the running value tally, vectors of lanes
    elements then single ones, in the walk's direction; returns the running value after."""
    if reverse:
        i = last
        while i - lanes >= first:
            i -= lanes
            tally = scan_vector(operation, element, source, target, i, tally, neutral, True, exclusive)
        for j in range(i - 1, first - 1, -1):
            tally = scan_element(operation, element, source, target, j, tally, exclusive)
    else:
        i = first
        while i + lanes <= last:
            tally = scan_vector(operation, element, source, target, i, tally, neutral, False, exclusive)
            i += lanes
        for j in range(i, last):
            tally = scan_element(operation, element, source, target, j, tally, exclusive)
    return tally


@compiled
def scan_element(operation, element, source, target, i, tally, exclusive):
    value = load(element, source, i)
    after = as_type_of(combine(operation, tally, value), tally)
    store(element, target, i, tally if exclusive else after)
    return after


@compiled
def scan_lines_vectors(x, out, operation, element, identity, neutral, reverse, exclusive, lanes):
    """Q = 1, lines contiguous (x, out {P, L}): each line by scan_span from the neutral element; its first output
    then as the walk writes it."""
    length = x.shape[1]
    first = length - 1 if reverse else 0
    for p in range(x.shape[0]):
        source, target = x[p], out[p]
        head = source[first]
        scan_span(source, target, operation, element, neutral, neutral, reverse, exclusive, 0, length, lanes)
        if exclusive:
            store(element, target, first, identity)
        else:
            target[first] = head


@compiled
def segment_total(source, operation, element, neutral, first, last, totals):
    """source[first:last] combined: vector by vector into the rows of totals ({4, lanes}: four independent
    chains, so that one vector's operation need not wait for the last one's), then the lanes and the elements
    left, in order."""
    lanes = totals.shape[1]
    totals[:] = neutral
    width = 4 * lanes
    end = first + (last - first) // width * width
    for i in range(first, end, width):
        for chain in range(4):
            add_vector(operation, element, source, i + chain * lanes, totals[chain])
    total = neutral
    for chain in range(4):
        for j in range(lanes):
            total = as_type_of(combine(operation, total, totals[chain, j]), neutral)
    for i in range(end, last):
        total = as_type_of(combine(operation, total, load(element, source, i)), neutral)
    return total



if STREAM_STORES:
    # Rows of the outer axis written past the cache. Each step of a row is one intrinsic, so that its vectors are
    # the code's own and need no vectoriser (numba's will not emit streaming stores, and a streaming store of
    # values computed lane by lane stops the loop around it vectorising).

    def streamed_step(vector: bool):
        """An intrinsic step(operation, source, tally, target, q, exclusive): for the VECTOR_BYTES // itemsize
        elements from q on (one if not ``vector``), tally ⊕= source, and target = the tally after (before, if
        exclusive) through a streaming store, which needs target[q] on a boundary of its size. operation is "sum"
        or "product", a literal."""
        @intrinsic
        def step(typing_context, operation, source, tally, target, q, exclusive):
            if not isinstance(operation, numba.types.StringLiteral):
                return None
            dtype = source.dtype
            lanes = VECTOR_BYTES // (dtype.bitwidth // 8) if vector else 1
            floating = isinstance(dtype, numba.types.Float)
            instruction = {"sum": ("fadd", "add"), "product": ("fmul", "mul")}[operation.literal_value]

            def codegen(context, builder, signature, arguments):
                def pointer(array_type, array, value_type):
                    data = context.make_array(array_type)(context, builder, array).data
                    return builder.bitcast(builder.gep(data, [arguments[4]]), value_type.as_pointer())

                element = context.get_data_type(dtype)
                value_type = ir.VectorType(element, lanes) if vector else element
                source_at, tally_at, target_at = (pointer(signature.args[k], arguments[k], value_type)
                                                  for k in (1, 2, 3))
                value = builder.load(source_at, align=1)  # x may sit anywhere
                before = builder.load(tally_at, align=dtype.bitwidth // 8)
                after = getattr(builder, instruction[0 if floating else 1])(before, value)
                builder.store(after, tally_at, align=dtype.bitwidth // 8)
                # one float alone: movntss / movntsd, SSE4A's (elsewhere an ordinary store: see streams)
                stored = builder.store(builder.select(arguments[5], before, after), target_at,
                                       align=lanes * dtype.bitwidth // 8)
                stored.set_metadata("nontemporal", builder.module.add_metadata([ir.IntType(32)(1)]))
                return context.get_dummy_value()

            return numba.types.none(operation, source, tally, target, q, exclusive), codegen

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
    def scan_rows_streamed(x, out, operation, identity, reverse, exclusive, tally):
        """scan_rows_compiled for rows contiguous in x and out (not FLOAT16), rows after the first written with
        streaming stores: elements one at a time up to a VECTOR_BYTES boundary of out, vectors, and the elements
        left, in the direction of the walk. tally ({Q}) is as aligned as out's rows."""
        length, width = x.shape[1], x.shape[2]
        lanes = VECTOR_BYTES // x.itemsize
        step = -1 if reverse else 1
        for p in range(x.shape[0]):
            i = length - 1 if reverse else 0
            source, target = x[p, i], out[p, i]
            for q in range(width):
                tally[q] = source[q]  # the first row as it is (identity ⊕ x would turn -0.0 into +0.0)
                target[q] = identity if exclusive else source[q]
            for _ in range(length - 1):
                i += step
                source, target = x[p, i], out[p, i]
                head = min(width, (VECTOR_BYTES - target.ctypes.data % VECTOR_BYTES) % VECTOR_BYTES // x.itemsize)
                tail = head + (width - head) // lanes * lanes
                # the vectors in while loops: a range of step ``lanes`` made the loop slower (28 against 32 GB/s)
                if reverse:
                    for q in range(width - 1, tail - 1, -1):
                        stream_element(operation, source, tally, target, q, exclusive)
                    q = tail - lanes
                    while q >= head:
                        stream_vector(operation, source, tally, target, q, exclusive)
                        q -= lanes
                    for q in range(head - 1, -1, -1):
                        stream_element(operation, source, tally, target, q, exclusive)
                else:
                    for q in range(head):
                        stream_element(operation, source, tally, target, q, exclusive)
                    q = head
                    while q < tail:
                        stream_vector(operation, source, tally, target, q, exclusive)
                        q += lanes
                    for q in range(tail, width):
                        stream_element(operation, source, tally, target, q, exclusive)
        store_fence()



def streams(dtype: np.dtype) -> bool:
    """Whether the compiled engine writes rows of dtype with streaming stores, which it does only where every
    element of a row can go past the cache (a row whose few ordinary stores share lines with streaming ones ran
    slower than one of ordinary stores: FLOAT16, 8-15 against 18-19 GB/s). Single elements stream through movnti
    (integers) or, where the processor has SSE4A (AMD), movntss / movntsd (floats); never FLOAT16."""
    return STREAM_STORES and (dtype.kind in "iu" or dtype != np.float16 and SINGLE_FLOATS)


def half_instructions() -> bool:
    """Whether the processor numba compiles for converts FLOAT16 in instructions: F16C on x86, always on ARM64.
    Elsewhere LLVM would call conversion routines that numba does not link, so FLOAT16 takes the NumPy engine."""
    return "f16c" in target_features() or platform.machine().lower() in ("aarch64", "arm64")


HALF_INSTRUCTIONS = half_instructions()
SINGLE_FLOATS = "sse4a" in target_features()  # a float alone streams (movntss / movntsd)
