"""ONNX dispatchables (``{"type": "onnx", "sourcePath": "model.onnx"}``), run as DxDispatch's Guide describes them,
with ONNX's reference evaluator (``onnx.reference.ReferenceEvaluator``) in place of ONNX Runtime: its CumSum, CumProd
and QLinearMatMul nodes run on dmlops (``onnx_operators``), every other node on the evaluator.

Bindings name the model's inputs and outputs: ``"x": "Resource"`` or ``{"name": "Resource", "shape": [2, 2]}``. An
input's shape is its binding's shape (``-b`` wins over the model's), else the model's, each free dimension set by
its name (``freeDimensionNameOverrides``, ``-f``) or denotation (``freeDimensionDenotationOverrides``, ``-F``; the
command line wins), else 1. A bound input reads the resource's bytes as the input's element type; an input left
unbound is an implicit one (zeros of its shape); a bound output is written into its resource after each run, an
unbound one is dropped. A dispatch's time is the whole model's run, outputs written included.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from .fields import ModelError, as_object, as_string, as_uint, as_uint_array, check_keys, context, member
from .operators import BindingSource

ONNX_DISPATCHABLE_FIELDS = ("type", "sourcePath", "freeDimensionNameOverrides", "freeDimensionDenotationOverrides")
ONNX_BINDING_FIELDS = ("name", "shape")


@dataclass(frozen=True)
class OnnxOptions:
    """The command line's ONNX options: -f, -F, -b and -p."""

    free_dimension_names: dict[str, int] = field(default_factory=dict)
    free_dimension_denotations: dict[str, int] = field(default_factory=dict)
    binding_shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)
    print_bindings: bool = False


@dataclass(frozen=True)
class OnnxDispatchable:
    name: str
    path: Path
    free_dimension_names: dict[str, int]
    free_dimension_denotations: dict[str, int]
    initialize_bindings: dict = field(default_factory=dict)  # (ONNX models bind nothing at initialization)


def parse_onnx_dispatchable(name: str, obj: dict, model_dir: Path) -> OnnxDispatchable:
    check_keys(obj, ONNX_DISPATCHABLE_FIELDS, "an ONNX dispatchable")
    source = Path(member(obj, "sourcePath", as_string))
    path = model_dir / source if (model_dir / source).exists() else source

    def overrides(value) -> dict[str, int]:
        return {key: member(value, key, as_uint) for key in as_object(value)}
    return OnnxDispatchable(name, path, member(obj, "freeDimensionNameOverrides", overrides, {}),
                            member(obj, "freeDimensionDenotationOverrides", overrides, {}))


def parse_onnx_bindings(value) -> dict[str, BindingSource]:
    """Tensor name → resource; each a resource name, ``{name, shape}``, or an array of one of them."""
    bindings = {}
    for key, source in as_object(value).items():
        with context(key):
            if isinstance(source, list):
                if len(source) != 1:
                    raise ModelError(f"{len(source)} resources bound; an ONNX model's tensor takes 1")
                (source,) = source
            if isinstance(source, str):
                bindings[key] = BindingSource(source)
                continue
            obj = as_object(source)
            check_keys(obj, ONNX_BINDING_FIELDS, "an ONNX binding")
            shape = member(obj, "shape", as_uint_array, None)
            bindings[key] = BindingSource(member(obj, "name", as_string), shape=None if shape is None else tuple(shape))
    return bindings


def onnx_module():
    try:
        import onnx
        import onnx.reference  # noqa: F401
    except ImportError:
        raise ModelError("ONNX dispatchables need the onnx package: pip install '.[onnx]'") from None
    return onnx


