"""com.microsoft MatMulNBits 1 (``Operators/OperatorRegistration.cpp``: A float16 or float32, B uint8;
the support query ``QueryMatMulNBits`` takes bits 4 or 8 and K a multiple of block_size), the
model's or the QDQ DQMatMulToMatMulNBits rule's, becomes DEQUANTIZE then GEMM, one operator graph
(``Operators/DmlOperatorMatMulNBits.cpp``, onnxruntime commit c4780e65b57e8c7e3f8f184a80c25aabc5530b06).

B's bytes are read as UINT4 (bits 4) or UINT8 ``[N, K]`` broadcast to A's leading dimensions (zero
strides); the scales as ``[N, K / block_size]`` likewise; the zero points, packed uint8, as UINT4 or
UINT8 of the scales' sizes, a row of an odd count of 4-bit blocks taking a whole number of bytes (its
row stride rounded up to even). DEQUANTIZE writes ``[..., N, K]`` in A's float type (SCALE alone
without zero points: DirectML's midpoint 8 or 128, MatMulNBits' default ``2^(bits - 1)``); GEMM
multiplies A (its own dimensions) by it with TransB, Alpha 1, Beta 0, no C. The kernel refuses
(``ML_CHECK_VALID_ARGUMENT``) the g_idx and bias inputs and an A of fewer than 2 dimensions. dmlq
maps uint8 zero points only: the provider reads any zero point's bytes as UINT4 or UINT8.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx

from ...errors import DmlError
from ...ops import Dequantize, Gemm
from ...tensor import TensorDesc
from ...types import DataType, MatrixTransform, QuantizationType
from ..descs import attribute, data_type
from ..graph import Graph
from ..loading import MICROSOFT
from ..steps import Described, Node, Output, Spec, required
from . import Mapped, Unmapped

__all__ = ["NODES", "rule"]

NODES = {(MICROSOFT, "MatMulNBits"): None}
SOURCE = "DmlOperatorMatMulNBits.cpp"


def rule(graph: Graph, node: onnx.NodeProto) -> Mapped | Unmapped:
    inputs = tuple((list(node.input) + [""] * 6)[:6])  # A, B, scales, zero_points, g_idx, bias
    if inputs[3] and graph.dtype(inputs[3]) not in (None, np.dtype(np.uint8)):
        found = graph.dtype(inputs[3])
        return Unmapped(f"MatMulNBits with {found} zero points is not mapped (uint8 only: the provider reads "
                        f"their bytes as UINT4 or UINT8, {SOURCE})")  # fmt: skip
    return Mapped((Dequantize, Gemm), build, inputs, SOURCE)


def build(node: onnx.NodeProto, specs: Sequence[Spec | None]) -> Described:
    a, b, scales, zero_points, g_idx, bias = specs
    a, scales = required(a), required(scales)
    if g_idx is not None or bias is not None:
        raise DmlError(f"g_idx, bias: the kernel takes neither (ML_CHECK_VALID_ARGUMENT, {SOURCE})")
    if len(a.shape) < 2:
        raise DmlError(
            f"A: {len(a.shape)}-D, the kernel takes 2-D or more (ML_CHECK_VALID_ARGUMENT, {SOURCE})"
        )
    n, k, bits = (int(attribute(node, name, 0)) for name in ("N", "K", "bits"))
    if bits not in (4, 8):
        raise DmlError(f"bits: {bits}, the kernel takes 4 or 8 (ML_CHECK_VALID_ARGUMENT, {SOURCE})")
    quantized = DataType.UINT4 if bits == 4 else DataType.UINT8
    batch = a.shape[:-2]
    blocks = int(np.prod(scales.shape)) // n
    tensors = [_weights(data_type(scales.dtype), batch, (n, blocks))]
    if zero_points is not None:  # ORT's bytes: a row of an odd count of nibbles ends with a spare one
        row = blocks + 1 if bits == 4 and blocks % 2 else blocks
        tensors.append(_weights(quantized, batch, (n, blocks), row))
    float_type = data_type(a.dtype)
    dequantized = TensorDesc(float_type, (*batch, n, k))
    first = Dequantize(
        input=_weights(quantized, batch, (n, k)),
        quantization_type=QuantizationType(len(tensors)),
        quantization_tensors=tensors,
        output=dequantized,
    )
    shape = (*a.shape[:-1], n)
    second = Gemm(
        a=TensorDesc(float_type, a.shape),
        b=dequantized,
        output=TensorDesc(float_type, shape),
        trans_b=MatrixTransform.TRANSPOSE,
        alpha=1.0,
        beta=0.0,
    )
    nodes = (Node(first, (1, 2, 3)[: 1 + len(tensors)]), Node(second, (0, (0, 0), None)))
    return Described(nodes, (Output(shape, shape, a.dtype, 1, 0),))


def _weights(
    kind: DataType, batch: tuple[int, ...], shape: tuple[int, int], row: int | None = None
) -> TensorDesc:
    """A ``[rows, columns]`` constant broadcast to A's leading dimensions
    (``ConstructBroadcastedTensorDesc``), its rows ``row`` elements apart (default: packed)."""
    return TensorDesc(kind, (*batch, *shape), (0,) * len(batch) + (row or shape[1], 1))
