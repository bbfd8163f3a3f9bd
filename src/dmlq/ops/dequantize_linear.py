"""DML_ELEMENT_WISE_DEQUANTIZE_LINEAR (SPEC-NOTES §3; not among the seed pages).

    f(input, scale, zero_point) = (input - zero_point) * scale

A scale of 0 is undefined behaviour in DirectML. Not in-place.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..tensor import TensorDesc
from ..types import DataType, FeatureLevel
from .base import (
    OperatorDesc,
    TensorField,
    same_data_type,
    same_dimension_count,
    same_sizes,
    support,
)

F32, F16 = DataType.FLOAT32, DataType.FLOAT16
INTEGERS = (DataType.INT32, DataType.INT16, DataType.INT8,
            DataType.UINT32, DataType.UINT16, DataType.UINT8)  # fmt: skip
FL = FeatureLevel


@dataclass(frozen=True, kw_only=True)
class ElementWiseDequantizeLinear(OperatorDesc):
    """``DML_ELEMENT_WISE_DEQUANTIZE_LINEAR_OPERATOR_DESC``.

    >>> from dmlq import TensorDesc, DataType
    >>> q = TensorDesc(DataType.UINT8, [4])
    >>> s = TensorDesc(DataType.FLOAT32, [4], strides=[0])
    >>> ElementWiseDequantizeLinear(input=q, scale=s, zero_point=TensorDesc(DataType.UINT8, [4], [0]),
    ...                             output=TensorDesc(DataType.FLOAT32, [4])).minimum_feature_level()
    <FeatureLevel.FL_3_0: 12288>
    """

    input: TensorDesc | None = None
    scale: TensorDesc | None = None
    zero_point: TensorDesc | None = None
    output: TensorDesc | None = None

    TYPE_NAME = "ELEMENT_WISE_DEQUANTIZE_LINEAR"
    TYPE_VALUE = 34
    INTRODUCED = FL.FL_1_0
    FIELDS = (
        TensorField("input", "InputTensor"),
        TensorField("scale", "ScaleTensor"),
        TensorField("zero_point", "ZeroPointTensor"),
        TensorField("output", "OutputTensor", is_output=True),
    )
    SUPPORT = (
        support(FL.FL_6_2, (1, 8), optional=["zero_point"],
                input=INTEGERS, scale=(F32, F16), zero_point=INTEGERS, output=(F32, F16)),
        support(FL.FL_6_0, (1, 8),
                input=INTEGERS, scale=(F32, F16), zero_point=INTEGERS, output=(F32, F16)),
        support(FL.FL_3_0, (1, 8),
                input=INTEGERS, scale=(F32,), zero_point=INTEGERS, output=(F32,)),
        support(FL.FL_2_1, (4, 4),
                input=INTEGERS, scale=(F32,), zero_point=INTEGERS, output=(F32,)),
        support(FL.FL_1_0, (4, 4),
                input=(DataType.UINT8,), scale=(F32,), zero_point=(DataType.UINT8,), output=(F32,)),
    )  # fmt: skip
    CONSTRAINTS = (
        same_dimension_count("input", "output", "scale", "zero_point"),
        same_sizes("input", "output", "scale", "zero_point"),
        same_data_type("input", "zero_point"),
        same_data_type("output", "scale"),
    )
