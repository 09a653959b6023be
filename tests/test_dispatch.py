"""DxDispatch models: the JSON as DxDispatch reads it, resources and their initial values, dispatchables, bindings,
commands and printing, every rejection, and random models checked against the plain references."""

from __future__ import annotations

import io
import json
import math
import re
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import reference
import strategies
from checks import assert_cumulative_matches
from dmlops import DataType
from dmlops.dispatch import ModelError, read_model, run_model
from dmlops.dispatch.model import strip_comments
from dmlops.dispatch.printing import format_values, resource_text
from dmlops.dispatch.timing import (Samples, TimingOptions, cold_and_hot, dispatch_lines, progress_bar,
                                    time_dispatches)


def run(tmp_path: Path, model, **options) -> str:
    """What running the model prints; its files go to tmp_path."""
    path = tmp_path / "model.json"
    path.write_text(model if isinstance(model, str) else json.dumps(model))
    out = io.StringIO()
    run_model(read_model(path), output_dir=tmp_path, out=out, **options)
    return out.getvalue()


def error(tmp_path: Path, model, **options) -> str:
    """The message of the error the model raises, without the model's path."""
    with pytest.raises(ModelError) as info:
        run(tmp_path, model, **options)
    return str(info.value).removeprefix(f"{tmp_path / 'model.json'}: ")


def tensor(data_type="FLOAT32", sizes=(4,), **fields):
    return {"DataType": data_type, "Sizes": list(sizes), **fields}


def scan_model(values=(2, 1, 3, 5), data_type="FLOAT32", **desc_fields):
    """A cumulative sum of X into Out, then a print of Out."""
    return {
        "resources": {
            "X": {"initialValuesDataType": data_type, "initialValues": list(values)},
            "Out": {"initialValuesDataType": data_type, "initialValues": {"valueCount": len(values), "value": 0}},
        },
        "dispatchables": {"scan": {"type": "DML_OPERATOR_CUMULATIVE_SUMMATION", "desc": {
            "InputTensor": tensor(data_type, [len(values)]), "OutputTensor": tensor(data_type, [len(values)]),
            "Axis": 0, "AxisDirection": "INCREASING", "HasExclusiveSum": False, **desc_fields}}},
        "commands": [
            {"type": "dispatch", "dispatchable": "scan", "bindings": {"InputTensor": "X", "OutputTensor": "Out"}},
            {"type": "print", "resource": "Out"},
        ],
    }


def values_model(**resources):
    """Resources only, each printed."""
    return {"resources": resources, "dispatchables": {},
            "commands": [{"type": "print", "resource": name} for name in resources]}


def buffer(data_type, initial_values, **fields):
    return {"initialValuesDataType": data_type, "initialValues": initial_values, **fields}


def write_file(resource, target, **fields):
    return {"type": "writeFile", "resource": resource, "targetPath": target, **fields}


# -- the JSON ------------------------------------------------------------------------------------------------------


def test_comments_trailing_commas_repeated_keys_and_text_after_the_root(tmp_path):
    text = """
    // A line comment, and one /* inside a string stays: "//"
    {
        /* a block
           comment */
        "resources": {
            "a//b": { "initialValuesDataType": "INT32", "initialValues": [1, 2, 3,], },   // trailing commas
            "a//b": { "initialValuesDataType": "INT32", "initialValues": [9] },            // the first key wins
        },
        "dispatchables": {},
        "commands": [ { "type": "print", "resource": "a//b" }, ],
    }
    anything after the root value is not read
    """
    assert run(tmp_path, text) == "Resource 'a//b': 1, 2, 3\n"


def test_comments_are_blanked_in_one_pass():
    """Comments become blanks (newlines kept); a comma before a closing bracket, comments between, is blanked;
    nothing inside a string is touched."""
    assert strip_comments('[1, /* a */ ] // b\n') == "[1" + " " * 10 + "]" + " " * 5 + "\n"
    assert strip_comments('[1, /* a\n */ 2]') == "[1,     \n    2]"
    assert strip_comments('{"a,]": "\\"/*", "b": [1,], }') == '{"a,]": "\\"/*", "b": [1 ]  }'
    assert strip_comments("[1, //\n 2 /**/,\n]") == "[1,   \n 2" + " " * 6 + "\n]"


@pytest.mark.parametrize("count", [16_000, 40_000])
def test_many_unterminated_comments_are_one_error_found_at_once(tmp_path, count):
    """Each comment opener is looked at once (the regular expression this replaced took quadratic time)."""
    assert error(tmp_path, '{"resources": {}, ' + "/*" * count) == \
        "JSON parse error at line 1: a /* comment is not closed"
    assert error(tmp_path, '{"resources": {' + '"/*": 1, ' * count + "}}") == \
        "resource '/*': expected a JSON object, not 1"


def test_deeply_nested_json_is_a_model_error(tmp_path):
    assert error(tmp_path, "[" * 100_000 + "]" * 100_000) == "JSON parse error: the values are nested too deeply"


def test_json_errors_give_line_and_column(tmp_path):
    text = '// a comment keeps its place\n{\n  "resources": { /* here */ "A" {} }\n}'
    assert error(tmp_path, text) == "JSON parse error at line 3, column 33: Expecting ':' delimiter"


@pytest.mark.parametrize("number", ["Infinity", "-Infinity", "NaN", "1e400"])
def test_numbers_json_does_not_have_are_refused(tmp_path, number):
    """RapidJSON refuses them; floats may be written "inf", "-inf" and "nan"."""
    text = json.dumps(values_model(A=buffer("FLOAT32", [0]))).replace("[0]", f"[{number}]")
    assert error(tmp_path, text) == f"JSON parse error: {number} is not a finite JSON number (write floats as " \
                                    f"\"inf\", \"-inf\" or \"nan\")"


@pytest.mark.parametrize("text, message", [
    ("[]", "expected a JSON object, not []"),
    ('{"dispatchables": {}, "commands": []}', "field 'resources' is required"),
    ('{"resources": [], "dispatchables": {}, "commands": []}', "resources: expected a JSON object, not []"),
    ('{"resources": {}, "dispatchables": {}, "commands": {}}', "commands: expected an array, not {}"),
    ('{"resources": {}, "dispatchables": {}}', "field 'commands' is required"),
])
def test_model_structure_errors(tmp_path, text, message):
    assert error(tmp_path, text) == message


# -- resources -----------------------------------------------------------------------------------------------------


def test_initial_values_of_every_type(tmp_path):
    model = values_model(
        F32=buffer("FLOAT32", [1.5, "NaN", "inf", "-Inf", -0.0, 1e-7, 0.1, 123456.7, 1e6, 3.5e38]),
        F16=buffer("FLOAT16", [0.1, 65504, 70000, "nan"]),
        F64=buffer("DML_TENSOR_DATA_TYPE_FLOAT64", [0.1, 1e300, 2]),
        I8=buffer("INT8", [-128, 127, 0]),
        U8=buffer("UINT8", [0, 255]),
        I16=buffer("INT16", [-32768, 32767]),
        U16=buffer("UINT16", [65535]),
        I32=buffer("INT32", [-2147483648]),
        U32=buffer("UINT32", [4294967295]),
        I64=buffer("INT64", [-9223372036854775808]),
        U64=buffer("UINT64", [18446744073709551615]),
    )
    assert run(tmp_path, model) == (
        "Resource 'F32': 1.5, nan, inf, -inf, -0, 1e-07, 0.1, 123457, 1e+06, inf\n"
        "Resource 'F16': 0.0999756, 65504, inf, nan\n"
        "Resource 'F64': 0.1, 1e+300, 2\n"
        "Resource 'I8': -128, 127, 0\n"
        "Resource 'U8': 0, 255\n"
        "Resource 'I16': -32768, 32767\n"
        "Resource 'U16': 65535\n"
        "Resource 'I32': -2147483648\n"
        "Resource 'U32': 4294967295\n"
        "Resource 'I64': -9223372036854775808\n"
        "Resource 'U64': 18446744073709551615\n")


def test_float64_values_are_not_rounded_to_float32(tmp_path):
    model = values_model(F64=buffer("FLOAT64", [0.1]), F32=buffer("FLOAT32", [0.1]))
    model["commands"] = [write_file("F64", "f64.bin"), write_file("F32", "f32.bin")]
    run(tmp_path, model)
    assert np.fromfile(tmp_path / "f64.bin", np.float64)[0] == 0.1
    assert np.fromfile(tmp_path / "f32.bin", np.float32)[0] == np.float32(0.1)


