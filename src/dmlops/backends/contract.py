"""What a backend module provides, as Protocols: a module that has these functions is a backend
(``dmlops.backends.cpu``, ``dmlops.backends.cuda``). Arrays are the backend's own kind (NumPy arrays, torch
tensors); sizes and strides are in elements; every function raises dmlops.ValidationError (naming the operator and
field it is given) on what it cannot take.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from ..ops.cumulative import CumulativeOperation
from ..types import DataType, OperatorType

Array = Any


class BufferBackend(Protocol):
    """The buffer level, which the operator API (Device, CompiledOperator, the DxDispatch runner) needs: bindings are
    flat buffers of bytes, and tensors are views into them."""

    def memory(self, buffer, where: str, *, writable: bool) -> Array:
        """The bytes of a binding's buffer as a flat uint8 array that shares its memory."""

    def byte_length(self, flat: Array) -> int: ...

    def view(self, flat: Array, byte_offset: int, data_type: DataType, sizes, strides) -> Array:
        """A typed view of sizes and element strides from byte_offset of flat."""

    def restride(self, array: Array, sizes, strides) -> Array:
        """A view with other sizes and element strides from the same first element."""

    def overlaps(self, a: Array, b: Array) -> bool:
        """Whether a and b may share memory (True where it cannot tell)."""

    def same_layout(self, a: Array, b: Array) -> bool:
        """Whether a and b are the same elements in the same order: an output that is its input (in place)."""

    def persist(self, operator_type: OperatorType, field: str, array: Array) -> Array:
        """What the backend keeps for an OWNED_BY_DML tensor: a copy, in whatever layout its kernel wants, or an
        object of its own (the CUDA backend's quantized-matmul B, which carries its packing) that reads as that copy
        and that the backend's functions take wherever the array goes."""


class ArrayBackend(Protocol):
    """The array level, which the array API (dmlops.cumulative_sum, …, Dask chunks) needs."""

    def adopt(self, obj) -> tuple[Array, Callable[[Array], Any]] | None:
        """(array, restore) for an object of this backend, restore turning a result back into the caller's kind;
        None for an object that lives elsewhere."""

    def adopter(self, sample) -> Callable[[Any], Array] | None:
        """What ``adopt`` does to objects of the kind and placement of ``sample``, as one function; None where it
        takes them as they are."""

    def address(self, array: Array) -> int:
        """Where the array's first element lies."""

    def element_strides(self, array: Array) -> tuple[int, ...]: ...

    def data_type(self, array: Array) -> DataType: ...

    def empty(self, sizes, data_type: DataType, like=None) -> Array: ...

    def allocator(self, sizes, data_type: DataType, like=None) -> Callable[[Array], Array]:
        """``allocate(like)``: what ``empty(sizes, data_type, like)`` returns, each time anew, for a ``like`` of the
        same layout as this one (a plan's output)."""

    def asarray(self, value, data_type: DataType, like=None) -> Array:
        """value (a number, a sequence, an array) as an array of data_type where ``like`` lies."""

    def contiguous(self, array: Array) -> Array: ...

    def assign(self, target: Array, source: Array) -> None: ...

    def restride(self, array: Array, sizes, strides) -> Array: ...


class OperatorBackend(Protocol):
    """The operators, on the backend's arrays (the desc's layouts already applied: see dmlops.ops.*)."""

    def cumulative(self, operation: CumulativeOperation, x: Array, out: Array, axis: int, reverse: bool,
                   exclusive: bool) -> None:
        """out = the running sum or product of x along axis (dmlops.ops.cumulative.reference); out may be x."""

    def prepare_cumulative(self, operation: CumulativeOperation, x: Array, out: Array, axis: int, reverse: bool,
                           exclusive: bool) -> Callable[[Array, Array], None]:
        """Run ``cumulative``, and return run(x, out) for arrays of the same layouts."""

    def quantized_linear_matmul(self, a, a_scale, a_zero_point, b, b_scale, b_zero_point, output_scale,
                                output_zero_point, out) -> None:
        """The quantized matmul on the layouts of dmlops.ops.quantized_matmul.kernel_layouts."""

    def prepare_quantized_linear_matmul(self, views: dict, kernel_tensors: Callable[[dict], dict]
                                        ) -> Callable[[dict], None]:
        """Run on views (by field, in binding order), and return run(views) for views of the same layouts; the
        kernel takes ``kernel_tensors(views)``."""

    def linear_recurrence(self, a: Array, b: Array, scale: Array, out: Array, axis: int, reverse: bool,
                          exclusive: bool) -> None:
        """out = scale ⊙ R, the cumulative product's gradient recurrence (dmlops.ops.cumulative_gradient)."""


class Backend(BufferBackend, ArrayBackend, OperatorBackend, Protocol):
    """All three levels: what ``dmlops.device.load_backend`` returns."""
