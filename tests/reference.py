"""Plain references for the tests, written from the operator pages and design.md, not from dmlops.ops.

Cumulative ops: a loop along the axis that keeps a running tally, in float64 for floats and modulo 2^64 for
integers (the low bits of a wrapped 64-bit tally are the wrapped tally of any narrower type).
Quantized matmul: an exact integer accumulation and the float64 requantization of design.md.
Buffers: elements read and written by explicit byte offsets, so that bindings are checked independently of the
library's own views.
"""

from __future__ import annotations

import itertools

import numpy as np

# Identity of each operation: the first output of an exclusive scan.
IDENTITY = {"sum": 0, "product": 1}

OUTPUT_RANGE = {np.dtype(np.int8): (-128, 127), np.dtype(np.uint8): (0, 255)}


def cumulative(operation: str, x: np.ndarray, axis: int, reverse: bool, exclusive: bool) -> np.ndarray:
    """Running sum or product along ``axis``: float64 for float inputs, x's dtype (wrapped) for integers."""
    is_float = x.dtype.kind == "f"
    tally_type = np.float64 if is_float else np.uint64
    walked = np.moveaxis(x, axis, -1)
    if is_float:
        walked = walked.astype(np.float64)
    else:  # two's complement bits, widened: wrapping modulo 2^64 keeps the low bits right
        walked = walked.astype(np.int64).astype(np.uint64)
    length = walked.shape[-1]
    order = range(length - 1, -1, -1) if reverse else range(length)
    tally = np.full(walked.shape[:-1], IDENTITY[operation], dtype=tally_type)
    result = np.empty(walked.shape, dtype=tally_type)
    with np.errstate(over="ignore"):
        for index in order:
            if exclusive:
                result[..., index] = tally
            tally = tally + walked[..., index] if operation == "sum" else tally * walked[..., index]
            if not exclusive:
                result[..., index] = tally
    if not is_float:
        result = result.astype(x.dtype)  # keeps the low bits: the wrap-around of x's own type
    return np.moveaxis(result, -1, axis)


def cumulative_tolerance(operation: str, x: np.ndarray, axis: int, reverse: bool, exclusive: bool,
                         output_dtype) -> np.ndarray:
    """An error bound, per element, for a float scan accumulated in float32 (or wider) and rounded once to
    ``output_dtype``: the accumulation error of a running tally of n terms, plus the final rounding."""
    n = x.shape[axis]
    accumulation_eps = np.finfo(np.float32).eps
    rounding_eps = np.finfo(output_dtype).eps
    magnitude = np.abs(x.astype(np.float64))
    if operation == "sum":
        bound = cumulative("sum", magnitude, axis, reverse, exclusive)
    else:
        bound = np.abs(cumulative("product", x.astype(np.float64), axis, reverse, exclusive))
    return (n + 2) * accumulation_eps * bound + rounding_eps * bound + np.finfo(output_dtype).tiny


