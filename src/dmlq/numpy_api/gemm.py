"""``gemm``: DirectML's GEMM, the float matrix multiply (float32 or float16), with DirectML's
transpositions, scalars and fused activation.

``a`` is ``[..., M, K]`` (``[..., K, M]`` with ``trans_a``), ``b`` ``[..., K, N]`` (``[..., N, K]``
with ``trans_b``), 2 to 4 dimensions; batch dimensions broadcast as ``numpy.matmul``'s (through zero
strides), and ``c`` broadcasts to the result like a NumPy operand. K = 0 is an empty sum, 0, as in
``numpy.matmul``: DirectML cannot describe it, so the operator computes one term of zeros instead.

>>> GEMM_DATA
(dtype('float32'), dtype('float16'))
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from .. import activations as _activations
from ..ops.gemm import Gemm
from . import rules
from .compiling import computed, supported_dtypes
from .matrix_multiply import batch_view, check_matrix_dimensions, matrix_batch

__all__ = ["gemm"]

GEMM_DATA = supported_dtypes(Gemm, "a")  # b's, c's and the output's too
ONE_TYPE = "DirectML's GEMM has one data type"


def gemm(a: ArrayLike, b: ArrayLike, c: ArrayLike | None = None, *, trans_a: bool = False,
         trans_b: bool = False, alpha: float = 1.0, beta: float = 1.0,
         fused_activation: _activations.Activation | str | None = None,
         out: np.ndarray | None = None) -> np.ndarray:  # fmt: skip
    """``fused_activation(alpha * op(a) @ op(b) + beta * c)`` in float32, ``op`` transposing the last
    two dimensions with ``trans_a`` / ``trans_b``; float16 operands are computed in float32 and the
    result rounded once. Each sum runs over k in order, one float32 fused multiply-add per term
    (:func:`dmlq.reference.gemm`; DirectML promises no order).

    ``a``, ``b`` and ``c`` (None: no C, ``beta`` unused) have one dtype, float32 or float16 (float64
    converts to float32; Python numbers and lists take the others' float dtype, else float32).
    ``alpha`` and ``beta`` are finite float32 values. ``fused_activation`` is None, a name
    (``"relu"``...) or an object of :mod:`dmlq.activations`, as for :func:`dmlq.add`. The rules of
    each argument: :mod:`dmlq.numpy_api.rules`.

    >>> a = np.float32([[1, 2], [3, 4]])                                # [M, K]
    >>> b = np.float32([[1, 0], [0, -1]])                               # [N, K]: trans_b
    >>> gemm(a, b, np.float32([10, 20]), trans_b=True, alpha=2.0, beta=0.5, fused_activation="relu")
    array([[ 7.,  6.],
           [11.,  2.]], dtype=float32)
    """
    operands = rules.float_operands({"a": a, "b": b, "c": c}, GEMM_DATA, ONE_TYPE)
    a_array, b_array, c_array = operands["a"], operands["b"], operands["c"]
    assert a_array is not None and b_array is not None  # neither was None
    check_matrix_dimensions(a_array, "a")
    check_matrix_dimensions(b_array, "b")
    activation = _activations.from_spec(fused_activation)
    m, k = _rows_and_columns(a_array, bool(trans_a))
    b_k, n = _rows_and_columns(b_array, bool(trans_b))
    batch = matrix_batch({"a": a_array, "b": b_array, "c": c_array})
    shape = (*batch, m, n)
    if k == b_k == 0:  # an empty sum: one term of zeros, which DirectML can describe
        a_array, b_array = _with_one(a_array, bool(trans_a), -1), _with_one(b_array, bool(trans_b), -2)
    views = {"a": batch_view(a_array, batch), "b": batch_view(b_array, batch),
             "c": rules.broadcast_to_result(c_array, "c", shape)}  # fmt: skip
    return computed(Gemm, views, out, shape, a_array.dtype, {}, trans_a=trans_a, trans_b=trans_b, alpha=alpha,
                    beta=beta, fused_activation=activation)  # fmt: skip


def _rows_and_columns(matrix: np.ndarray, transposed: bool) -> tuple[int, int]:
    """The rows and columns of ``matrix``'s last two dimensions as the product reads them."""
    rows, columns = matrix.shape[-2:]
    return (columns, rows) if transposed else (rows, columns)


def _with_one(matrix: np.ndarray, transposed: bool, axis: int) -> np.ndarray:
    """Zeros shaped as ``matrix`` with its ``axis`` (of the product's reading: K) of size 1.

    >>> _with_one(np.zeros((3, 0)), False, -1).shape, _with_one(np.zeros((0, 3)), True, -1).shape
    ((3, 1), (1, 3))
    """
    shape = list(matrix.shape)
    shape[-3 - axis if transposed else axis] = 1
    return np.broadcast_to(np.zeros((), matrix.dtype), tuple(shape))
