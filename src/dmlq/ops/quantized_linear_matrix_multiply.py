"""DML_QUANTIZED_LINEAR_MATRIX_MULTIPLY (seed page 004).

Dequantize A and B, multiply, quantize the product:

    Output[m, n] = clamp(round(sum_k (A[m,k] - AZP) * AScale * (B[k,n] - BZP) * BScale
                               / OutputScale) + OutputZP, Min, Max)

A is ``{[Batch], [Channel], M, K}``, B ``{[Batch], [Channel], K, N}``, Output
``{[Batch], [Channel], M, N}`` (4-D only at 2_1, 2 to 4 dimensions from 4_0; the last two are the
matrix). Batch dimensions equal the output's (broadcast through zero strides). The scale and zero
point tensors, read right-aligned against ``{..., M, N}``, are per-tensor ``{1, 1, 1, 1}`` or
per-row ``{1, 1, M, 1}`` for A and Output, per-tensor or per-column ``{1, 1, 1, N}`` for B. Zero
points are optional (0). Not in-place.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ..tensor import TensorDesc
from ..types import FeatureLevel
from .base import Constraint, OperatorDesc, same_dimension_count, support
from .quantized_linear_add import (
    BYTES,
    F32,
    QUANTIZATION_FIELDS,
    QUANTIZED_FIELDS,
    ZERO_POINT_TYPES,
)

FL = FeatureLevel
ROW_FIELDS = ("a_scale", "a_zero_point", "output_scale", "output_zero_point")
OPTIONAL = ["a_zero_point", "b_zero_point", "output_zero_point"]


def matrix_shapes(present: Mapping[str, TensorDesc]) -> tuple[str, str] | None:
    """A ``[..., M, K]``, B ``[..., K, N]`` and Output ``[..., M, N]``, batches equal to the output's
    (the matrix multiplies share it)."""
    if not all(name in present for name in ("a", "b", "output")):
        return None
    a, b, out = (present[name].sizes for name in ("a", "b", "output"))
    if len(a) != len(b) or len(a) != len(out) or len(a) < 2:
        return None  # reported by the dimension rules
    if b[-2] != a[-1]:
        return "b", f"sizes {list(b)} do not continue a's K = {a[-1]} (b is [..., K, N])"
    if out[-2:] != (a[-2], b[-1]):
        return "output", f"sizes {list(out)} must end in [M, N] = [{a[-2]}, {b[-1]}]"
    for name, sizes in (("a", a), ("b", b)):
        if sizes[:-2] != out[:-2]:
            return name, (
                f"batch sizes {list(sizes[:-2])} differ from output's {list(out[:-2])} "
                "(broadcast batches through zero strides)"
            )
    return None


def _quantization_shapes(present: Mapping[str, TensorDesc]) -> tuple[str, str] | None:
    if "output" not in present:
        return None
    m, n = present["output"].sizes[-2:] if present["output"].dimension_count >= 2 else (1, 1)
    for name in QUANTIZATION_FIELDS:
        if name not in present:
            continue
        sizes = (1, 1, 1, 1, *present[name].sizes)[-4:]
        per_axis = (1, 1, m, 1) if name in ROW_FIELDS else (1, 1, 1, n)
        if sizes not in ((1, 1, 1, 1), per_axis) or len(present[name].sizes) > 4:
            kind = "per-row {1, 1, M, 1}" if name in ROW_FIELDS else "per-column {1, 1, 1, N}"
            return name, (
                f"sizes {list(present[name].sizes)} must be per-tensor {{1, 1, 1, 1}} or "
                f"{kind} with M = {m}, N = {n}"
            )
    return None


@dataclass(frozen=True, kw_only=True)
class QuantizedLinearMatrixMultiply(OperatorDesc):
    """``DML_QUANTIZED_LINEAR_MATRIX_MULTIPLY_OPERATOR_DESC``.

    >>> from dmlq import TensorDesc, DataType
    >>> one = TensorDesc(DataType.FLOAT32, [1, 1])
    >>> QuantizedLinearMatrixMultiply(
    ...     a=TensorDesc(DataType.UINT8, [2, 3]), a_scale=one, b=TensorDesc(DataType.INT8, [3, 4]),
    ...     b_scale=one, output_scale=one, output=TensorDesc(DataType.UINT8, [2, 4]),
    ... ).minimum_feature_level()
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

    TYPE_NAME = "QUANTIZED_LINEAR_MATRIX_MULTIPLY"
    TYPE_VALUE = 118
    INTRODUCED = FL.FL_2_1
    FIELDS = QUANTIZED_FIELDS
    SUPPORT = (
        support(FL.FL_4_0, {"a": (2, 4), "b": (2, 4), "output": (2, 4),
                            **{name: (1, 4) for name in QUANTIZATION_FIELDS}},
                optional=OPTIONAL, a=BYTES, a_scale=F32, a_zero_point=BYTES, b=BYTES, b_scale=F32,
                b_zero_point=BYTES, output_scale=F32, output_zero_point=BYTES, output=BYTES),
        support(FL.FL_2_1, (4, 4), optional=OPTIONAL,
                a=BYTES, a_scale=F32, a_zero_point=BYTES, b=BYTES, b_scale=F32,
                b_zero_point=BYTES, output_scale=F32, output_zero_point=BYTES, output=BYTES),
    )  # fmt: skip
    CONSTRAINTS = (
        same_dimension_count(*QUANTIZATION_FIELDS),
        same_dimension_count("a", "b", "output"),
        *ZERO_POINT_TYPES,
        Constraint("A is [..., M, K], B [..., K, N], Output [..., M, N] with equal batch sizes",
                   matrix_shapes),
        Constraint("A and Output scales and zero points are per-tensor or per-row {1, 1, M, 1}; "
                   "B's per-tensor or per-column {1, 1, 1, N}", _quantization_shapes),
    )  # fmt: skip
