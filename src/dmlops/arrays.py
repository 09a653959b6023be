"""The array API's calls: arrays in, arrays out, through the same descs, validation and lowerings as the operator
API, and the plans of repeated layouts.

Arrays are described to DirectML by their own sizes and strides (views are not copied where DirectML strides can
say them), checked against the tensor-support table of a LEVEL_6_4 device, and run on the backend their memory
lives on (``core.registry``: NumPy arrays and CPU torch tensors on the CPU, CUDA arrays on the CUDA backend).
``dmlops.api`` binds the public functions to these, to ``dmlops.torch`` and to ``dmlops.dask``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypeAlias

import numpy as np

from .core import lowering, plans, registry
from .core.registry import Backend
from .ops import cumulative as cumulative_rules
from .ops import operator_module
from .ops import quantized_matmul as qmm
from .ops.cumulative import CumulativeOperation, CumulativeProductOperatorDesc, CumulativeSummationOperatorDesc
from .ops.cumulative_gradient import GRADIENT_DATA_TYPES
from .ops.quantized_matmul import NAME as QMM_NAME
from .ops.quantized_matmul import QUANTIZATION_PARAMETERS, QuantizedLinearMatrixMultiplyOperatorDesc
from .support import check_array_rank
from .tensor import TensorDesc, packed_strides
from .types import DEFAULT_FEATURE_LEVEL, AxisDirection, DataType, OperatorType, ValidationError

# An array of any kind the array API takes: a NumPy array, a torch tensor, a CUDA array (CuPy, JAX: DLPack), a Dask
# array or a nested list of numbers. A result is an array of the input's kind (a NumPy array for a list).
Array: TypeAlias = Any

DESC_TYPES = {CumulativeOperation.SUM: CumulativeSummationOperatorDesc,
              CumulativeOperation.PRODUCT: CumulativeProductOperatorDesc}


def _validated(desc):
    """The desc, validated against the tensor-support tables of the array API's device level."""
    operator_module(desc).validate(desc, DEFAULT_FEATURE_LEVEL)
    return desc


def _type_error(where: str, error: Exception) -> ValidationError:
    """The ValidationError of an array or dtype whose element type DirectML lacks (bool, complex, big-endian, a
    torch bfloat16 tensor): its message (``types.no_data_type``'s) lists the types it has."""
    return ValidationError(f"{where}: {error}")


def _try_adopt(be, obj, what: str):
    """The backend's (array, restore), or None where obj lives elsewhere; an array whose element type DirectML
    lacks is a ValidationError."""
    try:
        adopted = be.adopt(obj)
        if adopted is not None:
            be.data_type(adopted[0])
        return adopted
    except (TypeError, ValidationError) as error:
        raise _type_error(what, error) from None


def _adopt(be: Backend, obj, what: str):
    adopted = _try_adopt(be, obj, what)
    if adopted is None:
        raise ValidationError(f"{what}: a {type(obj).__name__} on another device cannot run on the "
                              f"{be.name} backend")
    return adopted


def _adopt_output(be: Backend, out, what: str):
    """The backend's view of the caller's ``out``, which must be an array the result can be written into."""
    if not hasattr(out, "shape"):
        raise ValidationError(f"{what}: out must be an array, not a {type(out).__name__}")
    native, _ = _adopt(be, out, what)
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
        if strides is None:  # packed already: a stride DirectML cannot say is on a dimension of 1, never moved along
            strides = packed_strides(array.shape)
            array = backend.restride(array, tuple(array.shape), strides)
    return array, strides


def _output_through(backend, out, like):
    """(array the kernels write, its element strides, caller's view to copy it into or None): a view DirectML
    strides cannot describe is written through a packed array."""
    strides = backend.element_strides(out)
    if strides is not None:
        return out, strides, None
    written = backend.empty(tuple(out.shape), backend.data_type(out), like=like)
    return written, backend.element_strides(written), out


def _described(backend, array, strides, where: str, stand_in: bool = False) -> TensorDesc:
    """The TensorDesc of an array whose element strides are ``strides``; with ``stand_in``, an empty array's is
    that of a packed stand-in of one element along each empty dimension (DirectML has no empty tensors: an empty
    array is validated so)."""
    sizes = tuple(array.shape)
    if stand_in and 0 in sizes:
        sizes, strides = tuple(max(size, 1) for size in sizes), None
    try:
        return TensorDesc(backend.data_type(array), sizes, strides)
    except ValidationError as error:
        raise ValidationError(f"{where}: {error}") from None


