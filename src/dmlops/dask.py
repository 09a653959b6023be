"""The array API on Dask arrays: lazy, chunk by chunk, with the semantics of the in-memory call.

``dmlops.api`` hands a call here when any argument is a Dask array; the result is a Dask array and nothing is
computed until the caller asks. Dask schedules (threads, processes or a ``dask.distributed`` cluster); every chunk
runs through dmlops's own array API (``dmlops.arrays``), so a NumPy chunk runs on the CPU backend and a CuPy chunk
on the CUDA backend.

Scans: each chunk is scanned alone (reverse and exclusive as asked) in its accumulation type (float32 for FLOAT16);
each chunk's total is the last value of its scan in the scan's direction; the carry of a chunk, everything before
its first element, is the exclusive scan of the totals (a small array, scanned by dmlops, so integers wrap in their
own type); the output is carry + local (or ×), rounded once to the input's type. Integers equal the in-memory
result exactly; floats are deterministic for a given chunking and within float32 accumulation error.

Quantized matmul: where K is one chunk, each output block is one in-memory call. Otherwise each (M, N, K) block
gives its exact integer accumulator Σ (A − za)(B − zb) through BLAS (every product is at most 255² in magnitude:
float32 matmuls over 256 columns at a time are exact, and float64 sums of them below 2^53 / 255² terms); the K
blocks are summed (exactly) and requantized once, so the result equals the in-memory one to the bit for every
chunking. Scale values are lazy: a zero, NaN or infinite Dask scale raises ValidationError when the block that reads
it is computed, not at the call.

Dask arrays cannot be written into: ``out=`` is rejected. Scales and zero points that are not Dask arrays are
chunked like their tensor; Dask ones must already be. A list is taken as the NumPy array it makes (so a zero point
vector must be an array of its tensor's type, where the in-memory call also takes a list of numbers).
"""

from __future__ import annotations

import functools
import math

import numpy as np

from . import arrays
from .ops.cumulative import CumulativeOperation, accumulation_dtype
from .ops.quantized_matmul import NAME as QMM_NAME
from .ops.quantized_matmul import QUANTIZATION_PARAMETERS, QuantizedLinearMatrixMultiplyOperatorDesc, check_scale
from .ops.quantized_matmul import output_sizes, requantize
from .types import DataType, ValidationError

# Products (A − za)(B − zb) are at most 255² in magnitude: float32 sums of this many of them (2^24 / 255², rounded
# down to a power of two) are exact, and float64 sums of up to LARGEST_K.
FLOAT32_EXACT_TERMS = 256
LARGEST_K = 2**53 // 255**2

_DLPACK_CPU = 1


def given(*values) -> bool:
    """Whether any value is a Dask collection (found without importing Dask, by its type)."""
    if _EAGER_TYPES.issuperset(map(type, values)):
        return False
    for value in values:
        if hasattr(type(value), "__dask_graph__"):
            return True
        _EAGER_TYPES.add(type(value))
    return False


_EAGER_TYPES: set = set()  # the types of values found not to be Dask collections


def _check_known_chunks(array, where: str) -> None:
    if any(math.isnan(size) for sizes in array.chunks for size in sizes):
        raise ValidationError(f"{where}: a Dask array of unknown chunk sizes (call compute_chunk_sizes() first)")


def _reject_out(out, where: str) -> None:
    if out is not None:
        raise ValidationError(f"{where}: out= cannot be used with Dask arrays, which are immutable; "
                              f"take the returned Dask array")


def _probe(value, fill):
    """A NumPy stand-in of at most one element of an array's type and dimension count (0-sized dimensions kept, so
    that the in-memory call checks them as it checks an empty array), for checking a call with the in-memory API."""
    return np.full(tuple(min(size, 1) for size in value.shape), fill, dtype=value.dtype)


def _meta(like, ndim: int, dtype):
    from dask.array.utils import meta_from_array
    return meta_from_array(like, ndim=ndim, dtype=dtype)


# -- scans ---------------------------------------------------------------------------------------------------------


