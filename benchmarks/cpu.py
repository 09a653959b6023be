"""CPU backend speed against its peers, measured in one run: ONNX Runtime's CumSum and QLinearMatMul, and NumPy.

    python benchmarks/cpu.py [--repeats 5]

Scans count 2·n·itemsize bytes (read once, written once) and are compared with the floor, this machine's copy
bandwidth (``np.copyto`` of 256 MiB). NumPy has no reverse or exclusive scan: it flips, scans, flips back and
subtracts the input (exclusive sums). The quantized matmul counts 2·M·N·K operations and is compared with the
floor for an exact float product, float32 BLAS (sgemm) of the same size. NumPy's integer matmul never uses BLAS;
it is timed on 64 rows and reported as a rate. dmlops runs with its compiled engine where numba is installed, and
with its NumPy-only engine (no numba) beside it.
"""

from __future__ import annotations

import argparse
import os
import platform
import time

import numpy as np
import onnx
import onnxruntime
from onnx import TensorProto, helper

import dmlops
from dmlops.backends import cpu_scan

SCAN_SHAPES = [((1 << 26,), 0, "1-D 2^26"), ((1024, 65536), 1, "1024 × 65536, last axis"),
               ((65536, 1024), 0, "65536 × 1024, axis 0"), ((1 << 22, 8), 1, "4M × 8, last axis")]
MATMUL_SIZES = [512, 1024, 2048]
ONNX_TYPES = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.float16): TensorProto.FLOAT16,
              np.dtype(np.uint8): TensorProto.UINT8, np.dtype(np.int8): TensorProto.INT8}


def best_time(run, repeats: int) -> float:
    run()  # warm up: compilation, allocation, first touch
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return min(times)


