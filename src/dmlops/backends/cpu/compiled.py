"""What the CPU backend's compiled loops share (numba installed): their loading in the background, the processor
they are compiled for, calls that skip numba's dispatcher, and the views that kept runs make of each call's arrays."""

from __future__ import annotations

import contextlib
import gc
import itertools
import math
import os
import threading

import numpy as np

from .processor import target_features  # noqa: F401  (its home was here; callers may still ask here)

# The alignment of the arrays that compiled code makes (``jit.new_array``) and of scratch memory (``in_one_block``),
# in bytes: a cache line, as AMX's tile loads and stores and 512-bit vectors want them (a tile kernel ran at a third
# of its speed with its operands 32 bytes off a line; numba's arrays are 32-byte aligned)
ALIGNMENT = 64

# What is done with numba (DMLOPS_NUMBA): "background" (the default): the first call that could run compiled loops
# starts loading them in a daemon thread and runs NumPy's engine, as do later calls until they are loaded (numba's
# import and its compiler's first load take about half a second, ten times a first call's budget; both engines give
# the same bits); "wait": that first call loads them and waits; "off": never (NumPy alone).
NUMBA = os.environ.get("DMLOPS_NUMBA", "background")


# Held while a loader imports its loops: numba imported by two threads at once can hand one of them its modules half
# initialised (Python's import locks break the cycle so), and that loader would fail.
_IMPORTING = threading.Lock()


class Loader:
    """A module of compiled loops (it imports numba), loaded once a process as DMLOPS_NUMBA says, then
    ``warm_up(module)`` run (numba's first load of compiled code from its cache initialises its compiler, most of
    that load's time: better in the loading thread than in a call)."""

    def __init__(self, import_loops, warm_up):
        self.import_loops, self.warm_up = import_loops, warm_up
        self.module = None  # set once loaded and warmed up
        self.done = threading.Event()
        self.lock = threading.Lock()
        self.started = False
        self.callbacks = []
        if hasattr(os, "register_at_fork"):
            os.register_at_fork(after_in_child=self.stop_in_child)

    def get(self):
        """The module if it is loaded, else None (its loading started: in the background, or now with "wait")."""
        if self.module is None and not self.done.is_set():
            if NUMBA == "wait":
                return self.wait()
            self.start()
        return self.module

    def wait(self):
        """The module, loaded now if it is not yet (None without numba, or with DMLOPS_NUMBA=off)."""
        if not self.done.is_set():
            self.start()
            self.done.wait()
        return self.module

    def when_loaded(self, callback) -> None:
        """Call ``callback()`` once the module is loaded (in the loading thread)."""
        self.callbacks.append(callback)

    def start(self) -> None:
        with self.lock:
            if self.started:
                return
            self.started = True
        if NUMBA == "off":
            self.done.set()
        else:  # a daemon: interpreter exit does not wait for it
            threading.Thread(target=self.load, name="dmlops loader of compiled loops", daemon=True).start()

    def stop_in_child(self) -> None:
        """In a child forked while the loading thread ran: that thread is not in the child, and numba may be half
        imported there (its import lock held by the thread gone), so the child stays on NumPy's engine."""
        self.lock = threading.Lock()
        if self.started and not self.done.is_set():
            self.done.set()

    def load(self) -> None:
        try:
            with _IMPORTING:
                module = self.import_loops()
            self.warm_up(module)
            self.module = module
            for callback in self.callbacks:
                callback()
        except ImportError:  # NumPy alone is enough; numba only makes it faster
            pass
        finally:
            self.done.set()


# Entry points of compiled kernels by their arguments' types: finding them through numba's dispatcher at every call
# costs more than a small scan.
ENTRY_POINTS: dict = {}


def call(kernel, *args, any_layout: tuple = (), read_only: tuple = ()):
    """kernel(*args) through the entry point compiled for the arguments' numba types, strings as literals (those at
    the positions ``any_layout`` names typed as of any layout, and those ``read_only`` names as read-only:
    ``entry_point``)."""
    return entry_point(kernel, *args, any_layout=any_layout, read_only=read_only)(*args)