def _axis(name: str, axis, dimension_count: int) -> int:
    """The axis, from 0: an integer (Python or NumPy) from -dimension_count to dimension_count - 1."""
    if axis is None:
        raise ValidationError(f"{name}.axis: None is not an axis: dmlops scans along one axis (where NumPy's "
                              f"axis=None flattens, pass x.reshape(-1) and axis 0)")
    if isinstance(axis, bool | np.bool_) or not isinstance(axis, int | np.integer):
        raise ValidationError(f"{name}.axis: must be an integer, not {type(axis).__name__} {axis!r}")
    if not -dimension_count <= axis < dimension_count:
        raise ValidationError(f"{name}.axis: {axis!r} is out of range for {dimension_count} dimensions")
    return int(axis) % dimension_count


def _flag(where: str, option: str, value) -> bool:
    """An option that is True or False (a Python or NumPy bool: a number or a word is not taken for one)."""
    if not isinstance(value, bool | np.bool_):
        raise ValidationError(f"{where}: {option} must be True or False, not {type(value).__name__} {value!r}")
    return bool(value)


def _cumulative_options(name: str, operation: CumulativeOperation, reverse, exclusive) -> tuple[bool, bool]:
    return (_flag(f"{name}.axis_direction", "reverse", reverse),
            _flag(f"{name}.{operation.exclusive_field}", "exclusive", exclusive))


# -- plans: calls whose layout repeats ----------------------------------------------------------------------------

# A call whose arguments are laid out as an earlier call's were (``plans.layout``: NumPy arrays and torch tensors of
# the same kinds, dtypes, sizes, strides, devices, alignment and writability; Python numbers of the same values),
# with the same options, passes the same validation to the same lowering: its plan leaves it only the aliasing
# check and the backend's kept run on its own arrays. Other calls (arrays of other kinds, layouts DirectML strides
# cannot say, which are copied) take the whole path.


def _adopted(be, source):
    """What a plan makes of an argument of the kind and placement of ``source``."""
    adopt = be.adopter(source)
    return source if adopt is None else adopt(source)


def _first_elements_match(be, sources, views) -> bool:
    """Whether every view starts at its argument's first element (none of the arguments was copied, nor converted
    from another kind of array, such as a NumPy scale given to the CUDA backend)."""
    return all(source is None or be.adopt(source) is not None and be.address(view) == be.address(_adopted(be, source))
               for source, view in zip(sources, views))


def _run_lowered(be: Backend, desc, views: dict):
    """Validate desc, check the output's aliasing, and run it on views through the backend's lowering; returns the
    run for arrays of the same layouts (``lowering.prepare``)."""
    _validated(desc)
    lowering.check_aliasing(desc, be, views)
    return lowering.prepare(desc, be, views)


def _plan(be: Backend, desc, run, arguments, views: dict, restore, allocate, scalars=()):
    """The plan of a call that ran ``run`` (``_run_lowered``'s: later calls take the arrays in binding order) on
    ``views`` (by field, in binding order) made of ``arguments`` (the same order; the output last), for later calls
    of the same layout; None where an argument was copied or converted. Numbers this call converted stay as its
    arrays; every other argument is replaced by the later call's own, those at the positions ``scalars`` (NumPy
    scalars, which the call took as 0-d arrays: ``arguments`` holds those) made 0-d arrays again; a new output
    comes from ``allocate(the call's first input)``."""
    fields = desc.input_fields + desc.output_fields
    out_field = fields[-1]
    name = desc.operator_type.operator_name
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

    as_given = not constants and all(adopt is None for _, adopt in passed)  # the backend takes every argument

    def plan(arguments):
        if as_given:
            arrays = [*arguments]
        else:
            arrays = template.copy()
            for position, adopt in passed:
                arrays[position] = arguments[position] if adopt is None else adopt(arguments[position])
        out = arguments[-1]
        if out is None:
            arrays[-1] = output = allocate(arrays[first])
            run(*arrays)
            return restore(output)
        arrays[-1] = _adopt_output(be, out, f"{name}.{out_field}")
        lowering.check_aliasing(desc, be,
                                {out_field: arrays[-1]} | {field: arrays[position] for position, field in own})
        run(*arrays)
        return out

    return plan


