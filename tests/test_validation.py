"""compile_operator: the tensor-support tables of every feature level and every rule of the three operator descs.

Each rejection is a ValidationError whose message names the operator, the field and the rule broken.
"""

import dataclasses

import numpy as np
import pytest

from dmlops import (AxisDirection, CumulativeProductOperatorDesc, CumulativeSummationOperatorDesc, DataType,
                    Device, FeatureLevel, QuantizedLinearMatrixMultiplyOperatorDesc, TensorDesc, TensorFlags)

from checks import rejects

SUM, PRODUCT = "DML_OPERATOR_CUMULATIVE_SUMMATION", "DML_OPERATOR_CUMULATIVE_PRODUCT"
QMM = "DML_OPERATOR_QUANTIZED_LINEAR_MATRIX_MULTIPLY"
BUFFER_TYPES = [t for t in DataType if t != DataType.UNKNOWN]
LEVELS = list(FeatureLevel)
L = FeatureLevel.parse


# -- the support tables, restated from the operator pages ----------------------------------------------------------

SCAN_TYPES_4_0 = {DataType.FLOAT32, DataType.FLOAT16, DataType.INT32, DataType.UINT32}
SCAN_TYPES_5_0 = SCAN_TYPES_4_0 | {DataType.INT64, DataType.UINT64}
SCAN_SINCE = {"sum": L("2_1"), "product": L("3_1")}
SCAN_DESCS = {"sum": CumulativeSummationOperatorDesc, "product": CumulativeProductOperatorDesc}
SCAN_NAMES = {"sum": SUM, "product": PRODUCT}


def scan_supported(operation, level, rank, data_type):
    if level < SCAN_SINCE[operation]:
        return False
    ranks = range(1, 9) if level >= L("4_0") else [4]
    types = SCAN_TYPES_5_0 if level >= L("5_0") else SCAN_TYPES_4_0
    return rank in ranks and data_type in types


@pytest.mark.parametrize("level", LEVELS, ids=str)
@pytest.mark.parametrize("operation", ["sum", "product"])
def test_cumulative_support_table(operation, level):
    device = Device("cpu", level)
    for rank in range(1, 9):
        for data_type in BUFFER_TYPES:
            tensor = TensorDesc(data_type, [2] * rank)
            desc = SCAN_DESCS[operation](tensor, tensor, rank - 1)
            if scan_supported(operation, level, rank, data_type):
                device.compile_operator(desc)
                continue
            message = rejects([SCAN_NAMES[operation]], lambda: device.compile_operator(desc))
            if level < SCAN_SINCE[operation]:
                assert f"introduced in feature level {SCAN_SINCE[operation]}" in message
            else:
                assert "input_tensor" in message
                assert ("dimensions" in message) if rank not in (range(1, 9) if level >= L("4_0") else [4]) \
                    else ("data type " + data_type.name in message)


@pytest.mark.parametrize("operation, level, rank, data_type, accepted", [
    ("product", "3_0", 4, DataType.FLOAT32, False),  # introduced in 3_1
    ("product", "3_1", 4, DataType.FLOAT32, True),
    ("product", "3_1", 3, DataType.FLOAT32, False),  # 4-D only before 4_0
    ("sum", "2_1", 4, DataType.UINT32, True),
    ("sum", "2_0", 4, DataType.UINT32, False),
    ("sum", "3_1", 5, DataType.FLOAT16, False),
    ("sum", "4_0", 1, DataType.FLOAT16, True),
    ("sum", "4_1", 8, DataType.INT64, False),  # INT64 from 5_0
    ("sum", "5_0", 8, DataType.INT64, True),
    ("product", "6_4", 3, DataType.UINT64, True),
    ("sum", "6_4", 3, DataType.FLOAT64, False),
    ("sum", "6_4", 3, DataType.INT8, False),
    ("sum", "6_4", 3, DataType.UINT16, False),
])
def test_cumulative_support_landmarks(operation, level, rank, data_type, accepted):
    tensor = TensorDesc(data_type, [3] * rank)
    compile_it = lambda: Device("cpu", level).compile_operator(SCAN_DESCS[operation](tensor, tensor, 0))  # noqa
    if accepted:
        compile_it()
    else:
        rejects([SCAN_NAMES[operation], "feature level"], compile_it)


