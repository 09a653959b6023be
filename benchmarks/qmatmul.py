"""DML_OPERATOR_QUANTIZED_LINEAR_MATRIX_MULTIPLY on the CUDA backend against the PyTorch pipelines that compute the
same thing, measured in one run on one GPU.

The case is ONNX's QLinearMatMul as models quantize it: A uint8 with a zero point (activations), B int8 symmetric
with per-column scales (weights), the output uint8 with a zero point. Every method gets the same random inputs;
the weights' one-off preparations (a column-major copy, column sums, a dequantized copy) are made before timing:

- dmlops, B persisted: B OWNED_BY_DML, repacked K-major once (``persist``); dmlops, B row-major: B repacked inside
  the call, as for a B bound at every execution.
- torch._int_mm with B row-major, and with B column-major, each plus the requantization in float32 (shift A to
  int8, subtract za'·Σ_k B, scale, round, add zo, clamp, cast; not bit-exact, which only makes it cheaper); an A of
  16 rows or fewer is padded with zero rows before timing, since torch._int_mm takes more than 16.
- dequantize → float32 matmul → quantize; and a bare bf16 matmul of the same shape, the tensor-core ceiling of
  the floating-point route.

Floor: the larger of 2·M·N·K / 1979 TOPS (dense int8 peak of the H100 SXM) and the bytes (A, B and the output
once each) over the copy bandwidth measured at the start of the run. Times are GPU times: medians of
``triton.testing.do_bench_cudagraph`` (calls replayed from a CUDA graph, so that no method pays for launching
from Python; L2 is not flushed between calls). "eager" is dmlops called from Python back to back, launch overhead
included. Every dmlops result is checked bit for bit against the
exact accumulator (a float64 product of integers) requantized in float64.

    python benchmarks/qmatmul.py                 # the table of benchmarks/RESULTS.md
    python benchmarks/qmatmul.py --configs --jobs 12   # candidate tile configurations (compiled by 12 processes)
    python benchmarks/qmatmul.py --overhead      # where the host time of an eager call goes
    python benchmarks/qmatmul.py --few-rows      # LLM decoding: M = 1 … 128, where reading B once is the floor
    python benchmarks/qmatmul.py --ceiling       # sustained TOPS, SM clock and power against cuBLASLt's int8 and fp8
"""

from __future__ import annotations

import argparse
import cProfile
import functools
import multiprocessing
import pstats
import subprocess
import sys
import time

import torch
import triton

from dmlops.backends.cuda import qmatmul

PEAK_INT8_TOPS = 1979.0
INT8_OPS_PER_SM_CLOCK = 8192  # dense int8 (or fp8) tensor-core operations an SM issues a clock: 1979 TOPS at 1830 MHz
SQUARE = [1024, 2048, 4096, 8192, 16384]
LLM = [(m, k, n) for m in (16, 64, 256, 1024, 4096) for k, n in ((4096, 11008), (11008, 4096))]
# Where the best public int8 kernels on Hopper report (CUTLASS's, through sgl-kernel and vLLM): long K.
LONG_K = [(2048, 8192, 4096), (1024, 21760, 8192), (4096, 16384, 4096)]
FEW_ROWS = [(m, 4096, n) for m in (1, 16, 32, 128) for n in (4096, 11008)]
INT_MM_MIN_ROWS = 32  # torch._int_mm takes more than 16 rows: a smaller A is padded (outside timing) to this many


def copy_bandwidth() -> float:
    """Device-to-device copy of 1 GiB, bytes read plus written per second."""
    x = torch.empty(2**30, dtype=torch.uint8, device="cuda")
    y = torch.empty_like(x)
    ms = triton.testing.do_bench(lambda: y.copy_(x))
    return 2 * x.numel() / (ms * 1e-3)


