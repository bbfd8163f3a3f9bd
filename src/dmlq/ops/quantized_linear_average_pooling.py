"""DML_QUANTIZED_LINEAR_AVERAGE_POOLING (operator 169, feature level 6_2; spec/QUANTIZED-FAMILY.md §6).

Dequantize the input, average each window, quantize:

    Xr = (Input - InputZP[c]) * InputScale[c]
    Output = clamp(round(mean over the window of Xr / OutputScale[c]) + OutputZP[c], Min, Max)

Input and Output are ``{N, C, H, W}`` or ``{N, C, D, H, W}`` with ``DimensionCount`` 2 or 3 spatial
dimensions; padding counts in the mean only with ``IncludePadding``. Scales and zero points are
per-tensor or per-channel; zero points optional (0). A scale of 0 is undefined behaviour. Not in-place.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from ..tensor import TensorDesc
from ..types import DataType, FeatureLevel
from .base import Rule, TensorField, required, same_data_type, same_dimension_count, support
from .windows import (
    WindowedOperator,
    attribute_rule,
    output_spatial_sizes,
    per_channel_problem,
    spatial_sizes,
    window_problem,
)

FL = FeatureLevel
BYTES = (DataType.INT8, DataType.UINT8)
F32 = (DataType.FLOAT32,)
PARAMETERS = ("input_scale", "input_zero_point", "output_scale", "output_zero_point")


def _attribute_kinds(desc: QuantizedLinearAveragePooling) -> Iterator[tuple[str, str]]:
    if not isinstance(desc.include_padding, bool):
        yield "include_padding", f"{desc.include_padding!r} must be True or False (a BOOL)"
    spatial = required(desc.input).dimension_count - 2
    if isinstance(desc.dimension_count, int) and desc.dimension_count != spatial:
        yield "dimension_count", (f"{desc.dimension_count} must be the input's spatial dimension count, "
                                  f"{spatial}")  # fmt: skip


def _shapes(desc: QuantizedLinearAveragePooling) -> Iterator[tuple[str, str]]:
    x, y = required(desc.input).sizes, required(desc.output).sizes
    input_sizes, window = spatial_sizes(required(desc.input), desc.dimension_count), desc.window_size
    # The rules before this one made dimension_count the input's spatial count and window_size a tuple
    assert input_sizes is not None and window is not None, "the attribute rules ran first"
    problem = window_problem(desc, input_sizes, window)
    if problem:
        yield "window_size", problem
        return
    expected = (*x[:2], *output_spatial_sizes(desc, input_sizes, window))
    if y != expected:
        yield (
            "output",
            f"sizes {list(y)} must be {list(expected)} ({{N, C, *out}} from the window and attributes)",
        )
        return
    for name in PARAMETERS:
        tensor = getattr(desc, name)
        problem = None if tensor is None else per_channel_problem(tensor, x[1])
        if problem:
            yield name, problem


@dataclass(frozen=True, kw_only=True)
class QuantizedLinearAveragePooling(WindowedOperator):
    """``DML_QUANTIZED_LINEAR_AVERAGE_POOLING_OPERATOR_DESC``.

    >>> from dmlq import TensorDesc, DataType
    >>> one = TensorDesc(DataType.FLOAT32, [1, 1, 1, 1])
    >>> QuantizedLinearAveragePooling(
    ...     input=TensorDesc(DataType.UINT8, [1, 2, 4, 4]), input_scale=one, output_scale=one,
    ...     output=TensorDesc(DataType.UINT8, [1, 2, 2, 2]), strides=[2, 2], window_size=[2, 2],
    ... ).minimum_feature_level()
    <FeatureLevel.FL_6_2: 25088>
    """

    input: TensorDesc | None = None
    input_scale: TensorDesc | None = None
    input_zero_point: TensorDesc | None = None
    output_scale: TensorDesc | None = None
    output_zero_point: TensorDesc | None = None
    output: TensorDesc | None = None
    dimension_count: int = 2
    strides: tuple[int, ...] = (1, 1)
    window_size: tuple[int, ...] | None = None
    start_padding: tuple[int, ...] = (0, 0)
    end_padding: tuple[int, ...] = (0, 0)
    dilations: tuple[int, ...] = (1, 1)
    include_padding: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        if (
            isinstance(self.include_padding, np.bool_)
            or type(self.include_padding) is int
            and self.include_padding in (0, 1)
        ):
            object.__setattr__(self, "include_padding", bool(self.include_padding))

    TYPE_NAME = "QUANTIZED_LINEAR_AVERAGE_POOLING"
    TYPE_VALUE = 169
    INTRODUCED = FL.FL_6_2
    FIELDS = (
        TensorField("input", "InputTensor"),
        TensorField("input_scale", "InputScaleTensor"),
        TensorField("input_zero_point", "InputZeroPointTensor"),
        TensorField("output_scale", "OutputScaleTensor"),
        TensorField("output_zero_point", "OutputZeroPointTensor"),
        TensorField("output", "OutputTensor", is_output=True),
    )
    ARRAYS = {"strides": 1, "window_size": 1, "start_padding": 0, "end_padding": 0, "dilations": 1}
    SUPPORT = (
        support(FL.FL_6_2, {"input": (4, 5), "output": (4, 5), **{name: (1, 5) for name in PARAMETERS}},
                optional=["input_zero_point", "output_zero_point"], input=BYTES, input_scale=F32,
                input_zero_point=BYTES, output_scale=F32, output_zero_point=BYTES, output=BYTES),
    )  # fmt: skip
    CONSTRAINTS = (
        same_dimension_count("input", "output"),
        same_data_type("input", "input_zero_point"),
        same_data_type("output", "output_zero_point"),
    )
    RULES = (
        Rule("DimensionCount is the input's spatial dimension count (2 for 4-D, 3 for 5-D); IncludePadding "
             "is a BOOL", _attribute_kinds),
        attribute_rule("Strides, WindowSize, StartPadding, EndPadding and Dilations hold DimensionCount "
                       "values each; strides, window sizes and dilations are at least 1"),
        Rule("Output is {N, C, *out} with out = 1 + (in + start + end - (1 + (window - 1) * dilation)) / "
             "stride (rounded down); scales and zero points per-tensor or per-channel {1, C, 1, 1} (with "
             "fewer dimensions, C along dimension 0 or 1)", _shapes),
    )  # fmt: skip
    DECISIONS = (
        "**Output size with dilations**: `1 + (in + start + end - (1 + (window - 1) * dilation)) / stride`,"
        " rounded down. The page's formula has no dilation term (AVERAGE_POOLING1's neither); with dilation"
        " 1 the two agree, and the dilated extent is what DirectMLX and onnxruntime "
        "(`OAH/OperatorHelper.cpp`, ShirasawaSama/onnxruntime@c4780e65) compute and what keeps every tap "
        "inside the padded input. onnxruntime's `ceil_mode` extra window (past the padding) has no page and"
        " is refused: the output must have exactly these sizes.",
        "**Padding and the divisor**: a padded element holds the input zero point (real 0); it counts in "
        "the divisor only with IncludePadding (the page), as onnxruntime CPU's QLinearAveragePool averages "
        "(`onnxruntime/contrib_ops/cpu/quantization/qlinear_pool.cc`).",
        "**A window wholly in padding** without IncludePadding has no element to average: its output is the"
        " output zero point (the average taken as 0). onnxruntime refuses any padding as large as the "
        "window ('Pad should be smaller than kernel', ONNX's rule); the page has none, so dmlq accepts it.",
        "**Arithmetic**: the window's sum of `x - XZP` is exact; `sum * XS / count` and the division by YS "
        "are float64 with the float32 scales, halves to even, `+ YZP`, clamped, NaN to 0 (the "
        "requantization of the other quantized operators; `Device(reciprocal_division=True)` multiplies by "
        "float32 `1 / YS`). onnxruntime CPU averages dequantized float32 values and rounds `avg / YS + "
        "YZP`, the zero point before the rounding (`quantize_value`, "
        "`onnxruntime/contrib_ops/cpu/quantization/qlinear_pool.cc`): it differs from the page's `round(avg"
        " / YS) + YZP` at near-ties and, with an odd YZP, at exact ties (its NCHW 2-D path does; a 1 x 2 "
        "window took another path that agrees with dmlq).",
        "**Per-channel parameters**: `{1, C, 1, 1}`, and `{1, C, 1, 1, 1}` for 5-D inputs (the page writes "
        "the 4-D pattern only); with fewer dimensions C along dimension 0 or 1. Absent zero points are 0, "
        "which is how dmlq reads the `{DML_TENSOR_TYPE_INVALID, NULL}` descriptors onnxruntime's provider "
        "passes for missing ones (`Ops/DmlOperatorQLinearAveragePooling.cpp`).",
        "**Input and output types** may differ (INT8 in, UINT8 out): the page does not forbid it.",
        "**Scale 0**: undefined behaviour on the page; dmlq computes the formula anyway and `dmlq run` "
        "warns.",
        "**NaN and negative scales**: follow the formula; a NaN result gives 0, as in every quantizing "
        "operator.",
    )
