"""Kernel launches kept for repeated calls.

A Triton launch through ``kernel[grid](...)`` binds and specializes its arguments and looks the compiled kernel up
again at every call: 10–20 µs of host time, more than most small kernels run. A call whose argument layout repeats
(the array API's plans) launches the same compiled kernels with the same grids, scalars and constants, on tensors of
the same dtypes and 16-byte alignment: their specialization cannot change. ``KeptLaunch`` runs the first launch
through Triton, keeps the compiled kernel, and then calls its launcher directly.
"""

from __future__ import annotations

import torch
from triton.tools.tensor_descriptor import TensorDescriptor

from .common import INTERPRETED


def still_here(device):
    """A check of no arguments: whether the current device and its current stream are still those of now, outside a
    graph capture, where launches kept now may reuse the memory they were given (scratch words, workspaces and
    buffers of a first call), since launches on one stream run one after another."""
    index = device.index
    stream = torch._C._cuda_getCurrentRawStream(index)

    def check() -> bool:
        return torch._C._cuda_getDevice() == index and torch._C._cuda_getCurrentRawStream(index) == stream and \
            not torch._C._cuda_isCurrentStreamCapturing()

    return check


class KeptLaunch:
    """A kernel launched now through Triton and kept: ``relaunch(args)`` launches it again with other arguments of
    the same kinds (tensors of the same dtypes and alignment, the same scalars) and the same keyword constants."""

    def __init__(self, kernel, grid, args: tuple, kwargs: dict, zeroed: bool = False):
        # zeroed: the launch adds into memory its caller zeroed for it (which a replay must zero again)
        self.kernel, self.grid, self.args, self.kwargs, self.zeroed = kernel, grid, args, kwargs, zeroed
        compiled = kernel[grid](*args, **kwargs)
        self.compiled = None if INTERPRETED else compiled
        if self.compiled is not None:
            # the launcher takes every parameter in the kernel's order: those past the positional ones are the
            # keyword constants and defaults
            self.tail = [kwargs[param.name] if param.name in kwargs else param.default
                         for param in kernel.params[len(args):]]
            self.grid3 = tuple(grid) + (1,) * (3 - len(grid))
            launcher = compiled.run
            # Triton's launcher object only adds scratch memory to the call, where the kernel has none: its C
            # function is called directly then
            self.direct = getattr(launcher, "global_scratch_size", 1) == 0 and \
                getattr(launcher, "profile_scratch_size", 1) == 0 and hasattr(launcher, "launch")
            if self.direct:
                self.head = (compiled.function, launcher.launch_cooperative_grid, launcher.launch_pdl, None, None,
                             compiled.packed_metadata, None, None, None)

    def relaunch(self, args) -> None:
        compiled = self.compiled
        if compiled is None:  # the interpreter: through Triton, as the first time
            self.kernel[self.grid](*args, **self.kwargs)
            return
        stream = torch._C._cuda_getCurrentRawStream(torch._C._cuda_getDevice())
        if self.direct:
            compiled.run.launch(*self.grid3, stream, *self.head, *args, *self.tail)
        else:
            compiled.run(*self.grid3, stream, compiled.function, compiled.packed_metadata, None, None, None, *args,
                         *self.tail)


def launch(kept: dict | None, site: str, kernel, grid, args: tuple, kwargs: dict, zeroed: bool = False) -> None:
    """Launch ``kernel``; where ``kept`` (a plan's launches, by site) is given, through the launch kept there.
    ``zeroed``: the launch adds into memory zeroed for it."""
    if kept is None:
        kernel[grid](*args, **kwargs)
        return
    kept_launch = kept.get(site)
    if kept_launch is not None and (kept_launch.kernel, kept_launch.grid, kept_launch.kwargs) == (kernel, grid, kwargs):
        kept_launch.relaunch(args)
    else:  # a first launch here, or one the same layout launches otherwise (a configuration forced in a test)
        kept[site] = KeptLaunch(kernel, grid, args, kwargs, zeroed)


def replay(kept: dict, sample: dict, run_again):
    """``run(tensors)``: the launches of one call, kept in ``kept`` (in launch order), run again with the tensors of
    another call (by field) wherever the first call's tensors (``sample``) were passed, and every other argument as it
    was (the memory the first call made for itself is reused: launches on one stream run one after another). Used on
    the stream and device of the first call, outside graph captures; elsewhere ``run_again(tensors)`` runs the whole
    launcher. Returns None where a replay cannot stand for the launcher: two fields at one address, or a launch that
    adds into memory zeroed for it."""
    if any(launch.zeroed for launch in kept.values()):
        return None
    fields = {}
    for field, tensor in sample.items():
        if tensor is not None:
            if fields.setdefault(tensor.data_ptr(), field) != field:
                return None
    steps = []  # (launch, [(position, field, dtype, descriptor or None)])
    for kept_launch in kept.values():
        replaced = []
        for position, arg in enumerate(kept_launch.args):
            base = arg.base if isinstance(arg, TensorDescriptor) else arg
            if isinstance(base, torch.Tensor) and base.data_ptr() in fields:
                replaced.append((position, fields[base.data_ptr()], base.dtype, arg if base is not arg else None))
        steps.append((kept_launch, replaced))
    on_gpu = sample["a_tensor"].device.type == "cuda"  # else Triton's interpreter, on CPU tensors
    here = still_here(sample["a_tensor"].device) if on_gpu else None

    def run(tensors):
        if on_gpu and not here():
            run_again(tensors)
            return
        for kept_launch, replaced in steps:
            args = list(kept_launch.args)
            for position, field, dtype, descriptor in replaced:
                tensor = tensors[field]
                if tensor.dtype != dtype and (descriptor is not None or not on_gpu):  # compiled: addresses only
                    tensor = tensor.view(dtype)
                args[position] = tensor if descriptor is None else \
                    TensorDescriptor(tensor, descriptor.shape, descriptor.strides, descriptor.block_shape)
            kept_launch.relaunch(args)

    return run