class Problem:
    """Random inputs of one shape and every method's prepared operands (A int8 rather than uint8 if ``signed_a``)."""

    def __init__(self, m: int, k: int, n: int, generator: torch.Generator, signed_a: bool = False):
        def randint(low, high, shape, dtype):
            return torch.randint(low, high, shape, generator=generator, device="cuda", dtype=dtype)

        self.m, self.k, self.n = m, k, n
        self.a = randint(0, 256, (m, k), torch.uint8)
        if signed_a:
            self.a = self.a.view(torch.int8)
        self.b = randint(-128, 128, (k, n), torch.int8)
        self.a_zero = randint(100, 156, (1,), torch.uint8)
        self.out_zero = randint(100, 156, (1,), torch.uint8)
        self.a_scale = torch.full((1,), 0.02, device="cuda")
        self.b_scale = torch.rand(n, generator=generator, device="cuda") * 0.02 + 0.01
        # outputs spread over the uint8 range: |acc| is about 5500·sqrt(K)
        self.out_scale = torch.full((1,), 0.02 * 0.02 * 5500 * k**0.5 / 100, device="cuda")
        self.out = torch.empty((m, n), dtype=torch.uint8, device="cuda")
        self.b_persisted = qmatmul.persist_b(self.b[None, None])  # weights prepared once, outside timing

    # the peers' weights, prepared once, outside timing

    @functools.cached_property
    def b_column_major(self):
        return self.b.t().contiguous().t()

    @functools.cached_property
    def a_int_mm(self):
        """A flipped to int8 for torch._int_mm, padded with zero rows to INT_MM_MIN_ROWS if it has fewer."""
        a8 = self.a.view(torch.int8) ^ -128
        padding = max(0, INT_MM_MIN_ROWS - self.m)
        return torch.cat([a8, a8.new_zeros((padding, self.k))]) if padding else a8

    @functools.cached_property
    def b_column_sums(self):
        return self.b.sum(0, dtype=torch.int32)

    @functools.cached_property
    def multiplier(self):
        return (self.a_scale * self.b_scale / self.out_scale).float()

    @functools.cached_property
    def b_dequantized(self):
        return self.b.float() * self.b_scale

    @functools.cached_property
    def bf16_operands(self):
        return self.a.to(torch.bfloat16), self.b.to(torch.bfloat16)

    def dmlops(self, b, config=None):
        """The CUDA backend's entry, with the tensors as the operator passes them: 4-D, scales and zero points as
        vectors (stride 0: per tensor); ``b`` a tensor {K, N} or a ``qmatmul.PersistedB`` {1, 1, K, N}."""
        def per_tensor(x):
            return x.as_strided((self.m,), (0,))

        def four_d(x):
            return x.as_strided((1, 1) + x.shape, (0, 0) + x.stride())

        qmatmul.quantized_linear_matmul(
            four_d(self.a), per_tensor(self.a_scale), per_tensor(self.a_zero),
            b if type(b) is qmatmul.PersistedB else four_d(b), self.b_scale, None,
            per_tensor(self.out_scale), per_tensor(self.out_zero), four_d(self.out), config=config)
        return self.out

    def torch_int_mm(self, b):
        acc = torch._int_mm(self.a_int_mm, b)[:self.m]
        acc -= (self.a_zero.int() - 128) * self.b_column_sums
        y = torch.mul(acc, self.multiplier)
        return y.round_().add_(self.out_zero).clamp_(0, 255).to(torch.uint8)

    def torch_float(self):
        a = (self.a.float() - self.a_zero) * self.a_scale
        y = a @ self.b_dequantized
        return y.div_(self.out_scale).round_().add_(self.out_zero).clamp_(0, 255).to(torch.uint8)

    def bf16(self):
        a, b = self.bf16_operands
        return a @ b

    def exact(self):
        """The operator's result: the exact accumulator (a float64 product of integers, exact below 2^53)
        requantized in float64, operation by operation."""
        acc = (self.a.double() - self.a_zero.double()) @ self.b.double()  # exact: integers below 2^53
        multiplier = (self.a_scale.double() * self.b_scale.double()) / self.out_scale.double()
        return torch.clamp(torch.round(acc * multiplier) + self.out_zero.double(), 0, 255).to(torch.uint8)


def tops(problem: Problem, fn) -> float | None:
    try:
        ms = triton.testing.do_bench_cudagraph(fn, return_mode="median")
    except RuntimeError as error:  # torch._int_mm refuses some shapes (M ≤ 16)
        print(f"  {problem.m}x{problem.k}x{problem.n}: {str(error).splitlines()[0]}", file=sys.stderr)
        return None
    return 2 * problem.m * problem.n * problem.k / (ms * 1e-3) / 1e12


def eager_microseconds(fn, calls: int = 50) -> float:
    """Back-to-back calls from Python: GPU time or launch overhead, whichever is longer."""
    fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(calls):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) * 1e3 / calls


