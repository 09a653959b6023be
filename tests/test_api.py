"""The array API: how arrays become descs (strides, not copies), out=, dtypes, parameter forms, torch tensors,
backends, and every rejection of its own."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dmlops
import dmlops.backends.cpu
from dmlops import DataType, Device

import reference
from checks import assert_cumulative_matches, rejects
from conftest import examples

SUM, PRODUCT = "DML_OPERATOR_CUMULATIVE_SUMMATION", "DML_OPERATOR_CUMULATIVE_PRODUCT"
QMM = "DML_OPERATOR_QUANTIZED_LINEAR_MATRIX_MULTIPLY"
RNG = np.random.default_rng(2024)
X = RNG.standard_normal((6, 10)).astype(np.float32)
A = RNG.integers(-128, 128, (5, 12), dtype=np.int8)
B = RNG.integers(0, 256, (12, 7), dtype=np.uint8)


@pytest.fixture
def compiled_descs(monkeypatch):
    """The descs the array API validates and lowers; copies into contiguous arrays are forbidden."""
    descs = []
    validated = dmlops.arrays._validated

    def spy(desc):
        descs.append(desc)
        return validated(desc)

    def no_copy(self, array):
        raise AssertionError("a view that DirectML strides can describe was copied")

    monkeypatch.setattr(dmlops.arrays, "_validated", spy)
    monkeypatch.setattr(dmlops.backends.cpu.CpuBackend, "contiguous", no_copy)
    return descs


def element_strides(view):
    return tuple(s // view.itemsize for s in view.strides)


# -- cumulative ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("make_view", [
    lambda: X[::2, 1::3],
    lambda: X.T,
    lambda: X[:, :7],
    lambda: np.broadcast_to(X[2], (4, 10)),
    lambda: np.broadcast_to(X[:, :1], (6, 5)),
    lambda: X[None, :, None, 3:],
], ids=["sliced", "transposed", "narrowed", "broadcast rows", "broadcast columns", "new axes"])
def test_views_are_described_by_strides_not_copied(compiled_descs, make_view):
    view = make_view()
    for axis in range(view.ndim):
        result = dmlops.cumulative_sum(view, axis, reverse=True)
        assert_cumulative_matches(result, "sum", view, axis, True, False)
        assert compiled_descs[-1].input_tensor.strides == element_strides(view)
        assert compiled_descs[-1].input_tensor.sizes == view.shape


def test_reversed_views_are_copied_and_right():
    for view in (X[::-1], X[:, ::-2], X[::-1, ::-1].T):
        for axis in range(2):
            result = dmlops.cumulative_product(view, axis, exclusive=True)
            assert_cumulative_matches(result, "product", view, axis, False, True)


@pytest.mark.parametrize("function, operation", [(dmlops.cumulative_sum, "sum"),
                                                 (dmlops.cumulative_product, "product")])
def test_out_is_x_runs_in_place_and_is_returned(function, operation):
    for x in (X.copy(), X.copy()[:, 1::2], X.copy().T, X.copy()[::-1]):
        before = x.copy()
        assert function(x, -1, reverse=True, exclusive=True, out=x) is x
        assert_cumulative_matches(x, operation, before, x.ndim - 1, True, True)


def test_out_views_are_written_element_by_element():
    backing = np.full((6, 30), np.nan, np.float32)
    out = backing[:, ::3]
    assert dmlops.cumulative_sum(X, 0, out=out) is out
    assert_cumulative_matches(out, "sum", X, 0, False, False)
    assert np.isnan(np.delete(backing, np.s_[::3], axis=1)).all()
    reversed_out = np.zeros((6, 10), np.float32)
    dmlops.cumulative_sum(X, 1, out=reversed_out[::-1, ::-1])
    assert_cumulative_matches(reversed_out[::-1, ::-1], "sum", X, 1, False, False)


def test_every_axis_negative_and_positive():
    x = RNG.integers(-9, 9, (2, 3, 1, 4, 5), dtype=np.int32)
    for axis in range(-5, 5):
        result = dmlops.cumulative_sum(x, axis)
        assert result.tolist() == np.cumsum(x, axis, dtype=np.int32).tolist()
        np.testing.assert_array_equal(result, dmlops.cumulative_sum(x, np.int64(axis)))


def test_lists_become_arrays():
    result = dmlops.cumulative_sum([1, 2, 3], 0)
    assert result.dtype == np.int64 and result.tolist() == [1, 3, 6]
    rejects([PRODUCT, "FLOAT64"], lambda: dmlops.cumulative_product([[1.5, 2.0]], 1))  # Python floats are float64


@pytest.mark.parametrize("function, name", [(dmlops.cumulative_sum, SUM), (dmlops.cumulative_product, PRODUCT)])
@pytest.mark.parametrize("words, call", [
    (["axis", "2", "out of range"], lambda f: f(X, 2)),
    (["axis", "-3", "out of range"], lambda f: f(X, -3)),
    (["axis", "must be an integer", "bool True"], lambda f: f(X, True)),
    (["axis", "must be an integer", "float 1.0"], lambda f: f(X, 1.0)),
    (["axis", "must be an integer", "str '0'"], lambda f: f(X, "0")),
    (["axis", "must be an integer", "tuple (0, 1)"], lambda f: f(X, (0, 1))),
    (["axis", "None", "one axis", "flattens", "reshape(-1)"], lambda f: f(X, None)),
    (["axis", "np.int64(2)", "out of range"], lambda f: f(X, np.int64(2))),
    (["axis_direction", "reverse", "True or False", "str 'yes'"], lambda f: f(X, 0, reverse="yes")),
    (["axis_direction", "reverse", "True or False", "int 2"], lambda f: f(X, 0, reverse=2)),
    (["has_exclusive", "exclusive", "True or False", "float 1.0"], lambda f: f(X, 0, exclusive=1.0)),
    (["has_exclusive", "exclusive", "True or False", "int 0"], lambda f: f(X, 0, exclusive=0)),
    (["input_tensor", "FLOAT64", "not supported"], lambda f: f(X.astype(np.float64), 0)),
    (["input_tensor", "INT8", "not supported"], lambda f: f(X.astype(np.int8), 0)),
    (["input_tensor", "UINT16", "not supported"], lambda f: f(X.astype(np.uint16), 0)),
    (["input_tensor", "bool has no DirectML data type", "supported types are float32"], lambda f: f(X > 0, 0)),
    (["input_tensor", ">f4", "byte order", "supported types are float32", "newbyteorder"],
     lambda f: f(X.astype(">f4"), 0)),
    (["output_tensor", "no DirectML data type"], lambda f: f(X, 0, out=np.zeros((6, 10), bool)[::-1])),
    (["input_tensor", "dimension count", "not 0"], lambda f: f(np.float32(3), 0)),
    (["input_tensor", "dimension count", "not 9"], lambda f: f(np.ones([1] * 9, np.float32), 0)),
    (["input_tensor", "FLOAT64", "not supported"], lambda f: f(np.ones((3, 0)), 0)),
    (["axis", "2", "out of range"], lambda f: f(np.ones((3, 0), np.float32), 2)),
    (["axis_direction", "reverse", "'no'"], lambda f: f(np.ones((3, 0), np.float32), 0, reverse="no")),
    (["output_tensor", "sizes [0, 4]", "[0, 3]"], lambda f: f(np.ones((0, 3), np.float32), 0,
                                                               out=np.ones((0, 4), np.float32))),
    (["output_tensor", "input's data type", "INT32"], lambda f: f(np.ones((0, 3), np.float32), 0,
                                                                   out=np.ones((0, 3), np.int32))),
    (["output_tensor", "input's data type", "INT32"], lambda f: f(X, 0, out=np.zeros((6, 10), np.int32))),
    (["output_tensor", "sizes", "[10, 6]"], lambda f: f(X, 0, out=np.zeros((10, 6), np.float32))),
    (["output_tensor", "read-only"], lambda f: f(X, 0, out=read_only(np.zeros((6, 10), np.float32)))),
    (["output_tensor", "must be an array", "list"], lambda f: f([1.0, 2.0], 0, out=[0.0, 0.0])),
    (["output_tensor", "share memory"], lambda f: f(X[:1], 1, out=np.lib.stride_tricks.as_strided(
        np.zeros(10, np.float32), (1, 10), (4, 0)))),
    (["output_tensor", "only exactly (in place)", "overlaps input_tensor"],
     lambda f: f(SQUARE, 0, out=SQUARE.T)),
])
def test_cumulative_rejections(function, name, words, call):
    rejects([name, *words], lambda: call(function))


def test_numpy_integers_and_booleans_are_options():
    for axis in (np.int64(1), np.int8(-1), np.uint32(1)):
        assert_cumulative_matches(dmlops.cumulative_sum(X, axis), "sum", X, 1, False, False)
    result = dmlops.cumulative_product(X, 0, reverse=np.bool_(True), exclusive=np.bool_(False))
    assert_cumulative_matches(result, "product", X, 0, True, False)


@pytest.mark.parametrize("words, call", [
    (["axis_direction", "reverse", "True or False", "str 'yes'"], lambda: gradient(reverse="yes")),
    (["has_exclusive_product", "exclusive", "True or False", "int 1"], lambda: gradient("product", exclusive=1)),
    (["axis", "must be an integer", "float 1.0"], lambda: gradient(axis=1.0)),
    (["axis", "None", "one axis"], lambda: gradient(axis=None)),
])
def test_cumulative_gradient_rejections(words, call):
    rejects(words, call)


def gradient(operation="sum", axis=1, reverse=False, exclusive=False):
    return dmlops.cumulative_gradient(operation, X, X, axis, reverse, exclusive)


def test_cumulative_gradient_takes_numpy_booleans():
    np.testing.assert_array_equal(gradient(axis=np.int64(1), reverse=np.bool_(True), exclusive=np.bool_(False)),
                                  gradient(reverse=True))


@pytest.mark.parametrize("shape, axis", [((0,), 0), ((0, 3), 0), ((0, 3), 1), ((3, 0), -1), ((2, 0, 4), 2)])
@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int32, np.uint64])
def test_empty_input_gives_an_empty_result(shape, axis, dtype):
    x = np.ones(shape, dtype)
    for function in (dmlops.cumulative_sum, dmlops.cumulative_product):
        result = function(x, axis, reverse=True, exclusive=True)
        assert result.shape == shape and result.dtype == dtype
        out = np.empty(shape, dtype)
        assert function(x, axis, out=out) is out
        assert function(x, axis, out=x) is x
    torch = pytest.importorskip("torch")
    result = dmlops.cumulative_sum(torch.ones(shape), axis)
    assert isinstance(result, torch.Tensor) and tuple(result.shape) == shape and result.dtype == torch.float32


SQUARE = np.arange(16, dtype=np.float32).reshape(4, 4)


def read_only(array):
    array.flags.writeable = False
    return array


# -- quantized matmul --------------------------------------------------------------------------------------------


def expected_qmm(a, sa, za, b, sb, zb, so, zo, dtype):
    return reference.quantized_matmul(a, sa, za, b, sb, zb, so, zo, dtype)


def test_quantized_matmul_views_are_described_by_strides(compiled_descs):
    base_a = RNG.integers(-128, 128, (12, 10), dtype=np.int8)
    base_b = RNG.integers(0, 256, (14, 12), dtype=np.uint8)
    a, b = base_a.T[::2], base_b[::2].T  # A {5, 12} column-major; B {12, 7} column-major, strided
    result = dmlops.quantized_linear_matmul(a, 0.02, np.int8(1), b, 0.03, np.uint8(128), 0.5, np.int8(-2))
    np.testing.assert_array_equal(result, expected_qmm(a, 0.02, 1, b, 0.03, 128, 0.5, -2, np.int8))
    desc = compiled_descs[-1]
    assert desc.a_tensor.strides == element_strides(a) and desc.b_tensor.strides == element_strides(b)


def test_quantized_matmul_output_type():
    args = (A, 0.05, None, B, 0.05, None, 2.0)
    assert dmlops.quantized_linear_matmul(*args, None).dtype == np.uint8  # the default
    assert dmlops.quantized_linear_matmul(*args, np.int8(3)).dtype == np.int8  # the zero point's
    assert dmlops.quantized_linear_matmul(*args, np.array([250], np.uint8)).dtype == np.uint8
    for spelling in (np.int8, "int8", np.dtype(np.int8)):
        assert dmlops.quantized_linear_matmul(*args, None, output_dtype=spelling).dtype == np.int8
        assert dmlops.quantized_linear_matmul(*args, -5, output_dtype=spelling).dtype == np.int8
    out = np.zeros((5, 7), np.int8)
    assert dmlops.quantized_linear_matmul(*args, None, out=out) is out  # out's
    np.testing.assert_array_equal(out, expected_qmm(A, 0.05, None, B, 0.05, None, 2.0, None, np.int8))


def test_quantized_matmul_parameter_forms_agree():
    """Scalars, one-element arrays, 0-d arrays, vectors and DirectML-shaped tensors of the same values."""
    sa, sb, so = np.float32(0.04), np.linspace(0.01, 0.05, 7).astype(np.float32), np.float32(1.5)
    za, zb, zo = -3, RNG.integers(0, 256, 7, dtype=np.uint8), 7
    expected = expected_qmm(A, sa, za, B, sb, zb, so, zo, np.int8)
    forms = [
        (float(sa), za, sb, zb, float(so), zo),
        (np.array([sa]), np.array([za], np.int8), sb, zb, np.array(so), np.array(zo, np.int8)),
        (np.full(5, sa), np.full(5, za, np.int8), sb.astype(np.float64), zb, np.full(5, so), np.full(5, zo, np.int8)),
        (np.full((5, 1), sa), np.full((1, 1), za, np.int8), sb[None], zb[None], np.full((1, 1), so),
         np.full((5, 1), zo, np.int8)),
        (np.full(5, sa)[::-1], za, sb[::-1].copy()[::-1], zb, so, float(zo)),
    ]
    for a_scale, a_zero, b_scale, b_zero, out_scale, out_zero in forms:
        result = dmlops.quantized_linear_matmul(A, a_scale, a_zero, B, b_scale, b_zero, out_scale, out_zero,
                                                output_dtype=np.int8)
        np.testing.assert_array_equal(result, expected)


def test_quantized_matmul_out_views_and_batches():
    a = RNG.integers(0, 256, (3, 1, 4, 6), dtype=np.uint8)
    b = RNG.integers(0, 256, (2, 6, 5), dtype=np.uint8)
    backing = np.full((3, 2, 4, 10), 99, np.uint8)
    out = backing[..., ::2]
    assert dmlops.quantized_linear_matmul(a, 0.1, np.uint8(2), b, 0.1, None, 3.0, None, out=out) is out
    np.testing.assert_array_equal(out, expected_qmm(a, 0.1, 2, b, 0.1, None, 3.0, None, np.uint8))
    assert (backing[..., 1::2] == 99).all()


@pytest.mark.parametrize("words, call", [
    (["a_tensor", "2 to 4 dimensions", "not 1"], lambda: qmm(a=A[0])),
    (["b_tensor", "2 to 4 dimensions", "not 5"], lambda: qmm(b=B.reshape(1, 1, 1, 12, 7))),
    (["b_tensor", "batch dimensions", "[3]", "[2]"], lambda: qmm(a=np.stack([A, A]), b=np.stack([B, B, B]))),
    (["b_tensor", "B's rows (11)", "K (12)"], lambda: qmm(b=B[:11])),
    (["a_tensor", "FLOAT32", "not supported"], lambda: qmm(a=A.astype(np.float32))),
    (["b_tensor", "INT16", "not supported"], lambda: qmm(b=B.astype(np.int16))),
    (["a_scale_tensor", "vector of 4 values", "1 or 5"], lambda: qmm(sa=np.ones(4, np.float32))),
    (["b_scale_tensor", "vector of 5 values", "1 or 7"], lambda: qmm(sb=np.ones(5, np.float32))),
    (["output_scale_tensor", "vector of 7 values", "1 or 5"], lambda: qmm(so=np.ones(7, np.float32))),
    (["a_scale_tensor", "'big'", "not a number"], lambda: qmm(sa="big")),
    (["a_zero_point_tensor", "200", "not a INT8 value"], lambda: qmm(za=200)),
    (["b_zero_point_tensor", "-1", "not a UINT8 value"], lambda: qmm(zb=-1)),
    (["b_zero_point_tensor", "2.5", "not a UINT8 value"], lambda: qmm(zb=2.5)),
    (["a_zero_point_tensor", "must match a_tensor"], lambda: qmm(za=np.uint8(3))),
    (["a_zero_point_tensor", "INT64", "not supported"], lambda: qmm(za=np.array([3]))),
    (["b_scale_tensor", "per column"], lambda: qmm(sb=np.ones((7, 1), np.float32))),
    (["a_scale_tensor", "finite and non-zero"], lambda: qmm(sa=0.0)),
    (["output_scale_tensor", "finite and non-zero"], lambda: qmm(so=np.float32(np.inf))),
    (["b_scale_tensor", "finite and non-zero"], lambda: qmm(sb=np.full(7, np.nan))),
    # (ml_dtypes, which onnx imports, names it)
    (["output_tensor", "output_dtype", "int4"], lambda: qmm(output_dtype="int4")),
    (["output_tensor", "FLOAT32", "not supported"], lambda: qmm(output_dtype=np.float32)),
    (["output_tensor", "out is INT8", "UINT8"], lambda: qmm(output_dtype=np.uint8, out=np.zeros((5, 7), np.int8))),
    (["output_tensor", "sizes", "[5, 7]"], lambda: qmm(out=np.zeros((7, 5), np.uint8))),
    (["output_tensor", "read-only"], lambda: qmm(out=read_only(np.zeros((5, 7), np.uint8)))),
    (["output_tensor", "may not share memory", "a_tensor"],
     lambda: dmlops.quantized_linear_matmul(SQUARE_Q, 1.0, None, SQUARE_Q.T.copy(), 1.0, None, 1.0, None,
                                            out=SQUARE_Q)),
    (["a_tensor", "FLOAT16", "must be INT8 or UINT8", "a_zero_point_tensor"],
     lambda: qmm(a=A.astype(np.float16), za=3)),
    (["output_tensor", "FLOAT64", "must be INT8 or UINT8", "output_zero_point_tensor"],
     lambda: qmm(zo=3, out=np.zeros((5, 7), np.float64))),
    (["output_tensor", "FLOAT32", "must be INT8 or UINT8"], lambda: qmm(zo=0, output_dtype=np.float32)),
    (["b_tensor", "FLOAT32", "must be INT8 or UINT8"], lambda: dmlops.prepare_b(B.astype(np.float32), 0.5, 3)),
    (["output_tensor", "bool", "supported", "float32"], lambda: qmm(output_dtype=bool)),
    (["a_tensor", "bool", "supported", "float32"], lambda: qmm(a=A > 0)),
    (["a_tensor", "FLOAT32", "not supported"], lambda: qmm(a=A[:, :0].astype(np.float32), b=B[:0])),
    (["output_scale_tensor", "finite and non-zero"], lambda: qmm(a=A[:, :0], b=B[:0], so=0.0)),
    (["a_scale_tensor", "vector of 4 values", "1 or 5"], lambda: qmm(a=A[:, :0], b=B[:0], sa=np.ones(4, np.float32))),
    (["output_tensor", "sizes [5, 1]", "[5, 0]"], lambda: qmm(b=B[:, :0], out=np.zeros((5, 1), np.uint8))),
    (["output_tensor", "sizes [0, 7]", "[5, 7]"], lambda: qmm(a=A[:, :0], b=B[:0], out=np.zeros((0, 7), np.uint8))),
])
def test_quantized_matmul_rejections(words, call):
    rejects([QMM, *words], call)


@pytest.mark.parametrize("make_a, make_b", [
    (lambda: RNG.integers(-128, 128, (1, 12), dtype=np.int8)[::-1], lambda: B),
    (lambda: A, lambda: RNG.integers(0, 256, (12, 2), dtype=np.uint8)[:, :1][:, ::-1]),
    (lambda: RNG.integers(-128, 128, (1, 5, 12), dtype=np.int8)[::-1], lambda: B[None, None][::-1, ::-1]),
    (lambda: RNG.integers(-128, 128, (1, 5, 24), dtype=np.int8)[::-1, :, ::2], lambda: B),
], ids=["A's rows", "B's columns", "batches", "strided"])
def test_negative_strides_on_dimensions_of_one_are_run(make_a, make_b):
    """A stride on a dimension of size 1 never moves: a negative one (made by reversing it) is no reason to copy or
    to reject. Twice, with fresh values: the second call runs the first one's plan."""
    for _ in range(2):
        a, b = make_a(), make_b()
        assert any(stride < 0 for stride in a.strides + b.strides)
        zo = RNG.integers(-128, 128, a.shape[-2], dtype=np.int8)
        np.testing.assert_array_equal(dmlops.quantized_linear_matmul(a, 0.05, np.int8(-3), b, 0.04, np.uint8(7), 2.0,
                                                                     zo),
                                      expected_qmm(a, 0.05, -3, b, 0.04, 7, 2.0, zo[:, None], np.int8))
    x = X[:1][::-1]
    assert_cumulative_matches(dmlops.cumulative_sum(x, 1, exclusive=True), "sum", x, 1, False, True)