def cumulative(operation: CumulativeOperation, x, axis, reverse, exclusive, out, backend):
    """cumulative_sum / cumulative_product of a Dask array."""
    import dask.array as da

    name = operation.operator_name
    _reject_out(out, f"{name}.output_tensor")
    x = da.asarray(x)
    _check_known_chunks(x, f"{name}.input_tensor")
    scan = functools.partial(_scan, operation)
    scan(_probe(x, 1), axis, reverse=reverse, exclusive=exclusive)  # the in-memory call's checks of type and axis
    axis = int(axis) % x.ndim
    options = dict(axis=axis, reverse=reverse, exclusive=exclusive, backend=backend)
    if x.numblocks[axis] == 1:
        return x.map_blocks(_scan_chunk, scan, **options, dtype=x.dtype, meta=_meta(x, x.ndim, x.dtype))

    accumulation = accumulation_dtype(x.dtype)
    local_meta = _meta(x, x.ndim, accumulation)
    local = x.map_blocks(_scan_chunk, scan, accumulation, **options, dtype=accumulation, meta=local_meta)
    total_chunks = tuple((1,) * x.numblocks[axis] if dimension == axis else sizes
                         for dimension, sizes in enumerate(x.chunks))
    totals = da.map_blocks(_chunk_total, local, x, operation, axis, reverse, exclusive, chunks=total_chunks,
                           dtype=accumulation, meta=local_meta)
    carries = totals.rechunk({axis: -1}).map_blocks(_scan_chunk, scan, axis=axis, reverse=reverse, exclusive=True,
                                                    backend=backend, dtype=accumulation, meta=local_meta)
    index = tuple(range(x.ndim))
    # block i of the carries (one element along the axis) goes with block i of the local scans
    return da.blockwise(_add_carry, index, local, index, carries.rechunk({axis: 1}), index, operation=operation,
                        output_dtype=x.dtype, dtype=x.dtype, align_arrays=False, meta=_meta(x, x.ndim, x.dtype))


def _scan(operation, x, axis, *, reverse, exclusive, backend=None):
    return arrays.cumulative(operation, x, axis, reverse, exclusive, None, backend)


def _scan_chunk(chunk, scan, accumulation=None, *, axis, reverse, exclusive, backend):
    """The chunk's own scan, in the accumulation type if one is given (dmlops on a float32 copy of a FLOAT16 chunk
    accumulates as the FLOAT16 scan does)."""
    if accumulation is not None:
        chunk = chunk.astype(accumulation, copy=False)
    return scan(chunk, axis, reverse=bool(reverse), exclusive=bool(exclusive), backend=backend)


def _chunk_total(local, chunk, operation, axis, reverse, exclusive):
    """The chunk's total: its scan's last value in the scan's direction (the exclusive scan's, with that element);
    that of a chunk empty along the axis (boolean filtering makes them) changes nothing that it combines with."""
    if chunk.shape[axis] == 0:
        return np.full_like(local, operation.neutral(local.dtype.kind == "f"),
                            shape=(*local.shape[:axis], 1, *local.shape[axis + 1:]))
    last = (slice(None),) * axis + ((slice(0, 1) if reverse else slice(-1, None)),)
    total = local[last]
    return _combine(operation, total, chunk[last].astype(total.dtype)) if exclusive else total


def _add_carry(local, carry, operation, output_dtype):
    """carry + local (or ×) in the accumulation type, rounded once to the output's type."""
    return _combine(operation, carry, local).astype(output_dtype, copy=False)


def _combine(operation, before, after):
    with np.errstate(over="ignore", invalid="ignore"):  # inf and NaN as in the in-memory scan; integers wrap
        return operation.ufunc(before, after)


# -- quantized matmul ----------------------------------------------------------------------------------------------


