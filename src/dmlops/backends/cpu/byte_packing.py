"""B packed in groups of 4 rows, a group of a column in 4 bytes, for the byte kernels (``vnni``: words of B' =
the bits of b xor flip, {N / columns, K / 4, columns}) and AMX's tiles (``amx``: b's bits, {N / 16, K / 4, 16,
4}), compiled code only (numba): one loop over B for both, each kernel's layout written by its own pieces, picked
when the loop is compiled for the kernel.
"""

from __future__ import annotations

import numpy as np
from numba.core import types
from numba.extending import overload

from . import amx, vnni
from .avx2 import TILE_ROWS
from .jit import CALLEE_OPTIONS
from .kernels import KERNELS_BY_NAME


def pack_columns_bytes(kernel, vector, b, flip, zero_point, groups, column_terms, first, last, down_columns):
    """(Compiled code only.) groups[block, k // 4, j] = the 4 bytes of B[k:k + 4, j] (j within the block) for the
    column blocks [first, last), as the kernel named by the literal ``kernel`` reads them (B' for the byte kernels,
    b's bits for AMX's tiles), and 0 past the end of b; column_terms[j] = Σ_k b[k, j] − K·zero point[j] (b's value
    int8(bits xor flip) + flip: flip 0 where b is INT8, 128 where UINT8; for the byte kernels, Σ_k B' + K·β of
    ``vnni``). By runs of TILE_ROWS rows of b across the blocks: where b's rows are contiguous, ``vector`` columns
    at a time (the kernel's vector bytes; its ``pack_four_rows``); where its columns are (``down_columns`` True, not
    None: compiled only then), a word of 4 rows at a time down each column (``vnni.pack_column_words``); then the
    columns and rows left one group of a block at a time (the kernel's ``pack_group``)."""
    raise NotImplementedError("pack_columns_bytes is called from compiled code only")


@overload(pack_columns_bytes, jit_options=CALLEE_OPTIONS)
def pack_columns_bytes_compiled(kernel, vector, b, flip, zero_point, groups, column_terms, first, last, down_columns):
    if not isinstance(kernel, types.StringLiteral):
        return None
    spec = KERNELS_BY_NAME[kernel.literal_value]
    tiles, run_groups = spec.tiles, TILE_ROWS // 4
    run_literal = str(run_groups)  # (amx.pack_four_rows takes its count of groups as a literal)
    pack_group = amx.pack_group if tiles else vnni.pack_group

    def pack(kernel, vector, b, flip, zero_point, groups, column_terms, first, last, down_columns):
        length, columns = b.shape
        width_of_block = groups.shape[2]
        column_terms[first * width_of_block:last * width_of_block] = 0
        begin, end = first * width_of_block, min(columns, last * width_of_block)
        vector_end = begin + (end - begin) // vector * vector if b.strides[1] == 1 else begin
        if down_columns is not None:
            stored_flip = 0 if tiles else flip  # (the tiles hold b's bits, the byte kernels' words B')
            vnni.pack_column_words(b, flip, stored_flip, groups, column_terms, first, last)
        count = (length + 3) // 4  # groups of 4 rows, the last maybe partial
        for first_group in range(0, count, run_groups):
            last_group = min(first_group + run_groups, count)
            whole = min(last_group, length // 4)  # groups of 4 whole rows of b
            if tiles:  # (a whole run of groups at once where there is one: its column terms kept in registers)
                for column in range(begin, vector_end, vector):
                    if whole - first_group == run_groups:
                        amx.pack_four_rows(run_literal, b, flip, groups, column_terms, first_group, column)
                    else:
                        for group in range(first_group, whole):
                            amx.pack_four_rows("1", b, flip, groups, column_terms, group, column)
            else:
                for group in range(first_group, whole):
                    for column in range(begin, vector_end, vector):
                        vnni.pack_four_rows(kernel, b, flip, groups, column_terms, group, column)
            for block in range(first, last):
                start = block * width_of_block
                for group in range(whole if down_columns is not None or start < vector_end else first_group,
                                   last_group):
                    pack_group(b, flip, groups, column_terms, group, block, start,
                               min(width_of_block, columns - start))
        if tiles:  # (a tile takes K in steps of amx.DEPTH bytes: the groups past b's are 0)
            for block in range(first, last):
                groups[block, count:] = 0
        # (the bounds made again, not begin and end: kept live to here, those took a register from the loops above)
        for j in range(first * width_of_block, min(columns, last * width_of_block)):
            column_terms[j] -= length * np.int32(zero_point[j])
    return pack
