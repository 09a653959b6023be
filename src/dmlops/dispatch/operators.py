"""Dispatchables: DirectML operators written in JSON, read into dmlops operator descs, and the bindings of their
tensors to resources.

A JSON desc names the C fields of the operator's desc (``InputTensor``, ``HasExclusiveSum``); each is the field of
the dmlops desc with the same name in snake_case (``input_tensor``, ``has_exclusive_sum``), and every field but an
optional tensor is required, as in DxDispatch. Tensor descs are written flat or as ``{Type, Desc}``; enums by their
full or suffix names; BOOLs as JSON booleans. What the values mean is left to dmlops, which validates the desc when
it is compiled.
"""

from __future__ import annotations

import dataclasses
import enum
import typing
from dataclasses import dataclass

from ..ops import OPERATORS
from ..tensor import TensorDesc
from ..types import DataType, TensorFlags
from .fields import (REQUIRED, ExecutionFlags, ModelError, as_bool, as_enum, as_flags, as_name, as_object,
                     as_string, as_uint, as_uint64, as_uint_array, check_keys, context, member)

BUFFER_TENSOR_DESC_FIELDS = ("DataType", "Flags", "DimensionCount", "Sizes", "Strides", "TotalTensorSizeInBytes",
                             "GuaranteedBaseOffsetAlignment")
BINDING_FIELDS = ("name", "elementOffset", "elementCount", "elementSizeInBytes")
# Keys of a dispatchable object beside its desc, when the desc fields are written in the dispatchable itself.
DISPATCHABLE_FIELDS = ("type", "Type", "executionFlags", "bindings", "dmlCompileType")


@dataclass(frozen=True)
class BindingSource:
    """A resource bound to a tensor; offsets and counts in elements of ``element_size_in_bytes`` (0: the size of
    the resource's data type); ``shape``: an ONNX model's tensor's shape (None: the model's)."""

    name: str
    element_offset: int = 0
    element_count: int = 0
    element_size_in_bytes: int = 0
    shape: tuple[int, ...] | None = None


@dataclass(frozen=True)
class Dispatchable:
    name: str
    desc: object
    initialize_bindings: dict[str, BindingSource]  # by the desc's field name
    execution_flags: ExecutionFlags


def operator_name(desc_type) -> str:
    return desc_type.operator_type.operator_name


def c_name(field: str) -> str:
    """input_tensor → InputTensor, a_scale_tensor → AScaleTensor."""
    return "".join(part.capitalize() for part in field.split("_"))


def parse_dispatchable(name: str, value) -> Dispatchable:
    obj = as_object(value)
    desc_type = member(obj, "Type" if "Type" in obj else "type", as_operator)
    desc_key = next((key for key in ("Desc", "desc") if key in obj), None)
    if desc_key is None:  # the desc's fields are written in the dispatchable itself
        desc = parse_desc(desc_type, {key: v for key, v in obj.items() if key not in DISPATCHABLE_FIELDS})
    else:
        desc = member(obj, desc_key, lambda v: parse_desc(desc_type, as_object(v)))
    return Dispatchable(name, desc, member(obj, "bindings", lambda v: parse_bindings(v, desc), {}),
                        member(obj, "executionFlags", lambda v: as_flags(v, ExecutionFlags), ExecutionFlags.NONE))


def as_operator(value):
    """The dmlops desc class of an operator type, named in full or by its suffix."""
    text = as_string(value)
    for desc_type in OPERATORS:
        if text in (operator_name(desc_type), desc_type.operator_type.name):
            return desc_type
    supported = ", ".join(operator_name(desc_type) for desc_type in OPERATORS)
    raise ModelError(f"'{text}' is not supported; dmlops runs the DirectML operators {supported}, and ONNX models "
                     f"(\"type\": \"onnx\")")