def floor_tops(m, k, n, bandwidth) -> float:
    seconds = max(2 * m * n * k / (PEAK_INT8_TOPS * 1e12), (m * k + k * n + m * n) / bandwidth)
    return 2 * m * n * k / seconds / 1e12


def fmt(value) -> str:
    return "n/a" if value is None else f"{value:.0f}"


def table(shapes, bandwidth):
    print("| M×K×N | floor TOPS | dmlops, B persisted | % of int8 peak | dmlops, B row-major | "
          "torch._int_mm B row-major + requant | torch._int_mm B col-major + requant | "
          "dequant → fp32 matmul → quant | bf16 matmul | dmlops / best torch pipeline | dmlops eager, µs per call | "
          "exact |")
    print("|" + "---|" * 12)
    generator = torch.Generator(device="cuda").manual_seed(0)
    for m, k, n in shapes:
        problem = Problem(m, k, n, generator)
        exact = bool(torch.equal(problem.dmlops(problem.b_persisted), problem.exact())) and \
            bool(torch.equal(problem.dmlops(problem.b), problem.exact()))
        persisted = tops(problem, lambda: problem.dmlops(problem.b_persisted))
        row_major = tops(problem, lambda: problem.dmlops(problem.b))
        peers = {"row": tops(problem, lambda: problem.torch_int_mm(problem.b)),
                 "column": tops(problem, lambda: problem.torch_int_mm(problem.b_column_major)),
                 "float": tops(problem, problem.torch_float)}
        bf16 = tops(problem, problem.bf16)
        eager = eager_microseconds(lambda: problem.dmlops(problem.b_persisted))
        best = max(value for value in peers.values() if value is not None)
        print(f"| {m}×{k}×{n} | {floor_tops(m, k, n, bandwidth):.0f} | {persisted:.0f} | "
              f"{100 * persisted / PEAK_INT8_TOPS:.0f} % | {row_major:.0f} | {fmt(peers['row'])} | "
              f"{fmt(peers['column'])} | {fmt(peers['float'])} | {fmt(bf16)} | {persisted / best:.2f} "
              f"({row_major / best:.2f} row-major) | {eager:.0f} | {'yes' if exact else 'NO'} |", flush=True)
        del problem
        torch.cuda.empty_cache()


def few_rows(shapes, bandwidth):
    """LLM decoding: GPU µs per call and the rate at which B is read, as a fraction of copy bandwidth (goal: 0.6,
    about 9 µs for 4096 × 4096), B persisted; against dmlops's tile kernel (the best of its NARROW configurations,
    what M ≤ 16 ran before the split-K kernel) and torch._int_mm + requantization (A padded to INT_MM_MIN_ROWS)."""
    print("| M×K×N | MiB of B | dmlops µs (config) | B read TB/s | / copy | dmlops tile kernel µs (best NARROW) | "
          "torch._int_mm B col-major + requant µs | torch._int_mm B row-major + requant µs | dmlops / best torch | "
          "dmlops eager µs per call | exact |")
    print("|" + "---|" * 11)
    generator = torch.Generator(device="cuda").manual_seed(0)
    for m, k, n in shapes:
        problem = Problem(m, k, n, generator)
        exact = bool(torch.equal(problem.dmlops(problem.b_persisted), problem.exact()))
        chosen = qmatmul.choose_config(1, m, n, k, torch.cuda.get_device_properties().multi_processor_count)
        dmlops = microseconds(lambda: problem.dmlops(problem.b_persisted))
        tile = min(microseconds(lambda: problem.dmlops(problem.b_persisted, config)) for config in qmatmul.NARROW)
        column = microseconds(lambda: problem.torch_int_mm(problem.b_column_major))
        row = microseconds(lambda: problem.torch_int_mm(problem.b))
        eager = eager_microseconds(lambda: problem.dmlops(problem.b_persisted))
        b_rate = k * n / (dmlops * 1e-6)
        name = f"split-K {chosen.block_m}×{chosen.block_n}×{chosen.block_k}" if chosen.split_k else "tile kernel"
        print(f"| {m}×{k}×{n} | {k * n / 2**20:.1f} | {dmlops:.1f} ({name}) | {b_rate / 1e12:.2f} | "
              f"{b_rate / bandwidth:.2f} | {tile:.1f} | {column:.1f} | {row:.1f} | {min(column, row) / dmlops:.2f}× | "
              f"{eager:.1f} | {'yes' if exact else 'NO'} |", flush=True)
        del problem
        torch.cuda.empty_cache()