def _scalar_adopter(adopt):
    """How a plan takes a NumPy scalar whose 0-d array it takes with ``adopt`` (None: as it is)."""
    return np.asarray if adopt is None else lambda value: adopt(np.asarray(value))


# -- the cumulative operators ---------------------------------------------------------------------------------------


def cumulative(operation: CumulativeOperation, x, axis, reverse, exclusive, out, backend):
    """The running sum or product of x (``operation``), through the plan of the call's layout."""
    if type(axis) is not int or type(reverse) is not bool or type(exclusive) is not bool or \
            not (backend is None or type(backend) is str):
        key = None  # plans are found by equality, which other kinds of options may not define plainly
    else:  # plans.key's, flat: this is the path of every repeated scan
        key = (operation, axis, reverse, exclusive, backend, plans.layout(x), plans.layout(out))
        if key[-2] is plans.UNPLANNED or key[-1] is plans.UNPLANNED:
            key = None
    plan = plans.get(key)
    if plan is not None:
        return plan((x, out))
    since = plans.generation()
    result, plan = _cumulative_planned(operation, x, axis, reverse, exclusive, out, backend, key is not None)
    plans.keep(key, plan, since)
    return result


def _cumulative_planned(operation, x, axis, reverse, exclusive, out, backend, planned: bool):
    """(result, plan for later calls of the same layout, or None where not ``planned`` or none can be)."""
    name = operation.operator_name
    reverse, exclusive = _cumulative_options(name, operation, reverse, exclusive)
    be = registry.backend_for([x, out], backend)
    native_x, restore = _adopt(be, x, f"{name}.input_tensor")
    native_x, x_strides = _strided(be, native_x)
    empty = 0 in tuple(native_x.shape)
    x_desc = _described(be, native_x, x_strides, f"{name}.input_tensor", empty)
    axis = _axis(name, axis, x_desc.dimension_count)
    sizes, data_type = cumulative_rules.output_rule(tuple(native_x.shape), x_desc.data_type)
    if out is None:
        native_out = be.empty(sizes, data_type, like=native_x)
    else:
        native_out = _adopt_output(be, out, f"{name}.output_tensor")
    native_out, out_strides, target = _output_through(be, native_out, like=native_x)
    out_desc = _described(be, native_out, out_strides, f"{name}.output_tensor", empty)
    direction = AxisDirection.DECREASING if reverse else AxisDirection.INCREASING
    desc = DESC_TYPES[operation](x_desc, out_desc, axis, direction, exclusive)
    if empty:  # as NumPy: an empty result (validated as the one-element stand-ins of x and out)
        if tuple(native_out.shape) != sizes:
            raise ValidationError(f"{name}.output_tensor: sizes {list(native_out.shape)} must be the input's "
                                  f"{list(sizes)}")
        _validated(desc)
        return (out if out is not None else restore(native_out)), None
    views = {"input_tensor": native_x, "output_tensor": native_out}
    run = _run_lowered(be, desc, views)
    if target is not None:
        be.assign(target, native_out)
        return out, None
    result = out if out is not None else restore(native_out)
    plan = _plan(be, desc, run, (x, out), views, restore, be.allocator(sizes, data_type, like=native_x)) \
        if planned else None
    return result, plan


