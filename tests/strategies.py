"""Hypothesis strategies shared by the operator tests: shapes, DirectML strides and tensors bound in buffers.

A bound tensor lives in a bytearray at an aligned offset, with padding around it; the library sees the same
memory through one of the binding kinds DirectML's Python users have (bytes-like objects, NumPy arrays of any
dtype, BufferBinding with an offset and size). Inputs are filled with fresh random values; outputs are poisoned
with random bytes, so that an element never written, or a byte written outside the tensor, shows.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from hypothesis import strategies as st

from dmlops import BufferBinding, DataType, TensorDesc

import reference

BINDING_KINDS = ("bytearray", "uint8 array", "float64 array", "memoryview")


@st.composite
def shapes(draw, min_rank=1, max_rank=8, max_elements=240, max_size=7):
    """Sizes of 1 to 8 dimensions with at most ``max_elements`` elements, large dimensions anywhere."""
    rank = draw(st.integers(min_rank, max_rank))
    sizes, budget = [], max_elements
    for _ in range(rank):
        size = draw(st.integers(1, max(1, min(max_size, budget))))
        sizes.append(size)
        budget //= size
    return tuple(draw(st.permutations(sizes)))


@st.composite
def strides(draw, sizes, *, broadcast: bool):
    """Element strides: None (packed), or dimensions in any memory order, each maybe padded; with ``broadcast``,
    some dimensions repeat (stride 0), as inputs may."""
    if draw(st.integers(0, 3)) == 0:
        return None
    result, step = [0] * len(sizes), 1
    for axis in reversed(draw(st.permutations(range(len(sizes))))):
        if broadcast and draw(st.integers(0, 4)) == 0:
            continue  # stride 0
        result[axis] = step
        step *= sizes[axis] + draw(st.sampled_from([0, 0, 1, 3]))
    return tuple(result)


@dataclass
class BoundTensor:
    """A tensor desc and the buffer it is bound in."""

    desc: TensorDesc
    memory: bytearray
    offset: int
    binding: object

    def read(self) -> np.ndarray:
        strides = self.desc.element_strides
        return reference.read_tensor(self.memory, self.offset, self.desc.data_type.numpy_dtype, self.desc.sizes,
                                     strides)

    def covered(self) -> np.ndarray:
        return reference.covered_bytes(self.offset, self.desc.data_type.numpy_dtype, self.desc.sizes,
                                       self.desc.element_strides, len(self.memory))


@st.composite
def bound_tensors(draw, data_type: DataType, sizes, tensor_strides, *, flags=0):
    """A tensor with the given strides, bound at a random aligned offset of a larger buffer."""
    itemsize = data_type.numpy_dtype.itemsize
    alignment = draw(st.sampled_from([a for a in (0, 1, 2, 4, 8, 16, 32, 64) if a == 0 or a >= itemsize]))
    minimum = reference.calc_buffer_tensor_size(itemsize, sizes, tensor_strides)
    total = draw(st.sampled_from([0, minimum, minimum + 4, minimum + 20]))
    desc = TensorDesc(data_type, sizes, tensor_strides, flags=flags, total_tensor_size_in_bytes=total,
                      guaranteed_base_offset_alignment=alignment)
    offset = draw(st.integers(0, 3)) * desc.offset_alignment
    end = offset + desc.total_tensor_size_in_bytes
    length = math.ceil((end + draw(st.sampled_from([0, 0, 8, 40]))) / 8) * 8
    memory = bytearray(length)
    kind = draw(st.sampled_from(BINDING_KINDS))
    buffer = {"bytearray": memory, "memoryview": memoryview(memory),
              "uint8 array": np.frombuffer(memory, dtype=np.uint8),
              "float64 array": np.frombuffer(memory, dtype=np.float64)}[kind]
    size = draw(st.sampled_from([None, desc.total_tensor_size_in_bytes, length - offset]))
    binding = buffer if offset == 0 and size is None else BufferBinding(buffer, offset, size)
    return BoundTensor(desc, memory, offset, binding)


def fill(bound: BoundTensor, values) -> None:
    """Fill the whole buffer with values of the tensor's type from ``values(count)``, so that the tensor's
    elements, wherever its strides put them, are random."""
    dtype = bound.desc.data_type.numpy_dtype
    typed = np.frombuffer(bound.memory, dtype=dtype)
    typed[:] = values(typed.size)


def poison(bound: BoundTensor, rng) -> bytes:
    """Fill the buffer with random bytes; returns them."""
    bound.memory[:] = rng.integers(0, 256, len(bound.memory), dtype=np.uint8).tobytes()
    return bytes(bound.memory)


def random_values(rng, dtype, count, *, small: bool) -> np.ndarray:
    """Fresh random values of a dtype: the full range of an integer type, or (``small``) values near 1 in
    magnitude whose long products neither overflow nor underflow float16; float sums get normal values."""
    dtype = np.dtype(dtype)
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        low, high = (max(info.min, -3), 4) if small else (info.min, info.max + 1)
        return rng.integers(low, high, count, dtype=dtype)
    if small:
        magnitudes = rng.uniform(0.97, 1.03, count)
        return (magnitudes * rng.choice([-1.0, 1.0], count)).astype(dtype)
    return rng.standard_normal(count).astype(dtype) * dtype.type(4)


def random_scales(rng, k, shape_a, shape_b, shape_out):
    """Random FLOAT32 scales of A, B and the output whose quantized products over K spread over the 8-bit range,
    some saturating: |acc| is about 5500·sqrt(K)."""
    a_scale = rng.uniform(0.005, 0.05, shape_a).astype(np.float32)
    b_scale = rng.uniform(0.005, 0.05, shape_b).astype(np.float32)
    spread = 0.0275**2 * 5500 * np.sqrt(k) / 100
    return a_scale, b_scale, (spread * rng.uniform(0.3, 3, shape_out)).astype(np.float32)
