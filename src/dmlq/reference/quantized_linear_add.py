"""ELEMENT_WISE_QUANTIZED_LINEAR_ADD, in float32 in the formula's order."""

from __future__ import annotations

import numpy as np
from numpy.typing import DTypeLike

from .saturate import saturate

Scalar = float | np.floating | np.ndarray  # a number, or a one-element array
IntegerScalar = np.integer | np.ndarray


def _dequantize(values: np.ndarray, scale: Scalar, zero_point: IntegerScalar | None) -> np.ndarray:
    centred = values.astype(np.int32)
    if zero_point is not None:
        centred = centred - zero_point.astype(np.int32)
    return centred.astype(np.float32) * np.float32(scale)


def quantized_linear_add(a: np.ndarray, a_scale: Scalar, a_zero_point: IntegerScalar | None, b: np.ndarray,
                         b_scale: Scalar, b_zero_point: IntegerScalar | None, output_scale: Scalar,
                         output_zero_point: IntegerScalar | None, output_dtype: DTypeLike, *,
                         reciprocal_division: bool = False) -> np.ndarray:  # fmt: skip
    """``clamp(round(((A - AZP) * AS + (B - BZP) * BS) / OS) + OZP, Min, Max)``.

    Scales and zero points are scalars (DirectML's one-element tensors) or None.

    >>> quantized_linear_add(np.uint8([10, 20]), 0.5, None, np.uint8([1, 3]), 1.0, None,
    ...                      2.0, None, np.uint8)
    array([3, 6], dtype=uint8)
    """
    a_value = _dequantize(a, a_scale, a_zero_point)
    b_value = _dequantize(b, b_scale, b_zero_point)
    output_value = a_value + b_value
    with np.errstate(all="ignore"):
        if reciprocal_division:
            quotient = output_value * (np.float32(1) / np.float32(output_scale))
        else:
            quotient = output_value / np.float32(output_scale)
        result = np.rint(quotient)
        if output_zero_point is not None:
            result = result + np.float32(output_zero_point)
    return saturate(result, np.dtype(output_dtype))
