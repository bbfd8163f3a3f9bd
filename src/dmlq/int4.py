"""DirectML's 4-bit layout: two elements per byte, element 0 in the low nibble.

Unpacked 4-bit arrays are ``ml_dtypes.int4`` / ``ml_dtypes.uint4`` arrays (one byte per element,
as ONNX's own tools hold them).

>>> import ml_dtypes
>>> packed = pack_int4(np.array([1, -2, 3], ml_dtypes.int4))
>>> [hex(byte) for byte in packed]
['0xe1', '0x3']
>>> unpack_int4(packed, (3,), "int4")
array([1, -2, 3], dtype=int4)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import ml_dtypes
import numpy as np

from .errors import DmlError
from .tensor import packed_strides

__all__ = ["FOUR_BIT_DTYPES", "Nibbles", "four_bit_dtype", "pack_int4", "unpack_int4"]

FOUR_BIT_DTYPES = (np.dtype(ml_dtypes.int4), np.dtype(ml_dtypes.uint4))


def four_bit_dtype(dtype: object, where: str = "dtype") -> np.dtype:
    """``ml_dtypes.int4`` or ``uint4`` from itself or its name; DmlError naming ``where`` otherwise."""
    named = isinstance(dtype, str) and dtype in ("int4", "uint4")  # NumPy reads "int4" as int32
    try:
        resolved = np.dtype(getattr(ml_dtypes, str(dtype)) if named else dtype)  # type: ignore[arg-type]
    except TypeError:  # not a dtype at all
        resolved = None
    if resolved not in FOUR_BIT_DTYPES:
        raise DmlError(f"{where}: {dtype!r} is not a 4-bit type (int4 or uint4)")
    return resolved


def pack_int4(array: object) -> np.ndarray:
    """Pack a 4-bit array (``ml_dtypes.int4``/``uint4``) in C order into DirectML's bytes.

    An odd element count leaves the last byte's high nibble 0.
    """
    values = np.asarray(array)
    four_bit_dtype(values.dtype, "pack_int4: array")
    nibbles = np.ascontiguousarray(values).reshape(-1).view(np.uint8) & 0xF
    if nibbles.size % 2:
        nibbles = np.append(nibbles, np.uint8(0))
    return nibbles[0::2] | (nibbles[1::2] << 4)


def unpack_int4(packed: object, shape: Sequence[int] | int, dtype: object) -> np.ndarray:
    """The 4-bit array of ``shape`` (C order) that DirectML's bytes ``packed`` hold."""
    dtype = four_bit_dtype(dtype, "unpack_int4: dtype")
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    count = math.prod(shape)
    memory = np.asarray(packed)
    if memory.dtype != np.uint8:
        raise DmlError(f"unpack_int4: packed must be a uint8 array, not {memory.dtype}")
    if memory.size * 2 < count:
        raise DmlError(f"unpack_int4: packed holds {memory.size * 2} nibbles, shape {shape} needs {count}")
    return _nibble_values(memory.reshape(-1), count).view(dtype).reshape(shape)


def _nibble_values(memory: np.ndarray, count: int) -> np.ndarray:
    """The first ``count`` nibbles of ``memory`` as one byte each (low nibble first)."""
    used = memory[: (count + 1) // 2]
    return np.stack([used & 0xF, used >> 4], axis=-1).reshape(-1)[:count]


@dataclass(frozen=True)
class Nibbles:
    """A 4-bit tensor in its buffer: what a 4-bit tensor's binding hands to the kernels.

    ``memory`` starts at the tensor's first byte; ``strides`` are in elements (nibbles).
    """

    memory: np.ndarray  # uint8
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    dtype: np.dtype  # ml_dtypes.int4 or uint4

    @property
    def is_packed(self) -> bool:
        """Whether the elements lie in C order without gaps (dimensions of size 1 may have any stride)."""
        return all(size == 1 or stride == packed for size, stride, packed in
                   zip(self.shape, self.strides, packed_strides(self.shape)))  # fmt: skip

    def offsets(self) -> np.ndarray:
        """The nibble address of every element, shaped like the tensor."""
        offsets = np.zeros(self.shape, np.int64)
        for axis, (size, stride) in enumerate(zip(self.shape, self.strides)):
            index_shape = [1] * len(self.shape)
            index_shape[axis] = size
            offsets = offsets + (np.arange(size, dtype=np.int64) * stride).reshape(index_shape)
        return offsets

    def unpacked(self) -> np.ndarray:
        """The elements as an ``ml_dtypes`` array of the tensor's shape (a copy)."""
        if self.is_packed:
            return unpack_int4(self.memory, self.shape, self.dtype)
        offsets = self.offsets()
        nibbles: np.ndarray = (self.memory[offsets >> 1] >> ((offsets & 1) * 4).astype(np.uint8)) & 0xF
        return nibbles.view(self.dtype)

    def store(self, values: np.ndarray) -> None:
        """Write ``values`` (the tensor's shape) into the elements' nibbles, no other nibble changed."""
        nibbles = np.ascontiguousarray(values, self.dtype).view(np.uint8) & 0xF
        offsets = np.arange(nibbles.size) if self.is_packed else self.offsets().reshape(-1)
        nibbles = nibbles.reshape(-1)
        for high in (0, 1):  # one byte may hold two elements: one pass per nibble
            chosen = (offsets & 1) == high
            where = offsets[chosen] >> 1
            keep = np.uint8(0x0F if high else 0xF0)
            self.memory[where] = (self.memory[where] & keep) | (nibbles[chosen] << (4 * high))
