"""One module per operator family: the desc, its validation and its reference math."""

from . import cumulative, quantized_matmul
from .cumulative import CumulativeProductOperatorDesc, CumulativeSummationOperatorDesc
from .quantized_matmul import QuantizedLinearMatrixMultiplyOperatorDesc

OPERATORS = {
    CumulativeSummationOperatorDesc: cumulative,
    CumulativeProductOperatorDesc: cumulative,
    QuantizedLinearMatrixMultiplyOperatorDesc: quantized_matmul,
}


def operator_module(desc):
    return OPERATORS[type(desc)]
