"""The gradients of the cumulative sum and product (dmlops.ops.cumulative_gradient) against the float64 reference and
torch.autograd: the CPU recurrence's two engines, the CUDA kernel (under Triton's interpreter on CPU tensors without
a GPU, with DMLOPS_TEST_GPU=1 on the GPU), and the entry function on NumPy arrays and torch tensors.

Inputs are near ±1 with zeros in most lines (one to three), the gradients normal; outputs are poisoned with NaN.
"""

from __future__ import annotations

import functools
import itertools
import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch")
pytest.importorskip("triton")  # the CUDA backend's kernels

import strategies  # noqa: E402
from checks import rejects  # noqa: E402
from conftest import examples  # noqa: E402
from dmlops import cumulative_gradient  # noqa: E402
from dmlops.backends.cpu import BACKEND as cpu_backend  # noqa: E402
from dmlops.backends.cpu import recurrence as cpu_recurrence  # noqa: E402
from dmlops.backends.cuda import BACKEND as cuda_backend  # noqa: E402
from dmlops.backends.cuda import recurrence  # noqa: E402
from dmlops.ops.cumulative import CumulativeOperation, accumulation_type  # noqa: E402
from dmlops.ops.cumulative_gradient import reference_gradient  # noqa: E402


def run(backend, operation, x, grad, out, axis, reverse, exclusive):
    """out = dL/dx through the backend's lowerings, as dmlops.arrays.cumulative_gradient runs them, into an out of
    the test's (which may lie in a larger buffer)."""
    if operation == CumulativeOperation.SUM:
        backend.prepare_cumulative(CumulativeOperation.SUM, grad, out, axis, not reverse, exclusive)
        return
    accumulation = accumulation_type(backend.data_type(x))
    product = backend.empty(tuple(x.shape), accumulation, like=x)
    backend.prepare_cumulative(CumulativeOperation.PRODUCT, backend.asarray(x, accumulation, like=x), product, axis,
                               reverse, True)
    backend.prepare_linear_recurrence(x, grad, product, out, axis, not reverse, exclusive)

DEVICE = "cuda" if os.environ.get("DMLOPS_TEST_GPU") == "1" else "cpu"
VARIANTS = list(itertools.product([False, True], [False, True]))  # reverse, exclusive
DTYPES = [np.float32, np.float16]


def values(rng, shape, axis):
    """(x, g) in float64: x near ±1, most of its lines along the axis with one to three zeros; g normal."""
    length = shape[axis]
    lines = rng.choice([-1.0, 1.0], (*np.delete(shape, axis), length)) * rng.uniform(0.8, 1.25, length)
    for line in lines.reshape(-1, length):
        line[rng.choice(length, min(length, rng.integers(0, 4)), replace=False)] = 0.0
    return np.moveaxis(lines, -1, axis), rng.standard_normal(shape)


def torch_gradient(operation, x, g, axis, reverse, exclusive) -> np.ndarray:
    """torch.autograd through float64 torch.cumsum / torch.cumprod: flipped for reverse, shifted for exclusive."""
    leaf = torch.tensor(np.asarray(x, np.float64), requires_grad=True)
    walked = leaf.flip(axis) if reverse else leaf
    y = torch.cumsum(walked, axis) if operation == "sum" else torch.cumprod(walked, axis)
    if exclusive:
        start = torch.full_like(y.narrow(axis, 0, 1), 0.0 if operation == "sum" else 1.0)
        y = torch.cat([start, y.narrow(axis, 0, y.shape[axis] - 1)], axis)
    y = y.flip(axis) if reverse else y
    y.backward(torch.tensor(np.asarray(g, np.float64)))
    return leaf.grad.numpy()


def assert_gradient(out, operation, x, g, axis, reverse, exclusive, expected=None):
    """out within the float32 accumulation bound (and the rounding to out's type) of the float64 gradient of the
    inputs as given (x, g of out's type): each product and sum of the gradient's terms rounds at most 3n + 4 times,
    the terms' magnitudes bounded by the gradient of |x| and |g|."""
    out = np.asarray(out)
    assert out.shape == x.shape and out.dtype == x.dtype, (out.shape, out.dtype, x.shape, x.dtype)
    if expected is None:
        expected = reference_gradient(operation, x, g, axis, reverse, exclusive)
    bound = reference_gradient(operation, np.abs(x.astype(np.float64)), np.abs(g.astype(np.float64)), axis, reverse,
                               exclusive)
    eps = np.finfo(out.dtype).eps
    tolerance = (3 * x.shape[axis] + 4) * np.finfo(np.float32).eps * bound + eps * bound + np.finfo(out.dtype).tiny
    error = np.abs(out.astype(np.float64) - expected)
    bad = ~(error <= tolerance)  # NaN (an unwritten poisoned element) is bad too
    assert not bad.any(), f"{bad.sum()} of {bad.size} elements off, first at {np.argwhere(bad)[0]}: " \
                          f"{out[bad][0]} vs {expected[bad][0]}"


