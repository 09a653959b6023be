"""DML_OPERATOR_QUANTIZED_LINEAR_MATRIX_MULTIPLY on the CPU backend, through the operator API and the array API,
bit for bit against the exact-integer reference of tests/reference.py: owned B, ties, the float64 multiplier,
saturation, parameter forms, batches, long K, rejected scales. Random bindings, layouts and parameter forms on every
backend are in test_conformance.py."""

import itertools

import numpy as np
import pytest

import dmlops
from dmlops import DataType, Device, QuantizedLinearMatrixMultiplyOperatorDesc, TensorDesc, TensorFlags, \
    ValidationError

import reference
from strategies import random_scales

DEVICE = Device()


def random_data(rng, dtype, shape):
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max + 1, shape, dtype=dtype)


# -- operator API ----------------------------------------------------------------------------------------------


def test_owned_b_with_padded_strides_is_read_through_its_strides():
    """B bound once at initialization, with a padded row pitch: the kept copy must be read as B, not as its
    buffer's bytes."""
    rng = np.random.default_rng(11)
    a, b = random_data(rng, np.int8, (3, 4)), random_data(rng, np.uint8, (4, 5))
    padded = np.zeros((4, 8), np.uint8)
    padded[:, :5] = b
    scale = TensorDesc(DataType.FLOAT32, [1, 1])
    desc = QuantizedLinearMatrixMultiplyOperatorDesc(
        TensorDesc(DataType.INT8, [3, 4]), scale, None,
        TensorDesc(DataType.UINT8, [4, 5], [8, 1], flags=TensorFlags.OWNED_BY_DML), scale, None, scale, None,
        TensorDesc(DataType.UINT8, [3, 5], total_tensor_size_in_bytes=16))
    op = DEVICE.compile_operator(desc)
    op.initialize([None, None, None, padded, None, None, None, None])
    out = np.zeros(16, np.uint8)
    s = np.array([0.5], np.float32)
    op.execute([a, s, None, None, s, None, np.array([1.0], np.float32), None], [out])
    expected = reference.quantized_matmul(a, 0.5, None, b, 0.5, None, 1.0, None, np.uint8)
    np.testing.assert_array_equal(out[:15].reshape(3, 5), expected)


# -- rounding, saturation, signedness ----------------------------------------------------------------------------


@pytest.mark.parametrize("output_type", [np.int8, np.uint8])
def test_ties_round_half_to_even(output_type):
    """acc · 0.5 lands on every x.5 from -63.5 to 63.5: each goes to its even neighbour."""
    acc = np.arange(-127, 128, 2, dtype=np.int64)  # odd: acc / 2 is a tie
    a = acc.astype(np.int8).reshape(-1, 1)
    b = np.ones((1, 1), np.int8)
    zero = 0 if output_type == np.int8 else 100
    result = dmlops.quantized_linear_matmul(a, 0.5, None, b, 1.0, None, 1.0, output_type(zero))
    halves = acc / 2
    expected = np.where(np.floor(halves) % 2 == 0, np.floor(halves), np.ceil(halves)) + zero
    np.testing.assert_array_equal(result[:, 0], np.clip(expected, *reference.OUTPUT_RANGE[np.dtype(output_type)]))
    assert result[list(acc).index(1), 0] == zero + 0 and result[list(acc).index(3), 0] == zero + 2
    assert result[list(acc).index(5), 0] == zero + 2 and result[list(acc).index(-1), 0] == zero + 0


def test_ties_after_the_float64_multiplier():
    """The multiplier is (sa·sb)/so in float64: 0.25·2/1 = 0.5 exactly, so 2.5 → 2 and 3.5 → 4."""
    a = np.array([[5], [7], [-5], [-7]], np.int8)
    result = dmlops.quantized_linear_matmul(a, 0.25, None, np.ones((1, 1), np.int8), 2.0, None, 1.0, np.int8(0))
    assert result[:, 0].tolist() == [2, 4, -2, -4]


