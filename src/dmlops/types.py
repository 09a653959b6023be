"""DirectML's enumerations, with DirectML's codes, and the mapping of data types to NumPy."""

from __future__ import annotations

import enum

import numpy as np


class ValidationError(ValueError):
    """A desc, binding or value that DirectML would reject.

    The message names the operator, the field and the rule broken.
    """


class DataType(enum.IntEnum):
    UNKNOWN = 0
    FLOAT32 = 1
    FLOAT16 = 2
    UINT32 = 3
    UINT16 = 4
    UINT8 = 5
    INT32 = 6
    INT16 = 7
    INT8 = 8
    FLOAT64 = 9
    UINT64 = 10
    INT64 = 11
    UINT4 = 12
    INT4 = 13

    @property
    def bits(self) -> int:
        return _BITS[self]

    @property
    def numpy_dtype(self) -> np.dtype:
        """The NumPy dtype of one element; 4-bit and UNKNOWN types have none."""
        if self not in _NUMPY:
            raise ValidationError(f"DataType.{self.name} has no NumPy equivalent")
        return np.dtype(_NUMPY[self])

    @classmethod
    def from_numpy(cls, dtype) -> DataType:
        try:
            dtype = np.dtype(dtype)
        except TypeError:
            raise ValidationError(f"{dtype!r} is not a NumPy dtype") from None
        if dtype not in _FROM_NUMPY:
            if dtype.newbyteorder("=") in _FROM_NUMPY:
                raise no_data_type(f"NumPy dtype {dtype} (byte order not native)",
                                   "in native byte order: x.astype(x.dtype.newbyteorder('='))")
            raise no_data_type(f"NumPy dtype {dtype}")
        return _FROM_NUMPY[dtype]


def no_data_type(what: str, hint: str = "") -> ValidationError:
    """The error for an element type (``what``) that no DirectML data type matches: it lists the types that do."""
    supported = ", ".join(_NUMPY.values())
    return ValidationError(f"{what} has no DirectML data type; the supported types are {supported}"
                           + (f" {hint}" if hint else ""))


_BITS = {
    DataType.UNKNOWN: 0, DataType.FLOAT32: 32, DataType.FLOAT16: 16, DataType.UINT32: 32,
    DataType.UINT16: 16, DataType.UINT8: 8, DataType.INT32: 32, DataType.INT16: 16, DataType.INT8: 8,
    DataType.FLOAT64: 64, DataType.UINT64: 64, DataType.INT64: 64, DataType.UINT4: 4, DataType.INT4: 4,
}

_NUMPY = {
    DataType.FLOAT32: "float32", DataType.FLOAT16: "float16", DataType.UINT32: "uint32",
    DataType.UINT16: "uint16", DataType.UINT8: "uint8", DataType.INT32: "int32", DataType.INT16: "int16",
    DataType.INT8: "int8", DataType.FLOAT64: "float64", DataType.UINT64: "uint64", DataType.INT64: "int64",
}
_FROM_NUMPY = {np.dtype(name): data_type for data_type, name in _NUMPY.items()}


class TensorFlags(enum.IntFlag):
    NONE = 0
    OWNED_BY_DML = 0x1


class AxisDirection(enum.IntEnum):
    INCREASING = 0
    DECREASING = 1


class FeatureLevel(enum.IntEnum):
    LEVEL_1_0 = 0x1000
    LEVEL_2_0 = 0x2000
    LEVEL_2_1 = 0x2100
    LEVEL_3_0 = 0x3000
    LEVEL_3_1 = 0x3100
    LEVEL_4_0 = 0x4000
    LEVEL_4_1 = 0x4100
    LEVEL_5_0 = 0x5000
    LEVEL_5_1 = 0x5100
    LEVEL_5_2 = 0x5200
    LEVEL_6_0 = 0x6000
    LEVEL_6_1 = 0x6100
    LEVEL_6_2 = 0x6200
    LEVEL_6_3 = 0x6300
    LEVEL_6_4 = 0x6400

    @classmethod
    def parse(cls, text) -> FeatureLevel:
        """'6_4', '6.4', 'LEVEL_6_4', 'DML_FEATURE_LEVEL_6_4', 0x6400 or a FeatureLevel."""
        if isinstance(text, int):
            try:
                return cls(text)
            except ValueError:
                raise ValidationError(f"feature level {text:#x} is not a DirectML feature level") from None
        name = str(text).upper().replace(".", "_").removeprefix("DML_FEATURE_").removeprefix("LEVEL_")
        try:
            return cls["LEVEL_" + name]
        except KeyError:
            levels = ", ".join(level.name.removeprefix("LEVEL_") for level in cls)
            raise ValidationError(f"feature level {text!r} is not one of {levels}") from None

    def __str__(self) -> str:
        return self.name.removeprefix("LEVEL_")


class OperatorType(enum.IntEnum):
    CUMULATIVE_SUMMATION = 105
    QUANTIZED_LINEAR_MATRIX_MULTIPLY = 118
    CUMULATIVE_PRODUCT = 145

    @property
    def operator_name(self) -> str:
        """The C name, DML_OPERATOR_…, that messages give."""
        return "DML_OPERATOR_" + self.name


DEFAULT_FEATURE_LEVEL = FeatureLevel.LEVEL_6_4
