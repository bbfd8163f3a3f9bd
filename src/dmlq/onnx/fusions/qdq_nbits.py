"""The ``DQMatMulToMatMulNBits`` QDQ rule (``DQMatMulToMatMulNBitsRules`` in
``optimizer/qdq_transformer/selectors_actions/qdq_selector_action_transformer.cc``, for the CPU, CUDA
and DirectML providers; ``DQMatMulNodeGroupSelector`` in ``qdq_selectors.cc``;
``DQMatMulToMatMulNBitsAction`` in ``qdq_actions.cc``): a DQ of constant 4-bit weights, blocked along
axis 0 with a power-of-two block_size of at least 16, as MatMul's second input with no Q after the
MatMul, becomes a com.microsoft MatMulNBits (bits 4). The action writes its constants
(``MlasQDQTransposeBlockwiseQuantized``, ``onnxruntime/core/mlas/lib/q4_dq.cpp``): the weights
transposed to uint8 ``[N, K / block, block / 2]`` (two nibbles a byte, the first low), the scales to
``[N * K / block]``, the zero points to uint8 ``[N * ceil(blocks / 2)]`` per row; signed int4 values
are made unsigned by flipping their sign bit (``v ^ 8``, ``v + 8``), and an int4 DQ without zero
point gets none (MatMulNBits' default 8), a uint4 one explicit zeros."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import onnx
from onnx import helper

from ..descs import attribute
from ..graph import Graph
from ..loading import MICROSOFT
from .qdq import FOUR_BIT, SOURCE, Fusion, covers, find_group

__all__ = ["matmul_nbits"]

FLOATS = (np.dtype(np.float32), np.dtype(np.float16))


def matmul_nbits(graph: Graph, target: onnx.NodeProto) -> Fusion | None:
    group = find_group(graph, target)
    if group is None or group.clip is not None or group.quantizes or len(group.dequantizes) != 1:
        return None
    (dequantize,) = group.dequantizes
    if len(target.input) < 2 or target.input[1] != dequantize.output[0]:
        return None
    weight, scale = (graph.initializer(name) for name in dequantize.input[:2])
    zero_point_name = dequantize.input[2] if len(dequantize.input) > 2 else ""
    zero_point = graph.initializer(zero_point_name)
    if weight is None or scale is None or (zero_point_name and zero_point is None):
        return None
    if scale.dtype not in FLOATS or weight.dtype not in FOUR_BIT:
        return None
    block = int(attribute(dequantize, "block_size", 0))
    if int(attribute(dequantize, "axis", 1)) != 0 or block < 16 or block & (block - 1):
        return None
    if weight.ndim != 2 or scale.ndim != 2 or (zero_point is not None and zero_point.shape != scale.shape):
        return None
    k, n = weight.shape
    if scale.shape != (-(-k // block), n):
        return None
    name = dequantize.output[0]
    constants = {f"{name}::weights_T": _transposed(weight, block), f"{name}::scales_T": scale.T.reshape(-1)}
    if zero_point is not None or weight.dtype == np.dtype(ml_dtypes.uint4):
        zero_point = zero_point if zero_point is not None else np.zeros(scale.shape, weight.dtype)
        constants[f"{name}::zero_points_T"] = _rows(_unsigned(zero_point).T).reshape(-1)
    node = helper.make_node(
        "MatMulNBits",
        [target.input[0], *constants],
        [target.output[0]],
        name=target.name,
        domain=MICROSOFT,
        K=k,
        N=n,
        bits=4,
        block_size=block,
        accuracy_level=4,
    )
    rule = f"{SOURCE} (DQMatMulToMatMulNBits rule: DQ of 4-bit blocked weights -> MatMul as MatMulNBits)"
    return Fusion(node, covers(graph, group), rule, constants)


def _unsigned(values: np.ndarray) -> np.ndarray:
    """4-bit values as the nibbles MatMulNBits reads: int4 ones with their sign bit flipped (``v + 8``)."""
    nibbles = values.astype(np.int16) & 0xF
    return (nibbles ^ 8 if values.dtype == np.dtype(ml_dtypes.int4) else nibbles).astype(np.uint8)


def _rows(nibbles: np.ndarray) -> np.ndarray:
    """Each row of nibbles packed into whole bytes, the first of a pair low; an odd row ends in a spare."""
    rows, count = nibbles.shape
    padded = np.zeros((rows, count + count % 2), np.uint8)
    padded[:, :count] = nibbles
    packed: np.ndarray = padded[:, 0::2] | (padded[:, 1::2] << 4)
    return packed


def _transposed(weight: np.ndarray, block: int) -> np.ndarray:
    """``[K, N]`` weights as ``[N, blocks, block / 2]`` bytes, K padded to whole blocks (with the
    nibble of value 0, 8 for int4)."""
    k, n = weight.shape
    blocks = -(-k // block)
    padded = np.zeros((blocks * block, n), weight.dtype)
    padded[:k] = weight
    return _rows(_unsigned(padded).T).reshape(n, blocks, block // 2)
