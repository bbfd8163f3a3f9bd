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
from typing import Any, TypeVar, cast, overload

import numpy as np

from . import _core, reference
from .activations import Activation
from .int4 import FOUR_BIT_DTYPES, Nibbles
from .ops import (
    ConvolutionInteger,
    Dequantize,
    DynamicQuantizeLinear,
    ElementWiseAdd,
    ElementWiseAdd1,
    ElementWiseDequantizeLinear,
    ElementWiseQuantizedLinearAdd,
    ElementWiseQuantizeLinear,
    Gemm,
    MatrixMultiplyInteger,
    MatrixMultiplyIntegerToFloat,
    OperatorDesc,
    Quantize,
    QuantizedLinearAveragePooling,
    QuantizedLinearConvolution,
    QuantizedLinearMatrixMultiply,
)
from .ops.blockwise import scale_only_zero_point
from .packed import PackedB, PackedFilter
from .types import MatrixTransform

# per field, what its kernel reads: an ndarray, a 4-bit tensor's Nibbles, a PackedB or PackedFilter, or None
Operand = Any
Views = Mapping[str, Operand]


def available_levels() -> tuple[str, ...]:
    """The CPU levels whose kernels this machine runs (``dmlq._core.set_level`` takes each), lowest
    first: ``_core.LEVELS`` up to the detected one.

    >>> available_levels()[0]
    'portable'
    """
    return _core.LEVELS[: _core.LEVELS.index(_core.detected_level()) + 1]


_View = TypeVar("_View")


def _readable(view: _View) -> _View:
    """``view`` itself, or a packed native copy when the kernels cannot read it in place (a packed
    B, not an array, is always readable)."""
    if not isinstance(view, np.ndarray) or (view.flags.aligned and view.dtype.isnative):
        return view
    return cast(_View, np.array(view, view.dtype.newbyteorder("="), order="C"))  # a fresh, aligned copy


def _call(
    function: Callable[..., object], arrays: tuple[object, ...], out: np.ndarray, *scalars: object
) -> None:
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


def quantize_linear(
    desc: ElementWiseQuantizeLinear, views: Views, out: np.ndarray, reciprocal_division: bool
) -> None:
    arrays = (views["input"], views["scale"], views["zero_point"])
    _call(_core.quantize, arrays, out, reciprocal_division)


def dequantize_linear(
    desc: ElementWiseDequantizeLinear, views: Views, out: np.ndarray, reciprocal_division: bool
) -> None:
    _call(_core.dequantize, (views["input"], views["scale"], views["zero_point"]), out)


def _activation(desc: OperatorDesc) -> tuple[int, tuple[float, float]]:
    """The fused activation's DirectML type value (0 for none) and its two parameter slots.

    Computed once per activation object (a compiled operator's description keeps its own), by
    identity: equal activations can differ in bits (an alpha of 0.0 or -0.0).
    """
    activation: Activation | None = getattr(desc, "fused_activation", None)
    if activation is None:
        return 0, (0.0, 0.0)
    cached = _ACTIVATION_ARGUMENTS.get(id(activation))
    if cached is not None and cached[0] is activation:
        return cached[1]
    if len(_ACTIVATION_ARGUMENTS) >= _ACTIVATION_ARGUMENTS_LIMIT:
        _ACTIVATION_ARGUMENTS.clear()
    first, second, *_ = (*(float(p) for p in activation.parameters()), 0.0, 0.0)
    arguments = (activation.TYPE_VALUE, (first, second))
    _ACTIVATION_ARGUMENTS[id(activation)] = activation, arguments
    return arguments


_ACTIVATION_ARGUMENTS: dict[int, tuple[Activation, tuple[int, tuple[float, float]]]] = {}
_ACTIVATION_ARGUMENTS_LIMIT = 1024


def add(
    desc: ElementWiseAdd | ElementWiseAdd1, views: Views, out: np.ndarray, reciprocal_division: bool
) -> None:
    activation, parameters = _activation(desc)
    _call(_core.add, (views["a"], views["b"]), out, activation, parameters)


