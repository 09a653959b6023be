"""The NumPy backend: buffers are NumPy arrays; the default, with nothing else to install."""

from __future__ import annotations

import functools
import importlib.util

import numpy as np

from ...core import plans
from ...core.registry import Backend, ran
from ...types import DataType, OperatorType, ValidationError, no_data_type
from . import qmatmul, scan
from .compiled import viewer

MATRICES = ("a_tensor", "b_tensor", "output_tensor")  # the quantized matmul's (its other fields: parameters)

# recurrence is imported by its operator's first call: it loads numba as it is imported, where the scans and the
# quantized matmul load their compiled code in the background (compiled.Loader), so that a first call does not wait
# for it. Plans lowered to NumPy's engine meanwhile are lowered again once it is loaded.
for _loader in (scan.LOOPS, qmatmul.LOOPS):
    _loader.when_loaded(plans.forget)


class CpuBackend(Backend):
    """NumPy arrays; CPU torch tensors and host DLPack arrays are read as NumPy arrays."""

    # -- buffers ---------------------------------------------------------------------------------------------

    def memory(self, buffer, where: str, *, writable: bool) -> np.ndarray:
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
                raise ValidationError(f"{where}: a {type(buffer).__name__} must be C-contiguous to be read as "
                                      f"bytes ({error})") from None
        if writable and not flat.flags.writeable:
            raise ValidationError(f"{where}: the output buffer is read-only")
        return flat

    def byte_length(self, flat: np.ndarray) -> int:
        return flat.nbytes

    def view(self, flat: np.ndarray, byte_offset: int, data_type: DataType, sizes, strides) -> np.ndarray:
        dtype = data_type.numpy_dtype
        return np.ndarray(sizes, dtype, buffer=flat, offset=byte_offset,
                          strides=[s * dtype.itemsize for s in strides])

    def restride(self, array: np.ndarray, sizes, strides) -> np.ndarray:
        """A view with other sizes and element strides from the same first element, within the array's memory."""
        return restride(array, sizes, strides)

    def overlaps(self, a: np.ndarray, b: np.ndarray) -> bool:
        try:
            return bool(np.shares_memory(a, b, max_work=1 << 20))
        except np.exceptions.TooHardError:
            return True

    def same_layout(self, a: np.ndarray, b: np.ndarray) -> bool:
        return (self.address(a), a.shape, a.strides) == (self.address(b), b.shape, b.strides)

    def persist(self, operator_type, field: str, array: np.ndarray) -> np.ndarray:
        """The copy kept for an OWNED_BY_DML tensor; the quantized matmul's B is packed once for the products that
        read it (``qmatmul.persist_b``)."""
        if operator_type is OperatorType.QUANTIZED_LINEAR_MATRIX_MULTIPLY and field == "b_tensor":
            return qmatmul.persist_b(array)
        return array.copy()

    # -- arrays ----------------------------------------------------------------------------------------------

    def adopt(self, obj):
        """(NumPy array, restore) for an object of this backend: NumPy arrays, CPU torch tensors, numbers, lists.
        ``restore`` turns a result back into the caller's kind of array. None if the object belongs elsewhere."""
        if isinstance(obj, np.ndarray):
            return obj, _same
        if plans.is_torch_tensor(obj):
            if obj.device.type != "cpu":
                return None
            try:
                return _torch_numpy(obj), _torch_from_numpy
            except TypeError:  # a dtype NumPy lacks (bfloat16, say)
                raise no_data_type(f"torch dtype {obj.dtype}") from None
        if hasattr(obj, "__dlpack_device__"):
            if obj.__dlpack_device__()[0] != 1:  # kDLCPU
                return None
            return np.from_dlpack(obj), _same
        return np.asarray(obj), _same

    def adopter(self, sample):
        """None for NumPy arrays (taken as they are); torch tensors are read as NumPy arrays."""
        return None if isinstance(sample, np.ndarray) else _torch_numpy

    def address(self, array: np.ndarray) -> int:
        return array.__array_interface__["data"][0]

    def element_strides(self, array: np.ndarray):
        """Strides in elements, or None where DirectML strides cannot say them (negative or not whole elements)."""
        if any(s < 0 or s % array.itemsize for s in array.strides):
            return None
        return tuple(s // array.itemsize for s in array.strides)

    def data_type(self, array: np.ndarray) -> DataType:
        return _data_type_of(array.dtype)

    def empty(self, sizes, data_type: DataType, like=None) -> np.ndarray:
        return np.empty(sizes, data_type.numpy_dtype)

    def allocator(self, sizes, data_type: DataType, like=None):
        empty = functools.partial(np.empty, tuple(sizes), data_type.numpy_dtype)
        return lambda like: empty()

    def asarray(self, value, data_type: DataType, like=None) -> np.ndarray:
        return np.asarray(value, dtype=data_type.numpy_dtype)

    def contiguous(self, array: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(array)

    def assign(self, target: np.ndarray, source: np.ndarray) -> None:
        target[...] = source

    # -- the host --------------------------------------------------------------------------------------------

    def from_host(self, host, like=None) -> np.ndarray:
        return host

    def to_host(self, array: np.ndarray) -> np.ndarray:
        return array

    def load_compiled_code(self) -> None:
        scan.LOOPS.wait()
        qmatmul.LOOPS.wait()

    def description(self) -> str:
        """Its engines: NumPy, and numba's compiled loops where numba is installed."""
        return "NumPy" + (", numba" if importlib.util.find_spec("numba") else "")

    # -- lowerings -------------------------------------------------------------------------------------------

    def prepare_cumulative(self, operation, x, out, axis: int, reverse: bool, exclusive: bool):
        # (the scans take the operation's word)
        return ran(scan.prepare(operation.value, x, out, axis, reverse, exclusive), x, out)

    def prepare_linear_recurrence(self, a, b, scale, out, axis: int, reverse: bool, exclusive: bool):
        from . import recurrence

        return ran(functools.partial(recurrence.linear_recurrence, axis=axis, reverse=reverse, exclusive=exclusive),
                   a, b, scale, out)

    def prepare_quantized_linear_matmul(self, views: dict, layouts: dict):
        """A product of one packed matrix is handed to ``qmatmul.prepare_one_call`` as its arrays are bound (A, B and
        the output as views that drop their dimensions of 1), which takes it where its parameters allow (A's and the
        output's per tensor). Other products take views in the kernel layouts."""
        tensors = {field: None if view is None else restride(view, *layouts[field]) for field, view in views.items()}
        # one compiled call a thread for one packed matrix: the products whose call costs matter; a strided output
        # would compile a function of its own
        simple = tensors["output_tensor"].shape[:2] == (1, 1) and \
            all(tensors[field][0, 0].flags.c_contiguous for field in MATRICES)
        readers = [matrix if field in MATRICES else _same for field in views]
        product = qmatmul.prepare_one_call(*[read(view) for view, read in zip(views.values(), readers)]) \
            if simple else None
        if product is not None:
            def run(*arrays):
                product(*[read(array) for array, read in zip(arrays, readers)])

            return ran(run, *views.values())
        arrays = list(tensors.values())
        run_kernel = qmatmul.prepare(*arrays)
        qmatmul.check_scales(arrays[1], arrays[4], arrays[6])  # a_scale, b_scale, output_scale
        run_kernel(*arrays)
        ordered = [layouts.get(field) for field in views]
        kernel_views = None  # how each call's arrays are viewed in the kernel layouts: found at the first call
        # (the plan that calls it gives arrays of one layout, the desc's or the caller's own)

        def run(*arrays):
            nonlocal kernel_views
            if kernel_views is None:
                kernel_views = [None if array is None else viewer(array, restride(array, *layout))
                                for array, layout in zip(arrays, ordered)]
            arrays = [None if view is None else view(array) for array, view in zip(arrays, kernel_views)]
            qmatmul.check_scales(arrays[1], arrays[4], arrays[6])  # a_scale, b_scale, output_scale
            run_kernel(*arrays)

        return run


def restride(array: np.ndarray, sizes, strides) -> np.ndarray:
    byte_strides = [s * array.itemsize for s in strides]
    if array.flags.c_contiguous:  # its memory is one buffer from the first element: a view checked against it,
        return np.ndarray(sizes, array.dtype, buffer=array, strides=byte_strides)  # in a fifth of as_strided's time
    return np.lib.stride_tricks.as_strided(array, sizes, byte_strides, writeable=array.flags.writeable)


def matrix(array: np.ndarray) -> np.ndarray:
    """A {1, …, 1, rows, columns} as {rows, columns} (a view: dropping dimensions of 1 never copies)."""
    return array if array.ndim == 2 else array.reshape(array.shape[-2:])


def _same(array):
    return array


def _torch_numpy(tensor) -> np.ndarray:
    return tensor.detach().numpy()


def _torch_from_numpy(array):
    import torch  # (only for torch tensors given, so torch is imported)

    return torch.from_numpy(array)


# An array API call asks for the data type of each of its arrays, some more than once: kept by dtype.
_data_type_of = functools.lru_cache(maxsize=64)(DataType.from_numpy)

BACKEND = CpuBackend()
