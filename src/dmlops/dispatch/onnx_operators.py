"""ONNX's CumSum, CumProd and QLinearMatMul nodes on dmlops: their inputs and attributes mapped onto DirectML's
operators as ONNX Runtime's DirectML execution provider maps them (its DmlOperatorCumSum and DmlOperatorQLinearMatMul),
through dmlops's array API. The ONNX dispatchables' reference evaluator runs every other node itself.

- CumSum / CumProd (input ``x``, input ``axis``; attributes ``exclusive``, ``reverse``): Axis is the ``axis`` value,
  counted from the end where negative; AxisDirection is DECREASING where ``reverse`` is 1, else INCREASING;
  HasExclusiveSum / HasExclusiveProduct is ``exclusive``.
- QLinearMatMul (a, a_scale, a_zero_point, b, b_scale, b_zero_point, y_scale, y_zero_point): ONNX's input order is
  DirectML's binding order. Scales and zero points are per tensor (one element), or vectors per row of A and of
  the output (M) and per column of B (N); batch dimensions broadcast. A 1-D A is one row and a 1-D B one column, as
  ONNX's MatMul takes them (the dimension is dropped from the result).
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from .. import cumulative_product, cumulative_sum, quantized_linear_matmul


def cumulative(operation: Callable, x, axis, exclusive, reverse):
    """``operation`` (dmlops.cumulative_sum or cumulative_product) as the CumSum / CumProd node asks for it."""
    return operation(x, int(np.asarray(axis).reshape(())), reverse=bool(reverse), exclusive=bool(exclusive))


def qlinear_matmul(a, a_scale, a_zero_point, b, b_scale, b_zero_point, y_scale, y_zero_point):
    """dmlops.quantized_linear_matmul as the QLinearMatMul node asks for it."""
    a_vector, b_vector = a.ndim == 1, b.ndim == 1
    y = quantized_linear_matmul(a[None, :] if a_vector else a, a_scale, a_zero_point,
                                b[:, None] if b_vector else b, b_scale, b_zero_point, y_scale, y_zero_point)
    if b_vector:
        y = y[..., 0]
    return y[..., 0, :] if a_vector and not b_vector else y[..., 0] if a_vector else y


def evaluator_operators(to_device: Callable, to_host: Callable) -> list:
    """The reference evaluator's implementations of the three nodes (its ``new_ops``): each moves its arrays to the
    device with ``to_device``, runs there, and returns NumPy arrays (``to_host``)."""
    from onnx.reference.op_run import OpRun

    def cumulative_node(name: str, operation: Callable):
        def run(self, x, axis, exclusive=None, reverse=None):
            return (to_host(cumulative(operation, to_device(x), axis, exclusive, reverse)),)
        return type(name, (OpRun,), {"op_domain": "", "_run": run, "__module__": __name__})

    def run_qlinear_matmul(self, *inputs):
        return (to_host(qlinear_matmul(*(to_device(x) for x in inputs))),)

    return [cumulative_node("CumSum", cumulative_sum), cumulative_node("CumProd", cumulative_product),
            type("QLinearMatMul", (OpRun,), {"op_domain": "", "_run": run_qlinear_matmul, "__module__": __name__})]