def cumulative_gradient(operation: CumulativeOperation | str, x, grad, axis: int, reverse: bool = False,
                        exclusive: bool = False):
    """dL/dx for y = cumulative_sum or cumulative_product(x, axis, reverse=, exclusive=) and grad = dL/dy
    (``ops.cumulative_gradient``): FLOAT32 or FLOAT16 arrays of one backend. Returns a new array of x's kind, shape
    and type."""
    try:
        operation = CumulativeOperation(operation)
    except ValueError:
        raise ValidationError(f"cumulative_gradient.operation: {operation!r} is not 'sum' or 'product'") from None
    name = operation.operator_name + " gradient"
    be = registry.backend_for([x])
    adopted = {}  # field: (backend array, restore, DataType)
    for field, value in (("input_tensor", x), ("gradient", grad)):
        array, restore = _adopt(be, value, f"{name}.{field}")
        adopted[field] = (array, restore, _try_data_type(be, array, f"{name}.{field}"))
    (x, restore, data_type), (grad, _, grad_type) = adopted["input_tensor"], adopted["gradient"]
    if data_type not in GRADIENT_DATA_TYPES:
        raise ValidationError(f"{name}.input_tensor: data type {data_type.name} has no gradient (FLOAT32, FLOAT16)")
    if (grad_type, tuple(grad.shape)) != (data_type, tuple(x.shape)):
        raise ValidationError(f"{name}.gradient: must have the input's data type and sizes (input {data_type.name} "
                              f"{list(x.shape)}, gradient {grad_type.name} {list(grad.shape)})")
    axis = _axis(name, axis, len(x.shape))
    reverse, exclusive = _cumulative_options(name, operation, reverse, exclusive)
    if 0 in tuple(x.shape):  # (DirectML has no empty tensors, but gradients of them are asked for)
        return restore(be.empty(tuple(x.shape), data_type, like=x))
    if operation is CumulativeOperation.SUM:  # the running sum of grad the other way
        return restore(cumulative(operation, be.contiguous(grad), axis, not reverse, exclusive, None, be.name))
    accumulation = cumulative_rules.accumulation_type(data_type)
    product = cumulative(operation, be.asarray(x, accumulation, like=x), axis, reverse, True, None, be.name)
    out = be.empty(tuple(x.shape), data_type, like=x)
    be.prepare_linear_recurrence(x, grad, product, out, axis, not reverse, exclusive)
    return restore(out)


def _try_data_type(be: Backend, array, where: str) -> DataType:
    try:
        return be.data_type(array)
    except (TypeError, ValidationError) as error:
        raise _type_error(where, error) from None


# -- the quantized matmul ------------------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class PreparedB:
    """B with its scale and zero point, prepared once for many products (the array API's counterpart of an
    OWNED_BY_DML B): a copy of B that the backend keeps in its own layout (on the CUDA backend packed K-major, with
    its column sums). Pass it where B goes, with None for B's scale and zero point."""

    b: object
    b_scale: object
    b_zero_point: object


def prepare_b(b: Array, b_scale: Array | float, b_zero_point: Array | int | None = None, *,
              backend: str | None = None) -> PreparedB:
    """Prepare B and its scale and zero point once for many ``quantized_linear_matmul`` calls.

    The backend keeps a copy of B in its own layout (the CUDA backend packs it K-major, with its column sums), as
    DirectML does with an OWNED_BY_DML B; later changes to ``b`` do not reach it.

    Parameters
    ----------
    b : array
        B {…, K, N}: int8 or uint8, 2 to 4 dimensions, a NumPy array or a torch tensor (CPU or CUDA).
    b_scale : number or array
        Per tensor or per column: a number, a one-element array, a vector of N float32 values or a tensor
        {…, 1, N}; finite and non-zero.
    b_zero_point : number or array, optional
        Of B's type, in the same forms; None for 0.
    backend : {"cpu", "cuda"}, optional
        By default the backend where B lives.

    Returns
    -------
    PreparedB
        Pass it as ``quantized_linear_matmul``'s B, with None for B's scale and zero point.

    Raises
    ------
    ValidationError
        B's type or dimension count, or a scale or zero point of the wrong type, value or length.

    Examples
    --------
    >>> import numpy as np, dmlops
    >>> b = dmlops.prepare_b(np.array([[1, 2], [3, 4]], np.int8), 1.0)
    >>> a = np.array([[10, 20], [30, 40]], np.uint8)
    >>> dmlops.quantized_linear_matmul(a, 0.5, np.uint8(10), b, None, None, 4.0, np.uint8(128))
    array([[132, 133],
           [142, 148]], dtype=uint8)
    """
    be = registry.backend_for([b, b_scale, b_zero_point], backend)
    native, _ = _adopt(be, b, f"{QMM_NAME}.b_tensor")
    check_array_rank(OperatorType.QUANTIZED_LINEAR_MATRIX_MULTIPLY, QMM_NAME, "b_tensor", len(native.shape))
    native, strides = _strided(be, native)
    desc = _described(be, native, strides, f"{QMM_NAME}.b_tensor")
    for field, value, data_type in (("b_scale_tensor", b_scale, DataType.FLOAT32),
                                    ("b_zero_point_tensor", b_zero_point, desc.data_type)):
        if value is not None:  # checked now; kept as given
            _parameter(be, value, data_type, native.shape[-1], -1, len(native.shape), native, field)
    kept = be.persist(OperatorType.QUANTIZED_LINEAR_MATRIX_MULTIPLY, "b_tensor", native)
    return PreparedB(kept, b_scale, b_zero_point)


