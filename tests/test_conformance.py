"""One conformance suite for every backend: the operators' meaning, checked the same way wherever they run.

Each backend is one entry of BACKENDS: how it holds NumPy memory, views it and reads it back, and how it calls the
operators. The array API runs on all of them: the CPU backend (NumPy arrays), the CUDA backend (torch tensors with
``backend="cuda"``: CPU tensors under Triton's interpreter, CUDA tensors with DMLOPS_TEST_GPU=1), torch.ops.dmlops
(CPU tensors) and Dask (arrays from NumPy in small random chunks, threaded scheduler). The operator API (descs and
byte buffers) runs on the devices that have one: cpu and cuda.

Every check is against tests/reference.py, on fresh random inputs: integers and quantized outputs exactly, floats
within the accumulation bound of tests/checks.py. Given outputs are views of buffers of random bytes, and no byte
outside them may change. Scans: every data type, axis (negative too), direction and exclusive setting; packed,
padded, permuted and broadcast (zero-stride) inputs; in place; axes of lengths no block size divides. Quantized
matmul: every type combination; parameters per tensor, row or column (Python and NumPy numbers, vectors,
DirectML-shaped tensors); absent zero points; the output type given or implied; batch broadcasting; A and B in any
memory order, padded or broadcast; B prepared once (dmlops.prepare_b). The operator API: descs with strides, buffers
bound at offsets, in place, OWNED_BY_DML inputs.

Drawn examples (hypothesis) cover the combinations; the parametrized tests make sure each data type, variant and type
combination runs on every backend. The Triton interpreter is slow: each backend draws its own number of examples,
all of them small.
"""

from __future__ import annotations

import importlib
import importlib.util
import itertools

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import dmlops
from dmlops import (AxisDirection, BufferBinding, CumulativeProductOperatorDesc, CumulativeSummationOperatorDesc,
                    DataType, Device, QuantizedLinearMatrixMultiplyOperatorDesc, TensorFlags)

import reference
import toy_backend  # noqa: F401  (registers the "toy" backend)
from checks import assert_cumulative_matches
from conftest import ON_GPU, examples
from strategies import bound_tensors, fill, poison, random_scales, random_values, shapes, strides

SCAN_TYPES = [np.float32, np.float16, np.int32, np.uint32, np.int64, np.uint64]  # LEVEL_5_0 and above
QUANTIZED_TYPES = [np.int8, np.uint8]
SCANS = {"sum": dmlops.cumulative_sum, "product": dmlops.cumulative_product}
DESCS = {"sum": CumulativeSummationOperatorDesc, "product": CumulativeProductOperatorDesc}
INPUT_FIELDS = QuantizedLinearMatrixMultiplyOperatorDesc.input_fields
# Axis lengths that no tile, block or chunk size divides, beside the small ones the shapes strategy draws.
LONG_AXES = [127, 129, 1031]


# -- the backends ----------------------------------------------------------------------------------------------


def _installed(name: str):
    """The module, or None where its package is not installed."""
    return importlib.import_module(name) if importlib.util.find_spec(name.split(".")[0]) else None


torch, da = _installed("torch"), _installed("dask.array")


class NumpyArrays:
    """The CPU backend: NumPy arrays, viewed in place."""

    name = "cpu"
    device = "cpu"  # the operator API's Device, where the backend has one
    examples = 100
    takes_out = True  # out= (a given output, or x itself)
    prepares_b = True  # dmlops.prepare_b

    def memory(self, buffer: np.ndarray):
        """The backend's memory holding a 1-D NumPy buffer's elements."""
        return buffer

    def view(self, memory, sizes, strides, offset, rng):
        """A view of memory: element sizes, strides and offset (rng: for the backend's own random choices)."""
        itemsize = memory.dtype.itemsize
        return np.lib.stride_tricks.as_strided(memory[offset:], sizes, [s * itemsize for s in strides])

    def numpy(self, array) -> np.ndarray:
        return np.asarray(array)

    def parameter(self, value, dtype):
        """A scale or zero point of dtype as this backend takes it (numbers as they are)."""
        return value

    def scan(self, operation, x, axis, reverse, exclusive, out):
        return SCANS[operation](x, axis, reverse=reverse, exclusive=exclusive, out=out)

    def quantized_matmul(self, arguments, output_dtype, out):
        return dmlops.quantized_linear_matmul(*arguments, output_dtype=output_dtype, out=out)

    def prepare_b(self, b, b_scale, b_zero_point):
        return dmlops.prepare_b(b, b_scale, b_zero_point)

    def bind(self, bound):
        """(binding for the operator API, copy the device's bytes back into bound.memory) of a bound tensor."""
        return bound.binding, lambda: None


