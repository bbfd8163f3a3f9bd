"""QUANTIZED_LINEAR_MATRIX_MULTIPLY: exact integer products, requantized in float64."""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, DTypeLike

from .requantize import centred, requantize


def quantized_linear_matrix_multiply(a: np.ndarray, a_scale: ArrayLike, a_zero_point: np.ndarray | None,
                                     b: np.ndarray, b_scale: ArrayLike, b_zero_point: np.ndarray | None,
                                     output_scale: ArrayLike, output_zero_point: np.ndarray | None,
                                     output_dtype: DTypeLike, *, reciprocal_division: bool = False,
                                     ) -> np.ndarray:  # fmt: skip
    """``clamp(round(acc * (AS * BS) / OS) + OZP, Min, Max)``, ``acc = (A - AZP) @ (B - BZP)``.

    ``a`` is ``[..., M, K]`` and ``b`` ``[..., K, N]``; the scales and zero points broadcast
    against ``[..., M, N]`` (``[M, 1]`` per-row, ``[1, N]`` per-column). The accumulation is
    exact int64 for every K; the requantization is float64 with the float32 scales.

    >>> quantized_linear_matrix_multiply(np.uint8([[1, 2]]), np.float32(1), None,
    ...     np.int8([[3], [4]]), np.float32(1), None, np.float32(2), None, np.uint8)
    array([[6]], dtype=uint8)
    """
    accumulated = np.matmul(centred(a, a_zero_point), centred(b, b_zero_point))
    return requantize(accumulated, a_scale, b_scale, output_scale, output_zero_point, output_dtype,
                      reciprocal_division=reciprocal_division)  # fmt: skip
