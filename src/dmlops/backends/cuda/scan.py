"""Cumulative summation and product as single-pass Triton (and Gluon) scans.

Whatever its rank, a scan is a set of independent lines along the scan axis. The dimensions other than the axis
coalesce, where the strides of both tensors allow, into at most two: an outer index and an inner index (other
strides go through packed copies). A program scans a tile: when the scan axis is the innermost, a block of whole
or partial lines (_scan_rows_kernel); otherwise a block of positions along the axis × a run of inner indices
(_scan_columns_kernel). Every element is read once and written once whatever the direction and exclusivity (each
kernel says how): a decreasing scan takes its tiles from the last.

Down columns, where long lines side by side make about as many strips of inner indices as the GPU has
multiprocessors, a program walks a strip down the whole axis instead, block by block, the running value in
registers (_walk_kernel): no look-back at all, and a loop whose loads run a few blocks ahead. On sm_90 a walk may
hold its block in a layout of its own (_walk_kernel_rows_in_threads, in Gluon): each thread a few rows of its
columns, so that the scan down them adds within threads rather than across lanes and warps.

A line longer than one tile is cut into tiles chained by a look-back. Every tile has a slot of scratch memory where
it publishes the total of its elements, and tiles come in groups of WINDOW. A tile's carry combines slots in a tree
whose shape depends on the tile's position alone, never on which tile finished first: float results are the same
bits on every run. Down columns (a slot holds a value for each of the block's columns) the last tile of a group
publishes instead the line's prefix through the group, and a tile combines the slots from the previous group's
last up to its own predecessor: group prefixes chain, WINDOW tiles a round trip through L2, many lines side by side.
Along rows (a slot is one value) groups come in super-groups of WINDOW: the last tile of a group publishes, in a
slot of the group, the group's total, which needs only the group's own tiles, or, for the last group of a
super-group, the line's prefix through it; a tile combines the earlier groups of its super-group (from the previous
super-group's last) and the earlier tiles of its group. Only super-group prefixes (WINDOW² tiles) chain.

The published words carry the launch's generation number in their high half and 32 bits of value in their low
half (64-bit values take two words), so a reader sees a whole value or none without fences, and the scratch memory
needs no clearing between launches: the last program of a launch advances the generation. Programs are launched in
the order of the tiles they wait for, so a tile waits only for tiles that are running or done.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools

import torch
import triton
import triton.language as tl
from triton.experimental import gluon
from triton.experimental.gluon import language as gl

from ...ops.cumulative import CumulativeOperation, accumulation_type
from ...types import DataType
from .common import (INTERPRETED, TRITON_TYPES, WAVE_FILL, Hardware, cdiv, check_devices, data_type, hardware,
                     next_power_of_2, wave_fill)
from .launch import KeptLaunch, capturing, kept_stream, kept_zeros

MAX_WINDOW_WORDS = 2048  # slot words a program reads in one look-back, both levels together
MAX_CHAINED_WINDOW = 256  # tiles in a group whose prefixes chain (down columns)
MAX_GENERATION = tl.constexpr(2**31 - 1)
SUM = tl.constexpr(CumulativeOperation.SUM.value)  # the OPERATION the kernels add with

# What the kernel reads and writes: unsigned integers wrap exactly like the signed integers of their width, and run
# as those.
STORAGE = {
    DataType.FLOAT32: torch.float32,
    DataType.FLOAT16: torch.float16,
    DataType.INT32: torch.int32,
    DataType.UINT32: torch.int32,
    DataType.INT64: torch.int64,
    DataType.UINT64: torch.int64,
}


# -- kernel ----------------------------------------------------------------------------------------------------


@triton.jit
def _multiply(a, b):
    return a * b


@triton.jit
def _combine(a, b, OPERATION: tl.constexpr):
    if OPERATION == SUM:
        return a + b
    else:
        return a * b


@triton.jit
def _reduce(values, AXIS: tl.constexpr, OPERATION: tl.constexpr):
    if OPERATION == SUM:
        return tl.sum(values, AXIS)
    else:
        return tl.reduce(values, AXIS, _multiply)


@triton.jit
def _scan(values, AXIS: tl.constexpr, OPERATION: tl.constexpr, REVERSE: tl.constexpr):
    if OPERATION == SUM:
        return tl.cumsum(values, AXIS, reverse=REVERSE)
    else:
        return tl.cumprod(values, AXIS, reverse=REVERSE)


@triton.jit
def _add_pairs(total_a, before_a, total_b, before_b):
    """Runs a then b as (total, total less the last element): the second half scans exclusively."""
    return total_a + total_b, total_a + before_b


@triton.jit
def _multiply_pairs(total_a, before_a, total_b, before_b):
    return total_a * total_b, total_a * before_b


@triton.jit
def _scan_pairs(values, identity, AXIS: tl.constexpr, OPERATION: tl.constexpr, REVERSE: tl.constexpr):
    """The inclusive and the exclusive scan of values, in one pass."""
    if OPERATION == SUM:
        return tl.associative_scan((values, identity), AXIS, _add_pairs, reverse=REVERSE)
    else:
        return tl.associative_scan((values, identity), AXIS, _multiply_pairs, reverse=REVERSE)


@triton.jit
def _scan_chunks_decreasing(chunks, identity, OPERATION: tl.constexpr, EXCLUSIVE: tl.constexpr):
    """The decreasing scan of a tile held as chunks in walk order, each chunk's elements in address order (so that a
    chunk loads as one vector), and the tile's total: a scan within each chunk (flipped within its thread) and one of
    the chunks' totals in their own order. Triton's decreasing scan would reverse every register through the warp
    before and after (5 shuffles each, twice: 1280 a thread for a 64 KiB tile)."""
    flipped = tl.flip(chunks, 1)
    if EXCLUSIVE:
        _, within = _scan_pairs(flipped, tl.full(flipped.shape, identity, flipped.dtype), 1, OPERATION, False)
    else:
        within = _scan(flipped, 1, OPERATION, False)
    totals = _reduce(chunks, 1, OPERATION)
    _, before = _scan_pairs(totals, tl.full(totals.shape, identity, totals.dtype), 0, OPERATION, False)
    return _combine(before[:, None], tl.flip(within, 1), OPERATION), _reduce(totals[None, :], 1, OPERATION)


@triton.jit
def _publish(pointers, value, generation, WIDE: tl.constexpr):
    """Write value as tagged words: the generation in the high half, 32 bits of value in the low half."""
    tag = generation.to(tl.int64) << 32
    if WIDE:
        bits = value.to(tl.int64, bitcast=True)
        tl.store(pointers, tag | bits.to(tl.uint32).to(tl.int64))
        tl.store(pointers + 1, tag | (bits >> 32).to(tl.uint32).to(tl.int64))
    else:
        bits = value.to(tl.int32, bitcast=True)
        tl.store(pointers, tag | bits.to(tl.uint32).to(tl.int64))


@triton.jit
def _pending(pointers, needed, generation, WIDE: tl.constexpr):
    """Whether some word at pointers (two per value when WIDE), where needed, is not yet of this launch."""
    stale = needed & ((tl.load(pointers, mask=needed, other=0, volatile=True) >> 32).to(tl.int32) != generation)
    if WIDE:
        high = tl.load(pointers + 1, mask=needed, other=0, volatile=True)
        stale = stale | (needed & ((high >> 32).to(tl.int32) != generation))
    return tl.max(stale.to(tl.int32)) > 0


@triton.jit
def _collect(pointers, needed, generation, IDENTITY: tl.constexpr, ACCUMULATOR: tl.constexpr, WIDE: tl.constexpr):
    """The values published at pointers where needed (once they all are), IDENTITY elsewhere."""
    while _pending(pointers, needed, generation, WIDE):
        pass
    # The wait decides on one copy of each word, but threads holding copies of one word may have read it at
    # different moments; read again, now that every word is final, so that all copies agree.
    low = tl.load(pointers, mask=needed, other=0, volatile=True)
    if WIDE:
        high = tl.load(pointers + 1, mask=needed, other=0, volatile=True)
        value = ((high << 32) | low.to(tl.uint32).to(tl.int64)).to(ACCUMULATOR, bitcast=True)
    else:
        value = low.to(tl.int32).to(ACCUMULATOR, bitcast=True)
    return tl.where(needed, value, IDENTITY)


@triton.jit
def _chained_carry(total, words, chain, walk_tile, tiles_per_line, generation,
                   OPERATION: tl.constexpr, IDENTITY: tl.constexpr, ACCUMULATOR: tl.constexpr, WIDE: tl.constexpr,
                   LANES: tl.constexpr, WINDOW: tl.constexpr):
    """Publish this tile's slot; return the combination of every earlier tile of its line (groups chained).

    Each tile of a line has a slot of LANES values: its total, or, for the last tile of a group, the line's
    inclusive prefix through the group. A tile combines the slots from the previous group's last up to its own
    predecessor, in a tree whose shape depends on the tile's position alone.
    """
    WORDS: tl.constexpr = 2 if WIDE else 1
    lane = tl.arange(0, LANES)
    line_slots = chain.to(tl.int64) * tiles_per_line
    group_end = walk_tile // WINDOW * WINDOW + WINDOW - 1
    own_words = words + ((line_slots + walk_tile) * LANES + lane) * WORDS
    if walk_tile != group_end:
        _publish(own_words, total, generation, WIDE)
    slot = group_end - WINDOW + tl.arange(0, WINDOW)
    needed = ((slot >= 0) & (slot < walk_tile))[:, None] & (lane < LANES)[None, :]
    window_words = words + ((line_slots + slot)[:, None] * LANES + lane[None, :]) * WORDS
    carry = _reduce(_collect(window_words, needed, generation, IDENTITY, ACCUMULATOR, WIDE), 0, OPERATION)
    if walk_tile == group_end and walk_tile < tiles_per_line - 1:
        _publish(own_words, _combine(carry, total, OPERATION), generation, WIDE)
    return carry


@triton.jit
def _two_level_carry(total, words, chain, chains, walk_tile, tiles_per_line, generation,
                     OPERATION: tl.constexpr, IDENTITY: tl.constexpr, ACCUMULATOR: tl.constexpr,
                     WIDE: tl.constexpr, WINDOW: tl.constexpr):
    """Publish this tile's slot (and its group's); return the combination of every earlier tile of its line.

    Slots hold one value (a tile along rows holds one line). The tile slots of all lines come first, then the group
    slots: a group's total, or, for the last group of a super-group of WINDOW groups, the line's prefix through it.
    One wait reads a window of WINDOW group slots (from the previous super-group's last) and WINDOW tile slots
    (the earlier tiles of the group).
    """
    WORDS: tl.constexpr = 2 if WIDE else 1
    group = walk_tile // WINDOW
    first_tile = group * WINDOW
    first_group = group // WINDOW * WINDOW - 1  # the previous super-group's last: the prefix through it
    tile_slots = chain.to(tl.int64) * tiles_per_line
    group_slots = (chains * tiles_per_line).to(tl.int64) + chain.to(tl.int64) * tl.cdiv(tiles_per_line, WINDOW)
    group_end = walk_tile == first_tile + WINDOW - 1
    if not group_end:
        _publish(words + (tile_slots + walk_tile) * WORDS + tl.arange(0, 1), total, generation, WIDE)
    k = tl.arange(0, 2 * WINDOW)[:, None]
    of_groups = k < WINDOW
    index = tl.where(of_groups, first_group + k, first_tile + k - WINDOW)
    needed = tl.where(of_groups, (index >= 0) & (index < group), index < walk_tile)
    slot = tl.where(of_groups, group_slots, tile_slots) + index
    values = _collect(words + slot * WORDS, needed, generation, IDENTITY, ACCUMULATOR, WIDE)
    before_group = _reduce(tl.where(of_groups, values, IDENTITY), 0, OPERATION)
    in_group = _reduce(tl.where(of_groups, IDENTITY, values), 0, OPERATION)
    if group_end and walk_tile < tiles_per_line - 1:
        published = _combine(in_group, total, OPERATION)
        if group % WINDOW == WINDOW - 1:
            published = _combine(before_group, published, OPERATION)
        _publish(words + (group_slots + group) * WORDS + tl.arange(0, 1), published, generation, WIDE)
    return _combine(before_group, in_group, OPERATION)


@triton.jit
def _program_tile(pid, length, tiles_per_line, chains, TILE: tl.constexpr, REVERSE: tl.constexpr):
    """The tile that program pid scans: its place in walk order, its chain (the lines it holds), its first position
    on the axis and its number of positions.

    A tile waits only for earlier tiles of its line in walk order; programs take tiles walk position by walk
    position, all lines side by side, so that every tile a program waits for was launched before it.
    """
    walk_tile = pid // chains
    chain = pid % chains
    tile = (tiles_per_line - 1 - walk_tile) if REVERSE else walk_tile
    start = tile.to(tl.int64) * TILE
    count = tl.minimum(length - start, TILE).to(tl.int32)
    return walk_tile, chain, start, count


@triton.jit
def _block_mask(row_valid, column_valid, EVEN_COLUMNS: tl.constexpr, BLOCK_A: tl.constexpr, BLOCK_B: tl.constexpr):
    """Where the block holds elements of the tensor."""
    if EVEN_COLUMNS:  # no mask along the rows, so that loads and stores along them can be vectors
        return tl.broadcast_to(row_valid, [BLOCK_A, BLOCK_B])
    else:
        return row_valid & column_valid


@triton.jit
def _offsets(origin, position, step, MULTIPLE: tl.constexpr):
    """Element offsets from the block's rows: origin + position × step, known multiples of MULTIPLE (1: of nothing),
    so that loads and stores along the rows may be vectors."""
    offsets = origin + position.to(tl.int64) * step
    if MULTIPLE > 1:
        offsets = tl.multiple_of(offsets, [MULTIPLE, MULTIPLE])
    return offsets


@triton.jit
def _load_tile(rows, origin, position, step, mask, IDENTITY: tl.constexpr, MULTIPLE: tl.constexpr):
    """The elements at the positions where mask, IDENTITY elsewhere (it leaves the scan and the total as they are)."""
    return tl.load(rows + _offsets(origin, position, step, MULTIPLE), mask=mask, other=IDENTITY)


@triton.jit
def _store_tile(rows, origin, position, step, values, mask, MULTIPLE: tl.constexpr):
    tl.store(rows + _offsets(origin, position, step, MULTIPLE), values.to(rows.dtype.element_ty), mask=mask)


@triton.jit
def _tile_total(inclusive, position, last, AXIS: tl.constexpr, ZERO: tl.constexpr):
    """The tile's total: its inclusive scan at its last position in walk order."""
    return tl.sum(tl.where(position == last, inclusive, ZERO), AXIS)


@triton.jit
def _next_generation(control, generation):
    """The last program of the launch to finish moves the scratch memory on to the next generation."""
    finished = tl.atomic_add(control + 1, 1, sem="acq_rel")
    if finished == tl.num_programs(0) - 1:
        tl.store(control + 1, 0)
        tl.store(control, tl.where(generation == MAX_GENERATION, 1, generation + 1))


@triton.jit
def _prefetch_rows_tile(pid, x, outer, length, x_outer, x_step, tiles_per_line, chains, BLOCK_A: tl.constexpr,
                        BLOCK_B: tl.constexpr, REVERSE: tl.constexpr):
    """Ask L2 for the input of the tile that program pid scans, one 128-byte line at a time, holding no registers
    and waiting for nothing: by the time that program starts, its loads find the lines in L2."""
    LINE: tl.constexpr = max(1, 1024 // x.dtype.element_ty.primitive_bitwidth)
    POSITIONS: tl.constexpr = max(1, BLOCK_B // LINE)
    _, chain, start, count = _program_tile(pid, length, tiles_per_line, chains, BLOCK_B, REVERSE)
    line = chain.to(tl.int64) * BLOCK_A + tl.arange(0, BLOCK_A)[:, None]
    position = tl.arange(0, POSITIONS)[None, :] * LINE
    wanted = (line < outer) & (position < count) & (pid < tiles_per_line * chains)
    offsets = tl.where(wanted, line * x_outer + (start + position) * x_step, 0)
    tl.inline_asm_elementwise("prefetch.global.L2 [$1];\n\tmov.u32 $0, 0;", "=r,l", [x + offsets], dtype=tl.int32,
                              is_pure=False, pack=1)


# Scan along rows: the scan axis is the innermost, and a block holds BLOCK_A lines as its rows, BLOCK_B positions
# along them as its columns (many short lines a tile, or a tile of one long line). A program loads its tile, scans
# each row, combines in the carry of the line's earlier tiles (WINDOW > 1: from two levels of slots,
# _two_level_carry) and stores. Decreasing, it scans the rows in reverse; or, with one line a tile and CHUNKS > 1, it
# holds the tile as vector-sized chunks in walk order, each in address order, and scans it forward. Exclusive, it
# scans pairs (total of a run, total of the run less its last element), whose second half is the exclusive scan of
# the elements as loaded; or (SHIFT_STORES) it scans inclusively and stores each value one element further along
# the walk, the tile's first element taking the carry. Either way loads stay aligned vectors (shifted stores are
# single elements).
@triton.jit
def _scan_rows_kernel(x, y, words, control,
                      outer, length, inner, x_outer, x_step, x_inner, y_outer, y_step, y_inner,
                      tiles_per_line, chains, inner_blocks,
                      OPERATION: tl.constexpr, IDENTITY: tl.constexpr, LINE_START: tl.constexpr, ZERO: tl.constexpr,
                      ACCUMULATOR: tl.constexpr, WIDE: tl.constexpr, REVERSE: tl.constexpr, EXCLUSIVE: tl.constexpr,
                      BLOCK_A: tl.constexpr, BLOCK_B: tl.constexpr, EVEN_COLUMNS: tl.constexpr, WINDOW: tl.constexpr,
                      ALIGNMENT: tl.constexpr, SHIFT_STORES: tl.constexpr, CHUNKS: tl.constexpr,
                      L2_AHEAD: tl.constexpr):
    if L2_AHEAD > 0:
        _prefetch_rows_tile(tl.program_id(0) + L2_AHEAD, x, outer, length, x_outer, x_step, tiles_per_line, chains,
                            BLOCK_A, BLOCK_B, REVERSE)
    walk_tile, chain, start, count = _program_tile(tl.program_id(0), length, tiles_per_line, chains, BLOCK_B,
                                                   REVERSE)
    line = chain.to(tl.int64) * BLOCK_A + tl.arange(0, BLOCK_A)[:, None]
    x_lines = line * x_outer
    y_lines = line * y_outer
    if ALIGNMENT > 1 and BLOCK_A > 1:  # how wide the loads and stores along the block's rows may be
        x_lines = tl.multiple_of(x_lines, [ALIGNMENT, ALIGNMENT])
        y_lines = tl.multiple_of(y_lines, [ALIGNMENT, ALIGNMENT])
    x_rows = x + x_lines
    y_rows = y + y_lines
    x_origin = start * x_step
    y_origin = start * y_step
    CHUNKED: tl.constexpr = CHUNKS > 1 and REVERSE and BLOCK_A == 1 and BLOCK_B >= CHUNKS
    if CHUNKED:  # the block holds chunks of CHUNKS elements in walk order, each in address order
        chunk_position = ((BLOCK_B // CHUNKS - 1 - tl.arange(0, BLOCK_B // CHUNKS))[:, None] * CHUNKS
                          + tl.arange(0, CHUNKS)[None, :])
        position = tl.reshape(chunk_position, [1, BLOCK_B])
    else:  # the block holds the tile in address order: a decreasing scan scans it in reverse
        position = tl.arange(0, BLOCK_B)[None, :]
    row_valid = line < outer
    valid = _block_mask(row_valid, position < count, EVEN_COLUMNS, BLOCK_A, BLOCK_B)
    first = count - 1 if REVERSE else 0  # the tile's first and last positions in walk order
    last = 0 if REVERSE else count - 1
    PAIRS: tl.constexpr = EXCLUSIVE and not SHIFT_STORES
    STORES_SHIFTED: tl.constexpr = EXCLUSIVE and SHIFT_STORES

    if CHUNKED:  # chunks load as vectors
        chunk_valid = row_valid if EVEN_COLUMNS else row_valid & (chunk_position < count)
        chunks = tl.load(x_rows + (x_origin + chunk_position * x_step), mask=chunk_valid, other=IDENTITY)
    else:
        values = _load_tile(x_rows, x_origin, position, x_step, valid, IDENTITY, 1)
    if WINDOW > 0:
        generation = tl.load(control, volatile=True)
    if CHUNKED:  # (exclusive where its stores are not shifted)
        scanned, chunks_total = _scan_chunks_decreasing(chunks.to(ACCUMULATOR), IDENTITY, OPERATION, PAIRS)
        result = tl.reshape(scanned, [1, BLOCK_B])
        inclusive = result  # (read only when not PAIRS: an exclusive scan's total is chunks_total)
    elif PAIRS:
        inclusive, result = _scan_pairs(values.to(ACCUMULATOR), tl.full([BLOCK_A, BLOCK_B], IDENTITY, ACCUMULATOR),
                                        1, OPERATION, REVERSE)
    else:
        inclusive = _scan(values.to(ACCUMULATOR), 1, OPERATION, REVERSE)
        result = inclusive

    if WINDOW > 0:
        if CHUNKED and PAIRS:  # an exclusive scan held as chunks has no inclusive one
            total = chunks_total
        else:
            total = _tile_total(inclusive, position, last, 1, ZERO)
        if WINDOW > 1:  # (with one tile a group, two levels are one chain)
            carry = _two_level_carry(total, words, chain, chains, walk_tile, tiles_per_line, generation, OPERATION,
                                     IDENTITY, ACCUMULATOR, WIDE, WINDOW)
        else:
            carry = _chained_carry(total, words, chain, walk_tile, tiles_per_line, generation, OPERATION, IDENTITY,
                                   ACCUMULATOR, WIDE, BLOCK_A, WINDOW)
        result = _combine(tl.expand_dims(carry, 1), result, OPERATION)

    if STORES_SHIFTED:
        # Each element's inclusive value is the exclusive value of the next one in walk order: stored there (the
        # walk's last element's is only the tile's total), and the tile's first element takes the carry.
        destination = position + (-1 if REVERSE else 1)
        valid = valid & (position != last)
        starts = tl.full([BLOCK_A, 1], LINE_START, ACCUMULATOR)
        if WINDOW > 0:
            starts = tl.where(walk_tile == 0, starts, tl.expand_dims(carry, 1))
        tl.store(y_rows + (y_origin + first * y_step), starts.to(y.dtype.element_ty), mask=row_valid)
    else:
        destination = position
        if EXCLUSIVE:
            result = tl.where((position == first) & (walk_tile == 0), LINE_START, result)
    if CHUNKED and not STORES_SHIFTED:  # chunks store as vectors, like they load
        tl.store(y_rows + (y_origin + chunk_position * y_step),
                 tl.reshape(result, [BLOCK_B // CHUNKS, CHUNKS]).to(y.dtype.element_ty), mask=chunk_valid)
    else:
        _store_tile(y_rows, y_origin, destination, y_step, result, valid, 1)
    if WINDOW > 0:
        _next_generation(control, generation)


# Scan down columns: the scan axis is not the innermost, and a block holds BLOCK_A positions along the axis as its
# rows, BLOCK_B inner indices of one outer index as its columns (neighbours in memory: every row is contiguous, every
# column a line). A program loads its tile, scans each column, combines in the carry of the lines' earlier tiles (from
# the chain of group prefixes, _chained_carry) and stores. Decreasing, it scans the columns in reverse. Exclusive, it
# loads each element's predecessor in walk order instead of the element: a whole row away, as aligned as the element.
@triton.jit
def _scan_columns_kernel(x, y, words, control,
                         outer, length, inner, x_outer, x_step, x_inner, y_outer, y_step, y_inner,
                         tiles_per_line, chains, inner_blocks,
                         OPERATION: tl.constexpr, IDENTITY: tl.constexpr, LINE_START: tl.constexpr,
                         ZERO: tl.constexpr, ACCUMULATOR: tl.constexpr, WIDE: tl.constexpr, REVERSE: tl.constexpr,
                         EXCLUSIVE: tl.constexpr, BLOCK_A: tl.constexpr, BLOCK_B: tl.constexpr,
                         EVEN_COLUMNS: tl.constexpr, WINDOW: tl.constexpr, ALIGNMENT: tl.constexpr):
    walk_tile, chain, start, count = _program_tile(tl.program_id(0), length, tiles_per_line, chains, BLOCK_A,
                                                   REVERSE)
    o = (chain // inner_blocks).to(tl.int64)
    column = (chain % inner_blocks).to(tl.int64) * BLOCK_B + tl.arange(0, BLOCK_B)[None, :]
    x_rows = x + column * x_inner
    y_rows = y + column * y_inner
    x_origin = o * x_outer + start * x_step
    y_origin = o * y_outer + start * y_step
    position = tl.arange(0, BLOCK_A)[:, None]
    row_valid = position < count
    column_valid = column < inner
    valid = _block_mask(row_valid, column_valid, EVEN_COLUMNS, BLOCK_A, BLOCK_B)
    first = count - 1 if REVERSE else 0  # the tile's first and last positions in walk order
    last = 0 if REVERSE else count - 1
    # What the block's row offsets are multiples of: loads and stores along the rows may be vectors.
    ROW_MULTIPLE: tl.constexpr = ALIGNMENT if BLOCK_A > 1 else 1

    if EXCLUSIVE:  # scan each element's predecessor in walk order within the tile
        source = position + 1 if REVERSE else position - 1
        present = valid & (position != first)
    else:
        source = position
        present = valid
    values = _load_tile(x_rows, x_origin, source, x_step, present, IDENTITY, ROW_MULTIPLE)
    if WINDOW > 0:
        generation = tl.load(control, volatile=True)
        if EXCLUSIVE:  # the element that the shifted scan leaves out, for the tile's total
            final = tl.load(x_rows + (x_origin + last * x_step), mask=column_valid, other=IDENTITY)
    result = _scan(values.to(ACCUMULATOR), 0, OPERATION, REVERSE)

    if WINDOW > 0:
        total = _tile_total(result, position, last, 0, ZERO)
        if EXCLUSIVE:  # and the element the scan left out
            total = _combine(total, tl.sum(final.to(ACCUMULATOR), 0), OPERATION)
        carry = _chained_carry(total, words, chain, walk_tile, tiles_per_line, generation, OPERATION, IDENTITY,
                               ACCUMULATOR, WIDE, BLOCK_B, WINDOW)
        result = _combine(tl.expand_dims(carry, 0), result, OPERATION)

    if EXCLUSIVE:
        result = tl.where((position == first) & (walk_tile == 0), LINE_START, result)
    _store_tile(y_rows, y_origin, position, y_step, result, valid, ROW_MULTIPLE)
    if WINDOW > 0:
        _next_generation(control, generation)


@triton.jit
def _walk_load(x_rows, row, column_valid, block, length, x_step, IDENTITY: tl.constexpr, REVERSE: tl.constexpr,
               EXCLUSIVE: tl.constexpr, BLOCK_A: tl.constexpr, BLOCK_B: tl.constexpr, EVEN_COLUMNS: tl.constexpr,
               ALIGNMENT: tl.constexpr):
    """The values a walk's block ``block`` scans (exclusive: each position's predecessor in walk order, the block's
    first row the identity) and, exclusive, the block's last element, which comes in through the carry (else a
    placeholder). A block reads only its own positions, so that in place those loads never see an earlier block's
    stores."""
    walked = tl.cast(block, tl.int64) * BLOCK_A + row  # positions in walk order
    position = (length - 1 - walked) if REVERSE else walked
    present = _block_mask(walked < length, column_valid, EVEN_COLUMNS, BLOCK_A, BLOCK_B)
    final = column_valid
    if EXCLUSIVE:
        position = (position + 1) if REVERSE else (position - 1)
        present = present & (row != 0)
        last = tl.minimum(tl.cast(block, tl.int64) * BLOCK_A + BLOCK_A, length) - 1
        final = tl.load(x_rows + ((length - 1 - last) if REVERSE else last) * x_step, mask=column_valid,
                        other=IDENTITY)
    offsets = position * x_step
    if ALIGNMENT > 1 and BLOCK_A > 1:  # offsets of whole rows: loads along them may be vectors
        offsets = tl.multiple_of(offsets, [ALIGNMENT, ALIGNMENT])
    return tl.load(x_rows + offsets, mask=present, other=IDENTITY), final


@triton.jit
def _walk_store(values, final, carry, y, y_rows, row, column_valid, block, length, y_step, OPERATION: tl.constexpr,
                ZERO: tl.constexpr, ACCUMULATOR: tl.constexpr, REVERSE: tl.constexpr, EXCLUSIVE: tl.constexpr,
                BLOCK_A: tl.constexpr, BLOCK_B: tl.constexpr, EVEN_COLUMNS: tl.constexpr, ALIGNMENT: tl.constexpr):
    """Scans block ``block`` of a walk from its ``_walk_load``, stores it and returns the running value."""
    walked = tl.cast(block, tl.int64) * BLOCK_A + row
    position = (length - 1 - walked) if REVERSE else walked
    valid = _block_mask(walked < length, column_valid, EVEN_COLUMNS, BLOCK_A, BLOCK_B)
    offsets = position * y_step
    if ALIGNMENT > 1 and BLOCK_A > 1:
        offsets = tl.multiple_of(offsets, [ALIGNMENT, ALIGNMENT])
    result = _combine(carry, _scan(values.to(ACCUMULATOR), 0, OPERATION, False), OPERATION)
    tl.store(y_rows + offsets, result.to(y.dtype.element_ty), mask=valid)
    # Rows past the line's end scanned the identity: the block's last row holds the running value.
    carry = tl.sum(tl.where(row == BLOCK_A - 1, result, ZERO), 0, keep_dims=True)
    if EXCLUSIVE:
        carry = _combine(carry, final.to(ACCUMULATOR), OPERATION)
    return carry


@triton.jit
def _walk_kernel(x, y, length, inner, x_outer, x_step, x_inner, y_outer, y_step, y_inner, inner_blocks,
                 OPERATION: tl.constexpr, IDENTITY: tl.constexpr, LINE_START: tl.constexpr, ZERO: tl.constexpr,
                 ACCUMULATOR: tl.constexpr, REVERSE: tl.constexpr, EXCLUSIVE: tl.constexpr, BLOCK_A: tl.constexpr,
                 BLOCK_B: tl.constexpr, EVEN_COLUMNS: tl.constexpr, ALIGNMENT: tl.constexpr, STAGES: tl.constexpr):
    # One program walks a strip of BLOCK_B inner indices down the whole axis, BLOCK_A positions a block, in walk
    # order (from the last position when decreasing), the running value in registers: no look-back, and the loop
    # loads blocks ahead of the one it scans.
    pid = tl.program_id(0)
    o = (pid // inner_blocks).to(tl.int64)
    column = (pid % inner_blocks).to(tl.int64) * BLOCK_B + tl.arange(0, BLOCK_B)[None, :]
    x_rows = x + o * x_outer + column * x_inner
    y_rows = y + o * y_outer + column * y_inner
    row = tl.arange(0, BLOCK_A)[:, None]
    column_valid = column < inner
    carry = tl.full([1, BLOCK_B], LINE_START if EXCLUSIVE else IDENTITY, ACCUMULATOR)
    for block in tl.range(0, tl.cdiv(length, BLOCK_A), num_stages=STAGES):
        values, final = _walk_load(x_rows, row, column_valid, block, length, x_step, IDENTITY, REVERSE, EXCLUSIVE,
                                   BLOCK_A, BLOCK_B, EVEN_COLUMNS, ALIGNMENT)
        carry = _walk_store(values, final, carry, y, y_rows, row, column_valid, block, length, y_step, OPERATION,
                            ZERO, ACCUMULATOR, REVERSE, EXCLUSIVE, BLOCK_A, BLOCK_B, EVEN_COLUMNS, ALIGNMENT)


@gluon.constexpr_function
def walk_layout(block_a, block_b, element_bytes, num_warps):
    """Where a walk's block lies in the threads of ``_walk_kernel_rows_in_threads``: each thread holds 16-byte
    vectors of columns on several consecutive rows, so that most of the scan down the rows adds within a thread."""
    vector = min(16 // element_bytes, block_b)
    lanes_b = min(32, block_b // vector)
    lanes_a = 32 // lanes_b
    rows = max(1, block_a // (lanes_a * num_warps))
    return gl.BlockedLayout([rows, vector], [lanes_a, lanes_b], [num_warps, 1], [1, 0])


# _walk_kernel with its block's layout chosen (walk_layout), in Gluon: Triton 3.6 gives a block scanned down its rows
# one row a thread, and scans across lanes and warps for most of its additions (~40 instructions an element; this
# layout ~10). The loop loads the next block into registers before it scans the one loaded before, whatever
# STAGES says (two blocks ahead ran slower: benchmarks/RESULTS.md).
@gluon.jit
def _walk_kernel_rows_in_threads(x, y, length, inner, x_outer, x_step, x_inner, y_outer, y_step, y_inner,
                                 inner_blocks, OPERATION: gl.constexpr, IDENTITY: gl.constexpr,
                                 LINE_START: gl.constexpr, ZERO: gl.constexpr, ACCUMULATOR: gl.constexpr,
                                 REVERSE: gl.constexpr, EXCLUSIVE: gl.constexpr, BLOCK_A: gl.constexpr,
                                 BLOCK_B: gl.constexpr, EVEN_COLUMNS: gl.constexpr, ALIGNMENT: gl.constexpr,
                                 STAGES: gl.constexpr, num_warps: gl.constexpr):
    layout: gl.constexpr = walk_layout(BLOCK_A, BLOCK_B, x.dtype.element_ty.primitive_bitwidth // 8, num_warps)
    pid = gl.program_id(0)
    o = (pid // inner_blocks).to(gl.int64)
    column = ((pid % inner_blocks).to(gl.int64) * BLOCK_B + gl.arange(0, BLOCK_B, gl.SliceLayout(0, layout)))[None, :]
    x_rows = x + o * x_outer + column * x_inner
    y_rows = y + o * y_outer + column * y_inner
    row = gl.arange(0, BLOCK_A, gl.SliceLayout(1, layout))[:, None]
    column_valid = column < inner
    carry = gl.full([1, BLOCK_B], LINE_START if EXCLUSIVE else IDENTITY, ACCUMULATOR, layout)
    values, final = _walk_load(x_rows, row, column_valid, 0, length, x_step, IDENTITY, REVERSE, EXCLUSIVE, BLOCK_A,
                               BLOCK_B, EVEN_COLUMNS, ALIGNMENT)
    for block in range(gl.cdiv(length, BLOCK_A)):
        # Past the line's end the loads are masked off (but an exclusive scan's ``final``, its last element).
        ahead = _walk_load(x_rows, row, column_valid, block + 1, length, x_step, IDENTITY, REVERSE, EXCLUSIVE,
                           BLOCK_A, BLOCK_B, EVEN_COLUMNS, ALIGNMENT)
        carry = _walk_store(values, final, carry, y, y_rows, row, column_valid, block, length, y_step, OPERATION,
                            ZERO, ACCUMULATOR, REVERSE, EXCLUSIVE, BLOCK_A, BLOCK_B, EVEN_COLUMNS, ALIGNMENT)
        values, final = ahead


# -- launcher --------------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Tuning:
    """How big the tiles are and how far the look-back reaches (tests make tiles tiny to cover many of them)."""

    tile_bytes: int = 32768  # accumulator bytes scanned by one program
    tiles_in_flight: int = 256  # tiles whose totals one round trip through L2 should settle, over all lines
    elements_per_thread: int = 32
    # Exclusive scans along rows: the inclusive scan stored one element further along the walk (single-element
    # stores, after a change of register layout through shared memory) rather than a scan of pairs (a second
    # scanned value, aligned vector stores)
    shift_stores: bool = False
    # Decreasing scans along rows, one line a tile: the tile held as chunks of this many elements in walk order, each
    # loaded as a vector and scanned within its thread, rather than scanned in reverse across lanes (which reverses
    # every register through the warp, twice); 1: no chunks
    chunks: int = 1
    columns: int = 128  # down columns, the fewest inner indices a block holds (where the tensor has that many)
    registers: int | None = None  # a thread's registers at most (None: the compiler's choice), so that more
    # programs fit on a multiprocessor: 65536 / (registers × threads a program)
    # Along rows, compiled: each program asks L2 for the input of the tile that many programs a multiprocessor on
    # (0: none), so that a program's loads find it there
    l2_ahead: int = 0


@dataclasses.dataclass(frozen=True)
class Walk:
    """Strips of inner indices, each walked down the whole axis by one program (_walk_kernel)."""

    columns: int = 32  # inner indices a strip: 128 bytes of float32
    rows: int = 256  # positions along the axis a block
    stages: int = 4  # the loop's pipeline: loads run this many blocks less one ahead
    elements_per_thread: int = 32
    rows_in_threads: bool = False  # _walk_kernel_rows_in_threads where it runs (compiled, sm_90)


# The defaults, from the tuning sweeps of benchmarks/scan.py on an H100 and an H200 (the numbers: benchmarks/RESULTS.md,
# "Moved from code comments"): down columns, smaller tiles keep more of them in flight on each multiprocessor; along
# rows, a few long lines reach further back, with tiles and registers sized for four programs a multiprocessor, each of
# which asks L2 for the input of the program a multiprocessor later (further ahead ran slower; tiles of many lines
# gained nothing); columns of a small tensor (SMALL_BYTES and less) are too few tiles for that and take the rows' reach
# in 16 KiB blocks; long columns walk (WALK) where their strips fill the waves of one program a multiprocessor to
# WAVE_FILL and are long enough (MIN_WALK_LENGTH) to fill the walk's loop. In Triton's layout the walk scans at most
# WALK_ELEMENTS_PER_CYCLE elements a cycle a multiprocessor, whatever their size: where that is short of the memory's
# bandwidth (2-byte elements on an H100, all on an H200), columns walk wherever their strips fill a wave, short ones
# too, with rows held in threads and one block loaded ahead (WALK_HALVES).
ALONG_ROWS = Tuning(tiles_in_flight=1024)
SMALL_COLUMNS = Tuning(tile_bytes=16384, tiles_in_flight=1024, columns=32)
FEW_LONG_LINES = Tuning(tile_bytes=32768, tiles_in_flight=8192, elements_per_thread=64, chunks=4, registers=128,
                        l2_ahead=1)
FEW_LONG_LINES_SHIFTED = dataclasses.replace(FEW_LONG_LINES, shift_stores=True)
FEW_LONG_LINES_DECREASING = Tuning(tile_bytes=65536, tiles_in_flight=1024, elements_per_thread=128, chunks=4)
DOWN_COLUMNS = Tuning(tile_bytes=16384)
SMALL_BYTES = 16 << 20
FEW_LINES = 16
WALK = Walk()
WALK_HALVES = Walk(rows=512, stages=2, elements_per_thread=64, rows_in_threads=True)
MIN_WALK_LENGTH = 8192
WALK_ELEMENTS_PER_CYCLE = 1.5
COPY_EFFICIENCY = 0.9  # of the memory's nominal bandwidth, what a device copy reaches


@dataclasses.dataclass(frozen=True)
class Lines:
    """A scan as (outer, length, inner) with each tensor's element strides for those three indices."""

    outer: int
    length: int
    inner: int
    x_strides: tuple[int, int, int]
    y_strides: tuple[int, int, int]


def lines(sizes, axis, x_strides, y_strides) -> Lines | None:
    """The scan's lines, or None when the dimensions other than the axis do not coalesce into two."""
    coalesced = coalesce(sizes, axis, (x_strides, y_strides))
    if coalesced is None:
        return None
    outer, length, inner, (x_lines, y_lines) = coalesced
    return Lines(outer, length, inner, x_lines, y_lines)


def coalesce(sizes, axis, strides):
    """The dimensions other than the axis merged, where every tensor's element strides allow, into an outer and an
    inner index: (outer, length, inner, each tensor's strides for those three indices), outer and inner ordered by
    the last tensor's strides (the output's); None when more than two are left."""
    others = [(size, tuple(s[i] for s in strides)) for i, size in enumerate(sizes) if i != axis and size > 1]
    groups = []
    for size, dim_strides in others:
        if groups and groups[-1][1] == tuple(s * size for s in dim_strides):
            groups[-1] = (groups[-1][0] * size, dim_strides)
        else:
            groups.append((size, dim_strides))
    if len(groups) > 2:
        return None
    groups.sort(key=lambda group: group[1][-1], reverse=True)  # by output stride: outer first
    length, steps = sizes[axis], tuple(s[axis] for s in strides)
    outer = inner = (1, (0,) * len(strides))
    if len(groups) == 2:
        outer, inner = groups
    elif len(groups) == 1:
        if groups[0][1][-1] > steps[-1] or length == 1:
            outer = groups[0]
        else:
            inner = groups[0]
    return outer[0], length, inner[0], [(o, s, i) for o, s, i in zip(outer[1], steps, inner[1])]


@dataclasses.dataclass(frozen=True)
class Plan:
    """How the tiles cover the lines, and the kernel's block shape."""

    along_rows: bool
    block: tuple[int, int]
    lanes: int  # lines per tile: the block's size across the scan axis
    even_columns: bool  # the block's columns never run past the tensor
    tiles_per_line: int
    chains: int
    inner_blocks: int
    window: int
    alignment: int
    num_warps: int


def default_tuning(problem: Lines, accumulator_bytes: int, element_bytes: int, exclusive: bool, reverse: bool,
                   device: Hardware) -> Tuning | Walk:
    if problem.inner == 1:
        few_long_lines = (problem.outer <= FEW_LINES and problem.length * accumulator_bytes > ALONG_ROWS.tile_bytes
                          and accumulator_bytes == 4)
        if not few_long_lines:
            return ALONG_ROWS
        if reverse and not exclusive:
            return FEW_LONG_LINES_DECREASING
        if exclusive and not reverse and problem.outer > 1:
            return FEW_LONG_LINES_SHIFTED
        return FEW_LONG_LINES
    if problem.outer * problem.length * problem.inner * accumulator_bytes <= SMALL_BYTES:
        return SMALL_COLUMNS if problem.inner > SMALL_COLUMNS.columns else ALONG_ROWS
    processors = device.processors
    strips = problem.outer * cdiv(problem.inner, WALK.columns)
    # (Rows whose offsets are not multiples of 4 elements load one element at a time: not measured, and the walk's
    # loop then compiles to spills.)
    aligned = alignment(problem, False) >= 4
    walk_bandwidth = WALK_ELEMENTS_PER_CYCLE * processors * device.clock * 2 * element_bytes  # read and written
    if walk_bandwidth < COPY_EFFICIENCY * device.memory_bandwidth and aligned and strips >= WAVE_FILL * processors:
        return WALK_HALVES
    walk = wave_fill(strips, processors) >= WAVE_FILL and problem.length >= MIN_WALK_LENGTH and aligned
    return WALK if walk else DOWN_COLUMNS


def plan(problem: Lines, accumulator_bytes: int, tuning: Tuning) -> Plan:
    along_rows = problem.inner == 1
    tile_elements = max(1, tuning.tile_bytes // accumulator_bytes)
    if along_rows:
        block_b = min(next_power_of_2(problem.length), tile_elements)
        block_a = min(tile_elements // block_b, next_power_of_2(problem.outer))
        tiles_per_line = cdiv(problem.length, block_b)
        inner_blocks = 1
        chains = cdiv(problem.outer, block_a)
        lanes = block_a
        even_columns = problem.length % block_b == 0
    else:
        block_b = min(next_power_of_2(problem.inner),
                      max(tuning.columns, tile_elements // next_power_of_2(problem.length)), tile_elements)
        block_a = min(next_power_of_2(problem.length), tile_elements // block_b)
        tiles_per_line = cdiv(problem.length, block_a)
        inner_blocks = cdiv(problem.inner, block_b)
        chains = problem.outer * inner_blocks
        lanes = block_b
        even_columns = problem.inner % block_b == 0
    window = 0
    if tiles_per_line > 1:
        # Along rows a tile that needs a look-back holds one line: a slot is one value, and a second level of group
        # slots is cheap to read. Down columns a slot holds a value for each of the block's columns: a second level
        # would cost registers and reads through L2 that, with many lines side by side, the chain of group prefixes
        # does not repay (benchmarks/RESULTS.md, "Moved from code comments").
        reach = MAX_WINDOW_WORDS // 2 if along_rows else min(MAX_CHAINED_WINDOW, MAX_WINDOW_WORDS // lanes)
        window = min(next_power_of_2(cdiv(tuning.tiles_in_flight, chains)), reach,
                     next_power_of_2(tiles_per_line))
    return Plan(along_rows, (block_a, block_b), lanes, even_columns, tiles_per_line, chains, inner_blocks, window,
                alignment(problem, along_rows), warps(block_a * block_b, tuning.elements_per_thread))


def walk_plan(problem: Lines, element_bytes: int, walk: Walk) -> Plan:
    """The strips of a walk: a program a strip, its blocks BLOCK_A positions × BLOCK_B inner indices (8-byte
    elements half the positions, so that the loop's buffers in shared memory stay the size of 4-byte ones)."""
    block_b = min(walk.columns, next_power_of_2(problem.inner))
    block_a = min(max(1, walk.rows * 4 // max(4, element_bytes)), next_power_of_2(problem.length))
    inner_blocks = cdiv(problem.inner, block_b)
    return Plan(False, (block_a, block_b), block_b, problem.inner % block_b == 0, 1, problem.outer * inner_blocks,
                inner_blocks, 0, alignment(problem, False), warps(block_a * block_b, walk.elements_per_thread))


@functools.cache
def _gluon_runs(device) -> bool:
    """Whether Gluon kernels run here: compiled (not interpreted), on sm_90, where they were measured."""
    return not INTERPRETED and torch.cuda.get_device_capability(device) == (9, 0)


def alignment(problem: Lines, along_rows: bool) -> int:
    """What the strides between a block's rows (lines, or positions down the columns) are multiples of."""
    row_strides = problem.x_strides[:1] + problem.y_strides[:1]
    if not along_rows:
        row_strides += problem.x_strides[1:2] + problem.y_strides[1:2]
    return min([16] + [stride & -stride for stride in row_strides if stride])


def warps(elements: int, elements_per_thread: int) -> int:
    return min(16, max(1, elements // (32 * elements_per_thread)))


class _Scratch:
    """The look-back's memory for one device and stream: control words (generation, finished programs) and
    tagged words. Never cleared: a launch only reads words that carry its own generation."""

    def __init__(self, device, words: int):
        self.control = kept_zeros(2, torch.int32, device)
        self.control[:1].fill_(1)  # no copy from the host: this may run inside a graph capture
        self.words = kept_zeros(words, torch.int64, device)


_scratch: dict = {}


def _scratch_for(device, words: int) -> _Scratch:
    if device.type != "cuda":
        return _Scratch(device, words)
    if capturing():  # a graph owns its scratch, set up again on every replay
        return _Scratch(device, words)
    key = (device, torch.cuda.current_stream(device).stream_id)
    scratch = _scratch.get(key)
    if scratch is None or scratch.words.numel() < words:
        scratch = _scratch[key] = _Scratch(device, max(words, 2 * scratch.words.numel() if scratch else 0))
    return scratch


def cumulative(operation: CumulativeOperation, x, out, axis: int, reverse: bool, exclusive: bool, *,
               tuning: Tuning | Walk | None = None) -> None:
    """out = the running sum or product of x along axis (see dmlops.ops.cumulative.reference).

    tuning None takes the defaults for the tiling and size the shape has (default_tuning).
    """
    prepare_cumulative(operation, x, out, axis, reverse, exclusive, tuning=tuning)


def prepare_cumulative(operation: CumulativeOperation, x, out, axis: int, reverse: bool, exclusive: bool, *,
                       tuning: Tuning | Walk | None = None):
    """Run the scan of x into out, and return ``run(x, out)``, which scans other tensors of the same dtypes, sizes,
    strides and alignment the same way with no planning: the kept launch (``KeptLaunch``), on the stream and device
    it was made for, outside graph captures (a graph owns its scratch memory); else planned again."""
    check_devices(operation.operator_name, input_tensor=x, output_tensor=out)
    storage = STORAGE[data_type(x)]
    accumulator = TRITON_TYPES[STORAGE[accumulation_type(data_type(x))]]
    x, out = x.view(storage), out.view(storage)
    problem = lines(tuple(x.shape), axis, x.stride(), out.stride())

    def plan_again(x, out):
        cumulative(operation, x, out, axis, reverse, exclusive, tuning=tuning)

    if problem is None:  # strides beyond two coalesced dimensions: scan packed copies
        packed = torch.empty(tuple(x.shape), dtype=storage, device=out.device)
        cumulative(operation, x.contiguous(), packed, axis, reverse, exclusive, tuning=tuning)
        out.copy_(packed)
        return plan_again
    wide = accumulator.primitive_bitwidth == 64
    accumulator_bytes = accumulator.primitive_bitwidth // 8
    device = hardware(x.device)
    if tuning is None:
        tuning = default_tuning(problem, accumulator_bytes, x.element_size(), exclusive, reverse, device)
    floating = accumulator.is_floating()
    on_gpu = x.device.type == "cuda"
    # IDENTITY combines with every x to give x; LINE_START begins an exclusive line (exactly 0 or 1, never -0.0);
    # ZERO is the sum's IDENTITY, for reductions that pick one element.
    constants = dict(OPERATION=operation.value, IDENTITY=operation.neutral(floating), LINE_START=operation.identity,
                     ZERO=CumulativeOperation.SUM.neutral(floating), ACCUMULATOR=accumulator,
                     REVERSE=bool(reverse), EXCLUSIVE=bool(exclusive))
    if isinstance(tuning, Walk):
        layout = walk_plan(problem, x.element_size(), tuning)
        kernel = _walk_kernel_rows_in_threads if tuning.rows_in_threads and _gluon_runs(x.device) else _walk_kernel
        grid = (layout.chains,)
        args = (x, out, problem.length, problem.inner, *problem.x_strides, *problem.y_strides, layout.inner_blocks)
        constants |= dict(BLOCK_A=layout.block[0], BLOCK_B=layout.block[1], EVEN_COLUMNS=layout.even_columns,
                          ALIGNMENT=layout.alignment, STAGES=tuning.stages, num_warps=layout.num_warps)
    else:
        layout = plan(problem, accumulator_bytes, tuning)
        tiles = layout.tiles_per_line * layout.chains
        if layout.window:
            groups = layout.chains * cdiv(layout.tiles_per_line, layout.window)  # group slots (along rows)
            scratch = _scratch_for(x.device, (tiles + groups) * layout.lanes * (2 if wide else 1))
            words, control = scratch.words, scratch.control
        else:
            words = control = out  # not read
        # Both kernels take the lines, strides and tiles in full, whichever they read: one argument list, and one
        # parameter layout in the compiled code, which ptxas's scheduling and register allocation depend on.
        kernel, grid = (_scan_rows_kernel if layout.along_rows else _scan_columns_kernel), (tiles,)
        args = (x, out, words, control,
                problem.outer, problem.length, problem.inner,  # the lines
                *problem.x_strides, *problem.y_strides,  # each tensor's element strides for those three indices
                layout.tiles_per_line, layout.chains, layout.inner_blocks)  # the tiles
        constants |= dict(WIDE=wide, BLOCK_A=layout.block[0], BLOCK_B=layout.block[1],
                          EVEN_COLUMNS=layout.even_columns, WINDOW=layout.window, ALIGNMENT=layout.alignment,
                          num_warps=layout.num_warps, maxnreg=tuning.registers)
        if layout.along_rows:
            constants |= dict(SHIFT_STORES=tuning.shift_stores, CHUNKS=tuning.chunks,
                              L2_AHEAD=0 if INTERPRETED else tuning.l2_ahead * device.processors)
    with torch.cuda.device(x.device) if on_gpu else contextlib.nullcontext():
        kept = KeptLaunch(kernel, grid, args, constants)
    # the call's tensors: x, out, and out again where it stands for the scratch words it does not need
    positions = (0, 1, 2, 3) if args[2] is out else (0, 1)
    kept.release(positions)
    if not on_gpu:  # the interpreter reads the tensors' own dtypes: give it the storage type's views
        rest = args[len(positions):]
        return lambda x, out: kept.relaunch((x.view(storage), *(out.view(storage),) * (len(positions) - 1), *rest))
    if capturing():  # this launch's scratch belongs to the graph
        return plan_again
    here = kept_stream(x.device)  # the scratch memory is the stream's
    launch_again, addresses, _ = kept.rebind(positions)
    others = len(positions) - 1

    def run(x, out):
        stream = here()
        if stream is None:
            plan_again(x, out)
        elif addresses:
            launch_again(stream, x.data_ptr(), *(out.data_ptr(),) * others)
        else:
            launch_again(stream, x.view(storage), *(out.view(storage),) * others)

    return run
