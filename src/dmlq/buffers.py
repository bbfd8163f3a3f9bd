"""Buffers seen through tensor descriptions: read through sizes and element strides, written the same way."""

from __future__ import annotations

from dataclasses import dataclass

import ml_dtypes
import numpy as np

from . import _core
from .errors import DmlError
from .int4 import Nibbles
from .tensor import TensorDesc
from .types import DataType

__all__ = ["Binding", "NibbleBinding", "binding_of", "buffer_bytes"]


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
            flat = np.frombuffer(memoryview(buffer).cast("B"), dtype=np.uint8)  # type: ignore[arg-type]
        except (TypeError, ValueError) as error:
            raise DmlError(f"{where}: {type(buffer).__name__} is not a buffer ({error})") from None
    if writable and not flat.flags.writeable:
        raise DmlError(f"{where}: output buffer is read-only")
    return flat


@dataclass(frozen=True)
class Binding:
    """How one tensor reads (or writes) its buffer: all that its description decides, worked out once.

    >>> from dmlq import DataType
    >>> binding = Binding.of(TensorDesc(DataType.FLOAT32, [2, 3], strides=[0, 1]), "x", writable=False)
    >>> view, start = binding.bind(np.arange(3, dtype=np.float32))
    >>> view
    array([[0., 1., 2.],
           [0., 1., 2.]], dtype=float32)
    """

    where: str  # how errors name the tensor
    data_type: str  # DirectML's name of the tensor's data type
    dtype: np.dtype
    shape: tuple[int, ...]
    strides: tuple[int, ...]  # bytes
    addressed_bytes: int  # from the first element to one past the last one addressed
    alignment: int  # guaranteed_base_offset_alignment (0: none)
    writable: bool

    @classmethod
    def of(cls, desc: TensorDesc, where: str, *, writable: bool) -> Binding:
        dtype = desc.data_type.dtype
        assert dtype is not None  # compile_operator refused UNKNOWN; the 4-bit types bind as nibbles
        strides = tuple(stride * dtype.itemsize for stride in desc.element_strides)
        return cls(where, desc.data_type.name, dtype, tuple(desc.sizes), strides, desc.addressed_bytes,
                   desc.guaranteed_base_offset_alignment, writable)  # fmt: skip

    def bind(self, buffer: object) -> tuple[np.ndarray, int]:
        """The tensor's ndarray view of ``buffer`` and the address where the buffer starts."""
        bound = _core.bind_view(buffer, self.dtype, self.shape, self.strides, self.addressed_bytes,
                                self.alignment, self.writable)  # fmt: skip
        if bound is not None:  # an ndarray that serves as it is, checked and viewed in one C call
            return bound
        memory = buffer_bytes(buffer, self.where, writable=self.writable)
        if isinstance(buffer, np.ndarray):
            self._check_dtype(buffer.dtype)
        start = memory.__array_interface__["data"][0]
        if memory.nbytes < self.addressed_bytes:
            raise DmlError(f"{self.where}: buffer of {memory.nbytes} bytes is smaller than the "
                           f"{self.addressed_bytes} bytes its tensor addresses")  # fmt: skip
        if start % self.dtype.itemsize or self.addressed_bytes % self.dtype.itemsize:
            raise DmlError(f"{self.where}: buffer is not aligned to its {self.dtype.itemsize}-byte elements")
        if self.alignment and start % self.alignment:
            raise DmlError(f"{self.where}: buffer address is not a multiple of its {self.alignment}-byte "
                           "guaranteed_base_offset_alignment")  # fmt: skip
        return np.ndarray(self.shape, self.dtype, memory, 0, self.strides), start

    def _check_dtype(self, dtype: np.dtype) -> None:
        """An ndarray holds the tensor's elements or raw bytes (uint8); any other dtype is a mistake."""
        if dtype != self.dtype and dtype != np.uint8:
            raw = "raw bytes (bytes, bytearray, memoryview, a uint8 view)"
            raise DmlError(f"{self.where}: ndarray of dtype {dtype} bound to a {self.data_type} tensor; "
                           f"pass {self.dtype} or {raw}")  # fmt: skip


@dataclass(frozen=True)
class NibbleBinding:
    """How a 4-bit tensor reads (or writes) its buffer: element strides count nibbles.

    >>> binding = NibbleBinding.of(TensorDesc(DataType.INT4, [3]), "q", writable=False)
    >>> nibbles, start = binding.bind(np.uint8([0xE1, 0x03, 0, 0]))
    >>> nibbles.unpacked()
    array([1, -2, 3], dtype=int4)
    """

    where: str
    dtype: np.dtype  # ml_dtypes.int4 or uint4
    shape: tuple[int, ...]
    strides: tuple[int, ...]  # nibbles
    addressed_bytes: int
    alignment: int
    writable: bool

    @classmethod
    def of(cls, desc: TensorDesc, where: str, *, writable: bool) -> NibbleBinding:
        dtype = np.dtype(ml_dtypes.int4 if desc.data_type == DataType.INT4 else ml_dtypes.uint4)
        return cls(where, dtype, tuple(desc.sizes), desc.element_strides, desc.addressed_bytes,
                   desc.guaranteed_base_offset_alignment, writable)  # fmt: skip

    def bind(self, buffer: object) -> tuple[Nibbles, int]:
        """The tensor's nibbles in ``buffer`` and the address where the buffer starts."""
        if isinstance(buffer, np.ndarray) and buffer.dtype != np.uint8:
            packed = "dmlq.pack_int4's uint8 array, or bytes, bytearray, memoryview"
            raise DmlError(f"{self.where}: ndarray of dtype {buffer.dtype} bound to a 4-bit tensor, "
                           f"which binds packed bytes: pass {packed}")  # fmt: skip
        memory = buffer_bytes(buffer, self.where, writable=self.writable)
        start = memory.__array_interface__["data"][0]
        if memory.nbytes < self.addressed_bytes:
            raise DmlError(f"{self.where}: buffer of {memory.nbytes} bytes is smaller than the "
                           f"{self.addressed_bytes} bytes its tensor addresses")  # fmt: skip
        if self.alignment and start % self.alignment:
            raise DmlError(f"{self.where}: buffer address is not a multiple of its {self.alignment}-byte "
                           "guaranteed_base_offset_alignment")  # fmt: skip
        return Nibbles(memory[: self.addressed_bytes], self.shape, self.strides, self.dtype), start


def binding_of(desc: TensorDesc, where: str, *, writable: bool) -> Binding | NibbleBinding:
    """The binding for ``desc``: byte-addressed elements, or nibbles for the 4-bit types."""
    if desc.data_type.bits == 4:
        return NibbleBinding.of(desc, where, writable=writable)
    return Binding.of(desc, where, writable=writable)