def quantized_linear_matmul(arguments: list, output_dtype, backend):
    """The quantized matmul of ``arguments`` (the eight inputs in binding order, then ``out``; B not a PreparedB)
    through the plan of the call's layout."""
    # plans are found by equality, which other kinds of options may not define plainly
    plain_options = (backend is None or type(backend) is str) and \
        (output_dtype is None or isinstance(output_dtype, str | type | np.dtype))
    key = plans.key(QuantizedLinearMatrixMultiplyOperatorDesc, (output_dtype, backend), arguments) \
        if plain_options else None
    plan = plans.get(key)
    if plan is not None:
        return plan(arguments)
    since = plans.generation()
    scalars = [position for position, value in enumerate(arguments) if isinstance(value, np.generic)]
    arguments = as_arrays(arguments)  # (NumPy scalars as 0-d arrays: a plan takes them so too)
    result, plan = _quantized_linear_matmul_planned(arguments, output_dtype, backend, key is not None, scalars)
    plans.keep(key, plan, since)
    return result


def as_arrays(values) -> list:
    """The values with NumPy scalars made 0-d arrays."""
    return [np.asarray(value) if isinstance(value, np.generic) else value for value in values]


def _quantized_linear_matmul_planned(arguments, output_dtype, backend, planned: bool, scalars=()):
    """(result, plan for later calls of the same layout, or None where not ``planned`` or none can be; ``scalars``:
    the positions of arguments given as NumPy scalars)."""
    given = dict(zip(QuantizedLinearMatrixMultiplyOperatorDesc.input_fields, arguments))
    out = arguments[-1]
    be = registry.backend_for([*given.values(), out], backend)
    native, strides, restore = {}, {}, None  # the arrays bound and their element strides, by field
    for field in ("a_tensor", "b_tensor"):
        native[field], restore_field = _adopt(be, given[field], f"{QMM_NAME}.{field}")
        restore = restore or restore_field
        check_array_rank(OperatorType.QUANTIZED_LINEAR_MATRIX_MULTIPLY, QMM_NAME, field, len(native[field].shape))
    output_sizes = qmm.output_sizes(tuple(native["a_tensor"].shape), tuple(native["b_tensor"].shape))
    *batch, m, n = output_sizes
    for field in ("a_tensor", "b_tensor"):
        native[field], strides[field] = _broadcast(be, native[field], batch)

    output_type = qmm.output_type(_asked_type(output_dtype),
                                  *(_array_type(value, f"{QMM_NAME}.{field}") for field, value in
                                    (("output_zero_point_tensor", given["output_zero_point_tensor"]),
                                     ("output_tensor", out))))
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
                                                   free_axis, rank, native["a_tensor"], field)

    if out is None:
        native["output_tensor"] = be.empty(output_sizes, output_type, like=native["a_tensor"])
    else:
        native["output_tensor"] = _adopt_output(be, out, f"{QMM_NAME}.output_tensor")
        out_type = be.data_type(native["output_tensor"])
        if out_type != output_type:
            raise ValidationError(f"{QMM_NAME}.output_tensor: out is {out_type.name} but the output type "
                                  f"(output_dtype, else the output zero point's) is {output_type.name}")
    native["output_tensor"], strides["output_tensor"], target = _output_through(be, native["output_tensor"],
                                                                                 like=native["a_tensor"])

    fields = QuantizedLinearMatrixMultiplyOperatorDesc.input_fields + ("output_tensor",)
    native = {field: native[field] for field in fields}  # (binding order)
    empty = 0 in (*output_sizes, native["a_tensor"].shape[-1])
    desc = QuantizedLinearMatrixMultiplyOperatorDesc(
        **{field: _described(be, native[field], strides[field], f"{QMM_NAME}.{field}", empty)
           if field in strides else None for field in fields})
    if empty:
        return _empty_product(be, desc, native, output_sizes, output_type, target, out, restore), None
    run = _run_lowered(be, desc, native)
    if target is not None:
        be.assign(target, native["output_tensor"])
        return out, None
    result = out if out is not None else restore(native["output_tensor"])
    plan = _plan(be, desc, run, arguments, native, restore,
                 be.allocator(output_sizes, output_type, like=native["a_tensor"]), scalars) if planned else None
    return result, plan


