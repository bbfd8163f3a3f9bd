"""DML_ELEMENT_WISE_QUANTIZED_LINEAR_ADD (seed pages 000 and 001).

    AValue = (A - AZeroPoint) * AScale
    BValue = (B - BZeroPoint) * BScale
    OutputValue = AValue + BValue
    Output = clamp(round(OutputValue / OutputScale) + OutputZeroPoint, Min, Max)

Every scale and zero point holds exactly one element (per-tensor); zero points are optional and
default to 0. A scale of 0 is undefined behaviour. Not in-place. Like every element-wise
operator, A, B and Output have equal sizes (broadcast through zero strides).
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

FL = FeatureLevel
BYTES = (DataType.INT8, DataType.UINT8)
F32 = (DataType.FLOAT32,)
QUANTIZATION_FIELDS = ("a_scale", "a_zero_point", "b_scale", "b_zero_point",
                       "output_scale", "output_zero_point")  # fmt: skip
QUANTIZED_FIELDS = (
    TensorField("a", "ATensor"),
    TensorField("a_scale", "AScaleTensor"),
    TensorField("a_zero_point", "AZeroPointTensor"),
    TensorField("b", "BTensor"),
    TensorField("b_scale", "BScaleTensor"),
    TensorField("b_zero_point", "BZeroPointTensor"),
    TensorField("output_scale", "OutputScaleTensor"),
    TensorField("output_zero_point", "OutputZeroPointTensor"),
    TensorField("output", "OutputTensor", is_output=True),
)
ZERO_POINT_TYPES = (
    same_data_type("b", "b_zero_point"),
    same_data_type("output", "output_zero_point"),
    same_data_type("a", "a_zero_point"),
)


def _one_element_each(present: Mapping[str, TensorDesc]) -> tuple[str, str] | None:
    for name in QUANTIZATION_FIELDS:
        if name in present and present[name].element_count != 1:
            return name, f"holds {present[name].element_count} elements; exactly 1 is expected"
    return None


@dataclass(frozen=True, kw_only=True)
class ElementWiseQuantizedLinearAdd(OperatorDesc):
    """``DML_ELEMENT_WISE_QUANTIZED_LINEAR_ADD_OPERATOR_DESC``.

    >>> from dmlq import TensorDesc, DataType
    >>> q, s = TensorDesc(DataType.UINT8, [1, 4]), TensorDesc(DataType.FLOAT32, [1, 1])
    >>> ElementWiseQuantizedLinearAdd(a=q, a_scale=s, b=q, b_scale=s, output_scale=s,
    ...                               output=q).minimum_feature_level()
    <FeatureLevel.FL_4_0: 16384>
    """

    a: TensorDesc | None = None
    a_scale: TensorDesc | None = None
    a_zero_point: TensorDesc | None = None
    b: TensorDesc | None = None
    b_scale: TensorDesc | None = None
    b_zero_point: TensorDesc | None = None
    output_scale: TensorDesc | None = None
    output_zero_point: TensorDesc | None = None
    output: TensorDesc | None = None

    TYPE_NAME = "ELEMENT_WISE_QUANTIZED_LINEAR_ADD"
    TYPE_VALUE = 147
    INTRODUCED = FL.FL_4_0
    FIELDS = QUANTIZED_FIELDS
    SUPPORT = (
        support(FL.FL_4_0, (1, 8), optional=["a_zero_point", "b_zero_point", "output_zero_point"],
                a=BYTES, a_scale=F32, a_zero_point=BYTES, b=BYTES, b_scale=F32,
                b_zero_point=BYTES, output_scale=F32, output_zero_point=BYTES, output=BYTES),
    )  # fmt: skip
    CONSTRAINTS = (
        same_dimension_count("a_scale", "a", "a_zero_point", "b_scale", "b", "b_zero_point",
                             "output_scale", "output", "output_zero_point"),
        *ZERO_POINT_TYPES,
        same_sizes("a", "b", "output"),
        Constraint("Each scale and zero point holds exactly 1 element", _one_element_each),
    )  # fmt: skip
