"""One description class per DirectML operator, each with its support table and rules.

>>> from dmlq import ops
>>> [cls.__name__ for cls in ops.OPERATORS]  # doctest: +NORMALIZE_WHITESPACE
['ElementWiseQuantizeLinear', 'ElementWiseDequantizeLinear', 'ElementWiseQuantizedLinearAdd',
 'ElementWiseAdd', 'ElementWiseAdd1', 'QuantizedLinearMatrixMultiply', 'Quantize', 'Dequantize',
 'QuantizedLinearConvolution', 'ConvolutionInteger',
 'MatrixMultiplyInteger', 'MatrixMultiplyIntegerToFloat',
 'DynamicQuantizeLinear', 'QuantizedLinearAveragePooling', 'Gemm']
"""

from .add import ElementWiseAdd
from .add1 import ElementWiseAdd1
from .base import OperatorDesc
from .convolution_integer import ConvolutionInteger
from .dequantize import Dequantize
from .dequantize_linear import ElementWiseDequantizeLinear
from .dynamic_quantize_linear import DynamicQuantizeLinear
from .gemm import Gemm
from .matrix_multiply_integer import MatrixMultiplyInteger
from .matrix_multiply_integer_to_float import MatrixMultiplyIntegerToFloat
from .quantize import Quantize
from .quantize_linear import ElementWiseQuantizeLinear
from .quantized_linear_add import ElementWiseQuantizedLinearAdd
from .quantized_linear_average_pooling import QuantizedLinearAveragePooling
from .quantized_linear_convolution import QuantizedLinearConvolution
from .quantized_linear_matrix_multiply import QuantizedLinearMatrixMultiply

OPERATORS: tuple[type[OperatorDesc], ...] = (
    ElementWiseQuantizeLinear,
    ElementWiseDequantizeLinear,
    ElementWiseQuantizedLinearAdd,
    ElementWiseAdd,
    ElementWiseAdd1,
    QuantizedLinearMatrixMultiply,
    Quantize,
    Dequantize,
    QuantizedLinearConvolution,
    ConvolutionInteger,
    MatrixMultiplyInteger,
    MatrixMultiplyIntegerToFloat,
    DynamicQuantizeLinear,
    QuantizedLinearAveragePooling,
    Gemm,
)

__all__ = [
    "OPERATORS",
    "ConvolutionInteger",
    "Dequantize",
    "DynamicQuantizeLinear",
    "ElementWiseAdd",
    "ElementWiseAdd1",
    "ElementWiseDequantizeLinear",
    "ElementWiseQuantizeLinear",
    "ElementWiseQuantizedLinearAdd",
    "Gemm",
    "MatrixMultiplyInteger",
    "MatrixMultiplyIntegerToFloat",
    "OperatorDesc",
    "Quantize",
    "QuantizedLinearAveragePooling",
    "QuantizedLinearConvolution",
    "QuantizedLinearMatrixMultiply",
    "by_type_name",
]  # written out, as type checkers read it: every class of OPERATORS (tests/test_typing.py checks)


def by_type_name(name: str) -> type[OperatorDesc]:
    """The description class for a DirectML type name, with or without ``DML_OPERATOR_``."""
    bare = name.strip().removeprefix("DML_OPERATOR_")
    for cls in OPERATORS:
        if cls.TYPE_NAME == bare:
            return cls
    raise KeyError(name)
