"""DYNAMIC_QUANTIZE_LINEAR: the reference and the compiled operator (three outputs) against ONNX's
reference, onnxruntime CPU and a scalar model written here with Python floats; its validation rules."""

from __future__ import annotations

import math

import numpy as np
import pytest

from conftest import f32, quantize_scalar, round_even
from dmlq import DataType, Device, DmlError, TensorDesc, ops, reference
from family import FLOAT, UINT8, node_model, onnx_reference, onnxruntime_cpu

F32, F16, U8, I8 = DataType.FLOAT32, DataType.FLOAT16, DataType.UINT8, DataType.INT8
pytestmark = pytest.mark.filterwarnings("ignore:(overflow|invalid value) encountered:RuntimeWarning")


def quantize(x: np.ndarray, out_type: str = "uint8", device: Device | None = None):
    """dmlq's compiled operator: ``(y, scale, zero point)``, the last two of x's dimension count."""
    ones = [1] * x.ndim
    data_type = DataType.from_dtype(out_type)
    desc = ops.DynamicQuantizeLinear(
        input=TensorDesc(DataType.from_dtype(x.dtype), x.shape), output=TensorDesc(data_type, x.shape),
        output_scale=TensorDesc(F32, ones), output_zero_point=TensorDesc(data_type, ones),
    )  # fmt: skip
    outputs = [np.zeros(x.shape, out_type), np.zeros(ones, np.float32), np.zeros(ones, out_type)]
    (device or Device()).compile_operator(desc).execute([np.ascontiguousarray(x)], outputs)
    return outputs[0], outputs[1].reshape(()), outputs[2].reshape(())


def scalar_model(x: np.ndarray, out_type: str) -> tuple[list[int], float, int]:
    """ONNX's formula with Python floats rounded to float32 after each step."""
    info = np.iinfo(out_type)
    values = [float(v) for v in x.astype(np.float32).ravel()]
    low, high = min(0.0, *values), max(0.0, *values)
    scale = f32(f32(high - low if high != low else 1.0) / (info.max - info.min))
    zero_point = int(round_even(min(max(f32(info.min - f32(low / scale)), info.min), info.max)))
    return [quantize_scalar(v, scale, zero_point, out_type) for v in values], scale, zero_point


def onnx_model(x):
    return node_model("DynamicQuantizeLinear", [("x", x)], [("y", UINT8), ("y_scale", FLOAT),
                      ("y_zero_point", UINT8)], opset=11)  # fmt: skip


def inputs(rng) -> dict[str, np.ndarray]:
    spread = (rng.standard_normal(300) * np.exp2(rng.uniform(-6, 6, 300))).astype(np.float32)
    return {
        "mixed-signs": spread.reshape(3, 10, 10),
        "positive": np.abs(spread[:60]).reshape(6, 10),
        "negative": -np.abs(spread[:7]),
        "tiny": (spread[:16] * 1e-30).astype(np.float32).reshape(2, 2, 2, 2),
        "huge": (spread[:16] * 1e33).astype(np.float32).reshape(4, 4),
        "one-element": np.float32([-3.5]),
        "eight-dims": spread[:256].reshape(2, 2, 2, 2, 2, 2, 2, 2),
        "ort-basic": np.float32([0, 2, -3, -2.5, 1.34, 0.5]),
    }


CASES = ["mixed-signs", "positive", "negative", "tiny", "huge", "one-element", "eight-dims", "ort-basic"]


@pytest.mark.parametrize("case", CASES)
def test_equals_onnx_reference_bit_for_bit(case, rng):
    x = inputs(rng)[case]
    got = quantize(x)
    want = onnx_reference(onnx_model(x), [("x", x)])
    for ours, theirs in zip(got, want):
        assert ours.dtype == theirs.dtype and np.array_equal(ours, theirs)


@pytest.mark.parametrize("case", CASES)
def test_equals_onnxruntime_cpu_bit_for_bit(case, rng):
    x = inputs(rng)[case]
    got = quantize(x)
    want = onnxruntime_cpu(onnx_model(x), [("x", x)])
    for ours, theirs in zip(got, want):
        assert np.array_equal(ours, theirs)


