"""``quantize_linear`` and ``dequantize_linear``: DirectML's element-wise QuantizeLinear and
DequantizeLinear, and, for 4-bit types, an ``axis`` or a ``block_size``, its Quantize and
Dequantize (feature level 6_3) with ONNX's ``axis`` and ``block_size`` (opset 21) as DirectML
describes them (each scale's sizes divide the data's). 4-bit arrays are ``ml_dtypes.int4``/``uint4``
arrays.

>>> import dmlq, ml_dtypes
>>> q = dmlq.quantize_linear(np.float32([[1, 2, 3, 4]]), np.float32([[1, 2]]), dtype="int4",
...                          axis=1, block_size=2)
>>> q, dmlq.dequantize_linear(q, np.float32([[1, 2]]), axis=1, block_size=2)
(array([[1, 2, 2, 2]], dtype=int4), array([[1., 2., 4., 4.]], dtype=float32))
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
from numpy.typing import ArrayLike, DTypeLike

from ..errors import DmlError
from ..int4 import FOUR_BIT_DTYPES, Nibbles, pack_int4, unpack_int4
from ..ops import Dequantize, ElementWiseDequantizeLinear, ElementWiseQuantizeLinear, Quantize
from ..tensor import TensorDesc, packed_strides
from ..types import DataType, QuantizationType
from . import one_step, rules
from .compiling import DEVICE, at_least_1d, delivered, run, target
from .rules import (
    BYTE_TYPES,
    DEQUANTIZE_INPUT_TYPES,
    F16,
    F32,
    I32,
    QUANTIZE_INPUT_TYPES,
    U8,
    block_shape,
    broadcast_shape,
    integer_operand,
    operand,
    output_dtype,
)

__all__ = ["dequantize_linear", "quantize_linear"]

INTEGER_TYPES = BYTE_TYPES + FOUR_BIT_DTYPES
_DATA_TYPES = dict(zip(INTEGER_TYPES, (DataType.UINT8, DataType.INT8, DataType.INT4, DataType.UINT4)))


def quantize_linear(x: ArrayLike, scale: ArrayLike, zero_point: ArrayLike | None = None, *,
                    dtype: DTypeLike = None, axis: int | None = None, block_size: int = 0,
                    out: np.ndarray | None = None) -> np.ndarray:  # fmt: skip
    """``clamp(round(x / scale) + zero_point, Min, Max)`` as uint8, int8, int4 or uint4.

    ``x`` is float32, float16 or int32; ``scale`` broadcasts against it (a scalar is per-tensor,
    ``(C, 1)`` is per-row); halves round to even, NaN gives 0, ±inf saturates. ``dtype="int4"``
    or ``"uint4"`` (or ``ml_dtypes.int4``/``uint4``) gives an ``ml_dtypes`` array; ``axis`` and
    ``block_size`` have ONNX's meaning (opset 21, see :mod:`dmlq.numpy_api.quantize`).

    >>> quantize_linear([0.5, 1.5, 2.5], 1.0)
    array([0, 2, 2], dtype=uint8)
    >>> quantize_linear([[-1.0, 1.0], [-1.0, 1.0]], [[0.5], [0.25]], np.int8(0))
    array([[-2,  2],
           [-4,  4]], dtype=int8)
    """
    if dtype is None and axis is None and block_size == 0:  # the common call in one C step, else None
        result = one_step.quantize(x, scale, zero_point, out, DEVICE.reciprocal_division)
        if result is not None:
            return result
    x = quantize_input(x, "x")
    scale = rules.scale(scale, "scale", F32 if x.dtype == I32 else x.dtype)
    if _is_blockwise(dtype, zero_point, axis, block_size):
        if x.dtype == I32:
            raise DmlError("x: int32 data has no 4-bit or blockwise quantization (float32 or float16 only)")
        return _quantize_blockwise(x, scale, zero_point, dtype, axis, block_size, out)
    out_dtype = output_dtype(zero_point, dtype, U8, "zero_point")
    zero_point = rules.zero_point(zero_point, "zero_point", out_dtype)
    result = target(out, broadcast_shape(x=x, scale=scale, zero_point=zero_point), out_dtype)
    if result.size:
        operands = {"input": x, "scale": scale, "zero_point": zero_point}
        run(ElementWiseQuantizeLinear, operands, at_least_1d(result))
    return delivered(result, out)


def quantize_input(value: object, name: str) -> np.ndarray:
    """``quantize_linear``'s data: float32, float16 or int32 (Python numbers become float32)."""
    return operand(value, name, QUANTIZE_INPUT_TYPES, F32, floats=F32, integers=I32)


