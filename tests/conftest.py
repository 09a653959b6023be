import importlib.util
import os

# Without a GPU the CUDA backend's Triton kernels run under Triton's interpreter, on CPU tensors. This must be set
# before triton is first imported. DMLOPS_TEST_GPU=1 runs the same tests on the GPU with the real compiler.
ON_GPU = os.environ.get("DMLOPS_TEST_GPU") == "1"
if not ON_GPU:
    os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
from hypothesis import settings  # noqa: E402

# Hypothesis profiles. A property test draws examples(n) examples: n scaled by the profile's max_examples / 100.
# "default" (a plain ``pytest``) draws a quarter of n: most of the suite's time is numba compiling each new
# combination of types and layouts that an example brings, and Triton's interpreter. "ci" (where the CI variable is
# set) draws the same number, derandomized (the same examples every run) and without the example database.
# "thorough" draws n, as many as each test was written for: ``pytest --hypothesis-profile=thorough``.
settings.register_profile("default", max_examples=25, deadline=None)
settings.register_profile("ci", settings.get_profile("default"), derandomize=True, database=None, print_blob=True)
settings.register_profile("thorough", max_examples=100, deadline=None)
settings.load_profile("ci" if os.environ.get("CI") else "default")


def examples(n: int) -> int:
    """How many examples a property test written for ``n`` draws under the loaded profile (at least 2)."""
    return max(2, round(n * settings.default.max_examples / 100))

# DMLOPS_TEST_NO_NUMBA=1 runs the tests as where numba is not installed: its import fails, the CPU backend runs on
# NumPy alone and the tests of compiled loops skip.
if os.environ.get("DMLOPS_TEST_NO_NUMBA") == "1":
    import sys

    sys.modules["numba"] = None


def _interpreter_loops_under_numpy_2_4():
    """Triton 3.6's interpreter turns a loop bound into an int with int(one-element array), which NumPy 2.4 refuses;
    read the element instead (the upstream fix, triton-lang/triton#9172)."""
    from triton.runtime import interpreter

    patch_tensor = interpreter._patch_lang_tensor

    def patched(tensor, scope):
        patch_tensor(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.item()))

    interpreter._patch_lang_tensor = patched


def _interpreter_patches_once_a_launch():
    """Triton 3.6's interpreter patches triton.language's builtins (``inspect.getmembers`` of each module) at every
    call of a device function, as it does at each launch: about 40 % of the interpreted tests' time. A call whose
    modules the running launch has patched already patches nothing."""
    import inspect

    from triton import language
    from triton.runtime import interpreter

    patch_lang = interpreter._patch_lang
    patched = set()  # the ids of the modules that the running launch has patched
    modules_of = {}  # fn → the ids of the modules that _patch_lang(fn) patches

    def patched_once(fn):
        modules = modules_of.get(fn)
        if modules is None:
            modules = modules_of[fn] = {id(value) for value in fn.__globals__.values()
                                        if inspect.ismodule(value) and value in (language, language.core)}
        if modules and modules <= patched:
            return interpreter._LangPatchScope()
        scope = patch_lang(fn)
        patched.update(modules)
        restore = scope.restore

        def restored():
            restore()
            patched.difference_update(modules)

        scope.restore = restored
        return scope

    interpreter._patch_lang = patched_once


def _interpreter_numpy_types_once():
    """Triton 3.6's interpreter builds its table of NumPy types at every look-up of one (about a tenth of the
    interpreted tests' time): each type's is looked up once."""
    from triton import language
    from triton.runtime import interpreter

    numpy_type = interpreter._get_np_dtype
    found = {}

    def found_once(tt_dtype):
        element = tt_dtype.element_ty if isinstance(tt_dtype, language.block_type) else tt_dtype
        if isinstance(element, language.pointer_type):  # (not hashable)
            return numpy_type(element)
        if element not in found:
            found[element] = numpy_type(element)
        return found[element]

    interpreter._get_np_dtype = found_once


def _interpreter_tuple_names_when_asked():
    """Triton 3.6's tuple type makes its name (its types' names joined) as it is made, for the shape of every tensor
    that the interpreter makes (about a fifth of the interpreted tests' time): made when asked for."""
    from triton.language import core

    def made(self, types, fields=None):
        self.types = types
        self.fields = fields or [""] * len(types)

    core.tuple_type.__init__ = made
    core.tuple_type.name = property(
        lambda self: "[" + ",".join(f"{field}:{kind}" for field, kind in zip(self.fields, self.types)) + "]")


# Without Triton (``pip install ".[test]"`` alone) the CUDA backend's tests skip; the rest run.
if os.environ.get("TRITON_INTERPRET") == "1" and importlib.util.find_spec("triton") is not None:
    _interpreter_loops_under_numpy_2_4()
    _interpreter_patches_once_a_launch()
    _interpreter_numpy_types_once()
    _interpreter_tuple_names_when_asked()


@pytest.fixture(scope="session")
def torch_device():
    """Where CUDA-backend tests put their tensors: the GPU, or the CPU under the interpreter."""
    return "cuda" if ON_GPU else "cpu"


@pytest.fixture
def launcher_calls(monkeypatch) -> list:
    """A list that gains an element at each call of the CUDA backend's quantized-matmul launcher (a replayed call
    does not call it)."""
    from dmlops.backends.cuda import qmatmul

    launcher, calls = qmatmul.quantized_linear_matmul, []

    def counted(*args, **kwargs):
        calls.append(1)
        launcher(*args, **kwargs)

    monkeypatch.setattr(qmatmul, "quantized_linear_matmul", counted)
    return calls
