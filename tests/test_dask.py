"""The array API on Dask arrays: random shapes and chunkings (chunks of one element, K split unevenly) against the
in-memory results, on the threaded scheduler and (a quarter of them) on a LocalCluster of two worker processes;
laziness; rejections."""

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

da = pytest.importorskip("dask.array")
dask = pytest.importorskip("dask")
distributed = pytest.importorskip("distributed")

import dmlops  # noqa: E402

from checks import assert_cumulative_matches, rejects  # noqa: E402
from strategies import random_values, shapes  # noqa: E402
from conftest import examples  # noqa: E402

SUM, PRODUCT = "DML_OPERATOR_CUMULATIVE_SUMMATION", "DML_OPERATOR_CUMULATIVE_PRODUCT"
QMM = "DML_OPERATOR_QUANTIZED_LINEAR_MATRIX_MULTIPLY"
SCAN_TYPES = [np.float32, np.float16, np.int32, np.uint32, np.int64, np.uint64]
SCANS = {"sum": dmlops.cumulative_sum, "product": dmlops.cumulative_product}


@pytest.fixture(scope="module")
def client():
    """Two worker processes on the loopback interface, for this module only."""
    with distributed.LocalCluster(n_workers=2, processes=True, threads_per_worker=1, dashboard_address=None,
                                  host="127.0.0.1") as cluster, distributed.Client(cluster) as client:
        yield client


# Every this many results of the property tests are computed on the cluster too: a computation there cost about ten
# on the threaded scheduler, and its workers' time beside.
CLUSTER_EVERY = 4
RESULTS = itertools.count()


def computed(client, result):
    """The result computed on the threaded scheduler and, every CLUSTER_EVERY results, on the cluster, checked to be
    the threaded scheduler's to the bit."""
    assert isinstance(result, da.Array)
    threaded = result.compute(scheduler="threads")
    assert threaded.dtype == result.dtype and threaded.shape == result.shape
    if next(RESULTS) % CLUSTER_EVERY == 0:
        computed = client.compute(result, sync=True)
        assert computed.dtype == threaded.dtype and computed.shape == threaded.shape
        np.testing.assert_array_equal(computed.view(np.uint8), threaded.view(np.uint8))
    return threaded


@st.composite
def chunkings(draw, length):
    """Chunk sizes for one dimension: one chunk, chunks of one element, or random uneven ones."""
    kind = draw(st.sampled_from(["one", "ones", "random"]))
    if kind == "one" or length == 1:
        return (length,)
    if kind == "ones":
        return (1,) * length
    cuts = sorted(draw(st.sets(st.integers(1, length - 1), min_size=1)))
    return tuple(np.diff([0, *cuts, length]).tolist())


# -- scans ---------------------------------------------------------------------------------------------------------


@settings(max_examples=examples(30), deadline=None)
@given(data=st.data(), operation=st.sampled_from(["sum", "product"]), dtype=st.sampled_from(SCAN_TYPES),
       reverse=st.booleans(), exclusive=st.booleans())
def test_scans_match_the_in_memory_scan_for_any_chunking(client, data, operation, dtype, reverse, exclusive):
    shape = data.draw(shapes(max_rank=3, max_elements=60, max_size=11))
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    chunks = tuple(data.draw(chunkings(size)) for size in shape)
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    x = random_values(rng, dtype, int(np.prod(shape)), small=operation == "product").reshape(shape)
    result = computed(client, SCANS[operation](da.from_array(x, chunks=chunks), axis, reverse=reverse,
                                               exclusive=exclusive))
    in_memory = SCANS[operation](x, axis, reverse=reverse, exclusive=exclusive)
    if x.dtype.kind != "f":
        np.testing.assert_array_equal(result, in_memory)  # integers wrap exactly as in memory
    assert_cumulative_matches(result, operation, x, axis % x.ndim, reverse, exclusive)


def test_float16_carries_in_float32():
    """A float16 running sum past 2048 rounds each step in float16 but not in float32: chunk totals and carries must
    stay float32 for the chunked result to equal the in-memory one."""
    x = np.full(4096, 1.0, np.float16)
    x[1::2] = np.float16(0.5)
    result = dmlops.cumulative_sum(da.from_array(x, chunks=100), 0).compute(scheduler="threads")
    np.testing.assert_array_equal(result, dmlops.cumulative_sum(x, 0))
    np.testing.assert_array_equal(result, np.cumsum(x, dtype=np.float32).astype(np.float16))