class CudaTensors(NumpyArrays):
    """The CUDA backend: torch tensors with backend="cuda"."""

    name = device = "cuda"
    examples = 25
    where = "cuda" if ON_GPU else "cpu"

    def memory(self, buffer):
        return torch.from_numpy(buffer).to(self.where)

    def view(self, memory, sizes, strides, offset, rng):
        return memory.as_strided(tuple(sizes), tuple(strides), offset)

    def numpy(self, array):
        return array.cpu().numpy()

    def parameter(self, value, dtype):
        return torch.from_numpy(value).to(self.where) if isinstance(value, np.ndarray) else value

    def scan(self, operation, x, axis, reverse, exclusive, out):
        return SCANS[operation](x, axis, reverse=reverse, exclusive=exclusive, out=out, backend="cuda")

    def quantized_matmul(self, arguments, output_dtype, out):
        return dmlops.quantized_linear_matmul(*arguments, output_dtype=output_dtype, out=out, backend="cuda")

    def prepare_b(self, b, b_scale, b_zero_point):
        return dmlops.prepare_b(b, b_scale, b_zero_point, backend="cuda")

    def bind(self, bound):
        memory = torch.from_numpy(np.frombuffer(bound.memory, np.uint8)).to(self.where)
        binding = bound.binding
        if isinstance(binding, BufferBinding):
            binding = BufferBinding(memory, binding.offset, binding.size)
        else:
            binding = memory

        def pull():
            bound.memory[:] = memory.cpu().numpy().tobytes()

        return binding, pull


class TorchOperators(NumpyArrays):
    """torch.ops.dmlops on CPU tensors: no out=, every parameter a tensor."""

    name = "torch.ops.dmlops"
    device = None
    examples = 30
    takes_out = prepares_b = False

    def __init__(self):
        import dmlops.torch  # noqa: F401  (registers torch.ops.dmlops)

    def memory(self, buffer):
        return torch.from_numpy(buffer)

    view = CudaTensors.view
    numpy = CudaTensors.numpy

    def parameter(self, value, dtype):
        return None if value is None else torch.as_tensor(np.asarray(value, dtype))

    def scan(self, operation, x, axis, reverse, exclusive, out):
        return getattr(torch.ops.dmlops, f"cumulative_{operation}")(x, axis, reverse, exclusive)

    def quantized_matmul(self, arguments, output_dtype, out):
        dtype = None if output_dtype is None else getattr(torch, np.dtype(output_dtype).name)
        return torch.ops.dmlops.quantized_linear_matmul(*arguments, dtype)


class DaskArrays(NumpyArrays):
    """Dask arrays from NumPy, in random chunks, computed on the threaded scheduler; no out=."""

    name = "dask"
    device = None
    examples = 30
    takes_out = False

    def view(self, memory, sizes, strides, offset, rng):
        return da.from_array(super().view(memory, sizes, strides, offset, rng), chunks=chunks(rng, sizes))

    def numpy(self, array):
        return array.compute(scheduler="threads")


def _skipped_without(*modules):
    missing = [module for module in modules if importlib.util.find_spec(module) is None]
    return pytest.mark.skipif(bool(missing), reason=f"needs {', '.join(missing)}")


