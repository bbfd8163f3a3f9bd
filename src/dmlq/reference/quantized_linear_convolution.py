"""QUANTIZED_LINEAR_CONVOLUTION: exact integer window sums plus the bias, requantized in float64."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.typing import ArrayLike, DTypeLike

from .requantize import centred, requantize
from .windows import correlate, per_channel, per_filter


def quantized_linear_convolution(
    x: np.ndarray,
    x_scale: ArrayLike,
    x_zero_point: np.ndarray | None,
    w: np.ndarray,
    w_scale: ArrayLike,
    w_zero_point: ArrayLike | None,
    bias: ArrayLike | None,
    output_scale: ArrayLike,
    output_zero_point: np.ndarray | None,
    output_dtype: DTypeLike,
    *,
    strides: Sequence[int],
    dilations: Sequence[int],
    start_padding: Sequence[int],
    end_padding: Sequence[int],
    group_count: int = 1,
    reciprocal_division: bool = False,
) -> np.ndarray:
    """``clamp(round((acc + B[m]) * (XS * WS[m]) / YS) + YZP, Min, Max)`` with the exact sum

        acc[n, m, o] = sum_{c, k} (X[n, c, o*s - start + k*d] - XZP) * (W[m, c, k] - WZP[m])

    ``x`` is ``{N, C, *spatial}``, ``w`` ``{M, C / group_count, *window}``; the input and output
    scales and zero points are scalars, the filter's and the int32 ``bias`` scalars or one value per
    output channel (zero points and bias None: 0). Padded positions hold ``x_zero_point``; the bias
    is in units of ``XS * WS[m]`` with zero point 0 (ONNX's QLinearConv rule). The requantization is
    :func:`dmlq.reference.requantize.requantize`'s: float64, halves to even, NaN to 0.

    >>> quantized_linear_convolution(np.uint8([[[1, 2, 3]]]), np.float32(1), None, np.int8([[[1, 1]]]),
    ...     np.float32(1), None, np.int32([1]), np.float32(2), np.uint8(10), np.uint8,
    ...     strides=[1], dilations=[1], start_padding=[0], end_padding=[0])
    array([[[12, 13]]], dtype=uint8)
    """
    ndim = x.ndim
    accumulated = correlate(centred(x, x_zero_point), centred(w, per_filter(w_zero_point, ndim)),
                            strides, dilations, start_padding, end_padding, group_count)  # fmt: skip
    if bias is not None:
        accumulated = accumulated + per_channel(bias, ndim).astype(np.int64)
    return requantize(accumulated, x_scale, per_channel(w_scale, ndim), output_scale, output_zero_point,
                      output_dtype, reciprocal_division=reciprocal_division)  # fmt: skip
