"""The ``1DQ`` QDQ rule (``UnaryOpQDQRules`` in
``optimizer/qdq_transformer/selectors_actions/qdq_selector_action_transformer.cc``, for the CPU and
DirectML providers: AveragePool, GlobalAveragePool and Sigmoid; ``UnaryNodeGroupSelector`` in
``qdq_selectors.cc``; ``UnaryReplaceWithQLinear`` in ``qdq_actions.cc``): DQ -> op -> Q becomes the
com.microsoft QLinear form of the op, with one type in and out, neither 16- nor 4-bit. (LeakyRelu
and Softmax are the CPU provider's ``1DQ_CPU`` rule only: the DirectML provider keeps them.)"""

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

__all__ = ["TARGETS", "unary"]

TARGETS = ("AveragePool", "GlobalAveragePool", "Sigmoid")


def unary(graph: Graph, target: onnx.NodeProto) -> Fusion | None:
    group = find_group(graph, target)
    if group is None or not check_nodes(graph, group, dequantize_count=1):
        return None
    dtype = graph.dtype(group.dequantizes[0].input[0])
    if dtype != graph.dtype(group.quantizes[0].output[0]) or dtype in (*SIXTEEN_BIT, *FOUR_BIT):
        return None
    constants: dict[str, np.ndarray] = {}
    x = quantization_inputs(group.dequantizes[0], constants, graph)
    y = quantization_inputs(group.quantizes[0], constants, graph)
    node = fused_node(group, f"QLinear{target.op_type}", MICROSOFT, [*x, *y[1:]])
    rule = f"{SOURCE} (1DQ rule: DQ -> {target.op_type} -> Q as QLinear{target.op_type})"
    return Fusion(node, covers(graph, group), rule, constants)
