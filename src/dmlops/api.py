"""The array API: arrays in, arrays out, through the same descs, validation and backends as the operator API.

Arrays are described to DirectML by their own sizes and strides (views are not copied where DirectML strides can
say them), checked against the tensor-support table of a LEVEL_6_4 device, and run on the backend their memory
lives on: NumPy arrays and CPU torch tensors on the CPU, CUDA arrays on the CUDA backend.
"""

from __future__ import annotations

import functools
import sys
from dataclasses import dataclass

import numpy as np

from . import dask_arrays
from .device import Device
from .ops import cumulative as cumulative_rules
from .ops import quantized_matmul as qmm
from .ops.cumulative import CumulativeProductOperatorDesc, CumulativeSummationOperatorDesc
from .ops.quantized_matmul import NAME as QMM_NAME
from .ops.quantized_matmul import QUANTIZATION_PARAMETERS, QuantizedLinearMatrixMultiplyOperatorDesc
from .support import check_array_rank
from .tensor import TensorDesc
from .types import AxisDirection, DataType, OperatorType, ValidationError


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


# -- plans: calls whose layout repeats ----------------------------------------------------------------------------

# A call whose arguments are laid out as an earlier call's were (NumPy arrays and torch tensors of the same kinds,
# dtypes, sizes, strides, devices, alignment and writability; Python numbers of the same values), with the same
# options, passes the same validation to the same compiled operator and kernel launches: its plan, kept here by that
# layout, leaves it only the aliasing check and the backend's kept run on its own arrays. Other calls (arrays of
# other kinds, layouts DirectML strides cannot say, which are copied) take the whole path.
_PLANS: dict = {}
PLANS_KEPT = 256
_UNPLANNED = object()


_tensor_type = None  # torch.Tensor, once torch is imported


def _layout(value):
    """What a plan depends on in one argument; _UNPLANNED where no plan can hold it."""
    global _tensor_type
    kind = type(value)
    if kind is np.ndarray:  # (first: the commonest, and a look for an attribute a type lacks is slow)
        return kind, value.dtype, value.shape, value.strides, value.flags.writeable
    if value is None or kind is float or kind is int:
        return kind, value  # by value: validated once
    if isinstance(value, np.generic):  # its type says all: a plan takes it as the 0-d array a first call made of it
        return (kind,)
    if kind is _tensor_type or getattr(kind, "planned_as_tensor", False):
        return kind, value.dtype, value.shape, value.stride(), value.device, value.data_ptr() % 16
    if _tensor_type is None and "torch" in sys.modules:  # torch imported since the last look: its tensors plan
        _tensor_type = sys.modules["torch"].Tensor
        return _layout(value)
    return _UNPLANNED


def _plan_key(operation, options, arguments):
    """The key of a call's plan, or None where it can have none."""
    layouts = tuple(map(_layout, arguments))
    if _UNPLANNED in layouts:
        return None
    return operation, options, layouts


def _keep(key, plan) -> None:
    if key is None or plan is None:
        return
    if len(_PLANS) >= PLANS_KEPT:
        _PLANS.clear()
    _PLANS[key] = plan


def _adopted(be, source):
    """What a plan makes of an argument of the kind and placement of ``source``."""
    adopt = be.adopter(source)
    return source if adopt is None else adopt(source)


def _first_elements_match(be, sources, views) -> bool:
    """Whether every view starts at its argument's first element (none of the arguments was copied, nor converted
    from another kind of array, such as a NumPy scale given to the CUDA backend)."""
    return all(source is None or be.adopt(source) is not None and be.address(view) == be.address(_adopted(be, source))
               for source, view in zip(sources, views))


