"""DML_OPERATOR_QUANTIZED_LINEAR_MATRIX_MULTIPLY (118).

Output = saturate(round_half_to_even(acc · (sa·sb) / so) + zo) with acc = Σ_k (A − za)(B − zb), accumulated exactly
in integers. The requantization runs in float64 in this order — sa·sb (exact), then / so, then acc · that — so
that every backend gives the same bits.

A {…, M, K} × B {…, K, N} → Output {…, M, N}. Scales and zero points are per tensor ({1,…,1}) or per row of A
and Output ({…, M, 1}) or per column of B ({…, 1, N}), right-aligned to 1 to 4 dimensions.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..support import check_tensor_support, support_tier
from ..tensor import TensorDesc, strides_overlap
from ..types import DataType, FeatureLevel, OperatorType, ValidationError

NAME = OperatorType.QUANTIZED_LINEAR_MATRIX_MULTIPLY.operator_name

# Saturation bounds of each output type.
OUTPUT_RANGE = {DataType.INT8: (-128, 127), DataType.UINT8: (0, 255)}


@dataclass(frozen=True)
class QuantizedLinearMatrixMultiplyOperatorDesc:
    """DML_QUANTIZED_LINEAR_MATRIX_MULTIPLY_OPERATOR_DESC; the field order is the binding order."""

    a_tensor: TensorDesc
    a_scale_tensor: TensorDesc
    a_zero_point_tensor: TensorDesc | None
    b_tensor: TensorDesc
    b_scale_tensor: TensorDesc
    b_zero_point_tensor: TensorDesc | None
    output_scale_tensor: TensorDesc
    output_zero_point_tensor: TensorDesc | None
    output_tensor: TensorDesc

    operator_type = OperatorType.QUANTIZED_LINEAR_MATRIX_MULTIPLY
    input_fields = ("a_tensor", "a_scale_tensor", "a_zero_point_tensor", "b_tensor", "b_scale_tensor",
                    "b_zero_point_tensor", "output_scale_tensor", "output_zero_point_tensor")
    output_fields = ("output_tensor",)
    optional_fields = ("a_zero_point_tensor", "b_zero_point_tensor", "output_zero_point_tensor")
    supports_in_place = False


# For each scale / zero-point field: its data tensor and which of the last two dimensions may be other than 1
# (-2: a row, M; -1: a column, N).
QUANTIZATION_PARAMETERS = {
    "a_scale_tensor": ("a_tensor", -2),
    "a_zero_point_tensor": ("a_tensor", -2),
    "b_scale_tensor": ("b_tensor", -1),
    "b_zero_point_tensor": ("b_tensor", -1),
    "output_scale_tensor": ("output_tensor", -2),
    "output_zero_point_tensor": ("output_tensor", -2),
}


def validate(desc: QuantizedLinearMatrixMultiplyOperatorDesc, feature_level: FeatureLevel) -> None:
    tier = support_tier(desc.operator_type, feature_level, NAME)
    for field in desc.input_fields + desc.output_fields:
        tensor = getattr(desc, field)
        if tensor is None and field in desc.optional_fields:
            continue
        if not isinstance(tensor, TensorDesc):
            raise ValidationError(f"{NAME}.{field}: a TensorDesc is required, not {type(tensor).__name__}")
        check_tensor_support(tier, NAME, field, tensor)
    a, b, out = desc.a_tensor, desc.b_tensor, desc.output_tensor
    if not a.dimension_count == b.dimension_count == out.dimension_count:
        raise ValidationError(f"{NAME}.b_tensor: a_tensor, b_tensor and output_tensor must have the same dimension "
                              f"count ({a.dimension_count}, {b.dimension_count}, {out.dimension_count})")
    (*batch, m, k), (*b_batch, b_k, n) = a.sizes, b.sizes
    if b_k != k:
        raise ValidationError(f"{NAME}.b_tensor: B's rows ({b_k}) must equal A's columns K ({k})")
    if b_batch != batch:
        raise ValidationError(f"{NAME}.b_tensor: batch and channel sizes {b_batch} must equal A's {batch}")
    if list(out.sizes) != [*batch, m, n]:
        raise ValidationError(f"{NAME}.output_tensor: sizes {list(out.sizes)} must be {[*batch, m, n]} (A × B)")
    if out.owned_by_dml:
        raise ValidationError(f"{NAME}.output_tensor: OWNED_BY_DML is allowed on inputs only")
    if strides_overlap(out.sizes, out.element_strides):
        raise ValidationError(
            f"{NAME}.output_tensor: the strides {list(out.element_strides)} make two elements share memory")
    parameters = [f for f in QUANTIZATION_PARAMETERS if getattr(desc, f) is not None]
    counts = {getattr(desc, f).dimension_count for f in parameters}
    if len(counts) != 1:
        counts_by_field = ", ".join(f"{f} {getattr(desc, f).dimension_count}" for f in parameters)
        raise ValidationError(f"{NAME}.{parameters[-1]}: all scale and zero-point tensors must have the same "
                              f"dimension count ({counts_by_field})")
    for field in parameters:
        data_field, free_axis = QUANTIZATION_PARAMETERS[field]
        tensor, data = getattr(desc, field), getattr(desc, data_field)
        allowed = [1] * tensor.dimension_count
        if tensor.dimension_count >= -free_axis:
            allowed[free_axis] = data.sizes[free_axis]
        if any(size not in (1, limit) for size, limit in zip(tensor.sizes, allowed)):
            what = "per row {…, M, 1}" if free_axis == -2 else "per column {…, 1, N}"
            raise ValidationError(f"{NAME}.{field}: sizes {list(tensor.sizes)} must be per tensor {{1, …, 1}} or "
                                  f"{what}, here {allowed}")
        if "zero_point" in field and tensor.data_type != data.data_type:
            raise ValidationError(f"{NAME}.{field}: data type {tensor.data_type.name} must match {data_field}'s "
                                  f"{data.data_type.name}")


SCALE_FIELDS = ("a_scale_tensor", "b_scale_tensor", "output_scale_tensor")


def output_sizes(a_sizes: tuple, b_sizes: tuple) -> tuple:
    """The output's sizes for A {…, M, K} and B {…, K, N} whose batch dimensions broadcast NumPy-style (as ONNX
    Runtime's DirectML provider broadcasts them with zero strides): {…, M, N}."""
    (*a_batch, m, _), (*b_batch, _, n) = a_sizes, b_sizes
    try:
        batch = np.broadcast_shapes(tuple(a_batch), tuple(b_batch))
    except ValueError:
        raise ValidationError(f"{NAME}.b_tensor: batch dimensions {b_batch} do not broadcast with A's "
                              f"{a_batch}") from None
    return (*batch, m, n)


