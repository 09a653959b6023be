"""Eager calls on the CUDA backend as users make them: the array API on torch tensors, called back to back from
Python and synchronised once per batch, against torch (and CuPy) in the same run.

Scans: microseconds per call of a float32 scan along the last axis of (rows, 1024)-shaped tensors of 256 B to
64 MiB (rows of fewer elements below 4 KiB), plain and reverse + exclusive, against torch.cumsum and torch's
flip → cumsum → flip → subtract, and cupy.cumsum; with the floors: a bare one-block Triton launch from Python and
the bytes (read + written) over the device's copy bandwidth.

Quantized matmul: µs per call of M × 4096 × 4096 for M = 1 … 4096 (and TOPS at 8192³), A uint8 with a zero point
(a fresh A each call, from a few rotated), B int8 with per-column scales (weights), the output uint8 with a zero
point. dmlops with B prepared once (``prepare_b``), with B given at every call (its kernels then pack B), and
``torch.compile(mode="reduce-overhead", fullgraph=True)`` of a layer calling ``torch.ops.dmlops``; the GPU time of
each call's kernels (the call captured in a CUDA graph and replayed); against torch's best pipelines: torch._int_mm
(B column-major, A padded to 32 rows where it has fewer) plus the requantization in float32, and a bfloat16 matmul
with B dequantized once. The floor of an eager call is its kernels' GPU time plus a launch's host cost.

    PYTHONPATH=src python3 benchmarks/eager.py [--only scans|qmm] [--plot DIR] [--record FILE] [--profile]
"""

from __future__ import annotations

import argparse
import cProfile
import datetime
import json
import pstats
import time
from pathlib import Path

import torch
import triton

import dmlops

SCAN_BYTES = [256, 4096, 65536, 1 << 20, 16 << 20, 64 << 20]
LLM_M = [1, 16, 128, 512, 4096]
LLM_KN = [(4096, 4096)]
SQUARE = [8192]
ROTATED = 4  # A tensors a call takes in turn
# Dense int8 tensor-core peaks (TOPS, without sparsity) by the device name's model: the limit the figures draw.
INT8_PEAK_TOPS = {"H100": 1979, "H200": 1979}


@triton.jit
def _empty_kernel(x):
    pass


def per_call_us(call, budget_s=0.25) -> float:
    """Wall-clock time per call of back-to-back eager calls, synchronised once per batch (median of 5 batches)."""
    for _ in range(3):
        call()
    torch.cuda.synchronize()
    start = time.perf_counter()
    call()
    torch.cuda.synchronize()
    once = time.perf_counter() - start
    repeats = max(5, min(2000, int(budget_s / 5 / max(once, 1e-6))))
    times = []
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(repeats):
            call()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - start) / repeats * 1e6)
    return sorted(times)[2]


def compiled_us(call) -> float:
    """per_call_us of a torch.compile'd layer, NaN where it fails to compile or run."""
    try:
        return per_call_us(call)
    except Exception as error:  # noqa: BLE001 (reported in the table, with the error's first line here)
        print(f"compiled layer failed: {str(error).splitlines()[0][:200]}")
        return float("nan")


def graph_us(call) -> float:
    return triton.testing.do_bench_cudagraph(call, return_mode="median") * 1e3


def copy_bandwidth() -> float:
    x = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    y = torch.empty_like(x)
    return 2 * x.numel() / (triton.testing.do_bench(lambda: y.copy_(x), return_mode="median") * 1e-3)


