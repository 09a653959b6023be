"""The first-order linear recurrence of the cumulative product's gradient as a Triton kernel
(dmlops.ops.cumulative_gradient): out = scale ⊙ R along one axis, R_k = a_p·R_p + (b_p if exclusive else b_k), p the
element walked just before k.

Each element k is the affine map s → a_p·s + b (b = b_p or b_k), and R_k is the composition of the maps walked up to k
applied to 0. A program takes a block of lines and walks them in blocks of positions, in walk order: within a block
tl.associative_scan composes the maps, ((a1, b1), (a2, b2)) → (a1·a2, b1·a2 + b2), and the composition applied to
the running value carried from the previous block gives R. Loading a_p (and b_p) at the position walked before is
what makes the recurrence exclusive in x (and in g): no shifted copies. FLOAT16 accumulates in float32 and rounds
once per output.

Lines are (outer, inner) index pairs of the dimensions other than the axis, coalesced where the four tensors'
strides allow (else the inputs are copied packed). With the axis innermost a block holds lines as rows and positions
as columns; otherwise it holds positions as rows and consecutive inner indices, neighbours in memory, as columns.
One program walks its lines from end to end: a few long lines make few programs.
"""

from __future__ import annotations

import contextlib

import torch
import triton
import triton.language as tl

from ...ops.cumulative import accumulation_type
from .common import TORCH_DTYPES, TRITON_TYPES, cdiv, check_devices, data_type, next_power_of_2
from .scan import coalesce, warps

TILE_ELEMENTS = 4096  # elements of each tensor a block holds
COLUMN_LINES = 64  # lines a block holds side by side when the axis is not the innermost
ELEMENTS_PER_THREAD = 16


@triton.jit
def _compose(a1, b1, a2, b2):
    """The map s → a1·s + b1, then s → a2·s + b2."""
    return a1 * a2, b1 * a2 + b2


@triton.jit
def _recurrence_kernel(a, b, scale, out, lines, length, inner,
                       a_outer, a_step, a_inner, b_outer, b_step, b_inner,
                       scale_outer, scale_step, scale_inner, out_outer, out_step, out_inner,
                       ACCUMULATOR: tl.constexpr, REVERSE: tl.constexpr, EXCLUSIVE: tl.constexpr,
                       ALONG_ROWS: tl.constexpr, POSITIONS: tl.constexpr, LINES: tl.constexpr):
    first_line = tl.program_id(0).to(tl.int64) * LINES
    if ALONG_ROWS:  # rows are lines, columns positions along the axis
        AXIS: tl.constexpr = 1
        line = first_line + tl.arange(0, LINES)[:, None]
        walked_in_block = tl.arange(0, POSITIONS)[None, :]
        state = tl.zeros([LINES, 1], ACCUMULATOR)
    else:  # rows are positions along the axis, columns lines
        AXIS: tl.constexpr = 0
        line = first_line + tl.arange(0, LINES)[None, :]
        walked_in_block = tl.arange(0, POSITIONS)[:, None]
        state = tl.zeros([1, LINES], ACCUMULATOR)
    o, i = line // inner, line % inner
    a_line = a + o * a_outer + i * a_inner
    b_line = b + o * b_outer + i * b_inner
    scale_line = scale + o * scale_outer + i * scale_inner
    out_line = out + o * out_outer + i * out_inner
    line_valid = line < lines
    for start in range(0, length, POSITIONS):
        walked = start + walked_in_block.to(tl.int64)
        valid = line_valid & (walked < length)
        position = (length - 1 - walked) if REVERSE else walked
        previous = (position + 1) if REVERSE else (position - 1)
        has_previous = valid & (walked > 0)
        # Past the line's end (and a before its start, where the state is 0) the map is the identity (1, 0), so
        # the block's last column holds the state after it.
        coefficient = tl.load(a_line + previous * a_step, mask=has_previous, other=1).to(ACCUMULATOR)
        if EXCLUSIVE:
            term = tl.load(b_line + previous * b_step, mask=has_previous, other=0).to(ACCUMULATOR)
        else:
            term = tl.load(b_line + position * b_step, mask=valid, other=0).to(ACCUMULATOR)
        composed_a, composed_b = tl.associative_scan((coefficient, term), AXIS, _compose)
        result = composed_a * state + composed_b
        factor = tl.load(scale_line + position * scale_step, mask=valid, other=0).to(ACCUMULATOR)
        tl.store(out_line + position * out_step, (factor * result).to(out.dtype.element_ty), mask=valid)
        state = tl.sum(tl.where(walked_in_block == POSITIONS - 1, result, -0.0), AXIS, keep_dims=True)


def blocks(outer: int, length: int, inner: int) -> tuple[int, int]:
    """(positions, lines) a block holds: along rows whole short lines, several to a block; down columns
    COLUMN_LINES neighbouring lines."""
    if inner == 1:
        positions = min(next_power_of_2(length), TILE_ELEMENTS)
        return positions, min(next_power_of_2(outer), TILE_ELEMENTS // positions)
    lines = min(next_power_of_2(outer * inner), COLUMN_LINES)
    return min(next_power_of_2(length), TILE_ELEMENTS // lines), lines


def linear_recurrence(a, b, scale, out, axis: int, reverse: bool, exclusive: bool, *,
                      block: tuple[int, int] | None = None) -> None:
    """out = scale ⊙ R (see the module); a, b and out of one type, scale of its accumulation type, out apart from the
    others. ``block``: (positions, lines) a block holds, powers of two (None: by the shape)."""
    check_devices("linear_recurrence", a=a, b=b, scale=scale, out=out)
    shape = tuple(out.shape)
    coalesced = coalesce(shape, axis, [tensor.stride() for tensor in (a, b, scale, out)])
    if coalesced is None:  # strides beyond two coalesced dimensions: packed copies
        packed = torch.empty(shape, dtype=out.dtype, device=out.device)
        linear_recurrence(a.contiguous(), b.contiguous(), scale.contiguous(), packed, axis, reverse, exclusive,
                          block=block)
        out.copy_(packed)
        return
    outer, length, inner, strides = coalesced
    positions, lines = blocks(outer, length, inner) if block is None else block
    accumulator = TRITON_TYPES[TORCH_DTYPES[accumulation_type(data_type(out))]]
    device = torch.cuda.device(out.device) if out.device.type == "cuda" else contextlib.nullcontext()
    with device:
        _recurrence_kernel[(cdiv(outer * inner, lines),)](
            a, b, scale, out, outer * inner, length, inner, *(stride for triple in strides for stride in triple),
            ACCUMULATOR=accumulator, REVERSE=bool(reverse), EXCLUSIVE=bool(exclusive), ALONG_ROWS=inner == 1,
            POSITIONS=positions, LINES=lines, num_warps=warps(positions * lines, ELEMENTS_PER_THREAD))
