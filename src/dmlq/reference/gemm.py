"""GEMM: FusedActivation(alpha * op(A) @ op(B) + beta * C) in float32, each sum over k in order."""

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
    with ``trans_b``), batch dimensions broadcasting as ``numpy.matmul``'s; ``c`` broadcasts to
    ``[..., M, N]`` (None: no C, beta ignored). FLOAT16 operands are widened exactly; ``alpha`` and
    ``beta`` are float32. Each element of the product is :func:`sum_of_products`' (k in order, one
    fused multiply-add each), the order dmlq's kernels keep at every level and thread count. A fused
    activation is evaluated in float64 on the float32 value and rounded to float32, as ADD1's.

    >>> from dmlq.activations import Relu
    >>> gemm(np.float32([[1, 2]]), np.float32([[3, -4]]), np.float32([[1]]), np.float32, trans_b=True,
    ...      alpha=2.0, beta=0.5, fused_activation=Relu())
    array([[0.]], dtype=float32)
    """
    a, b = (np.asarray(x, np.float32) for x in (a, b))
    a, b = (np.swapaxes(a, -1, -2) if trans_a else a), (np.swapaxes(b, -1, -2) if trans_b else b)
    product = sum_of_products(a, b)
    with np.errstate(all="ignore"):
        total: np.ndarray = np.float32(alpha) * product
        if c is not None:
            total = total + np.float32(beta) * np.asarray(c, np.float32)
    if fused_activation is not None:
        total = fused_activation.apply(total).astype(np.float32)
    return total.astype(output_dtype)


def sum_of_products(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a @ b`` of float32 matrices (batches broadcasting as ``numpy.matmul``'s), each element the
    float32 sum ``acc = fma(a[i, k], b[k, j], acc)`` for k = 0, 1, ... from ``acc = +0``: one rounding
    per term, in order. (Not BLAS: its order is its own, and differs between machines and threads.)

    >>> x = np.float32([[1.0, 2.0**-24, 2.0**-24]])
    >>> sum_of_products(x, np.float32([[1.0], [1.0], [1.0]]))  # 1 + 2**-24 is a tie, to even: 1, twice
    array([[1.]], dtype=float32)
    """
    shape = np.broadcast_shapes(a.shape[:-2], b.shape[:-2]) + (a.shape[-2], b.shape[-1])
    acc = np.zeros(shape, np.float32)
    for k in range(a.shape[-1]):
        acc = fma(a[..., :, k, None], b[..., None, k, :], acc)
    return acc


def fma(x: np.ndarray, y: np.ndarray, z: np.ndarray) -> np.ndarray:
    """``x * y + z`` of float32 values, rounded once to float32 (IEEE 754's fusedMultiplyAdd).

    The product is exact in float64 (24 + 24 bits); the float64 sum with its exact error (TwoSum),
    rounded to odd (an inexact sum takes its odd neighbour toward the exact one), rounds to float32 as
    the exact value does, since float64 has at least two more bits than float32. Which NaN a NaN
    result is, is not defined (CPUs differ).

    >>> third = np.float32(1 / 3)
    >>> float(fma(third, np.float32(3), np.float32(-1))), float(third * np.float32(3) - np.float32(1))
    (2.9802322387695312e-08, 0.0)
    """
    with np.errstate(all="ignore"):
        product = np.asarray(x, np.float64) * y
        total = product + z
        back = total - product
        error = (product - (total - back)) + (z - back)
        bits = total.view(np.int64)
        to_odd = (error != 0) & (bits & 1 == 0) & np.isfinite(total)
        bits = np.where(to_odd, bits + np.where((error > 0) == (total > 0), 1, -1), bits)
        rounded: np.ndarray = bits.view(np.float64).astype(np.float32)
        return rounded
