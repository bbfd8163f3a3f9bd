"""Add (opsets 7, 13, 14) and Sum of exactly two inputs (opsets 8, 13) on float32 / float16
(``Operators/DmlOperatorElementWise.cpp``: ``DmlOperatorElementwiseBinary``, and for Sum
``DmlOperatorElementwiseBinaryLoop``, whose first pair is one ADD; onnxruntime commit
c4780e65b57e8c7e3f8f184a80c25aabc5530b06) become ELEMENT_WISE_ADD with both inputs broadcast to the
output's sizes (at least 4 dimensions); the DmlFusedAdd / DmlFusedSum the provider's activation
fusion makes (:mod:`..fusions.activation`) become ELEMENT_WISE_ADD1 with its Relu or LeakyRelu. A
Sum of one or of three or more inputs is an other node (DirectML runs IDENTITY, or several ADDs in
a row, there); so is an Add of integers."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx

from ... import activations
from ...ops import ElementWiseAdd, ElementWiseAdd1
from ...tensor import TensorDesc
from ..descs import broadcast, broadcast_desc, data_type, padded
from ..graph import Graph
from ..steps import Build, Described, Spec, described, required
from . import DML, Mapped, Unmapped
from .fused_activation import fused_activation

__all__ = ["NODES", "rule"]

NODES = {("", "Add"): None, ("", "Sum"): None, (DML, "DmlFusedAdd"): None, (DML, "DmlFusedSum"): None}
FLOATS = (np.dtype(np.float32), np.dtype(np.float16))
SOURCES = {
    "Add": "DmlOperatorElementWise.cpp (DmlOperatorElementwiseBinary)",
    "Sum": "DmlOperatorElementWise.cpp (DmlOperatorElementwiseBinaryLoop, two inputs: one ADD)",
}


def rule(graph: Graph, node: onnx.NodeProto) -> Mapped | Unmapped:
    kind = node.op_type.removeprefix("DmlFused")
    if kind == "Sum" and len(node.input) != 2:
        return Unmapped(f"Sum of {len(node.input)} inputs is not mapped (two inputs only)")
    if graph.dtype(node.input[0]) not in FLOATS:
        found = graph.dtype(node.input[0]) or "an unknown type"
        return Unmapped(f"{kind} on {found} is not mapped (float32/float16 only)")
    if node.domain == DML:
        activation = fused_activation(node)
        source = f"{SOURCES[kind]} with a fused activation"
        return Mapped((ElementWiseAdd1,), _build(activation), tuple(node.input), source)
    return Mapped((ElementWiseAdd,), _build(None), tuple(node.input), SOURCES[kind])


def _build(activation: activations.Activation | None) -> Build:
    def build(node: onnx.NodeProto, specs: Sequence[Spec | None]) -> Described:
        a, b = specs
        a, b = required(a), required(b)
        shape = broadcast(a.shape, b.shape)
        sizes = padded(shape)
        fields = {
            "a": broadcast_desc(a, sizes, "A"),
            "b": broadcast_desc(b, sizes, "B"),
            "output": TensorDesc(data_type(a.dtype), sizes),
        }
        desc = (
            ElementWiseAdd(**fields)
            if activation is None
            else ElementWiseAdd1(**fields, fused_activation=activation)
        )
        return described(desc, sizes, shape, a.dtype)

    return build