def microseconds(fn) -> float:
    return triton.testing.do_bench_cudagraph(fn, return_mode="median") * 1e3


C = qmatmul.Config
CANDIDATES = {  # by shape class: M ≤ 16, M ≤ 64 (decode-like) and the rest; programs_per_sm > 0: persistent
    # programs; split_k > 0: the split-K kernel, K split until there are that many programs per SM
    "few_rows": [qmatmul.FEW_ROWS, C(16, 64, 256, num_warps=4, num_stages=4, split_k=3),
                 C(16, 64, 256, num_warps=4, num_stages=4, split_k=4),
                 C(16, 64, 256, num_warps=8, num_stages=4, split_k=2),
                 C(16, 64, 128, num_warps=4, num_stages=6, split_k=2),
                 C(16, 128, 128, num_warps=4, num_stages=4, split_k=2),
                 C(16, 128, 256, num_warps=4, num_stages=3, split_k=2),
                 C(16, 32, 256, num_warps=4, num_stages=4, split_k=3),
                 C(16, 32, 512, num_warps=4, num_stages=4, split_k=2),
                 *qmatmul.NARROW],
    "small_m": [C(64, 128, 128, num_warps=4, num_stages=4), C(64, 64, 256, num_warps=4, num_stages=4),
                C(64, 32, 256, num_warps=4, num_stages=4),
                C(64, 32, 256, num_warps=4, num_stages=4, programs_per_sm=3),
                C(32, 64, 256, num_warps=4, num_stages=4, split_k=2),
                C(64, 64, 128, num_warps=8, num_stages=4, split_k=2)],
    "large": [C(128, 256, 128, num_warps=8, num_stages=3, epilogue_n=64),
              C(128, 256, 128, num_warps=8, num_stages=3, epilogue_n=64, programs_per_sm=1),
              C(128, 256, 128, num_warps=8, num_stages=4, epilogue_n=64),
              C(256, 128, 128, num_warps=8, num_stages=3, epilogue_n=64),
              C(128, 128, 128, num_warps=8, num_stages=4),
              C(128, 128, 128, num_warps=4, num_stages=3),
              C(128, 128, 128, num_warps=4, num_stages=3, programs_per_sm=2),
              # gluon: the Gluon kernel (sm_90), wgmma kept in flight over num_stages shared-memory slots
              C(128, 256, 128, num_warps=8, num_stages=4, epilogue_n=64, gluon=True),
              C(128, 256, 128, num_warps=8, num_stages=3, epilogue_n=64, gluon=True),
              C(128, 256, 128, num_warps=8, num_stages=4, epilogue_n=32, gluon=True),
              C(256, 128, 128, num_warps=8, num_stages=4, epilogue_n=32, gluon=True),
              C(128, 128, 128, num_warps=4, num_stages=3, gluon=True),
              C(128, 128, 128, num_warps=4, num_stages=4, gluon=True),
              # Gluon programs walking the tiles, one or two an SM
              qmatmul.WGMMA_LARGE,
              C(128, 256, 128, num_warps=8, num_stages=4, epilogue_n=64, programs_per_sm=1, gluon=True),
              C(256, 128, 128, num_warps=8, num_stages=3, epilogue_n=32, programs_per_sm=1, gluon=True),
              C(128, 128, 128, num_warps=4, num_stages=3, programs_per_sm=2, gluon=True),
              C(256, 128, 128, num_warps=8, num_stages=4, epilogue_n=64, programs_per_sm=1, gluon=True)],
}


def shape_class(shape) -> str:
    return "few_rows" if shape[0] <= qmatmul.FEW_ROWS.block_m else "small_m" if shape[0] <= 64 else "large"


def candidates(shape, chosen):
    """The candidates of the shape's class, or those of them numbered in ``chosen``."""
    listed = CANDIDATES[shape_class(shape)]
    return listed if chosen is None else [listed[i] for i in chosen]