def test_integers_wrap_across_chunks():
    x = np.array([2**31 - 1, 5, -7, 2**31 - 2, 9], np.int32)
    for chunks in (1, 2, 5):
        result = dmlops.cumulative_sum(da.from_array(x, chunks=chunks), 0, reverse=True).compute(scheduler="sync")
        np.testing.assert_array_equal(result, dmlops.cumulative_sum(x, 0, reverse=True))
    y = np.array([2**32 - 1, 3, 2**31, 7], np.uint32)
    result = dmlops.cumulative_product(da.from_array(y, chunks=1), 0, exclusive=True).compute(scheduler="sync")
    np.testing.assert_array_equal(result, dmlops.cumulative_product(y, 0, exclusive=True))


def test_results_keep_the_input_chunking():
    x = da.from_array(np.ones((6, 10), np.float32), chunks=((2, 4), (1, 6, 3)))
    for axis in (0, 1):
        assert dmlops.cumulative_product(x, axis, reverse=True, exclusive=True).chunks == x.chunks


# -- quantized matmul ----------------------------------------------------------------------------------------------


@st.composite
def parameter(draw, rng, field, length, chunks, dtype, magnitude=1.0):
    """A scale or zero point per tensor or per element, as a number, a NumPy value or a Dask array chunked like its
    tensor; zero points may be None. Returns (argument, NumPy value for the in-memory call)."""
    per_element = draw(st.booleans())
    if "scale" in field:
        values = (rng.uniform(0.5, 2.0, length if per_element else 1) * magnitude).astype(np.float32)
    elif draw(st.integers(0, 3)) == 0:
        return None, None
    else:
        values = random_values(rng, dtype, length if per_element else 1, small=False)
    values = values if per_element else values.reshape(())
    kind = draw(st.sampled_from(["numpy", "dask"] + ([] if per_element else ["number"])))
    if kind == "number":
        return values.item(), values
    if kind == "dask":
        return da.from_array(values, chunks=(chunks,) if per_element else ()), values
    return values, values


@pytest.mark.filterwarnings("ignore:Increasing number of chunks")  # M, N and K blocks of one element: many blocks
@settings(max_examples=examples(30), deadline=None)
@given(data=st.data(), a_type=st.sampled_from([np.int8, np.uint8]), b_type=st.sampled_from([np.int8, np.uint8]),
       output_type=st.sampled_from([np.int8, np.uint8]))
def test_quantized_matmul_is_bit_identical_to_the_in_memory_call(client, data, a_type, b_type, output_type):
    m, k, n = (data.draw(st.integers(1, 8)) for _ in range(3))
    a_batch, b_batch = data.draw(st.sampled_from([((), ()), ((2,), (2,)), ((3, 1), (2,)), ((), (1, 2)), ((2,), ())]))
    b_is_dask = data.draw(st.booleans())  # else B is NumPy: one chunk, which B's Dask parameters then have too
    m_chunks, k_chunks = data.draw(chunkings(m)), data.draw(chunkings(k))
    n_chunks = data.draw(chunkings(n)) if b_is_dask else (n,)
    b_k_chunks = data.draw(st.sampled_from([k_chunks, data.draw(chunkings(k))]))  # B's K chunks may differ
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    a = random_values(rng, a_type, int(np.prod(a_batch)) * m * k, small=False).reshape(*a_batch, m, k)
    b = random_values(rng, b_type, int(np.prod(b_batch)) * k * n, small=False).reshape(*b_batch, k, n)
    # the output scale spreads the results over the output's range, saturating some
    specs = [("a_scale_tensor", m, m_chunks, np.float32), ("a_zero_point_tensor", m, m_chunks, a_type),
             ("b_scale_tensor", n, n_chunks, np.float32), ("b_zero_point_tensor", n, n_chunks, b_type),
             ("output_scale_tensor", m, m_chunks, np.float32, 60 * np.sqrt(k)),
             ("output_zero_point_tensor", m, m_chunks, output_type)]
    parameters = [data.draw(parameter(rng, *spec)) for spec in specs]
    (sa, sa_values), (za, za_values), (sb, sb_values), (zb, zb_values), (so, so_values), (zo, zo_values) = parameters
    dask_a = da.from_array(a, chunks=(*(1 for _ in a_batch), m_chunks, k_chunks))
    dask_b = da.from_array(b, chunks=(*(1 for _ in b_batch), b_k_chunks, n_chunks)) if b_is_dask else b

    result = computed(client, dmlops.quantized_linear_matmul(
        dask_a, sa, za, dask_b, sb, zb, so, zo, output_dtype=output_type))
    in_memory = dmlops.quantized_linear_matmul(a, sa_values, za_values, b, sb_values, zb_values, so_values, zo_values,
                                               output_dtype=output_type)
    np.testing.assert_array_equal(result, in_memory)
    assert result.dtype == output_type


