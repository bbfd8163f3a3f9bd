"""The benchmark's inputs: one seeded data set per case, at the full or the tiny size."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

SEED = 20240611


@dataclass(frozen=True)
class Sizes:
    elements: int  # elementwise cases
    call: int  # the per-call overhead case
    gemm: int  # M = N = K of the square matrix multiplies
    batched: tuple[int, int, int, int]  # A and B of the batched matrix multiply


SIZES = {
    "full": Sizes(elements=1 << 24, call=16, gemm=1024, batched=(8, 1, 512, 512)),
    "tiny": Sizes(elements=1 << 16, call=16, gemm=64, batched=(2, 1, 32, 32)),
}


def f32(value: float) -> np.ndarray:
    """A 0-d float32 array: a per-tensor scale every library accepts (ORT rejects NumPy scalars)."""
    return np.array(value, np.float32)


def u8(value: int) -> np.ndarray:
    return np.array(value, np.uint8)


def i8(value: int) -> np.ndarray:
    return np.array(value, np.int8)


@dataclass(frozen=True)
class Quantize:
    x: np.ndarray
    scale: np.ndarray
    zero_point: np.ndarray


@dataclass(frozen=True)
class Dequantize:
    q: np.ndarray
    scale: np.ndarray
    zero_point: np.ndarray


@dataclass(frozen=True)
class QuantizedAdd:
    a: np.ndarray
    a_scale: np.ndarray
    a_zero_point: np.ndarray
    b: np.ndarray
    b_scale: np.ndarray
    b_zero_point: np.ndarray
    output_scale: np.ndarray
    output_zero_point: np.ndarray


@dataclass(frozen=True)
class FloatAdd:
    a: np.ndarray
    b: np.ndarray


@dataclass(frozen=True)
class MatMul:
    """``a [..., M, K]`` u8 times ``b [..., K, N]`` (u8 or s8), requantized to u8."""

    a: np.ndarray
    a_scale: np.ndarray
    a_zero_point: np.ndarray
    b: np.ndarray
    b_scale: np.ndarray
    b_zero_point: np.ndarray
    output_scale: np.ndarray
    output_zero_point: np.ndarray

    @property
    def operations(self) -> int:
        """2·M·N·K per batch: the GOPS numerator."""
        *batch, m, k = self.a.shape
        return 2 * int(np.prod(batch, dtype=np.int64)) * m * k * self.b.shape[-1]


def quantize(n: int, rng: np.random.Generator) -> Quantize:
    """Normal data spread over the whole u8 range, a few values saturating."""
    return Quantize(rng.standard_normal(n, np.float32) * np.float32(3), f32(0.05), u8(128))


def dequantize(n: int, rng: np.random.Generator) -> Dequantize:
    return Dequantize(rng.integers(0, 256, n, np.uint8), f32(0.05), u8(128))


def quantized_add(n: int, rng: np.random.Generator) -> QuantizedAdd:
    a, b = rng.integers(0, 256, (2, n), np.uint8)
    return QuantizedAdd(a, f32(0.02), u8(100), b, f32(0.03), u8(140), f32(0.04), u8(120))


def add_relu(n: int, rng: np.random.Generator) -> FloatAdd:
    a, b = rng.standard_normal((2, n), np.float32)
    return FloatAdd(a, b)


def matmul(a_shape: tuple[int, ...], b_shape: tuple[int, ...], b_dtype: type, rng: np.random.Generator,
           per_row_output: bool = False, per_column_b: bool = False) -> MatMul:  # fmt: skip
    """Uniform 8-bit data; the output scale spreads the results over the u8 range.

    The centred operands have a standard deviation near 74, so the accumulator's is about
    74²·√K; an output scale of that over 40 (times the input scales) keeps most of it in range.
    ``per_column_b``: B's scale and zero point have one value per column (scales around 0.01).
    """
    a = rng.integers(0, 256, a_shape, np.uint8)
    info = np.iinfo(b_dtype)
    b = rng.integers(info.min, info.max + 1, b_shape, b_dtype)
    b_zero_point = np.array(128 if b_dtype == np.uint8 else 0, b_dtype)
    a_scale, b_scale = f32(0.02), f32(0.01)
    if per_column_b:
        columns = b_shape[-1]
        b_scale = np.linspace(0.005, 0.015, columns, dtype=np.float32)
        b_zero_point = np.full(columns, b_zero_point, b_dtype)
    k = a_shape[-1]
    output_scale = f32(0.02 * 0.01 * 74.0**2 * np.sqrt(k) / 40)
    if per_row_output:
        rows = np.linspace(0.5, 1.5, a_shape[-2], dtype=np.float32)[:, None]
        output_scale = (output_scale * rows).astype(np.float32)
    return MatMul(a, a_scale, u8(128), b, b_scale, b_zero_point, output_scale, u8(128))
