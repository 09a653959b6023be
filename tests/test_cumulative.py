"""DML_OPERATOR_CUMULATIVE_SUMMATION and DML_OPERATOR_CUMULATIVE_PRODUCT on the CPU backend, through the
operator API (descs and buffer bindings) and the array API, against the loop reference of tests/reference.py."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dmlops
from dmlops import (AxisDirection, CumulativeProductOperatorDesc, CumulativeSummationOperatorDesc, DataType,
                    Device, TensorDesc)

import reference
from checks import assert_cumulative_matches
from strategies import bound_tensors, fill, poison, random_values, shapes, strides

DESCS = {"sum": CumulativeSummationOperatorDesc, "product": CumulativeProductOperatorDesc}
FUNCTIONS = {"sum": dmlops.cumulative_sum, "product": dmlops.cumulative_product}
# The data types of the LEVEL_5_0-and-above rows of both operator pages.
SCAN_TYPES = [DataType.FLOAT32, DataType.FLOAT16, DataType.INT64, DataType.INT32, DataType.UINT64,
              DataType.UINT32]
DEVICE = Device()

# The examples of the operator pages: input {1,1,3,4} FLOAT32.
SEED_INPUT = [[2, 1, 3, 5], [3, 8, 7, 3], [9, 6, 2, 4]]
SEED_EXAMPLES = [
    ("sum", 3, False, False, [[2, 3, 6, 11], [3, 11, 18, 21], [9, 15, 17, 21]]),
    ("sum", 3, False, True, [[0, 2, 3, 6], [0, 3, 11, 18], [0, 9, 15, 17]]),
    ("sum", 3, True, False, [[11, 9, 8, 5], [21, 18, 10, 3], [21, 12, 6, 4]]),
    ("sum", 2, False, False, [[2, 1, 3, 5], [5, 9, 10, 8], [14, 15, 12, 12]]),
    ("product", 3, False, False, [[2, 2, 6, 30], [3, 24, 168, 504], [9, 54, 108, 432]]),
    ("product", 3, False, True, [[1, 2, 2, 6], [1, 3, 24, 168], [1, 9, 54, 108]]),
    ("product", 3, True, False, [[30, 15, 15, 5], [504, 168, 21, 3], [432, 48, 8, 4]]),
    ("product", 2, False, False, [[2, 1, 3, 5], [6, 8, 21, 15], [54, 48, 42, 60]]),
]


def make_desc(operation, input_desc, output_desc, axis, reverse, exclusive):
    direction = AxisDirection.DECREASING if reverse else AxisDirection.INCREASING
    return DESCS[operation](input_desc, output_desc, axis, direction, exclusive)


@pytest.mark.parametrize("operation, axis, reverse, exclusive, expected", SEED_EXAMPLES)
def test_seed_example_operator_api(operation, axis, reverse, exclusive, expected):
    tensor = TensorDesc(DataType.FLOAT32, [1, 1, 3, 4])
    x = np.array(SEED_INPUT, dtype=np.float32)
    out = np.full(12, np.nan, dtype=np.float32)
    # The device of the operator's first feature level: the examples predate 1-to-8-dimension support.
    level = "2_1" if operation == "sum" else "3_1"
    op = Device("cpu", level).compile_operator(make_desc(operation, tensor, tensor, axis, reverse, exclusive))
    op.initialize(None)
    op.execute([x], [out])
    np.testing.assert_array_equal(out.reshape(3, 4), expected)


@pytest.mark.parametrize("operation, axis, reverse, exclusive, expected", SEED_EXAMPLES)
def test_seed_example_array_api(operation, axis, reverse, exclusive, expected):
    x = np.array(SEED_INPUT, dtype=np.float32).reshape(1, 1, 3, 4)
    result = FUNCTIONS[operation](x, axis, reverse=reverse, exclusive=exclusive)
    assert result.dtype == np.float32 and result.shape == (1, 1, 3, 4)
    np.testing.assert_array_equal(result[0, 0], expected)
    negative = FUNCTIONS[operation](x, axis - 4, reverse=reverse, exclusive=exclusive)
    np.testing.assert_array_equal(negative, result)


def test_dxdispatch_model_cumulative_product():
    """DxDispatch/models/dml_cumulative_product.json: A = [2, 4, 8, 3] → Out = [2, 8, 64, 192]."""
    tensor = TensorDesc(DataType.FLOAT32, [1, 1, 1, 4])
    op = DEVICE.compile_operator(CumulativeProductOperatorDesc(tensor, tensor, 3, AxisDirection.INCREASING, False))
    out = bytearray(16)
    op.execute([np.array([2, 4, 8, 3], np.float32).tobytes()], [out])
    assert np.frombuffer(out, np.float32).tolist() == [2, 8, 64, 192]


@st.composite
def scan_cases(draw):
    operation = draw(st.sampled_from(["sum", "product"]))
    data_type = draw(st.sampled_from(SCAN_TYPES))
    sizes = draw(shapes())
    axis = draw(st.integers(0, len(sizes) - 1))
    output = draw(bound_tensors(data_type, sizes, draw(strides(sizes, broadcast=False))))
    in_place = draw(st.integers(0, 3)) == 0
    x = output if in_place else draw(bound_tensors(data_type, sizes, draw(strides(sizes, broadcast=True))))
    return operation, x, output, axis, draw(st.booleans()), draw(st.booleans()), draw(st.integers(0, 2**32 - 1))


@settings(max_examples=100, deadline=None)
@given(case=scan_cases())
def test_operator_api_matches_reference(case):
    operation, x_bound, out_bound, axis, reverse, exclusive, seed = case
    rng = np.random.default_rng(seed)
    dtype = x_bound.desc.data_type.numpy_dtype
    small = operation == "product" and (dtype.kind == "f" or rng.integers(2) == 0)
    if x_bound is not out_bound:
        poison(out_bound, rng)
    fill(x_bound, lambda count: random_values(rng, dtype, count, small=small))
    x = x_bound.read()
    x_before, out_before = bytes(x_bound.memory), np.frombuffer(bytes(out_bound.memory), np.uint8)

    desc = make_desc(operation, x_bound.desc, out_bound.desc, axis, reverse, exclusive)
    DEVICE.compile_operator(desc).execute([x_bound.binding], [out_bound.binding])

    assert_cumulative_matches(out_bound.read(), operation, x, axis, reverse, exclusive)
    outside = ~out_bound.covered()
    np.testing.assert_array_equal(np.frombuffer(out_bound.memory, np.uint8)[outside], out_before[outside])
    if x_bound is not out_bound:
        assert bytes(x_bound.memory) == x_before


@st.composite
def array_views(draw, rng, dtype, small):
    """A NumPy view: a strided slice of a larger array, its axes permuted, maybe reversed and broadcast."""
    sizes = draw(shapes(max_rank=6))
    rank = len(sizes)
    broadcast = [draw(st.integers(0, 5)) == 0 for _ in sizes]
    steps = [draw(st.sampled_from([1, 1, 2, 3, -1, -2])) for _ in sizes]
    memory_sizes = [1 if b else s for s, b in zip(sizes, broadcast)]
    base_shape = [abs(step) * size + 1 for step, size in zip(steps, memory_sizes)]
    base = random_values(rng, dtype, int(np.prod(base_shape)), small=small).reshape(base_shape)
    view = base[tuple(slice(None, None, step) for step in steps)]
    view = view[tuple(slice(0, s) for s in memory_sizes)]
    order = draw(st.permutations(range(rank)))
    view = view.transpose(order)
    final = tuple(sizes[axis] for axis in order)
    return np.broadcast_to(view, final) if any(broadcast) else view


@settings(max_examples=100, deadline=None)
@given(data=st.data(), operation=st.sampled_from(["sum", "product"]), data_type=st.sampled_from(SCAN_TYPES),
       reverse=st.booleans(), exclusive=st.booleans(), out_kind=st.sampled_from(["new", "x", "strided view"]),
       seed=st.integers(0, 2**32 - 1))
def test_array_api_matches_reference(data, operation, data_type, reverse, exclusive, out_kind, seed):
    rng = np.random.default_rng(seed)
    dtype = data_type.numpy_dtype
    small = operation == "product" and (dtype.kind == "f" or rng.integers(2) == 0)
    x = data.draw(array_views(rng, dtype, small))
    axis = data.draw(st.integers(-x.ndim, x.ndim - 1))
    if out_kind == "x" and not x.flags.writeable:
        out_kind = "new"  # a broadcast view cannot be written
    x_before = x.copy()
    out = None
    if out_kind == "x":
        out = x
    elif out_kind == "strided view":
        backing = rng.integers(0, 256, (2 * x.size + 8) * dtype.itemsize, dtype=np.uint8).view(dtype)
        backing_before = backing.copy()
        out = backing[3:3 + 2 * x.size:2].reshape(x.shape)

    result = FUNCTIONS[operation](x, axis, reverse=reverse, exclusive=exclusive, out=out)

    if out is not None:
        assert result is out
    assert_cumulative_matches(result, operation, x_before, axis % x.ndim, reverse, exclusive)
    if out_kind == "strided view":
        untouched = np.ones(backing.size, dtype=bool)
        untouched[3:3 + 2 * x.size:2] = False
        np.testing.assert_array_equal(backing.view(np.uint8).reshape(-1, dtype.itemsize)[untouched],
                                      backing_before.view(np.uint8).reshape(-1, dtype.itemsize)[untouched])


@pytest.mark.parametrize("operation, dtype, values, exclusive, expected", [
    ("sum", np.int32, [2**31 - 1, 1, 1], False, [2**31 - 1, -2**31, -2**31 + 1]),
    ("sum", np.int32, [-2**31, -1, 5], True, [0, -2**31, 2**31 - 1]),
    ("sum", np.uint32, [2**32 - 1, 2, 7], False, [2**32 - 1, 1, 8]),
    ("sum", np.int64, [2**63 - 1, 2, -3], False, [2**63 - 1, -2**63 + 1, 2**63 - 2]),
    ("sum", np.uint64, [2**64 - 1, 1, 2**63], False, [2**64 - 1, 0, 2**63]),
    ("product", np.int32, [65536, 65536, 3], False, [65536, 0, 0]),
    ("product", np.int32, [46341, 46341, -1], False, [46341, -2147479015, 2147479015]),
    ("product", np.uint32, [2**31 + 1, 3, 5], True, [1, 2**31 + 1, 2**31 + 3]),
    ("product", np.int64, [2**62, 2, 2], False, [2**62, -2**63, 0]),
    ("product", np.uint64, [2**63 + 1, 3, 2**63], False, [2**63 + 1, 2**63 + 3, 2**63]),
])
def test_integer_wrap_around(operation, dtype, values, exclusive, expected):
    """Integers wrap modulo 2^bits in their own type, never promoted."""
    x = np.array(values, dtype=dtype)
    result = FUNCTIONS[operation](x, 0, exclusive=exclusive)
    assert result.dtype == dtype
    assert result.tolist() == np.array(expected, dtype=dtype).tolist()
    assert_cumulative_matches(result, operation, x, 0, False, exclusive)
    reversed_result = FUNCTIONS[operation](x[::-1].copy(), 0, reverse=True, exclusive=exclusive)
    assert reversed_result[::-1].tolist() == result.tolist()


@pytest.mark.parametrize("shape, axis", [((4100,), 0), ((3, 5003), 1), ((4097, 2), 0), ((2, 4096, 3), 1)])
@pytest.mark.parametrize("reverse, exclusive", [(False, False), (True, True)])
def test_float16_long_axes_accumulate_in_float32(shape, axis, reverse, exclusive):
    """A float16 running sum of thousands of positive terms stays within a float16 rounding of the float64 sum;
    a float16 accumulator would lose the small terms once the tally passes 2048."""
    rng = np.random.default_rng(sum(shape) + axis)
    x = rng.uniform(0.25, 1.25, shape).astype(np.float16)
    result = dmlops.cumulative_sum(x, axis, reverse=reverse, exclusive=exclusive)
    expected = reference.cumulative("sum", x, axis, reverse, exclusive)
    assert result.dtype == np.float16
    assert np.all(np.abs(result.astype(np.float64) - expected) <= np.finfo(np.float16).eps * expected)


@pytest.mark.parametrize("shape, axis", [((100_003,), 0), ((3, 1027), 1), ((1031, 3), 0), ((5, 7, 131), 1)])
@pytest.mark.parametrize("operation", ["sum", "product"])
@pytest.mark.parametrize("data_type", [DataType.FLOAT32, DataType.INT32, DataType.UINT64])
def test_sizes_that_are_not_block_multiples(shape, axis, operation, data_type):
    rng = np.random.default_rng(7)
    dtype = data_type.numpy_dtype
    x = random_values(rng, dtype, int(np.prod(shape)), small=operation == "product").reshape(shape)
    for reverse, exclusive in [(False, False), (True, True)]:
        result = FUNCTIONS[operation](x, axis, reverse=reverse, exclusive=exclusive)
        assert_cumulative_matches(result, operation, x, axis, reverse, exclusive)


def test_same_inputs_give_the_same_bits():
    x = np.random.default_rng(3).standard_normal((64, 333)).astype(np.float32)
    first = dmlops.cumulative_sum(x, 1, reverse=True, exclusive=True)
    assert first.tobytes() == dmlops.cumulative_sum(x, 1, reverse=True, exclusive=True).tobytes()