@pytest.mark.parametrize("a_type, b_type", [(np.uint8, np.int8), (np.int8, np.uint8)])
def test_k_block_accumulators_are_exact_at_the_extremes(a_type, b_type):
    """Products of ±255 × ±255 over a K block longer than the float32 steps of FLOAT32_EXACT_TERMS columns."""
    from dmlops.dask import FLOAT32_EXACT_TERMS, _accumulator_block

    rng = np.random.default_rng(5)
    k = 3 * FLOAT32_EXACT_TERMS + 17
    lowest, highest = (np.iinfo(t) for t in (a_type, b_type))
    a = np.where(rng.random((4, k)) < 0.9, lowest.max, lowest.min).astype(a_type)
    b = np.where(rng.random((k, 3)) < 0.9, highest.min, highest.max).astype(b_type)
    za = np.array([lowest.min, lowest.max, 0, lowest.min], a_type)
    zb = np.array(highest.max, b_type)
    expected = (a.astype(np.int64) - za[:, None]) @ (b.astype(np.int64) - zb)
    np.testing.assert_array_equal(_accumulator_block(a, za, b, zb)[..., 0], expected)
    assert np.abs(expected).max() > 2**24


def test_quantized_matmul_chunks_are_a_rows_by_b_columns():
    a = da.zeros((2, 7, 9), dtype=np.int8, chunks=(1, (3, 4), (2, 7)))
    b = da.zeros((9, 5), dtype=np.uint8, chunks=((5, 4), (1, 4)))
    for k_chunks in ((2, 7), 9):
        result = dmlops.quantized_linear_matmul(a.rechunk({2: k_chunks}), 1.0, None, b, 1.0, None, 1.0, None)
        assert result.chunks == ((1, 1), (3, 4), (1, 4)) and result.dtype == np.uint8


# -- laziness and rejections ---------------------------------------------------------------------------------------


def never_compute(*args, **kwargs):
    raise AssertionError("a call computed a Dask array")


def test_calls_compute_nothing():
    x = da.from_array(np.arange(12, dtype=np.int32).reshape(3, 4), chunks=(1, 3))
    a = da.ones((4, 6), dtype=np.uint8, chunks=(2, 3))
    b = da.ones((6, 5), dtype=np.uint8, chunks=(3, 2))
    scale = da.from_array(np.full(4, 0.5, np.float32), chunks=2)
    with dask.config.set(scheduler=never_compute):
        for axis in (0, 1):
            assert isinstance(dmlops.cumulative_sum(x, axis, reverse=True, exclusive=True), da.Array)
        assert isinstance(dmlops.quantized_linear_matmul(a, scale, None, b, 0.5, None, scale, np.uint8(1)), da.Array)
        assert isinstance(dmlops.quantized_linear_matmul(a.rechunk({1: 6}), scale, None, b.rechunk({0: 6}), 0.5, None,
                                                         2.0, None), da.Array)


class GpuTensor:
    """Stands for a CUDA tensor (a torch or CuPy array on the GPU) as the array API sees one."""

    shape, dtype = (5,), np.dtype(np.float32)

    def __dlpack_device__(self):
        return (2, 0)


X = da.from_array(np.arange(12, dtype=np.float32).reshape(3, 4), chunks=(2, 3))
A = da.ones((4, 6), dtype=np.int8, chunks=(2, 3))
B = da.ones((6, 5), dtype=np.uint8, chunks=(3, (2, 3)))
UNKNOWN = da.from_array(np.arange(10, dtype=np.int32), chunks=4)
UNKNOWN = UNKNOWN[UNKNOWN > 2]  # the chunk sizes of a selection are unknown until computed


