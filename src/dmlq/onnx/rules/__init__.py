"""Nodes to DirectML operator descriptions, as onnxruntime's DirectML provider builds its kernels,
one module per kernel (paths under ``onnxruntime/core/providers/dml/DmlExecutionProvider/src/``,
onnxruntime commit c4780e65b57e8c7e3f8f184a80c25aabc5530b06):

* :mod:`.quantize_linear`: QuantizeLinear / DequantizeLinear 10, 13, 19 and com.microsoft 1
  (``Operators/DmlOperatorElementWise.cpp``, ``DmlOperatorElementwiseQLinear``);
* :mod:`.quantization21`: QuantizeLinear / DequantizeLinear 21 (``DmlOperatorQuantization21``);
* :mod:`.qlinear_matmul`: QLinearMatMul 10, 21 (``Operators/DmlOperatorQLinearMatMul.cpp``);
* :mod:`.qlinear_add`: com.microsoft QLinearAdd (``Operators/DmlOperatorQLinearAdd.cpp``);
* :mod:`.add`: Add, two-input Sum, DmlFusedAdd / DmlFusedSum (``DmlOperatorElementwiseBinary``);
* :mod:`.qlinear_conv`: QLinearConv (``Operators/DmlOperatorQLinearConv.cpp``);
* :mod:`.conv_integer`: ConvInteger (``Operators/DmlOperatorConvInteger.cpp``);
* :mod:`.matmul_integer`: MatMulInteger (``Operators/DmlOperatorMatMulInteger.cpp``);
* :mod:`.matmul_integer_to_float`: com.microsoft MatMulIntegerToFloat
  (``Operators/DmlOperatorMatMulIntegerToFloat.cpp``);
* :mod:`.dynamic_quantize_linear`: DynamicQuantizeLinear (``Operators/DmlOperatorDynamicQuantizeLinear.cpp``);
* :mod:`.dynamic_quantize_matmul`: com.microsoft DynamicQuantizeMatMul, two operators
  (``Operators/DmlOperatorDynamicQuantizeMatMul.cpp``);
* :mod:`.qlinear_average_pool`: com.microsoft QLinearAveragePool and QLinearGlobalAveragePool
  (``Operators/DmlOperatorQLinearAveragePooling.cpp``);
* :mod:`.matmul_nbits`: com.microsoft MatMulNBits, two operators (``Operators/DmlOperatorMatMulNBits.cpp``);
* :mod:`.gemm`: float MatMul and Gemm, DmlFusedMatMul / DmlFusedGemm (``Operators/DmlOperatorMatMul.cpp``,
  ``Operators/DmlOperatorGemm.cpp``);
* :mod:`.family`: the nodes the provider computes with DirectML operators dmlq does not have yet
  (QLinearSigmoid, QLinearConcat): they run on onnxruntime CPU, their verdict naming the operators.

:mod:`.convolution`, :mod:`.matmul` and :mod:`.fused_activation` hold what several kernels build alike.

:func:`map_node` gives a node's :class:`Mapped` description or why it is :class:`Unmapped`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np
import onnx

from ...ops import OperatorDesc
from ..graph import Graph
from ..loading import MICROSOFT
from ..steps import Build

__all__ = ["DML", "OTHER_REASON", "Mapped", "Unmapped", "map_node"]

OTHER_REASON = "no DirectML operator of dmlq"
DML = "com.microsoft.dml"  # the domain of the provider's own fused nodes (kMSDmlDomain)


@dataclass(frozen=True)
class Mapped:
    """A node the provider computes with dmlq's DirectML operators (one, or the graph of them its
    kernel builds, in execution order): the operands the build reads ("" for an absent one), the
    constants the provider adds, the source."""

    operators: tuple[type[OperatorDesc], ...]
    build: Build
    inputs: tuple[str, ...]
    source: str
    constants: Mapping[str, np.ndarray] = field(default_factory=dict)


@dataclass(frozen=True)
class Unmapped:
    """A node onnxruntime CPU computes in dmlq: why, the DirectML operators the provider would run
    that dmlq lacks, and why the provider would fail to create its kernel (its session then fails)."""

    reason: str
    missing: str = ""
    refusal: str = ""


Rule = Callable[[Graph, onnx.NodeProto], "Mapped | Unmapped"]


def _rules() -> dict[tuple[str, str], list[tuple[tuple[int, ...] | None, Rule]]]:
    """Each module's ``NODES``: (domain, op_type) -> the schema versions it takes (None: all)."""
    from . import (
        add,
        conv_integer,
        dynamic_quantize_linear,
        dynamic_quantize_matmul,
        family,
        gemm,
        matmul_integer,
        matmul_integer_to_float,
        matmul_nbits,
        qlinear_add,
        qlinear_average_pool,
        qlinear_conv,
        qlinear_matmul,
        quantization21,
        quantize_linear,
    )

    modules = (quantize_linear, quantization21, qlinear_matmul, qlinear_add, add, qlinear_conv, conv_integer,
               matmul_integer, matmul_integer_to_float, dynamic_quantize_linear, dynamic_quantize_matmul,
               qlinear_average_pool, matmul_nbits, gemm, family)  # fmt: skip
    found: dict[tuple[str, str], list[tuple[tuple[int, ...] | None, Rule]]] = {}
    for module in modules:
        for key, versions in module.NODES.items():
            found.setdefault(key, []).append((versions, module.rule))
    return found


_RULES: dict[tuple[str, str], list[tuple[tuple[int, ...] | None, Rule]]] = {}


def map_node(graph: Graph, node: onnx.NodeProto) -> Mapped | Unmapped:
    """The node's description as the provider builds it (the provider has taken the node)."""
    if not _RULES:
        _RULES.update(_rules())
    domain = node.domain if node.domain in (MICROSOFT, DML) else ""
    for versions, rule in _RULES.get((domain, node.op_type), ()):
        if versions is None or graph.since(node) in versions:
            return rule(graph, node)
    return Unmapped(OTHER_REASON)
