"""ConstantFolding (``optimizer/constant_folding.cc``, level 1, before any provider is assigned):
onnxruntime computes on its CPU every deterministic node whose inputs are all constant and keeps
the result as an initializer, so no provider ever sees that node. With the QDQ transformers on
(``session.disable_quant_qdq`` 0) it keeps DequantizeLinear nodes, to preserve QDQ node units,
unless the whole unit DQ -> X -> Q folds (the DQ's only consumer X has one input and one output,
and X's only consumer is a Q)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import onnx

    from ..graph import Graph

__all__ = ["folded"]

NONDETERMINISTIC = {"RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike", "Multinomial"}


def folded(graph: Graph) -> set[str]:
    """The values onnxruntime computes once, at session creation (outputs of folded nodes)."""
    values: set[str] = set()
    keep_dequantize = not graph.options.disable_quant_qdq
    for node in graph.model.graph.node:
        if node.op_type in NONDETERMINISTIC or any(a.type in (5, 10) for a in node.attribute):  # subgraphs
            continue
        inputs = [name for name in node.input if name]
        if not all(name in graph.model.initializers or name in values for name in inputs):
            continue
        if keep_dequantize and node.op_type == "DequantizeLinear" and not _whole_unit_folds(graph, node):
            continue
        values.update(name for name in node.output if name)
    return values


def _whole_unit_folds(graph: Graph, dequantize: onnx.NodeProto) -> bool:
    middle = graph.only_consumer(dequantize.output[0])
    if middle is None or len(middle.input) != 1 or len(middle.output) != 1:
        return False
    quantize = graph.only_consumer(middle.output[0])
    return quantize is not None and quantize.op_type == "QuantizeLinear"
