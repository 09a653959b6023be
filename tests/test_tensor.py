"""TensorDesc and DMLCalcBufferTensorSize: every rule of DML_BUFFER_TENSOR_DESC."""

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dmlops import DataType, TensorDesc, TensorFlags, calc_buffer_tensor_size
from dmlops.tensor import strides_overlap

import reference
from checks import rejects
from conftest import examples


@pytest.mark.parametrize("data_type, sizes, strides, expected", [
    # The examples of the DirectML helper-function page.
    (DataType.FLOAT16, [5], None, 12),
    (DataType.UINT8, [1, 1, 1, 1], None, 4),
    (DataType.FLOAT32, [2, 3], [0, 1], 12),
    (DataType.FLOAT32, [1, 1, 3, 5], [15, 1, 5, 1], 60),
    # 4-bit types: bits, then bytes, then a multiple of 4.
    (DataType.UINT4, [3], None, 4),
    (DataType.INT4, [9], None, 8),
    (DataType.UINT4, [2, 5], [10, 1], 8),  # 15 elements → 60 bits → 8 bytes
    (DataType.FLOAT64, [1], None, 8),
    (DataType.INT8, [7, 1], [1, 0], 8),
])
def test_calc_buffer_tensor_size_examples(data_type, sizes, strides, expected):
    assert calc_buffer_tensor_size(data_type, sizes, strides) == expected
    assert TensorDesc(data_type, sizes, strides).total_tensor_size_in_bytes == expected