class OnnxSession:
    """An ONNX dispatchable loaded (its "initialization"): the model, its evaluator, its inputs and outputs."""

    def __init__(self, dispatchable: OnnxDispatchable, options: OnnxOptions, to_device: Callable,
                 to_host: Callable):
        from .onnx_operators import evaluator_operators

        onnx = onnx_module()
        self.name, self.options = dispatchable.name, options
        try:
            model = onnx.load(str(dispatchable.path))
        except Exception as error:  # noqa: BLE001 (onnx raises what protobuf and the file system raise)
            raise ModelError(f"sourcePath: cannot read the ONNX model '{dispatchable.path}' ({error})") from None
        self.free_names = {**dispatchable.free_dimension_names, **options.free_dimension_names}
        self.free_denotations = {**dispatchable.free_dimension_denotations, **options.free_dimension_denotations}
        try:
            self.evaluator = onnx.reference.ReferenceEvaluator(
                model, new_ops=evaluator_operators(to_device, to_host))
        except Exception as error:  # noqa: BLE001 (an op the evaluator lacks, a malformed graph)
            raise ModelError(f"the reference evaluator cannot run '{dispatchable.path}' ({error})") from None
        initializers = {tensor.name for tensor in model.graph.initializer}
        self.inputs = {info.name: info for info in model.graph.input if info.name not in initializers}
        self.outputs = {info.name: info for info in model.graph.output}

    def check_bindings(self, bindings: dict[str, BindingSource]) -> None:
        for name in list(bindings) + list(self.options.binding_shapes):
            if name not in self.inputs and name not in self.outputs:
                raise ModelError(f"'{name}' is not an input or output of the ONNX model "
                                 f"({', '.join([*self.inputs, *self.outputs])})")

    def dtype(self, info) -> np.dtype:
        from onnx import helper

        return np.dtype(helper.tensor_dtype_to_np_dtype(info.type.tensor_type.elem_type))

    def model_shape(self, info, free: int | None) -> list[int | None]:
        """The model's shape of a tensor, each free dimension set by the overrides, else ``free``."""
        shape = []
        for dimension in info.type.tensor_type.shape.dim:
            if dimension.HasField("dim_value"):
                shape.append(dimension.dim_value)
            elif dimension.dim_param in self.free_names:
                shape.append(self.free_names[dimension.dim_param])
            elif dimension.denotation and dimension.denotation in self.free_denotations:
                shape.append(self.free_denotations[dimension.denotation])
            else:
                shape.append(free)
        return shape

    def binding_shape(self, name: str, source: BindingSource | None):
        return self.options.binding_shapes.get(name) or (source.shape if source else None)

    def prepare(self, bindings: dict[str, BindingSource], read: Callable, write: Callable, out) -> Callable[[], None]:
        """The dispatch of one command: the inputs read now (``read(source, byte_count)`` gives the bound bytes);
        each run evaluates the model and writes each bound output (``write(source, bytes)``)."""
        feeds = {}
        for name, info in self.inputs.items():
            source = bindings.get(name)
            shape = tuple(self.binding_shape(name, source) or self.model_shape(info, 1))
            dtype = self.dtype(info)
            if source is None:
                feeds[name] = np.zeros(shape, dtype)
            else:
                with context(f"input '{name}'"):
                    data = read(source, math.prod(shape) * dtype.itemsize)
                feeds[name] = data.view(dtype).reshape(shape)
            self.print_binding("Input", name, source, info, list(shape), out)
        outputs = [(name, bindings[name], self.binding_shape(name, bindings[name]))
                   for name in self.outputs if name in bindings]
        for name, info in self.outputs.items():
            shape = self.binding_shape(name, bindings.get(name))
            self.print_binding("Output", name, bindings.get(name), info,
                               list(shape) if shape else [-1 if d is None else d for d in self.model_shape(info, None)],
                               out)

        def run() -> None:
            results = dict(zip(self.evaluator.output_names, self.evaluator.run(None, feeds)))
            for name, source, shape in outputs:
                result = np.ascontiguousarray(results[name])
                if shape is not None and tuple(result.shape) != tuple(shape):
                    raise ModelError(f"output '{name}' has the shape {list(result.shape)}, not its binding's "
                                     f"{list(shape)}")
                with context(f"output '{name}'"):
                    write(source, result.reshape(-1).view(np.uint8))
        return run

    def print_binding(self, kind: str, name: str, source: BindingSource | None, info, shape, out) -> None:
        """What -p prints of a tensor, as DxDispatch prints it."""
        if not self.options.print_bindings:
            return
        from onnx import TensorProto

        resource = "explicit" if source else "implicit" if kind == "Input" or -1 not in shape else "deferred"
        data_type = TensorProto.DataType.Name(info.type.tensor_type.elem_type)
        print(f"{kind} Tensor '{name}':\n  Resource  = {resource}\n  Data Type = {data_type}\n"
              f"  Shape     = [{','.join(map(str, shape))}]\n", file=out)
