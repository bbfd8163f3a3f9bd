"""QUANTIZED_LINEAR_MATRIX_MULTIPLY: exact integer products, requantized in float64."""

import numpy as np

from .saturate import saturate


def _centred(values, zero_point):
    values = values.astype(np.int64)
    return values if zero_point is None else values - zero_point.astype(np.int64)


def _widened(scale):
    return np.asarray(scale, np.float32).astype(np.float64)


def quantized_linear_matrix_multiply(a, a_scale, a_zero_point, b, b_scale, b_zero_point,
                                     output_scale, output_zero_point, output_dtype, *,
                                     reciprocal_division=False):  # fmt: skip
    """``clamp(round(acc * (AS * BS) / OS) + OZP, Min, Max)``, ``acc = (A - AZP) @ (B - BZP)``.

    ``a`` is ``[..., M, K]`` and ``b`` ``[..., K, N]``; the scales and zero points broadcast
    against ``[..., M, N]`` (``[M, 1]`` per-row, ``[1, N]`` per-column). The accumulation is
    exact int64 for every K; the requantization is float64 with the float32 scales.

    >>> quantized_linear_matrix_multiply(np.uint8([[1, 2]]), np.float32(1), None,
    ...     np.int8([[3], [4]]), np.float32(1), None, np.float32(2), None, np.uint8)
    array([[6]], dtype=uint8)
    """
    accumulated = np.matmul(_centred(a, a_zero_point), _centred(b, b_zero_point))
    real_scale = _widened(a_scale) * _widened(b_scale)
    output_scale = np.asarray(output_scale, np.float32)
    with np.errstate(all="ignore"):
        value = accumulated.astype(np.float64) * real_scale
        if reciprocal_division:
            value = value * (np.float32(1) / output_scale).astype(np.float64)
        else:
            value = value / _widened(output_scale)
        result = np.rint(value)
        if output_zero_point is not None:
            result = result + output_zero_point.astype(np.float64)
    return saturate(result, np.dtype(output_dtype))
