"""DML_BUFFER_TENSOR_DESC: sizes, strides and byte sizes, with DirectML's rules."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from .types import DataType, TensorFlags, ValidationError

MAX_DIMENSION_COUNT = 8
MAX_ELEMENT_COUNT = 2**32 - 1
MINIMUM_BUFFER_TENSOR_ALIGNMENT = 16


def packed_strides(sizes) -> tuple[int, ...]:
    """Row-major strides, in elements."""
    strides, step = [], 1
    for size in reversed(sizes):
        strides.append(step)
        step *= size
    return tuple(reversed(strides))


def calc_buffer_tensor_size(data_type, sizes, strides=None) -> int:
    """DMLCalcBufferTensorSize: the bytes a buffer needs, rounded up to a multiple of 4."""
    data_type = DataType(data_type)
    if strides is None:
        element_count = math.prod(sizes)
    else:
        element_count = sum((size - 1) * stride for size, stride in zip(sizes, strides)) + 1
    byte_count = (element_count * data_type.bits + 7) // 8
    return (byte_count + 3) & ~3


def strides_overlap(sizes, strides) -> bool:
    """Whether two different indices map to the same element offset."""
    dims = sorted((stride, size) for size, stride in zip(sizes, strides) if size > 1)
    span = 0  # highest offset reached by the dimensions seen so far
    for stride, size in dims:
        if stride <= span:
            return _strides_overlap_exactly(sizes, strides)
        span += (size - 1) * stride
    return False


def _strides_overlap_exactly(sizes, strides) -> bool:
    # Interleaved layouts (say sizes {2, 2}, strides {3, 2}) can still be one-to-one: count the offsets.
    import numpy as np

    if math.prod(sizes) > 1 << 22:
        return True  # too large to count; treated as overlapping
    offsets = np.zeros(1, dtype=np.int64)
    for size, stride in zip(sizes, strides):
        offsets = (offsets[:, None] + np.arange(size, dtype=np.int64) * stride).ravel()
    return len(np.unique(offsets)) != len(offsets)


@dataclass(frozen=True)
class TensorDesc:
    """DML_BUFFER_TENSOR_DESC. Strides are in elements; None means packed row-major.

    ``total_tensor_size_in_bytes`` of 0 means the size DMLCalcBufferTensorSize computes.
    """

    data_type: DataType
    sizes: tuple[int, ...]
    strides: tuple[int, ...] | None = None
    flags: TensorFlags = field(default=TensorFlags.NONE, kw_only=True)
    total_tensor_size_in_bytes: int = field(default=0, kw_only=True)
    guaranteed_base_offset_alignment: int = field(default=0, kw_only=True)

    def __post_init__(self):
        where = "TensorDesc"
        try:
            data_type = DataType(self.data_type)
        except ValueError:
            raise ValidationError(f"{where}.data_type: {self.data_type!r} is not a DML_TENSOR_DATA_TYPE") from None
        if data_type == DataType.UNKNOWN:
            raise ValidationError(f"{where}.data_type: UNKNOWN is not a valid data type for a buffer tensor")
        object.__setattr__(self, "data_type", data_type)
        sizes = _as_uints(self.sizes, f"{where}.sizes")
        object.__setattr__(self, "sizes", sizes)
        if not 1 <= len(sizes) <= MAX_DIMENSION_COUNT:
            raise ValidationError(
                f"{where}.sizes: the dimension count must be 1 to {MAX_DIMENSION_COUNT}, not {len(sizes)}")
        if any(size == 0 for size in sizes):
            raise ValidationError(f"{where}.sizes: a size of 0 is invalid (sizes {list(sizes)})")
        if math.prod(sizes) > MAX_ELEMENT_COUNT:
            raise ValidationError(f"{where}.sizes: a tensor holds at most 2^32-1 elements (sizes {list(sizes)})")
        if self.strides is not None:
            strides = _as_uints(self.strides, f"{where}.strides")
            if len(strides) != len(sizes):
                raise ValidationError(
                    f"{where}.strides: {len(strides)} strides for {len(sizes)} dimensions; one stride per size")
            object.__setattr__(self, "strides", strides)
        object.__setattr__(self, "flags", _as_flags(self.flags, f"{where}.flags"))
        minimum = calc_buffer_tensor_size(data_type, sizes, self.strides)
        total = _as_uint(self.total_tensor_size_in_bytes, f"{where}.total_tensor_size_in_bytes", bits=64)
        if total == 0:
            total = minimum
        elif total < minimum:
            raise ValidationError(
                f"{where}.total_tensor_size_in_bytes: {total} is less than the {minimum} bytes that "
                f"DMLCalcBufferTensorSize gives for these sizes and strides")
        object.__setattr__(self, "total_tensor_size_in_bytes", total)
        alignment = _as_uint(self.guaranteed_base_offset_alignment, f"{where}.guaranteed_base_offset_alignment")
        element_bytes = max(1, data_type.bits // 8)
        if alignment and (alignment & (alignment - 1) or alignment < element_bytes):
            raise ValidationError(
                f"{where}.guaranteed_base_offset_alignment: {alignment} must be 0 or a power of two of at least "
                f"the element size ({element_bytes} bytes)")
        object.__setattr__(self, "guaranteed_base_offset_alignment", alignment)

    @property
    def dimension_count(self) -> int:
        return len(self.sizes)

    @property
    def element_strides(self) -> tuple[int, ...]:
        """The strides, in elements, with packed row-major strides where none were given."""
        return self.strides if self.strides is not None else packed_strides(self.sizes)

    @property
    def element_count(self) -> int:
        return math.prod(self.sizes)

    @property
    def offset_alignment(self) -> int:
        """What a binding offset must be a multiple of."""
        return max(MINIMUM_BUFFER_TENSOR_ALIGNMENT, self.guaranteed_base_offset_alignment)

    @property
    def owned_by_dml(self) -> bool:
        return bool(self.flags & TensorFlags.OWNED_BY_DML)


def _as_flags(value, where) -> TensorFlags:
    # IntFlag keeps bits it has no name for (and takes -1 as every bit): check the bits here.
    known = sum(TensorFlags)
    if isinstance(value, bool) or not hasattr(value, "__index__") or int(value) & ~known:
        raise ValidationError(f"{where}: {value!r} is not a DML_TENSOR_FLAGS value (NONE or OWNED_BY_DML)")
    return TensorFlags(int(value))


def _as_uints(values, where) -> tuple[int, ...]:
    try:
        return tuple(_as_uint(value, where) for value in values)
    except TypeError:
        raise ValidationError(f"{where}: {values!r} is not a sequence of integers") from None


def _as_uint(value, where, bits=32) -> int:
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        raise ValidationError(f"{where}: {value!r} is not an integer")
    value = int(value)
    if not 0 <= value < 2**bits:
        raise ValidationError(f"{where}: {value} is not a UINT{bits if bits == 64 else ''} (0 to 2^{bits}-1)")
    return value