def test_a_product_over_no_terms_is_the_requantized_output_zero_point():
    """K = 0: every accumulator is 0, so each output element is saturate(round(0) + zo)."""
    for batch in [(), (2,)]:
        a, b = np.ones((*batch, 5, 0), np.int8), np.ones((0, 7), np.uint8)
        sa, sb, so = RNG.uniform(0.01, 1, (5, 1)).astype(np.float32), np.float32(0.5), np.float32(3.0)
        zo = RNG.integers(-128, 128, 5, dtype=np.int8)
        out = RNG.integers(-128, 128, (*batch, 5, 14), dtype=np.int8)[..., ::2]  # poisoned, a strided view
        expected = expected_qmm(a, sa, None, b, sb, None, so, zo[:, None], np.int8)
        np.testing.assert_array_equal(expected, np.broadcast_to(zo[:, None], (*batch, 5, 7)))
        assert dmlops.quantized_linear_matmul(a, sa[:, 0], np.int8(3), b, sb, None, so, zo, out=out) is out
        np.testing.assert_array_equal(out, expected)
        new = dmlops.quantized_linear_matmul(a, sa, None, b, sb, np.uint8(9), so, None)
        assert new.dtype == np.uint8 and new.shape == (*batch, 5, 7) and not new.any()


@pytest.mark.parametrize("a_shape, b_shape, expected", [((0, 12), (12, 7), (0, 7)), ((5, 12), (12, 0), (5, 0)),
                                                        ((0, 5, 12), (12, 7), (0, 5, 7)),
                                                        ((2, 1, 0, 3), (4, 3, 7), (2, 4, 0, 7)),
                                                        ((0, 0), (0, 0), (0, 0))])
