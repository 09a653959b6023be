"""CPU backend speed against its peers, measured in one run: ONNX Runtime's CumSum and QLinearMatMul, and NumPy.

    python benchmarks/cpu.py [--repeats 7]

Every contender of a row is timed once per round, round after round, and the table gives the median of its rounds: on a
machine shared with other jobs, a burst of load then falls on all of them alike, and one lucky or unlucky call does not
decide a row. Each timed call starts after the thread pools of the call before have gone quiet, and a short call (under
0.1 s) right after an untimed one of its own, with its pool awake. Scans count 2·n·itemsize bytes (read once, written
once) and are compared with the floor, this machine's copy bandwidth (``np.copyto`` of 256 MiB). NumPy has no reverse or
exclusive scan: it flips, scans, flips back and subtracts the input (exclusive sums). dmlops runs as installed (its
compiled engine where numba is installed, large scans on all cores: a long line's chunks taken by a thread a core), on
one core (the same chunks, one after another), with ordinary stores only (no streaming stores past the cache for large
outputs along an outer axis), and with its NumPy-only engine.

The quantized matmul is timed in two protocols: as above, and in loops of LOOP_CALLS calls back to back, as a
model's loop makes them (each call finding the threads of the call before as they left them). It counts 2·M·N·K
operations: n×n×n, and M × 4096 × 4096 for M = 1, 16, 128 (one token to a batch of them through a layer of a
language model). uint8 A × int8 B (requantized into uint8) is compared with ONNX Runtime's QLinearMatMul, int8 A ×
int8 B (requantized into int8) with torch._int_mm (int32 sums, not requantized); each also as a fraction of the
hardware's limit for the kernel picked for the processor (named in the header): AMX's tile instruction
(``tile_peak``: every core issuing nothing but tdpbssd on four tiles of sums, all at once: the threads of a core
share its unit), else the vector kernel's (``instruction_peak``: every core issuing nothing but its multiply-add
instruction, 12 independent chains). dmlops runs as installed, and on one core (u8s8). B prepared once
(``dmlops.prepare_b``, packed at its first product), as a layer's weights are, is compared with ONNX Runtime's
QLinearMatMul of B as an initializer (packed once, when the session is made). DMLOPS_CPU_KERNEL=avx512-vnni (or
another kernel's name) runs the rows with that kernel. ONNX Runtime's sessions and torch run as many threads as the
process may use (under `taskset`, the cores it gives). ONNX Runtime and torch are optional: without them, their
columns are empty. The header gives the processor's model, the flags that decide the kernels and whether Linux
granted AMX's tile state.

Small calls, repeated as in a model's loop: a 64-element float32 scan and a 16 × 256 × 64 quantized matmul (B uint8
with a zero point, per-tensor NumPy-scalar scales) through the array API, against np.cumsum and ONNX Runtime's
session.run (ONNX Runtime has no QLinearMatMul of int8 A and uint8 B: its row takes uint8 A), in µs a call (the
median of rounds of CALLS calls each); and the first calls in a fresh process, in ms (the median of FIRST_CALL_RUNS
processes): the first scan runs NumPy's engine while it starts loading the compiled scans in the background (numba's
import, then its cache), which the script then waits for; with DMLOPS_NUMBA=wait the first scan loads them itself.
The compiled engine's rows are timed once its loops are loaded. A first quantized matmul in a fresh process
(FIRST_MATMUL) runs the NumPy path while it starts loading the matmul's compiled code (qmatmul_loops), as do the
calls after it until that is loaded; the array API's kept run then switches to the compiled code. The first-ever
quantized matmul (FIRST_EVER), in a fresh process with numba's cache empty, waits for its code to compile: timed
wall-clock, and in the CPU time of every thread of the process and of the calling thread.

    python benchmarks/cpu.py --rows matmul     # only the quantized matmul (or: scans, small, first)
    python benchmarks/cpu.py --rows scans --shape 1-D     # only the scans of that shape
    python benchmarks/cpu.py --rows matmul --shape 1x4096x4096     # only the products of that shape
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import subprocess
import sys
import tempfile
import time

import numba
import numpy as np
from llvmlite import ir
from numba.core import types
from numba.extending import intrinsic

try:  # (the quantized matmul's rows run without them, their columns empty)
    import onnx
    import onnxruntime
    from onnx import TensorProto, helper
except ImportError:
    onnx = onnxruntime = None
try:
    import torch
except ImportError:
    torch = None

import dmlops
from dmlops.backends.cpu import integer_gemm as cpu_integer_gemm, qmatmul as cpu_qmatmul, scan as cpu_scan

SCAN_SHAPES = [((1 << 26,), 0, "1-D 2^26"), ((1024, 65536), 1, "1024 × 65536, last axis"),
               ((65536, 1024), 0, "65536 × 1024, axis 0"), ((1 << 22, 8), 1, "4M × 8, last axis")]
MATMUL_SHAPES = [(512, 512, 512), (1024, 1024, 1024), (2048, 2048, 2048), (1, 4096, 4096), (16, 4096, 4096),
                 (128, 4096, 4096)]  # M, K, N
# The processor's flags that decide which kernels run (as /proc/cpuinfo names them).
KERNEL_FLAGS = ("avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx_vnni", "sse4a",
                "amx_tile", "amx_int8")
ONNX_TYPES = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.float16): TensorProto.FLOAT16,
              np.dtype(np.uint8): TensorProto.UINT8, np.dtype(np.int8): TensorProto.INT8} if onnx else {}


# Seconds to wait before each timed call: the thread pools of ONNX Runtime and of BLAS keep spinning for a while
# after a call returns (OpenBLAS's for about 0.1 s), and would take the cores from whatever is timed next.
SETTLE = 0.2
# A call shorter than this is made twice in a row and the second one is timed, so that it finds its own thread pool
# awake, as in a loop of calls.
SHORT_CALL = 0.1


def median_times(runs: dict, repeats: int) -> dict:
    """name → median seconds of ``repeats`` rounds, each round timing every run once (after one warm-up call each:
    compilation, allocation, first touch; a second call tells whether it is short)."""
    short = {}
    for name, run in runs.items():
        run()
        start = time.perf_counter()
        run()
        short[name] = time.perf_counter() - start < SHORT_CALL
    times = {name: [] for name in runs}
    for _ in range(repeats):
        for name, run in runs.items():
            time.sleep(SETTLE)
            if short[name]:
                run()
            start = time.perf_counter()
            run()
            times[name].append(time.perf_counter() - start)
    return {name: float(np.median(values)) for name, values in times.items()}


def loop_times(runs: dict, repeats: int, calls: int) -> dict:
    """name → median seconds a call, of ``repeats`` rounds each timing a loop of ``calls`` calls back to back (as a
    model's loop makes them: each call finds the threads of the call before as they left them)."""
    def loop(run):
        def calls_in_a_row():
            for _ in range(calls):
                run()
        return calls_in_a_row

    return {name: seconds / calls for name, seconds in median_times({name: loop(run) for name, run in runs.items()},
                                                                     repeats).items()}


def onnx_session(node, inputs, output, initializers=()):
    """An ONNX Runtime CPU session of one node; inputs and output are (name, dtype, shape)."""
    def info(name, dtype, shape):
        return helper.make_tensor_value_info(name, ONNX_TYPES[np.dtype(dtype)], list(shape))

    graph = helper.make_graph([node], "benchmark", [info(*i) for i in inputs], [info(*output)],
                              initializer=list(initializers))
    # IR version 8 (ONNX 1.10): any ONNX Runtime reads it, whatever onnx writes by default
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)], ir_version=8)
    options = onnxruntime.SessionOptions()
    # as many threads as this process may run on (its default is every core of the machine, whatever `taskset` gave)
    options.intra_op_num_threads = usable_cores()
    return onnxruntime.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def usable_cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


