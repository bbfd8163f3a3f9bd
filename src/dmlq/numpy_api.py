"""The NumPy layer: plain functions on arrays with NumPy broadcasting.

Each function turns its arguments into the DirectML descriptions of one operator (broadcasting
becomes zero strides), compiles them on a device of the newest feature level, and runs the
compiled operator on the arrays. The rules are the operators' own; this module only adds the
NumPy-side argument checks (dtypes, broadcasting, finite non-zero scales).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import NoReturn

import numpy as np

from . import _core
from . import activations as _activations
from .device import CompiledOperator, Device
from .errors import DmlError
from .ops import (
    ElementWiseAdd,
    ElementWiseAdd1,
    ElementWiseDequantizeLinear,
    ElementWiseQuantizedLinearAdd,
    ElementWiseQuantizeLinear,
    OperatorDesc,
    QuantizedLinearMatrixMultiply,
)
from .packed import PackedMatrix
from .reference.saturate import saturate
from .tensor import MAX_DIMENSION_COUNT, TensorDesc
from .types import DataType

__all__ = [
    "quantize_linear",
    "dequantize_linear",
    "add",
    "quantized_linear_add",
    "quantized_linear_matrix_multiply",
    "pack_matrix_multiply_b",
]

_DEVICE = Device()
U8, I8 = np.dtype(np.uint8), np.dtype(np.int8)
F32, F16, I32 = np.dtype(np.float32), np.dtype(np.float16), np.dtype(np.int32)
BYTE_TYPES = (U8, I8)
QUANTIZE_INPUT_TYPES, FLOAT_TYPES = (F32, F16, I32), (F32, F16)
_FLOAT_MAX = {F32: float(np.finfo(F32).max), F16: float(np.finfo(F16).max)}
DEQUANTIZE_INPUT_TYPES = tuple(np.dtype(t) for t in ("int32", "int16", "int8",
                                                     "uint32", "uint16", "uint8"))  # fmt: skip


# -- argument conversion ---------------------------------------------------------------------


def _is_numpy(value: object) -> bool:
    return isinstance(value, (np.ndarray, np.generic))


def _as_array(value: object, name: str) -> np.ndarray:
    if value is None:
        raise DmlError(f"{name}: None is not an array")
    try:
        array = np.asarray(value)
    except (TypeError, ValueError) as error:
        raise DmlError(f"{name}: cannot be read as an array ({error})") from None
    if array.dtype.kind not in "biuf":
        raise DmlError(f"{name}: dtype {array.dtype} is not numeric")
    return array


def _names(dtypes: Sequence[np.dtype]) -> str:
    return ", ".join(str(d) for d in dtypes)


def _convert_integers(array: np.ndarray, name: str, dtype: np.dtype) -> np.ndarray:
    if array.dtype == dtype:
        return array
    if array.dtype.kind not in "iu":
        raise DmlError(f"{name}: {array.dtype} values cannot be {dtype} integers")
    info = np.iinfo(dtype)
    if array.size and (array.min() < info.min or array.max() > info.max):
        raise DmlError(f"{name}: values outside the {dtype} range [{info.min}, {info.max}]")
    return array.astype(dtype)


def _operand(value: object, name: str, allowed: Sequence[np.dtype], python_dtype: np.dtype,
             same_kind: np.dtype | None = None) -> np.ndarray:  # fmt: skip
    """``value`` as an array of an allowed dtype.

    Python scalars and lists take ``python_dtype``; a NumPy dtype outside ``allowed`` but of the
    same kind as ``same_kind`` (float64 for a float32 operand) converts to ``same_kind``.
    """
    array = _as_array(value, name)
    if not _is_numpy(value):
        target = python_dtype
    elif array.dtype in allowed:
        return array
    elif same_kind is not None and array.dtype.kind == same_kind.kind:
        target = same_kind
    else:
        raise DmlError(f"{name}: dtype {array.dtype} is not supported (expected {_names(allowed)})")
    if target.kind == "f":
        if array.dtype.kind == "b":
            raise DmlError(f"{name}: boolean values are not numbers here")
        return _to_float(array, target)
    return _convert_integers(array, name, target)


def _to_float(array: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """``array`` as ``dtype``: values beyond its range become infinity (which saturates), silently."""
    if array.size == 1 and abs(array.item()) <= _FLOAT_MAX[dtype]:  # cannot overflow: no errstate
        return array.astype(dtype)
    with np.errstate(over="ignore"):
        return array.astype(dtype)


def _scale(value: object, name: str, dtype: np.dtype) -> np.ndarray:
    """A scale converted to ``dtype`` (float32, or float16 beside float16 data): finite, non-zero."""
    array = _as_array(value, name)
    kind = array.dtype.kind
    if kind != "f" and _is_numpy(value):
        raise DmlError(f"{name}: dtype {array.dtype} is not a float type")
    if kind == "b":
        raise DmlError(f"{name}: boolean values are not scales")
    if array.dtype != dtype:
        array = _to_float(array, dtype)
    if array.size == 1:  # one scale: plain float tests cost far less than ufuncs
        value = array.item()
        finite, zero = math.isfinite(value), value == 0
    else:
        finite, zero = bool(np.all(np.isfinite(array))), bool(np.any(array == 0))
    if not finite:
        raise DmlError(f"{name}: scales must be finite (got {array[~np.isfinite(array)][0]})")
    if zero:
        raise DmlError(f"{name}: a scale of 0 is undefined in DirectML")
    return array


def _output_dtype(zero_point: object, dtype: object, default: np.dtype, name: str) -> np.dtype:
    """The output's 8-bit dtype: the zero point's NumPy dtype, else ``dtype``, else ``default``."""
    requested = None
    if dtype is not None:
        try:
            requested = np.dtype(dtype)
        except TypeError:
            requested = None
        if requested not in BYTE_TYPES:
            raise DmlError(f"dtype: {dtype!r} is not uint8 or int8")
    if _is_numpy(zero_point):
        carried = zero_point.dtype
        if carried not in BYTE_TYPES:
            raise DmlError(f"{name}: dtype {carried} must be uint8 or int8 (the output's type)")
        if requested is not None and requested != carried:
            raise DmlError(f"dtype: {requested} disagrees with {name}'s dtype {carried}")
        return carried
    return requested or default


def _zero_point(value: object, name: str, dtype: np.dtype) -> np.ndarray | None:
    if value is None:
        return None
    array = _as_array(value, name)
    if _is_numpy(value) and array.dtype != dtype:
        raise DmlError(f"{name}: dtype {array.dtype} differs from its tensor's {dtype}")
    return _convert_integers(array, name, dtype)


def _broadcast_shape(**arrays: np.ndarray | None) -> tuple[int, ...]:
    """NumPy's broadcasting of the arrays that are not None; DmlError naming them otherwise."""
    shapes = [a.shape for a in arrays.values() if a is not None]
    return _checked_broadcast(shapes, lambda: {name: a.shape for name, a in arrays.items() if a is not None})


