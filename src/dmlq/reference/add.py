"""ELEMENT_WISE_ADD and ELEMENT_WISE_ADD1: FusedActivation(a + b)."""

import numpy as np


def add(a, b, output_dtype, fused_activation=None):
    """Floats add in float32 (float16 too, rounded once at the end); integers wrap around.

    A fused activation is evaluated in float64 on the float32 sum and rounded to float32.

    >>> from dmlq.activations import Relu
    >>> add(np.float32([1, -3]), np.float32([1, 1]), np.float32, Relu())
    array([2., 0.], dtype=float32)
    """
    output_dtype = np.dtype(output_dtype)
    if output_dtype.kind != "f":
        return np.add(a, b, dtype=output_dtype, casting="unsafe")
    a, b = a.astype(np.float32), b.astype(np.float32)
    # When both are NaN the sum is a's NaN (quieted): NumPy's own a + b picks per version and CPU.
    total = np.where(np.isnan(a), a + a, a + b)
    if fused_activation is not None:
        total = fused_activation.apply(total).astype(np.float32)
    return total.astype(output_dtype)