def entry_point(kernel, *args, any_layout: tuple = (), read_only: tuple = ()):
    """The kernel compiled for the arguments' numba types (strings as literals): a function that takes arguments of
    those types only, and does not check them (a kept run resolves it once for the layouts it was made for). The
    arrays at the positions ``any_layout`` names (or in a tuple there) are typed as of any layout ("A"), so that
    one variant serves every layout: for a large kernel, whose every variant takes a second or two to compile.
    Fortran-ordered arrays are typed so everywhere: the loops walk their last axis innermost, which such an array's
    order does not make contiguous, and a variant of their own would only cost its compile.
    Those at the positions ``read_only`` names are typed as read-only, so that one variant serves writable and
    read-only arrays alike (numba's read-only arrays differ only in what its type checks allow: the kernel reads
    them)."""
    key = (kernel, any_layout, read_only, *map(argument_key, args))
    entry = ENTRY_POINTS.get(key)
    if entry is None:
        import numba

        def numba_type(arg, any_layout, read_only):
            if isinstance(arg, str):
                return numba.types.literal(arg)
            if isinstance(arg, tuple):
                return numba.types.BaseTuple.from_types([numba_type(item, any_layout, read_only) for item in arg])
            kind = numba.typeof(arg)
            if isinstance(kind, numba.types.Array):
                kind = kind.copy(layout="A" if any_layout or kind.layout == "F" else kind.layout,
                                 readonly=read_only or not kind.mutable)
            return kind

        signature = tuple(numba_type(arg, position in any_layout, position in read_only)
                          for position, arg in enumerate(args))
        with fewer_full_collections():
            entry = ENTRY_POINTS[key] = kernel.compile(signature)
        COMPILED_FROM[entry] = kernel, signature
    return entry


# The function and the argument types of each entry point (``native_address``).
COMPILED_FROM: dict = {}


def native_address(entry) -> int:
    """The address of an entry point's machine code, which takes numba's calling convention
    (``atomics.calls_on_threads`` calls it)."""
    kernel, signature = COMPILED_FROM[entry]
    result = kernel.overloads[signature]
    return result.library.get_pointer_to_function(result.fndesc.llvm_func_name)


# Held while numba compiles an entry point (it compiles one function at a time anyway), so that the collector's
# thresholds are set and restored by one thread at a time (``fewer_full_collections``).
COMPILING = threading.RLock()


@contextlib.contextmanager
def fewer_full_collections():
    """Python's collector's full collections put off meanwhile (its younger generations still collected). numba's
    compiling makes some hundred thousand objects, enough to set off full collections, each of which walks every
    object of the process: a first product spent 0.19 of its 3.3 CPU-seconds in four of them (Zen 4)."""
    with COMPILING:
        thresholds = gc.get_threshold()
        gc.set_threshold(*thresholds[:2], 1 << 30)
        try:
            yield
        finally:
            gc.set_threshold(*thresholds)


class KeptCalls:
    """call(kernel, *args) as ``call`` makes it, through the entry point found at the kernel's first call and kept,
    for the calls of one kept run: from one run to the next, and within one, each kernel takes arguments of the
    same types (arrays of the same dtypes, ranks, layouts and alignment), which are not looked at again. Pieces of
    work are then given as whole arrays and ranges: a slice of one row is contiguous where a slice of two may not
    be, and a loop compiled for contiguous arrays would read the other wrongly."""

    def __init__(self):
        self.entries = {}

    def __call__(self, kernel, *args, read_only: tuple = ()):
        return self.entry(kernel, *args, read_only=read_only)(*args)

    def entry(self, kernel, *args, any_layout: tuple = (), read_only: tuple = ()):
        """The entry point that call(kernel, *args) goes through (``entry_point``'s)."""
        entry = self.entries.get(kernel)
        if entry is None:
            entry = self.entries[kernel] = entry_point(kernel, *args, any_layout=any_layout, read_only=read_only)
        return entry


def argument_key(arg):
    """What numba's type of arg depends on, cheaply: an array's dtype, rank, layout, writability and alignment; a
    number's type; a string itself; a tuple's elements' keys."""
    if isinstance(arg, np.ndarray):
        flags = arg.flags
        return arg.dtype, arg.ndim, flags.c_contiguous, flags.f_contiguous, flags.writeable, flags.aligned
    if isinstance(arg, tuple):
        return tuple(map(argument_key, arg))
    return type(arg) if isinstance(arg, np.generic | bool | int | float) else arg


def read_only(array: np.ndarray) -> np.ndarray:
    """A read-only view of array."""
    view = array.view()
    view.flags.writeable = False
    return view


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


def in_one_block(layouts):
    """Empty arrays of the given (shape, dtype), each ALIGNMENT-byte aligned, in one allocation. Made in one piece, the
    scratch memory of a call goes back to the allocator in one piece, which hands it out again to the next call:
    separate arrays of a few MiB go back to the system instead, and the next call's first touch of fresh pages
    costs as much as a 512³ GEMM."""
    sizes = [math.prod(shape) * np.dtype(dtype).itemsize for shape, dtype in layouts]
    rounded = (-(-size // ALIGNMENT) * ALIGNMENT for size in sizes)
    starts = list(itertools.accumulate(rounded, initial=0))
    memory = np.empty(starts[-1] + ALIGNMENT, np.uint8)
    base = -memory.ctypes.data % ALIGNMENT
    return tuple(memory[base + start:base + start + size].view(dtype).reshape(shape)
                 for start, size, (shape, dtype) in zip(starts, sizes, layouts))
