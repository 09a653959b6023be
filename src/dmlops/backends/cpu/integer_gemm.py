"""Exact integer GEMM of 8-bit matrices on x86 vector instructions (numba installed), its kernel picked from the
processor at run time.

Two kinds of kernel make the exact sums Σ_k (a − za)(b − zb) of a {M, K} and b {K, N}:

- 16-bit products (`vpmaddwd`: AVX2 on 256-bit vectors, AVX-512BW on 512-bit ones). The operands are shifted by
  their zero points into int16, ã = a − za and b̃ = b − zb (|ã|, |b̃| ≤ 255); `vpmaddwd` multiplies pairs of int16
  and adds neighbouring products into int32 lanes, 16 multiply-adds an instruction on 256 bits.
- byte products (`vpdpbusd`: AVX-512 VNNI on 512-bit vectors; AVX-VNNI, or AVX-512 VNNI with VL, on 256-bit ones).
  `vpdpbusd` multiplies unsigned bytes by signed bytes and adds four neighbouring products into each int32 lane,
  32 multiply-adds an instruction on 256 bits. The operands are moved into those ranges, A' = a + ca (ca = 128 for
  INT8, else 0: the bits xor 0x80) and B' = b − cb (cb = 128 for UINT8), and the zero points into corrections:

      Σ_k (a − za)(b − zb) = Σ_k (A' − α)(B' + β),   α = ca + za (per row), β = cb − zb (per column)
                           = Σ_k A'·B' + β·Σ_k A' − α·(Σ_k B' + K·β)

  with the row sums of A' made while packing A, the column sums of B' while packing B. The terms are added in
  int32 arithmetic, which wraps: the result is exact wherever the true sum fits in int32.

An int32 sum of products of magnitude ≤ 255² = 65 025 is exact for K up to 2^31 / 65 025 = 33 025 terms: a call
takes K up to INT32_CHUNK, and the caller adds longer products chunk by chunk.

Layout, as in BLAS kernels: A (ã or A') stays in rows {M, K}; B (b̃ or B') is packed in blocks of ``columns``,
each block K / group steps of ``columns`` × ``group`` consecutive k ({N / columns, K / group, columns, group};
a group is the 32 bits of one lane: 2 int16 or 4 bytes). A step of the kernel broadcasts one group of each of
``rows`` rows of A and multiplies it with the block's groups: lane j gains Σ over the group of A[i, k]·B[k, j], so
the sums build up with columns along the lanes, need no horizontal reduction, and are stored as vectors. 6 rows ×
2 vectors of 256 bits fill the 16 vector registers of AVX2 (12 sums, 2 columns, a broadcast, a product); 6 rows ×
4 vectors of 512 bits take 30 of AVX-512's 32.

LLVM does not reach `vpmaddwd` or `vpdpbusd` from such a loop written in plain code (it matches only dot products
whose loaded values each feed one product, and compiles a register-blocked kernel to `vpmulld`, 8 multiplies an
instruction), so the kernel's loop is written as LLVM IR (``block_products``), calling the instruction's intrinsic.

Cache blocking: ``rows`` rows × ``k_block`` of A stay in L1 while the kernel walks a panel of column blocks of B
(PANEL_BYTES), which stays in L2 while the kernel walks the rows; a block of B is k_block × its columns
(BLOCK_BYTES: on Zen 4, the 512-bit kernel ran at 246 GOPS a core on 64 KiB blocks, 455 on 32 KiB ones; on Zen 5,
at 1049, 0.96 of the 1089 that one core issuing nothing but `vpdpbusd` reaches).

Threads: a product is one compiled call a thread (``product_pieces``), whose stages of pieces the threads take by
tickets; each piece of rows is requantized into the output (``requantize_rows``) as soon as its sums are made,
while they are in cache. The compiled product takes the operands and the output as their bits, with the signs of
the operands as numbers (128 for INT8: a value is (its bits xor 128) − 128), so that one compiled variant serves
every type.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from ...types import ValidationError
from .compiled import KeptCalls, call
from .processor import amx_granted, target_features
from .pieces import CORES, NO_RING, run_on_cores, threads_for

try:
    import numba
    from llvmlite import ir
    from numba.core import types
    from numba.extending import intrinsic, overload

    from .atomics import call_begins, call_ends, count_up, spin_pause, state_of, take_ticket
    from . import amx
    from .byte_moves import ByteMoves
except ImportError:  # NumPy alone is enough; the float32 path is used instead
    numba = None

INT32_CHUNK = 32 * 1024  # 32 768 · 255² < 2^31: the int32 sums of a call are exact
BLOCK_BYTES = 32 << 10  # k_block × a block's columns of B, which the kernel streams from L1
PANEL_BYTES = 256 << 10  # a panel of B's column blocks, kept in L2
TILE_ROWS = 32  # rows of B packed across its column blocks at a time (a multiple of 4)
PARALLEL_PACKING = 1 << 20  # B of this many elements or more is packed on every core, however few rows A has
# A of at most this many rows is multiplied with B as it lies (``direct_products``), where the kernel can: packing B
# would be most of the call (a 16 × 256 × 64 product through the array API: 12 µs so, 15.6 packing B). Each 4 rows
# of A read and interleave B again, which costs more than packing it where B comes from memory, B of PARALLEL_PACKING
# elements or more: then at most DIRECT_ROWS_OF_LARGE_B rows (4096 × 4096 B on Zen 4: 8 rows 2.1 ms direct against
# 2.2 packed, 16 rows 3.8 against 2.2; benchmarks/RESULTS.md).
DIRECT_ROWS = 16
DIRECT_ROWS_OF_LARGE_B = 8
DIRECT_STEPS = 64  # steps of 4 rows of B a direct run takes across the column blocks
PREFETCH_ROWS = 32  # how far ahead the direct kernel prefetches B's rows (prefetches past the end are harmless)
DIRECT_STRIP = 4  # rows of A a direct call takes (4 × 4 sums, 4 column sums, 4 rows of B and 4 interleaved: 28 zmm)


@dataclass(frozen=True)
class Kernel:
    name: str
    needs: tuple  # sets of LLVM target features; the processor must have every feature of one of them
    instruction: str  # the LLVM intrinsic
    vector_bits: int
    bytes: bool  # uint8 × int8 in groups of 4 (vpdpbusd), else int16 × int16 in pairs (vpmaddwd)
    rows: int = 6
    vectors: int = 2  # column vectors of one kernel call
    direct: bool = False  # has ``direct_products``: B read as it lies, for A of at most DIRECT_ROWS rows
    tiles: bool = False  # AMX's tiles (``amx``)
    depth: int = 0  # what K is padded to in the packed operands (0: the group; a tile of A holds 64 bytes of K)

    @property
    def group(self) -> int:
        """Consecutive k in one 32-bit lane."""
        return 4 if self.bytes else 2

    @property
    def k_multiple(self) -> int:
        """What K is padded to in the packed operands."""
        return self.depth or self.group

    @property
    def columns(self) -> int:
        return self.vectors * self.vector_bits // 32

    @property
    def element(self):
        """The packed element types of A and of B."""
        return (np.uint8, np.int8) if self.bytes else (np.int16, np.int16)

    @property
    def k_block(self) -> int:
        return BLOCK_BYTES // (self.columns * np.dtype(self.element[1]).itemsize)

    @property
    def panel_blocks(self) -> int:
        return PANEL_BYTES // BLOCK_BYTES


# Fastest first.
KERNELS = (
    Kernel("amx", ({"amx-tile", "amx-int8", "avx512bw", "avx512vnni"},), "tdpb", 512, True, rows=32, vectors=1,
           tiles=True, depth=64),
    Kernel("avx512-vnni", ({"avx512vnni"},), "llvm.x86.avx512.vpdpbusd.512", 512, True, vectors=4, direct=True),
    Kernel("avx-vnni", ({"avxvnni"}, {"avx512vnni", "avx512vl"}), "llvm.x86.avx512.vpdpbusd.256", 256, True),
    Kernel("avx512bw", ({"avx512bw"},), "llvm.x86.avx512.pmaddw.d.512", 512, False, vectors=4),
    Kernel("avx2", ({"avx2"},), "llvm.x86.avx2.pmadd.wd", 256, False),
)
KERNELS_BY_NAME = {kernel.name: kernel for kernel in KERNELS}



def as_vector(value, length, dtype):
    """(Compiled code only.) A parameter given as a vector, a number (one value for every element) or None (0), as a
    new contiguous vector of ``length`` elements of ``dtype``: one compiled function then serves every form."""
    raise NotImplementedError("as_vector is called from compiled code only")


if numba is not None:
    @overload(as_vector, jit_options={"nogil": True})
    def as_vector_compiled(value, length, dtype):
        if isinstance(value, types.NoneType):
            return lambda value, length, dtype: np.zeros(length, dtype)
        if isinstance(value, types.Number):
            return lambda value, length, dtype: np.full(length, value, dtype)
        if isinstance(value, types.Array) and value.ndim == 1:
            return lambda value, length, dtype: value.astype(dtype)
        return None


def runnable_kernels() -> list[Kernel]:
    """The kernels whose instructions the processor numba compiles for has, fastest first."""
    if numba is None:
        return []
    features = target_features()
    return [kernel for kernel in KERNELS if any(needed <= features for needed in kernel.needs)
            and (not kernel.tiles or amx_granted())]


RUNNABLE = runnable_kernels()


def chosen_kernel() -> Kernel | None:
    """The fastest runnable kernel, or the one DMLOPS_CPU_KERNEL names ("float32": none, the float32 BLAS path)."""
    name = os.environ.get("DMLOPS_CPU_KERNEL")
    if not name:
        return RUNNABLE[0] if RUNNABLE else None
    return kernel_named(name)


def kernel_named(name: str) -> Kernel | None:
    """The runnable kernel of that name, or None for "float32"."""
    if name == "float32":
        return None
    for kernel in RUNNABLE:
        if kernel.name == name:
            return kernel
    raise ValidationError(f"CPU quantized matmul: kernel {name!r} cannot run here "
                          f"(runnable: {', '.join(kernel.name for kernel in RUNNABLE) or 'none'}, float32)")


KERNEL = chosen_kernel()
# A of at most this many rows is multiplied by the fastest kernel of vectors where KERNEL is AMX's and was not forced
# (DMLOPS_CPU_KERNEL): a tile takes 16 rows of A, and a block of sums 32.
FEWEST_TILE_ROWS = 16


def kernel_for_rows(m: int) -> Kernel | None:
    """KERNEL, or for A of at most FEWEST_TILE_ROWS rows, the fastest runnable kernel of vectors where KERNEL is
    AMX's and DMLOPS_CPU_KERNEL does not name it."""
    if KERNEL is None or not KERNEL.tiles or m > FEWEST_TILE_ROWS or os.environ.get("DMLOPS_CPU_KERNEL"):
        return KERNEL
    return next((kernel for kernel in RUNNABLE if not kernel.tiles), KERNEL)


