"""The NumPy backend: buffers are NumPy arrays; the default, with nothing else to install."""

from __future__ import annotations

import functools

import numpy as np

from ...ops.cumulative import CumulativeOperation
from ...ops.quantized_matmul import QUANTIZATION_PARAMETERS
from ...types import DataType, ValidationError, no_data_type
from . import qmatmul, scan
from .compiled import viewer

# The quantized matmul's parameters of B's columns (a vector of N each where not per tensor).
PER_COLUMN = {field for field, (data, _) in QUANTIZATION_PARAMETERS.items() if data == "b_tensor"}

# recurrence is imported by its operator's first call: it loads numba as it is imported, where the scans and the
# quantized matmul load their compiled code in the background (compiled.Loader), so that a first call does not wait
# for it.

# -- memory and views -------------------------------------------------------------------------------------------


def memory(buffer, where: str, *, writable: bool) -> np.ndarray:
    """The bytes of a binding's buffer as a flat uint8 array that shares its memory."""
    if isinstance(buffer, np.ndarray):
        if not buffer.flags.c_contiguous:
            raise ValidationError(f"{where}: a NumPy buffer must be C-contiguous to be read as bytes")
        if buffer.dtype.hasobject:
            raise ValidationError(f"{where}: a NumPy array of Python objects is not a buffer of bytes")
        flat = buffer.reshape(-1).view(np.uint8)
    else:
        try:
            flat = np.frombuffer(buffer, dtype=np.uint8)
        except (TypeError, ValueError) as error:
            raise ValidationError(f"{where}: {type(buffer).__name__} is not a buffer of bytes ({error})") from None
        except BufferError as error:  # a strided memoryview, say
            raise ValidationError(f"{where}: a {type(buffer).__name__} must be C-contiguous to be read as bytes "
                                  f"({error})") from None
    if writable and not flat.flags.writeable:
        raise ValidationError(f"{where}: the output buffer is read-only")
    return flat


def byte_length(flat: np.ndarray) -> int:
    return flat.nbytes


def view(flat: np.ndarray, byte_offset: int, data_type: DataType, sizes, strides) -> np.ndarray:
    dtype = data_type.numpy_dtype
    return np.ndarray(sizes, dtype, buffer=flat, offset=byte_offset, strides=[s * dtype.itemsize for s in strides])


def restride(array: np.ndarray, sizes, strides) -> np.ndarray:
    """A view with other sizes and element strides from the same first element, within the array's memory."""
    byte_strides = [s * array.itemsize for s in strides]
    if array.flags.c_contiguous:  # its memory is one buffer from the first element: a view checked against it,
        return np.ndarray(sizes, array.dtype, buffer=array, strides=byte_strides)  # in a fifth of as_strided's time
    return np.lib.stride_tricks.as_strided(array, sizes, byte_strides, writeable=array.flags.writeable)


def overlaps(a: np.ndarray, b: np.ndarray) -> bool:
    try:
        return bool(np.shares_memory(a, b, max_work=1 << 20))
    except np.exceptions.TooHardError:
        return True


def same_layout(a: np.ndarray, b: np.ndarray) -> bool:
    return (a.__array_interface__["data"][0], a.shape, a.strides) == \
        (b.__array_interface__["data"][0], b.shape, b.strides)


def persist(operator_type, field: str, array: np.ndarray) -> np.ndarray:
    """The copy kept for an OWNED_BY_DML tensor."""
    return array.copy()


# -- operators -------------------------------------------------------------------------------------------------


def cumulative(operation: CumulativeOperation, x: np.ndarray, out: np.ndarray, axis: int, reverse: bool,
               exclusive: bool) -> None:
    scan.cumulative(operation.value, x, out, axis, reverse, exclusive)  # the scans take the operation's word


def prepare_cumulative(operation: CumulativeOperation, x, out, axis: int, reverse: bool, exclusive: bool):
    """Run, and return run(x, out) for arrays of the same layouts (what depends only on them decided once)."""
    run = scan.prepare(operation.value, x, out, axis, reverse, exclusive)
    run(x, out)
    return run


def linear_recurrence(a: np.ndarray, b: np.ndarray, scale: np.ndarray, out: np.ndarray, axis: int, reverse: bool,
                      exclusive: bool) -> None:
    """The cumulative product's gradient recurrence (dmlops.ops.cumulative_gradient)."""
    from . import recurrence

    recurrence.linear_recurrence(a, b, scale, out, axis, reverse, exclusive)


def quantized_linear_matmul(a, a_scale, a_zero_point, b, b_scale, b_zero_point, output_scale, output_zero_point,
                            out) -> None:
    """a {B, C, M, K}, b {B, C, K, N}, out {B, C, M, N}; scales and zero points are vectors of M or N."""
    arrays = (a, a_scale, a_zero_point, b, b_scale, b_zero_point, output_scale, output_zero_point, out)
    qmatmul.check_scales(a_scale, b_scale, output_scale)
    qmatmul.prepare(*arrays)(*arrays)


def prepare_quantized_linear_matmul(views: dict, kernel_tensors):
    """Run on views (by field, in binding order), and return run(views) for views of the same layouts; the kernel
    takes ``kernel_tensors(views)``, which are made the way found for these views. A product of one matrix that
    takes one compiled call a thread (``qmatmul.prepare_one_call``: A's and the output's scales and zero points per
    tensor, B's per tensor or contiguous vectors of N) is handed the bound arrays themselves (or views that drop
    their dimensions of 1), each scale and zero point per tensor as a number: no view is made for it. A run
    prepared while the compiled code was loading (NumPy's path) is prepared again once it is loaded."""
    run = qmatmul.LOOPS.prepared(lambda views: quantized_linear_matmul_run(views, kernel_tensors), views)
    run(views)
    return run


