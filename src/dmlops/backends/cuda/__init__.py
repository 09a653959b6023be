"""The CUDA backend: buffers are PyTorch CUDA tensors; the operators run as Triton kernels.

Raw ``uint8`` tensors are the buffers of the operator API; typed tensors (or any CUDA array that speaks DLPack,
such as CuPy's and JAX's) are the arrays of the array API. Under Triton's interpreter (``TRITON_INTERPRET=1``) the
same kernels run on CPU tensors, which is how they are tested without a GPU.
"""

from __future__ import annotations

import functools
import os

import numpy as np

import torch

from ...types import DataType, OperatorType, ValidationError

INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"

TORCH_DTYPES = {
    DataType.FLOAT32: torch.float32, DataType.FLOAT16: torch.float16, DataType.FLOAT64: torch.float64,
    DataType.UINT8: torch.uint8, DataType.INT8: torch.int8, DataType.UINT16: torch.uint16,
    DataType.INT16: torch.int16, DataType.UINT32: torch.uint32, DataType.INT32: torch.int32,
    DataType.UINT64: torch.uint64, DataType.INT64: torch.int64,
}
DATA_TYPES = {dtype: data_type for data_type, dtype in TORCH_DTYPES.items()}


def cdiv(a: int, b: int) -> int:
    """⌈a / b⌉ on the host (``triton.cdiv`` is a constexpr function: microseconds a call from Python)."""
    return -(-a // b)


def next_power_of_2(n: int) -> int:
    """The least power of two ≥ n (at least 1), on the host."""
    return 1 << max(0, n - 1).bit_length()


def check_device(tensor, where: str) -> None:
    """Kernels run on CUDA tensors; CPU tensors only under Triton's interpreter."""
    if tensor.device.type != "cuda" and not INTERPRETED:
        raise ValidationError(f"{where}: a tensor on {tensor.device}; the cuda backend takes CUDA tensors "
                              f"(CPU tensors only under TRITON_INTERPRET=1)")


def check_devices(operator: str, **tensors) -> None:
    """The tensors of one operator run where the kernels can run them, all on one device."""
    first_field, first = next(iter(tensors.items()))
    for field, tensor in tensors.items():
        check_device(tensor, f"{operator}.{field}")
        if tensor.device != first.device:
            raise ValidationError(f"{operator}.{field}: on {tensor.device}, but {first_field} is on {first.device}; "
                                  f"the tensors of one operator must be on one device")


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
    """A view with other sizes and element strides from the same first element."""
    return array.as_strided(tuple(sizes), tuple(strides), array.storage_offset())


# -- errors found on the device ----------------------------------------------------------------------------------

# Kernels that find a value DirectML rejects (a zero, NaN or infinite scale) set a bit of their device's error
# word rather than wait for the host to read the value; ``check_errors`` reads and clears the words.
ERROR_FIELDS = {1: "a_scale_tensor", 2: "b_scale_tensor", 4: "output_scale_tensor"}
_error_words: dict = {}


def error_word(device):
    word = _error_words.get(device)
    if word is None:
        word = _error_words[device] = torch.zeros(1, dtype=torch.int32, device=device)
    return word


def check_errors() -> None:
    """Wait for the GPUs, then raise the ValidationError of the scales that kernels found bad since the last
    check (their outputs hold no defined values)."""
    bad = 0
    for word in _error_words.values():
        bad |= int(word.item())  # waits for the device
        word.zero_()
    if bad:
        from ...ops.quantized_matmul import NAME

        fields = [field for bit, field in ERROR_FIELDS.items() if bad & bit]
        raise ValidationError(f"{NAME}.{fields[0]}: scales must be finite and non-zero; a call on the GPU found "
                              f"{' and '.join(fields)} zero, NaN or infinite, and its output is undefined")


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
    """The copy kept for an OWNED_BY_DML tensor; the quantized matmul's B is also repacked for its kernel, once."""
    if operator_type == OperatorType.QUANTIZED_LINEAR_MATRIX_MULTIPLY and field == "b_tensor":
        return qmatmul.persist_b(array)
    return array.clone()


# -- arrays of the array API -----------------------------------------------------------------------------------


def adopt(obj):
    """(torch tensor, restore) for a CUDA array, or None if it lives elsewhere.

    ``restore`` turns a result back into the caller's kind of array (CuPy and JAX arrays come back as their own).
    """
    if isinstance(obj, torch.Tensor):
        if obj.device.type != "cuda" and not INTERPRETED:
            return None
        return obj.detach(), _same
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
    """What ``adopt`` does to objects of the kind and placement of ``sample`` (adopted before), as one function:
    torch tensors are taken as they are (a plan holds no other kinds)."""
    return _same


def address(array) -> int:
    """Where the tensor's first element lies."""
    return array.data_ptr()


def element_strides(array):
    return tuple(array.stride())


def data_type(array) -> DataType:
    if array.dtype not in DATA_TYPES:
        raise ValidationError(f"torch dtype {array.dtype} has no DirectML data type")
    return DATA_TYPES[array.dtype]


def empty(sizes, data_type: DataType, like=None):
    return torch.empty(tuple(sizes), dtype=TORCH_DTYPES[data_type], device=like.device)


def allocator(sizes, data_type: DataType, like=None):
    """A function of no arguments that returns what ``empty(sizes, data_type, like)`` returns, each time anew."""
    return functools.partial(torch.empty, tuple(sizes), dtype=TORCH_DTYPES[data_type], device=like.device)


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


# -- operators -------------------------------------------------------------------------------------------------

from . import qmatmul  # noqa: E402
from .qmatmul import prepare_quantized_linear_matmul, quantized_linear_matmul  # noqa: E402
from .scan import cumulative, prepare_cumulative  # noqa: E402
from .recurrence import linear_recurrence  # noqa: E402