def quantized_matmul(a, a_scale, a_zero_point, b, b_scale, b_zero_point, output_scale, output_zero_point,
                     output_dtype) -> np.ndarray:
    """DML_OPERATOR_QUANTIZED_LINEAR_MATRIX_MULTIPLY on NumPy arrays that broadcast like DirectML-shaped tensors:
    a {..., M, K}, b {..., K, N}; scales and zero points {..., M, 1} (A, output) or {..., 1, N} (B), or scalars;
    a zero point of None is 0.

    acc = sum_k (a - za)(b - zb) in Python integers; q = round_half_even(acc * ((sa * sb) / so)) + zo in float64,
    then clamped to the output type's range.
    """
    def shifted(values, zero_point):
        values = np.asarray(values).astype(object)  # Python integers: exact for any K
        return values if zero_point is None else values - np.asarray(zero_point).astype(object)

    a_shifted, b_shifted = shifted(a, a_zero_point), shifted(b, b_zero_point)
    batch = np.broadcast_shapes(a_shifted.shape[:-2], b_shifted.shape[:-2])
    a_shifted = np.broadcast_to(a_shifted, batch + a_shifted.shape[-2:])
    b_shifted = np.broadcast_to(b_shifted, batch + b_shifted.shape[-2:])
    m, n = a_shifted.shape[-2], b_shifted.shape[-1]
    acc = np.empty(batch + (m, n), dtype=object)
    for index in itertools.product(*(range(size) for size in batch)):
        acc[index] = a_shifted[index].dot(b_shifted[index])

    multiplier = (np.asarray(a_scale, np.float32).astype(np.float64) * np.asarray(b_scale, np.float32)
                  .astype(np.float64)) / np.asarray(output_scale, np.float32).astype(np.float64)
    multiplier = np.broadcast_to(multiplier, acc.shape)
    zero = np.broadcast_to(0 if output_zero_point is None else np.asarray(output_zero_point).astype(object),
                           acc.shape)
    low, high = OUTPUT_RANGE[np.dtype(output_dtype)]
    result = np.empty(acc.shape, dtype=output_dtype)
    for index in np.ndindex(acc.shape):
        rounded = round(float(acc[index]) * float(multiplier[index]))  # Python's round: half to even
        result[index] = min(max(rounded + int(zero[index]), low), high)
    return result


# -- buffers -----------------------------------------------------------------------------------------------------


def element_byte_offsets(byte_offset: int, dtype, sizes, strides) -> np.ndarray:
    """The byte offset of each element of a strided tensor in its buffer, shaped like the tensor."""
    offsets = np.full(tuple(sizes), byte_offset, dtype=np.int64)
    for axis, (size, stride) in enumerate(zip(sizes, strides)):
        shape = [1] * len(sizes)
        shape[axis] = size
        offsets = offsets + (np.arange(size) * stride * np.dtype(dtype).itemsize).reshape(shape)
    return offsets


def _byte_indices(byte_offset: int, dtype, sizes, strides) -> np.ndarray:
    """For each element, the indices of its bytes in the buffer: shape sizes + (itemsize,)."""
    itemsize = np.dtype(dtype).itemsize
    return element_byte_offsets(byte_offset, dtype, sizes, strides)[..., None] + np.arange(itemsize)


def read_tensor(buffer, byte_offset: int, dtype, sizes, strides) -> np.ndarray:
    """The elements of a strided tensor, gathered from a buffer's bytes."""
    data = np.frombuffer(bytes(buffer), dtype=np.uint8)
    gathered = data[_byte_indices(byte_offset, dtype, sizes, strides)]
    return np.ascontiguousarray(gathered).view(np.dtype(dtype)).reshape(tuple(sizes))


def write_tensor(buffer: bytearray, byte_offset: int, values: np.ndarray, strides) -> None:
    """Scatter the elements of ``values`` into a buffer through strides."""
    data = np.frombuffer(buffer, dtype=np.uint8)
    element_bytes = np.ascontiguousarray(values).view(np.uint8).reshape(values.shape + (values.dtype.itemsize,))
    data[_byte_indices(byte_offset, values.dtype, values.shape, strides)] = element_bytes


def covered_bytes(byte_offset: int, dtype, sizes, strides, buffer_length: int) -> np.ndarray:
    """A mask of the buffer's bytes that some element of the tensor occupies."""
    mask = np.zeros(buffer_length, dtype=bool)
    mask[_byte_indices(byte_offset, dtype, sizes, strides)] = True
    return mask


def calc_buffer_tensor_size(itemsize: int, sizes, strides=None) -> int:
    """DMLCalcBufferTensorSize, from the page: the index of the last element plus one, in bytes, rounded up to 4."""
    if strides is None:
        count = int(np.prod(sizes))
    else:
        count = 1 + sum((size - 1) * stride for size, stride in zip(sizes, strides))
    return -(-count * itemsize // 4) * 4
