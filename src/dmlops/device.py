"""Device, compiled operators and buffer bindings: how a desc meets memory."""

from __future__ import annotations

import importlib
from dataclasses import dataclass

from .ops import OPERATORS, operator_module
from .tensor import TensorDesc
from .types import DEFAULT_FEATURE_LEVEL, FeatureLevel, ValidationError

BACKENDS = {"cpu": "dmlops.backends.cpu", "cuda": "dmlops.backends.cuda"}


@dataclass(frozen=True)
class BufferBinding:
    """DML_BUFFER_BINDING: a range of a buffer. ``size`` None means to the buffer's end."""

    buffer: object
    offset: int = 0
    size: int | None = None


def load_backend(name: str):
    if name not in BACKENDS:
        raise ValidationError(f"Device.backend: {name!r} is not one of {', '.join(BACKENDS)}")
    try:
        return importlib.import_module(BACKENDS[name])
    except ImportError as error:
        raise ValidationError(f"Device.backend: the {name!r} backend cannot load ({error}); "
                              f"in dmlops' folder: pip install '.[cuda]'") from None


class Device:
    """IDMLDevice: a backend and the feature level whose tensor-support tables it enforces."""

    def __init__(self, backend: str = "cpu", feature_level=DEFAULT_FEATURE_LEVEL):
        self.backend_name = backend
        self.backend = load_backend(backend)
        self.feature_level = FeatureLevel.parse(feature_level)

    def compile_operator(self, desc) -> CompiledOperator:
        if type(desc) not in OPERATORS:
            raise ValidationError(f"compile_operator: {type(desc).__name__} is not an operator desc "
                                  f"({', '.join(t.__name__ for t in OPERATORS)})")
        operator_module(desc).validate(desc, self.feature_level)
        return CompiledOperator(self, desc)

    def __repr__(self):
        return f"Device({self.backend_name!r}, FeatureLevel.{self.feature_level.name})"


