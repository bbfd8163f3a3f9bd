"""Nodes the provider computes with DirectML operators dmlq does not have yet. Each runs on
onnxruntime CPU in dmlq, as the model's own nodes (ONNX's numbers), and its verdict names the
DirectML operators the provider builds and the kernel that builds them (paths under
``onnxruntime/core/providers/dml/DmlExecutionProvider/src/Operators/``, onnxruntime commit
c4780e65b57e8c7e3f8f184a80c25aabc5530b06).

When the missing operator lands in :mod:`dmlq.ops`, its row here becomes a rule module of its own
(one description builder from the kernel named), as :mod:`.qlinear_conv` is for QLinearConv.
"""

from __future__ import annotations

import onnx

from ..graph import Graph
from ..loading import MICROSOFT
from . import Unmapped

__all__ = ["NODES", "OPERATORS", "rule"]

OPERATORS: dict[tuple[str, str], tuple[str, str, str]] = {  # node -> (operators, the one missing, source)
    (MICROSOFT, "QLinearSigmoid"): (
        "ELEMENT_WISE_DEQUANTIZE_LINEAR + ACTIVATION_SIGMOID + ELEMENT_WISE_QUANTIZE_LINEAR",
        "ACTIVATION_SIGMOID",
        "DmlOperatorQLinearSigmoid.cpp",
    ),
    (MICROSOFT, "QLinearConcat"): (
        "ELEMENT_WISE_DEQUANTIZE_LINEAR + JOIN + ELEMENT_WISE_QUANTIZE_LINEAR",
        "JOIN",
        "DmlOperatorQLinearConcat.cpp",
    ),
}
NODES = dict.fromkeys(OPERATORS)


def rule(graph: Graph, node: onnx.NodeProto) -> Unmapped:
    operators, missing, source = OPERATORS[(MICROSOFT, node.op_type)]
    reason = f"the provider runs DirectML {operators} ({source}); dmlq has no DirectML {missing} yet"
    return Unmapped(reason, missing=missing)
