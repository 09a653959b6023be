"""DML_OPERATOR_CUMULATIVE_SUMMATION (105) and DML_OPERATOR_CUMULATIVE_PRODUCT (145).

A running sum or product along one axis. Integers wrap modulo 2^bits in their own type; FLOAT16 accumulates in
float32 and rounds once per output element. The output may alias the input (in place).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..support import check_tensor_support, support_tier
from ..tensor import TensorDesc, strides_overlap
from ..types import AxisDirection, DataType, FeatureLevel, OperatorType, ValidationError


class _CumulativeOperator:
    """What the two cumulative descs share: one input, one output, in place allowed."""

    input_fields = ("input_tensor",)
    output_fields = ("output_tensor",)
    supports_in_place = True


@dataclass(frozen=True)
class CumulativeSummationOperatorDesc(_CumulativeOperator):
    """DML_CUMULATIVE_SUMMATION_OPERATOR_DESC."""

    input_tensor: TensorDesc
    output_tensor: TensorDesc
    axis: int
    axis_direction: AxisDirection = AxisDirection.INCREASING
    has_exclusive_sum: bool = False

    operator_type = OperatorType.CUMULATIVE_SUMMATION
    operation = "sum"
    exclusive = property(lambda self: self.has_exclusive_sum)


@dataclass(frozen=True)
class CumulativeProductOperatorDesc(_CumulativeOperator):
    """DML_CUMULATIVE_PRODUCT_OPERATOR_DESC."""

    input_tensor: TensorDesc
    output_tensor: TensorDesc
    axis: int
    axis_direction: AxisDirection = AxisDirection.INCREASING
    has_exclusive_product: bool = False

    operator_type = OperatorType.CUMULATIVE_PRODUCT
    operation = "product"
    exclusive = property(lambda self: self.has_exclusive_product)


CumulativeDesc = CumulativeSummationOperatorDesc | CumulativeProductOperatorDesc

# The accumulation type of each supported data type; everything else accumulates in its own type.
ACCUMULATION_DTYPE = {DataType.FLOAT16: np.dtype(np.float32)}


def validate(desc: CumulativeDesc, feature_level: FeatureLevel) -> None:
    name = operator_name(desc)
    tier = support_tier(desc.operator_type, feature_level, name)
    for field in desc.input_fields + desc.output_fields:
        tensor = getattr(desc, field)
        if not isinstance(tensor, TensorDesc):
            raise ValidationError(f"{name}.{field}: a TensorDesc is required, not {type(tensor).__name__}")
        check_tensor_support(tier, name, field, tensor)
    x, out = desc.input_tensor, desc.output_tensor
    if (x.data_type, x.sizes) != (out.data_type, out.sizes):
        raise ValidationError(
            f"{name}.output_tensor: must have the input's data type, dimension count and sizes "
            f"(input {x.data_type.name} {list(x.sizes)}, output {out.data_type.name} {list(out.sizes)})")
    if out.owned_by_dml:
        raise ValidationError(f"{name}.output_tensor: OWNED_BY_DML is allowed on inputs only")
    if strides_overlap(out.sizes, out.element_strides):
        raise ValidationError(f"{name}.output_tensor: the strides {list(out.element_strides)} make two "
                              f"elements share memory")
    if isinstance(desc.axis, bool) or not isinstance(desc.axis, int) or not 0 <= desc.axis < x.dimension_count:
        raise ValidationError(
            f"{name}.axis: {desc.axis!r} must be less than the input's dimension count ({x.dimension_count})")
    if desc.axis_direction not in tuple(AxisDirection):
        raise ValidationError(f"{name}.axis_direction: {desc.axis_direction!r} is not a DML_AXIS_DIRECTION")
    if not isinstance(desc.exclusive, bool | np.bool_):
        field = "has_exclusive_sum" if desc.operation == "sum" else "has_exclusive_product"
        raise ValidationError(f"{name}.{field}: {desc.exclusive!r} is not a BOOL (True or False)")


def output_rule(sizes: tuple, data_type):
    """The output's sizes and data type: the input's."""
    return sizes, data_type


def operator_name(desc) -> str:
    return "DML_OPERATOR_" + desc.operator_type.name


def reference(operation: str, x: np.ndarray, axis: int, reverse: bool, exclusive: bool) -> np.ndarray:
    """The operator's meaning in NumPy: a new array of x's dtype."""
    data_type = DataType.from_numpy(x.dtype)
    accumulate = np.cumsum if operation == "sum" else np.cumprod
    identity = 0 if operation == "sum" else 1
    walked = np.flip(x, axis) if reverse else x
    tally = accumulate(walked, axis=axis, dtype=ACCUMULATION_DTYPE.get(data_type, x.dtype))
    if exclusive:
        tally = np.roll(tally, 1, axis=axis)
        np.moveaxis(tally, axis, 0)[0] = identity
    tally = tally.astype(x.dtype)
    return np.flip(tally, axis) if reverse else tally


def run(desc: CumulativeDesc, backend, views: dict) -> None:
    backend.cumulative(desc.operation, views["input_tensor"], views["output_tensor"], desc.axis,
                       desc.axis_direction == AxisDirection.DECREASING, bool(desc.exclusive))


def prepare(desc: CumulativeDesc, backend, views: dict):
    """Run, and return the backend's kept run for views of the same layouts."""
    run_kept = backend.prepare_cumulative(desc.operation, views["input_tensor"], views["output_tensor"], desc.axis,
                                          desc.axis_direction == AxisDirection.DECREASING, bool(desc.exclusive))
    return lambda views: run_kept(views["input_tensor"], views["output_tensor"])
