"""The ``MatMul`` QDQ rule (``MatMulQDQRules`` in
``optimizer/qdq_transformer/selectors_actions/qdq_selector_action_transformer.cc``, for the CPU and
DirectML providers; ``MatMulNodeGroupSelector`` in ``qdq_selectors.cc``; ``MatMulReplaceWithQLinear``
in ``qdq_actions.cc``): DQ, DQ -> MatMul -> Q becomes an ONNX QLinearMatMul; DQ, DQ -> MatMul without
a Q becomes a com.microsoft MatMulIntegerToFloat. Not with int8 activations unless
``session.qdqisint8allowed`` is 1 (and then only with int8 weights), never with 16- or 4-bit data."""

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

__all__ = ["matmul"]

INT8 = np.dtype(np.int8)


def matmul(graph: Graph, target: onnx.NodeProto) -> Fusion | None:
    group = find_group(graph, target)
    if group is None or len(group.dequantizes) != 2:
        return None
    activation, weight = (graph.dtype(dq.input[0]) for dq in group.dequantizes)
    if activation == INT8 and (not graph.options.qdq_int8_allowed or weight != activation):
        return None
    if {activation, weight} & {*SIXTEEN_BIT, *FOUR_BIT}:
        return None
    constants: dict[str, np.ndarray] = {}
    a, b = (quantization_inputs(dq, constants, graph) for dq in group.dequantizes)
    if group.quantizes:
        if not check_nodes(graph, group) or graph.dtype(group.quantizes[0].output[0]) != activation:
            return None
        y = quantization_inputs(group.quantizes[0], constants, graph)
        node = fused_node(group, "QLinearMatMul", "", [*a, *b, *y[1:]])
        rule = f"{SOURCE} (MatMul rule: DQ, DQ -> MatMul -> Q as QLinearMatMul)"
        return Fusion(node, covers(graph, group), rule, constants)
    inputs = [a[0], b[0], a[1], b[1], a[2], b[2]]
    node = fused_node(group, "MatMulIntegerToFloat", MICROSOFT, inputs, [target.output[0]])
    del node.attribute[:]
    rule = f"{SOURCE} (MatMul rule: DQ, DQ -> MatMul without a Q as MatMulIntegerToFloat)"
    return Fusion(node, covers(graph, group), rule, constants)