def test_multiplier_is_float64():
    """(sa·sb)/so in float64 puts 4321·m just below 29.5 and 12963·m just below 88.5; the same multiplier in
    float32 would round both up."""
    sa, sb, so = np.float32(0.08401364), np.float32(0.053198915), np.float32(0.65465856)
    a = np.array([[29], [87], [-29], [-87]], np.int8)  # acc = a · 149: ±4321, ±12963
    result = dmlops.quantized_linear_matmul(a, sa, None, np.array([[149]], np.uint8), sb, None, so, np.int8(0))
    assert result[:, 0].tolist() == [29, 88, -29, -88]


@pytest.mark.parametrize("a_type, b_type, output_type", list(itertools.product([np.int8, np.uint8], repeat=3)))
def test_mixed_signedness(a_type, b_type, output_type):
    rng = np.random.default_rng(4)
    m, k, n = 7, 19, 6
    a, b = random_data(rng, a_type, (m, k)), random_data(rng, b_type, (k, n))
    za, zb, zo = random_data(rng, a_type, ()), random_data(rng, b_type, ()), random_data(rng, output_type, ())
    sa, sb, so = random_scales(rng, k, (), (), ())
    result = dmlops.quantized_linear_matmul(a, sa, za, b, sb, zb, so, zo)
    assert result.dtype == output_type
    expected = reference.quantized_matmul(a, sa, za, b, sb, zb, so, zo, output_type)
    np.testing.assert_array_equal(result, expected)
    assert len(np.unique(result)) > 4  # the scales spread the outputs: the test is not all saturation


def test_saturation_both_ends():
    a = np.array([[127], [-128], [1]], np.int8)
    b = np.array([[127]], np.int8)
    for output_type, (low, high) in reference.OUTPUT_RANGE.items():
        result = dmlops.quantized_linear_matmul(a, 1.0, None, b, 1.0, None, 1.0, None, output_dtype=output_type)
        assert result[:, 0].tolist() == [high, low, min(127, high)]


PARAMETER_FORMS = list(itertools.product(["tensor", "row"], ["tensor", "column"], ["tensor", "row"]))


@pytest.mark.parametrize("a_form, b_form, output_form", PARAMETER_FORMS)
def test_per_tensor_row_and_column_forms(a_form, b_form, output_form):
    """Vectors (length M for A and output, N for B), with per-row / per-column zero points too, and the same
    values as DirectML-shaped tensors."""
    rng = np.random.default_rng(5)
    m, k, n = 6, 33, 5
    a, b = random_data(rng, np.uint8, (m, k)), random_data(rng, np.int8, (k, n))
    lengths = {"row": m, "column": n, "tensor": 1}
    sa, sb, so = random_scales(rng, k, lengths[a_form], lengths[b_form], lengths[output_form])
    za = random_data(rng, np.uint8, lengths[a_form])
    zb = random_data(rng, np.int8, lengths[b_form])
    zo = random_data(rng, np.int8, lengths[output_form])
    as_row = lambda v: v.reshape(-1, 1)  # noqa: E731
    expected = reference.quantized_matmul(a, as_row(sa), as_row(za), b, sb, zb, as_row(so), as_row(zo), np.int8)
    np.testing.assert_array_equal(dmlops.quantized_linear_matmul(a, sa, za, b, sb, zb, so, zo), expected)
    shaped = [v.reshape(m if len(v) > 1 else 1, 1) for v in (sa, za)] + \
             [v.reshape(1, n if len(v) > 1 else 1) for v in (sb, zb)] + \
             [v.reshape(m if len(v) > 1 else 1, 1) for v in (so, zo)]
    result = dmlops.quantized_linear_matmul(a, shaped[0], shaped[1], b, shaped[2], shaped[3], shaped[4], shaped[5])
    np.testing.assert_array_equal(result, expected)


# -- batches ---------------------------------------------------------------------------------------------------


