"""The integer GEMM's compiled driver (numba): a product's stages of pieces, taken by every thread that runs it by
tickets, each piece handed to the kernels of its layout (``avx2``, ``vnni``, ``amx``), its sums corrected for the
zero points and requantized (``requantization``) while they are in cache. ``integer_gemm`` prepares its arguments.
"""

from __future__ import annotations

import numpy as np
from numba.core import types
from numba.extending import intrinsic, overload

from . import amx
from .atomics import call_begins, call_ends, count_up, spin_wait, state_of, take_ticket
from .avx2 import multiply_rows, pack_columns, pack_rows
from .byte_packing import pack_columns_bytes
from .jit import CALLEE_OPTIONS, callee, compiled, inlined, new_array
from .kernels import KERNELS_BY_NAME
from .requantization import requantize_sums
from .vnni import multiply_direct, pack_rows_bytes

# Terms summed in int32 at a time by ``few_sums``: 32 768 · 255² < 2^31 (integer_gemm.INT32_CHUNK)
FEW_SUMS_CHUNK = 32 * 1024


@compiled
def few_sums(a, a_sign, a_zero, b, b_sign, b_zero, total):
    """total[i, j] = Σ_k (a − za)(b − zb) exactly, for products of few outputs and long K: blocks of FEW_SUMS_CHUNK
    terms summed in int32 (vectorised by LLVM), the blocks in float64, which holds every sum of K ≤ 2^32 products of
    magnitude ≤ 255² (< 2^48). a and b as their bits with their signs, the zero points int32 vectors, as
    ``product_pieces`` takes them."""
    m, k = a.shape
    a_centre, b_centre = np.int32(a_sign), np.int32(b_sign)
    for i in range(m):
        a_shift = a_centre + a_zero[i]
        for j in range(b.shape[1]):
            b_shift = b_centre + b_zero[j]
            exact = 0.0
            for start in range(0, k, FEW_SUMS_CHUNK):
                block = np.int32(0)
                for t in range(start, min(start + FEW_SUMS_CHUNK, k)):
                    block += (np.int32(a[i, t] ^ a_sign) - a_shift) * (np.int32(b[t, j] ^ b_sign) - b_shift)
                exact += block
            total[i, j] = exact


@callee
def correct_rows(sums, row_sums, a_zero, a_shift, b_zero, b_shift, column_terms, first, last):
    """sums[i, j] += β[j]·Σ_k A'[i] − α[i]·column_terms[j] for rows [first, last), in wrapping int32: α = a_zero
    + a_shift (per row of A), β = b_shift − b_zero (per column of B); the byte kernels' shifts are their operands'
    moves into range (``vnni``). Terms that are 0 are left out: where every β is 0 (B without zero points on the
    tiles, say) and where α is 0 (int8 × int8 without zero points: nothing is added)."""
    columns = b_zero.shape[0]
    some_beta = False
    for j in range(columns):
        some_beta |= b_zero[j] != b_shift
    for i in range(first, last):
        row_sum, alpha = row_sums[i], a_zero[i] + a_shift
        row = sums[i]
        if some_beta:
            for j in range(columns):
                row[j] = np.int32(row[j] + (b_shift - b_zero[j]) * row_sum - alpha * column_terms[j])
        elif alpha != 0:
            for j in range(columns):
                row[j] = np.int32(row[j] - alpha * column_terms[j])


