"""NumPy two ways: the formula as people write it (float32 steps), and the roofline pass.

The roofline is one allocating NumPy pass moving the same bytes as the operator (a cast or an
``np.add``): what the operator costs at best when written in NumPy. It computes something else,
so it is not compared with dmlq's result.
"""

from __future__ import annotations

import numpy as np

from . import data
from .timing import Contender, fixed

FORMULA, ROOFLINE = "numpy formula", "numpy roofline"


def _saturated_u8(values: np.ndarray) -> np.ndarray:
    return np.clip(values, 0, 255).astype(np.uint8)


def quantize_formula(p: data.Quantize) -> Contender:
    zero_point = p.zero_point.astype(np.float32)
    return Contender(FORMULA, fixed(lambda: _saturated_u8(np.rint(p.x / p.scale) + zero_point)))


def quantize(p: data.Quantize) -> list[Contender]:
    def cast() -> np.ndarray:
        with np.errstate(invalid="ignore"):
            return p.x.astype(np.uint8)

    return [quantize_formula(p), Contender(ROOFLINE, fixed(cast), result=None, note="x.astype(uint8)")]


def dequantize(p: data.Dequantize) -> list[Contender]:
    zero_point = p.zero_point.astype(np.float32)
    return [
        Contender(FORMULA, fixed(lambda: (p.q.astype(np.float32) - zero_point) * p.scale)),
        Contender(ROOFLINE, fixed(lambda: p.q.astype(np.float32)), result=None, note="q.astype(float32)"),
    ]


def quantized_add(p: data.QuantizedAdd) -> list[Contender]:
    def formula() -> np.ndarray:
        a = (p.a.astype(np.float32) - p.a_zero_point.astype(np.float32)) * p.a_scale
        b = (p.b.astype(np.float32) - p.b_zero_point.astype(np.float32)) * p.b_scale
        return _saturated_u8(np.rint((a + b) / p.output_scale) + p.output_zero_point.astype(np.float32))

    return [
        Contender(FORMULA, fixed(formula)),
        Contender(ROOFLINE, fixed(lambda: np.add(p.a, p.b)), result=None, note="np.add on uint8"),
    ]


def add_relu(p: data.FloatAdd) -> list[Contender]:
    return [
        Contender(FORMULA, fixed(lambda: np.maximum(p.a + p.b, np.float32(0)))),
        Contender(ROOFLINE, fixed(lambda: np.add(p.a, p.b)), result=None, note="np.add on float32"),
    ]


def matmul(p: data.MatMul) -> Contender:
    """Exact route: float64 BLAS on the centred operands (float32 is inexact for K > 258)."""

    def formula() -> np.ndarray:
        a = p.a.astype(np.float64) - p.a_zero_point.astype(np.float64)
        b = p.b.astype(np.float64) - p.b_zero_point.astype(np.float64)
        real_scale = p.a_scale.astype(np.float64) * p.b_scale.astype(np.float64)
        values = np.rint(np.matmul(a, b) * real_scale / p.output_scale.astype(np.float64))
        return _saturated_u8(values + p.output_zero_point.astype(np.float64))

    return Contender("numpy float64", fixed(formula), note="float64 matmul of centred operands (BLAS)")