def _broadcast_named(shapes: dict[str, tuple[int, ...]]) -> tuple[int, ...]:
    return _checked_broadcast(list(shapes.values()), lambda: shapes)


def _checked_broadcast(shapes: list[tuple[int, ...]],
                       named: Callable[[], dict[str, tuple[int, ...]]]) -> tuple[int, ...]:  # fmt: skip
    """The broadcast of ``shapes``; DmlError naming them (``named()``: built only for the message)."""
    shape = _broadcast_shapes(shapes)
    if shape is None or len(shape) > MAX_DIMENSION_COUNT:
        _raise_broadcast_error(named(), shape)
    return shape


def _raise_broadcast_error(shapes: dict[str, tuple[int, ...]], shape: tuple[int, ...] | None) -> NoReturn:
    if shape is None:  # named: the operands that can conflict (one-element ones never do)
        culprits = {name: each for name, each in shapes.items() if any(size != 1 for size in each)}
        listed = ", ".join(f"{name} {each}" for name, each in culprits.items())
        raise DmlError(f"{', '.join(culprits)}: shapes do not broadcast ({listed})")
    widest = max(shapes, key=lambda name: len(shapes[name]))
    raise DmlError(f"{widest}: {len(shape)} dimensions; DirectML tensors have at most 8")


def _broadcast_shapes(shapes: list[tuple[int, ...]]) -> tuple[int, ...] | None:
    """NumPy's broadcasting of ``shapes`` (None when they do not broadcast), cheap for few dims."""
    result: tuple[int, ...] | None = ()
    for shape in shapes:
        if shape == result or not shape:  # the common cases: equal shapes and 0-d operands
            continue
        result = _broadcast_pair(result, shape) if result else shape
        if result is None:
            return None
    return result