def qmm_desc(data_rank=2, parameter_rank=1, types=None, **changes):
    """A valid desc with M = 3, K = 5, N = 4 and per-tensor parameters; ``types`` overrides data types."""
    types = {"a": DataType.INT8, "b": DataType.UINT8, "output": DataType.INT8, **(types or {})}
    batch = [2] * (data_rank - 2)
    scale = TensorDesc(DataType.FLOAT32, [1] * parameter_rank)
    fields = {
        "a_tensor": TensorDesc(types["a"], batch + [3, 5]),
        "a_scale_tensor": scale,
        "a_zero_point_tensor": TensorDesc(types["a"], [1] * parameter_rank),
        "b_tensor": TensorDesc(types["b"], batch + [5, 4]),
        "b_scale_tensor": scale,
        "b_zero_point_tensor": TensorDesc(types["b"], [1] * parameter_rank),
        "output_scale_tensor": scale,
        "output_zero_point_tensor": TensorDesc(types["output"], [1] * parameter_rank),
        "output_tensor": TensorDesc(types["output"], batch + [3, 4]),
    }
    return QuantizedLinearMatrixMultiplyOperatorDesc(**{**fields, **changes})


@pytest.mark.parametrize("level", LEVELS, ids=str)
def test_quantized_matmul_support_table_dimensions(level):
    device = Device("cpu", level)
    for data_rank in range(2, 9):
        for parameter_rank in range(1, 9):
            desc = qmm_desc(data_rank, parameter_rank)
            if level < L("2_1"):
                accepted = False
            elif level < L("4_0"):
                accepted = data_rank == 4 and parameter_rank == 4
            else:
                accepted = data_rank <= 4 and parameter_rank <= 4
            if accepted:
                device.compile_operator(desc)
            else:
                rejects([QMM, "feature level"], lambda: device.compile_operator(desc))


@pytest.mark.parametrize("level", ["2_1", "4_0", "6_4"])
@pytest.mark.parametrize("data_type", BUFFER_TYPES, ids=lambda t: t.name)
def test_quantized_matmul_support_table_types(level, data_type):
    device = Device("cpu", level)
    quantized = data_type in (DataType.INT8, DataType.UINT8)
    for role in ("a", "b", "output"):
        desc = qmm_desc(4, 4, types={role: data_type}, **{f"{role}_zero_point_tensor": None})
        if quantized:
            device.compile_operator(desc)
        else:
            rejects([QMM, f"{role}_tensor", "data type " + data_type.name], lambda: device.compile_operator(desc))
    scale = TensorDesc(data_type, [1, 1, 1, 1])
    for field in ("a_scale_tensor", "b_scale_tensor", "output_scale_tensor"):
        desc = qmm_desc(4, 4, **{field: scale})
        if data_type == DataType.FLOAT32:
            device.compile_operator(desc)
        else:
            rejects([QMM, field, "data type " + data_type.name], lambda: device.compile_operator(desc))


def test_quantized_matmul_unavailable_before_2_1():
    rejects([QMM, "introduced in feature level 2_1", "2_0"],
            lambda: Device("cpu", "2_0").compile_operator(qmm_desc(4, 4)))


def test_quantized_matmul_two_dimensions_from_4_0():
    rejects([QMM, "a_tensor", "2 dimensions", "4"], lambda: Device("cpu", "3_1").compile_operator(qmm_desc(2, 4)))
    Device("cpu", "4_0").compile_operator(qmm_desc(2, 1))


# -- cumulative desc rules -------------------------------------------------------------------------------------

F32_23 = TensorDesc(DataType.FLOAT32, [2, 3])


@pytest.mark.parametrize("operation", ["sum", "product"])
@pytest.mark.parametrize("words, changes", [
    (["input_tensor", "TensorDesc is required"], {"input_tensor": None}),
    (["input_tensor", "TensorDesc is required"], {"input_tensor": np.zeros((2, 3), np.float32)}),
    (["output_tensor", "TensorDesc is required"], {"output_tensor": "out"}),
    (["output_tensor", "input's data type", "INT32"], {"output_tensor": TensorDesc(DataType.INT32, [2, 3])}),
    (["output_tensor", "sizes", "[3, 2]"], {"output_tensor": TensorDesc(DataType.FLOAT32, [3, 2])}),
    (["output_tensor", "dimension count", "[1, 2, 3]"], {"output_tensor": TensorDesc(DataType.FLOAT32, [1, 2, 3])}),
    (["output_tensor", "OWNED_BY_DML", "inputs only"],
     {"output_tensor": TensorDesc(DataType.FLOAT32, [2, 3], flags=TensorFlags.OWNED_BY_DML)}),
    (["output_tensor", "share memory"], {"output_tensor": TensorDesc(DataType.FLOAT32, [2, 3], [0, 1])}),
    (["output_tensor", "share memory"], {"output_tensor": TensorDesc(DataType.FLOAT32, [2, 3], [1, 1])}),
    (["axis", "2", "dimension count"], {"axis": 2}),
    (["axis", "-1"], {"axis": -1}),
    (["axis", "True", "not an integer"], {"axis": True}),
    (["axis", "1.0", "not an integer"], {"axis": 1.0}),
    (["axis", "'1'", "not an integer"], {"axis": "1"}),
    (["axis", "2", "dimension count"], {"axis": np.int64(2)}),
    (["axis_direction", "DML_AXIS_DIRECTION"], {"axis_direction": 2}),
    (["axis_direction", "DML_AXIS_DIRECTION"], {"axis_direction": "DECREASING"}),
    (["axis_direction", "DML_AXIS_DIRECTION", "'yes'"], {"axis_direction": "yes"}),
    (["axis_direction", "DML_AXIS_DIRECTION", "1.0"], {"axis_direction": 1.0}),  # equal to 1, not an integer
    (["axis_direction", "DML_AXIS_DIRECTION", "True"], {"axis_direction": True}),
])
def test_cumulative_desc_rejections(operation, words, changes):
    desc = SCAN_DESCS[operation](F32_23, F32_23, 1, AxisDirection.INCREASING, False)
    rejects([SCAN_NAMES[operation], *words], lambda: Device().compile_operator(dataclasses.replace(desc, **changes)))


