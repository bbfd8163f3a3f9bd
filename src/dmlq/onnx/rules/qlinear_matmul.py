"""QLinearMatMul 10 and 21 (``Operators/OperatorRegistration.cpp``) becomes
QUANTIZED_LINEAR_MATRIX_MULTIPLY (``Operators/DmlOperatorQLinearMatMul.cpp``, onnxruntime commit
c4780e65b57e8c7e3f8f184a80c25aabc5530b06): A and B 4-D (``MatMulShapeMapping``: a 1-D A is
``[1, K]``, a 1-D B ``[K, 1]``; batches broadcast to the output's); a 1-D A or output scale or zero
point is per-row ``{1, 1, M, 1}`` (placed on the H axis), a 1-D B one per-column ``{1, 1, 1, N}``
(right-aligned); one-element ones are per-tensor."""

from __future__ import annotations

from collections.abc import Sequence

import onnx

from ...errors import DmlError
from ...ops import QuantizedLinearMatrixMultiply
from ...tensor import TensorDesc
from ..descs import broadcast, broadcast_desc, data_type, own_desc, padded
from ..graph import Graph
from ..steps import Described, Spec, described
from . import Mapped

__all__ = ["NODES", "rule"]

NODES = {("", "QLinearMatMul"): None}
SOURCE = "DmlOperatorQLinearMatMul.cpp"


def rule(graph: Graph, node: onnx.NodeProto) -> Mapped:
    return Mapped((QuantizedLinearMatrixMultiply,), build, tuple((list(node.input) + [""] * 8)[:8]), SOURCE)


def build(node: onnx.NodeProto, specs: Sequence[Spec | None]) -> Described:
    a, a_scale, a_zero_point, b, b_scale, b_zero_point, y_scale, y_zero_point = specs
    a_shape = (1, *a.shape) if len(a.shape) == 1 else a.shape
    b_shape = (*b.shape, 1) if len(b.shape) == 1 else b.shape
    if a_shape[-1] != b_shape[-2]:
        raise DmlError(f"B: shape {b.shape} does not continue A's K = {a_shape[-1]}")
    batch = broadcast(a_shape[:-2], b_shape[:-2])
    m, n = a_shape[-2], b_shape[-1]
    sizes = padded((*batch, m, n))
    shape = (*batch, m, n)
    if len(a.shape) == 1:
        shape = shape[:-2] + shape[-1:]
    if len(b.shape) == 1:
        shape = shape[:-1]
    count = len(sizes)
    dtype = y_zero_point.dtype if y_zero_point is not None else a.dtype

    def quantization(spec: Spec | None, per_row: bool) -> TensorDesc | None:
        if spec is None:
            return None
        if len(spec.shape) == 1 and spec.shape[0] != 1:
            laid = (
                (*(1,) * (count - 2), spec.shape[0], 1) if per_row else (*(1,) * (count - 1), spec.shape[0])
            )
            return TensorDesc(data_type(spec.dtype), laid)
        return own_desc(spec, count)

    desc = QuantizedLinearMatrixMultiply(
        a=broadcast_desc(Spec(a.dtype, a_shape), sizes[:-1] + (a_shape[-1],), "A"),
        a_scale=quantization(a_scale, True),
        a_zero_point=quantization(a_zero_point, True),
        b=broadcast_desc(Spec(b.dtype, b_shape), sizes[:-2] + b_shape[-2:], "B"),
        b_scale=quantization(b_scale, False),
        b_zero_point=quantization(b_zero_point, False),
        output_scale=quantization(y_scale, True),
        output_zero_point=quantization(y_zero_point, True),
        output=TensorDesc(data_type(dtype), sizes),
    )
    return described(desc, sizes, shape, dtype)