def test_constants_and_sequences(tmp_path):
    model = values_model(
        Constant=buffer("INT16", {"valueCount": 3, "value": -7}),
        Wrapping=buffer("UINT8", {"valueCount": 4, "valueStart": 250, "valueDelta": 3}),
        SignedWrapping=buffer("INT8", {"valueCount": 3, "valueStart": 120, "valueDelta": 5}),
        Halves=buffer("FLOAT32", {"valueStart": 1, "valueDelta": 0.5, "valueCount": 3}),
    )
    assert run(tmp_path, model) == (
        "Resource 'Constant': -7, -7, -7\n"
        "Resource 'Wrapping': 250, 253, 0, 3\n"
        "Resource 'SignedWrapping': 120, 125, -126\n"
        "Resource 'Halves': 1, 1.5, 2\n")


@pytest.mark.parametrize("data_type, dtype", [("FLOAT32", np.float32), ("FLOAT16", np.float16)])
def test_float_sequences_round_at_every_step(tmp_path, data_type, dtype):
    """As C++ adds ``value += valueDelta`` in the element type (FLOAT16 through float32)."""
    model = values_model(S=buffer(data_type, {"valueCount": 3000, "valueStart": 0.1, "valueDelta": 0.1}))
    model["commands"] = [write_file("S", "s.bin")]
    run(tmp_path, model)
    value, delta, expected = dtype(np.float32(0.1)), dtype(np.float32(0.1)), []
    for _ in range(3000):
        expected.append(value)
        value = dtype(np.float32(value) + np.float32(delta))
    np.testing.assert_array_equal(np.fromfile(tmp_path / "s.bin", dtype), np.array(expected, dtype))


@pytest.mark.parametrize("resource, message", [
    (buffer("INT8", [128]), "element 0: expected an integer from -128 to 127 for INT8, not 128"),
    (buffer("UINT32", [1, -1]), "element 1: expected an integer from 0 to 4294967295 for UINT32, not -1"),
    (buffer("INT32", [1.5]), "element 0: expected an integer from -2147483648 to 2147483647 for INT32, not 1.5"),
    (buffer("INT32", [2.0]), "not 2.0"),
    (buffer("INT32", [True]), "not true"),
    (buffer("FLOAT32", ["one"]), "element 0: expected a number or 'NaN', 'Inf', '-Inf', not \"one\""),
    (buffer("FLOAT32", [None]), "not null"),
    (buffer("FLOAT64", [10**400]), "a number is beyond the range of FLOAT64"),
    (buffer("FLOAT32", []), "'initialValues' must be non-empty"),
    (buffer("FLOAT32", {"valueCount": 0, "value": 1}), "'initialValues' must be non-empty"),
    (buffer("FLOAT32", "deferred"), "deferred values (outputs that ONNX Runtime allocates) are not supported"),
    (buffer("FLOAT32", {"valueCount": 2}), "initialValues: expected an array of numbers, or an object with"),
    (buffer("FLOAT32", 3), "initialValues: expected an array of numbers, or an object with"),
    (buffer("FLOAT32", {"valueCount": 2, "value": 1, "valueStart": 0}),
     "'value', 'valueStart' and 'sourcePath' are mutually exclusive"),
    (buffer("FLOAT32", {"valueStart": 0, "valueCount": 2}), "initialValues: field 'valueDelta' is required"),
    (buffer("FLOAT32", {"valueStart": 0, "valueDelta": 1}), "initialValues: field 'valueCount' is required"),
    (buffer("UINT8", {"valueCount": 2, "valueStart": 0, "valueDelta": -1}),
     "initialValues: valueDelta: element 0: expected an integer from 0 to 255 for UINT8, not -1"),
    (buffer("FLOAT32", {"valueCount": -2, "value": 1}),
     "initialValues: valueCount: expected an unsigned 32-bit integer, not -2"),
    ({"initialValues": {"valueCount": 1, "value": 0}},
     "'initialValuesDataType' is required for values written in the model"),
    ({"initialValues": [1]}, "initialValues: element 0: expected an object {\"type\", \"value\"} of a List "
                             "Initializer (an array of numbers needs an initialValuesDataType), not 1"),
    (buffer("FLOAT23", [1]), "initialValuesDataType: 'FLOAT23' is not a recognized value for DML_TENSOR_DATA_TYPE"),
    (buffer("float32", [1]), "'float32' is not a recognized value"),
    (buffer("UINT4", [1]), "DataType.UINT4 has no NumPy equivalent"),
    ({"initialValuesDataType": "FLOAT32"}, "field 'initialValues' is required"),
    (buffer("FLOAT32", [1, 2], sizeInBytes=4),
     "the buffer size (4 bytes) is too small for the initialValues (8 bytes) at offset 0 bytes"),
    (buffer("FLOAT32", [1], sizeInBytes=8, initialValuesOffsetInBytes=6),
     "the buffer size (8 bytes) is too small for the initialValues (4 bytes) at offset 6 bytes"),
])
def test_bad_resources(tmp_path, resource, message):
    found = error(tmp_path, values_model(A=resource))
    assert found.startswith("resource 'A': ") and message in found, found


def test_buffer_sizes_padding_and_offsets(tmp_path):
    """Buffers round up to 4 bytes unless sizeInBytes says otherwise; print shows the initial values' count, read
    from the buffer's start; a raw file holds the whole buffer; a .npy all the buffer's whole elements."""
    model = values_model(
        Half=buffer("FLOAT16", [1, 2, 3, 4, 5]),
        Big=buffer("FLOAT32", [7], sizeInBytes=32),
        Shifted=buffer("INT32", [9], sizeInBytes=16, initialValuesOffsetInBytes=8),
    )
    model["commands"] += [write_file("Half", "half.bin"), write_file("Half", "half.npy"),
                          write_file("Big", "big.dat"), write_file("Shifted", "shifted.bin")]
    printed = run(tmp_path, model).splitlines()
    assert printed[:3] == ["Resource 'Half': 1, 2, 3, 4, 5", "Resource 'Big': 7", "Resource 'Shifted': 0"]
    assert np.fromfile(tmp_path / "half.bin", np.float16).tolist() == [1, 2, 3, 4, 5, 0]
    assert np.load(tmp_path / "half.npy").tolist() == [1, 2, 3, 4, 5, 0]
    assert np.fromfile(tmp_path / "big.dat", np.float32).tolist() == [7] + [0] * 7
    assert np.fromfile(tmp_path / "shifted.bin", np.int32).tolist() == [0, 0, 9, 0]


def test_source_files_beside_the_model(tmp_path, monkeypatch):
    data = tmp_path / "data"
    data.mkdir()
    np.save(data / "f64.npy", np.array([[0.5, 1.5], [2.5, 3.5]]))
    np.save(data / "flags.npy", np.array([True, False, True]))
    np.save(data / "big_endian.npy", np.array([1, -2, 300], dtype=">i4"))
    np.save(data / "fortran.npy", np.asfortranarray(np.arange(6, dtype=np.uint16).reshape(2, 3)))
    np.array([-5, 6, 7], dtype=np.int16).tofile(data / "raw.dat")
    np.array([1.25], dtype=np.float32).tofile(data / "raw.BIN")
    model = values_model(
        F64={"initialValues": {"sourcePath": "data/f64.npy"}},
        Flags={"initialValues": {"sourcePath": "data/flags.npy"}},
        BigEndian={"initialValuesDataType": "INT32", "initialValues": {"sourcePath": "data/big_endian.npy"}},
        Fortran={"initialValues": {"sourcePath": "data/fortran.npy"}},
        Raw=buffer("INT16", {"sourcePath": "data/raw.dat"}),
        RawBin=buffer("FLOAT32", {"sourcePath": "data/raw.BIN"}),
    )
    (tmp_path / "model.json").write_text(json.dumps(model))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    out = io.StringIO()
    run_model(read_model(tmp_path / "model.json"), out=out)
    assert out.getvalue() == (
        "Resource 'F64': 0.5, 1.5, 2.5, 3.5\n"
        "Resource 'Flags': 1, 0, 1\n"
        "Resource 'BigEndian': 1, -2, 300\n"
        "Resource 'Fortran': 0, 1, 2, 3, 4, 5\n"
        "Resource 'Raw': -5, 6, 7\n"
        "Resource 'RawBin': 1.25\n")