@pytest.mark.parametrize("out_type", ["uint8", "int8"])
@pytest.mark.parametrize("case", CASES)
def test_equals_the_scalar_model(case, out_type, rng):
    x = inputs(rng)[case]
    y, scale, zero_point = quantize(x, out_type)
    want_y, want_scale, want_zero_point = scalar_model(x, out_type)
    assert y.ravel().tolist() == want_y and float(scale) == want_scale and int(zero_point) == want_zero_point


def test_onnxruntimes_own_cases():
    # dynamic_quantize_linear_test.cc: _Min_Adjusted and _Max_Adjusted run on DirectML too
    positive = np.float32([[1, 2.1, 1.3, 2.5], [3.34, 4.0, 1.5, 2.6], [3.9, 4.0, 3.0, 2.345]])
    y, scale, zero_point = quantize(positive)
    assert y.tolist() == [[64, 134, 83, 159], [213, 255, 96, 166], [249, 255, 191, 149]]
    assert (
        float(scale) == float(np.float32(4) / np.float32(255)) and int(zero_point) == 0
    )  # the test's 0.01568628
    y, scale, zero_point = quantize(np.float32([-1.0, -2.1, -1.3, -2.5, -3.34, -4.0]))
    assert (y.tolist(), int(zero_point)) == ([191, 121, 172, 96, 42, 0], 255)


def test_the_directml_data_point_is_the_reciprocal_division():
    # the basic test, skipped on DirectML: "Expected equality of these values: 26 and 25"
    x = np.float32([0, 2, -3, -2.5, 1.34, 0.5])
    assert quantize(x)[0].tolist() == [153, 255, 0, 26, 221, 179]
    assert quantize(x, device=Device(reciprocal_division=True))[0].tolist() == [153, 255, 0, 25, 221, 179]


@pytest.mark.parametrize("out_type, zero_point", [("uint8", 0), ("int8", -128)])
def test_all_zero_input_takes_onnx_references_scale(out_type, zero_point):
    x = np.zeros((2, 3), np.float32)
    y, scale, z = quantize(x, out_type)
    assert float(scale) == float(np.float32(1) / np.float32(255)) and int(z) == zero_point
    assert (y == zero_point).all()
    if out_type == "uint8":
        assert [float(v) for v in onnx_reference(onnx_model(x), [("x", x)])[1:]] == [float(scale), 0.0]
        assert float(onnxruntime_cpu(onnx_model(x), [("x", x)])[1]) == 1.0  # onnxruntime CPU differs here


def test_nan_gives_a_nan_scale_and_zeros_and_infinity_follows_the_formula():
    y, scale, zero_point = quantize(np.float32([1.0, np.nan, -2.0]))
    assert math.isnan(scale) and int(zero_point) == 0 and not y.any()
    y, scale, zero_point = quantize(np.float32([1.0, np.inf, -2.0]))
    assert math.isinf(scale) and int(zero_point) == 0 and y.tolist() == [0, 0, 0]  # inf / inf is NaN: 0


def test_float16_input_is_widened_exactly(rng):
    x = (rng.standard_normal(50) * 100).astype(np.float16)
    got = quantize(x, "int8")
    want = quantize(x.astype(np.float32), "int8")
    assert all(np.array_equal(a, b) for a, b in zip(got, want))
    assert all(np.array_equal(a, b) for a, b in zip(got, reference.dynamic_quantize_linear(x, np.int8)))


