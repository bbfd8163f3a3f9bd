"""QuantizeLinear and DequantizeLinear 10, 13, 19 and com.microsoft 1 (``Operators/
OperatorRegistration.cpp``; the com.microsoft ones registered with opset 19's types) become
ELEMENT_WISE_QUANTIZE_LINEAR / ELEMENT_WISE_DEQUANTIZE_LINEAR (``Operators/DmlOperatorElementWise.cpp``,
``DmlOperatorElementwiseQLinear``, onnxruntime commit c4780e65b57e8c7e3f8f184a80c25aabc5530b06).

Every tensor has at least 4 dimensions, right-aligned. ``axis`` is read when the node has the
attribute, and onnxruntime fills in the schema's default (``graph.cc``: axis 1 for opsets 13 and 19;
opset 10 and com.microsoft 1 have no default, so axis 0 there). A 1-D scale or zero point that is not
the data's own shape lies along ``axis``: ``axis`` must be one of the data's dimensions and the
length that dimension's, or 1 ("treat as broadcast dimension to match CPU behavior"), else the
provider fails to create the kernel (``ML_CHECK_VALID_ARGUMENT``). Any other shape broadcasts
right-aligned. A missing zero point stays absent.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import onnx
from onnx import helper

from ...errors import DmlError
from ...ops import ElementWiseDequantizeLinear, ElementWiseQuantizeLinear
from ...tensor import TensorDesc
from ..descs import attribute, broadcast_desc, data_type, own_desc, padded
from ..graph import Graph
from ..loading import MICROSOFT
from ..steps import Build, Described, Spec, described, required
from . import Mapped

__all__ = ["NODES", "rule"]

NODES = {
    ("", "QuantizeLinear"): (10, 13, 19),
    ("", "DequantizeLinear"): (10, 13, 19),
    (MICROSOFT, "QuantizeLinear"): None,
    (MICROSOFT, "DequantizeLinear"): None,
}
SOURCE = "DmlOperatorElementWise.cpp (DmlOperatorElementwiseQLinear)"


def rule(graph: Graph, node: onnx.NodeProto) -> Mapped:
    default_axis = 1 if node.domain != MICROSOFT and graph.since(node) in (13, 19) else 0
    axis = int(attribute(node, "axis", default_axis))
    inputs = tuple((list(node.input) + ["", ""])[:3])
    if node.op_type == "QuantizeLinear":
        return Mapped(
            (ElementWiseQuantizeLinear,),
            _build(ElementWiseQuantizeLinear, axis, _quantized(node)),
            inputs,
            SOURCE,
        )
    return Mapped(
        (ElementWiseDequantizeLinear,), _build(ElementWiseDequantizeLinear, axis, _scale_type), inputs, SOURCE
    )


def _build(
    operator: type[ElementWiseQuantizeLinear | ElementWiseDequantizeLinear],
    axis: int,
    output_dtype: Callable[[Sequence[Spec | None]], np.dtype],
) -> Build:
    def build(node: onnx.NodeProto, specs: Sequence[Spec | None]) -> Described:
        x, scale, zero_point = specs
        x, scale = required(x), required(scale)
        sizes = padded(x.shape)
        laid_scale = _along_axis(scale, x.shape, axis, "scale")
        laid_zero = None if zero_point is None else _along_axis(zero_point, x.shape, axis, "zero_point")
        dtype = output_dtype(specs)
        desc = operator(
            input=own_desc(x, len(sizes)),
            scale=broadcast_desc(laid_scale, sizes, "scale"),
            zero_point=None if laid_zero is None else broadcast_desc(laid_zero, sizes, "zero_point"),
            output=TensorDesc(data_type(dtype), sizes),
        )
        return described(desc, sizes, x.shape, dtype)

    return build


def _along_axis(spec: Spec, shape: tuple[int, ...], axis: int, field: str) -> Spec:
    """A 1-D scale or zero point laid along ``axis`` of the data (the provider's reshape)."""
    if len(spec.shape) != 1 or spec.shape == shape:
        return spec
    if axis < 0:
        axis += len(shape)
    if not 0 <= axis < len(shape):
        raise DmlError(
            f"{field}: the provider reads a 1-D {field} of {spec.shape[0]} element(s) along axis {axis}, "
            f"which the {len(shape)}-D data does not have (DmlOperatorElementwiseQLinear: "
            "ML_CHECK_VALID_ARGUMENT(axis < outputShapeDimCount))"
        )
    if spec.shape[0] not in (shape[axis], 1):
        raise DmlError(f"{field}: {spec.shape[0]} elements, but the data has {shape[axis]} along axis {axis}")
    return Spec(spec.dtype, (1,) * axis + spec.shape + (1,) * (len(shape) - 1 - axis))


def _quantized(node: onnx.NodeProto) -> Callable[[Sequence[Spec | None]], np.dtype]:
    def dtype(specs: Sequence[Spec | None]) -> np.dtype:
        if specs[2] is not None:
            return specs[2].dtype
        requested = int(attribute(node, "output_dtype", 0))
        return helper.tensor_dtype_to_np_dtype(requested) if requested else np.dtype(np.uint8)

    return dtype


def _scale_type(specs: Sequence[Spec | None]) -> np.dtype:
    return required(specs[1]).dtype