_QUANTIZED_ADD_PARAMETERS = ("a_scale", "a_zero_point", "b_scale", "b_zero_point",
                             "output_scale", "output_zero_point")  # fmt: skip


def _scalar(view: np.ndarray | None) -> float | int:
    """A per-tensor view's one value as a Python number (0 for an absent zero point)."""
    return 0 if view is None else view.item(0)


def quantized_linear_add(
    desc: ElementWiseQuantizedLinearAdd, views: Views, out: np.ndarray, reciprocal_division: bool
) -> None:
    scalars = [_scalar(views[name]) for name in _QUANTIZED_ADD_PARAMETERS]
    _call(_core.quantized_add, (views["a"], views["b"]), out, *scalars, reciprocal_division)


@overload
def matrix_operand(view: np.ndarray) -> np.ndarray: ...
@overload
def matrix_operand(view: None) -> None: ...
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


def quantized_linear_matrix_multiply(
    desc: QuantizedLinearMatrixMultiply, views: Views, out: np.ndarray, reciprocal_division: bool
) -> None:
    """``views["b"]`` is an array or a :class:`PackedB` (OWNED_BY_DML, or a NumPy-layer packing)."""
    a_scale, a_zero_point, b_scale, b_zero_point, y_scale, y_zero_point = (
        matrix_operand(views[name]) for name in _MATRIX_QUANTIZATION
    )
    a, b = views["a"], matrix_b(views["b"])
    if a.shape[-1] >= _core.MAX_K:  # beyond the kernel's int32 sums: the exact int64 formula
        b_array = cast(np.ndarray, b)  # where K is this long, a packed B's operand is its private copy
        out[...] = reference.quantized_linear_matrix_multiply(
            a, a_scale, a_zero_point, b_array, b_scale, b_zero_point, y_scale, y_zero_point, out.dtype,
            reciprocal_division=reciprocal_division,
        )  # fmt: skip
        return
    operands = (a, a_scale, a_zero_point, b, b_scale, b_zero_point, y_scale, y_zero_point)
    _call(_core.matmul, operands, out, reciprocal_division)


@overload
def _values(view: np.ndarray | Nibbles) -> np.ndarray: ...
@overload
def _values(view: None) -> None: ...
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


def _int4_operands(
    scale: np.ndarray, zero_point: np.ndarray | None, floats: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None] | None:
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


def quantize(desc: Quantize, views: Views, out: np.ndarray | Nibbles, reciprocal_division: bool) -> None:
    scale, zero_point = _quantization_tensors(views)
    if zero_point is None:
        zero_point = scale_only_zero_point(out.dtype, scale.shape)
    x = views["input"]
    if isinstance(out, Nibbles) and out.is_packed:
        if quantize_packed(x, scale, zero_point, out.memory, out.dtype, reciprocal_division):
            return
    result = reference.quantize(x, scale, zero_point, out.dtype, reciprocal_division=reciprocal_division)
    _deliver(result, out)


def dequantize(desc: Dequantize, views: Views, out: np.ndarray, reciprocal_division: bool) -> None:
    scale, zero_point = _quantization_tensors(views)
    q = views["input"]
    if zero_point is None:
        zero_point = scale_only_zero_point(q.dtype, scale.shape)
    if (
        isinstance(q, Nibbles)
        and q.is_packed
        and dequantize_packed(q.memory, q.dtype, scale, zero_point, out)
    ):
        return
    out[...] = reference.dequantize(_values(q), scale, zero_point, out.dtype)


# -- the quantized family (spec/QUANTIZED-FAMILY.md) -----------------------------------------------------
# Each function adapts DirectML's views to the compiled kernels' operands (a 3-D convolution tensor
# {N, C, W} as {N, C, 1, W}, per-channel tensors as vectors, per-row and per-column ones as columns and
# rows), then runs them: the bits of dmlq.reference's formulas, which stay the oracle.


