"""CUDA scans against their peers, measured in one run: torch.cumsum / cumprod, CuPy's cumsum and JAX's lax.cumsum.

    python benchmarks/scan.py [--sweep] [--only NAME ...]

The floor of a scan is one read and one write of the tensor: 2·n·itemsize bytes at the device's copy bandwidth,
measured here as a device-to-device copy of 1 GiB (bytes read plus bytes written). Every column is the fraction of
that bandwidth reached, counting the same 2·n·itemsize bytes (FLOAT16 counts 2-byte elements). The "copy" column is
a device copy of the same float32 tensor: what one read and one write cost at that size, launch and tail included.
torch has no reverse or exclusive scan: it flips, scans, flips back and subtracts the input. Each dmlops variant is
checked against a float64 reference and against its own second run (bit for bit) before it is timed. ``--sweep``
also times dmlops' tunings (tiles: size, threads, look-back reach; walks down columns: strip width, block
length, pipeline stages; exclusive rows stored one element along, "shifted"; decreasing rows held as chunks in walk
order; the fewest columns of a block down columns; a thread's registers capped, "r") on the shapes named, forward
exclusive scans too.

Timing is GPU time: a batch of calls is enqueued behind a GPU sleep long enough for the host to enqueue them all, so
that the host's launch overhead stays out (it is printed beside), and timed with CUDA events (median of 5 batches);
the calls cycle through enough buffers that the inputs are not in L2. JAX runs on its own streams and is timed with a
host clock around a batch of calls instead.
"""

from __future__ import annotations

import argparse
import datetime
import multiprocessing
import os
import statistics
import subprocess
import time

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

import torch  # noqa: E402
import triton  # noqa: E402

from dmlops.backends.cuda import common, scan  # noqa: E402
from dmlops.ops.cumulative import CumulativeOperation  # noqa: E402

SUM, PRODUCT = CumulativeOperation.SUM, CumulativeOperation.PRODUCT

SHAPES = [  # name, shape, axis
    ("1-D 2^28", (1 << 28,), 0),
    ("4096 × 65536, last", (4096, 65536), 1),
    ("65536 × 4096, axis 0", (65536, 4096), 0),
    ("8M × 8, last", (1 << 23, 8), 1),
    ("16×64×1024×256, last", (16, 64, 1024, 256), 3),
    ("32×512×64×256, axis 1", (32, 512, 64, 256), 1),
    ("2^20 × 2, axis 0", (1 << 20, 2), 0),
    ("8 × 2^24, last", (8, 1 << 24), 1),
    ("1-D 2^22 (16 MiB)", (1 << 22,), 0),
    ("4096 × 1024, axis 0 (16 MiB)", (4096, 1024), 0),
]
VARIANTS = [  # name, operation, dtype, reverse, exclusive
    ("inclusive", SUM, torch.float32, False, False),
    ("rev+excl", SUM, torch.float32, True, True),
    ("product", PRODUCT, torch.float32, False, False),
    ("f16", SUM, torch.float16, False, False),
]
SWEEP = [scan.Tuning(32768, 1024, 32), scan.FEW_LONG_LINES, scan.FEW_LONG_LINES_SHIFTED, scan.FEW_LONG_LINES_DECREASING,
         scan.Tuning(65536, 1024, 128, shift_stores=True, chunks=4), scan.Tuning(65536, 1024, 64),
         scan.Tuning(16384, 256, 32), scan.Tuning(16384, 256, 64), scan.SMALL_COLUMNS,
         scan.WALK, scan.Walk(stages=3)]
SWEEP_VARIANTS = [VARIANTS[0], VARIANTS[1], ("excl", SUM, torch.float32, False, True), VARIANTS[3]]
L2_BYTES = 50 << 20
HOST_SECONDS_PER_CALL = 100e-6  # the least time the GPU waits a call while the host enqueues


def fraction(seconds: float, nbytes: int, copy: float) -> float:
    return nbytes / seconds / copy