def quantized_linear_matmul(a, a_scale, a_zero_point, b, b_scale, b_zero_point, output_scale, output_zero_point,
                            *, output_dtype=None, out=None, backend=None):
    """quantized_linear_matmul where some argument is a Dask array (see the module's docstring)."""
    import dask.array as da

    _reject_out(out, f"{QMM_NAME}.output_tensor")
    values, probes = {}, {}
    for field, value in zip(QuantizedLinearMatrixMultiplyOperatorDesc.input_fields,
                            (a, a_scale, a_zero_point, b, b_scale, b_zero_point, output_scale, output_zero_point)):
        where = f"{QMM_NAME}.{field}"
        if given(value):
            _check_known_chunks(value, where)
        elif hasattr(value, "__dlpack_device__") and value.__dlpack_device__()[0] != _DLPACK_CPU:
            raise ValidationError(f"{where}: a {type(value).__name__} on a GPU cannot be mixed with Dask arrays; "
                                  f"make it a Dask array (dask.array.from_array) whose chunks live where it does")
        elif hasattr(value, "shape") or value is not None and np.ndim(value) > 0:
            value = np.asarray(value)
        values[field] = value
        # numbers are checked as they are; arrays through one-element stand-ins of their type
        probes[field] = _probe(value, "zero_point" not in field) if hasattr(value, "shape") else value
    # the in-memory call's checks of types, dimension counts and numbers; its output's type is the output type
    output_type = DataType.from_numpy(arrays.quantized_linear_matmul([*probes.values(), None], output_dtype,
                                                                     None).dtype)

    a, b = da.asarray(values["a_tensor"]), da.asarray(values["b_tensor"])
    k, b_k = a.shape[-1], b.shape[-2]
    if b_k != k:
        raise ValidationError(f"{QMM_NAME}.b_tensor: B's rows ({b_k}) must equal A's columns K ({k})")
    if k > LARGEST_K:
        raise ValidationError(f"{QMM_NAME}.a_tensor: K ({k}) is above {LARGEST_K}, where the exact accumulation "
                              f"of K-split chunks ends")
    *batch, m, n = output_sizes(a.shape, b.shape)
    batch_index = "pqrs"[:len(batch)]
    # blockwise's (array, index) pairs by field; the output's blocks are A's rows × B's columns
    pairs = {"a_tensor": (da.broadcast_to(a, (*batch, m, k)), batch_index + "ik"),
             "b_tensor": (da.broadcast_to(b, (*batch, k, n)), batch_index + "kj")}
    a, b = pairs["a_tensor"][0], pairs["b_tensor"][0]
    element_types = {"a_tensor": a.dtype, "b_tensor": b.dtype, "output_tensor": output_type.numpy_dtype}
    chunks = {"a_tensor": a.chunks[-2], "b_tensor": b.chunks[-1], "output_tensor": a.chunks[-2]}
    for field, (data_field, free_axis) in QUANTIZATION_PARAMETERS.items():
        if values[field] is None:
            pairs[field] = (None, None)
            continue
        parameter_type = np.float32 if "scale" in field else element_types[data_field]
        if "scale" in field and not given(values[field]):
            check_scale(field, np.asarray(values[field], np.float32))  # its values are known now
        pairs[field] = _vector(values[field], field, parameter_type, free_axis, chunks[data_field])

    out_index = batch_index + "ij"
    meta = _meta(a, len(batch) + 2, output_type.numpy_dtype)
    if a.numblocks[-1] == 1 and b.numblocks[-2] == 1 or k == 0:  # (K = 0: the in-memory call's output zero point)
        return da.blockwise(_matmul_block, out_index, *_arguments(pairs, QuantizedLinearMatrixMultiplyOperatorDesc
                                                                  .input_fields),
                            output_dtype=output_type.numpy_dtype, backend=backend, concatenate=True,
                            dtype=output_type.numpy_dtype, meta=meta)
    partials = da.blockwise(_accumulator_block, out_index + "k",
                            *_arguments(pairs, ("a_tensor", "a_zero_point_tensor", "b_tensor", "b_zero_point_tensor")),
                            adjust_chunks={"k": 1}, dtype=np.float64, meta=_meta(a, len(batch) + 3, np.float64))
    accumulators = partials.sum(axis=-1)  # integers below 2^53: exact in any order
    return da.blockwise(_requantize_block, out_index, accumulators, out_index,
                        *_arguments(pairs, ("a_scale_tensor", "b_scale_tensor", "output_scale_tensor",
                                            "output_zero_point_tensor")),
                        output_type=output_type, dtype=output_type.numpy_dtype, meta=meta)


