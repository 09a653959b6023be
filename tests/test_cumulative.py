"""DML_OPERATOR_CUMULATIVE_SUMMATION and DML_OPERATOR_CUMULATIVE_PRODUCT on the CPU backend: the operator pages'
examples, integer wrap-around, long FLOAT16 axes, sizes past the CPU engine's blocks, determinism. Random strides,
bindings, in-place runs and every data type on every backend are in test_conformance.py."""

import numpy as np
import pytest

import dmlops
from dmlops import (AxisDirection, CumulativeProductOperatorDesc, CumulativeSummationOperatorDesc, DataType,
                    Device, TensorDesc)

import reference
from checks import assert_cumulative_matches
from strategies import random_values

DESCS = {"sum": CumulativeSummationOperatorDesc, "product": CumulativeProductOperatorDesc}
FUNCTIONS = {"sum": dmlops.cumulative_sum, "product": dmlops.cumulative_product}
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
