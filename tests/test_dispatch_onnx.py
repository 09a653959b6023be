"""ONNX dispatchables: CumSum, CumProd and QLinearMatMul nodes run on dmlops with the attributes mapped as ONNX
Runtime's DirectML execution provider maps them, checked against ONNX Runtime's CPU result for the same model; the
Guide's bindings, implicit bindings and dynamic-shape options."""

from __future__ import annotations

import io
import json
import sys
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

import reference
from dmlops.backends.cpu.processor import target_features
from dmlops.dispatch import ModelError, read_model, run_model
from dmlops.dispatch.onnx_models import OnnxOptions
from dmlops.dispatch.timing import TimingOptions

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

from dmlops.dispatch import onnx_operators  # noqa: E402

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
ONNX_TYPES = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.int32): TensorProto.INT32,
              np.dtype(np.int64): TensorProto.INT64, np.dtype(np.uint8): TensorProto.UINT8,
              np.dtype(np.int8): TensorProto.INT8}


def one_node_model(op: str, inputs: dict[str, np.ndarray], output_dtype, opset: int, **attributes):
    """A model of one node whose inputs are the graph's, named as ``inputs`` is, and whose output is 'y'."""
    node = helper.make_node(op, list(inputs), ["y"], **attributes)
    graph = helper.make_graph(
        [node], op, [helper.make_tensor_value_info(name, ONNX_TYPES[value.dtype], value.shape)
                     for name, value in inputs.items()],
        [helper.make_tensor_value_info("y", ONNX_TYPES[np.dtype(output_dtype)], None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10
    return model


def on_dmlops(model, feeds: dict) -> np.ndarray:
    """The model's output on the reference evaluator with dmlops's nodes, which must be the ones that ran."""
    evaluator = ReferenceEvaluator(model, new_ops=onnx_operators.evaluator_operators(
        lambda x: x, lambda x: x))
    assert all(type(node).__module__ == onnx_operators.__name__ for node in evaluator.rt_nodes_)
    return evaluator.run(None, feeds)[0]


def on_onnx_runtime(model, feeds: dict) -> np.ndarray:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)[0]


@pytest.mark.parametrize("op", ["CumSum", "CumProd"])
@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.int64])
@pytest.mark.parametrize("axis", [-2, -1, 0, 2])
def test_cumulative_nodes_match_onnx_runtime(op, dtype, axis):
    """Every exclusive and reverse, on values whose sums and products are exact in any order: equal to the bit."""
    rng = np.random.default_rng(abs(axis) * 7 + len(op))
    x = rng.integers(-3, 4, (3, 4, 5)).astype(dtype)
    for exclusive in (0, 1):
        for reverse in (0, 1):
            feeds = {"x": x, "axis": np.array(axis, np.int64)}
            model = one_node_model(op, feeds, dtype, 26 if op == "CumProd" else 14, exclusive=exclusive,
                                   reverse=reverse)
            expected = on_onnx_runtime(model, feeds)
            assert expected.dtype == dtype
            np.testing.assert_array_equal(on_dmlops(model, feeds), expected, strict=True)


def test_the_cumulative_mapping():
    """Axis counts from the end where negative; reverse is DECREASING; exclusive is HasExclusiveSum."""
    x = np.array([[2, 1, 3, 5], [3, 8, 7, 3]], np.float32)
    import dmlops

    assert onnx_operators.cumulative(dmlops.cumulative_sum, x, np.array(-1), 1, 1).tolist() == \
        [[9, 8, 5, 0], [18, 10, 3, 0]]
    assert onnx_operators.cumulative(dmlops.cumulative_product, x, np.array([0]), 0, 0).tolist() == \
        [[2, 1, 3, 5], [6, 8, 21, 15]]


# ONNX Runtime's uint8 × int8 kernel on x86 processors without VNNI multiplies pairs of bytes with vpmaddubsw, whose
# int16 sums saturate (255·127 + 255·127 > 2^15), so that its results are off by far more than a tie there; its
# quantization tools then take A's values of 7 bits (reduce_range), with which no pair saturates.
SATURATING_U8S8 = not target_features() & {"avx512vnni", "avxvnni"}


def a_values(rng, a_dtype, b_dtype, shape) -> np.ndarray:
    """Random values of A, of 7 bits where ONNX Runtime's uint8 × int8 products saturate (SATURATING_U8S8)."""
    if SATURATING_U8S8 and (a_dtype, b_dtype) == (np.uint8, np.int8):
        return rng.integers(0, 128, shape, dtype=np.uint8)
    info = np.iinfo(a_dtype)
    return rng.integers(info.min, info.max + 1, shape, dtype=a_dtype)