def test_an_empty_product_is_empty(a_shape, b_shape, expected):
    a, b = np.ones(a_shape, np.uint8), np.ones(b_shape, np.int8)
    result = dmlops.quantized_linear_matmul(a, 0.5, None, b, 0.5, np.int8(1), 2.0, np.int8(4))
    assert result.shape == expected and result.dtype == np.int8
    out = np.empty(expected, np.uint8)
    assert dmlops.quantized_linear_matmul(a, 0.5, np.uint8(2), b, 0.5, None, 2.0, None, out=out) is out


SQUARE_Q = np.arange(16, dtype=np.uint8).reshape(4, 4)


def qmm(a=A, sa=0.05, za=None, b=B, sb=0.05, zb=None, so=2.0, zo=None, **options):
    return dmlops.quantized_linear_matmul(a, sa, za, b, sb, zb, so, zo, **options)


# -- repeated calls: the kept plans ----------------------------------------------------------------------------

M, K, N = 5, 12, 7


def qmm_arguments(rng, a_layout, a_type, b_type, out_type, zero_points, scales, out_layout):
    """Arguments of one call with fresh values in the layout named: (arguments for the array API, out's backing
    array or None, the same values shaped for the reference)."""
    def integers(dtype, shape):
        info = np.iinfo(dtype)
        return rng.integers(info.min, info.max + 1, shape, dtype=dtype)

    a = {"plain": lambda: integers(a_type, (M, K)),
         "transposed": lambda: integers(a_type, (K, M)).T,
         "strided": lambda: integers(a_type, (M, 2 * K))[:, ::2],
         "batch": lambda: integers(a_type, (2, M, K)),
         "broadcast batch": lambda: np.broadcast_to(integers(a_type, (M, K)), (2, M, K))}[a_layout]()
    b = integers(b_type, (K, N))

    def scale(length):
        values = rng.uniform(0.002, 0.05, 2 * length).astype(np.float32)
        return {"scalar": values[0], "vector": values[:length], "strided vector": values[::2]}[scales]

    def zero_point(dtype, length):
        value = integers(dtype, 2 * length)
        return {"none": None, "scalar": value[0], "0-d": value[0].reshape(()), "vector": value[:length]}[zero_points]

    sa, za, sb, zb, so, zo = scale(M), zero_point(a_type, M), scale(N), zero_point(b_type, N), scale(M), \
        zero_point(out_type, M)
    so = so * K * 40  # outputs mostly within range, some saturated
    batch = a.shape[:-2]
    backing = None
    if out_layout == "new":
        out = None
    else:
        backing = integers(out_type, (*batch, M, 2 * N))  # poisoned with random values
        out = backing[..., ::2] if out_layout == "strided" else backing[..., :N].copy()
        backing = backing if out_layout == "strided" else out

    def per_row(v):
        return v if v is None or np.ndim(v) == 0 else v[:, None]

    arguments = (a, sa, za, b, sb, zb, so, zo if out_type == np.int8 or zo is not None else None)
    expected = expected_qmm(a, per_row(sa), per_row(za), b, sb, zb, per_row(so), per_row(zo),
                            out_type if zo is not None or out is not None else np.uint8)
    return arguments, out, backing, expected


