"""Kernel launches kept for repeated calls.

A Triton launch through ``kernel[grid](...)`` binds and specializes its arguments and looks the compiled kernel up
again at every call: 10–20 µs of host time, more than most small kernels run. A call whose argument layout repeats
(the array API's plans) launches the same compiled kernels with the same grids, scalars and constants, on tensors of
the same dtypes and 16-byte alignment: their specialization cannot change. ``KeptLaunch`` runs the first launch
through Triton, keeps the compiled kernel, and then calls its launcher directly.
"""

from __future__ import annotations

import torch

from . import INTERPRETED


def current_stream(device) -> int:
    """The raw handle of the current CUDA stream of ``device`` (what Triton's launcher takes)."""
    return torch._C._cuda_getCurrentRawStream(device.index)


class KeptLaunch:
    """A kernel launched now through Triton and kept: ``relaunch(args)`` launches it again with other arguments of
    the same kinds (tensors of the same dtypes and alignment, the same scalars) and the same keyword constants."""

    def __init__(self, kernel, grid, args: tuple, kwargs: dict):
        self.kernel, self.grid, self.kwargs = kernel, grid, kwargs
        compiled = kernel[grid](*args, **kwargs)
        self.compiled = None if INTERPRETED else compiled
        if self.compiled is not None:
            # the launcher takes every parameter in the kernel's order: those past the positional ones are the
            # keyword constants and defaults
            self.tail = [kwargs[param.name] if param.name in kwargs else param.default
                         for param in kernel.params[len(args):]]
            self.grid3 = tuple(grid) + (1,) * (3 - len(grid))

    def relaunch(self, args) -> None:
        compiled = self.compiled
        if compiled is None:  # the interpreter: through Triton, as the first time
            self.kernel[self.grid](*args, **self.kwargs)
            return
        stream = torch._C._cuda_getCurrentRawStream(torch._C._cuda_getDevice())
        compiled.run(*self.grid3, stream, compiled.function, compiled.packed_metadata, None, None, None, *args,
                     *self.tail)


def launch(kept: dict | None, site: str, kernel, grid, args: tuple, kwargs: dict) -> None:
    """Launch ``kernel``; where ``kept`` (a plan's launches, by site) is given, through the launch kept there."""
    if kept is None:
        kernel[grid](*args, **kwargs)
    elif site in kept:
        kept[site].relaunch(args)
    else:
        kept[site] = KeptLaunch(kernel, grid, args, kwargs)