def quantized_feeds(rng, a_dtype, b_dtype, m, k, n, per_column: bool) -> dict:
    """Random inputs of QLinearMatMul; the output has A's type (as ONNX Runtime's CPU kernels take them)."""
    def integers(dtype, shape):
        info = np.iinfo(dtype)
        return rng.integers(info.min, info.max + 1, shape, dtype=dtype)
    return {"a": a_values(rng, a_dtype, b_dtype, (m, k)), "a_scale": np.array(rng.uniform(0.001, 0.1), np.float32),
            "a_zero_point": integers(a_dtype, ()), "b": integers(b_dtype, (k, n)),
            "b_scale": rng.uniform(0.001, 0.1, n if per_column else ()).astype(np.float32),
            "b_zero_point": integers(b_dtype, n if per_column else ()),
            "y_scale": np.array(rng.uniform(0.01, 0.2), np.float32), "y_zero_point": integers(a_dtype, ())}


def exact_value(feeds: dict, row: int, column: int) -> Fraction:
    """The exact rational value the output element requantizes: Σ(a − za)(b − zb) · sa · sb / so."""
    def per_column(name):
        value = feeds[name]
        return value.item() if value.ndim == 0 else value[column].item()
    a = feeds["a"][row].astype(np.int64) - int(feeds["a_zero_point"])
    b = feeds["b"][:, column].astype(np.int64) - per_column("b_zero_point")
    return int(a @ b) * Fraction(feeds["a_scale"].item()) * Fraction(per_column("b_scale")) / \
        Fraction(feeds["y_scale"].item())


