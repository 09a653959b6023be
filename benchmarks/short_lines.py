"""Short contiguous lines on one core: the CPU backend's compiled scan of P × L tensors along their last axis (L up
to SHORT_LINE), blocks of lines one line a vector lane (as installed) against the loops it replaced (one element
after another; FLOAT16 through float32 blocks of lines), with np.copyto of the same bytes, in GB/s read + written.

Each round times every contender once (old and new on the same arrays, in the same process); the table gives the
median of the rounds. The replaced loops run by setting scan.SHORT_LINE below every L, for this comparison only.

    PYTHONPATH=src python benchmarks/short_lines.py [--lengths 2,3,4,5,8,12,16] [--repeats 7]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from dmlops.backends.cpu import scan as cpu_scan

ELEMENTS = 1 << 25  # 4M × 8: 128 MiB of float32, far past the caches


def scan_on_one_core(x, out, reverse, exclusive, blocks: bool):
    """A kept run (views and compiled loop found once) of the scan along the last axis on one core."""
    kept = cpu_scan.SHORT_LINE
    cpu_scan.SHORT_LINE = kept if blocks else 0
    try:
        run = cpu_scan.prepare("sum", x, out, 1, reverse, exclusive, compiled=True, pieces=1)
    finally:
        cpu_scan.SHORT_LINE = kept
    return lambda: run(x, out)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", default="2,3,4,5,8,12,16")
    parser.add_argument("--repeats", type=int, default=7)
    arguments = parser.parse_args()
    print("| P × L | type | one after another GB/s | blocks GB/s | blocks, reverse + exclusive | np.copyto | "
          "blocks / copy |")
    print("|---|---|---|---|---|---|---|")
    for length in map(int, arguments.lengths.split(",")):
        for dtype in (np.float32, np.float16):
            x = np.random.default_rng(length).standard_normal((ELEMENTS // length, length)).astype(dtype)
            out = np.empty_like(x)
            runs = {"old": scan_on_one_core(x, out, False, False, blocks=False),
                    "new": scan_on_one_core(x, out, False, False, blocks=True),
                    "new reverse + exclusive": scan_on_one_core(x, out, True, True, blocks=True),
                    "copy": lambda: np.copyto(out, x)}
            times = {name: [] for name in runs}
            for run in runs.values():
                run()
            for _ in range(arguments.repeats):
                for name, run in runs.items():
                    start = time.perf_counter()
                    run()
                    times[name].append(time.perf_counter() - start)
            rates = {name: 2 * x.nbytes / float(np.median(values)) / 1e9 for name, values in times.items()}
            print(f"| {x.shape[0]} × {length} | {np.dtype(dtype).name} | {rates['old']:.1f} | {rates['new']:.1f} | "
                  f"{rates['new reverse + exclusive']:.1f} | {rates['copy']:.1f} | "
                  f"{rates['new'] / rates['copy']:.2f} |", flush=True)


if __name__ == "__main__":
    main()
