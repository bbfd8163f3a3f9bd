"""DML_ELEMENT_WISE_QUANTIZE_LINEAR (seed page 002).

    f(input, scale, zero_point) = clamp(round(input / scale) + zero_point, Min, Max)

uint8 output: Min = 0, Max = 255; int8 output: Min = -128, Max = 127. A scale of 0 is undefined
behaviour in DirectML. Not in-place.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ..tensor import TensorDesc
from ..types import DataType, FeatureLevel
from .base import (
    Constraint,
    OperatorDesc,
    TensorField,
    same_data_type,
    same_dimension_count,
    same_sizes,
    support,
)

F32, F16, I32 = DataType.FLOAT32, DataType.FLOAT16, DataType.INT32
U8, I8 = DataType.UINT8, DataType.INT8
FL = FeatureLevel


def _scale_follows_input(present: Mapping[str, TensorDesc]) -> tuple[str, str] | None:
    if "input" not in present or "scale" not in present:
        return None
    input_type, scale_type = present["input"].data_type, present["scale"].data_type
    wanted = F32 if input_type == I32 else input_type
    if scale_type != wanted:
        return "scale", f"data type {scale_type.name} must be {wanted.name} for {input_type.name} input"
    return None


@dataclass(frozen=True, kw_only=True)
class ElementWiseQuantizeLinear(OperatorDesc):
    """``DML_ELEMENT_WISE_QUANTIZE_LINEAR_OPERATOR_DESC``.

    >>> from dmlq import TensorDesc, DataType
    >>> x = TensorDesc(DataType.FLOAT32, [1, 1, 2, 3])
    >>> s = TensorDesc(DataType.FLOAT32, [1, 1, 2, 3], strides=[0, 0, 0, 0])
    >>> desc = ElementWiseQuantizeLinear(input=x, scale=s, output=TensorDesc(DataType.UINT8, [1, 1, 2, 3]))
    >>> desc.minimum_feature_level()
    <FeatureLevel.FL_6_2: 25088>
    """

    input: TensorDesc | None = None
    scale: TensorDesc | None = None
    zero_point: TensorDesc | None = None
    output: TensorDesc | None = None

    TYPE_NAME = "ELEMENT_WISE_QUANTIZE_LINEAR"
    TYPE_VALUE = 33
    INTRODUCED = FL.FL_1_0
    FIELDS = (
        TensorField("input", "InputTensor"),
        TensorField("scale", "ScaleTensor"),
        TensorField("zero_point", "ZeroPointTensor"),
        TensorField("output", "OutputTensor", is_output=True),
    )
    SUPPORT = (
        support(FL.FL_6_2, (1, 8), optional=["zero_point"],
                input=(F32, F16, I32), scale=(F32, F16), zero_point=(I8, U8), output=(I8, U8)),
        support(FL.FL_6_0, (1, 8),
                input=(F32, F16, I32), scale=(F32, F16), zero_point=(I8, U8), output=(I8, U8)),
        support(FL.FL_3_0, (1, 8),
                input=(F32, I32), scale=(F32,), zero_point=(I8, U8), output=(I8, U8)),
        support(FL.FL_2_1, (4, 4),
                input=(F32, I32), scale=(F32,), zero_point=(I8, U8), output=(I8, U8)),
        support(FL.FL_1_0, (4, 4),
                input=(F32,), scale=(F32,), zero_point=(U8,), output=(U8,)),
    )  # fmt: skip
    CONSTRAINTS = (
        same_dimension_count("input", "output", "scale", "zero_point"),
        same_sizes("input", "output", "scale", "zero_point"),
        same_data_type("output", "zero_point"),
        Constraint(
            "If input is INT32, scale must be FLOAT32; otherwise scale has input's data type",
            _scale_follows_input,
        ),
    )
