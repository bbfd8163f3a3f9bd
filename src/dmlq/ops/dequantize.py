"""DML_OPERATOR_DEQUANTIZE (feature level 6_3): 8- or 4-bit integers to float, blockwise.

    output = (input - zero_point) * scale

with ``scale`` and ``zero_point`` the quantization tensors' values of each element's block (see
:mod:`dmlq.ops.blockwise` for where each rule comes from: DirectML's page gives the fields, the
dimension counts and the data types and leaves the rest "TBD"; the formula is ONNX's
DequantizeLinear, opset 21, as onnxruntime's DirectML provider uses it for MatMulNBits; without
a zero point an unsigned type's is its midpoint). Not in-place.
"""

from __future__ import annotations

from dataclasses import dataclass

from .base import support
from .blockwise import (
    CONSTRAINTS,
    DECISIONS,
    FIELDS,
    FLOATS,
    INTEGERS,
    INTRODUCED,
    QUANTIZATION_TYPES,
    BlockwiseQuantization,
)


@dataclass(frozen=True, kw_only=True)
class Dequantize(BlockwiseQuantization):
    """``DML_DEQUANTIZE_OPERATOR_DESC``.

    >>> from dmlq import DataType, QuantizationType, TensorDesc
    >>> weight = TensorDesc(DataType.UINT4, [4, 64])
    >>> scales, zero_points = TensorDesc(DataType.FLOAT16, [4, 2]), TensorDesc(DataType.UINT4, [4, 2])
    >>> Dequantize(input=weight, quantization_type=QuantizationType.SCALE_ZERO_POINT,
    ...            quantization_tensors=[scales, zero_points],
    ...            output=TensorDesc(DataType.FLOAT16, [4, 64])).minimum_feature_level()
    <FeatureLevel.FL_6_3: 25344>
    """

    TYPE_NAME = "DEQUANTIZE"
    TYPE_VALUE = 174
    INTRODUCED = INTRODUCED
    FIELDS = FIELDS
    SUPPORT = (
        support(INTRODUCED, (1, 8), input=INTEGERS, quantization_tensors=QUANTIZATION_TYPES, output=FLOATS),
    )
    CONSTRAINTS = CONSTRAINTS
    DECISIONS = DECISIONS
    FLOAT_SIDE = "output"
    INTEGER_SIDE = "input"
