"""The NumPy layer: plain functions on arrays with NumPy broadcasting.

Each function turns its arguments into the DirectML descriptions of one operator (broadcasting
becomes zero strides), compiles them on a device of the newest feature level, and runs the
compiled operator on the arrays. The operators' rules are their own (:mod:`dmlq.ops`); the
NumPy-side argument rules (dtypes, broadcasting, finite non-zero scales, ``out``) live once, in
:mod:`dmlq.numpy_api.rules`. The common calls (per-tensor scalar parameters) are first offered to
one C call that takes only what those rules accept unchanged (:mod:`dmlq.numpy_api.one_step`).

One module per operator group: :mod:`~dmlq.numpy_api.quantize` (``quantize_linear``,
``dequantize_linear``, 4-bit and blockwise), :mod:`~dmlq.numpy_api.add`,
:mod:`~dmlq.numpy_api.quantized_add`, :mod:`~dmlq.numpy_api.matrix_multiply` (with packing),
:mod:`~dmlq.numpy_api.windows` (the two integer convolutions and the quantized average pooling),
:mod:`~dmlq.numpy_api.integer_matrix_multiply` (to int32 and to floats),
:mod:`~dmlq.numpy_api.dynamic_quantize`, :mod:`~dmlq.numpy_api.gemm`;
:mod:`~dmlq.numpy_api.compiling` describes arrays, caches the compiled operators and names an
operator's refusal by the NumPy argument of its field (``compiling.computed``). Another operator
group is one more module: its functions with their operator's own rules (its support table read by
``compiling.supported_dtypes``, the shared rules called from ``rules``), exported here.
``docs/arguments.md`` states every rule and where it lives.

Every function takes ``out=`` with NumPy's rules (exactly the result's shape and dtype, writable,
any layout, may alias an input) and then returns ``out``:

>>> import numpy as np
>>> out = np.zeros(3, np.uint8)
>>> quantize_linear([0.5, 1.5, 2.5], 1.0, out=out) is out, out
(True, array([0, 2, 2], dtype=uint8))
"""

from __future__ import annotations

from .add import add
from .dynamic_quantize import dynamic_quantize_linear
from .gemm import gemm
from .integer_matrix_multiply import matrix_multiply_integer, matrix_multiply_integer_to_float
from .matrix_multiply import pack_matrix_multiply_b, quantized_linear_matrix_multiply
from .quantize import dequantize_linear, quantize_linear
from .quantized_add import quantized_linear_add
from .windows import convolution_integer, quantized_linear_average_pooling, quantized_linear_convolution

__all__ = [
    "quantize_linear",
    "dequantize_linear",
    "add",
    "quantized_linear_add",
    "quantized_linear_matrix_multiply",
    "pack_matrix_multiply_b",
    "quantized_linear_convolution",
    "convolution_integer",
    "quantized_linear_average_pooling",
    "matrix_multiply_integer",
    "matrix_multiply_integer_to_float",
    "dynamic_quantize_linear",
    "gemm",
]
