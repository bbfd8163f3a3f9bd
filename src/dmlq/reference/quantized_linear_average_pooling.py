"""QUANTIZED_LINEAR_AVERAGE_POOLING: exact integer window sums, averaged and requantized in float64."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from numpy.typing import ArrayLike, DTypeLike

from .requantize import centred, quantize_real, widened
from .windows import per_channel, tap_total, window_taps


def quantized_linear_average_pooling(x: np.ndarray, x_scale: ArrayLike, x_zero_point: ArrayLike | None,
                                     output_scale: ArrayLike, output_zero_point: ArrayLike | None,
                                     output_dtype: DTypeLike, *, strides: Sequence[int],
                                     window_size: Sequence[int], start_padding: Sequence[int],
                                     end_padding: Sequence[int], dilations: Sequence[int],
                                     include_padding: bool = False,
                                     reciprocal_division: bool = False) -> np.ndarray:  # fmt: skip
    """``clamp(round(s * XS[c] / count / YS[c]) + YZP[c], Min, Max)`` with

        s[n, c, o] = sum over the window's taps inside the input of (X[n, c, o*s - start + k*d] - XZP[c])

    and ``count`` those taps (every tap of the window with ``include_padding``: padding holds
    ``x_zero_point``, real 0). ``x`` is ``{N, C, *spatial}``; scales and zero points are scalars or one
    value per channel (zero points None: 0). ``s`` is exact; the rest float64 with the float32 scales,
    halves to even, NaN to 0. A window wholly in padding without ``include_padding`` gives ``YZP``.

    >>> quantized_linear_average_pooling(np.uint8([[[1, 2, 4]]]), np.float32(1), None, np.float32(1), None,
    ...     np.uint8, strides=[1], window_size=[2], start_padding=[1], end_padding=[0], dilations=[1])
    array([[[1, 2, 3]]], dtype=uint8)
    """
    ndim = x.ndim
    window = (window_size, strides, dilations, start_padding, end_padding)
    sums = tap_total(window_taps(centred(x, per_channel(x_zero_point, ndim)), *window))
    count: np.ndarray | np.float64
    if include_padding:
        count = np.float64(math.prod(window_size))
    else:
        count = tap_total(window_taps(np.ones((1, 1, *x.shape[2:]), np.int64), *window)).astype(np.float64)
    with np.errstate(all="ignore"):
        average = sums.astype(np.float64) * widened(per_channel(x_scale, ndim)) / count
    average = np.where(count == 0, 0.0, average)
    return quantize_real(average, per_channel(output_scale, ndim), per_channel(output_zero_point, ndim),
                         output_dtype, reciprocal_division=reciprocal_division)  # fmt: skip
