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


# Without Triton (``pip install ".[test]"`` alone) the CUDA backend's tests skip; the rest run.
if os.environ.get("TRITON_INTERPRET") == "1" and importlib.util.find_spec("triton") is not None:
    _interpreter_loops_under_numpy_2_4()


@pytest.fixture(scope="session")
def torch_device():
    """Where CUDA-backend tests put their tensors: the GPU, or the CPU under the interpreter."""
    return "cuda" if ON_GPU else "cpu"
