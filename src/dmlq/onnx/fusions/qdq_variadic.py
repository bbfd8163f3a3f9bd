"""The ``*DQ`` QDQ rule (``VariadicOpQDQRules`` in
``optimizer/qdq_transformer/selectors_actions/qdq_selector_action_transformer.cc``, for the CPU and
DirectML providers: Concat; ``VariadicNodeGroupSelector`` in ``qdq_selectors.cc``;
``VariadicReplaceWithQLinear`` in ``qdq_actions.cc``): DQ, ... -> Concat -> Q becomes a com.microsoft
QLinearConcat (the Q's scale and zero point first, then each input's three), one type throughout,
neither 16- nor 4-bit."""

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

__all__ = ["concat"]


def concat(graph: Graph, target: onnx.NodeProto) -> Fusion | None:
    group = find_group(graph, target)
    if group is None or not check_nodes(graph, group):
        return None
    types = {graph.dtype(dq.input[0]) for dq in group.dequantizes} | {
        graph.dtype(group.quantizes[0].output[0])
    }
    if len(types) != 1 or types & {*SIXTEEN_BIT, *FOUR_BIT}:
        return None
    constants: dict[str, np.ndarray] = {}
    y = quantization_inputs(group.quantizes[0], constants, graph)
    inputs = [name for dq in group.dequantizes for name in quantization_inputs(dq, constants, graph)]
    node = fused_node(group, "QLinearConcat", MICROSOFT, [*y[1:], *inputs])
    rule = f"{SOURCE} (*DQ rule: DQ, ... -> Concat -> Q as QLinearConcat)"
    return Fusion(node, covers(graph, group), rule, constants)
