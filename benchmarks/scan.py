"""CUDA scans against their peers, measured in one run: torch.cumsum / cumprod, CuPy's cumsum and JAX's lax.cumsum.

    python benchmarks/scan.py [--sweep] [--only NAME ...]

The floor of a scan is one read and one write of the tensor: 2·n·itemsize bytes at the device's copy bandwidth,
measured here as a device-to-device copy of 1 GiB (bytes read plus bytes written). Every column is the fraction of
that bandwidth reached, counting the same 2·n·itemsize bytes (FLOAT16 counts 2-byte elements). torch has no reverse
or exclusive scan: it flips, scans, flips back and subtracts the input. Each dmlops variant is checked against a
float64 reference and against its own second run (bit for bit) before it is timed. ``--sweep`` times dmlops'
tilings (tile size × look-back reach) instead of the peers.

CUDA kernels are timed with CUDA events around each call after L2 is flushed (triton.testing.do_bench, median);
JAX runs on its own streams and is timed with a host clock around a batch of calls.
"""

from __future__ import annotations

import argparse
import datetime
import multiprocessing
import os
import subprocess
import time

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

import torch  # noqa: E402
import triton  # noqa: E402
from triton.testing import do_bench  # noqa: E402

from dmlops.backends.cuda import scan  # noqa: E402

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
    ("inclusive", "sum", torch.float32, False, False),
    ("rev+excl", "sum", torch.float32, True, True),
    ("product", "product", torch.float32, False, False),
    ("f16", "sum", torch.float16, False, False),
]
SWEEP = [(tile, reach) for tile in (8192, 16384) for reach in (64, 256, 1024)]  # tile elements × tiles in flight


def fraction(seconds: float, nbytes: int, copy: float) -> float:
    return nbytes / seconds / copy


def bench(fn) -> float:
    return do_bench(fn, warmup=10, rep=60, return_mode="median") * 1e-3


def copy_bandwidth() -> float:
    source = torch.randn(1 << 28, device="cuda")
    target = torch.empty_like(source)
    return 2 * source.nbytes / bench(lambda: target.copy_(source))


def inputs(shape, operation, dtype):
    x = torch.randn(shape, device="cuda")
    if operation == "product":  # ±exp(small): products of 2^28 of them stay finite and away from 0
        x = torch.where(x < 0, -1.0, 1.0) * torch.exp(1e-4 * torch.randn_like(x))
    return x.to(dtype)


def torch_scan(x, axis, operation, reverse, exclusive):
    accumulate = torch.cumsum if operation == "sum" else torch.cumprod
    if not reverse:
        return accumulate(x, axis)
    tally = accumulate(x.flip(axis), axis).flip(axis)
    return tally - x if exclusive else tally


def reference(x, axis, operation, reverse, exclusive):
    """float64 on the GPU; exclusive products shift rather than divide."""
    x = x.double()
    walked = x.flip(axis) if reverse else x
    tally = (torch.cumsum if operation == "sum" else torch.cumprod)(walked, axis)
    if exclusive:
        start = torch.full_like(tally.narrow(axis, 0, 1), 0.0 if operation == "sum" else 1.0)
        tally = torch.cat([start, tally.narrow(axis, 0, tally.shape[axis] - 1)], axis)
    return tally.flip(axis) if reverse else tally


def verify(x, axis, operation, reverse, exclusive, **tuning) -> str:
    out = torch.full_like(x, float("nan"))
    scan.cumulative(operation, x, out, axis, reverse, exclusive, **tuning)
    again = torch.full_like(x, float("nan"))
    scan.cumulative(operation, x, again, axis, reverse, exclusive, **tuning)
    expected = reference(x, axis, operation, reverse, exclusive)
    scale = reference(x.abs(), axis, operation, reverse, exclusive) if operation == "sum" else expected.abs()
    error = ((out.double() - expected).abs() / (scale + 1e-30)).nan_to_num(float("inf")).max().item()
    if not torch.equal(out.view(torch.int16 if x.dtype == torch.float16 else torch.int32),
                       again.view(torch.int16 if x.dtype == torch.float16 else torch.int32)):
        return "NOT DETERMINISTIC"
    return f"{error:.1e}"


def warm(task) -> None:
    """Compile one case into Triton's cache (run in worker processes, so that compiling goes in parallel)."""
    shape, axis, operation, dtype, reverse, exclusive, tuning = task
    x = inputs(shape, operation, dtype)
    scan.cumulative(operation, x, torch.empty_like(x), axis, reverse, exclusive, **tuning)
    torch.cuda.synchronize()


def warm_all(tasks, processes: int) -> None:
    with multiprocessing.get_context("spawn").Pool(processes) as pool:
        pool.map(warm, tasks, chunksize=1)