def _plan(compiled, run, arguments, views: dict, restore, allocate, scalars=()):
    """The plan of a call whose compiled operator ran ``run`` (``compiled.prepare``: later calls take the arrays in
    binding order) on ``views`` (by field, in binding order) made of ``arguments`` (the same order; the output
    last), for later calls of the same layout; None where an argument was copied or converted. Numbers this call
    converted stay as its arrays; every other argument is replaced by the later call's own, those at the positions
    ``scalars`` (NumPy scalars, which the call took as 0-d arrays: ``arguments`` holds those) made 0-d arrays
    again; a new output comes from ``allocate(the call's first input)``."""
    device, fields = compiled.device, compiled.desc.input_fields + compiled.desc.output_fields
    be, out_field = device.backend, fields[-1]
    constants = {field: views[field] for field, value in zip(fields, arguments)
                 if value is not None and not hasattr(value, "shape")}
    sources = [None if field in constants else value for field, value in zip(fields, arguments)]
    if not _first_elements_match(be, sources, [views[field] for field in fields]):
        return None
    # (position, adopt) of each input the call passes, adopt None where the backend takes it as it is
    passed = [(position, _scalar_adopter(be.adopter(source)) if position in scalars else be.adopter(source))
              for position, source in enumerate(sources[:-1]) if source is not None]
    template = [constants.get(field) for field in fields]  # the numbers in their places
    first = passed[0][0]  # the output is allocated like the first input
    # the caller's own arrays, which a given output may alias (the arrays made of numbers and scalars are new)
    own = [(position, fields[position]) for position, _ in passed if position not in scalars]

    def plan(arguments):
        arrays = template.copy()
        for position, adopt in passed:
            arrays[position] = arguments[position] if adopt is None else adopt(arguments[position])
        out = arguments[-1]
        if out is None:
            arrays[-1] = output = allocate(arrays[first])
            run(*arrays)
            return restore(output)
        arrays[-1] = _adopt_output(device, out, f"{compiled.name}.{out_field}")
        compiled.check_aliasing({out_field: arrays[-1]} | {field: arrays[position] for position, field in own})
        run(*arrays)
        return out

    return plan


def _scalar_adopter(adopt):
    """How a plan takes a NumPy scalar whose 0-d array it takes with ``adopt`` (None: as it is)."""
    return np.asarray if adopt is None else lambda value: adopt(np.asarray(value))


def check_errors() -> None:
    """Wait for the GPUs, and raise the ValidationError of any value that a CUDA call found bad since the last check
    (a zero, NaN or infinite scale: that call's output is undefined). CUDA calls check such values on the device,
    so that no call waits for the GPU; the CPU backend raises at the call."""
    cuda = sys.modules.get("dmlops.backends.cuda")
    if cuda is not None:
        cuda.check_errors()


# -- the cumulative operators ---------------------------------------------------------------------------------------


def _cumulative(desc_type, x, axis, reverse, exclusive, out, backend):
    if type(axis) is not int or type(reverse) is not bool or type(exclusive) is not bool or \
            not (backend is None or type(backend) is str):
        key = None  # plans are found by equality, which other kinds of options may not define plainly
    else:  # _plan_key's, flat: this is the path of every repeated scan
        key = (desc_type, axis, reverse, exclusive, backend, _layout(x), _layout(out))
        if key[-2] is _UNPLANNED or key[-1] is _UNPLANNED:
            key = None
    plan = _PLANS.get(key) if key is not None else None
    if plan is not None:
        return plan((x, out))
    if key is None and dask_arrays.given(x, out):  # lazy, chunk by chunk
        return dask_arrays.cumulative(desc_type.operation, x, axis, reverse, exclusive, out, backend)
    result, plan = _cumulative_planned(desc_type, x, axis, reverse, exclusive, out, backend, key is not None)
    _keep(key, plan)
    return result


def _cumulative_planned(desc_type, x, axis, reverse, exclusive, out, backend, planned: bool):
    """(result, plan for later calls of the same layout, or None where not ``planned`` or none can be)."""
    name = desc_type.operation.operator_name
    device = _device(_pick_backend([x, out], backend))
    be = device.backend
    native_x, restore = _adopt(device, x, f"{name}.input_tensor")
    native_x, x_strides = _strided(be, native_x)
    x_desc = _described(be, native_x, x_strides, f"{name}.input_tensor")
    ndim = x_desc.dimension_count
    if isinstance(axis, bool) or not isinstance(axis, int | np.integer) or not -ndim <= axis < ndim:
        raise ValidationError(f"{name}.axis: {axis!r} is out of range for {ndim} dimensions")
    axis = int(axis) % ndim
    sizes, data_type = cumulative_rules.output_rule(x_desc.sizes, x_desc.data_type)
    if out is None:
        native_out = be.empty(sizes, data_type, like=native_x)
    else:
        native_out = _adopt_output(device, out, f"{name}.output_tensor")
    native_out, out_strides, target = _output_through(be, native_out, like=native_x)
    out_desc = _described(be, native_out, out_strides, f"{name}.output_tensor")
    direction = AxisDirection.DECREASING if reverse else AxisDirection.INCREASING
    compiled = _compiled(device.backend_name, desc_type(x_desc, out_desc, axis, direction, bool(exclusive)))
    views = {"input_tensor": native_x, "output_tensor": native_out}
    run = compiled.prepare(views)
    if target is not None:
        be.assign(target, native_out)
        return out, None
    result = out if out is not None else restore(native_out)
    plan = _plan(compiled, run, (x, out), views, restore, be.allocator(sizes, data_type, like=native_x)) \
        if planned else None
    return result, plan