@inlined
def piece_bounds(size, count, multiple, piece):
    """(first, last) of piece ``piece`` of ``pieces.cut(size, count, multiple)``, count no more than its ranges."""
    blocks = (size + multiple - 1) // multiple
    return multiple * (blocks * piece // count), min(size, multiple * (blocks * (piece + 1) // count))


@inlined
def next_piece(state, counts):
    """(stage, piece) of the next ticket (state[0]) among the stages' pieces (counts), once every piece of the
    stage before it has ended (state[1 + stage]: the pieces of that stage ended); (-1, 0) where none is left.
    Tickets are taken in order, so a thread that waits here waits for pieces that other threads are running."""
    ticket = take_ticket(state)
    for stage in range(counts.shape[0]):
        if ticket < counts[stage]:
            steps = 0
            while stage > 0 and state_of(state, stage) < counts[stage - 1]:
                steps = spin_wait(steps)
            return stage, ticket
        ticket -= counts[stage]
    return -1, 0


@inlined
def take_piece(state, counts, ended, wait):
    """(stage, piece) as ``next_piece``, the piece that this thread ran before counted ended first (``ended``: its
    stage; none where it is negative). Where none is left and ``wait``, first wait until every piece of the last
    stage has ended (their outputs then seen here): the pool's threads may have taken every ticket, the first
    included, while this thread was not running. (Taken in one place a loop: an inlined helper is read again, typed
    and lowered at each call site.)"""
    if ended >= 0:
        count_up(state, 1 + ended)
    stage, piece = next_piece(state, counts)
    last = counts.shape[0] - 1
    steps = 0
    while stage < 0 and wait and state_of(state, 1 + last) < counts[last]:
        steps = spin_wait(steps)
    return stage, piece


def pack_a(layout, a, a_sign, a_flip, a_zero, packed, row_sums, first, last):
    """(Compiled code only.) A's rows [first, last) packed for the kernel of ``layout`` (``product_pieces``), and
    their row sums made for the byte and tile kernels; the tiles' A with its bits xor ``a_flip``
    (``flip_of_a``)."""
    raise NotImplementedError("pack_a is called from compiled code only")


def pack_b(kernel, layout, b, b_sign, b_zero, groups, terms, first, last):
    """(Compiled code only.) B's column blocks [first, last) packed into ``groups`` (laid out as the packed B of
    ``scratch_layouts``), and their column terms (Σ_k b − K·zero point) made in ``terms`` for the byte and tile
    kernels."""
    raise NotImplementedError("pack_b is called from compiled code only")


def correct(layout, sums, row_sums, a_sign, a_flip, a_zero, b_sign, b_zero, terms, first, last):
    """(Compiled code only.) The sums of rows [first, last) corrected for the zero points and the byte kernels'
    moves into range (the tiles' flip of A: ``flip_of_a``), where the kernel of ``layout`` left them out."""
    raise NotImplementedError("correct is called from compiled code only")


def multiply(kernel, a, a_sign, b, b_sign, sums, first_row, end_row, first_block, end_block, length, accumulate):
    """(Compiled code only.) sums[first_row:end_row, the column blocks [first_block, end_block)] = (those sums, if
    accumulate, +) A[those rows, :length] @ those blocks of B[:length], A and B packed for the kernel (its rows
    padded: the kernels may make the padding's sums past end_row too); the signs read by AMX's tiles alone
    (``amx.multiply``), the other kernels' operands moved into range as they are packed."""
    raise NotImplementedError("multiply is called from compiled code only")


def literal(value):
    """A literal string's value, else None (numba first asks an overload with the arguments not as literals)."""
    return value.literal_value if isinstance(value, types.StringLiteral) else None


@inlined
def flip_of_b(b_sign):
    """The byte kernels' move of B into range (integer_product): its bits xor 128 where its type is UINT8."""
    return np.uint8(128 - np.int32(b_sign))


@inlined
def padded_sizes(a, rows, k_multiple):
    """(A's rows padded to the kernel's rows, K padded to its multiple: ``kernels.Kernel.k_multiple``)."""
    m, k = a.shape
    return (m + rows - 1) // rows * rows, (k + k_multiple - 1) // k_multiple * k_multiple


@overload(pack_a, jit_options=CALLEE_OPTIONS)
def pack_a_compiled(layout, a, a_sign, a_flip, a_zero, packed, row_sums, first, last):
    if literal(layout) is None:
        return None
    if literal(layout).startswith("words"):
        return lambda layout, a, a_sign, a_flip, a_zero, packed, row_sums, first, last: pack_rows(
            a, a_sign, a_zero, packed, first, last)
    if literal(layout).startswith("tiles"):  # (the tiles read A as its type, or flipped: ``flip_of_a``)
        return lambda layout, a, a_sign, a_flip, a_zero, packed, row_sums, first, last: amx.pack_a(
            a, a_sign, a_flip, packed, row_sums, first, last)
    # (the byte kernels' move of A into range is its sign's: A' = its bits xor 128 where it is INT8)
    return lambda layout, a, a_sign, a_flip, a_zero, packed, row_sums, first, last: pack_rows_bytes(
        a, a_sign, packed, row_sums, first, last)


def flip_of_a(layout, a_sign, a_zero):
    """(Compiled code only.) 128 where the tiles take A flipped into INT8 (its bits xor 128: a − 128), else 0: a
    UINT8 A whose zero point is 128 in every row, so that α = zero point − 128 is 0 and no correction is made (a
    pass over the sums: 5 % of a 512³ product)."""
    raise NotImplementedError("flip_of_a is called from compiled code only")


@overload(flip_of_a, jit_options=CALLEE_OPTIONS)
def flip_of_a_compiled(layout, a_sign, a_zero):
    if literal(layout) is None:
        return None
    if not literal(layout).startswith("tiles"):
        return lambda layout, a_sign, a_zero: np.uint8(0)

    def flip(layout, a_sign, a_zero):
        if a_sign != 0:
            return np.uint8(0)
        for i in range(a_zero.shape[0]):
            if a_zero[i] != 128:
                return np.uint8(0)
        return np.uint8(128)
    return flip


@overload(pack_b, jit_options=CALLEE_OPTIONS)
def pack_b_compiled(kernel, layout, b, b_sign, b_zero, groups, terms, first, last):
    if literal(layout) is None or literal(kernel) is None:
        return None
    down_columns = down_columns_of(layout)
    vector = KERNELS_BY_NAME[kernel.literal_value].vector_bits // 8
    if literal(layout).startswith("words"):
        return lambda kernel, layout, b, b_sign, b_zero, groups, terms, first, last: pack_columns(
            b, b_sign, b_zero, groups, first, last, down_columns)
    return lambda kernel, layout, b, b_sign, b_zero, groups, terms, first, last: pack_columns_bytes(
        kernel, vector, b, flip_of_b(b_sign), b_zero, groups, terms, first, last, down_columns)


def down_columns_of(layout):
    """The packers' ``down_columns`` for a layout: True where B's columns are contiguous (" transposed"), else None,
    so that the packing down columns is compiled only into the products that take it (a first product compiled
    0.2-0.4 CPU-s longer with it)."""
    return True if " transposed" in literal(layout) else None


def column_terms(layout, buffers):
    """(Compiled code only.) The byte kernels' column terms in ``buffers`` (an empty vector for the others)."""
    raise NotImplementedError("column_terms is called from compiled code only")


@overload(column_terms, jit_options=CALLEE_OPTIONS)
def column_terms_compiled(layout, buffers):
    if literal(layout) is None:
        return None
    if literal(layout).startswith("words"):
        return lambda layout, buffers: np.zeros(0, np.int32)
    return lambda layout, buffers: buffers[4]


@overload(correct, jit_options=CALLEE_OPTIONS)
def correct_compiled(layout, sums, row_sums, a_sign, a_flip, a_zero, b_sign, b_zero, terms, first, last):
    if literal(layout) is None:
        return None
    if literal(layout).startswith("words"):  # 16-bit products of operands shifted by their zero points
        return lambda layout, sums, row_sums, a_sign, a_flip, a_zero, b_sign, b_zero, terms, first, last: None
    if literal(layout).startswith("tiles"):  # (products of the operands as their types, A maybe flipped: a − 128)
        return lambda layout, sums, row_sums, a_sign, a_flip, a_zero, b_sign, b_zero, terms, first, last: \
            correct_rows(sums, row_sums, a_zero, -np.int32(a_flip), b_zero, 0, terms, first, last)

    def correct_bytes(layout, sums, row_sums, a_sign, a_flip, a_zero, b_sign, b_zero, terms, first, last):
        correct_rows(sums, row_sums, a_zero, np.int32(a_sign), b_zero, np.int32(flip_of_b(b_sign)), terms, first,
                     last)
    return correct_bytes


@overload(multiply, jit_options=CALLEE_OPTIONS)
def multiply_compiled(kernel, a, a_sign, b, b_sign, sums, first_row, end_row, first_block, end_block, length,
                      accumulate):
    if literal(kernel) is None:
        return None
    spec = KERNELS_BY_NAME[kernel.literal_value]
    if spec.tiles:
        def on_tiles(kernel, a, a_sign, b, b_sign, sums, first_row, end_row, first_block, end_block, length,
                     accumulate):
            amx.multiply(a, a_sign, b, b_sign, sums, first_row, end_row, first_block, end_block, length, accumulate)
        return on_tiles
    rows, columns, k_block, group, panel_blocks = spec.rows, spec.columns, spec.k_block, spec.group, spec.panel_blocks

    def in_vectors(kernel, a, a_sign, b, b_sign, sums, first_row, end_row, first_block, end_block, length,
                   accumulate):
        multiply_rows(kernel, a, b, sums, first_row, end_row, first_block, end_block, length, accumulate, rows,
                      columns, k_block, group, panel_blocks)
    return in_vectors


@intrinsic
def no_code(typing_context):
    """Nothing: the vector kernels' start and release of AMX's tiles (``product_pieces``)."""
    return types.none(), lambda context, builder, signature, arguments: context.get_dummy_value()


# (finish_rows is an overload, its arguments typed not as literals: one compiled variant serves the pieces that pass
# a row of 0 and those that pass a variable)
def finish_rows(finish, sums, first, last, start, stop):
    """(Compiled code only.) Rows [first, last) and columns [start, stop) of finish's output (requantize_rows'
    arguments: a_scale, b_scale, output_scale, zero_point, low, high, out), those of them it has (none where it is
    ``integer_gemm.NO_FINISH``), requantized from the sums, whose row 0 is row ``first`` and column 0 column
    ``start``."""
    raise NotImplementedError("finish_rows is called from compiled code only")


@overload(finish_rows, jit_options=CALLEE_OPTIONS)
def finish_rows_compiled(finish, sums, first, last, start, stop):
    def requantize(finish, sums, first, last, start, stop):
        a_scale, b_scale, output_scale, zero_point, low, high, out = finish
        requantize_sums(sums, None, None, a_scale, b_scale[start:stop], output_scale, zero_point, low, high,
                        out[:, start:stop], first, min(last, out.shape[0]))
    return requantize


@callee
def multiply_strip(kernel, layout, a_sign, b, b_sign, b_zero, buffers, b_packed, first, last, rows, length, k_block,
                   group):
    """The sums of rows [0, rows) of A (packed, K padded to ``length``) and the column blocks [first, last) of B, a
    run of k_block rows of B at a time (``product_pieces``' columns cut): each run packed into a panel of this
    call's own, which stays in L2 for the kernel and is never written back to memory, and its column terms added
    up; or, where B is packed already (``b_packed``: buffers[1] and buffers[4]), read from there."""
    (k, n), columns = b.shape, buffers[1].shape[2]
    start, stop = first * columns, min(n, last * columns)
    own_panel = new_array((last - first, 0 if b_packed else min(k_block, length) // group) + buffers[1].shape[2:],
                          buffers[1].dtype)
    terms, run_terms = column_terms(layout, buffers), new_array((last - first) * columns, np.int32)
    run = length if b_packed else k_block  # (a packed B's K in one run: the kernels take runs of their own)
    for begin in range(0, length, run):
        end = min(begin + run, length)
        if b_packed:
            panel = buffers[1][first:last]
        else:
            pack_b(kernel, layout, b[begin:min(end, k), start:stop], b_sign, b_zero[start:stop], own_panel,
                   run_terms, 0, last - first)
            for j in range(run_terms.shape[0] if terms.shape[0] > 0 else 0):  # (the byte and tile kernels' terms)
                terms[start + j] = run_terms[j] if begin == 0 else terms[start + j] + run_terms[j]
            panel = own_panel[:, :(end - begin) // group]
        multiply(kernel, buffers[0][:, begin:], a_sign, panel, b_sign, buffers[2][:, start:], 0, rows, 0, last - first,
                 end - begin, begin > 0)


@compiled
def pack_whole_b(kernel, layout, b, b_sign, b_zero, groups, terms):
    """B packed once for the products of ``layout`` that read it packed (``b_packed``): groups and terms laid
    out as the packed B and column terms of ``integer_gemm.scratch_layouts``."""
    pack_b(kernel, layout, b, b_sign, b_zero, groups, terms, 0, groups.shape[0])


def product_pieces(kernel, layout, state, counts, a, a_sign, a_zero, b, b_sign, b_zero, buffers, b_packed, finish,
                   wait):
    """(Compiled code only.) integer_product's work, taken piece by piece by every thread that runs this at
    once (``next_piece``); the call with ``wait`` returns once every piece has ended. ``kernel`` and ``layout``
    literal strings: the layout is "direct", or the path and the cut, as "bytes rows" (``products_layout``).
    The stages and their pieces (``counts``):

    - rows: B's column blocks packed (or by each thread for itself); then pieces of rows, each packs its rows of A,
      makes their sums against every block, corrects them and finishes them (``finish_rows``) while they are in
      cache; or, in a grid (``counts[2]`` groups of B's columns), pieces of rows × a group of columns, each
      thread packing the group of its piece;
    - columns: A packed; then strips of B's column blocks, each packed and multiplied by every row of A a run
      of k_block rows at a time, the run's packing still in L2 (B is read once); then pieces of rows corrected
      and finished;
    - direct: A packed; then column blocks of 64 multiplied with B as it lies, their column terms made; then
      pieces of rows corrected and finished.

    a and b as their bits (uint8), each with its sign (128 where its type is INT8, else 0) and its zero points
    as an int32 vector: one compiled variant serves every type. ``buffers`` the tuple of ``scratch_layouts``;
    ``finish`` requantize_rows' arguments, or ``integer_gemm.NO_FINISH`` (the sums left in buffers[2]);
    ``state`` int64 {1 + stages} of zeros, the same array for every thread of one call."""
    raise NotImplementedError("product_pieces is called from compiled code only")


@overload(product_pieces, jit_options=CALLEE_OPTIONS)
def product_pieces_compiled(kernel, layout, state, counts, a, a_sign, a_zero, b, b_sign, b_zero, buffers, b_packed,
                            finish, wait):
    if literal(kernel) is None or literal(layout) is None:
        return None
    spec = KERNELS_BY_NAME[kernel.literal_value]
    rows, k_multiple, group, pack_blocks = spec.rows, spec.k_multiple, spec.group, spec.pack_blocks
    columns = spec.columns  # (of a block of B)
    k_block = spec.k_block  # (a strip's run of K)
    # AMX's kernels run on this thread's tiles, configured for the call and released at its end
    start_tiles, release_tiles = (amx.start_tiles, amx.release_tiles) if spec.tiles else (no_code, no_code)

    def by_rows(kernel, layout, state, counts, a, a_sign, a_zero, b, b_sign, b_zero, buffers, b_packed, finish,
                wait):
        m, n, blocks = a.shape[0], b.shape[1], buffers[1].shape[0]
        padded_rows, length = padded_sizes(a, rows, k_multiple)
        # the pieces are the blocks of a grid of rows by groups of B's columns (one group: rows alone)
        stages, groups = counts[:2], counts[2]
        row_pieces = counts[1] // groups
        group_blocks = pack_blocks * (((blocks + pack_blocks - 1) // pack_blocks + groups - 1) // groups)  # (most)
        # a piece's packed rows of A, row sums and (where it finishes them) sums in memory of this thread's own:
        # in the call's scratch, the rows a core wrote were taken by the other in the next call, and moved
        # between the cores' caches (512³ on 2 Zen 5 cores: 1.15 times one core's speed so, 1.4 with these)
        most = rows * ((padded_rows // rows + row_pieces - 1) // row_pieces)  # the rows of the largest piece
        own_a = new_array((most, buffers[0].shape[1]), buffers[0].dtype)
        own_sums = new_array((most, buffers[2].shape[1] - (blocks - min(blocks, group_blocks)) * columns),
                             np.int32)
        own_row_sums = new_array(most, np.int32)
        # B packed by each thread for itself, its piece's group of columns, where no stage packs it and it is not
        # kept (``integer_gemm.stage_counts``: a small B on few cores, or a grid)
        own_packing = counts[0] == 0 and not b_packed
        own_b = new_array((min(blocks, group_blocks) if own_packing else 0,) + buffers[1].shape[1:], buffers[1].dtype)
        own_terms = new_array(min(blocks, group_blocks) * columns if own_packing else 0, np.int32)
        packed_b, terms = (own_b, own_terms) if own_packing else (buffers[1], buffers[4])
        packed_group = -1  # (the group of columns in own_b)
        a_flip = flip_of_a(layout, a_sign, a_zero)
        tiles_sign = np.uint8(a_sign ^ a_flip)  # (A's sign as the tiles read it)
        start_tiles()
        stage = -1
        while True:
            stage, piece = take_piece(state, stages, stage, wait)
            if stage < 0:
                break
            column_group = piece % groups if stage == 1 else 0
            first_block, last_block = piece_bounds(blocks, groups, pack_blocks, column_group)
            start, stop = first_block * columns, min(n, last_block * columns)
            if stage == 0 or (own_packing and column_group != packed_group):
                # (B's packing called in one place: each call compiles it again)
                first, last = piece_bounds(blocks, counts[0], pack_blocks, piece) if stage == 0 else \
                    (0, last_block - first_block)
                pack_b(kernel, layout, b[:, start:stop], b_sign, b_zero[start:stop],
                       buffers[1] if stage == 0 else own_b, column_terms(layout, buffers) if stage == 0 else own_terms,
                       first, last)
                packed_group = column_group if stage == 1 else packed_group
            if stage == 1:
                first, last = piece_bounds(padded_rows, row_pieces, rows, piece // groups)
                # (its own sums where it requantizes them, else the call's: NO_FINISH's out has no rows)
                sums = own_sums if finish[6].shape[0] > 0 else buffers[2][first:]
                pack_a(layout, a[first:], a_sign, a_flip, a_zero[first:], own_a, own_row_sums, 0, last - first)
                skip = 0 if own_packing else first_block  # (the group's first block in packed_b)
                multiply(kernel, own_a, tiles_sign, packed_b, b_sign, sums, 0, min(last, m) - first, skip,
                         skip + last_block - first_block, length, False)
                correct(layout, sums, own_row_sums, a_sign, a_flip, a_zero[first:], b_sign, b_zero[start:stop],
                        terms[skip * columns:], 0, min(last, m) - first)
                finish_rows(finish, sums, first, min(last, m), start, stop)
        release_tiles()

    def by_columns(kernel, layout, state, counts, a, a_sign, a_zero, b, b_sign, b_zero, buffers, b_packed, finish,
                   wait):
        m, blocks = a.shape[0], buffers[1].shape[0]
        padded_rows, length = padded_sizes(a, rows, k_multiple)
        a_flip = flip_of_a(layout, a_sign, a_zero)
        tiles_sign = np.uint8(a_sign ^ a_flip)  # (A's sign as the tiles read it)
        start_tiles()
        stage = -1
        while True:
            stage, piece = take_piece(state, counts, stage, wait)
            if stage < 0:
                break
            if stage == 0:
                pack_a(layout, a, a_sign, a_flip, a_zero, buffers[0], buffers[3], 0, padded_rows)
            elif stage == 1:
                first, last = piece_bounds(blocks, counts[1], 1, piece)
                multiply_strip(kernel, layout, tiles_sign, b, b_sign, b_zero, buffers, b_packed, first, last, m,
                               length, k_block, group)
            else:
                first, last = piece_bounds(m, counts[2], 1, piece)
                correct(layout, buffers[2], buffers[3], a_sign, a_flip, a_zero, b_sign, b_zero, buffers[4], first,
                        last)
                finish_rows(finish, buffers[2][first:], first, last, 0, b.shape[1])
        release_tiles()

    def direct(kernel, layout, state, counts, a, a_sign, a_zero, b, b_sign, b_zero, buffers, b_packed, finish,
               wait):
        (m, k), n = a.shape, b.shape[1]
        a_packed, sums, row_sums, column_terms = buffers[0], buffers[2], buffers[3], buffers[4]
        b_flip = flip_of_b(b_sign)
        stage = -1
        while True:
            stage, piece = take_piece(state, counts, stage, wait)
            if stage < 0:
                break
            if stage == 0:
                pack_rows_bytes(a, a_sign, a_packed, row_sums, 0, m)
            elif stage == 1:
                first, last = piece_bounds(n // 64, counts[1], 1, piece)
                multiply_direct(kernel, a_packed, b, b_flip, sums, column_terms, m, first, last, k // 4)
                for j in range(64 * first, 64 * last):
                    column_terms[j] += (np.int32(b_flip) - b_zero[j]) * np.int32(k)  # (K·β)
            else:
                first, last = piece_bounds(m, counts[2], 1, piece)
                correct(layout, sums, row_sums, a_sign, np.uint8(0), a_zero, b_sign, b_zero, column_terms, first,
                        last)
                finish_rows(finish, sums[first:], first, last, 0, n)

    return {"direct": direct, "rows": by_rows, "columns": by_columns}[layout.literal_value.split()[-1]]


@compiled
def multiply_in_pieces(kernel, layout, state, counts, a, a_sign, a_zero, b, b_sign, b_zero, buffers, b_packed,
                       finish, doorbell, wait):
    """product_pieces, called from Python (``pieces.run_on_cores``: it begins and ends as ``atomics.call_begins``
    and ``call_ends`` say); True (what numba's threads sum: ``atomics.run_on_threads``)."""
    call_begins(doorbell, wait)
    product_pieces(kernel, layout, state, counts, a, a_sign, a_zero, b, b_sign, b_zero, buffers, b_packed, finish,
                   wait)
    call_ends(doorbell, wait)
    return True