@pytest.mark.parametrize("resource, message", [
    (buffer("FLOAT32", {"sourcePath": "f64.npy"}),
     "the data type of 'f64.npy' (FLOAT64) does not match initialValuesDataType (FLOAT32)"),
    ({"initialValues": {"sourcePath": "raw.dat"}},
     "'initialValuesDataType' is required for the raw bytes of 'raw.dat' (only .npy files carry a data type)"),
    (buffer("FLOAT32", {"sourcePath": "missing.npy"}), "sourcePath: cannot read 'missing.npy'"),
    (buffer("FLOAT32", {"sourcePath": "missing.bin"}), "sourcePath: cannot read 'missing.bin'"),
    ({"initialValues": {"sourcePath": "complex.npy"}}, "NumPy dtype complex128 has no DirectML data type"),
    ({"initialValues": {"sourcePath": ""}}, "initialValues: sourcePath: expected a file path, not \"\""),
    (buffer("FLOAT32", {"sourcePath": "empty.dat"}), "'initialValues' must be non-empty"),
])
def test_bad_source_files(tmp_path, resource, message):
    np.save(tmp_path / "f64.npy", np.zeros(2))
    np.save(tmp_path / "complex.npy", np.zeros(2, dtype=complex))
    (tmp_path / "raw.dat").write_bytes(b"1234")
    (tmp_path / "empty.dat").write_bytes(b"")
    found = error(tmp_path, values_model(A=resource))
    assert found.startswith("resource 'A': ") and message in found, found


def test_max_bytes_refuses_before_allocating(tmp_path):
    """4 * (2^32 - 1) float64 values would be 32 GiB: refused at once."""
    huge = values_model(Huge=buffer("FLOAT64", {"valueCount": 2**32 - 1, "value": 1}))
    assert error(tmp_path, huge) == \
        "the model's resources need 34359738360 bytes, more than the 4294967296 that --max-bytes allows"
    model = values_model(A=buffer("FLOAT32", [1, 2]), B=buffer("UINT8", [1]))  # 8 + 4 bytes
    assert run(tmp_path, model, max_bytes=12) == "Resource 'A': 1, 2\nResource 'B': 1\n"
    assert error(tmp_path, model, max_bytes=11) == \
        "the model's resources need 12 bytes, more than the 11 that --max-bytes allows"


# -- the List Initializer -----------------------------------------------------------------------------------------

LIST_TYPES = ["FLOAT32", "FLOAT16", "FLOAT64", "UINT8", "INT8", "UINT16", "INT16", "UINT32", "INT32", "UINT64",
              "INT64"]


@st.composite
def list_elements(draw):
    """A List Initializer's elements, and the bytes they pack into."""
    elements, packed_bytes = [], b""
    for index, type_name in enumerate(draw(st.lists(st.sampled_from(LIST_TYPES), min_size=1, max_size=10))):
        dtype = DataType[type_name].numpy_dtype
        if dtype.kind == "f":  # values the type holds exactly
            value = draw(st.floats(width=8 * dtype.itemsize, allow_nan=False, allow_infinity=False))
        else:
            value = draw(st.integers(int(np.iinfo(dtype).min), int(np.iinfo(dtype).max)))
        element = {"name": f"field{index}"} if draw(st.booleans()) else {}
        elements.append({**element, "type": draw(st.sampled_from([type_name, f"DML_TENSOR_DATA_TYPE_{type_name}"])),
                         "value": value})
        packed_bytes += np.array([value], dtype).tobytes()
    return elements, packed_bytes


@settings(max_examples=30, deadline=None)
@given(list_elements(), st.sampled_from([{"initialValuesDataType": "UNKNOWN"}, {}]), st.booleans())
def test_list_initializer_packs_each_value_in_its_own_type(elements_and_bytes, data_type, sized):
    """In order, without padding between elements; the buffer rounded up to 4 bytes, or of ``sizeInBytes`` with
    the values at ``initialValuesOffsetInBytes``."""
    elements, packed_bytes = elements_and_bytes
    resource = {**data_type, "initialValues": elements}
    if sized:
        resource.update(sizeInBytes=256, initialValuesOffsetInBytes=16)
    model = {"resources": {"List": resource}, "dispatchables": {}, "commands": [write_file("List", "list.bin")]}
    with tempfile.TemporaryDirectory() as folder:
        run(Path(folder), model)
        written = (Path(folder) / "list.bin").read_bytes()
    padded = bytes(16) + packed_bytes + bytes(256 - 16 - len(packed_bytes)) if sized else \
        packed_bytes + bytes(-len(packed_bytes) % 4)
    assert written == padded


def test_a_list_initialized_buffer_binds_as_any_type(tmp_path):
    """Two 16-bit values and a 32-bit one, bound as two INT32 elements (and one of them at a byte offset)."""
    rng = np.random.default_rng()
    low, high, last = rng.integers(0, 2**15, 3)
    model = scan_model(data_type="INT32", values=[0, 0])
    model["resources"]["X"] = {"initialValuesDataType": "UNKNOWN", "initialValues": [
        {"name": "low", "type": "INT16", "value": int(low)}, {"type": "UINT16", "value": int(high)},
        {"type": "INT32", "value": int(last)}], "sizeInBytes": 32}
    first = int(low) + (int(high) << 16)
    assert run(tmp_path, model) == f"Resource 'Out': {first}, {first + int(last)}\n"
    model["commands"][0]["bindings"]["InputTensor"] = {"name": "X", "elementOffset": 1, "elementSizeInBytes": 16}
    assert run(tmp_path, model) == "Resource 'Out': 0, 0\n"


@pytest.mark.parametrize("elements, message", [
    ([{"type": "UNKNOWN", "value": 1}], "element 0: type: an element's type must be a data type, not UNKNOWN"),
    ([{"type": "INT8", "value": 1}, {"type": "INT8", "value": 300}],
     "element 1: value: element 0: expected an integer from -128 to 127 for INT8, not 300"),
    ([{"type": "FLOAT32", "value": "one"}], "element 0: value: element 0: expected a number or 'NaN'"),
    ([{"type": "INT8"}], "element 0: field 'value' is required"),
    ([{"value": 1}], "element 0: field 'type' is required"),
    ([{"type": "INT8", "value": 1, "comment": "x"}],
     "element 0: 'comment' is not a field of a List Initializer's element (type, value, name)"),
    ([{"type": "INT8", "value": 1, "name": 3}], "element 0: name: expected a string, not 3"),
    ([{"type": "INT4", "value": 1}], "element 0: value: DataType.INT4 has no NumPy equivalent"),
    ([{"type": "INT8", "value": 1}, 2], "element 1: expected an object {\"type\", \"value\"} of a List Initializer"),
    ([], "'initialValues' must be non-empty"),
])
def test_bad_list_initializers(tmp_path, elements, message):
    found = error(tmp_path, {"resources": {"L": {"initialValuesDataType": "UNKNOWN", "initialValues": elements}},
                             "dispatchables": {}, "commands": []})
    assert found.startswith(f"resource 'L': initialValues: {message}") or found == f"resource 'L': {message}", found


@pytest.mark.parametrize("command, why", [
    ({"type": "print", "resource": "L"}, "print reads values in the resource's data type"),
    (write_file("L", "l.npy"), "a .npy file holds values of the resource's data type"),
    ({"type": "dispatch", "dispatchable": "scan", "bindings": {"InputTensor": {"name": "L", "elementOffset": 4},
                                                               "OutputTensor": "Out"}},
     "elementOffset and elementCount count elements of the resource's data type unless elementSizeInBytes is given"),
    ({"type": "dispatch", "dispatchable": "scan", "bindings": {"InputTensor": {"name": "L", "elementCount": 4},
                                                               "OutputTensor": "Out"}},
     "elementOffset and elementCount count elements"),
])
def test_what_needs_a_data_type_refuses_a_list_initialized_buffer(tmp_path, command, why):
    model = scan_model()
    model["resources"]["L"] = {"initialValues": [{"type": "FLOAT32", "value": 1}] * 4}
    model["commands"] = [command]
    assert error(tmp_path, model).startswith(
        f"command 0: {'bindings: ' if command['type'] == 'dispatch' else ''}resource 'L' has no data type (its "
        f"initialValuesDataType is UNKNOWN); {why}")


# -- dispatchables -------------------------------------------------------------------------------------------------


