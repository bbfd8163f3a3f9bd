"""DirectML's buffer tensor description, its size rule and its own validity (SPEC-NOTES §1)."""

from __future__ import annotations

import math
import operator
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import SupportsIndex, TypeGuard

from .types import DataType, TensorFlags

__all__ = [
    "TensorDesc",
    "calc_buffer_tensor_size",
    "packed_strides",
    "MAX_DIMENSION_COUNT",
    "MAX_ELEMENT_COUNT",
]

MAX_DIMENSION_COUNT = 8  # DML_TENSOR_DIMENSION_COUNT_MAX1
MAX_ELEMENT_COUNT = 2**32 - 1


def packed_strides(sizes: Sequence[int]) -> tuple[int, ...]:
    """Row-major element strides: the last dimension has stride 1.

    >>> packed_strides([2, 3, 4])
    (12, 4, 1)
    """
    strides, step = [], 1
    for size in reversed(sizes):
        strides.append(step)
        step *= size
    return tuple(reversed(strides))


@dataclass(frozen=True, init=False)
class TensorDesc:
    """``DML_BUFFER_TENSOR_DESC``: data type, sizes, element strides and byte size.

    Plain data: building one never raises for a DirectML rule; ``Device.compile_operator``
    checks it. ``strides=None`` means packed; a stride of 0 broadcasts along its dimension.
    ``total_tensor_size_in_bytes=None`` takes :func:`calc_buffer_tensor_size`.

    >>> desc = TensorDesc(DataType.UINT8, sizes=[1, 1, 2, 3])
    >>> desc.total_tensor_size_in_bytes, desc.element_strides
    (8, (6, 6, 3, 1))
    """

    data_type: DataType
    sizes: tuple[int, ...]
    strides: tuple[int, ...] | None = None
    total_tensor_size_in_bytes: int | None = None
    flags: int = TensorFlags.NONE
    guaranteed_base_offset_alignment: int = 0

    def __init__(
        self, data_type: DataType | int | str, sizes: Sequence[SupportsIndex],
        strides: Sequence[SupportsIndex] | None = None, total_tensor_size_in_bytes: int | None = None,
        flags: int = TensorFlags.NONE, guaranteed_base_offset_alignment: int = 0,
    ) -> None:  # fmt: skip
        """Sizes and strides of any sequence of integers (a list, a NumPy shape) are kept as tuples of
        Python ints; a data type may be given by its value or name."""
        fields = {
            "data_type": _parsed_data_type(data_type),
            "sizes": plain_ints(sizes),
            "strides": None if strides is None else plain_ints(strides),
            "total_tensor_size_in_bytes": plain_int(total_tensor_size_in_bytes),
            "flags": plain_int(flags),
            "guaranteed_base_offset_alignment": plain_int(guaranteed_base_offset_alignment),
        }
        for name, value in fields.items():
            object.__setattr__(self, name, value)
        if self.total_tensor_size_in_bytes is None:
            object.__setattr__(self, "total_tensor_size_in_bytes", _safe_size(self))

    @property
    def dimension_count(self) -> int:
        return len(self.sizes)

    @property
    def element_strides(self) -> tuple[int, ...]:
        """The strides in elements, packed ones when none were given."""
        return packed_strides(self.sizes) if self.strides is None else self.strides

    @property
    def element_count(self) -> int:
        return math.prod(self.sizes)

    @property
    def addressed_bytes(self) -> int:
        """Bytes from the first to one past the last element addressed (no 4-byte rounding)."""
        return -(-_addressed_elements(self.sizes, self.strides) * self.data_type.bits // 8)


def _addressed_elements(sizes: Sequence[int], strides: Sequence[int] | None) -> int:
    if strides is None:
        return math.prod(sizes)
    return sum((size - 1) * stride for size, stride in zip(sizes, strides)) + 1


def calc_buffer_tensor_size(desc: TensorDesc) -> int:
    """``DMLCalcBufferTensorSize``: the minimum ``TotalTensorSizeInBytes`` of ``desc``.

    Bits of the elements up to the last one addressed, rounded up to bytes and then up to a
    multiple of 4 (every bound buffer is DWORD-sized).

    >>> calc_buffer_tensor_size(TensorDesc(DataType.UINT8, [1, 1, 2, 3], strides=[0, 0, 0, 0]))
    4
    """
    data_type = DataType.parse(desc.data_type)
    if not desc.sizes or min(desc.sizes) < 1 or data_type.bits == 0:
        return 0  # nothing addressed (and no negative sizes from a zero-sized strided dimension)
    total_bits = _addressed_elements(desc.sizes, desc.strides) * data_type.bits
    total_bytes = -(-total_bits // 8)
    return (total_bytes + 3) & ~3


def _safe_size(desc: TensorDesc) -> int | None:
    """The computed size, or None when the description is too broken to size."""
    try:
        if not all(isinstance(size, int) and size >= 1 for size in desc.sizes):
            return None
        if desc.strides is not None and len(desc.strides) != len(desc.sizes):
            return None
        return calc_buffer_tensor_size(desc)
    except (TypeError, ValueError):
        return None


def tensor_problem(desc: TensorDesc, *, is_output: bool) -> str | None:
    """The first rule of DirectML's buffer tensor description that ``desc`` breaks, or None."""
    for check in _TENSOR_CHECKS:
        problem = check(desc, is_output)
        if problem:
            return problem
    return None


def _check_data_type(desc: TensorDesc, is_output: bool) -> str | None:
    if not isinstance(desc.data_type, DataType) or desc.data_type == DataType.UNKNOWN:
        return f"data type {desc.data_type!r} is not a valid DML_TENSOR_DATA_TYPE"
    return None


def _check_sizes(desc: TensorDesc, is_output: bool) -> str | None:
    if not isinstance(desc.sizes, tuple):
        return f"sizes {desc.sizes!r} must be a sequence of integers"
    if not 1 <= len(desc.sizes) <= MAX_DIMENSION_COUNT:
        return f"dimension count {len(desc.sizes)} is outside 1 to {MAX_DIMENSION_COUNT}"
    for axis, size in enumerate(desc.sizes):
        if not _is_int(size) or size < 1:
            return f"sizes[{axis}] = {size!r} must be an integer of at least 1"
    if desc.element_count > MAX_ELEMENT_COUNT:
        return f"element count {desc.element_count} exceeds 2^32 - 1"
    return None


def _check_strides(desc: TensorDesc, is_output: bool) -> str | None:
    if desc.strides is None:
        return None
    if not isinstance(desc.strides, tuple):
        return f"strides {desc.strides!r} must be None or a sequence of integers"
    if len(desc.strides) != len(desc.sizes):
        return f"has {len(desc.strides)} strides for {len(desc.sizes)} sizes"
    for axis, stride in enumerate(desc.strides):
        if not _is_int(stride) or not 0 <= stride < 2**32:
            return f"strides[{axis}] = {stride!r} must be an integer from 0 to 2^32 - 1"
    if is_output:
        return _output_stride_problem(desc.sizes, desc.strides)
    return None


def _output_stride_problem(sizes: Sequence[int], strides: Sequence[int]) -> str | None:
    """Refuse output layouts that could write two elements to one address.

    Nested layouts (padding, any permutation) pass; interleaved ones such as sizes {3, 3} with
    strides {2, 3} are refused even where no two elements happen to collide.
    """
    for axis, (size, stride) in enumerate(zip(sizes, strides)):
        if size > 1 and stride == 0:
            return f"strides[{axis}] is 0 on an output (two elements would share an address)"
    extent = 1
    for size, stride in sorted((p for p in zip(sizes, strides) if p[0] > 1), key=lambda p: p[1]):
        if stride < extent:
            return (
                f"output strides {list(strides)} overlap or interleave (taken by increasing "
                "stride, each must step past the extent of the smaller ones)"
            )
        extent = stride * (size - 1) + extent
    return None


def _check_total_size(desc: TensorDesc, is_output: bool) -> str | None:
    total = desc.total_tensor_size_in_bytes
    if not _is_int(total) or total < 0:
        return f"total_tensor_size_in_bytes = {total!r} must be a non-negative integer"
    needed = calc_buffer_tensor_size(desc)
    if total < needed:
        return (
            f"total_tensor_size_in_bytes {total} is less than the {needed} bytes "
            "its sizes and strides address"
        )
    return None


def _check_alignment(desc: TensorDesc, is_output: bool) -> str | None:
    alignment = desc.guaranteed_base_offset_alignment
    element_bytes = max(1, desc.data_type.bits // 8)
    if _is_int(alignment) and (alignment == 0 or _is_power_of_two(alignment) and alignment >= element_bytes):
        return None
    return (
        f"guaranteed_base_offset_alignment {alignment!r} must be 0 or a power of two "
        f"of at least the element size ({element_bytes} bytes)"
    )


def _is_power_of_two(value: int) -> bool:
    return value > 0 and not value & (value - 1)


def _check_flags(desc: TensorDesc, is_output: bool) -> str | None:
    if not _is_int(desc.flags) or desc.flags not in (TensorFlags.NONE, TensorFlags.OWNED_BY_DML):
        return f"flags {desc.flags!r} must be NONE (0) or OWNED_BY_DML (1)"
    if is_output and desc.flags == TensorFlags.OWNED_BY_DML:
        return "OWNED_BY_DML is for inputs only"
    return None


def _parsed_data_type(value: object) -> object:
    """A DataType from a member, its value or its name; anything else stays for validation to report."""
    value = plain_int(value)
    if isinstance(value, str) or _is_int(value):
        try:
            return DataType.parse(value)
        except ValueError:
            pass
    return value


def plain_ints(values: object) -> object:
    """A sequence as a tuple of Python ints (from NumPy integers too); anything that is not a
    sequence, and elements that are not integers, stay as given for validation to report."""
    if isinstance(values, (str, bytes)) or not isinstance(values, Iterable):
        return values
    try:
        return tuple(plain_int(value) for value in values)
    except TypeError:  # iterable by its type, not as it is (a 0-d array)
        return values


def plain_int(value: object) -> object:
    if isinstance(value, (bool, int)) or not isinstance(value, SupportsIndex):
        return value
    try:
        return operator.index(value)
    except TypeError:  # an index by its type, not as it is (an array of more than one element)
        return value


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


_TENSOR_CHECKS = (
    _check_data_type,
    _check_sizes,
    _check_strides,
    _check_total_size,
    _check_alignment,
    _check_flags,
)
