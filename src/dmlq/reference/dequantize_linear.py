"""ELEMENT_WISE_DEQUANTIZE_LINEAR: (input - zero_point) * scale."""

from __future__ import annotations

import numpy as np
from numpy.typing import DTypeLike


def dequantize_linear(q: np.ndarray, scale: np.ndarray, zero_point: np.ndarray | None,
                      output_dtype: DTypeLike) -> np.ndarray:  # fmt: skip
    """Subtract exactly in int64, convert to float32 once, multiply by the float32 scale.

    >>> dequantize_linear(np.uint8([0, 128, 255]), np.float32([0.5] * 3), np.uint8([128] * 3),
    ...                   np.float32)
    array([-64. ,   0. ,  63.5], dtype=float32)
    """
    centred = q.astype(np.int64)
    if zero_point is not None:
        centred = centred - zero_point.astype(np.int64)
    return (centred.astype(np.float32) * scale.astype(np.float32)).astype(output_dtype)
