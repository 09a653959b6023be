"""How the CPU backend's loops are compiled by numba (imported by its loops modules only: it imports numba).

numba compiles each compiled function on its own the first time a caller needs it: by default it optimises the
function's code (LLVM's O3) and makes it into machine code, then links it into each caller, where it is optimised
and made into machine code again, at every level of calls. Functions called from compiled code only (``callee``)
are linked into their callers as numba lowered them instead: their code is optimised and made into machine code
once, in the function called from Python that runs it. A first quantized matmul on a machine with numba's cache
empty compiled for 8.1 CPU-seconds with every function an entry point, 5.9-6.2 with the callees' wrappers left
out, 4.4-5.0 with their code linked so (2026-12-06, a 2-vCPU Zen 4: benchmarks/RESULTS.md)."""

from __future__ import annotations

import functools
import hashlib
import os

import llvmlite.binding as llvm
import numba
import numpy as np
from numba.core import caching, codegen, compiler

from .compiled import ALIGNMENT

# LLVM's optimisation level for a callee's functions on their own (numba's: 3, NUMBA_OPT): its callers' O3 optimises
# them again once linked in. At O1 a first 512³ product's kernel loop came out the same and its per-function passes
# took 0.24 CPU-s, against 0.29-0.35 at O3 (Zen 4).
CALLEE_OPT = 1


class LinkedLibrary(codegen.JITCodeLibrary):
    """The code of a function called from compiled code only: linked into its callers as it was lowered (with the
    code it calls), never optimised as a whole or made into machine code on its own."""

    def _optimize_functions(self, ll_module):
        """numba's per-function passes at CALLEE_OPT, for the functions defined here (numba builds them for each
        function declared too)."""
        ll_module.data_layout = self._codegen._data_layout
        for function in ll_module.functions:
            if not function.is_declaration:
                passes, builder = self._codegen._function_pass_manager(opt=CALLEE_OPT)
                passes.run(function, builder)

    def finalize(self):
        for library in dict.fromkeys(self._linking_libraries):
            self._reload_init.update(library._reload_init)
            self._final_module.link_in(library._get_module_for_linking(), preserve=True)
        self._finalize_dynamic_globals()
        # numba stores the address of each compiled function's environment in the JIT's copy of the global that
        # holds it, even for a function that no Python calls: the JIT gets those globals alone
        environments = [variable.name for variable in self._final_module.global_variables
                        if "NumbaEnv" in variable.name]
        self._codegen._add_module(llvm.parse_assembly("".join(f'@"{name}" = common global i8* null\n'
                                                              for name in environments)))
        self._codegen._engine.finalize_object()
        self._finalized = True


class CalleeCompiler(compiler.Compiler):
    """numba's compiler, the function's code kept in a LinkedLibrary."""

    def compile_extra(self, func):
        if self.state.library is None:
            self.state.library = LinkedLibrary(self.state.targetctx.codegen(), func.__qualname__)
        return super().compile_extra(func)


BACKEND_FOLDER = os.path.dirname(os.path.abspath(__file__))


@functools.cache
def backend_sources_hash() -> bytes:
    """A hash of every module of the CPU backend, as they are when this process first asks."""
    digest = hashlib.sha256()
    for name in sorted(os.listdir(BACKEND_FOLDER)):
        if name.endswith(".py"):
            with open(os.path.join(BACKEND_FOLDER, name), "rb") as source:
                digest.update(name.encode() + b"\0" + source.read())
    return digest.digest()


def stamped_by_backend(locator):
    """numba's cache locator ``locator``, for the backend's functions alone, their entries in the cache stamped with
    backend_sources_hash: numba stamps an entry with a hash of its own module, but a compiled entry holds the code
    of its callees, which are in other modules, and an edited callee would otherwise run as it was before the edit."""
    class BackendLocator(locator):
        def get_source_stamp(self):
            return backend_sources_hash()

        @classmethod
        def from_function(cls, py_func, py_file):
            if os.path.dirname(os.path.abspath(py_file)) != BACKEND_FOLDER:
                return None
            return super().from_function(py_func, py_file)

    BackendLocator.__name__ = BackendLocator.__qualname__ = f"Backend{locator.__name__}"
    return BackendLocator


# (the locators numba tries, first to last: CacheImpl's in numba 0.68, _CacheImpl's in earlier versions)
cache_implementation = getattr(caching, "CacheImpl", None) or getattr(caching, "_CacheImpl", None)
if cache_implementation is not None:
    cache_implementation._locator_classes[:0] = [stamped_by_backend(locator) for locator in (
        caching.UserProvidedCacheLocator, caching.InTreeCacheLocator, caching.UserWideCacheLocator)]

# Called from Python (and maybe from compiled code too); numba's cache keeps it with its callees compiled in. No C
# wrapper (for numba's cfunc, which nothing here takes): numba would optimise it and make it into machine code.
compiled = numba.njit(nogil=True, cache=True, no_cfunc_wrapper=True)

# LinkedLibrary overrides numba's internals as the versions it was written against have them; with other versions,
# or with DMLOPS_PUBLIC_COMPILE=1, callees compile through numba's public options (longer to compile, the same code).
KNOWN_NUMBA = "0.68."
LINKED = numba.__version__.startswith(KNOWN_NUMBA) and os.environ.get("DMLOPS_PUBLIC_COMPILE") != "1"

# An overload's options for compiled code only: no wrappers for calls from Python (a tenth of a second of compiling
# each), its code linked into its callers (``LinkedLibrary``), where LINKED. Not kept in numba's cache then: its
# callers are, with it.
CALLEE_OPTIONS = {"nogil": True, "no_cpython_wrapper": True, "no_cfunc_wrapper": True} | (
    {"pipeline_class": CalleeCompiler} if LINKED else {})

# Called from compiled code only (as CALLEE_OPTIONS says).
callee = numba.njit(**CALLEE_OPTIONS, cache=not LINKED)

# A few lines called from compiled code: inlined into each caller as numba reads it, never compiled on their own.
inlined = numba.njit(inline="always")


def private_new_array():
    """new_array through numba's internals (imported here: other numba versions may not have them)."""
    from numba.core import types
    from numba.core.typing.npydecl import parse_dtype, parse_shape
    from numba.extending import intrinsic
    from numba.np import arrayobj

    class Aligned:
        """A target context whose arrays are ALIGNMENT-byte aligned (numba's: 32)."""

        def __init__(self, context):
            self.context = context

        def __getattr__(self, name):
            return getattr(self.context, name)

        def get_preferred_array_alignment(self, dtype):
            return ALIGNMENT

    @intrinsic
    def new_array(typing_context, shape, dtype):
        """np.empty(shape, dtype) (a C-contiguous array, ALIGNMENT-byte aligned), its allocation lowered into the
        caller: numba compiles np.empty as a function of its own for each type of its arguments, 0.04 CPU-s each at a
        first product."""
        kind = types.Array(parse_dtype(dtype), parse_shape(shape), "C")

        def codegen(context, builder, signature, arguments):
            kind, sizes = arrayobj._parse_empty_args(context, builder, signature, arguments)
            return arrayobj._empty_nd_impl(Aligned(context), builder, kind, sizes)._getvalue()

        return kind(shape, dtype), codegen
    return new_array


# np.empty for compiled code: through numba's internals (its array allocation's lowering) where LINKED, else itself
# (then aligned as numba aligns its arrays).
new_array = private_new_array() if LINKED else np.empty
