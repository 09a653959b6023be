"""Kernel launches kept for repeated calls, the memory they keep, and the one place where dmlops reaches into
Triton's and torch's private internals.

A Triton launch through ``kernel[grid](...)`` binds and specializes its arguments and looks the compiled kernel up
again at every call: 10–20 µs of host time, more than most small kernels run. A call whose argument layout repeats
(the array API's plans) launches the same compiled kernels with the same grids, scalars and constants, on tensors of
the same dtypes and 16-byte alignment: their specialization cannot change. ``KeptLaunch`` runs the first launch
through Triton, keeps the compiled kernel, and then calls its launcher directly; where the kernel's parameters are
pointers and numbers, through dmlops' own launcher (launcher.c), which takes them as bytes packed once and only
the call's addresses from Python.

The private internals (torch's raw stream queries, a compiled Triton kernel's launcher, Triton's build of C
modules) are used only with the Triton and torch versions they were written against (``PRIVATE``); with others, or
with DMLOPS_PUBLIC_LAUNCH=1, kept launches go through Triton's public ``kernel[grid](...)`` and torch's public stream
queries: an upgrade costs speed, never correctness. benchmarks/RESULTS.md says what each saves.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import functools
import os
import pathlib
import struct
from collections.abc import Callable
from typing import NamedTuple

import torch
import triton

from ...tensor import packed_strides
from .common import INTERPRETED

# The versions whose internals this module was written against.
KNOWN_TRITON = ("3.6.",)
PRIVATE = not INTERPRETED and torch.backends.cuda.is_built() and triton.__version__.startswith(KNOWN_TRITON) \
    and int(torch.__version__.split(".")[0]) == 2 and os.environ.get("DMLOPS_PUBLIC_LAUNCH") != "1"

# -- torch's stream queries: the private ones take a few hundred nanoseconds, the public ones microseconds -------

if PRIVATE:
    current_device = torch._C._cuda_getDevice
    current_raw_stream = torch._C._cuda_getCurrentRawStream
    capturing = torch._C._cuda_isCurrentStreamCapturing
else:
    current_device = torch.cuda.current_device

    def current_raw_stream(index: int) -> int:
        return torch.cuda.current_stream(index).cuda_stream

    capturing = torch.cuda.is_current_stream_capturing

# -- torch's allocation for the code torch.compile generates: a packed tensor on the current device, without the
# parsing of torch.empty's arguments (a third of its time, and less than torch.empty_like's) -----------------------

_empty_strided_cuda = getattr(getattr(getattr(torch._C, "_dynamo", None), "guards", None), "_empty_strided_cuda",
                              None) if PRIVATE else None


def empty_maker(sizes: tuple, dtype, device):
    """``make()``: a new packed tensor of ``sizes`` and ``dtype`` on ``device``, at each call."""
    empty = functools.partial(torch.empty, sizes, dtype=dtype, device=device)
    if _empty_strided_cuda is None or device.type != "cuda":
        return empty
    index, strides = device.index, tuple(packed_strides(sizes))

    def make():
        return _empty_strided_cuda(sizes, strides, dtype) if current_device() == index else empty()

    return make


# -- memory that launches keep from one call to the next ----------------------------------------------------------

# torch.compile's CUDA graph trees run a graph's warm-up call with this thread's allocations routed to the graph's
# memory pool, and then require that nothing but the graph's outputs stays alive there: memory a plan or a device
# keeps (scratch words, workspaces, packed operands) is therefore allocated by a thread of its own.
_allocating_thread = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="dmlops kept memory")


def kept_empty(shape, dtype, device) -> torch.Tensor:
    """An empty tensor that launches keep across calls, from outside any CUDA graph's memory pool; during a graph
    capture, the graph's own (the graph keeps it). Its reuse once freed waits for the current stream's work."""
    if device.type != "cuda" or capturing():
        return torch.empty(shape, dtype=dtype, device=device)
    tensor = _allocating_thread.submit(torch.empty, shape, dtype=dtype, device=device).result()
    tensor.record_stream(torch.cuda.current_stream(device))
    return tensor


def kept_zeros(shape, dtype, device) -> torch.Tensor:
    """``kept_empty``, zeroed on the current stream."""
    return kept_empty(shape, dtype, device).zero_()

INTEGER_KINDS = {"i1", "i8", "i16", "i32", "i64", "u1", "u8", "u16", "u32", "u64"}
FLOAT_FORMATS = {"fp16": "<e", "fp32": "<f", "fp64": "<d"}
MAX_SLOTS, MAX_REPLACED = 64, 16  # as in launcher.c
HEAD = struct.Struct(f"<Q3I6I{MAX_REPLACED}II")  # launcher.c's Head


@functools.cache
def _launcher_module():
    """launcher.c, built once (and cached on disk) through Triton's build of its own launchers; None where it
    cannot be built here (then Triton's launcher serves)."""
    if not PRIVATE:
        return None
    try:
        from triton.backends.nvidia import driver
        from triton.runtime.build import compile_module_from_src

        source = pathlib.Path(__file__).with_name("launcher.c").read_text()
        return compile_module_from_src(source, "dmlops_launcher", library_dirs=driver.library_dirs(),
                                       include_dirs=driver.include_dirs, libraries=driver.libraries)
    except Exception:  # noqa: BLE001 (no C compiler, headers or driver library: a slower launcher, not an error)
        return None


# A host tensor descriptor's TMA element type, from the type its kernel's metadata names (as Triton's launcher maps
# them), and the fields of launcher.c's Tma record.
TMA_DATA_TYPES = dict((i, i) for i in range(16)) | {8: 10, 9: 8, 10: 9}
TMA = struct.Struct("<6I5Q4Q6I")
MAX_TMA = 4  # as in launcher.c


@dataclasses.dataclass
class Parameters:
    """A kept launch's parameters as launcher.c takes them: 8-byte slots (each parameter's value in the low bytes,
    constants left out, Triton's two scratch pointers last, then the global addresses of the tensor maps); the tensor
    maps' records; and the slot that holds each argument's address (pointers and tensor descriptors), by position."""

    slots: list
    parameter_count: int
    tensor_maps: list
    address_slots: dict


def _parameters(kinds, values, tensor_map_kinds) -> Parameters | None:
    """The kernel parameters' values for launcher.c; None where a parameter is of a kind it does not take.
    ``tensor_map_kinds``: the metadata of the kernel's tensor descriptors (Triton's ``tensordesc_meta``), each passed
    as a TMA tensor map, its shape and its strides."""
    slots, addresses, tensor_maps, address_slots = [], [], [], {}
    maps = iter(tensor_map_kinds or ())
    for position, (kind, value) in enumerate(zip(kinds, values)):
        if kind == "constexpr":
            continue
        if not isinstance(kind, str):
            return None  # a tuple of parameters
        if kind.startswith("*"):
            address_slots[position] = len(slots)
            slots.append(0 if value is None else value if isinstance(value, int) else value.data_ptr())
        elif kind in INTEGER_KINDS and isinstance(value, int):
            slots.append(value & 0xFFFF_FFFF_FFFF_FFFF)
        elif kind in FLOAT_FORMATS:
            slots.append(int.from_bytes(struct.pack(FLOAT_FORMATS[kind], value).ljust(8, b"\0"), "little"))
        elif kind.startswith("tensordesc"):
            meta = next(maps, None)
            if meta is None or meta["fp4_padded"] or not _is_descriptor(value) or value.strides[-1] != 1:
                return None
            rank, size = len(value.shape), meta["elem_size"]
            address_slots[position] = -1 - len(addresses)  # (a hidden slot, numbered once the parameters are)
            tensor_maps.append((len(slots), len(addresses), TMA_DATA_TYPES[meta["elem_type"]], rank,
                                meta["swizzle"], int(value.padding == "nan"), value.shape[::-1],
                                [stride * size for stride in value.strides[-2::-1]], meta["block_size"][::-1]))
            addresses.append(value.base.data_ptr())
            slots.append(0)  # the tensor map's parameter
            slots.extend(value.shape)  # (i32)
            slots.extend(value.strides)  # (i64)
        else:
            return None
    slots += [0, 0]
    if len(tensor_maps) > MAX_TMA:
        return None
    count = len(slots)
    address_slots = {position: slot if slot >= 0 else count - 1 - slot for position, slot in address_slots.items()}
    records = [TMA.pack(parameter, count + address, data_type, rank, swizzle, fill, *dims, *(0,) * (5 - rank),
                        *strides, *(0,) * (4 - len(strides)), *box, *(0,) * (5 - rank), 0)
               for parameter, address, data_type, rank, swizzle, fill, dims, strides, box in tensor_maps]
    return Parameters(slots + addresses, count, records, address_slots)


def kept_stream(device):
    """A function of no arguments that returns the stream launches kept now may run on again: the device's current
    stream, where it is still that of now and the thread's current device is still this one, outside a graph capture
    (the launches may then reuse the memory they were given: scratch words, workspaces and buffers of a first call,
    since launches on one stream run one after another); else None."""
    index = device.index
    stream = current_raw_stream(index)
    module = _launcher_module()
    if module is not None:  # the device and the capture asked of the driver in one call
        here = module.here

        def check():
            return stream if current_raw_stream(index) == stream and here(index, stream) else None

        return check

    def check():
        if current_device() == index and current_raw_stream(index) == stream and not capturing():
            return stream
        return None

    return check


class KeptLaunch:
    """A kernel launched now through Triton and kept: ``relaunch(args)`` launches it again with other arguments of
    the same kinds (tensors of the same dtypes and alignment, the same scalars) and the same keyword constants;
    ``rebind(positions)`` makes a faster launcher that replaces only the arguments at ``positions``."""

    def __init__(self, kernel, grid, args: tuple, kwargs: dict, zeroed: torch.Tensor | None = None):
        # zeroed: memory the launch adds into, zeroed for it by its caller (a replay zeroes it again)
        self.kernel, self.grid, self.args, self.kwargs, self.zeroed = kernel, grid, list(args), kwargs, zeroed
        compiled = kernel[grid](*args, **kwargs)
        self.compiled = compiled if PRIVATE else None  # None: relaunched through Triton's public launch
        if self.compiled is None:
            return
        # the launcher takes every parameter in the kernel's order: those past the positional ones are the keyword
        # constants and defaults
        tail = [kwargs[param.name] if param.name in kwargs else param.default for param in kernel.params[len(args):]]
        launcher = compiled.run
        # Triton's launcher object only adds scratch memory to the call, where the kernel has none: its C function
        # is called directly then
        direct = getattr(launcher, "global_scratch_size", 1) == 0 and \
            getattr(launcher, "profile_scratch_size", 1) == 0 and hasattr(launcher, "launch")
        if direct:
            self.launcher = launcher.launch
            head = (compiled.function, launcher.launch_cooperative_grid, launcher.launch_pdl, None, None,
                    compiled.packed_metadata, None, None, None)
        else:
            self.launcher = launcher
            head = (compiled.function, compiled.packed_metadata, None, None, None)
        # the launcher's arguments: grid, stream (at STREAM), head, then the kernel's (from self.first_argument)
        grid3 = (*grid, *(1,) * (3 - len(grid)))
        self.call = [*grid3, None, *head, *args, *tail]
        self.first_argument = 4 + len(head)
        # dmlops' launcher: for the plain launches (no scratch, cluster, cooperative grid or dependent launch)
        self.kinds = list(getattr(getattr(compiled, "src", None), "signature", {}).values())
        parameters = _parameters(self.kinds, [*args, *tail], getattr(compiled.metadata, "tensordesc_meta", None)) \
            if len(self.kinds) == len(self.call) - self.first_argument and direct and \
            not launcher.launch_cooperative_grid and not launcher.launch_pdl and compiled.metadata.num_ctas == 1 \
            else None
        self.parameters = None if parameters is None or len(parameters.slots) > MAX_SLOTS or \
            _launcher_module() is None else parameters
        self.shape = (compiled.function, *grid3, 32 * compiled.metadata.num_warps, compiled.metadata.shared)
        self.device = current_device()

    def release(self, positions) -> None:
        """Hold no longer the arguments at ``positions`` (the caller's tensors: a plan keeps nothing of a call's
        data); later launches give their own."""
        for position in positions:
            self.args[position] = None
            if self.compiled is not None:
                self.call[self.first_argument + position] = None

    def relaunch(self, args) -> None:
        if self.compiled is None:  # through Triton's public launch, as the first time
            self.kernel[self.grid](*args, **self.kwargs)
            return
        call = self.call.copy()
        call[STREAM] = current_raw_stream(current_device())
        call[self.first_argument:self.first_argument + len(args)] = args
        self.launcher(*call)

    def rebind(self, positions) -> Rebound:
        """This launch again with other arguments at ``positions``, the others as the first time (``Rebound``)."""
        if self.compiled is None:
            args = list(self.args)
            for position in positions:
                args[position] = None
            kernel, grid, kwargs = self.kernel, self.grid, self.kwargs

            def launch_public(stream, *values):
                call = args.copy()
                for position, value in zip(positions, values):
                    call[position] = value
                kernel[grid](*call, **kwargs)

            return Rebound(launch_public, False, False)
        parameters = self.parameters
        if parameters is not None and len(positions) <= MAX_REPLACED and \
                all(position in parameters.address_slots for position in positions):
            replaced = [parameters.address_slots[position] for position in positions]
            config = HEAD.pack(*self.shape, len(parameters.slots), parameters.parameter_count,
                               len(parameters.tensor_maps), len(replaced), *replaced,
                               *(0,) * (MAX_REPLACED - len(replaced)), self.device) + \
                struct.pack(f"<{len(parameters.slots)}Q", *parameters.slots) + b"".join(parameters.tensor_maps)
            # (stream, *addresses): ints only
            return Rebound(functools.partial(_launcher_module().launch, config), True, True)
        template, launcher = self.call.copy(), self.launcher
        indices = [self.first_argument + position for position in positions]
        for index in indices:
            template[index] = None

        def launch(stream, *values):
            call = template.copy()
            call[STREAM] = stream
            for index, value in zip(indices, values):
                call[index] = value
            launcher(*call)

        return Rebound(launch, True, False)


class Rebound(NamedTuple):
    """A kept launch made again: ``launch(stream, *values)`` with the values of the replaced arguments: a tensor's
    address where ``pointer_addresses`` (a compiled kernel reads nothing else of it), else the tensor (and the
    stream is the current one); a tensor descriptor's base's address where ``descriptor_addresses``, else the
    descriptor."""

    launch: Callable
    pointer_addresses: bool
    descriptor_addresses: bool


STREAM = 3  # the stream's place among a launcher's arguments


def launch(kept: dict | None, site: str, kernel, grid, args: tuple, kwargs: dict,
           zeroed: torch.Tensor | None = None) -> None:
    """Launch ``kernel``; where ``kept`` (a plan's launches, by site) is given, through the launch kept there.
    ``zeroed``: memory the launch adds into, zeroed for it."""
    if kept is None:
        kernel[grid](*args, **kwargs)
        return
    kept_launch = kept.get(site)
    if kept_launch is not None and (kept_launch.kernel, kept_launch.grid, kept_launch.kwargs) == (kernel, grid, kwargs):
        kept_launch.relaunch(args)
    else:  # a first launch here, or one the same layout launches otherwise (a configuration forced in a test)
        kept[site] = KeptLaunch(kernel, grid, args, kwargs, zeroed)


def _is_descriptor(arg) -> bool:
    """Whether a kernel argument is a tensor descriptor (Triton's or Gluon's: dataclasses over a ``base`` tensor)."""
    return dataclasses.is_dataclass(arg) and isinstance(getattr(arg, "base", None), torch.Tensor)


def _descriptor_maker(descriptor):
    """make(base): the descriptor over another base tensor (a maker that holds no tensor)."""
    kind = type(descriptor)
    others = {field.name: getattr(descriptor, field.name) for field in dataclasses.fields(descriptor)
              if field.init and field.name != "base"}
    return lambda base: kind(base=base, **others)


def zero(stream: int, tensor: torch.Tensor):
    """A function of no arguments that zeroes ``tensor``'s memory on ``stream`` (through dmlops' launcher where it
    is built: a memset, without Python's tensor machinery)."""
    module = _launcher_module()
    if module is None or not hasattr(module, "zero"):
        return tensor.zero_
    return functools.partial(module.zero, stream, tensor.data_ptr(), tensor.numel() * tensor.element_size())


def replay(kept: dict, sample: tuple, run_again, plan_again):
    """``run(*tensors)``: the launches of one call, kept in ``kept`` (in launch order), run again with the tensors
    of another call (in the order of ``sample``) wherever the first call's tensors (``sample``; None for none) were
    passed, and every other argument as it was (the memory the first call kept for itself is reused, memory a launch
    adds into zeroed again: launches on one stream run one after another). Used on the stream and device of the first
    call, outside graph captures (elsewhere ``run_again(*tensors)`` runs the whole launcher), for tensors that share
    an address where the first call's did: the kept launches do not say which of them an argument came from (one
    tensor given for two parameters, say). The first call whose tensors do not share so runs
    ``plan_again(*tensors)``, whose run (made from that call's own launches) takes this call's place for every later
    call. The kept launches let go of the first call's tensors."""
    positions_at = {}  # address: the first position in sample that holds it
    shared = []  # (position, the first position at its address)
    for position, tensor in enumerate(sample):
        if tensor is not None:
            first = positions_at.setdefault(tensor.data_ptr(), position)
            if first != position:
                shared.append((position, first))
    steps = []  # (rebound launch, [(position in the call's tensors, dtype, descriptor maker or None)], zeroed)
    for kept_launch in kept.values():
        positions, replaced = [], []
        for position, arg in enumerate(kept_launch.args):
            base = arg.base if _is_descriptor(arg) else arg
            if isinstance(base, torch.Tensor) and base.data_ptr() in positions_at:
                positions.append(position)
                replaced.append((positions_at[base.data_ptr()], base.dtype,
                                 _descriptor_maker(arg) if base is not arg else None))
        steps.append((kept_launch.rebind(positions), replaced, kept_launch.zeroed))
        kept_launch.release(positions)
    device = next(tensor for tensor in sample if tensor is not None).device
    on_gpu = device.type == "cuda"  # else Triton's interpreter, on CPU tensors
    here = kept_stream(device) if on_gpu else lambda: 0
    stream_of_steps = current_raw_stream(device.index) if on_gpu else 0
    launches = []  # (launch(stream, tensors, their addresses), zero memory or None)
    for (launch_again, pointer_addresses, descriptor_addresses), replaced, zeroed in steps:
        zero_memory = None if zeroed is None else zero(stream_of_steps, zeroed)
        if pointer_addresses and descriptor_addresses:  # (dmlops' launcher: addresses only)
            order = tuple(position for position, _, _ in replaced)
            launches.append((functools.partial(_launch_on_addresses, launch_again, order), zero_memory))
        else:
            launches.append((functools.partial(_launch_on_tensors, launch_again, replaced, pointer_addresses,
                                               descriptor_addresses), zero_memory))

    later = []  # the run that plan_again made, once a call's tensors did not share as the first call's

    def run(*tensors):
        if later:
            later[0](*tensors)
            return
        stream = here()
        if stream is None:
            run_again(*tensors)
            return
        addresses = [None if tensor is None else tensor.data_ptr() for tensor in tensors]  # (once for every launch)
        if shared and any(addresses[position] != addresses[first] for position, first in shared):
            later.append(plan_again(*tensors))
            return
        for launch_again, zero_memory in launches:
            if zero_memory is not None:
                zero_memory()
            launch_again(stream, tensors, addresses)

    return run


def _launch_on_addresses(launch_again, order, stream, tensors, addresses):
    launch_again(stream, *[addresses[position] for position in order])


def _launch_on_tensors(launch_again, replaced, pointer_addresses, descriptor_addresses, stream, tensors, addresses):
    values = []
    for position, dtype, make_descriptor in replaced:
        if make_descriptor is not None:
            values.append(addresses[position] if descriptor_addresses else
                          make_descriptor(tensors[position].view(dtype)))
        else:
            values.append(addresses[position] if pointer_addresses else tensors[position].view(dtype))
    launch_again(stream, *values)
