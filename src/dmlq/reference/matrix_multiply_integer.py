"""MATRIX_MULTIPLY_INTEGER: the exact sum of zero-point-centred products, wrapped to int32."""

from __future__ import annotations

import numpy as np

from .requantize import centred


def matrix_multiply_integer(
    a: np.ndarray, a_zero_point: np.ndarray | None, b: np.ndarray, b_zero_point: np.ndarray | None
) -> np.ndarray:
    """``Out[..., m, n] = sum_k (A[..., m, k] - AZP[m]) * (B[..., k, n] - BZP[n])`` mod 2^32.

    ``a`` is ``[..., M, K]`` and ``b`` ``[..., K, N]``; the zero points (None: 0) broadcast against
    them: per-tensor, per-row ``[M, 1]`` for A, per-column ``[1, N]`` for B. The sum is exact (int64);
    the int32 result wraps it (two's complement), as ONNX's 32-bit accumulation would.

    >>> matrix_multiply_integer(np.uint8([[255, 255]]), np.uint8(0), np.uint8([[255], [1]]), None)
    array([[65280]], dtype=int32)
    """
    products: np.ndarray = np.matmul(centred(a, a_zero_point), centred(b, b_zero_point))
    return products.astype(np.int32)