def onnx_session(node, inputs, output, initializers=()):
    """An ONNX Runtime CPU session of one node; inputs and output are (name, dtype, shape)."""
    def info(name, dtype, shape):
        return helper.make_tensor_value_info(name, ONNX_TYPES[np.dtype(dtype)], list(shape))

    graph = helper.make_graph([node], "benchmark", [info(*i) for i in inputs], [info(*output)],
                              initializer=list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    return onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


# -- scans ---------------------------------------------------------------------------------------------------------


def copy_bandwidth(repeats: int) -> float:
    source = np.random.default_rng(0).standard_normal(1 << 26, dtype=np.float32)
    target = np.empty_like(source)
    return 2 * source.nbytes / best_time(lambda: np.copyto(target, source), repeats) / 1e9


def numpy_scan(x, axis, reverse, exclusive):
    """The NumPy way: flip, cumsum (float16 in float32), flip back, subtract for exclusive."""
    walked = np.flip(x, axis) if reverse else x
    tally = np.cumsum(walked, axis=axis, dtype=np.float32 if x.dtype == np.float16 else x.dtype)
    if reverse:
        tally = np.flip(tally, axis)
    if exclusive:
        tally = tally - x
    return tally.astype(x.dtype, copy=False)


def scan_rows(repeats: int, copy: float):
    rng = np.random.default_rng(1)
    rows = []
    for shape, axis, label in SCAN_SHAPES:
        for dtype in (np.float32, np.float16):
            x = rng.standard_normal(shape, dtype=np.float32).astype(dtype)
            out = np.empty_like(x)
            gigabytes = 2 * x.nbytes / 1e9
            for reverse, exclusive in ((False, False), (True, True)):
                session = onnx_session(
                    helper.make_node("CumSum", ["x", "axis"], ["y"], reverse=int(reverse), exclusive=int(exclusive)),
                    [("x", dtype, shape)], ("y", dtype, shape),
                    [helper.make_tensor("axis", TensorProto.INT64, [], [axis])])
                rates = {
                    "dmlops": lambda: dmlops.cumulative_sum(x, axis, reverse=reverse, exclusive=exclusive, out=out),
                    "dmlops NumPy-only": lambda: cpu_scan.cumulative("sum", x, out, axis, reverse, exclusive,
                                                                     compiled=False),
                    "ONNX Runtime": lambda: session.run(None, {"x": x}),
                    "NumPy": lambda: numpy_scan(x, axis, reverse, exclusive),
                }
                rates = {name: gigabytes / best_time(run, repeats) for name, run in rates.items()}
                variant = "reverse + exclusive" if reverse else "plain"
                rows.append((label, np.dtype(dtype).name, variant, rates))
                print_scan_row(rows[-1], copy)
    return rows


def print_scan_row(row, copy):
    label, dtype, variant, rates = row
    dml, ort = rates["dmlops"], rates["ONNX Runtime"]
    print(f"| {label} | {dtype} | {variant} | {dml:.2f} | {rates['dmlops NumPy-only']:.2f} | {ort:.2f} | "
          f"{rates['NumPy']:.2f} | {dml / ort:.2f} | {dml / copy:.2f} |", flush=True)


# -- quantized matmul ------------------------------------------------------------------------------------------


def sgemm_rate(n: int, repeats: int) -> float:
    rng = np.random.default_rng(2)
    a, b = rng.standard_normal((n, n), dtype=np.float32), rng.standard_normal((n, n), dtype=np.float32)
    return 2 * n**3 / best_time(lambda: a @ b, repeats) / 1e9


def matmul_rows(repeats: int):
    """uint8 A with zero point 128 (per tensor), int8 B with per-column scales, uint8 output."""
    rng = np.random.default_rng(3)
    for n in MATMUL_SIZES:
        a = rng.integers(0, 256, (n, n), dtype=np.uint8)
        b = rng.integers(-128, 128, (n, n), dtype=np.int8)
        a_scale, a_zero = np.float32(0.02), np.uint8(128)
        b_scale, b_zero = (rng.random(n, dtype=np.float32) + 0.5) * 0.01, np.zeros(n, np.int8)
        out_scale, out_zero = np.float32(0.1 * n**0.5), np.uint8(128)
        session = onnx_session(
            helper.make_node("QLinearMatMul", ["a", "a_scale", "a_zero", "b", "b_scale", "b_zero", "y_scale",
                                               "y_zero"], ["y"]),
            [("a", np.uint8, (n, n)), ("b", np.int8, (n, n))], ("y", np.uint8, (n, n)),
            [helper.make_tensor("a_scale", TensorProto.FLOAT, [], [a_scale]),
             helper.make_tensor("a_zero", TensorProto.UINT8, [], [a_zero]),
             helper.make_tensor("b_scale", TensorProto.FLOAT, [n], b_scale),
             helper.make_tensor("b_zero", TensorProto.INT8, [n], b_zero),
             helper.make_tensor("y_scale", TensorProto.FLOAT, [], [out_scale]),
             helper.make_tensor("y_zero", TensorProto.UINT8, [], [out_zero])])
        out = np.empty((n, n), np.uint8)

        def run_dmlops():
            dmlops.quantized_linear_matmul(a, a_scale, a_zero, b, b_scale, b_zero, out_scale, out_zero, out=out)

        operations = 2 * n**3 / 1e9
        a_rows, b_wide = a[:64].astype(np.int32), b.astype(np.int32)
        rates = {"dmlops": operations / best_time(run_dmlops, repeats),
                 "ONNX Runtime": operations / best_time(lambda: session.run(None, {"a": a, "b": b}), repeats),
                 "NumPy int32 matmul": operations * 64 / n / best_time(lambda: a_rows @ b_wide, 1)}
        floor = sgemm_rate(n, repeats)
        difference = np.abs(out.astype(np.int16) - session.run(None, {"a": a, "b": b})[0]).max()
        print(f"| {n} | {rates['dmlops']:.1f} | {rates['ONNX Runtime']:.1f} | {rates['NumPy int32 matmul']:.2f} | "
              f"{floor:.1f} | {rates['dmlops'] / rates['ONNX Runtime']:.2f} | {rates['dmlops'] / floor:.2f} | "
              f"{difference} |", flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    repeats = parser.parse_args().repeats
    print(f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores; numpy {np.__version__}, "
          f"onnxruntime {onnxruntime.__version__}, onnx {onnx.__version__}, "
          f"numba {cpu_scan.numba.__version__ if cpu_scan.numba else 'absent'}; best of {repeats}")
    copy = copy_bandwidth(repeats)
    print(f"\nFloor: copy bandwidth {copy:.2f} GB/s (bytes read + written)\n")
    print("| scan (cumulative sum) | type | variant | dmlops GB/s | dmlops NumPy-only | ONNX Runtime | NumPy | "
          "dmlops / ORT | dmlops / copy |")
    print("|---|---|---|---|---|---|---|---|---|")
    scan_rows(repeats, copy)
    print("\n| quantized matmul n×n×n | dmlops GOPS | ONNX Runtime | NumPy int32 matmul | floor: sgemm GFLOP/s | "
          "dmlops / ORT | dmlops / sgemm | max |dmlops − ORT| |")
    print("|---|---|---|---|---|---|---|---|")
    matmul_rows(repeats)


if __name__ == "__main__":
    main()
