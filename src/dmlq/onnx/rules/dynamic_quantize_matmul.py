"""com.microsoft DynamicQuantizeMatMul 1 (``Operators/OperatorRegistration.cpp``: A float32, B int8 or
uint8) becomes DYNAMIC_QUANTIZE_LINEAR then MATRIX_MULTIPLY_INTEGER_TO_FLOAT, one operator graph
(``Operators/DmlOperatorDynamicQuantizeMatMul.cpp``, onnxruntime commit
c4780e65b57e8c7e3f8f184a80c25aabc5530b06).

A and B take the output's leading (batch) sizes, the output being right-aligned to at least 4
dimensions (zero strides where they broadcast); A is quantized **to B's data type** (int8 A for
int8 weights, where onnxruntime CPU quantizes A to uint8), its scale FLOAT32 and zero point of
B's type all-ones shaped with the output's dimension count, and those three feed the multiply's A
fields; B's scale and zero point are right-aligned to 4 dimensions, the bias broadcast to the
output's sizes. The kernel refuses (``ML_CHECK_VALID_ARGUMENT``) A or B of fewer than 2 dimensions
and ones of 2 fewer dimensions than the output's description.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx

from ...errors import DmlError
from ...ops import DynamicQuantizeLinear, MatrixMultiplyIntegerToFloat
from ...tensor import TensorDesc
from ...types import DataType
from ..descs import broadcast_desc, data_type, matmul_shapes, own_desc, padded
from ..graph import Graph
from ..loading import MICROSOFT
from ..steps import Described, Node, Output, Spec, required
from . import Mapped

__all__ = ["NODES", "rule"]

NODES = {(MICROSOFT, "DynamicQuantizeMatMul"): None}
SOURCE = "DmlOperatorDynamicQuantizeMatMul.cpp"
QUANTIZED = (0, 0), (0, 1), (0, 2)  # the first operator's outputs: A quantized, its scale, its zero point


def rule(graph: Graph, node: onnx.NodeProto) -> Mapped:
    inputs = tuple((list(node.input) + [""] * 5)[:5])  # A, B, b_scale, b_zero_point, bias
    return Mapped((DynamicQuantizeLinear, MatrixMultiplyIntegerToFloat), build, inputs, SOURCE)


def build(node: onnx.NodeProto, specs: Sequence[Spec | None]) -> Described:
    a, b, b_scale, b_zero_point, bias = specs
    a, b, b_scale = required(a), required(b), required(b_scale)
    shape = matmul_shapes(a, b).shape
    sizes = padded(shape)
    count = len(sizes)
    for name, spec in (("A", a), ("B", b)):
        if len(spec.shape) < 2 or len(spec.shape) + 2 < count:
            raise DmlError(
                f"{name}: {len(spec.shape)}-D, the kernel takes 2-D or more, at least the output's {count} "
                f"dimensions less 2 (ML_CHECK_VALID_ARGUMENT, {SOURCE})"
            )
    a_desc = broadcast_desc(a, sizes[:2] + a.shape[len(a.shape) - count + 2 :], "A")
    quantized = TensorDesc(data_type(b.dtype), a_desc.sizes, a_desc.strides)
    scale = TensorDesc(DataType.FLOAT32, (1,) * count)
    zero_point = TensorDesc(data_type(b.dtype), (1,) * count)
    first = DynamicQuantizeLinear(
        input=a_desc, output=quantized, output_scale=scale, output_zero_point=zero_point
    )
    second = MatrixMultiplyIntegerToFloat(
        a=quantized,
        a_scale=scale,
        a_zero_point=zero_point,
        b=broadcast_desc(b, sizes[:2] + b.shape[len(b.shape) - count + 2 :], "B"),
        b_scale=own_desc(b_scale),
        b_zero_point=None if b_zero_point is None else own_desc(b_zero_point),
        bias=None if bias is None else broadcast_desc(bias, sizes, "bias"),
        output=TensorDesc(DataType.FLOAT32, sizes),
    )
    sources = (*QUANTIZED, 1, 2, None if b_zero_point is None else 3, None if bias is None else 4)
    nodes = (Node(first, (0,)), Node(second, sources))
    return Described(nodes, (Output(sizes, shape, np.dtype(np.float32), 1, 0),))
