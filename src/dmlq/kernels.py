"""The computation behind every compiled operator: tensor views in, the output view written.

Each function receives the input tensors as ndarrays of their descriptions' sizes, or that
broadcast to them as NumPy operands do (element-wise operators), keyed by field name (None for an
absent optional tensor), and writes the output view in place with the compiled kernels of
``dmlq._core``: one fused pass over memory, the GIL released, on :func:`dmlq.get_num_threads`
threads. They give the bits of the NumPy reference formulas of :mod:`dmlq.reference`, which remain
the oracle.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping

import numpy as np

from . import _core, reference
from .activations import Activation
from .int4 import FOUR_BIT_DTYPES, Nibbles
from .ops import (
    Dequantize,
    ElementWiseAdd,
    ElementWiseAdd1,
    ElementWiseDequantizeLinear,
    ElementWiseQuantizedLinearAdd,
    ElementWiseQuantizeLinear,
    OperatorDesc,
    Quantize,
    QuantizedLinearMatrixMultiply,
)
from .packed import PackedB

Views = Mapping[str, "np.ndarray | None"]


def available_levels() -> tuple[str, ...]:
    """The CPU levels whose kernels this machine runs (``dmlq._core.set_level`` takes each), lowest
    first: ``_core.LEVELS`` up to the detected one.

    >>> available_levels()[0]
    'portable'
    """
    return _core.LEVELS[: _core.LEVELS.index(_core.detected_level()) + 1]


def _readable(view: object) -> object:
    """``view`` itself, or a packed native copy when the kernels cannot read it in place (a packed
    B, not an array, is always readable)."""
    if not isinstance(view, np.ndarray) or (view.flags.aligned and view.dtype.isnative):
        return view
    return np.array(view, view.dtype.newbyteorder("="), order="C")  # a fresh, aligned copy


def _call(function: Callable[..., None], arrays: tuple, out: np.ndarray, *scalars: object) -> None:
    """``function(*arrays, out, *scalars)``, writing ``out`` in place.

    The compiled function raises BufferError for arrays it cannot use as they are (misaligned or
    byte-swapped, or an output overlapping an input other than by being exactly it, as an in-place
    add may); then it runs on aligned copies into a temporary, copied to ``out``.
    """
    try:
        function(*arrays, out, *scalars)
    except BufferError:
        temporary = np.empty(out.shape, out.dtype)
        function(*(_readable(array) for array in arrays), temporary, *scalars)
        out[...] = temporary


def quantize_linear(desc, views: Views, out: np.ndarray, reciprocal_division: bool) -> None:
    arrays = (views["input"], views["scale"], views["zero_point"])
    _call(_core.quantize, arrays, out, reciprocal_division)


def dequantize_linear(desc, views: Views, out: np.ndarray, reciprocal_division: bool) -> None:
    _call(_core.dequantize, (views["input"], views["scale"], views["zero_point"]), out)


def _activation(desc) -> tuple[int, tuple[float, float]]:
    """The fused activation's DirectML type value (0 for none) and its two parameter slots.

    Computed once per activation object (a compiled operator's description keeps its own), by
    identity: equal activations can differ in bits (an alpha of 0.0 or -0.0).
    """
    activation = getattr(desc, "fused_activation", None)
    if activation is None:
        return 0, (0.0, 0.0)
    cached = _ACTIVATION_ARGUMENTS.get(id(activation))
    if cached is None or cached[0] is not activation:
        if len(_ACTIVATION_ARGUMENTS) >= _ACTIVATION_ARGUMENTS_LIMIT:
            _ACTIVATION_ARGUMENTS.clear()
        parameters = (*(float(p) for p in activation.parameters()), 0.0, 0.0)
        cached = _ACTIVATION_ARGUMENTS[id(activation)] = activation, (activation.TYPE_VALUE, parameters[:2])
    return cached[1]


_ACTIVATION_ARGUMENTS: dict[int, tuple[Activation, tuple[int, tuple[float, float]]]] = {}
_ACTIVATION_ARGUMENTS_LIMIT = 1024


def add(desc, views: Views, out: np.ndarray, reciprocal_division: bool) -> None:
    activation, parameters = _activation(desc)
    _call(_core.add, (views["a"], views["b"]), out, activation, parameters)


_QUANTIZED_ADD_PARAMETERS = ("a_scale", "a_zero_point", "b_scale", "b_zero_point",
                             "output_scale", "output_zero_point")  # fmt: skip


def _scalar(view: np.ndarray | None) -> float | int:
    """A per-tensor view's one value as a Python number (0 for an absent zero point)."""
    return 0 if view is None else view.item(0)


def quantized_linear_add(desc, views: Views, out: np.ndarray, reciprocal_division: bool) -> None:
    scalars = [_scalar(views[name]) for name in _QUANTIZED_ADD_PARAMETERS]
    _call(_core.quantized_add, (views["a"], views["b"]), out, *scalars, reciprocal_division)


def matrix_operand(view: np.ndarray | None) -> np.ndarray | None:
    """A scale or zero point tensor as the matrix multiply's kernels take it: of at least 2
    dimensions, ``[..., M, 1]``, ``[..., 1, N]`` or ``[..., 1, 1]`` (those before the last two of
    size 1, as DirectML's are); one of fewer dimensions padded with leading 1s.

    >>> matrix_operand(np.zeros(3)).shape, matrix_operand(np.zeros((1, 1, 3, 1))).shape
    ((1, 3), (1, 1, 3, 1))
    """
    if view is None or view.ndim >= 2:
        return view
    return view.reshape((1,) * (2 - view.ndim) + view.shape)


_MATRIX_QUANTIZATION = ("a_scale", "a_zero_point", "b_scale", "b_zero_point",
                        "output_scale", "output_zero_point")  # fmt: skip


def matrix_b(b: np.ndarray | PackedB) -> object:
    """The matrix multiply's B as the kernels take it: an array, or a packed B's packing for the
    current CPU level (its private copy where the kernels do not take it)."""
    return b.as_kernel_operand() if isinstance(b, PackedB) else b


def quantized_linear_matrix_multiply(desc, views: Views, out: np.ndarray, reciprocal_division: bool) -> None:
    """``views["b"]`` is an array or a :class:`PackedB` (OWNED_BY_DML, or a NumPy-layer packing)."""
    a_scale, a_zero_point, *b_and_output = (matrix_operand(views[name]) for name in _MATRIX_QUANTIZATION)
    operands = (views["a"], a_scale, a_zero_point, matrix_b(views["b"]), *b_and_output)
    if views["a"].shape[-1] >= _core.MAX_K:  # beyond the kernel's int32 sums: the exact int64 formula
        out[...] = reference.quantized_linear_matrix_multiply(
            *operands, out.dtype, reciprocal_division=reciprocal_division
        )
        return
    _call(_core.matmul, operands, out, reciprocal_division)


def _values(view: np.ndarray | Nibbles | None) -> np.ndarray | None:
    """An operand as an ndarray: a 4-bit tensor's nibbles as an ``ml_dtypes`` array."""
    return view.unpacked() if isinstance(view, Nibbles) else view


def _deliver(result: np.ndarray, out: np.ndarray | Nibbles) -> None:
    if isinstance(out, Nibbles):
        out.store(result)
    else:
        out[...] = result


def _quantization_tensors(views: Views) -> tuple[np.ndarray, np.ndarray | None]:
    """The scale and the zero point (None when absent) of a Quantize or Dequantize."""
    return _values(views["quantization_tensors[0]"]), _values(views.get("quantization_tensors[1]"))


def _as_matrix(sizes: tuple[int, ...], blocks: tuple[int, ...]) -> tuple[int, int, int, int] | None:
    """``(rows, cols, block rows, block cols)`` of the 2-D problem equal to a blockwise N-D one, or None.

    The leading dimensions merge into rows when their blocks do: whole dimensions per element up to
    one dimension ``j`` split in any blocks, and no split after it.
    """
    *leading, cols = sizes
    *leading_blocks, block_cols = blocks
    j = next(
        (d for d, (size, count) in enumerate(zip(leading, leading_blocks)) if size != count), len(leading)
    )
    if any(count != 1 for count in leading_blocks[j + 1 :]):
        return None
    return math.prod(leading), cols, math.prod(leading_blocks), block_cols


def _int4_operands(scale: np.ndarray, zero_point: np.ndarray | None, floats: np.ndarray) -> tuple | None:
    """The compiled kernels' [rows, cols] float matrix, scale and int8 zero point, or None when they
    cannot take the problem (a float matrix not contiguous, other types, blocks that do not merge)."""
    matrix = _as_matrix(floats.shape, scale.shape)
    float_types = (np.float32, np.float16)
    if matrix is None or not floats.flags.c_contiguous or floats.dtype not in float_types:
        return None
    if scale.dtype not in float_types:
        return None
    rows, cols, block_rows, block_cols = matrix
    if zero_point is not None:
        zero_point = zero_point.astype(np.int8).reshape(block_rows, block_cols)
    return floats.reshape(rows, cols), scale.reshape(block_rows, block_cols), zero_point


def dequantize_packed(packed: np.ndarray, dtype: np.dtype, scale: np.ndarray, zero_point: np.ndarray | None,
                      out: np.ndarray) -> bool:  # fmt: skip
    """Dequantize ``out.size`` C-ordered nibbles of ``packed`` into ``out`` with the compiled kernel.

    False (nothing written) when the kernel cannot take the operands as they are.
    """
    signed = dtype == FOUR_BIT_DTYPES[0]
    return _int4_kernel(lambda floats, s, z: _core.dequantize_int4(packed, s, z, floats, signed), out, scale,
                        zero_point)  # fmt: skip


def quantize_packed(x: np.ndarray, scale: np.ndarray, zero_point: np.ndarray | None, packed: np.ndarray,
                    dtype: np.dtype, reciprocal_division: bool) -> bool:  # fmt: skip
    """Quantize ``x`` into C-ordered nibbles of ``packed`` (the others kept) with the compiled kernel.

    False (nothing written) when the kernel cannot take the operands as they are.
    """
    signed, reciprocal = dtype == FOUR_BIT_DTYPES[0], reciprocal_division
    return _int4_kernel(lambda floats, s, z: _core.quantize_int4(floats, s, z, packed, signed, reciprocal),
                        x, scale, zero_point)  # fmt: skip


def _int4_kernel(kernel: Callable[[np.ndarray, np.ndarray, np.ndarray | None], None], floats: np.ndarray,
                 scale: np.ndarray, zero_point: np.ndarray | None) -> bool:  # fmt: skip
    """``kernel(matrix, scale, zero_point)`` on the float side's [rows, cols] matrix; False (nothing
    written) when the kernel cannot take the operands as they are."""
    operands = _int4_operands(scale, zero_point, floats)
    if operands is None:
        return False
    try:
        kernel(*operands)
    except BufferError:
        return False
    return True


def quantize(desc, views: Views, out: np.ndarray | Nibbles, reciprocal_division: bool) -> None:
    scale, zero_point = _quantization_tensors(views)
    x = views["input"]
    if isinstance(out, Nibbles) and out.is_packed:
        if quantize_packed(x, scale, zero_point, out.memory, out.dtype, reciprocal_division):
            return
    result = reference.quantize(x, scale, zero_point, out.dtype, reciprocal_division=reciprocal_division)
    _deliver(result, out)


def dequantize(desc, views: Views, out: np.ndarray, reciprocal_division: bool) -> None:
    scale, zero_point = _quantization_tensors(views)
    q = views["input"]
    if (
        isinstance(q, Nibbles)
        and q.is_packed
        and dequantize_packed(q.memory, q.dtype, scale, zero_point, out)
    ):
        return
    out[...] = reference.dequantize(_values(q), scale, zero_point, out.dtype)


def dynamic_quantize_linear(x: np.ndarray, out: np.ndarray,
                            reciprocal_division: bool) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """DYNAMIC_QUANTIZE_LINEAR: quantize ``x`` (float32 or float16) into ``out`` (uint8 or int8) with
    the scale and zero point its range gives, which are returned (0-d arrays: float32, ``out``'s type).

    ONNX's definition (onnx.reference's DynamicQuantizeLinear, and onnxruntime's
    ``GetQuantizationParameter``, onnxruntime/core/util/qmath.h@c4780e65), in float32: the range of the
    values that are not NaN, widened to include 0; ``scale = (rmax - rmin) / (qmax - qmin)``
    (``1 / (qmax - qmin)`` when ``rmax == rmin``, as onnx.reference; onnxruntime's CPU kernel takes
    1.0); ``zero point = round_half_even(qmin - rmin / scale)``, saturated (NaN gives 0). Then the
    quantize kernel. One pass of the compiled kernels for the range and the parameters
    (``_core.dynamic_quantization``), one for the quantization.

    >>> out = np.empty(6, np.uint8)
    >>> dynamic_quantize_linear(np.float32([0, 2, -3, -2.5, 1.34, 0.5]), out, False)
    (array(0.01960784, dtype=float32), array(153, dtype=uint8))
    >>> out
    array([153, 255,   0,  26, 221, 179], dtype=uint8)
    """
    scale, zero_point = _core.dynamic_quantization(_readable(x), out.dtype == np.int8)
    scale, zero_point = np.array(scale, np.float32), np.array(zero_point, out.dtype)
    _call(_core.quantize, (x, scale, zero_point), out, reciprocal_division)
    return scale, zero_point


Kernel = Callable[[OperatorDesc, Views, np.ndarray, bool], None]

KERNELS: dict[type[OperatorDesc], Kernel] = {
    ElementWiseQuantizeLinear: quantize_linear,
    ElementWiseDequantizeLinear: dequantize_linear,
    ElementWiseQuantizedLinearAdd: quantized_linear_add,
    ElementWiseAdd: add,
    ElementWiseAdd1: add,
    QuantizedLinearMatrixMultiply: quantized_linear_matrix_multiply,
    Quantize: quantize,
    Dequantize: dequantize,
}