def padded(size: int, multiple: int) -> int:
    return -(-size // multiple) * multiple


def scratch_layouts(kernel: Kernel, m: int, k: int, n: int):
    """(shape, dtype) of the scratch arrays of a call: A packed, B packed in blocks, the int32 sums, and the byte
    kernels' row sums of A' and column terms (Σ_k B' + K·β; every kernel has them, so that each takes the same
    arrays), padded for the kernel. Rows of A hold K padded
    to the kernel's multiple and one vector more, unread: rows a power of two of bytes apart would fall in the same
    L1 sets, and the rows the kernel reads at once would evict each other (AMX's 2048³ product ran at a third of its
    speed with its sums' rows 8 KiB apart)."""
    a_type, b_type = kernel.element
    length = padded(k, kernel.k_multiple)
    rows, columns = padded(m, kernel.rows), padded(n, kernel.columns)
    vector = kernel.vector_bits // 8 // np.dtype(a_type).itemsize
    # (AMX's tiles of sums are loaded and stored 16 rows at a time: those rows too a vector more apart)
    sums_row = columns + (vector // 4 if kernel.tiles else 0)
    return [((rows, length + vector), a_type), ((columns // kernel.columns, length // kernel.group, kernel.columns,
                                                 kernel.group), b_type), ((rows, sums_row), np.int32),
            ((rows,), np.int32), ((columns,), np.int32)]


def integer_product(kernel: Kernel, a, a_zero_point, b, b_zero_point, buffers, pieces: int = 1, finish=None,
                    calls=None, threads: int | None = None):
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
        for start in range(0, k, INT32_CHUNK):
            # (the chunks may be of other types than one another: not ``calls``)
            total += integer_product(kernel, a[:, start:start + INT32_CHUNK], a_zero_point,
                                     b[start:start + INT32_CHUNK], b_zero_point, buffers, pieces, threads=threads)
        if finish is not None:
            call(requantize_rows, total, np.zeros((0, 2)), np.zeros((2, 1)), *finish, 0, m)
        return total
    n = b.shape[1]
    layout = products_layout(kernel, a, b)
    counts = stage_counts(kernel, layout, m, k, n, pieces)
    # the operands and the output as bits, zero points as int32 vectors, and the operands and the requantization's
    # arrays typed as of any layout (their loops run as fast either way): a compiled variant of the whole product
    # takes a second or two to compile, and each type and layout of each argument would make another
    if finish is not None:
        finish = (*finish[:-1], finish[-1].view(np.uint8))
    arguments = (kernel.name, layout, np.zeros(1 + len(counts), np.int64), counts, *operand(a, a_zero_point, m),
                 *operand(b, b_zero_point, n), tuple(buffers), finish)
    entry = calls.entry(multiply_in_pieces, *arguments, NO_RING, True, any_layout=(4, 7, 11))  # a, b, finish
    run_on_cores(entry, arguments, threads_for(pieces) if threads is None else threads)
    return buffers[2][:m, :n]


def operand(x, zero_point, length: int):
    """(bits, sign, zero points) of an operand as ``product_pieces`` takes them: its bits (uint8), 128 where it is
    INT8 else 0, and its zero point vector (or None: 0) as a contiguous int32 vector of ``length``."""
    return (x.view(np.uint8), np.uint8(128 if x.dtype == np.int8 else 0),
            np.zeros(length, np.int32) if zero_point is None else np.ascontiguousarray(zero_point, np.int32))


def products_layout(kernel: Kernel, a, b) -> str:
    """``product_pieces``' layout: "direct" (``products_path``), else the path and the cut: by rows where A has at
    least as many rows as B has columns, else by columns (strips of B, each read once by all of A)."""
    path = products_path(kernel, a, b)
    if path == "direct":
        return path
    return f"{path} {'columns' if a.shape[0] < b.shape[1] else 'rows'}"


def stage_counts(kernel: Kernel, layout: str, m: int, k: int, n: int, pieces: int):
    """The pieces of each of ``product_pieces``' stages (int64), for a product cut into about ``pieces`` pieces
    (one: every stage in one piece). A B of PARALLEL_PACKING elements or more is packed in a piece a core; strips
    of B's columns are two a core at most (a piece's strip of B is read a part of each row at a time, and narrower
    strips were read slower: 128 × 4096 × 4096 on 2 Zen 4 cores, 6.9 ms in 4 pieces, 7.6 in 8, 9.2 in 64)."""
    def count(size, wanted, multiple=1):
        return max(1, min(-(-size // multiple), wanted))

    if layout == "direct":
        return np.array([1, count(n // 64, pieces), count(m, pieces)], np.int64)
    blocks = padded(n, kernel.columns) // kernel.columns
    if layout.endswith("columns"):
        return np.array([1, count(blocks, min(pieces, 2 * CORES)), count(m, pieces)], np.int64)
    b_pieces = count(blocks, CORES) if pieces > 1 and k * n >= PARALLEL_PACKING else 1
    return np.array([b_pieces, count(padded(m, kernel.rows), pieces, kernel.rows)], np.int64)


def products_path(kernel: Kernel, a, b) -> str:
    """How the sums of a {M, K} and b {K, N} are made: "direct" (the byte kernel reads B as it lies: A of at most
    DIRECT_ROWS rows, DIRECT_ROWS_OF_LARGE_B for a large B; B's rows contiguous, K a multiple of 4, N of 64), else
    "bytes" or "words" (B packed for the byte or the 16-bit kernel)."""
    (m, k), n = a.shape, b.shape[1]
    rows = DIRECT_ROWS if k * n < PARALLEL_PACKING else DIRECT_ROWS_OF_LARGE_B
    if kernel.direct and m <= rows and k % 4 == 0 and n % 64 == 0 and b.strides[1] == 1:
        return "direct"
    if kernel.tiles:
        return "tiles"
    return "bytes" if kernel.bytes else "words"


if numba is not None:
    compiled = numba.njit(nogil=True, cache=True)

    @intrinsic
    def direct_products(typing_context, kernel, rows, a, b, flip, sums, column_sums, row, column, start, steps,
                        accumulate):
        """sums[row:row + rows, column:column + 64] = (those sums, if accumulate, +) A'[row:row + rows, k] @ B'[k,
        column:column + 64] and column_sums[column:column + 64] = (the same) Σ_k B' there, k in [4·start,
        4·(start + steps)), for the 512-bit byte kernel named by ``kernel``; rows a literal "1" to "4", "+" after it
        where the column sums are made too (4 rows: 16 sums, 4 column sums, 4 rows of B and 4 interleaved take 28
        of the 32 zmm). B' = the bits of b xor flip, read from b's rows as they lie: each step loads 4 rows of 64
        bytes and interleaves them (unpack bytes, then words, within 128-bit lanes) into 4 vectors whose lanes hold
        4 consecutive k of one column, column 16·L + 4·v + i in lane i of 128-bit lane L of vector v; the sums are
        put back in column order once, at the end."""
        if not (isinstance(kernel, types.StringLiteral) and isinstance(rows, types.StringLiteral)):
            return None
        spec = KERNELS_BY_NAME[kernel.literal_value]
        count, with_column_sums = int(rows.literal_value[0]), rows.literal_value.endswith("+")
        signature = types.none(kernel, rows, a, b, flip, sums, column_sums, row, column, start, steps, accumulate)

        def codegen(context, builder, signature, arguments):
            int64, int32, int8 = ir.IntType(64), ir.IntType(32), ir.IntType(8)
            moves = ByteMoves(builder, spec.vector_bits // 8)
            size, lanes, byte_vector = moves.size, moves.lanes, moves.bytes
            a_array, b_array, sums_array, column_array = (
                context.make_array(kind)(context, builder, value)
                for kind, value in zip((signature.args[i] for i in (2, 3, 5, 6)), (arguments[i] for i in (2, 3, 5, 6))))
            flip, (row, column, start, steps, accumulate) = arguments[4], arguments[7:]
            constant, splat, in_column_order = moves.constant, moves.splat, moves.in_column_order

            def base(array):
                return builder.ptrtoint(array.data, int64)

            def stride(array):
                return builder.extract_value(array.strides, 0)

            def load(at, kind):
                return builder.load(builder.inttoptr(at, kind.as_pointer()), align=1)

            dot = builder.module.declare_intrinsic(spec.instruction, fnty=ir.FunctionType(lanes, [lanes] * 3))
            flips = splat(flip, byte_vector)
            ones = splat(constant(0x01010101, int32), lanes)
            a_rows = [builder.add(base(a_array), builder.mul(builder.add(row, constant(r)), stride(a_array)))
                      for r in range(count)]
            b_at = builder.add(base(b_array), column)
            b_stride = stride(b_array)
            targets = [builder.add(base(sums_array), builder.add(builder.mul(builder.add(row, constant(r)),
                                                                             stride(sums_array)),
                                                                 builder.mul(column, constant(4))))
                       for r in range(count)]
            if with_column_sums:
                targets.append(builder.add(base(column_array), builder.mul(column, constant(4))))
            initial = [[builder.select(accumulate, load(builder.add(target, constant(size * v)), lanes),
                                       ir.Constant(lanes, None)) for v in range(4)] for target in targets]
            initial = [in_column_order(vectors, back=True) for vectors in initial]
            entry, loop = builder.block, builder.append_basic_block("direct")
            done = builder.append_basic_block("direct_done")
            builder.branch(loop)

            builder.position_at_end(loop)
            step = builder.phi(int64)
            totals = [[builder.phi(lanes) for _ in range(4)] for _ in targets]  # the last: column sums, if made
            k = builder.mul(step, constant(4))
            prefetch = builder.module.declare_intrinsic(
                "llvm.prefetch.p0", fnty=ir.FunctionType(ir.VoidType(), [ir.PointerType(int8)] + [int32] * 3))
            for t in range(4):  # the rows PREFETCH_ROWS ahead: the processor's own prefetch misses strides of rows
                ahead = builder.add(b_at, builder.mul(builder.add(k, constant(PREFETCH_ROWS + t)), b_stride))
                builder.call(prefetch, [builder.inttoptr(ahead, ir.PointerType(int8)), constant(0, int32),
                                        constant(3, int32), constant(1, int32)])
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
            for r in range(len(targets)):
                for v, vector in enumerate(in_column_order(new_totals[r])):
                    at = builder.add(targets[r], constant(size * v))
                    builder.store(vector, builder.inttoptr(at, lanes.as_pointer()), align=4)
            return context.get_dummy_value()

        return signature, codegen

    @compiled
    def multiply_direct(kernel, a, b, flip, sums, column_sums, rows, first_block, last_block, steps):
        """direct_products for every row of A and the column blocks of 64 [first_block, last_block), by runs of
        DIRECT_STEPS steps across the blocks: each run reads a band of B's rows along them."""
        for start in range(0, steps, DIRECT_STEPS):
            run = min(DIRECT_STEPS, steps - start)
            for block in range(first_block, last_block):
                column = 64 * block
                if rows >= 4:  # the first strip makes B's column sums too
                    direct_products(kernel, "4+", a, b, flip, sums, column_sums, 0, column, start, run, start > 0)
                for row in range(4, rows - rows % 4, 4):
                    direct_products(kernel, "4", a, b, flip, sums, column_sums, row, column, start, run, start > 0)
                row = rows - rows % 4
                if rows % 4 == 1:
                    if rows < 4:
                        direct_products(kernel, "1+", a, b, flip, sums, column_sums, row, column, start, run, start > 0)
                    else:
                        direct_products(kernel, "1", a, b, flip, sums, column_sums, row, column, start, run, start > 0)
                elif rows % 4 == 2:
                    if rows < 4:
                        direct_products(kernel, "2+", a, b, flip, sums, column_sums, row, column, start, run, start > 0)
                    else:
                        direct_products(kernel, "2", a, b, flip, sums, column_sums, row, column, start, run, start > 0)
                elif rows % 4 == 3:
                    if rows < 4:
                        direct_products(kernel, "3+", a, b, flip, sums, column_sums, row, column, start, run, start > 0)
                    else:
                        direct_products(kernel, "3", a, b, flip, sums, column_sums, row, column, start, run, start > 0)

    @intrinsic
    def block_products(typing_context, kernel, a, b, sums, row, block, start, steps, accumulate):
        """sums[row:row + rows, block's columns] = (sums there, if accumulate, +) A[row:row + rows, start:start +
        group·steps] @ B[start:start + group·steps, block's columns], A and B packed (C-contiguous), for the kernel
        named by the literal ``kernel``."""
        if not isinstance(kernel, types.StringLiteral):
            return None
        spec = KERNELS_BY_NAME[kernel.literal_value]
        signature = types.none(kernel, a, b, sums, row, block, start, steps, accumulate)

        def codegen(context, builder, signature, arguments):
            int64, int32 = ir.IntType(64), ir.IntType(32)
            lanes = ir.VectorType(int32, spec.vector_bits // 32)
            vector_bytes = spec.vector_bits // 8
            a_size, b_size = (np.dtype(t).itemsize for t in spec.element)
            operand = ir.VectorType(ir.IntType(8 * b_size), vector_bytes // b_size)
            row, block, start, steps, accumulate = arguments[4:]
            a_array, b_array, sums_array = (context.make_array(kind)(context, builder, value)
                                            for kind, value in zip(signature.args[1:4], arguments[1:4]))

            def constant(value):
                return ir.Constant(int64, value)

            def address(array, first, index, offset):
                """Byte address of array[first + index] plus offset bytes."""
                row_bytes = builder.extract_value(array.strides, 0)
                at = builder.mul(builder.add(first, constant(index)), row_bytes)
                return builder.add(builder.ptrtoint(array.data, int64), builder.add(at, offset))

            def load(at, kind):
                return builder.load(builder.inttoptr(at, kind.as_pointer()), align=1)

            def splat(group):
                """The 32 bits of a group in each lane."""
                vector = builder.insert_element(ir.Constant(lanes, None), group, ir.Constant(int32, 0))
                return builder.shuffle_vector(vector, ir.Constant(lanes, None),
                                              ir.Constant(lanes, [0] * lanes.count))

            a_rows = [address(a_array, row, r, builder.mul(start, constant(a_size))) for r in range(spec.rows)]
            b_steps = address(b_array, block, 0, builder.mul(start, constant(b_size * spec.columns)))
            sums_at = [[address(sums_array, row, r, builder.add(builder.mul(block, constant(4 * spec.columns)),
                                                                constant(vector_bytes * v)))
                        for v in range(spec.vectors)] for r in range(spec.rows)]
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
            totals = [[builder.phi(lanes) for _ in range(spec.vectors)] for _ in range(spec.rows)]
            b_at = builder.add(b_steps, builder.mul(step, constant(4 * spec.columns)))
            columns = [load(builder.add(b_at, constant(vector_bytes * v)), operand) for v in range(spec.vectors)]
            new_totals = []
            for r in range(spec.rows):
                group = splat(load(builder.add(a_rows[r], builder.mul(step, constant(4))), int32))
                new_totals.append([multiply_add(totals[r][v], group, columns[v]) for v in range(spec.vectors)])
            next_step = builder.add(step, constant(1))
            step.add_incoming(constant(0), entry)
            step.add_incoming(next_step, loop)
            for r in range(spec.rows):
                for v in range(spec.vectors):
                    totals[r][v].add_incoming(initial[r][v], entry)
                    totals[r][v].add_incoming(new_totals[r][v], loop)
            builder.cbranch(builder.icmp_signed("<", next_step, steps), loop, done)

            builder.position_at_end(done)
            for r in range(spec.rows):
                for v in range(spec.vectors):
                    builder.store(new_totals[r][v], builder.inttoptr(sums_at[r][v], lanes.as_pointer()), align=4)
            return context.get_dummy_value()

        return signature, codegen

    @compiled
    def multiply_rows(kernel, a, b, sums, first_row, end_row, first_block, end_block, end, accumulate, rows, k_block,
                      group, panel_blocks):
        """sums[first_row:end_row, the column blocks [first_block, end_block)] = (those sums, if accumulate, +)
        A[first_row:end_row, :end] @ those blocks of B[:end] (int32), by runs of k_block and panels of panel_blocks
        column blocks; end a multiple of the group."""
        for k in range(0, end, k_block):
            steps = min(k_block, end - k) // group
            for panel in range(first_block, end_block, panel_blocks):
                for i in range(first_row, end_row, rows):
                    for block in range(panel, min(panel + panel_blocks, end_block)):
                        block_products(kernel, a, b, sums, i, block, k, steps, accumulate or k != 0)

    @compiled
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

    @compiled
    def pack_columns(b, sign, zero_point, pairs, first, last):
        """pairs[block, k // 2, j] = b̃[k, j] in the low 16 bits and b̃[k + 1, j] in the high 16 (b̃ = b − zero point,
        per column; j within the block; b as its bits and its sign as pack_rows takes them) for the column blocks
        [first, last), and 0 past the end of b. By tiles of
        TILE_ROWS rows of b, each walked block by block: the reads run along the tile's rows, which stay in cache, and
        the writes along each block (block by block over the whole of K, B was read at 8 GB/s; a tile's pairs
        across the blocks, at 2)."""
        length, columns = b.shape
        width_of_block = pairs.shape[2]
        for first_pair in range(0, (length + 1) // 2, TILE_ROWS // 2):
            for block in range(first, last):
                start = block * width_of_block
                width = min(width_of_block, columns - start)
                shift = zero_point[start:start + width] + np.int32(sign)
                for pair in range(first_pair, min(first_pair + TILE_ROWS // 2, (length + 1) // 2)):
                    k = 2 * pair
                    second = k + 1 < length
                    row, next_row = b[k, start:], b[k + 1 if second else k, start:]
                    target = pairs[block, pair]
                    for j in range(width):
                        low = (np.int32(row[j] ^ sign) - shift[j]) & 0xFFFF
                        target[j] = low | ((np.int32(next_row[j] ^ sign) - shift[j]) << 16 if second else 0)
                    target[width:] = 0

    @compiled
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
            int64, int32 = ir.IntType(64), ir.IntType(32)
            moves = ByteMoves(builder, spec.vector_bits // 8)
            lanes, count = moves.lanes, moves.lanes.count
            b_array, groups_array, terms_array = (context.make_array(signature.args[i])(context, builder, arguments[i])
                                                  for i in (1, 3, 4))
            flip, group, column = arguments[2], arguments[5], arguments[6]
            constant = moves.constant

            def address(array, offset):
                return builder.add(builder.ptrtoint(array.data, int64), offset)

            def stride(array, dimension):
                return builder.extract_value(array.strides, dimension)

            def pointer(at, kind):
                return builder.inttoptr(at, kind.as_pointer())

            flips = moves.splat(flip, moves.bytes)
            first_row = builder.mul(group, constant(4))
            rows = [builder.xor(builder.load(pointer(address(b_array, builder.add(
                builder.mul(builder.add(first_row, constant(t)), stride(b_array, 0)), column)), moves.bytes), align=1),
                flips) for t in range(4)]
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

    @compiled
    def pack_group(b, flip, groups, column_terms, group, block, start, width):
        """pack_four_rows for the columns [start, start + width) of a block, element by element (b's rows of any
        stride, or fewer than 4 rows left: bytes past b are 0), and 0 for the block's columns past b's. (b's value
        is int8(bits xor flip) + flip.)"""
        length = b.shape[0]
        first = 4 * group
        target, totals = groups[block, group], column_terms[start:start + width]
        flips = np.uint32(flip) * np.uint32(0x01010101)
        centre = np.int32(flip)
        if first + 4 <= length:
            row0, row1, row2, row3 = b[first, start:], b[first + 1, start:], b[first + 2, start:], b[first + 3, start:]
            for j in range(width):
                v0, v1, v2, v3 = row0[j], row1[j], row2[j], row3[j]
                totals[j] += (np.int32(np.int8(v0 ^ flip)) + np.int32(np.int8(v1 ^ flip)) + np.int32(np.int8(v2 ^ flip))
                              + np.int32(np.int8(v3 ^ flip)) + 4 * centre)
                target[j] = (np.uint32(np.uint8(v0)) | np.uint32(np.uint8(v1)) << 8
                             | np.uint32(np.uint8(v2)) << 16 | np.uint32(np.uint8(v3)) << 24) ^ flips
        else:
            for j in range(width):
                word = np.uint32(0)
                for k in range(first, length):
                    value = b[k, start + j]
                    totals[j] += np.int32(np.int8(value ^ flip)) + centre
                    word |= np.uint32(np.uint8(value) ^ flip) << (8 * (k - first))
                target[j] = word
        target[width:] = 0

    @compiled
    def pack_columns_bytes(kernel, vector, b, flip, zero_point, groups, column_terms, first, last):
        """groups[block, k // 4, j] = B'[k + t, j] in byte t (B' = the bits of b xor flip, read as int8; j within the
        block) for the column blocks [first, last), and 0 past the end of b; column_terms[j] = Σ_k B'[k, j] + K·β[j],
        which is Σ_k b[k, j] − K·zero point[j]. By tiles of rows, as pack_columns: where b's rows are contiguous,
        ``vector`` columns at a time (``pack_four_rows``, for the kernel named by the literal ``kernel``), then the
        columns and rows left one group of a block at a time (``pack_group``)."""
        length, columns = b.shape
        width_of_block = groups.shape[2]
        column_terms[first * width_of_block:last * width_of_block] = 0
        begin, end = first * width_of_block, min(columns, last * width_of_block)
        vector_end = begin + (end - begin) // vector * vector if b.strides[1] == 1 else begin
        for first_group in range(0, (length + 3) // 4, TILE_ROWS // 4):
            last_group = min(first_group + TILE_ROWS // 4, (length + 3) // 4)
            whole = min(last_group, length // 4)  # groups of 4 rows of b
            for group in range(first_group, whole):
                for column in range(begin, vector_end, vector):
                    pack_four_rows(kernel, b, flip, groups, column_terms, group, column)
            for block in range(first, last):
                start = block * width_of_block
                for group in range(first_group if start >= vector_end else whole, last_group):
                    pack_group(b, flip, groups, column_terms, group, block, start, min(width_of_block, columns - start))
        for j in range(first * width_of_block, min(columns, last * width_of_block)):
            column_terms[j] -= length * np.int32(zero_point[j])

    @compiled
    def correct_rows(sums, row_sums, alpha, beta, column_terms, first, last):
        """sums[i, j] += β[j]·Σ_k A'[i] − α[i]·column_terms[j] for rows [first, last), in wrapping int32."""
        for i in range(first, last):
            row_sum, shift = row_sums[i], alpha[i]
            row = sums[i]
            for j in range(beta.shape[0]):
                row[j] = np.int32(row[j] + beta[j] * row_sum - shift * column_terms[j])

    @compiled
    def requantize_rows(product, row_terms, column_terms, a_scale, b_scale, output_scale, zero_point, low, high,
                        out, first, last):
        """out[first:last] = requantize() of product + row_terms @ column_terms ({M, 2} @ {2, N}; no rows: no terms)
        there, element by element, in its order of operations: the multiplier (sa·sb)/so in float64, recomputed only
        where the row's scales change; rint rounds half to even."""
        columns = out.shape[1]
        multiplier = np.empty(columns)
        sums = np.empty(columns)
        for m in range(first, last):
            if m == first or a_scale[m] != a_scale[m - 1] or output_scale[m] != output_scale[m - 1]:
                sa, so = np.float64(a_scale[m]), np.float64(output_scale[m])
                for j in range(columns):
                    multiplier[j] = (sa * np.float64(b_scale[j])) / so
            if row_terms.shape[0] == 0:  # the sums as they are (a third faster than adding terms of 0)
                requantize_row(product[m], multiplier, zero_point[m], low, high, out[m])
                continue
            row_sum, row_shift = row_terms[m, 0], row_terms[m, 1]
            source = product[m]
            for j in range(columns):
                sums[j] = np.float64(source[j]) + (row_sum * column_terms[0, j] + row_shift * column_terms[1, j])
            requantize_row(sums, multiplier, zero_point[m], low, high, out[m])

    @compiled
    def requantize_row(sums, multiplier, zero, low, high, target):
        for j in range(target.shape[0]):
            value = np.rint(np.float64(sums[j]) * multiplier[j]) + zero
            value = value if value > low else low  # comparisons, not min/max, so that the loop is vectorised
            target[j] = np.int32(value if value < high else high)  # (the bits of an int8 into a uint8 view too)

    @compiled
    def piece_bounds(size, count, multiple, piece):
        """(first, last) of piece ``piece`` of ``pieces.cut(size, count, multiple)``, count no more than its ranges."""
        blocks = (size + multiple - 1) // multiple
        return multiple * (blocks * piece // count), min(size, multiple * (blocks * (piece + 1) // count))

    @compiled
    def next_piece(state, counts):
        """(stage, piece) of the next ticket (state[0]) among the stages' pieces (counts), once every piece of the
        stage before it has ended (state[1 + stage]: the pieces of that stage ended); (-1, 0) where none is left.
        Tickets are taken in order, so a thread that waits here waits for pieces that other threads are running."""
        ticket = take_ticket(state)
        for stage in range(counts.shape[0]):
            if ticket < counts[stage]:
                while stage > 0 and state_of(state, stage) < counts[stage - 1]:
                    spin_pause()
                return stage, ticket
            ticket -= counts[stage]
        return -1, 0

    @compiled
    def piece_ended(state, counts, stage, wait):
        """Count a piece of ``stage`` ended, and take the next: (stage, piece) as ``next_piece``. Where none is left
        and ``wait``, first wait until every piece of the last stage has ended (their outputs then seen here)."""
        count_up(state, 1 + stage)
        stage, piece = next_piece(state, counts)
        last = counts.shape[0] - 1
        while stage < 0 and wait and state_of(state, 1 + last) < counts[last]:
            spin_pause()
        return stage, piece

    def pack_a(layout, a, a_sign, a_zero, packed, row_sums, first, last):
        """(Compiled code only.) A's rows [first, last) packed for the kernel of ``layout`` (``product_pieces``), and
        their row sums made for the byte kernels."""
        raise NotImplementedError("pack_a is called from compiled code only")

    def pack_b(kernel, layout, b, b_sign, b_zero, groups, terms, first, last):
        """(Compiled code only.) B's column blocks [first, last) packed into ``groups`` (laid out as the packed B of
        ``scratch_layouts``), and their column terms (Σ_k b − K·zero point) made in ``terms`` for the byte
        kernels."""
        raise NotImplementedError("pack_b is called from compiled code only")

    def correct(layout, sums, row_sums, alpha, beta, terms, first, last):
        """(Compiled code only.) The sums of rows [first, last) corrected for the byte kernels' moves into range."""
        raise NotImplementedError("correct is called from compiled code only")

    def finish_rows(finish, sums, first, last):
        """(Compiled code only.) Rows [first, last) of the sums requantized into the output, where ``finish``
        gives requantize_rows' arguments (a_scale, b_scale, output_scale, zero_point, low, high, out); else
        nothing."""
        raise NotImplementedError("finish_rows is called from compiled code only")

    def literal(value):
        """A literal string's value, else None (numba first asks an overload with the arguments not as literals)."""
        return value.literal_value if isinstance(value, types.StringLiteral) else None

    @compiled
    def flip_of_b(b_sign):
        """The byte kernels' move of B into range (integer_product): its bits xor 128 where its type is UINT8."""
        return np.uint8(128 - np.int32(b_sign))

    @compiled
    def shifts(a_sign, a_zero, b_sign, b_zero):
        """(α, β) of the byte kernels, int32 vectors: α = ca + za (per row of A), β = cb − zb (per column of B), ca
        and cb their moves into range."""
        return a_zero + np.int32(a_sign), np.int32(flip_of_b(b_sign)) - b_zero

    @compiled
    def padded_sizes(a, rows, group):
        """(A's rows padded to the kernel's rows, K padded to its group)."""
        m, k = a.shape
        return (m + rows - 1) // rows * rows, (k + group - 1) // group * group

    @overload(pack_a, jit_options={"nogil": True})
    def pack_a_compiled(layout, a, a_sign, a_zero, packed, row_sums, first, last):
        if literal(layout) is None:
            return None
        if literal(layout).startswith("words"):
            return lambda layout, a, a_sign, a_zero, packed, row_sums, first, last: pack_rows(a, a_sign, a_zero,
                                                                                              packed, first, last)
        # (the byte kernels' move of A into range is its sign's: A' = its bits xor 128 where it is INT8)
        return lambda layout, a, a_sign, a_zero, packed, row_sums, first, last: pack_rows_bytes(a, a_sign, packed,
                                                                                                row_sums, first, last)

    @overload(pack_b, jit_options={"nogil": True})
    def pack_b_compiled(kernel, layout, b, b_sign, b_zero, groups, terms, first, last):
        if literal(layout) is None or literal(kernel) is None:
            return None
        if literal(layout).startswith("words"):
            def pack_words(kernel, layout, b, b_sign, b_zero, groups, terms, first, last):
                pack_columns(b, b_sign, b_zero, groups.view(np.int32).reshape(groups.shape[:3]), first, last)
            return pack_words
        vector = KERNELS_BY_NAME[kernel.literal_value].vector_bits // 8

        def pack_bytes(kernel, layout, b, b_sign, b_zero, groups, terms, first, last):
            pack_columns_bytes(kernel, vector, b, flip_of_b(b_sign), b_zero, groups.view(np.int32).reshape(
                groups.shape[:3]), terms, first, last)
        return pack_bytes

    def column_terms(layout, buffers):
        """(Compiled code only.) The byte kernels' column terms in ``buffers`` (an empty vector for the others)."""
        raise NotImplementedError("column_terms is called from compiled code only")

    @overload(column_terms, jit_options={"nogil": True})
    def column_terms_compiled(layout, buffers):
        if literal(layout) is None:
            return None
        if literal(layout).startswith("words"):
            return lambda layout, buffers: np.zeros(0, np.int32)
        return lambda layout, buffers: buffers[4]

    @overload(correct, jit_options={"nogil": True})
    def correct_compiled(layout, sums, row_sums, alpha, beta, terms, first, last):
        if literal(layout) is None:
            return None
        if literal(layout).startswith("words"):  # 16-bit products of operands shifted by their zero points
            return lambda layout, sums, row_sums, alpha, beta, terms, first, last: None
        return lambda layout, sums, row_sums, alpha, beta, terms, first, last: correct_rows(sums, row_sums, alpha,
                                                                                            beta, terms, first, last)

    def piece_output(finish, sums, own_sums, first):
        """(Compiled code only.) (where a piece of rows from ``first`` on puts its sums, what finishes them): where
        ``finish`` is None, the call's sums from that row on (they are its output) and None; else ``own_sums`` (the
        thread's own) and finish's arrays from that row on."""
        raise NotImplementedError("piece_output is called from compiled code only")

    @overload(piece_output, jit_options={"nogil": True})
    def piece_output_compiled(finish, sums, own_sums, first):
        if isinstance(finish, types.NoneType):
            return lambda finish, sums, own_sums, first: (sums[first:], None)

        def rows_from(finish, sums, own_sums, first):
            a_scale, b_scale, output_scale, zero_point, low, high, out = finish
            return own_sums, (a_scale[first:], b_scale, output_scale[first:], zero_point[first:], low, high,
                              out[first:])
        return rows_from

    @overload(finish_rows, jit_options={"nogil": True})
    def finish_rows_compiled(finish, sums, first, last):
        if isinstance(finish, types.NoneType):
            return lambda finish, sums, first, last: None

        def requantize(finish, sums, first, last):
            a_scale, b_scale, output_scale, zero_point, low, high, out = finish
            requantize_rows(sums, np.zeros((0, 2)), np.zeros((2, 1)), a_scale, b_scale, output_scale, zero_point,
                            low, high, out, first, last)
        return requantize

    @compiled
    def multiply_strip(kernel, layout, a, b, b_sign, b_zero, buffers, first, last, rows, k_block, group, panel_blocks):
        """The sums of every row of A (packed) and the column blocks [first, last) of B, a run of k_block rows of B
        at a time: each run packed into a panel of this call's own, which stays in L2 for the kernel and is never
        written back to memory, and its column terms added up (``product_pieces``' columns cut)."""
        k, n, columns = a.shape[1], b.shape[1], buffers[1].shape[2]
        padded_rows, length = padded_sizes(a, rows, group)
        start, stop = first * columns, min(n, last * columns)
        panel = np.empty_like(buffers[1][first:last, :min(k_block, length) // group])
        terms, run_terms = column_terms(layout, buffers), np.empty((last - first) * columns, np.int32)
        for begin in range(0, length, k_block):
            end = min(begin + k_block, length)
            pack_b(kernel, layout, b[begin:min(end, k), start:stop], b_sign, b_zero[start:stop], panel, run_terms, 0,
                   last - first)
            for j in range(run_terms.shape[0] if terms.shape[0] > 0 else 0):  # (the byte kernels' terms)
                terms[start + j] = run_terms[j] if begin == 0 else terms[start + j] + run_terms[j]
            multiply_rows(kernel, buffers[0][:, begin:], panel, buffers[2][:, start:], 0, padded_rows, 0,
                          last - first, end - begin, begin > 0, rows, k_block, group, panel_blocks)

    def product_pieces(kernel, layout, state, counts, a, a_sign, a_zero, b, b_sign, b_zero, buffers, finish, wait):
        """(Compiled code only.) integer_product's work, taken piece by piece by every thread that runs this at
        once (``next_piece``); the call with ``wait`` returns once every piece has ended. ``kernel`` and ``layout``
        literal strings: the layout is "direct", or the path and the cut, as "bytes rows" (``products_layout``).
        The stages and their pieces (``counts``):

        - rows: B's column blocks packed; then pieces of rows, each packs its rows of A, makes their sums against
          every block, corrects them and finishes them (``finish_rows``) while they are in cache;
        - columns: A packed; then strips of B's column blocks, each packed and multiplied by every row of A a run
          of k_block rows at a time, the run's packing still in L2 (B is read once); then pieces of rows corrected
          and finished;
        - direct: A packed; then column blocks of 64 multiplied with B as it lies, their column terms made; then
          pieces of rows corrected and finished.

        a and b as their bits (uint8), each with its sign (128 where its type is INT8, else 0) and its zero points
        as an int32 vector: one compiled variant serves every type. ``buffers`` the tuple of ``scratch_layouts``;
        ``state`` int64 {1 + stages} of zeros, the same array for every thread of one call."""
        raise NotImplementedError("product_pieces is called from compiled code only")

    @overload(product_pieces, jit_options={"nogil": True})
    def product_pieces_compiled(kernel, layout, state, counts, a, a_sign, a_zero, b, b_sign, b_zero, buffers, finish,
                                wait):
        if literal(kernel) is None or literal(layout) is None:
            return None
        spec = KERNELS_BY_NAME[kernel.literal_value]
        rows, group, k_block, panel_blocks = spec.rows, spec.group, spec.k_block, spec.panel_blocks

        def by_rows(kernel, layout, state, counts, a, a_sign, a_zero, b, b_sign, b_zero, buffers, finish, wait):
            m, blocks = a.shape[0], buffers[1].shape[0]
            padded_rows, length = padded_sizes(a, rows, group)
            alpha, beta = shifts(a_sign, a_zero, b_sign, b_zero)  # (the byte kernels')
            # a piece's packed rows of A, row sums and (where it finishes them) sums in memory of this thread's own:
            # in the call's scratch, the rows a core wrote were taken by the other in the next call, and moved
            # between the cores' caches (512³ on 2 Zen 5 cores: 1.15 times one core's speed so, 1.4 with these)
            most = rows * ((padded_rows // rows + counts[1] - 1) // counts[1])  # the rows of the largest piece
            own_a = np.empty((most, buffers[0].shape[1]), buffers[0].dtype)
            own_sums, own_row_sums = np.empty((most, buffers[2].shape[1]), np.int32), np.empty(most, np.int32)
            stage, piece = next_piece(state, counts)
            while stage >= 0:
                if stage == 0:
                    first, last = piece_bounds(blocks, counts[0], 1, piece)
                    pack_b(kernel, layout, b, b_sign, b_zero, buffers[1], column_terms(layout, buffers), first, last)
                else:
                    first, last = piece_bounds(padded_rows, counts[1], rows, piece)
                    sums, finish_piece = piece_output(finish, buffers[2], own_sums, first)
                    pack_a(layout, a[first:], a_sign, a_zero[first:], own_a, own_row_sums, 0, last - first)
                    multiply_rows(kernel, own_a, buffers[1], sums, 0, last - first, 0, blocks, length, False, rows,
                                  k_block, group, panel_blocks)
                    correct(layout, sums, own_row_sums, alpha[first:], beta, buffers[4], 0, min(last, m) - first)
                    finish_rows(finish_piece, sums, 0, min(last, m) - first)
                stage, piece = piece_ended(state, counts, stage, wait)

        def by_columns(kernel, layout, state, counts, a, a_sign, a_zero, b, b_sign, b_zero, buffers, finish, wait):
            m, blocks = a.shape[0], buffers[1].shape[0]
            padded_rows = padded_sizes(a, rows, group)[0]
            alpha, beta = shifts(a_sign, a_zero, b_sign, b_zero)
            stage, piece = next_piece(state, counts)
            while stage >= 0:
                if stage == 0:
                    pack_a(layout, a, a_sign, a_zero, buffers[0], buffers[3], 0, padded_rows)
                elif stage == 1:
                    first, last = piece_bounds(blocks, counts[1], 1, piece)
                    multiply_strip(kernel, layout, a, b, b_sign, b_zero, buffers, first, last, rows, k_block, group,
                                   panel_blocks)
                else:
                    first, last = piece_bounds(m, counts[2], 1, piece)
                    correct(layout, buffers[2], buffers[3], alpha, beta, buffers[4], first, last)
                    finish_rows(finish, buffers[2], first, last)
                stage, piece = piece_ended(state, counts, stage, wait)

        def direct(kernel, layout, state, counts, a, a_sign, a_zero, b, b_sign, b_zero, buffers, finish, wait):
            (m, k), n = a.shape, b.shape[1]
            a_packed, sums, row_sums, column_terms = buffers[0], buffers[2], buffers[3], buffers[4]
            b_flip = flip_of_b(b_sign)
            alpha, beta = shifts(a_sign, a_zero, b_sign, b_zero)
            stage, piece = next_piece(state, counts)
            while stage >= 0:
                if stage == 0:
                    pack_rows_bytes(a, a_sign, a_packed, row_sums, 0, m)
                elif stage == 1:
                    first, last = piece_bounds(n // 64, counts[1], 1, piece)
                    multiply_direct(kernel, a_packed, b, b_flip, sums, column_terms, m, first, last, k // 4)
                    for j in range(64 * first, 64 * last):
                        column_terms[j] += beta[j] * np.int32(k)
                else:
                    first, last = piece_bounds(m, counts[2], 1, piece)
                    correct_rows(sums, row_sums, alpha, beta, column_terms, first, last)
                    finish_rows(finish, sums, first, last)
                stage, piece = piece_ended(state, counts, stage, wait)

        def tiles_by_rows(kernel, layout, state, counts, a, a_sign, a_zero, b, b_sign, b_zero, buffers, finish,
                          wait):
            m, blocks = a.shape[0], buffers[1].shape[0]
            padded_rows, length = padded_sizes(a, rows, amx.DEPTH)
            most = rows * ((padded_rows // rows + counts[1] - 1) // counts[1])  # (as by_rows)
            own_a = np.empty((most, buffers[0].shape[1]), np.uint8)
            own_sums, own_row_sums = np.empty((most, buffers[2].shape[1]), np.int32), np.empty(most, np.int32)
            packed_b, terms = buffers[1].view(np.uint8), buffers[4]
            amx.start_tiles()
            stage, piece = next_piece(state, counts)
            while stage >= 0:
                if stage == 0:
                    first, last = piece_bounds(blocks, counts[0], 1, piece)
                    amx.pack_b(b, b_sign, b_zero, packed_b, terms, first, last)
                else:
                    first, last = piece_bounds(padded_rows, counts[1], rows, piece)
                    sums, finish_piece = piece_output(finish, buffers[2], own_sums, first)
                    amx.pack_a(a[first:], a_sign, own_a, own_row_sums, 0, last - first)
                    amx.multiply(a_sign, b_sign, own_a, packed_b, sums, 0, last - first, 0, blocks, length, False)
                    correct_rows(sums, own_row_sums, a_zero[first:], -b_zero, terms, 0, min(last, m) - first)
                    finish_rows(finish_piece, sums, 0, min(last, m) - first)
                stage, piece = piece_ended(state, counts, stage, wait)
            amx.release_tiles()

        def tiles_by_columns(kernel, layout, state, counts, a, a_sign, a_zero, b, b_sign, b_zero, buffers, finish,
                             wait):
            m, blocks = a.shape[0], buffers[1].shape[0]
            padded_rows, length = padded_sizes(a, rows, amx.DEPTH)
            packed_a, sums, row_sums, terms = buffers[0].view(np.uint8), buffers[2], buffers[3], buffers[4]
            amx.start_tiles()
            stage, piece = next_piece(state, counts)
            while stage >= 0:
                if stage == 0:
                    amx.pack_a(a, a_sign, packed_a, row_sums, 0, padded_rows)
                elif stage == 1:
                    first, last = piece_bounds(blocks, counts[1], 1, piece)
                    amx.multiply_strip(a_sign, b_sign, packed_a, b, b_zero, sums, terms, first, last, padded_rows,
                                       length)
                else:
                    first, last = piece_bounds(m, counts[2], 1, piece)
                    correct_rows(sums, row_sums, a_zero, -b_zero, terms, first, last)
                    finish_rows(finish, sums, first, last)
                stage, piece = piece_ended(state, counts, stage, wait)
            amx.release_tiles()

        if spec.tiles:
            return {"rows": tiles_by_rows, "columns": tiles_by_columns}[layout.literal_value.split()[-1]]
        return {"direct": direct, "rows": by_rows, "columns": by_columns}[layout.literal_value.split()[-1]]

    @compiled
    def multiply_in_pieces(kernel, layout, state, counts, a, a_sign, a_zero, b, b_sign, b_zero, buffers, finish,
                           doorbell, wait):
        """product_pieces, called from Python (``pieces.run_on_cores``: it begins and ends as ``atomics.call_begins``
        and ``call_ends`` say)."""
        call_begins(doorbell, wait)
        product_pieces(kernel, layout, state, counts, a, a_sign, a_zero, b, b_sign, b_zero, buffers, finish, wait)
        call_ends(doorbell, wait)