LAYOUTS = dict(a_layout=["plain", "transposed", "strided", "batch", "broadcast batch"],
               a_type=[np.int8, np.uint8], b_type=[np.int8, np.uint8], out_type=[np.int8, np.uint8],
               zero_points=["none", "scalar", "0-d", "vector"], scales=["scalar", "vector", "strided vector"],
               out_layout=["new", "contiguous", "strided"])


@settings(max_examples=examples(40), deadline=None)
@given(st.lists(st.fixed_dictionaries({name: st.sampled_from(choices) for name, choices in LAYOUTS.items()}),
                min_size=2, max_size=6), st.integers(0, 2**32 - 1))
def test_repeated_and_changed_layouts_give_the_reference(calls, seed):
    """A sequence of calls whose layouts repeat or differ in one thing or many (strides, dtypes, broadcasting, out
    given or not, zero points absent, scalar, 0-d or vectors): every result is the reference's, with fresh values
    each time, and a given out is written exactly where it is and nowhere else."""
    rng = np.random.default_rng(seed)
    for layout in calls + calls[:1]:  # the first layout again, after the others were kept
        if layout["zero_points"] == "none" and layout["out_layout"] == "new":
            layout = layout | {"out_type": np.uint8}  # the output type comes from the zero point or out
        arguments, out, backing, expected = qmm_arguments(rng, **layout)
        before = None if backing is None else backing.copy()
        result = dmlops.quantized_linear_matmul(*arguments, out=out)
        assert out is None or result is out
        np.testing.assert_array_equal(result, expected)
        if layout["out_layout"] == "strided":
            np.testing.assert_array_equal(backing[..., 1::2], before[..., 1::2])


