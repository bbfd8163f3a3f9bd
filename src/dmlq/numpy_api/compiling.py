"""Descriptions from arrays: the NumPy layer's operands described as DirectML tensors, compiled once
per layout on a device of the newest feature level, and run on the arrays themselves.

Broadcasting becomes zero strides; an array whose strides DirectML cannot describe (negative, or
not a whole number of elements) is copied first. The compiled operators are cached by the layout
of the arrays (dtype, shape and strides of each), so a repeated call compiles nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

import numpy as np

from .. import _core
from ..device import CompiledOperator, Device
from ..int4 import FOUR_BIT_DTYPES
from ..ops.base import OperatorDesc
from ..tensor import TensorDesc
from ..types import DataType
from .rules import check_out

DEVICE = Device()
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
    row = desc_type.support_row(DEVICE.feature_level)
    assert row is not None, f"{desc_type.__name__} is newer than the NumPy layer's feature level"
    return tuple(_numpy_dtype(t) for t in row.tensors[field].types)


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


def target(out: object, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """Where the kernels write a result of ``shape`` and ``dtype``: a new array when ``out`` is None,
    else ``out`` itself when DirectML strides can describe it, else a temporary for
    :func:`delivered` to copy into ``out``. Overlap with an input is the kernels' concern: they
    compute into a temporary unless the output is exactly that input (element-wise operators)."""
    if out is None:
        return _core.empty(shape, dtype)
    out = check_out(out, shape, dtype)
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


def run(desc_type: type[OperatorDesc], operands: Mapping[str, np.ndarray | None], out: np.ndarray,
        as_given: tuple[str, ...] = (), per_tensor: tuple[str, ...] = (),
        **fields: object) -> None:  # fmt: skip
    """Run the operator on ``operands`` (arrays that broadcast to ``out``) into ``out``."""
    operator, operands = compiled(desc_type, operands, out, as_given, per_tensor, **fields)
    operator.run_arrays(operands, out)


def compiled(desc_type: type[OperatorDesc], operands: Mapping[str, np.ndarray | None], out: np.ndarray,
             as_given: tuple[str, ...] = (), per_tensor: tuple[str, ...] = (),
             **fields: object) -> tuple[CompiledOperator, Mapping[str, np.ndarray | None]]:  # fmt: skip
    """The operator compiled for ``operands`` and ``out``, and the operands its kernel reads.

    The description, with each operand broadcast to the output's sizes through zero strides (the
    ones named in ``as_given`` described with their own sizes, the one-element ones named in
    ``per_tensor`` as DirectML's per-tensor {1, ..., 1}), is compiled once per layout; the kernels
    then read the operands as they are (packed copies of those DirectML strides cannot describe).
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
        operator = DEVICE.compile_operator(describe(**descs, output=desc(out), **fields))
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
