"""DEQUANTIZE: (input - zero_point) * scale, scale and zero point per block."""

from __future__ import annotations

import numpy as np
from numpy.typing import DTypeLike

from .blocks import expand_blocks
from .dequantize_linear import dequantize_linear


def dequantize(q: np.ndarray, scale: np.ndarray, zero_point: np.ndarray | None,
               output_dtype: DTypeLike) -> np.ndarray:  # fmt: skip
    """ELEMENT_WISE_DEQUANTIZE_LINEAR's formula over blocks (exact int64 subtraction, float32 product).

    >>> import ml_dtypes, numpy as np
    >>> q = np.array([1, -8, 7, 3], ml_dtypes.int4)
    >>> dequantize(q, np.float32([0.5, 2.0]), np.array([1, 0], ml_dtypes.int4), np.float32)
    array([ 0. , -4.5, 14. ,  6. ], dtype=float32)
    """
    zero_point = None if zero_point is None else expand_blocks(zero_point, q.shape)
    return dequantize_linear(q, expand_blocks(scale, q.shape), zero_point, output_dtype)
