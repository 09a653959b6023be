"""The CPU quantized matmul's threads: dmlops' own pool against numba's threading layers, on the rows of
benchmarks/cpu.py.

    python benchmarks/cpu_threads.py [--repeats 7]

Both run the same compiled product (``driver.product_pieces``, the pieces taken by tickets) with the same pieces,
on as many threads; only the way the threads are started differs: dmlops' pool (``pieces.run_on_cores``: threads
kept, waiting in compiled code, woken by a futex), or one compiled call that hands the threads' calls to numba's
threading layer as a prange does (``atomics.run_on_numba_threads``, what products of more than
``pieces.POOL_THREADS`` threads run on), in each of numba's threading layers that loads here (workqueue, omp, tbb;
each in a process of its own, since a process loads one layer). The table gives the median of ``repeats`` rounds,
each round timing every contender once, in µs a call; the pool's speed-up is the best layer's time over the pool's.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

SHAPES = [(512, 512, 512), (1024, 1024, 1024), (2048, 2048, 2048), (1, 4096, 4096), (16, 4096, 4096),
          (128, 4096, 4096)]
LAYERS = ("workqueue", "omp", "tbb")


def measure(layer: str | None, repeats: int) -> dict:
    """Seconds a call (median of rounds) of each shape's product, by the pool (layer None) or by that threading
    layer; in this process."""
    import numba

    from dmlops.backends.cpu import atomics, driver, integer_gemm, pieces, qmatmul

    loops = qmatmul.LOOPS.wait()
    assert loops is not None
    if layer is not None:
        numba.config.THREADING_LAYER = layer

    rng = np.random.default_rng(3)
    times = {}
    for m, k, n in SHAPES:
        a = rng.integers(0, 256, (m, k), dtype=np.uint8)
        b = rng.integers(-128, 128, (k, n), dtype=np.int8)
        kernel = integer_gemm.kernel_for_rows(m, k * n >= integer_gemm.PARALLEL_PACKING)
        product_pieces, threads = qmatmul.pieces_of_product(integer_gemm, m, k, n, None)
        layout = integer_gemm.products_layout(kernel, a, b)
        counts = integer_gemm.stage_counts(kernel, layout, m, k, n, product_pieces)
        buffers = tuple(qmatmul.in_one_block(integer_gemm.scratch_layouts(kernel, m, k, n)))
        finish = (np.full(m, 0.02, np.float32), np.full(n, 0.01, np.float32), np.full(m, 0.1 * k**0.5, np.float32),
                  np.full(m, 128.0), 0.0, 255.0, np.empty((m, n), np.uint8))
        arguments = (kernel.name, layout, None, counts, *integer_gemm.operand(a, None, m),
                     *integer_gemm.operand(b, None, n), buffers, False, finish)

        def state():
            return np.zeros(1 + len(counts), np.int64)

        entry = integer_gemm.KeptCalls().entry(driver.multiply_in_pieces, *arguments[:2], state(), *arguments[3:],
                                               pieces.NO_RING, True)

        def run():
            call = (*arguments[:2], state(), *arguments[3:])
            if layer is None:
                pieces.run_on_cores(lambda _: entry, call, threads)
            else:
                atomics.run_on_numba_threads(entry, call, threads)
        run()
        run()
        rounds = []
        for _ in range(repeats):
            time.sleep(0.05)
            run()
            start = time.perf_counter()
            run()
            rounds.append(time.perf_counter() - start)
        times[f"{m}x{k}x{n}"] = float(np.median(rounds))
    if layer is not None:
        times["layer"] = numba.threading_layer()
    return times


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--layer", help=argparse.SUPPRESS)  # (a child process's contender)
    arguments = parser.parse_args()
    if arguments.layer:
        print(json.dumps(measure(None if arguments.layer == "pool" else arguments.layer, arguments.repeats)))
        return
    results = {}
    for contender in ("pool", *LAYERS):
        run = subprocess.run([sys.executable, __file__, "--layer", contender, "--repeats", str(arguments.repeats)],
                             capture_output=True, text=True, env=os.environ)
        try:
            results[contender] = json.loads(run.stdout.strip().splitlines()[-1])
        except (IndexError, json.JSONDecodeError):
            print(f"{contender}: did not run ({(run.stderr.strip().splitlines() or ['?'])[-1]})")
    layers = [layer for layer in LAYERS if layer in results]
    print("| M × K × N | pool µs | " + " | ".join(f"{layer} µs" for layer in layers) +
          " | best layer / pool |")
    print("|---" * (3 + len(layers)) + "|")
    for shape in results["pool"]:
        pool = results["pool"][shape]
        best = min(results[layer][shape] for layer in layers) if layers else float("nan")
        print(f"| {shape.replace('x', ' × ')} | {pool * 1e6:.0f} | " +
              " | ".join(f"{results[layer][shape] * 1e6:.0f}" for layer in layers) + f" | {best / pool:.2f} |")


if __name__ == "__main__":
    main()
