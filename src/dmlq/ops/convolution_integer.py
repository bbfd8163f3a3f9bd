"""DML_CONVOLUTION_INTEGER (operator 119, feature level 2_1; spec/QUANTIZED-FAMILY.md §2).

A forward cross-correlation of integers with their zero points subtracted, into INT32:

    Output[n, m, o] = sum_{c in m's group, k} (Input[n, c, o*s - start + k*d] - InputZP)
                                              * (Filter[m, c, k] - FilterZP[m])

Input ``{N, C, [H], W}``, Filter ``{M, C / GroupCount, [kH], kW}``, Output ``{N, M, [outH], outW}``
(4-D only at 2_1; 3-D too from 4_0, read with H = 1). The input zero point is per-tensor, the filter's
per-tensor or per-output-channel; both optional (0). ``DimensionCount`` is 2, the only value the page
supports. Not in-place.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeAlias

from ..tensor import TensorDesc
from ..types import DataType, FeatureLevel
from .base import Rule, TensorField, required, same_data_type, same_dimension_count, support
from .windows import (
    WindowedOperator,
    attribute_rule,
    one_element_problem,
    output_spatial_sizes,
    per_channel_problem,
    spatial_sizes,
    window_problem,
)

FL = FeatureLevel
BYTES = (DataType.INT8, DataType.UINT8)
I32 = (DataType.INT32,)

if TYPE_CHECKING:
    from .quantized_linear_convolution import QuantizedLinearConvolution

    Convolution: TypeAlias = "ConvolutionInteger | QuantizedLinearConvolution"  # the two share these rules
CONVOLUTION_ARRAYS = {"strides": 1, "dilations": 1, "start_padding": 0, "end_padding": 0}

FIELDS = (
    TensorField("input", "InputTensor"),
    TensorField("input_zero_point", "InputZeroPointTensor"),
    TensorField("filter", "FilterTensor"),
    TensorField("filter_zero_point", "FilterZeroPointTensor"),
    TensorField("output", "OutputTensor", is_output=True),
)


def _only_two(desc: Convolution) -> Iterator[tuple[str, str]]:
    if isinstance(desc.dimension_count, int) and desc.dimension_count != 2:
        yield (
            "dimension_count",
            f"{desc.dimension_count} is not supported (the page: only a value of 2 is supported)",
        )


CONVOLUTION_ATTRIBUTES = (
    Rule("DimensionCount is 2 (the page: 'only a value of 2 is supported')", _only_two),
    attribute_rule("Strides, Dilations, StartPadding and EndPadding hold DimensionCount values each; "
                   "strides, dilations and GroupCount are at least 1"),
)  # fmt: skip


def convolution_shape_violations(desc: Convolution) -> Iterator[tuple[str, str]]:
    """The input, filter and output sizes against each other, the groups and the window attributes."""
    x, w, y = required(desc.input).sizes, required(desc.filter).sizes, required(desc.output).sizes
    groups = desc.group_count
    if x[1] % groups or w[0] % groups:
        yield "group_count", f"{groups} must divide the input's {x[1]} channels and the filter's {w[0]} (M)"
        return
    if w[1] * groups != x[1]:
        yield "filter", (f"sizes {list(w)}: {w[1]} channels per group times group_count {groups} must be "
                         f"the input's {x[1]} channels")  # fmt: skip
        return
    input_sizes, window = spatial_sizes(required(desc.input), 2), spatial_sizes(required(desc.filter), 2)
    assert input_sizes is not None and window is not None, "the tables allow 3 to 4 dimensions"
    problem = window_problem(desc, input_sizes, window)
    if problem:
        yield "filter", problem
        return
    out = output_spatial_sizes(desc, input_sizes, window)
    if len(y) == 3 and out[0] != 1:
        yield "output", f"is 3-D, but the padding along H gives {out[0]} rows (a 3-D tensor holds one)"
        return
    expected = (x[0], w[0], *out[4 - len(y) :])
    if y != expected:
        yield (
            "output",
            f"sizes {list(y)} must be {list(expected)} ({{N, M, *out}} from the window and attributes)",
        )


CONVOLUTION_SHAPES = Rule(
    "Input is {N, C, [H], W}, Filter {M, C / GroupCount, [kH], kW} and Output {N, M, [outH], outW} with "
    "out = 1 + (in + start + end - (1 + (k - 1) * dilation)) / stride (rounded down); GroupCount divides "
    "C and M",
    convolution_shape_violations,
)


def per_channel_violations(desc: Convolution, per_tensor: tuple[str, ...],
                           per_channel: tuple[str, ...]) -> Iterator[tuple[str, str]]:  # fmt: skip
    """Each present tensor of ``per_tensor`` with one element, each of ``per_channel`` per-tensor or
    one value per output channel (the filter's M)."""
    channels = required(desc.filter).sizes[0]
    for name in per_tensor + per_channel:
        tensor = getattr(desc, name)
        if tensor is not None:
            problem = (
                one_element_problem(tensor) if name in per_tensor else per_channel_problem(tensor, channels)
            )
            if problem:
                yield name, problem


def _zero_point_shapes(desc: ConvolutionInteger) -> Iterator[tuple[str, str]]:
    yield from per_channel_violations(desc, ("input_zero_point",), ("filter_zero_point",))


@dataclass(frozen=True, kw_only=True)
class ConvolutionInteger(WindowedOperator):
    """``DML_CONVOLUTION_INTEGER_OPERATOR_DESC``.

    >>> from dmlq import TensorDesc, DataType
    >>> ConvolutionInteger(
    ...     input=TensorDesc(DataType.UINT8, [1, 2, 5, 5]), filter=TensorDesc(DataType.INT8, [4, 2, 3, 3]),
    ...     output=TensorDesc(DataType.INT32, [1, 4, 3, 3]),
    ... ).minimum_feature_level()
    <FeatureLevel.FL_2_1: 8448>
    """

    input: TensorDesc | None = None
    input_zero_point: TensorDesc | None = None
    filter: TensorDesc | None = None
    filter_zero_point: TensorDesc | None = None
    output: TensorDesc | None = None
    dimension_count: int = 2
    strides: tuple[int, ...] = (1, 1)
    dilations: tuple[int, ...] = (1, 1)
    start_padding: tuple[int, ...] = (0, 0)
    end_padding: tuple[int, ...] = (0, 0)
    group_count: int = 1

    TYPE_NAME = "CONVOLUTION_INTEGER"
    TYPE_VALUE = 119
    INTRODUCED = FL.FL_2_1
    FIELDS = FIELDS
    ARRAYS = CONVOLUTION_ARRAYS
    COUNTS = {"group_count": 1}
    SUPPORT = (
        support(FL.FL_4_0, {"input": (3, 4), "input_zero_point": (1, 4), "filter": (3, 4),
                            "filter_zero_point": (1, 4), "output": (3, 4)},
                optional=["input_zero_point", "filter_zero_point"],
                input=BYTES, input_zero_point=BYTES, filter=BYTES, filter_zero_point=BYTES, output=I32),
        support(FL.FL_2_1, (4, 4), optional=["input_zero_point", "filter_zero_point"],
                input=BYTES, input_zero_point=BYTES, filter=BYTES, filter_zero_point=BYTES, output=I32),
    )  # fmt: skip
    CONSTRAINTS = (
        same_data_type("input", "input_zero_point"),
        same_data_type("filter", "filter_zero_point"),
        same_dimension_count("filter_zero_point", "input_zero_point"),
        same_dimension_count("filter", "input", "output"),
    )
    DECISIONS = (
        "**Overflow**: the sum is exact and the INT32 output holds it modulo 2^32 (two's complement). "
        "ONNX's ConvInteger lets the accumulation overflow only in 32 bits, and a wrapped sum does not "
        "depend on the order of the additions, so it is what every int32 accumulator (onnxruntime CPU's "
        "MLAS) gives. A wrap needs more than 33,025 taps (C / GroupCount * kH * kW: 33,025 * 255 * 255 < "
        "2^31).",
        "**Padding**: a padded position holds the input zero point and contributes 0, as ONNX ConvInteger "
        "defines and onnxruntime CPU pads its Im2col "
        "(`onnxruntime/core/providers/cpu/quantization/conv_integer.cc`, "
        "ShirasawaSama/onnxruntime@c4780e65).",
        "**Orientation**: cross-correlation, no kernel flip: ONNX's definition, DirectML CONVOLUTION's "
        "CROSS_CORRELATION mode, and what onnxruntime's DirectML provider relies on when it passes ONNX "
        "weights unchanged (`Ops/DmlOperatorConvInteger.cpp`).",
        "**3-D tensors** (from 4_0): `{N, C, W}` is read as `{N, C, 1, W}` with DimensionCount 2, the "
        "provider's own mapping of a 1-D convolution; a 3-D output must then have one row.",
        "**Groups**: GroupCount must divide C and M, and the filter hold C / GroupCount channels (ONNX "
        "Conv; DirectML CONVOLUTION's FilterTensor pattern).",
        "**Per-channel zero points with fewer than 4 dimensions**: M values along dimension 0 or 1, the "
        "others of size 1 (the page's `{[1], Czp, [1], [1]}`). 5-D tensors are outside every table; "
        "onnxruntime's 3-D ConvInteger tests are skipped on DirectML with 'The parameter is incorrect' "
        "(`onnxruntime/test/providers/cpu/nn/conv_integer_test.cc`).",
    )
    RULES = (
        *CONVOLUTION_ATTRIBUTES,
        CONVOLUTION_SHAPES,
        Rule("InputZeroPoint is per-tensor (every size 1); FilterZeroPoint per-tensor or per-output-channel "
             "{1, M, 1, 1} (with fewer dimensions, M along dimension 0 or 1)", _zero_point_shapes),
    )  # fmt: skip