class ToyArrays(NumpyArrays):
    """tests/toy_backend.py: a backend registered from outside dmlops, plain NumPy, named at each call."""

    name = device = "toy"
    examples = 25

    def scan(self, operation, x, axis, reverse, exclusive, out):
        return SCANS[operation](x, axis, reverse=reverse, exclusive=exclusive, out=out, backend="toy")

    def quantized_matmul(self, arguments, output_dtype, out):
        return dmlops.quantized_linear_matmul(*arguments, output_dtype=output_dtype, out=out, backend="toy")

    def prepare_b(self, b, b_scale, b_zero_point):
        return dmlops.prepare_b(b, b_scale, b_zero_point, backend="toy")


BACKENDS = [
    pytest.param(NumpyArrays, id="cpu"),
    pytest.param(ToyArrays, id="toy"),
    pytest.param(CudaTensors, id="cuda", marks=_skipped_without("torch", "triton")),
    pytest.param(TorchOperators, id="torch.ops.dmlops", marks=_skipped_without("torch")),
    pytest.param(DaskArrays, id="dask", marks=_skipped_without("dask")),
]


@pytest.fixture(params=BACKENDS)
def backend(request):
    return request.param()


@pytest.fixture(params=[param for param in BACKENDS if param.values[0].device is not None])
def device_backend(request):
    """A backend that has a Device of the operator API."""
    return request.param()


def chunks(rng, sizes):
    """Dask chunks: each dimension in one chunk, in chunks of one element, or in random uneven ones."""
    def one(length):
        kind = rng.integers(3)
        if kind == 0 or length == 1:
            return (length,)
        if kind == 1:
            return (1,) * length
        cuts = np.sort(rng.choice(np.arange(1, length), rng.integers(1, length), replace=False))
        return tuple(np.diff([0, *cuts, length]).tolist())

    return tuple(one(size) for size in sizes)


def with_examples(backend, test):
    """The hypothesis test run with the backend's number of examples."""
    return settings(max_examples=examples(backend.examples), deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])(test)


# -- layouts ---------------------------------------------------------------------------------------------------


def span(sizes, element_strides) -> int:
    return 1 + sum((size - 1) * stride for size, stride in zip(sizes, element_strides))


@st.composite
def layouts(draw, sizes, *, broadcast: bool):
    """(element strides, element offset) of a view in a larger buffer: packed, padded, permuted, maybe broadcast."""
    drawn = draw(strides(sizes, broadcast=broadcast))
    if drawn is None:
        drawn = tuple(int(np.prod(sizes[axis + 1:])) for axis in range(len(sizes)))
    return drawn, draw(st.integers(0, 3))


def place(backend, rng, values, sizes, layout):
    """(backend memory, the view) with ``values(count)`` filling the whole buffer the view lies in."""
    element_strides, offset = layout
    memory = backend.memory(values(offset + span(sizes, element_strides) + rng.integers(0, 3)))
    return memory, backend.view(memory, sizes, element_strides, offset, rng)


def outside_unchanged(after: np.ndarray, before: np.ndarray, sizes, layout):
    """No byte of the buffer outside the view changed."""
    element_strides, offset = layout
    itemsize = before.dtype.itemsize
    covered = reference.covered_bytes(offset * itemsize, before.dtype, sizes, element_strides, before.nbytes)
    np.testing.assert_array_equal(after.view(np.uint8)[~covered], before.view(np.uint8)[~covered])


def random_bytes(rng, dtype):
    """count → a buffer of random bytes of dtype (float ones may be NaN): a poisoned output."""
    return lambda count: rng.integers(0, 256, count * np.dtype(dtype).itemsize, dtype=np.uint8).view(dtype)


# -- scans through the array API -------------------------------------------------------------------------------


@st.composite
def scan_cases(draw, backend):
    operation = draw(st.sampled_from(["sum", "product"]))
    dtype = np.dtype(draw(st.sampled_from(SCAN_TYPES)))
    if draw(st.integers(0, 4)) == 0:  # one long axis
        sizes = list(draw(shapes(max_rank=3, max_elements=4)))
        axis = draw(st.integers(0, len(sizes) - 1))
        sizes[axis] = draw(st.sampled_from(LONG_AXES))
        sizes = tuple(sizes)
    else:
        sizes = draw(shapes(max_rank=4, max_elements=120))
        axis = draw(st.integers(0, len(sizes) - 1))
    out = draw(st.sampled_from(["new", "given", "x"] if backend.takes_out else ["new"]))
    x_layout = draw(layouts(sizes, broadcast=out != "x"))  # in place: x is written, so none of it repeats
    out_layout = draw(layouts(sizes, broadcast=False))
    return dict(operation=operation, dtype=dtype, sizes=sizes, axis=axis - draw(st.sampled_from([0, len(sizes)])),
                reverse=draw(st.booleans()), exclusive=draw(st.booleans()), out=out, x_layout=x_layout,
                out_layout=out_layout, seed=draw(st.integers(0, 2**32 - 1)))


