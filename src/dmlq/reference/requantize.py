"""The matrix multiply's two halves: exact zero-point-centred integers, and requantizing their sum.

Split out so that a computation that accumulates ``(A - AZP) @ (B - BZP)`` its own way (by K
chunks, in :mod:`dmlq.dask`) requantizes with exactly the reference's float64 formula.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, DTypeLike

from .saturate import saturate


def centred(values: np.ndarray, zero_point: np.ndarray | None) -> np.ndarray:
    """``values - zero_point`` exactly, as int64 (the zero point None is 0).

    >>> centred(np.uint8([0, 255]), np.uint8([128]))
    array([-128,  127])
    """
    values = values.astype(np.int64)
    return values if zero_point is None else values - zero_point.astype(np.int64)


def widened(scale: ArrayLike) -> np.ndarray:
    """A scale rounded to float32 (DirectML's type), then widened exactly to float64."""
    return np.asarray(scale, np.float32).astype(np.float64)


def requantize(accumulated: np.ndarray, a_scale: ArrayLike, b_scale: ArrayLike, output_scale: ArrayLike,
               output_zero_point: np.ndarray | None, output_dtype: DTypeLike, *,
               reciprocal_division: bool = False) -> np.ndarray:  # fmt: skip
    """``clamp(round(acc * (AS * BS) / OS) + OZP, Min, Max)`` for an exact integer ``acc``.

    Evaluated in float64 with the float32 scales widened; halves round to even, NaN gives 0.

    >>> requantize(np.int64([[12], [-7]]), np.float32(1), np.float32(1), np.float32(2), None, np.int8)
    array([[ 6],
           [-4]], dtype=int8)
    """
    real_scale = widened(a_scale) * widened(b_scale)
    with np.errstate(all="ignore"):
        value = accumulated.astype(np.float64) * real_scale
    return quantize_real(value, output_scale, output_zero_point, output_dtype,
                         reciprocal_division=reciprocal_division)  # fmt: skip


def quantize_real(value: np.ndarray, output_scale: ArrayLike, output_zero_point: ArrayLike | None,
                  output_dtype: DTypeLike, *,
                  reciprocal_division: bool = False) -> np.ndarray:  # fmt: skip
    """``clamp(round(value / OS) + OZP, Min, Max)`` for a float64 ``value``: the last steps of the
    requantizing operators, in float64 with the float32 scale (``value * float32(1 / OS)`` with
    ``reciprocal_division``), halves to even, NaN to 0.

    >>> quantize_real(np.float64([2.5, -7.0]), np.float32(1), np.int8(3), np.int8)
    array([ 5, -4], dtype=int8)
    """
    output_scale32 = np.asarray(output_scale, np.float32)
    with np.errstate(all="ignore"):
        if reciprocal_division:
            value = value * (np.float32(1) / output_scale32).astype(np.float64)
        else:
            value = value / widened(output_scale32)
        result = np.rint(value)
        if output_zero_point is not None:
            result = result + np.asarray(output_zero_point).astype(np.float64)
    return saturate(result, np.dtype(output_dtype))
