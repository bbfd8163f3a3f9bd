"""The ``2DQ_DML`` QDQ rule (``BinaryOpQDQRules`` in
``optimizer/qdq_transformer/selectors_actions/qdq_selector_action_transformer.cc``, DirectML only,
Add only; ``BinaryNodeGroupSelector`` in ``qdq_selectors.cc``; ``BinaryReplaceWithQLinear`` in
``qdq_actions.cc``): DQ, DQ -> Add -> Q becomes a com.microsoft QLinearAdd, when both inputs and the
output share one type that is neither 16- nor 4-bit. (The CPU provider's ``2DQ`` rule also takes
Mul; the DirectML provider has no QLinearMul.)"""

from __future__ import annotations

import numpy as np
import onnx

from ..graph import Graph
from ..loading import MICROSOFT
from .qdq import (
    FOUR_BIT,
    SIXTEEN_BIT,
    SOURCE,
    Fusion,
    check_nodes,
    covers,
    find_group,
    fused_node,
    quantization_inputs,
)

__all__ = ["binary"]


def binary(graph: Graph, target: onnx.NodeProto) -> Fusion | None:
    group = find_group(graph, target)
    if group is None or not check_nodes(graph, group) or len(group.dequantizes) != 2:
        return None
    types = {graph.dtype(dq.input[0]) for dq in group.dequantizes} | {
        graph.dtype(group.quantizes[0].output[0])
    }
    if len(types) != 1 or types & {*SIXTEEN_BIT, *FOUR_BIT}:
        return None
    constants: dict[str, np.ndarray] = {}
    a, b = (quantization_inputs(dq, constants, graph) for dq in group.dequantizes)
    y = quantization_inputs(group.quantizes[0], constants, graph)
    node = fused_node(group, "QLinearAdd", MICROSOFT, [*a, *b, *y[1:]])
    rule = f"{SOURCE} (2DQ_DML rule: DQ, DQ -> Add -> Q as QLinearAdd)"
    return Fusion(node, covers(graph, group), rule, constants)