def test_scans(backend):
    with_examples(backend, given(case=scan_cases(backend))(lambda case: check_scans(backend, case)))()


def check_scans(backend, case):
    rng = np.random.default_rng(case["seed"])
    operation, dtype, sizes, axis = case["operation"], case["dtype"], case["sizes"], case["axis"]
    small = operation == "product" and (dtype.kind == "f" or rng.integers(2) == 0)
    x_memory, x = place(backend, rng, lambda count: random_values(rng, dtype, count, small=small), sizes,
                        case["x_layout"])
    x_values = backend.numpy(x).copy()
    out = out_memory = None
    if case["out"] == "given":
        out_memory, out = place(backend, rng, random_bytes(rng, dtype), sizes, case["out_layout"])
        out_layout = case["out_layout"]
    elif case["out"] == "x":
        out, out_memory, out_layout = x, x_memory, case["x_layout"]
    before = None if out_memory is None else backend.numpy(out_memory).copy()

    result = backend.scan(operation, x, axis, case["reverse"], case["exclusive"], out)

    assert out is None or result is out
    assert_cumulative_matches(backend.numpy(result), operation, x_values, axis % len(sizes), case["reverse"],
                              case["exclusive"])
    if out_memory is not None:
        outside_unchanged(backend.numpy(out_memory), before, sizes, out_layout)


@pytest.mark.parametrize("dtype", SCAN_TYPES, ids=lambda dtype: np.dtype(dtype).name)
@pytest.mark.parametrize("operation", ["sum", "product"])
@pytest.mark.parametrize("reverse", [False, True], ids=["increasing", "decreasing"])
@pytest.mark.parametrize("exclusive", [False, True], ids=["inclusive", "exclusive"])
def test_every_scan_variant(backend, dtype, operation, reverse, exclusive):
    """Each data type, direction and exclusive setting at least once, whatever the examples drawn above: a middle
    axis of a length no block size divides, into a given output with padded rows where the backend takes one."""
    sizes = (5, 37, 2)
    check_scans(backend, dict(operation=operation, dtype=np.dtype(dtype), sizes=sizes, axis=1, reverse=reverse,
                              exclusive=exclusive, out="given" if backend.takes_out else "new",
                              x_layout=((74, 2, 1), 1), out_layout=((80, 2, 1), 3), seed=len(sizes)))


# -- the quantized matmul through the array API ----------------------------------------------------------------


@st.composite
def matmul_cases(draw, backend):
    m, k, n = (draw(st.integers(1, 9)) for _ in range(3))
    a_batch = tuple(draw(st.integers(1, 2)) for _ in range(draw(st.integers(0, 2))))
    b_batch = tuple(size if draw(st.booleans()) else 1 for size in a_batch)[draw(st.integers(0, len(a_batch))):]
    sizes = [a_batch + (m, k), b_batch + (k, n), np.broadcast_shapes(a_batch, b_batch) + (m, n)]  # A, B, output
    # per tensor ("number": a Python or NumPy number) or per row / column ("vector" of M or N, "tensor" {M, 1} or
    # {1, N}); zero points may be absent
    return dict(m=m, k=k, n=n, sizes=sizes, types=[draw(st.sampled_from(QUANTIZED_TYPES)) for _ in range(3)],
                scales=[draw(st.sampled_from(["number", "vector", "tensor"])) for _ in range(3)],
                zero_points=[draw(st.sampled_from([None, "number", "vector", "tensor"])) for _ in range(3)],
                layouts=[draw(layouts(sizes[0], broadcast=True)), draw(layouts(sizes[1], broadcast=True)),
                         draw(layouts(sizes[2], broadcast=False))],
                out=draw(st.sampled_from(["new", "given"] if backend.takes_out else ["new"])),
                prepared=backend.prepares_b and draw(st.booleans()), output_dtype_given=draw(st.booleans()),
                seed=draw(st.integers(0, 2**32 - 1)))