def output_type(output_dtype: DataType | None, zero_point_type: DataType | None,
                out_type: DataType | None) -> DataType:
    """The array API's output type: the one asked for, else the output zero point's, else that of the output array
    given, else UINT8 (DirectML's descs always say it)."""
    for data_type in (output_dtype, zero_point_type, out_type):
        if data_type is not None:
            return data_type
    return DataType.UINT8


def check_scale(field: str, values: np.ndarray) -> None:
    """A zero, NaN or infinite scale has no meaning (DirectML leaves it undefined). Backends whose memory the host
    cannot read without waiting (CUDA) check on the device instead and report at ``dmlops.check_errors()``."""
    if np.isfinite(values).all() and values.all():
        return
    bad = ~np.isfinite(values) | (values == 0)
    if bad.any():
        raise ValidationError(f"{NAME}.{field}: scales must be finite and non-zero, found {values[bad][0]!r}")


def requantize(acc: np.ndarray, a_scale, b_scale, output_scale, output_zero_point, output_type: DataType):
    """Integer accumulators → output type. Scales broadcast against acc ({…, M, N})."""
    multiplier = (a_scale.astype(np.float64) * b_scale.astype(np.float64)) / output_scale.astype(np.float64)
    rounded = np.rint(acc.astype(np.float64) * multiplier) + output_zero_point
    low, high = OUTPUT_RANGE[output_type]
    return np.clip(rounded, low, high).astype(output_type.numpy_dtype)


def reference(a, a_scale, a_zero_point, b, b_scale, b_zero_point, output_scale, output_zero_point,
              output_type: DataType) -> np.ndarray:
    """The operator's meaning in NumPy, on arrays that broadcast as DirectML-shaped tensors do.

    A missing zero point is 0. Accumulates in int64, exactly.
    """
    def shifted(x, zero_point):
        x = x.astype(np.int64)
        return x if zero_point is None else x - np.asarray(zero_point, dtype=np.int64)

    acc = np.matmul(shifted(a, a_zero_point), shifted(b, b_zero_point))
    zero = 0 if output_zero_point is None else np.asarray(output_zero_point, dtype=np.float64)
    return requantize(acc, np.asarray(a_scale), np.asarray(b_scale), np.asarray(output_scale), zero, output_type)
