"""dmlq: DirectML's quantized-linear operators in Python, exact and validated, on any CPU.

Two layers over one engine:

* the NumPy layer: :func:`quantize_linear`, :func:`dequantize_linear`, :func:`add`,
  :func:`quantized_linear_add`, :func:`quantized_linear_matrix_multiply`, and the rest of the
  quantized family: :func:`quantized_linear_convolution`, :func:`convolution_integer`,
  :func:`matrix_multiply_integer`, :func:`matrix_multiply_integer_to_float`,
  :func:`dynamic_quantize_linear`, :func:`quantized_linear_average_pooling`, :func:`gemm`;
* the DirectML layer: :class:`TensorDesc`, the descriptions in :mod:`dmlq.ops`, and
  :class:`Device` to validate them at a feature level, compile and execute them on buffers.

>>> import dmlq
>>> dmlq.quantize_linear([0.5, 1.5, 2.5], 1.0)
array([0, 2, 2], dtype=uint8)
"""

from . import activations, ops
from .device import CompiledOperator, Device
from .errors import DmlError
from .int4 import pack_int4, unpack_int4
from .numpy_api import (
    add,
    convolution_integer,
    dequantize_linear,
    dynamic_quantize_linear,
    gemm,
    matrix_multiply_integer,
    matrix_multiply_integer_to_float,
    pack_matrix_multiply_b,
    quantize_linear,
    quantized_linear_add,
    quantized_linear_average_pooling,
    quantized_linear_convolution,
    quantized_linear_matrix_multiply,
)
from .ops import OperatorDesc
from .packed import PackedMatrix
from .tensor import TensorDesc, calc_buffer_tensor_size
from .threads import get_num_threads, set_num_threads
from .types import DataType, FeatureLevel, QuantizationType, TensorFlags

__version__ = "0.1.0"

__all__ = [
    "CompiledOperator",
    "DataType",
    "Device",
    "DmlError",
    "FeatureLevel",
    "OperatorDesc",
    "PackedMatrix",
    "QuantizationType",
    "TensorDesc",
    "TensorFlags",
    "activations",
    "add",
    "calc_buffer_tensor_size",
    "convolution_integer",
    "dequantize_linear",
    "dynamic_quantize_linear",
    "gemm",
    "get_num_threads",
    "matrix_multiply_integer",
    "matrix_multiply_integer_to_float",
    "ops",
    "pack_int4",
    "pack_matrix_multiply_b",
    "quantize_linear",
    "quantized_linear_add",
    "quantized_linear_average_pooling",
    "quantized_linear_convolution",
    "quantized_linear_matrix_multiply",
    "set_num_threads",
    "unpack_int4",
]
