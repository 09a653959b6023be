"""DirectML's enumerations: names, codes, NumPy mapping, feature-level parsing; and the package's import cost."""

import subprocess
import sys

import numpy as np
import pytest

import dmlops
from dmlops import AxisDirection, DataType, FeatureLevel, OperatorType, TensorFlags, ValidationError

# DirectML.h, DML_TENSOR_DATA_TYPE_*.
DATA_TYPE_CODES = {
    "UNKNOWN": 0, "FLOAT32": 1, "FLOAT16": 2, "UINT32": 3, "UINT16": 4, "UINT8": 5, "INT32": 6, "INT16": 7,
    "INT8": 8, "FLOAT64": 9, "UINT64": 10, "INT64": 11, "UINT4": 12, "INT4": 13,
}
FEATURE_LEVEL_CODES = {
    "1_0": 0x1000, "2_0": 0x2000, "2_1": 0x2100, "3_0": 0x3000, "3_1": 0x3100, "4_0": 0x4000, "4_1": 0x4100,
    "5_0": 0x5000, "5_1": 0x5100, "5_2": 0x5200, "6_0": 0x6000, "6_1": 0x6100, "6_2": 0x6200, "6_3": 0x6300,
    "6_4": 0x6400,
}
NUMPY_TYPES = {
    "FLOAT32": np.float32, "FLOAT16": np.float16, "UINT32": np.uint32, "UINT16": np.uint16, "UINT8": np.uint8,
    "INT32": np.int32, "INT16": np.int16, "INT8": np.int8, "FLOAT64": np.float64, "UINT64": np.uint64,
    "INT64": np.int64,
}


def test_data_type_codes():
    assert {member.name: member.value for member in DataType} == DATA_TYPE_CODES


@pytest.mark.parametrize("name, bits", [("FLOAT32", 32), ("FLOAT16", 16), ("UINT8", 8), ("INT64", 64),
                                        ("UINT4", 4), ("INT4", 4), ("UNKNOWN", 0)])
def test_data_type_bits(name, bits):
    assert DataType[name].bits == bits


@pytest.mark.parametrize("name", NUMPY_TYPES)
def test_data_type_numpy_mapping_both_ways(name):
    dtype = np.dtype(NUMPY_TYPES[name])
    assert DataType[name].numpy_dtype == dtype
    assert DataType.from_numpy(dtype) is DataType[name]
    assert DataType[name].bits == 8 * dtype.itemsize


@pytest.mark.parametrize("name", ["UNKNOWN", "UINT4", "INT4"])
def test_data_types_without_numpy_dtype(name):
    with pytest.raises(ValidationError, match=f"{name}.*no NumPy"):
        DataType[name].numpy_dtype


@pytest.mark.parametrize("dtype", [np.bool_, np.complex64, ">f4", "U3", object])
def test_numpy_dtypes_without_data_type(dtype):
    """The message lists the dtypes that have a DirectML data type."""
    with pytest.raises(ValidationError, match="no DirectML data type; the supported types are float32, float16, "
                                              "uint32, uint16, uint8, int32, int16, int8, float64, uint64, int64"):
        DataType.from_numpy(dtype)


def test_big_endian_dtypes_say_the_byte_order():
    with pytest.raises(ValidationError, match=r">f4 \(byte order not native\).*newbyteorder"):
        DataType.from_numpy(">f4")
    assert DataType.from_numpy("=f4") == DataType.from_numpy("<f4") == DataType.FLOAT32


def test_other_enumerations():
    assert {name: m.value for name, m in TensorFlags.__members__.items()} == {"NONE": 0, "OWNED_BY_DML": 1}
    assert {m.name: m.value for m in AxisDirection} == {"INCREASING": 0, "DECREASING": 1}
    assert {m.name: m.value for m in OperatorType} == {
        "CUMULATIVE_SUMMATION": 105, "QUANTIZED_LINEAR_MATRIX_MULTIPLY": 118, "CUMULATIVE_PRODUCT": 145}
    assert {m.name: m.value for m in FeatureLevel} == {"LEVEL_" + k: v for k, v in FEATURE_LEVEL_CODES.items()}


@pytest.mark.parametrize("suffix, code", FEATURE_LEVEL_CODES.items())
def test_feature_level_parse_every_spelling(suffix, code):
    level = FeatureLevel(code)
    for spelling in (suffix, suffix.replace("_", "."), "LEVEL_" + suffix, "DML_FEATURE_LEVEL_" + suffix,
                     "dml_feature_level_" + suffix, code, level):
        assert FeatureLevel.parse(spelling) is level
    assert str(level) == suffix


@pytest.mark.parametrize("text", ["7_0", "6_5", "", "LEVEL_", 0x6500, 0, "six"])
def test_feature_level_parse_rejects(text):
    with pytest.raises(ValidationError, match="feature level"):
        FeatureLevel.parse(text)


def test_validation_error_is_a_value_error():
    assert issubclass(ValidationError, ValueError)
    assert dmlops.ValidationError is ValidationError


def test_import_does_not_import_torch():
    code = "import sys, dmlops; print('torch' in sys.modules, 'triton' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.split() == ["False", "False"]


def test_cpu_run_does_not_import_torch():
    code = ("import sys, numpy, dmlops; dmlops.cumulative_sum(numpy.arange(4, dtype='float32'), 0); "
            "dmlops.quantized_linear_matmul(numpy.ones((2, 2), 'uint8'), 1.0, None, numpy.ones((2, 2), 'uint8'), "
            "1.0, None, 1.0, None); print('torch' in sys.modules)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"
