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

The tile's place, the per-row terms and the float64 requantization are ``qmatmul``'s own @triton.jit helpers, called
from here, so both kernels compute the same operations in the same order and give the same bits. Gluon kernels do
not run under Triton's interpreter: ``qmatmul.choose_config`` picks this one only for compiled runs on sm_90, and
only for long K, where it measured faster than ``qmatmul``'s kernel on an H100 (benchmarks/RESULTS.md, third
round); at K = 4096 it was slower.
"""

from __future__ import annotations

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import mbarrier, tma, warpgroup_mma, warpgroup_mma_wait
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

from .qmatmul import KERNEL_ARGUMENTS_NOT_SPECIALIZED, _requantize_columns, _row_terms, _tile_place


@gluon.constexpr_function
def accumulator_layout(num_warps, instr_n):
    """The wgmma accumulator layout: warps stacked along M (4 to a warpgroup), int8 instructions 16 × instr_n × 32
    (per warp; a warpgroup issues them 64 rows at a time)."""
    return gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1], instr_shape=[16, instr_n, 32])


def launch_registers(consumer_registers: int) -> int:
    """The registers per thread to launch the warp-specialized kernel with: its 12 warps (two consumer warpgroups and
    the producer's, whose three other warps idle) share the 64 K registers of an SM, and setmaxnreg then moves
    registers from the producer's warpgroup (24 each) to the consumers'."""
    return (2 * consumer_registers + 24) // 3 // 8 * 8


def operand_descriptor(rows, block_rows: int, block_k: int) -> TensorDescriptor:
    """A TMA descriptor of tiles block_rows × block_k of int8 rows, swizzled as wgmma reads them."""
    layout = gl.NVMMASharedLayout.get_default_for([block_rows, block_k], gl.int8)
    return TensorDescriptor.from_tensor(rows, [block_rows, block_k], layout)


@gluon.jit
def _issue_loads(a_desc, b_desc, a_row, b_row, step, ready, a_slots, b_slots, STAGES: gl.constexpr, pred):
    """Starts the loads of K step ``step`` into its slot; its barrier completes when both have landed."""
    slot = step % STAGES
    BLOCK_K: gl.constexpr = a_desc.block_type.shape[1]
    mbarrier.expect(ready.index(slot), a_desc.block_type.nbytes + b_desc.block_type.nbytes, pred=pred)
    tma.async_copy_global_to_shared(a_desc, [a_row, step * BLOCK_K], ready.index(slot), a_slots.index(slot), pred)
    tma.async_copy_global_to_shared(b_desc, [b_row, step * BLOCK_K], ready.index(slot), b_slots.index(slot), pred)


@gluon.jit
def _dot(a_desc, b_desc, a_row, b_row, K, layout: gl.constexpr, STAGES: gl.constexpr, IN_FLIGHT: gl.constexpr):
    """Σ_k A[a_row:, k] B[b_row:, k] over all of K, exact in int32 (TMA fills columns past K with 0)."""
    BLOCK_M: gl.constexpr = a_desc.block_type.shape[0]
    BLOCK_K: gl.constexpr = a_desc.block_type.shape[1]
    BLOCK_N: gl.constexpr = b_desc.block_type.shape[0]
    a_slots = gl.allocate_shared_memory(gl.int8, [STAGES, BLOCK_M, BLOCK_K], a_desc.layout)
    b_slots = gl.allocate_shared_memory(gl.int8, [STAGES, BLOCK_N, BLOCK_K], b_desc.layout)
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(STAGES):
        mbarrier.init(ready.index(i), count=1)
    steps = gl.cdiv(K, BLOCK_K)
    for step in gl.static_range(STAGES - IN_FLIGHT):
        _issue_loads(a_desc, b_desc, a_row, b_row, step, ready, a_slots, b_slots, STAGES, step < steps)

    acc = gl.zeros((BLOCK_M, BLOCK_N), gl.int32, layout)
    for step in range(steps):
        slot = step % STAGES
        mbarrier.wait(ready.index(slot), step // STAGES & 1)
        acc = warpgroup_mma(a_slots.index(slot), b_slots.index(slot).permute((1, 0)), acc, is_async=True)
        # The step IN_FLIGHT before is done now, and its slot free: refill it with the step STAGES − IN_FLIGHT ahead.
        acc = warpgroup_mma_wait(IN_FLIGHT, deps=(acc, ))
        ahead = step + STAGES - IN_FLIGHT
        _issue_loads(a_desc, b_desc, a_row, b_row, ahead, ready, a_slots, b_slots, STAGES, ahead < steps)
    acc = warpgroup_mma_wait(0, deps=(acc, ))
    for i in gl.static_range(STAGES):
        mbarrier.invalidate(ready.index(i))
    return acc


@gluon.jit
def _requantize_store(acc, n_start, rows, b_sums_ptr, column_args, ROW_SCALES: gl.constexpr,
                      BLOCK_N: gl.constexpr, EPILOGUE_N: gl.constexpr, leaf: gl.constexpr):
    """qmatmul._requantize_store for the wgmma accumulator: halves of the columns down to EPILOGUE_N, each then in
    ``leaf``, the accumulator layout of EPILOGUE_N columns (the same registers: the conversion moves nothing)."""
    if BLOCK_N > EPILOGUE_N:
        left, right = acc.reshape([acc.shape[0], 2, BLOCK_N // 2]).permute((0, 2, 1)).split()
        _requantize_store(left, n_start, rows, b_sums_ptr, column_args, ROW_SCALES, BLOCK_N // 2, EPILOGUE_N, leaf)
        _requantize_store(right, n_start + BLOCK_N // 2, rows, b_sums_ptr, column_args, ROW_SCALES, BLOCK_N // 2,
                          EPILOGUE_N, leaf)
    else:
        offs_n = n_start + gl.arange(0, BLOCK_N, gl.SliceLayout(0, leaf))
        _requantize_columns(gl.convert_layout(acc, leaf, assert_trivial=True), offs_n.to(gl.int64), rows,
                            b_sums_ptr, column_args, ROW_SCALES)


@gluon.jit(do_not_specialize=KERNEL_ARGUMENTS_NOT_SPECIALIZED)
def _qmatmul_kernel(a_desc, b_desc, M, N, K, channels, num_tiles, a_rows_b, a_rows_c, b_rows_b, b_rows_c,
                    a_sums_ptr, stride_a_sums, b_sums_ptr, stride_b_sums, terms_ptr,
                    a_scale_ptr, stride_sa, out_scale_ptr, stride_so, a_zero_ptr, stride_za, za_mask, a_shift,
                    out_zero_ptr, stride_zo, zo_mask, low, high, out_ptr, stride_ob, stride_oc, stride_om, stride_on,
                    ROW_SCALES: gl.constexpr, GROUP_M: gl.constexpr, EPILOGUE_N: gl.constexpr, INSTR_N: gl.constexpr,
                    STAGES: gl.constexpr, IN_FLIGHT: gl.constexpr, num_warps: gl.constexpr):
    """qmatmul._qmatmul_kernel's tile, one per program, with the arguments of that kernel (A int8 bits, K at most
    K_SLICE)."""
    BLOCK_M: gl.constexpr = a_desc.block_type.shape[0]
    BLOCK_N: gl.constexpr = b_desc.block_type.shape[0]
    tiles = (M, N, channels, a_rows_b, a_rows_c, b_rows_b, b_rows_c)
    row_args = (M, a_sums_ptr, stride_a_sums, a_scale_ptr, stride_sa, out_scale_ptr, stride_so, a_zero_ptr,
                stride_za, za_mask, a_shift, out_zero_ptr, stride_zo, zo_mask, low, high, out_ptr, stride_ob,
                stride_oc, stride_om)
    column_args = (N, K, stride_b_sums, terms_ptr, stride_on)
    b, c, tile_m, tile_n, a_row, b_first_row = _tile_place(gl.program_id(0), tiles, BLOCK_M, BLOCK_N, GROUP_M)
    layout: gl.constexpr = accumulator_layout(num_warps, INSTR_N)
    acc = _dot(a_desc, b_desc, a_row, b_first_row + tile_n * BLOCK_N, K, layout, STAGES, IN_FLIGHT)
    leaf: gl.constexpr = accumulator_layout(num_warps, EPILOGUE_N)
    rows = _row_terms(gl.arange(0, BLOCK_M, gl.SliceLayout(1, leaf)), tile_m, a_row, b, c, row_args, ROW_SCALES,
                      BLOCK_M)
    _requantize_store(acc, tile_n * BLOCK_N, rows, b_sums_ptr + b_first_row * stride_b_sums, column_args, ROW_SCALES,
                      BLOCK_N, EPILOGUE_N, leaf)



@gluon.jit
def _produce(a_desc, b_desc, a_slots, b_slots, ready, empty, tiles, K, num_tiles, GROUP_M: gl.constexpr):
    """The producer warp: the loads of every K step of the program's tiles, in order, each into the next slot of the
    ring once its consumers have released it; it runs ahead into the next tile while a consumer requantizes. A tile
    has A_PARTS blocks of A's rows, one per consumer when the consumers split it (a_slots holds A_PARTS per slot)."""
    HALF_M: gl.constexpr = a_desc.block_type.shape[0]
    BLOCK_K: gl.constexpr = a_desc.block_type.shape[1]
    BLOCK_N: gl.constexpr = b_desc.block_type.shape[0]
    STAGES: gl.constexpr = b_slots.shape[0]
    A_PARTS: gl.constexpr = a_slots.shape[0] // STAGES
    steps = gl.cdiv(K, BLOCK_K)
    count = 0  # K steps loaded so far, over all tiles: slot count % STAGES, its use count // STAGES
    for tile in range(gl.program_id(0), num_tiles, gl.num_programs(0)):
        _, _, _, tile_n, a_row, b_first_row = _tile_place(tile, tiles, A_PARTS * HALF_M, BLOCK_N, GROUP_M)
        b_row = b_first_row + tile_n * BLOCK_N
        for step in range(steps):
            slot = count % STAGES
            # A fresh barrier counts as having completed the phase before its first: the first round passes.
            mbarrier.wait(empty.index(slot), (count // STAGES & 1) ^ 1)
            landed = ready.index(slot)
            mbarrier.expect(landed, A_PARTS * a_desc.block_type.nbytes + b_desc.block_type.nbytes)
            for part in gl.static_range(A_PARTS):
                tma.async_copy_global_to_shared(a_desc, [a_row + part * HALF_M, step * BLOCK_K], landed,
                                                a_slots.index(A_PARTS * slot + part))
            tma.async_copy_global_to_shared(b_desc, [b_row, step * BLOCK_K], landed, b_slots.index(slot))
            count += 1


@gluon.jit
def _consume(a_slots, b_slots, ready, empty, turns, tiles, row_args, b_sums_ptr, column_args, num_tiles,
             consumer: gl.constexpr, ROW_SCALES: gl.constexpr, GROUP_M: gl.constexpr, EPILOGUE_N: gl.constexpr,
             INSTR_N: gl.constexpr, IN_FLIGHT: gl.constexpr):
    """A consumer warpgroup: with two parts of A per slot, rows ``consumer``·HALF_M … of each of the program's
    tiles; with one, every other tile of the program, from its ``consumer``-th (ping-pong: one consumer
    requantizes while the other multiplies). One wgmma kept in flight; each slot released (an mbarrier arrival, no
    block-wide barrier) once the step that read it has retired; then the float64 requantization of its rows.

    Ping-pong consumers take turns at the main loop (``turns``: the other's main loop of the tile before has
    passed all its slots' barriers): a consumer that waited for a slot's use while an earlier use of the same slot
    had not completed would see that earlier phase's completion, since a wait tells phases only by their parity."""
    HALF_M: gl.constexpr = a_slots.shape[1]
    BLOCK_N: gl.constexpr = b_slots.shape[1]
    BLOCK_K: gl.constexpr = b_slots.shape[2]
    STAGES: gl.constexpr = b_slots.shape[0]
    A_PARTS: gl.constexpr = a_slots.shape[0] // STAGES
    PART: gl.constexpr = consumer if A_PARTS == 2 else 0
    TURN: gl.constexpr = 0 if A_PARTS == 2 else consumer  # the program's tiles it skips before its first
    STRIDE: gl.constexpr = 3 - A_PARTS  # and between two of its own
    layout: gl.constexpr = accumulator_layout(4, INSTR_N)
    leaf: gl.constexpr = accumulator_layout(4, EPILOGUE_N)
    stride_b_sums = column_args[2]
    steps = gl.cdiv(column_args[1], BLOCK_K)
    count = TURN * steps  # the producer's count at this consumer's tile's first step
    own_tiles = 0
    for tile in range(gl.program_id(0) + TURN * gl.num_programs(0), num_tiles, STRIDE * gl.num_programs(0)):
        b, c, tile_m, tile_n, a_row, b_first_row = _tile_place(tile, tiles, A_PARTS * HALF_M, BLOCK_N, GROUP_M)
        if A_PARTS == 1:  # consumer 1 waits for the end of consumer 0's main loop of the tile before; consumer 0
            # for consumer 1's, from its second tile on (a fresh barrier passes a wait for parity 1)
            mbarrier.wait(turns.index(consumer), (own_tiles + 1 - consumer) & 1)
        acc = gl.zeros((HALF_M, BLOCK_N), gl.int32, layout)
        for step in range(steps):
            slot = count % STAGES
            mbarrier.wait(ready.index(slot), count // STAGES & 1)
            acc = warpgroup_mma(a_slots.index(A_PARTS * slot + PART), b_slots.index(slot).permute((1, 0)), acc,
                                is_async=True)
            acc = warpgroup_mma_wait(IN_FLIGHT, deps=(acc, ))
            # The step IN_FLIGHT before has retired: its slot is free.
            mbarrier.arrive(empty.index((count + STAGES - IN_FLIGHT) % STAGES), pred=step >= IN_FLIGHT)
            count += 1
        if A_PARTS == 1:
            mbarrier.arrive(turns.index(1 - consumer))
        own_tiles += 1
        acc = warpgroup_mma_wait(0, deps=(acc, ))
        for last in gl.static_range(IN_FLIGHT):  # the slots of the tile's last IN_FLIGHT steps
            mbarrier.arrive(empty.index((count + STAGES - 1 - last) % STAGES), pred=last < steps)
        count += (STRIDE - 1) * steps
        rows = _row_terms(PART * HALF_M + gl.arange(0, HALF_M, gl.SliceLayout(1, leaf)), tile_m, a_row, b, c,
                          row_args, ROW_SCALES, A_PARTS * HALF_M)
        _requantize_store(acc, tile_n * BLOCK_N, rows, b_sums_ptr + b_first_row * stride_b_sums, column_args,
                          ROW_SCALES, BLOCK_N, EPILOGUE_N, leaf)


@gluon.jit(do_not_specialize=KERNEL_ARGUMENTS_NOT_SPECIALIZED)
def _qmatmul_ws_kernel(a_desc, b_desc, M, N, K, channels, num_tiles, a_rows_b, a_rows_c, b_rows_b, b_rows_c,
                       a_sums_ptr, stride_a_sums, b_sums_ptr, stride_b_sums, terms_ptr,
                       a_scale_ptr, stride_sa, out_scale_ptr, stride_so, a_zero_ptr, stride_za, za_mask, a_shift,
                       out_zero_ptr, stride_zo, zo_mask, low, high, out_ptr, stride_ob, stride_oc, stride_om,
                       stride_on, ROW_SCALES: gl.constexpr, GROUP_M: gl.constexpr, EPILOGUE_N: gl.constexpr,
                       INSTR_N: gl.constexpr, STAGES: gl.constexpr, IN_FLIGHT: gl.constexpr, A_PARTS: gl.constexpr,
                       CONSUMER_REGISTERS: gl.constexpr):
    """qmatmul._qmatmul_kernel's tiles of A_PARTS·HALF_M rows (HALF_M: the rows of A's descriptor), program_id,
    program_id + programs, … per program, warp-specialized: a producer warp issues the loads; two consumer
    warpgroups (the default partition of 4 warps, and a worker of 4) multiply and requantize, each one half of
    every tile (A_PARTS = 2) or every other tile (A_PARTS = 1)."""
    HALF_M: gl.constexpr = a_desc.block_type.shape[0]
    BLOCK_K: gl.constexpr = a_desc.block_type.shape[1]
    BLOCK_N: gl.constexpr = b_desc.block_type.shape[0]
    a_slots = gl.allocate_shared_memory(gl.int8, [A_PARTS * STAGES, HALF_M, BLOCK_K], a_desc.layout)
    b_slots = gl.allocate_shared_memory(gl.int8, [STAGES, BLOCK_N, BLOCK_K], b_desc.layout)
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    turns = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(STAGES):
        mbarrier.init(ready.index(i), count=1)
        mbarrier.init(empty.index(i), count=A_PARTS)  # one arrival from each consumer reading the slot
    for i in gl.static_range(2):
        mbarrier.init(turns.index(i), count=1)
    tiles = (M, N, channels, a_rows_b, a_rows_c, b_rows_b, b_rows_c)
    row_args = (M, a_sums_ptr, stride_a_sums, a_scale_ptr, stride_sa, out_scale_ptr, stride_so, a_zero_ptr,
                stride_za, za_mask, a_shift, out_zero_ptr, stride_zo, zo_mask, low, high, out_ptr, stride_ob,
                stride_oc, stride_om)
    column_args = (N, K, stride_b_sums, terms_ptr, stride_on)
    gl.warp_specialize([
        (_consume, (a_slots, b_slots, ready, empty, turns, tiles, row_args, b_sums_ptr, column_args, num_tiles, 0,
                    ROW_SCALES, GROUP_M, EPILOGUE_N, INSTR_N, IN_FLIGHT)),
        (_consume, (a_slots, b_slots, ready, empty, turns, tiles, row_args, b_sums_ptr, column_args, num_tiles, 1,
                    ROW_SCALES, GROUP_M, EPILOGUE_N, INSTR_N, IN_FLIGHT)),
        (_produce, (a_desc, b_desc, a_slots, b_slots, ready, empty, tiles, K, num_tiles, GROUP_M)),
    ], [4, 1], [CONSUMER_REGISTERS, 24])