def scan_rows(copy):
    try:
        import cupy
    except ImportError:
        cupy = None
    marker = torch.empty(1, device="cuda")
    bare = per_call_us(lambda: _empty_kernel[(1,)](marker))
    rows = []
    for nbytes in SCAN_BYTES:
        n = nbytes // 4
        x = torch.randn(max(1, n // 1024), min(n, 1024), device="cuda")
        times = {
            "dmlops": per_call_us(lambda: dmlops.cumulative_sum(x, -1)),
            "dmlops rev+excl": per_call_us(lambda: dmlops.cumulative_sum(x, -1, reverse=True, exclusive=True)),
            "torch.cumsum": per_call_us(lambda: torch.cumsum(x, -1)),
            "torch rev+excl": per_call_us(lambda: torch.cumsum(x.flip(-1), -1).flip(-1) - x),
        }
        if cupy is not None:
            xc = cupy.from_dlpack(x)
            times["cupy.cumsum"] = per_call_us(lambda: cupy.cumsum(xc, axis=-1))
        rows.append((nbytes, tuple(x.shape), times, max(bare, 2 * nbytes / copy * 1e6)))
    return bare, rows


def requantize_float32(acc, a_zero, b_sums, multiplier, out_zero):
    """torch's requantization of an int32 accumulator (not bit-exact; cheaper than dmlops' float64 rounding)."""
    y = (acc - a_zero * b_sums).float() * multiplier
    return torch.clamp(torch.round(y) + out_zero, 0, 255).to(torch.uint8)


def qmm_rows():
    import dmlops.torch  # noqa: F401  (registers torch.ops.dmlops)

    rows = []
    shapes = [(m, k, n) for k, n in LLM_KN for m in LLM_M] + [(n, n, n) for n in SQUARE]
    for m, k, n in shapes:
        a_all = [torch.randint(0, 256, (m, k), dtype=torch.uint8, device="cuda") for _ in range(ROTATED)]
        turn = iter(range(1 << 62))
        b = torch.randint(-128, 128, (k, n), dtype=torch.int8, device="cuda")
        a_scale, a_zero = torch.tensor(0.02, device="cuda"), torch.tensor(131, dtype=torch.uint8, device="cuda")
        b_scale = torch.rand(n, device="cuda") * 0.01 + 0.005
        out_scale, out_zero = torch.tensor(2.5, device="cuda"), torch.tensor(120, dtype=torch.uint8, device="cuda")
        prepared = dmlops.prepare_b(b, b_scale)

        def next_a():
            return a_all[next(turn) % ROTATED]

        def with_prepared():
            return dmlops.quantized_linear_matmul(next_a(), a_scale, a_zero, prepared, None, None, out_scale,
                                                  out_zero)

        def with_b():
            return dmlops.quantized_linear_matmul(next_a(), a_scale, a_zero, b, b_scale, None, out_scale, out_zero)

        layer = torch.compile(lambda a: torch.ops.dmlops.quantized_linear_matmul(
            a, a_scale, a_zero, b, b_scale, None, out_scale, out_zero), mode="reduce-overhead", fullgraph=True)

        # torch: A shifted to int8, B column-major, its column sums and the multiplier made once
        padded = max(m, 32)
        a8 = torch.zeros(padded, k, dtype=torch.int8, device="cuda")
        b_column_major = b.t().contiguous().t()
        b_sums = b.sum(0, dtype=torch.int32)
        multiplier = a_scale * b_scale / out_scale
        a_zero8 = a_zero.to(torch.int32) - 128

        def int_mm():
            a8[:m] = next_a().view(torch.int8) ^ -128
            return requantize_float32(torch._int_mm(a8, b_column_major)[:m], a_zero8, b_sums, multiplier, out_zero)

        b_bf16 = ((b.float()) * b_scale).bfloat16()

        def bf16():
            y = ((next_a().float() - a_zero.float()) * a_scale).bfloat16() @ b_bf16
            return torch.clamp(torch.round(y.float() / out_scale) + out_zero, 0, 255).to(torch.uint8)

        times = {"dmlops prepared": per_call_us(with_prepared), "dmlops plain B": per_call_us(with_b),
                 "dmlops compiled": compiled_us(lambda: layer(next_a())),
                 "torch._int_mm": per_call_us(int_mm), "torch bf16": per_call_us(bf16)}
        kernels = {"prepared": graph_us(with_prepared), "plain B": graph_us(with_b)}
        rows.append(((m, k, n), times, kernels))
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--plot", metavar="DIR", help="draw the run's figures into this folder")
    parser.add_argument("--record", metavar="FILE", help="write the run's numbers here (JSON, for eager_plots.py)")
    parser.add_argument("--profile", action="store_true", help="only: where the host time of small calls goes")
    parser.add_argument("--only", choices=("scans", "qmm"), help="only these rows")
    args = parser.parse_args()
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, triton {triton.__version__}")
    if args.profile:
        return profile_calls()
    record = {"device": torch.cuda.get_device_name(), "date": datetime.date.today().isoformat(),
              "versions": f"torch {torch.__version__}, triton {triton.__version__}",
              "int8_peak_tops": next((peak for model, peak in INT8_PEAK_TOPS.items()
                                      if model in torch.cuda.get_device_name()), None)}
    if args.only != "qmm":
        copy, bare, scans = print_scans()
        record |= {"copy_bandwidth_tb_s": copy / 1e12, "bare_launch_us": bare,
                   "scans": [{"bytes": nbytes, "shape": list(shape), "us": times}
                             for nbytes, shape, times, _ in scans]}
    if args.only != "scans":
        record["qmatmul"] = [{"m": m, "k": k, "n": n, "us": times, "graph_us": kernels["prepared"]}
                             for (m, k, n), times, kernels in print_qmms()]
    if args.record:
        Path(args.record).write_text(json.dumps(record, indent=1) + "\n")
    if args.plot and "scans" in record and "qmatmul" in record:
        import eager_plots  # beside this script

        for path in eager_plots.draw(record, args.plot):
            print(path)


def print_scans():
    copy = copy_bandwidth()
    print(f"copy bandwidth {copy / 1e12:.2f} TB/s")
    bare, scans = scan_rows(copy)
    print(f"\nScans, float32, last axis: µs per eager call (bare Triton launch {bare:.1f} µs)\n")
    names = list(scans[0][2])
    print("| bytes | shape | " + " | ".join(names) + " | dmlops − torch.cumsum µs | rev+excl / torch's | floor µs |")
    print("|---" * (len(names) + 5) + "|")
    for nbytes, shape, times, floor in scans:
        print(f"| {nbytes} | {shape} | " + " | ".join(f"{times[name]:.1f}" for name in names) +
              f" | {times['dmlops'] - times['torch.cumsum']:+.1f} | "
              f"{times['dmlops rev+excl'] / times['torch rev+excl']:.2f} | {floor:.1f} |")
    return copy, bare, scans


def print_qmms():
    qmms = qmm_rows()
    print("\nQuantized matmul, µs per eager call (kernels: their GPU time, graph-replayed)\n")
    names = list(qmms[0][1])
    print("| M × K × N | " + " | ".join(names) + " | kernels prepared | kernels plain B | prepared − kernels |"
          " plain − kernels | prepared / torch._int_mm | TOPS prepared |")
    print("|---" * (len(names) + 7) + "|")
    for (m, k, n), times, kernels in qmms:
        print(f"| {m} × {k} × {n} | " + " | ".join(f"{times[name]:.1f}" for name in names) +
              f" | {kernels['prepared']:.1f} | {kernels['plain B']:.1f} | "
              f"{times['dmlops prepared'] - kernels['prepared']:+.1f} | "
              f"{times['dmlops plain B'] - kernels['plain B']:+.1f} | "
              f"{times['dmlops prepared'] / times['torch._int_mm']:.2f} | "
              f"{2 * m * n * k / (min(times['dmlops prepared'], kernels['prepared']) * 1e-6) / 1e12:.0f} |")
    return qmms


def profile_calls():
    """Where the host time of a small scan and of an M = 1 matmul with B prepared goes."""
    x = torch.randn(32, 1024, device="cuda")
    a = torch.randint(0, 256, (1, 4096), dtype=torch.uint8, device="cuda")
    b = torch.randint(-128, 128, (4096, 4096), dtype=torch.int8, device="cuda")
    a_scale, a_zero = torch.tensor(0.02, device="cuda"), torch.tensor(131, dtype=torch.uint8, device="cuda")
    out_scale, out_zero = torch.tensor(2.5, device="cuda"), torch.tensor(120, dtype=torch.uint8, device="cuda")
    prepared = dmlops.prepare_b(b, torch.rand(4096, device="cuda") + 0.1)
    for name, call in [("scan (32, 1024)", lambda: dmlops.cumulative_sum(x, -1)),
                       ("matmul 1 × 4096 × 4096, B prepared",
                        lambda: dmlops.quantized_linear_matmul(a, a_scale, a_zero, prepared, None, None, out_scale,
                                                               out_zero))]:
        call()
        profile = cProfile.Profile()
        profile.runcall(lambda: [call() for _ in range(500)])
        torch.cuda.synchronize()
        print(f"\n{name}")
        pstats.Stats(profile).sort_stats("tottime").print_stats(14)


if __name__ == "__main__":
    main()
