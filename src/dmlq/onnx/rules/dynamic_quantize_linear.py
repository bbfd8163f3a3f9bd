"""DynamicQuantizeLinear 11 (``Operators/OperatorRegistration.cpp``: x float32) becomes
DYNAMIC_QUANTIZE_LINEAR (``Operators/DmlOperatorDynamicQuantizeLinear.cpp``, onnxruntime commit
c4780e65b57e8c7e3f8f184a80c25aabc5530b06): one input, three outputs (y, y_scale, y_zero_point), each
right-aligned to at least 4 dimensions, so the scalar scale and zero point are ``{1, 1, 1, 1}`` (for
data of more than 4 dimensions their dimension count then differs from the data's, which the
operator's page does not allow)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx

from ...ops import DynamicQuantizeLinear
from ...tensor import TensorDesc
from ...types import DataType
from ..descs import own_desc, padded
from ..graph import Graph
from ..steps import Described, Node, Output, Spec, required
from . import Mapped

__all__ = ["NODES", "rule"]

NODES = {("", "DynamicQuantizeLinear"): None}
SOURCE = "DmlOperatorDynamicQuantizeLinear.cpp"
U8, F32 = np.dtype(np.uint8), np.dtype(np.float32)


def rule(graph: Graph, node: onnx.NodeProto) -> Mapped:
    return Mapped((DynamicQuantizeLinear,), build, (node.input[0],), SOURCE)


def build(node: onnx.NodeProto, specs: Sequence[Spec | None]) -> Described:
    (x,) = specs
    x = required(x)
    sizes, one = padded(x.shape), padded(())
    desc = DynamicQuantizeLinear(
        input=own_desc(x),
        output=TensorDesc(DataType.UINT8, sizes),
        output_scale=TensorDesc(DataType.FLOAT32, one),
        output_zero_point=TensorDesc(DataType.UINT8, one),
    )
    outputs = (Output(sizes, x.shape, U8, 0, 0), Output(one, (), F32, 0, 1), Output(one, (), U8, 0, 2))
    return Described((Node(desc, (0,)),), outputs)