@pytest.fixture
def described(monkeypatch):
    """The number of TensorDescs the array API has described so far, in a one-element list."""
    count = [0]
    described = dmlops.arrays._described

    def spy(*arguments):
        count[0] += 1
        return described(*arguments)

    monkeypatch.setattr(dmlops.arrays, "_described", spy)
    return count


def test_a_repeated_layout_skips_descs_and_a_changed_one_does_not(described):
    rng = np.random.default_rng(5)
    layout = dict(a_layout="transposed", a_type=np.uint8, b_type=np.int8, out_type=np.int8, zero_points="vector",
                  scales="strided vector", out_layout="strided")
    dmlops.core.plans.forget()
    for changed, expected_descs in [({}, 9), ({}, 0), ({"a_layout": "strided"}, 9), ({}, 0),
                                    ({"out_layout": "new"}, 9), ({"out_layout": "contiguous"}, 9),
                                    ({"b_type": np.uint8}, 9), ({"zero_points": "0-d"}, 9),
                                    ({"zero_points": "scalar"}, 0),  # a NumPy scalar is taken as a 0-d array
                                    ({"scales": "vector"}, 9), ({}, 0)]:
        arguments, out, _, expected = qmm_arguments(rng, **layout | changed)
        count = described[0]
        result = dmlops.quantized_linear_matmul(*arguments, out=out)
        np.testing.assert_array_equal(result, expected)
        assert described[0] - count == expected_descs, changed


