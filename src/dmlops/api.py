"""The public array API: each function binds a call to where it runs. Dask arrays go to ``dmlops.dask`` (lazy, chunk
by chunk), torch tensors that ``torch.compile`` traces or whose gradient autograd records to their PyTorch operators
(``dmlops.torch``), everything else to the array API's calls (``dmlops.arrays``): NumPy arrays and CPU torch tensors
on the CPU backend, CUDA arrays on the CUDA backend, each result the caller's kind of array."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from numpy.typing import DTypeLike

from . import arrays, dask
from .arrays import Array, PreparedB, prepare_b  # noqa: F401  (part of the API)
from .core import plans, registry
from .ops.cumulative import CumulativeOperation
from .ops.quantized_matmul import NAME as QMM_NAME
from .types import ValidationError

if TYPE_CHECKING:
    import torch


# What both scans' docstrings say, but for their words and examples.
_SCAN_DOCUMENT = """Running {what} along ``axis`` ({operator}).

    Parameters
    ----------
    x : array
        NumPy array, torch tensor (CPU or CUDA), CUDA array (CuPy, JAX: DLPack), Dask array, or nested list of
        numbers, of 1 to 8 dimensions and a type the operator supports: float32, float16, int32, uint32, int64 or
        uint64.
    axis : int
        The one axis scanned (a Python or NumPy integer); negative counts from the end. ``None``, which flattens in
        NumPy, is not taken: pass ``x.reshape(-1)`` and 0.
    reverse : bool, optional
        Scan from the highest index down (DML_AXIS_DIRECTION_DECREASING). True or False only.
    exclusive : bool, optional
        Leave each element out of its own result: the first result is {identity}. True or False only.
    out : array, optional
        The array to write, of x's sizes and type; it may be x itself (in place). Not with Dask arrays.
    backend : {{"cpu", "cuda"}}, optional
        By default the backend where x lives.

    Returns
    -------
    array
        The running {what}s, of x's kind, sizes and type (``out`` where given). Integers wrap in their own type;
        float16 accumulates in float32. An empty x gives an empty result, as in NumPy.

    Raises
    ------
    ValidationError
        (a ValueError) naming the operator, the field and the rule broken: a type or dimension count the operator
        lacks, an axis that is not an integer or is out of range, an option that is not a bool, an ``out`` of other
        sizes or type, read-only, or overlapping x other than exactly.

