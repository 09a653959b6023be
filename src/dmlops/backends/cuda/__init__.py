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

from ...core.host import cpu_name, system_memory
from ...core.registry import Backend, ComputeDevice, ran
from ...types import DataType, OperatorType, ValidationError
from . import qmatmul, recurrence, scan
from .common import TORCH_DTYPES, check_device, data_type, runs_here
from .launch import empty_maker


class CudaBackend(Backend):
    """torch tensors on a CUDA device (CPU tensors under Triton's interpreter)."""

    # -- buffers ---------------------------------------------------------------------------------------------

    def memory(self, buffer, where: str, *, writable: bool):
        """The bytes of a binding's buffer as a flat uint8 tensor that shares its memory."""
        if not isinstance(buffer, torch.Tensor):
            if not hasattr(buffer, "__dlpack__"):
                raise ValidationError(f"{where}: a {type(buffer).__name__} is not a CUDA buffer (a torch tensor or "
                                      f"a DLPack array)")
            buffer = torch.from_dlpack(buffer)
        check_device(buffer, where)
        if not buffer.is_contiguous():
            raise ValidationError(f"{where}: a buffer tensor must be contiguous to be read as bytes")
        return buffer.reshape(-1).view(torch.uint8)

    def byte_length(self, flat) -> int:
        return flat.numel()

    def view(self, flat, byte_offset: int, data_type: DataType, sizes, strides):
        dtype = TORCH_DTYPES[data_type]
        span = (sum((size - 1) * stride for size, stride in zip(sizes, strides)) + 1) * dtype.itemsize
        typed = flat[byte_offset:byte_offset + span].view(dtype)
        return typed.as_strided(tuple(sizes), tuple(strides), typed.storage_offset())

    def restride(self, array, sizes, strides):
        """A view with other sizes and element strides from the same first element (of a persisted B: the same
        B)."""
        if type(array) is qmatmul.PersistedB:
            return array.restrided(sizes, strides)
        return array.as_strided(tuple(sizes), tuple(strides), array.storage_offset())

    def overlaps(self, a, b) -> bool:
        if a.device != b.device:
            return False
        (a_low, a_high), (b_low, b_high) = _extent(a), _extent(b)
        return a_low < b_high and b_low < a_high

    def same_layout(self, a, b) -> bool:
        return (a.data_ptr(), tuple(a.shape), a.stride(), a.dtype) == \
            (b.data_ptr(), tuple(b.shape), b.stride(), b.dtype)

    def persist(self, operator_type, field: str, array):
        """The copy kept for an OWNED_BY_DML tensor; for the quantized matmul's B a ``qmatmul.PersistedB``, which
        holds B repacked for its kernel, once."""
        if operator_type == OperatorType.QUANTIZED_LINEAR_MATRIX_MULTIPLY and field == "b_tensor":
            return qmatmul.persist_b(array)
        return array.clone()

    # -- arrays ----------------------------------------------------------------------------------------------

    def adopt(self, obj):
        """(torch tensor, restore) for a CUDA array, or None if it lives elsewhere. ``restore`` turns a result back
        into the caller's kind of array (CuPy and JAX arrays come back as their own)."""
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

    def address(self, array) -> int:
        return array.data_ptr()

    def element_strides(self, array):
        return tuple(array.stride())

    def data_type(self, array) -> DataType:
        return data_type(array)

    def empty(self, sizes, data_type: DataType, like=None):
        return torch.empty(tuple(sizes), dtype=TORCH_DTYPES[data_type], device=like.device)

    def allocator(self, sizes, data_type: DataType, like=None):
        make = empty_maker(tuple(sizes), TORCH_DTYPES[data_type], like.device)
        return lambda like: make()

    def asarray(self, value, data_type: DataType, like=None):
        if isinstance(value, torch.Tensor):
            return value.to(device=like.device, dtype=TORCH_DTYPES[data_type])
        values = np.asarray(value, dtype=data_type.numpy_dtype)
        if values.ndim == 0:  # a fill on the device: no host-to-device copy to wait for
            return torch.full((), values.item(), dtype=TORCH_DTYPES[data_type], device=like.device)
        return torch.as_tensor(values, device=like.device)

    def contiguous(self, array):
        return array.contiguous()

    def assign(self, target, source) -> None:
        target.copy_(source)

    # -- the host --------------------------------------------------------------------------------------------

    def from_host(self, host, like=None):
        """A copy of a NumPy array or number, on the device of ``like``, else on the current GPU (on the CPU under
        Triton's interpreter where there is none)."""
        device = like.device if like is not None else "cpu" if not torch.cuda.is_available() else "cuda"
        return torch.tensor(host, device=device)

    def to_host(self, array):
        return array.cpu().numpy()

    def synchronize(self) -> None:
        if torch.cuda.is_available():
            torch.cuda.synchronize()

    def check_errors(self) -> None:
        qmatmul.check_errors()

    def timing_events(self):
        """CUDA events on a GPU; none under Triton's interpreter."""
        return _event_pair if torch.cuda.is_available() else None

    # -- where it runs -----------------------------------------------------------------------------------------

    def devices(self) -> list[ComputeDevice]:
        """The CUDA GPUs that PyTorch sees."""
        if not torch.cuda.is_available():
            return []
        return [ComputeDevice(f"cuda:{index}", torch.cuda.get_device_name(index), self.name, True,
                              torch.cuda.get_device_properties(index).total_memory, index)
                for index in range(torch.cuda.device_count())]

    def device(self) -> ComputeDevice:
        """The first GPU; without one, the CPU where TRITON_INTERPRET=1 runs the kernels in Triton's interpreter."""
        found = self.devices()
        if found:
            return found[0]
        if os.environ.get("TRITON_INTERPRET") == "1":
            return ComputeDevice(self.name, f"{cpu_name()} (Triton's interpreter)", self.name, False,
                                 system_memory())
        raise ValidationError("PyTorch sees no CUDA GPU here")

    def use(self, device: ComputeDevice) -> None:
        if device.index is not None:
            torch.cuda.set_device(device.index)

    def description(self) -> str:
        if torch.cuda.is_available():
            return f"{torch.cuda.get_device_name()} (CUDA {torch.version.cuda})"
        if os.environ.get("TRITON_INTERPRET") == "1":
            return "Triton's interpreter, on the CPU (TRITON_INTERPRET=1; no CUDA GPU)"
        return "cannot run: PyTorch sees no CUDA GPU"

    # -- lowerings -------------------------------------------------------------------------------------------

    def prepare_cumulative(self, operation, x, out, axis: int, reverse: bool, exclusive: bool):
        return scan.prepare_cumulative(operation, x, out, axis, reverse, exclusive)

    def prepare_linear_recurrence(self, a, b, scale, out, axis: int, reverse: bool, exclusive: bool):
        return ran(functools.partial(recurrence.linear_recurrence, axis=axis, reverse=reverse, exclusive=exclusive),
                   a, b, scale, out)

    def prepare_quantized_linear_matmul(self, views: dict, layouts: dict):
        ordered = [layouts.get(field) for field in views]  # (binding order)

        def kernel_tensors(arrays):
            return [None if array is None else self.restride(array, *layout) for array, layout in zip(arrays, ordered)]

        return qmatmul.prepare_quantized_linear_matmul(tuple(views.values()), kernel_tensors)


def _extent(array):
    span = sum((size - 1) * stride for size, stride in zip(array.shape, array.stride())) + 1
    return array.data_ptr(), array.data_ptr() + span * array.element_size()


def _same(array):
    return array


def _event_pair():
    return torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)


BACKEND = CudaBackend()