def qmm(a=A, sa=0.5, za=None, b=B, sb=0.5, zb=None, so=2.0, zo=None, **options):
    return dmlops.quantized_linear_matmul(a, sa, za, b, sb, zb, so, zo, **options)


@pytest.mark.parametrize("words, call", [
    ([SUM, "input_tensor", "unknown chunk sizes"], lambda: dmlops.cumulative_sum(UNKNOWN, 0)),
    ([PRODUCT, "output_tensor", "immutable"], lambda: dmlops.cumulative_product(X, 0, out=X)),
    ([SUM, "output_tensor", "immutable"], lambda: dmlops.cumulative_sum(X, 0, out=np.zeros((3, 4), np.float32))),
    ([SUM, "input_tensor", "FLOAT64", "not supported"], lambda: dmlops.cumulative_sum(X.astype(np.float64), 0)),
    ([SUM, "axis_direction", "reverse", "'yes'"], lambda: dmlops.cumulative_sum(X, 0, reverse="yes")),
    ([SUM, "axis", "None", "one axis"], lambda: dmlops.cumulative_sum(X[:0], None)),
    ([SUM, "axis", "must be an integer", "float 0.0"], lambda: dmlops.cumulative_sum(X, 0.0)),
    ([PRODUCT, "axis", "2", "out of range"], lambda: dmlops.cumulative_product(X, 2)),
    ([QMM, "a_tensor", "unknown chunk sizes"], lambda: qmm(a=UNKNOWN.astype(np.int8)[None])),
    ([QMM, "b_scale_tensor", "GPU", "GpuTensor"], lambda: qmm(sb=GpuTensor())),
    ([QMM, "a_tensor", "GPU"], lambda: qmm(a=GpuTensor())),
    ([QMM, "a_scale_tensor", "chunks", "(1, 3)", "(2, 2)"],
     lambda: qmm(sa=da.ones(4, dtype=np.float32, chunks=(1, 3)))),
    ([QMM, "b_zero_point_tensor", "chunks", "(5,)", "(2, 3)"], lambda: qmm(zb=da.ones((1, 5), dtype=np.uint8))),
    ([QMM, "output_zero_point_tensor", "chunks", "(4,)"],
     lambda: qmm(zo=da.ones((4, 1), dtype=np.uint8, chunks=4))),
    ([QMM, "output_tensor", "immutable"], lambda: qmm(out=np.zeros((4, 5), np.uint8))),
    ([QMM, "b_tensor", "B's rows (5)", "K (6)"], lambda: qmm(b=B[:5])),
    ([QMM, "b_tensor", "batch dimensions"],
     lambda: qmm(a=da.ones((2, 4, 6), dtype=np.int8), b=da.ones((3, 6, 5), dtype=np.int8))),
    ([QMM, "a_tensor", "FLOAT32", "not supported"], lambda: qmm(a=A.astype(np.float32))),
    ([QMM, "a_zero_point_tensor", "must match a_tensor"], lambda: qmm(za=da.ones(4, dtype=np.uint8, chunks=2))),
    ([QMM, "a_zero_point_tensor", "200", "not a INT8 value"], lambda: qmm(za=200)),
    ([QMM, "a_scale_tensor", "sizes [3]", "4 values"], lambda: qmm(sa=da.ones(3, dtype=np.float32))),
    ([QMM, "b_scale_tensor", "sizes [5, 1]", "per column"], lambda: qmm(sb=da.ones((5, 1), dtype=np.float32))),
    ([QMM, "a_scale_tensor", "finite and non-zero"], lambda: qmm(sa=np.float32([1, 0, 1, 1]))),
    ([QMM, "output_scale_tensor", "finite and non-zero"], lambda: qmm(so=np.inf)),
])
def test_rejections_at_the_call(words, call):
    rejects(words, call)


# -- empty chunks and arrays (boolean filtering makes empty chunks) -------------------------------------------------


