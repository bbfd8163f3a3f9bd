"""``quantize_linear`` and ``dequantize_linear``: DirectML's element-wise QuantizeLinear and
DequantizeLinear, and, for 4-bit types, an ``axis`` or a ``block_size``, its Quantize and
Dequantize (feature level 6_3) with ONNX's ``axis`` and ``block_size`` (opset 21) as DirectML
describes them (each scale's sizes divide the data's). 4-bit arrays are ``ml_dtypes.int4``/``uint4``
arrays.

The data dtypes are the support tables' (:mod:`dmlq.ops`) at the NumPy layer's feature level:

>>> QUANTIZE_DATA, DEQUANTIZE_DATA, BLOCKWISE_INTEGERS
((dtype('float32'), dtype('float16'), dtype('int32')), \
(dtype('int32'), dtype('int16'), dtype('int8'), dtype('uint32'), dtype('uint16'), dtype('uint8')), \
(dtype('int8'), dtype(int4), dtype('uint8'), dtype(uint4)))
>>> import dmlq
>>> q = dmlq.quantize_linear(np.float32([[1, 2, 3, 4]]), np.float32([[1, 2]]), dtype="int4",
...                          axis=1, block_size=2)
>>> q, dmlq.dequantize_linear(q, np.float32([[1, 2]]), axis=1, block_size=2)
(array([[1, 2, 2, 2]], dtype=int4), array([[1., 2., 4., 4.]], dtype=float32))
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike, DTypeLike

from ..device import CompiledOperator
from ..errors import DmlError
from ..int4 import FOUR_BIT_DTYPES, Nibbles, pack_int4, unpack_int4
from ..ops.dequantize import Dequantize
from ..ops.dequantize_linear import ElementWiseDequantizeLinear
from ..ops.quantize import Quantize
from ..ops.quantize_linear import ElementWiseQuantizeLinear
from ..tensor import TensorDesc, packed_strides
from ..types import QuantizationType
from . import one_step, rules
from .compiling import (
    DEVICE,
    RECIPROCAL_DIVISION,
    at_least_1d,
    data_type,
    delivered,
    run,
    supported_dtypes,
    target,
)
from .rules import F32, I32, U8, block_shape, broadcast_shape, check_out, output_dtype

__all__ = ["dequantize_linear", "quantize_linear"]

QUANTIZE_DATA = supported_dtypes(ElementWiseQuantizeLinear, "input")
DEQUANTIZE_DATA = supported_dtypes(ElementWiseDequantizeLinear, "input")
BLOCKWISE_INTEGERS = supported_dtypes(Dequantize, "input")  # Quantize's outputs too
# quantize_linear's dtype=: the element-wise operator's outputs first, then the 4-bit ones.
ELEMENT_WISE_OUTPUTS = supported_dtypes(ElementWiseQuantizeLinear, "output")
OUTPUT_TYPES = tuple(dict.fromkeys((*ELEMENT_WISE_OUTPUTS, *BLOCKWISE_INTEGERS)))


def quantize_linear(x: ArrayLike, scale: ArrayLike, zero_point: ArrayLike | None = None, *,
                    dtype: DTypeLike | None = None, axis: int | None = None, block_size: int = 0,
                    out: np.ndarray | None = None) -> np.ndarray:  # fmt: skip
    """``clamp(round(x / scale) + zero_point, Min, Max)`` as uint8, int8, int4 or uint4.

    ``x`` is float32, float16 or int32 (float64 converts to float32; Python numbers become float32);
    ``scale`` broadcasts against it (a scalar is per-tensor, ``(C, 1)`` is per-row); halves round to
    even, NaN gives 0, ±inf saturates. The output's dtype is a NumPy zero point's, else ``dtype``,
    else uint8; ``dtype="int4"`` or ``"uint4"`` (or ``ml_dtypes.int4``/``uint4``) gives an
    ``ml_dtypes`` array; ``axis`` and ``block_size`` have ONNX's meaning (opset 21). The rules of
    each argument: :mod:`dmlq.numpy_api.rules`.

    >>> quantize_linear([0.5, 1.5, 2.5], 1.0)
    array([0, 2, 2], dtype=uint8)
    >>> quantize_linear([[-1.0, 1.0], [-1.0, 1.0]], [[0.5], [0.25]], np.int8(0))
    array([[-2,  2],
           [-4,  4]], dtype=int8)
    >>> quantize_linear([1.0, 2.0], 0.5, np.int64(3))
    Traceback (most recent call last):
    ...
    dmlq.errors.DmlError: zero_point: dtype int64 is not a zero point dtype (int8, uint8, int4, uint4): ...
    """
    if dtype is None and axis is None and block_size == 0:  # the common call in one C step, else None
        result = one_step.quantize(x, scale, zero_point, out, RECIPROCAL_DIVISION)
        if result is not None:
            return result
    x = rules.data(x, "x", QUANTIZE_DATA, F32, floats=F32)
    scale = rules.scale(scale, "scale", F32 if x.dtype == I32 else x.dtype)
    out_dtype = output_dtype(zero_point, dtype, U8, "zero_point", OUTPUT_TYPES)
    zero_point = rules.zero_point(zero_point, "zero_point", out_dtype, "the output", OUTPUT_TYPES)
    if out_dtype in FOUR_BIT_DTYPES or axis is not None or block_size != 0:
        if x.dtype == I32:
            raise DmlError("x: int32 data has no 4-bit or blockwise quantization (float32 or float16 only)")
        return _quantize_blockwise(x, scale, zero_point, out_dtype, axis, block_size, out)
    result = target(out, broadcast_shape(x=x, scale=scale, zero_point=zero_point), out_dtype)
    if result.size:
        operands = {"input": x, "scale": scale, "zero_point": zero_point}
        run(ElementWiseQuantizeLinear, operands, at_least_1d(result))
    return delivered(result, out)


def dequantize_linear(q: ArrayLike, scale: ArrayLike, zero_point: ArrayLike | None = None, *,
                      axis: int | None = None, block_size: int = 0,
                      out: np.ndarray | None = None) -> np.ndarray:  # fmt: skip
    """``(q - zero_point) * scale`` in the scale's dtype (float32 or float16).

    ``q`` is int8, uint8, int16, uint16, int32 or uint32 (DequantizeLinear's table), or, with
    ``axis`` or ``block_size``, int8, uint8 or ``ml_dtypes.int4``/``uint4`` (Dequantize's); lists
    take a NumPy zero point's dtype, else uint8. A NumPy zero point has ``q``'s dtype. ``axis`` and
    ``block_size`` have ONNX's meaning (opset 21). The rules of each argument:
    :mod:`dmlq.numpy_api.rules`.

    >>> dequantize_linear(np.uint8([0, 128, 255]), 0.5, np.uint8(128))
    array([-64. ,   0. ,  63.5], dtype=float32)
    >>> dequantize_linear(np.int64([1, 300]), 0.5)
    Traceback (most recent call last):
    ...
    dmlq.errors.DmlError: q: dtype int64 is not supported (expected int32, int16, int8, uint32, uint16, uint8)
    """
    if axis is None and block_size == 0:  # the common call in one C step, else None
        result = one_step.dequantize(q, scale, zero_point, out)
        if result is not None:
            return result
    scale = rules.scale(scale, "scale", rules.scale_dtype(scale, "scale"))
    blockwise = _is_four_bit(q) or _is_four_bit(zero_point) or axis is not None or block_size != 0
    integers = BLOCKWISE_INTEGERS if blockwise else DEQUANTIZE_DATA
    q = rules.integer_data(q, "q", zero_point, integers)
    zero_point = rules.zero_point(zero_point, "zero_point", q.dtype, "q", integers)
    if blockwise:
        return _dequantize_blockwise(q, scale, zero_point, axis, block_size, out)
    result = target(out, broadcast_shape(q=q, scale=scale, zero_point=zero_point), scale.dtype)
    if result.size:
        operands = {"input": q, "scale": scale, "zero_point": zero_point}
        run(ElementWiseDequantizeLinear, operands, at_least_1d(result))
    return delivered(result, out)


# -- 4-bit and blockwise: DirectML's Quantize and Dequantize -------------------------------------


def _is_four_bit(value: object) -> bool:
    return rules.is_numpy(value) and value.dtype in FOUR_BIT_DTYPES


def _quantize_blockwise(x: np.ndarray, scale: np.ndarray, zero_point: np.ndarray | None, out_dtype: np.dtype,
                        axis: int | None, block_size: int, out: object) -> np.ndarray:  # fmt: skip
    """``quantize_linear`` with blocks: the arguments already checked by the rules."""
    shape = x.shape or (1,)
    blocks = block_shape(shape, scale.shape, axis, block_size)
    zero_point = _in_blocks(zero_point, blocks, out_dtype)
    if out is not None:
        out = check_out(out, x.shape, out_dtype)
    if not x.size:  # DirectML's sizes are at least 1: an empty result needs no operator
        return delivered(np.empty(x.shape, out_dtype), out)
    operator, views = _compiled(Quantize, x.dtype, out_dtype, shape, scale.reshape(blocks), zero_point)
    if out_dtype in FOUR_BIT_DTYPES:
        memory = np.zeros((math.prod(shape) + 1) // 2, np.uint8)
        nibbles = Nibbles(memory, shape, packed_strides(shape), out_dtype)
        operator.run_arrays({"input": x.reshape(shape), **views}, nibbles)
        result = unpack_int4(nibbles.memory, shape, out_dtype)
    else:
        result = np.empty(shape, out_dtype)
        operator.run_arrays({"input": x.reshape(shape), **views}, result)
    return delivered(result.reshape(x.shape), out)


def _dequantize_blockwise(q: np.ndarray, scale: np.ndarray, zero_point: np.ndarray | None, axis: int | None,
                          block_size: int, out: object) -> np.ndarray:  # fmt: skip
    """``dequantize_linear`` with blocks: the arguments already checked by the rules."""
    shape = q.shape or (1,)
    blocks = block_shape(shape, scale.shape, axis, block_size)
    zero_point = _in_blocks(zero_point, blocks, q.dtype)
    if out is not None:
        out = check_out(out, q.shape, scale.dtype)
    if not q.size:
        return delivered(np.empty(q.shape, scale.dtype), out)
    operator, views = _compiled(Dequantize, q.dtype, scale.dtype, shape, scale.reshape(blocks), zero_point)
    data: np.ndarray | Nibbles = q.reshape(shape)
    if q.dtype in FOUR_BIT_DTYPES:
        data = Nibbles(pack_int4(data), shape, packed_strides(shape), q.dtype)
    result = np.empty(shape, scale.dtype)
    operator.run_arrays({"input": data, **views}, result)
    return delivered(result.reshape(q.shape), out)


def _in_blocks(zero_point: np.ndarray | None, blocks: tuple[int, ...], dtype: np.dtype) -> np.ndarray | None:
    """The zero point with the scale's DirectML sizes ``blocks``: as many elements as the scale.

    Without one, ONNX's zero point is 0: an unsigned ``dtype``'s is given as 0, since DirectML's SCALE
    alone means the type's midpoint (:mod:`dmlq.ops.blockwise`), as onnxruntime's provider does."""
    if zero_point is None:
        return None if dtype in (np.dtype(np.int8), FOUR_BIT_DTYPES[0]) else np.zeros(blocks, dtype)
    if zero_point.size != math.prod(blocks):
        raise DmlError(f"zero_point: shape {zero_point.shape} differs from the scale's")
    return zero_point.reshape(blocks)


def _compiled(desc_type: type[Quantize] | type[Dequantize], input_dtype: np.dtype, output_dtype: np.dtype,
              shape: tuple[int, ...], scale: np.ndarray,
              zero_point: np.ndarray | None) -> tuple[CompiledOperator, dict[str, np.ndarray]]:  # fmt: skip
    """The operator of ``shape`` compiled, and its quantization tensors (the scale first) by field."""
    views = {"quantization_tensors[0]": scale}
    tensors = [TensorDesc(data_type(scale.dtype), scale.shape)]
    if zero_point is not None:
        views["quantization_tensors[1]"] = zero_point
        tensors.append(TensorDesc(data_type(zero_point.dtype), zero_point.shape))
    desc = desc_type(input=TensorDesc(data_type(input_dtype), shape), quantization_tensors=tuple(tensors),
                     quantization_type=QuantizationType(len(tensors)),
                     output=TensorDesc(data_type(output_dtype), shape))  # fmt: skip
    return DEVICE.compile_operator(desc), views