def dequantize_linear(q: ArrayLike, scale: ArrayLike, zero_point: ArrayLike | None = None, *,
                      axis: int | None = None, block_size: int = 0,
                      out: np.ndarray | None = None) -> np.ndarray:  # fmt: skip
    """``(q - zero_point) * scale`` in the scale's dtype (float32 or float16).

    ``q`` may be an ``ml_dtypes.int4``/``uint4`` array; ``axis`` and ``block_size`` have ONNX's
    meaning (opset 21, see :mod:`dmlq.numpy_api.quantize`).

    >>> dequantize_linear(np.uint8([0, 128, 255]), 0.5, np.uint8(128))
    array([-64. ,   0. ,  63.5], dtype=float32)
    """
    if axis is None and block_size == 0:  # the common call in one C step, else None
        result = one_step.dequantize(q, scale, zero_point, out)
        if result is not None:
            return result
    scale_array = rules.as_array(scale, "scale")
    scale = rules.scale(scale, "scale", F16 if scale_array.dtype == F16 else F32)
    if _is_four_bit(q) or _is_blockwise(None, zero_point, axis, block_size):
        return _dequantize_blockwise(q, scale, zero_point, axis, block_size, out)
    q = integer_operand(q, "q", zero_point, DEQUANTIZE_INPUT_TYPES)
    zero_point = rules.zero_point(zero_point, "zero_point", q.dtype, DEQUANTIZE_INPUT_TYPES)
    result = target(out, broadcast_shape(q=q, scale=scale, zero_point=zero_point), scale.dtype)
    if result.size:
        operands = {"input": q, "scale": scale, "zero_point": zero_point}
        run(ElementWiseDequantizeLinear, operands, at_least_1d(result))
    return delivered(result, out)


# -- 4-bit and blockwise: DirectML's Quantize and Dequantize -------------------------------------


def _is_four_bit(value: object) -> bool:
    return isinstance(value, (np.ndarray, np.generic)) and value.dtype in FOUR_BIT_DTYPES


def _is_blockwise(dtype: object, zero_point: object, axis: int | None, block_size: int) -> bool:
    """Whether a call needs DirectML's Quantize or Dequantize: a 4-bit type, an axis or a block size."""
    four_bit_name = isinstance(dtype, str) and dtype in ("int4", "uint4")
    four_bit_dtype = (
        not isinstance(dtype, str) and dtype is not None and _dtype_or_none(dtype) in FOUR_BIT_DTYPES
    )
    return four_bit_name or four_bit_dtype or _is_four_bit(zero_point) or axis is not None or block_size != 0


def _dtype_or_none(dtype: object) -> np.dtype | None:
    try:
        return np.dtype(dtype)
    except TypeError:
        return None


def _integer_dtype(dtype: object) -> np.dtype:
    """``dtype`` as one of the four integer dtypes ("int4"/"uint4" name ml_dtypes' types)."""
    named = isinstance(dtype, str) and dtype in ("int4", "uint4")  # NumPy reads "int4" as int32
    resolved = np.dtype(getattr(ml_dtypes, dtype)) if named else _dtype_or_none(dtype)
    if resolved not in INTEGER_TYPES:
        raise DmlError(f"dtype: {dtype!r} is not uint8, int8, int4 or uint4")
    return resolved


