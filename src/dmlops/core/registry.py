"""The backend contract and the registry of backends: which backend runs which arrays.

A backend subclasses ``Backend`` and is registered under a name with the arrays it claims (those living in its
memory). The built-in backends are registered here by the module that defines each (loaded at their first use, so
that NumPy users never import torch); any other is registered with ``register``. Arrays are the backend's own kind
(NumPy arrays, torch tensors); sizes and strides are in elements; every method raises ``ValidationError`` (naming the
operator and field it is given) on what it cannot take.
"""

from __future__ import annotations

import abc
import functools
import importlib
import importlib.util
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..ops.cumulative import CumulativeOperation
from ..types import DataType, OperatorType, ValidationError
from . import host

Array = Any


@dataclass(frozen=True)
class ComputeDevice:
    """A device that a backend runs on: what DxDispatch lists of an adapter."""

    id: str  # "cpu", "cuda:0"
    name: str  # the processor's or the GPU's model name
    backend: str  # the name of the backend that runs on it
    is_gpu: bool
    memory: int  # bytes
    index: int | None = None  # its number among its backend's devices, where the backend has several


class Backend(abc.ABC):
    """What a backend provides: buffers for the operator API, arrays for the array API, and one lowering per
    primitive (``prepare_*``: run on these arrays, and return the run for arrays of the same layouts)."""

    name: str = ""

    # -- buffers: the operator API binds flat buffers of bytes; tensors are views into them ----------------------

    @abc.abstractmethod
    def memory(self, buffer, where: str, *, writable: bool) -> Array:
        """The bytes of a binding's buffer as a flat uint8 array that shares its memory."""

    @abc.abstractmethod
    def byte_length(self, flat: Array) -> int: ...

    @abc.abstractmethod
    def view(self, flat: Array, byte_offset: int, data_type: DataType, sizes, strides) -> Array:
        """A typed view of sizes and element strides from byte_offset of flat."""

    @abc.abstractmethod
    def overlaps(self, a: Array, b: Array) -> bool:
        """Whether a and b may share memory (True where it cannot tell)."""

    @abc.abstractmethod
    def same_layout(self, a: Array, b: Array) -> bool:
        """Whether a and b are the same elements in the same order: an output that is its input (in place)."""

    @abc.abstractmethod
    def persist(self, operator_type: OperatorType, field: str, array: Array) -> Array:
        """What the backend keeps for an OWNED_BY_DML tensor: a copy, in whatever layout its kernel wants, or an
        object of its own that reads as that copy and that its methods take wherever the array goes."""

    # -- arrays of the array API -------------------------------------------------------------------------------

    @abc.abstractmethod
    def adopt(self, obj) -> tuple[Array, Callable[[Array], Any]] | None:
        """(array, restore) for an object of this backend, restore turning a result back into the caller's kind;
        None for an object that lives elsewhere."""

    def adopter(self, sample) -> Callable[[Any], Array] | None:
        """What ``adopt`` does to objects of the kind and placement of ``sample``, as one function; None where it
        takes them as they are."""
        return None

    @abc.abstractmethod
    def address(self, array: Array) -> int:
        """Where the array's first element lies."""

    @abc.abstractmethod
    def element_strides(self, array: Array) -> tuple[int, ...] | None:
        """Strides in elements, or None where DirectML strides cannot say them."""

    @abc.abstractmethod
    def data_type(self, array: Array) -> DataType: ...

    @abc.abstractmethod
    def empty(self, sizes, data_type: DataType, like=None) -> Array: ...

    def allocator(self, sizes, data_type: DataType, like=None) -> Callable[[Array], Array]:
        """``allocate(like)``: what ``empty(sizes, data_type, like)`` returns, each time anew, for a ``like`` of the
        same layout as this one (a plan's output)."""
        return lambda like: self.empty(sizes, data_type, like)

    @abc.abstractmethod
    def asarray(self, value, data_type: DataType, like=None) -> Array:
        """value (a number, a sequence, an array) as an array of data_type where ``like`` lies."""

    @abc.abstractmethod
    def contiguous(self, array: Array) -> Array: ...

    @abc.abstractmethod
    def assign(self, target: Array, source: Array) -> None: ...

    @abc.abstractmethod
    def restride(self, array: Array, sizes, strides) -> Array:
        """A view with other sizes and element strides from the same first element."""

    # -- the host: DxDispatch's resources, timing, errors found on the device -----------------------------------

    @abc.abstractmethod
    def from_host(self, host, like=None) -> Array:
        """A NumPy array's copy in this backend's memory (where ``like`` lies, if given)."""

    @abc.abstractmethod
    def to_host(self, array: Array):
        """The array as a NumPy array (a copy where it lives elsewhere)."""

    def synchronize(self) -> None:
        """Wait for the work handed to the device."""

    def check_errors(self) -> None:
        """Raise the ValidationError of values that calls found bad on the device since the last check."""

    def load_compiled_code(self) -> None:
        """Load the compiled engines now and wait for them, so that timings measure them."""

    def timing_events(self) -> Callable[[], tuple[Any, Any]] | None:
        """A function that makes a (start, end) pair of events that time the device's work (``record()`` each,
        then ``start.elapsed_time(end)`` in milliseconds); None where the device has no clock of its own."""
        return None

    # -- where it runs: DxDispatch's adapters, ``dmlops --version`` ---------------------------------------------

    def devices(self) -> list[ComputeDevice]:
        """The devices this backend runs on here, the one it uses unless told first; by default the host's
        processor."""
        return [ComputeDevice(self.name, host.cpu_name(), self.name, False, host.system_memory())]

    def device(self) -> ComputeDevice:
        """Where this backend runs when no device is picked: its first device; a ValidationError that says why
        where it cannot run here."""
        found = self.devices()
        if not found:
            raise ValidationError(f"the {self.name} backend runs on no device here")
        return found[0]

    def use(self, device: ComputeDevice) -> None:
        """Make ``device`` (one of ``devices()``) the one that this backend's next buffers and calls use."""

    def description(self) -> str:
        """One line: what this backend runs on here, or "cannot run: " and why."""
        return ", ".join(device.name for device in self.devices()) or "cannot run: it sees no device here"

    # -- lowerings: one per primitive ---------------------------------------------------------------------------

    @abc.abstractmethod
    def prepare_cumulative(self, operation: CumulativeOperation, x: Array, out: Array, axis: int, reverse: bool,
                           exclusive: bool) -> Callable[[Array, Array], None]:
        """out = the running sum or product of x along axis (``ops.cumulative.reference``; out may be x), now;
        returns run(x, out) for arrays of the same layouts."""

    @abc.abstractmethod
    def prepare_quantized_linear_matmul(self, views: dict, layouts: dict) -> Callable[..., None]:
        """The quantized matmul on ``views`` (by field, in binding order, as the desc lays them out), now, reading
        each in its kernel layout ``layouts[field]`` = (sizes, element strides) from its first element
        (``core.lowering.kernel_layouts``: A, B and the output 4-D, scales and zero points vectors of M or N);
        returns run(*arrays) (binding order, None for an absent input) for arrays of the same layouts. The backend
        checks the scales' values."""

    @abc.abstractmethod
    def prepare_linear_recurrence(self, a: Array, b: Array, scale: Array, out: Array, axis: int, reverse: bool,
                                  exclusive: bool) -> Callable[[Array, Array, Array, Array], None]:
        """out = scale ⊙ R, the cumulative product's gradient recurrence (``ops.cumulative_gradient``), now;
        returns run(a, b, scale, out) for arrays of the same layouts."""


