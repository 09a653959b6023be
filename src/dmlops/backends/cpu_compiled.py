"""What the CPU backend's compiled loops share (numba installed): the processor they are compiled for, and calls
that skip numba's dispatcher."""

from __future__ import annotations

import numpy as np

try:
    import numba
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
    key = (kernel, *map(argument_key, args))
    entry = ENTRY_POINTS.get(key)
    if entry is None:
        entry = ENTRY_POINTS[key] = kernel.compile(tuple(numba.types.literal(arg) if isinstance(arg, str)
                                                         else numba.typeof(arg) for arg in args))
    return entry(*args)


def argument_key(arg):
    """What numba's type of arg depends on, cheaply: an array's dtype, rank, layout, writability and alignment; a
    NumPy scalar's or bool's type; a string itself."""
    if isinstance(arg, np.ndarray):
        flags = arg.flags
        return arg.dtype, arg.ndim, flags.c_contiguous, flags.f_contiguous, flags.writeable, flags.aligned
    return type(arg) if isinstance(arg, np.generic | bool | int) else arg
