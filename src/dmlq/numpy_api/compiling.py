"""Descriptions from arrays: the NumPy layer's operands described as DirectML tensors, compiled once
per layout on a device of the newest feature level, and run on the arrays themselves.

Broadcasting becomes zero strides; an array whose strides DirectML cannot describe (negative, or
not a whole number of elements) is copied first. The compiled operators are cached by the layout
of the arrays (dtype, shape and strides of each), so a repeated call compiles nothing.

An operator's own refusal names the NumPy argument its field came from, the field after it:

>>> import numpy as np
>>> from dmlq.ops import ConvolutionInteger
>>> x, w = np.zeros((1, 3, 4, 4), np.uint8), np.zeros((2, 3, 1, 1), np.int8)
>>> computed(ConvolutionInteger, {"input": x, "filter": w}, None, (1, 2, 4, 4), np.dtype(np.int32),
...          {"input": "x", "filter": "w"}, group_count=2)
Traceback (most recent call last):
...
dmlq.errors.DmlError: group_count: 2 must divide the input's 3 channels and the filter's 2 (M) \
(ConvolutionInteger.group_count)
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping

import numpy as np

from .. import _core
from ..device import CompiledOperator, Device
from ..errors import DmlError
from ..int4 import FOUR_BIT_DTYPES
from ..ops.base import OperatorDesc, TensorSupport
from ..tensor import TensorDesc
from ..types import DataType
from .rules import check_out

DEVICE = Device()
# The NumPy layer's one device is never replaced; its division mode, read once, costs a common call
# nothing (the property's read was ~60 ns of a 0.3 us call on CPython 3.11).
RECIPROCAL_DIVISION = DEVICE.reciprocal_division
_FOUR_BIT_DATA_TYPES = dict(zip(FOUR_BIT_DTYPES, (DataType.INT4, DataType.UINT4)))
_NUMPY_DTYPES = {data_type: dtype for dtype, data_type in _FOUR_BIT_DATA_TYPES.items()}


def describable(array: np.ndarray) -> np.ndarray:
    """``array`` itself when DirectML element strides can describe it, else a packed copy."""
    if array.flags.c_contiguous and array.dtype.isnative:
        return array
    itemsize = array.dtype.itemsize
    for stride in array.strides:
        if stride < 0 or stride % itemsize:
            return np.ascontiguousarray(array)
    return array if array.dtype.isnative else array.astype(array.dtype.newbyteorder("="))


def desc(array: np.ndarray) -> TensorDesc:
    """``array``'s description: its dtype, shape and element strides. A length-1 dimension's stride
    addresses nothing, whatever NumPy says it is (a reversed length-1 array's is negative): 0.

    >>> desc(np.float32([[2.0]])[::-1]).strides
    (0, 0)
    """
    itemsize = array.dtype.itemsize
    strides = tuple(0 if n == 1 else stride // itemsize for n, stride in zip(array.shape, array.strides))
    return TensorDesc(data_type(array.dtype), array.shape, strides)


def data_type(dtype: np.dtype) -> DataType:
    """The DirectML data type of ``dtype``, 4-bit ``ml_dtypes`` included."""
    return _FOUR_BIT_DATA_TYPES[dtype] if dtype in _FOUR_BIT_DATA_TYPES else DataType.from_dtype(dtype)


def supported_dtypes(desc_type: type[OperatorDesc], field: str) -> tuple[np.dtype, ...]:
    """The dtypes ``desc_type``'s support table lists for ``field`` at the NumPy layer's feature level.

    >>> from dmlq.ops import ElementWiseQuantizeLinear
    >>> supported_dtypes(ElementWiseQuantizeLinear, "input")
    (dtype('float32'), dtype('float16'), dtype('int32'))
    """
    return tuple(_numpy_dtype(t) for t in _support(desc_type, field).types)


def supported_dimensions(desc_type: type[OperatorDesc], field: str) -> tuple[int, int]:
    """The lowest and highest dimension counts ``desc_type``'s support table lists for ``field``.

    >>> from dmlq.ops import QuantizedLinearConvolution
    >>> supported_dimensions(QuantizedLinearConvolution, "input")
    (3, 4)
    """
    return _support(desc_type, field).dims


def _support(desc_type: type[OperatorDesc], field: str) -> TensorSupport:
    """``field``'s line of the table that applies at the NumPy layer's feature level."""
    row = desc_type.support_row(DEVICE.feature_level)
    assert row is not None, f"{desc_type.__name__} is newer than the NumPy layer's feature level"
    return row.tensors[field]


def _numpy_dtype(data_type: DataType) -> np.dtype:
    dtype = _NUMPY_DTYPES.get(data_type) or data_type.dtype
    assert dtype is not None, f"{data_type.name} has no NumPy dtype"
    return dtype


def broadcast_view(array: np.ndarray | None, shape: tuple[int, ...]) -> np.ndarray | None:
    """``array`` seen with ``shape`` (at least 1-D), broadcasting through zero strides."""
    if array is None:
        return None
    shape = shape or (1,)
    return array if array.shape == shape else np.broadcast_to(array, shape)


def at_least_1d(out: np.ndarray) -> np.ndarray:
    """A 0-d output seen as DirectML's one-element 1-D tensor."""
    return out if out.ndim else out.reshape(1)


def target(out: object, shape: tuple[int, ...], dtype: np.dtype,
           apart_from: Iterable[np.ndarray | None] = ()) -> np.ndarray:  # fmt: skip
    """Where the kernels write a result of ``shape`` and ``dtype``: a new array when ``out`` is None,
    else ``out`` itself when DirectML strides can describe it, else a temporary for
    :func:`delivered` to copy into ``out``. Overlap with an input is the kernels' concern: they
    compute into a temporary unless the output is exactly that input (element-wise operators).
    An operator that cannot run in place names its inputs in ``apart_from``: an ``out`` that may
    share memory with one of them gets a temporary, as its kernel never sees such an output
    (DirectML's execute refuses one)."""
    if out is None:
        return _core.empty(shape, dtype)
    out = check_out(out, shape, dtype)
    if any(each is not None and np.may_share_memory(out, each) for each in apart_from):
        return _core.empty(shape, dtype)
    if describable(out) is out and all(s != 0 or n == 1 for s, n in zip(out.strides, shape)):
        return out
    return _core.empty(shape, dtype)


def delivered(target: np.ndarray, out: np.ndarray | None) -> np.ndarray:
    """The result: ``target``, copied into ``out`` first when it is ``out``'s temporary."""
    if out is None or target is out:
        return target
    out[...] = target
    return out


_COMPILED: dict[tuple[object, ...], CompiledOperator] = {}
_COMPILED_LIMIT = 1024


def forget_compiled() -> None:
    """Empty the compiled-operator cache (tests start each from a new process's state)."""
    _COMPILED.clear()


def layout_key(desc_type: type[OperatorDesc], out: np.ndarray,
               operands: Iterable[np.ndarray | None]) -> tuple[object, ...]:  # fmt: skip
    """``_core.layout_key``'s key for any arrays: flat, as nested tuples cost more to build and hash.

    >>> layout_key(OperatorDesc, np.zeros(2, np.uint8), [None, np.zeros((1, 3), np.float32)])[1:]
    ('B', (2,), (1,), None, None, None, 'f', (1, 3), (12, 4))
    """
    parts: list[object] = [desc_type]
    for array in (out, *operands):
        parts += (None, None, None) if array is None else (array.dtype.char, array.shape, array.strides)
    return tuple(parts)


def computed(desc_type: type[OperatorDesc], operands: Mapping[str, np.ndarray | None], out: np.ndarray | None,
             shape: tuple[int, ...], dtype: np.dtype, arguments: Mapping[str, str],
             **fields: object) -> np.ndarray:  # fmt: skip
    """The result of ``shape`` and ``dtype`` of an operator that cannot run in place, on ``operands``
    described as they are (DirectML's sizes: broadcasting already made zero strides), written into
    ``out`` (NumPy's rules) or a new array. A result with no elements (a size of 0, or below: a
    window wider than its input) is an empty array once the description with each such size taken
    as 1 passes the operator's rules (:func:`check_empty`). The operator's refusals name the NumPy
    argument of each field (``arguments``: field -> argument; a field not in it keeps its name)."""
    if any(n < 1 for n in shape):
        check_empty(desc_type, operands, shape, dtype, arguments, **fields)
        return delivered(target(out, tuple(max(n, 0) for n in shape), dtype), out)
    written = target(out, shape, dtype, apart_from=operands.values())
    operator, read = compiled(desc_type, operands, written, tuple(operands), (), arguments, **fields)
    operator.run_arrays(read, written)
    return delivered(written, out)


def check_empty(desc_type: type[OperatorDesc], operands: Mapping[str, np.ndarray | None],
                shape: tuple[int, ...], dtype: np.dtype, arguments: Mapping[str, str],
                **fields: object) -> None:  # fmt: skip
    """Compile (to validate, not to run) the description of a call whose result has no elements: the
    packed descriptions of the operands and of a ``shape`` output (``fields`` may hold more output
    descriptions), each size below 1 taken as 1, since DirectML's sizes are at least 1. A call gives
    an empty result exactly when that call with those sizes 1 is valid."""
    descs = {name: None if each is None else TensorDesc(data_type(each.dtype), _at_least_one(each.shape))
             for name, each in operands.items()}  # fmt: skip
    output = TensorDesc(data_type(dtype), _at_least_one(shape))
    describe: Callable[..., OperatorDesc] = desc_type
    _compile(describe(**descs, output=output, **fields), arguments)


def _at_least_one(shape: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(max(n, 1) for n in shape) or (1,)


def _compile(desc: OperatorDesc, arguments: Mapping[str, str] | None) -> CompiledOperator:
    """``desc`` compiled on the NumPy layer's device; a refusal names the NumPy argument of its field."""
    try:
        return DEVICE.compile_operator(desc)
    except DmlError as error:
        if arguments is None:
            raise
        raise _for_arguments(error, type(desc).__name__, arguments) from None


def _for_arguments(error: DmlError, operator: str, arguments: Mapping[str, str]) -> DmlError:
    """``error`` (``Operator.field: rule (device is ...)``) as ``argument: rule (Operator.field)``.

    >>> str(_for_arguments(DmlError("Gemm.b: sizes [2, 3] do not continue a's K = 4 (device is 6_4)"),
    ...                    "Gemm", {}))
    "b: sizes [2, 3] do not continue a's K = 4 (Gemm.b)"
    """
    message = str(error)
    where, separator, rule = message[len(operator) + 1 :].partition(": ")
    if not message.startswith(f"{operator}.") or not separator:  # not a refusal of one of its fields
        return error
    rule = re.sub(r" \(device is [^()]*\)$", "", rule)
    field = where.partition("[")[0]
    argument = arguments.get(where) or arguments.get(field, field) + where[len(field) :]
    return DmlError(f"{argument}: {rule} ({operator}.{where})")


def run(desc_type: type[OperatorDesc], operands: Mapping[str, np.ndarray | None], out: np.ndarray,
        as_given: tuple[str, ...] = (), per_tensor: tuple[str, ...] = (),
        **fields: object) -> None:  # fmt: skip
    """Run the operator on ``operands`` (arrays that broadcast to ``out``) into ``out``."""
    operator, operands = compiled(desc_type, operands, out, as_given, per_tensor, None, **fields)
    operator.run_arrays(operands, out)


def compiled(desc_type: type[OperatorDesc], operands: Mapping[str, np.ndarray | None], out: np.ndarray,
             as_given: tuple[str, ...] = (), per_tensor: tuple[str, ...] = (),
             arguments: Mapping[str, str] | None = None,
             **fields: object) -> tuple[CompiledOperator, Mapping[str, np.ndarray | None]]:  # fmt: skip
    """The operator compiled for ``operands`` and ``out``, and the operands its kernel reads.

    The description, with each operand broadcast to the output's sizes through zero strides (the
    ones named in ``as_given`` described with their own sizes, the one-element ones named in
    ``per_tensor`` as DirectML's per-tensor {1, ..., 1}), is compiled once per layout; the kernels
    then read the operands as they are (packed copies of those DirectML strides cannot describe).
    With ``arguments`` (field -> NumPy argument), a refusal names the argument (:func:`computed`).
    """
    key = _core.layout_key(desc_type, out, *operands.values())  # the common case, built in C
    if key is None:  # a strided or byte-swapped operand: described as it is, or copied
        operands = {name: None if each is None else describable(each) for name, each in operands.items()}
        key = layout_key(desc_type, out, operands.values())
    if fields:
        key += tuple(map(repr, fields.values()))
    operator = _COMPILED.get(key)
    if operator is None:
        views = {name: _view_to_describe(operand, out.shape, name in as_given, name in per_tensor)
                 for name, operand in operands.items()}  # fmt: skip
        descs = {name: None if view is None else desc(view) for name, view in views.items()}
        describe: Callable[..., OperatorDesc] = desc_type  # its fields are the operator's
        operator = _compile(describe(**descs, output=desc(out), **fields), arguments)
        if len(_COMPILED) >= _COMPILED_LIMIT:
            _COMPILED.clear()
        _COMPILED[key] = operator
    return operator, operands


def _view_to_describe(operand: np.ndarray | None, shape: tuple[int, ...], as_given: bool,
                      per_tensor: bool) -> np.ndarray | None:  # fmt: skip
    """What describes ``operand`` in an operator whose output has ``shape`` (see :func:`compiled`)."""
    if operand is not None and per_tensor:
        return operand.reshape((1,) * len(shape))
    return operand if as_given else broadcast_view(operand, shape)