def _vector(view: np.ndarray | None) -> np.ndarray | None:
    """A per-tensor or per-channel view as its values in order (None stays None)."""
    return None if view is None else view.reshape(-1)


def _four_dimensional(view: np.ndarray) -> np.ndarray:
    """A convolution's ``{N, C, [H], W}`` view with its H (1 when absent)."""
    return view if view.ndim == 4 else view[:, :, np.newaxis]


def _window(desc: ConvolutionInteger | QuantizedLinearConvolution) -> tuple[object, ...]:
    """A convolution's window attributes in the order ``_core.convolution`` takes them."""
    return desc.strides, desc.dilations, desc.start_padding, desc.end_padding, desc.group_count


def _filter(view: np.ndarray | PackedFilter) -> object:
    """A convolution's filter as the kernels take it: its packing (OWNED_BY_DML), or the view."""
    return view.for_kernels() if isinstance(view, PackedFilter) else _four_dimensional(view)


def convolution_integer(
    desc: ConvolutionInteger, views: Views, out: np.ndarray, reciprocal_division: bool
) -> None:
    x, w = _four_dimensional(views["input"]), _filter(views["filter"])
    x_zero_point, w_zero_point = _vector(views["input_zero_point"]), _vector(views["filter_zero_point"])
    arrays = (x, None, x_zero_point, w, None, w_zero_point, None, None, None)
    _call(_core.convolution, arrays, _four_dimensional(out), *_window(desc), False)


def quantized_linear_convolution(
    desc: QuantizedLinearConvolution, views: Views, out: np.ndarray, reciprocal_division: bool
) -> None:
    x, w = _four_dimensional(views["input"]), _filter(views["filter"])
    names = ("input_scale", "input_zero_point", "filter_scale", "filter_zero_point", "bias", "output_scale",
             "output_zero_point")  # fmt: skip
    xs, xz, ws, wz, bias, ys, yz = (_vector(views[name]) for name in names)
    arrays = (x, xs, xz, w, ws, wz, bias, ys, yz)
    _call(_core.convolution, arrays, _four_dimensional(out), *_window(desc), reciprocal_division)


@overload
def _rows(view: np.ndarray) -> np.ndarray: ...
@overload
def _rows(view: None) -> None: ...
def _rows(view: np.ndarray | None) -> np.ndarray | None:
    """A per-tensor or per-row view as a column ``[M or 1, 1]`` (None stays None)."""
    return None if view is None else view.reshape(-1, 1)


@overload
def _columns(view: np.ndarray) -> np.ndarray: ...
@overload
def _columns(view: None) -> None: ...
def _columns(view: np.ndarray | None) -> np.ndarray | None:
    """A per-tensor or per-column view as a row ``[1, N or 1]`` (None stays None)."""
    return None if view is None else view.reshape(1, -1)


def matrix_multiply_integer(
    desc: MatrixMultiplyInteger, views: Views, out: np.ndarray, reciprocal_division: bool
) -> None:
    a, a_zero_point = views["a"], _rows(views["a_zero_point"])
    b, b_zero_point = views["b"], _columns(views["b_zero_point"])
    _call(_core.matmul_integer, (a, a_zero_point, b, b_zero_point), out)


def _float32(view: np.ndarray) -> np.ndarray:
    """A float16 scale widened (exactly) to the float32 the kernels take."""
    return view.astype(np.float32, copy=False)


def matrix_multiply_integer_to_float(
    desc: MatrixMultiplyIntegerToFloat, views: Views, out: np.ndarray, reciprocal_division: bool
) -> None:
    """The compiled kernel takes 8-bit A and B; 16- and 32-bit integers take the exact NumPy formula."""
    a, a_scale, a_zero_point = (
        views["a"],
        _float32(_rows(views["a_scale"])),
        _rows(views["a_zero_point"]),
    )
    b, b_scale, b_zero_point = (
        views["b"],
        _float32(_columns(views["b_scale"])),
        _columns(views["b_zero_point"]),
    )
    if a.dtype.itemsize > 1 or b.dtype.itemsize > 1:
        out[...] = reference.matrix_multiply_integer_to_float(
            a, a_scale, a_zero_point, b, b_scale, b_zero_point, views["bias"], out.dtype
        )
        return
    _call(
        _core.matmul_integer_to_float,
        (a, a_scale, a_zero_point, b, b_scale, b_zero_point, views["bias"]),
        out,
    )


