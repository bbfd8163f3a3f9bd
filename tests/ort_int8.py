"""How onnxruntime's CPU provider multiplies u8 x s8 on a CPU without VNNI, modelled exactly.

Without AVX-VNNI or AVX512-VNNI, onnxruntime's MLAS kernel multiplies u8 by s8 with AVX2's
``vpmaddubsw``, which adds each adjacent pair of products (k = 2j and 2j + 1) into a saturating int16
before the int32 sum; it then subtracts the zero-point terms from row and column sums. DirectML (and
dmlq) accumulate exactly, so where a pair exceeds [-32768, 32767] the two results part. The model
below reproduced every element of onnxruntime 1.32.0's QLinearMatMul on an AMD Zen 3 (AVX2 only).
"""

from __future__ import annotations

import functools

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper

__all__ = ["pair_saturating_products", "u8s8_saturates"]


def pair_saturating_products(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``sum_k a[..., m, k] * b[..., k, n]`` with each pair (2j, 2j + 1) of products saturated to int16.

    >>> int(pair_saturating_products(np.uint8([[255, 255]]), np.int8([[127], [127]]))[0, 0])
    32767
    """
    a, b = a.astype(np.int64), b.astype(np.int64)
    k = a.shape[-1]
    if k % 2:
        a = np.concatenate([a, np.zeros((*a.shape[:-1], 1), np.int64)], axis=-1)
        b = np.concatenate([b, np.zeros((*b.shape[:-2], 1, b.shape[-1]), np.int64)], axis=-2)
    products = a[..., :, :, None] * b[..., None, :, :]  # [..., M, K, N]
    pairs = products.reshape(*products.shape[:-2], -1, 2, products.shape[-1]).sum(axis=-2)
    return np.clip(pairs, -32768, 32767).sum(axis=-2)


@functools.cache
def u8s8_saturates() -> bool:
    """Whether this machine's onnxruntime QLinearMatMul saturates pairs (255 * 127 twice: 64770 -> 32767)."""
    feeds = {
        "a": np.full((1, 2), 255, np.uint8), "as": np.float32(1), "az": np.uint8(0),
        "b": np.full((2, 1), 127, np.int8), "bs": np.float32(1), "bz": np.int8(0),
        "ys": np.float32(1024), "yz": np.uint8(0),
    }  # fmt: skip
    inputs = [helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(value.dtype), value.shape)
              for name, value in feeds.items()]  # fmt: skip
    node = helper.make_node("QLinearMatMul", list(feeds), ["y"])
    output = helper.make_tensor_value_info("y", TensorProto.UINT8, (1, 1))
    model = helper.make_model(helper.make_graph([node], "probe", inputs, [output]),
                              opset_imports=[helper.make_opsetid("", 21)])  # fmt: skip
    model.ir_version = 10
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    feeds = {name: np.asarray(value) for name, value in feeds.items()}
    return int(session.run(None, feeds)[0][0, 0]) == round(32767 / 1024)