def _broadcast_pair(first: tuple[int, ...], second: tuple[int, ...]) -> tuple[int, ...] | None:
    ndim = max(len(first), len(second))
    result = []
    for a, b in zip((1,) * (ndim - len(first)) + first, (1,) * (ndim - len(second)) + second):
        if a != b and a != 1 and b != 1:
            return None
        result.append(b if a == 1 else a)
    return tuple(result)


# -- descriptions from arrays ------------------------------------------------------------------


def _describable(array: np.ndarray | None) -> np.ndarray | None:
    """``array`` itself when DirectML element strides can describe it, else a packed copy."""
    if array is None or (array.flags.c_contiguous and array.dtype.isnative):
        return array
    itemsize = array.dtype.itemsize
    for stride in array.strides:
        if stride < 0 or stride % itemsize:
            return np.ascontiguousarray(array)
    return array if array.dtype.isnative else np.ascontiguousarray(array)


def _desc(array: np.ndarray) -> TensorDesc:
    itemsize = array.dtype.itemsize
    return TensorDesc(DataType.from_dtype(array.dtype), array.shape, [s // itemsize for s in array.strides])


def _broadcast_view(array: np.ndarray | None, shape: tuple[int, ...]) -> np.ndarray | None:
    """``array`` seen with ``shape`` (at least 1-D), broadcasting through zero strides."""
    if array is None:
        return None
    shape = shape or (1,)
    return array if array.shape == shape else np.broadcast_to(array, shape)


def _at_least_1d(out: np.ndarray) -> np.ndarray:
    """A 0-d output seen as DirectML's one-element 1-D tensor."""
    return out if out.ndim else out.reshape(1)


_COMPILED: dict[tuple, CompiledOperator] = {}
_COMPILED_LIMIT = 1024


def _layout(array: np.ndarray) -> tuple[str, tuple[int, ...], tuple[int, ...]]:
    return array.dtype.char, array.shape, array.strides


_NO_LAYOUT = (None, None, None)


def _run(desc_type: type[OperatorDesc], operands: dict[str, np.ndarray | None], out: np.ndarray,
         as_given: tuple[str, ...] = (), **fields: object) -> None:  # fmt: skip
    """Run the operator on ``operands`` (arrays that broadcast to ``out``) into ``out``."""
    operator, operands = _compiled(desc_type, operands, out, as_given, **fields)
    operator.run_arrays(operands, out)


def _compiled(desc_type: type[OperatorDesc], operands: dict[str, np.ndarray | None], out: np.ndarray,
              as_given: tuple[str, ...] = (),
              **fields: object) -> tuple[CompiledOperator, dict[str, np.ndarray | None]]:  # fmt: skip
    """The operator compiled for ``operands`` and ``out``, and the operands its kernel reads.

    The description, with each operand broadcast to the output's sizes through zero strides (the
    ones named in ``as_given`` described with their own sizes), is compiled once per layout; the
    kernels then read the operands as they are (packed copies of those DirectML strides cannot
    describe).
    """
    parts = [desc_type, *_layout(out)]
    for name, operand in operands.items():  # flat: nested tuples cost more to build and hash
        if operand is None:
            parts += _NO_LAYOUT
            continue
        described = _describable(operand)
        if described is not operand:
            operands = {**operands, name: described}
        parts += _layout(described)
    if fields:
        parts += map(repr, fields.values())
    key = tuple(parts)
    operator = _COMPILED.get(key)
    if operator is None:
        views = {name: operand if name in as_given else _broadcast_view(operand, out.shape)
                 for name, operand in operands.items()}  # fmt: skip
        descs = {name: None if view is None else _desc(view) for name, view in views.items()}
        operator = _DEVICE.compile_operator(desc_type(**descs, output=_desc(out), **fields))
        if len(_COMPILED) >= _COMPILED_LIMIT:
            _COMPILED.clear()
        _COMPILED[key] = operator
    return operator, operands


# -- the five functions ------------------------------------------------------------------------


def quantize_linear(x, scale, zero_point=None, *, dtype=None) -> np.ndarray:
    """``clamp(round(x / scale) + zero_point, Min, Max)`` as uint8 or int8.

    ``x`` is float32, float16 or int32; ``scale`` broadcasts against it (a scalar is per-tensor,
    ``(C, 1)`` is per-row); halves round to even, NaN gives 0, ±inf saturates.

    >>> quantize_linear([0.5, 1.5, 2.5], 1.0)
    array([0, 2, 2], dtype=uint8)
    >>> quantize_linear([[-1.0, 1.0], [-1.0, 1.0]], [[0.5], [0.25]], np.int8(0))
    array([[-2,  2],
           [-4,  4]], dtype=int8)
    """
    x = _operand(x, "x", QUANTIZE_INPUT_TYPES, F32, same_kind=F32)
    scale = _scale(scale, "scale", F32 if x.dtype == I32 else x.dtype)
    out_dtype = _output_dtype(zero_point, dtype, U8, "zero_point")
    zero_point = _zero_point(zero_point, "zero_point", out_dtype)
    shape = _broadcast_shape(x=x, scale=scale, zero_point=zero_point)
    out = _core.empty(shape, out_dtype)
    if out.size:
        operands = {"input": x, "scale": scale, "zero_point": zero_point}
        _run(ElementWiseQuantizeLinear, operands, _at_least_1d(out))
    return out


def dequantize_linear(q, scale, zero_point=None) -> np.ndarray:
    """``(q - zero_point) * scale`` in the scale's dtype (float32 or float16).

    >>> dequantize_linear(np.uint8([0, 128, 255]), 0.5, np.uint8(128))
    array([-64. ,   0. ,  63.5], dtype=float32)
    """
    python_dtype = zero_point.dtype if _is_numpy(zero_point) else U8
    q = _operand(q, "q", DEQUANTIZE_INPUT_TYPES, python_dtype)
    scale_array = _as_array(scale, "scale")
    scale = _scale(scale, "scale", F16 if scale_array.dtype == F16 else F32)
    zero_point = _zero_point(zero_point, "zero_point", q.dtype)
    shape = _broadcast_shape(q=q, scale=scale, zero_point=zero_point)
    out = _core.empty(shape, scale.dtype)
    if out.size:
        operands = {"input": q, "scale": scale, "zero_point": zero_point}
        _run(ElementWiseDequantizeLinear, operands, _at_least_1d(out))
    return out


def add(a, b, *, fused_activation=None, out=None) -> np.ndarray:
    """``fused_activation(a + b)`` for float32 or float16 arrays of one dtype.

    ``fused_activation`` is None, a name (``"relu"``, ``"leaky_relu"``...) or an object of
    :mod:`dmlq.activations`. ``out`` may be ``a`` or ``b`` itself (in-place).

    >>> add([1.0, -3.0], [1.0, 1.0], fused_activation="relu")
    array([2., 0.], dtype=float32)
    """
    a_dtype = _float_operand_dtype(a, b)
    a = _operand(a, "a", FLOAT_TYPES, a_dtype, same_kind=F32)
    b = _operand(b, "b", FLOAT_TYPES, _float_operand_dtype(b, a), same_kind=F32)
    if a.dtype != b.dtype:
        raise DmlError(f"a, b: {a.dtype} and {b.dtype} differ (DirectML has no mixed-type add)")
    activation = _activations.from_spec(fused_activation)
    shape = _broadcast_shape(a=a, b=b)
    target = _add_target(out, shape, a, b)
    if target.size:
        operands = {"a": a, "b": b}
        if activation is None:
            _run(ElementWiseAdd, operands, _at_least_1d(target))
        else:
            _run(ElementWiseAdd1, operands, _at_least_1d(target), fused_activation=activation)
    if out is None:
        return target
    if target is not out:
        out[...] = target
    return out


def _float_operand_dtype(value: object, other: object) -> np.dtype:
    """Python numbers take the other operand's float dtype when it has one, else float32."""
    if _is_numpy(other) and other.dtype in FLOAT_TYPES:
        return other.dtype
    return F32


def _add_target(out: object, shape: tuple[int, ...], a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Where to write: ``out`` itself when it can be written directly, else a new array."""
    if out is None:
        return _core.empty(shape, a.dtype)
    if not isinstance(out, np.ndarray):
        raise DmlError(f"out: must be a numpy.ndarray, not {type(out).__name__}")
    if out.dtype != a.dtype or out.shape != shape:
        raise DmlError(f"out: expected shape {shape} and dtype {a.dtype}, got {out.shape} {out.dtype}")
    if not out.flags.writeable:
        raise DmlError("out: array is read-only")
    direct = _describable(out) is out and all(s != 0 or n == 1 for s, n in zip(out.strides, shape))
    for operand in (a, b):
        if np.may_share_memory(out, operand) and not _same_layout(out, operand):
            direct = False
    return out if direct else _core.empty(shape, a.dtype)


def _same_layout(out: np.ndarray, operand: np.ndarray) -> bool:
    layout = out.__array_interface__["data"][0], out.strides, out.shape
    return layout == (operand.__array_interface__["data"][0], operand.strides, operand.shape)


def quantized_linear_add(a, a_scale, a_zero_point, b, b_scale, b_zero_point,
                         output_scale, output_zero_point, *, dtype=None) -> np.ndarray:  # fmt: skip
    """Dequantize ``a`` and ``b``, add in float32, requantize: DirectML's QuantizedLinearAdd.

    Every scale and zero point holds one element (zero points may be None); all of them broadcast
    against each other like NumPy operands (a ``(1, 1)`` scale makes a 1-D result 2-D).

    >>> quantized_linear_add(np.uint8([10, 20]), 0.5, None, np.uint8([1, 3]), 1.0, None, 2.0, None)
    array([3, 6], dtype=uint8)
    """
    a = _byte_operand(a, "a", a_zero_point)
    b = _byte_operand(b, "b", b_zero_point)
    out_dtype = _output_dtype(output_zero_point, dtype, a.dtype, "output_zero_point")
    quantization = {
        "a_scale": _scale(a_scale, "a_scale", F32),
        "a_zero_point": _zero_point(a_zero_point, "a_zero_point", a.dtype),
        "b_scale": _scale(b_scale, "b_scale", F32),
        "b_zero_point": _zero_point(b_zero_point, "b_zero_point", b.dtype),
        "output_scale": _scale(output_scale, "output_scale", F32),
        "output_zero_point": _zero_point(output_zero_point, "output_zero_point", out_dtype),
    }
    for name, value in quantization.items():
        if value is not None and value.size != 1:
            raise DmlError(f"{name}: holds {value.size} elements; QuantizedLinearAdd is per-tensor")
    shape = _broadcast_shape(a=a, b=b, **quantization)
    out = _core.empty(shape, out_dtype)
    if out.size:
        ones = (1,) * max(len(shape), 1)  # DirectML's per-tensor {1, ..., 1}, the data's dimension count
        operands = {"a": a, "b": b}
        operands |= {name: None if v is None else v.reshape(ones) for name, v in quantization.items()}
        _run(ElementWiseQuantizedLinearAdd, operands, _at_least_1d(out), as_given=tuple(quantization))
    return out


def _byte_operand(value: object, name: str, zero_point: object) -> np.ndarray:
    python_dtype = zero_point.dtype if _is_numpy(zero_point) else U8
    if python_dtype not in BYTE_TYPES:
        raise DmlError(f"{name}_zero_point: dtype {python_dtype} must be uint8 or int8")
    return _operand(value, name, BYTE_TYPES, python_dtype)


def quantized_linear_matrix_multiply(a, a_scale, a_zero_point, b, b_scale, b_zero_point,
                                     output_scale, output_zero_point, *,
                                     dtype=None) -> np.ndarray:  # fmt: skip
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
    packed = b if isinstance(b, PackedMatrix) else None
    if packed is not None:
        b, b_scale, b_zero_point = _packed_operands(packed, b_scale, b_zero_point)
    a = _byte_operand(a, "a", a_zero_point)
    b = _byte_operand(b, "b", b_zero_point)
    _check_matrix_dimensions(a, "a")
    _check_matrix_dimensions(b, "b")
    if a.shape[-1] != b.shape[-2]:
        raise DmlError(f"a, b: a is [..., M, K] with K = {a.shape[-1]} but b has "
                       f"{b.shape[-2]} rows")  # fmt: skip
    (m, k), n = a.shape[-2:], b.shape[-1]
    out_dtype = _output_dtype(output_zero_point, dtype, a.dtype, "output_zero_point")
    quantization = {
        "a_scale": ("row", _scale(a_scale, "a_scale", F32)),
        "a_zero_point": ("row", _zero_point(a_zero_point, "a_zero_point", a.dtype)),
        "b_scale": ("column", _scale(b_scale, "b_scale", F32)),
        "b_zero_point": ("column", _zero_point(b_zero_point, "b_zero_point", b.dtype)),
        "output_scale": ("output", _scale(output_scale, "output_scale", F32)),
        "output_zero_point": ("output", _zero_point(output_zero_point, "output_zero_point",
                                                    out_dtype)),
    }  # fmt: skip
    values = {name: value for name, (_, value) in quantization.items()}
    out_shape = (*_matrix_batch({"a": a, "b": b, **values}), m, n)
    ndim = len(out_shape)
    operands = {name: _matrix_quantization(value, name, kind, m, n, ndim)
                for name, (kind, value) in quantization.items()}  # fmt: skip
    if not np.prod(out_shape):
        return np.empty(out_shape, out_dtype)
    if k == 0:
        return _empty_product(operands["output_zero_point"], out_shape, out_dtype)
    out = _core.empty(out_shape, out_dtype)
    views = {"a": _batch_view(a, out_shape[:-2]), "b": _batch_view(b, out_shape[:-2]), **operands}
    operator, views = _compiled(QuantizedLinearMatrixMultiply, views, out, as_given=tuple(views))
    operator.run_arrays(views if packed is None else {**views, "b": packed.packed_b}, out)
    return out


def pack_matrix_multiply_b(b, b_scale, b_zero_point=None) -> PackedMatrix:
    """``b`` (``[..., K, N]``) with its scale and zero point, copied and packed once for
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
    b = _byte_operand(b, "b", b_zero_point)
    _check_matrix_dimensions(b, "b")
    scale = _scale(b_scale, "b_scale", F32)
    zero_point = _zero_point(b_zero_point, "b_zero_point", b.dtype)
    for name, value in (("b_scale", scale), ("b_zero_point", zero_point)):
        if value is not None:
            _matrix_quantization(value, name, "column", 1, b.shape[-1], max(value.ndim, 2))
    return PackedMatrix(b, scale, zero_point)


def _packed_operands(packed: PackedMatrix, b_scale: object,
                     b_zero_point: object) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:  # fmt: skip
    """A packed B's own B, scale and zero point; DmlError if the call passes a scale or zero point too."""
    given = [
        name
        for name, value in {"b_scale": b_scale, "b_zero_point": b_zero_point}.items()
        if value is not None
    ]
    if given:
        raise DmlError(f"{', '.join(given)}: must be None when b is a PackedMatrix (it carries its own)")
    return packed.packed_b.array, packed.b_scale, packed.b_zero_point


def _check_matrix_dimensions(operand: np.ndarray, name: str) -> None:
    if not 2 <= operand.ndim <= 4:
        raise DmlError(f"{name}: {operand.ndim} dimensions; the matrix multiply takes 2 to 4")


def _matrix_batch(operands: dict[str, np.ndarray | None]) -> tuple[int, ...]:
    """The result's batch dimensions: NumPy's broadcasting of every operand's dimensions before
    its last two (as numpy.matmul for a and b, as any NumPy operand for scales and zero points)."""
    batches = {}
    for name, operand in operands.items():
        if operand is not None and operand.ndim > 4:
            raise DmlError(f"{name}: {operand.ndim} dimensions; the matrix multiply takes at most 4")
        if operand is not None and operand.ndim > 2:
            batches[name] = operand.shape[:-2]
    return _broadcast_named(batches)


def _matrix_quantization(value: np.ndarray | None, name: str, kind: str, m: int, n: int,
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


def _batch_view(operand: np.ndarray, batch: tuple[int, ...]) -> np.ndarray:
    return np.broadcast_to(_describable(operand), (*batch, *operand.shape[-2:]))


def _empty_product(zero_point: np.ndarray | None, shape: tuple[int, ...], dtype: np.dtype):
    """K = 0: every sum is 0, so each output is its zero point."""
    if zero_point is None:
        return np.zeros(shape, dtype)
    values = saturate(zero_point.astype(np.float64), dtype)
    return np.broadcast_to(values.reshape(values.shape[-2:]), shape).copy()