def peers(shape, axis, copy):
    """Fractions of copy bandwidth for torch, CuPy and JAX."""
    row = {}
    for name, operation, dtype, reverse, exclusive in VARIANTS:
        x = inputs(shape, operation, dtype)
        row["torch " + name] = fraction(bench(lambda: torch_scan(x, axis, operation, reverse, exclusive)),
                                        2 * x.nbytes, copy)
    x = inputs(shape, "sum", torch.float32)
    try:
        import cupy

        xc = cupy.from_dlpack(x)
        row["CuPy inclusive"] = fraction(bench(lambda: cupy.cumsum(xc, axis)), 2 * x.nbytes, copy)
        del xc
        cupy.get_default_memory_pool().free_all_blocks()
    except ImportError:
        pass
    try:
        import jax

        xj = jax.device_put(x.cpu().numpy())
        for name, reverse in (("JAX inclusive", False), ("JAX reverse", True)):
            fn = jax.jit(lambda v, reverse=reverse: jax.lax.cumsum(v, axis, reverse=reverse))
            fn(xj).block_until_ready()
            count = max(3, int(0.05 / max(1e-6, 2 * x.nbytes / copy)))
            start = time.perf_counter()
            for _ in range(count):
                result = fn(xj)
            result.block_until_ready()
            row[name] = fraction((time.perf_counter() - start) / count, 2 * x.nbytes, copy)
        del xj, result
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


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sweep", action="store_true", help="time dmlops' tilings instead of the peers")
    parser.add_argument("--only", nargs="*", help="shape names to run (prefixes)")
    parser.add_argument("--processes", type=int, default=min(8, os.cpu_count()),
                        help="processes that compile (each holds one case's tensors)")
    args = parser.parse_args()
    shapes = [s for s in SHAPES if not args.only or any(s[0].startswith(p) for p in args.only)]
    tunings = [dict(tile_elements=t, tiles_in_flight=r) for t, r in SWEEP] if args.sweep else [{}]
    variants = [VARIANTS[i] for i in (0, 1, 3)] if args.sweep else VARIANTS

    print(f"{torch.cuda.get_device_name()}, {datetime.datetime.now():%Y-%m-%d %H:%M}, {versions()}", flush=True)
    started = time.perf_counter()
    warm_all([(shape, axis, op, dtype, rev, exc, tuning) for _, shape, axis in shapes
              for _, op, dtype, rev, exc in variants for tuning in tunings], args.processes)
    print(f"compiled in {time.perf_counter() - started:.0f} s", flush=True)
    copy = copy_bandwidth()
    print(f"copy bandwidth (read + write): {copy / 1e12:.2f} TB/s", flush=True)

    rows = []
    for label, shape, axis in shapes:
        row = {}
        for variant, operation, dtype, reverse, exclusive in variants:
            x = inputs(shape, operation, dtype)
            out = torch.empty_like(x)
            for tuning in tunings:
                name = variant + (f" {tuning['tile_elements']}/{tuning['tiles_in_flight']}" if tuning else "")
                check = verify(x, axis, operation, reverse, exclusive, **tuning)
                seconds = bench(lambda: scan.cumulative(operation, x, out, axis, reverse, exclusive, **tuning))
                row[name] = fraction(seconds, 2 * x.nbytes, copy)
                if variant == "inclusive" and not tuning:
                    row["floor µs"] = 2 * x.nbytes / copy * 1e6
                    row["dmlops µs"] = seconds * 1e6
                print(f"  {label}: {name} {row[name]:.2f} of copy, error {check}", flush=True)
            del x, out
        if not args.sweep:
            row.update(peers(shape, axis, copy))
        rows.append((label, shape, row))
        torch.cuda.empty_cache()

    columns = list(dict.fromkeys(key for _, _, row in rows for key in row))
    print(f"\nFraction of copy bandwidth ({copy / 1e12:.2f} TB/s), 2·n·itemsize bytes; higher is better")
    print("| shape | MiB (f32) | " + " | ".join(columns) + " |")
    print("|---" * (len(columns) + 2) + "|")
    for label, shape, row in rows:
        mib = 4 * torch.Size(shape).numel() / 2**20
        cells = ["" if c not in row else f"{row[c]:.0f}" if c.endswith("µs") else f"{row[c]:.2f}" for c in columns]
        print(f"| {label} | {mib:.0f} | " + " | ".join(cells) + " |")
    if not args.sweep:
        print("\ndmlops over the best peer (same variant; torch for product and f16, JAX reverse for rev+excl)")
        for label, _, row in rows:
            best_inclusive = max(row.get(k, 0) for k in ("torch inclusive", "CuPy inclusive", "JAX inclusive"))
            best_reverse = max(row.get(k, 0) for k in ("torch rev+excl", "JAX reverse"))
            print(f"  {label}: inclusive ×{row['inclusive'] / best_inclusive:.1f}, rev+excl "
                  f"×{row['rev+excl'] / best_reverse:.1f}, product ×{row['product'] / row['torch product']:.1f}, "
                  f"f16 ×{row['f16'] / row['torch f16']:.1f}")


if __name__ == "__main__":
    main()
