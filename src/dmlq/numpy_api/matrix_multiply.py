"""``quantized_linear_matrix_multiply`` and ``pack_matrix_multiply_b``: DirectML's
QuantizedLinearMatrixMultiply, with B packed once for the compiled kernels where it is reused."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
from numpy.typing import ArrayLike, DTypeLike

from ..errors import DmlError
from ..ops.quantized_linear_matrix_multiply import QuantizedLinearMatrixMultiply
from ..packed import PackedMatrix
from ..reference.saturate import saturate
from . import one_step, rules
from .compiling import RECIPROCAL_DIVISION, compiled, delivered, describable, supported_dtypes, target
from .rules import F32, HasShape, broadcast_named, integer_data, output_dtype

__all__ = ["pack_matrix_multiply_b", "quantized_linear_matrix_multiply"]

MATRIX_DATA = supported_dtypes(QuantizedLinearMatrixMultiply, "a")  # b's and the output's too
# The scales and zero points by field name, each with the axis along which it may vary.
Parameters = dict[str, tuple[str, "np.ndarray | None"]]


def quantized_linear_matrix_multiply(a: ArrayLike, a_scale: ArrayLike, a_zero_point: ArrayLike | None,
                                     b: ArrayLike | PackedMatrix, b_scale: ArrayLike | None,
                                     b_zero_point: ArrayLike | None,
                                     output_scale: ArrayLike, output_zero_point: ArrayLike | None, *,
                                     dtype: DTypeLike | None = None,
                                     out: np.ndarray | None = None) -> np.ndarray:  # fmt: skip
    """Quantized ``a @ b``: ``a`` is ``[..., M, K]``, ``b`` ``[..., K, N]`` (2 to 4 dimensions).

    Integer products accumulate exactly for every K, then requantize once. ``a`` and output
    scales and zero points are per-tensor or per-row ``(M, 1)``; ``b``'s per-tensor or
    per-column ``(N,)`` / ``(1, N)``. Batch dimensions broadcast as in ``numpy.matmul``, together
    with the leading dimensions of the scales and zero points (a ``(1, 1, 1)`` scale makes the
    result 3-D, as a NumPy operand would).

    ``b`` may be a :class:`PackedMatrix` from :func:`pack_matrix_multiply_b` (its own scale and
    zero point then serve, and ``b_scale`` and ``b_zero_point`` are None).

    >>> quantized_linear_matrix_multiply(np.uint8([[1, 2]]), 1.0, None,
    ...                                  np.int8([[3], [4]]), 1.0, None, 2.0, None)
    array([[6]], dtype=uint8)
    """
    # an array first: isinstance of one against PackedMatrix looks up its __class__, ~30 ns of a 4 x 4 call
    packed = None if type(b) is np.ndarray else b if isinstance(b, PackedMatrix) else None
    if dtype is None and (packed is None or b_scale is None and b_zero_point is None):
        # the common call, checked and run in one C step; None when it is not that call. A packed B's
        # operands: the packing's last (one of another CPU level is declined, and the general path's
        # kernels take the current level's: PackedB.as_kernel_operand), its own scale and zero point.
        kernel_b, kernel_scale, kernel_zero = (
            (b, b_scale, b_zero_point) if packed is None else packed.kernel_operands
        )
        result = one_step.matrix_multiply(a, a_scale, a_zero_point, kernel_b, kernel_scale, kernel_zero,
                                          output_scale, output_zero_point, out,
                                          RECIPROCAL_DIVISION)  # fmt: skip
        if result is not None:
            return result
    if packed is not None:
        b_scale, b_zero_point = packed_parameters(packed, b_scale, b_zero_point)
        b = packed.packed_b.for_shape_rules()
    a = integer_data(a, "a", a_zero_point, MATRIX_DATA)
    b = integer_data(b, "b", b_zero_point, MATRIX_DATA)
    check_matrices(a, b)
    (m, k), n = a.shape[-2:], b.shape[-1]
    out_dtype, quantization = parameters_of(a.dtype, b.dtype, a_scale, a_zero_point, b_scale, b_zero_point,
                                            output_scale, output_zero_point, dtype, packed)  # fmt: skip
    values = parameter_values(quantization)
    checked = ("b_scale", "b_zero_point") if packed else ()
    if _is_plain_matrix_product(a, b, values, checked):
        out_shape, operands = (m, n), {name: _as_row(value) for name, value in values.items()}
    else:
        out_shape = (*matrix_batch({"a": a, "b": b, **values}), m, n)
        operands = matrix_quantizations(quantization, m, n, len(out_shape))
    written = target(out, out_shape, out_dtype)
    if written.size and k == 0:
        _write_empty_product(operands["output_zero_point"], written)
    elif written.size:
        views = {"a": batch_view(a, out_shape[:-2]), "b": batch_view(b, out_shape[:-2]), **operands}
        operator, read = compiled(QuantizedLinearMatrixMultiply, views, written, as_given=tuple(views))
        operator.run_arrays(read if packed is None else {**read, "b": packed.packed_b}, written)
        if packed is not None:  # the run may have packed B for this CPU level
            packed.renew_kernel_operands()
    return delivered(written, out)


def pack_matrix_multiply_b(
    b: ArrayLike, b_scale: ArrayLike, b_zero_point: ArrayLike | None = None
) -> PackedMatrix:
    """``b`` (``[..., K, N]``) with its scale and zero point, packed (a copy) once for
    :func:`quantized_linear_matrix_multiply`: pass the result as its ``b``, with ``b_scale`` and
    ``b_zero_point`` None. The arguments are checked now, by that function's rules (per-tensor or
    per-column scale and zero point).

    >>> packed = pack_matrix_multiply_b(np.int8([[3], [4]]), 1.0)
    >>> quantized_linear_matrix_multiply(np.uint8([[1, 2]]), 1.0, None, packed, None, None, 2.0, None)
    array([[6]], dtype=uint8)
    >>> pack_matrix_multiply_b(np.int8([[1, 2]]), [[1.0], [2.0]])
    Traceback (most recent call last):
    ...
    dmlq.errors.DmlError: b_scale: shape (2, 1) is not supported; it would vary along K
    """
    b = integer_data(b, "b", b_zero_point, MATRIX_DATA)
    check_matrix_dimensions(b, "b")
    scale = rules.scale(b_scale, "b_scale", F32)
    zero_point = rules.zero_point(b_zero_point, "b_zero_point", b.dtype, "b", MATRIX_DATA)
    for name, value in (("b_scale", scale), ("b_zero_point", zero_point)):
        if value is not None:
            matrix_quantization(value, name, "column", 1, b.shape[-1], max(value.ndim, 2))
    return PackedMatrix(b, scale, zero_point)


def parameters_of(a_dtype: np.dtype, b_dtype: np.dtype, a_scale: object, a_zero_point: object,
                  b_scale: object, b_zero_point: object, output_scale: object, output_zero_point: object,
                  dtype: object, packed: PackedMatrix | None) -> tuple[np.dtype, Parameters]:  # fmt: skip
    """The output's dtype and the six scales and zero points by field name, each with the axis it
    may vary along ("row", "column" or "output", for :func:`matrix_quantization`), checked by the
    rules; a ``packed`` B's own scale and zero point as they are (checked when it was packed).

    >>> u8, i8 = np.dtype(np.uint8), np.dtype(np.int8)
    >>> out_dtype, parameters = parameters_of(u8, i8, 0.5, None, [0.5, 1], 3, 2.0, None, "int8", None)
    >>> out_dtype, parameters["b_scale"], parameters["b_zero_point"]
    (dtype('int8'), ('column', array([0.5, 1. ], dtype=float32)), ('column', array(3, dtype=int8)))
    """
    out_dtype = output_dtype(output_zero_point, dtype, a_dtype, "output_zero_point", MATRIX_DATA)
    a_scale_array = rules.scale(a_scale, "a_scale", F32)
    a_zero_point_array = rules.zero_point(a_zero_point, "a_zero_point", a_dtype, "a", MATRIX_DATA)
    if packed is None:
        b_scale_array = rules.scale(b_scale, "b_scale", F32)
        b_zero_point_array = rules.zero_point(b_zero_point, "b_zero_point", b_dtype, "b", MATRIX_DATA)
    else:
        b_scale_array, b_zero_point_array = packed.b_scale, packed.b_zero_point
    return out_dtype, {
        "a_scale": ("row", a_scale_array),
        "a_zero_point": ("row", a_zero_point_array),
        "b_scale": ("column", b_scale_array),
        "b_zero_point": ("column", b_zero_point_array),
        "output_scale": ("output", rules.scale(output_scale, "output_scale", F32)),
        "output_zero_point": ("output", rules.zero_point(output_zero_point, "output_zero_point", out_dtype,
                                                         "the output", MATRIX_DATA)),
    }  # fmt: skip


def packed_parameters(packed: PackedMatrix, b_scale: object,
                      b_zero_point: object) -> tuple[np.ndarray, np.ndarray | None]:  # fmt: skip
    """A packed B's own scale and zero point (checked when it was packed, and read-only since);
    DmlError if the call passes a scale or zero point too."""
    if b_scale is not None or b_zero_point is not None:
        passed = (("b_scale", b_scale), ("b_zero_point", b_zero_point))
        given = [name for name, value in passed if value is not None]
        raise DmlError(f"{', '.join(given)}: must be None when b is a PackedMatrix (it carries its own)")
    return packed.b_scale, packed.b_zero_point


def _is_plain_matrix_product(a: np.ndarray, b: np.ndarray, values: dict[str, np.ndarray | None],
                             checked: tuple[str, ...]) -> bool:  # fmt: skip
    """2-D ``a`` and ``b`` with parameters of at most 2 dimensions, each per-tensor or among
    ``checked`` (a packed B's, per-column: checked when it was packed): a 2-D product with nothing
    to broadcast (the common case, which skips the general shape rules' cost)."""
    plain = all(v is None or (v.ndim <= 2 and (v.size == 1 or name in checked)) for name, v in values.items())
    return a.ndim == 2 and b.ndim == 2 and plain


def _as_row(value: np.ndarray | None) -> np.ndarray | None:
    """A per-tensor ``[1, 1]`` or per-column ``[1, N]`` parameter of a 2-D product."""
    return None if value is None else value.reshape(1, -1)


def check_matrix_dimensions(operand: HasShape, name: str) -> None:
    ndim = len(operand.shape)
    if not 2 <= ndim <= 4:
        raise DmlError(f"{name}: {ndim} dimensions; the matrix multiply takes 2 to 4")


def check_matrices(a: HasShape, b: HasShape) -> None:
    """``a`` is ``[..., M, K]`` and ``b`` ``[..., K, N]``, each of 2 to 4 dimensions."""
    check_matrix_dimensions(a, "a")
    check_matrix_dimensions(b, "b")
    if a.shape[-1] != b.shape[-2]:
        raise DmlError(f"a, b: a is [..., M, K] with K = {a.shape[-1]} but b has "
                       f"{b.shape[-2]} rows")  # fmt: skip


def matrix_batch(operands: Mapping[str, HasShape | None]) -> tuple[int, ...]:
    """The result's batch dimensions: NumPy's broadcasting of every operand's dimensions before
    its last two (as numpy.matmul for a and b, as any NumPy operand for scales and zero points)."""
    batches = {}
    for name, operand in operands.items():
        if operand is None:
            continue
        ndim = len(operand.shape)
        if ndim > 4:
            raise DmlError(f"{name}: {ndim} dimensions; the matrix multiply takes at most 4")
        if ndim > 2:
            batches[name] = operand.shape[:-2]
    return broadcast_named(batches)


def matrix_quantization(value: np.ndarray | None, name: str, kind: str, m: int, n: int,
                        ndim: int) -> np.ndarray | None:  # fmt: skip
    """A scale or zero point as DirectML's {1.., M, 1} / {1.., 1, N} / {1.., 1, 1} tensor."""
    if value is None:
        return None
    if value.size == 1:
        return value.reshape((1,) * ndim)
    padded = (1, 1, *value.shape)
    leading, (rows, columns) = padded[:-2], padded[-2:]
    if kind == "column":
        ok, varies, per = rows == 1 and columns == n, rows != 1, f"per-column ({n},) or (1, {n})"
    else:
        ok, varies, per = columns == 1 and rows == m, kind == "row" and columns != 1, f"per-row ({m}, 1)"
    if ok and all(d == 1 for d in leading):
        return np.ascontiguousarray(value).reshape((1,) * (ndim - 2) + (rows, columns))
    rule = "it would vary along K" if varies else f"expected per-tensor or {per}"
    raise DmlError(f"{name}: shape {value.shape} is not supported; {rule}")


def parameter_values(quantization: Parameters) -> dict[str, np.ndarray | None]:
    """The scales and zero points of ``quantization`` by field, without the axis each may vary along."""
    return {name: value for name, (_, value) in quantization.items()}


def matrix_quantizations(quantization: Parameters, m: int, n: int, ndim: int) -> dict[str, np.ndarray | None]:
    """Every scale and zero point of ``quantization`` through :func:`matrix_quantization`, by field.

    A function of its own rather than a comprehension in the callers: the comprehension's closure
    over ``m`` and ``n`` made every call of :func:`quantized_linear_matrix_multiply` build cells for
    them, the fast path's too (50 ns of an 850 ns call of 4 x 4 matrices, Zen 5)."""
    return {name: matrix_quantization(value, name, kind, m, n, ndim)
            for name, (kind, value) in quantization.items()}  # fmt: skip


def batch_view(operand: np.ndarray, batch: tuple[int, ...]) -> np.ndarray:
    """``operand`` (``[..., rows, columns]``) with the result's ``batch`` dimensions, broadcast
    through zero strides (DirectML's matrix multiplies take batches equal to the output's)."""
    described = describable(operand)
    if operand.shape[:-2] == batch:  # nothing to broadcast: skip the cost of a broadcast view
        return described
    return np.broadcast_to(described, (*batch, *operand.shape[-2:]))


def _write_empty_product(zero_point: np.ndarray | None, written: np.ndarray) -> None:
    """K = 0: every sum is 0, so each output is its zero point."""
    if zero_point is None:
        written[...] = 0
    else:
        written[...] = saturate(zero_point.astype(np.float64), written.dtype).reshape(zero_point.shape[-2:])
