"""A DxDispatch model file: its JSON (read as DxDispatch reads it, with comments and trailing commas), resources,
dispatchables and commands, and the check that every name they refer to exists."""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path

from ..types import DataType
from .fields import ModelError, as_bool, as_object, as_string, as_uint_array, context, describe, member
from .images import IMAGE_SUFFIXES
from .onnx_models import OnnxDispatchable, parse_onnx_bindings, parse_onnx_dispatchable
from .operators import BindingSource, Dispatchable, parse_bindings, parse_dispatchable
from .resources import Resource, parse_resource


@dataclass(frozen=True)
class DispatchCommand:
    dispatchable: str
    bindings: dict[str, BindingSource]  # by the desc's field name


@dataclass(frozen=True)
class PrintCommand:
    resource: str
    verbose: bool


@dataclass(frozen=True)
class WriteFileCommand:
    resource: str
    target_path: str
    dimensions: tuple[int, ...] | None  # the .npy shape; None: one dimension


Command = DispatchCommand | PrintCommand | WriteFileCommand


@dataclass(frozen=True)
class Model:
    path: Path
    resources: dict[str, Resource]
    dispatchables: dict[str, Dispatchable | OnnxDispatchable]
    commands: list[Command]


def read_model(path) -> Model:
    """A JSON model, or an ONNX model (``.onnx``), which runs as the JSON model with no resources and one dispatch
    of it with no bindings (its inputs implicit), as DxDispatch runs it."""
    path = Path(path)
    if path.is_dir():
        raise ModelError(f"{path}: a model is a JSON file, not a folder")
    if path.suffix.lower() == ".onnx":
        if not path.is_file():
            raise ModelError(f"{path}: cannot read the model (no such file)")
        return Model(path, {}, {path.name: OnnxDispatchable(path.name, path, {}, {})},
                     [DispatchCommand(path.name, {})])
    try:
        text = path.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as error:
        raise ModelError(f"{path}: cannot read the model ({error})") from None
    with context(str(path)):
        return parse_model(parse_json(text), path)


def parse_model(root, path: Path) -> Model:
    root = as_object(root)
    resources = _parse_named("resource", member(root, "resources", as_object),
                             lambda name, value: parse_resource(name, value, path.parent))
    dispatchables = _parse_named("dispatchable", member(root, "dispatchables", as_object),
                                 lambda name, value: _parse_dispatchable(name, value, path.parent))
    for dispatchable in dispatchables.values():
        with context(f"dispatchable '{dispatchable.name}'"), context("bindings"):
            _check_resources(dispatchable.initialize_bindings, resources)
    commands = []
    for index, command in enumerate(member(root, "commands", _as_array)):
        with context(f"command {index}"):
            commands.append(parse_command(command, resources, dispatchables))
    return Model(path, resources, dispatchables, commands)


def _parse_dispatchable(name: str, value, model_dir: Path) -> Dispatchable | OnnxDispatchable:
    if isinstance(value, dict) and value.get("type") == "onnx":
        return parse_onnx_dispatchable(name, value, model_dir)
    return parse_dispatchable(name, value)


def _parse_named(kind: str, objects: dict, parse) -> dict:
    parsed = {}
    for name, obj in objects.items():
        with context(f"{kind} '{name}'"):
            parsed[name] = parse(name, obj)
    return parsed


def _as_array(value) -> list:
    if not isinstance(value, list):
        raise ModelError(f"expected an array, not {describe(value)}")
    return value


def parse_command(value, resources: dict, dispatchables: dict) -> Command:
    obj = as_object(value)
    kind = member(obj, "type", as_string)
    if kind.lower() == "dispatch":
        name = member(obj, "dispatchable", as_string)
        if name not in dispatchables:
            raise ModelError(f"dispatchable '{name}' does not exist in the model")
        dispatchable = dispatchables[name]
        bindings = member(obj, "bindings", parse_onnx_bindings) if isinstance(dispatchable, OnnxDispatchable) \
            else member(obj, "bindings", lambda v: parse_bindings(v, dispatchable.desc))
        with context("bindings"):
            _check_resources(bindings, resources)
        return DispatchCommand(name, bindings)
    if kind.lower() not in ("print", "writefile"):
        raise ModelError(f"'{kind}' is not a command (dispatch, print, writeFile)")
    resource = member(obj, "resource", as_string)
    if resource not in resources:
        raise ModelError(f"resource '{resource}' does not exist in the model")
    if kind.lower() == "print":
        _check_typed(resources[resource], "print reads values in the resource's data type")
        return PrintCommand(resource, member(obj, "verbose", as_bool, False))
    dimensions = member(obj, "dimensions", as_uint_array, None)
    target_path = member(obj, "targetPath", as_string)
    suffix = Path(target_path).suffix.lower()
    if suffix not in WRITABLE_SUFFIXES:
        raise ModelError(f"targetPath '{target_path}': writeFile writes .npy, .png, .jpg, or raw bytes to .dat or "
                         f".bin, not '{suffix or 'a name without a suffix'}'")
    if suffix == ".npy":
        _check_typed(resources[resource], "a .npy file holds values of the resource's data type")
    return WriteFileCommand(resource, target_path, tuple(dimensions) if dimensions else None)


