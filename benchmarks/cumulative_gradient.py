"""The cumulative product's gradient against torch.autograd's, measured in one run.

    python benchmarks/cumulative_gradient.py [--device cpu|cuda] [--repeats 7]

dmlops computes dL/dx as the exclusive product of x times a linear recurrence of g walked the other way
(dmlops.ops.cumulative_gradient): a scan and a recurrence pass. torch's is the backward of torch.cumprod (computed
once, its graph kept), and for reverse or exclusive scans the backward of the flips and the shift around it. Inputs
are near ±1 with a zero in every line, as gradients of products of masks meet them (torch then takes its slower
path for lines with zeros). Times are medians of rounds that time every contender once; on CUDA each call is timed
with CUDA events, a batch of 10 calls a round. The last columns give the bytes of x, g and the result over the time
(3·n·itemsize), against the floor of a copy (2·n·itemsize at the copy bandwidth measured in the same run).
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from dmlops.ops.cumulative_gradient import cumulative_gradient

SHAPES = {
    "cpu": [((1 << 22,), 0, "1-D 2^22"), ((256, 16384), 1, "256 × 16384, last axis"),
            ((16384, 256), 0, "16384 × 256, axis 0"), ((32, 1024), 1, "32 × 1024, last axis")],
    "cuda": [((1 << 24,), 0, "1-D 2^24"), ((4096, 16384), 1, "4096 × 16384, last axis"),
             ((16384, 4096), 0, "16384 × 4096, axis 0"), ((32, 1024), 1, "32 × 1024, last axis")],
}
VARIANTS = [(False, False, "inclusive"), (True, True, "reverse + exclusive")]


def inputs(shape, axis, device):
    rng = np.random.default_rng(0)
    x = rng.choice([-1.0, 1.0], shape) * rng.uniform(0.9, 1.1, shape)
    moved = np.moveaxis(x, axis, -1)
    moved[..., shape[axis] // 3] = 0.0  # a zero in every line
    return (torch.tensor(values, dtype=torch.float32, device=device) for values in (x, rng.standard_normal(shape)))


def torch_backward(x, g, axis, reverse, exclusive):
    """A call of torch's backward of the scan (forward computed once, graph kept)."""
    leaf = x.clone().requires_grad_()
    walked = leaf.flip(axis) if reverse else leaf
    y = torch.cumprod(walked, axis)
    if exclusive:
        y = torch.cat([torch.ones_like(y.narrow(axis, 0, 1)), y.narrow(axis, 0, y.shape[axis] - 1)], axis)
    y = y.flip(axis) if reverse else y
    return lambda: torch.autograd.grad(y, leaf, g, retain_graph=True)[0]


def seconds(call, device: str) -> float:
    if device == "cuda":
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(10):
            call()
        end.record()
        torch.cuda.synchronize()
        return start.elapsed_time(end) / 1e3 / 10
    begin = time.perf_counter()
    call()
    return time.perf_counter() - begin


def median_times(runs: dict, repeats: int, device: str) -> dict:
    for run in runs.values():
        run()  # compilation, allocation
    rounds = {name: [] for name in runs}
    for _ in range(repeats):
        for name, run in runs.items():
            rounds[name].append(seconds(run, device))
    return {name: float(np.median(times)) for name, times in rounds.items()}


def copy_bandwidth(device: str, repeats: int) -> float:
    source = torch.empty(1 << 26, dtype=torch.float32, device=device).fill_(1.0)
    target = torch.empty_like(source)
    time_taken = median_times({"copy": lambda: target.copy_(source)}, repeats, device)["copy"]
    return 2 * source.nbytes / time_taken


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--repeats", type=int, default=7)
    arguments = parser.parse_args()
    device = arguments.device
    copy = copy_bandwidth(device, arguments.repeats)
    print(f"device: {torch.cuda.get_device_name() if device == 'cuda' else 'cpu'}, torch {torch.__version__}, "
          f"float32, copy {copy / 1e9:.1f} GB/s (read + write)")
    print("| shape | variant | dmlops µs | torch.autograd µs | dmlops GB/s | torch GB/s | copy floor µs |")
    print("|---|---|---|---|---|---|---|")
    for shape, axis, label in SHAPES[device]:
        x, g = inputs(shape, axis, device)
        for reverse, exclusive, variant in VARIANTS:
            runs = {"dmlops": lambda: cumulative_gradient("product", x, g, axis, reverse, exclusive),
                    "torch": torch_backward(x, g, axis, reverse, exclusive)}
            expected = runs["torch"]()
            error = (runs["dmlops"]() - expected).abs().max().item()
            assert error <= 1e-3 * expected.abs().max().item(), (label, variant, error)
            times = median_times(runs, arguments.repeats, device)
            moved = 3 * x.nbytes
            print(f"| {label} | {variant} | {times['dmlops'] * 1e6:.0f} | {times['torch'] * 1e6:.0f} | "
                  f"{moved / times['dmlops'] / 1e9:.1f} | {moved / times['torch'] / 1e9:.1f} | "
                  f"{2 * x.nbytes / copy * 1e6:.0f} |")


if __name__ == "__main__":
    main()
