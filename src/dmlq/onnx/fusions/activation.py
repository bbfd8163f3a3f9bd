"""The DirectML provider's own activation fusion (``providers/dml/DmlExecutionProvider/src/
GraphTransformer.cpp`` and ``Operators/OperatorUtility.cpp``, ``FusionHelpers`` tables
``c_fusableOps`` / ``c_activationOps``): an Add (since-version 7, 13 or 14) or a two-input Sum
(since-version 8 or 13) whose output feeds exactly one node, a ``Relu`` (since-version 6, 13, 14) or
``LeakyRelu`` (6, 16), and is not a graph output, becomes DmlFusedAdd / DmlFusedSum, which the
provider computes as ELEMENT_WISE_ADD1 with that fused activation ("the filter for activation
functions maps to what DML's fused op internally fuses at the shader level": only these two for
Add and Sum)."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper

from ..graph import Graph
from ..loading import DEFAULT_DOMAINS
from ..provider import unclaimed
from ..rules import DML

__all__ = ["FUSED_SINCE", "FUSING_SINCE", "fuse"]

FUSING_SINCE = {"Add": (7, 13, 14), "Sum": (8, 13)}
FUSED_SINCE = {"Relu": (6, 13, 14), "LeakyRelu": (6, 16)}
FLOATS = (np.dtype(np.float32), np.dtype(np.float16))
SOURCE = "providers/dml/DmlExecutionProvider/src/GraphTransformer.cpp + Operators/OperatorUtility.cpp"


def fuse(graph: Graph, node: onnx.NodeProto):
    from .qdq import Fusion

    if node.domain not in DEFAULT_DOMAINS or graph.since(node) not in FUSING_SINCE[node.op_type]:
        return None
    if node.op_type == "Sum" and len(node.input) != 2:
        return None
    if graph.dtype(node.output[0]) not in FLOATS:  # DmlFusedAdd / DmlFusedSum: float16 and float32 only
        return None
    follower = graph.only_consumer(node.output[0])
    if follower is None or follower.domain not in DEFAULT_DOMAINS or follower.op_type not in FUSED_SINCE:
        return None
    if graph.since(follower) not in FUSED_SINCE[follower.op_type] or len(follower.input) != 1:
        return None
    if unclaimed(graph, node) or unclaimed(graph, follower):  # IsSupportedProvider: both the provider's
        return None
    fused = helper.make_node(
        f"DmlFused{node.op_type}", list(node.input), [follower.output[0]], name=node.name, domain=DML
    )
    fused.attribute.extend(follower.attribute)
    fused.attribute.append(helper.make_attribute("fused_activation", follower.op_type))
    return Fusion(fused, (node, follower), f"{SOURCE} (DmlFused{node.op_type})")
