"""com.microsoft QLinearAdd 1 (``Operators/OperatorRegistration.cpp``) becomes
ELEMENT_WISE_QUANTIZED_LINEAR_ADD (``Operators/DmlOperatorQLinearAdd.cpp``, onnxruntime commit
c4780e65b57e8c7e3f8f184a80c25aabc5530b06): A and B broadcast to the output's sizes, the scales and
zero points right-aligned with A's dimension count."""

from __future__ import annotations

from collections.abc import Sequence

import onnx

from ...ops import ElementWiseQuantizedLinearAdd
from ...tensor import TensorDesc
from ..descs import broadcast, broadcast_desc, data_type, own_desc, padded
from ..graph import Graph
from ..loading import MICROSOFT
from ..steps import Described, Spec, described, required
from . import Mapped

__all__ = ["NODES", "rule"]

NODES = {(MICROSOFT, "QLinearAdd"): None}
SOURCE = "DmlOperatorQLinearAdd.cpp"


def rule(graph: Graph, node: onnx.NodeProto) -> Mapped:
    return Mapped((ElementWiseQuantizedLinearAdd,), build, tuple((list(node.input) + [""] * 8)[:8]), SOURCE)


def build(node: onnx.NodeProto, specs: Sequence[Spec | None]) -> Described:
    a, a_scale, a_zero_point, b, b_scale, b_zero_point, y_scale, y_zero_point = specs
    a, b = required(a), required(b)
    shape = broadcast(a.shape, b.shape)
    sizes = padded(shape)
    count = len(padded(a.shape))
    dtype = y_zero_point.dtype if y_zero_point is not None else a.dtype

    def own(spec: Spec | None) -> TensorDesc | None:
        return None if spec is None else own_desc(spec, count)

    desc = ElementWiseQuantizedLinearAdd(
        a=broadcast_desc(a, sizes, "A"),
        a_scale=own(a_scale),
        a_zero_point=own(a_zero_point),
        b=broadcast_desc(b, sizes, "B"),
        b_scale=own(b_scale),
        b_zero_point=own(b_zero_point),
        output_scale=own(y_scale),
        output_zero_point=own(y_zero_point),
        output=TensorDesc(data_type(dtype), sizes),
    )
    return described(desc, sizes, shape, dtype)
