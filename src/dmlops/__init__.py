"""dmlops: DirectML's cumulative summation, cumulative product and quantized linear matrix multiply, off Windows.

Two surfaces over one set of descs, validation rules and backends: the operator API, which mirrors DirectML
(``TensorDesc``, operator descs, ``Device.compile_operator``, buffer bindings), and the array API
(``cumulative_sum``, ``cumulative_product``, ``quantized_linear_matmul``).
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
    "AxisDirection", "BufferBinding", "CompiledOperator", "PreparedB", "check_errors", "prepare_b", "CumulativeProductOperatorDesc",
    "CumulativeSummationOperatorDesc", "DataType", "Device", "FeatureLevel", "OperatorType",
    "QuantizedLinearMatrixMultiplyOperatorDesc", "TensorDesc", "TensorFlags", "ValidationError",
    "calc_buffer_tensor_size", "cumulative_gradient", "cumulative_product", "cumulative_sum", "quantized_linear_matmul",
]
