"""com.microsoft MatMulIntegerToFloat 1 (``Operators/OperatorRegistration.cpp``: A and B int8 or uint8,
scales and output float32 or float16), the model's, MatMulIntegerToFloatFusion's or the QDQ MatMul
rule's without a Q, becomes MATRIX_MULTIPLY_INTEGER_TO_FLOAT (``Operators/
DmlOperatorMatMulIntegerToFloat.cpp``, onnxruntime commit c4780e65b57e8c7e3f8f184a80c25aabc5530b06):
fields in DirectML's order from ONNX's inputs ``{0, 2, 4, 1, 3, 5, 6}``; A and B as
``MatMulShapeMapping`` gives them; A's scale and zero point on the H axis (per-row), B's
right-aligned to 4 dimensions (per-column); the bias broadcast to the output's sizes."""

from __future__ import annotations

from collections.abc import Sequence

import onnx

from ...ops import MatrixMultiplyIntegerToFloat
from ...tensor import TensorDesc
from ..descs import broadcast_desc, data_type, matmul_shapes
from ..graph import Graph
from ..loading import MICROSOFT
from ..steps import Described, Spec, described, required
from . import Mapped
from .matmul import matmul_fields

__all__ = ["NODES", "rule"]

NODES = {(MICROSOFT, "MatMulIntegerToFloat"): None}
SOURCE = "DmlOperatorMatMulIntegerToFloat.cpp"
ORDER = (0, 2, 4, 1, 3, 5, 6)  # inputIndices


def rule(graph: Graph, node: onnx.NodeProto) -> Mapped:
    inputs = (list(node.input) + [""] * 7)[:7]
    return Mapped((MatrixMultiplyIntegerToFloat,), build, tuple(inputs[index] for index in ORDER), SOURCE)


def build(node: onnx.NodeProto, specs: Sequence[Spec | None]) -> Described:
    a, a_scale, a_zero_point, b, b_scale, b_zero_point, bias = specs
    a, b, a_scale = required(a), required(b), required(a_scale)
    shapes = matmul_shapes(a, b)
    desc = MatrixMultiplyIntegerToFloat(
        **matmul_fields(shapes, {"a_scale": a_scale, "a_zero_point": a_zero_point},
                        {"b_scale": b_scale, "b_zero_point": b_zero_point}),
        bias=None if bias is None else broadcast_desc(bias, shapes.sizes, "bias"),
        output=TensorDesc(data_type(a_scale.dtype), shapes.sizes),
    )  # fmt: skip
    return described(desc, shapes.sizes, shapes.shape, a_scale.dtype)
