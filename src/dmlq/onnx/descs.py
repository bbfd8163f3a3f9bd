"""Tensor descriptions as onnxruntime's DirectML provider builds them (``providers/dml/
DmlExecutionProvider/src/TensorDesc.cpp``, onnxruntime commit c4780e65b57e8c7e3f8f184a80c25aabc5530b06:
sizes padded with 1s to at least 4 dimensions, right-aligned unless a kernel places them, zero
strides where an operand broadcasts; ``OperatorAuthorHelper/OperatorHelper.cpp``'s
``MatMulShapeMapping``) and reading a node's attributes."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import overload

import ml_dtypes
import numpy as np
import onnx
from onnx import helper

from ..errors import DmlError
from ..tensor import TensorDesc, packed_strides
from ..types import DataType
from .steps import Spec

__all__ = [
    "C",
    "H",
    "LEFT_ALIGNED",
    "NCHW",
    "W",
    "MatMulShapes",
    "aligned",
    "attribute",
    "broadcast",
    "broadcast_desc",
    "data_type",
    "matmul_shapes",
    "own_desc",
    "padded",
]

NCHW = 4  # the provider's minimum dimension count (NchwDimensionCount)
C, H, W = 1, 2, 3  # placements (OperatorHelper's TensorAxis); W with nothing left-aligned is right alignment
LEFT_ALIGNED = 2**31 - 1  # TensorAxis::LeftAligned: every dimension of the tensor keeps its place
NIBBLES = {np.dtype(ml_dtypes.int4): DataType.INT4, np.dtype(ml_dtypes.uint4): DataType.UINT4}


def data_type(dtype: np.dtype) -> DataType:
    """The DirectML data type of an ONNX tensor's NumPy dtype (4-bit ones as ml_dtypes holds them)."""
    return NIBBLES.get(np.dtype(dtype)) or DataType.from_dtype(dtype)


def padded(shape: Sequence[int], count: int = NCHW) -> tuple[int, ...]:
    shape = tuple(shape)
    return (1,) * max(count - len(shape), 0) + shape


def aligned(
    shape: Sequence[int], placement: int = W, left_aligned: int = 0, count: int = NCHW
) -> tuple[int, ...]:
    """``shape`` padded with 1s to ``count`` dimensions as ``TensorDesc``'s constructor does: up to
    ``placement`` leading 1s, the first ``left_aligned`` dimensions, the 1s left, then the rest.

    >>> aligned((5,)), aligned((5,), C, LEFT_ALIGNED), aligned((2, 3, 7), placement=0, left_aligned=2)
    ((1, 1, 1, 5), (1, 5, 1, 1), (2, 3, 1, 7))
    """
    shape = tuple(shape)
    rank = len(shape)
    left = min(rank, left_aligned)
    fill = max(count, rank) - rank
    leading = min(max(placement, 0), fill)
    trailing = min(max(-placement, 0), fill - leading)
    middle = fill - leading - trailing
    return (1,) * leading + shape[:left] + (1,) * middle + shape[left:] + (1,) * trailing


@dataclass(frozen=True)
class MatMulShapes:
    """A matrix multiply's operands as ``MatMulShapeMapping`` gives them: A ``[..., M, K]`` and B
    ``[..., K, N]`` with the output's batch dimensions (zero strides where they broadcast), the output's
    sizes (at least 4 dimensions) and its ONNX shape."""

    a: TensorDesc
    b: TensorDesc
    sizes: tuple[int, ...]
    shape: tuple[int, ...]


def matmul_shapes(a: Spec, b: Spec) -> MatMulShapes:
    """A 1-D A is ``[1, K]``, a 1-D B ``[K, 1]``; the batches broadcast as NumPy's ``matmul`` does."""
    a_shape = (1, *a.shape) if len(a.shape) == 1 else a.shape
    b_shape = (*b.shape, 1) if len(b.shape) == 1 else b.shape
    if a_shape[-1] != b_shape[-2]:
        raise DmlError(f"B: shape {b.shape} does not continue A's K = {a_shape[-1]}")
    batch = broadcast(a_shape[:-2], b_shape[:-2])
    shape = (*batch, a_shape[-2], b_shape[-1])
    sizes = padded(shape)
    if len(a.shape) == 1:
        shape = shape[:-2] + shape[-1:]
    if len(b.shape) == 1:
        shape = shape[:-1]
    a_desc = broadcast_desc(Spec(a.dtype, a_shape), sizes[:-1] + a_shape[-1:], "A")
    b_desc = broadcast_desc(Spec(b.dtype, b_shape), sizes[:-2] + b_shape[-2:], "B")
    return MatMulShapes(a_desc, b_desc, sizes, shape)


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


@overload
def attribute(node: onnx.NodeProto, name: str, default: str) -> str: ...
@overload
def attribute(node: onnx.NodeProto, name: str, default: float) -> float: ...
@overload
def attribute(node: onnx.NodeProto, name: str, default: object) -> object: ...
def attribute(node: onnx.NodeProto, name: str, default: object) -> object:
    """``node``'s attribute ``name`` (a STRING decoded), or ``default`` if it has none.

    Typed as its default (an int or float default: a number, a str one: a str): each attribute has
    its schema's type, which ``onnx.checker`` holds a loaded model to.
    """
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
