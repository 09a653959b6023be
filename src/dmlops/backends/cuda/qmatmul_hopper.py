"""The quantized matmul's main loop for Hopper (sm_90), written in Gluon: int8 ``wgmma`` kept in flight.

Triton 3.6 compiles ``tl.dot`` with an int32 accumulator to a synchronous ``wgmma``: its pipeliner makes only
float32 accumulators asynchronous, so the kernel of ``qmatmul`` waits for the tensor cores at every K step. Here
the loop is written out: TMA loads fill a ring of STAGES shared-memory slots, each guarded by an mbarrier; each K
step issues its ``wgmma`` asynchronously and then waits until at most one group is in flight (``wait(1)``), which
retires the step before and frees its slot for the load STAGES − 1 steps ahead, so that the tensor cores have the
next group queued while the loads of the following steps land.

Both operands are read from shared memory as int8: A must hold int8 bits, K must be at most ``qmatmul.K_SLICE``
(one int32 sum). A uint8 A is flipped into a packed copy first: Triton 3.6 emits every 8-bit wgmma as s8 × s8, and
flipping A in registers on the way would need those registers kept alive until the asynchronous wgmma has read them,
which ``warpgroup_mma_wait`` cannot express for 8-bit values in 3.6 ("Unexpected bitwidth in WGMMAWaitGroupOp").

The tile's place, the per-row terms and the float64 requantization are the @triton.jit helpers of
``qmatmul_tiles``, which ``qmatmul``'s kernel calls too, so both kernels compute the same operations in the same order
and give the same bits. Gluon kernels do not run under Triton's interpreter: ``qmatmul.choose_config`` picks this one
only for compiled runs on sm_90, and only for K > 4096 with tiles enough to fill the SMs, where it measured faster
than ``qmatmul``'s kernel on an H100 (benchmarks/RESULTS.md: the third to fifth rounds, and "Moved from code
comments" for the variants that were slower).
"""

from __future__ import annotations

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import mbarrier, tma, warpgroup_mma, warpgroup_mma_wait
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

from .qmatmul_tiles import (KERNEL_ARGUMENTS_NOT_SPECIALIZED, _column_scales, _column_terms, _requantize_columns,
                            _row_terms, _tile_place)

# A TMA load into shared memory: ``async_load`` from Triton 3.7, which removed its earlier name.
_tma_load = getattr(tma, "async_load", None) or tma.async_copy_global_to_shared


@gluon.constexpr_function
def accumulator_layout(num_warps, instr_n):
    """The wgmma accumulator layout: warps stacked along M (4 to a warpgroup), int8 instructions 16 × instr_n × 32
    (per warp; a warpgroup issues them 64 rows at a time)."""
    return gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1], instr_shape=[16, instr_n, 32])


def operand_descriptor(rows, block_rows: int, block_k: int) -> TensorDescriptor:
    """A TMA descriptor of tiles block_rows × block_k of int8 rows, swizzled as wgmma reads them."""
    layout = gl.NVMMASharedLayout.get_default_for([block_rows, block_k], gl.int8)
    return TensorDescriptor.from_tensor(rows, [block_rows, block_k], layout)


@gluon.jit
def _operand_rows(ordinal, tiles, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, GROUP_M: gl.constexpr):
    """The first rows of A and of B (K-major) of this program's ``ordinal``-th tile."""
    _, _, _, tile_n, a_row, b_first_row = _tile_place(gl.program_id(0) + ordinal * gl.num_programs(0), tiles,
                                                      BLOCK_M, BLOCK_N, GROUP_M)
    return a_row, b_first_row + tile_n * BLOCK_N


@gluon.jit
def _load(load, slot, ring, a_desc, b_desc, my_tiles, steps, tiles, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
          GROUP_M: gl.constexpr):
    """Starts ``load`` (the program's tile ordinal, K step, and the tile's first rows of A and B) into ``slot`` of
    the ring, whose barrier completes when both operands have landed, where the program has that tile; returns the
    load after it: the next K step, or the first of the next tile."""
    ordinal, k_step, a_row, b_row = load
    a_slots, b_slots, ready = ring
    BLOCK_K: gl.constexpr = a_desc.block_type.shape[1]
    pred = ordinal < my_tiles
    mbarrier.expect(ready.index(slot), a_desc.block_type.nbytes + b_desc.block_type.nbytes, pred=pred)
    _tma_load(a_desc, [a_row, k_step * BLOCK_K], ready.index(slot), a_slots.index(slot), pred)
    _tma_load(b_desc, [b_row, k_step * BLOCK_K], ready.index(slot), b_slots.index(slot), pred)
    k_step += 1
    if k_step == steps:
        k_step = 0
        ordinal += 1
        a_row, b_row = _operand_rows(ordinal, tiles, BLOCK_M, BLOCK_N, GROUP_M)
    return ordinal, k_step, a_row, b_row