def parameter(rng, form, values, axis):
    """(the array API's argument, the same values shaped for the reference against {…, M, N}) of one form; axis -2
    for per row, -1 per column."""
    if form is None:
        return None, None
    if form == "number":
        value = values[0]
        return (value.item() if rng.integers(2) else value), value
    shaped = values.reshape((-1, 1) if axis == -2 else (1, -1))
    return (values if form == "vector" else shaped), shaped


def test_quantized_matmul(backend):
    with_examples(backend, given(case=matmul_cases(backend))(lambda case: check_quantized_matmul(backend, case)))()


def check_quantized_matmul(backend, case):
    rng = np.random.default_rng(case["seed"])
    m, k, n = case["m"], case["k"], case["n"]
    a_sizes, b_sizes, out_sizes = case["sizes"]
    a_layout, b_layout, out_layout = case["layouts"]
    a_type, b_type, out_type = case["types"]
    _, a = place(backend, rng, lambda count: random_values(rng, a_type, count, small=False), a_sizes, a_layout)
    _, b = place(backend, rng, lambda count: random_values(rng, b_type, count, small=False), b_sizes, b_layout)
    a_values, b_values = backend.numpy(a).copy(), backend.numpy(b).copy()
    axes = (-2, -1, -2)  # per row, per column, per row
    scales = [parameter(rng, form, values, axis)
              for form, values, axis in zip(case["scales"], random_scales(rng, k, m, n, m), axes)]
    zeros = [parameter(rng, form, random_values(rng, dtype, length, small=False), axis)
             for form, dtype, length, axis in zip(case["zero_points"], case["types"], (m, n, m), axes)]
    b_scale, b_zero = backend.parameter(scales[1][0], np.float32), backend.parameter(zeros[1][0], b_type)
    if case["prepared"]:
        b, b_scale, b_zero = backend.prepare_b(b, b_scale, b_zero), None, None
    arguments = (a, backend.parameter(scales[0][0], np.float32), backend.parameter(zeros[0][0], a_type), b, b_scale,
                 b_zero, backend.parameter(scales[2][0], np.float32), backend.parameter(zeros[2][0], out_type))
    out = out_memory = None
    if case["out"] == "given":
        out_memory, out = place(backend, rng, random_bytes(rng, out_type), out_sizes, out_layout)
        before = backend.numpy(out_memory).copy()

    # the output type is output_dtype's, else the output zero point's (a Python number has none), else out's
    implied = hasattr(arguments[7], "dtype") or out is not None
    result = backend.quantized_matmul(arguments, None if implied and not case["output_dtype_given"] else out_type, out)

    assert out is None or result is out
    expected = reference.quantized_matmul(a_values, scales[0][1], zeros[0][1], b_values, scales[1][1],
                                          zeros[1][1], scales[2][1], zeros[2][1], out_type)
    got = backend.numpy(result)
    assert got.dtype == expected.dtype and got.shape == expected.shape, (got.dtype, got.shape)
    np.testing.assert_array_equal(got, expected)
    if out_memory is not None:
        outside_unchanged(backend.numpy(out_memory), before, out_sizes, out_layout)


@pytest.mark.parametrize("types", list(itertools.product(QUANTIZED_TYPES, repeat=3)),
                         ids=lambda types: "-".join(np.dtype(t).name for t in types))
@pytest.mark.parametrize("zero_points", [None, "vector"], ids=["no zero points", "zero points"])
def test_every_type_combination(backend, types, zero_points):
    """Each type combination of A, B and the output at least once, with and without zero points: a batch of A over
    one B, per-row and per-column scales."""
    sizes = [(2, 3, 5), (5, 4), (2, 3, 4)]
    check_quantized_matmul(backend, dict(
        m=3, k=5, n=4, sizes=sizes, types=list(types), scales=["vector", "tensor", "vector"],
        zero_points=[zero_points] * 3, layouts=[((15, 5, 1), 0), ((4, 1), 0), ((12, 4, 1), 0)],
        out="given" if backend.takes_out else "new", prepared=False, output_dtype_given=True, seed=1))


