"""The CUDA backend's cumulative summation and product, kernel by kernel, against tests/reference.py.

Without a GPU the Triton kernels run under Triton's interpreter on CPU tensors (small shapes, small tiles so that
lines span many tiles and the look-back runs); with DMLOPS_TEST_GPU=1 the same tests run on the GPU with the real
compiler, plus large shapes, determinism and graph capture.
"""

from __future__ import annotations

import itertools
import math
import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch")
pytest.importorskip("triton")  # the CUDA backend's kernels

import dmlops  # noqa: E402
from dmlops.backends.cuda import common as cuda_common  # noqa: E402
from dmlops.backends.cuda import scan  # noqa: E402
from dmlops.ops.cumulative import CumulativeOperation  # noqa: E402
from dmlops.types import ValidationError  # noqa: E402

import reference  # noqa: E402
from checks import assert_cumulative_matches  # noqa: E402
from conftest import examples  # noqa: E402

ON_GPU = os.environ.get("DMLOPS_TEST_GPU") == "1"
DEVICE = "cuda" if ON_GPU else "cpu"
SUM, PRODUCT = CumulativeOperation.SUM, CumulativeOperation.PRODUCT
DTYPES = [np.float32, np.float16, np.int32, np.uint32, np.int64, np.uint64]
gpu_only = pytest.mark.skipif(not ON_GPU, reason="needs DMLOPS_TEST_GPU=1 and a GPU")


# -- inputs, layouts and the check --------------------------------------------------------------------------------


def random_values(rng, operation: str, dtype, count: int) -> np.ndarray:
    """Fresh values: normal for float sums, near ±1 for float products, full-range integers (odd for products,
    so that wrapped products do not collapse to 0)."""
    dtype = np.dtype(dtype)
    if dtype.kind == "f":
        if operation == SUM:
            return rng.standard_normal(count).astype(dtype)
        return (rng.choice([-1.0, 1.0], count) * rng.uniform(0.9, 1.1, count)).astype(dtype)
    info = np.iinfo(dtype)
    values = rng.integers(info.min, info.max, count, dtype=dtype, endpoint=True)
    return values | dtype.type(1) if operation == PRODUCT else values


def layout(rng, shape, kind: str):
    """(element strides, element offset) of a view of the given kind: packed, padded, permuted or broadcast."""
    order = list(range(len(shape)))
    if kind == "permuted":
        rng.shuffle(order)
    pads = rng.integers(1, 3, len(shape)) if kind == "padded" else [0] * len(shape)
    strides, step = [0] * len(shape), 1
    for dim in reversed(order):
        strides[dim] = step
        step *= shape[dim] + pads[dim]
    if kind == "broadcast":
        strides = [0 if rng.random() < 0.5 else stride for stride in strides]
    return strides, int(rng.integers(0, 3))


def strided(buffer: np.ndarray, shape, strides, offset) -> torch.Tensor:
    return torch.from_numpy(buffer).to(DEVICE).as_strided(tuple(shape), tuple(strides), offset)


def span(shape, strides, offset) -> int:
    return offset + sum((size - 1) * stride for size, stride in zip(shape, strides)) + 1


def poison(dtype) -> np.generic:
    dtype = np.dtype(dtype)
    return dtype.type(np.nan) if dtype.kind == "f" else np.iinfo(dtype).max - dtype.type(7)


def check_untouched(out_buffer: np.ndarray, before: np.ndarray, covered):
    """Nothing outside the output's elements was written."""
    untouched = np.ones(len(out_buffer), bool)
    untouched[covered] = False
    np.testing.assert_array_equal(out_buffer.view(np.uint8).reshape(len(out_buffer), -1)[untouched],
                                  before.view(np.uint8).reshape(len(before), -1)[untouched])


def offsets(shape, strides, offset) -> np.ndarray:
    grid = np.zeros((), np.int64) + offset
    for size, stride in zip(shape, strides):
        grid = grid[..., None] + np.arange(size) * stride
    return grid.reshape(-1)


