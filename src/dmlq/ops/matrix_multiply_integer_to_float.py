"""DML_MATRIX_MULTIPLY_INTEGER_TO_FLOAT (operator 170, feature level 6_2; spec/QUANTIZED-FAMILY.md §4).

Dequantize A and B, multiply into floats, add the bias (the page gives no formula; its fields say this):

    Output[..., m, n] = sum_k (A[..., m, k] - AZP[m]) * AScale[m] * (B[..., k, n] - BZP[n]) * BScale[n]
                        + Bias[..., m, n]

A is ``{[Batch], [Channel], M, K}``, B ``{[Batch], [Channel], K, N}``, Output and Bias
``{[Batch], [Channel], M, N}``; batches equal the output's (broadcast through zero strides). A's
scale and zero point are per-tensor or per-row, B's per-tensor or per-column. Integers of 8, 16 or 32
bits, floats FLOAT32 or FLOAT16. Zero points and the bias are optional (0). Not in-place.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from ..tensor import TensorDesc
from ..types import DataType, FeatureLevel
from .base import (
    Constraint,
    OperatorDesc,
    Rule,
    TensorField,
    same_data_type,
    same_dimension_count,
    same_sizes,
    support,
)
from .matrix_multiply_integer import MATRIX_SHAPES, row_and_column_violations

FL = FeatureLevel
INTEGERS = (DataType.INT32, DataType.INT16, DataType.INT8, DataType.UINT32, DataType.UINT16, DataType.UINT8)
FLOATS = (DataType.FLOAT32, DataType.FLOAT16)
_BYTE_TYPES = {DataType.UINT8, DataType.INT8}


def _one_integer_type_or_bytes(present: Mapping[str, TensorDesc]) -> tuple[str, str] | None:
    """A and B of one integer type, or one UINT8 and the other INT8 (see DECISIONS: the page's rule
    is one type; onnxruntime's DirectML tests run both byte mixes)."""
    a, b = present["a"].data_type, present["b"].data_type
    if a == b or {a, b} == _BYTE_TYPES:
        return None
    return "b", f"data type {b.name} differs from a's {a.name} (only UINT8 and INT8 may mix)"


def _quantization_shapes(desc: MatrixMultiplyIntegerToFloat) -> Iterator[tuple[str, str]]:
    yield from row_and_column_violations(desc, ("a_scale", "a_zero_point"), ("b_scale", "b_zero_point"))


@dataclass(frozen=True, kw_only=True)
class MatrixMultiplyIntegerToFloat(OperatorDesc):
    """``DML_MATRIX_MULTIPLY_INTEGER_TO_FLOAT_OPERATOR_DESC``.

    >>> from dmlq import TensorDesc, DataType
    >>> one = TensorDesc(DataType.FLOAT32, [1, 1])
    >>> MatrixMultiplyIntegerToFloat(
    ...     a=TensorDesc(DataType.UINT8, [2, 3]), a_scale=one, b=TensorDesc(DataType.UINT8, [3, 4]),
    ...     b_scale=one, output=TensorDesc(DataType.FLOAT32, [2, 4]),
    ... ).minimum_feature_level()
    <FeatureLevel.FL_6_2: 25088>
    """

    a: TensorDesc | None = None
    a_scale: TensorDesc | None = None
    a_zero_point: TensorDesc | None = None
    b: TensorDesc | None = None
    b_scale: TensorDesc | None = None
    b_zero_point: TensorDesc | None = None
    bias: TensorDesc | None = None
    output: TensorDesc | None = None

    TYPE_NAME = "MATRIX_MULTIPLY_INTEGER_TO_FLOAT"
    TYPE_VALUE = 170
    INTRODUCED = FL.FL_6_2
    FIELDS = (
        TensorField("a", "ATensor"),
        TensorField("a_scale", "AScaleTensor"),
        TensorField("a_zero_point", "AZeroPointTensor"),
        TensorField("b", "BTensor"),
        TensorField("b_scale", "BScaleTensor"),
        TensorField("b_zero_point", "BZeroPointTensor"),
        TensorField("bias", "BiasTensor"),
        TensorField("output", "OutputTensor", is_output=True),
    )
    SUPPORT = (
        support(FL.FL_6_2, {"a": (2, 4), "a_scale": (1, 4), "a_zero_point": (1, 4), "b": (2, 4),
                            "b_scale": (1, 4), "b_zero_point": (1, 4), "bias": (2, 4), "output": (2, 4)},
                optional=["a_zero_point", "b_zero_point", "bias"], a=INTEGERS, a_scale=FLOATS,
                a_zero_point=INTEGERS, b=INTEGERS, b_scale=FLOATS, b_zero_point=INTEGERS, bias=FLOATS,
                output=FLOATS),
    )  # fmt: skip
    CONSTRAINTS = (
        same_dimension_count("a_scale", "a_zero_point", "b_scale", "b_zero_point"),
        same_dimension_count("a", "bias", "b", "output"),
        same_sizes("output", "bias"),
        same_data_type("a", "a_zero_point"),
        same_data_type("b", "b_zero_point"),
        Constraint("a and b have one integer type, or are UINT8 and INT8", _one_integer_type_or_bytes),
        same_data_type("a_scale", "bias", "b_scale", "output"),
        MATRIX_SHAPES,
    )  # fmt: skip
    RULES = (
        Rule("AScale and AZeroPoint are per-tensor or per-row {1, 1, M, 1} (a 1-D one is [M]); BScale and "
             "BZeroPoint per-tensor or per-column {1, 1, 1, N}; leading 1s optional", _quantization_shapes),
    )  # fmt: skip
    DECISIONS = (
        "**Formula** (the page has none): `float32(acc * (AScale[m] * BScale[n])) + Bias` with `acc = sum_k"
        " (A - AZP[m]) * (B - BZP[n])` exact (int64; Python ints for 32-bit inputs), the product evaluated "
        "in float64 from the float32 (or float16, widened exactly) scales and rounded to float32 once, the "
        "bias added in float32, a FLOAT16 output rounded once from that float32 result. onnxruntime's "
        "reference for its DirectML tests sums dequantized float32 products and allows abs 1e-3 / rel 2e-2 "
        "(FLOAT32) and abs 0.5 (FLOAT16) (`onnxruntime/test/contrib_ops/matmul_integer_to_float_test.cc`, "
        "ShirasawaSama/onnxruntime@c4780e65): DirectML's GPUs may differ from dmlq by float rounding. For "
        "|acc| >= 2^53 (32-bit inputs only) float64(acc) itself rounds.",
        "**Mixed A / B types** (page vs onnxruntime): the page requires A, AZeroPoint, B and BZeroPoint of "
        "one data type. onnxruntime's DirectML provider registers T1 and T2 independently "
        "(`Ops/DmlOperatorMatMulIntegerToFloat.cpp` passes them unconverted), and its tests run UINT8 x INT8 "
        "(`HasZeroPoint_NoBias_test_U8S8`, `MatMulIntegerToFloat_FP16_U8S8`, ...) and INT8 x UINT8 "
        "(`HasZeroPoint_NoBias_test_S8U8`, ...: 'DML EP supports ... Signed A Matrix and Unsigned B Matrix') "
        "on the DirectML provider alone, expecting success "
        "(`onnxruntime/test/contrib_ops/matmul_integer_to_float_test.cc`, "
        "ShirasawaSama/onnxruntime@c4780e65): executable evidence that DirectML accepts them. dmlq accepts A "
        "and B of one type or one UINT8 and the other INT8 (what those tests show), with each zero point of "
        "its own tensor's type; wider mixes, "
        "which no test shows, stay refused as the page says. quantize_dynamic's default models (uint8 A from "
        "DynamicQuantizeLinear, int8 weights) need it.",
        "**The page's members OutputScaleTensor and OutputZeroPointTensor** do not exist in the struct "
        "(DirectMLSchema.h has 8 fields; the syntax block agrees): dmlq has the 8.",
        "**Scale and zero point layouts**: as MatrixMultiplyInteger's zero points (right-aligned; a 1-D A "
        "side is per-row `[M]`, as onnxruntime's provider places a 1-D a_scale on H); per-batch values are "
        "refused. A scale of 0 gives 0 (the page does not call it undefined); NaN propagates.",
    )
