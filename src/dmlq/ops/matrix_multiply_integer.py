"""DML_MATRIX_MULTIPLY_INTEGER (operator 117, feature level 2_1; spec/QUANTIZED-FAMILY.md §3).

Integer matrices with their zero points subtracted, multiplied into INT32:

    Output[..., m, n] = sum_k (A[..., m, k] - AZP[m]) * (B[..., k, n] - BZP[n])

A is ``{[Batch], [Channel], M, K}``, B ``{[Batch], [Channel], K, N}``, Output
``{[Batch], [Channel], M, N}`` (4-D only at 2_1, 2 to 4 dimensions from 4_0); batches equal the
output's (broadcast through zero strides). The A zero point is per-tensor or per-row, B's per-tensor
or per-column; both optional (0). Not in-place.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol

from ..tensor import TensorDesc
from ..types import DataType, FeatureLevel
from .base import (
    Constraint,
    OperatorDesc,
    Rule,
    TensorField,
    required,
    same_data_type,
    same_dimension_count,
    support,
)
from .quantized_linear_matrix_multiply import matrix_shapes

FL = FeatureLevel
BYTES = (DataType.INT8, DataType.UINT8)
I32 = (DataType.INT32,)
MATRIX_SHAPES = Constraint("A is [..., M, K], B [..., K, N], Output [..., M, N] with equal batch sizes",
                           matrix_shapes)  # fmt: skip


def row_or_column_problem(desc: TensorDesc, count: int, per_row: bool) -> str | None:
    """Why ``desc`` is neither per-tensor nor one value per row (``count`` = M) or per column (N).

    Read right-aligned against ``{..., M, N}``: per-row ``{1, 1, M, 1}``, per-column ``{1, 1, 1, N}``
    (leading 1s optional); a 1-D per-row tensor is ``[M]``, as the pages' ``{[1], [1], M, [1]}`` allows.

    >>> [row_or_column_problem(TensorDesc(5, sizes), 3, per_row=True) for sizes in ([3], [3, 1])]
    [None, None]
    """
    sizes = desc.sizes
    padded = (1, 1, 1, 1, *sizes)[-4:]
    allowed = [(1, 1, 1, 1), (1, 1, count, 1) if per_row else (1, 1, 1, count)]
    if padded in allowed and len(sizes) <= 4 or per_row and sizes == (count,):
        return None
    kind = (
        f"per-row {{1, 1, M, 1}} (or [M]), M = {count}"
        if per_row
        else f"per-column {{1, 1, 1, N}}, N = {count}"
    )
    return f"sizes {list(sizes)} must be per-tensor (every size 1) or {kind}"


class WithOutput(Protocol):
    """A matrix multiplication's description: its output gives M and N."""

    @property
    def output(self) -> TensorDesc | None: ...


def row_and_column_violations(desc: WithOutput, rows: tuple[str, ...],
                              columns: tuple[str, ...]) -> Iterator[tuple[str, str]]:  # fmt: skip
    """Each present tensor of ``rows`` per-tensor or per-row, of ``columns`` per-tensor or per-column."""
    m, n = required(desc.output).sizes[-2:]
    for names, count, per_row in ((rows, m, True), (columns, n, False)):
        for name in names:
            tensor = getattr(desc, name)
            problem = None if tensor is None else row_or_column_problem(tensor, count, per_row)
            if problem:
                yield name, problem


def _zero_point_shapes(desc: MatrixMultiplyInteger) -> Iterator[tuple[str, str]]:
    yield from row_and_column_violations(desc, ("a_zero_point",), ("b_zero_point",))


@dataclass(frozen=True, kw_only=True)
class MatrixMultiplyInteger(OperatorDesc):
    """``DML_MATRIX_MULTIPLY_INTEGER_OPERATOR_DESC``.

    >>> from dmlq import TensorDesc, DataType
    >>> MatrixMultiplyInteger(a=TensorDesc(DataType.UINT8, [2, 3]), b=TensorDesc(DataType.INT8, [3, 4]),
    ...                       output=TensorDesc(DataType.INT32, [2, 4])).minimum_feature_level()
    <FeatureLevel.FL_4_0: 16384>
    """

    a: TensorDesc | None = None
    a_zero_point: TensorDesc | None = None
    b: TensorDesc | None = None
    b_zero_point: TensorDesc | None = None
    output: TensorDesc | None = None

    TYPE_NAME = "MATRIX_MULTIPLY_INTEGER"
    TYPE_VALUE = 117
    INTRODUCED = FL.FL_2_1
    FIELDS = (
        TensorField("a", "ATensor"),
        TensorField("a_zero_point", "AZeroPointTensor"),
        TensorField("b", "BTensor"),
        TensorField("b_zero_point", "BZeroPointTensor"),
        TensorField("output", "OutputTensor", is_output=True),
    )
    SUPPORT = (
        support(FL.FL_5_2, {"a": (2, 4), "a_zero_point": (1, 4), "b": (2, 4), "b_zero_point": (1, 4),
                            "output": (2, 4)},
                optional=["a_zero_point", "b_zero_point"],
                a=BYTES, a_zero_point=BYTES, b=BYTES, b_zero_point=BYTES, output=I32),
        support(FL.FL_4_0, {"a": (2, 4), "a_zero_point": (1, 4), "b": (2, 4), "b_zero_point": (2, 4),
                            "output": (2, 4)},
                optional=["a_zero_point", "b_zero_point"],
                a=BYTES, a_zero_point=BYTES, b=BYTES, b_zero_point=BYTES, output=I32),
        support(FL.FL_2_1, (4, 4), optional=["a_zero_point", "b_zero_point"],
                a=BYTES, a_zero_point=BYTES, b=BYTES, b_zero_point=BYTES, output=I32),
    )  # fmt: skip
    CONSTRAINTS = (
        same_dimension_count("a", "b", "output"),
        same_data_type("b", "b_zero_point"),
        same_data_type("a", "a_zero_point"),
        MATRIX_SHAPES,
    )
    RULES = (
        Rule("AZeroPoint is per-tensor or per-row {1, 1, M, 1} (a 1-D one is [M]); BZeroPoint per-tensor or "
             "per-column {1, 1, 1, N}; leading 1s optional", _zero_point_shapes),
    )  # fmt: skip
    DECISIONS = (
        "**Overflow**: the sum is exact and the INT32 output holds it modulo 2^32 (two's complement), as "
        "for ConvolutionInteger: ONNX's MatMulInteger lets the accumulation overflow only in 32 bits and a "
        "wrapped sum does not depend on the order of the additions. A wrap needs K > 33,025.",
        "**Zero point layouts**: read right-aligned against `{..., M, N}`, as QuantizedLinearMatrixMultiply"
        " reads its own; a 1-D A zero point is per-row `[M]`, which the page's pattern `{[1], [1], "
        "AZeroPointCount, [1]}` writes and onnxruntime's provider builds (`{1, 1, M, 1}` from a 1-D "
        "a_zero_point, `Ops/DmlOperatorMatMulInteger.cpp`).",
        "**Per-batch zero points** (a leading size above 1) are refused: the page describes none, and "
        "onnxruntime skips MatMulInteger_PerColumn_ND on DirectML ('The parameter is incorrect') and "
        "excludes DirectML from MatMulInteger_int8_uint8_PerColumn_ND "
        "(`onnxruntime/test/providers/cpu/math/matmul_integer_test.cc`, "
        "ShirasawaSama/onnxruntime@c4780e65).",
        "**Batches** broadcast only through zero strides (A's and B's batch sizes equal the output's), as "
        "onnxruntime's MatMulShapeMapping gives them.",
    )
