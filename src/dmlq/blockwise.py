"""The NumPy layer's 4-bit and blockwise part: ONNX's ``axis`` and ``block_size`` (opset 21) as
DirectML's Quantize and Dequantize describe them (each scale's sizes divide the data's).

:func:`dmlq.quantize_linear` and :func:`dmlq.dequantize_linear` come here for 4-bit types, an
``axis`` or a ``block_size``; 4-bit arrays are ``ml_dtypes.int4``/``uint4`` arrays.

>>> import dmlq, ml_dtypes
>>> q = dmlq.quantize_linear(np.float32([[1, 2, 3, 4]]), np.float32([[1, 2]]), dtype="int4",
...                          axis=1, block_size=2)
>>> q, dmlq.dequantize_linear(q, np.float32([[1, 2]]), axis=1, block_size=2)
(array([[1, 2, 2, 2]], dtype=int4), array([[1., 2., 4., 4.]], dtype=float32))
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from .device import Device
from .errors import DmlError
from .int4 import FOUR_BIT_DTYPES, Nibbles, pack_int4, unpack_int4
from .ops import Dequantize, Quantize
from .tensor import TensorDesc, packed_strides
from .types import DataType, QuantizationType

__all__ = ["block_shape", "dequantize_linear", "is_blockwise", "quantize_linear"]

_DEVICE = Device()
BYTE_TYPES = (np.dtype(np.uint8), np.dtype(np.int8))
INTEGER_TYPES = BYTE_TYPES + FOUR_BIT_DTYPES
_DATA_TYPES = dict(zip(INTEGER_TYPES, (DataType.UINT8, DataType.INT8, DataType.INT4, DataType.UINT4)))


def is_four_bit(value: object) -> bool:
    return isinstance(value, (np.ndarray, np.generic)) and value.dtype in FOUR_BIT_DTYPES


def is_blockwise(dtype: object, zero_point: object, axis: int | None, block_size: int) -> bool:
    """Whether a call needs this module: a 4-bit type, an axis or a block size."""
    four_bit_name = isinstance(dtype, str) and dtype in ("int4", "uint4")
    four_bit_dtype = (
        not isinstance(dtype, str) and dtype is not None and _dtype_or_none(dtype) in FOUR_BIT_DTYPES
    )
    return four_bit_name or four_bit_dtype or is_four_bit(zero_point) or axis is not None or block_size != 0


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


def block_shape(shape: tuple[int, ...], scale_shape: tuple[int, ...], axis: int | None,
                block_size: int, name: str = "scale") -> tuple[int, ...]:  # fmt: skip
    """The scale's DirectML sizes (each dividing ``shape``'s) from ONNX's ``axis`` and ``block_size``.

    No axis: the scale broadcasts as a NumPy operand. An axis alone: a 1-D scale along it. A block
    size: the scale has the data's rank, ``shape[axis] / block_size`` along the axis.

    >>> block_shape((4, 64), (4, 2), 1, 32), block_shape((4, 64), (4,), 0, 0)
    ((4, 2), (4, 1))
    >>> block_shape((4, 64), (), None, 0)
    (1, 1)
    """
    if block_size < 0:
        raise DmlError(f"block_size: {block_size} is negative")
    if axis is None and block_size == 0:
        padded = (1,) * (len(shape) - len(scale_shape)) + tuple(scale_shape)
        if len(padded) != len(shape) or any(s not in (1, n) for s, n in zip(padded, shape)):
            raise DmlError(f"{name}: shape {scale_shape} does not broadcast to the data's {shape}")
        return padded
    axis = _normalized_axis(1 if axis is None else axis, len(shape))
    if block_size == 0:
        if tuple(scale_shape) not in ((shape[axis],), (1,), ()):
            raise DmlError(f"{name}: shape {scale_shape} must be ({shape[axis]},) along axis {axis}")
        return tuple(shape[axis] if d == axis and scale_shape and scale_shape[0] != 1 else 1
                     for d in range(len(shape)))  # fmt: skip
    if shape[axis] % block_size:
        raise DmlError(f"block_size: {block_size} does not divide axis {axis} of size {shape[axis]}")
    expected = tuple(n // block_size if d == axis else n for d, n in enumerate(shape))
    if tuple(scale_shape) != expected:
        raise DmlError(
            f"{name}: shape {scale_shape} must be {expected} for blocks of {block_size} along axis {axis}"
        )
    return expected


def _normalized_axis(axis: int, ndim: int) -> int:
    if not -ndim <= axis < ndim:
        raise DmlError(f"axis: {axis} is out of range for {ndim} dimensions")
    return axis % ndim


def _zero_point(value: object, dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray | None:
    """The zero point as ``dtype`` values of ``shape``; one carrying another integer dtype is refused.

    Without one, ONNX's zero point is 0: an unsigned type's is given as 0, since DirectML's SCALE
    alone means the type's midpoint (:mod:`dmlq.ops.blockwise`), as onnxruntime's provider does."""
    if value is None:
        return None if ml_dtypes.iinfo(dtype).min < 0 else np.zeros(shape, dtype)
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


def quantize_linear(x: np.ndarray, scale: np.ndarray, zero_point: object, dtype: object,
                    axis: int | None, block_size: int, out: np.ndarray | None) -> np.ndarray:  # fmt: skip
    """``quantize_linear`` with blocks: ``x`` and ``scale`` already float32/float16 of one dtype."""
    if dtype is None:  # a zero point's integer dtype, else uint8
        carried = None if zero_point is None else np.asarray(zero_point).dtype
        dtype = carried if carried in INTEGER_TYPES else np.uint8
    out_dtype = _integer_dtype(dtype)
    shape = x.shape if x.ndim else (1,)
    blocks = block_shape(shape, scale.shape, axis, block_size)
    scale = scale.reshape(blocks)
    zero_point = _zero_point(zero_point, out_dtype, blocks)
    float_type, integer_type = DataType.from_dtype(x.dtype), _DATA_TYPES[out_dtype]
    views, tensors = _quantization(scale, zero_point, float_type, integer_type)
    desc = Quantize(input=TensorDesc(float_type, shape), quantization_type=QuantizationType(len(tensors)),
                    quantization_tensors=tensors, output=TensorDesc(integer_type, shape))  # fmt: skip
    operator = _DEVICE.compile_operator(desc)
    if out_dtype in FOUR_BIT_DTYPES:
        target = _output_nibbles(shape, out_dtype)
        operator.run_arrays({"input": x.reshape(shape), **views}, target)
        result = unpack_int4(target.memory, shape, out_dtype)
    else:
        result = np.empty(shape, out_dtype)
        operator.run_arrays({"input": x.reshape(shape), **views}, result)
    return _deliver(result.reshape(x.shape), out)


def dequantize_linear(q: object, scale: np.ndarray, zero_point: object, axis: int | None, block_size: int,
                      out: np.ndarray | None) -> np.ndarray:  # fmt: skip
    """``dequantize_linear`` with blocks: ``scale`` already float32 or float16."""
    q = np.asarray(q)
    if q.dtype not in INTEGER_TYPES:
        raise DmlError(f"q: dtype {q.dtype} is not int4, uint4, int8 or uint8 (with axis or block_size)")
    shape = q.shape if q.ndim else (1,)
    blocks = block_shape(shape, scale.shape, axis, block_size)
    scale = scale.reshape(blocks)
    zero_point = _zero_point(zero_point, q.dtype, blocks)
    float_type, integer_type = DataType.from_dtype(scale.dtype), _DATA_TYPES[q.dtype]
    views, tensors = _quantization(scale, zero_point, float_type, integer_type)
    desc = Dequantize(input=TensorDesc(integer_type, shape), quantization_type=QuantizationType(len(tensors)),
                      quantization_tensors=tensors, output=TensorDesc(float_type, shape))  # fmt: skip
    operator = _DEVICE.compile_operator(desc)
    data = q.reshape(shape)
    if q.dtype in FOUR_BIT_DTYPES:
        data = Nibbles(pack_int4(data), shape, packed_strides(shape), q.dtype)
    result = np.empty(shape, scale.dtype)
    operator.run_arrays({"input": data, **views}, result)
    return _deliver(result.reshape(q.shape), out)
