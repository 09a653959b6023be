"""Host time of one eager call on small CUDA tensors, where launching costs more than the GPU's work.

Prints microseconds per call (back-to-back calls, synchronised once at the end) for dmlops and torch on tensors
small enough that the GPU work is a few microseconds; ``--profile`` adds the functions that take the host's time.

    PYTHONPATH=src python3 benchmarks/host_overhead.py [--profile]
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import time

import torch

import dmlops


def per_call_us(call, repeats=2000) -> float:
    for _ in range(20):
        call()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(repeats):
        call()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / repeats * 1e6


def cases():
    x = torch.randn(256, 256, device="cuda")
    a = torch.randint(-128, 128, (256, 256), dtype=torch.int8, device="cuda")
    b = torch.randint(-128, 128, (256, 256), dtype=torch.int8, device="cuda")
    b_column_major = b.t().contiguous().t()
    a_scale = torch.tensor(0.02, device="cuda")
    zero = torch.tensor(3, dtype=torch.int8, device="cuda")
    return {
        "cumulative sum, 256 × 256, last axis": (
            lambda: dmlops.cumulative_sum(x, -1),
            lambda: torch.cumsum(x, -1)),
        "cumulative sum, reverse + exclusive": (
            lambda: dmlops.cumulative_sum(x, -1, reverse=True, exclusive=True),
            lambda: torch.cumsum(x.flip(-1), -1).flip(-1) - x),
        "quantized matmul 256³": (
            lambda: dmlops.quantized_linear_matmul(a, a_scale, zero, b, 0.01, None, 0.5, zero),
            lambda: torch._int_mm(a, b_column_major)),
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", action="store_true", help="show where dmlops' host time goes")
    args = parser.parse_args()
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}")
    print("| case | dmlops µs per call | torch µs per call (no requantization for the matmul) |")
    print("|---|---|---|")
    for name, (ours, theirs) in cases().items():
        print(f"| {name} | {per_call_us(ours):.1f} | {per_call_us(theirs):.1f} |")
    if args.profile:
        for name, (ours, _) in cases().items():
            print(f"\n{name}")
            profile = cProfile.Profile()
            profile.runcall(lambda: [ours() for _ in range(500)])
            pstats.Stats(profile).sort_stats("tottime").print_stats(12)


if __name__ == "__main__":
    main()