SPELLINGS = {
    "suffix names": lambda model: model,
    "full names": lambda model: _set_desc(model, AxisDirection="DML_AXIS_DIRECTION_INCREASING",
                                          InputTensor=tensor("DML_TENSOR_DATA_TYPE_FLOAT32"),
                                          OutputTensor=tensor("DML_TENSOR_DATA_TYPE_FLOAT32", Flags="NONE")),
    "operator suffix": lambda model: _set(model["dispatchables"]["scan"], type="CUMULATIVE_SUMMATION"),
    "Type and Desc keys": lambda model: {**model, "dispatchables": {"scan": {
        "Type": "DML_OPERATOR_CUMULATIVE_SUMMATION", "Desc": model["dispatchables"]["scan"]["desc"]}}},
    "desc fields in the dispatchable": lambda model: {**model, "dispatchables": {"scan": {
        "type": "DML_OPERATOR_CUMULATIVE_SUMMATION", "executionFlags": "NONE",
        **model["dispatchables"]["scan"]["desc"]}}},
    "nested tensor descs": lambda model: _set_desc(
        model, InputTensor={"Type": "DML_TENSOR_TYPE_BUFFER", "Desc": tensor()},
        OutputTensor={"Type": "BUFFER", "Desc": tensor(Flags=["DML_TENSOR_FLAG_NONE"])}),
    "every tensor field": lambda model: _set_desc(
        model, InputTensor=tensor(DimensionCount=1, Strides=[1], TotalTensorSizeInBytes=16,
                                  GuaranteedBaseOffsetAlignment=4, Flags="NONE", Type="BUFFER"),
        OutputTensor=tensor(Strides=[], TotalTensorSizeInBytes=0)),
    "execution flags": lambda model: _set(model["dispatchables"]["scan"], executionFlags=[
        "DML_EXECUTION_FLAG_DISABLE_META_COMMANDS", "DESCRIPTORS_VOLATILE", "ALLOW_HALF_PRECISION_COMPUTATION"]),
    "binding arrays and objects": lambda model: _set(model["commands"][0], bindings={
        "InputTensor": ["X"], "OutputTensor": [{"name": "Out", "elementOffset": 0}]}),
    "command types in any case": lambda model: {**model, "commands": [
        {**model["commands"][0], "type": "Dispatch"}, {**model["commands"][1], "type": "PRINT"}]},
}


def _set(obj: dict, **fields):
    obj.update(fields)


def _set_desc(model, **fields):
    model["dispatchables"]["scan"]["desc"].update(fields)


@pytest.mark.parametrize("spelling", sorted(SPELLINGS))
def test_every_spelling_dxdispatch_accepts(tmp_path, spelling):
    model = scan_model()
    model = SPELLINGS[spelling](model) or model
    assert run(tmp_path, model) == "Resource 'Out': 2, 3, 6, 11\n"


@pytest.mark.parametrize("type_name", ["hlsl", "ONNX", "dmlSerializedGraph", "DML_OPERATOR_GEMM", "GEMM",
                                       "cumulative_summation", "DML_OPERATOR_CUMULATIVE_SUMMATIONS"])
def test_unsupported_dispatchable_types(tmp_path, type_name):
    model = scan_model()
    model["dispatchables"]["scan"]["type"] = type_name
    assert error(tmp_path, model) == (
        f"dispatchable 'scan': type: '{type_name}' is not supported; dmlops runs the DirectML operators "
        f"DML_OPERATOR_CUMULATIVE_SUMMATION, DML_OPERATOR_CUMULATIVE_PRODUCT, "
        f"DML_OPERATOR_QUANTIZED_LINEAR_MATRIX_MULTIPLY, and ONNX models (\"type\": \"onnx\")")


@pytest.mark.parametrize("fields, message", [
    ({"HasExclusiveSum": None}, "desc: field 'HasExclusiveSum' is required"),
    ({"AxisDirection": None}, "desc: field 'AxisDirection' is required"),
    ({"HasExclusiveSum": 1}, "desc: HasExclusiveSum: expected true or false, not 1"),
    ({"Axis": -1}, "desc: Axis: expected an unsigned 32-bit integer, not -1"),
    ({"AxisDirection": "UP"}, "desc: AxisDirection: 'UP' is not a recognized value for DML_AXIS_DIRECTION "
                              "(INCREASING, DECREASING)"),
    ({"HasExclusiveProduct": False}, "desc: 'HasExclusiveProduct' is not a field of "
                                     "DML_CUMULATIVE_SUMMATION_OPERATOR_DESC (InputTensor, OutputTensor, Axis, "
                                     "AxisDirection, HasExclusiveSum)"),
    ({"InputTensor": None}, "desc: field 'InputTensor' is required"),
    ({"InputTensor": [1]}, "desc: InputTensor: expected a JSON object, not [1]"),
    ({"InputTensor": tensor(Stride=[1])}, "desc: InputTensor: 'Stride' is not a field of DML_BUFFER_TENSOR_DESC"),
    ({"InputTensor": {"Type": "BUFFER", "Desc": tensor(), "Flags": "NONE"}},
     "desc: InputTensor: 'Flags' is not a field of DML_TENSOR_DESC (Type, Desc)"),
    ({"InputTensor": tensor(Type="INVALID")},
     "desc: InputTensor: Type: 'INVALID' is not a recognized value for DML_TENSOR_TYPE (BUFFER)"),
    ({"InputTensor": {"Sizes": [4]}}, "desc: InputTensor: field 'DataType' is required"),
    ({"InputTensor": {"DataType": "FLOAT32"}}, "desc: InputTensor: field 'Sizes' is required"),
    ({"InputTensor": tensor(DimensionCount=4)}, "desc: InputTensor: DimensionCount 4 does not match the 1 Sizes"),
    ({"InputTensor": tensor(sizes=[4, 0])}, "desc: InputTensor: TensorDesc.sizes: a size of 0 is invalid"),
    ({"InputTensor": tensor(Strides=[1, 1])}, "desc: InputTensor: TensorDesc.strides: 2 strides for 1 dimensions"),
    ({"InputTensor": tensor(TotalTensorSizeInBytes=8)},
     "desc: InputTensor: TensorDesc.total_tensor_size_in_bytes: 8 is less than the 16 bytes"),
    ({"InputTensor": tensor(GuaranteedBaseOffsetAlignment=3)},
     "desc: InputTensor: TensorDesc.guaranteed_base_offset_alignment: 3 must be 0 or a power of two"),
    ({"InputTensor": tensor(Flags=["NONE", "READ_ONLY"])},
     "desc: InputTensor: Flags: 'READ_ONLY' is not a recognized value for DML_TENSOR_FLAGS (NONE, OWNED_BY_DML)"),
    ({"OutputTensor": tensor("INT32")},
     "DML_OPERATOR_CUMULATIVE_SUMMATION.output_tensor: must have the input's data type"),
    ({"Axis": 1}, "DML_OPERATOR_CUMULATIVE_SUMMATION.axis: 1 must be less than the input's dimension count (1)"),
    ({"OutputTensor": tensor(Flags="OWNED_BY_DML")},
     "DML_OPERATOR_CUMULATIVE_SUMMATION.output_tensor: OWNED_BY_DML is allowed on inputs only"),
])
def test_bad_descs(tmp_path, fields, message):
    model = scan_model()
    desc = model["dispatchables"]["scan"]["desc"]
    for key, value in fields.items():
        if value is None:
            del desc[key]
        else:
            desc[key] = value
    found = error(tmp_path, model)
    assert found.startswith("dispatchable 'scan': ") and message in found, found


def test_data_types_follow_the_support_table(tmp_path):
    message = error(tmp_path, scan_model(data_type="INT8"))
    assert message == ("dispatchable 'scan': DML_OPERATOR_CUMULATIVE_SUMMATION.input_tensor: data type INT8 is not "
                       "supported at feature level 5_0 and above (FLOAT32, FLOAT16, INT64, INT32, UINT64, UINT32)")
    assert run(tmp_path, scan_model(data_type="INT64")) == "Resource 'Out': 2, 3, 6, 11\n"
    assert error(tmp_path, scan_model(data_type="INT64"), feature_level="4_0").endswith(
        "data type INT64 is not supported at feature level 4_0 and above (FLOAT32, FLOAT16, INT32, UINT32)")


def test_bad_execution_flags(tmp_path):
    model = scan_model()
    model["dispatchables"]["scan"]["executionFlags"] = ["NONE", 1]
    assert error(tmp_path, model) == "dispatchable 'scan': executionFlags: expected a string, not 1"


# -- bindings ------------------------------------------------------------------------------------------------------


