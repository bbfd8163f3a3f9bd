"""MATRIX_MULTIPLY_INTEGER_TO_FLOAT: exact integer products, scaled once in float64, biased in float32."""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, DTypeLike

from .requantize import centred, widened


def exact_products(
    a: np.ndarray, a_zero_point: np.ndarray | None, b: np.ndarray, b_zero_point: np.ndarray | None
) -> np.ndarray:
    """``(A - AZP) @ (B - BZP)`` exactly: int64 for 8- and 16-bit integers, Python ints for 32-bit ones
    (whose products reach 2^64)."""
    a, b = centred(a, a_zero_point), centred(b, b_zero_point)
    if max(np.abs(a).max(initial=0), np.abs(b).max(initial=0)) < 2**16:
        products: np.ndarray = np.matmul(a, b)  # |products| <= 2^32: int64 holds any K below 2^31
    else:
        products = np.matmul(a.astype(object), b.astype(object))
    return products


def matrix_multiply_integer_to_float(
    a: np.ndarray,
    a_scale: ArrayLike,
    a_zero_point: np.ndarray | None,
    b: np.ndarray,
    b_scale: ArrayLike,
    b_zero_point: np.ndarray | None,
    bias: ArrayLike | None,
    output_dtype: DTypeLike,
) -> np.ndarray:
    """``float32(acc * (AS[m] * BS[n])) + Bias`` with ``acc = (A - AZP) @ (B - BZP)`` exact.

    ``a`` is ``[..., M, K]``, ``b`` ``[..., K, N]``; A's scale and zero point broadcast as ``[M, 1]``,
    B's as ``[1, N]``, the bias as ``[..., M, N]`` (None: 0). The product is evaluated in float64 with
    the float32 (float16: widened) scales and rounded to float32 once; the bias is added in float32; a
    float16 output is that float32 result rounded once.

    >>> matrix_multiply_integer_to_float(np.uint8([[1, 2]]), np.float32(0.5), None, np.int8([[3], [4]]),
    ...                                  np.float32(0.25), None, np.float32([[1]]), np.float32)
    array([[2.375]], dtype=float32)
    """
    accumulated = exact_products(a, a_zero_point, b, b_zero_point).astype(np.float64)
    with np.errstate(over="ignore"):  # beyond the output type's range: infinity, silently
        result: np.ndarray = (accumulated * (widened(a_scale) * widened(b_scale))).astype(np.float32)
        if bias is not None:
            result = result + np.asarray(bias, np.float32)
        return result.astype(output_dtype)
