"""LLVM IR that moves bytes within vectors for the byte kernels (llvmlite's IR builder; no numba): B's rows
interleaved into groups of 4 consecutive k a 32-bit lane, as `vpdpbusd` and AMX's tiles take B, and back; and the
prefetch that the compiled loops ask for memory with."""

from __future__ import annotations

from llvmlite import ir


def prefetch(builder, at):
    """Fetches the cache line at the int64 address ``at`` into L1 for reading: a hint that never faults, wherever
    it points, for the strides of rows that the processor's own prefetchers miss."""
    int32 = ir.IntType(32)
    function = builder.module.declare_intrinsic(
        "llvm.prefetch.p0", fnty=ir.FunctionType(ir.VoidType(), [ir.PointerType(ir.IntType(8))] + [int32] * 3))
    builder.call(function, [builder.inttoptr(at, ir.PointerType(ir.IntType(8))), ir.Constant(int32, 0),
                            ir.Constant(int32, 3), ir.Constant(int32, 1)])


def splat(builder, value, lanes: int):
    """A vector of ``lanes`` copies of value."""
    int32, vector = ir.IntType(32), ir.VectorType(value.type, lanes)
    one = builder.insert_element(ir.Constant(vector, None), value, ir.Constant(int32, 0))
    return builder.shuffle_vector(one, ir.Constant(vector, None), ir.Constant(ir.VectorType(int32, lanes), [0] * lanes))


class ByteMoves:
    """LLVM IR of the byte kernels' moves of B within vectors of ``size`` bytes (16, 32 or 64)."""

    def __init__(self, builder, size: int):
        self.builder, self.size = builder, size
        self.lanes = ir.VectorType(ir.IntType(32), size // 4)
        self.bytes = ir.VectorType(ir.IntType(8), size)

    @staticmethod
    def constant(value, kind=ir.IntType(64)):
        return ir.Constant(kind, value)

    def address(self, array, offset):
        """The address ``offset`` bytes past a numba array's first element, as an int64."""
        return self.builder.add(self.builder.ptrtoint(array.data, ir.IntType(64)), offset)

    def stride(self, array, dimension: int):
        """A numba array's stride in bytes along ``dimension``."""
        return self.builder.extract_value(array.strides, dimension)

    def pointer(self, at, kind):
        """The int64 address ``at`` as a pointer to ``kind``."""
        return self.builder.inttoptr(at, kind.as_pointer())

    def splat(self, value, vector):
        """A vector of type ``vector``, value in every lane."""
        return splat(self.builder, value, vector.count)

    def shuffle(self, first, second, indices):
        return self.builder.shuffle_vector(first, second,
                                           ir.Constant(ir.VectorType(ir.IntType(32), len(indices)), indices))

    def interleaved(self, rows):
        """Rows k to k + 3 of B' ({size} bytes each) as 4 vectors of groups (4 consecutive k of a column in
        each 32-bit lane): unpack bytes, then words, within 128-bit lanes, so that column 16·L + 4·v + i is in
        lane i of 128-bit lane L of vector v."""
        size, builder = self.size, self.builder
        words = ir.VectorType(ir.IntType(16), size // 2)

        def unpack(width, high):
            """Indices of unpack{lo,hi} of elements ``width`` bytes wide, within 128-bit lanes."""
            per_lane, total = 16 // width, size // width
            half = per_lane // 2
            return [index for lane in range(size // 16)
                    for i in range(half * high, half * (high + 1))
                    for index in (lane * per_lane + i, total + lane * per_lane + i)]

        bytes01 = [self.shuffle(rows[0], rows[1], unpack(1, high)) for high in (0, 1)]
        bytes23 = [self.shuffle(rows[2], rows[3], unpack(1, high)) for high in (0, 1)]
        return [builder.bitcast(self.shuffle(builder.bitcast(bytes01[half], words),
                                             builder.bitcast(bytes23[half], words), unpack(2, high)), self.lanes)
                for half in (0, 1) for high in (0, 1)]

    def in_column_order(self, vectors, back=False):
        """The 4 vectors of ``interleaved``'s order (32-bit lanes) in column order (back: from it)."""
        n = self.lanes.count

        def interleaved_at(column):  # where interleaved's order keeps a column, in the 4 vectors end to end
            return (column % 16) // 4 * n + column // 16 * 4 + column % 4

        at = [interleaved_at(column) for column in range(4 * n)]
        if back:
            at = sorted(range(4 * n), key=at.__getitem__)
        first, second = (self.shuffle(vectors[i], vectors[i + 1], list(range(2 * n))) for i in (0, 2))
        return [self.shuffle(first, second, at[u * n:(u + 1) * n]) for u in range(4)]