def cumulative_sum(x, axis, *, reverse=False, exclusive=False, out=None, backend=None):
    """Running sum along ``axis`` (DML_OPERATOR_CUMULATIVE_SUMMATION); ``out`` may be ``x`` (in place)."""
    if _through_torch_operator(x, out, backend):
        return sys.modules["torch"].ops.dmlops.cumulative_sum(x, axis, reverse, exclusive)
    return _cumulative(CumulativeSummationOperatorDesc, x, axis, reverse, exclusive, out, backend)


def cumulative_product(x, axis, *, reverse=False, exclusive=False, out=None, backend=None):
    """Running product along ``axis`` (DML_OPERATOR_CUMULATIVE_PRODUCT); ``out`` may be ``x`` (in place)."""
    if _through_torch_operator(x, out, backend):
        return sys.modules["torch"].ops.dmlops.cumulative_product(x, axis, reverse, exclusive)
    return _cumulative(CumulativeProductOperatorDesc, x, axis, reverse, exclusive, out, backend)


def _through_torch_operator(x, out, backend) -> bool:
    """Whether a call runs as its PyTorch operator (``dmlops.torch``): a torch tensor being traced by
    torch.compile, or one whose gradient autograd records. Plain eager calls run the same code directly, without
    the dispatcher's few microseconds."""
    torch = sys.modules.get("torch")
    if torch is None or out is not None or backend is not None or not isinstance(x, torch.Tensor):
        return False
    if not (torch.compiler.is_compiling() or x.requires_grad and torch.is_grad_enabled()):
        return False
    from . import torch as operators  # noqa: F401  (registers torch.ops.dmlops)

    return True


# -- the quantized matmul ------------------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class PreparedB:
    """B with its scale and zero point, prepared once for many products (the array API's counterpart of an
    OWNED_BY_DML B): a copy of B that the backend keeps in its own layout (on the CUDA backend packed K-major, with
    its column sums). Pass it where B goes, with None for B's scale and zero point."""

    b: object
    b_scale: object
    b_zero_point: object


def prepare_b(b, b_scale, b_zero_point=None, *, backend=None) -> PreparedB:
    """Prepare B {…, K, N} and its scale and zero point (numbers, vectors of N or DirectML-shaped tensors) for
    repeated ``quantized_linear_matmul`` calls."""
    device = _device(_pick_backend([b, b_scale, b_zero_point], backend))
    be = device.backend
    native, _ = _adopt(device, b, f"{QMM_NAME}.b_tensor")
    check_array_rank(OperatorType.QUANTIZED_LINEAR_MATRIX_MULTIPLY, QMM_NAME, "b_tensor", len(native.shape))
    native, strides = _strided(be, native)
    desc = _described(be, native, strides, f"{QMM_NAME}.b_tensor")
    for field, value, data_type in (("b_scale_tensor", b_scale, DataType.FLOAT32),
                                    ("b_zero_point_tensor", b_zero_point, desc.data_type)):
        if value is not None:  # checked now; kept as given
            _parameter(be, value, data_type, native.shape[-1], -1, len(native.shape), native, f"{QMM_NAME}.{field}")
    kept = be.persist(OperatorType.QUANTIZED_LINEAR_MATRIX_MULTIPLY, "b_tensor", native)
    return PreparedB(kept, b_scale, b_zero_point)