def test_element_offsets_and_sizes(tmp_path):
    """A binding starts elementOffset elements of the resource's type (or of elementSizeInBytes) in."""
    model = scan_model()
    model["resources"]["X"]["initialValues"] = [9, 9, 9, 9, 2, 1, 3, 5]
    model["resources"]["Out"]["initialValues"] = [-1] * 12
    model["commands"][0]["bindings"] = {
        "InputTensor": {"name": "X", "elementOffset": 4},
        "OutputTensor": {"name": "Out", "elementOffset": 2, "elementSizeInBytes": 16, "elementCount": 1}}
    assert run(tmp_path, model) == "Resource 'Out': -1, -1, -1, -1, -1, -1, -1, -1, 2, 3, 6, 11\n"


@pytest.mark.parametrize("bindings, message", [
    ({"InputTensor": "X", "OutputTensor": "Y"}, "command 0: bindings: resource 'Y' does not exist in the model"),
    ({"InputTensor": "X", "OutputTensor": "Out", "Output": "Out"},
     "command 0: bindings: 'Output' is not a tensor of DML_OPERATOR_CUMULATIVE_SUMMATION (InputTensor, "
     "OutputTensor)"),
    ({"InputTensor": "X"}, "command 0: dispatchable 'scan': DML_OPERATOR_CUMULATIVE_SUMMATION.output_tensor: "
                           "a binding is required"),
    ({"InputTensor": ["X", "Out"], "OutputTensor": "Out"},
     "command 0: bindings: InputTensor: 2 resources bound; a DirectML operator's tensor takes 1"),
    ({"InputTensor": {"name": "X", "format": "R32_FLOAT"}, "OutputTensor": "Out"},
     "command 0: bindings: InputTensor: 'format' is not a field of a buffer binding (name, elementOffset, "
     "elementCount, elementSizeInBytes)"),
    ({"InputTensor": {"elementOffset": 0}, "OutputTensor": "Out"},
     "command 0: bindings: InputTensor: field 'name' is required"),
    ({"InputTensor": 3, "OutputTensor": "Out"}, "command 0: bindings: InputTensor: expected a JSON object, not 3"),
    ({"InputTensor": {"name": "X", "elementOffset": 1}, "OutputTensor": "Out"},
     "command 0: dispatchable 'scan': DML_OPERATOR_CUMULATIVE_SUMMATION.input_tensor: binding offset 4 must be a "
     "multiple of 16"),
    ({"InputTensor": {"name": "X", "elementOffset": 12}, "OutputTensor": "Out"},
     "command 0: dispatchable 'scan': DML_OPERATOR_CUMULATIVE_SUMMATION.input_tensor: binding offset 48 is "
     "past the end of the buffer's 32 bytes"),
    ({"InputTensor": {"name": "X", "elementCount": 3}, "OutputTensor": "Out"},
     "command 0: dispatchable 'scan': DML_OPERATOR_CUMULATIVE_SUMMATION.input_tensor: the binding holds 12 bytes; "
     "the tensor needs total_tensor_size_in_bytes = 16"),
    ({"InputTensor": "Small", "OutputTensor": "Out"},
     "command 0: dispatchable 'scan': DML_OPERATOR_CUMULATIVE_SUMMATION.input_tensor: the binding holds 8 bytes; "
     "the tensor needs total_tensor_size_in_bytes = 16"),
])
def test_bad_bindings(tmp_path, bindings, message):
    model = scan_model()
    model["resources"]["X"]["initialValues"] = [2, 1, 3, 5, 0, 0, 0, 0]
    model["resources"]["Small"] = buffer("FLOAT32", [1, 2])
    model["commands"][0]["bindings"] = bindings
    assert error(tmp_path, model) == message


def test_in_place_needs_the_same_layout(tmp_path):
    model = scan_model()
    model["resources"]["X"]["initialValues"] = [2, 1, 3, 5, 0, 0, 0, 0]
    model["dispatchables"]["scan"]["desc"]["OutputTensor"] = tensor(Strides=[2])
    model["commands"][0]["bindings"] = {"InputTensor": "X", "OutputTensor": "X"}
    assert error(tmp_path, model) == (
        "command 0: dispatchable 'scan': DML_OPERATOR_CUMULATIVE_SUMMATION.output_tensor: may alias its input only "
        "exactly (in place); it overlaps input_tensor")


def quantized_example() -> dict:
    path = Path(__file__).resolve().parent.parent / "examples" / "quantized_matmul_per_row_per_column.json"
    return json.loads("\n".join(line for line in path.read_text().splitlines() if not line.startswith("//")))


def test_owned_by_dml_tensors_are_bound_at_initialization(tmp_path):
    """B is copied when the dispatchable is initialized: a dispatch that then writes over B's buffer does not change
    the next product."""
    model = quantized_example()
    bindings = model["commands"][0]["bindings"]
    model["commands"] = [{"type": "dispatch", "dispatchable": "matmul", "bindings": {**bindings, "OutputTensor": "B"}},
                         {"type": "dispatch", "dispatchable": "matmul", "bindings": bindings},
                         {"type": "print", "resource": "B"}, {"type": "print", "resource": "Output"}]
    assert run(tmp_path, model) == ("Resource 'B': 7, 113, 98, 108, 255, 102, 135, 127\n"
                                    "Resource 'Output': 7, 113, 98, 108, 255, 102\n")


@pytest.mark.parametrize("change, message", [
    (lambda model: model["commands"][0]["bindings"].update(BTensor="B"),
     "command 0: dispatchable 'matmul': DML_OPERATOR_QUANTIZED_LINEAR_MATRIX_MULTIPLY.b_tensor: OWNED_BY_DML "
     "tensors are bound at initialization, not at execution"),
    (lambda model: model["dispatchables"]["matmul"].pop("bindings"),
     "dispatchable 'matmul': DML_OPERATOR_QUANTIZED_LINEAR_MATRIX_MULTIPLY.b_tensor: OWNED_BY_DML; bind it at "
     "initialization"),
    (lambda model: model["dispatchables"]["matmul"]["bindings"].update(ATensor="A"),
     "dispatchable 'matmul': DML_OPERATOR_QUANTIZED_LINEAR_MATRIX_MULTIPLY.a_tensor: only OWNED_BY_DML tensors are "
     "bound at initialization"),
    (lambda model: model["dispatchables"]["matmul"]["bindings"].update(BTensor="W"),
     "dispatchable 'matmul': bindings: resource 'W' does not exist in the model"),
    (lambda model: model["commands"][0]["bindings"].pop("AZeroPointTensor"),
     "command 0: dispatchable 'matmul': DML_OPERATOR_QUANTIZED_LINEAR_MATRIX_MULTIPLY.a_zero_point_tensor: "
     "a binding is required"),
    (lambda model: model["dispatchables"]["matmul"]["desc"].pop("AZeroPointTensor"),
     "command 0: dispatchable 'matmul': DML_OPERATOR_QUANTIZED_LINEAR_MATRIX_MULTIPLY.a_zero_point_tensor: the "
     "desc has no such tensor; bind None"),
    (lambda model: model["resources"]["BScale"].update(initialValues=[0.125, 0]),
     "command 0: dispatchable 'matmul': DML_OPERATOR_QUANTIZED_LINEAR_MATRIX_MULTIPLY.b_scale_tensor: scales must "
     "be finite and non-zero, found "),
])
def test_bad_quantized_models(tmp_path, change, message):
    model = quantized_example()
    change(model)
    assert error(tmp_path, model).startswith(message)


def test_optional_zero_points_may_be_left_out(tmp_path):
    model = quantized_example()
    desc, bindings = model["dispatchables"]["matmul"]["desc"], model["commands"][0]["bindings"]
    for field in ("AZeroPointTensor", "BZeroPointTensor", "OutputZeroPointTensor"):
        del desc[field], bindings[field]
    a = np.array(model["resources"]["A"]["initialValues"], np.int8).reshape(3, 4)
    b = np.array(model["resources"]["B"]["initialValues"], np.uint8).reshape(4, 2)
    expected = reference.quantized_matmul(a, np.array([[0.5], [0.25], [1]]), None, b, np.array([0.125, 0.0625]),
                                          None, 0.25, None, np.uint8)
    assert run(tmp_path, model) == f"Resource 'Output': {', '.join(map(str, expected.ravel()))}\n"