@pytest.mark.parametrize("operation, field", [("sum", "has_exclusive_sum"), ("product", "has_exclusive_product")])
@pytest.mark.parametrize("value", [1, 2, 1.0, None, "yes", np.int64(1)])
def test_cumulative_exclusive_must_be_bool(operation, field, value):
    desc = SCAN_DESCS[operation](F32_23, F32_23, 0, AxisDirection.INCREASING, value)
    rejects([SCAN_NAMES[operation], field, "BOOL"], lambda: Device().compile_operator(desc))


def test_cumulative_accepted_variants():
    """Broadcast input strides, padded or permuted output strides, NumPy booleans, DirectML's enum values as ints."""
    device = Device()
    padded = TensorDesc(DataType.FLOAT32, [2, 3], [8, 2])
    permuted = TensorDesc(DataType.FLOAT32, [2, 3], [1, 2])
    broadcast = TensorDesc(DataType.FLOAT32, [2, 3], [0, 1])
    for x, out in [(broadcast, padded), (padded, permuted), (F32_23, F32_23)]:
        device.compile_operator(CumulativeSummationOperatorDesc(x, out, 1, 1, np.bool_(True)))
        device.compile_operator(CumulativeProductOperatorDesc(x, out, 0, AxisDirection.DECREASING, False))
    # NumPy integers are integers: an axis or a direction of np.int64 runs as the Python int would.
    x = np.array([[2, 1, 3], [5, 3, 8]], np.float32)
    for axis in (0, 1):
        op = device.compile_operator(CumulativeSummationOperatorDesc(F32_23, F32_23, np.int64(axis), np.uint8(1)))
        out = np.full_like(x, np.nan)
        op.execute([x], [out])
        np.testing.assert_array_equal(out, np.flip(np.cumsum(np.flip(x, axis), axis), axis))


# -- quantized matmul desc rules -------------------------------------------------------------------------------


def valid_qmm():
    return qmm_desc(4, 4)