def _blockwise_zero_point(value: object, dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray | None:
    """The zero point as ``dtype`` values of ``shape``; one carrying another integer dtype is refused."""
    if value is None:
        return None
    array = np.asarray(value)
    if array.dtype in INTEGER_TYPES and array.dtype != dtype:
        raise DmlError(f"zero_point: dtype {array.dtype} differs from the data's {dtype}")
    if array.dtype != dtype:
        if array.dtype.kind not in "iu":
            raise DmlError(f"zero_point: dtype {array.dtype} is not an integer type")
        info = ml_dtypes.iinfo(dtype)
        if array.size and (array.min() < info.min or array.max() > info.max):
            raise DmlError(f"zero_point: values must lie in the {dtype} range [{info.min}, {info.max}]")
        array = array.astype(dtype)
    if array.size != int(np.prod(shape)):
        raise DmlError(f"zero_point: shape {array.shape} differs from the scale's")
    return array.reshape(shape)


def _quantization(scale: np.ndarray, zero_point: np.ndarray | None, float_type: DataType,
                  integer_type: DataType) -> tuple[dict, list[TensorDesc]]:  # fmt: skip
    """The views and descriptions of the quantization tensors, the scale first."""
    views = {"quantization_tensors[0]": scale}
    descs = [TensorDesc(float_type, scale.shape)]
    if zero_point is not None:
        views["quantization_tensors[1]"] = zero_point
        descs.append(TensorDesc(integer_type, zero_point.shape))
    return views, descs


def _output_nibbles(shape: tuple[int, ...], dtype: np.dtype) -> Nibbles:
    memory = np.zeros((int(np.prod(shape)) + 1) // 2, np.uint8)
    return Nibbles(memory, shape, packed_strides(shape), dtype)


def _deliver(result: np.ndarray, out: np.ndarray | None) -> np.ndarray:
    if out is None:
        return result
    if not isinstance(out, np.ndarray) or out.shape != result.shape or out.dtype != result.dtype:
        raise DmlError(f"out: expected shape {result.shape} and dtype {result.dtype}")
    out[...] = result
    return out


def _quantize_blockwise(x: np.ndarray, scale: np.ndarray, zero_point: object, dtype: object,
                        axis: int | None, block_size: int, out: np.ndarray | None) -> np.ndarray:  # fmt: skip
    """``quantize_linear`` with blocks: ``x`` and ``scale`` already float32/float16 of one dtype."""
    if dtype is None:  # a zero point's integer dtype, else uint8
        carried = None if zero_point is None else np.asarray(zero_point).dtype
        dtype = carried if carried in INTEGER_TYPES else np.uint8
    out_dtype = _integer_dtype(dtype)
    shape = x.shape if x.ndim else (1,)
    blocks = block_shape(shape, scale.shape, axis, block_size)
    scale = scale.reshape(blocks)
    zero_point = _blockwise_zero_point(zero_point, out_dtype, blocks)
    float_type, integer_type = DataType.from_dtype(x.dtype), _DATA_TYPES[out_dtype]
    views, tensors = _quantization(scale, zero_point, float_type, integer_type)
    desc = Quantize(input=TensorDesc(float_type, shape), quantization_type=QuantizationType(len(tensors)),
                    quantization_tensors=tensors, output=TensorDesc(integer_type, shape))  # fmt: skip
    operator = DEVICE.compile_operator(desc)
    if out_dtype in FOUR_BIT_DTYPES:
        nibbles = _output_nibbles(shape, out_dtype)
        operator.run_arrays({"input": x.reshape(shape), **views}, nibbles)
        result = unpack_int4(nibbles.memory, shape, out_dtype)
    else:
        result = np.empty(shape, out_dtype)
        operator.run_arrays({"input": x.reshape(shape), **views}, result)
    return _deliver(result.reshape(x.shape), out)


def _dequantize_blockwise(q: object, scale: np.ndarray, zero_point: object, axis: int | None, block_size: int,
                          out: np.ndarray | None) -> np.ndarray:  # fmt: skip
    """``dequantize_linear`` with blocks: ``scale`` already float32 or float16."""
    q = np.asarray(q)
    if q.dtype not in INTEGER_TYPES:
        raise DmlError(f"q: dtype {q.dtype} is not int4, uint4, int8 or uint8 (with axis or block_size)")
    shape = q.shape if q.ndim else (1,)
    blocks = block_shape(shape, scale.shape, axis, block_size)
    scale = scale.reshape(blocks)
    zero_point = _blockwise_zero_point(zero_point, q.dtype, blocks)
    float_type, integer_type = DataType.from_dtype(scale.dtype), _DATA_TYPES[q.dtype]
    views, tensors = _quantization(scale, zero_point, float_type, integer_type)
    desc = Dequantize(input=TensorDesc(integer_type, shape), quantization_type=QuantizationType(len(tensors)),
                      quantization_tensors=tensors, output=TensorDesc(float_type, shape))  # fmt: skip
    operator = DEVICE.compile_operator(desc)
    data = q.reshape(shape)
    if q.dtype in FOUR_BIT_DTYPES:
        data = Nibbles(pack_int4(data), shape, packed_strides(shape), q.dtype)
    result = np.empty(shape, scale.dtype)
    operator.run_arrays({"input": data, **views}, result)
    return _deliver(result.reshape(q.shape), out)
