"""Float MatMul (opsets 7, 9, 13) and Gemm (7, 9, 11, 13) on float32 or float16
(``Operators/OperatorRegistration.cpp``; :mod:`..provider` leaves other types to onnxruntime CPU),
and the DmlFusedMatMul / DmlFusedGemm the provider's activation fusion makes of them
(:mod:`..fusions.activation`), become GEMM (onnxruntime commit c4780e65b57e8c7e3f8f184a80c25aabc5530b06):

* MatMul (``Operators/DmlOperatorMatMul.cpp``): A and B as ``MatMulShapeMapping`` gives them (batches
  broadcast through zero strides, any rank: GEMM's own dimension counts decide), no C, TransA and
  TransB NONE, Alpha 1, Beta 0;
* Gemm (``Operators/DmlOperatorGemm.cpp``, ``GemmHelper``: A and B 2-D): A and B right-aligned to 4
  dimensions, C broadcast to the output's sizes, transA/transB/alpha/beta as the node says (ONNX's
  defaults 0, 0, 1, 1);
* the fused activation from ``FusionHelpers::TryGetFusedActivationDesc`` (:mod:`.fused_activation`).
"""

from __future__ import annotations

from collections.abc import Sequence

import onnx

from ...activations import Activation
from ...errors import DmlError
from ...ops import Gemm
from ...tensor import TensorDesc
from ...types import MatrixTransform
from ..descs import attribute, broadcast_desc, data_type, matmul_shapes, own_desc, padded
from ..graph import Graph
from ..steps import Described, Spec, described, required
from . import DML, Mapped
from .fused_activation import fused_activation

__all__ = ["NODES", "rule"]

NODES = {("", "MatMul"): None, ("", "Gemm"): None, (DML, "DmlFusedMatMul"): None, (DML, "DmlFusedGemm"): None}
SOURCES = {"MatMul": "DmlOperatorMatMul.cpp", "Gemm": "DmlOperatorGemm.cpp"}


def rule(graph: Graph, node: onnx.NodeProto) -> Mapped:
    kind = node.op_type.removeprefix("DmlFused")
    source = SOURCES[kind] + (" with a fused activation" if node.domain == DML else "")
    inputs = tuple((list(node.input) + [""] * 3)[:3])
    return Mapped((Gemm,), build_matmul if kind == "MatMul" else build_gemm, inputs, source)


def build_matmul(node: onnx.NodeProto, specs: Sequence[Spec | None]) -> Described:
    a, b, _ = specs
    a, b = required(a), required(b)
    shapes = matmul_shapes(a, b)
    desc = Gemm(
        a=shapes.a,
        b=shapes.b,
        output=TensorDesc(data_type(a.dtype), shapes.sizes),
        alpha=1.0,
        beta=0.0,
        fused_activation=_activation(node),
    )
    return described(desc, shapes.sizes, shapes.shape, a.dtype)


def build_gemm(node: onnx.NodeProto, specs: Sequence[Spec | None]) -> Described:
    a, b, c = specs
    a, b = required(a), required(b)
    if len(a.shape) != 2 or len(b.shape) != 2:
        raise DmlError(f'A, B: {len(a.shape)}-D and {len(b.shape)}-D; "Need 2 dimensions in A." (GemmHelper)')
    trans_a, trans_b = (int(attribute(node, name, 0)) for name in ("transA", "transB"))
    shape = (a.shape[1] if trans_a else a.shape[0], b.shape[0] if trans_b else b.shape[1])
    sizes = padded(shape)
    desc = Gemm(
        a=own_desc(a),
        b=own_desc(b),
        c=None if c is None else broadcast_desc(c, sizes, "C"),
        output=TensorDesc(data_type(a.dtype), sizes),
        trans_a=MatrixTransform(trans_a),
        trans_b=MatrixTransform(trans_b),
        alpha=float(attribute(node, "alpha", 1.0)),
        beta=float(attribute(node, "beta", 1.0)),
        fused_activation=_activation(node),
    )
    return described(desc, sizes, shape, a.dtype)


def _activation(node: onnx.NodeProto) -> Activation | None:
    return fused_activation(node) if node.domain == DML else None