@settings(max_examples=examples(60), deadline=None)
@given(data=st.data(), data_type=st.sampled_from([t for t in DataType if t.bits >= 8]))
def test_calc_buffer_tensor_size_matches_reference(data, data_type):
    sizes = data.draw(st.lists(st.integers(1, 9), min_size=1, max_size=8))
    strides = data.draw(st.none() | st.lists(st.integers(0, 50), min_size=len(sizes), max_size=len(sizes)))
    expected = reference.calc_buffer_tensor_size(data_type.bits // 8, sizes, strides)
    assert calc_buffer_tensor_size(data_type, sizes, strides) == expected


def test_desc_normalizes_fields():
    desc = TensorDesc(1, [2, 3], [3, 1], flags=1, guaranteed_base_offset_alignment=np.int64(16))
    assert desc.data_type is DataType.FLOAT32
    assert desc.sizes == (2, 3) and desc.strides == (3, 1)
    assert desc.flags is TensorFlags.OWNED_BY_DML and desc.owned_by_dml
    assert TensorDesc(1, [2], flags=np.uint32(1)).flags is TensorFlags.OWNED_BY_DML  # NumPy integers are integers
    assert desc.dimension_count == 2 and desc.element_count == 6
    assert desc.total_tensor_size_in_bytes == 24
    assert desc.offset_alignment == 16
    assert TensorDesc(DataType.FLOAT64, [4], guaranteed_base_offset_alignment=64).offset_alignment == 64


def test_desc_packed_strides_and_explicit_total():
    desc = TensorDesc(DataType.INT16, (2, 3, 4), total_tensor_size_in_bytes=100)
    assert desc.strides is None
    assert desc.element_strides == (12, 4, 1)
    assert desc.total_tensor_size_in_bytes == 100
    assert not desc.owned_by_dml


def test_desc_limits_accepted():
    assert TensorDesc(DataType.UINT8, [1] * 8).dimension_count == 8
    assert TensorDesc(DataType.UINT8, [2**16 - 1, 2**16 + 1]).element_count == 2**32 - 1
    assert TensorDesc(DataType.FLOAT32, [3], [0]).total_tensor_size_in_bytes == 4
    for alignment in (0, 4, 8, 16, 256):
        TensorDesc(DataType.FLOAT32, [3], guaranteed_base_offset_alignment=alignment)
    TensorDesc(DataType.UINT8, [3], guaranteed_base_offset_alignment=1)


@pytest.mark.parametrize("words, make", [
    (["data_type", "99"], lambda: TensorDesc(99, [1])),
    (["data_type", "FLOAT32"], lambda: TensorDesc("FLOAT32", [1])),
    (["data_type", "UNKNOWN"], lambda: TensorDesc(DataType.UNKNOWN, [1])),
    (["sizes", "dimension count", "1 to 8"], lambda: TensorDesc(DataType.FLOAT32, [])),
    (["sizes", "dimension count", "9"], lambda: TensorDesc(DataType.FLOAT32, [1] * 9)),
    (["sizes", "size of 0"], lambda: TensorDesc(DataType.FLOAT32, [2, 0, 3])),
    (["sizes", "integer"], lambda: TensorDesc(DataType.FLOAT32, [2.0])),
    (["sizes", "integer"], lambda: TensorDesc(DataType.FLOAT32, [True])),
    (["sizes", "UINT"], lambda: TensorDesc(DataType.FLOAT32, [-1])),
    (["sizes", "UINT"], lambda: TensorDesc(DataType.FLOAT32, [2**32])),
    (["sizes", "2^32-1 elements"], lambda: TensorDesc(DataType.UINT8, [2**16, 2**16])),
    (["sizes"], lambda: TensorDesc(DataType.FLOAT32, 5)),
    (["strides", "UINT"], lambda: TensorDesc(DataType.FLOAT32, [2, 2], [-2, 1])),
    (["strides", "integer"], lambda: TensorDesc(DataType.FLOAT32, [2, 2], [2, 0.5])),
    (["strides", "one stride per size"], lambda: TensorDesc(DataType.FLOAT32, [2, 2], [1])),
    (["strides"], lambda: TensorDesc(DataType.FLOAT32, [2, 2], 1)),
    (["flags", "DML_TENSOR_FLAGS"], lambda: TensorDesc(DataType.FLOAT32, [2], flags="owned")),
    # IntFlag keeps unknown bits, and -1 would be every bit (OWNED_BY_DML among them): each is rejected.
    (["flags", "DML_TENSOR_FLAGS", "2"], lambda: TensorDesc(DataType.FLOAT32, [2], flags=2)),
    (["flags", "DML_TENSOR_FLAGS", "4294967296"], lambda: TensorDesc(DataType.FLOAT32, [2], flags=1 << 32)),
    (["flags", "DML_TENSOR_FLAGS", "-1"], lambda: TensorDesc(DataType.FLOAT32, [2], flags=-1)),
    (["flags", "DML_TENSOR_FLAGS"], lambda: TensorDesc(DataType.FLOAT32, [2], flags=True)),
    (["total_tensor_size_in_bytes", "less than", "16"],
     lambda: TensorDesc(DataType.FLOAT32, [4], total_tensor_size_in_bytes=12)),
    (["total_tensor_size_in_bytes", "less than", "60"],
     lambda: TensorDesc(DataType.FLOAT32, [1, 1, 3, 5], [15, 1, 5, 1], total_tensor_size_in_bytes=56)),
    (["total_tensor_size_in_bytes", "UINT64"],
     lambda: TensorDesc(DataType.FLOAT32, [4], total_tensor_size_in_bytes=-16)),
    (["guaranteed_base_offset_alignment", "power of two"],
     lambda: TensorDesc(DataType.FLOAT32, [4], guaranteed_base_offset_alignment=24)),
    (["guaranteed_base_offset_alignment", "element size", "8 bytes"],
     lambda: TensorDesc(DataType.FLOAT64, [4], guaranteed_base_offset_alignment=4)),
    (["guaranteed_base_offset_alignment", "UINT"],
     lambda: TensorDesc(DataType.FLOAT64, [4], guaranteed_base_offset_alignment=-8)),
])
def test_desc_rejections(words, make):
    rejects(["TensorDesc", *words], make)


def test_desc_is_frozen_and_hashable():
    desc = TensorDesc(DataType.FLOAT32, [2, 3])
    with pytest.raises(AttributeError):
        desc.sizes = (3, 2)
    assert desc == TensorDesc(DataType.FLOAT32, (2, 3), total_tensor_size_in_bytes=24)
    assert hash(desc) == hash(TensorDesc(DataType.FLOAT32, (2, 3)))


def overlap_by_counting(sizes, strides):
    offsets = [sum(i * s for i, s in zip(index, strides)) for index in itertools.product(*map(range, sizes))]
    return len(set(offsets)) != len(offsets)


@pytest.mark.parametrize("sizes, strides, overlapping", [
    ([2, 3], [3, 1], False),
    ([2, 3], [1, 2], False),  # permuted
    ([2, 3], [4, 1], False),  # padded
    ([2, 2], [3, 2], False),  # interleaved, still one to one
    ([3, 2], [1, 2], True),
    ([2, 3], [0, 1], True),  # broadcast
    ([1, 3], [0, 1], False),  # a zero stride on a size of 1 repeats nothing
    ([4], [0], True),
])
def test_strides_overlap_examples(sizes, strides, overlapping):
    assert strides_overlap(sizes, strides) is overlapping


@settings(max_examples=examples(100), deadline=None)
@given(dims=st.lists(st.tuples(st.integers(1, 4), st.integers(0, 12)), min_size=1, max_size=4))
def test_strides_overlap_matches_counting(dims):
    sizes, strides = zip(*dims)
    assert strides_overlap(sizes, strides) == overlap_by_counting(sizes, strides)