# -- the operator API: descs and byte buffers --------------------------------------------------------------------


def bind(backend, tensors):
    """The backend's bindings of bound tensors or None (a tensor bound twice, in place, is one binding), and a
    function that brings the bytes the device wrote back to the tensors' memory."""
    bound = {id(tensor): (tensor, *backend.bind(tensor)) for tensor in tensors if tensor is not None}
    bindings = [None if tensor is None else bound[id(tensor)][1] for tensor in tensors]

    def pull():
        for _, _, pull_one in bound.values():
            pull_one()

    return bindings, pull


@st.composite
def scan_bindings(draw):
    operation = draw(st.sampled_from(["sum", "product"]))
    data_type = DataType.from_numpy(draw(st.sampled_from(SCAN_TYPES)))
    sizes = draw(shapes())
    output = draw(bound_tensors(data_type, sizes, draw(strides(sizes, broadcast=False))))
    in_place = draw(st.integers(0, 3)) == 0
    x = output if in_place else draw(bound_tensors(data_type, sizes, draw(strides(sizes, broadcast=True))))
    return dict(operation=operation, x=x, out=output, axis=draw(st.integers(0, len(sizes) - 1)),
                reverse=draw(st.booleans()), exclusive=draw(st.booleans()), seed=draw(st.integers(0, 2**32 - 1)))


def test_scan_operators(device_backend):
    with_examples(device_backend, given(case=scan_bindings())(lambda case: check_scan_operator(device_backend, case)))()


def check_scan_operator(backend, case):
    rng = np.random.default_rng(case["seed"])
    operation, x_bound, out_bound = case["operation"], case["x"], case["out"]
    dtype = x_bound.desc.data_type.numpy_dtype
    small = operation == "product" and (dtype.kind == "f" or rng.integers(2) == 0)
    if x_bound is not out_bound:
        poison(out_bound, rng)
    fill(x_bound, lambda count: random_values(rng, dtype, count, small=small))
    x = x_bound.read()
    x_before, out_before = bytes(x_bound.memory), np.frombuffer(bytes(out_bound.memory), np.uint8)
    direction = AxisDirection.DECREASING if case["reverse"] else AxisDirection.INCREASING
    desc = DESCS[operation](x_bound.desc, out_bound.desc, case["axis"], direction, case["exclusive"])
    (x_binding, out_binding), pull = bind(backend, [x_bound, out_bound])

    Device(backend.device).compile_operator(desc).execute([x_binding], [out_binding])

    pull()
    assert_cumulative_matches(out_bound.read(), operation, x, case["axis"], case["reverse"], case["exclusive"])
    outside = ~out_bound.covered()
    np.testing.assert_array_equal(np.frombuffer(out_bound.memory, np.uint8)[outside], out_before[outside])
    if x_bound is not out_bound:
        assert bytes(x_bound.memory) == x_before


def parameter_shape(form, rank, m, n):
    """The sizes of a scale or zero point per tensor, per row or per column, right-aligned to ``rank``."""
    if form == "row":
        return (1,) * (rank - 2) + (m, 1)
    if form == "column":
        return (1,) * (rank - 1) + (n,)
    return (1,) * rank