def _arguments(pairs: dict, fields) -> list:
    """blockwise's arguments: the (array, index) pairs of ``fields``, in their order."""
    return [item for field in fields for item in pairs[field]]


def _vector(value, field: str, dtype, free_axis: int, chunks: tuple):
    """(Dask array, blockwise index) of a scale or zero point: a 0-d array per tensor, else a vector along the rows
    ("i") or columns ("j") of the output, chunked like its tensor there."""
    import dask.array as da

    where = f"{QMM_NAME}.{field}"
    length = sum(chunks)
    shape = tuple(value.shape) if hasattr(value, "shape") else ()
    if math.prod(shape) == 1 or not shape:
        return da.asarray(value).reshape(()).astype(dtype), ""
    position = len(shape) - 1 if len(shape) == 1 else len(shape) + free_axis
    if shape[position] != length or math.prod(shape) != length:
        what = "per row {…, M, 1}" if free_axis == -2 else "per column {…, 1, N}"
        raise ValidationError(f"{where}: sizes {list(shape)} must be per tensor {{1, …, 1}}, {what} or a vector of "
                              f"{length} values")
    if not given(value):
        return da.from_array(np.asarray(value, dtype).reshape(-1), chunks=(chunks,)), "i" if free_axis == -2 else "j"
    vector = value.reshape(-1)
    if vector.chunks[0] != chunks:
        tensor = QUANTIZATION_PARAMETERS[field][0]
        raise ValidationError(f"{where}: chunks {vector.chunks[0]} must match {tensor}'s {chunks} along "
                              f"{'M' if free_axis == -2 else 'N'} (rechunk it like its tensor)")
    return vector.astype(dtype), "i" if free_axis == -2 else "j"


def _parameter_block(values, like, per_row: bool):
    """A block of a scale or zero point as an array of like's kind (a NumPy parameter may meet CuPy chunks), a per-row
    vector as a column {M, 1}; None stays None."""
    if values is None:
        return None
    values = np.asarray(values, like=like)
    return values.reshape(-1, 1) if per_row and values.ndim == 1 else values


def _matmul_block(a, a_scale, a_zero_point, b, b_scale, b_zero_point, output_scale, output_zero_point, *,
                  output_dtype, backend):
    """One output block where K is one chunk: the in-memory call."""
    return arrays.quantized_linear_matmul([a, a_scale, a_zero_point, b, b_scale, b_zero_point, output_scale,
                                           output_zero_point, None], output_dtype, backend)


def _accumulator_block(a, a_zero_point, b, b_zero_point):
    """Σ (A − za)(B − zb) over one K block, exact, in float64 with a trailing axis of one (the K block's): float32
    products (BLAS sgemm) of FLOAT32_EXACT_TERMS columns at a time, whose sums stay integers below 2^24, added up in
    float64."""
    def shifted(x, zero_point):
        return x.astype(np.float32) if zero_point is None else np.subtract(x, zero_point, dtype=np.float32)

    a, b = shifted(a, _parameter_block(a_zero_point, a, True)), shifted(b, _parameter_block(b_zero_point, b, False))
    accumulators = np.zeros_like(a, shape=output_sizes(a.shape, b.shape), dtype=np.float64)
    for start in range(0, a.shape[-1], FLOAT32_EXACT_TERMS):
        end = start + FLOAT32_EXACT_TERMS
        accumulators += np.matmul(a[..., start:end], b[..., start:end, :])
    return accumulators[..., None]


def _requantize_block(accumulators, a_scale, b_scale, output_scale, output_zero_point, *, output_type):
    for field, values in (("a_scale_tensor", a_scale), ("b_scale_tensor", b_scale),
                          ("output_scale_tensor", output_scale)):
        check_scale(field, values)  # lazy scales are known only now
    zero = 0 if output_zero_point is None else _parameter_block(output_zero_point, accumulators, True)
    return requantize(accumulators, _parameter_block(a_scale, accumulators, True),
                      _parameter_block(b_scale, accumulators, False),
                      _parameter_block(output_scale, accumulators, True), zero, output_type)