def parse_desc(desc_type, obj: dict):
    """A dmlops operator desc from the JSON object of the C desc."""
    hints = typing.get_type_hints(desc_type)
    fields = {c_name(field.name): field.name for field in dataclasses.fields(desc_type)}
    check_keys(obj, fields, f"DML_{desc_type.operator_type.name}_OPERATOR_DESC")
    values = {}
    for key, field in fields.items():
        parse, optional = _field_parser(hints[field])
        values[field] = member(obj, key, parse, None if optional else REQUIRED)
    return desc_type(**values)


def _field_parser(hint):
    """(parser, optional) for a desc field of the given type."""
    optional = type(None) in typing.get_args(hint)
    if optional:
        (hint,) = (arg for arg in typing.get_args(hint) if arg is not type(None))
    if hint is TensorDesc:
        return parse_tensor_desc, optional
    if hint is bool:
        return as_bool, optional
    if hint is int:
        return as_uint, optional
    if issubclass(hint, enum.Enum):
        return (lambda value: as_enum(value, hint)), optional
    raise TypeError(f"no JSON reader for a desc field of type {hint}")


def parse_tensor_desc(value) -> TensorDesc:
    """DML_TENSOR_DESC: ``{Type, Desc}``, or the fields of DML_BUFFER_TENSOR_DESC with an optional Type."""
    obj = as_object(value)
    member(obj, "Type", lambda v: as_name(v, ("BUFFER",), "DML_TENSOR_TYPE", "DML_TENSOR_TYPE_"), "BUFFER")
    if "Desc" in obj:
        check_keys(obj, ("Type", "Desc"), "DML_TENSOR_DESC")
        return member(obj, "Desc", lambda v: parse_buffer_tensor_desc(as_object(v)))
    return parse_buffer_tensor_desc({key: v for key, v in obj.items() if key != "Type"})


def parse_buffer_tensor_desc(obj: dict) -> TensorDesc:
    check_keys(obj, BUFFER_TENSOR_DESC_FIELDS, "DML_BUFFER_TENSOR_DESC")
    sizes = member(obj, "Sizes", as_uint_array)
    dimension_count = member(obj, "DimensionCount", as_uint, len(sizes))
    if dimension_count != len(sizes):
        raise ModelError(f"DimensionCount {dimension_count} does not match the {len(sizes)} Sizes")
    strides = member(obj, "Strides", as_uint_array, None)
    return TensorDesc(
        member(obj, "DataType", lambda v: as_enum(v, DataType)), tuple(sizes),
        tuple(strides) if strides else None,  # an empty array means none, as in DxDispatch
        flags=member(obj, "Flags", lambda v: as_flags(v, TensorFlags), TensorFlags.NONE),
        total_tensor_size_in_bytes=member(obj, "TotalTensorSizeInBytes", as_uint64, 0),
        guaranteed_base_offset_alignment=member(obj, "GuaranteedBaseOffsetAlignment", as_uint, 0))


def parse_bindings(value, desc) -> dict[str, BindingSource]:
    """Tensor name → resource, for the tensors of ``desc``; keyed by the desc's field names."""
    fields = {c_name(field): field for field in desc.input_fields + desc.output_fields}
    bindings = {}
    for key, source in as_object(value).items():
        if key not in fields:
            raise ModelError(f"'{key}' is not a tensor of {operator_name(desc)} ({', '.join(fields)})")
        with context(key):
            bindings[fields[key]] = parse_binding_source(source)
    return bindings


def parse_binding_source(value) -> BindingSource:
    """A resource name, a binding object, or an array of one of them."""
    if isinstance(value, list):
        if len(value) != 1:
            raise ModelError(f"{len(value)} resources bound; a DirectML operator's tensor takes 1")
        (value,) = value
    if isinstance(value, str):
        return BindingSource(value)
    obj = as_object(value)
    check_keys(obj, BINDING_FIELDS, "a buffer binding")
    return BindingSource(member(obj, "name", as_string), member(obj, "elementOffset", as_uint64, 0),
                         member(obj, "elementCount", as_uint64, 0), member(obj, "elementSizeInBytes", as_uint64, 0))
