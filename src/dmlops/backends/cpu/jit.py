"""How the CPU backend's loops are compiled by numba (imported by its loops modules only: it imports numba).

numba compiles each compiled function on its own the first time a caller needs it (optimised and made into
machine code, then optimised again inside each caller), so what a function is called from decides how it is best
declared. A first quantized matmul on a machine with numba's cache empty compiled for 8.1 CPU-seconds with every
function an entry point, 6.7 so (2026-12-06, a 2-vCPU Zen 4)."""

from __future__ import annotations

import numba

# Called from Python (and maybe from compiled code too); numba's cache keeps it with its callees compiled in.
compiled = numba.njit(nogil=True, cache=True)

# Called from compiled code only: without the wrappers that a call from Python goes through (a tenth of a second
# of compiling each).
callee = numba.njit(nogil=True, cache=True, no_cpython_wrapper=True, no_cfunc_wrapper=True)

# An overload's options for compiled code only (as ``callee``).
CALLEE_OPTIONS = {"nogil": True, "no_cpython_wrapper": True, "no_cfunc_wrapper": True}

# A few lines called from compiled code: inlined into each caller as numba reads it, never compiled on their own.
inlined = numba.njit(inline="always")
