"""ConvInteger 10 (``Operators/OperatorRegistration.cpp``: x and w int8 or uint8, y int32) becomes
CONVOLUTION_INTEGER (``Operators/DmlOperatorConvInteger.cpp``, onnxruntime commit
c4780e65b57e8c7e3f8f184a80c25aabc5530b06): fields in DirectML's order from ONNX's inputs
``{0, 2, 1, 3}`` (x, x's zero point, w, w's zero point); input, filter, output and window as
:mod:`.convolution` says (3-D to 5-D input: the kernel itself has no rank check); x's zero point
right-aligned to 4 dimensions, w's on the C axis (``{1, M, 1, 1}`` from ``[M]``)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx

from ...ops import ConvolutionInteger
from ...tensor import TensorDesc
from ...types import DataType
from ..descs import own_desc
from ..graph import Graph
from ..steps import Described, Spec, described, required
from . import Mapped
from .convolution import convolution, per_channel

__all__ = ["NODES", "rule"]

NODES = {("", "ConvInteger"): None}
SOURCE = "DmlOperatorConvInteger.cpp"


def rule(graph: Graph, node: onnx.NodeProto) -> Mapped:
    x, w, x_zero_point, w_zero_point = (list(node.input) + [""] * 4)[:4]
    return Mapped((ConvolutionInteger,), build, (x, x_zero_point, w, w_zero_point), SOURCE)


def build(node: onnx.NodeProto, specs: Sequence[Spec | None]) -> Described:
    x, x_zero_point, w, w_zero_point = specs
    x, w = required(x), required(w)
    shapes = convolution(node, x, w)
    desc = ConvolutionInteger(
        input=shapes.input,
        input_zero_point=None if x_zero_point is None else own_desc(x_zero_point),
        filter=shapes.filter,
        filter_zero_point=per_channel(w_zero_point, len(shapes.input.sizes)),
        output=TensorDesc(DataType.INT32, shapes.sizes),
        **shapes.window,
    )
    return described(desc, shapes.sizes, shapes.shape, np.dtype(np.int32))