def test_numbers_are_kept_by_value_and_copies_always_take_the_whole_path(described):
    a = RNG.integers(-128, 128, (M, K), dtype=np.int8)
    scale = np.float32(0.05)
    for repeat in range(2):
        count = described[0]
        qmm(a=a, sa=scale, za=-3, sb=scale, so=scale)  # a number: validated once, kept by its value
        qmm(a=a[::-1], sa=scale, sb=scale, so=scale)  # A copied (negative strides)
        qmm(a=a, sa=scale, sb=np.float64(0.05), so=scale)  # B's scale copied to float32
        assert described[0] - count == (0 if repeat else 7) + 6 + 6
    count = described[0]
    qmm(a=a, sa=scale, za=-4, sb=scale, so=scale)  # another value: another plan
    assert described[0] - count == 7
    rejects([QMM, "a_zero_point_tensor", "INT8"], lambda: qmm(a=a, sa=scale, za=200, sb=scale, so=scale))


def test_kept_plans_still_reject():
    """What a kept layout does not settle: values, memory shared between arguments, and the output type asked."""
    buffer = RNG.integers(0, 256, (2, 4, 4), dtype=np.uint8)
    b = RNG.integers(0, 256, (4, 4), dtype=np.uint8)

    def square(sa=np.float32(0.5), sb=np.ones(4, np.float32), out=buffer[1], output_dtype=None):
        return dmlops.quantized_linear_matmul(buffer[0], sa, None, b, sb, None, np.float32(2.0), None, out=out,
                                              output_dtype=output_dtype)

    for _ in range(2):
        square()
        rejects([QMM, "output_tensor", "may not share memory", "a_tensor"], lambda: square(out=buffer[0]))
        rejects([QMM, "a_scale_tensor", "finite and non-zero"], lambda: square(sa=np.float32(0)))
        rejects([QMM, "b_scale_tensor", "finite and non-zero"],
                lambda: square(sb=np.array([1, 1, np.nan, 1], np.float32)))
        rejects([QMM, "output_tensor", "read-only"], lambda: square(out=read_only(buffer[1].copy())))
        rejects([QMM, "a_zero_point_tensor", "must match a_tensor"],
                lambda: dmlops.quantized_linear_matmul(buffer[0], np.float32(0.5), np.int8(1), b,
                                                       np.ones(4, np.float32), None, np.float32(2.0), None,
                                                       out=buffer[1]))
        for spelling in (np.uint8, "uint8", np.dtype(np.uint8)):
            square(output_dtype=spelling)
            rejects([QMM, "output_tensor", "out is UINT8", "INT8"], lambda: square(output_dtype=np.int8))
            rejects([QMM, "output_tensor", "out is UINT8", "INT8"], lambda: square(output_dtype="int8"))