def compile_cases(shapes, chosen):
    """One shape of each class, with every candidate of the class and both types of A: the kernels it compiles
    serve the other shapes of the class too (the same specialization: dimensions multiples of 16)."""
    first = {shape_class(shape): shape for shape in reversed(shapes)}
    return [(shape, config, signed_a) for shape in first.values() for config in candidates(shape, chosen)
            for signed_a in (False, True)]


def compile_case(case) -> str | None:
    """Runs one candidate once (in a worker process), which leaves its kernels in Triton's disk cache."""
    (m, k, n), config, signed_a = case
    try:
        problem = Problem(m, k, n, torch.Generator(device="cuda").manual_seed(0), signed_a)
        problem.dmlops(problem.b_persisted, config)
        torch.cuda.synchronize()
    except Exception as error:  # a configuration the compiler or the GPU refuses
        return f"{m}×{k}×{n} {config}: {type(error).__name__}: {str(error)[:200]}"
    return None


def configs(shapes, jobs: int, chosen=None):
    """TOPS of each candidate configuration, B persisted, A uint8 (flipped in the kernel) and int8. The candidates
    are compiled by ``jobs`` worker processes first, so that the timing process finds them in Triton's cache."""
    if jobs > 1:
        with multiprocessing.get_context("spawn").Pool(jobs) as pool:
            for error in pool.imap_unordered(compile_case, compile_cases(shapes, chosen)):
                if error:
                    print(error, flush=True)
    generator = torch.Generator(device="cuda").manual_seed(0)
    for m, k, n in shapes:
        problem = Problem(m, k, n, generator)
        expected = problem.exact()
        signed = Problem(m, k, n, generator, signed_a=True)
        for config in candidates((m, k, n), chosen):
            try:
                unsigned_tops = tops(problem, lambda: problem.dmlops(problem.b_persisted, config))
                exact = torch.equal(problem.dmlops(problem.b_persisted, config), expected)
                signed_tops = tops(signed, lambda: signed.dmlops(signed.b_persisted, config))
            except Exception as error:  # a configuration the compiler or the GPU refuses
                print(f"{m}×{k}×{n} {config}: {type(error).__name__}: {str(error)[:200]}", flush=True)
                continue
            unsigned_us = 2 * m * n * k / unsigned_tops / 1e6
            print(f"{m}×{k}×{n} {config}: uint8 A {unsigned_tops:.0f} TOPS, {unsigned_us:.1f} µs "
                  f"({'exact' if exact else 'NOT EXACT'}), int8 A {signed_tops:.0f} TOPS", flush=True)
        del problem, signed
        torch.cuda.empty_cache()


