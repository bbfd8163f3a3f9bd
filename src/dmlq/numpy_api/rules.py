"""The NumPy layer's argument rules, each stated once: data, scales, zero points, ``dtype``,
``out``, broadcasting, the blockwise ``axis`` and ``block_size``, and the windows' attributes.

Every NumPy-layer function (and :mod:`dmlq.dask`, which checks its arguments by the same rules)
turns its arguments into arrays of the operator's dtypes here, or raises a :class:`DmlError`
(a ``ValueError``) naming the argument and the rule.

>>> scale(0.5, "scale", F32)
array(0.5, dtype=float32)
>>> scale(0.0, "scale", F32)
Traceback (most recent call last):
...
dmlq.errors.DmlError: scale: a scale of 0 is undefined in DirectML
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, NoReturn, Protocol, TypeGuard, cast

import numpy as np
from numpy.typing import DTypeLike, NDArray

from ..errors import DmlError
from ..int4 import FOUR_BIT_DTYPES
from ..ops.windows import uint_problem
from ..reference.saturate import integer_range
from ..reference.windows import output_size
from ..tensor import MAX_DIMENSION_COUNT, plain_ints

U8, I8 = np.dtype(np.uint8), np.dtype(np.int8)
F32, F16, I32 = np.dtype(np.float32), np.dtype(np.float16), np.dtype(np.int32)
_FLOAT_MAX = {F32: float(np.finfo(F32).max), F16: float(np.finfo(F16).max)}


# -- what an argument is ------------------------------------------------------------------------


def is_numpy(value: object) -> TypeGuard[np.ndarray | np.generic]:
    """Whether ``value`` carries a dtype (a NumPy array or scalar), as Python numbers and lists do not."""
    return isinstance(value, (np.ndarray, np.generic))


def is_exactly(value: object, dtype: np.dtype) -> TypeGuard[NDArray[Any]]:
    """Whether ``value`` is an ndarray of ``dtype`` in native order (a cheap test for the common case:
    NumPy's native built-in dtypes are single objects)."""
    return type(value) is np.ndarray and value.dtype is dtype


def scalar_as_array(value: object, dtype: np.dtype) -> object:
    """A NumPy scalar of ``dtype`` as a 0-d array (then :func:`is_exactly`); anything else as it is."""
    return np.asarray(value) if type(value) is dtype.type else value


def native(dtype: np.dtype) -> np.dtype:
    """``dtype`` in native byte order: a byte-swapped array means the same values as a native one."""
    return dtype if dtype.isnative else dtype.newbyteorder("=")


def as_array(value: object, name: str) -> np.ndarray:
    """``value`` as a numeric array (4-bit ones included) in native byte order."""
    if value is None:
        raise DmlError(f"{name}: None is not an array")
    try:
        array = np.asarray(value)
    except (TypeError, ValueError) as error:
        raise DmlError(f"{name}: cannot be read as an array ({error})") from None
    dtype = array.dtype
    if dtype.kind not in "biuf" and dtype not in FOUR_BIT_DTYPES:
        raise DmlError(f"{name}: dtype {dtype} is not numeric")
    return array if dtype.isnative else array.astype(native(dtype))


def names(dtypes: Sequence[np.dtype]) -> str:
    return ", ".join(str(d) for d in dtypes)


# -- data ----------------------------------------------------------------------------------------


def data(value: object, name: str, allowed: Sequence[np.dtype], python_dtype: np.dtype,
         floats: np.dtype | None = None) -> np.ndarray:  # fmt: skip
    """An operator's data: a NumPy array or scalar of a dtype its support table lists (``allowed``);
    Python numbers and lists take ``python_dtype`` (integers must fit it). A NumPy float array of
    another float dtype (float64) converts to ``floats`` where the operator takes floats; any other
    dtype is refused, never converted (no integer dtype becomes another).

    >>> data(np.float64([0.5]), "x", (F32, F16, I32), F32, floats=F32)
    array([0.5], dtype=float32)
    >>> data(np.int64([1]), "x", (F32, F16, I32), F32, floats=F32)
    Traceback (most recent call last):
    ...
    dmlq.errors.DmlError: x: dtype int64 is not supported (expected float32, float16, int32)
    """
    array = as_array(value, name)
    if not is_numpy(value):
        return _python_numbers(array, name, python_dtype)
    if array.dtype in allowed:
        return array
    if floats is not None and array.dtype.kind == "f":
        return _to_float(array, floats)
    raise DmlError(f"{name}: dtype {array.dtype} is not supported (expected {names(allowed)})")


def integer_data(value: object, name: str, zero_point: object, allowed: Sequence[np.dtype]) -> np.ndarray:
    """Integer data of an ``allowed`` dtype (:func:`data`); Python numbers and lists take the dtype
    their zero point carries when it is one of those, else uint8.

    >>> integer_data([1, 2], "q", np.int8(0), (U8, I8))
    array([1, 2], dtype=int8)
    """
    if type(value) is np.ndarray and value.dtype in allowed:  # the common case: nothing to convert
        return value
    carried = native(zero_point.dtype) if is_numpy(zero_point) else U8
    return data(value, name, allowed, carried if carried in allowed else U8)


def _python_numbers(array: np.ndarray, name: str, dtype: np.dtype) -> np.ndarray:
    """Python numbers (``array``, as NumPy read them) as ``dtype``."""
    if array.dtype.kind == "b":
        raise DmlError(f"{name}: boolean values are not numbers here")
    if dtype.kind == "f":
        return _to_float(array, dtype)
    return _integers(array, name, dtype)


def _integers(array: np.ndarray, name: str, dtype: np.dtype) -> np.ndarray:
    """Python integers as ``dtype``; DmlError naming the first one outside its range."""
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


def _to_float(array: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """``array`` as ``dtype``: values beyond its range become infinity (which saturates), silently."""
    if array.size == 1 and abs(array.item()) <= _FLOAT_MAX[dtype]:  # cannot overflow: no errstate
        return array.astype(dtype)
    with np.errstate(over="ignore"):
        return array.astype(dtype)


def float_operands(operands: Mapping[str, object], allowed: Sequence[np.dtype],
                   rule: str) -> dict[str, np.ndarray | None]:  # fmt: skip
    """Float data of :func:`one_float_dtype` for each operand that is not None: NumPy floats of
    another float dtype (float64) convert to float32; Python numbers and lists take that dtype.

    >>> float_operands({"a": [1.0], "b": np.float16(2), "c": None}, (F32, F16), "one type")
    {'a': array([1.], dtype=float16), 'b': array(2., dtype=float16), 'c': None}
    """
    dtype = one_float_dtype(operands, allowed, rule)
    return {name: None if value is None else data(value, name, allowed, dtype, floats=F32)
            for name, value in operands.items()}  # fmt: skip


def one_float_dtype(operands: Mapping[str, object], allowed: Sequence[np.dtype], rule: str) -> np.dtype:
    """The one float dtype of ``allowed`` (float32, float16) of the NumPy floats among ``operands``, a
    float of another dtype (float64) counting as the float32 it converts to; float32 when there is
    none. Two are refused (``rule`` says why: DirectML's operator has one data type for them).

    >>> one_float_dtype({"a": 0.5, "b": np.float16([1])}, (F32, F16), "one type")
    dtype('float16')
    >>> one_float_dtype({"a": np.float64(0.5), "b": np.float16([1])}, (F32, F16), "one type")
    Traceback (most recent call last):
    ...
    dmlq.errors.DmlError: a, b: float32 and float16 differ (one type)
    """
    dtypes = {}
    for name, value in operands.items():
        if is_numpy(value) and value.dtype.kind == "f":
            dtypes[name] = native(value.dtype) if native(value.dtype) in allowed else F32
    first, *others = dtypes or {"": F32}
    for other in others:
        if dtypes[other] != dtypes[first]:
            raise DmlError(f"{first}, {other}: {dtypes[first]} and {dtypes[other]} differ ({rule})")
    return dtypes.get(first, F32)


def python_float_dtype(operands: Iterable[object], allowed: Sequence[np.dtype]) -> np.dtype:
    """The dtype Python numbers take beside ``operands``: the first NumPy one's of an ``allowed``
    float dtype, else float32."""
    for operand in operands:
        if is_numpy(operand) and native(operand.dtype) in allowed:
            return native(operand.dtype)
    return F32


# -- scale ---------------------------------------------------------------------------------------


def scale(value: object, name: str, dtype: np.dtype) -> np.ndarray:
    """A scale as ``dtype`` (float32, or float16 beside float16 data): Python numbers and NumPy floats
    of any float dtype convert; NumPy integers and booleans are refused; every scale is finite and
    non-zero once converted (DirectML leaves a scale of 0 undefined).

    >>> scale([0.5, 2], "scale", F16)
    array([0.5, 2. ], dtype=float16)
    """
    value = scalar_as_array(value, dtype)
    if is_exactly(value, dtype) and value.size == 1 and _valid_scale(value.item()):
        return value  # the common per-tensor scale: nothing to convert, a plain float test
    array = as_array(value, name)
    kind = array.dtype.kind
    if kind != "f" and is_numpy(value):
        raise DmlError(f"{name}: dtype {array.dtype} is not a float type")
    if kind == "b":
        raise DmlError(f"{name}: boolean values are not scales")
    converted = array if array.dtype == dtype else _to_float(array, dtype)
    if converted.size == 1:  # one scale: plain float tests cost far less than ufuncs
        valid = _valid_scale(converted.item())
    else:
        valid = bool(np.isfinite(converted).all()) and bool(converted.all())  # all(): no element is 0
    if not valid:
        _raise_scale_error(name, array, converted)
    return converted


def scale_dtype(value: object, name: str) -> np.dtype:
    """The dtype a dequantized result takes from its scale: float16 for a float16 scale, else float32."""
    return F16 if as_array(value, name).dtype == F16 else F32


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


# -- dtype and zero point --------------------------------------------------------------------------


def output_dtype(zero_point: object, dtype: object, default: np.dtype, name: str,
                 allowed: Sequence[np.dtype]) -> np.dtype:  # fmt: skip
    """The output's integer dtype: the zero point's when it is a NumPy array or scalar of one of the
    ``allowed`` dtypes (its dtype *is* the output's), else ``dtype`` (one of ``allowed``, by dtype or
    name: "int4"/"uint4" name ml_dtypes' types), else ``default``. A ``dtype`` that disagrees with
    the zero point's is refused.

    >>> output_dtype(np.int8(3), None, U8, "zero_point", (U8, I8))
    dtype('int8')
    >>> output_dtype(3, "int8", U8, "zero_point", (U8, I8))
    dtype('int8')
    """
    requested = None if dtype is None else _requested_dtype(dtype, allowed)
    carried = native(zero_point.dtype) if is_numpy(zero_point) else None
    if carried is not None and carried in allowed:
        if requested is not None and requested != carried:
            raise DmlError(f"dtype: {requested} disagrees with {name}'s dtype {carried}")
        return carried
    return default if requested is None else requested


# "int4" and "uint4" name ml_dtypes' types (NumPy reads "int4" as int32).
_FOUR_BIT_NAMES: dict[str, np.dtype] = {dtype.name: dtype for dtype in FOUR_BIT_DTYPES}


def _requested_dtype(dtype: object, allowed: Sequence[np.dtype]) -> np.dtype:
    requested = _FOUR_BIT_NAMES.get(dtype) if isinstance(dtype, str) else None
    if requested is None:
        try:
            requested = np.dtype(cast(DTypeLike, dtype))
        except TypeError:
            requested = None
    if requested is None or requested not in allowed:
        raise DmlError(f"dtype: {dtype!r} is not {_or_names(allowed)}")
    return requested


def _or_names(dtypes: Sequence[np.dtype]) -> str:
    *first, last = [str(d) for d in dtypes]
    return f"{', '.join(first)} or {last}" if first else last


def zero_point(value: object, name: str, dtype: np.dtype, tensor: str,
               allowed: Sequence[np.dtype]) -> np.ndarray | None:  # fmt: skip
    """The zero point of ``tensor`` (``dtype``): None; a NumPy array or scalar of exactly ``dtype`` (in
    any byte order: its dtype is the tensor's); or Python ints and lists, which take ``dtype`` and
    must fit it. A NumPy zero point of any other dtype is refused, never converted: another of the
    zero point dtypes ``allowed``, or a dtype no zero point has (int16, int64, bool, ...).

    >>> zero_point(3, "zero_point", I8, "the output", (U8, I8))
    array(3, dtype=int8)
    >>> zero_point(np.uint8([3]), "zero_point", U8, "q", (U8, I8))
    array([3], dtype=uint8)
    >>> zero_point(np.int64(3), "zero_point", U8, "the output", (U8, I8))
    Traceback (most recent call last):
    ...
    dmlq.errors.DmlError: zero_point: dtype int64 is not a zero point dtype (uint8, int8): a NumPy zero ...
    """
    value = scalar_as_array(value, dtype)
    if value is None:
        return None
    if is_exactly(value, dtype):
        return value
    array = as_array(value, name)
    if not is_numpy(value):
        return _python_numbers(array, name, dtype)
    if array.dtype == dtype:
        return array
    if array.dtype in allowed:
        raise DmlError(f"{name}: dtype {array.dtype} differs from {tensor}'s {dtype}")
    raise DmlError(f"{name}: dtype {array.dtype} is not a zero point dtype ({names(allowed)}): a NumPy zero "
                   f"point has {tensor}'s dtype, never converted (a Python int takes it)")  # fmt: skip


# -- broadcasting ------------------------------------------------------------------------------


class HasShape(Protocol):
    """What the shape rules read of an operand: its shape (a NumPy array, a PackedMatrix, or a
    Dask array's known shape)."""

    @property
    def shape(self) -> tuple[int, ...]: ...


def broadcast_shape(**arrays: HasShape | None) -> tuple[int, ...]:
    """NumPy's broadcasting of the arrays that are not None; DmlError naming them otherwise."""
    shapes = [a.shape for a in arrays.values() if a is not None]
    return _checked_broadcast(shapes, lambda: {name: a.shape for name, a in arrays.items() if a is not None})


def broadcast_named(shapes: dict[str, tuple[int, ...]]) -> tuple[int, ...]:
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


def channel_parameter(value: np.ndarray | None, name: str, shape: tuple[int, ...], partner: str,
                      axis: int) -> np.ndarray | None:  # fmt: skip
    """A scale, zero point or bias of a windowed operator, broadcast like a NumPy operand against
    ``partner`` (of ``shape``) without changing its shape: one element (per-tensor) or one value per
    index of ``axis`` (per-channel); as DirectML lays them, ``{1, ..., 1}`` or ``{1, C, 1, ...}``
    with ``shape``'s dimension count. Which parameters may be per-channel is the operator's rule.

    >>> channel_parameter(np.float32([[[[0.5]]], [[[2.0]]]]), "w_scale", (2, 3, 1, 1), "w", 0).shape
    (1, 2, 1, 1)
    >>> channel_parameter(np.float32([0.5, 2.0]), "w_scale", (2, 3, 1, 2), "w", 0)
    Traceback (most recent call last):
    ...
    dmlq.errors.DmlError: w_scale: shape (2,) varies along w's axis 3; per-tensor or per-channel ...
    """
    if value is None:
        return None
    ndim = len(shape)
    if value.ndim > ndim:
        raise DmlError(f"{name}: {value.ndim} dimensions; {partner} has {ndim}")
    if value.size == 1:
        return value.reshape((1,) * ndim)
    padded = (1,) * (ndim - value.ndim) + value.shape
    allowed = f"per-tensor or per-channel {(shape[axis],) + (1,) * (ndim - axis - 1)} only"
    if any(size not in (1, n) for size, n in zip(padded, shape)):
        against = f"does not broadcast against {partner}'s {shape}"
        raise DmlError(f"{name}: shape {value.shape} {against}; {allowed}")
    varying = [d for d, size in enumerate(padded) if size != 1 and d != axis]
    if varying:
        raise DmlError(f"{name}: shape {value.shape} varies along {partner}'s axis {varying[0]}; {allowed}")
    return value.reshape(1, -1, *(1,) * (ndim - 2))


def broadcast_to_result(value: np.ndarray | None, name: str, shape: tuple[int, ...]) -> np.ndarray | None:
    """``value`` (a bias, GEMM's C) broadcast like a NumPy operand to the result's ``shape``, which it
    may not change (it took part in the result's batch dimensions), through zero strides.

    >>> broadcast_to_result(np.float32([1, 2]), "bias", (3, 2)).strides
    (0, 4)
    """
    if value is None:
        return None
    try:
        broadcast: tuple[int, ...] | None = np.broadcast_shapes(value.shape, shape)
    except ValueError:
        broadcast = None
    if broadcast != shape:
        raise DmlError(f"{name}: shape {value.shape} does not broadcast to the result's {shape}")
    return np.broadcast_to(value, shape)


def dimension_count(array: np.ndarray, name: str, counts: tuple[int, int], operator: str) -> None:
    """``array`` has a dimension count the operator's table lists (``counts``: the lowest and highest)."""
    low, high = counts
    if not low <= array.ndim <= high:
        raise DmlError(f"{name}: {array.ndim} dimensions; {operator} takes {low} to {high}")


# -- out -----------------------------------------------------------------------------------------


def check_out(out: object, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """``out`` when it can receive a result of ``shape`` and ``dtype``: NumPy's rules (exactly that
    shape and dtype, in any byte order and layout, writable)."""
    if not isinstance(out, np.ndarray):
        raise DmlError(f"out: must be a numpy.ndarray, not {type(out).__name__}")
    if out.shape != shape or out.dtype.newbyteorder("=") != dtype:
        raise DmlError(f"out: expected shape {shape} and dtype {dtype}, got {out.shape} {out.dtype}")
    if not out.flags.writeable:
        raise DmlError("out: array is read-only")
    return out


# -- blockwise: axis and block_size --------------------------------------------------------------


def block_shape(shape: tuple[int, ...], scale_shape: tuple[int, ...], axis: int | None,
                block_size: int, name: str = "scale") -> tuple[int, ...]:  # fmt: skip
    """The scale's DirectML sizes (each dividing ``shape``'s) from ONNX's ``axis`` and ``block_size``.

    No axis: the scale broadcasts as a NumPy operand. An axis alone: a 1-D scale along it. A block
    size: the scale has the data's rank, ``shape[axis] / block_size`` along the axis.

    >>> block_shape((4, 64), (4, 2), 1, 32), block_shape((4, 64), (4,), 0, 0)
    ((4, 2), (4, 1))
    >>> block_shape((4, 64), (), None, 0)
    (1, 1)
    """
    if block_size < 0:
        raise DmlError(f"block_size: {block_size} is negative")
    if axis is None and block_size == 0:
        padded = (1,) * (len(shape) - len(scale_shape)) + tuple(scale_shape)
        if len(padded) != len(shape) or any(s not in (1, n) for s, n in zip(padded, shape)):
            raise DmlError(f"{name}: shape {scale_shape} does not broadcast to the data's {shape}")
        return padded
    axis = _normalized_axis(1 if axis is None else axis, len(shape))
    if block_size == 0:
        if tuple(scale_shape) not in ((shape[axis],), (1,), ()):
            raise DmlError(f"{name}: shape {scale_shape} must be ({shape[axis]},) along axis {axis}")
        return tuple(shape[axis] if d == axis and scale_shape and scale_shape[0] != 1 else 1
                     for d in range(len(shape)))  # fmt: skip
    if shape[axis] % block_size:
        raise DmlError(f"block_size: {block_size} does not divide axis {axis} of size {shape[axis]} "
                       "(DirectML's blocks are equal)")  # fmt: skip
    expected = tuple(n // block_size if d == axis else n for d, n in enumerate(shape))
    if tuple(scale_shape) != expected:
        raise DmlError(
            f"{name}: shape {scale_shape} must be {expected} for blocks of {block_size} along axis {axis}"
        )
    return expected


def _normalized_axis(axis: int, ndim: int) -> int:
    if not -ndim <= axis < ndim:
        raise DmlError(f"axis: {axis} is out of range for {ndim} dimensions")
    return axis % ndim


# -- windows: strides, dilations, padding, window sizes ----------------------------------------------


def window_attribute(value: Sequence[int] | None, name: str, count: int,
                     default: int | None) -> tuple[object, ...]:  # fmt: skip
    """A window attribute (``strides``, ``dilations``, ``start_padding``, ``end_padding``,
    ``window_size``): None is ``default`` (where there is one) for each of x's ``count`` spatial
    dimensions; else a sequence of one value per spatial dimension, NumPy integers as Python ints,
    the values as given (they are the operator's to check).

    >>> window_attribute(None, "strides", 2, 1), window_attribute(np.int64([2, 3]), "strides", 2, 1)
    ((1, 1), (2, 3))
    >>> window_attribute([2], "dilations", 2, 1)
    Traceback (most recent call last):
    ...
    dmlq.errors.DmlError: dilations: [2] holds 1 value; x has 2 spatial dimensions
    """
    if value is None and default is not None:
        return (default,) * count
    try:
        values = None if isinstance(value, (str, bytes)) else plain_ints(value)
    except TypeError:  # not iterable (a number), or not as it is (a 0-d array)
        values = None
    if not isinstance(values, tuple):
        raise DmlError(f"{name}: must be a sequence of {count} integers, not {value!r}")
    if len(values) != count:
        held = f"{len(values)} value" + ("" if len(values) == 1 else "s")
        raise DmlError(f"{name}: {list(values)} holds {held}; x has {count} spatial dimensions")
    return values


def window_attributes(given: Mapping[str, Sequence[int] | None], least: Mapping[str, int],
                      count: int) -> dict[str, tuple[object, ...]]:  # fmt: skip
    """:func:`window_attribute` of each attribute ``given`` by name, None meaning its ``least`` value
    (the operator's: stride and dilation 1, padding 0) for each spatial dimension.

    >>> window_attributes({"strides": None, "end_padding": [1]}, {"strides": 1, "end_padding": 0}, 1)
    {'strides': (1,), 'end_padding': (1,)}
    """
    return {name: window_attribute(value, name, count, least[name]) for name, value in given.items()}


def window_output_sizes(sizes: Sequence[int], window: Sequence[object],
                        attributes: Mapping[str, tuple[object, ...]]) -> tuple[int, ...]:  # fmt: skip
    """The output's size along each spatial dimension (:func:`dmlq.reference.windows.output_size`),
    from the input's ``sizes``, the ``window``'s and the window ``attributes``; 1 along a dimension
    where a value is one the operator refuses (its rule then names it, before any output size).

    >>> attributes = {"strides": (2,), "dilations": (1,), "start_padding": (1,), "end_padding": (0,)}
    >>> window_output_sizes((7,), (3,), attributes), window_output_sizes((7,), (0,), attributes)
    ((3,), (1,))
    """
    named = ("start_padding", "end_padding", "strides", "dilations")
    start, end, strides, dilations = (attributes[name] for name in named)
    return tuple(_output_size(*column) for column in zip(sizes, start, end, window, strides, dilations))


def _output_size(size: int, start: object, end: object, window: object, stride: object,
                 dilation: object) -> int:  # fmt: skip
    values = ((start, 0), (end, 0), (window, 1), (stride, 1), (dilation, 1))
    if any(uint_problem(value, least) for value, least in values):
        return 1
    return output_size(size, *cast(tuple[int, int, int, int, int], (start, end, window, stride, dilation)))
