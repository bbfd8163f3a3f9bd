"""The QDQ rules that drop a DQ -> op -> Q pair around an operator that only moves or selects data
(``DropQDQNodesRules``, ``DropDQNodesRules`` and ``SplitQDQRules`` in
``optimizer/qdq_transformer/selectors_actions/qdq_selector_action_transformer.cc``, for the CPU and
DirectML providers; ``DropQDQNodeGroupSelector``, ``DropDQNodeGroupSelector`` and
``SplitNodeGroupSelector`` in ``qdq_selectors.cc``): the op then reads the DQ's quantized input and
writes the Q's output. The Q and DQ need equal constant scalar scales and zero points
(``IsQDQPairSupported``); no 4-bit data; MaxPool (opset 12), ReduceMax and ReduceMin also no 16-bit
data and a positive scale. ArgMax drops its DQ alone. (DepthToSpace and Resize are the CPU
provider's only.)"""

from __future__ import annotations

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
    pair_supported,
    positive_scale,
)

__all__ = ["DROPPED", "drop", "drop_dequantize", "split"]

ANY_SCALE = (
    *("Expand", "Flatten", "Gather", "GatherElements", "Reshape"),
    *("Slice", "Squeeze", "Tile", "Transpose", "Unsqueeze"),
)
POSITIVE_SCALE = ("MaxPool", "ReduceMax", "ReduceMin")
DROPPED = ANY_SCALE + POSITIVE_SCALE


def drop(graph: Graph, target: onnx.NodeProto) -> Fusion | None:
    positive = target.op_type in POSITIVE_SCALE
    if target.op_type == "MaxPool" and graph.since(target) != 12:
        return None
    group = find_group(graph, target)
    if group is None or group.clip is not None or not check_nodes(graph, group, dequantize_count=1):
        return None
    (dequantize,), (quantize,) = group.dequantizes, group.quantizes
    dtype = graph.dtype(dequantize.input[0])
    if dtype != graph.dtype(quantize.output[0]) or dtype in FOUR_BIT or (positive and dtype in SIXTEEN_BIT):
        return None
    if positive and not positive_scale(graph, quantize):
        return None
    if not pair_supported(graph, quantize, dequantize):
        return None
    moved = _moved(
        target, {dequantize.output[0]: dequantize.input[0]}, {target.output[0]: quantize.output[0]}
    )
    op = target.op_type
    rule = f"{SOURCE} (drop rule: DQ -> {op} -> Q dropped, {op} moves the quantized data)"
    return Fusion(moved, covers(graph, group), rule, moved=moved)


def split(graph: Graph, target: onnx.NodeProto) -> Fusion | None:
    group = find_group(graph, target)
    if group is None or group.clip is not None or not check_nodes(graph, group, dequantize_count=1):
        return None
    (dequantize,) = group.dequantizes
    dtype = graph.dtype(dequantize.input[0])
    if dtype in FOUR_BIT:
        return None
    for quantize in group.quantizes:
        if graph.dtype(quantize.output[0]) != dtype or not pair_supported(graph, quantize, dequantize):
            return None
    renamed = {q.input[0]: q.output[0] for q in group.quantizes}
    moved = _moved(target, {dequantize.output[0]: dequantize.input[0]}, renamed)
    rule = f"{SOURCE} (dropSplitQDQ rule: DQ -> Split -> Q nodes dropped, Split moves the quantized data)"
    return Fusion(moved, covers(graph, group), rule, moved=moved)


def drop_dequantize(graph: Graph, target: onnx.NodeProto) -> Fusion | None:
    group = find_group(graph, target)
    if group is None or group.clip is not None or len(group.dequantizes) != 1:
        return None
    (dequantize,) = group.dequantizes
    if graph.dtype(dequantize.input[0]) in (*SIXTEEN_BIT, *FOUR_BIT):
        return None
    has_zero_point = len(dequantize.input) > 2 and dequantize.input[2]
    if not has_zero_point or any(graph.scalar_initializer(name) is None for name in dequantize.input[1:3]):
        return None
    moved = _moved(target, {dequantize.output[0]: dequantize.input[0]}, {})
    rule = f"{SOURCE} (dropDQ rule: DQ -> ArgMax, the DQ dropped)"
    members = {id(dequantize), id(target)}
    return Fusion(moved, tuple(n for n in graph.model.graph.node if id(n) in members), rule, moved=moved)


def _moved(node: onnx.NodeProto, inputs: dict[str, str], outputs: dict[str, str]) -> onnx.NodeProto:
    moved = onnx.NodeProto()
    moved.CopyFrom(node)
    for index, name in enumerate(moved.input):
        if index == 0 and name in inputs:
            moved.input[index] = inputs[name]
    for index, name in enumerate(moved.output):
        moved.output[index] = outputs.get(name, name)
    return moved
