"""DML_QUANTIZED_LINEAR_CONVOLUTION (operator 120, feature level 2_1; spec/QUANTIZED-FAMILY.md §1).

Dequantize the input and the filter, convolve (cross-correlation), add the bias, quantize:

    acc[n, m, o] = sum_{c in m's group, k} (Input[n, c, o*s - start + k*d] - InputZP)
                                           * (Filter[m, c, k] - FilterZP[m])
    Output = clamp(round((acc + Bias[m]) * InputScale * FilterScale[m] / OutputScale) + OutputZP, Min, Max)

Input ``{N, C, [H], W}``, Filter ``{M, C / GroupCount, [kH], kW}``, Output ``{N, M, [outH], outW}``
(4-D only at 2_1; 3-D too from 4_0, read with H = 1). The input and output scales and zero points
are per-tensor, the filter's per-tensor or per-output-channel, the INT32 bias ``{1, M, 1, 1}``. Zero
points and the bias are optional (0). ``DimensionCount`` is 2, the only value the page supports. A
scale of 0 is undefined behaviour. Not in-place.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from ..tensor import TensorDesc
from ..types import DataType, FeatureLevel
from .base import Rule, TensorField, required, same_data_type, same_dimension_count, support
from .convolution_integer import (
    BYTES,
    CONVOLUTION_ARRAYS,
    CONVOLUTION_ATTRIBUTES,
    CONVOLUTION_SHAPES,
    per_channel_violations,
)
from .windows import WindowedOperator

FL = FeatureLevel
F32, I32 = (DataType.FLOAT32,), (DataType.INT32,)
OPTIONAL = ["input_zero_point", "filter_zero_point", "bias", "output_zero_point"]
PARAMETERS = ("input_scale", "input_zero_point", "filter_zero_point", "output_scale", "output_zero_point")


def _bias_shape(desc: QuantizedLinearConvolution) -> Iterator[tuple[str, str]]:
    if desc.bias is None:
        return
    sizes, channels = desc.bias.sizes, required(desc.filter).sizes[0]
    if sizes[1] != channels or any(size != 1 for axis, size in enumerate(sizes) if axis != 1):
        yield "bias", f"sizes {list(sizes)} must be {{1, M, 1, 1}} (M = {channels} values on dimension 1)"


def _quantization_shapes(desc: QuantizedLinearConvolution) -> Iterator[tuple[str, str]]:
    per_tensor = ("input_scale", "input_zero_point", "output_scale", "output_zero_point")
    yield from per_channel_violations(desc, per_tensor, ("filter_scale", "filter_zero_point"))
    yield from _bias_shape(desc)


@dataclass(frozen=True, kw_only=True)
class QuantizedLinearConvolution(WindowedOperator):
    """``DML_QUANTIZED_LINEAR_CONVOLUTION_OPERATOR_DESC``.

    >>> from dmlq import TensorDesc, DataType
    >>> one = TensorDesc(DataType.FLOAT32, [1, 1, 1, 1])
    >>> QuantizedLinearConvolution(
    ...     input=TensorDesc(DataType.UINT8, [1, 2, 5, 5]), input_scale=one,
    ...     filter=TensorDesc(DataType.INT8, [4, 2, 3, 3]), filter_scale=TensorDesc(DataType.FLOAT32, [4]),
    ...     output_scale=one, output=TensorDesc(DataType.UINT8, [1, 4, 3, 3]),
    ... ).minimum_feature_level()
    <FeatureLevel.FL_5_2: 20992>
    """

    input: TensorDesc | None = None
    input_scale: TensorDesc | None = None
    input_zero_point: TensorDesc | None = None
    filter: TensorDesc | None = None
    filter_scale: TensorDesc | None = None
    filter_zero_point: TensorDesc | None = None
    bias: TensorDesc | None = None
    output_scale: TensorDesc | None = None
    output_zero_point: TensorDesc | None = None
    output: TensorDesc | None = None
    dimension_count: int = 2
    strides: tuple[int, ...] = (1, 1)
    dilations: tuple[int, ...] = (1, 1)
    start_padding: tuple[int, ...] = (0, 0)
    end_padding: tuple[int, ...] = (0, 0)
    group_count: int = 1

    TYPE_NAME = "QUANTIZED_LINEAR_CONVOLUTION"
    TYPE_VALUE = 120
    INTRODUCED = FL.FL_2_1
    FIELDS = (
        TensorField("input", "InputTensor"),
        TensorField("input_scale", "InputScaleTensor"),
        TensorField("input_zero_point", "InputZeroPointTensor"),
        TensorField("filter", "FilterTensor"),
        TensorField("filter_scale", "FilterScaleTensor"),
        TensorField("filter_zero_point", "FilterZeroPointTensor"),
        TensorField("bias", "BiasTensor"),
        TensorField("output_scale", "OutputScaleTensor"),
        TensorField("output_zero_point", "OutputZeroPointTensor"),
        TensorField("output", "OutputTensor", is_output=True),
    )
    ARRAYS = CONVOLUTION_ARRAYS
    COUNTS = {"group_count": 1}
    SUPPORT = (
        support(FL.FL_5_2, {"input": (3, 4), "filter": (3, 4), "bias": (3, 4), "output": (3, 4),
                            "filter_scale": (1, 4), **{name: (1, 4) for name in PARAMETERS}},
                optional=OPTIONAL, input=BYTES, input_scale=F32, input_zero_point=BYTES, filter=BYTES,
                filter_scale=F32, filter_zero_point=BYTES, bias=I32, output_scale=F32,
                output_zero_point=BYTES, output=BYTES),
        support(FL.FL_4_0, {"input": (3, 4), "filter": (3, 4), "bias": (3, 4), "output": (3, 4),
                            "filter_scale": (3, 4), **{name: (1, 4) for name in PARAMETERS}},
                optional=OPTIONAL, input=BYTES, input_scale=F32, input_zero_point=BYTES, filter=BYTES,
                filter_scale=F32, filter_zero_point=BYTES, bias=I32, output_scale=F32,
                output_zero_point=BYTES, output=BYTES),
        support(FL.FL_2_1, (4, 4), optional=OPTIONAL, input=BYTES, input_scale=F32, input_zero_point=BYTES,
                filter=BYTES, filter_scale=F32, filter_zero_point=BYTES, bias=I32, output_scale=F32,
                output_zero_point=BYTES, output=BYTES),
    )  # fmt: skip
    CONSTRAINTS = (
        same_dimension_count("bias", "filter", "input", "output"),
        same_data_type("output", "output_zero_point"),
        same_data_type("input", "input_zero_point"),
        same_data_type("filter", "filter_zero_point"),
    )
    DECISIONS = (
        "**Rounding and the scale arithmetic**: `(acc + Bias[m]) * (XS * WS[m]) / YS` evaluated in float64 "
        "from the float32 scales, halves to even, then `+ YZP`, clamped, NaN to 0: the requantization of "
        "QuantizedLinearMatrixMultiply (`dmlq.reference.requantize`). onnxruntime's DirectML tests accept a"
        " difference of 1 (its comment leaves open whether DirectML could take a rounding-mode parameter "
        "and match the other providers, `onnxruntime/test/providers/cpu/nn/qlinearconv_op_test.cc`); "
        "ONNX's reference rounds halves to even after adding YZP (so an odd YZP sends exact ties the other "
        "way); onnxruntime CPU multiplies by one float32 `XS * WS[m] / YS` and rounds halves to even, "
        "which differs from "
        "dmlq only at near-ties. `Device(reciprocal_division=True)` multiplies by float32 `1 / YS` instead,"
        " as DirectML's GPUs do.",
        "**Accumulation**: exact for every window (int64), the int32 bias added exactly; no 32-bit wrap "
        "before the requantization (the family's numbers). ONNX's reference QLinearConv accumulates in "
        "int32 and wraps past 2^31 (more than 33,025 taps of 255 * 255); onnxruntime CPU's int32 "
        "accumulator would too.",
        "**Bias scale**: the bias is in units of `XS * WS[m]` with zero point 0, ONNX QLinearConv's rule "
        "for its B; onnxruntime's provider passes B unchanged to BiasTensor "
        "(`Ops/DmlOperatorQLinearConv.cpp`, ShirasawaSama/onnxruntime@c4780e65), so it relies on this "
        "meaning.",
        "**Padding**: a padded position holds the input zero point (real 0), as the page's "
        "dequantize-then-convolve definition implies and onnxruntime CPU pads "
        "(`onnxruntime/core/providers/cpu/quantization/qlinearconv.cc`).",
        "**Orientation, groups, 3-D tensors, per-channel tensors of fewer dimensions**: as "
        "ConvolutionInteger (cross-correlation; GroupCount divides C and M; `{N, C, W}` read as `{N, C, 1, "
        "W}`; M values along dimension 0 or 1).",
        "**Per-channel filter scales**: accepted as the page writes them (`{1, M, 1, 1}`, with a per-tensor"
        " or per-channel zero point). onnxruntime skips every per-channel QLinearConv test on DirectML "
        "(Groups_PerChannel, Depthwise_PerChannel, Depthwise_Kernelsize_PerChannel, "
        "Requantize_Bias_PerChannel) with 'AbiCustomRegistry.cpp(507): The parameter is incorrect': its "
        "provider passes a `{1, M, 1, 1}` scale with a `{1, 1, 1, 1}` zero point there, which DirectML may "
        "refuse; the page states no such rule, so dmlq does not invent one. Its 3-D (5-D tensor) tests fail"
        " the same way, as this operator's tables stop at 4 dimensions.",
        "**Scale 0, negative or NaN scales**: 0 is undefined behaviour on the page; dmlq computes the "
        "formula anyway (x / 0 saturates, 0 / 0 gives 0) and `dmlq run` warns. Negative scales follow the "
        "formula; NaN gives 0.",
    )
    RULES = (
        *CONVOLUTION_ATTRIBUTES,
        CONVOLUTION_SHAPES,
        Rule("InputScale, InputZeroPoint, OutputScale and OutputZeroPoint are per-tensor (every size 1); "
             "FilterScale and FilterZeroPoint per-tensor or per-output-channel {1, M, 1, 1} (with fewer "
             "dimensions, M along dimension 0 or 1); Bias {1, M, 1, 1} ({1, M, 1} when 3-D)",
             _quantization_shapes),
    )  # fmt: skip
