"""Which nodes onnxruntime's DirectML provider takes: its kernel registrations and support queries
(``providers/dml/DmlExecutionProvider/src/Operators/OperatorRegistration.cpp`` and
``ExecutionProvider.cpp``: ``IsNodeSupportedByDml``, at onnxruntime commit
c4780e65b57e8c7e3f8f184a80c25aabc5530b06).

A node goes to the provider when a kernel is registered for its operator's schema version
(``REG_INFO(opset, ...)`` registers the version the opset selects, ``OperatorVersions.h``) with
its tensor types, and the kernel's support query, if any, accepts it; onnxruntime gives every
other node to its CPU provider. Only the operators dmlq's rules need are listed here: the ones
the QDQ transformers rewrite and the ones the provider computes with DirectML's quantized
operators.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeAlias

import ml_dtypes
import numpy as np
import onnx

from .descs import attribute
from .graph import Graph
from .loading import MICROSOFT

__all__ = ["KERNELS", "Kernel", "unclaimed"]

F32, F16 = np.dtype(np.float32), np.dtype(np.float16)
FLOATS = (F32, F16)
BYTES = (np.dtype(np.uint8), np.dtype(np.int8))
NIBBLES = (np.dtype(ml_dtypes.uint4), np.dtype(ml_dtypes.int4))
I32 = (np.dtype(np.int32),)
INTEGERS = (*BYTES, *I32, np.dtype(np.int16), np.dtype(np.uint16), np.dtype(np.int64), np.dtype(np.uint64),
            np.dtype(np.uint32))  # fmt: skip


Dtypes: TypeAlias = "tuple[np.dtype, ...]"
RowTypes: TypeAlias = "tuple[Dtypes | None, Dtypes | None]"  # a row's first input's and first output's


@dataclass(frozen=True)
class Kernel:
    """A registration: the ``REG_INFO`` opsets of its rows, the types of its first input and first
    output per row (keyed by the row's opset; ``None``: any), and its support query."""

    opsets: tuple[int, ...]
    types: dict[int, RowTypes]
    query: Callable[[Graph, onnx.NodeProto], str | None] | None = None


def _same(opsets: tuple[int, ...], inputs: Dtypes | None, outputs: Dtypes | None) -> dict[int, RowTypes]:
    return dict.fromkeys(opsets, (inputs, outputs))


def _query_max_pool(graph: Graph, node: onnx.NodeProto) -> str | None:
    """``QueryMaxPool`` (DmlOperatorPooling.cpp): no storage_order other than 0."""
    return "QueryMaxPool refuses storage_order != 0" if attribute(node, "storage_order", 0) else None


def _query_qlinear_sigmoid(graph: Graph, node: onnx.NodeProto) -> str | None:
    """``QueryQLinearSigmoid`` (DmlOperatorQLinearSigmoid.cpp): both zero points present."""
    return "QueryQLinearSigmoid refuses a node without both zero points" if len(node.input) < 5 else None


def _query_matmul_nbits(graph: Graph, node: onnx.NodeProto) -> str | None:
    """``QueryMatMulNBits`` (DmlOperatorMatMulNBits.cpp): 4 or 8 bits, K a multiple of block_size."""
    bits, k, block = (int(attribute(node, name, 0)) for name in ("bits", "K", "block_size"))
    if bits not in (4, 8):
        return f"QueryMatMulNBits refuses bits = {bits} (4 or 8 only)"
    if block <= 0 or k % block:
        return f"QueryMatMulNBits refuses K = {k}, not a multiple of block_size = {block}"
    return None


Q8 = (*FLOATS, *I32)
KERNELS: dict[tuple[str, str], Kernel] = {
    ("", "QuantizeLinear"): Kernel(
        (10, 13, 19, 21),
        {
            10: ((F32, *I32), BYTES),
            13: ((F32, *I32), BYTES),
            19: (Q8, BYTES),
            21: (FLOATS, (*BYTES, *NIBBLES)),
        },
    ),
    ("", "DequantizeLinear"): Kernel(
        (10, 13, 19, 21),
        {
            10: ((*BYTES, *I32), (F32,)),
            13: ((*BYTES, *I32), (F32,)),
            19: ((*BYTES, *I32), FLOATS),
            21: ((*BYTES, *NIBBLES), FLOATS),
        },
    ),  # fmt: skip
    (MICROSOFT, "QuantizeLinear"): Kernel((1,), {1: (Q8, BYTES)}),  # registered with opset 19's types
    (MICROSOFT, "DequantizeLinear"): Kernel((1,), {1: ((*BYTES, *I32), FLOATS)}),
    ("", "QLinearMatMul"): Kernel((10, 21), _same((10, 21), BYTES, BYTES)),
    (MICROSOFT, "QLinearAdd"): Kernel((1,), {1: (BYTES, BYTES)}),
    ("", "QLinearConv"): Kernel((10,), {10: (BYTES, BYTES)}),
    ("", "MatMulInteger"): Kernel((10,), {10: (BYTES, I32)}),
    ("", "ConvInteger"): Kernel((10,), {10: (BYTES, I32)}),
    ("", "DynamicQuantizeLinear"): Kernel((11,), {11: ((F32,), BYTES)}),
    (MICROSOFT, "MatMulIntegerToFloat"): Kernel((1,), {1: (BYTES, FLOATS)}),
    (MICROSOFT, "DynamicQuantizeMatMul"): Kernel((1,), {1: ((F32,), (F32,))}),
    (MICROSOFT, "QLinearAveragePool"): Kernel((1,), {1: (BYTES, BYTES)}),
    (MICROSOFT, "QLinearGlobalAveragePool"): Kernel((1,), {1: (BYTES, BYTES)}),
    (MICROSOFT, "QLinearSigmoid"): Kernel((1,), {1: (BYTES, BYTES)}, _query_qlinear_sigmoid),
    (MICROSOFT, "QLinearConcat"): Kernel((1,), {1: (None, BYTES)}),
    (MICROSOFT, "MatMulNBits"): Kernel((1,), {1: (FLOATS, FLOATS)}, _query_matmul_nbits),
    ("", "Add"): Kernel((7, 13, 14), _same((7, 13, 14), (*FLOATS, *INTEGERS), None)),
    ("", "Mul"): Kernel((7, 13, 14), _same((7, 13, 14), (*FLOATS, *INTEGERS), None)),
    ("", "Sum"): Kernel((7, 8, 13), _same((7, 8, 13), FLOATS, None)),
    ("", "MatMul"): Kernel((7, 9, 13), _same((7, 9, 13), FLOATS, None)),
    ("", "Gemm"): Kernel((7, 9, 11, 13), _same((7, 9, 11, 13), FLOATS, None)),
    ("", "Conv"): Kernel((7, 11), _same((7, 11), FLOATS, None)),
    ("", "AveragePool"): Kernel((7, 10, 11, 19), _same((7, 10, 11, 19), FLOATS, None)),
    ("", "GlobalAveragePool"): Kernel((7,), _same((7,), FLOATS, None)),
    ("", "MaxPool"): Kernel(
        (7, 8, 10, 11, 12), _same((7, 8, 10, 11, 12), (*FLOATS, *BYTES), None), _query_max_pool
    ),
    ("", "Sigmoid"): Kernel((7, 13), _same((7, 13), FLOATS, None)),
    ("", "Concat"): Kernel((7, 11, 13), _same((7, 11, 13), None, None)),
    ("", "Relu"): Kernel((7, 13, 14), _same((7, 13, 14), None, None)),
    ("", "LeakyRelu"): Kernel((7, 16), _same((7, 16), FLOATS, None)),
}


def unclaimed(graph: Graph, node: onnx.NodeProto) -> str | None:
    """Why the provider does not take ``node`` (onnxruntime then runs it on its CPU provider), or
    None when it does. Operators not listed here are not dmlq's concern: None."""
    kernel = KERNELS.get((node.domain if node.domain == MICROSOFT else "", node.op_type))
    if kernel is None:
        return None
    since = graph.since(node)
    rows = {_since_version(node, opset): opset for opset in kernel.opsets}
    if since not in rows:
        versions = ", ".join(map(str, sorted(rows)))
        return f"the DirectML provider registers {node.op_type} {versions}, not {since}"
    inputs, outputs = kernel.types[rows[since]]
    for allowed, name, role in ((inputs, node.input[0], "input"), (outputs, node.output[0], "output")):
        dtype = graph.dtype(name) if name else None
        if allowed is not None and dtype is not None and dtype not in allowed:
            return f"the DirectML provider registers {node.op_type} {since} without {dtype} as its {role}"
    return kernel.query(graph, node) if kernel.query else None


def _since_version(node: onnx.NodeProto, opset: int) -> int:
    if node.domain == MICROSOFT:
        return opset
    return onnx.defs.get_schema(node.op_type, opset, "").since_version
