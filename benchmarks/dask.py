"""Dask arrays: dmlops's scans and quantized matmul on a LocalCluster of 1 and 2 worker processes, against Dask's own
ways of computing the same, and against dmlops's in-memory call on the whole array.

    python benchmarks/dask.py [--repeats 2]

Scan: a float32 array of 2 GiB (16384 × 32768, chunks of 2048 × 8192: four chunks along the scanned last axis),
persisted in the workers first; each run persists its result and waits for it. Scans count 2·n·itemsize bytes.
Dask's peer is ``dask.array.cumsum``; for a reverse exclusive scan it flips, scans, flips back and subtracts the input.

Quantized matmul: A uint8 {262144, 4096} (1 GiB, chunks of 4096 rows) × B int8 {4096, 64}, per-column B scales.
A is made chunk by chunk in the workers as the product needs them (random rows, repeated every 256 rows): it is
larger than a worker's memory limit of 768 MiB and never held whole. Each run persists the uint8 result
{262144, 64}. It counts 2·M·N·K operations. dmlops runs with K as one chunk (one in-memory call a block) and with K
in four chunks (exact accumulators summed over K, requantized once); Dask's peer dequantizes to float32, multiplies
(``dask.array.matmul``) and quantizes. Making A's chunks alone is timed too ("A made only"): every run includes it.

Each Dask run includes building its graph. The table gives the median of ``--repeats`` runs after an untimed one.
The scan's cluster has 12 GiB of memory limit in all (a run holds the input, the chunks' own scans and the result).
"""

from __future__ import annotations

import os
import sys

# Run as a script, this file's folder leads sys.path, and this file is named like the package it measures.
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [path for path in sys.path if os.path.abspath(path or os.curdir) != HERE]

import argparse  # noqa: E402
import platform  # noqa: E402
import time  # noqa: E402

import dask  # noqa: E402
import dask.array as da  # noqa: E402
import distributed  # noqa: E402
import numpy as np  # noqa: E402

import dmlops  # noqa: E402

SCAN_SHAPE, SCAN_CHUNKS = (16384, 32768), (2048, 8192)
M, K, N, ROWS_A_CHUNK, TILE_ROWS = 262144, 4096, 64, 4096, 256
A_SCALE, A_ZERO, B_ZERO, OUTPUT_SCALE, OUTPUT_ZERO = 0.02, 128, 0, 40.0, 128
SCAN_MEMORY_LIMIT, MATMUL_MEMORY_LIMIT = "12GiB", "768MiB"  # for all the workers; per worker


def median_seconds(run, repeats: int) -> float:
    """The median of ``repeats`` timed runs after an untimed one (imports and compilation in the workers, first
    touch of memory)."""
    run()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def persisted(client, make):
    """A run: build the Dask array, persist it in the workers, wait for it; then let it go, and wait until the
    scheduler has forgotten it (a run of the same graph would find the results of the last one)."""
    def run():
        result = client.persist(make())
        distributed.wait(result)
        keys = [future.key for future in distributed.futures_of(result)]
        del result
        while client.run_on_scheduler(_held, keys):
            time.sleep(0.02)
    return run


def _held(keys, dask_scheduler=None):
    return any(key in dask_scheduler.tasks for key in keys)


def scan_contenders():
    def peer_reverse_exclusive(x):
        return da.flip(da.cumsum(da.flip(x, 1), 1), 1) - x

    return {
        "inclusive": (lambda x: dmlops.cumulative_sum(x, 1), lambda x: da.cumsum(x, 1)),
        "reverse, exclusive": (lambda x: dmlops.cumulative_sum(x, 1, reverse=True, exclusive=True),
                               peer_reverse_exclusive),
    }