{examples}"""


def cumulative_sum(x: Array, axis: int, *, reverse: bool = False, exclusive: bool = False, out: Array | None = None,
                   backend: str | None = None) -> Array:
    return _cumulative(CumulativeOperation.SUM, x, axis, reverse, exclusive, out, backend)


def cumulative_product(x: Array, axis: int, *, reverse: bool = False, exclusive: bool = False,
                       out: Array | None = None, backend: str | None = None) -> Array:
    return _cumulative(CumulativeOperation.PRODUCT, x, axis, reverse, exclusive, out, backend)


cumulative_sum.__doc__ = _SCAN_DOCUMENT.format(what="sum", operator="DML_OPERATOR_CUMULATIVE_SUMMATION", identity=0,
                                               examples='''    Examples
    --------
    >>> import numpy as np, dmlops
    >>> dmlops.cumulative_sum(np.array([1, 2, 3, 4], np.int32), 0)
    array([ 1,  3,  6, 10], dtype=int32)
    >>> dmlops.cumulative_sum(np.array([1, 2, 3, 4], np.int32), 0, reverse=True, exclusive=True)
    array([9, 7, 4, 0], dtype=int32)
    ''')
cumulative_product.__doc__ = _SCAN_DOCUMENT.format(what="product", operator="DML_OPERATOR_CUMULATIVE_PRODUCT",
                                                   identity=1, examples='''    Examples
    --------
    >>> import numpy as np, dmlops
    >>> dmlops.cumulative_product(np.array([[1, 2, 3], [4, 5, 6]], np.float32), 1)
    array([[  1.,   2.,   6.],
           [  4.,  20., 120.]], dtype=float32)
    >>> dmlops.cumulative_product(np.array([1, 2, 3], np.float32), 0, reverse=True)
    array([6., 6., 3.], dtype=float32)
    ''')


def _cumulative(operation, x, axis, reverse, exclusive, out, backend):
    if type(x) is not arrays.np.ndarray:  # (NumPy arrays, the commonest, go straight on)
        if _through_torch_operator(x, out, backend):
            from . import torch as operators

            return operators.SCANS[operation](x, axis, reverse, exclusive)
        if dask.given(x, out):
            return dask.cumulative(operation, x, axis, reverse, exclusive, out, backend)
    return arrays.cumulative(operation, x, axis, reverse, exclusive, out, backend)


def quantized_linear_matmul(a: Array, a_scale: Array | float, a_zero_point: Array | int | None, b: Array | PreparedB,
                            b_scale: Array | float | None, b_zero_point: Array | int | None,
                            output_scale: Array | float, output_zero_point: Array | int | None, *,
                            output_dtype: DTypeLike | torch.dtype = None, out: Array | None = None,
                            backend: str | None = None) -> Array:
    """(A − za)·sa × (B − zb)·sb, requantized with the output scale and zero point
    (DML_OPERATOR_QUANTIZED_LINEAR_MATRIX_MULTIPLY).

    Each output element is saturate(round_half_to_even(Σ_k (A − za)(B − zb) · sa·sb / so) + zo): exact integer
    sums, requantized in float64, the same bits on every backend.

    Parameters
    ----------
    a : array
        A {…, M, K}: int8 or uint8, 2 to 4 dimensions (any array kind, as for ``cumulative_sum``).
    a_scale, a_zero_point : number or array
        A's scale (float32 values, finite and non-zero) and zero point (A's type; None for 0): a number, a
        one-element array, a vector of M values (one per row) or a DirectML-shaped tensor {…, M, 1}.
    b : array or PreparedB
        B {…, K, N}: int8 or uint8. Its batch dimensions broadcast with A's, NumPy-style. A ``PreparedB``
        (``prepare_b``) takes None for its scale and zero point.
    b_scale, b_zero_point : number or array
        B's, per tensor or per column (vectors of N values, tensors {…, 1, N}).
    output_scale, output_zero_point : number or array
        The output's, per tensor or per row (as A's).
    output_dtype : dtype, optional
        int8 or uint8 (a NumPy or torch dtype, or its name); by default the output zero point's type, else
        ``out``'s, else uint8.
    out : array, optional
        The array to write, {…, M, N} of the output type. Not with Dask arrays.
    backend : str, optional
        ``"cpu"`` or ``"cuda"``; by default the backend where A lives.

    Returns
    -------
    array
        The output {…, M, N}, of A's kind (``out`` where given). Empty where M, N or a batch dimension is 0; where K
        is 0 (no terms) every element is the output zero point.

    Raises
    ------
    ValidationError
        (a ValueError) naming the operator, the field and the rule: a type other than int8 or uint8 for A, B or the
        output, a zero point not of its tensor's type or range, a scale that is zero, NaN or infinite (on the CUDA
        backend, at ``check_errors()``), a vector of the wrong length, sizes that do not multiply or broadcast.

    Examples
    --------
    >>> import numpy as np, dmlops
    >>> a = np.array([[10, 20], [30, 40]], np.uint8)
    >>> b = np.array([[1, 2], [3, 4]], np.int8)
    >>> dmlops.quantized_linear_matmul(a, 0.5, np.uint8(10), b, 1.0, None, 4.0, np.uint8(128))
    array([[132, 133],
           [142, 148]], dtype=uint8)
    """
    if isinstance(b, PreparedB):
        if b_scale is not None or b_zero_point is not None:
            raise ValidationError(f"{QMM_NAME}.b_scale_tensor: a prepared B holds its scale and zero point; "
                                  f"pass None for them")
        b, b_scale, b_zero_point = b.b, b.b_scale, b.b_zero_point
    arguments = [a, a_scale, a_zero_point, b, b_scale, b_zero_point, output_scale, output_zero_point, out]
    if type(a) is not arrays.np.ndarray:
        if backend is None and out is None and plans.is_torch_tensor(a) and _compiling():
            from . import torch as operators

            return operators.quantized_linear_matmul_operator(*arrays.as_arrays(arguments[:-1]), output_dtype)
        if dask.given(*arguments):
            return dask.quantized_linear_matmul(*arrays.as_arrays(arguments[:-1]), output_dtype=output_dtype,
                                                out=out, backend=backend)
    return arrays.quantized_linear_matmul(arguments, output_dtype, backend)


def cumulative_gradient(operation: Literal["sum", "product"], x: Array, grad: Array, axis: int, reverse: bool = False,
                        exclusive: bool = False) -> Array:
    """dL/dx for y = cumulative_sum or cumulative_product(x, axis, reverse=, exclusive=) and grad = dL/dy.

    Exact where x has zeros: the product's gradient divides by nothing. (Torch tensors that require grad get it
    from autograd through ``cumulative_sum`` and ``cumulative_product`` themselves.)

    Parameters
    ----------
    operation : {"sum", "product"}
        Which scan y is.
    x, grad : array
        The scan's input and dL/dy: float32 or float16 NumPy arrays or torch tensors of the same sizes and type (CPU
        tensors run on the CPU, CUDA tensors on the GPU, and no call waits for it).
    axis, reverse, exclusive
        The scan's, as for ``cumulative_sum`` (an integer axis; True or False).

    Returns
    -------
    array
        dL/dx: a new array of x's kind, sizes and type.

    Raises
    ------
    ValidationError
        An operation other than "sum" or "product", a type without a gradient, a grad of other sizes or type, an
        axis or option of the wrong type or range.

    Examples
    --------
    >>> import numpy as np, dmlops
    >>> x = np.array([1, 2, 3], np.float32)
    >>> dmlops.cumulative_gradient("product", x, np.ones(3, np.float32), 0)  # y = [1, 2, 6]
    array([9., 4., 2.], dtype=float32)
    """
    return arrays.cumulative_gradient(operation, x, grad, axis, reverse, exclusive)


def check_errors() -> None:
    """Wait for the GPUs, and raise the error of any value that a CUDA call found bad since the last check.

    CUDA calls check such values (a zero, NaN or infinite scale of ``quantized_linear_matmul``) on the device, so
    that no call waits for the GPU; that call's output is undefined. The CPU backend raises at the call, so on the
    CPU alone this returns at once.

    Returns
    -------
    None

    Raises
    ------
    ValidationError
        The first bad value found since the last check, naming the operator and the field.

    Examples
    --------
    >>> import dmlops
    >>> dmlops.check_errors()  # after a batch of CUDA calls, before trusting their results
    """
    for backend in registry.loaded():
        backend.check_errors()


def _compiling() -> bool:
    import torch  # (a torch tensor was given: torch is imported)

    return torch.compiler.is_compiling()


def _through_torch_operator(x, out, backend) -> bool:
    """Whether a call runs as its PyTorch operator (``dmlops.torch``): a torch tensor being traced by
    torch.compile, or one whose gradient autograd records. Plain eager calls run the same code directly, without
    the dispatcher's few microseconds."""
    if out is not None or backend is not None or not plans.is_torch_tensor(x):
        return False
    import torch

    return torch.compiler.is_compiling() or x.requires_grad and torch.is_grad_enabled()