def buffer_sets(nbytes: int) -> int:
    """How many sets of buffers keep a sequence of calls reading from DRAM rather than L2."""
    return max(1, -(-4 * L2_BYTES // nbytes))


def gpu_seconds(run, sets: int) -> float:
    """GPU time of one call of run(i), i cycling over the buffer sets."""
    return timed(run, sets)[0]


def timed(run, sets: int) -> tuple[float, float]:
    """GPU time and host time (launching) of one call of run(i), i cycling over the buffer sets."""
    for i in range(sets):
        run(i)
    torch.cuda.synchronize()
    begin = time.perf_counter()
    run(0)
    host = time.perf_counter() - begin  # launching one call (the GPU was idle)
    torch.cuda.synchronize()
    count = max(sets, min(400, int(2e-3 / (time.perf_counter() - begin)) + 1))  # about 2 ms a batch, or more
    allowance = max(HOST_SECONDS_PER_CALL, 2 * host)  # so that the GPU never waits for the host
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times, host_times = [], []
    while len(times) < 5:
        torch.cuda._sleep(int(count * allowance * 2e9))  # cycles: the GPU waits while the host enqueues
        start.record()
        begin = time.perf_counter()
        for i in range(count):
            run(i % sets)
        enqueued = time.perf_counter() - begin
        end.record()
        torch.cuda.synchronize()
        if enqueued > count * allowance:  # the GPU woke before the host had enqueued the batch: again, asleep longer
            allowance = 2 * enqueued / count
            continue
        host_times.append(enqueued / count)
        times.append(start.elapsed_time(end) * 1e-3 / count)
    return statistics.median(times), statistics.median(host_times)


def copy_bandwidth() -> float:
    source = torch.randn(1 << 28, device="cuda")
    target = torch.empty_like(source)
    return 2 * source.nbytes / gpu_seconds(lambda i: target.copy_(source), 1)


def inputs(shape, operation, dtype):
    x = torch.randn(shape, device="cuda")
    if operation == PRODUCT:  # ±exp(small): products of 2^28 of them stay finite and away from 0
        x = torch.where(x < 0, -1.0, 1.0) * torch.exp(1e-4 * torch.randn_like(x))
    return x.to(dtype)


def torch_scan(x, axis, operation, reverse, exclusive):
    accumulate = torch.cumsum if operation == SUM else torch.cumprod
    if not reverse:
        return accumulate(x, axis)
    tally = accumulate(x.flip(axis), axis).flip(axis)
    return tally - x if exclusive else tally


def reference(x, axis, operation, reverse, exclusive):
    """float64 on the GPU; exclusive products shift rather than divide."""
    x = x.double()
    walked = x.flip(axis) if reverse else x
    tally = (torch.cumsum if operation == SUM else torch.cumprod)(walked, axis)
    if exclusive:
        start = torch.full_like(tally.narrow(axis, 0, 1), 0.0 if operation == SUM else 1.0)
        tally = torch.cat([start, tally.narrow(axis, 0, tally.shape[axis] - 1)], axis)
    return tally.flip(axis) if reverse else tally


def verify(x, axis, operation, reverse, exclusive, tuning) -> str:
    out = torch.full_like(x, float("nan"))
    scan.cumulative(operation, x, out, axis, reverse, exclusive, tuning=tuning)
    again = torch.full_like(x, float("nan"))
    scan.cumulative(operation, x, again, axis, reverse, exclusive, tuning=tuning)
    bits = torch.int16 if x.dtype == torch.float16 else torch.int32
    if not torch.equal(out.view(bits), again.view(bits)):
        return "NOT DETERMINISTIC"
    expected = reference(x, axis, operation, reverse, exclusive)
    scale = reference(x.abs(), axis, operation, reverse, exclusive) if operation == SUM else expected.abs()
    error = ((out.double() - expected).abs() / (scale + 1e-30)).nan_to_num(float("inf")).max().item()
    return f"{error:.1e}"


def warm(task) -> None:
    """Compile one case into Triton's cache (run in worker processes, so that compiling goes in parallel)."""
    shape, axis, operation, dtype, reverse, exclusive, tuning = task
    x = inputs(shape, operation, dtype)
    scan.cumulative(operation, x, torch.empty_like(x), axis, reverse, exclusive, tuning=tuning)
    torch.cuda.synchronize()


def tuning_name(tuning) -> str:
    if isinstance(tuning, scan.Walk):
        per_thread = tuning.elements_per_thread
        threads = f"/{per_thread}" if per_thread != scan.Walk.elements_per_thread else ""
        kernel = "" if tuning.rows_in_threads else " (Triton layout)"
        return f"walk {tuning.columns}/{tuning.rows}/{tuning.stages}{threads}{kernel}"
    shifted = " shifted" if tuning.shift_stores else ""
    chunks = f" chunks {tuning.chunks}" if tuning.chunks > 1 else ""
    columns = f" columns {tuning.columns}" if tuning.columns != scan.Tuning.columns else ""
    registers = f" r{tuning.registers}" if tuning.registers else ""
    return (f"{tuning.tile_bytes // 1024}K/{tuning.elements_per_thread}/{tuning.tiles_in_flight}{shifted}{chunks}"
            f"{columns}{registers}")


def time_dmlops(label, shape, axis, tunings, copy, variants=VARIANTS, named=False) -> dict:
    """Fractions of copy bandwidth for dmlops; named: columns named after the tunings too."""
    row = {}
    for variant, operation, dtype, reverse, exclusive in variants:
        x = inputs(shape, operation, dtype)
        sets = buffer_sets(2 * x.nbytes)
        xs = [x] + [inputs(shape, operation, dtype) for _ in range(sets - 1)]
        outs = [torch.empty_like(x) for _ in range(sets)]
        for tuning in tunings:
            name = f"{variant} {tuning_name(tuning)}" if named else variant
            check = verify(x, axis, operation, reverse, exclusive, tuning)
            seconds, host = timed(lambda i: scan.cumulative(operation, xs[i], outs[i], axis, reverse, exclusive,
                                                            tuning=tuning), sets)
            row[name] = fraction(seconds, 2 * x.nbytes, copy)
            print(f"  {label}: {name} {row[name]:.2f} of copy ({seconds * 1e6:.0f} µs; host {host * 1e6:.0f} µs "
                  f"a call), error {check}", flush=True)
        del x, xs, outs
    return row


def time_peers(shape, axis, copy) -> dict:
    row = {}
    for name, operation, dtype, reverse, exclusive in VARIANTS:
        x = inputs(shape, operation, dtype)
        sets = buffer_sets(2 * x.nbytes)
        xs = [x] + [inputs(shape, operation, dtype) for _ in range(sets - 1)]
        seconds = gpu_seconds(lambda i: torch_scan(xs[i], axis, operation, reverse, exclusive), sets)
        row["torch " + name] = fraction(seconds, 2 * x.nbytes, copy)
        del x, xs
    x = inputs(shape, SUM, torch.float32)
    sets = buffer_sets(2 * x.nbytes)
    xs = [x] + [inputs(shape, SUM, torch.float32) for _ in range(sets - 1)]
    outs = [torch.empty_like(v) for v in xs]
    row["copy"] = fraction(gpu_seconds(lambda i: outs[i].copy_(xs[i]), sets), 2 * x.nbytes, copy)
    del outs
    try:
        import cupy

        xcs = [cupy.from_dlpack(v) for v in xs]
        row["CuPy inclusive"] = fraction(gpu_seconds(lambda i: cupy.cumsum(xcs[i], axis), sets), 2 * x.nbytes, copy)
        del xcs
        cupy.get_default_memory_pool().free_all_blocks()
    except ImportError:
        pass
    try:
        import jax

        xjs = [jax.device_put(v.cpu().numpy()) for v in xs]
        for name, reverse in (("JAX inclusive", False), ("JAX reverse", True)):
            fn = jax.jit(lambda v, reverse=reverse: jax.lax.cumsum(v, axis, reverse=reverse))
            for v in xjs:
                fn(v).block_until_ready()
            count = max(3 * sets, int(0.05 / (2 * x.nbytes / copy)))
            start = time.perf_counter()
            for i in range(count):
                result = fn(xjs[i % sets])
            result.block_until_ready()
            row[name] = fraction((time.perf_counter() - start) / count, 2 * x.nbytes, copy)
        del xjs, result
    except ImportError:
        pass
    return row


def versions() -> str:
    driver = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                            capture_output=True, text=True).stdout.strip()
    found = [f"torch {torch.__version__}", f"triton {triton.__version__}", f"driver {driver}"]
    for library in ("cupy", "jax"):
        try:
            found.append(f"{library} {__import__(library).__version__}")
        except ImportError:
            pass
    return ", ".join(found)


def table(title, rows, copy):
    columns = list(dict.fromkeys(key for _, _, row in rows for key in row))
    print(f"\n{title}: fraction of copy bandwidth ({copy / 1e12:.2f} TB/s), 2·n·itemsize bytes; higher is better")
    print("| shape | MiB (f32) | floor µs | " + " | ".join(columns) + " |")
    print("|---" * (len(columns) + 3) + "|")
    for label, shape, row in rows:
        nbytes = 4 * torch.Size(shape).numel()
        cells = ["" if c not in row else f"{row[c]:.2f}" for c in columns]
        print(f"| {label} | {nbytes / 2**20:.0f} | {2 * nbytes / copy * 1e6:.0f} | " + " | ".join(cells) + " |")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sweep", nargs="*", help="also time dmlops' tunings on these shapes (name prefixes)")
    parser.add_argument("--only", nargs="*", help="shapes to compare with the peers (name prefixes)")
    parser.add_argument("--processes", type=int, default=min(8, os.cpu_count()),
                        help="processes that compile (each holds one case's tensors)")
    args = parser.parse_args()

    def chosen(prefixes):
        return [s for s in SHAPES if prefixes is None or any(s[0].startswith(p) for p in prefixes)]

    shapes, swept = chosen(args.only), chosen(args.sweep) if args.sweep is not None else []
    print(f"{torch.cuda.get_device_name()}, {datetime.datetime.now():%Y-%m-%d %H:%M}, {versions()}", flush=True)
    started = time.perf_counter()
    tasks = [(shape, axis, op, dtype, rev, exc, None) for _, shape, axis in shapes
             for _, op, dtype, rev, exc in VARIANTS]
    tasks += [(shape, axis, op, dtype, rev, exc, tuning) for _, shape, axis in swept
              for _, op, dtype, rev, exc in SWEEP_VARIANTS for tuning in SWEEP]
    with multiprocessing.get_context("spawn").Pool(args.processes) as pool:
        pool.map(warm, tasks, chunksize=1)
    print(f"compiled {len(tasks)} cases in {time.perf_counter() - started:.0f} s", flush=True)
    copy = copy_bandwidth()
    device = common.hardware(torch.device("cuda", torch.cuda.current_device()))
    print(f"copy bandwidth (read + write): {copy / 1e12:.2f} TB/s; what the default tunings are chosen by: "
          f"{device.processors} SMs at {device.clock / 1e9:.2f} GHz, memory {device.memory_bandwidth / 1e12:.2f} "
          "TB/s nominal", flush=True)

    rows = []
    for label, shape, axis in shapes:
        row = time_dmlops(label, shape, axis, [None], copy)
        row.update(time_peers(shape, axis, copy))
        rows.append((label, shape, row))
        torch.cuda.empty_cache()
    table("dmlops (default tuning) and peers", rows, copy)
    print("\ndmlops over the best peer (same variant; torch for product and f16, JAX reverse for rev+excl)")
    for label, _, row in rows:
        best_inclusive = max(row.get(k, 0) for k in ("torch inclusive", "CuPy inclusive", "JAX inclusive"))
        best_reverse = max(row.get(k, 0) for k in ("torch rev+excl", "JAX reverse"))
        print(f"  {label}: inclusive ×{row['inclusive'] / best_inclusive:.1f}, rev+excl "
              f"×{row['rev+excl'] / best_reverse:.1f}, product ×{row['product'] / row['torch product']:.1f}, "
              f"f16 ×{row['f16'] / row['torch f16']:.1f}", flush=True)

    rows = []
    for label, shape, axis in swept:
        rows.append((label, shape, time_dmlops(label, shape, axis, SWEEP, copy, SWEEP_VARIANTS, named=True)))
        torch.cuda.empty_cache()
    if rows:
        table("dmlops tunings (tile KiB / elements a thread / tiles in flight; walk columns / rows / stages)", rows,
              copy)


if __name__ == "__main__":
    main()