# -- commands ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("command, message", [
    ({"type": "run"}, "command 1: 'run' is not a command (dispatch, print, writeFile)"),
    ({"resource": "Out"}, "command 1: field 'type' is required"),
    ({"type": "dispatch", "dispatchable": "sum", "bindings": {}},
     "command 1: dispatchable 'sum' does not exist in the model"),
    ({"type": "dispatch", "dispatchable": "scan"}, "command 1: field 'bindings' is required"),
    ({"type": "dispatch", "dispatchable": "scan", "bindings": []},
     "command 1: bindings: expected a JSON object, not []"),
    ({"type": "print", "resource": "Y"}, "command 1: resource 'Y' does not exist in the model"),
    ({"type": "print", "resource": "Out", "verbose": "yes"}, "command 1: verbose: expected true or false"),
    ({"type": "writeFile", "resource": "Y", "targetPath": "y.bin"},
     "command 1: resource 'Y' does not exist in the model"),
    ({"type": "writeFile", "resource": "Out"}, "command 1: field 'targetPath' is required"),
    (write_file("Out", "out.npy", dimensions=[2, 3]),
     "command 1: dimensions [2, 3] hold 6 elements; resource 'Out' holds 4"),
    (write_file("Out", "out.npy", dimensions=[2, -3]),
     "command 1: dimensions: expected an unsigned 32-bit integer, not -3"),
    (write_file("Out", "../out.bin"), "command 1: targetPath '../out.bin' leads out of the output folder"),
    (write_file("Out", "/tmp/out.bin"), "command 1: targetPath '/tmp/out.bin' leads out of the output folder"),
])
def test_bad_commands(tmp_path, command, message):
    model = scan_model()
    model["commands"].insert(1, command)
    found = error(tmp_path, model)
    assert found.startswith(message), found


def test_write_file(tmp_path):
    model = scan_model()
    model["commands"][1:] = [write_file("Out", "npy/out.npy"), write_file("Out", "out2x2.NPY", dimensions=[2, 2]),
                             write_file("Out", "a/b/out.dat"), write_file("X", "x.bin")]
    assert run(tmp_path, model) == "".join(
        f"Resource '{name}' written to '{(tmp_path / target).resolve()}'\n"
        for name, target in [("Out", "npy/out.npy"), ("Out", "out2x2.NPY"), ("Out", "a/b/out.dat"), ("X", "x.bin")])
    first, square = np.load(tmp_path / "npy" / "out.npy"), np.load(tmp_path / "out2x2.NPY")
    assert (first.dtype, first.tolist()) == (np.float32, [2, 3, 6, 11])
    assert (square.dtype, square.tolist()) == (np.float32, [[2, 3], [6, 11]])
    assert (tmp_path / "a" / "b" / "out.dat").read_bytes() == np.array([2, 3, 6, 11], np.float32).tobytes()
    assert np.fromfile(tmp_path / "x.bin", np.float32).tolist() == [2, 1, 3, 5]


def test_print_verbose(tmp_path):
    model = values_model(
        F=buffer("FLOAT32", [2, -1, 0.1, "nan"]),
        U8=buffer("UINT8", list(range(5, 15))),
        I8=buffer("INT8", [-1, 5]),
        H=buffer("FLOAT16", [1]))
    for command in model["commands"]:
        command["verbose"] = True
    assert run(tmp_path, model) == (
        "Resource 'F':\n[0] 2 (0x40000000)\n[1] -1 (0xBF800000)\n[2] 0.1 (0x3DCCCCCD)\n[3] nan (0x7FC00000)\n\n"
        "Resource 'U8':\n" + "".join(f"[{i - 5:2}] {i} (0x{i:2X})\n" for i in range(5, 15)) + "\n"
        "Resource 'I8':\n[0] -1 (0xFF)\n[1] 5 (0x 5)\n\n"
        "Resource 'H':\n[0] 1 (0x3C00)\n\n")


@pytest.mark.parametrize("values, texts", [
    (np.array([2, 0.5, 1 / 3, 2 / 3, 1e-4, 1e-5, 999999, 1e6, 1234567, -0.0], np.float64),
     ["2", "0.5", "0.333333", "0.666667", "0.0001", "1e-05", "999999", "1e+06", "1.23457e+06", "-0"]),
    (np.array([np.inf, -np.inf, np.nan, -np.nan], np.float32), ["inf", "-inf", "nan", "-nan"]),
    (np.array([3.4028235e38, 1.4e-45], np.float32), ["3.40282e+38", "1.4013e-45"]),
    (np.array([65504, 6e-8], np.float16), ["65504", "5.96046e-08"]),
    (np.array([-128, 127], np.int8), ["-128", "127"]),
    (np.array([0, 255], np.uint8), ["0", "255"]),
    (np.array([2**64 - 1], np.uint64), ["18446744073709551615"]),
])
def test_values_print_as_a_cpp_stream_does(values, texts):
    assert format_values(values) == texts
    assert resource_text("R", values) == f"Resource 'R': {', '.join(texts)}"


# -- timing --------------------------------------------------------------------------------------------------------

MS = r"\d+\.\d{4} ms"  # DxDispatch's milliseconds: 4 decimals
# A statistics line, its colon in column 19 as DxDispatch aligns them.
STATISTICS = rf"(?=.{{19}}: )(CPU|GPU) Timings \((Cold|Hot)\) +: (\d+) samples, {MS} average, {MS} min, {MS} median, " \
             rf"{MS} max"

# Five samples, the first of them cold (the default -w 1); the hot CPU median is 1.5, the hot GPU median 0.00512.
SAMPLES = Samples(cpu=[5.0, 1.25, 1.0, 2.0, 1.5], gpu=[0.5, 0.00512, 0.004, 0.006, 0.0051])


def test_the_median_line():
    """The hot samples' upper median; the GPU's with 6 decimals, as DxDispatch writes it."""
    assert dispatch_lines("sum", Samples(SAMPLES.cpu, None), TimingOptions()) == \
        ["Dispatch 'sum': 5 iterations, 1.5000 ms median (CPU)"]
    assert dispatch_lines("sum", SAMPLES, TimingOptions()) == \
        ["Dispatch 'sum': 5 iterations, 1.5000 ms median (CPU), 0.005120 ms median (GPU)"]


def test_cold_and_hot_statistics_and_every_iteration():
    cold = ["CPU Timings (Cold) : 1 samples, 5.0000 ms average, 5.0000 ms min, 5.0000 ms median, 5.0000 ms max",
            "GPU Timings (Cold) : 1 samples, 0.5000 ms average, 0.5000 ms min, 0.5000 ms median, 0.5000 ms max"]
    hot = ["CPU Timings (Hot)  : 4 samples, 1.4375 ms average, 1.0000 ms min, 1.5000 ms median, 2.0000 ms max",
           "GPU Timings (Hot)  : 4 samples, 0.0051 ms average, 0.0040 ms min, 0.0051 ms median, 0.0060 ms max"]
    iterations = ["The timings of each iteration: ", "iteration 0: 5.0000 ms (CPU), 0.5000 ms (GPU)",
                  "iteration 1: 1.2500 ms (CPU), 0.0051 ms (GPU)", "iteration 2: 1.0000 ms (CPU), 0.0040 ms (GPU)",
                  "iteration 3: 2.0000 ms (CPU), 0.0060 ms (GPU)", "iteration 4: 1.5000 ms (CPU), 0.0051 ms (GPU)"]
    assert dispatch_lines("sum", SAMPLES, TimingOptions(verbosity=1)) == ["Dispatch 'sum': 5 iterations", *cold, *hot]
    assert dispatch_lines("sum", SAMPLES, TimingOptions(verbosity=2)) == \
        ["Dispatch 'sum': 5 iterations", *cold, *hot, *iterations]
    assert dispatch_lines("sum", Samples(SAMPLES.cpu, None), TimingOptions(verbosity=2)) == \
        ["Dispatch 'sum': 5 iterations", cold[0], hot[0], iterations[0],
         *[line.split(", ")[0] for line in iterations[1:]]]


@pytest.mark.parametrize("count, warmup, cold_count", [(1, 2, 0), (2, 2, 1), (3, 2, 2), (4, 2, 2), (5, 2, 2),
                                                        (5, 0, 0), (5, 1, 1)])
def test_warmup_samples_are_cold_but_one_sample_stays_hot(count, warmup, cold_count):
    """DxDispatch's table: the first -w samples are cold, as long as one hot sample is left."""
    samples = list(np.random.default_rng().uniform(0, 1, count))
    assert cold_and_hot(samples, warmup) == (samples[:cold_count], samples[cold_count:])