# -- the reference ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("operation", list(CumulativeOperation))
def test_reference_is_torch_autograd(operation):
    rng = np.random.default_rng(1)
    x, g = values(rng, (3, 6, 5), 1)
    for axis, (reverse, exclusive) in itertools.product(range(3), VARIANTS):
        np.testing.assert_allclose(reference_gradient(operation, x, g, axis, reverse, exclusive),
                                   torch_gradient(operation, x, g, axis, reverse, exclusive), rtol=1e-12, atol=1e-12)


def test_reference_by_hand():
    """y = [2, 0, 3] increasing: y0 = 2, y1 = 2·0, y2 = 2·0·3; with g = 1: dx0 = 1 + 0 + 0, dx1 = 2 + 6, dx2 = 0."""
    x, g = np.array([2.0, 0.0, 3.0]), np.ones(3)
    np.testing.assert_array_equal(reference_gradient("product", x, g, 0, False, False), [1, 8, 0])
    np.testing.assert_array_equal(reference_gradient("product", x, g, 0, False, True), [1, 2, 0])  # y = [1, 2, 0]
    np.testing.assert_array_equal(reference_gradient("product", x, g, 0, True, False), [0, 9, 1])  # y = [0, 0, 3]
    np.testing.assert_array_equal(reference_gradient("sum", x, g, 0, True, True), [0, 1, 2])  # y = [x1+x2, x2, 0]


# -- the CPU backend ----------------------------------------------------------------------------------------------

# (shape, axes): lines of 1 to 70 elements, along every axis, the innermost and outer ones
CPU_CASES = [((4, 9, 5), (0, 1, 2)), ((2, 37), (1,)), ((70,), (0,)), ((1,), (0,)), ((3, 1, 2), (1,))]


def poisoned(shape, dtype):
    return np.full(shape, np.nan, dtype)


@pytest.mark.parametrize("engine", [dict(compiled=True), dict(compiled=True, pieces=3), dict(compiled=False)],
                         ids=["compiled", "compiled in pieces", "numpy"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_cpu_every_variant(monkeypatch, dtype, engine):
    monkeypatch.setattr(cpu_recurrence, "linear_recurrence",
                        functools.partial(cpu_recurrence.linear_recurrence, **engine))
    rng = np.random.default_rng(2)
    for (shape, axes), operation in itertools.product(CPU_CASES, list(CumulativeOperation)):
        for axis, (reverse, exclusive) in itertools.product(axes, VARIANTS):
            x, g = (array.astype(dtype) for array in values(rng, shape, axis))
            out = poisoned(shape, dtype)
            run(cpu_backend, operation, x, g, out, axis, reverse, exclusive)
            assert_gradient(out, operation, x, g, axis, reverse, exclusive)


@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "numpy"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_cpu_exact_with_zeros(monkeypatch, dtype, compiled):
    """Small integers, zeros among them, whose products and sums every float type holds exactly: the gradient is the
    reference's to the bit (a division by x would give NaN at zeros)."""
    monkeypatch.setattr(cpu_recurrence, "linear_recurrence",
                        functools.partial(cpu_recurrence.linear_recurrence, compiled=compiled))
    rng = np.random.default_rng(3)
    x = rng.choice([-2.0, -1.0, 0.0, 1.0, 2.0], (6, 8)).astype(dtype)
    g = rng.integers(-2, 3, (6, 8)).astype(dtype)
    for axis, (reverse, exclusive) in itertools.product(range(2), VARIANTS):
        out = poisoned(x.shape, dtype)
        run(cpu_backend, CumulativeOperation.PRODUCT, x, g, out, axis, reverse, exclusive)
        np.testing.assert_array_equal(out, reference_gradient("product", x, g, axis, reverse, exclusive))


@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "numpy"])
def test_cpu_strided(monkeypatch, compiled):
    """Permuted, stepped, reversed and broadcast inputs, and an output inside a larger poisoned buffer: each read
    through its strides, nothing written outside the output."""
    monkeypatch.setattr(cpu_recurrence, "linear_recurrence",
                        functools.partial(cpu_recurrence.linear_recurrence, compiled=compiled))
    rng = np.random.default_rng(4)
    shape = (5, 6, 7)
    for axis, (reverse, exclusive), dtype in itertools.product(range(3), VARIANTS, DTYPES):
        x, g = values(rng, shape, axis)
        x = np.ascontiguousarray(x.transpose(2, 0, 1).astype(dtype)).transpose(1, 2, 0)  # permuted
        x = np.concatenate([x, x], axis=1)[:, ::-2]  # stepped and reversed
        g = np.broadcast_to(g[:1].astype(dtype), shape)  # broadcast along the first dimension
        buffer = poisoned((9, 8, 7), dtype)
        out = buffer[2:7, 1:7]
        run(cpu_backend, CumulativeOperation.PRODUCT, x, g, out, axis, reverse, exclusive)
        assert_gradient(out, "product", x, g, axis, reverse, exclusive)
        outside = np.ones(buffer.shape, bool)
        outside[2:7, 1:7] = False
        assert np.isnan(buffer[outside]).all()


