"""QUANTIZE: clamp(round(input / scale) + zero_point, Min, Max), scale and zero point per block."""

from __future__ import annotations

import numpy as np
from numpy.typing import DTypeLike

from .blocks import expand_blocks
from .quantize_linear import quantize_linear


def quantize(x: np.ndarray, scale: np.ndarray, zero_point: np.ndarray | None, output_dtype: DTypeLike, *,
             reciprocal_division: bool = False) -> np.ndarray:  # fmt: skip
    """ELEMENT_WISE_QUANTIZE_LINEAR's formula over blocks; 4-bit results as ``ml_dtypes`` arrays.

    >>> import ml_dtypes, numpy as np
    >>> quantize(np.float32([0.5, -3.0, 9.0, 2.0]), np.float32([1.0, 0.5]), None, ml_dtypes.int4)
    array([0, -3, 7, 4], dtype=int4)
    """
    expanded = expand_blocks(scale, x.shape)
    zero_point = None if zero_point is None else expand_blocks(zero_point, x.shape)
    return quantize_linear(x, expanded, zero_point, output_dtype, reciprocal_division=reciprocal_division)