def in_place_model(values: np.ndarray) -> dict:
    """An INT32 cumulative sum of X into X: after k dispatches, X is summed k times."""
    model = scan_model(values=values.tolist(), data_type="INT32")
    model["commands"] = [{"type": "dispatch", "dispatchable": "scan",
                          "bindings": {"InputTensor": "X", "OutputTensor": "X"}},
                         {"type": "print", "resource": "X"}]
    return model


def summed(values: np.ndarray, times: int) -> str:
    for _ in range(times):
        values = np.cumsum(values, dtype=np.int32)
    return f"Resource 'X': {', '.join(str(value) for value in values.tolist())}"


def random_int32(count=6) -> np.ndarray:
    return np.random.default_rng().integers(-2**31, 2**31, count, dtype=np.int32)


@pytest.mark.parametrize("iterations, repeat, verbosity", [(1, 1, 0), (4, 3, 0), (3, 2, 1), (5, 1, 2)])
def test_each_iteration_dispatches_repeat_times(tmp_path, iterations, repeat, verbosity):
    """-i iterations of -r dispatches: the model's in-place sum runs i × r times; the lines are DxDispatch's."""
    values = random_int32()
    lines = run(tmp_path, in_place_model(values),
                timing=TimingOptions(iterations=iterations, repeat=repeat, verbosity=verbosity)).splitlines()
    assert lines[-1] == summed(values, iterations * repeat)
    if verbosity == 0:
        assert re.fullmatch(rf"Dispatch 'scan': {iterations} iterations, {MS} median \(CPU\)", lines[0]), lines
        return
    assert re.fullmatch(rf"Initialize 'scan': {MS}", lines[0]), lines
    assert lines[1] == f"Dispatch 'scan': {iterations} iterations"
    statistics = [re.fullmatch(STATISTICS, line) for line in lines[2:4]]
    assert [match.groups() for match in statistics] == [("CPU", "Cold", "1"), ("CPU", "Hot", str(iterations - 1))]
    if verbosity == 2:
        assert lines[4] == "The timings of each iteration: "
        for index, line in enumerate(lines[5:-1]):
            assert re.fullmatch(rf"iteration {index}: {MS} \(CPU\)", line), line
        assert len(lines[5:-1]) == iterations


@pytest.mark.parametrize("warmup, lines", [(0, [("CPU", "Hot", "5")]), (3, [("CPU", "Cold", "3"), ("CPU", "Hot", "2")]),
                                           (9, [("CPU", "Cold", "4"), ("CPU", "Hot", "1")])])
def test_warmup_samples_of_a_run(tmp_path, warmup, lines):
    printed = run(tmp_path, in_place_model(random_int32()),
                  timing=TimingOptions(iterations=5, warmup_samples=warmup, verbosity=1)).splitlines()
    assert [re.fullmatch(STATISTICS, line).groups() for line in printed[2:-1]] == lines


def test_milliseconds_to_run_overrides_iterations_and_the_interval_spaces_them(tmp_path):
    """-t 60 with -I 20: iterations start at least 20 ms apart, and no iteration's end (with its sleep) runs past
    60 ms: at most 3 iterations, however many -i asks for."""
    values = random_int32()
    start = time.perf_counter()
    lines = run(tmp_path, in_place_model(values), timing=TimingOptions(
        iterations=100, repeat=2, milliseconds_to_run=60, interval_milliseconds=20)).splitlines()
    elapsed = time.perf_counter() - start
    iterations = int(re.fullmatch(rf"Dispatch 'scan': (\d) iterations, {MS} median \(CPU\)", lines[0]).group(1))
    assert 1 <= iterations <= 3 and elapsed >= 0.02 * (iterations - 1)
    assert lines[-1] == summed(values, 2 * iterations)


def test_the_interval_sleeps_between_iterations(tmp_path):
    start = time.perf_counter()
    run(tmp_path, in_place_model(random_int32()), timing=TimingOptions(iterations=3, interval_milliseconds=25))
    assert time.perf_counter() - start >= 0.07


class FakeGpuEvent:
    """A CUDA event's timing calls, on the CPU's clock."""

    def record(self):
        self.time = time.perf_counter()

    def elapsed_time(self, end) -> float:
        return (end.time - self.time) * 1000


def test_gpu_times_come_from_the_backends_events(tmp_path, monkeypatch):
    """Where the backend has a GPU clock (the cuda backend on a GPU), each line gets its GPU part."""
    from dmlops.backends.cpu import CpuBackend

    monkeypatch.setattr(CpuBackend, "timing_events", lambda self: lambda: (FakeGpuEvent(), FakeGpuEvent()))
    lines = run(tmp_path, in_place_model(random_int32()), timing=TimingOptions(iterations=3, verbosity=2)).splitlines()
    assert [re.fullmatch(STATISTICS, line).groups() for line in lines[2:6]] == \
        [("CPU", "Cold", "1"), ("GPU", "Cold", "1"), ("CPU", "Hot", "2"), ("GPU", "Hot", "2")]
    for index, line in enumerate(lines[7:10]):
        assert re.fullmatch(rf"iteration {index}: {MS} \(CPU\), {MS} \(GPU\)", line), line
    line = run(tmp_path, in_place_model(random_int32()), timing=TimingOptions()).splitlines()[0]
    assert re.fullmatch(rf"Dispatch 'scan': 1 iterations, {MS} median \(CPU\), \d+\.\d{{6}} ms median \(GPU\)", line)


def test_timed_runs_wait_for_the_compiled_engines_and_the_default_line_does_not(tmp_path, monkeypatch):
    from dmlops import Device

    calls = []
    monkeypatch.setattr(Device, "load_compiled_code", lambda self: calls.append(self.backend_name))
    run(tmp_path, in_place_model(random_int32()), timing=TimingOptions(load_compiled_code=False))
    run(tmp_path, in_place_model(random_int32()))
    assert calls == []
    run(tmp_path, in_place_model(random_int32()), timing=TimingOptions(iterations=2))
    assert calls == ["cpu"]


def test_the_cpu_backend_loads_its_compiled_code_when_asked():
    from dmlops import Device
    from dmlops.backends.cpu import qmatmul, scan

    Device("cpu").load_compiled_code()
    assert scan.LOOPS.done.is_set() and qmatmul.LOOPS.done.is_set()


def test_ctrl_c_keeps_the_iterations_done():
    """The samples of the whole iterations before the interrupt, and the mark that the loop was interrupted."""
    done = []

    def dispatch():
        if len(done) == 5:
            raise KeyboardInterrupt
        done.append(1)

    samples = time_dispatches(dispatch, lambda: None, None, TimingOptions(iterations=10**18), None)
    assert (len(samples.cpu), samples.gpu, samples.interrupted) == (5, None, True)
    lines = dispatch_lines("scan", samples, TimingOptions(verbosity=1))
    assert lines[0] == "Dispatch 'scan': 5 iterations" and lines[2].startswith("CPU Timings (Hot)  : 4 samples")


def test_without_timing_nothing_is_timed_or_printed(tmp_path, capsys):
    values = random_int32()
    assert run(tmp_path, in_place_model(values)) == summed(values, 1) + "\n"
    assert capsys.readouterr().err == ""


class Terminal(io.StringIO):
    def isatty(self):
        return True


@pytest.mark.parametrize("options, shown", [(TimingOptions(iterations=4), "4/4"),
                                            (TimingOptions(milliseconds_to_run=1100), "/1.1 s")])
def test_a_progress_bar_shows_on_a_terminal_after_about_a_second(options, shown):
    pytest.importorskip("tqdm")
    terminal = Terminal()
    with progress_bar(options, terminal) as progress:
        time_dispatches(lambda: time.sleep(0.3), lambda: None, None, options, progress)
    assert shown in terminal.getvalue()
    quick = Terminal()
    with progress_bar(TimingOptions(iterations=3), quick) as progress:
        time_dispatches(lambda: None, lambda: None, None, TimingOptions(iterations=3), progress)
    assert quick.getvalue() == ""


def test_no_progress_bar_off_a_terminal_or_without_tqdm(monkeypatch):
    with progress_bar(TimingOptions(), io.StringIO()) as progress:
        assert progress is None
    monkeypatch.setitem(sys.modules, "tqdm", None)  # as if tqdm were not installed
    with progress_bar(TimingOptions(), Terminal()) as progress:
        assert progress is None


