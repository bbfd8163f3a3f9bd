"""QuantizeLinear and DequantizeLinear 21 (``Operators/OperatorRegistration.cpp``: 8- and 4-bit,
float16 or float32; int32 data is not registered) become DirectML's QUANTIZE / DEQUANTIZE
(``Operators/DmlOperatorElementWise.cpp``, ``DmlOperatorQuantization21``, onnxruntime pull request
21592, commit c4780e65b57e8c7e3f8f184a80c25aabc5530b06).

The provider reads neither ``axis`` nor ``block_size``: every tensor is described by its own ONNX
shape, right-aligned, padded to at least 4 dimensions, with packed strides, so DirectML takes the
blocks from the ratio of the data's sizes to the scale's. A scale blocked along any axis lines up
as ONNX means it; a 1-D per-axis scale lines up with the last dimension whatever ``axis`` says
(where that dimension is not a multiple of its length DirectML refuses the operator). An unsigned
type without a zero point gets one of 0 (a FILL_VALUE_CONSTANT broadcast to the scale's sizes, type
SCALE_ZERO_POINT: DirectML's own default there is the type's midpoint); a signed one is SCALE only.

Where the description means something else than the node, :func:`build` says so in the
description's warning and the step computes what DirectML computes.
"""

from __future__ import annotations

from collections.abc import Sequence

import ml_dtypes
import numpy as np
import onnx
from onnx import helper

from ...ops import Dequantize, Quantize
from ...tensor import TensorDesc
from ...types import QuantizationType
from ..descs import attribute, data_type, own_desc, padded
from ..graph import Graph
from ..steps import Build, Described, Spec, described, required
from . import Mapped, Unmapped

__all__ = ["NODES", "rule"]

NODES = {("", "QuantizeLinear"): (21,), ("", "DequantizeLinear"): (21,)}
SOURCE = "DmlOperatorElementWise.cpp (DmlOperatorQuantization21)"
SIGNED = (np.dtype(np.int8), np.dtype(ml_dtypes.int4))
AXIS_NOT_READ = "the provider does not read axis for opset 21"


def rule(graph: Graph, node: onnx.NodeProto) -> Mapped | Unmapped:
    quantize = node.op_type == "QuantizeLinear"
    x, scale, zero_point = (list(node.input) + ["", ""])[:3]
    integer = _integer_type(graph, node) if quantize else graph.dtype(x)
    if integer is None:
        role = "zero point's" if quantize else "input's"
        return Unmapped(f"{node.op_type} 21 is not mapped: the model's types do not give its {role} dtype")
    constants = {}
    if not zero_point and integer not in SIGNED:
        zero_point = f"{node.output[0]}::zero point 0"
        constants[zero_point] = np.zeros(4, np.uint8)  # raw bytes: 0 in every 8- or 4-bit type
    operator = Quantize if quantize else Dequantize
    build = _build(operator, integer, filled=bool(constants))
    return Mapped((operator,), build, (x, scale, *([zero_point] if zero_point else [])), SOURCE, constants)


def _integer_type(graph: Graph, node: onnx.NodeProto) -> np.dtype | None:
    if len(node.input) > 2 and node.input[2]:
        return graph.dtype(node.input[2])
    requested = int(attribute(node, "output_dtype", 0))
    return helper.tensor_dtype_to_np_dtype(requested) if requested else np.dtype(np.uint8)


def _build(operator: type[Quantize | Dequantize], integer: np.dtype, filled: bool) -> Build:
    """``filled``: the zero point is the provider's constant 0, broadcast to the scale's sizes."""

    def build(node: onnx.NodeProto, specs: Sequence[Spec | None]) -> Described:
        x, scale, zero_point = (*specs, None)[:3]
        x, scale = required(x), required(scale)
        quantization = [own_desc(scale)]
        kind = QuantizationType.SCALE
        if filled:
            kind = QuantizationType.SCALE_ZERO_POINT
            sizes = quantization[0].sizes
            quantization.append(TensorDesc(data_type(integer), sizes, [0] * len(sizes)))
        elif zero_point is not None:
            kind = QuantizationType.SCALE_ZERO_POINT
            quantization.append(own_desc(zero_point))
        dtype = integer if operator is Quantize else scale.dtype
        sizes = padded(x.shape)
        desc = operator(
            input=own_desc(x),
            quantization_type=kind,
            quantization_tensors=quantization,
            output=TensorDesc(data_type(dtype), sizes),
        )
        return described(desc, sizes, x.shape, dtype, _differs_from_onnx(node, x.shape, scale.shape))

    return build


def _differs_from_onnx(node: onnx.NodeProto, shape: tuple[int, ...], scale: tuple[int, ...]) -> str:
    """A warning where DirectML's reading of the scale's own shape is not ONNX's axis and block_size."""
    dml = _dml_blocks(shape, scale)
    if dml is None:
        return ""  # DirectML refuses the description; the verdict says why
    axis = int(attribute(node, "axis", 1))
    block = int(attribute(node, "block_size", 0))
    if np.array_equal(dml, _onnx_blocks(shape, scale, axis % max(len(shape), 1), block)):
        return ""
    return (
        f"{AXIS_NOT_READ}: it describes the scale {list(scale)} by its own shape, right-aligned, so DirectML "
        f"reads it along the data's last dimensions, not along axis {axis}"
        + (f" in blocks of {block}" if block else "")
    )


def _dml_blocks(shape: tuple[int, ...], scale: tuple[int, ...]) -> np.ndarray | None:
    """Which scale element DirectML applies to each data element, or None where it refuses."""
    sizes, blocks = padded(shape), padded(scale)
    if len(sizes) != len(blocks) or any(n == 0 or k % n for k, n in zip(sizes, blocks)):
        return None
    index = np.arange(int(np.prod(blocks))).reshape(blocks)
    for axis, (k, n) in enumerate(zip(sizes, blocks)):
        index = np.repeat(index, k // n, axis=axis)
    return index.reshape(shape)


def _onnx_blocks(shape: tuple[int, ...], scale: tuple[int, ...], axis: int, block: int) -> np.ndarray:
    """Which scale element ONNX applies to each data element (QuantizeLinear-21's axis and block_size)."""
    count = int(np.prod(scale))
    if count == 1:
        return np.zeros(shape, np.int64)
    if block:
        index = np.repeat(np.arange(count).reshape(scale), block, axis=axis)
        return index[tuple(slice(0, size) for size in shape)]
    return np.broadcast_to(
        np.arange(count).reshape((1,) * axis + (count,) + (1,) * (len(shape) - 1 - axis)), shape
    )
