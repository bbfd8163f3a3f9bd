"""DML_DYNAMIC_QUANTIZE_LINEAR (operator 148, feature level 4_0; spec/QUANTIZED-FAMILY.md §5).

Quantize with a scale and zero point computed from the input's own range (three outputs):

    OutputScale = (InputMax - InputMin) / (Max - Min)
    OutputZeroPoint = Min - InputMin / OutputScale
    Output = clamp(round(Input / OutputScale) + OutputZeroPoint, Min, Max)

Min/Max are 0/255 for UINT8 and -128/127 for INT8. The output has the input's sizes; the scale and
zero point one element each. All four tensors have one dimension count. Not in-place.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from ..tensor import TensorDesc
from ..types import DataType, FeatureLevel
from .base import OperatorDesc, Rule, TensorField, required, same_data_type, same_dimension_count, support

FL = FeatureLevel
BYTES = (DataType.INT8, DataType.UINT8)


def _shapes(desc: DynamicQuantizeLinear) -> Iterator[tuple[str, str]]:
    output, input_ = required(desc.output), required(desc.input)
    if output.sizes != input_.sizes:
        yield "output", f"sizes {list(output.sizes)} differ from input's {list(input_.sizes)}"
    for name in ("output_scale", "output_zero_point"):
        tensor = getattr(desc, name)
        if tensor.element_count != 1:
            yield name, f"sizes {list(tensor.sizes)} must hold exactly 1 element"


@dataclass(frozen=True, kw_only=True)
class DynamicQuantizeLinear(OperatorDesc):
    """``DML_DYNAMIC_QUANTIZE_LINEAR_OPERATOR_DESC``.

    >>> from dmlq import TensorDesc, DataType
    >>> one = [1, 1]
    >>> DynamicQuantizeLinear(
    ...     input=TensorDesc(DataType.FLOAT32, [2, 3]), output=TensorDesc(DataType.UINT8, [2, 3]),
    ...     output_scale=TensorDesc(DataType.FLOAT32, one), output_zero_point=TensorDesc(DataType.UINT8, one),
    ... ).minimum_feature_level()
    <FeatureLevel.FL_4_0: 16384>
    """

    input: TensorDesc | None = None
    output: TensorDesc | None = None
    output_scale: TensorDesc | None = None
    output_zero_point: TensorDesc | None = None

    TYPE_NAME = "DYNAMIC_QUANTIZE_LINEAR"
    TYPE_VALUE = 148
    INTRODUCED = FL.FL_4_0
    FIELDS = (
        TensorField("input", "InputTensor"),
        TensorField("output", "OutputTensor", is_output=True),
        TensorField("output_scale", "OutputScaleTensor", is_output=True),
        TensorField("output_zero_point", "OutputZeroPointTensor", is_output=True),
    )
    SUPPORT = (
        support(FL.FL_4_0, (1, 8), input=(DataType.FLOAT32, DataType.FLOAT16), output=BYTES,
                output_scale=(DataType.FLOAT32,), output_zero_point=BYTES),
    )  # fmt: skip
    CONSTRAINTS = (
        same_dimension_count("input", "output_scale", "output", "output_zero_point"),
        same_data_type("output", "output_zero_point"),
    )
    RULES = (
        Rule("Output has the input's sizes; OutputScale and OutputZeroPoint hold one element each", _shapes),
    )
    DECISIONS = (
        "**The range includes 0**: `InputMin = min(0, min(x))`, `InputMax = max(0, max(x))`, as ONNX's "
        "DynamicQuantizeLinear defines it; onnxruntime's `_Min_Adjusted` (all positive, zero point 0) and "
        "`_Max_Adjusted` (all negative, zero point 255) tests run on DirectML, not skipped "
        "(`onnxruntime/test/providers/cpu/tensor/dynamic_quantize_linear_test.cc`, "
        "ShirasawaSama/onnxruntime@c4780e65).",
        "**Scale and zero point arithmetic**: float32, in ONNX's order: `scale = float32(InputMax - "
        "InputMin) / float32(Max - Min)`; `zero point = clamp(round(Min - InputMin / scale))`, a true "
        "division, halves to even (ONNX; onnxruntime CPU's `GetQuantizationParameter`, "
        "`onnxruntime/core/util/qmath.h`).",
        "**Quantizing**: ElementWiseQuantizeLinear's rule with that scale and zero point: `x / scale` in "
        "float32, halves to even, `+ zero point`, clamped, NaN to 0. `Device(reciprocal_division=True)` "
        "multiplies by float32 `1 / scale` instead: the one DirectML data point known, onnxruntime's basic "
        "test skipped on DirectML because it gave 25 where 26 is expected ('Expected equality of these "
        "values: 26 and 25'), is what the reciprocal gives for -2.5 at scale 5 / 255 (-127.5, a tie to "
        "even) while the division gives -127.49999 (26).",
        "**All-equal input** (the range collapses to 0, only when every element is 0): scale `1 / (Max - "
        "Min)` = float32(1 / 255), as ONNX's reference computes; onnxruntime CPU writes 1.0 there. The zero"
        " point is then Min (0 for UINT8, -128 for INT8) and every output equals it, dequantizing to 0 "
        "either way.",
        "**NaN and infinity**: a NaN anywhere makes the range and the scale NaN, as ONNX's reference "
        "(`np.min`/`np.max`) propagates it; the zero point and every output are then 0 by the NaN rule of "
        "the quantizing operators (ONNX's reference returns zero point 255 there, an accident of Python's "
        "`min`/`max` argument order, and casts NaN to uint8). An infinity gives an infinite scale and "
        "follows the formula.",
        "**FLOAT16 input**: widened exactly to float32; everything after is float32.",
        "**Shapes**: the output has the input's sizes, the scale and zero point one element each, and all "
        "four the input's dimension count (the page's constraint: `{1, 1, 1}` for 3-D data). onnxruntime's "
        "provider gives a 5-D or larger input a 4-D scale, which this constraint refuses.",
        "**INT8 output**: Min/Max -128/127, as the page says (ONNX and onnxruntime CPU have UINT8 only).",
    )
