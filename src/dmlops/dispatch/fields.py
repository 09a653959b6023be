"""Reading the values of a parsed JSON model: typed fields, DirectML enum names, and errors that say where in the
model they are."""

from __future__ import annotations

import contextlib
import enum
import json

from ..types import AxisDirection, DataType, TensorFlags, ValidationError


class ModelError(ValidationError):
    """A DxDispatch model that cannot run: the message says where in the model and what is wrong."""


class ExecutionFlags(enum.IntFlag):
    """DML_EXECUTION_FLAGS: accepted in models; dmlops computes the same way under every flag."""

    NONE = 0
    ALLOW_HALF_PRECISION_COMPUTATION = 0x1
    DISABLE_META_COMMANDS = 0x2
    DESCRIPTORS_VOLATILE = 0x4


# The C name of each enum a model spells out, and the prefix of its values' full names: a value may be written in
# full (DML_AXIS_DIRECTION_INCREASING) or as the suffix (INCREASING), in exactly that case, as DxDispatch reads them.
C_ENUMS = {
    DataType: ("DML_TENSOR_DATA_TYPE", "DML_TENSOR_DATA_TYPE_"),
    AxisDirection: ("DML_AXIS_DIRECTION", "DML_AXIS_DIRECTION_"),
    TensorFlags: ("DML_TENSOR_FLAGS", "DML_TENSOR_FLAG_"),
    ExecutionFlags: ("DML_EXECUTION_FLAGS", "DML_EXECUTION_FLAG_"),
}


@contextlib.contextmanager
def context(where: str):
    """Prefix the message of any ValidationError raised inside with ``where``."""
    try:
        yield
    except ValidationError as error:
        raise ModelError(f"{where}: {error}") from None


REQUIRED = object()


def member(obj: dict, key: str, parse, default=REQUIRED):
    """obj[key] read by ``parse``; ``default`` when absent, or an error when the field is REQUIRED."""
    if key not in obj:
        if default is REQUIRED:
            raise ModelError(f"field '{key}' is required")
        return default
    with context(key):
        return parse(obj[key])


def check_keys(obj: dict, known, what: str) -> None:
    """Refuse keys that DxDispatch would ignore but whose misspelling would change the result."""
    unknown = [key for key in obj if key not in known]
    if unknown:
        raise ModelError(f"'{unknown[0]}' is not a field of {what} ({', '.join(known)})")


def as_object(value) -> dict:
    if not isinstance(value, dict):
        raise ModelError(f"expected a JSON object, not {describe(value)}")
    return value


def as_string(value) -> str:
    if not isinstance(value, str):
        raise ModelError(f"expected a string, not {describe(value)}")
    return value


def as_bool(value) -> bool:
    if not isinstance(value, bool):
        raise ModelError(f"expected true or false, not {describe(value)}")
    return value


def as_uint(value, bits: int = 32) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**bits:
        raise ModelError(f"expected an unsigned {bits}-bit integer, not {describe(value)}")
    return value


def as_uint64(value) -> int:
    return as_uint(value, 64)


def as_uint_array(value) -> list[int]:
    if not isinstance(value, list):
        raise ModelError(f"expected an array of unsigned integers, not {describe(value)}")
    return [as_uint(element) for element in value]


def as_name(value, names, c_type: str, prefix: str) -> str:
    """The suffix name of a DirectML enum value written in full or as its suffix."""
    text = as_string(value)
    name = text.removeprefix(prefix)
    if name not in names:
        raise ModelError(f"'{text}' is not a recognized value for {c_type} ({', '.join(names)})")
    return name


def as_enum(value, enum_type):
    c_type, prefix = C_ENUMS[enum_type]
    return enum_type[as_name(value, enum_type.__members__, c_type, prefix)]


def as_flags(value, flag_type):
    """A flag name, or an array of names to OR together."""
    names = value if isinstance(value, list) else [value]
    flags = flag_type(0)
    for name in names:
        flags |= as_enum(name, flag_type)
    return flags


def describe(value) -> str:
    """A JSON value as the model wrote it, shortened."""
    text = json.dumps(value)
    return text if len(text) <= 40 else text[:37] + "..."
