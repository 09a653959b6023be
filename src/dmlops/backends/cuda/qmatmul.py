"""Quantized linear matrix multiply on int8 tensor cores (to be written)."""


def quantized_linear_matmul(a, a_scale, a_zero_point, b, b_scale, b_zero_point, output_scale, output_zero_point,
                            out):
    raise NotImplementedError("the CUDA quantized matmul kernel is not written yet")
