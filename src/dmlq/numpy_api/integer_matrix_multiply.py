"""``matrix_multiply_integer`` and ``matrix_multiply_integer_to_float``: DirectML's MatrixMultiplyInteger
and MatrixMultiplyIntegerToFloat, ``a`` ``[..., M, K]`` times ``b`` ``[..., K, N]`` with their zero
points subtracted, into int32 or into floats.

Their shapes follow :func:`dmlq.quantized_linear_matrix_multiply`'s rules (2 to 4 dimensions; batch
dimensions broadcast as ``numpy.matmul``'s, through zero strides; ``a``'s scale and zero point
per-tensor or per-row ``(M, 1)``, ``b``'s per-tensor or per-column ``(N,)``; a per-batch one is
refused, as DirectML describes none), which :mod:`dmlq.numpy_api.matrix_multiply` holds. K = 0 is an
empty sum, 0, as in ``numpy.matmul``: DirectML cannot describe it, so the operator computes one term
that is 0 instead (``a``'s column and ``b``'s row their zero points), which keeps its formula.

>>> INTEGER_DATA, INTEGER_OUTPUT, TO_FLOAT_DATA, TO_FLOAT_FLOATS
((dtype('int8'), dtype('uint8')), dtype('int32'), \
(dtype('int32'), dtype('int16'), dtype('int8'), dtype('uint32'), dtype('uint16'), dtype('uint8')), \
(dtype('float32'), dtype('float16')))
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from ..ops.base import OperatorDesc
from ..ops.matrix_multiply_integer import MatrixMultiplyInteger
from ..ops.matrix_multiply_integer_to_float import MatrixMultiplyIntegerToFloat
from . import rules
from .compiling import computed, supported_dtypes
from .matrix_multiply import (
    Parameters,
    batch_view,
    check_matrices,
    matrix_batch,
    matrix_quantizations,
    parameter_values,
)
from .rules import F32, integer_data

__all__ = ["matrix_multiply_integer", "matrix_multiply_integer_to_float"]

INTEGER_DATA = supported_dtypes(MatrixMultiplyInteger, "a")  # b's and the zero points' too
(INTEGER_OUTPUT,) = supported_dtypes(MatrixMultiplyInteger, "output")
TO_FLOAT_DATA = supported_dtypes(MatrixMultiplyIntegerToFloat, "a")  # b's and the zero points' too
TO_FLOAT_FLOATS = supported_dtypes(MatrixMultiplyIntegerToFloat, "output")  # the scales' and the bias's too
ONE_FLOAT_TYPE = "MatrixMultiplyIntegerToFloat has one data type for its scales, bias and output"


def matrix_multiply_integer(a: ArrayLike, a_zero_point: ArrayLike | None, b: ArrayLike,
                            b_zero_point: ArrayLike | None, *,
                            out: np.ndarray | None = None) -> np.ndarray:  # fmt: skip
    """``(a - a_zero_point) @ (b - b_zero_point)`` as int32: exact, then wrapped to int32 as a 32-bit
    accumulator would.

    ``a`` and ``b`` are uint8 or int8 (lists take their zero point's dtype, else uint8); the zero
    points (None: 0) have their matrix's dtype, ``a``'s per-tensor or per-row ``(M, 1)``, ``b``'s
    per-tensor or per-column ``(N,)``. The rules of each argument: :mod:`dmlq.numpy_api.rules`.

    >>> a = np.uint8([[1, 2], [3, 4]])                                  # [M, K]
    >>> b = np.int8([[1, -1], [2, 5]])                                  # [K, N]
    >>> matrix_multiply_integer(a, np.uint8([[1], [0]]), b, None)      # per-row: (M, 1)
    array([[ 2,  5],
           [11, 17]], dtype=int32)
    """
    a = integer_data(a, "a", a_zero_point, INTEGER_DATA)
    b = integer_data(b, "b", b_zero_point, INTEGER_DATA)
    check_matrices(a, b)
    zero_points = _zero_points(a, a_zero_point, b, b_zero_point, INTEGER_DATA)
    return _product(MatrixMultiplyInteger, a, b, zero_points, {}, out, INTEGER_OUTPUT)


def matrix_multiply_integer_to_float(a: ArrayLike, a_scale: ArrayLike, a_zero_point: ArrayLike | None,
                                     b: ArrayLike, b_scale: ArrayLike, b_zero_point: ArrayLike | None,
                                     bias: ArrayLike | None = None, *,
                                     out: np.ndarray | None = None) -> np.ndarray:  # fmt: skip
    """``((a - a_zero_point) * a_scale) @ ((b - b_zero_point) * b_scale) + bias`` in float32 or float16:
    the integer products summed exactly, scaled once (float64, rounded to float32), the bias added
    in float32, a float16 result rounded once from that.

    ``a`` and ``b`` have one integer dtype, int8, uint8, int16, uint16, int32 or uint32 (lists take
    their zero point's dtype, else uint8); the zero points (None: 0) have their matrix's dtype.
    ``a``'s scale and zero point are per-tensor or per-row ``(M, 1)``, ``b``'s per-tensor or
    per-column ``(N,)``; ``bias`` (None: 0) broadcasts to the result like a NumPy operand. The
    result is float16 when a NumPy float16 is among ``a_scale``, ``b_scale`` and ``bias``, else
    float32; float16 with float32 is refused (DirectML's operator has one float type). The rules of
    each argument: :mod:`dmlq.numpy_api.rules`.

    >>> a = np.uint8([[1, 2], [3, 4]])                                  # [M, K]
    >>> b = np.uint8([[1, 0], [2, 5]])                                  # [K, N]
    >>> matrix_multiply_integer_to_float(a, 0.5, None, b, np.float32([1.0, 0.25]), None, bias=[1.0, 0.0])
    array([[3.5 , 1.25],
           [6.5 , 2.5 ]], dtype=float32)
    """
    a = integer_data(a, "a", a_zero_point, TO_FLOAT_DATA)
    b = integer_data(b, "b", b_zero_point, TO_FLOAT_DATA)
    check_matrices(a, b)
    floats = rules.one_float_dtype({"a_scale": a_scale, "b_scale": b_scale, "bias": bias}, TO_FLOAT_FLOATS,
                                   ONE_FLOAT_TYPE)  # fmt: skip
    quantization = {"a_scale": ("row", rules.scale(a_scale, "a_scale", floats)),
                    "b_scale": ("column", rules.scale(b_scale, "b_scale", floats)),
                    **_zero_points(a, a_zero_point, b, b_zero_point, TO_FLOAT_DATA)}  # fmt: skip
    bias_array = None if bias is None else rules.data(bias, "bias", TO_FLOAT_FLOATS, floats, floats=F32)
    return _product(MatrixMultiplyIntegerToFloat, a, b, quantization, {"bias": bias_array}, out, floats)


def _product(desc_type: type[OperatorDesc], a: np.ndarray, b: np.ndarray, quantization: Parameters,
             addends: dict[str, np.ndarray | None], out: np.ndarray | None,
             out_dtype: np.dtype) -> np.ndarray:  # fmt: skip
    """The product of the checked ``a`` and ``b`` with their scales and zero points (by field, each
    with the axis it may vary along) and the ``addends`` of the result's shape (the bias), as
    DirectML describes them."""
    (m, k), n = a.shape[-2:], b.shape[-1]
    values = parameter_values(quantization)
    batch = matrix_batch({"a": a, "b": b, **values, **addends})
    shape = (*batch, m, n)
    operands = matrix_quantizations(quantization, m, n, len(shape))
    if k == 0:
        a, b = _one_zero_term(a, b, operands["a_zero_point"], operands["b_zero_point"])
    views = {"a": batch_view(a, batch), "b": batch_view(b, batch), **operands}
    views.update({name: rules.broadcast_to_result(value, name, shape) for name, value in addends.items()})
    return computed(desc_type, views, out, shape, out_dtype, {})


def _zero_points(a: np.ndarray, a_zero_point: object, b: np.ndarray, b_zero_point: object,
                 allowed: tuple[np.dtype, ...]) -> Parameters:  # fmt: skip
    """Each matrix's zero point, of its dtype: ``a``'s per-tensor or per-row, ``b``'s per-column."""
    return {"a_zero_point": ("row", rules.zero_point(a_zero_point, "a_zero_point", a.dtype, "a", allowed)),
            "b_zero_point": ("column", rules.zero_point(b_zero_point, "b_zero_point", b.dtype, "b",
                                                        allowed))}  # fmt: skip


def _one_zero_term(a: np.ndarray, b: np.ndarray, a_zero_point: np.ndarray | None,
                   b_zero_point: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """K = 0 as K = 1 with a term that is 0: ``a``'s one column its zero point (per row), ``b``'s one
    row its zero point (per column), or 0 where they are None.

    >>> a, b = np.zeros((2, 0), np.uint8), np.zeros((0, 3), np.int8)
    >>> a, b = _one_zero_term(a, b, None, np.int8([[1, 2, 3]]))
    >>> a.tolist(), b.tolist()
    ([[0], [0]], [[1, 2, 3]])
    """
    a_column = np.broadcast_to(_matrix(a_zero_point, a.dtype), (*a.shape[:-1], 1))
    b_row = np.broadcast_to(_matrix(b_zero_point, b.dtype), (*b.shape[:-2], 1, b.shape[-1]))
    return a_column, b_row


def _matrix(zero_point: np.ndarray | None, dtype: np.dtype) -> np.ndarray:
    """A zero point (``[1.., M, 1]``, ``[1.., 1, N]`` or one element) as a matrix; None as 0."""
    return np.zeros((), dtype) if zero_point is None else zero_point.reshape(zero_point.shape[-2:])