@st.composite
def matmul_bindings(draw):
    """Every tensor of a quantized matmul bound in a buffer: A, B and the output of 2 to 4 dimensions, parameters
    per tensor, row or column, zero points maybe absent; inputs maybe OWNED_BY_DML (bound at initialization)."""
    rank = draw(st.integers(2, 4))
    batch = tuple(draw(st.integers(1, 3)) for _ in range(rank - 2))
    m, k, n = (draw(st.integers(1, 9)) for _ in range(3))
    types = {field: DataType.from_numpy(draw(st.sampled_from(QUANTIZED_TYPES)))
             for field in ("a_tensor", "b_tensor", "output_tensor")}
    sizes_of = {"a_tensor": batch + (m, k), "b_tensor": batch + (k, n), "output_tensor": batch + (m, n)}
    forms = {}
    for field, free in (("a", "row"), ("b", "column"), ("output", "row")):
        forms[f"{field}_scale_tensor"] = draw(st.sampled_from(["tensor", free]))
        forms[f"{field}_zero_point_tensor"] = draw(st.sampled_from([None, "tensor", free]))
    parameter_rank = draw(st.integers(2 if "row" in forms.values() else 1, 4))
    bound = {}
    for field in INPUT_FIELDS + ("output_tensor",):
        data_field = field.split("_")[0] + "_tensor"
        if field in sizes_of:
            sizes, data_type = sizes_of[field], types[field]
        elif forms[field] is None:
            bound[field] = None
            continue
        else:
            sizes = parameter_shape(forms[field], parameter_rank, m, n)
            data_type = DataType.FLOAT32 if "scale" in field else types[data_field]
        owned = field != "output_tensor" and draw(st.integers(0, 5)) == 0
        tensor_strides = draw(strides(sizes, broadcast=field != "output_tensor"))
        bound[field] = draw(bound_tensors(data_type, sizes, tensor_strides,
                                          flags=TensorFlags.OWNED_BY_DML if owned else 0))
    return bound, k, draw(st.integers(0, 2**32 - 1))


def last_two(array):
    """A scale or zero point as the reference broadcasts it against {…, M, N}: its last two dimensions."""
    if array is None:
        return None
    return array.reshape(array.shape[-2:]) if array.ndim >= 2 else array


def test_quantized_matmul_operator(device_backend):
    with_examples(device_backend, given(case=matmul_bindings())(
        lambda case: check_quantized_matmul_operator(device_backend, case)))()


def check_quantized_matmul_operator(backend, case):
    bound, k, seed = case
    rng = np.random.default_rng(seed)
    centers = dict(zip(("a_scale_tensor", "b_scale_tensor", "output_scale_tensor"), random_scales(rng, k, (), (), ())))
    for field, tensor in bound.items():
        if tensor is None or field == "output_tensor":
            continue
        dtype = tensor.desc.data_type.numpy_dtype
        if "scale" in field:
            fill(tensor, lambda count: (centers[field] * rng.uniform(0.5, 2, count)).astype(np.float32))
        else:
            fill(tensor, lambda count: random_values(rng, dtype, count, small=False))
    out_bound = bound["output_tensor"]
    poison(out_bound, rng)
    out_before = np.frombuffer(bytes(out_bound.memory), np.uint8)
    values = {field: None if tensor is None else tensor.read() for field, tensor in bound.items()}
    desc = QuantizedLinearMatrixMultiplyOperatorDesc(**{f: None if t is None else t.desc for f, t in bound.items()})
    op = Device(backend.device).compile_operator(desc)
    owned = {f for f in INPUT_FIELDS if bound[f] is not None and bound[f].desc.owned_by_dml}
    initial, _ = bind(backend, [bound[f] if f in owned else None for f in INPUT_FIELDS])
    op.initialize(initial)
    for f in owned:  # the operator keeps its own copy: the buffer may change afterwards
        poison(bound[f], rng)
    (*inputs, out_binding), pull = bind(backend, [None if f in owned else bound[f] for f in INPUT_FIELDS] +
                                        [out_bound])

    op.execute(inputs, [out_binding])

    pull()
    expected = reference.quantized_matmul(
        values["a_tensor"], last_two(values["a_scale_tensor"]), last_two(values["a_zero_point_tensor"]),
        values["b_tensor"], last_two(values["b_scale_tensor"]), last_two(values["b_zero_point_tensor"]),
        last_two(values["output_scale_tensor"]), last_two(values["output_zero_point_tensor"]),
        out_bound.desc.data_type.numpy_dtype)
    np.testing.assert_array_equal(out_bound.read(), expected)
    outside = ~out_bound.covered()
    np.testing.assert_array_equal(np.frombuffer(out_bound.memory, np.uint8)[outside], out_before[outside])