# -- scans ---------------------------------------------------------------------------------------------------------


def copy_bandwidth(repeats: int) -> float:
    source = np.random.default_rng(0).standard_normal(1 << 26, dtype=np.float32)
    target = np.empty_like(source)
    return 2 * source.nbytes / median_times({"copy": lambda: np.copyto(target, source)}, repeats)["copy"] / 1e9


def numpy_scan(x, axis, reverse, exclusive):
    """The NumPy way: flip, cumsum (float16 in float32), flip back, subtract for exclusive."""
    walked = np.flip(x, axis) if reverse else x
    tally = np.cumsum(walked, axis=axis, dtype=np.float32 if x.dtype == np.float16 else x.dtype)
    if reverse:
        tally = np.flip(tally, axis)
    if exclusive:
        tally = tally - x
    return tally.astype(x.dtype, copy=False)


def scan_rows(repeats: int, copy: float, shapes=None):
    rng = np.random.default_rng(1)
    for shape, axis, label in SCAN_SHAPES:
        if shapes and not any(name in label for name in shapes):
            continue
        for dtype in (np.float32, np.float16):
            x = rng.standard_normal(shape, dtype=np.float32).astype(dtype)
            out = np.empty_like(x)
            gigabytes = 2 * x.nbytes / 1e9
            for reverse, exclusive in ((False, False), (True, True)):
                session = onnx_session(
                    helper.make_node("CumSum", ["x", "axis"], ["y"], reverse=int(reverse), exclusive=int(exclusive)),
                    [("x", dtype, shape)], ("y", dtype, shape),
                    [helper.make_tensor("axis", TensorProto.INT64, [], [axis])])

                def dmlops_scan(**engine):
                    return lambda: cpu_scan.cumulative("sum", x, out, axis, reverse, exclusive, **engine)

                times = median_times({
                    "dmlops": lambda: dmlops.cumulative_sum(x, axis, reverse=reverse, exclusive=exclusive, out=out),
                    "dmlops 1 core": dmlops_scan(pieces=1),
                    "dmlops cached stores": dmlops_scan(stream=False),
                    "dmlops NumPy-only": dmlops_scan(compiled=False),
                    "ONNX Runtime": lambda: session.run(None, {"x": x}),
                    "NumPy": lambda: numpy_scan(x, axis, reverse, exclusive),
                }, repeats)
                rates = {name: gigabytes / seconds for name, seconds in times.items()}
                dml, ort = rates["dmlops"], rates["ONNX Runtime"]
                variant = "reverse + exclusive" if reverse else "plain"
                print(f"| {label} | {np.dtype(dtype).name} | {variant} | {dml:.2f} | {rates['dmlops 1 core']:.2f} | "
                      f"{rates['dmlops cached stores']:.2f} | {rates['dmlops NumPy-only']:.2f} | {ort:.2f} | "
                      f"{rates['NumPy']:.2f} | {dml / ort:.2f} | {dml / copy:.2f} |", flush=True)


