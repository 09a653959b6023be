"""The tensor-support tables of the operator pages, one row per tensor, as data.

Each operator lists its tiers newest first, exactly as its page does; a device uses the first tier its
feature level reaches, and the oldest tier's level is the level the operator was introduced in.
"""

from __future__ import annotations

from dataclasses import dataclass

from .types import DataType, FeatureLevel, OperatorType, ValidationError


@dataclass(frozen=True)
class TensorSupport:
    dimension_counts: range
    data_types: tuple[DataType, ...]


@dataclass(frozen=True)
class SupportTier:
    since: FeatureLevel
    tensors: dict[str, TensorSupport]


def _types(names: str) -> tuple[DataType, ...]:
    return tuple(DataType[name.strip()] for name in names.split(","))


def _tier(since: str, rows: dict[str, tuple[range, str]]) -> SupportTier:
    return SupportTier(FeatureLevel.parse(since),
                       {name: TensorSupport(dims, _types(types)) for name, (dims, types) in rows.items()})


def _same_rows(fields, dims, types):
    return {name: (dims, types) for name in fields}


_SCAN = ("input_tensor", "output_tensor")
_QMM_DATA = ("a_tensor", "b_tensor", "output_tensor")
_QMM_SCALES = ("a_scale_tensor", "b_scale_tensor", "output_scale_tensor")
_QMM_ZERO_POINTS = ("a_zero_point_tensor", "b_zero_point_tensor", "output_zero_point_tensor")

_SCAN_TIERS = (
    _tier("5_0", _same_rows(_SCAN, range(1, 9), "FLOAT32, FLOAT16, INT64, INT32, UINT64, UINT32")),
    _tier("4_0", _same_rows(_SCAN, range(1, 9), "FLOAT32, FLOAT16, INT32, UINT32")),
)

TENSOR_SUPPORT: dict[OperatorType, tuple[SupportTier, ...]] = {
    OperatorType.CUMULATIVE_SUMMATION: _SCAN_TIERS + (
        _tier("2_1", _same_rows(_SCAN, range(4, 5), "FLOAT32, FLOAT16, INT32, UINT32")),
    ),
    OperatorType.CUMULATIVE_PRODUCT: _SCAN_TIERS + (
        _tier("3_1", _same_rows(_SCAN, range(4, 5), "FLOAT32, FLOAT16, INT32, UINT32")),
    ),
    OperatorType.QUANTIZED_LINEAR_MATRIX_MULTIPLY: (
        _tier("4_0", {**_same_rows(_QMM_DATA, range(2, 5), "INT8, UINT8"),
                      **_same_rows(_QMM_SCALES, range(1, 5), "FLOAT32"),
                      **_same_rows(_QMM_ZERO_POINTS, range(1, 5), "INT8, UINT8")}),
        _tier("2_1", {**_same_rows(_QMM_DATA, range(4, 5), "INT8, UINT8"),
                      **_same_rows(_QMM_SCALES, range(4, 5), "FLOAT32"),
                      **_same_rows(_QMM_ZERO_POINTS, range(4, 5), "INT8, UINT8")}),
    ),
}


def introduced_in(operator: OperatorType) -> FeatureLevel:
    return TENSOR_SUPPORT[operator][-1].since


def support_tier(operator: OperatorType, feature_level: FeatureLevel, operator_name: str) -> SupportTier:
    """The tier of the table that applies at a feature level, or a ValidationError if the operator is absent."""
    for tier in TENSOR_SUPPORT[operator]:
        if feature_level >= tier.since:
            return tier
    raise ValidationError(
        f"{operator_name}: the operator was introduced in feature level {introduced_in(operator)}; "
        f"the device's feature level is {feature_level}")


def check_array_rank(operator: OperatorType, operator_name: str, field: str, dimension_count: int) -> None:
    """An array's dimension count against the dimension counts its tensor may have at the newest feature level (the
    array API describes an array as a tensor of the array's own rank)."""
    counts = TENSOR_SUPPORT[operator][0].tensors[field].dimension_counts
    if dimension_count not in counts:
        raise ValidationError(f"{operator_name}.{field}: must have {_counts_text(counts)} dimensions, not "
                              f"{dimension_count}")


def _counts_text(counts: range) -> str:
    return str(counts.start) if len(counts) == 1 else f"{counts.start} to {counts.stop - 1}"


def check_tensor_support(tier: SupportTier, operator_name: str, field: str, desc) -> None:
    """Dimension count and data type of one tensor against its row of the table."""
    if desc is None:
        return
    row = tier.tensors[field]
    if desc.dimension_count not in row.dimension_counts:
        raise ValidationError(
            f"{operator_name}.{field}: {desc.dimension_count} dimensions; feature level {tier.since} and above "
            f"support {_counts_text(row.dimension_counts)}")
    if desc.data_type not in row.data_types:
        raise ValidationError(
            f"{operator_name}.{field}: data type {desc.data_type.name} is not supported at feature level "
            f"{tier.since} and above ({', '.join(t.name for t in row.data_types)})")