def _empty_product(be: Backend, desc, native: dict, output_sizes: tuple, output_type: DataType, target, out,
                   restore):
    """The result of a product with an empty dimension (validated as the one-element stand-in of each): an empty
    output, or where only K is 0 (no terms: every accumulator is 0) the operator's requantization of 0, which is the
    output zero point."""
    written = native["output_tensor"]
    if tuple(written.shape) != output_sizes:
        raise ValidationError(f"{QMM_NAME}.output_tensor: sizes {list(written.shape)} must be {list(output_sizes)} "
                              f"(A × B)")
    _validated(desc)
    host = {field: None if native[field] is None else be.to_host(native[field]) for field in QUANTIZATION_PARAMETERS}
    for field in qmm.SCALE_FIELDS:
        qmm.check_scale(field, host[field])
    if 0 not in output_sizes:
        zero_point = host["output_zero_point_tensor"]
        values = qmm.requantize(np.zeros(output_sizes), host["a_scale_tensor"], host["b_scale_tensor"],
                                host["output_scale_tensor"], 0 if zero_point is None else zero_point, output_type)
        be.assign(written if target is None else target, be.from_host(values, like=written))
    return out if out is not None else restore(written)


def _dtype_type(dtype, where: str) -> DataType:
    """The DataType of a NumPy dtype, scalar type or name, or a torch dtype."""
    if type(dtype).__module__ == "torch":
        dtype = str(dtype).removeprefix("torch.")
    try:
        return DataType.from_numpy(dtype)
    except (TypeError, ValidationError) as error:
        raise _type_error(where, error) from None


def _asked_type(output_dtype) -> DataType | None:
    if output_dtype is None:
        return None
    return _dtype_type(output_dtype, f"{QMM_NAME}.output_tensor: output_dtype")


def _array_type(value, where: str) -> DataType | None:
    """The DataType of an array's elements (None for a number or None)."""
    dtype = getattr(value, "dtype", None)
    return None if dtype is None else _dtype_type(dtype, where)


def _broadcast(be, array, batch):
    """(view, element strides) of A or B with the broadcast batch dimensions (zero strides where it repeats)."""
    array, strides = _strided(be, array)
    *own_batch, rows, columns = array.shape
    pad = len(batch) - len(own_batch)
    own_batch, batch_strides = [1] * pad + own_batch, [0] * pad + list(strides[:-2])
    batch_strides = [0 if size == 1 else stride for size, stride in zip(own_batch, batch_strides)]
    strides = (*batch_strides, *strides[-2:])
    return be.restride(array, (*batch, rows, columns), strides), strides


def _parameter(be, value, data_type: DataType, length: int, free_axis: int, rank: int, like, field: str):
    """(view, element strides) of the scale or zero point ``field`` in DirectML's shape: per tensor {1, …}, per row
    {…, M, 1} or per column {…, 1, N}."""
    where = f"{QMM_NAME}.{field}"
    adopted = _try_adopt(be, value, where) if hasattr(value, "shape") else None
    if adopted is None:  # a number or a list
        values = np.asarray(value)
        if values.dtype.kind not in "fiub":
            raise ValidationError(f"{where}: {value!r} is not a number")
        if "zero_point" in field:  # values of its tensor's type
            if data_type not in qmm.OUTPUT_RANGE:
                tensor = QUANTIZATION_PARAMETERS[field][0]
                raise ValidationError(f"{QMM_NAME}.{tensor}: data type {data_type.name} must be INT8 or UINT8 (the "
                                      f"type of its zero point, {field})")
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
