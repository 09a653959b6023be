"""The array API: arrays in, arrays out, through the same descs, validation and backends as the operator API.

Arrays are described to DirectML by their own sizes and strides (views are not copied where DirectML strides can
say them), checked against the tensor-support table of a LEVEL_6_4 device, and run on the backend their memory
lives on: NumPy arrays and CPU torch tensors on the CPU, CUDA arrays on the CUDA backend.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from . import dask_arrays
from .device import CompiledOperator, Device
from .ops import quantized_matmul as qmm
from .ops.cumulative import CumulativeProductOperatorDesc, CumulativeSummationOperatorDesc
from .ops.quantized_matmul import NAME as QMM_NAME
from .ops.quantized_matmul import QUANTIZATION_PARAMETERS, QuantizedLinearMatrixMultiplyOperatorDesc
from .tensor import TensorDesc
from .types import AxisDirection, DataType, ValidationError


@functools.cache
def _device(backend: str) -> Device:
    return Device(backend)


# Descs are frozen and hashable: calls that repeat a shape skip building and validating them again (a rejected
# desc raises, and is not cached).
_tensor_desc = functools.lru_cache(maxsize=1024)(TensorDesc)


@functools.lru_cache(maxsize=256)
def _compiled(backend: str, desc):
    return _device(backend).compile_operator(desc)


def _pick_backend(arrays, backend: str | None) -> str:
    """The named backend, else CUDA if any array lives on a CUDA device, else the CPU."""
    if backend is not None:
        return backend
    for array in arrays:
        device = getattr(array, "device", None)
        if getattr(device, "type", None) == "cuda" or \
                hasattr(array, "__dlpack_device__") and array.__dlpack_device__()[0] in (2, 3, 13):
            return "cuda"
    return "cpu"


def _try_adopt(be, obj, what: str):
    """The backend's (array, restore), or None where obj lives elsewhere; an array whose element type DirectML
    lacks (bool, complex, a torch bfloat16 tensor) is a ValidationError."""
    try:
        adopted = be.adopt(obj)
        if adopted is not None:
            be.data_type(adopted[0])
        return adopted
    except (TypeError, ValidationError) as error:
        raise ValidationError(f"{what}: {error}") from None


def _adopt(device: Device, obj, what: str):
    adopted = _try_adopt(device.backend, obj, what)
    if adopted is None:
        raise ValidationError(f"{what}: a {type(obj).__name__} on another device cannot run on the "
                              f"{device.backend_name} backend")
    return adopted


def _adopt_output(device: Device, out, what: str):
    """The backend's view of the caller's ``out``, which must be an array the result can be written into."""
    if not hasattr(out, "shape"):
        raise ValidationError(f"{what}: out must be an array, not a {type(out).__name__}")
    native, _ = _adopt(device, out, what)
    flags = getattr(native, "flags", None)  # NumPy's; torch tensors are always writable
    if flags is not None and not flags.writeable:
        raise ValidationError(f"{what}: out is read-only")
    return native


def _strided(backend, array):
    """(array, element strides), the array copied only where DirectML strides cannot describe it."""
    strides = backend.element_strides(array)
    if strides is None:
        array = backend.contiguous(array)
        strides = backend.element_strides(array)
    return array, strides


def _output_through(backend, out, like):
    """(array the kernels write, its element strides, caller's view to copy it into or None): a view DirectML
    strides cannot describe is written through a packed array."""
    strides = backend.element_strides(out)
    if strides is not None:
        return out, strides, None
    written = backend.empty(tuple(out.shape), backend.data_type(out), like=like)
    return written, backend.element_strides(written), out


def _described(backend, array, strides, where: str) -> TensorDesc:
    """The TensorDesc of an array whose element strides are ``strides``."""
    try:
        return _tensor_desc(backend.data_type(array), tuple(array.shape), strides)
    except ValidationError as error:
        raise ValidationError(f"{where}: {error}") from None


def _cumulative(desc_type, x, axis, reverse, exclusive, out, backend):
    if dask_arrays.given(x, out):  # lazy, chunk by chunk
        return dask_arrays.cumulative(desc_type.operation, x, axis, reverse, exclusive, out, backend)
    name = "DML_OPERATOR_" + desc_type.operator_type.name
    (x, out), layouts = _numpy_layouts((x, out))
    plain_options = (backend is None or isinstance(backend, str)) and type(axis) is int and \
        type(reverse) is bool and type(exclusive) is bool  # see quantized_linear_matmul
    key = (desc_type, backend, axis, reverse, exclusive, layouts) if layouts is not None and plain_options else None
    plan = _PLANS.get(key) if key is not None else None
    if plan is not None:
        return _run_plan(plan, (x, out))
    device = _device(_pick_backend([x, out], backend))
    be = device.backend
    native_x, restore = _adopt(device, x, f"{name}.input_tensor")
    native_x, x_strides = _strided(be, native_x)
    x_desc = _described(be, native_x, x_strides, f"{name}.input_tensor")
    ndim = x_desc.dimension_count
    if isinstance(axis, bool) or not isinstance(axis, int | np.integer) or not -ndim <= axis < ndim:
        raise ValidationError(f"{name}.axis: {axis!r} is out of range for {ndim} dimensions")
    axis = int(axis) % ndim
    if out is None:
        native_out = new_output = be.empty(x_desc.sizes, x_desc.data_type, like=native_x)
    else:
        native_out = _adopt_output(device, out, f"{name}.output_tensor")
    native_out, out_strides, target = _output_through(be, native_out, like=native_x)
    out_desc = _described(be, native_out, out_strides, f"{name}.output_tensor")
    direction = AxisDirection.DECREASING if reverse else AxisDirection.INCREASING
    desc = desc_type(x_desc, out_desc, axis, direction, bool(exclusive))
    compiled = _compiled(device.backend_name, desc)
    views = {"input_tensor": native_x, "output_tensor": native_out}
    compiled.run_views(views)
    if target is not None:
        be.assign(target, native_out)
    elif key is not None:
        _keep_plan(key, compiled, compiled.run_views, (x, new_output if out is None else out),
                   views.values(), new_output.shape if out is None else None)
    return out if out is not None else restore(native_out)


def cumulative_sum(x, axis, *, reverse=False, exclusive=False, out=None, backend=None):
    """Running sum along ``axis`` (DML_OPERATOR_CUMULATIVE_SUMMATION); ``out`` may be ``x`` (in place)."""
    return _cumulative(CumulativeSummationOperatorDesc, x, axis, reverse, exclusive, out, backend)


def cumulative_product(x, axis, *, reverse=False, exclusive=False, out=None, backend=None):
    """Running product along ``axis`` (DML_OPERATOR_CUMULATIVE_PRODUCT); ``out`` may be ``x`` (in place)."""
    return _cumulative(CumulativeProductOperatorDesc, x, axis, reverse, exclusive, out, backend)


def quantized_linear_matmul(a, a_scale, a_zero_point, b, b_scale, b_zero_point, output_scale, output_zero_point,
                            *, output_dtype=None, out=None, backend=None):
    """(A − za)·sa × (B − zb)·sb, requantized with the output scale and zero point.

    A {…, M, K} and B {…, K, N} are 2-D to 4-D; their batch dimensions broadcast NumPy-style. Scales and zero
    points may be scalars, one-element arrays, vectors (length M for A and output, N for B) or DirectML-shaped
    tensors; zero points may be None. The output type is ``output_dtype``, else the output zero point's, else
    ``out``'s, else uint8.
    """
    if dask_arrays.given(a, a_scale, a_zero_point, b, b_scale, b_zero_point, output_scale, output_zero_point, out):
        return dask_arrays.quantized_linear_matmul(a, a_scale, a_zero_point, b, b_scale, b_zero_point, output_scale,
                                                   output_zero_point, output_dtype=output_dtype, out=out,
                                                   backend=backend)
    arguments, layouts = _numpy_layouts((a, a_scale, a_zero_point, b, b_scale, b_zero_point, output_scale,
                                         output_zero_point, out))
    # plans are found by equality, which other kinds of options may not define plainly
    plain_options = (backend is None or isinstance(backend, str)) and \
        (output_dtype is None or isinstance(output_dtype, str | type | np.dtype))
    key = (backend, output_dtype, layouts) if layouts is not None and plain_options else None
    plan = _PLANS.get(key) if key is not None else None
    if plan is not None:
        return _run_plan(plan, arguments)
    given = dict(zip(QuantizedLinearMatrixMultiplyOperatorDesc.input_fields, arguments))
    out = arguments[-1]
    device = _device(_pick_backend([*given.values(), out], backend))
    be = device.backend
    native, strides, restore = {}, {}, None  # the arrays bound and their element strides, by field
    for field in ("a_tensor", "b_tensor"):
        native[field], restore_field = _adopt(device, given[field], f"{QMM_NAME}.{field}")
        restore = restore or restore_field
        if not 2 <= len(native[field].shape) <= 4:
            raise ValidationError(f"{QMM_NAME}.{field}: A and B must have 2 to 4 dimensions, "
                                  f"not {len(native[field].shape)}")
    *a_batch, m, _ = native["a_tensor"].shape
    *b_batch, _, n = native["b_tensor"].shape
    try:
        batch = np.broadcast_shapes(tuple(a_batch), tuple(b_batch))
    except ValueError:
        raise ValidationError(f"{QMM_NAME}.b_tensor: batch dimensions {b_batch} do not broadcast with A's "
                              f"{a_batch}") from None
    for field in ("a_tensor", "b_tensor"):
        native[field], strides[field] = _broadcast(be, native[field], batch)

    output_type = _output_type(be, output_dtype, given["output_zero_point_tensor"], out)
    element_types = {"a_tensor": be.data_type(native["a_tensor"]), "b_tensor": be.data_type(native["b_tensor"]),
                     "output_tensor": output_type}
    rank = len(batch) + 2
    lengths = {"a_tensor": m, "b_tensor": n, "output_tensor": m}
    for field, (data_field, free_axis) in QUANTIZATION_PARAMETERS.items():
        if given[field] is None:
            native[field] = None
            continue
        parameter_type = DataType.FLOAT32 if "scale" in field else element_types[data_field]
        native[field], strides[field] = _parameter(be, given[field], parameter_type, lengths[data_field],
                                                   free_axis, rank, native["a_tensor"], f"{QMM_NAME}.{field}")

    if out is None:
        native["output_tensor"] = new_output = be.empty((*batch, m, n), output_type, like=native["a_tensor"])
    else:
        native["output_tensor"] = _adopt_output(device, out, f"{QMM_NAME}.output_tensor")
        out_type = be.data_type(native["output_tensor"])
        if out_type != output_type:
            raise ValidationError(f"{QMM_NAME}.output_tensor: out is {out_type.name} but the output type "
                                  f"(output_dtype, else the output zero point's) is {output_type.name}")
    native["output_tensor"], strides["output_tensor"], target = _output_through(be, native["output_tensor"],
                                                                                 like=native["a_tensor"])

    descs = {field: _described(be, native[field], strides[field], f"{QMM_NAME}.{field}") for field in strides}
    desc = QuantizedLinearMatrixMultiplyOperatorDesc(**{field: descs.get(field) for field in
                                                        QuantizedLinearMatrixMultiplyOperatorDesc.input_fields +
                                                        ("output_tensor",)})
    compiled = _compiled(device.backend_name, desc)
    compiled.check_aliasing(native)
    tensors = qmm.kernel_tensors(desc, be, native)
    qmm.launch(be, tensors)
    if target is not None:
        be.assign(target, native["output_tensor"])
    elif key is not None:
        # a plan keeps the kernel's views, which it checks for aliasing as it would the desc's (the same elements)
        def run(views):
            compiled.check_aliasing(views)
            qmm.launch(be, views)
        _keep_plan(key, compiled, run, [*arguments[:-1], new_output if out is None else out], tensors.values(),
                   new_output.shape if out is None else None)
    return out if out is not None else restore(native["output_tensor"])


# -- repeated calls ------------------------------------------------------------------------------------------------

# A call whose arguments are NumPy arrays and scalars laid out as an earlier call's were (the same dtypes, shapes,
# strides and writability), with the same options, passes the same validation to the same compiled operator and
# views: its plan, kept here by that layout, leaves it only the checks of values and aliasing and the views of its
# own arrays (a 512³ quantized matmul: 138 -> 44 µs of Python). Calls with anything else (Python numbers, whose
# values are validated; other arrays; copies made for layouts DirectML strides cannot say) take the whole path.
_PLANS = {}
PLANS_KEPT = 64


@dataclass(frozen=True)
class _Plan:
    compiled: CompiledOperator
    # run(views by field): checks and runs on views of this call's arrays
    run: Callable
    # for each argument, in order: (sizes, element strides) of the view run takes of it, or None where it is None
    views: tuple
    # the sizes of the output array made where out is None
    new_output: tuple | None


def _numpy_layouts(values):
    """(values with NumPy scalars as 0-d arrays, the layout of each: None where it is None, else its dtype, shape,
    strides and writability); the layouts are None where a value is neither None nor a NumPy array or scalar."""
    values = [np.asarray(value) if isinstance(value, np.generic) else value for value in values]
    if not all(value is None or type(value) is np.ndarray for value in values):
        return values, None
    return values, tuple(None if value is None else (value.dtype, value.shape, value.strides, value.flags.writeable)
                         for value in values)


def _keep_plan(key, compiled, run, sources, views, new_output):
    """Keep the plan of a call whose every view starts at its argument's first element (none was copied)."""
    layouts = []
    for source, view in zip(sources, views):
        if source is None:
            layouts.append(None)
            continue
        if view.__array_interface__["data"][0] != source.__array_interface__["data"][0]:
            return
        layouts.append((view.shape, tuple(stride // view.itemsize for stride in view.strides)))
    if len(_PLANS) >= PLANS_KEPT:
        _PLANS.clear()
    _PLANS[key] = _Plan(compiled, run, tuple(layouts), new_output)


def _run_plan(plan: _Plan, arguments):
    be, desc = plan.compiled.device.backend, plan.compiled.desc
    *inputs, out = arguments
    if out is None:
        out = be.empty(plan.new_output, desc.output_tensor.data_type)
    plan.run({field: None if layout is None else be.restride(value, *layout)
              for field, value, layout in zip(desc.input_fields + desc.output_fields, [*inputs, out], plan.views)})
    return out


def _broadcast(be, array, batch):
    """(view, element strides) of A or B with the broadcast batch dimensions (zero strides where it repeats)."""
    array, strides = _strided(be, array)
    *own_batch, rows, columns = array.shape
    pad = len(batch) - len(own_batch)
    own_batch, batch_strides = [1] * pad + own_batch, [0] * pad + list(strides[:-2])
    batch_strides = [0 if size == 1 else stride for size, stride in zip(own_batch, batch_strides)]
    strides = (*batch_strides, *strides[-2:])
    return be.restride(array, (*batch, rows, columns), strides), strides


def _output_type(be, output_dtype, output_zero_point, out) -> DataType:
    if output_dtype is not None:  # a NumPy dtype, scalar type or name, or a torch dtype
        if type(output_dtype).__module__ == "torch":
            output_dtype = str(output_dtype).removeprefix("torch.")
        try:
            return DataType.from_numpy(output_dtype)
        except ValidationError as error:
            raise ValidationError(f"{QMM_NAME}.output_tensor: output_dtype {error}") from None
    for field, candidate in (("output_zero_point_tensor", output_zero_point), ("output_tensor", out)):
        adopted = _try_adopt(be, candidate, f"{QMM_NAME}.{field}") if hasattr(candidate, "dtype") else None
        if adopted is not None:
            return be.data_type(adopted[0])
    return DataType.UINT8


def _parameter(be, value, data_type: DataType, length: int, free_axis: int, rank: int, like, where: str):
    """(view, element strides) of a scale or zero point in DirectML's shape: per tensor {1, …}, per row
    {…, M, 1} or per column {…, 1, N}."""
    adopted = _try_adopt(be, value, where) if hasattr(value, "shape") else None
    if adopted is None:  # a number or a list
        values = np.asarray(value)
        if values.dtype.kind not in "fiub":
            raise ValidationError(f"{where}: {value!r} is not a number")
        if data_type != DataType.FLOAT32:
            info = np.iinfo(data_type.numpy_dtype)
            if values.dtype.kind == "f" and not np.array_equal(values, np.round(values)) or \
                    np.any(values < info.min) or np.any(values > info.max):
                raise ValidationError(f"{where}: {value!r} is not a {data_type.name} value")
        array = be.asarray(values, data_type, like=like)
    else:
        array = adopted[0]
        if data_type == DataType.FLOAT32 and be.data_type(array) in (DataType.FLOAT16, DataType.FLOAT64):
            array = be.asarray(array, DataType.FLOAT32, like=like)  # DirectML scales are FLOAT32
    if len(array.shape) > 1:
        return _strided(be, array.reshape((1,) * (rank - len(array.shape)) + tuple(array.shape)))
    vector, (stride,) = _strided(be, array.reshape((-1,)))
    count = vector.shape[0]
    if count == 1:
        sizes = (1,) * rank
    elif count == length:
        sizes = (1,) * (rank - 2) + ((length, 1) if free_axis == -2 else (1, length))
    else:
        raise ValidationError(f"{where}: a vector of {count} values; expected 1 or {length}")
    strides = tuple(0 if size == 1 else stride for size in sizes)
    return be.restride(vector, sizes, strides), strides