def a_block(block_info=None):
    """A chunk of A: random rows, repeated every TILE_ROWS rows (a few milliseconds to write, where drawing every
    value would take longer than the product)."""
    (start, end), (k_start, k_end) = block_info[None]["array-location"]
    tile = np.random.default_rng(start).integers(0, 256, (TILE_ROWS, k_end - k_start), dtype=np.uint8)
    return np.tile(tile, (-(-(end - start) // TILE_ROWS), 1))[:end - start]


def matmul_operands(k_chunks):
    """A, made chunk by chunk; B and its per-column scales, small."""
    a = da.map_blocks(a_block, chunks=((ROWS_A_CHUNK,) * (M // ROWS_A_CHUNK), (k_chunks,) * (K // k_chunks)),
                      dtype=np.uint8)
    rng = np.random.default_rng(2)
    b = da.from_array(rng.integers(-128, 128, (K, N), dtype=np.int8), chunks=(k_chunks, N))
    b_scale = rng.uniform(0.01, 0.03, N).astype(np.float32)
    return a, b, b_scale


def dmlops_matmul(k_chunks):
    a, b, b_scale = matmul_operands(k_chunks)
    return dmlops.quantized_linear_matmul(a, A_SCALE, np.uint8(A_ZERO), b, b_scale, np.int8(B_ZERO), OUTPUT_SCALE,
                                          np.uint8(OUTPUT_ZERO))


def peer_matmul():
    a, b, b_scale = matmul_operands(K)
    real = ((a.astype(np.float32) - A_ZERO) * np.float32(A_SCALE)) @ ((b.astype(np.float32) - B_ZERO) * b_scale)
    return da.clip(da.rint(real / np.float32(OUTPUT_SCALE)) + OUTPUT_ZERO, 0, 255).astype(np.uint8)


def a_only():
    a, _, _ = matmul_operands(K)
    return a.map_blocks(lambda block: block[:1, :1], chunks=(1, 1), dtype=a.dtype)


def in_memory_seconds(repeats: int) -> dict:
    """The same calls on NumPy arrays in this process."""
    rng = np.random.default_rng(0)
    x = rng.random(SCAN_SHAPE, dtype=np.float32)
    times = {("scan", "inclusive"): median_seconds(lambda: dmlops.cumulative_sum(x, 1), repeats),
             ("scan", "reverse, exclusive"): median_seconds(
                 lambda: dmlops.cumulative_sum(x, 1, reverse=True, exclusive=True), repeats)}
    del x
    a = np.tile(rng.integers(0, 256, (TILE_ROWS, K), dtype=np.uint8), (M // TILE_ROWS, 1))
    b = rng.integers(-128, 128, (K, N), dtype=np.int8)
    b_scale = rng.uniform(0.01, 0.03, N).astype(np.float32)
    times["matmul"] = median_seconds(lambda: dmlops.quantized_linear_matmul(
        a, A_SCALE, np.uint8(A_ZERO), b, b_scale, np.int8(B_ZERO), OUTPUT_SCALE, np.uint8(OUTPUT_ZERO)), repeats)
    return times


def cluster(workers: int, memory_limit: str):
    return distributed.LocalCluster(n_workers=workers, processes=True, threads_per_worker=1, dashboard_address=None,
                                    host="127.0.0.1", memory_limit=memory_limit)


def dask_rows(workers: int, repeats: int, in_memory: dict):
    """(operation, contender, workers, seconds, throughput, time × the in-memory call's or None), row by row."""
    scan_bytes = 2 * np.prod(SCAN_SHAPE) * 4
    per_worker = f"{int(SCAN_MEMORY_LIMIT[:-3]) // workers}GiB"
    with cluster(workers, per_worker) as scan_cluster, distributed.Client(scan_cluster) as client:
        x = client.persist(da.random.default_rng(0).random(SCAN_SHAPE, dtype=np.float32, chunks=SCAN_CHUNKS))
        distributed.wait(x)
        for variant, (ours, peer) in scan_contenders().items():
            for name, make in (("dmlops", ours), ("dask.array.cumsum", peer)):
                seconds = median_seconds(persisted(client, lambda: make(x)), repeats)
                yield (f"scan 2 GiB float32, {variant}", name, workers, seconds,
                       f"{scan_bytes / seconds / 1e9:.2f} GB/s", seconds / in_memory[("scan", variant)])
        del x
    operations = 2 * M * N * K
    with cluster(workers, MATMUL_MEMORY_LIMIT) as matmul_cluster, distributed.Client(matmul_cluster) as client:
        making = median_seconds(persisted(client, a_only), repeats)
        yield ("quantized matmul: A made only", "", workers, making, "", None)
        for name, make in (("dmlops, K one chunk", lambda: dmlops_matmul(K)),
                           ("dmlops, K in 4 chunks", lambda: dmlops_matmul(K // 4)),
                           ("dequantize, float32 matmul, quantize", peer_matmul)):
            seconds = median_seconds(persisted(client, make), repeats)
            yield (f"quantized matmul {M} × {K} × {N}", name, workers, seconds,
                   f"{operations / seconds / 1e9:.1f} GOPS", seconds / in_memory["matmul"])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=2)
    arguments = parser.parse_args()
    print(f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {processor()}; Python {platform.python_version()}, "
          f"NumPy {np.__version__}, dask {dask.__version__}, distributed {distributed.__version__}, "
          f"dmlops {dmlops.__version__}")
    in_memory = in_memory_seconds(arguments.repeats)
    scan_bytes, operations = 2 * np.prod(SCAN_SHAPE) * 4, 2 * M * N * K
    print("\n| operation | contender | workers | seconds | throughput | × in-memory time |")
    print("|---|---|---|---|---|---|")
    for variant in ("inclusive", "reverse, exclusive"):
        seconds = in_memory[("scan", variant)]
        print(f"| scan 2 GiB float32, {variant} | dmlops in memory | – | {seconds:.2f} | "
              f"{scan_bytes / seconds / 1e9:.2f} GB/s | 1 |")
    print(f"| quantized matmul {M} × {K} × {N} | dmlops in memory | – | {in_memory['matmul']:.2f} | "
          f"{operations / in_memory['matmul'] / 1e9:.1f} GOPS | 1 |")
    for workers in (1, 2):
        for operation, contender, count, seconds, throughput, cost in dask_rows(workers, arguments.repeats, in_memory):
            ratio = "" if cost is None else f"{cost:.2f}"
            print(f"| {operation} | {contender} | {count} | {seconds:.2f} | {throughput} | {ratio} |", flush=True)


def processor() -> str:
    with open("/proc/cpuinfo") as info:
        model = next((line.split(":", 1)[1].strip() for line in info if line.startswith("model name")), "unknown")
    return f"{model}, {os.cpu_count()} cores"


if __name__ == "__main__":
    main()