# -- random models against the references ------------------------------------------------------------------------


SCAN_TYPES = {"FLOAT32": np.float32, "FLOAT16": np.float16, "INT32": np.int32, "UINT32": np.uint32,
              "INT64": np.int64, "UINT64": np.uint64}


def random_values(rng, dtype, count, operation="sum"):
    """Fresh values of every kind the type has (small floats for products, so that they stay finite)."""
    dtype = np.dtype(dtype)
    if dtype.kind == "f":
        scale = 2 if operation == "product" else 100
        return rng.uniform(-scale, scale, count).astype(dtype)
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, count, dtype=dtype, endpoint=True)


def as_json(values: np.ndarray) -> list:
    """Values as a model writes them: exact for their type, NaN as "nan"."""
    return [value if not isinstance(value, float) or math.isfinite(value) else "nan" for value in values.tolist()]


def packed(sizes) -> tuple:
    return tuple(int(np.prod(sizes[axis + 1:])) for axis in range(len(sizes)))


def span(sizes, strides) -> int:
    return 1 + sum((size - 1) * stride for size, stride in zip(sizes, strides))


def run_in_temporary_folder(model: dict) -> Path:
    folder = Path(tempfile.mkdtemp())
    (folder / "model.json").write_text(json.dumps(model))
    run_model(read_model(folder / "model.json"), output_dir=folder, out=io.StringIO())
    return folder


@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_random_cumulative_models_match_the_reference(data):
    """Any type, rank, axis, direction and exclusivity; strided, broadcast, offset and in-place bindings; the
    output poisoned so that an element left unwritten, or a byte written outside the tensor, shows."""
    operation = data.draw(st.sampled_from(["sum", "product"]))
    type_name = data.draw(st.sampled_from(sorted(SCAN_TYPES)))
    dtype = np.dtype(SCAN_TYPES[type_name])
    sizes = data.draw(strategies.shapes(max_elements=60))
    axis = data.draw(st.integers(0, len(sizes) - 1))
    reverse, exclusive, in_place = data.draw(st.booleans()), data.draw(st.booleans()), data.draw(st.booleans())
    out_strides = data.draw(strategies.strides(sizes, broadcast=False)) or packed(sizes)
    x_strides = out_strides if in_place else data.draw(strategies.strides(sizes, broadcast=True)) or packed(sizes)
    offsets = [data.draw(st.integers(0, 2)) * 16 // dtype.itemsize for _ in range(2)]
    if in_place:
        offsets[1] = offsets[0]
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    x_values = random_values(rng, dtype, offsets[0] + span(sizes, x_strides) + data.draw(st.integers(0, 3)),
                             operation)
    poison = random_values(rng, dtype, offsets[1] + span(sizes, out_strides) + data.draw(st.integers(0, 3)))
    output = "X" if in_place else "Out"
    model = {
        "resources": {"X": buffer(type_name, as_json(x_values)), "Out": buffer(type_name, as_json(poison))},
        "dispatchables": {"scan": {
            "type": "CUMULATIVE_SUMMATION" if operation == "sum" else "CUMULATIVE_PRODUCT",
            "desc": {"InputTensor": tensor(type_name, sizes, Strides=list(x_strides)),
                     "OutputTensor": tensor(type_name, sizes, Strides=list(out_strides)), "Axis": axis,
                     "AxisDirection": "DECREASING" if reverse else "INCREASING",
                     "HasExclusiveSum" if operation == "sum" else "HasExclusiveProduct": exclusive}}},
        "commands": [
            {"type": "dispatch", "dispatchable": "scan", "bindings": {
                "InputTensor": {"name": "X", "elementOffset": offsets[0]},
                "OutputTensor": {"name": output, "elementOffset": offsets[1]}}},
            write_file("X", "x.bin"), write_file("Out", "out.bin")],
    }
    folder = run_in_temporary_folder(model)

    def before(values):  # the buffer as filled: the values, then zeros up to a multiple of 4 bytes
        data = values.tobytes()
        return np.frombuffer(data + bytes(-len(data) % 4), np.uint8)

    x = reference.read_tensor(before(x_values), offsets[0] * dtype.itemsize, dtype, sizes, x_strides)
    after = np.fromfile(folder / f"{output.lower()}.bin", np.uint8)
    result = reference.read_tensor(after, offsets[1] * dtype.itemsize, dtype, sizes, out_strides)
    assert_cumulative_matches(result, operation, x, axis, reverse, exclusive)
    untouched = ~reference.covered_bytes(offsets[1] * dtype.itemsize, dtype, sizes, out_strides, after.size)
    np.testing.assert_array_equal(after[untouched], before(x_values if in_place else poison)[untouched])
    if not in_place:
        np.testing.assert_array_equal(np.fromfile(folder / "x.bin", np.uint8), before(x_values))


@st.composite
def quantization_parameter(draw, rng, kind: str, length: int, rank: int, free_axis: int, dtype):
    """Values and desc of a scale or zero point: per tensor, or per row / column where ``rank`` allows."""
    per_element = rank >= -free_axis and draw(st.booleans())
    sizes = [1] * rank
    if per_element:
        sizes[free_axis] = length
    count = length if per_element else 1
    if kind == "scale":
        values = rng.uniform(0.01, 2, count).astype(np.float32)
    else:
        values = random_values(rng, dtype, count)
    return values, sizes, per_element


@settings(max_examples=30, deadline=None)
@given(data=st.data())
def test_random_quantized_models_match_the_reference(data):
    """Every combination of INT8 and UINT8, 2 to 4 dimensions, parameters per tensor or per row / column, zero
    points present or not, B owned by DirectML or not."""
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    types = {field: data.draw(st.sampled_from(["INT8", "UINT8"])) for field in ("A", "B", "Output")}
    rank, parameter_rank = data.draw(st.integers(2, 4)), data.draw(st.integers(1, 4))
    batch = [data.draw(st.integers(1, 2)) for _ in range(rank - 2)]
    m, k, n = (data.draw(st.integers(1, 6)) for _ in range(3))
    shapes = {"A": batch + [m, k], "B": batch + [k, n], "Output": batch + [m, n]}
    dtypes = {field: np.dtype(name.lower()) for field, name in types.items()}
    resources = {field: buffer(types[field], as_json(random_values(rng, dtypes[field], math.prod(shape))))
                 for field, shape in shapes.items()}
    desc = {f"{field}Tensor": tensor(types[field], shape) for field, shape in shapes.items()}
    owned = data.draw(st.booleans())
    if owned:
        desc["BTensor"]["Flags"] = "OWNED_BY_DML"
    bindings = {f"{field}Tensor": field for field in shapes if not (owned and field == "B")}
    parameters = {}
    for field, length, free_axis in (("A", m, -2), ("B", n, -1), ("Output", m, -2)):
        for kind in ("scale", "zero point"):
            if kind == "zero point" and not data.draw(st.booleans()):
                parameters[field, kind] = None
                continue
            values, sizes, per_element = data.draw(quantization_parameter(
                rng, kind, length, parameter_rank, free_axis, dtypes[field]))
            name = field + ("Scale" if kind == "scale" else "ZeroPoint")
            resources[name] = buffer("FLOAT32" if kind == "scale" else types[field], as_json(values))
            desc[f"{name}Tensor"] = tensor("FLOAT32" if kind == "scale" else types[field], sizes)
            bindings[f"{name}Tensor"] = name
            shape = ((length, 1) if free_axis == -2 else (1, length)) if per_element else ()
            parameters[field, kind] = values.reshape(shape)
    model = {"resources": resources,
             "dispatchables": {"matmul": {"type": "QUANTIZED_LINEAR_MATRIX_MULTIPLY", "desc": desc,
                                          **({"bindings": {"BTensor": "B"}} if owned else {})}},
             "commands": [{"type": "dispatch", "dispatchable": "matmul", "bindings": bindings},
                          write_file("Output", "out.npy", dimensions=shapes["Output"])]}
    folder = run_in_temporary_folder(model)

    def values(field):
        return np.array(resources[field]["initialValues"], dtypes[field]).reshape(shapes[field])

    expected = reference.quantized_matmul(
        values("A"), parameters["A", "scale"], parameters["A", "zero point"], values("B"), parameters["B", "scale"],
        parameters["B", "zero point"], parameters["Output", "scale"], parameters["Output", "zero point"],
        dtypes["Output"])
    np.testing.assert_array_equal(np.load(folder / "out.npy"), expected)