class CompiledOperator:
    """IDMLCompiledOperator: initialize once with the OWNED_BY_DML inputs, then execute with the rest."""

    def __init__(self, device: Device, desc):
        self.device, self.desc = device, desc
        self.name = desc.operator_type.operator_name
        self._module = operator_module(desc)
        self._owned = {f for f in desc.input_fields if getattr(desc, f) is not None and getattr(desc, f).owned_by_dml}
        self._persistent: dict | None = None if self._owned else {}

    def initialize(self, bindings=None) -> None:
        """Bind the OWNED_BY_DML inputs (a list in binding order, None elsewhere); the backend keeps a copy."""
        bindings = self._binding_list(bindings, self.desc.input_fields, "initialize")
        persistent = {}
        for field, binding in zip(self.desc.input_fields, bindings):
            if field in self._owned:
                if binding is None:
                    raise ValidationError(f"{self.name}.{field}: OWNED_BY_DML; bind it at initialization")
                view = self._view(field, binding, writable=False)
                persistent[field] = self.device.backend.persist(self.desc.operator_type, field, view)
            elif binding is not None:
                raise ValidationError(f"{self.name}.{field}: only OWNED_BY_DML tensors are bound at initialization")
        self._persistent = persistent

    def execute(self, inputs, outputs) -> None:
        """Run on buffer bindings: lists in DirectML's binding order, None for an absent optional tensor."""
        if self._persistent is None:
            raise ValidationError(f"{self.name}: OWNED_BY_DML inputs {sorted(self._owned)}; call initialize first")
        inputs = self._binding_list(inputs, self.desc.input_fields, "execute inputs")
        outputs = self._binding_list(outputs, self.desc.output_fields, "execute outputs")
        views = {}
        for field, binding in zip(self.desc.input_fields, inputs):
            if field in self._owned:
                if binding is not None:
                    raise ValidationError(f"{self.name}.{field}: OWNED_BY_DML tensors are bound at initialization, "
                                          f"not at execution")
                views[field] = self._persistent[field]
            else:
                views[field] = self._view(field, binding, writable=False)
        for field, binding in zip(self.desc.output_fields, outputs):
            views[field] = self._view(field, binding, writable=True)
        self.run_views(views)

    def run_views(self, views: dict) -> None:
        """Run on backend arrays already laid out as the desc says (the array API enters here)."""
        self.check_aliasing(views)
        self._module.run(self.desc, self.device.backend, views)

    def prepare(self, views: dict):
        """Run on views as ``run_views`` does, and return ``run(*arrays)``, which runs on other arrays of the same
        layouts (and alignment), given in binding order (the inputs, then the output), through what the backend kept
        of this run; it leaves the aliasing check to its caller (the array API's plans)."""
        self.check_aliasing(views)
        return self._module.prepare(self.desc, self.device.backend, views)

    def check_aliasing(self, views: dict) -> None:
        """Reject an output that shares memory with an input, but for an exact alias where the operator runs in
        place. ``views`` may be in any layout that covers the same elements as the desc's."""
        backend = self.device.backend
        for out_field in self.desc.output_fields:
            out = views[out_field]
            for in_field in self.desc.input_fields:
                x = views.get(in_field)
                if x is None or in_field in self._owned or not backend.overlaps(x, out):
                    continue
                in_place = self.desc.supports_in_place and backend.same_layout(x, out)
                if not in_place:
                    what = "may alias its input only exactly (in place)" if self.desc.supports_in_place \
                        else "may not share memory with an input"
                    raise ValidationError(f"{self.name}.{out_field}: {what}; it overlaps {in_field}")

    def _binding_list(self, bindings, fields, what):
        bindings = [None] * len(fields) if bindings is None else list(bindings)
        if len(bindings) != len(fields):
            raise ValidationError(f"{self.name}: {what} takes {len(fields)} bindings ({', '.join(fields)}), "
                                  f"got {len(bindings)}")
        return bindings

    def _view(self, field: str, binding, *, writable: bool):
        tensor: TensorDesc | None = getattr(self.desc, field)
        if tensor is None:
            if binding is not None:
                raise ValidationError(f"{self.name}.{field}: the desc has no such tensor; bind None")
            return None
        if binding is None:
            raise ValidationError(f"{self.name}.{field}: a binding is required")
        if not isinstance(binding, BufferBinding):
            binding = BufferBinding(binding)
        backend = self.device.backend
        memory = backend.memory(binding.buffer, f"{self.name}.{field}", writable=writable)
        nbytes = backend.byte_length(memory)
        for name, value in (("offset", binding.offset), ("size", 0 if binding.size is None else binding.size)):
            if isinstance(value, bool) or not hasattr(value, "__index__"):
                raise ValidationError(f"{self.name}.{field}: binding {name} {value!r} is not an integer")
        offset = int(binding.offset)
        if offset < 0:
            raise ValidationError(f"{self.name}.{field}: binding offset {offset} is negative")
        if offset % tensor.offset_alignment:
            raise ValidationError(f"{self.name}.{field}: binding offset {offset} must be a multiple of "
                                  f"{tensor.offset_alignment}")
        if offset > nbytes:
            raise ValidationError(f"{self.name}.{field}: binding offset {offset} is past the end of the buffer's "
                                  f"{nbytes} bytes")
        size = nbytes - offset if binding.size is None else int(binding.size)
        if size < 0:
            raise ValidationError(f"{self.name}.{field}: binding size {size} is negative")
        if offset + size > nbytes:
            raise ValidationError(f"{self.name}.{field}: binding of {size} bytes at offset {offset} runs past the "
                                  f"end of the buffer's {nbytes} bytes")
        if size < tensor.total_tensor_size_in_bytes:
            raise ValidationError(f"{self.name}.{field}: the binding holds {size} bytes; the tensor needs "
                                  f"total_tensor_size_in_bytes = {tensor.total_tensor_size_in_bytes}")
        return backend.view(memory, offset, tensor.data_type, tensor.sizes, tensor.element_strides)