def test_a_transposed_input_and_scattered_outputs(rng):
    x = rng.standard_normal((3, 4)).astype(np.float32)
    desc = ops.DynamicQuantizeLinear(
        input=TensorDesc(F32, [4, 3], strides=[1, 4]), output=TensorDesc(I8, [4, 3], strides=[1, 4]),
        output_scale=TensorDesc(F32, [1, 1]), output_zero_point=TensorDesc(I8, [1, 1]),
    )  # fmt: skip
    memory = np.zeros(24, np.uint8)  # one buffer: data in bytes 0-11, zero point at 16, scale at 20
    outputs = [memory[:12].view(np.int8), memory[16:17].view(np.int8), memory[20:24].view(np.float32)]
    Device().compile_operator(desc).execute([x.ravel()], [outputs[0], outputs[2], outputs[1]])
    y, scale, zero_point = reference.dynamic_quantize_linear(x.T, np.int8)
    assert np.array_equal(outputs[0].reshape(3, 4).T, y)
    assert (outputs[2][0], outputs[1][0]) == (scale, zero_point)


def test_overlapping_outputs_and_a_wrong_output_count_are_refused():
    desc = ops.DynamicQuantizeLinear(
        input=TensorDesc(F32, [4]), output=TensorDesc(U8, [4]), output_scale=TensorDesc(F32, [1]),
        output_zero_point=TensorDesc(U8, [1]),
    )  # fmt: skip
    operator = Device().compile_operator(desc)
    memory = np.zeros(8, np.uint8)
    with pytest.raises(
        DmlError, match=r"execute: outputs output and output_zero_point overlap \(device is 6_4\)$"
    ):
        operator.execute([np.float32([1, 2, 3, 4])], [memory[:4], np.zeros(1, np.float32), memory[3:4]])
    with pytest.raises(DmlError, match=r"outputs needs 3 buffer\(s\), got 1"):
        operator.execute([np.float32([1, 2, 3, 4])], [memory[:4]])


# -- validation ----------------------------------------------------------------------------------------


def desc(**changes) -> ops.DynamicQuantizeLinear:
    fields = dict(input=TensorDesc(F32, [2, 3]), output=TensorDesc(U8, [2, 3]),
                  output_scale=TensorDesc(F32, [1, 1]), output_zero_point=TensorDesc(U8, [1, 1]))  # fmt: skip
    return ops.DynamicQuantizeLinear(**(fields | changes))


def refused(description, message: str, level: str = "6_4") -> None:
    with pytest.raises(DmlError) as error:
        Device(level).compile_operator(description)
    assert str(error.value) == f"DynamicQuantizeLinear{message} (device is {level})"


def test_valid_from_4_0_for_one_to_eight_dimensions():
    assert desc().minimum_feature_level().label == "4_0"
    refused(desc(), ": operator needs feature level 4_0", "3_1")
    for sizes in ([5], [1, 2, 3, 1, 2, 3, 1, 2]):
        ones = [1] * len(sizes)
        Device("4_0").compile_operator(desc(input=TensorDesc(F16, sizes), output=TensorDesc(I8, sizes),
                                            output_scale=TensorDesc(F32, ones),
                                            output_zero_point=TensorDesc(I8, ones)))  # fmt: skip


REFUSALS = [
    ({"output": TensorDesc(U8, [3, 2])}, ".output: sizes [3, 2] differ from input's [2, 3]"),
    ({"output_scale": TensorDesc(F32, [1, 2])}, ".output_scale: sizes [1, 2] must hold exactly 1 element"),
    ({"output_scale": TensorDesc(F32, [1])}, ".output_scale: dimension count 1 differs from input's 2"),
    ({"output_zero_point": TensorDesc(I8, [1, 1])},
     ".output_zero_point: data type INT8 differs from output's UINT8"),
    ({"output_scale": TensorDesc(F16, [1, 1])},
     ".output_scale: data type FLOAT16 is not supported (supported: FLOAT32)"),
    ({"input": TensorDesc(DataType.FLOAT64, [2, 3])},
     ".input: data type FLOAT64 is not supported (supported: FLOAT32, FLOAT16)"),
    ({"output_zero_point": None}, ".output_zero_point: tensor is required"),
    ({"output": TensorDesc(U8, [2, 3], strides=[0, 1])},
     ".output: strides[0] is 0 on an output (two elements would share an address)"),
]  # fmt: skip


@pytest.mark.parametrize("changes, message", REFUSALS)
def test_refusals_name_field_and_rule(changes, message):
    refused(desc(**changes), message)