@pytest.mark.parametrize("words, changes", [
    (["a_tensor", "TensorDesc is required"], {"a_tensor": None}),
    (["b_tensor", "TensorDesc is required"], {"b_tensor": None}),
    (["a_scale_tensor", "TensorDesc is required"], {"a_scale_tensor": None}),
    (["output_scale_tensor", "TensorDesc is required"], {"output_scale_tensor": 1.0}),
    (["output_tensor", "TensorDesc is required"], {"output_tensor": None}),
    (["same dimension count", "3", "4"], {"b_tensor": TensorDesc(DataType.UINT8, [2, 5, 4])}),
    (["b_tensor", "rows (6)", "columns K (5)"], {"b_tensor": TensorDesc(DataType.UINT8, [2, 2, 6, 4])}),
    (["b_tensor", "batch and channel", "[2, 3]", "[2, 2]"], {"b_tensor": TensorDesc(DataType.UINT8, [2, 3, 5, 4])}),
    (["output_tensor", "sizes", "[2, 2, 3, 4]"], {"output_tensor": TensorDesc(DataType.INT8, [2, 2, 4, 3])}),
    (["output_tensor", "sizes"], {"output_tensor": TensorDesc(DataType.INT8, [1, 2, 3, 4])}),
    (["output_tensor", "OWNED_BY_DML", "inputs only"],
     {"output_tensor": TensorDesc(DataType.INT8, [2, 2, 3, 4], flags=TensorFlags.OWNED_BY_DML)}),
    (["output_tensor", "share memory"], {"output_tensor": TensorDesc(DataType.INT8, [2, 2, 3, 4], [0, 12, 4, 1])}),
    (["same dimension count", "a_scale_tensor 4", "b_zero_point_tensor 3"],
     {"b_zero_point_tensor": TensorDesc(DataType.UINT8, [1, 1, 1])}),
    (["a_scale_tensor", "per row", "[1, 1, 3, 1]"], {"a_scale_tensor": TensorDesc(DataType.FLOAT32, [1, 1, 1, 3])}),
    (["a_zero_point_tensor", "per row"], {"a_zero_point_tensor": TensorDesc(DataType.INT8, [1, 1, 4, 1])}),
    (["a_scale_tensor", "per row"], {"a_scale_tensor": TensorDesc(DataType.FLOAT32, [2, 1, 3, 1])}),
    (["b_scale_tensor", "per column", "[1, 1, 1, 4]"], {"b_scale_tensor": TensorDesc(DataType.FLOAT32, [1, 1, 5, 1])}),
    (["b_zero_point_tensor", "per column"], {"b_zero_point_tensor": TensorDesc(DataType.UINT8, [1, 1, 1, 3])}),
    (["output_scale_tensor", "per row"], {"output_scale_tensor": TensorDesc(DataType.FLOAT32, [1, 1, 1, 4])}),
    (["output_zero_point_tensor", "per row"], {"output_zero_point_tensor": TensorDesc(DataType.INT8, [1, 2, 1, 1])}),
    (["a_zero_point_tensor", "UINT8", "must match a_tensor", "INT8"],
     {"a_zero_point_tensor": TensorDesc(DataType.UINT8, [1, 1, 1, 1])}),
    (["b_zero_point_tensor", "INT8", "must match b_tensor", "UINT8"],
     {"b_zero_point_tensor": TensorDesc(DataType.INT8, [1, 1, 1, 1])}),
    (["output_zero_point_tensor", "must match output_tensor"],
     {"output_zero_point_tensor": TensorDesc(DataType.UINT8, [1, 1, 1, 1])}),
    (["a_zero_point_tensor", "data type FLOAT32"], {"a_zero_point_tensor": TensorDesc(DataType.FLOAT32, [1] * 4)}),
])
def test_quantized_matmul_desc_rejections(words, changes):
    desc = dataclasses.replace(valid_qmm(), **changes)
    rejects([QMM, *words], lambda: Device().compile_operator(desc))


def test_quantized_matmul_accepted_variants():
    """Per-row and per-column parameters of every allowed rank, zero points absent, broadcast input strides."""
    device = Device()
    device.compile_operator(qmm_desc(2, 1, a_zero_point_tensor=None, b_zero_point_tensor=None,
                                     output_zero_point_tensor=None))
    row, column = TensorDesc(DataType.FLOAT32, [3, 1]), TensorDesc(DataType.FLOAT32, [1, 4])
    device.compile_operator(qmm_desc(
        3, 2, a_scale_tensor=row, b_scale_tensor=column, b_zero_point_tensor=TensorDesc(DataType.UINT8, [1, 4]),
        output_scale_tensor=row, b_tensor=TensorDesc(DataType.UINT8, [2, 5, 4], [0, 4, 1])))
    device.compile_operator(qmm_desc(4, 1, b_scale_tensor=TensorDesc(DataType.FLOAT32, [4])))


# -- devices -----------------------------------------------------------------------------------------------------


def test_device_rejections():
    rejects(["Device.backend", "'nope'", "cpu"], lambda: Device("nope"))
    rejects(["Device.backend", "'CPU'"], lambda: Device("CPU"))
    rejects(["feature level", "7_0"], lambda: Device("cpu", "7_0"))
    rejects(["compile_operator", "TensorDesc", "not an operator desc"], lambda: Device().compile_operator(F32_23))
    rejects(["compile_operator", "not an operator desc"], lambda: Device().compile_operator(None))


def test_device_defaults():
    device = Device()
    assert device.feature_level is FeatureLevel.LEVEL_6_4
    assert Device("cpu", 0x5000).feature_level is FeatureLevel.LEVEL_5_0
    assert repr(Device("cpu", "4_1")) == "Device('cpu', FeatureLevel.LEVEL_4_1)"


@pytest.mark.parametrize("sizes", [[0], [3, 0], [0, 2, 2]])
def test_tensors_have_no_size_of_zero(sizes):
    """DirectML's rule stays in the operator API (the array API gives empty results for empty arrays)."""
    rejects(["sizes", "size of 0"], lambda: TensorDesc(DataType.FLOAT32, sizes))
