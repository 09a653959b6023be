"""Device, compiled operators and buffer bindings: how a desc meets memory."""

from __future__ import annotations

import weakref
from dataclasses import dataclass

from .core import lowering, plans, registry
from .ops import OPERATORS, operator_module
from .tensor import TensorDesc
from .types import DEFAULT_FEATURE_LEVEL, FeatureLevel, ValidationError


@dataclass(frozen=True)
class BufferBinding:
    """DML_BUFFER_BINDING: a range of a buffer. ``size`` None means to the buffer's end."""

    buffer: object
    offset: int = 0
    size: int | None = None


class Device:
    """IDMLDevice: a backend and the feature level whose tensor-support tables it enforces."""

    def __init__(self, backend: str | None = None, feature_level=DEFAULT_FEATURE_LEVEL):
        """``backend``: a registered backend's name; None: the default (the host's)."""
        self.backend_name = registry.default() if backend is None else backend
        self.backend = registry.backend(self.backend_name)
        self.feature_level = FeatureLevel.parse(feature_level)

    def compile_operator(self, desc) -> CompiledOperator:
        if type(desc) not in OPERATORS:
            raise ValidationError(f"compile_operator: {type(desc).__name__} is not an operator desc "
                                  f"({', '.join(t.__name__ for t in OPERATORS)})")
        operator_module(desc).validate(desc, self.feature_level)
        return CompiledOperator(self, desc)

    def load_compiled_code(self) -> None:
        """Load the backend's compiled engines now and wait for them, so that timings measure them."""
        self.backend.load_compiled_code()

    def __repr__(self):
        return f"Device({self.backend_name!r}, FeatureLevel.{self.feature_level.name})"


class CompiledOperator:
    """IDMLCompiledOperator: initialize once with the OWNED_BY_DML inputs, then execute with the rest."""

    def __init__(self, device: Device, desc):
        self.device, self.desc = device, desc
        self.name = desc.operator_type.operator_name
        self._owned = lowering.owned(desc)
        self._plan_name = weakref.ref(self)  # its plans' name: a plan keeps no compiled operator alive
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
        """Run on backend arrays already laid out as the desc says, through the plan of their layouts."""
        lowering.check_aliasing(self.desc, self.device.backend, views)
        arrays = [views.get(field) for field in self.desc.input_fields + self.desc.output_fields]
        key = plans.key(self._plan_name, (), arrays)
        plan = plans.get(key)
        if plan is None:
            since = plans.generation()
            plans.keep(key, lowering.prepare(self.desc, self.device.backend, views), since)
        else:
            plan(*arrays)

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
