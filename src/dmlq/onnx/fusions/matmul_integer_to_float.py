"""``MatMulIntegerToFloatFusion`` (``optimizer/matmul_integer_to_float.cc``, level 2, for the CPU,
DirectML and ACL providers, whatever ``session.disable_quant_qdq`` says): MatMulInteger -> Cast ->
Mul by the product of the two scales (a Mul of its own) [-> Add of a constant 1-D bias] becomes a
com.microsoft MatMulIntegerToFloat, as quantize_dynamic writes it after a DynamicQuantizeLinear.
The MatMulInteger, the Cast and the scales' Mul each feed only the next node and no graph output.
On the DirectML provider a MatMulInteger fed by a DynamicQuantizeLinear stays unfused when A and B
together take more than 4 GiB."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import onnx
from onnx import helper

from ..graph import Graph, is_op
from ..loading import MICROSOFT, static_shape

if TYPE_CHECKING:
    from .qdq import Fusion

__all__ = ["fuse"]

SOURCE = "optimizer/matmul_integer_to_float.cc (MatMulIntegerToFloatFusion)"


def fuse(graph: Graph, mul: onnx.NodeProto) -> Fusion | None:
    from .qdq import Fusion

    if graph.since(mul) not in (7, 13, 14):
        return None
    parents = [graph.producer.get(name) for name in mul.input]
    cast = next((p for p in parents if is_op(p, "Cast")), None)
    scales = next((p for p in parents if is_op(p, "Mul")), None)
    matmul = graph.producer.get(cast.input[0]) if cast is not None else None
    if cast is None or scales is None or not is_op(matmul, "MatMulInteger"):
        return None
    if any(graph.only_consumer(node.output[0]) is None for node in (cast, matmul, scales)):
        return None
    if _too_large(graph, matmul):
        return None
    inputs = [matmul.input[0], matmul.input[1], scales.input[0], scales.input[1], "", ""]
    inputs[4:6] = (list(matmul.input[2:4]) + ["", ""])[:2]
    add, bias = _bias(graph, mul)
    output = (add or mul).output[0]
    node = helper.make_node(
        "MatMulIntegerToFloat",
        [*inputs, *([bias] if bias else [])],
        [output],
        name=matmul.name,
        domain=MICROSOFT,
    )
    members = {id(n) for n in (matmul, cast, scales, mul, add) if n is not None}
    covered = tuple(n for n in graph.model.graph.node if id(n) in members)
    return Fusion(node, covered, SOURCE)


def _bias(graph: Graph, mul: onnx.NodeProto) -> tuple[onnx.NodeProto | None, str]:
    add = graph.only_consumer(mul.output[0])
    if not is_op(add, "Add"):
        return None, ""
    for name in add.input[:2]:
        shape = graph.shape(name)
        if graph.is_constant(name) and shape and all(d == 1 for d in shape[:-1]) and (shape[-1] or 0) > 1:
            return add, name
    return None, ""


def _too_large(graph: Graph, matmul: onnx.NodeProto) -> bool:
    """``CheckMatMulLargeTensors``, for a MatMulInteger fed by a DynamicQuantizeLinear."""
    if not is_op(graph.producer.get(matmul.input[0]), "DynamicQuantizeLinear"):
        return False
    a, b = static_shape(graph.shape(matmul.input[0])), static_shape(graph.shape(matmul.input[1]))
    if not a or not b:
        return False
    count = int(np.prod(a)) * int(np.prod(b[: len(b) - len(a)] or (1,))) + int(np.prod(b)) * int(
        np.prod(a[: len(a) - len(b)] or (1,))
    )
    return count * 4 > 2**32 - 1