def run_case(rng, operation, dtype, shape, axis, reverse, exclusive, x_kind="packed", out_kind="packed",
             in_place=False, tuning=None):
    x_strides, x_offset = layout(rng, shape, x_kind)
    x_buffer = random_values(rng, operation, dtype, span(shape, x_strides, x_offset))
    if in_place:
        out_strides, out_offset, out_buffer = x_strides, x_offset, x_buffer
    else:
        out_strides, out_offset = layout(rng, shape, out_kind)
        out_buffer = np.full(span(shape, out_strides, out_offset) + 3, poison(dtype), dtype)
    x_tensor = torch.from_numpy(x_buffer).to(DEVICE)
    out_tensor = x_tensor if in_place else torch.from_numpy(out_buffer).to(DEVICE)
    x = x_tensor.as_strided(tuple(shape), tuple(x_strides), x_offset)
    out = out_tensor.as_strided(tuple(shape), tuple(out_strides), out_offset)
    source = x.cpu().numpy().copy()
    before = out_tensor.cpu().numpy().copy()
    scan.cumulative(operation, x, out, axis, reverse, exclusive, tuning=tuning)
    assert_cumulative_matches(out.cpu().numpy(), operation, source, axis, reverse, exclusive)
    check_untouched(out_tensor.cpu().numpy(), before, offsets(shape, out_strides, out_offset))


# -- every data type, operation, direction and exclusivity, through each kind of tiling ------------------------

# (shape, axis, tuning): lines along rows over many tiles with several look-back groups; many short lines per
# tile; down columns over many tiles; down columns, whole lines in one tile; the first two again with exclusive
# scans stored one element along rather than scanned as pairs; lines along rows held as chunks in walk order (a
# partial last tile; two lines of whole tiles, exclusive ones stored one element along); down columns in blocks of 2
# columns (the last one partial). Tiles hold 4 to 32 elements. Then
# walks down columns: strips of 2 inner indices (the last one partial) over many blocks, the last one partial; a
# strip as wide as the inner indices, one block a line; strips of one inner index (8-byte types: one position a
# block).
TILINGS = [
    ((150,), 0, scan.Tuning(tile_bytes=64, tiles_in_flight=4)),
    ((13, 9), 1, scan.Tuning(tile_bytes=256)),
    ((19, 3, 5), 0, scan.Tuning(tile_bytes=128, tiles_in_flight=4)),
    ((2, 6, 20), 1, scan.Tuning(tile_bytes=256)),
    ((150,), 0, scan.Tuning(tile_bytes=64, tiles_in_flight=4, shift_stores=True)),
    ((13, 9), 1, scan.Tuning(tile_bytes=256, shift_stores=True)),
    ((150,), 0, scan.Tuning(tile_bytes=64, tiles_in_flight=4, chunks=4)),
    ((2, 96), 1, scan.Tuning(tile_bytes=64, tiles_in_flight=4, shift_stores=True, chunks=4)),
    ((2, 96), 1, scan.Tuning(tile_bytes=64, tiles_in_flight=4, chunks=4, registers=128)),
    ((19, 3, 5), 0, scan.Tuning(tile_bytes=128, tiles_in_flight=4, columns=2)),
    ((19, 3, 5), 0, scan.Walk(columns=2, rows=4, stages=2)),
    ((2, 6, 4), 1, scan.Walk(columns=4, rows=8)),
    ((5, 3), 0, scan.Walk(columns=1, rows=2)),
]


VARIANTS = list(itertools.product([SUM, PRODUCT], [False, True], [False, True]))  # operation, reverse, exclusive