def dynamic_quantize_linear(
    desc: DynamicQuantizeLinear, views: Views, out: tuple[np.ndarray, ...], reciprocal_division: bool
) -> None:
    """``out``: the quantized data, the scale and the zero point (DirectML's three outputs).

    ONNX's definition (onnx.reference's DynamicQuantizeLinear, and onnxruntime's
    ``GetQuantizationParameter``, ``onnxruntime/core/util/qmath.h``@c4780e65), in float32: the range
    widened to include 0, ``scale = (rmax - rmin) / (qmax - qmin)``, the zero point rounded half to
    even and saturated; one compiled call for the range, the parameters and the quantization
    (``_core.dynamic_quantization``: AVX2 and AVX-512 levels), or where its quantization declines
    (float16 data, widened exactly first; layouts; NaN; the portable level), the element-wise quantize.
    """
    y, scale_out, zero_point_out = out
    x = _readable(views["input"].astype(np.float32, copy=False))
    scale, zero_point, quantized = _core.dynamic_quantization(x, y.dtype == np.int8, y, reciprocal_division)
    scale_out[...], zero_point_out[...] = scale, zero_point
    if quantized:
        return
    _call(
        _core.quantize,
        (x, np.array(scale, np.float32), np.array(zero_point, y.dtype)),
        y,
        reciprocal_division,
    )


def quantized_linear_average_pooling(
    desc: QuantizedLinearAveragePooling, views: Views, out: np.ndarray, reciprocal_division: bool
) -> None:
    xs, xz, ys, yz = (_vector(views[name]) for name in ("input_scale", "input_zero_point", "output_scale",
                                                         "output_zero_point"))  # fmt: skip
    window = (desc.window_size, desc.strides, desc.dilations, desc.start_padding, desc.end_padding)
    _call(_core.average_pool, (views["input"], xs, xz, ys, yz), out, *window, desc.include_padding,
          reciprocal_division)  # fmt: skip


def gemm(desc: Gemm, views: Views, out: np.ndarray, reciprocal_division: bool) -> None:
    """The float GEMM in the compiled core: each output's sum over k in order, one float32 fused
    multiply-add per term (dmlq.reference.gemm), at every level and thread count."""
    activation, parameters = _activation(desc)
    transposed = (desc.trans_a == MatrixTransform.TRANSPOSE, desc.trans_b == MatrixTransform.TRANSPOSE)
    scalars = (*transposed, desc.alpha, desc.beta, activation, parameters)
    _call(_core.gemm, (views["a"], views["b"], views["c"]), out, *scalars)


# Each kernel takes the description of the type KERNELS keys it by.
Kernel = Callable[[Any, Views, Operand, bool], None]

KERNELS: dict[type[OperatorDesc], Kernel] = {
    ElementWiseQuantizeLinear: quantize_linear,
    ElementWiseDequantizeLinear: dequantize_linear,
    ElementWiseQuantizedLinearAdd: quantized_linear_add,
    ElementWiseAdd: add,
    ElementWiseAdd1: add,
    QuantizedLinearMatrixMultiply: quantized_linear_matrix_multiply,
    Quantize: quantize,
    Dequantize: dequantize,
    ConvolutionInteger: convolution_integer,
    QuantizedLinearConvolution: quantized_linear_convolution,
    MatrixMultiplyInteger: matrix_multiply_integer,
    MatrixMultiplyIntegerToFloat: matrix_multiply_integer_to_float,
    DynamicQuantizeLinear: dynamic_quantize_linear,
    QuantizedLinearAveragePooling: quantized_linear_average_pooling,
    Gemm: gemm,
}