SCAN_LAYOUTS = dict(x_layout=["plain", "transposed", "strided", "broadcast", "new axes"],
                    dtype=[np.float32, np.float16, np.int32, np.uint32], axis=[0, -1], reverse=[False, True],
                    exclusive=[False, True], out_layout=["new", "contiguous", "strided", "in place"],
                    operation=["sum", "product"])


@settings(max_examples=examples(40), deadline=None)
@given(st.lists(st.fixed_dictionaries({name: st.sampled_from(choices) for name, choices in SCAN_LAYOUTS.items()}),
                min_size=2, max_size=6), st.integers(0, 2**32 - 1))
def test_repeated_and_changed_scan_layouts_give_the_reference(calls, seed):
    """The same for the scans: strides, broadcasting, dtypes, axes, directions, out new, given, a strided view of a
    poisoned array, or x itself."""
    rng = np.random.default_rng(seed)
    for layout in calls + calls[:1]:
        dtype = layout["dtype"]
        values = (lambda shape: rng.uniform(0.5, 1.5, shape)) if dtype in (np.float32, np.float16) else \
            (lambda shape: rng.integers(0, 2**31, shape))
        x = {"plain": lambda: values((6, 10)), "transposed": lambda: values((10, 6)).T,
             "strided": lambda: values((6, 20))[:, ::2],
             "broadcast": lambda: np.broadcast_to(values((1, 10)), (6, 10)),
             "new axes": lambda: values((6, 10))[:, None, :]}[layout["x_layout"]]().astype(dtype)
        if layout["x_layout"] == "transposed":
            x = np.ascontiguousarray(x.T).T
        elif layout["x_layout"] == "strided":
            x = np.repeat(x, 2, axis=1)[:, ::2]
        out_layout = "new" if layout["out_layout"] == "in place" and not x.flags.writeable else layout["out_layout"]
        backing = values((*x.shape[:-1], 2 * x.shape[-1])).astype(dtype)  # poisoned with random values
        out = {"new": None, "contiguous": backing[..., ::2].copy(), "strided": backing[..., ::2],
               "in place": x}[out_layout]
        before = x.copy(), backing.copy()
        function = dmlops.cumulative_sum if layout["operation"] == "sum" else dmlops.cumulative_product
        result = function(x, layout["axis"], reverse=layout["reverse"], exclusive=layout["exclusive"], out=out)
        assert out is None or result is out
        assert_cumulative_matches(result, layout["operation"], before[0], layout["axis"] % x.ndim,
                                  layout["reverse"], layout["exclusive"])
        if out_layout == "strided":
            np.testing.assert_array_equal(backing[..., 1::2], before[1][..., 1::2])