# -- the CUDA backend ---------------------------------------------------------------------------------------------


def on_device(array: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(array)).to(DEVICE)


def run_cuda(operation, x, g, axis, reverse, exclusive, out=None):
    """The gradient on the CUDA backend (out poisoned, if not given); (out tensor, out as NumPy)."""
    x_tensor, g_tensor = (value if isinstance(value, torch.Tensor) else on_device(value) for value in (x, g))
    if out is None:
        out = torch.full(tuple(x_tensor.shape), float("nan"), dtype=x_tensor.dtype, device=DEVICE)
    run(cuda_backend, operation, x_tensor, g_tensor, out, axis, reverse, exclusive)
    return out, out.cpu().numpy()


@pytest.mark.parametrize("dtype", DTYPES)
def test_cuda_every_variant(monkeypatch, dtype):
    """Blocks of 4 positions × 2 lines: lines of 7 span two blocks, the last one partial, and the lines of a block
    run past the tensor's."""
    monkeypatch.setattr(recurrence, "linear_recurrence",
                        functools.partial(recurrence.linear_recurrence, block=(4, 2)))
    rng = np.random.default_rng(5)
    shape = (3, 7, 5)
    for axis, (reverse, exclusive) in itertools.product(range(3), VARIANTS):
        x, g = (array.astype(dtype) for array in values(rng, shape, axis))
        for operation in [CumulativeOperation.PRODUCT] if axis else list(CumulativeOperation):
            _, out = run_cuda(operation, x, g, axis, reverse, exclusive)
            assert_gradient(out, operation, x, g, axis, reverse, exclusive)


def test_cuda_default_blocks():
    rng = np.random.default_rng(6)
    for (shape, axis), (reverse, exclusive) in zip(itertools.cycle([((3, 37), 1), ((37, 6), 0)]), VARIANTS):
        x, g = (array.astype(np.float32) for array in values(rng, shape, axis))
        _, out = run_cuda(CumulativeOperation.PRODUCT, x, g, axis, reverse, exclusive)
        assert_gradient(out, "product", x, g, axis, reverse, exclusive)


def test_cuda_exact_with_zeros(monkeypatch):
    monkeypatch.setattr(recurrence, "linear_recurrence",
                        functools.partial(recurrence.linear_recurrence, block=(2, 4)))
    rng = np.random.default_rng(7)
    x = rng.choice([-2.0, -1.0, 0.0, 1.0, 2.0], (5, 7)).astype(np.float16)
    g = rng.integers(-2, 3, (5, 7)).astype(np.float16)
    for axis, (reverse, exclusive) in itertools.product(range(2), VARIANTS):
        _, out = run_cuda(CumulativeOperation.PRODUCT, x, g, axis, reverse, exclusive)
        np.testing.assert_array_equal(out, reference_gradient("product", x, g, axis, reverse, exclusive))


