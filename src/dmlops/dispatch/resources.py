"""Resources: a model's buffers, their sizes and initial values, made as DxDispatch makes them.

``initialValues`` is an array of numbers (floats may also be "nan", "inf" and "-inf"), a constant
``{valueCount, value}``, a sequence ``{valueCount, valueStart, valueDelta}`` (added up in the element type, so
integers wrap and floats round at every step, as C++ adds them), or ``{sourcePath}``: a ``.npy`` file, which carries
its data type, an image (``.png``, ``.jpg``: ``images``; the buffer's ``resampleSize`` and ``resampleMode`` apply), or
raw bytes (``.dat``, ``.bin``, any other name). A source path is found beside the model, else from the current
folder; any file that can be read is read, as DxDispatch reads it. Each value is converted as DxDispatch converts a
JSON number: integers must fit their type; FLOAT32 and FLOAT16 values are read as float32 (FLOAT16 then rounds again).
Where ``initialValuesDataType`` is ``UNKNOWN`` or absent, an array is a List Initializer: objects
``{"type", "value", "name"}`` (the name is a comment), their values packed in order, each in its own type, with no
padding between them; such a buffer has no data type to print or bind it in.

A buffer holds the initial values at ``initialValuesOffsetInBytes`` (default 0) and is ``sizeInBytes`` long, or as
long as the values rounded up to a multiple of 4 bytes. Generated and file values are made only when the buffer is
filled, so that a model's total size can be refused before anything is allocated.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from ..types import DataType
from .fields import (ModelError, as_enum, as_object, as_string, as_uint, as_uint64, as_uint_array, check_keys,
                     context, describe, member)
from .images import IMAGE_SUFFIXES, check_resample, image_size, read_image

FLOAT_TYPES = (DataType.FLOAT16, DataType.FLOAT32, DataType.FLOAT64)
SPECIAL_FLOATS = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}


@dataclass(frozen=True)
class Resource:
    """A buffer: its element type (what print and writeFile read it as), size and initial values."""

    name: str
    data_type: DataType
    size_in_bytes: int
    initial_values_offset: int
    initial_byte_count: int
    make_initial_values: Callable[[], np.ndarray]

    @property
    def dtype(self) -> np.dtype:
        return self.data_type.numpy_dtype

    @property
    def element_size(self) -> int:
        """Bytes an element; 0 for the UNKNOWN type of a List Initializer, as in DxDispatch's bindings."""
        return 0 if self.data_type == DataType.UNKNOWN else self.dtype.itemsize

    @property
    def initial_element_count(self) -> int:
        return self.initial_byte_count // self.dtype.itemsize

    def fill(self) -> np.ndarray:
        """The buffer's bytes: zeros, with the initial values at their offset (as many bytes as the model was read
        with, should a file have changed since)."""
        with context(f"resource '{self.name}'"):
            values = self.make_initial_values().reshape(-1).view(np.uint8)[:self.initial_byte_count]
        buffer = np.zeros(self.size_in_bytes, dtype=np.uint8)
        buffer[self.initial_values_offset:self.initial_values_offset + values.size] = values
        return buffer


def parse_resource(name: str, value, model_dir: Path) -> Resource:
    obj = as_object(value)
    data_type = member(obj, "initialValuesDataType", as_data_type, None)
    resample = (member(obj, "resampleSize", as_uint_array, None), member(obj, "resampleMode", as_string, "scale"))
    data_type, byte_count, make = member(obj, "initialValues",
                                         lambda v: initial_values(v, data_type, model_dir, resample))
    if byte_count == 0:
        raise ModelError("'initialValues' must be non-empty")
    # Unless the size is given, it is rounded up to a multiple of 4 bytes (DirectML binds whole 32-bit words).
    size = member(obj, "sizeInBytes", as_uint64, (byte_count + 3) & ~3)
    offset = member(obj, "initialValuesOffsetInBytes", as_uint64, 0)
    if byte_count + offset > size:
        raise ModelError(f"the buffer size ({size} bytes) is too small for the initialValues ({byte_count} bytes) "
                         f"at offset {offset} bytes")
    return Resource(name, data_type, size, offset, byte_count, make)


def as_data_type(value) -> DataType | None:
    data_type = as_enum(value, DataType)
    return None if data_type == DataType.UNKNOWN else data_type


def initial_values(value, data_type: DataType | None, model_dir: Path, resample=(None, "scale")):
    """(data type, byte count, function that makes the values) for an ``initialValues`` field; ``resample``: the
    buffer's resampleSize and resampleMode (images only)."""
    generator = next((key for key in ("value", "valueStart", "sourcePath") if key in value), None) \
        if isinstance(value, dict) else None
    if generator == "sourcePath":
        return file_values(member(value, "sourcePath", as_path), data_type, model_dir, resample)
    if isinstance(value, str) and value == "deferred":
        raise ModelError("deferred values (outputs that ONNX Runtime allocates) are not supported; give the "
                         "resource values of the output's size")
    if not isinstance(value, list) and generator is None:
        raise ModelError(f"expected an array of numbers, or an object with 'value', 'valueStart' or 'sourcePath', "
                         f"not {describe(value)}")
    if isinstance(value, list) and data_type is None:
        values = list_values(value)
        return DataType.UNKNOWN, values.nbytes, lambda: values
    if data_type is None:
        raise ModelError("'initialValuesDataType' is required for values written in the model")
    if isinstance(value, list):
        values = elements(value, data_type)
        return data_type, values.nbytes, lambda: values
    count = member(value, "valueCount", as_uint)
    byte_count = count * data_type.numpy_dtype.itemsize
    if generator == "value":
        if {"valueStart", "sourcePath"} & value.keys():
            raise ModelError("'value', 'valueStart' and 'sourcePath' are mutually exclusive")
        constant = member(value, "value", lambda v: elements([v], data_type))
        return data_type, byte_count, lambda: np.repeat(constant, count)
    start = member(value, "valueStart", lambda v: elements([v], data_type))
    delta = member(value, "valueDelta", lambda v: elements([v], data_type))
    return data_type, byte_count, lambda: sequence(start, delta, count)


