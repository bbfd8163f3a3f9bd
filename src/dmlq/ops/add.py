"""DML_ELEMENT_WISE_ADD (SPEC-NOTES §4): f(a, b) = a + b. In-place allowed.

Integer additions wrap around in two's complement (DirectML does not document overflow; a GPU's
integer add wraps).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..tensor import TensorDesc
from ..types import DataType as T
from ..types import FeatureLevel
from .base import (
    OperatorDesc,
    SupportRow,
    TensorField,
    same_data_type,
    same_dimension_count,
    same_sizes,
    support,
)

FL = FeatureLevel
ADD_FIELDS = (
    TensorField("a", "ATensor"),
    TensorField("b", "BTensor"),
    TensorField("output", "OutputTensor", is_output=True),
)
ADD_CONSTRAINTS = (
    same_data_type("a", "b", "output"),
    same_dimension_count("a", "b", "output"),
    same_sizes("a", "b", "output"),
)


def _same_types(level: FeatureLevel, dims: tuple[int, int], *types: T) -> SupportRow:
    return support(level, dims, a=types, b=types, output=types)


@dataclass(frozen=True, kw_only=True)
class ElementWiseAdd(OperatorDesc):
    """``DML_ELEMENT_WISE_ADD_OPERATOR_DESC``.

    >>> from dmlq import TensorDesc, DataType
    >>> t = TensorDesc(DataType.INT8, [2, 3])
    >>> ElementWiseAdd(a=t, b=t, output=t).minimum_feature_level()
    <FeatureLevel.FL_5_1: 20736>
    """

    a: TensorDesc | None = None
    b: TensorDesc | None = None
    output: TensorDesc | None = None

    TYPE_NAME = "ELEMENT_WISE_ADD"
    TYPE_VALUE = 4
    INTRODUCED = FL.FL_1_0
    IN_PLACE = True
    FIELDS = ADD_FIELDS
    SUPPORT = (
        _same_types(FL.FL_5_1, (1, 8), T.FLOAT32, T.FLOAT16, T.INT64, T.INT32, T.INT16, T.INT8,
                    T.UINT64, T.UINT32, T.UINT16, T.UINT8),
        _same_types(FL.FL_4_1, (1, 8), T.FLOAT32, T.FLOAT16, T.INT64, T.INT32, T.UINT64, T.UINT32),
        _same_types(FL.FL_3_0, (1, 8), T.FLOAT32, T.FLOAT16, T.INT32, T.UINT32),
        _same_types(FL.FL_2_1, (4, 5), T.FLOAT32, T.FLOAT16, T.INT32, T.UINT32),
        _same_types(FL.FL_1_0, (4, 5), T.FLOAT32, T.FLOAT16),
    )  # fmt: skip
    CONSTRAINTS = ADD_CONSTRAINTS
