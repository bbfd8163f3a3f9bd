"""The ``DQMatMulToMatMulNBits`` QDQ rule (``DQMatMulToMatMulNBitsRules`` in
``optimizer/qdq_transformer/selectors_actions/qdq_selector_action_transformer.cc``, for the CPU, CUDA
and DirectML providers; ``DQMatMulNodeGroupSelector`` in ``qdq_selectors.cc``;
``DQMatMulToMatMulNBitsAction`` in ``qdq_actions.cc``): a DQ of constant 4-bit weights, blocked along
axis 0 with a power-of-two block_size of at least 16, as MatMul's second input with no Q after the
MatMul, becomes a com.microsoft MatMulNBits (bits 4; the weights transposed to ``[N, K]`` blocks,
unsigned)."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper

from ..descs import attribute
from ..graph import Graph
from ..loading import MICROSOFT
from .qdq import FOUR_BIT, SOURCE, Fusion, covers, find_group

__all__ = ["matmul_nbits"]

FLOATS = (np.dtype(np.float32), np.dtype(np.float16))


def matmul_nbits(graph: Graph, target: onnx.NodeProto) -> Fusion | None:
    group = find_group(graph, target)
    if group is None or group.clip is not None or group.quantizes or len(group.dequantizes) != 1:
        return None
    (dequantize,) = group.dequantizes
    if len(target.input) < 2 or target.input[1] != dequantize.output[0]:
        return None
    weight, scale = (graph.initializer(name) for name in dequantize.input[:2])
    zero_point_name = dequantize.input[2] if len(dequantize.input) > 2 else ""
    zero_point = graph.initializer(zero_point_name)
    if weight is None or scale is None or (zero_point_name and zero_point is None):
        return None
    if scale.dtype not in FLOATS or weight.dtype not in FOUR_BIT:
        return None
    block = int(attribute(dequantize, "block_size", 0))
    if int(attribute(dequantize, "axis", 1)) != 0 or block < 16 or block & (block - 1):
        return None
    if weight.ndim != 2 or scale.ndim != 2 or (zero_point is not None and zero_point.shape != scale.shape):
        return None
    k, n = weight.shape
    if scale.shape != (-(-k // block), n):
        return None
    node = helper.make_node(
        "MatMulNBits",
        [
            target.input[0],
            dequantize.input[0],
            dequantize.input[1],
            *([zero_point_name] if zero_point_name else []),
        ],
        [target.output[0]],
        name=target.name,
        domain=MICROSOFT,
        K=k,
        N=n,
        bits=4,
        block_size=block,
        accuracy_level=4,
    )
    rule = f"{SOURCE} (DQMatMulToMatMulNBits rule: DQ of 4-bit blocked weights -> MatMul as MatMulNBits)"
    return Fusion(node, covers(graph, group), rule)