@pytest.mark.parametrize("reverse, exclusive", VARIANTS)
def test_cuda_strided(monkeypatch, reverse, exclusive):
    """Strides as given: a permuted input and a broadcast gradient coalesce into lines; a stepped input whose other
    dimensions do not coalesce into two goes through packed copies; the output is written in a larger buffer."""
    monkeypatch.setattr(recurrence, "linear_recurrence",
                        functools.partial(recurrence.linear_recurrence, block=(4, 4)))
    rng = np.random.default_rng(8)
    shape, axis = (2, 5, 3, 4), 1
    x, g = values(rng, shape, axis)
    permuted = on_device(x.transpose(3, 1, 0, 2).astype(np.float32)).permute(2, 1, 3, 0)
    stepped = on_device(np.repeat(x.astype(np.float32), 2, axis=2))[:, :, ::2]
    broadcast = on_device(g[:, :, :1].astype(np.float32)).expand(shape)
    buffer = torch.full((3, 6, 3, 4), float("nan"), device=DEVICE)
    for x_tensor in (permuted, stepped):
        buffer.fill_(float("nan"))
        out = buffer[1:, 1:]
        run_cuda(CumulativeOperation.PRODUCT, x_tensor, broadcast, axis, reverse, exclusive, out)
        assert_gradient(out.cpu().numpy(), "product", x.astype(np.float32),
                        np.broadcast_to(g[:, :, :1], shape).astype(np.float32), axis, reverse, exclusive)
        assert torch.isnan(buffer[:1]).all() and torch.isnan(buffer[:, :1]).all()


# -- the entry function -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["numpy", "torch"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_entry_against_torch_autograd(kind, dtype):
    rng = np.random.default_rng(9)
    shape = (4, 6, 5)
    for operation, axis, (reverse, exclusive) in itertools.product(list(CumulativeOperation), (0, -1), VARIANTS):
        x, g = (array.astype(dtype) for array in values(rng, shape, axis))
        if kind == "numpy":
            result = cumulative_gradient(operation, x, g, axis, reverse, exclusive)
            assert isinstance(result, np.ndarray)
        else:
            leaf = torch.from_numpy(x).requires_grad_()
            result = cumulative_gradient(operation, leaf, torch.from_numpy(g), axis, reverse=reverse,
                                         exclusive=exclusive)
            assert isinstance(result, torch.Tensor) and not result.requires_grad
            result = result.numpy()
        assert_gradient(result, operation, x, g, axis % 3, reverse, exclusive,
                        expected=torch_gradient(operation, x, g, axis, reverse, exclusive))


@settings(max_examples=examples(40), deadline=None)
@given(data=st.data())
def test_entry_any_shape(data):
    shape = data.draw(strategies.shapes(max_elements=60, max_size=9))
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    operation = data.draw(st.sampled_from(list(CumulativeOperation)))
    reverse, exclusive = data.draw(st.booleans()), data.draw(st.booleans())
    dtype = data.draw(st.sampled_from(DTYPES))
    x, g = (array.astype(dtype) for array in values(np.random.default_rng(data.draw(st.integers(0, 2**32))), shape,
                                                    axis))
    result = cumulative_gradient(operation, x, g, axis, reverse, exclusive)
    assert_gradient(result, operation, x, g, axis % len(shape), reverse, exclusive)


@pytest.mark.parametrize("shape", [(0,), (3, 0), (0, 4)])
def test_entry_empty(shape):
    for array in (np.ones(shape, np.float32), torch.ones(shape, dtype=torch.float16)):
        result = cumulative_gradient("product", array, array, -1, exclusive=True)
        assert type(result) is type(array) and tuple(result.shape) == shape and result.dtype == array.dtype


def test_entry_rejections():
    x = np.ones((2, 3), np.float32)
    rejects(["CUMULATIVE_PRODUCT gradient.input_tensor", "INT32", "FLOAT32, FLOAT16"],
            lambda: cumulative_gradient("product", x.astype(np.int32), x.astype(np.int32), 0))
    rejects(["CUMULATIVE_SUMMATION gradient.input_tensor", "FLOAT64"],
            lambda: cumulative_gradient("sum", x.astype(np.float64), x.astype(np.float64), 0))
    rejects(["gradient.gradient", "input's data type and sizes", "FLOAT16"],
            lambda: cumulative_gradient("product", x, x.astype(np.float16), 0))
    rejects(["gradient.gradient", "[2, 3]", "[3, 2]"], lambda: cumulative_gradient("product", x, x.T, 0))
    for axis in (2, -3):
        rejects(["gradient.axis", "out of range"], lambda: cumulative_gradient("product", x, x, axis))
    for axis in (True, 0.0):
        rejects(["gradient.axis", "must be an integer"], lambda: cumulative_gradient("product", x, x, axis))
    rejects(["cumulative_gradient.operation", "'max'"], lambda: cumulative_gradient("max", x, x, 0))
    tensor = torch.ones(2, 3, dtype=torch.bfloat16)
    rejects(["gradient.input_tensor", "BFloat16", "supported", "float32"],
            lambda: cumulative_gradient("sum", tensor, tensor, 0))
