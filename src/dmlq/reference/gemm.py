"""GEMM: FusedActivation(alpha * op(A) @ op(B) + beta * C) in float32."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import ArrayLike, DTypeLike

if TYPE_CHECKING:
    from ..activations import Activation


def gemm(a: ArrayLike, b: ArrayLike, c: ArrayLike | None, output_dtype: DTypeLike, *, trans_a: bool = False,
         trans_b: bool = False, alpha: float = 1.0, beta: float = 1.0,
         fused_activation: Activation | None = None) -> np.ndarray:  # fmt: skip
    """``alpha * op(A) @ op(B) + beta * C`` in float32, then the activation, rounded once to the output.

    ``a`` is ``[..., M, K]`` (``[..., K, M]`` with ``trans_a``), ``b`` ``[..., K, N]`` (``[..., N, K]``
    with ``trans_b``), ``c`` broadcasts to ``[..., M, N]`` (None: no C, beta ignored). FLOAT16 operands
    are widened exactly; ``alpha`` and ``beta`` are float32. The product is NumPy's float32 matmul
    (BLAS) on contiguous copies, so its result does not depend on the operands' memory layout; the
    order of its K additions is BLAS's. A fused activation is evaluated in float64 on the float32
    value and rounded to float32, as ADD1's.

    >>> from dmlq.activations import Relu
    >>> gemm(np.float32([[1, 2]]), np.float32([[3, -4]]), np.float32([[1]]), np.float32, trans_b=True,
    ...      alpha=2.0, beta=0.5, fused_activation=Relu())
    array([[0.]], dtype=float32)
    """
    a, b = (np.ascontiguousarray(np.asarray(x, np.float32)) for x in (a, b))
    if trans_a:
        a = np.ascontiguousarray(np.swapaxes(a, -1, -2))
    if trans_b:
        b = np.ascontiguousarray(np.swapaxes(b, -1, -2))
    with np.errstate(all="ignore"):
        total: np.ndarray = np.float32(alpha) * np.matmul(a, b)
        if c is not None:
            total = total + np.float32(beta) * np.asarray(c, np.float32)
    if fused_activation is not None:
        total = fused_activation.apply(total).astype(np.float32)
    return total.astype(output_dtype)
