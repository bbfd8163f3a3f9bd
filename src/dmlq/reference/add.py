"""ELEMENT_WISE_ADD and ELEMENT_WISE_ADD1: FusedActivation(a + b)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import DTypeLike

if TYPE_CHECKING:
    from ..activations import Activation


def add(a: np.ndarray, b: np.ndarray, output_dtype: DTypeLike,
        fused_activation: Activation | None = None) -> np.ndarray:  # fmt: skip
    """Floats add in float32 (float16 too, rounded once at the end); integers wrap around.

    A fused activation is evaluated in float64 on the float32 sum and rounded to float32.

    >>> from dmlq.activations import Relu
    >>> add(np.float32([1, -3]), np.float32([1, 1]), np.float32, Relu())
    array([2., 0.], dtype=float32)
    """
    dtype = np.dtype(output_dtype)
    if dtype.kind != "f":
        wrapped: np.ndarray = np.add(a, b, dtype=dtype, casting="unsafe")
        return wrapped
    a, b = a.astype(np.float32), b.astype(np.float32)
    # When both are NaN the sum is a's NaN (quieted): NumPy's own a + b picks per version and CPU.
    total: np.ndarray = np.where(np.isnan(a), a + a, a + b)
    if fused_activation is not None:
        total = fused_activation.apply(total).astype(np.float32)
    return total.astype(dtype)
