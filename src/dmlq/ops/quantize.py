"""DML_OPERATOR_QUANTIZE (feature level 6_3): float input to 8- or 4-bit integers, blockwise.

    output = clamp(round(input / scale) + zero_point, Min, Max)

with ``scale`` and ``zero_point`` the quantization tensors' values of each element's block (see
:mod:`dmlq.ops.blockwise` for where each rule comes from: DirectML's page gives the fields, the
dimension counts and the data types and leaves the rest "TBD"; the formula, halves to even and the
ranges INT8 [-128, 127], UINT8 [0, 255], INT4 [-8, 7], UINT4 [0, 15] are ONNX's QuantizeLinear,
opset 21; without a zero point an unsigned type's is its midpoint). Not in-place.
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
class Quantize(BlockwiseQuantization):
    """``DML_QUANTIZE_OPERATOR_DESC``.

    >>> from dmlq import DataType, QuantizationType, TensorDesc
    >>> weight = TensorDesc(DataType.FLOAT32, [4, 64])
    >>> scales = TensorDesc(DataType.FLOAT32, [4, 2])  # blocks of 32 along the last dimension
    >>> Quantize(input=weight, quantization_type=QuantizationType.SCALE, quantization_tensors=[scales],
    ...          output=TensorDesc(DataType.INT4, [4, 64])).minimum_feature_level()
    <FeatureLevel.FL_6_3: 25344>
    """

    TYPE_NAME = "QUANTIZE"
    TYPE_VALUE = 173
    INTRODUCED = INTRODUCED
    FIELDS = FIELDS
    SUPPORT = (
        support(INTRODUCED, (1, 8), input=FLOATS, quantization_tensors=QUANTIZATION_TYPES, output=INTEGERS),
    )
    CONSTRAINTS = CONSTRAINTS
    DECISIONS = DECISIONS
    FLOAT_SIDE = "input"
    INTEGER_SIDE = "output"
