"""QLinearMatMul 10 and 21 (``Operators/OperatorRegistration.cpp``) becomes
QUANTIZED_LINEAR_MATRIX_MULTIPLY (``Operators/DmlOperatorQLinearMatMul.cpp``, onnxruntime commit
c4780e65b57e8c7e3f8f184a80c25aabc5530b06): A and B 4-D (``MatMulShapeMapping``: a 1-D A is
``[1, K]``, a 1-D B ``[K, 1]``; batches broadcast to the output's); A's and the output's scales and
zero points are placed on the H axis with A's dimension count (a 1-D one per-row ``{1, 1, M, 1}``),
B's right-aligned to 4 dimensions (a 1-D one per-column ``{1, 1, 1, N}``); one-element ones are
per-tensor."""

from __future__ import annotations

from collections.abc import Sequence

import onnx

from ...ops import QuantizedLinearMatrixMultiply
from ...tensor import TensorDesc
from ..descs import data_type, matmul_shapes
from ..graph import Graph
from ..steps import Described, Spec, described, required
from . import Mapped
from .matmul import matmul_fields

__all__ = ["NODES", "rule"]

NODES = {("", "QLinearMatMul"): None}
SOURCE = "DmlOperatorQLinearMatMul.cpp"


def rule(graph: Graph, node: onnx.NodeProto) -> Mapped:
    return Mapped((QuantizedLinearMatrixMultiply,), build, tuple((list(node.input) + [""] * 8)[:8]), SOURCE)


def build(node: onnx.NodeProto, specs: Sequence[Spec | None]) -> Described:
    a, a_scale, a_zero_point, b, b_scale, b_zero_point, y_scale, y_zero_point = specs
    a, b = required(a), required(b)
    shapes = matmul_shapes(a, b)
    dtype = y_zero_point.dtype if y_zero_point is not None else a.dtype
    rows = {
        "a_scale": a_scale,
        "a_zero_point": a_zero_point,
        "output_scale": y_scale,
        "output_zero_point": y_zero_point,
    }
    desc = QuantizedLinearMatrixMultiply(
        **matmul_fields(shapes, rows, {"b_scale": b_scale, "b_zero_point": b_zero_point}),
        output=TensorDesc(data_type(dtype), shapes.sizes),
    )
    return described(desc, shapes.sizes, shapes.shape, dtype)
