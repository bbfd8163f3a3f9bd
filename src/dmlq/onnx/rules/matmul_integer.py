"""MatMulInteger 10 (``Operators/OperatorRegistration.cpp``: A and B int8 or uint8, Y int32) becomes
MATRIX_MULTIPLY_INTEGER (``Operators/DmlOperatorMatMulInteger.cpp``, onnxruntime commit
c4780e65b57e8c7e3f8f184a80c25aabc5530b06): fields in DirectML's order from ONNX's inputs
``{0, 2, 1, 3}``; A and B as ``MatMulShapeMapping`` gives them (:func:`..descs.matmul_shapes`); A's
zero point placed on the H axis with A's dimension count (``[M]`` is per-row ``{1, 1, M, 1}``), B's
right-aligned to 4 dimensions (``[N]`` is per-column ``{1, 1, 1, N}``)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx

from ...ops import MatrixMultiplyInteger
from ...tensor import TensorDesc
from ...types import DataType
from ..descs import matmul_shapes
from ..graph import Graph
from ..steps import Described, Spec, described, required
from . import Mapped
from .matmul import matmul_fields

__all__ = ["NODES", "rule"]

NODES = {("", "MatMulInteger"): None}
SOURCE = "DmlOperatorMatMulInteger.cpp"


def rule(graph: Graph, node: onnx.NodeProto) -> Mapped:
    a, b, a_zero_point, b_zero_point = (list(node.input) + [""] * 4)[:4]
    return Mapped((MatrixMultiplyInteger,), build, (a, a_zero_point, b, b_zero_point), SOURCE)


def build(node: onnx.NodeProto, specs: Sequence[Spec | None]) -> Described:
    a, a_zero_point, b, b_zero_point = specs
    a, b = required(a), required(b)
    shapes = matmul_shapes(a, b)
    desc = MatrixMultiplyInteger(
        **matmul_fields(shapes, {"a_zero_point": a_zero_point}, {"b_zero_point": b_zero_point}),
        output=TensorDesc(DataType.INT32, shapes.sizes),
    )
    return described(desc, shapes.sizes, shapes.shape, np.dtype(np.int32))
