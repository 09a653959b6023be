"""The CUDA backend: buffers are PyTorch CUDA tensors; the operators run as Triton kernels.

Raw ``uint8`` tensors are the buffers of the operator API; typed tensors (or any CUDA array that speaks DLPack,
such as CuPy's and JAX's) are the arrays of the array API. Under Triton's interpreter (``TRITON_INTERPRET=1``) the
same kernels run on CPU tensors, which is how they are tested without a GPU.
"""

from __future__ import annotations

import functools

import numpy as np

import torch

from ...types import DataType, OperatorType, ValidationError
from . import qmatmul
from .common import TORCH_DTYPES, check_device, check_errors, data_type, runs_here  # noqa: F401
from .qmatmul import prepare_quantized_linear_matmul, quantized_linear_matmul  # noqa: F401
from .recurrence import linear_recurrence  # noqa: F401
from .scan import cumulative, prepare_cumulative  # noqa: F401

def load_compiled_code() -> None:
    """Nothing to wait for: Triton compiles each kernel at its first launch, which a timed run's cold sample holds."""


# -- memory and views -------------------------------------------------------------------------------------------


def memory(buffer, where: str, *, writable: bool):
    """The bytes of a binding's buffer as a flat uint8 tensor that shares its memory."""
    if not isinstance(buffer, torch.Tensor):
        if not hasattr(buffer, "__dlpack__"):
            raise ValidationError(f"{where}: a {type(buffer).__name__} is not a CUDA buffer (a torch tensor or a "
                                  f"DLPack array)")
        buffer = torch.from_dlpack(buffer)
    check_device(buffer, where)
    if not buffer.is_contiguous():
        raise ValidationError(f"{where}: a buffer tensor must be contiguous to be read as bytes")
    return buffer.reshape(-1).view(torch.uint8)


def byte_length(flat) -> int:
    return flat.numel()


def view(flat, byte_offset: int, data_type: DataType, sizes, strides):
    dtype = TORCH_DTYPES[data_type]
    itemsize = dtype.itemsize
    span = (sum((size - 1) * stride for size, stride in zip(sizes, strides)) + 1) * itemsize
    typed = flat[byte_offset:byte_offset + span].view(dtype)
    return typed.as_strided(tuple(sizes), tuple(strides), typed.storage_offset())


def restride(array, sizes, strides):
    """A view with other sizes and element strides from the same first element (of a persisted B: the same B)."""
    if type(array) is qmatmul.PersistedB:
        return array.restrided(sizes, strides)
    return array.as_strided(tuple(sizes), tuple(strides), array.storage_offset())


def _extent(array):
    span = sum((size - 1) * stride for size, stride in zip(array.shape, array.stride())) + 1
    return array.data_ptr(), array.data_ptr() + span * array.element_size()


def overlaps(a, b) -> bool:
    if a.device != b.device:
        return False
    (a_low, a_high), (b_low, b_high) = _extent(a), _extent(b)
    return a_low < b_high and b_low < a_high


def same_layout(a, b) -> bool:
    return (a.data_ptr(), tuple(a.shape), a.stride(), a.dtype) == (b.data_ptr(), tuple(b.shape), b.stride(), b.dtype)


def persist(operator_type, field: str, array):
    """The copy kept for an OWNED_BY_DML tensor; for the quantized matmul's B a ``qmatmul.PersistedB``, which holds
    B repacked for its kernel, once."""
    if operator_type == OperatorType.QUANTIZED_LINEAR_MATRIX_MULTIPLY and field == "b_tensor":
        return qmatmul.persist_b(array)
    return array.clone()


# -- arrays of the array API -----------------------------------------------------------------------------------


def adopt(obj):
    """(torch tensor, restore) for a CUDA array, or None if it lives elsewhere.

    ``restore`` turns a result back into the caller's kind of array (CuPy and JAX arrays come back as their own).
    """
    if isinstance(obj, torch.Tensor):
        if not runs_here(obj):
            return None
        return obj.detach(), _same
    if type(obj) is qmatmul.PersistedB:  # a prepared B (``persist``), taken as it is
        return obj, _same
    if hasattr(obj, "__dlpack_device__") and obj.__dlpack_device__()[0] == 2:  # kDLCUDA
        library = type(obj).__module__.split(".")[0]
        if library in ("jax", "jaxlib"):
            import jax.numpy

            restore = jax.numpy.from_dlpack
        else:
            restore = __import__(library).from_dlpack
        return torch.from_dlpack(obj), restore
    return None


def _same(array):
    return array


def adopter(sample):
    """What ``adopt`` does to objects of the kind and placement of ``sample`` (adopted before), as one function, or
    None where it takes them as they are: torch tensors (a plan holds no other kinds)."""
    return None


def address(array) -> int:
    """Where the tensor's first element lies."""
    return array.data_ptr()


def element_strides(array):
    return tuple(array.stride())


def empty(sizes, data_type: DataType, like=None):
    return torch.empty(tuple(sizes), dtype=TORCH_DTYPES[data_type], device=like.device)


def allocator(sizes, data_type: DataType, like=None):
    """``allocate(like)``: what ``empty(sizes, data_type, like)`` returns, each time anew, for a ``like`` of the same
    dtype, sizes, strides and device as this one."""
    dtype = TORCH_DTYPES[data_type]
    if like.dtype == dtype and tuple(like.shape) == tuple(sizes) and like.is_contiguous():
        return torch.empty_like  # torch's cheapest allocation: it parses no sizes, dtype or device
    empty = functools.partial(torch.empty, tuple(sizes), dtype=dtype, device=like.device)
    return lambda like: empty()


def asarray(value, data_type: DataType, like=None):
    if isinstance(value, torch.Tensor):
        return value.to(device=like.device, dtype=TORCH_DTYPES[data_type])
    values = np.asarray(value, dtype=data_type.numpy_dtype)
    if values.ndim == 0:  # a fill on the device: no host-to-device copy to wait for
        return torch.full((), values.item(), dtype=TORCH_DTYPES[data_type], device=like.device)
    return torch.as_tensor(values, device=like.device)


def contiguous(array):
    return array.contiguous()


def assign(target, source) -> None:
    target.copy_(source)