def test_four_dimensions_with_batch_and_channel():
    rng = np.random.default_rng(8)
    a, b = random_data(rng, np.int8, (2, 3, 5, 17)), random_data(rng, np.uint8, (2, 3, 17, 4))
    sa, sb, so = random_scales(rng, 17, 5, 4, ())
    za, zb, zo = np.int8(-3), random_data(rng, np.uint8, 4), np.uint8(128)
    result = dmlops.quantized_linear_matmul(a, sa, za, b, sb, zb, so, zo)
    assert result.shape == (2, 3, 5, 4) and result.dtype == np.uint8
    expected = reference.quantized_matmul(a, sa[:, None], za, b, sb, zb, so, zo, np.uint8)
    np.testing.assert_array_equal(result, expected)
    for batch, channel in itertools.product(range(2), range(3)):  # six independent products
        single = dmlops.quantized_linear_matmul(a[batch, channel], sa, za, b[batch, channel], sb, zb, so, zo)
        np.testing.assert_array_equal(result[batch, channel], single)


@pytest.mark.parametrize("a_shape, b_shape, out_shape", [
    ((2, 1, 4, 9), (3, 9, 5), (2, 3, 4, 5)),
    ((4, 9), (2, 3, 9, 5), (2, 3, 4, 5)),
    ((3, 4, 9), (1, 9, 5), (3, 4, 5)),
    ((1, 3, 4, 9), (2, 1, 9, 5), (2, 3, 4, 5)),
])
def test_broadcast_batch(a_shape, b_shape, out_shape):
    rng = np.random.default_rng(9)
    a, b = random_data(rng, np.uint8, a_shape), random_data(rng, np.uint8, b_shape)
    sa, sb, so = random_scales(rng, 9, (), (), ())
    result = dmlops.quantized_linear_matmul(a, sa, np.uint8(7), b, sb, np.uint8(200), so, None)
    assert result.shape == out_shape
    np.testing.assert_array_equal(result, reference.quantized_matmul(a, sa, 7, b, sb, 200, so, None, np.uint8))


def test_broadcast_batch_through_zero_strides():
    """The operator API's form of a broadcast batch: B {2, 3, K, N} with strides 0 on batch and channel."""
    rng = np.random.default_rng(10)
    a, b = random_data(rng, np.int8, (2, 3, 4, 8)), random_data(rng, np.int8, (8, 4))
    scale = TensorDesc(DataType.FLOAT32, [1, 1, 1, 1])
    desc = QuantizedLinearMatrixMultiplyOperatorDesc(
        TensorDesc(DataType.INT8, a.shape), scale, None, TensorDesc(DataType.INT8, [2, 3, 8, 4], [0, 0, 4, 1]),
        scale, None, scale, None, TensorDesc(DataType.INT8, [2, 3, 4, 4]))
    out = np.full((2, 3, 4, 4), 77, np.int8)
    sa, sb, so = (np.array([v], np.float32) for v in (0.02, 0.03, 0.1))
    DEVICE.compile_operator(desc).execute([a, sa, None, b, sb, None, so, None], [out])
    np.testing.assert_array_equal(out, reference.quantized_matmul(a, sa, None, b, sb, None, so, None, np.int8))


# -- zero points, long K -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("present", list(itertools.product([False, True], repeat=3)))
def test_missing_zero_points_are_zero(present):
    rng = np.random.default_rng(12)
    a, b = random_data(rng, np.int8, (5, 11)), random_data(rng, np.uint8, (11, 3))
    sa, sb, so = random_scales(rng, 11, (), (), ())
    zero_points = [np.int8(-7), np.uint8(9), np.int8(3)]
    za, zb, zo = (z if p else None for z, p in zip(zero_points, present))
    result = dmlops.quantized_linear_matmul(a, sa, za, b, sb, zb, so, zo, output_dtype=np.int8)
    np.testing.assert_array_equal(result, reference.quantized_matmul(a, sa, za, b, sb, zb, so, zo, np.int8))
    given_zeros = [z if p else type(z)(0) for z, p in zip(zero_points, present)]
    explicit = dmlops.quantized_linear_matmul(a, sa, given_zeros[0], b, sb, given_zeros[1], so, given_zeros[2])
    np.testing.assert_array_equal(result, explicit)


