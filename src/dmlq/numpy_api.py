"""The NumPy layer: plain functions on arrays with NumPy broadcasting.

Each function turns its arguments into the DirectML descriptions of one operator (broadcasting
becomes zero strides), compiles them on a device of the newest feature level, and runs the
compiled operator on the arrays. The rules are the operators' own; this module only adds the
NumPy-side argument checks (dtypes, broadcasting, finite non-zero scales). The quantize, dequantize,
quantized add and matrix multiply common calls (per-tensor scalar parameters) are first offered to one
C call that takes only what these checks would accept unchanged, and runs it; anything else comes
back here.

Every function takes ``out=`` with NumPy's rules (exactly the result's shape and dtype, writable,
any layout, may alias an input) and then returns ``out``:

>>> out = np.zeros(3, np.uint8)
>>> quantize_linear([0.5, 1.5, 2.5], 1.0, out=out) is out, out
(True, array([0, 2, 2], dtype=uint8))
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from typing import NoReturn

import numpy as np
from numpy.typing import ArrayLike, DTypeLike

from . import _core, blockwise
from . import activations as _activations
from .device import CompiledOperator, Device
from .errors import DmlError
from .kernels import matrix_b
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
from .reference.saturate import integer_range, saturate
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


def _is_exactly(value: object, dtype: np.dtype) -> bool:
    """Whether ``value`` is an ndarray of ``dtype`` in native order (a cheap test for the common case:
    NumPy's native built-in dtypes are single objects)."""
    return type(value) is np.ndarray and value.dtype is dtype


def _scalar_as_array(value: object, dtype: np.dtype) -> object:
    """A NumPy scalar of ``dtype`` as a 0-d array (then :func:`_is_exactly`); anything else as it is."""
    return np.asarray(value) if type(value) is dtype.type else value


def _native(dtype: np.dtype) -> np.dtype:
    """``dtype`` in native byte order: a byte-swapped array means the same values as a native one."""
    return dtype if dtype.isnative else dtype.newbyteorder("=")


def _as_array(value: object, name: str) -> np.ndarray:
    """``value`` as a numeric array in native byte order."""
    if value is None:
        raise DmlError(f"{name}: None is not an array")
    try:
        array = np.asarray(value)
    except (TypeError, ValueError) as error:
        raise DmlError(f"{name}: cannot be read as an array ({error})") from None
    dtype = array.dtype
    if dtype.kind not in "biuf":
        raise DmlError(f"{name}: dtype {dtype} is not numeric")
    return array if dtype.isnative else array.astype(_native(dtype))


def _names(dtypes: Sequence[np.dtype]) -> str:
    return ", ".join(str(d) for d in dtypes)


def _convert_integers(array: np.ndarray, name: str, dtype: np.dtype) -> np.ndarray:
    """``array``'s integers as ``dtype``; DmlError naming the first one outside its range."""
    if array.dtype == dtype:
        return array
    if array.dtype.kind not in "iu":
        raise DmlError(f"{name}: {array.dtype} values cannot be {dtype} integers")
    low, high = integer_range(dtype)
    if array.size == 1:  # a Python int's zero point: a plain comparison costs far less than ufuncs
        outside = not low <= array.item() <= high
    else:
        outside = bool(array.size) and (array.min() < low or array.max() > high)
    if outside:
        first = array[(array < low) | (array > high)][0]  # boolean indexing keeps C order
        raise DmlError(f"{name}: {first} is outside the {dtype} range [{low}, {high}]")
    return array.astype(dtype)


def _operand(value: object, name: str, allowed: Sequence[np.dtype], python_dtype: np.dtype, *,
             floats: np.dtype | None = None, integers: np.dtype | None = None) -> np.ndarray:  # fmt: skip
    """``value`` as an array of an allowed dtype.

    Python scalars and lists take ``python_dtype``; NumPy float arrays of a dtype outside
    ``allowed`` (float64) convert to ``floats``, NumPy integer arrays (int64) to ``integers``
    when the values fit; any other dtype is refused.
    """
    array = _as_array(value, name)
    if not _is_numpy(value):
        target = python_dtype
    elif array.dtype in allowed:
        return array
    elif floats is not None and array.dtype.kind == "f":
        target = floats
    elif integers is not None and array.dtype.kind in "iu":
        target = integers
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
    value = _scalar_as_array(value, dtype)
    if _is_exactly(value, dtype) and value.size == 1 and _valid_scale(value.item()):
        return value  # the common per-tensor scale: nothing to convert, a plain float test
    array = _as_array(value, name)
    kind = array.dtype.kind
    if kind != "f" and _is_numpy(value):
        raise DmlError(f"{name}: dtype {array.dtype} is not a float type")
    if kind == "b":
        raise DmlError(f"{name}: boolean values are not scales")
    scale = array if array.dtype == dtype else _to_float(array, dtype)
    if scale.size == 1:  # one scale: plain float tests cost far less than ufuncs
        valid = _valid_scale(scale.item())
    else:
        valid = bool(np.isfinite(scale).all()) and bool(scale.all())  # all(): no element is 0
    if not valid:
        _raise_scale_error(name, array, scale)
    return scale


def _valid_scale(value: float) -> bool:
    return math.isfinite(value) and value != 0


def _raise_scale_error(name: str, given: np.ndarray, scale: np.ndarray) -> NoReturn:
    """Name the first scale that is not finite or is 0, as given, and say whether the conversion
    to the scale's dtype (``scale``) made it so."""
    first = int(np.flatnonzero(~np.isfinite(scale) | (scale == 0))[0])
    value, converted = float(given.flat[first]), float(scale.flat[first])
    if not math.isfinite(value):
        raise DmlError(f"{name}: scales must be finite (got {value})")
    if not math.isfinite(converted):
        raise DmlError(f"{name}: {value!r} overflows {scale.dtype}; scales must be finite")
    if value != 0:
        raise DmlError(
            f"{name}: {value!r} underflows to 0 in {scale.dtype}; a scale of 0 is undefined in DirectML"
        )
    raise DmlError(f"{name}: a scale of 0 is undefined in DirectML")


def _carried_dtype(zero_point: object, carriers: Sequence[np.dtype]) -> np.dtype | None:
    """The dtype a zero point gives its tensor: its own when it is a NumPy array or scalar of one of
    ``carriers`` (the dtypes that tensor can have), else None: Python ints and other integer
    dtypes (int64, NumPy's default) take the tensor's dtype from elsewhere, range-checked."""
    if not _is_numpy(zero_point):
        return None
    dtype = _native(zero_point.dtype)
    return dtype if dtype in carriers else None


def _output_dtype(zero_point: object, dtype: object, default: np.dtype, name: str) -> np.dtype:
    """The output's 8-bit dtype: a uint8/int8 zero point's, else ``dtype``, else ``default``."""
    requested = None
    if dtype is not None:
        try:
            requested = np.dtype(dtype)
        except TypeError:
            requested = None
        if requested not in BYTE_TYPES:
            raise DmlError(f"dtype: {dtype!r} is not uint8, int8, int4 or uint4")
    carried = None if zero_point is None else _carried_dtype(zero_point, BYTE_TYPES)
    if carried is not None:
        if requested is not None and requested != carried:
            raise DmlError(f"dtype: {requested} disagrees with {name}'s dtype {carried}")
        return carried
    return requested or default


def _zero_point(value: object, name: str, dtype: np.dtype,
                carriers: Sequence[np.dtype] = BYTE_TYPES) -> np.ndarray | None:  # fmt: skip
    """A zero point as its tensor's ``dtype``: one that carries another dtype is refused."""
    value = _scalar_as_array(value, dtype)
    if value is None or _is_exactly(value, dtype):
        return value
    carried = _carried_dtype(value, carriers)
    if carried is not None and carried != dtype:
        raise DmlError(f"{name}: dtype {carried} differs from its tensor's {dtype}")
    return _convert_integers(_as_array(value, name), name, dtype)


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
    return array if array.dtype.isnative else array.astype(array.dtype.newbyteorder("="))


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


def _target(out: object, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """Where the kernels write a result of ``shape`` and ``dtype``: a new array when ``out`` is None,
    else ``out`` itself when DirectML strides can describe it, else a temporary for
    :func:`_delivered` to copy into ``out``. Overlap with an input is the kernels' concern: they
    compute into a temporary unless the output is exactly that input (element-wise operators)."""
    if out is None:
        return _core.empty(shape, dtype)
    if not isinstance(out, np.ndarray):
        raise DmlError(f"out: must be a numpy.ndarray, not {type(out).__name__}")
    if out.shape != shape or out.dtype.newbyteorder("=") != dtype:
        raise DmlError(f"out: expected shape {shape} and dtype {dtype}, got {out.shape} {out.dtype}")
    if not out.flags.writeable:
        raise DmlError("out: array is read-only")
    if _describable(out) is out and all(s != 0 or n == 1 for s, n in zip(out.strides, shape)):
        return out
    return _core.empty(shape, dtype)


def _delivered(target: np.ndarray, out: np.ndarray | None) -> np.ndarray:
    """The result: ``target``, copied into ``out`` first when it is ``out``'s temporary."""
    if out is None or target is out:
        return target
    out[...] = target
    return out


_COMPILED: dict[tuple, CompiledOperator] = {}
_COMPILED_LIMIT = 1024


def _layout_key(desc_type: type[OperatorDesc], out: np.ndarray,
                operands: Iterable[np.ndarray | None]) -> tuple:  # fmt: skip
    """``_core.layout_key``'s key for any arrays: flat, as nested tuples cost more to build and hash.

    >>> _layout_key(OperatorDesc, np.zeros(2, np.uint8), [None, np.zeros((1, 3), np.float32)])[1:]
    ('B', (2,), (1,), None, None, None, 'f', (1, 3), (12, 4))
    """
    parts: list[object] = [desc_type]
    for array in (out, *operands):
        parts += (None, None, None) if array is None else (array.dtype.char, array.shape, array.strides)
    return tuple(parts)


def _run(desc_type: type[OperatorDesc], operands: dict[str, np.ndarray | None], out: np.ndarray,
         as_given: tuple[str, ...] = (), per_tensor: tuple[str, ...] = (),
         **fields: object) -> None:  # fmt: skip
    """Run the operator on ``operands`` (arrays that broadcast to ``out``) into ``out``."""
    operator, operands = _compiled(desc_type, operands, out, as_given, per_tensor, **fields)
    operator.run_arrays(operands, out)


def _compiled(desc_type: type[OperatorDesc], operands: dict[str, np.ndarray | None], out: np.ndarray,
              as_given: tuple[str, ...] = (), per_tensor: tuple[str, ...] = (),
              **fields: object) -> tuple[CompiledOperator, dict[str, np.ndarray | None]]:  # fmt: skip
    """The operator compiled for ``operands`` and ``out``, and the operands its kernel reads.

    The description, with each operand broadcast to the output's sizes through zero strides (the
    ones named in ``as_given`` described with their own sizes, the one-element ones named in
    ``per_tensor`` as DirectML's per-tensor {1, ..., 1}), is compiled once per layout; the kernels
    then read the operands as they are (packed copies of those DirectML strides cannot describe).
    """
    key = _core.layout_key(desc_type, out, *operands.values())  # the common case, built in C
    if key is None:  # a strided or byte-swapped operand: described as it is, or copied
        operands = {name: _describable(operand) for name, operand in operands.items()}
        key = _layout_key(desc_type, out, operands.values())
    if fields:
        key += tuple(map(repr, fields.values()))
    operator = _COMPILED.get(key)
    if operator is None:
        views = {name: _view_to_describe(operand, out.shape, name in as_given, name in per_tensor)
                 for name, operand in operands.items()}  # fmt: skip
        descs = {name: None if view is None else _desc(view) for name, view in views.items()}
        operator = _DEVICE.compile_operator(desc_type(**descs, output=_desc(out), **fields))
        if len(_COMPILED) >= _COMPILED_LIMIT:
            _COMPILED.clear()
        _COMPILED[key] = operator
    return operator, operands


def _view_to_describe(operand: np.ndarray | None, shape: tuple[int, ...], as_given: bool,
                      per_tensor: bool) -> np.ndarray | None:  # fmt: skip
    """What describes ``operand`` in an operator whose output has ``shape`` (see :func:`_compiled`)."""
    if operand is not None and per_tensor:
        return operand.reshape((1,) * len(shape))
    return operand if as_given else _broadcast_view(operand, shape)


# -- the five functions ------------------------------------------------------------------------


def quantize_linear(x: ArrayLike, scale: ArrayLike, zero_point: ArrayLike | None = None, *,
                    dtype: DTypeLike = None, axis: int | None = None, block_size: int = 0,
                    out: np.ndarray | None = None) -> np.ndarray:  # fmt: skip
    """``clamp(round(x / scale) + zero_point, Min, Max)`` as uint8, int8, int4 or uint4.

    ``x`` is float32, float16 or int32; ``scale`` broadcasts against it (a scalar is per-tensor,
    ``(C, 1)`` is per-row); halves round to even, NaN gives 0, ±inf saturates. ``dtype="int4"``
    or ``"uint4"`` (or ``ml_dtypes.int4``/``uint4``) gives an ``ml_dtypes`` array; ``axis`` and
    ``block_size`` have ONNX's meaning (opset 21, see :mod:`dmlq.blockwise`).

    >>> quantize_linear([0.5, 1.5, 2.5], 1.0)
    array([0, 2, 2], dtype=uint8)
    >>> quantize_linear([[-1.0, 1.0], [-1.0, 1.0]], [[0.5], [0.25]], np.int8(0))
    array([[-2,  2],
           [-4,  4]], dtype=int8)
    """
    if dtype is None and axis is None and block_size == 0:  # the common call in one C step, else None
        result = _core.quantize_per_tensor(x, scale, zero_point, out, _DEVICE.reciprocal_division)
        if result is not None:
            return result
    x = _quantize_input(x, "x")
    scale = _scale(scale, "scale", F32 if x.dtype == I32 else x.dtype)
    if blockwise.is_blockwise(dtype, zero_point, axis, block_size):
        if x.dtype == I32:
            raise DmlError("x: int32 data has no 4-bit or blockwise quantization (float32 or float16 only)")
        return blockwise.quantize_linear(x, scale, zero_point, dtype, axis, block_size, out)
    out_dtype = _output_dtype(zero_point, dtype, U8, "zero_point")
    zero_point = _zero_point(zero_point, "zero_point", out_dtype)
    target = _target(out, _broadcast_shape(x=x, scale=scale, zero_point=zero_point), out_dtype)
    if target.size:
        operands = {"input": x, "scale": scale, "zero_point": zero_point}
        _run(ElementWiseQuantizeLinear, operands, _at_least_1d(target))
    return _delivered(target, out)


def _quantize_input(value: object, name: str) -> np.ndarray:
    """``quantize_linear``'s data: float32, float16 or int32 (Python numbers become float32)."""
    return _operand(value, name, QUANTIZE_INPUT_TYPES, F32, floats=F32, integers=I32)


def dequantize_linear(q: ArrayLike, scale: ArrayLike, zero_point: ArrayLike | None = None, *,
                      axis: int | None = None, block_size: int = 0,
                      out: np.ndarray | None = None) -> np.ndarray:  # fmt: skip
    """``(q - zero_point) * scale`` in the scale's dtype (float32 or float16).

    ``q`` may be an ``ml_dtypes.int4``/``uint4`` array; ``axis`` and ``block_size`` have ONNX's
    meaning (opset 21, see :mod:`dmlq.blockwise`).

    >>> dequantize_linear(np.uint8([0, 128, 255]), 0.5, np.uint8(128))
    array([-64. ,   0. ,  63.5], dtype=float32)
    """
    if axis is None and block_size == 0:  # the common call in one C step, else None
        result = _core.dequantize_per_tensor(q, scale, zero_point, out)
        if result is not None:
            return result
    scale_array = _as_array(scale, "scale")
    scale = _scale(scale, "scale", F16 if scale_array.dtype == F16 else F32)
    if blockwise.is_four_bit(q) or blockwise.is_blockwise(None, zero_point, axis, block_size):
        return blockwise.dequantize_linear(q, scale, zero_point, axis, block_size, out)
    q = _integer_operand(q, "q", zero_point, DEQUANTIZE_INPUT_TYPES)
    zero_point = _zero_point(zero_point, "zero_point", q.dtype, DEQUANTIZE_INPUT_TYPES)
    target = _target(out, _broadcast_shape(q=q, scale=scale, zero_point=zero_point), scale.dtype)
    if target.size:
        operands = {"input": q, "scale": scale, "zero_point": zero_point}
        _run(ElementWiseDequantizeLinear, operands, _at_least_1d(target))
    return _delivered(target, out)


def add(a: ArrayLike, b: ArrayLike, *, fused_activation: _activations.Activation | str | None = None,
        out: np.ndarray | None = None) -> np.ndarray:  # fmt: skip
    """``fused_activation(a + b)`` for float32 or float16 arrays of one dtype.

    ``fused_activation`` is None, a name (``"relu"``, ``"leaky_relu"``...) or an object of
    :mod:`dmlq.activations`. ``out`` may be ``a`` or ``b`` itself (in-place).

    >>> add([1.0, -3.0], [1.0, 1.0], fused_activation="relu")
    array([2., 0.], dtype=float32)
    """
    relu = fused_activation == "relu" or isinstance(fused_activation, _activations.Relu)
    if fused_activation is None or relu:  # the common call, checked and run in one C step, or None
        result = _core.add_same_shape(a, b, relu, out)
        if result is not None:
            return result
    a_dtype = _float_operand_dtype(a, b)
    a = _operand(a, "a", FLOAT_TYPES, a_dtype, floats=F32)
    b = _operand(b, "b", FLOAT_TYPES, _float_operand_dtype(b, a), floats=F32)
    if a.dtype != b.dtype:
        raise DmlError(f"a, b: {a.dtype} and {b.dtype} differ (DirectML has no mixed-type add)")
    activation = _activations.from_spec(fused_activation)
    target = _target(out, _broadcast_shape(a=a, b=b), a.dtype)
    if target.size:
        operands = {"a": a, "b": b}
        if activation is None:
            _run(ElementWiseAdd, operands, _at_least_1d(target))
        else:
            _run(ElementWiseAdd1, operands, _at_least_1d(target), fused_activation=activation)
    return _delivered(target, out)


def _float_operand_dtype(value: object, other: object) -> np.dtype:
    """Python numbers take the other operand's float dtype when it has one, else float32."""
    if _is_numpy(other) and _native(other.dtype) in FLOAT_TYPES:
        return _native(other.dtype)
    return F32


def quantized_linear_add(a: ArrayLike, a_scale: ArrayLike, a_zero_point: ArrayLike | None,
                         b: ArrayLike, b_scale: ArrayLike, b_zero_point: ArrayLike | None,
                         output_scale: ArrayLike, output_zero_point: ArrayLike | None, *,
                         dtype: DTypeLike = None, out: np.ndarray | None = None) -> np.ndarray:  # fmt: skip
    """Dequantize ``a`` and ``b``, add in float32, requantize: DirectML's QuantizedLinearAdd.

    Every scale and zero point holds one element (zero points may be None); all of them broadcast
    against each other like NumPy operands (a ``(1, 1)`` scale makes a 1-D result 2-D).

    >>> quantized_linear_add(np.uint8([10, 20]), 0.5, None, np.uint8([1, 3]), 1.0, None, 2.0, None)
    array([3, 6], dtype=uint8)
    """
    if dtype is None:  # the common call, checked and run in one C step; None when it is not that call
        parameters = (b, b_scale, b_zero_point, output_scale, output_zero_point)
        result = _core.quantized_add_per_tensor(a, a_scale, a_zero_point, *parameters, out,
                                                _DEVICE.reciprocal_division)  # fmt: skip
        if result is not None:
            return result
    a = _integer_operand(a, "a", a_zero_point, BYTE_TYPES)
    b = _integer_operand(b, "b", b_zero_point, BYTE_TYPES)
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
    target = _target(out, _broadcast_shape(a=a, b=b, **quantization), out_dtype)
    if target.size:
        operands = {"a": a, "b": b, **quantization}
        _run(ElementWiseQuantizedLinearAdd, operands, _at_least_1d(target), per_tensor=tuple(quantization))
    return _delivered(target, out)


def _integer_operand(value: object, name: str, zero_point: object, allowed: Sequence[np.dtype]) -> np.ndarray:
    """Integer data of an ``allowed`` dtype; lists and NumPy integers of other dtypes (int64) take
    the dtype their zero point carries, else uint8, and must fit it."""
    if type(value) is np.ndarray and value.dtype in allowed:  # the common case: nothing to convert
        return value
    dtype = _carried_dtype(zero_point, allowed) or U8
    return _operand(value, name, allowed, dtype, integers=dtype)


def quantized_linear_matrix_multiply(a: ArrayLike, a_scale: ArrayLike, a_zero_point: ArrayLike | None,
                                     b: ArrayLike | PackedMatrix, b_scale: ArrayLike | None,
                                     b_zero_point: ArrayLike | None,
                                     output_scale: ArrayLike, output_zero_point: ArrayLike | None, *,
                                     dtype: DTypeLike = None,
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
    packed = b if isinstance(b, PackedMatrix) else None
    if packed is not None:
        b_scale, b_zero_point = _packed_parameters(packed, b_scale, b_zero_point)
    if dtype is None:  # the common call, checked and run in one C step; None when it is not that call
        kernel_b = b if packed is None else matrix_b(packed.packed_b)
        parameters = (b_scale, b_zero_point, output_scale, output_zero_point)
        result = _core.matmul_per_tensor(a, a_scale, a_zero_point, kernel_b, *parameters, out,
                                         _DEVICE.reciprocal_division)  # fmt: skip
        if result is not None:
            return result
    if packed is not None:
        b = packed.packed_b.for_shape_rules()
    a = _integer_operand(a, "a", a_zero_point, BYTE_TYPES)
    b = _integer_operand(b, "b", b_zero_point, BYTE_TYPES)
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
        "b_scale": ("column", b_scale if packed else _scale(b_scale, "b_scale", F32)),
        "b_zero_point": ("column", b_zero_point if packed else _zero_point(b_zero_point, "b_zero_point",
                                                                          b.dtype)),
        "output_scale": ("output", _scale(output_scale, "output_scale", F32)),
        "output_zero_point": ("output", _zero_point(output_zero_point, "output_zero_point",
                                                    out_dtype)),
    }  # fmt: skip
    values = {name: value for name, (_, value) in quantization.items()}
    checked = ("b_scale", "b_zero_point") if packed else ()
    if _is_plain_matrix_product(a, b, values, checked):
        out_shape, operands = (m, n), {name: _as_row(value) for name, value in values.items()}
    else:
        out_shape = (*_matrix_batch({"a": a, "b": b, **values}), m, n)
        operands = {name: _matrix_quantization(value, name, kind, m, n, len(out_shape))
                    for name, (kind, value) in quantization.items()}  # fmt: skip
    target = _target(out, out_shape, out_dtype)
    if target.size and k == 0:
        _write_empty_product(operands["output_zero_point"], target)
    elif target.size:
        views = {"a": _batch_view(a, out_shape[:-2]), "b": _batch_view(b, out_shape[:-2]), **operands}
        operator, views = _compiled(QuantizedLinearMatrixMultiply, views, target, as_given=tuple(views))
        operator.run_arrays(views if packed is None else {**views, "b": packed.packed_b}, target)
    return _delivered(target, out)


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
    b = _integer_operand(b, "b", b_zero_point, BYTE_TYPES)
    _check_matrix_dimensions(b, "b")
    scale = _scale(b_scale, "b_scale", F32)
    zero_point = _zero_point(b_zero_point, "b_zero_point", b.dtype)
    for name, value in (("b_scale", scale), ("b_zero_point", zero_point)):
        if value is not None:
            _matrix_quantization(value, name, "column", 1, b.shape[-1], max(value.ndim, 2))
    return PackedMatrix(b, scale, zero_point)


def _packed_parameters(packed: PackedMatrix, b_scale: object,
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
    described = _describable(operand)
    if operand.shape[:-2] == batch:  # nothing to broadcast: skip the cost of a broadcast view
        return described
    return np.broadcast_to(described, (*batch, *operand.shape[-2:]))


def _write_empty_product(zero_point: np.ndarray | None, target: np.ndarray) -> None:
    """K = 0: every sum is 0, so each output is its zero point."""
    if zero_point is None:
        target[...] = 0
    else:
        target[...] = saturate(zero_point.astype(np.float64), target.dtype).reshape(zero_point.shape[-2:])
