"""DirectML's enumerations: tensor data types and feature levels (SPEC-NOTES §0)."""

from __future__ import annotations

import enum
import re

import numpy as np

from .errors import DmlError

__all__ = ["DataType", "FeatureLevel", "MatrixTransform", "QuantizationType", "TensorFlags"]


class DataType(enum.IntEnum):
    """``DML_TENSOR_DATA_TYPE``: DirectML's names and numeric values.

    >>> DataType.UINT8, int(DataType.UINT8), DataType.UINT8.dtype
    (<DataType.UINT8: 5>, 5, dtype('uint8'))
    """

    UNKNOWN = 0
    FLOAT32 = 1
    FLOAT16 = 2
    UINT32 = 3
    UINT16 = 4
    UINT8 = 5
    INT32 = 6
    INT16 = 7
    INT8 = 8
    FLOAT64 = 9
    UINT64 = 10
    INT64 = 11
    UINT4 = 12
    INT4 = 13

    @property
    def bits(self) -> int:
        """Element size in bits (0 for UNKNOWN)."""
        return _BITS[self]

    @property
    def dtype(self) -> np.dtype | None:
        """The NumPy dtype of one element; ``None`` for UNKNOWN and the packed 4-bit types."""
        name = _NUMPY_NAMES.get(self)
        return np.dtype(name) if name else None

    @property
    def is_float(self) -> bool:
        return self in (DataType.FLOAT16, DataType.FLOAT32, DataType.FLOAT64)

    @classmethod
    def from_dtype(cls, dtype: np.dtype | type | str) -> DataType:
        """The DataType holding NumPy ``dtype``; DmlError when DirectML has none."""
        dtype = np.dtype(dtype)
        for member, name in _NUMPY_NAMES.items():
            if np.dtype(name) == dtype:
                return member
        raise DmlError(f"NumPy dtype {dtype} has no DirectML data type")

    @classmethod
    def parse(cls, value: DataType | int | str) -> DataType:
        """A member from itself, its value, or its name with or without ``DML_TENSOR_DATA_TYPE_``."""
        if isinstance(value, str):
            name = value.strip().upper().removeprefix("DML_TENSOR_DATA_TYPE_")
            try:
                return cls[name]
            except KeyError:
                raise DmlError(f"unknown data type {value!r}") from None
        try:
            return cls(value)
        except ValueError:
            raise DmlError(f"unknown data type {value!r}") from None


_BITS = {
    DataType.UNKNOWN: 0,
    DataType.FLOAT32: 32, DataType.UINT32: 32, DataType.INT32: 32,
    DataType.FLOAT16: 16, DataType.UINT16: 16, DataType.INT16: 16,
    DataType.UINT8: 8, DataType.INT8: 8,
    DataType.FLOAT64: 64, DataType.UINT64: 64, DataType.INT64: 64,
    DataType.UINT4: 4, DataType.INT4: 4,
}  # fmt: skip

_NUMPY_NAMES = {
    DataType.FLOAT32: "float32", DataType.FLOAT16: "float16", DataType.FLOAT64: "float64",
    DataType.UINT32: "uint32", DataType.UINT16: "uint16", DataType.UINT8: "uint8",
    DataType.INT32: "int32", DataType.INT16: "int16", DataType.INT8: "int8",
    DataType.UINT64: "uint64", DataType.INT64: "int64",
}  # fmt: skip


class QuantizationType(enum.IntEnum):
    """``DML_QUANTIZATION_TYPE`` (DirectML.h, feature level 6_3): which quantization tensors follow.

    >>> QuantizationType.SCALE_ZERO_POINT.tensor_names
    ('scale', 'zero_point')
    """

    NONE = 0
    SCALE = 1
    SCALE_ZERO_POINT = 2

    @property
    def tensor_names(self) -> tuple[str, ...]:
        """The quantization tensors this type takes, in DirectML's order."""
        return ("scale", "zero_point")[: int(self)]


class MatrixTransform(enum.IntEnum):
    """``DML_MATRIX_TRANSFORM`` (DirectML.h): GEMM's TransA and TransB.

    >>> MatrixTransform(1)
    <MatrixTransform.TRANSPOSE: 1>
    """

    NONE = 0
    TRANSPOSE = 1


class TensorFlags(enum.IntFlag):
    """``DML_TENSOR_FLAGS``."""

    NONE = 0
    OWNED_BY_DML = 1


_LEVEL_TEXT = re.compile(r"^(?:DML_FEATURE_LEVEL_|FL_?)?(\d+)[._](\d+)$", re.IGNORECASE)


@enum.unique
class FeatureLevel(enum.IntEnum):
    """``DML_FEATURE_LEVEL``, ordered, with DirectML's hex values.

    >>> FeatureLevel.parse("4.0") is FeatureLevel.FL_4_0, hex(FeatureLevel.FL_6_4)
    (True, '0x6400')
    """

    FL_1_0 = 0x1000
    FL_2_0 = 0x2000
    FL_2_1 = 0x2100
    FL_3_0 = 0x3000
    FL_3_1 = 0x3100
    FL_4_0 = 0x4000
    FL_4_1 = 0x4100
    FL_5_0 = 0x5000
    FL_5_1 = 0x5100
    FL_5_2 = 0x5200
    FL_6_0 = 0x6000
    FL_6_1 = 0x6100
    FL_6_2 = 0x6200
    FL_6_3 = 0x6300
    FL_6_4 = 0x6400

    @property
    def label(self) -> str:
        """DirectML's short spelling, e.g. ``"4_0"``."""
        return self.name.removeprefix("FL_")

    def __str__(self) -> str:
        return self.label

    @classmethod
    def newest(cls) -> FeatureLevel:
        return max(cls)

    @classmethod
    def parse(cls, value: FeatureLevel | int | str) -> FeatureLevel:
        """A level from a member, its value (``0x4000``) or text (``"4_0"``, ``"4.0"``, ``"FL_4_0"``)."""
        if isinstance(value, cls):
            return value
        if isinstance(value, str):
            match = _LEVEL_TEXT.match(value.strip())
            if match:
                name = f"FL_{match[1]}_{match[2]}"
                if name in cls.__members__:
                    return cls[name]
        elif isinstance(value, int) and not isinstance(value, bool):
            try:
                return cls(value)
            except ValueError:
                pass
        known = ", ".join(level.label for level in cls)
        raise DmlError(f"unknown feature level {value!r} (known: {known})")
