"""DML_OPERATOR_CUMULATIVE_SUMMATION (105) and DML_OPERATOR_CUMULATIVE_PRODUCT (145).

A running sum or product along one axis. Integers wrap modulo 2^bits in their own type; FLOAT16 accumulates in
float32 and rounds once per output element (``accumulation_type``). The output may alias the input (in place).

Signed zeros and NaNs: the first element of an inclusive line is the input's element as it is (identity ⊕ x would
turn -0.0 into +0.0, and a signalling NaN's bits may change); an exclusive line starts at exactly the identity (+0
or 1, never -0.0). Elsewhere IEEE arithmetic decides: NaNs and infinities propagate as the additions or
multiplications make them.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

import numpy as np

from ..support import check_tensor_support, support_tier
from ..tensor import TensorDesc, strides_overlap
from ..types import AxisDirection, DataType, FeatureLevel, OperatorType, ValidationError


class CumulativeOperation(str, enum.Enum):
    """What each cumulative operator computes. A member is its word ("sum", "product": the value the kernels take)."""

    SUM = ("sum", OperatorType.CUMULATIVE_SUMMATION, "has_exclusive_sum", np.add, 0)
    PRODUCT = ("product", OperatorType.CUMULATIVE_PRODUCT, "has_exclusive_product", np.multiply, 1)

    def __new__(cls, word: str, operator_type: OperatorType, exclusive_field: str, ufunc: np.ufunc, identity: int):
        member = str.__new__(cls, word)
        member._value_ = word
        member.operator_type = operator_type
        member.exclusive_field = exclusive_field  # the desc's field that makes the scan exclusive
        member.ufunc = ufunc
        member.identity = identity  # the first element of an exclusive line
        return member

    @property
    def operator_name(self) -> str:
        return self.operator_type.operator_name

    def neutral(self, floating: bool):
        """The value that combines with every x to give x as it is: the identity, except -0.0 for a float sum
        (+0.0 + -0.0 is +0.0)."""
        return -0.0 if floating and self is CumulativeOperation.SUM else self.identity


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

    operation = CumulativeOperation.SUM
    operator_type = operation.operator_type
    exclusive = property(lambda self: self.has_exclusive_sum)


@dataclass(frozen=True)
class CumulativeProductOperatorDesc(_CumulativeOperator):
    """DML_CUMULATIVE_PRODUCT_OPERATOR_DESC."""

    input_tensor: TensorDesc
    output_tensor: TensorDesc
    axis: int
    axis_direction: AxisDirection = AxisDirection.INCREASING
    has_exclusive_product: bool = False

    operation = CumulativeOperation.PRODUCT
    operator_type = operation.operator_type
    exclusive = property(lambda self: self.has_exclusive_product)


CumulativeDesc = CumulativeSummationOperatorDesc | CumulativeProductOperatorDesc

# What a scan computes in where not in its own type: FLOAT16 in float32.
ACCUMULATION_DTYPE = {DataType.FLOAT16: np.dtype(np.float32)}


def accumulation_type(data_type: DataType) -> DataType:
    return DataType.from_numpy(ACCUMULATION_DTYPE.get(data_type, data_type.numpy_dtype))


def accumulation_dtype(dtype) -> np.dtype:
    """accumulation_type for a NumPy dtype."""
    return np.dtype(ACCUMULATION_DTYPE.get(DataType.from_numpy(dtype), dtype))


def validate(desc: CumulativeDesc, feature_level: FeatureLevel) -> None:
    name = desc.operation.operator_name
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
    if not _is_integer(desc.axis):
        raise ValidationError(f"{name}.axis: {desc.axis!r} is not an integer (a UINT)")
    if not 0 <= desc.axis < x.dimension_count:
        raise ValidationError(
            f"{name}.axis: {desc.axis!r} must be less than the input's dimension count ({x.dimension_count})")
    if not _is_integer(desc.axis_direction) or desc.axis_direction not in tuple(AxisDirection):
        raise ValidationError(f"{name}.axis_direction: {desc.axis_direction!r} is not a DML_AXIS_DIRECTION "
                              f"(INCREASING 0 or DECREASING 1)")
    if not isinstance(desc.exclusive, bool | np.bool_):
        raise ValidationError(f"{name}.{desc.operation.exclusive_field}: {desc.exclusive!r} is not a BOOL (True or "
                              f"False)")


def _is_integer(value) -> bool:
    """Python and NumPy integers (an AxisDirection among them); not booleans, floats or strings."""
    return isinstance(value, int | np.integer) and not isinstance(value, bool)


def output_rule(sizes: tuple, data_type):
    """The output's sizes and data type: the input's."""
    return sizes, data_type


def reference(operation: CumulativeOperation | str, x: np.ndarray, axis: int, reverse: bool,
              exclusive: bool) -> np.ndarray:
    """The operator's meaning in NumPy (``operation`` a CumulativeOperation or its word): a new array of x's dtype."""
    operation = CumulativeOperation(operation)
    walked = np.flip(x, axis) if reverse else x
    tally = operation.ufunc.accumulate(walked, axis=axis, dtype=accumulation_dtype(x.dtype))
    if exclusive:
        tally = np.roll(tally, 1, axis=axis)
        np.moveaxis(tally, axis, 0)[0] = operation.identity
    tally = tally.astype(x.dtype)
    return np.flip(tally, axis) if reverse else tally