def quantized_linear_matmul(a, a_scale, a_zero_point, b, b_scale, b_zero_point, output_scale, output_zero_point,
                            *, output_dtype=None, out=None, backend=None):
    """(A − za)·sa × (B − zb)·sb, requantized with the output scale and zero point.

    A {…, M, K} and B {…, K, N} are 2-D to 4-D; their batch dimensions broadcast NumPy-style. Scales and zero
    points may be scalars, one-element arrays, vectors (length M for A and output, N for B) or DirectML-shaped
    tensors; zero points may be None. B may be a ``PreparedB`` (``prepare_b``), with None for its scale and zero
    point. The output type is ``output_dtype``, else the output zero point's, else ``out``'s, else uint8.
    """
    if isinstance(b, PreparedB):
        if b_scale is not None or b_zero_point is not None:
            raise ValidationError(f"{QMM_NAME}.b_scale_tensor: a prepared B holds its scale and zero point; "
                                  f"pass None for them")
        b, b_scale, b_zero_point = b.b, b.b_scale, b.b_zero_point
    arguments = [a, a_scale, a_zero_point, b, b_scale, b_zero_point, output_scale, output_zero_point, out]
    torch = sys.modules.get("torch")
    if torch is not None and backend is None and out is None and torch.compiler.is_compiling():
        from .torch import quantized_linear_matmul_operator

        return quantized_linear_matmul_operator(*_as_arrays(arguments[:-1]), output_dtype)
    # plans are found by equality, which other kinds of options may not define plainly
    plain_options = (backend is None or type(backend) is str) and \
        (output_dtype is None or isinstance(output_dtype, str | type | np.dtype))
    key = _plan_key(QuantizedLinearMatrixMultiplyOperatorDesc, (output_dtype, backend), arguments) \
        if plain_options else None
    plan = _PLANS.get(key) if key is not None else None
    if plan is not None:
        return plan(arguments)
    scalars = [position for position, value in enumerate(arguments) if isinstance(value, np.generic)]
    arguments = _as_arrays(arguments)  # (NumPy scalars as 0-d arrays: a plan takes them so too)
    if key is None and dask_arrays.given(*arguments):  # lazy, block by block
        return dask_arrays.quantized_linear_matmul(*arguments[:-1], output_dtype=output_dtype, out=arguments[-1],
                                                   backend=backend)
    result, plan = _quantized_linear_matmul_planned(arguments, output_dtype, backend, key is not None, scalars)
    _keep(key, plan)
    return result


def _as_arrays(values) -> list:
    """The values with NumPy scalars made 0-d arrays."""
    return [np.asarray(value) if isinstance(value, np.generic) else value for value in values]


def _quantized_linear_matmul_planned(arguments, output_dtype, backend, planned: bool, scalars=()):
    """(result, plan for later calls of the same layout, or None where not ``planned`` or none can be; ``scalars``:
    the positions of arguments given as NumPy scalars)."""
    given = dict(zip(QuantizedLinearMatrixMultiplyOperatorDesc.input_fields, arguments))
    out = arguments[-1]
    device = _device(_pick_backend([*given.values(), out], backend))
    be = device.backend
    native, strides, restore = {}, {}, None  # the arrays bound and their element strides, by field
    for field in ("a_tensor", "b_tensor"):
        native[field], restore_field = _adopt(device, given[field], f"{QMM_NAME}.{field}")
        restore = restore or restore_field
        check_array_rank(OperatorType.QUANTIZED_LINEAR_MATRIX_MULTIPLY, QMM_NAME, field, len(native[field].shape))
    output_sizes = qmm.output_sizes(tuple(native["a_tensor"].shape), tuple(native["b_tensor"].shape))
    *batch, m, n = output_sizes
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
        native["output_tensor"] = be.empty(output_sizes, output_type, like=native["a_tensor"])
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
    run = compiled.prepare(native)
    if target is not None:
        be.assign(target, native["output_tensor"])
        return out, None
    result = out if out is not None else restore(native["output_tensor"])
    plan = _plan(compiled, run, arguments, native, restore,
                 be.allocator(output_sizes, output_type, like=native["a_tensor"]), scalars) if planned else None
    return result, plan


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
        owner = _device("cpu").backend if isinstance(candidate, np.ndarray) else be  # NumPy, whatever the backend
        adopted = _try_adopt(owner, candidate, f"{QMM_NAME}.{field}") if hasattr(candidate, "dtype") else None
        if adopted is not None:
            return owner.data_type(adopted[0])
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