def quantized_linear_matmul_run(views: dict, kernel_tensors):
    """prepare_quantized_linear_matmul's run(views), not run."""
    tensors = kernel_tensors(views)
    out = tensors["output_tensor"]
    # one compiled call a thread for one packed matrix with its parameters per tensor, B's also per column (as
    # quantized weights mostly are): the products whose call costs matter; each other form or layout of the
    # arguments would compile a function of its own
    arguments = [tensor if tensor is None or tensor.ndim == 1 else tensor[0, 0] for tensor in tensors.values()]
    simple = out.shape[:2] == (1, 1) and all(arguments[i].flags.c_contiguous for i in (0, 3, 8)) and \
        all(views.get(field) is None or views[field].size == 1 or
            field in PER_COLUMN and views[field].flags.c_contiguous for field in QUANTIZATION_PARAMETERS)
    product = qmatmul.prepare_one_call(*arguments) if simple else None
    if product is not None:
        readers = [(field, argument_reader(views.get(field), tensor)) for field, tensor in tensors.items()]

        def run(views):
            product(*[None if read is None else read(views[field]) for field, read in readers])
    else:
        kernel_views = [(field, None if tensor is None else KernelView(tensor.shape, element_strides(tensor)))
                        for field, tensor in tensors.items()]
        run_kernel = qmatmul.prepare(*tensors.values())

        def run(views):
            arrays = [None if view is None else view(views[field]) for field, view in kernel_views]
            qmatmul.check_scales(arrays[1], arrays[4], arrays[6])  # a_scale, b_scale, output_scale
            run_kernel(*arrays)
    return run


def argument_reader(array, tensor):
    """How prepare_one_call's product takes the arrays bound to a field, laid out as ``array`` is, whose kernel
    tensor is ``tensor``: one value (a per-tensor scale or zero point) as a number; a matrix {1, …, 1, rows,
    columns} as {rows, columns}, a vector {…, length, …} as {length}, each a view (dropping dimensions of 1 never
    copies). None for an absent tensor."""
    if tensor is None:
        return None
    if tensor.ndim == 4:
        return matrix
    return np.ndarray.item if array.size == 1 else vector


def matrix(array: np.ndarray) -> np.ndarray:
    return array if array.ndim == 2 else array.reshape(array.shape[-2:])


def vector(array: np.ndarray) -> np.ndarray:
    return array if array.ndim == 1 else array.reshape(-1)


class KernelView:
    """restride(array, sizes, strides) for the arrays bound to one field, made the cheapest way found for the layout
    of the last one (views of the same first element: the array API binds the caller's arrays, whose layouts
    repeat)."""

    def __init__(self, sizes, strides):
        self.sizes, self.strides = sizes, strides
        self.last = None, None, None  # the last bound array's sizes and byte strides, and its viewer: one tuple,
        # replaced at once, so that calls on other threads see the three of one layout

    def __call__(self, array: np.ndarray) -> np.ndarray:
        shape, strides, view = self.last
        if array.shape != shape or array.strides != strides:
            view = viewer(array, restride(array, self.sizes, self.strides))
            self.last = array.shape, array.strides, view
        return view(array)


# -- arrays of the array API -----------------------------------------------------------------------------------


def adopt(obj):
    """(NumPy array, restore) for an object of this backend: NumPy arrays, CPU torch tensors, numbers, lists.

    ``restore`` turns a result back into the caller's kind of array. None if the object belongs elsewhere.
    """
    if isinstance(obj, np.ndarray):
        return obj, _same
    if type(obj).__module__.startswith("torch"):
        if obj.device.type != "cpu":
            return None
        import torch

        try:
            return _torch_numpy(obj), torch.from_numpy
        except TypeError:  # a dtype NumPy lacks (bfloat16, say)
            raise no_data_type(f"torch dtype {obj.dtype}") from None
    if hasattr(obj, "__dlpack_device__"):
        if obj.__dlpack_device__()[0] != 1:  # kDLCPU
            return None
        return np.from_dlpack(obj), _same
    return np.asarray(obj), _same


def _same(array):
    return array


def adopter(sample):
    """What ``adopt`` does to objects of the kind and placement of ``sample`` (adopted before), as one function, or
    None where it takes them as they are (NumPy arrays)."""
    return None if isinstance(sample, np.ndarray) else _torch_numpy


def _torch_numpy(tensor) -> np.ndarray:
    return tensor.detach().numpy()


def address(array: np.ndarray) -> int:
    """Where the array's first element lies."""
    return array.__array_interface__["data"][0]


def element_strides(array: np.ndarray):
    """Strides in elements, or None where DirectML strides cannot say them (negative or not whole elements)."""
    if any(s < 0 or s % array.itemsize for s in array.strides):
        return None
    return tuple(s // array.itemsize for s in array.strides)


def data_type(array: np.ndarray) -> DataType:
    return _data_type_of(array.dtype)


# An array API call asks for the data type of each of its arrays, some more than once: kept by dtype.
_data_type_of = functools.lru_cache(maxsize=64)(DataType.from_numpy)


def empty(sizes, data_type: DataType, like=None) -> np.ndarray:
    return np.empty(sizes, data_type.numpy_dtype)


def allocator(sizes, data_type: DataType, like=None):
    """``allocate(like)``: what ``empty(sizes, data_type, like)`` returns, each time anew."""
    empty = functools.partial(np.empty, tuple(sizes), data_type.numpy_dtype)
    return lambda like: empty()


def asarray(value, data_type: DataType, like=None) -> np.ndarray:
    return np.asarray(value, dtype=data_type.numpy_dtype)


def contiguous(array: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(array)


def assign(target: np.ndarray, source: np.ndarray) -> None:
    target[...] = source