@pytest.mark.parametrize("k", [1, 257, 4099, 100_000])
def test_long_k_accumulates_exactly(k):
    """Accumulators beyond int32: K = 100 000 products of ±255 reach 6.5e9."""
    rng = np.random.default_rng(k)
    a, b = random_data(rng, np.int8, (3, k)), random_data(rng, np.uint8, (k, 4))
    a[0], b[:, 0] = -128, 255  # the extreme accumulator: Σ (-128 - 127)(255 - 0)
    sa, sb, so = random_scales(rng, k, 3, 4, ())
    result = dmlops.quantized_linear_matmul(a, sa, np.int8(127), b, sb, None, so, np.int8(0))
    expected = reference.quantized_matmul(a, sa[:, None], 127, b, sb, None, so, 0, np.int8)
    np.testing.assert_array_equal(result, expected)
    exact = dmlops.quantized_linear_matmul(a[:1], 1.0, np.int8(127), b[:, :1], 1.0, None, float(k), np.int8(0))
    assert exact[0, 0] == -128  # -65025 saturates


def test_sizes_that_are_not_block_multiples():
    rng = np.random.default_rng(13)
    m, k, n = 67, 131, 45
    a, b = random_data(rng, np.uint8, (m, k)), random_data(rng, np.int8, (k, n))
    sa, sb, so = random_scales(rng, k, m, n, m)
    result = dmlops.quantized_linear_matmul(a, sa, np.uint8(128), b, sb, np.int8(1), so, np.uint8(128))
    expected = reference.quantized_matmul(a, sa[:, None], 128, b, sb, 1, so[:, None], 128, np.uint8)
    np.testing.assert_array_equal(result, expected)


# -- scales checked at execute -------------------------------------------------------------------------------------


@pytest.mark.parametrize("field", ["a_scale_tensor", "b_scale_tensor", "output_scale_tensor"])
@pytest.mark.parametrize("bad", [0.0, -0.0, np.nan, np.inf, -np.inf])
def test_zero_nan_and_infinite_scales_rejected_at_execute(field, bad):
    row, column = TensorDesc(DataType.FLOAT32, [1, 1, 3, 1]), TensorDesc(DataType.FLOAT32, [1, 1, 1, 3])
    data = TensorDesc(DataType.UINT8, [1, 1, 3, 3])
    desc = QuantizedLinearMatrixMultiplyOperatorDesc(data, row, None, data, column, None, row, None, data)
    op = DEVICE.compile_operator(desc)  # the values are not known yet: compiling succeeds
    scales = {f: np.array([0.5, 0.25, 2.0, 0.0], np.float32) for f in ("a_scale_tensor", "b_scale_tensor",
                                                                       "output_scale_tensor")}
    scales[field][1] = bad
    x = np.arange(12, dtype=np.uint8)
    out = np.full(12, 3, np.uint8)
    with pytest.raises(ValidationError) as caught:
        op.execute([x, scales["a_scale_tensor"], None, x, scales["b_scale_tensor"], None,
                    scales["output_scale_tensor"], None], [out])
    message = str(caught.value)
    assert "QUANTIZED_LINEAR_MATRIX_MULTIPLY" in message and field in message and "finite and non-zero" in message
    assert (out == 3).all()  # nothing written
    with pytest.raises(ValidationError, match=f"{field}.*finite and non-zero"):
        given = {"a_scale_tensor": 1.0, "b_scale_tensor": 1.0, "output_scale_tensor": 1.0, field: bad}
        dmlops.quantized_linear_matmul(x.reshape(3, 4)[:, :3], given["a_scale_tensor"], None, x.reshape(4, 3)[:3],
                                       given["b_scale_tensor"], None, given["output_scale_tensor"], None)


def test_extreme_finite_scales():
    """The largest and smallest float32 scales keep the float64 multiplier finite and the result exact."""
    a, b = np.array([[3, -2]], np.int8), np.array([[1], [1]], np.int8)
    tiny, huge = np.float32(1e-45), np.float32(3e38)
    for sa, sb, so in [(huge, huge, tiny), (tiny, tiny, huge), (tiny, huge, np.float32(1.0))]:
        result = dmlops.quantized_linear_matmul(a, sa, None, b, sb, None, so, None, output_dtype=np.int8)
        np.testing.assert_array_equal(result, reference.quantized_matmul(a, sa, None, b, sb, None, so, None, np.int8))