def assert_equal_but_at_ties(ours: np.ndarray, theirs: np.ndarray, feeds: dict) -> int:
    """Equal to ONNX Runtime's output, but where ORT's float32 requantization rounds a near tie the other way: there
    the exact value lies within float32's error (2^-20 relative) of a half, and the outputs differ by one. Returns
    how many such ties there were."""
    differing = np.argwhere(ours != theirs)
    for row, column in differing:
        exact = exact_value(feeds, row, column)
        half = Fraction(exact.numerator // exact.denominator) + Fraction(1, 2)
        assert abs(exact - half) <= abs(exact) * Fraction(1, 2**20), (row, column, float(exact))
        assert abs(int(ours[row, column]) - int(theirs[row, column])) == 1
    return len(differing)


@pytest.mark.parametrize("a_dtype, b_dtype", [(np.uint8, np.int8), (np.uint8, np.uint8), (np.int8, np.int8)])
@pytest.mark.parametrize("per_column", [False, True])
def test_qlinear_matmul_matches_onnx_runtime_but_at_ties(a_dtype, b_dtype, per_column):
    rng = np.random.default_rng(7)
    for _ in range(3):
        feeds = quantized_feeds(rng, a_dtype, b_dtype, 24, 40, 16, per_column)
        model = one_node_model("QLinearMatMul", feeds, a_dtype, 21)
        ours = on_dmlops(model, feeds)
        b_scale = feeds["b_scale"] if per_column else feeds["b_scale"].item()
        b_zero_point = feeds["b_zero_point"] if per_column else feeds["b_zero_point"].item()
        np.testing.assert_array_equal(ours, reference.quantized_matmul(
            feeds["a"], feeds["a_scale"].item(), feeds["a_zero_point"].item(), feeds["b"], b_scale, b_zero_point,
            feeds["y_scale"].item(), feeds["y_zero_point"].item(), a_dtype), strict=True)
        assert_equal_but_at_ties(ours, on_onnx_runtime(model, feeds), feeds)


def test_qlinear_matmul_at_exact_ties():
    """sa = sb = 0.1 and so = 2·fl32(sa·sb): the exact value of an odd sum is a hair off a half, which float64 sees
    and float32 rounds onto the half itself. ORT then rounds half to even; dmlops rounds the value it sees."""
    rng = np.random.default_rng(3)
    scale = np.float32(0.1)
    feeds = {"a": rng.integers(0, 16, (32, 8), dtype=np.uint8), "a_scale": np.array(scale),
             "a_zero_point": np.array(0, np.uint8), "b": rng.integers(-8, 8, (8, 16), dtype=np.int8),
             "b_scale": np.array(scale), "b_zero_point": np.array(0, np.int8),
             "y_scale": np.array(np.float32(scale * scale) * np.float32(2)), "y_zero_point": np.array(128, np.uint8)}
    model = one_node_model("QLinearMatMul", feeds, np.uint8, 21)
    assert assert_equal_but_at_ties(on_dmlops(model, feeds), on_onnx_runtime(model, feeds), feeds) > 0


def test_qlinear_matmul_of_vectors_and_batches():
    """A 1-D A is a row, a 1-D B a column (dropped from the result); batch dimensions broadcast; as ONNX Runtime."""
    rng = np.random.default_rng(5)
    for a_shape, b_shape in [((8,), (8, 3)), ((2, 8), (8,)), ((8,), (8,)), ((2, 3, 4, 8), (8, 5)),
                             ((4, 8), (2, 8, 5))]:
        feeds = quantized_feeds(rng, np.uint8, np.int8, 1, 1, 1, False)
        feeds["a"] = a_values(rng, np.uint8, np.int8, a_shape)
        feeds["b"] = rng.integers(-128, 128, b_shape, dtype=np.int8)
        model = one_node_model("QLinearMatMul", feeds, np.uint8, 21)
        ours, theirs = on_dmlops(model, feeds), on_onnx_runtime(model, feeds)
        assert ours.shape == theirs.shape, (a_shape, b_shape)
        assert np.abs(ours.astype(int) - theirs.astype(int)).max(initial=0) <= 1


def run_json(tmp_path: Path, model: dict, **options) -> str:
    path = tmp_path / "model.json"
    path.write_text(json.dumps(model))
    out = io.StringIO()
    run_model(read_model(path), output_dir=tmp_path, out=out, **options)
    return out.getvalue()


def example_model(bindings=None, **dispatchable) -> dict:
    """examples/cumulative_and_quantized.onnx with X {2, 4} and Q bound, each output printed."""
    resources = {
        "X": {"initialValuesDataType": "FLOAT32", "initialValues": [2, 1, 3, 5, 3, 8, 7, 3]},
        "Q": {"initialValuesDataType": "UINT8", "initialValues": [128, 148, 168, 188, 100, 150, 200, 250]},
        "Sums": {"initialValuesDataType": "FLOAT32", "initialValues": {"valueCount": 8, "value": -1}},
        "Y": {"initialValuesDataType": "UINT8", "initialValues": {"valueCount": 6, "value": 0}},
    }
    return {"resources": resources,
            "dispatchables": {"model": {"type": "onnx", "sourcePath": str(EXAMPLES / "cumulative_and_quantized.onnx"),
                                        **dispatchable}},
            "commands": [{"type": "dispatch", "dispatchable": "model",
                          "bindings": bindings if bindings is not None else
                          {"x": {"name": "X", "shape": [2, 4]}, "q": "Q", "sums": "Sums", "y": "Y"}},
                         {"type": "print", "resource": "Sums"}, {"type": "print", "resource": "Y"}]}


def test_the_example_model_matches_onnx_runtime(tmp_path):
    x = np.array([[2, 1, 3, 5], [3, 8, 7, 3]], np.float32)
    q = np.array([[128, 148, 168, 188], [100, 150, 200, 250]], np.uint8)
    session = ort.InferenceSession(str(EXAMPLES / "cumulative_and_quantized.onnx"),
                                   providers=["CPUExecutionProvider"])
    sums, products, y = session.run(None, {"x": x, "q": q})
    out = run_json(tmp_path, example_model())
    assert out == f"Resource 'Sums': {', '.join(f'{v:g}' for v in sums.ravel())}\n" \
                  f"Resource 'Y': {', '.join(map(str, y.ravel()))}\n"
    text = (EXAMPLES / "onnx_model.json").read_text()
    assert '"freeDimensionNameOverrides": { "N": 2 }' in text
    out = io.StringIO()
    run_model(read_model(EXAMPLES / "onnx_model.json"), out=out)
    assert out.getvalue().splitlines()[1] == f"Resource 'Products': {', '.join(f'{v:g}' for v in products.ravel())}"


def test_the_cuda_backend_prints_the_same(tmp_path):
    """(Under Triton's interpreter where there is no GPU.)"""
    pytest.importorskip("torch")
    assert run_json(tmp_path, example_model(), backend="cuda") == run_json(tmp_path, example_model())


def test_shapes_from_bindings_overrides_and_the_command_line(tmp_path):
    """x {N, 4}: its binding's shape, else N by name (JSON, then -f) or denotation (-F), else 1; -b wins."""
    bound = {"x": "X", "sums": "Sums"}
    one_row = "Resource 'Sums': 2, 3, 6, 11, -1, -1, -1, -1\n"
    two_rows = "Resource 'Sums': 2, 3, 6, 11, 3, 11, 18, 21\n"
    assert run_json(tmp_path, example_model(bound)).startswith(one_row)  # N free: 1
    assert run_json(tmp_path, example_model(bound, freeDimensionNameOverrides={"N": 2})).startswith(two_rows)
    assert run_json(tmp_path, example_model(bound, freeDimensionNameOverrides={"N": 1}),
                    onnx=OnnxOptions(free_dimension_names={"N": 2})).startswith(two_rows)
    assert run_json(tmp_path, example_model({"x": {"name": "X", "shape": [2, 4]}, "sums": "Sums"}),
                    onnx=OnnxOptions(binding_shapes={"x": (1, 4)})).startswith(one_row)


def test_denotation_overrides(tmp_path):
    model = onnx.load(str(EXAMPLES / "cumulative_and_quantized.onnx"))
    model.graph.input[0].type.tensor_type.shape.dim[0].denotation = "DATA_BATCH"
    path = tmp_path / "denoted.onnx"
    onnx.save(model, str(path))
    json_model = example_model({"x": "X", "sums": "Sums"})
    json_model["dispatchables"]["model"]["sourcePath"] = str(path)
    assert run_json(tmp_path, json_model, onnx=OnnxOptions(free_dimension_denotations={"DATA_BATCH": 2})) \
        .startswith("Resource 'Sums': 2, 3, 6, 11, 3, 11, 18, 21\n")


def test_an_onnx_file_runs_as_a_model_with_implicit_bindings(capsys):
    """As DxDispatch runs model.onnx: no resources, one dispatch named after the file, inputs implicit; the timing
    covers the whole model."""
    model = read_model(EXAMPLES / "cumulative_and_quantized.onnx")
    assert list(model.dispatchables) == ["cumulative_and_quantized.onnx"]
    run_model(model, timing=TimingOptions(iterations=2), onnx=OnnxOptions(print_bindings=True))
    out = capsys.readouterr().out
    assert "Input Tensor 'x':\n  Resource  = implicit\n  Data Type = FLOAT\n  Shape     = [1,4]\n" in out
    assert "Output Tensor 'sums':\n  Resource  = deferred\n  Data Type = FLOAT\n  Shape     = [-1,4]\n" in out
    assert out.splitlines()[-1].startswith("Dispatch 'cumulative_and_quantized.onnx': 2 iterations, ")


@pytest.mark.parametrize("change, message", [
    (lambda m: m["commands"][0]["bindings"].update(z="X"), "'z' is not an input or output of the ONNX model"),
    (lambda m: m["commands"][0]["bindings"].update(x={"name": "X", "shape": [3, 4]}),
     "input 'x': resource 'X' holds 32 bytes; the tensor needs 48"),
    (lambda m: m["commands"][0]["bindings"].update(sums={"name": "Sums", "shape": [1, 4]}),
     "output 'sums' has the shape [2, 4], not its binding's [1, 4]"),
    (lambda m: m["commands"][0]["bindings"].update(y="Sums", sums="Y"),
     "output 'sums': the result has 32 bytes; resource 'Y' holds 8"),
    (lambda m: m["commands"][0]["bindings"].update(x={"name": "X", "elementOffset": 1}),
     "'elementOffset' is not a field of an ONNX binding (name, shape)"),
    (lambda m: m["dispatchables"]["model"].update(sourcePath="none.onnx"), "cannot read the ONNX model 'none.onnx'"),
    (lambda m: m["dispatchables"]["model"].update(freeDimensionNameOverrides={"N": -1}),
     "freeDimensionNameOverrides: N: expected an unsigned 32-bit integer"),
])
def test_bad_onnx_models(tmp_path, change, message):
    model = example_model()
    change(model)
    with pytest.raises(ModelError) as info:
        run_json(tmp_path, model)
    assert message in str(info.value)


def test_without_the_onnx_package_one_line_names_the_extra(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "onnx", None)
    with pytest.raises(ModelError, match=r"ONNX dispatchables need the onnx package: pip install '\.\[onnx\]'"):
        run_json(tmp_path, example_model())