@gluon.jit
def _stage_column_terms(staged, n_start, b_sums_ptr, column_args, ROW_SCALES: gl.constexpr, BLOCK_N: gl.constexpr,
                        num_warps: gl.constexpr):
    """The column terms of the tile's columns [n_start, n_start + BLOCK_N), computed before the main loop into
    ``staged`` (shared memory), so that the epilogue does not wait for a global load per block of columns (each
    would follow the stores of the block before, which the compiler cannot reorder)."""
    line: gl.constexpr = gl.BlockedLayout([1], [32], [num_warps], [0])
    offs_n = (n_start + gl.arange(0, BLOCK_N, line)).to(gl.int64)
    terms = _column_terms(_column_scales(offs_n, column_args), offs_n, b_sums_ptr, column_args, ROW_SCALES)
    for i in gl.static_range(3):
        staged.index(i).store(terms[i])


@gluon.jit
def _requantize_store(acc, n_start, rows, staged, column_args, ROW_SCALES: gl.constexpr, FIRST: gl.constexpr,
                      BLOCK_N: gl.constexpr, EPILOGUE_N: gl.constexpr, leaf: gl.constexpr):
    """qmatmul._requantize_store for the wgmma accumulator: halves of the columns down to EPILOGUE_N, each then in
    ``leaf``, the accumulator layout of EPILOGUE_N columns (the same registers: the conversion moves nothing), with
    the column terms of the tile's columns FIRST … (from its first) read from ``staged``."""
    if BLOCK_N > EPILOGUE_N:
        left, right = acc.reshape([acc.shape[0], 2, BLOCK_N // 2]).permute((0, 2, 1)).split()
        _requantize_store(left, n_start, rows, staged, column_args, ROW_SCALES, FIRST, BLOCK_N // 2, EPILOGUE_N,
                          leaf)
        _requantize_store(right, n_start + BLOCK_N // 2, rows, staged, column_args, ROW_SCALES, FIRST + BLOCK_N // 2,
                          BLOCK_N // 2, EPILOGUE_N, leaf)
    else:
        columns: gl.constexpr = gl.SliceLayout(0, leaf)
        offs_n = n_start + gl.arange(0, BLOCK_N, columns)
        terms = (staged.index(0).slice(FIRST, BLOCK_N).load(columns),
                 staged.index(1).slice(FIRST, BLOCK_N).load(columns),
                 staged.index(2).slice(FIRST, BLOCK_N).load(columns))
        _requantize_columns(gl.convert_layout(acc, leaf, assert_trivial=True), offs_n.to(gl.int64), rows, terms,
                            column_args, ROW_SCALES)


# The kernel: BLOCK_M × BLOCK_N tiles of out[b, c] = requantize(Σ_k (A − za)(B − zb)), what qmatmul's kernel
# computes for a tile, with its arguments (taken by name from the same values) but for A, whose rows must hold int8
# bits, and K, at most K_SLICE; its column terms are staged in shared memory, not at staged_ptr. Each program walks
# the tiles program_id, program_id + programs, …: their K steps are one stream through the ring of STAGES slots,
# so that the loads of a tile's first steps are issued during the last steps of the one before and land while its
# epilogue runs. For each tile the program finds its place (``_tile_place``), computes the column terms of its
# columns and reads the per-row terms of its rows, which the main loop's time hides; the main loop keeps a wgmma in
# flight (``wait(1)`` retires the step before, whose slot then takes the load STAGES − 1 steps ahead); the epilogue
# requantizes the int32 accumulator in float64 a block of EPILOGUE_N columns at a time, with the helpers both
# kernels share.
@gluon.jit(do_not_specialize=KERNEL_ARGUMENTS_NOT_SPECIALIZED)
def _qmatmul_kernel(a_desc, b_desc, M, N, K, channels, num_tiles, a_rows_b, a_rows_c, b_rows_b, b_rows_c,
                    a_sums_ptr, a_sums_stride, b_sums_ptr, b_sums_stride, b_scale_ptr, b_scale_stride, b_zero_ptr,
                    b_zero_stride, b_zero_mask, b_shift, a_scale_ptr, a_scale_stride, out_scale_ptr,
                    out_scale_stride, a_zero_ptr, a_zero_stride, a_zero_mask, a_shift, out_zero_ptr, out_zero_stride,
                    out_zero_mask, low, high, out_ptr, stride_ob, stride_oc, stride_om, stride_on, errors_ptr,
                    staged_ptr, ROW_SCALES: gl.constexpr, GROUP_M: gl.constexpr, EPILOGUE_N: gl.constexpr,
                    INSTR_N: gl.constexpr, STAGES: gl.constexpr, num_warps: gl.constexpr):
    BLOCK_M: gl.constexpr = a_desc.block_type.shape[0]
    BLOCK_N: gl.constexpr = b_desc.block_type.shape[0]
    tiles = (M, N, channels, a_rows_b, a_rows_c, b_rows_b, b_rows_c)
    row_args = (M, a_sums_ptr, a_sums_stride, a_scale_ptr, a_scale_stride, out_scale_ptr, out_scale_stride,
                a_zero_ptr, a_zero_stride, a_zero_mask, a_shift, out_zero_ptr, out_zero_stride, out_zero_mask, low,
                high, out_ptr, stride_ob, stride_oc, stride_om, errors_ptr)
    column_args = (N, K, b_sums_stride, b_scale_ptr, b_scale_stride, b_zero_ptr, b_zero_stride, b_zero_mask, b_shift,
                   a_scale_ptr, out_scale_ptr, errors_ptr, stride_on)
    BLOCK_K: gl.constexpr = a_desc.block_type.shape[1]
    ring = (gl.allocate_shared_memory(gl.int8, [STAGES, BLOCK_M, BLOCK_K], a_desc.layout),
            gl.allocate_shared_memory(gl.int8, [STAGES, BLOCK_N, BLOCK_K], b_desc.layout),
            gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout()))
    a_slots, b_slots, ready = ring
    for i in gl.static_range(STAGES):
        mbarrier.init(ready.index(i), count=1)
    staged = gl.allocate_shared_memory(gl.float64, [3, BLOCK_N], gl.SwizzledSharedLayout(1, 1, 1, order=[0]))
    leaf: gl.constexpr = accumulator_layout(num_warps, EPILOGUE_N)
    layout: gl.constexpr = accumulator_layout(num_warps, INSTR_N)

    my_tiles = gl.cdiv(num_tiles - gl.program_id(0), gl.num_programs(0))
    steps = gl.cdiv(K, BLOCK_K)
    a_row, b_row = _operand_rows(0, tiles, BLOCK_M, BLOCK_N, GROUP_M)
    load = (0, 0, a_row, b_row)
    for slot in gl.static_range(STAGES - 1):
        load = _load(load, slot, ring, a_desc, b_desc, my_tiles, steps, tiles, BLOCK_M, BLOCK_N, GROUP_M)
    step = 0  # of the program's stream of K steps
    for ordinal in range(my_tiles):
        b, c, tile_m, tile_n, a_row, b_first_row = _tile_place(gl.program_id(0) + ordinal * gl.num_programs(0),
                                                               tiles, BLOCK_M, BLOCK_N, GROUP_M)
        _stage_column_terms(staged, tile_n * BLOCK_N, b_sums_ptr + b_first_row * b_sums_stride, column_args,
                            ROW_SCALES, BLOCK_N, num_warps)
        rows = _row_terms(gl.arange(0, BLOCK_M, gl.SliceLayout(1, leaf)), tile_m, a_row, b, c, row_args, ROW_SCALES,
                          BLOCK_M)
        acc = gl.zeros((BLOCK_M, BLOCK_N), gl.int32, layout)
        for _ in range(steps):
            mbarrier.wait(ready.index(step % STAGES), step // STAGES & 1)
            acc = warpgroup_mma(a_slots.index(step % STAGES), b_slots.index(step % STAGES).permute((1, 0)), acc,
                                is_async=True)
            # The step before is done now, and its slot free: refill it with the load STAGES − 1 steps ahead.
            acc = warpgroup_mma_wait(1, deps=(acc, ))
            load = _load(load, (step + STAGES - 1) % STAGES, ring, a_desc, b_desc, my_tiles, steps, tiles, BLOCK_M,
                         BLOCK_N, GROUP_M)
            step += 1
        acc = warpgroup_mma_wait(0, deps=(acc, ))
        _requantize_store(acc, tile_n * BLOCK_N, rows, staged, column_args, ROW_SCALES, 0, BLOCK_N, EPILOGUE_N, leaf)
    for i in gl.static_range(STAGES):
        mbarrier.invalidate(ready.index(i))
