"""Descs lowered to a backend: the arguments each primitive's lowering takes, and the one check of an output's
aliasing. What an operator means is in ``ops``; how a backend runs it is in its own folder; this is the glue."""

from __future__ import annotations

from ..ops.cumulative import CumulativeProductOperatorDesc, CumulativeSummationOperatorDesc
from ..ops.quantized_matmul import QUANTIZATION_PARAMETERS, QuantizedLinearMatrixMultiplyOperatorDesc
from ..types import AxisDirection, ValidationError
from .registry import Backend


def owned(desc) -> tuple[str, ...]:
    """The OWNED_BY_DML inputs."""
    return tuple(field for field in desc.input_fields if getattr(desc, field) is not None and
                 getattr(desc, field).owned_by_dml)


def kernel_layouts(desc: QuantizedLinearMatrixMultiplyOperatorDesc, owned_strides: dict) -> dict:
    """How the backends see the quantized matmul's tensors: A, B and Output as 4-D {batch, channel, rows, columns};
    every scale and zero point as a 1-D vector of length M (A, Output) or N (B), with stride 0 when it is per tensor.

    The array bound for a field has its desc's strides, except an OWNED_BY_DML tensor, which the backend keeps in a
    layout of its own: ``owned_strides`` holds its element strides by field. Returns field → (sizes, element strides)
    relative to each binding's first element.
    """
    strides = {field: getattr(desc, field).element_strides for field in desc.input_fields + desc.output_fields
               if getattr(desc, field) is not None} | owned_strides
    layouts = {}
    for field in ("a_tensor", "b_tensor", "output_tensor"):
        tensor = getattr(desc, field)
        pad = 4 - tensor.dimension_count
        layouts[field] = ((1,) * pad + tensor.sizes, (0,) * pad + tuple(strides[field]))
    for field, (data_field, free_axis) in QUANTIZATION_PARAMETERS.items():
        tensor = getattr(desc, field)
        if tensor is None:
            continue
        length = getattr(desc, data_field).sizes[free_axis]
        per_element = tensor.dimension_count >= -free_axis and tensor.sizes[free_axis] != 1
        layouts[field] = ((length,), (strides[field][free_axis] if per_element else 0,))
    return layouts


def prepare(desc, backend: Backend, views: dict):
    """Run a validated desc on ``views`` (backend arrays by field, as the desc lays them out) through the backend's
    lowering, and return run(*arrays) (binding order: the inputs, then the output) for arrays of the same layouts."""
    if isinstance(desc, CumulativeSummationOperatorDesc | CumulativeProductOperatorDesc):
        return backend.prepare_cumulative(desc.operation, views["input_tensor"], views["output_tensor"], int(desc.axis),
                                          desc.axis_direction == AxisDirection.DECREASING, bool(desc.exclusive))
    layouts = kernel_layouts(desc, {field: backend.element_strides(views[field]) for field in owned(desc)})
    return backend.prepare_quantized_linear_matmul(views, layouts)


def check_aliasing(desc, backend: Backend, views: dict) -> None:
    """Reject an output that shares memory with an input, but for an exact alias where the operator runs in
    place. ``views`` may be in any layout that covers the same elements as the desc's; OWNED_BY_DML inputs are the
    backend's own copies."""

    name = desc.operator_type.operator_name
    for out_field in desc.output_fields:
        out = views[out_field]
        for in_field in desc.input_fields:
            x = views.get(in_field)
            # (what is OWNED_BY_DML asked last: reading a desc's flags costs more than the overlap test, every call)
            if x is None or not backend.overlaps(x, out) or in_field in owned(desc):
                continue
            if not (desc.supports_in_place and backend.same_layout(x, out)):
                what = "may alias its input only exactly (in place)" if desc.supports_in_place \
                    else "may not share memory with an input"
                raise ValidationError(f"{name}.{out_field}: {what}; it overlaps {in_field}")