def elements(values: list, data_type: DataType) -> np.ndarray:
    """JSON numbers as an array of ``data_type``, checked and converted as DxDispatch's parsers do."""
    if not isinstance(values, list):
        raise ModelError(f"expected an array of numbers, not {describe(values)}")
    checked = [_element(value, index, data_type) for index, value in enumerate(values)]
    if data_type not in FLOAT_TYPES:
        return np.array(checked, dtype=data_type.numpy_dtype)
    try:
        double = np.array(checked, dtype=np.float64)
    except OverflowError:
        raise ModelError("a number is beyond the range of FLOAT64") from None
    if data_type == DataType.FLOAT64:
        return double
    with np.errstate(over="ignore"):  # FLOAT16 too is read as a float32 first; too large becomes infinity
        return double.astype(np.float32).astype(data_type.numpy_dtype)


LIST_ELEMENT_FIELDS = ("type", "value", "name")


def list_values(values: list) -> np.ndarray:
    """A List Initializer's bytes: each element's value in the element's own type, packed in order."""
    parts = []
    for index, element in enumerate(values):
        with context(f"element {index}"):
            if not isinstance(element, dict):
                raise ModelError(f"expected an object {{\"type\", \"value\"}} of a List Initializer (an array of "
                                 f"numbers needs an initialValuesDataType), not {describe(element)}")
            check_keys(element, LIST_ELEMENT_FIELDS, "a List Initializer's element")
            member(element, "name", as_string, None)
            data_type = member(element, "type", as_element_type)
            parts.append(member(element, "value", lambda value: elements([value], data_type)).view(np.uint8))
    return np.concatenate(parts) if parts else np.zeros(0, np.uint8)


def as_element_type(value) -> DataType:
    data_type = as_data_type(value)
    if data_type is None:
        raise ModelError("an element's type must be a data type, not UNKNOWN")
    return data_type


def _element(value, index: int, data_type: DataType):
    if data_type in FLOAT_TYPES:
        if isinstance(value, str) and value.lower() in SPECIAL_FLOATS:
            return SPECIAL_FLOATS[value.lower()]
        if isinstance(value, int | float) and not isinstance(value, bool):
            return value
        raise ModelError(f"element {index}: expected a number or 'NaN', 'Inf', '-Inf', not {describe(value)}")
    limits = np.iinfo(data_type.numpy_dtype)
    if isinstance(value, bool) or not isinstance(value, int) or not limits.min <= value <= limits.max:
        raise ModelError(f"element {index}: expected an integer from {limits.min} to {limits.max} for "
                         f"{data_type.name}, not {describe(value)}")
    return value


def sequence(start: np.ndarray, delta: np.ndarray, count: int) -> np.ndarray:
    """start, start + delta, ...: each step added and rounded (or wrapped) in the element type."""
    steps = np.repeat(delta, count)
    steps[:1] = start
    with np.errstate(over="ignore"):
        return np.add.accumulate(steps, dtype=steps.dtype)


def as_path(value) -> Path:
    if not isinstance(value, str) or not value:
        raise ModelError(f"expected a file path, not {describe(value)}")
    return Path(value)


def file_values(source: Path, data_type: DataType | None, model_dir: Path, resample=(None, "scale")):
    """(data type, byte count, reader) for a file, found beside the model or else from the current folder."""
    path = model_dir / source if (model_dir / source).exists() else source
    if path.suffix.lower() in IMAGE_SUFFIXES:
        check_resample(*resample, data_type)
        size = image_size(path, resample[0])
        return data_type, math.prod(size) * data_type.numpy_dtype.itemsize, \
            lambda: read_image(path, data_type, resample[0])
    try:
        if path.suffix.lower() == ".npy":
            header = np.load(path, mmap_mode="r", allow_pickle=False)  # reads the header only
            file_type = _npy_data_type(header.dtype)
            if data_type is not None and data_type != file_type:
                raise ModelError(f"the data type of '{source}' ({file_type.name}) does not match "
                                 f"initialValuesDataType ({data_type.name})")
            return file_type, header.size * file_type.numpy_dtype.itemsize, lambda: _read_npy(path, file_type)
        byte_count = path.stat().st_size
    except (OSError, ValueError) as error:
        raise ModelError(f"sourcePath: cannot read '{source}' ({error})") from None
    if data_type is None:
        raise ModelError(f"'initialValuesDataType' is required for the raw bytes of '{source}' (only .npy files "
                         f"carry a data type)")
    return data_type, byte_count, lambda: np.fromfile(path, dtype=np.uint8)


def _npy_data_type(dtype: np.dtype) -> DataType:
    if dtype == np.bool_:
        return DataType.UINT8
    return DataType.from_numpy(dtype.newbyteorder("="))


def _read_npy(path: Path, data_type: DataType) -> np.ndarray:
    try:
        array = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as error:
        raise ModelError(f"sourcePath: cannot read '{path}' ({error})") from None
    return np.ascontiguousarray(array, dtype=data_type.numpy_dtype)
