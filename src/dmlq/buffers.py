"""Buffers seen through tensor descriptions: read through sizes and element strides, written the same way."""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import as_strided

from .errors import DmlError
from .tensor import TensorDesc

__all__ = ["buffer_bytes", "tensor_view", "byte_range"]


def buffer_bytes(buffer: object, where: str, *, writable: bool) -> np.ndarray:
    """The buffer's memory as a flat uint8 array (no copy); DmlError if it cannot serve."""
    if isinstance(buffer, np.ndarray):
        if buffer.dtype.hasobject:
            raise DmlError(f"{where}: buffer is an ndarray of Python objects, not of bytes")
        if not (buffer.flags.c_contiguous or buffer.flags.f_contiguous):
            raise DmlError(f"{where}: buffer is a non-contiguous ndarray; pass contiguous memory")
        flat = buffer.ravel(order="K").view(np.uint8)  # memory order: a view, also of F-ordered arrays
    else:
        try:
            flat = np.frombuffer(memoryview(buffer).cast("B"), dtype=np.uint8)
        except (TypeError, ValueError) as error:
            raise DmlError(f"{where}: {type(buffer).__name__} is not a buffer ({error})") from None
    if writable and not flat.flags.writeable:
        raise DmlError(f"{where}: output buffer is read-only")
    return flat


def tensor_view(memory: np.ndarray, desc: TensorDesc, where: str) -> np.ndarray:
    """An ndarray of ``desc.sizes`` over ``memory`` (uint8) through the element strides.

    >>> from dmlq import DataType
    >>> memory = np.arange(3, dtype=np.float32).view(np.uint8)
    >>> tensor_view(memory, TensorDesc(DataType.FLOAT32, [2, 3], strides=[0, 1]), "x")
    array([[0., 1., 2.],
           [0., 1., 2.]], dtype=float32)
    """
    dtype = desc.data_type.dtype
    needed = desc.addressed_bytes
    if memory.nbytes < needed:
        raise DmlError(
            f"{where}: buffer of {memory.nbytes} bytes is smaller than the {needed} bytes "
            f"its tensor addresses"
        )
    typed = memory[:needed].view(dtype) if needed % dtype.itemsize == 0 else None
    if typed is None or memory.ctypes.data % dtype.itemsize:
        raise DmlError(f"{where}: buffer is not aligned to its {dtype.itemsize}-byte elements")
    strides = tuple(stride * dtype.itemsize for stride in desc.element_strides)
    return as_strided(typed, shape=desc.sizes, strides=strides, writeable=memory.flags.writeable)


def byte_range(memory: np.ndarray, desc: TensorDesc) -> tuple[int, int]:
    """The [start, end) addresses a tensor reads or writes in its buffer."""
    start = memory.ctypes.data
    return start, start + desc.addressed_bytes
