"""DYNAMIC_QUANTIZE_LINEAR: the range (with 0) gives a scale and a zero point, then quantize with them."""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, DTypeLike

from .quantize_linear import quantize_linear
from .saturate import integer_range, saturate


def dynamic_quantize_linear(
    x: ArrayLike, output_dtype: DTypeLike, *, reciprocal_division: bool = False
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(y, scale, zero_point)``, in float32 as ONNX's DynamicQuantizeLinear defines them:

        rmin = min(0, min(x)), rmax = max(0, max(x))
        scale = (rmax - rmin) / (qmax - qmin)          (1 / (qmax - qmin) when rmax == rmin)
        zero_point = clamp(round(qmin - rmin / scale), qmin, qmax)
        y = clamp(round(x / scale) + zero_point, qmin, qmax)

    halves to even; ``y`` by :func:`quantize_linear` (``x * float32(1 / scale)`` with
    ``reciprocal_division``). A NaN in ``x`` makes the scale NaN, and the zero point and ``y`` 0.

    >>> y, scale, zero_point = dynamic_quantize_linear(np.float32([0, 2, -3, -2.5, 1.34, 0.5]), np.uint8)
    >>> y, float(scale), int(zero_point)
    (array([153, 255,   0,  26, 221, 179], dtype=uint8), 0.019607843831181526, 153)
    """
    x = np.asarray(x, np.float32)
    qmin, qmax = integer_range(np.dtype(output_dtype))
    with np.errstate(all="ignore"):
        rmin = np.minimum(np.float32(0), np.min(x))
        rmax = np.maximum(np.float32(0), np.max(x))
        span = np.float32(1) if rmax == rmin else rmax - rmin
        scale = np.float32(span / np.float32(qmax - qmin))
        zero_point = saturate(np.rint(np.float32(qmin) - rmin / scale), np.dtype(output_dtype))
    y = quantize_linear(x, scale, zero_point, output_dtype, reciprocal_division=reciprocal_division)
    return y, np.array(scale, np.float32), np.array(zero_point, output_dtype)
