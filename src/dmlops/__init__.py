"""dmlops: DirectML's cumulative summation, cumulative product and quantized linear matrix multiply, with DirectML's
exact semantics, off Windows: on the CPU (NumPy; numba makes it fast), on NVIDIA GPUs (Triton) and on Dask arrays.

Start with the three functions. Each takes the arrays you have (NumPy arrays, torch tensors on the CPU or a GPU,
CuPy or JAX arrays, Dask arrays) and returns the same kind of array:

    >>> import numpy as np, dmlops
    >>> dmlops.cumulative_sum(np.array([1, 2, 3, 4], np.int32), 0, exclusive=True)
    array([0, 1, 3, 6], dtype=int32)
    >>> dmlops.cumulative_product(np.array([1, 2, 3], np.float32), 0, reverse=True)
    array([6., 6., 3.], dtype=float32)
    >>> a = np.array([[10, 20], [30, 40]], np.uint8)
    >>> b = np.array([[1, 2], [3, 4]], np.int8)
    >>> dmlops.quantized_linear_matmul(a, 0.5, np.uint8(10), b, 1.0, None, 4.0, np.uint8(128))
    array([[132, 133],
           [142, 148]], dtype=uint8)

``help(dmlops.cumulative_sum)``, ``help(dmlops.cumulative_product)`` and ``help(dmlops.quantized_linear_matmul)``
give their parameters, results and errors. Input DirectML would reject raises ``dmlops.ValidationError`` (a
ValueError) naming the operator, the field and the rule.

Then, as you need them:
- ``prepare_b``: a B prepared once for many quantized products (a layer's weights);
- ``cumulative_gradient``: the gradient of a scan (torch tensors get it through autograd: ``import dmlops.torch``
  also registers the operators as ``torch.ops.dmlops.*`` for ``torch.compile``);
- ``check_errors``: the bad values (scales) that CUDA calls found on the device, which do not wait for the GPU;
- the operator API, which mirrors DirectML one to one: ``TensorDesc``, the operator descs
  (``CumulativeSummationOperatorDesc``, ``CumulativeProductOperatorDesc``,
  ``QuantizedLinearMatrixMultiplyOperatorDesc``), ``Device(...).compile_operator(desc)`` and buffer bindings;
- the command line: ``dmlops dispatch MODEL.json`` runs a DxDispatch model.
"""

from .api import (PreparedB, check_errors, cumulative_gradient, cumulative_product, cumulative_sum, prepare_b,
                  quantized_linear_matmul)
from .device import BufferBinding, CompiledOperator, Device
from .ops.cumulative import CumulativeProductOperatorDesc, CumulativeSummationOperatorDesc
from .ops.quantized_matmul import QuantizedLinearMatrixMultiplyOperatorDesc
from .tensor import TensorDesc, calc_buffer_tensor_size
from .types import AxisDirection, DataType, FeatureLevel, OperatorType, TensorFlags, ValidationError

__version__ = "0.1.0"

__all__ = [
    "AxisDirection", "BufferBinding", "CompiledOperator", "PreparedB", "check_errors", "prepare_b",
    "CumulativeProductOperatorDesc",
    "CumulativeSummationOperatorDesc", "DataType", "Device", "FeatureLevel", "OperatorType",
    "QuantizedLinearMatrixMultiplyOperatorDesc", "TensorDesc", "TensorFlags", "ValidationError",
    "calc_buffer_tensor_size", "cumulative_gradient", "cumulative_product", "cumulative_sum", "quantized_linear_matmul",
]
