"""A small backend in plain NumPy, registered from the tests: what it takes to add one (a class and a registration,
no file of dmlops changed). It runs each primitive by its meaning (``dmlops.ops``'s references)."""

from __future__ import annotations

import numpy as np

from dmlops.core import plans, registry
from dmlops.ops import cumulative, quantized_matmul
from dmlops.types import DataType, ValidationError


class ToyBackend(registry.Backend):
    def memory(self, buffer, where, *, writable):
        try:
            flat = np.frombuffer(buffer, np.uint8) if not isinstance(buffer, np.ndarray) else buffer.view(np.uint8)
        except (TypeError, ValueError) as error:
            raise ValidationError(f"{where}: not a buffer ({error})") from None
        if writable and not flat.flags.writeable:
            raise ValidationError(f"{where}: the output buffer is read-only")
        return flat.reshape(-1)

    def byte_length(self, flat):
        return flat.nbytes

    def view(self, flat, byte_offset, data_type, sizes, strides):
        dtype = data_type.numpy_dtype
        return np.ndarray(sizes, dtype, flat, byte_offset, [s * dtype.itemsize for s in strides])

    def overlaps(self, a, b):
        return np.may_share_memory(a, b)

    def same_layout(self, a, b):
        return (self.address(a), a.shape, a.strides) == (self.address(b), b.shape, b.strides)

    def persist(self, operator_type, field, array):
        return array.copy()

    def adopt(self, obj):
        if plans.is_torch_tensor(obj):
            if obj.device.type != "cpu":
                return None
            import torch

            return obj.detach().numpy(), torch.from_numpy
        if hasattr(obj, "__dlpack_device__") and not isinstance(obj, np.ndarray) and obj.__dlpack_device__()[0] != 1:
            return None
        return np.asarray(obj), lambda array: array

    def adopter(self, sample):
        return None if isinstance(sample, np.ndarray) else lambda tensor: tensor.detach().numpy()

    def address(self, array):
        return array.__array_interface__["data"][0]

    def element_strides(self, array):
        if any(s < 0 or s % array.itemsize for s in array.strides):
            return None
        return tuple(s // array.itemsize for s in array.strides)

    def data_type(self, array):
        return DataType.from_numpy(array.dtype)

    def empty(self, sizes, data_type, like=None):
        return np.empty(sizes, data_type.numpy_dtype)

    def asarray(self, value, data_type, like=None):
        return np.asarray(value, data_type.numpy_dtype)

    def contiguous(self, array):
        return np.ascontiguousarray(array)

    def assign(self, target, source):
        target[...] = source

    def restride(self, array, sizes, strides):
        return np.lib.stride_tricks.as_strided(array, sizes, [s * array.itemsize for s in strides])

    def from_host(self, host, like=None):
        return host

    def to_host(self, array):
        return array

    def prepare_cumulative(self, operation, x, out, axis, reverse, exclusive):
        def run(x, out):
            out[...] = cumulative.reference(operation, x, axis, reverse, exclusive)

        return registry.ran(run, x, out)

    def prepare_quantized_linear_matmul(self, views, layouts):
        fields = tuple(views)

        def run(*arrays):
            t = {field: None if array is None else self.restride(array, *layouts[field])
                 for field, array in zip(fields, arrays)}
            for field in quantized_matmul.SCALE_FIELDS:
                quantized_matmul.check_scale(field, t[field])
            row, column = (slice(None), None), (None, slice(None))
            zero = {field: None if t[field] is None else t[field][where] for field, where in
                    (("a_zero_point_tensor", row), ("b_zero_point_tensor", column),
                     ("output_zero_point_tensor", row))}
            t["output_tensor"][...] = quantized_matmul.reference(
                t["a_tensor"], t["a_scale_tensor"][row], zero["a_zero_point_tensor"], t["b_tensor"],
                t["b_scale_tensor"][column], zero["b_zero_point_tensor"], t["output_scale_tensor"][row],
                zero["output_zero_point_tensor"], self.data_type(t["output_tensor"]))

        return registry.ran(run, *views.values())

    def prepare_linear_recurrence(self, a, b, scale, out, axis, reverse, exclusive):
        def run(a, b, scale, out):
            x, g = (np.moveaxis(v.astype(np.float64), axis, 0) for v in (a, b))
            order = range(x.shape[0] - 1, -1, -1) if reverse else range(x.shape[0])
            result, previous = np.empty_like(x), None
            for k in order:
                result[k] = (0 if exclusive else g[k]) if previous is None else \
                    x[previous] * result[previous] + (g[previous] if exclusive else g[k])
                previous = k
            out[...] = (np.moveaxis(result, 0, axis) * scale).astype(out.dtype)

        return registry.ran(run, a, b, scale, out)


registry.register("toy", ToyBackend)