def ran(run, *arrays):
    """``run``, once run on ``arrays``: what a lowering that decides nothing ahead returns."""
    run(*arrays)
    return run


# -- the registry --------------------------------------------------------------------------------------------


@dataclass
class Registration:
    name: str
    claims: Callable[[Any], bool]  # whether an array lives in this backend's memory (cheap: nothing is imported)
    load: Callable[[], Backend]
    summary: str = ""  # what it runs with, in a few words (``dmlops dispatch --help``)
    requires: tuple[str, ...] = ()  # the modules it imports, found without importing them
    hint: str = ""  # why it cannot load where they are missing, and what to install


def _claims_host(value) -> bool:
    return True


_CUDA_DLPACK_DEVICES = (2, 3, 13)  # kDLCUDA, kDLCUDAHost, kDLCUDAManaged


def _claims_cuda(value) -> bool:
    """A CUDA array: a torch tensor on a CUDA device, or a DLPack array on one (CuPy, JAX)."""
    if getattr(getattr(value, "device", None), "type", None) == "cuda":
        return True
    device = getattr(value, "__dlpack_device__", None)
    return device is not None and not isinstance(value, type) and device()[0] in _CUDA_DLPACK_DEVICES


def _builtin(module: str) -> Callable[[], Backend]:
    return lambda: importlib.import_module(module).BACKEND