def variant_cases(tilings, dtypes, variants=VARIANTS):
    """(tiling, dtype, operation, reverse, exclusive) for each of ``variants``: on the GPU every combination; under
    the interpreter, whose every case takes a good fraction of a second, each tiling runs every variant, the data
    types taking the variants in turn from a different start in each tiling, so that each tiling runs every data
    type and each data type every variant, and each pair of them meets in some tiling."""
    for tiling in range(len(tilings)):
        for index, variant in enumerate(variants):
            for dtype in dtypes if ON_GPU else [dtypes[(index + tiling) % len(dtypes)]]:
                yield case_of(tiling, dtype, *variant)


def case_of(tiling, dtype, operation, reverse, exclusive):
    return pytest.param(tiling, dtype, operation, reverse, exclusive,
                        id=f"{tiling}-{np.dtype(dtype).name}-{operation.value}-"
                           f"{'decreasing' if reverse else 'increasing'}-{'exclusive' if exclusive else 'inclusive'}")


def exact_cases(tilings, dtypes):
    """As variant_cases for two data types, but under the interpreter each tiling runs the four directions and
    exclusive settings once, the operations and data types in turn (each tiling runs both operations, both data
    types and the four pairs of them; each direction and setting meets each operation and type in some tiling)."""
    if ON_GPU:
        yield from variant_cases(tilings, dtypes)
        return
    for tiling in range(len(tilings)):
        for index, (reverse, exclusive) in enumerate(itertools.product([False, True], repeat=2)):
            yield case_of(tiling, dtypes[(index // 2 + tiling) % 2], [SUM, PRODUCT][(index + tiling) % 2], reverse,
                          exclusive)


@pytest.mark.parametrize("tiling, dtype, operation, reverse, exclusive", list(variant_cases(TILINGS, DTYPES)))
def test_every_variant(tiling, dtype, operation, reverse, exclusive):
    shape, axis, tuning = TILINGS[tiling]
    run_case(np.random.default_rng(), operation, dtype, shape, axis, reverse, exclusive, tuning=tuning)


def exact_values(rng, operation: str, dtype, shape, axis: int) -> np.ndarray:
    """Floats whose every partial sum or product along axis, over any run of positions, is exact in dtype: steps of
    a bounded integer walk (sums), or ±2 to those steps (products). Any order of combination gives the same bits,
    so a value combined twice, taken from the wrong slot or left out shows as an exact mismatch."""
    bound = 1000 if operation == SUM else (6 if dtype == np.float16 else 20)
    walk = rng.integers(-bound, bound, shape[:axis] + (shape[axis] + 1,) + shape[axis + 1:], endpoint=True)
    steps = np.diff(walk, axis=axis).astype(np.float64)
    if operation == PRODUCT:
        steps = rng.choice([-1.0, 1.0], shape) * np.exp2(steps)
    return steps.astype(dtype)


# Every tiling above, one line of 16 tiles through several look-back groups and super-groups (groups of 2 tiles,
# super-groups of 2 groups), and rows whose groups are one tile each (a chain of tiles).
EXACT_TILINGS = TILINGS + [((1024,), 0, scan.Tuning(tile_bytes=256, tiles_in_flight=2)),
                           ((6, 40), 1, scan.Tuning(tile_bytes=64, tiles_in_flight=1))]


@pytest.mark.parametrize("tiling, dtype, operation, reverse, exclusive",
                         list(exact_cases(EXACT_TILINGS, [np.float32, np.float16])))
def test_exact_floats(tiling, dtype, operation, reverse, exclusive):
    shape, axis, tuning = EXACT_TILINGS[tiling]
    values = exact_values(np.random.default_rng(), operation, dtype, shape, axis)
    out = torch.full(shape, math.nan, dtype=torch.from_numpy(values).dtype, device=DEVICE)
    scan.cumulative(operation, torch.from_numpy(values).to(DEVICE), out, axis, reverse, exclusive, tuning=tuning)
    expected = reference.cumulative(operation, values.astype(np.float64), axis, reverse, exclusive).astype(dtype)
    np.testing.assert_array_equal(out.cpu().numpy(), expected)


# -- strides, broadcasts, padding, permutations, in place: property tests -------------------------------------


@st.composite
def cases(draw):
    ndim = draw(st.integers(1, 4))
    shape = draw(st.lists(st.integers(1, 6), min_size=ndim, max_size=ndim))
    axis = draw(st.integers(0, ndim - 1))
    shape[axis] = draw(st.integers(1, 40))
    in_place = draw(st.booleans())
    x_kind = draw(st.sampled_from(["packed", "padded", "permuted"] + ([] if in_place else ["broadcast"])))
    return dict(
        operation=draw(st.sampled_from([SUM, PRODUCT])), dtype=draw(st.sampled_from(DTYPES)),
        shape=tuple(shape), axis=axis, reverse=draw(st.booleans()), exclusive=draw(st.booleans()),
        x_kind=x_kind, out_kind=draw(st.sampled_from(["packed", "padded", "permuted"])), in_place=in_place,
        tuning=draw(st.one_of(
            st.builds(scan.Tuning, tile_bytes=st.sampled_from([64, 256, 4096]),
                      tiles_in_flight=st.sampled_from([1, 4, 16]), shift_stores=st.booleans(),
                      chunks=st.sampled_from([1, 4]), columns=st.sampled_from([1, 4, 128])),
            st.builds(scan.Walk, columns=st.sampled_from([1, 4, 32]), rows=st.sampled_from([2, 8, 64]),
                      stages=st.sampled_from([2, 4]), rows_in_threads=st.booleans()))),
        seed=draw(st.integers(0, 2**32 - 1)))


# On the GPU each new shape compiles a kernel: fewer examples there, the interpreter covers the rest.
@settings(max_examples=examples(12 if ON_GPU else 30), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases())
def test_strides_and_aliasing(case):
    rng = np.random.default_rng(case.pop("seed"))
    run_case(rng, **case)


def test_lines_coalesce():
    # A packed 4-D tensor scanned on axis 1 is (outer 2, length 3, inner 20): one launch, no copies.
    problem = scan.lines((2, 3, 4, 5), 1, (60, 20, 5, 1), (60, 20, 5, 1))
    assert problem == scan.Lines(2, 3, 20, (60, 20, 1), (60, 20, 1))
    # Padding between the output's rows and planes keeps three groups apart: they go through packed copies.
    assert scan.lines((2, 3, 4, 5), 3, (60, 20, 5, 1), (150, 40, 8, 1)) is None
    # Two groups: the one with the smaller output strides is the inner index.
    assert scan.lines((2, 3, 4, 5), 3, (60, 20, 5, 1), (150, 32, 8, 1)) == scan.Lines(
        2, 5, 12, (60, 1, 5), (150, 1, 8))
    # The last axis, with a transposed input: the lines are rows whatever the input's order.
    assert scan.lines((6, 7), 1, (1, 6), (7, 1)) == scan.Lines(6, 7, 1, (1, 6, 0), (7, 1, 0))


def test_default_tuning():
    def tuning(problem, accumulator_bytes=4, exclusive=False, reverse=False, element_bytes=4, device=cuda_common.H100):
        return scan.default_tuning(problem, accumulator_bytes, element_bytes, exclusive, reverse, device)

    # Down columns, small tensors take the rows' reach in blocks of 32 columns (or the rows' tuning, with 32 columns
    # or fewer); from just over 16 MiB of accumulators, the columns' tuning.
    small = scan.lines((4096, 1024), 0, (1024, 1), (1024, 1))
    large = scan.lines((4097, 1024), 0, (1024, 1), (1024, 1))
    assert tuning(small) == scan.SMALL_COLUMNS
    assert tuning(scan.lines((1 << 17, 32), 0, (32, 1), (32, 1))) == scan.ALONG_ROWS
    assert tuning(large, exclusive=True) == scan.DOWN_COLUMNS

    # Long columns walk where their strips of 32 fill the waves of one program a multiprocessor (132) to 0.9: 128
    # strips, 256 strips; not 192 strips, short columns, few strips or rows off 4-element alignment.
    def columns(outer, length, inner):
        strides = (length * inner, inner, 1)
        return scan.lines((outer, length, inner), 1, strides, strides)

    assert tuning(columns(1, 65536, 4096), exclusive=True, reverse=True) == scan.WALK
    assert tuning(columns(1, 32768, 8192)) == scan.WALK
    # FLOAT16 walks where its strips fill a wave, short columns too, with rows held in threads.
    assert tuning(columns(1, 32768, 8192), element_bytes=2) == scan.WALK_HALVES
    assert tuning(columns(1, 65536, 6144), element_bytes=2) == scan.WALK_HALVES
    assert tuning(columns(32, 512, 16384), element_bytes=2) == scan.WALK_HALVES
    assert tuning(columns(1, 1 << 24, 2), element_bytes=2) == scan.DOWN_COLUMNS
    assert tuning(columns(1, 65536, 4098), element_bytes=2) == scan.DOWN_COLUMNS
    assert tuning(small, element_bytes=2) == scan.SMALL_COLUMNS
    assert scan.WALK_HALVES.rows_in_threads and not scan.WALK.rows_in_threads
    assert tuning(columns(16, 8192, 256)) == scan.WALK
    assert tuning(columns(1, 65536, 6144)) == scan.DOWN_COLUMNS
    assert tuning(columns(1, 65536, 4100)) == scan.WALK
    assert tuning(columns(1, 65536, 4098)) == scan.DOWN_COLUMNS  # rows 2 elements apart from alignment
    assert tuning(columns(32, 512, 16384)) == scan.DOWN_COLUMNS
    assert tuning(columns(1, 1 << 24, 2)) == scan.DOWN_COLUMNS
    # Where memory outruns the walk in Triton's layout (an H200), 4-byte elements walk as 2-byte ones do on an H100;
    # 8-byte ones, half as many a second, do not.
    h200 = cuda_common.Hardware(132, 1.98e9, 4.8e12)
    for problem in (columns(1, 65536, 4096), columns(1, 65536, 6144), columns(32, 512, 16384)):
        assert tuning(problem, device=h200) == tuning(problem, element_bytes=2) == scan.WALK_HALVES
    assert tuning(columns(1, 65536, 4096), accumulator_bytes=8, element_bytes=8, device=h200) == scan.WALK
    assert tuning(columns(1, 1 << 24, 2), device=h200) == scan.DOWN_COLUMNS
    # A few long lines of 4-byte accumulators take registers capped for four programs a multiprocessor (each asking
    # L2 for the input of the program a multiprocessor later), exclusive ones scanning pairs but forward ones on
    # several lines stored one element along; decreasing inclusive ones take larger tiles; all decreasing ones are
    # held as chunks. Many lines and short lines do not.
    line = scan.lines((1 << 28,), 0, (1,), (1,))
    small_line = scan.lines((1 << 22,), 0, (1,), (1,))
    eight = scan.lines((8, 1 << 24), 1, (1 << 24, 1), (1 << 24, 1))
    for problem in (line, small_line, eight):
        assert tuning(problem) == tuning(problem, exclusive=True, reverse=True) == scan.FEW_LONG_LINES
        assert tuning(problem, reverse=True) == scan.FEW_LONG_LINES_DECREASING
    assert tuning(line, exclusive=True) == tuning(small_line, exclusive=True) == scan.FEW_LONG_LINES
    assert tuning(eight, exclusive=True) == scan.FEW_LONG_LINES_SHIFTED
    assert scan.FEW_LONG_LINES_SHIFTED.shift_stores and not scan.FEW_LONG_LINES.shift_stores
    assert scan.FEW_LONG_LINES.registers == 128 and scan.FEW_LONG_LINES.elements_per_thread == 64
    assert scan.FEW_LONG_LINES.l2_ahead == scan.FEW_LONG_LINES_SHIFTED.l2_ahead == 1 and scan.ALONG_ROWS.l2_ahead == 0
    assert scan.FEW_LONG_LINES.chunks == scan.FEW_LONG_LINES_DECREASING.chunks == 4
    assert tuning(line, accumulator_bytes=8) == scan.ALONG_ROWS
    assert tuning(scan.lines((4096, 65536), 1, (65536, 1), (65536, 1))) == scan.ALONG_ROWS
    assert tuning(scan.lines((8, 8192), 1, (8192, 1), (8192, 1))) == scan.ALONG_ROWS


def test_walk_blocks():
    # A block is 32 KiB of 4-byte elements, 16 KiB of 2-byte ones; 8-byte elements walk half the positions.
    problem = scan.lines((65536, 4096), 0, (4096, 1), (4096, 1))
    assert [scan.walk_plan(problem, size, scan.WALK).block for size in (2, 4, 8)] == [(256, 32), (256, 32),
                                                                                       (128, 32)]


def test_look_back_reach():
    # Along rows a slot is one value: groups of up to 1024 tiles (two levels of them in one read); down columns a
    # slot is a value for each of the block's columns, and groups stay small.
    along = scan.plan(scan.lines((1 << 28,), 0, (1,), (1,)), 4, scan.FEW_LONG_LINES)
    assert (along.lanes, along.window) == (1, 1024)
    down = scan.plan(scan.lines((65536, 4096), 0, (4096, 1), (4096, 1)), 4, scan.DOWN_COLUMNS)
    assert (down.lanes, down.window) == (128, 8)


# -- the array API on CUDA arrays (the array and operator APIs on every backend: test_conformance.py) -----------


@gpu_only
def test_cuda_arrays_pick_the_cuda_backend():
    x = torch.randn(1000, 3, device="cuda")
    result = dmlops.cumulative_sum(x, 0, reverse=True)
    assert result.device == x.device
    torch.testing.assert_close(result, x.double().flip(0).cumsum(0).flip(0).float(), rtol=1e-5, atol=1e-4)
    cupy = pytest.importorskip("cupy")
    array = cupy.random.standard_normal((100, 7), dtype=cupy.float32)
    result = dmlops.cumulative_product(array, 1)
    assert isinstance(result, cupy.ndarray)
    np.testing.assert_allclose(result.get(), np.cumprod(array.get().astype(np.float64), 1), rtol=1e-5)


# -- rejections ----------------------------------------------------------------------------------------------


def test_cpu_tensors_need_the_interpreter(monkeypatch):
    monkeypatch.setattr(cuda_common, "INTERPRETED", False)
    x = torch.randn(4, 5)
    with pytest.raises(ValidationError, match="input_tensor.*CUDA tensors"):
        scan.cumulative(SUM, x, torch.empty_like(x), 0, False, False)
    with pytest.raises(ValidationError):
        dmlops.cumulative_sum(x, 0, backend="cuda")
    with pytest.raises(ValidationError, match="CUDA tensors"):
        dmlops.Device("cuda").compile_operator(dmlops.CumulativeSummationOperatorDesc(
            dmlops.TensorDesc(dmlops.DataType.FLOAT32, (4,)), dmlops.TensorDesc(dmlops.DataType.FLOAT32, (4,)),
            axis=0)).execute([torch.zeros(4)], [torch.zeros(4)])


def test_unsupported_tensor_types_list_the_supported():
    x = torch.ones(4, 5, dtype=torch.bfloat16, device=DEVICE)
    with pytest.raises(ValidationError, match=r"input_tensor: torch dtype torch.bfloat16 has no DirectML data type; "
                                              r"the supported types are float32, float16, .*int64"):
        dmlops.cumulative_sum(x, 0, backend="cuda")


def test_tensors_on_different_devices():
    x = torch.randn(4, 5, device=DEVICE)
    other = torch.empty(4, 5, device="cpu" if ON_GPU else "meta")
    with pytest.raises(ValidationError, match="output_tensor.*(one device|CUDA tensors)"):
        scan.cumulative(PRODUCT, x, other, 1, True, False)


# -- on the GPU: large shapes, determinism, graph capture ------------------------------------------------------

LARGE = [
    ((1 << 24,), 0),
    ((1 << 20, 2), 0),
    ((1 << 20, 8), 1),
    ((8, 1 << 21), 1),
    ((4096, 1024), 0),
    ((16, 512, 256), 1),
    ((1000, 999), 1),
]


@gpu_only
@pytest.mark.parametrize("shape, axis", LARGE)
@pytest.mark.parametrize("operation, dtype", [(SUM, np.float32), (PRODUCT, np.float32), (SUM, np.float16),
                                              (SUM, np.int32), (PRODUCT, np.uint64)])
@pytest.mark.parametrize("reverse, exclusive", [(False, False), (True, True)])
def test_large(shape, axis, operation, dtype, reverse, exclusive):
    if operation == PRODUCT and np.dtype(dtype).kind == "f" and shape[axis] > 4096:
        shape = shape[:axis] + (4096,) + shape[axis + 1:]  # keep float products within range
    run_case(np.random.default_rng(), operation, dtype, shape, axis, reverse, exclusive)


@gpu_only
@pytest.mark.parametrize("shape", [(2000, 4100), (3000, 4099)])  # rows of vectors; rows of single elements
@pytest.mark.parametrize("operation, dtype", [(SUM, np.float32), (PRODUCT, np.float32), (SUM, np.float16),
                                              (SUM, np.int32), (PRODUCT, np.uint64)])
@pytest.mark.parametrize("reverse, exclusive", [(False, False), (True, True), (False, True)])
@pytest.mark.parametrize("walk", [scan.WALK, scan.WALK_HALVES, scan.Walk(rows_in_threads=True)])
def test_large_walk(shape, operation, dtype, reverse, exclusive, walk):
    # The default walks over many blocks, on shapes that take tiles by default; the last strip is partial. Then the
    # walk's Gluon kernel with 4-byte elements' blocks.
    run_case(np.random.default_rng(), operation, dtype, shape, 0, reverse, exclusive, tuning=walk)


@gpu_only
@pytest.mark.parametrize("shape, axis", [((1 << 26,), 0), ((1 << 22,), 0), ((16384, 4096), 0), ((4096, 1024), 0),
                                         ((8, 1 << 22), 1), ((32, 512, 2048), 1)])
def test_deterministic(shape, axis):
    x = torch.randn(shape, device="cuda")
    first = torch.empty_like(x)
    scan.cumulative(SUM, x, first, axis, True, True)
    for _ in range(4):
        again = torch.full_like(x, math.nan)
        scan.cumulative(SUM, x, again, axis, True, True)
        assert torch.equal(first.view(torch.int32), again.view(torch.int32))


@gpu_only
def test_graph_capture_and_back_to_back_launches():
    x = torch.randn(1 << 20, device="cuda")
    out = torch.empty_like(x)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        scan.cumulative(SUM, x, out, 0, False, False)  # compiled outside the capture
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        scan.cumulative(SUM, x, out, 0, False, False)
    for _ in range(3):
        x.normal_()
        out.fill_(math.nan)
        graph.replay()
        torch.testing.assert_close(out.double(), x.double().cumsum(0), rtol=0, atol=1e-5 * x.abs().sum().item())
    for length in [5000, 70000, 3000, 1 << 20] * 5:  # the scratch memory, reused launch after launch
        y = torch.randn(length, device="cuda")
        torch.testing.assert_close(dmlops.cumulative_sum(y, 0).double(), y.double().cumsum(0), rtol=0,
                                   atol=1e-5 * y.abs().sum().item())
