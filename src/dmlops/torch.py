"""dmlops as PyTorch operators: ``import dmlops.torch`` registers ``torch.ops.dmlops.*``.

    torch.ops.dmlops.cumulative_sum(x, axis, reverse=False, exclusive=False)
    torch.ops.dmlops.cumulative_product(x, axis, reverse=False, exclusive=False)
    torch.ops.dmlops.quantized_linear_matmul(a, a_scale, a_zero_point, b, b_scale, b_zero_point, output_scale,
                                             output_zero_point, output_dtype=None)

Each runs the array API's code on its tensors (CPU tensors on the CPU backend, CUDA tensors on the CUDA backend), so
they work inside ``torch.compile`` (their fake implementations give the output's sizes and type by the operator's
rule), in CUDA graphs (no call waits for the GPU) and under autograd: the gradient of a running sum is the running
sum of the gradient in the opposite direction, with the same exclusive setting; that of a running product comes from
``dmlops.ops.cumulative_gradient`` (no division: exact where the input has zeros). The quantized matmul's outputs
are integers: it has no gradient. The array API itself calls these operators for tensors that torch.compile traces
or whose gradient autograd records.
"""

import torch

from . import arrays
from .ops import cumulative, quantized_matmul
from .ops.cumulative import CumulativeOperation
from .types import DataType


def _scan(operation):
    def implementation(x: torch.Tensor, axis: int, reverse: bool = False, exclusive: bool = False) -> torch.Tensor:
        return arrays.cumulative(operation, x, axis, reverse, exclusive, None, None)

    return implementation


cumulative_sum = torch.library.custom_op("dmlops::cumulative_sum", mutates_args=())(_scan(CumulativeOperation.SUM))
cumulative_product = torch.library.custom_op("dmlops::cumulative_product", mutates_args=())(
    _scan(CumulativeOperation.PRODUCT))
SCANS = {CumulativeOperation.SUM: cumulative_sum, CumulativeOperation.PRODUCT: cumulative_product}


@torch.library.custom_op("dmlops::cumulative_product_backward", mutates_args=())
def cumulative_product_backward(x: torch.Tensor, grad: torch.Tensor, axis: int, reverse: bool,
                                exclusive: bool) -> torch.Tensor:
    """The gradient of the running product of x for the upstream gradient ``grad``."""
    return arrays.cumulative_gradient(CumulativeOperation.PRODUCT, x, grad.contiguous(), axis, reverse, exclusive)


def _like_input(x, axis, reverse=False, exclusive=False):
    sizes, _ = cumulative.output_rule(tuple(x.shape), None)
    return x.new_empty(sizes)


for _operator in (cumulative_sum, cumulative_product):
    _operator.register_fake(_like_input)
cumulative_product_backward.register_fake(lambda x, grad, axis, reverse, exclusive: x.new_empty(x.shape))


def _save_scan(ctx, inputs, output):
    x, ctx.axis, ctx.reverse, ctx.exclusive = inputs
    ctx.save_for_backward(x)


def _sum_backward(ctx, grad):
    return cumulative_sum(grad.contiguous(), ctx.axis, not ctx.reverse, ctx.exclusive), None, None, None


def _product_backward(ctx, grad):
    (x,) = ctx.saved_tensors
    return cumulative_product_backward(x, grad, ctx.axis, ctx.reverse, ctx.exclusive), None, None, None


cumulative_sum.register_autograd(_sum_backward, setup_context=_save_scan)
cumulative_product.register_autograd(_product_backward, setup_context=_save_scan)


@torch.library.custom_op("dmlops::quantized_linear_matmul", mutates_args=())
def quantized_linear_matmul(a: torch.Tensor, a_scale: torch.Tensor, a_zero_point: torch.Tensor | None,
                            b: torch.Tensor, b_scale: torch.Tensor, b_zero_point: torch.Tensor | None,
                            output_scale: torch.Tensor, output_zero_point: torch.Tensor | None,
                            output_dtype: torch.dtype | None = None) -> torch.Tensor:
    return arrays.quantized_linear_matmul([a, a_scale, a_zero_point, b, b_scale, b_zero_point, output_scale,
                                           output_zero_point, None], output_dtype, None)


@quantized_linear_matmul.register_fake
def _(a, a_scale, a_zero_point, b, b_scale, b_zero_point, output_scale, output_zero_point, output_dtype=None):
    sizes = quantized_matmul.output_sizes(tuple(a.shape), tuple(b.shape))
    output_type = quantized_matmul.output_type(_data_type(output_dtype),
                                               _data_type(getattr(output_zero_point, "dtype", None)), None)
    return a.new_empty(sizes, dtype=getattr(torch, output_type.numpy_dtype.name))


def _data_type(dtype) -> DataType | None:
    return None if dtype is None else DataType.from_numpy(str(dtype).removeprefix("torch."))


def quantized_linear_matmul_operator(a, a_scale, a_zero_point, b, b_scale, b_zero_point, output_scale,
                                     output_zero_point, output_dtype):
    """The operator's call for the array API's arguments: numbers become tensors on A's device (the operator takes
    tensors), an output type given as a NumPy type or name becomes a torch dtype."""
    def tensor(value, dtype):
        if value is None or isinstance(value, torch.Tensor):
            return value
        return torch.tensor(value, dtype=dtype, device=a.device)

    if output_dtype is not None and not isinstance(output_dtype, torch.dtype):
        output_dtype = getattr(torch, str(getattr(output_dtype, "__name__", output_dtype)))
    if not isinstance(b, torch.Tensor):  # a B the CUDA backend prepared (a PersistedB): the tensor it reads as
        b = b.array
    return quantized_linear_matmul(a, tensor(a_scale, torch.float32), tensor(a_zero_point, a.dtype), b,
                                   tensor(b_scale, torch.float32), tensor(b_zero_point, b.dtype),
                                   tensor(output_scale, torch.float32),
                                   tensor(output_zero_point, output_dtype or torch.uint8), output_dtype)