def test_kept_scan_plans_still_reject(described):
    memory = RNG.standard_normal(12).astype(np.float32)
    x, other = memory[:8], np.zeros(8, np.float32)
    for _ in range(2):
        count = described[0]
        dmlops.cumulative_sum(x, 0, out=other)
        rejects([SUM, "output_tensor", "only exactly (in place)"],
                lambda: dmlops.cumulative_sum(x, 0, out=memory[4:]))  # a kept layout, overlapping
        rejects([SUM, "axis", "True"], lambda: dmlops.cumulative_sum(x, True, out=other))
        rejects([SUM, "output_tensor", "read-only"],
                lambda: dmlops.cumulative_sum(x, 0, out=read_only(np.zeros(8, np.float32))))
        dmlops.cumulative_sum(x, 0, out=x)  # in place
    assert described[0] - count == 2  # the second time, only x in the calls rejected on the whole path


# -- torch tensors on the CPU --------------------------------------------------------------------------------------


def test_cpu_torch_tensors_come_back_as_torch_tensors():
    torch = pytest.importorskip("torch")
    x = torch.from_numpy(X.copy())
    result = dmlops.cumulative_sum(x, 1, exclusive=True)
    assert isinstance(result, torch.Tensor) and result.dtype == torch.float32
    assert_cumulative_matches(result.numpy(), "sum", X, 1, False, True)
    transposed = x.t()
    assert dmlops.cumulative_product(transposed, 0, out=transposed) is transposed
    product = dmlops.quantized_linear_matmul(torch.from_numpy(A), 0.05, torch.tensor([-4], dtype=torch.int8),
                                             torch.from_numpy(B), 0.05, None, 2.0, None,
                                             output_dtype=torch.int8)
    assert isinstance(product, torch.Tensor) and product.dtype == torch.int8
    np.testing.assert_array_equal(product.numpy(), expected_qmm(A, 0.05, -4, B, 0.05, None, 2.0, None, np.int8))
    rejects([SUM, "input_tensor", "torch.bfloat16", "supported types are float32, float16"],
            lambda: dmlops.cumulative_sum(x.to(torch.bfloat16), 0))


def test_device_and_backend_names():
    rejects(["Device.backend", "'nope'", "cpu, cuda"], lambda: Device("nope"))
    rejects(["Device.backend", "'nope'"], lambda: qmm(backend="nope"))
    rejects(["Device.backend", "'nope'"], lambda: dmlops.cumulative_sum(X, 0, backend="nope"))
    assert dmlops.cumulative_sum(X, 0, backend="cpu").dtype == np.float32
    assert Device("cpu").feature_level == dmlops.FeatureLevel.LEVEL_6_4
    assert DataType.from_numpy(dmlops.cumulative_sum(X.astype(np.float16), 0).dtype) is DataType.FLOAT16


# -- what a reader meets --------------------------------------------------------------------------------------------

DOCUMENTED = [dmlops, dmlops.cumulative_sum, dmlops.cumulative_product, dmlops.quantized_linear_matmul,
              dmlops.prepare_b, dmlops.cumulative_gradient, dmlops.check_errors]


@pytest.mark.parametrize("documented", DOCUMENTED, ids=lambda value: value.__name__)
def test_docstring_examples_hold(documented):
    import doctest

    runner = doctest.DocTestRunner(optionflags=doctest.NORMALIZE_WHITESPACE)
    tests = doctest.DocTestFinder(recurse=False).find(documented)
    assert sum(len(test.examples) for test in tests) > 0
    for test in tests:
        runner.run(test)
    assert runner.summarize(verbose=False).failed == 0


def test_the_array_api_is_typed():
    import inspect
    from pathlib import Path

    assert (Path(dmlops.__file__).parent / "py.typed").is_file()
    for function in DOCUMENTED[1:]:
        signature = inspect.signature(function)
        assert signature.return_annotation is not inspect.Signature.empty, function.__name__
        assert all(parameter.annotation is not inspect.Parameter.empty
                   for parameter in signature.parameters.values()), function.__name__
        sections = ("Parameters", "Returns", "Raises", "Examples") if signature.parameters else \
            ("Returns", "Raises", "Examples")
        assert all(f"{section}\n    ---" in function.__doc__ for section in sections), function.__name__
