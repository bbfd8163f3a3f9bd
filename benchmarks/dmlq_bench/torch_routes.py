"""PyTorch (CPU): its quantized tensors and fbgemm's prepacked int8 linear; inputs pre-made.

Every builder returns contenders, or raises when the route does not exist in the installed
build (the caller records why it was skipped).
"""

from __future__ import annotations

import warnings

import numpy as np
import torch

from . import data
from .timing import Contender, fixed

TORCH = "torch"
INT_MM_SKIP = "torch._int_mm: s8 x s8 -> s32 without requantization, not a like-for-like route"

warnings.filterwarnings("ignore", message=".*quantize.*deprecated", category=UserWarning)


def set_threads(threads: int) -> None:
    torch.set_num_threads(threads)


def version() -> str:
    return f"{torch.__version__} (quantized engine {torch.backends.quantized.engine})"


def _quantized(values: np.ndarray, scale: np.ndarray, zero_point: np.ndarray) -> torch.Tensor:
    """A per-tensor quantized tensor over ``values`` (quint8 for uint8, qint8 for int8)."""
    return torch._make_per_tensor_quantized_tensor(torch.from_numpy(values), float(scale), int(zero_point))


def _int_repr(tensor: torch.Tensor) -> np.ndarray:
    return tensor.int_repr().numpy()


def quantize(p: data.Quantize) -> list[Contender]:
    x, scale, zero_point = torch.from_numpy(p.x), float(p.scale), int(p.zero_point)
    call = fixed(lambda: torch.quantize_per_tensor(x, scale, zero_point, torch.quint8))
    return [Contender(TORCH, call, result=_int_repr, note="torch.quantize_per_tensor")]


def dequantize(p: data.Dequantize) -> list[Contender]:
    q = _quantized(p.q, p.scale, p.zero_point)
    return [Contender(TORCH, fixed(q.dequantize), result=lambda t: t.numpy(), note="Tensor.dequantize")]


def quantized_add(p: data.QuantizedAdd) -> list[Contender]:
    a, b = _quantized(p.a, p.a_scale, p.a_zero_point), _quantized(p.b, p.b_scale, p.b_zero_point)
    scale, zero_point = float(p.output_scale), int(p.output_zero_point)
    call = fixed(lambda: torch.ops.quantized.add(a, b, scale, zero_point))
    return [Contender(TORCH, call, result=_int_repr, note="torch.ops.quantized.add")]


def add_relu(p: data.FloatAdd) -> list[Contender]:
    a, b = torch.from_numpy(p.a), torch.from_numpy(p.b)
    call = fixed(lambda: torch.add(a, b).relu_())
    return [Contender(TORCH, call, result=lambda t: t.numpy(), note="torch.add + relu_ (2 passes)")]


def _prepacked_weight(b: np.ndarray, scale: np.ndarray, zero_point: np.ndarray) -> object:
    """``b [K, N]`` as fbgemm's prepacked qint8 weight ``[N, K]``.

    A uint8 B becomes B ^ 0x80 = B - 128 as int8 with its zero point lowered by 128: the same
    centred values, so the product is unchanged.
    """
    if b.dtype == np.uint8:
        b, zero_point = (b ^ np.uint8(0x80)).view(np.int8), zero_point.astype(np.int64) - 128
    transposed = np.ascontiguousarray(b.T)
    if scale.size == 1:
        weight = _quantized(transposed, scale, np.asarray(zero_point))
    else:  # one scale and zero point per column of B: per output channel, axis 0 of the weight
        weight = torch._make_per_channel_quantized_tensor(
            torch.from_numpy(transposed), torch.from_numpy(scale.astype(np.float64)),
            torch.from_numpy(zero_point.astype(np.int64)), 0,
        )  # fmt: skip
    return torch.ops.quantized.linear_prepack(weight, None)


def matmul(p: data.MatMul) -> list[Contender]:
    """fbgemm's quantized linear with a prepacked weight; batches loop over one weight each."""
    if p.output_scale.size != 1:
        raise ValueError("torch.ops.quantized.linear: per-tensor output scale only")
    scale, zero_point = float(p.output_scale), int(p.output_zero_point)
    a = p.a.reshape(-1, *p.a.shape[-2:])
    b = p.b.reshape(-1, *p.b.shape[-2:])
    inputs = [_quantized(np.ascontiguousarray(m), p.a_scale, p.a_zero_point) for m in a]
    weights = [_prepacked_weight(m, p.b_scale, p.b_zero_point) for m in b]
    linear = torch.ops.quantized.linear

    def call() -> list[torch.Tensor]:
        return [linear(x, w, scale, zero_point) for x, w in zip(inputs, weights)]

    def result(outputs: list[torch.Tensor]) -> np.ndarray:
        return np.stack([_int_repr(t) for t in outputs]).reshape(*p.a.shape[:-1], p.b.shape[-1])

    note = "torch.ops.quantized.linear, prepacked weight" + (", one call per batch" if len(a) > 1 else "")
    return [Contender(TORCH, fixed(call), result=result, note=note)]