def sustained(fn, seconds: float = 3.0, window: float = 0.1):
    """TOPS-ready timings of ``fn`` replayed from a CUDA graph of about ``window`` seconds of calls, for
    ``seconds``: the median µs a call in the first window (before the board heats) and over the last half, with
    the SM clock (MHz) and board power (W) nvidia-smi sampled over the last half."""
    fn()
    per_call = microseconds(fn) * 1e-6
    calls = max(1, int(window / per_call))
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            fn()
    torch.cuda.synchronize()
    sampler = subprocess.Popen(["nvidia-smi", "--query-gpu=timestamp,clocks.sm,power.draw", "--format=csv,noheader,"
                                "nounits", "-lms", "50"], stdout=subprocess.PIPE, text=True)
    times, begin = [], time.time()
    while time.time() - begin < seconds:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append((time.time() - begin, start.elapsed_time(end) * 1e3 / calls))
    sampler.terminate()
    samples = [line.split(", ") for line in sampler.communicate()[0].splitlines()]
    half = len(samples) // 2
    clock = sum(float(sample[1]) for sample in samples[half:]) / max(1, len(samples) - half)
    power = sum(float(sample[2]) for sample in samples[half:]) / max(1, len(samples) - half)
    late = sorted(us for at, us in times if at > seconds / 2)
    return times[0][1], late[len(late) // 2], clock, power


def ceiling(shapes):
    """Each shape's products run for seconds on end, as a long job runs them: dmlops (B persisted; A uint8 and
    int8) against cuBLASLt's own int8 product (torch._int_mm, B column-major, int32 out, no requantization) and its
    fp8 one (torch._scaled_mm, e4m3, bf16 out: the same tensor-core peak on Hopper), each as TOPS at first and
    sustained, and sustained as a fraction of the int8 peak at the SM clock it ran at (boards that reach their power
    limit lower the clock)."""
    processors = torch.cuda.get_device_properties().multi_processor_count
    print("| M×K×N | method | TOPS, first 0.1 s | TOPS, sustained | SM MHz | W | ÷ peak at that clock |")
    print("|" + "---|" * 7)
    generator = torch.Generator(device="cuda").manual_seed(0)
    for m, k, n in shapes:
        problem = Problem(m, k, n, generator)
        signed = Problem(m, k, n, generator, signed_a=True)
        exact = torch.equal(problem.dmlops(problem.b_persisted), problem.exact())
        fp8_a = problem.a_int_mm.to(torch.float8_e4m3fn)
        fp8_b = problem.b_column_major.to(torch.float8_e4m3fn)
        one = torch.ones((), device="cuda")
        methods = {f"dmlops, uint8 A ({'exact' if exact else 'NOT EXACT'})":
                   lambda: problem.dmlops(problem.b_persisted),
                   "dmlops, int8 A": lambda: signed.dmlops(signed.b_persisted),
                   "cuBLASLt int8 (torch._int_mm)": lambda: torch._int_mm(problem.a_int_mm, problem.b_column_major),
                   "cuBLASLt fp8 (torch._scaled_mm)": lambda: torch._scaled_mm(fp8_a, fp8_b, one, one,
                                                                              out_dtype=torch.bfloat16)}
        for name, fn in methods.items():
            first, late, clock, power = sustained(fn)
            operations = 2 * m * n * k / 1e6
            peak = processors * INT8_OPS_PER_SM_CLOCK * clock / 1e6
            print(f"| {m}×{k}×{n} | {name} | {operations / first:.0f} | {operations / late:.0f} | {clock:.0f} | "
                  f"{power:.0f} | {operations / late / peak:.2f} |", flush=True)
        del problem, signed
        torch.cuda.empty_cache()


def overhead(shape, calls: int = 200):
    """Host time of an eager call, B persisted, and the functions it spends it in (cProfile)."""
    problem = Problem(*shape, torch.Generator(device="cuda").manual_seed(0))
    call = functools.partial(problem.dmlops, problem.b_persisted)
    for _ in range(10):
        call()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        call()
    host = time.perf_counter() - start
    torch.cuda.synchronize()
    print(f"{shape}: {host / calls * 1e6:.0f} µs of host time per call ({eager_microseconds(call):.0f} µs eager)")
    profile = cProfile.Profile()
    profile.runcall(lambda: [call() for _ in range(calls)])
    pstats.Stats(profile).sort_stats("tottime").print_stats(25)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--configs", action="store_true", help="time the candidate tile configurations")
    parser.add_argument("--jobs", type=int, default=1, help="processes compiling the candidates first (--configs)")
    parser.add_argument("--overhead", action="store_true", help="profile the host time of eager calls")
    parser.add_argument("--few-rows", action="store_true", help="decoding shapes (M = 1 … 128): µs, B's read rate")
    parser.add_argument("--ceiling", action="store_true",
                        help="sustained TOPS, SM clock and power against cuBLASLt's int8 and fp8 products")
    parser.add_argument("--shapes", help="M,K,N;M,K,N… instead of the default list")
    parser.add_argument("--candidates", help="i,j,…: only these candidates of each class (--configs)")
    args = parser.parse_args()
    shapes = [(n, n, n) for n in SQUARE] + LLM + LONG_K
    if args.shapes:
        shapes = [tuple(int(x) for x in shape.split(",")) for shape in args.shapes.split(";")]
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, triton {triton.__version__}")
    bandwidth = copy_bandwidth()
    print(f"copy bandwidth {bandwidth / 1e12:.2f} TB/s (read + write); dense int8 peak {PEAK_INT8_TOPS:.0f} TOPS\n")
    if args.configs:
        configs(shapes, args.jobs, args.candidates and [int(i) for i in args.candidates.split(",")])
        return
    if args.overhead:
        for shape in shapes:
            overhead(shape)
        return
    if args.ceiling:
        ceiling(shapes if args.shapes else [(8192, 8192, 8192), (4096, 4096, 4096)] + LONG_K)
        return
    if args.few_rows:
        few_rows(shapes if args.shapes else FEW_ROWS, bandwidth)
        return
    table(shapes, bandwidth)


if __name__ == "__main__":
    main()
