"""CONVOLUTION_INTEGER: the exact sum of zero-point-centred products, wrapped to int32."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.typing import ArrayLike

from .requantize import centred
from .windows import correlate, per_filter


def convolution_integer(x: np.ndarray, x_zero_point: np.ndarray | None, w: np.ndarray,
                        w_zero_point: ArrayLike | None, *, strides: Sequence[int], dilations: Sequence[int],
                        start_padding: Sequence[int], end_padding: Sequence[int],
                        group_count: int = 1) -> np.ndarray:  # fmt: skip
    """``Y[n, m, o] = sum_{c, k} (X[n, c, o*s - start + k*d] - XZP) * (W[m, c, k] - WZP[m])`` mod 2^32.

    ``x`` is ``{N, C, *spatial}``, ``w`` ``{M, C / group_count, *window}``; ``x_zero_point`` is a
    scalar, ``w_zero_point`` a scalar or one value per output channel (None: 0). Padded positions
    hold ``x_zero_point``: they contribute 0. The sum is exact; the int32 result wraps it (two's
    complement), as ONNX's 32-bit accumulation would.

    >>> convolution_integer(np.uint8([[[1, 2, 3]]]), np.uint8(1), np.int8([[[1, -1]]]), None,
    ...                     strides=[1], dilations=[1], start_padding=[1], end_padding=[0])
    array([[[ 0, -1, -1]]], dtype=int32)
    """
    accumulated = correlate(centred(x, x_zero_point), centred(w, per_filter(w_zero_point, w.ndim)),
                            strides, dilations, start_padding, end_padding, group_count)  # fmt: skip
    return accumulated.astype(np.int32)  # the low 32 bits: NumPy's int64 -> int32 cast wraps
