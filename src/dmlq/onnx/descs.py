"""Tensor descriptions as onnxruntime's DirectML provider builds them (``TensorDesc.cpp``: sizes
padded with leading 1s to at least 4 dimensions, right-aligned, zero strides where an operand
broadcasts) and reading a node's attributes."""

from __future__ import annotations

from collections.abc import Sequence

import ml_dtypes
import numpy as np
import onnx
from onnx import helper

from ..errors import DmlError
from ..tensor import TensorDesc, packed_strides
from ..types import DataType
from .steps import Spec

__all__ = ["NCHW", "attribute", "broadcast", "broadcast_desc", "data_type", "own_desc", "padded"]

NCHW = 4  # the provider's minimum dimension count (NchwDimensionCount)
NIBBLES = {np.dtype(ml_dtypes.int4): DataType.INT4, np.dtype(ml_dtypes.uint4): DataType.UINT4}


def data_type(dtype: np.dtype) -> DataType:
    """The DirectML data type of an ONNX tensor's NumPy dtype (4-bit ones as ml_dtypes holds them)."""
    return NIBBLES.get(np.dtype(dtype)) or DataType.from_dtype(dtype)


def padded(shape: Sequence[int], count: int = NCHW) -> tuple[int, ...]:
    shape = tuple(shape)
    return (1,) * max(count - len(shape), 0) + shape


def broadcast_desc(spec: Spec, sizes: tuple[int, ...], field: str) -> TensorDesc:
    """``spec`` read right-aligned against ``sizes``: zero strides where it broadcasts."""
    own = padded(spec.shape, len(sizes))
    if len(own) > len(sizes):
        raise DmlError(f"{field}: shape {spec.shape} has more dimensions than the output {sizes}")
    strides = []
    for size, dim, stride in zip(sizes, own, packed_strides(own)):
        if dim != size and dim != 1:
            raise DmlError(f"{field}: shape {spec.shape} does not broadcast to {sizes}")
        strides.append(stride if dim == size and dim != 1 else 0)
    return TensorDesc(data_type(spec.dtype), sizes, strides)


def own_desc(spec: Spec, count: int = NCHW) -> TensorDesc:
    """``spec``'s own shape, padded to ``count`` dimensions, packed."""
    return TensorDesc(data_type(spec.dtype), padded(spec.shape, count))


def attribute(node: onnx.NodeProto, name: str, default: object) -> object:
    for found in node.attribute:
        if found.name == name:
            value = helper.get_attribute_value(found)
            return value.decode() if isinstance(value, bytes) else value
    return default


def broadcast(*shapes: tuple[int, ...]) -> tuple[int, ...]:
    try:
        return tuple(np.broadcast_shapes(*shapes))
    except ValueError:
        raise DmlError(f"inputs: shapes {', '.join(map(str, shapes))} do not broadcast") from None