WRITABLE_SUFFIXES = (".npy", ".dat", ".bin", *IMAGE_SUFFIXES)


def _check_resources(bindings: dict[str, BindingSource], resources: dict) -> None:
    for source in bindings.values():
        if source.name not in resources:
            raise ModelError(f"resource '{source.name}' does not exist in the model")
        if (source.element_offset or source.element_count) and not source.element_size_in_bytes:
            _check_typed(resources[source.name], "elementOffset and elementCount count elements of the resource's "
                                                 "data type unless elementSizeInBytes is given")


def _check_typed(resource: Resource, why: str) -> None:
    """A List Initializer's buffer has no data type."""
    if resource.data_type == DataType.UNKNOWN:
        raise ModelError(f"resource '{resource.name}' has no data type (its initialValuesDataType is UNKNOWN); {why}")


# The pieces of a model's text, one match at a time from where the last one ended (each is found in time linear in
# its length, so that the whole text is read once): a string, a comment's opening, a blank run, a comma, a closing
# bracket, or a run of anything else.
_PIECE = re.compile(r'"(?:[^"\\]|\\.)*"?|//[^\n]*|/\*|\s+|,|[}\]]|[^\s"/,}\]]+|/', re.DOTALL)


def strip_comments(text: str) -> str:
    """What RapidJSON accepts as DxDispatch runs it and JSON does not, made blank in one pass over the text: // and
    /* */ comments, and a comma before a closing bracket. Blanks keep every line and column where it was, so that
    error positions stay true; nothing inside a string is touched."""
    pieces, position, trailing_comma = [], 0, None  # trailing_comma: the index in pieces of a comma not yet followed
    while position < len(text):
        piece = _PIECE.match(text, position).group()
        if piece == "/*":
            end = text.find("*/", position + 2)
            if end < 0:
                line = text.count("\n", 0, position) + 1
                raise ModelError(f"JSON parse error at line {line}: a /* comment is not closed")
            piece = text[position:end + 2]
        position += len(piece)
        if piece.startswith("/") and piece != "/" or piece.isspace():  # a comment or a blank run
            pieces.append(re.sub(r"[^\n]", " ", piece) if piece.startswith("/") else piece)
            continue
        if piece in ("}", "]") and trailing_comma is not None:
            pieces[trailing_comma] = " "
        trailing_comma = len(pieces) if piece == "," else None
        pieces.append(piece)
    return "".join(pieces)


def parse_json(text: str):
    """The model's JSON, with comments and trailing commas (``strip_comments``); what follows the root value is
    ignored, as RapidJSON's kParseStopWhenDoneFlag does."""
    text = strip_comments(text)
    decoder = json.JSONDecoder(object_pairs_hook=_first_key_wins, parse_constant=_not_finite,
                               parse_float=_finite_float)
    try:
        return decoder.raw_decode(text, len(text) - len(text.lstrip()))[0]
    except json.JSONDecodeError as error:
        raise ModelError(f"JSON parse error at line {error.lineno}, column {error.colno}: {error.msg}") from None
    except RecursionError:
        raise ModelError("JSON parse error: the values are nested too deeply") from None


def _finite_float(text: str) -> float:
    value = float(text)
    return value if math.isfinite(value) else _not_finite(text)


def _not_finite(text: str):
    """RapidJSON refuses NaN, Infinity and numbers too large for a double."""
    raise ModelError(f'JSON parse error: {text} is not a finite JSON number (write floats as "inf", "-inf" or "nan")')


def _first_key_wins(pairs) -> dict:
    """RapidJSON finds the first of repeated keys."""
    obj = {}
    for key, value in pairs:
        obj.setdefault(key, value)
    return obj