@pytest.mark.parametrize("chunks", [((2, 0, 3), (4,)), ((5,), (0, 3, 0, 1)), ((0, 5, 0), (2, 0, 2)), ((5,), (4,))])
@pytest.mark.parametrize("dtype", [np.float32, np.int32])
def test_scans_of_empty_chunks(chunks, dtype):
    x = random_values(np.random.default_rng(3), dtype, 20, small=True).reshape(5, 4)
    for operation, function in SCANS.items():
        for axis, reverse, exclusive in [(0, False, False), (0, True, True), (1, False, True), (1, True, False)]:
            result = function(da.from_array(x, chunks=chunks), axis, reverse=reverse, exclusive=exclusive)
            assert result.chunks == chunks
            assert_cumulative_matches(result.compute(scheduler="threads"), operation, x, axis, reverse, exclusive)
    empty = da.from_array(x[:0], chunks=((0,), (2, 2)))
    for axis in (0, 1):
        result = dmlops.cumulative_sum(empty, axis).compute(scheduler="threads")
        assert result.shape == (0, 4) and result.dtype == dtype


def test_scans_of_a_boolean_selection():
    values = da.from_array(np.arange(12, dtype=np.int64), chunks=4)
    selected = values[values % 5 > 3]  # the chunk 4…7 keeps nothing: (4), (), (9)
    selected.compute_chunk_sizes()
    assert 0 in selected.chunks[0]
    np.testing.assert_array_equal(dmlops.cumulative_sum(selected, 0, exclusive=True).compute(), [0, 4])


@pytest.mark.parametrize("m_chunks, k_chunks, n_chunks", [((2, 0, 2), (6,), (5,)), ((4,), (3, 0, 3), (2, 0, 3)),
                                                          ((4,), (0, 6), (5,)), ((4,), (0,), (5,)),
                                                          ((2, 2), (0, 0), (0, 5)), ((0,), (6,), (5,))])
def test_quantized_matmul_of_empty_chunks(m_chunks, k_chunks, n_chunks):
    """Empty chunks along M, N or K, and K = 0 (the requantized output zero point), as the in-memory call."""
    rng = np.random.default_rng(4)
    m, k, n = sum(m_chunks), sum(k_chunks), sum(n_chunks)
    a = rng.integers(-128, 128, (m, k), dtype=np.int8)
    b = rng.integers(0, 256, (k, n), dtype=np.uint8)
    sa, za = rng.uniform(0.01, 0.1, m).astype(np.float32), rng.integers(-128, 128, m, dtype=np.int8)
    zb, zo = rng.integers(0, 256, n, dtype=np.uint8), rng.integers(-128, 128, m, dtype=np.int8)
    result = dmlops.quantized_linear_matmul(da.from_array(a, chunks=(m_chunks, k_chunks)), sa, za,
                                            da.from_array(b, chunks=(k_chunks, n_chunks)), 0.05, zb, 3.0, zo)
    expected = dmlops.quantized_linear_matmul(a, sa, za, b, 0.05, zb, 3.0, zo)
    assert result.shape == expected.shape == (m, n) and result.dtype == expected.dtype == np.int8
    np.testing.assert_array_equal(result.compute(scheduler="threads"), expected)


@pytest.mark.parametrize("k_chunks", [6, 2], ids=["one K chunk", "K split"])
@pytest.mark.parametrize("field, bad", [("a_scale_tensor", np.float32([1, 1, 0, 1])),
                                        ("b_scale_tensor", np.float32([1, 1, 1, np.nan, 1])),
                                        ("output_scale_tensor", np.float32(-np.inf))])
def test_lazy_scales_are_checked_when_computed(client, k_chunks, field, bad):
    a, b = A.rechunk({1: k_chunks}), B.rechunk({0: k_chunks})
    scale = {"a_scale_tensor": "sa", "b_scale_tensor": "sb", "output_scale_tensor": "so"}[field]
    chunks = {"a_scale_tensor": ((2, 2),), "b_scale_tensor": ((2, 3),), "output_scale_tensor": ()}[field]
    result = qmm(a=a, b=b, **{scale: da.from_array(bad, chunks=chunks)})  # the values are not known yet
    rejects([QMM, field, "finite and non-zero"], lambda: result.compute(scheduler="threads"))
    rejects([QMM, field, "finite and non-zero"], lambda: client.compute(result, sync=True))
