"""Nodes the provider computes with DirectML operators dmlq does not have yet. Each runs on
onnxruntime CPU in dmlq, as the model's own nodes (ONNX's numbers), and its verdict names the
DirectML operator(s) the provider builds and the kernel that builds them (paths under
``onnxruntime/core/providers/dml/DmlExecutionProvider/src/Operators/``, onnxruntime commit
c4780e65b57e8c7e3f8f184a80c25aabc5530b06). Where the kernel's own checks refuse the node the
provider fails to create its session: :data:`REFUSALS` says why.

When a DirectML operator lands in :mod:`dmlq.ops`, its row here becomes a rule module of its own
(one description builder from the kernel named), as :mod:`.qlinear_matmul` is for QLinearMatMul.
"""

from __future__ import annotations

from collections.abc import Callable

import onnx

from ..graph import Graph
from ..loading import MICROSOFT
from . import Unmapped

__all__ = ["NODES", "OPERATORS", "REFUSALS", "rule"]

OPERATORS: dict[tuple[str, str], tuple[str, str]] = {  # node -> (DirectML operator(s), kernel source)
    ("", "QLinearConv"): ("QUANTIZED_LINEAR_CONVOLUTION", "DmlOperatorQLinearConv.cpp"),
    ("", "ConvInteger"): ("CONVOLUTION_INTEGER", "DmlOperatorConvInteger.cpp"),
    ("", "MatMulInteger"): ("MATRIX_MULTIPLY_INTEGER", "DmlOperatorMatMulInteger.cpp"),
    ("", "DynamicQuantizeLinear"): ("DYNAMIC_QUANTIZE_LINEAR", "DmlOperatorDynamicQuantizeLinear.cpp"),
    (MICROSOFT, "MatMulIntegerToFloat"): (
        "MATRIX_MULTIPLY_INTEGER_TO_FLOAT",
        "DmlOperatorMatMulIntegerToFloat.cpp",
    ),
    (MICROSOFT, "DynamicQuantizeMatMul"): (
        "DYNAMIC_QUANTIZE_LINEAR + MATRIX_MULTIPLY_INTEGER_TO_FLOAT",
        "DmlOperatorDynamicQuantizeMatMul.cpp",
    ),
    (MICROSOFT, "QLinearAveragePool"): (
        "QUANTIZED_LINEAR_AVERAGE_POOLING",
        "DmlOperatorQLinearAveragePooling.cpp",
    ),
    (MICROSOFT, "QLinearGlobalAveragePool"): (
        "QUANTIZED_LINEAR_AVERAGE_POOLING",
        "DmlOperatorQLinearAveragePooling.cpp",
    ),
    (MICROSOFT, "QLinearSigmoid"): (
        "ELEMENT_WISE_DEQUANTIZE_LINEAR + ACTIVATION_SIGMOID + ELEMENT_WISE_QUANTIZE_LINEAR",
        "DmlOperatorQLinearSigmoid.cpp",
    ),
    (MICROSOFT, "QLinearConcat"): (
        "ELEMENT_WISE_DEQUANTIZE_LINEAR + JOIN + ELEMENT_WISE_QUANTIZE_LINEAR",
        "DmlOperatorQLinearConcat.cpp",
    ),
    (MICROSOFT, "MatMulNBits"): ("DEQUANTIZE + GEMM", "DmlOperatorMatMulNBits.cpp"),
    ("", "MatMul"): ("GEMM", "DmlOperatorMatMul.cpp"),
    ("", "Gemm"): ("GEMM", "DmlOperatorGemm.cpp"),
}
NODES = dict.fromkeys(OPERATORS)


def _matmul_nbits(graph: Graph, node: onnx.NodeProto) -> str:
    """``DmlOperatorMatMulNBits``: ``ML_CHECK_VALID_ARGUMENT(!IsInputValid(4) && !IsInputValid(5))``."""
    if any(name for name in node.input[4:6]):
        return "DmlOperatorMatMulNBits does not take the g_idx or bias inputs (ML_CHECK_VALID_ARGUMENT)"
    return ""


def _qlinear_conv(graph: Graph, node: onnx.NodeProto) -> str:
    """``DmlOperatorQLinearConv``: "Input can only be used with 3D/4D tensors."."""
    shape = graph.shape(node.input[0])
    if shape is not None and len(shape) not in (3, 4):
        return f"DmlOperatorQLinearConv takes 3-D or 4-D input only, not {len(shape)}-D"
    return ""


def _qlinear_pool(graph: Graph, node: onnx.NodeProto) -> str:
    """DirectML's QUANTIZED_LINEAR_AVERAGE_POOLING takes 4-D or 5-D data only (the provider pads to 4)."""
    shape = graph.shape(node.input[0])
    if shape is not None and len(shape) > 5:
        return f"QUANTIZED_LINEAR_AVERAGE_POOLING takes up to 5-D data, not {len(shape)}-D"
    return ""


REFUSALS: dict[tuple[str, str], Callable[[Graph, onnx.NodeProto], str]] = {
    (MICROSOFT, "MatMulNBits"): _matmul_nbits,
    ("", "QLinearConv"): _qlinear_conv,
    (MICROSOFT, "QLinearAveragePool"): _qlinear_pool,
}


def rule(graph: Graph, node: onnx.NodeProto) -> Unmapped:
    key = (MICROSOFT if node.domain == MICROSOFT else "", node.op_type)
    operator, source = OPERATORS[key]
    refusal = REFUSALS[key](graph, node) if key in REFUSALS else ""
    reason = f"the provider runs DirectML {operator} ({source}), not yet a DirectML operator of dmlq"
    return Unmapped(reason, missing=operator, refusal=refusal)
