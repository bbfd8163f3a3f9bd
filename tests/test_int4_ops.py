"""Quantize and Dequantize (DirectML 6_3): support-table rows and boundaries, and their rules.

The tables below are written out by hand from DirectML's pages for DML_QUANTIZE_OPERATOR_DESC and
DML_DEQUANTIZE_OPERATOR_DESC, not read from ``dmlq.ops``.
"""

from __future__ import annotations

import itertools

import pytest

from dmlq import DataType, Device, DmlError, FeatureLevel, QuantizationType, TensorDesc, ops

F32, F16 = DataType.FLOAT32, DataType.FLOAT16
I8, U8, I4, U4 = DataType.INT8, DataType.UINT8, DataType.INT4, DataType.UINT4
FLOATS, INTEGERS = (F32, F16), (I8, I4, U8, U4)
SCALE, SCALE_ZERO_POINT = QuantizationType.SCALE, QuantizationType.SCALE_ZERO_POINT


def quantize(x=F32, out=I4, sizes=(4, 64), blocks=(4, 2), zero_point=True, **changes) -> ops.Quantize:
    tensors = [TensorDesc(x, blocks)] + ([TensorDesc(out, blocks)] if zero_point else [])
    fields = dict(input=TensorDesc(x, sizes), quantization_type=SCALE_ZERO_POINT if zero_point else SCALE,
                  quantization_tensors=tensors, output=TensorDesc(out, sizes))  # fmt: skip
    return ops.Quantize(**{**fields, **changes})


def dequantize(q=U4, out=F16, sizes=(4, 64), blocks=(4, 2), zero_point=True, **changes) -> ops.Dequantize:
    tensors = [TensorDesc(out, blocks)] + ([TensorDesc(q, blocks)] if zero_point else [])
    fields = dict(input=TensorDesc(q, sizes), quantization_type=SCALE_ZERO_POINT if zero_point else SCALE,
                  quantization_tensors=tensors, output=TensorDesc(out, sizes))  # fmt: skip
    return ops.Dequantize(**{**fields, **changes})


def refusal(desc, level="6_4") -> str:
    with pytest.raises(DmlError) as error:
        Device(level).compile_operator(desc)
    return str(error.value)


@pytest.mark.parametrize(("x", "out", "zero_point"), list(itertools.product(FLOATS, INTEGERS, (False, True))))
def test_quantize_rows_accepted_at_6_3_refused_at_6_2(x, out, zero_point) -> None:
    desc = quantize(x, out, zero_point=zero_point)
    assert desc.minimum_feature_level() == FeatureLevel.FL_6_3
    assert refusal(desc, "6_2") == "Quantize: operator needs feature level 6_3 (device is 6_2)"


@pytest.mark.parametrize(("q", "out", "zero_point"), list(itertools.product(INTEGERS, FLOATS, (False, True))))
def test_dequantize_rows_accepted_at_6_3_refused_at_6_2(q, out, zero_point) -> None:
    desc = dequantize(q, out, zero_point=zero_point)
    assert desc.minimum_feature_level() == FeatureLevel.FL_6_3
    assert refusal(desc, "6_2") == "Dequantize: operator needs feature level 6_3 (device is 6_2)"


@pytest.mark.parametrize("dims", [1, 2, 5, 8])
def test_one_to_eight_dimensions(dims) -> None:
    sizes, blocks = (2,) * dims, (1,) * (dims - 1) + (2,)
    assert dequantize(sizes=sizes, blocks=blocks).minimum_feature_level() == FeatureLevel.FL_6_3


