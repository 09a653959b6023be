"""What the CPU backend's compiled loops share (numba installed): the processor they are compiled for, calls that
skip numba's dispatcher, and the views that kept runs make of each call's arrays."""

from __future__ import annotations

import numpy as np

try:
    import numba
    from numba.core import types
    from numba.extending import overload
except ImportError:  # NumPy alone is enough; numba only makes it faster
    numba = None


def target_features() -> set[str]:
    """The features of the processor numba compiles for, as LLVM names them ("avx2", "avx512vnni", ...): the host's,
    or those NUMBA_CPU_FEATURES names."""
    from numba.core import codegen, config

    features = config.CPU_FEATURES if config.CPU_FEATURES is not None else codegen.get_host_cpu_features()
    return {feature[1:] for feature in features.split(",") if feature.startswith("+")}


# Entry points of compiled kernels by their arguments' types: finding them through numba's dispatcher at every call
# costs more than a small scan.
ENTRY_POINTS: dict = {}


def call(kernel, *args):
    """kernel(*args) through the entry point compiled for the arguments' numba types, strings as literals."""
    return entry_point(kernel, *args)(*args)


def entry_point(kernel, *args):
    """The kernel compiled for the arguments' numba types (strings as literals): a function that takes arguments of
    those types only, and does not check them (a kept run resolves it once for the layouts it was made for)."""
    key = (kernel, *map(argument_key, args))
    entry = ENTRY_POINTS.get(key)
    if entry is None:
        entry = ENTRY_POINTS[key] = kernel.compile(tuple(numba.types.literal(arg) if isinstance(arg, str)
                                                         else numba.typeof(arg) for arg in args))
    return entry


class KeptCalls:
    """call(kernel, *args) as ``call`` makes it, through the entry point found at the kernel's first call and kept,
    for the calls of one kept run: from one run to the next, and within one, each kernel takes arguments of the
    same types (arrays of the same dtypes, ranks, layouts and alignment), which are not looked at again. Pieces of
    work are then given as whole arrays and ranges: a slice of one row is contiguous where a slice of two may not
    be, and a loop compiled for contiguous arrays would read the other wrongly."""

    def __init__(self):
        self.entries = {}

    def __call__(self, kernel, *args):
        entry = self.entries.get(kernel)
        if entry is None:
            entry = self.entries[kernel] = entry_point(kernel, *args)
        return entry(*args)


def argument_key(arg):
    """What numba's type of arg depends on, cheaply: an array's dtype, rank, layout, writability and alignment; a
    number's type; a string itself; a tuple's elements' keys."""
    if isinstance(arg, np.ndarray):
        flags = arg.flags
        return arg.dtype, arg.ndim, flags.c_contiguous, flags.f_contiguous, flags.writeable, flags.aligned
    if isinstance(arg, tuple):
        return tuple(map(argument_key, arg))
    return type(arg) if isinstance(arg, np.generic | bool | int | float) else arg


def viewer(sample: np.ndarray, view: np.ndarray):
    """A function that makes, of any array laid out as ``sample`` (dtype, shape, strides, contiguity), the view
    that ``view`` is of sample: the same dtype, shape, strides and offset from the first element. The cheapest way
    that gives them is found once: a reshape, a view of a contiguous array's buffer, else through the strides."""
    offset = view.__array_interface__["data"][0] - sample.__array_interface__["data"][0]
    dtype, shape, strides = view.dtype, view.shape, view.strides
    if offset == 0 and dtype == sample.dtype and shape == sample.shape and strides == sample.strides:
        return same
    if offset == 0 and dtype == sample.dtype:
        try:
            reshaped = sample.reshape(shape, copy=False)
        except ValueError:  # not a view: it would copy
            reshaped = None
        if reshaped is not None and reshaped.strides == strides:
            return lambda array: array.reshape(shape)
    if sample.flags.c_contiguous:  # its buffer is its memory from the first element on (checked against it)
        return lambda array: np.ndarray(shape, dtype, buffer=array, offset=offset, strides=strides)

    def strided(array):
        interface = array.__array_interface__
        address, read_only = interface["data"]
        interface = {"version": 3, "data": (address + offset, read_only), "shape": shape, "strides": strides,
                     "typestr": dtype.str}
        return np.asarray(Memory(interface, array))
    return strided


def same(array):
    return array


class Memory:
    """What NumPy reads an array from (its array interface), holding the array whose memory that is."""

    def __init__(self, interface: dict, base):
        self.__array_interface__, self.base = interface, base


def as_vector(value, length, dtype):
    """(Compiled code only.) A parameter given as a vector, a number (one value for every element) or None (0), as a
    new contiguous vector of ``length`` elements of ``dtype``: one compiled function then serves every form."""
    raise NotImplementedError("as_vector is called from compiled code only")


if numba is not None:
    @overload(as_vector, jit_options={"nogil": True})
    def as_vector_compiled(value, length, dtype):
        if isinstance(value, types.NoneType):
            return lambda value, length, dtype: np.zeros(length, dtype)
        if isinstance(value, types.Number):
            return lambda value, length, dtype: np.full(length, value, dtype)
        if isinstance(value, types.Array) and value.ndim == 1:
            return lambda value, length, dtype: value.astype(dtype)
        return None