# -- quantized matmul ------------------------------------------------------------------------------------------


LOOP_CALLS = 20  # calls of a loop back to back, the quantized matmul's second protocol
PEAK_CHAINS = 12  # independent chains of the peak's instruction: more than its latency × its issue rate


def instruction_peak(kernel) -> float:
    """GOPS of every core issuing only ``kernel``'s multiply-add instruction (vpdpbusd, or vpmaddwd and an add), each
    of PEAK_CHAINS accumulators its own operand, so that nothing is folded or hoisted: the hardware's limit for the
    integer products (2 operations a multiply-add)."""
    @intrinsic
    def issue(typing_context, count):
        def codegen(context, builder, signature, arguments):
            lanes = ir.VectorType(ir.IntType(32), kernel.vector_bits // 32)
            if kernel.bytes:
                dot = builder.module.declare_intrinsic(kernel.instruction, fnty=ir.FunctionType(lanes, [lanes] * 3))

                def step(total, other):
                    return builder.call(dot, [total, total, other])
            else:
                words = ir.VectorType(ir.IntType(16), kernel.vector_bits // 16)
                madd = builder.module.declare_intrinsic(kernel.instruction, fnty=ir.FunctionType(lanes, [words] * 2))

                def step(total, other):
                    return builder.add(total, builder.call(madd, [builder.bitcast(total, words),
                                                                  builder.bitcast(other, words)]))
            other = ir.Constant(lanes, [0x05060708] * lanes.count)
            entry, loop, done = (builder.block, builder.append_basic_block("peak"),
                                 builder.append_basic_block("peak_done"))
            builder.branch(loop)
            builder.position_at_end(loop)
            i = builder.phi(ir.IntType(64))
            totals = [builder.phi(lanes) for _ in range(PEAK_CHAINS)]
            steps = [step(total, other) for total in totals]
            following = builder.add(i, ir.Constant(ir.IntType(64), 1))
            i.add_incoming(ir.Constant(ir.IntType(64), 0), entry)
            i.add_incoming(following, loop)
            for chain, (total, new) in enumerate(zip(totals, steps)):
                total.add_incoming(ir.Constant(lanes, [chain] * lanes.count), entry)
                total.add_incoming(new, loop)
            builder.cbranch(builder.icmp_signed("<", following, arguments[0]), loop, done)
            builder.position_at_end(done)
            total = steps[0]
            for new in steps[1:]:
                total = builder.add(total, new)
            return builder.extract_element(total, ir.Constant(ir.IntType(32), 0))
        return types.int32(count), codegen

    multiply_adds = kernel.vector_bits // (8 if kernel.bytes else 16) * PEAK_CHAINS

    @numba.njit
    def run(count):
        return multiply_adds * count + (issue(count) == 1)  # (the sums read, so that their loop is kept)

    return on_every_core(run, 20_000_000)


def tile_peak() -> float:
    """GOPS of every core issuing only AMX's tdpbssd on four tiles of sums (``amx.tile_products_only``): the limit of
    the tile kernels' products."""
    from dmlops.backends.cpu import amx

    return on_every_core(amx.tile_peak, 2_000_000)


def on_every_core(run, count: int) -> float:
    """GOPS of run(count) (a compiled function that returns the multiply-adds it made) on every core this process may
    use at once, a thread a core (a prange), rather than one core's times the cores: cores may share a unit (the
    two threads of a core with hyperthreads share its tile unit), and on a virtual machine with neighbours they may
    not all run at full speed (16 threads on the 16 vCPUs of a Sapphire Rapids machine made 5.7, 10 and 16 times one
    thread's tile products in three processes of one hour)."""
    cores = usable_cores()

    @numba.njit(parallel=True)
    def every_core(count):
        total = 0
        for _ in numba.prange(cores):
            total += run(count)
        return total

    multiply_adds = every_core(10) * count // 10
    seconds = median_times({"peak": lambda: every_core(count)}, 3)["peak"]
    return 2 * multiply_adds / seconds / 1e9


def matmul_rows(repeats: int, peak: float, shapes=None):
    """uint8 A with zero point 128 (per tensor) × int8 B with per-column scales into uint8, against ONNX Runtime's
    QLinearMatMul; int8 A × int8 B into int8 (per-tensor scales, no zero points), against torch._int_mm (int32
    sums, no requantization); ``peak``: GOPS of every core at the kernel's instruction peak."""
    rng = np.random.default_rng(3)
    for m, k, n in MATMUL_SHAPES:
        if shapes and not any(name == f"{m}x{k}x{n}" for name in shapes):
            continue
        a = rng.integers(0, 256, (m, k), dtype=np.uint8)
        b = rng.integers(-128, 128, (k, n), dtype=np.int8)
        a_signed = rng.integers(-128, 128, (m, k), dtype=np.int8)
        a_scale, a_zero = np.float32(0.02), np.uint8(128)
        b_scale, b_zero = (rng.random(n, dtype=np.float32) + 0.5) * 0.01, np.zeros(n, np.int8)
        out_scale, out_zero = np.float32(0.1 * k**0.5), np.uint8(128)
        out, out_signed = np.empty((m, n), np.uint8), np.empty((m, n), np.int8)
        prepared = dmlops.prepare_b(b, b_scale, b_zero)  # (a layer's weights: packed at its first product)

        def run_backend(**engine):
            """The backend's call as the array API makes it: 4-D tensors, vectors of M or N."""
            vector = np.broadcast_to
            return lambda: cpu_qmatmul.quantized_linear_matmul(
                a[None, None], vector(a_scale, (m,)), vector(a_zero, (m,)), b[None, None], b_scale, b_zero,
                vector(out_scale, (m,)), vector(out_zero, (m,)), out[None, None], **engine)

        runs = {
            "u8s8": lambda: dmlops.quantized_linear_matmul(a, a_scale, a_zero, b, b_scale, b_zero, out_scale,
                                                           out_zero, out=out),
            "u8s8 1 core": run_backend(pieces=1),
            "s8s8": lambda: dmlops.quantized_linear_matmul(a_signed, a_scale, None, b, np.float32(0.01), None,
                                                           out_scale, None, out=out_signed),
            "u8s8 B prepared": lambda: dmlops.quantized_linear_matmul(a, a_scale, a_zero, prepared, None, None,
                                                                      out_scale, out_zero, out=out),
        }
        if onnxruntime is not None:
            session_parameters = [helper.make_tensor("a_scale", TensorProto.FLOAT, [], [a_scale]),
                                  helper.make_tensor("a_zero", TensorProto.UINT8, [], [a_zero]),
                                  helper.make_tensor("b_scale", TensorProto.FLOAT, [n], b_scale),
                                  helper.make_tensor("b_zero", TensorProto.INT8, [n], b_zero),
                                  helper.make_tensor("y_scale", TensorProto.FLOAT, [], [out_scale]),
                                  helper.make_tensor("y_zero", TensorProto.UINT8, [], [out_zero])]
            session = onnx_session(
                helper.make_node("QLinearMatMul", ["a", "a_scale", "a_zero", "b", "b_scale", "b_zero", "y_scale",
                                                   "y_zero"], ["y"]),
                [("a", np.uint8, (m, k)), ("b", np.int8, (k, n))], ("y", np.uint8, (m, n)),
                session_parameters)
            runs["ONNX Runtime"] = lambda: session.run(None, {"a": a, "b": b})
            # B an initializer: ONNX Runtime packs it once, when the session is made
            constant_b = onnx_session(
                helper.make_node("QLinearMatMul", ["a", "a_scale", "a_zero", "b", "b_scale", "b_zero", "y_scale",
                                                   "y_zero"], ["y"]),
                [("a", np.uint8, (m, k))], ("y", np.uint8, (m, n)),
                [helper.make_tensor("b", TensorProto.INT8, [k, n], b.tobytes(), raw=True),
                 *session_parameters])
            runs["ONNX Runtime, B constant"] = lambda: constant_b.run(None, {"a": a})
        if torch is not None:
            a_torch, b_torch = torch.from_numpy(a_signed), torch.from_numpy(b)
            runs["torch._int_mm"] = lambda: torch._int_mm(a_torch, b_torch)
        times = median_times(runs, repeats)
        in_a_row = loop_times({name: runs[name] for name in ("u8s8", "s8s8", "ONNX Runtime", "torch._int_mm",
                                                             "u8s8 B prepared", "ONNX Runtime, B constant")
                               if name in runs}, repeats, LOOP_CALLS)
        operations = 2 * m * n * k / 1e9
        rates = {name: operations / seconds for name, seconds in times.items()}
        loop_rates = {name: operations / seconds for name, seconds in in_a_row.items()}
        nan = float("nan")
        ort, int_mm = rates.get("ONNX Runtime", nan), rates.get("torch._int_mm", nan)
        ort_constant = rates.get("ONNX Runtime, B constant", nan)
        loop_constant = loop_rates.get("ONNX Runtime, B constant", nan)
        loop_ort, loop_int_mm = loop_rates.get("ONNX Runtime", nan), loop_rates.get("torch._int_mm", nan)
        if onnxruntime is not None:
            dmlops.quantized_linear_matmul(a, a_scale, a_zero, b, b_scale, b_zero, out_scale, out_zero, out=out)
            difference = str(np.abs(out.astype(np.int16) - session.run(None, {"a": a, "b": b})[0]).max())
        else:
            difference = "—"
        print(f"| {m} × {k} × {n} | {rates['u8s8']:.0f} | {rates['u8s8 1 core']:.0f} | {ort:.0f} | "
              f"{rates['u8s8'] / ort:.2f} | {rates['s8s8']:.0f} | {int_mm:.0f} | {rates['s8s8'] / int_mm:.2f} | "
              f"{rates['u8s8'] / peak:.3f} | {rates['s8s8'] / peak:.3f} | {ort / peak:.3f} | {int_mm / peak:.3f} | "
              f"{loop_rates['u8s8'] / loop_ort:.2f} | {loop_rates['s8s8'] / loop_int_mm:.2f} | {difference} | "
              f"{rates['u8s8 B prepared']:.0f} | {ort_constant:.0f} | {rates['u8s8 B prepared'] / ort_constant:.2f} | "
              f"{loop_rates['u8s8 B prepared'] / loop_constant:.2f} |",
              flush=True)


# -- small calls ---------------------------------------------------------------------------------------------------

CALLS = 2000  # calls a round of a small call
FIRST_CALL_RUNS = 5
# Run in a fresh process: milliseconds to import dmlops, to its first scan, to a second scan of 1000 elements (a
# vector walk), to the compiled scans' loading after that (waited for), then to the first quantized matmul; and
# whether numba was imported when the first scan returned (1 or 0).
FIRST_CALL = """
import sys
import time
start = time.perf_counter()
import numpy as np
import dmlops
imported = time.perf_counter()
dmlops.cumulative_sum(np.arange(64, dtype=np.float32), 0)
scanned = time.perf_counter()
numba_imported = "numba" in sys.modules
dmlops.cumulative_sum(np.arange(1000, dtype=np.float32), 0)
scanned_again = time.perf_counter()
from dmlops.backends.cpu import scan as cpu_scan# imported by the first call
cpu_scan.LOOPS.wait()
loaded = time.perf_counter()
dmlops.quantized_linear_matmul(np.ones((16, 256), np.int8), np.float32(0.02), np.int8(-3), np.ones((256, 64), np.uint8),
                               np.float32(0.01), np.uint8(128), np.float32(3.0), np.int8(1))
done = time.perf_counter()
print(*(1e3 * (b - a) for a, b in [(start, imported), (imported, scanned), (scanned, scanned_again),
                                   (scanned_again, loaded), (loaded, done)]), int(numba_imported))
"""

# Run in a fresh process: milliseconds to import dmlops, to its first quantized matmul (the small call's, int8 A),
# to a second one, to the compiled code's loading after that (waited for), to a third one (its kept run prepared
# again for the compiled code) and a fourth; and whether numba was imported when the first returned (1 or 0).
FIRST_MATMUL = """
import sys
import time
start = time.perf_counter()
import numpy as np
import dmlops
imported = time.perf_counter()
a, b = np.ones((16, 256), np.int8), np.ones((256, 64), np.uint8)
arguments = (a, np.float32(0.02), np.int8(-3), b, np.float32(0.01), np.uint8(128), np.float32(3.0), np.int8(1))
dmlops.quantized_linear_matmul(*arguments)
first = time.perf_counter()
numba_imported = "numba" in sys.modules
dmlops.quantized_linear_matmul(*arguments)
second = time.perf_counter()
from dmlops.backends.cpu import qmatmul as cpu_qmatmul
cpu_qmatmul.LOOPS.wait()
loaded = time.perf_counter()
dmlops.quantized_linear_matmul(*arguments)
third = time.perf_counter()
dmlops.quantized_linear_matmul(*arguments)
fourth = time.perf_counter()
print(*(1e3 * (b - a) for a, b in [(start, imported), (imported, first), (first, second), (second, loaded),
                                   (loaded, third), (third, fourth)]), int(numba_imported))
"""


# Run in a fresh process with numba's cache empty (DMLOPS_NUMBA=wait): seconds of the first-ever M × K × N
# quantized matmul (argv[1], as 512x512x512; uint8 A, int8 B), which waits for its code to compile: wall-clock, the
# CPU time of the process (every thread's) and of the calling thread.
FIRST_EVER = """
import sys
import time
import numpy as np
import dmlops
m, k, n = (int(size) for size in sys.argv[1].split("x"))
rng = np.random.default_rng(0)
a, b = rng.integers(0, 256, (m, k), dtype=np.uint8), rng.integers(-128, 128, (k, n), dtype=np.int8)
start = time.perf_counter(), time.process_time(), time.thread_time()
dmlops.quantized_linear_matmul(a, np.float32(0.02), np.uint8(128), b, np.float32(0.01), np.int8(0), np.float32(3.0),
                               np.uint8(1))
print(*(after - before for before, after in zip(start, (time.perf_counter(), time.process_time(), time.thread_time()))))
"""
FIRST_EVER_SHAPES = ("16x256x64", "512x512x512")


def fresh_processes(script: str, mode: str, *arguments: str, empty_cache: bool = False):
    """The medians of what script prints (numbers), run with ``arguments`` in FIRST_CALL_RUNS fresh processes with
    DMLOPS_NUMBA=mode (and with numba's cache empty: a new folder for each, where ``empty_cache``)."""
    results = []
    for _ in range(FIRST_CALL_RUNS):
        with tempfile.TemporaryDirectory() if empty_cache else contextlib.nullcontext() as cache:
            environment = {**os.environ, "DMLOPS_NUMBA": mode} | ({"NUMBA_CACHE_DIR": cache} if cache else {})
            results.append([float(value) for value in subprocess.run(
                [sys.executable, "-c", script, *arguments], env=environment, capture_output=True, text=True,
                check=True).stdout.split()])
    return np.median(results, axis=0)


def per_call(run):
    """run, CALLS times: a round of a small call."""
    def calls():
        for _ in range(CALLS):
            run()
    return calls


def small_rows(repeats: int):
    rng = np.random.default_rng(5)
    x = rng.standard_normal(64, dtype=np.float32)
    scan_session = onnx_session(helper.make_node("CumSum", ["x", "axis"], ["y"]), [("x", np.float32, (64,))],
                                ("y", np.float32, (64,)), [helper.make_tensor("axis", TensorProto.INT64, [], [0])])
    m, k, n = 16, 256, 64
    a_int8 = rng.integers(-128, 128, (m, k), dtype=np.int8)
    a_uint8 = rng.integers(0, 256, (m, k), dtype=np.uint8)
    b = rng.integers(0, 256, (k, n), dtype=np.uint8)
    a_scale, b_scale, b_zero, out_scale = np.float32(0.02), np.float32(0.01), np.uint8(128), np.float32(3.0)
    matmul_session = onnx_session(
        helper.make_node("QLinearMatMul", ["a", "a_scale", "a_zero", "b", "b_scale", "b_zero", "y_scale", "y_zero"],
                         ["y"]),
        [("a", np.uint8, (m, k)), ("b", np.uint8, (k, n))], ("y", np.uint8, (m, n)),
        [helper.make_tensor("a_scale", TensorProto.FLOAT, [], [a_scale]),
         helper.make_tensor("a_zero", TensorProto.UINT8, [], [3]),
         helper.make_tensor("b_scale", TensorProto.FLOAT, [], [b_scale]),
         helper.make_tensor("b_zero", TensorProto.UINT8, [], [b_zero]),
         helper.make_tensor("y_scale", TensorProto.FLOAT, [], [out_scale]),
         helper.make_tensor("y_zero", TensorProto.UINT8, [], [1])])
    runs = {
        "scan dmlops": lambda: dmlops.cumulative_sum(x, 0),
        "scan NumPy": lambda: np.cumsum(x),
        "scan ONNX Runtime": lambda: scan_session.run(None, {"x": x}),
        "matmul dmlops int8 A": lambda: dmlops.quantized_linear_matmul(
            a_int8, a_scale, np.int8(-3), b, b_scale, b_zero, out_scale, np.int8(1)),
        "matmul dmlops uint8 A": lambda: dmlops.quantized_linear_matmul(
            a_uint8, a_scale, np.uint8(3), b, b_scale, b_zero, out_scale, np.uint8(1)),
        "matmul ONNX Runtime": lambda: matmul_session.run(None, {"a": a_uint8, "b": b}),
    }
    expected = matmul_session.run(None, {"a": a_uint8, "b": b})[0]
    assert np.array_equal(runs["matmul dmlops uint8 A"](), expected)
    micros = {name: 1e6 * seconds / CALLS
              for name, seconds in median_times({name: per_call(run) for name, run in runs.items()}, repeats).items()}
    print(f"| cumulative_sum, 64 float32 | {micros['scan dmlops']:.2f} | {micros['scan NumPy']:.2f} | | "
          f"{micros['scan ONNX Runtime']:.2f} | {micros['scan dmlops'] / micros['scan ONNX Runtime']:.2f} |")
    print(f"| quantized_linear_matmul, {m} × {k} × {n}, uint8 B with zero point | "
          f"{micros['matmul dmlops uint8 A']:.2f} | | {micros['matmul dmlops int8 A']:.2f} | "
          f"{micros['matmul ONNX Runtime']:.2f} | "
          f"{micros['matmul dmlops uint8 A'] / micros['matmul ONNX Runtime']:.2f} |")


def first_calls():
    print(f"\nFirst calls in a fresh process (ms, median of {FIRST_CALL_RUNS} processes):\n")
    print("| DMLOPS_NUMBA | import dmlops | first cumulative_sum | numba imported after it | second (1000 elements) | "
          "compiled scans loaded after that | first quantized_linear_matmul |")
    print("|---|---|---|---|---|---|---|")
    for mode in ("background", "wait"):
        *times, imported = fresh_processes(FIRST_CALL, mode)
        print(f"| {mode} | " + " | ".join(f"{ms:.1f}" for ms in times[:2]) +
              f" | {'yes' if imported else 'no'} | " + " | ".join(f"{ms:.1f}" for ms in times[2:]) + " |")
    print(f"\nA first quantized matmul in a fresh process (ms, median of {FIRST_CALL_RUNS} processes):\n")
    print("| DMLOPS_NUMBA | import dmlops | first quantized_linear_matmul | numba imported after it | second | "
          "compiled code loaded after that | third (prepared again) | fourth |")
    print("|---|---|---|---|---|---|---|---|")
    for mode in ("background", "wait", "off"):
        *times, imported = fresh_processes(FIRST_MATMUL, mode)
        print(f"| {mode} | " + " | ".join(f"{ms:.1f}" for ms in times[:2]) +
              f" | {'yes' if imported else 'no'} | " + " | ".join(f"{ms:.2f}" for ms in times[2:]) + " |")
    print(f"\nThe first-ever quantized matmul, numba's cache empty (DMLOPS_NUMBA=wait: it waits for its code to "
          f"compile), s, median of {FIRST_CALL_RUNS} processes:\n")
    print("| M × K × N (uint8 A, int8 B) | wall-clock | CPU, every thread of the process | CPU, the calling thread |")
    print("|---|---|---|---|")
    for shape in FIRST_EVER_SHAPES:
        wall, process, thread = fresh_processes(FIRST_EVER, "wait", shape, empty_cache=True)
        print(f"| {shape.replace('x', ' × ')} | {wall:.2f} | {process:.2f} | {thread:.2f} |")


def processor() -> str:
    """The processor's model and the flags of KERNEL_FLAGS it has (Linux), else what platform says."""
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            fields = dict(line.split(":", 1) for line in cpuinfo.read().split("\n\n")[0].splitlines() if ":" in line)
    except OSError:
        return platform.processor() or platform.machine()
    fields = {key.strip(): value.strip() for key, value in fields.items()}
    flags = set(fields.get("flags", "").split())
    return (f"{fields.get('model name', '?')} (family {fields.get('cpu family', '?')}, "
            f"model {fields.get('model', '?')}); flags: {' '.join(flag for flag in KERNEL_FLAGS if flag in flags)}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--rows", choices=["all", "scans", "matmul", "small", "first"], default="all")
    parser.add_argument("--shape", action="append", help="only the scan rows whose shape names this, the matmul "
                        "rows of this M x K x N, as 1x4096x4096 (repeatable)")
    arguments = parser.parse_args()
    repeats = arguments.repeats
    kernel = cpu_integer_gemm.KERNEL
    loops = cpu_scan.LOOPS.wait()  # the compiled scans and the matmul's compiled code loaded before any timing
    cpu_qmatmul.LOOPS.wait()
    from dmlops.backends.cpu.processor import amx_granted

    print(f"{processor()}; {os.cpu_count()} cores; AMX tile state granted: {'yes' if amx_granted() else 'no'}")
    print(f"numpy {np.__version__}, onnxruntime {onnxruntime.__version__ if onnxruntime else 'absent'}, "
          f"onnx {onnx.__version__ if onnx else 'absent'}, "
          f"numba {loops.numba.__version__ if loops else 'absent'}; quantized matmul kernel: "
          f"{kernel.name if kernel else 'float32 BLAS'} (runnable: "
          f"{', '.join(k.name for k in cpu_integer_gemm.RUNNABLE) or 'none'}); median of {repeats} rounds")
    if arguments.rows in ("all", "small"):
        print("\n| small call, repeated | dmlops µs | NumPy µs | dmlops, int8 A | ONNX Runtime µs | dmlops / ORT |")
        print("|---|---|---|---|---|---|")
        small_rows(repeats)
    if arguments.rows in ("all", "small", "first"):
        first_calls()
    if arguments.rows in ("all", "scans"):
        copy = copy_bandwidth(repeats)
        print(f"\nFloor: copy bandwidth {copy:.2f} GB/s (bytes read + written)\n")
        print("| scan (cumulative sum) | type | variant | dmlops GB/s | dmlops 1 core | "
              "dmlops cached stores | dmlops NumPy-only | ONNX Runtime | NumPy | dmlops / ORT | dmlops / copy |")
        print("|---|---|---|---|---|---|---|---|---|---|---|")
        scan_rows(repeats, copy, arguments.shape)
    if arguments.rows not in ("all", "matmul"):
        return
    cores = usable_cores()
    if kernel is None:
        peak = float("nan")
    else:
        peak = tile_peak() if kernel.tiles else instruction_peak(kernel)
    print(f"\nPeak of the {kernel.name if kernel else 'float32'} kernel's instruction: {peak:.0f} GOPS "
          f"({cores} cores at once)" + (f"; ONNX Runtime {cores} threads" if onnxruntime else "")
          + (f"; torch {torch.__version__}, {torch.get_num_threads()} threads" if torch else ""))
    print(f"\nGOPS (2·M·N·K a second), median of {repeats} rounds; fractions of the peak; in a row: {LOOP_CALLS} "
          "calls back to back, dmlops / peer\n")
    print("| quantized matmul M × K × N | u8s8 dmlops | u8s8 dmlops 1 core | ONNX Runtime u8s8 | dmlops / ORT | "
          "s8s8 dmlops | torch._int_mm s8s8 | dmlops / torch | u8s8 / peak | s8s8 / peak | ORT / peak | "
          "torch / peak | in a row / ORT | in a row / torch | max |dmlops − ORT| | u8s8 dmlops, B prepared | "
          "ORT u8s8, B constant | prepared / constant | in a row, prepared / constant |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    matmul_rows(repeats, peak, arguments.shape)


if __name__ == "__main__":
    main()