# dmlops's own, in the order a call's arrays are offered to them: the default (the host) last.
_BUILT_IN = {
    "cuda": Registration("cuda", _claims_cuda, _builtin("dmlops.backends.cuda"), "Triton kernels on an NVIDIA GPU",
                         ("torch", "triton"),
                         "PyTorch and Triton are not both installed (in dmlops' folder: pip install '.[cuda]')"),
    "cpu": Registration("cpu", _claims_host, _builtin("dmlops.backends.cpu"), "NumPy and numba"),
}
_registrations: dict[str, Registration] = dict(_BUILT_IN)
_loaded: dict[str, Backend] = {}
_lock = threading.Lock()


def register(name: str, load: Callable[[], Backend], claims: Callable[[Any], bool] = lambda value: False) -> None:
    """Register a backend: ``load()`` makes it at its first use; ``claims(array)`` says whether an array lives in
    its memory (then calls on such arrays run there; a registration made later is asked first)."""
    with _lock:
        _registrations.pop(name, None)
        _loaded.pop(name, None)
        ordered = {name: Registration(name, claims, load)} | _registrations
        _registrations.clear()
        _registrations.update(ordered)
    _names.cache_clear()


def unregister(name: str) -> None:
    with _lock:
        _registrations.pop(name, None)
        _loaded.pop(name, None)
    _names.cache_clear()


@functools.cache
def _names() -> tuple[str, ...]:
    return tuple(_registrations)


def names() -> tuple[str, ...]:
    """The registered backends' names."""
    return _names()


def default() -> str:
    """The name of the backend that runs what no other claims (the host's)."""
    return next(reversed(_registrations))


def built_in() -> tuple[str, ...]:
    """The names of dmlops's own backends (what the command line lists), the default first."""
    return tuple(name for name in reversed(_BUILT_IN) if _registrations.get(name) is _BUILT_IN[name])


def summary(name: str) -> str:
    """What the backend runs with, in a few words, from its registration (nothing is loaded)."""
    return _registrations[name].summary


def installed(name: str) -> bool:
    """Whether the modules that the backend imports are installed (found, not imported)."""
    return all(importlib.util.find_spec(module) for module in _registrations[name].requires)


def describe(name: str) -> str:
    """One line: what the backend runs on here, or "cannot run: " and why; what it needs that is not installed is
    said from its registration, without importing anything."""
    if not installed(name):
        return f"cannot run: {_registrations[name].hint}"
    try:
        return backend(name).description()
    except ValidationError as error:
        return f"cannot run: {error}"


def backend(name: str) -> Backend:
    """The backend registered under ``name``, loaded at its first use."""
    found = _loaded.get(name)
    if found is not None:
        return found
    registration = _registrations.get(name) if isinstance(name, str) else None
    if registration is None:
        raise ValidationError(f"Device.backend: {name!r} is not one of {', '.join(sorted(names()))}")
    try:
        made = registration.load()
    except ImportError as error:
        hint = f"; {registration.hint}" if registration.hint else ""
        raise ValidationError(f"Device.backend: the {name!r} backend cannot load ({error}){hint}") from None
    made.name = name
    _loaded[name] = made
    return made


def backend_for(values, name: str | None = None) -> Backend:
    """The backend named, else the first registered one that claims any of the values (the host's last)."""
    if name is not None:
        return backend(name)
    for registration in list(_registrations.values()):
        if any(value is not None and registration.claims(value) for value in values):
            return backend(registration.name)
    return backend(default())


def loaded() -> list[Backend]:
    """The backends loaded so far."""
    return list(_loaded.values())
