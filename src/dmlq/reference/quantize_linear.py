"""ELEMENT_WISE_QUANTIZE_LINEAR: clamp(round(input / scale) + zero_point, Min, Max)."""

from __future__ import annotations

import numpy as np
from numpy.typing import DTypeLike

from .saturate import saturate


def quantize_linear(x: np.ndarray, scale: np.ndarray | np.float32, zero_point: np.ndarray | None,
                    output_dtype: DTypeLike, *, reciprocal_division: bool = False) -> np.ndarray:  # fmt: skip
    """Quantize in float32: IEEE division (or ``x * float32(1 / scale)``), halves to even.

    >>> quantize_linear(np.float32([0.5, 1.5, 2.5]), np.float32([1, 1, 1]), None, np.uint8)
    array([0, 2, 2], dtype=uint8)
    """
    x, scale = x.astype(np.float32), scale.astype(np.float32)
    with np.errstate(all="ignore"):
        if reciprocal_division:
            quotient = x * (np.float32(1) / scale)
        else:
            quotient = x / scale
        result = np.rint(quotient)
        if zero_point is not None:
            result = result + zero_point.astype(np.float32)
    return saturate(result, np.dtype(output_dtype))
