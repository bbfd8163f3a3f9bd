"""How onnxruntime's CPU provider multiplies uint8 by int8 on a CPU without VNNI, modelled exactly.

Without AVX-VNNI or AVX512-VNNI, onnxruntime's MLAS kernel multiplies u8 by s8 with AVX2's
``vpmaddubsw``, which adds each adjacent pair of products (k = 2j and 2j + 1) into a saturating
int16 before the int32 sum (``onnxruntime/core/mlas/lib/x86_64/QgemmU8S8KernelAvx2.S``, onnxruntime
c4780e65); the zero-point terms come off exactly afterwards. DirectML (and dmlq)
accumulate exactly, so where a pair leaves [-32768, 32767] the two results part. The model
reproduced every element of onnxruntime 1.32's QLinearMatMul on an AVX2-only AMD Zen 3.
"""

from __future__ import annotations

import functools

import numpy as np
from onnx import TensorProto, helper

__all__ = ["pair_saturation", "u8s8_saturates"]


def pair_saturation(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """What the int16 pair saturation takes off ``a @ b`` (uint8 A ``[..., M, K]``, int8 B ``[..., K, N]``).

    >>> pair_saturation(np.uint8([[255, 255, 1]]), np.int8([[127], [127], [1]])).tolist()
    [[-32003]]
    """
    a, b = a.astype(np.int32), b.astype(np.int32)
    saturated = np.zeros(np.broadcast_shapes(a.shape[:-1] + (1,), b.shape[:-2] + (1, b.shape[-1])), np.int64)
    for k in range(0, a.shape[-1], 2):
        pair = a[..., :, k, None] * b[..., k, None, :]
        if k + 1 < a.shape[-1]:
            pair = pair + a[..., :, k + 1, None] * b[..., k + 1, None, :]
        saturated += np.clip(pair, -32768, 32767) - pair
    return saturated


@functools.cache
def u8s8_saturates() -> bool:
    """Whether this machine's onnxruntime QLinearMatMul saturates pairs (255 * 127 twice: 64770 -> 32767)."""
    import onnxruntime  # type: ignore[import-untyped]  # onnxruntime ships no type hints

    feeds: dict[str, np.ndarray | np.generic] = {
        "a": np.full((1, 2), 255, np.uint8),
        "as": np.float32(1),
        "az": np.uint8(0),
        "b": np.full((2, 1), 127, np.int8),
        "bs": np.float32(1),
        "bz": np.int8(0),
        "ys": np.float32(1024),
        "yz": np.uint8(0),
    }
    inputs = [
        helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(value.dtype), np.shape(value))
        for name, value in feeds.items()
    ]
    node = helper.make_node("QLinearMatMul", list(feeds), ["y"])
    output = helper.make_tensor_value_info("y", TensorProto.UINT8, (1, 1))
    graph = helper.make_graph([node], "probe", inputs, [output])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10)
    session = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    result = session.run(None, {name: np.asarray(value) for name, value in feeds.items()})[0]
    return int(result[0, 0]) == round(32767 / 1024)
