import os

# Without a GPU the CUDA backend's Triton kernels run under Triton's interpreter, on CPU tensors. This must be set
# before triton is first imported. DMLOPS_TEST_GPU=1 runs the same tests on the GPU with the real compiler.
ON_GPU = os.environ.get("DMLOPS_TEST_GPU") == "1"
if not ON_GPU:
    os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402


@pytest.fixture(scope="session")
def torch_device():
    """Where CUDA-backend tests put their tensors: the GPU, or the CPU under the interpreter."""
    return "cuda" if ON_GPU else "cpu"