@pytest.mark.parametrize(
    ("desc", "message"),
    [
        (quantize(x=I8), r"Quantize\.input: data type INT8 is not supported \(supported: FLOAT32, FLOAT16\)"),
        (quantize(out=F32), r"Quantize\.output: data type FLOAT32 is not supported"),
        (dequantize(q=DataType.INT32), r"Dequantize\.input: data type INT32 is not supported"),
        (dequantize(output=TensorDesc(DataType.FLOAT64, [4, 64])),
         r"Dequantize\.output: data type FLOAT64 is not supported"),
        (dequantize(sizes=(1,) * 9, blocks=(1,) * 9),
         r"Dequantize\.input: dimension count 9 is outside 1 to 8"),
        (dequantize(quantization_type=QuantizationType.NONE),
         r"Dequantize\.quantization_type: <QuantizationType\.NONE: 0> must be QuantizationType\.SCALE"),
        (dequantize(quantization_type=7), r"Dequantize\.quantization_type: 7 must be"),
        (dequantize(quantization_type=SCALE),
         r"Dequantize\.quantization_tensors: SCALE takes 1 tensor\(s\) \(scale\), got 2"),
        (dequantize(zero_point=False, quantization_type=SCALE_ZERO_POINT),
         r"SCALE_ZERO_POINT takes 2 tensor\(s\) \(scale, zero_point\), got 1"),
        (dequantize(quantization_tensors=[TensorDesc(F32, [4, 2]), TensorDesc(U4, [4, 2])]),
         r"Dequantize\.quantization_tensors\[0\]: the scale has data type FLOAT32, not output's FLOAT16"),
        (dequantize(quantization_tensors=[TensorDesc(F16, [4, 2]), TensorDesc(U8, [4, 2])]),
         r"Dequantize\.quantization_tensors\[1\]: the zero point has data type UINT8, not input's UINT4"),
        (quantize(quantization_tensors=[TensorDesc(F32, [4, 2]), TensorDesc(DataType.INT32, [4, 2])]),
         r"Quantize\.quantization_tensors\[1\]: data type INT32 is not supported"),
        (dequantize(blocks=(4, 3)),
         r"Dequantize\.quantization_tensors\[0\]: sizes \[4, 3\] must each divide"),
        (dequantize(blocks=(4, 2, 1)),
         r"Dequantize\.quantization_tensors\[0\]: dimension count 3 differs from input's 2"),
        (dequantize(quantization_tensors=[TensorDesc(F16, [4, 2]), TensorDesc(U4, [4, 1])]),
         r"Dequantize\.quantization_tensors\[1\]: sizes \[4, 1\] differ from the scale's \[4, 2\]"),
        (dequantize(output=TensorDesc(F16, [4, 32])),
         r"Dequantize\.output: sizes \[4, 32\] differ from input's"),
        (dequantize(quantization_tensors=[TensorDesc(F16, [4, 2]), None]),
         r"Dequantize\.quantization_tensors\[1\]: tensor is required"),
        (dequantize(quantization_tensors=TensorDesc(F16, [4, 2])),
         r"Dequantize\.quantization_tensors: must be a sequence of TensorDesc, not TensorDesc"),
    ],
)  # fmt: skip
def test_rules_name_the_field(desc, message) -> None:
    assert refusal(desc).endswith("(device is 6_4)")
    with pytest.raises(DmlError, match=message):
        Device("6_4").compile_operator(desc)


def test_provider_matmul_nbits_layout_compiles() -> None:
    """onnxruntime's DirectML MatMulNBits: B {N, K} UINT4, scales and zero points {N, K / block}."""
    for block in (32, 128):
        desc = dequantize(U4, F16, sizes=(1, 1, 4096, 11008), blocks=(1, 1, 4096, 11008 // block))
        assert desc.minimum_feature_level() == FeatureLevel.FL_6_3


def test_broadcast_quantization_tensors_through_zero_strides() -> None:
    per_tensor = TensorDesc(F32, [4, 64], strides=[0, 0])
    desc = quantize(quantization_tensors=[per_tensor, TensorDesc(I4, [4, 64], strides=[0, 0])])
    assert desc.minimum_feature_level() == FeatureLevel.FL_6_3


@pytest.mark.parametrize("cls", [ops.ElementWiseQuantizeLinear, ops.ElementWiseDequantizeLinear])
@pytest.mark.parametrize("four_bit", [I4, U4])
def test_element_wise_quantize_linear_takes_no_4_bit_types_at_any_level(cls, four_bit) -> None:
    """Their pages' newest table (6_2 and above) lists no INT4/UINT4; 6_3 added only the two operators."""
    sizes = [1, 1, 2, 4]
    float_side, integer_side = (
        ("input", "output") if cls is ops.ElementWiseQuantizeLinear else ("output", "input")
    )
    desc = cls(**{float_side: TensorDesc(F32, sizes), integer_side: TensorDesc(four_bit, sizes),
                  "scale": TensorDesc(F32, sizes), "zero_point": TensorDesc(four_bit, sizes)})  # fmt: skip
    assert desc.minimum_feature_level() is None
    assert f"data type {four_bit.name} is not supported" in refusal(desc)


def test_lists_become_tuples_and_accessors_name_the_roles() -> None:
    desc = dequantize()
    assert isinstance(desc.quantization_tensors, tuple)
    assert desc.scale.data_type == F16 and desc.zero_point.data_type == U4
    assert dequantize(zero_point=False).zero_point is None
    assert dequantize(quantization_type=2).quantization_type is SCALE_ZERO_POINT
