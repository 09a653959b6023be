"""The CPU scans' two engines give the same bits, as do the quantized matmul's two paths, and a first call in a
process does not wait for numba.

NumPy's engine walks contiguous lines of VECTOR_LINE or more a vector at a time as the compiled loop does, so that
a result never depends on whether numba is installed or loaded yet: every data type, axis, direction and exclusive
setting, lines around the vector's width and VECTOR_LINE, lines cut into chunks (CHUNK_BYTES shrunk), strided and in
place, on one thread or several, compared bit for bit. The quantized
matmul's NumPy path (exact sums from float32 BLAS, NumPy's requantization) and its compiled one (integer kernels,
the compiled requantization) likewise, every type combination and parameter form. The compiled code loads in a
background thread started by the first call (DMLOPS_NUMBA), checked in fresh processes.
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dmlops.backends.cpu import qmatmul as cpu_qmatmul, scan as cpu_scan

from checks import assert_cumulative_matches
import reference
from strategies import random_scales, random_values
from conftest import examples

SCAN_LOOPS = cpu_scan.LOOPS.wait()  # loaded now: None without numba
COMPILED = pytest.mark.skipif(SCAN_LOOPS is None, reason="no numba")
QMM_LOOPS = cpu_qmatmul.LOOPS.wait()
QMM_COMPILED = pytest.mark.skipif(QMM_LOOPS is None, reason="no numba")

# Every type the scans take (FLOAT64 at feature levels before 5_0).
TYPES = [np.float32, np.float16, np.float64, np.int32, np.uint32, np.int64, np.uint64]
# Lengths along the axis: short lines, around a vector's width (4, 8 or 16 lanes) and VECTOR_LINE, none of them
# multiples of anything but by chance.
LENGTHS = [1, 2, 3, 4, 5, 7, 8, 9, 17, 63, 65, cpu_scan.VECTOR_LINE - 1, cpu_scan.VECTOR_LINE,
           cpu_scan.VECTOR_LINE + 1, cpu_scan.VECTOR_LINE + 3, cpu_scan.VECTOR_LINE + 7, 251, 1001, 2311]


def fresh_values(rng, shape, dtype, operation, specials: bool) -> np.ndarray:
    """strategies.random_values in a shape: full-range integers, floats near 1 in magnitude for products (long ones
    stay finite), normal ones for sums; with ``specials``, some signed zeros, infinities and NaNs among them."""
    dtype = np.dtype(dtype)
    small = operation == "product" and dtype.kind == "f"
    values = random_values(rng, dtype, int(np.prod(shape)), small=small).reshape(shape)
    if specials and dtype.kind == "f":
        where = rng.random(shape)
        values[where < 0.1] = -0.0
        values[(where >= 0.1) & (where < 0.12)] = 0.0
        values[(where >= 0.12) & (where < 0.125)] = rng.choice([np.inf, -np.inf, np.nan])
    return values


@st.composite
def scan_cases(draw):
    """A scan of x (contiguous, strided, or transposed; in place or not) along one axis of a 1-D to 3-D shape."""
    rank = draw(st.integers(1, 3))
    axis = draw(st.integers(0, rank - 1))
    shape = [draw(st.integers(1, 4)) for _ in range(rank)]
    if axis > 0:  # lines before the axis: a few, or blocks of short lines (4 to 16 of them) and some left over
        shape[0] = draw(st.integers(1, 4) | st.integers(15, 53))
    shape[axis] = draw(st.sampled_from(LENGTHS) | st.integers(1, 300))
    return dict(shape=tuple(shape), axis=axis, dtype=np.dtype(draw(st.sampled_from(TYPES))),
                operation=draw(st.sampled_from(["sum", "product"])), reverse=draw(st.booleans()),
                exclusive=draw(st.booleans()), layout=draw(st.sampled_from(["contiguous", "strided", "transposed"])),
                in_place=draw(st.booleans()), specials=draw(st.booleans()), pieces=draw(st.sampled_from([None, 1, 3])),
                # chunks of 8 to 68 elements, and of 128 to 2048 (of 8 groups of four vectors or more: see
                # chunk_totals_numpy)
                chunk_bytes=draw(st.sampled_from([cpu_scan.CHUNK_BYTES, 64, 100, 136, 1024, 4096])),
                seed=draw(st.integers(0, 2**32 - 1)))


def laid_out(values: np.ndarray, layout: str) -> np.ndarray:
    """values in a new array of that layout: contiguous, every other element of a larger one, or transposed."""
    if layout == "strided":
        wide = np.empty(tuple(2 * size for size in values.shape), values.dtype)
        array = wide[tuple(slice(None, None, 2) for _ in values.shape)]
    elif layout == "transposed":
        array = np.empty(values.shape[::-1], values.dtype).T
    else:
        array = np.empty_like(values)
    array[...] = values
    return array


def run_engine(case, x: np.ndarray, compiled: bool) -> np.ndarray:
    source = laid_out(x, case["layout"])
    out = source if case["in_place"] else laid_out(np.full(x.shape, 7, x.dtype), case["layout"])
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(cpu_scan, "CHUNK_BYTES", case["chunk_bytes"])
        cpu_scan.cumulative(case["operation"], source, out, case["axis"], case["reverse"], case["exclusive"],
                            compiled=compiled, pieces=case["pieces"])
    return out


def bits(array: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(array).view(f"u{array.itemsize}")


@COMPILED
@settings(max_examples=examples(250), deadline=None)
@given(scan_cases())
def test_engines_give_the_same_bits(case):
    x = fresh_values(np.random.default_rng(case["seed"]), case["shape"], case["dtype"], case["operation"],
                     case["specials"])
    numpy_out, compiled_out = (run_engine(case, x, compiled) for compiled in (False, True))
    assert np.array_equal(bits(numpy_out), bits(compiled_out))
    if not case["specials"]:
        assert_cumulative_matches(numpy_out, case["operation"], x, case["axis"], case["reverse"],
                                  case["exclusive"])


@pytest.mark.parametrize("walk_bytes", [32, 64])
@settings(max_examples=examples(30), deadline=None)
@given(scan_cases())
def test_numpy_engine_walks_vectors_of_either_width(walk_bytes, case):
    """NumPy's engine walks lines by vectors of either width that WALK_BYTES takes (64 bytes where the processor
    has AVX-512, 32 elsewhere) to the reference's values, whichever of them this machine's compiled engine takes."""
    x = fresh_values(np.random.default_rng(case["seed"]), case["shape"], case["dtype"], case["operation"], False)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(cpu_scan, "WALK_BYTES", walk_bytes)
        out = run_engine(case, x, compiled=False)
    assert_cumulative_matches(out, case["operation"], x, case["axis"], case["reverse"], case["exclusive"])


# -- the quantized matmul's two paths -------------------------------------------------------------------------

QMM_TYPES = [np.int8, np.uint8]


@QMM_COMPILED
@pytest.mark.parametrize("types", list(itertools.product(QMM_TYPES, repeat=3)), ids=str)  # A, B, output
@pytest.mark.parametrize("per_tensor", [True, False], ids=["per-tensor", "per-row-column"])
@settings(max_examples=examples(8), deadline=None)
@given(m=st.integers(1, 24), k=st.integers(1, 1200), n=st.integers(1, 80),
       zero_points=st.tuples(st.booleans(), st.booleans(), st.booleans()), seed=st.integers(0, 2**32 - 1))
def test_quantized_matmul_paths_give_the_same_bits(types, per_tensor, m, k, n, zero_points, seed):
    """The NumPy path, which runs until the compiled code is loaded, and the compiled one (an integer kernel and
    the compiled requantization; one compiled call for a small product, given per-tensor parameters as numbers)
    write the same bits; the scales and zero points per tensor (vectors of stride 0) or per row and column."""
    rng = np.random.default_rng(seed)
    a_type, b_type, out_type = types

    def values(dtype, shape):
        info = np.iinfo(dtype)
        return rng.integers(info.min, info.max, shape, dtype=dtype, endpoint=True)

    def parameter(make, length):  # a vector of ``length`` elements, or one element repeated through stride 0
        return np.broadcast_to(make(1), (length,)) if per_tensor else make(length)

    scales = random_scales(rng, k, 1, 1, 1) if per_tensor else random_scales(rng, k, m, n, m)
    a_scale, b_scale, output_scale = (np.broadcast_to(scale, (length,)) for scale, length in zip(scales, (m, n, m)))
    zero_a, zero_b, zero_out = (parameter(lambda size, t=t: values(t, size), length) if present else None
                                for present, length, t in zip(zero_points, (m, n, m), types))
    a = values(a_type, (2, 1, m, k))
    b = np.broadcast_to(values(b_type, (1, 1, k, n)), (2, 1, k, n))
    arguments = (a, a_scale, zero_a, b, b_scale, zero_b, output_scale, zero_out)
    numpy_out, compiled_out = np.full((2, 2, 1, m, n), 0x5A, out_type)
    cpu_qmatmul.quantized_linear_matmul(*arguments, numpy_out, compiled=False, products="float32")
    cpu_qmatmul.quantized_linear_matmul(*arguments, compiled_out)
    np.testing.assert_array_equal(compiled_out, numpy_out)
    if per_tensor:  # as the array API's prepared run hands them to a product in one compiled call
        numbers = [None if x is None else x[0].item() for x in arguments[1:3]] + [b[0, 0]] + \
            [None if x is None else x[0].item() for x in arguments[4:]]
        one_call_out = np.full((m, n), 0x5A, out_type)
        product = cpu_qmatmul.prepare_one_call(a[0, 0], *numbers, one_call_out)
        if product is not None:
            product(a[0, 0], *numbers, one_call_out)
            np.testing.assert_array_equal(one_call_out, numpy_out[0, 0])


# -- fresh processes ---------------------------------------------------------------------------------------------

FIRST_CALL = """
import sys
import numpy as np
import dmlops
x = np.random.default_rng(0).standard_normal(64).astype(np.float32)
y = dmlops.cumulative_sum(x, 0)
print('numba' in sys.modules, bool(np.array_equal(y, np.cumsum(x))))
"""


def run_python(code: str, *arguments: str, **environment) -> str:
    return subprocess.run([sys.executable, "-c", code, *arguments], env={**os.environ, **environment},
                          capture_output=True, text=True, check=True).stdout


TESTS = os.path.dirname(os.path.abspath(__file__))  # where a fresh process finds reference.py


def test_first_call_does_not_import_numba():
    """A first scan in a fresh process, the loading of the compiled loops turned off, returns the NumPy engine's
    result without importing numba (import dmlops and the call's own path do not)."""
    assert run_python(FIRST_CALL, DMLOPS_NUMBA="off").split() == ["False", "True"]


SWITCH = """
import json
import numpy as np
import dmlops
from dmlops.backends.cpu import compiled as cpu_compiled, scan as cpu_scan
x = np.random.default_rng(1).standard_normal(200).astype(np.float32)
first = dmlops.cumulative_sum(x, 0, reverse=True)
loops = cpu_scan.LOOPS.wait()
again = dmlops.cumulative_sum(x, 0, reverse=True)  # the array API's kept run for this layout, prepared again
kernels = [key[0].__name__ for key in cpu_compiled.ENTRY_POINTS]
print(json.dumps([loops is not None, first.tobytes() == again.tobytes(), "scan_lines_vectors" in kernels]))
"""


@COMPILED
def test_calls_switch_to_the_compiled_loops_once_loaded():
    """The first call runs NumPy's engine while the loops load in the background; a call of the same layout after
    they are loaded runs them (its kept run prepared again), with the same bits; the process then exits."""
    assert json.loads(run_python(SWITCH)) == [True, True, True]


QMM_FIRST_CALLS = """
import json
import sys
import threading
import numpy as np
import dmlops
from dmlops.backends.cpu import compiled as cpu_compiled, qmatmul as cpu_qmatmul
if sys.argv[2] == "held":  # the loading thread waits until the first call has returned
    release, load = threading.Event(), cpu_qmatmul.LOOPS.load
    cpu_qmatmul.LOOPS.load = lambda: (release.wait(), load())
rng = np.random.default_rng(4)
a = rng.integers(-128, 128, (16, 96), dtype=np.int8)
b = rng.integers(0, 256, (96, 64), dtype=np.uint8)
a_scale, zero_a = np.float32(0.03), np.int8(-5)  # per tensor: a small product of one compiled call
b_scale, zero_b = np.float32(0.02), np.uint8(130)
output_scale, zero_out = np.float32(1.5), np.uint8(120)
arguments = (a, a_scale, zero_a, b, b_scale, zero_b, output_scale, zero_out)
first = dmlops.quantized_linear_matmul(*arguments)
loading, numba_imported = not cpu_qmatmul.LOOPS.done.is_set(), "numba" in sys.modules
if sys.argv[2] == "held":
    release.set()
loops = cpu_qmatmul.LOOPS.wait()
again = dmlops.quantized_linear_matmul(*arguments)  # the array API's kept run for these layouts, prepared again
sys.path.insert(0, sys.argv[1])
import reference
expected = reference.quantized_matmul(a, a_scale, zero_a, b, b_scale, zero_b, output_scale, zero_out, np.uint8)
kernels = [key[0].__name__ for key in cpu_compiled.ENTRY_POINTS]
print(json.dumps([numba_imported, loading, first.tobytes() == expected.tobytes(), again.tobytes() == expected.tobytes(),
                  loops is not None and bool(loops.integer_gemm.RUNNABLE), "product_in_one_call" in kernels]))
"""


def test_first_quantized_matmul_does_not_import_numba():
    """A first quantized matmul in a fresh process, the loading of the compiled code turned off, returns the
    operator's bits from the NumPy path without importing numba."""
    result = json.loads(run_python(QMM_FIRST_CALLS, TESTS, "off", DMLOPS_NUMBA="off"))
    assert result == [False, False, True, True, False, False]


@QMM_COMPILED
def test_first_quantized_matmul_runs_while_the_compiled_code_loads():
    """A first quantized matmul in a fresh process returns the operator's bits while the compiled code is still
    loading in the background (its loading thread held until the call returns); once it is loaded, the array API's
    kept run of the same layouts is prepared again and runs the product in one compiled call, with the same bits."""
    numba_imported, loading, first, again, kernel, one_call = json.loads(
        run_python(QMM_FIRST_CALLS, TESTS, "held", DMLOPS_NUMBA="background"))
    assert (numba_imported, loading, first, again) == (False, True, True, True)
    assert one_call == kernel  # (no integer kernel on this processor: the float32 products)


HIDDEN = """
import sys
sys.modules["numba"] = None  # import numba raises ImportError: NumPy alone
import numpy as np
from dmlops.backends.cpu import scan as cpu_scan
cases = np.load(sys.argv[1])
results = {}
for name in cases.files:
    dtype, operation, reverse, exclusive = name.split("-")
    out = np.empty_like(cases[name])
    cpu_scan.cumulative(operation, cases[name], out, 1, reverse == "True", exclusive == "True")
    results[name] = out
assert cpu_scan.LOOPS.wait() is None
np.savez(sys.argv[2], **results)
"""


@COMPILED
def test_results_do_not_depend_on_numba_being_installed(tmp_path):
    """A process where numba cannot be imported gives the bits of the compiled loops here."""
    rng = np.random.default_rng(2)
    cases = {f"{np.dtype(dtype).name}-{operation}-{reverse}-{exclusive}":
             fresh_values(rng, (3, 301), dtype, operation, specials=False)
             for dtype in TYPES for operation in ("sum", "product") for reverse in (False, True)
             for exclusive in (False, True)}
    np.savez(tmp_path / "cases.npz", **cases)
    subprocess.run([sys.executable, "-c", HIDDEN, str(tmp_path / "cases.npz"), str(tmp_path / "results.npz")],
                   check=True)
    results = np.load(tmp_path / "results.npz")
    for name, x in cases.items():
        _, operation, reverse, exclusive = name.split("-")
        expected = np.empty_like(x)
        cpu_scan.cumulative(operation, x, expected, 1, reverse == "True", exclusive == "True", compiled=True)
        assert np.array_equal(bits(results[name]), bits(expected)), name


CALLEES = """
import numba
import numpy as np
from dmlops.backends.cpu import jit

@jit.callee
def twice(x):
    return 2 * x

@numba.njit
def twice_each(values):
    out = np.empty_like(values)
    for i in range(values.shape[0]):
        out[i] = twice(values[i])
    return out

print(jit.LINKED, "pipeline_class" in jit.CALLEE_OPTIONS, twice_each(np.arange(3)).tolist())

import dmlops  # a product through the compiled engine, compiled as jit says
rng = np.random.default_rng(0)
a, b = rng.integers(0, 256, (8, 64), dtype=np.uint8), rng.integers(-128, 128, (64, 16), dtype=np.int8)
out = dmlops.quantized_linear_matmul(a, np.float32(0.02), np.uint8(128), b, np.float32(0.01), None, np.float32(0.5),
                                     np.uint8(100))
print(out.tobytes().hex())
"""


@COMPILED
@pytest.mark.parametrize("public", [False, True])
def test_callees_compile_through_numba_public_options_where_asked(public, tmp_path):
    """Callees are linked into their callers (``jit.LinkedLibrary``, numba's internals) only with the numba versions
    it was written against; DMLOPS_PUBLIC_COMPILE=1, as another version would, compiles them through numba's public
    options. Either way they run, and a product through them gives the reference's bits."""
    import numba

    from dmlops.backends.cpu import jit

    script = tmp_path / "callees.py"  # (numba caches functions of files only)
    script.write_text(CALLEES)
    environment = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path), "DMLOPS_NUMBA": "wait"} | (
        {"DMLOPS_PUBLIC_COMPILE": "1"} if public else {})
    printed = subprocess.run([sys.executable, str(script)], env=environment, capture_output=True, text=True,
                             check=True).stdout
    linked = not public and numba.__version__.startswith(jit.KNOWN_NUMBA)
    rng = np.random.default_rng(0)
    a, b = rng.integers(0, 256, (8, 64), dtype=np.uint8), rng.integers(-128, 128, (64, 16), dtype=np.int8)
    expected = reference.quantized_matmul(a, np.float32(0.02), np.uint8(128), b, np.float32(0.01), None,
                                          np.float32(0.5), np.uint8(100), np.uint8)
    assert printed.split() == [str(linked), str(linked), "[0,", "2,", "4]", expected.tobytes().hex()]
