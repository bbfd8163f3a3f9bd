"""Plain NumPy reference implementations, one module per operator, written like the formulas.

They are the oracle the compiled kernels are proven equal to, bit for bit. Inputs arrive already
broadcast against each other (DirectML's equal sizes with zero strides); each function returns a
new array of the output's dtype.
"""

from .add import add
from .convolution_integer import convolution_integer
from .dequantize import dequantize
from .dequantize_linear import dequantize_linear
from .dynamic_quantize_linear import dynamic_quantize_linear
from .gemm import gemm
from .matrix_multiply_integer import matrix_multiply_integer
from .matrix_multiply_integer_to_float import matrix_multiply_integer_to_float
from .quantize import quantize
from .quantize_linear import quantize_linear
from .quantized_linear_add import quantized_linear_add
from .quantized_linear_average_pooling import quantized_linear_average_pooling
from .quantized_linear_convolution import quantized_linear_convolution
from .quantized_linear_matrix_multiply import quantized_linear_matrix_multiply

__all__ = [
    "add",
    "convolution_integer",
    "dequantize",
    "dequantize_linear",
    "dynamic_quantize_linear",
    "gemm",
    "matrix_multiply_integer",
    "matrix_multiply_integer_to_float",
    "quantize",
    "quantize_linear",
    "quantized_linear_add",
    "quantized_linear_average_pooling",
    "quantized_linear_convolution",
    "quantized_linear_matrix_multiply",
]
