"""The public array API: each function binds a call to where it runs. Dask arrays go to ``dmlops.dask`` (lazy, chunk
by chunk), torch tensors that ``torch.compile`` traces or whose gradient autograd records to their PyTorch operators
(``dmlops.torch``), everything else to the array API's calls (``dmlops.arrays``): NumPy arrays and CPU torch tensors
on the CPU backend, CUDA arrays on the CUDA backend, each result the caller's kind of array."""

from __future__ import annotations

from . import arrays, dask
from .arrays import PreparedB, prepare_b  # noqa: F401  (part of the API)
from .core import registry
from .ops.cumulative import CumulativeOperation
from .ops.quantized_matmul import NAME as QMM_NAME
from .types import ValidationError


def cumulative_sum(x, axis, *, reverse=False, exclusive=False, out=None, backend=None):
    """Running sum along ``axis`` (DML_OPERATOR_CUMULATIVE_SUMMATION); ``out`` may be ``x`` (in place)."""
    return _cumulative(CumulativeOperation.SUM, x, axis, reverse, exclusive, out, backend)


def cumulative_product(x, axis, *, reverse=False, exclusive=False, out=None, backend=None):
    """Running product along ``axis`` (DML_OPERATOR_CUMULATIVE_PRODUCT); ``out`` may be ``x`` (in place)."""
    return _cumulative(CumulativeOperation.PRODUCT, x, axis, reverse, exclusive, out, backend)


def _cumulative(operation, x, axis, reverse, exclusive, out, backend):
    if type(x) is not arrays.np.ndarray:  # (NumPy arrays, the commonest, go straight on)
        if _through_torch_operator(x, out, backend):
            from . import torch as operators

            return operators.SCANS[operation](x, axis, reverse, exclusive)
        if dask.given(x, out):
            return dask.cumulative(operation, x, axis, reverse, exclusive, out, backend)
    return arrays.cumulative(operation, x, axis, reverse, exclusive, out, backend)


def quantized_linear_matmul(a, a_scale, a_zero_point, b, b_scale, b_zero_point, output_scale, output_zero_point,
                            *, output_dtype=None, out=None, backend=None):
    """(A − za)·sa × (B − zb)·sb, requantized with the output scale and zero point.

    A {…, M, K} and B {…, K, N} are 2-D to 4-D; their batch dimensions broadcast NumPy-style. Scales and zero
    points may be scalars, one-element arrays, vectors (length M for A and output, N for B) or DirectML-shaped
    tensors; zero points may be None. B may be a ``PreparedB`` (``prepare_b``), with None for its scale and zero
    point. The output type is ``output_dtype``, else the output zero point's, else ``out``'s, else uint8.
    """
    if isinstance(b, PreparedB):
        if b_scale is not None or b_zero_point is not None:
            raise ValidationError(f"{QMM_NAME}.b_scale_tensor: a prepared B holds its scale and zero point; "
                                  f"pass None for them")
        b, b_scale, b_zero_point = b.b, b.b_scale, b.b_zero_point
    arguments = [a, a_scale, a_zero_point, b, b_scale, b_zero_point, output_scale, output_zero_point, out]
    if type(a) is not arrays.np.ndarray:
        if backend is None and out is None and _torch_tensor(a) and _compiling():
            from . import torch as operators

            return operators.quantized_linear_matmul_operator(*arrays.as_arrays(arguments[:-1]), output_dtype)
        if dask.given(*arguments):
            return dask.quantized_linear_matmul(*arrays.as_arrays(arguments[:-1]), output_dtype=output_dtype,
                                                out=out, backend=backend)
    return arrays.quantized_linear_matmul(arguments, output_dtype, backend)


def cumulative_gradient(operation, x, grad, axis, reverse=False, exclusive=False):
    """dL/dx for y = cumulative_sum or cumulative_product(x, axis, reverse=, exclusive=) and grad = dL/dy
    (``operation``: "sum" or "product"). FLOAT32 or FLOAT16 NumPy arrays or torch tensors, CPU tensors on the CPU,
    CUDA tensors on the GPU (no call waits for it). Exact where x has zeros: the product's gradient divides by
    nothing. Returns a new array of x's kind, shape and type."""
    return arrays.cumulative_gradient(operation, x, grad, axis, reverse, exclusive)


def check_errors() -> None:
    """Wait for the GPUs, and raise the ValidationError of any value that a CUDA call found bad since the last check
    (a zero, NaN or infinite scale: that call's output is undefined). CUDA calls check such values on the device,
    so that no call waits for the GPU; the CPU backend raises at the call."""
    for backend in registry.loaded():
        backend.check_errors()


def _torch_tensor(value) -> bool:
    """Whether value is a torch tensor, by its type's module (simple enough for torch.compile to trace)."""
    return type(value).__module__.partition(".")[0] == "torch"


def _compiling() -> bool:
    import torch  # (a torch tensor was given: torch is imported)

    return torch.compiler.is_compiling()


def _through_torch_operator(x, out, backend) -> bool:
    """Whether a call runs as its PyTorch operator (``dmlops.torch``): a torch tensor being traced by
    torch.compile, or one whose gradient autograd records. Plain eager calls run the same code directly, without
    the dispatcher's few microseconds."""
    if out is not None or backend is not None or not _torch_tensor(x):
        return False
    import torch

    return torch.compiler.is_compiling() or x.requires_grad and torch.is_grad_enabled()
