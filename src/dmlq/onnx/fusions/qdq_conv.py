"""The ``Conv`` QDQ rule (``ConvQDQRules`` in
``optimizer/qdq_transformer/selectors_actions/qdq_selector_action_transformer.cc``, for the CPU,
DirectML and ACL providers; ``ConvNodeGroupSelector`` in ``qdq_selectors.cc``;
``ConvReplaceWithQLinear`` in ``qdq_actions.cc``): DQ x, DQ w[, DQ bias] -> Conv -> Q becomes an
ONNX QLinearConv whose B is the bias DQ's int32 data (the bias DQ is absorbed). The activation and
output types are equal; int8 activations only with ``session.qdqisint8allowed`` and int8 weights;
no 4-bit weights, no 16-bit data; the bias int32."""

from __future__ import annotations

import numpy as np
import onnx

from ..graph import Graph
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

__all__ = ["conv"]


def conv(graph: Graph, target: onnx.NodeProto) -> Fusion | None:
    group = find_group(graph, target)
    if group is None or len(group.dequantizes) < 2 or not check_nodes(graph, group):
        return None
    activation, weight = (graph.dtype(dq.input[0]) for dq in group.dequantizes[:2])
    if graph.dtype(group.quantizes[0].output[0]) != activation or weight in FOUR_BIT:
        return None
    if activation == np.dtype(np.int8) and (not graph.options.qdq_int8_allowed or weight != activation):
        return None
    if len(group.dequantizes) == 3 and graph.dtype(group.dequantizes[2].input[0]) != np.dtype(np.int32):
        return None
    if {activation, weight} & set(SIXTEEN_BIT):
        return None
    constants: dict[str, np.ndarray] = {}
    x, w = (quantization_inputs(dq, constants, graph) for dq in group.dequantizes[:2])
    y = quantization_inputs(group.quantizes[0], constants, graph)
    bias = [group.dequantizes[2].input[0]] if len(group.dequantizes) == 3 else []
    node = fused_node(group, "QLinearConv", "", [*x, *w, *y[1:], *bias])
    rule = f"{SOURCE} (Conv rule: DQ -> Conv -> Q as QLinearConv, the bias DQ absorbed)"
    return Fusion(node, covers(graph, group), rule, constants)
