"""QUANTIZED_LINEAR_CONVOLUTION: the reference and the compiled operator against ONNX's reference and
onnxruntime CPU (bit for bit where both are exact: power-of-two scales), against exact rational
requantization of Python-int sums on any scales; its validation rules."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from conftest import exact_on_onnxruntime
from dmlq import DataType, Device, DmlError, TensorDesc, ops
from dmlq.packed import PackedFilter
from family import (
    GEOMETRIES,
    INT8,
    TYPES,
    UINT8,
    attributes,
    convolution_sums,
    execute,
    execute_owned,
    node_model,
    onnx_convolution_attributes,
    onnx_reference,
    onnxruntime_cpu,
    output_sizes,
    random_bytes,
    tensor_of,
)

F32, I32, U8, I8 = DataType.FLOAT32, DataType.INT32, DataType.UINT8, DataType.INT8


def convolution_desc(x, xs, xz, w, ws, wz, bias, ys, yz, out_type: str, **given):
    """The description of packed buffers; per-channel parameters as vectors of M values."""
    attrs = attributes(given)
    ones = [1] * x.ndim

    def per_channel(values):
        return None if values is None else tensor_of(values, [1, values.size, *ones[2:]])

    desc = ops.QuantizedLinearConvolution(
        input=tensor_of(x), input_scale=tensor_of(xs, ones), input_zero_point=tensor_of(xz, ones),
        filter=tensor_of(w), filter_scale=per_channel(ws), filter_zero_point=per_channel(wz),
        bias=per_channel(bias), output_scale=tensor_of(ys, ones), output_zero_point=tensor_of(yz, ones),
        output=TensorDesc(DataType.from_dtype(out_type), output_sizes(x.shape, w.shape, attrs)), **attrs,
    )  # fmt: skip
    return desc


def convolution(x, xs, xz, w, ws, wz, bias, ys, yz, out_type: str, device: Device | None = None, **given):
    """dmlq's compiled operator on packed buffers; per-channel parameters as vectors of M values."""
    desc = convolution_desc(x, xs, xz, w, ws, wz, bias, ys, yz, out_type, **given)
    return execute(desc, [x, xs, xz, w, ws, wz, bias, ys, yz], device)[0]


def exact(sums, bias, xs, ws, ys, yz, out_type: str) -> np.ndarray:
    """``clamp(round((sum + B[m]) * XS * WS[m] / YS) + YZP)`` in rationals, halves to even."""
    info = np.iinfo(out_type)
    channels = sums.shape[1]
    b = np.broadcast_to(0 if bias is None else bias, (channels,))
    w_scale = np.broadcast_to(ws, (channels,))
    z = 0 if yz is None else int(yz.item())
    out = np.empty(sums.shape, out_type)
    for index in np.ndindex(*sums.shape):
        m = index[1]
        value = (
            Fraction(int(sums[index]) + int(b[m])) * Fraction(float(xs.item())) * Fraction(float(w_scale[m]))
        )
        out[index] = min(max(round(value / Fraction(float(ys.item()))) + z, info.min), info.max)
    return out


def quantization(rng, sums, x_type: str, w_type: str, out_type: str, per_channel: bool, powers_of_two: bool):
    """Scales, zero points and a bias that keep most outputs inside the output type."""
    channels = sums.shape[1]
    count = channels if per_channel else 1
    if powers_of_two:
        xs, ws = np.float32([2.0**-3]), np.exp2(rng.integers(-6, -1, count)).astype(np.float32)
    else:
        xs, ws = np.float32([0.0173]), rng.uniform(0.002, 0.03, count).astype(np.float32)
    bias = rng.integers(-3000, 3000, channels).astype(np.int32)
    real = (
        (sums + bias.reshape(1, -1, *([1] * (sums.ndim - 2))))
        * float(xs[0])
        * np.reshape(ws.astype(np.float64), (1, -1, *([1] * (sums.ndim - 2))))
    )
    spread = real.std() / 40 + 1e-3
    ys = np.float32([2.0 ** round(math.log2(spread))]) if powers_of_two else np.float32([spread])
    info = np.iinfo(out_type)
    centre = np.clip(round((info.min + info.max) / 2 - real.mean() / float(ys[0])), info.min, info.max)
    if powers_of_two:  # ONNX's reference and onnxruntime round after adding YZP: an even one keeps ties alike
        centre = centre // 2 * 2
    return xs, ws, bias, ys, np.array([centre], out_type)


def operands(rng, geometry, x_type, w_type, out_type, per_channel, powers_of_two=False, for_ort=False):
    """``for_ort``: factors whose products onnxruntime sums exactly (``exact_on_onnxruntime``)."""
    x_sizes, w_sizes, given = GEOMETRIES[geometry]
    x, w = random_bytes(rng, x_type, x_sizes), random_bytes(rng, w_type, w_sizes)
    if for_ort:
        x, w = exact_on_onnxruntime(x, w)
    xz = random_bytes(rng, x_type, (1,))
    wz = random_bytes(rng, w_type, (w_sizes[0],) if per_channel else (1,))
    sums = convolution_sums(x, xz, w, wz, **given)
    xs, ws, bias, ys, yz = quantization(rng, sums, x_type, w_type, out_type, per_channel, powers_of_two)
    return (x, xs, xz, w, ws, wz, bias, ys, yz), sums, given


def onnx_model(x, xs, xz, w, ws, wz, bias, ys, yz, given):
    inputs = [("x", x), ("x_scale", xs), ("x_zero_point", xz), ("w", w), ("w_scale", ws),
              ("w_zero_point", wz), ("y_scale", ys), ("y_zero_point", yz), ("B", bias)]  # fmt: skip
    y = ("y", UINT8 if yz.dtype == np.uint8 else INT8)
    return node_model(
        "QLinearConv", inputs, [y], opset=10, **onnx_convolution_attributes(x.ndim, given)
    ), inputs


@pytest.mark.parametrize("geometry", GEOMETRIES)
@pytest.mark.parametrize("x_type, w_type", TYPES)
@pytest.mark.parametrize("per_channel", [False, True], ids=["per-tensor", "per-channel"])
def test_equals_onnx_reference_bit_for_bit(geometry, x_type, w_type, per_channel, rng):
    out_type = w_type  # the output's type is free; cover both against each input
    args, _, given = operands(rng, geometry, x_type, w_type, out_type, per_channel, powers_of_two=True)
    x, xs, xz, w, ws, wz, bias, ys, yz = args
    got = convolution(*args, out_type, **given)
    if x.ndim == 3:  # ONNX's reference expands per-channel scales for 2-D only: give it {N, C, 1, W}
        x, w = x[:, :, None], w[:, :, None]
    xs, xz, ys, yz = (a.reshape(()) for a in (xs, xz, ys, yz))
    model, inputs = onnx_model(x, xs, xz, w, ws, wz, bias, ys, yz, given)
    [want] = onnx_reference(model, inputs)
    assert got.dtype == want.dtype and np.array_equal(got.reshape(want.shape), want)


@pytest.mark.parametrize("geometry", GEOMETRIES)
@pytest.mark.parametrize("x_type, w_type", [("uint8", "uint8"), ("uint8", "int8"), ("int8", "int8")])
@pytest.mark.parametrize("per_channel", [False, True], ids=["per-tensor-scale", "per-channel-scale"])
def test_equals_onnxruntime_cpu_bit_for_bit(geometry, x_type, w_type, per_channel, rng):
    args, _, given = operands(
        rng, geometry, x_type, w_type, x_type, per_channel, powers_of_two=True, for_ort=True
    )
    x, xs, xz, w, ws, wz, bias, ys, yz = args
    wz = wz[:1]  # onnxruntime CPU: one filter zero point
    got = convolution(x, xs, xz, w, ws, wz, bias, ys, yz, x_type, **given)
    one = [a.reshape(()) for a in (xs, xz, wz, ys, yz)]
    model, inputs = onnx_model(x, one[0], one[1], w, ws, one[2], bias, one[3], one[4], given)
    [want] = onnxruntime_cpu(model, inputs)
    assert np.array_equal(got, want)


@pytest.mark.parametrize("geometry", ["3x3", "strided-dilated", "depthwise", "odd", "1-d"])
@pytest.mark.parametrize("x_type, w_type", TYPES)
@pytest.mark.parametrize("out_type", ["uint8", "int8"])
def test_equals_exact_rational_requantization(geometry, x_type, w_type, out_type, rng):
    args, sums, given = operands(rng, geometry, x_type, w_type, out_type, per_channel=True)
    got = convolution(*args, out_type, **given)
    x, xs, xz, w, ws, wz, bias, ys, yz = args
    want = exact(sums, bias, xs, ws, ys, yz, out_type)
    assert np.array_equal(got, want)
    info = np.iinfo(out_type)
    assert np.mean((want > info.min) & (want < info.max)) > 0.5  # real values, not a saturated block


@pytest.mark.parametrize("geometry", GEOMETRIES)
def test_an_owned_filter_is_packed_once_and_gives_the_same_bits(geometry, level, rng):
    """An OWNED_BY_DML filter (the ONNX front end's constant filters) is kept packed (PackedFilter), at
    every CPU level, and the operator computes exactly what it computes from the filter given per call."""
    args, _, given = operands(rng, geometry, "uint8", "int8", "uint8", per_channel=True)
    desc = convolution_desc(*args, "uint8", **given)
    [got], operator = execute_owned(desc, args, "filter")
    assert isinstance(operator._owned["filter"], PackedFilter)
    assert np.array_equal(got, execute(desc, args)[0])


def test_ties_round_half_to_even_and_reciprocal_division_differs_at_near_ties():
    x = np.uint8([[[[1, 3, 5, 7, 9, 11]]]])
    w = np.uint8([[[[1]]]])
    one, zero = np.float32([1]), np.uint8([0])
    got = convolution(x, one, zero, w, one, zero, None, np.float32([2]), zero, "uint8")
    assert got.ravel().tolist() == [0, 2, 2, 4, 4, 6]  # 0.5, 1.5, ... to even
    # 5 / 0.039215686 is 127.49999 in float64 and float32, but 5 * float32(1 / s) is 127.5
    s = np.float32(10 / 255)
    five = np.uint8([[[[5]]]])
    divided = convolution(five, one, zero, w, one, zero, None, np.float32([s]), zero, "uint8")
    reciprocal = convolution(five, one, zero, w, one, zero, None, np.float32([s]), zero, "uint8",
                             Device(reciprocal_division=True))  # fmt: skip
    assert (divided.item(), reciprocal.item()) == (127, 128)


def test_large_windows_accumulate_exactly_and_saturate():
    # 4096 channels * 9 taps of 255 * 255 = 2.4e9: past int32, exact here
    x = np.full((1, 4096, 3, 3), 255, np.uint8)
    w = np.full((2, 4096, 3, 3), 255, np.uint8)
    w[1] = 0
    one, zero = np.float32([1]), np.uint8([0])
    ys = np.float32([2.0**24])
    got = convolution(x, one, zero, w, one, zero, np.int32([0, 2**31 - 1]), ys, zero, "uint8")
    assert got.ravel().tolist() == [round(4096 * 9 * 65025 / 2**24), round((2**31 - 1) / 2**24)]
    low = convolution(x, one, zero, w, np.float32([-1]), zero, None, one, np.int8([0]), "int8")
    assert low.ravel().tolist() == [-128, 0]


def test_onnx_reference_wraps_at_32_bits_where_dmlq_is_exact():
    x = np.full((1, 4096, 3, 3), 255, np.uint8)  # 36,864 taps of 255 * 255: 2.4e9, past 2^31
    w = np.full((1, 4096, 3, 3), 255, np.uint8)
    one, zero, ys = np.float32([1]), np.uint8([0]), np.float32([2.0**24])
    got = convolution(x, one, zero, w, one, zero, None, ys, zero, "uint8")
    assert got.item() == round(4096 * 9 * 65025 / 2**24) == 143
    scalars = [np.array(v.item(), v.dtype) for v in (one, zero, one, zero, ys, zero)]
    model, inputs = onnx_model(
        x, scalars[0], scalars[1], w, scalars[2], scalars[3], None, scalars[4], scalars[5], {}
    )
    assert onnx_reference(model, inputs)[0].item() == 0  # its int32 sum wrapped negative, then clamped


def test_strided_input_and_broadcast_per_channel_parameters_through_the_device(rng):
    x = random_bytes(rng, "uint8", (2, 3, 6, 5))
    w = random_bytes(rng, "int8", (4, 3, 3, 3))
    ws = np.float32([0.01, 0.02, 0.03, 0.04])
    bias = np.int32([100, -200, 300, -400])
    memory = np.ascontiguousarray(x.transpose(0, 2, 3, 1))  # NHWC in memory
    desc = ops.QuantizedLinearConvolution(
        input=TensorDesc(U8, [2, 3, 6, 5], strides=[90, 1, 15, 3]),
        input_scale=TensorDesc(F32, [1, 1, 1, 1]), input_zero_point=TensorDesc(U8, [1, 1, 1, 1]),
        filter=tensor_of(w), filter_scale=TensorDesc(F32, [1, 4, 1, 1]),
        filter_zero_point=TensorDesc(I8, [1, 4, 1, 1], strides=[0, 0, 0, 0]),
        bias=TensorDesc(I32, [1, 4, 1, 1]), output_scale=TensorDesc(F32, [1, 1, 1, 1]),
        output=TensorDesc(U8, [2, 4, 4, 3]), start_padding=(0, 0), end_padding=(0, 0),
    )  # fmt: skip
    out = np.zeros((2, 4, 4, 3), np.uint8)
    xs, xz, ys = np.float32([0.05]), np.uint8([120]), np.float32([0.3])
    Device().compile_operator(desc).execute([memory, xs, xz, w, ws, np.int8([-3]), bias, ys, None], [out])
    sums = convolution_sums(x, xz, w, np.int8([-3]))
    assert np.array_equal(out, exact(sums, bias, xs, ws, ys, None, "uint8"))


# -- validation ----------------------------------------------------------------------------------------


def desc(**changes) -> ops.QuantizedLinearConvolution:
    one = TensorDesc(F32, [1, 1, 1, 1])
    fields = dict(
        input=TensorDesc(U8, [1, 4, 6, 6]),
        input_scale=one,
        input_zero_point=TensorDesc(U8, [1, 1, 1, 1]),
        filter=TensorDesc(I8, [6, 4, 3, 3]),
        filter_scale=TensorDesc(F32, [1, 6, 1, 1]),
        filter_zero_point=TensorDesc(I8, [1, 1, 1, 1]),
        bias=TensorDesc(I32, [1, 6, 1, 1]),
        output_scale=one,
        output_zero_point=TensorDesc(I8, [1, 1, 1, 1]),
        output=TensorDesc(I8, [1, 6, 4, 4]),
    )
    return ops.QuantizedLinearConvolution(**(fields | changes))


def refused(description, message: str, level: str = "6_4") -> None:
    with pytest.raises(DmlError) as error:
        Device(level).compile_operator(description)
    assert str(error.value) == f"QuantizedLinearConvolution{message} (device is {level})"


def test_levels_of_the_three_tables():
    assert desc().minimum_feature_level().label == "2_1"
    refused(desc(), ": operator needs feature level 2_1", "2_0")
    scalar_parameters = desc(input_scale=TensorDesc(F32, [1]), input_zero_point=TensorDesc(U8, [1]),
                             filter_zero_point=TensorDesc(I8, [1]), output_scale=TensorDesc(F32, [1]),
                             output_zero_point=TensorDesc(I8, [1]))  # fmt: skip
    assert scalar_parameters.minimum_feature_level().label == "4_0"
    refused(scalar_parameters, ".input_scale: dimension count 1 needs feature level 4_0", "3_1")
    vector_scale = desc(filter_scale=TensorDesc(F32, [6]))
    assert vector_scale.minimum_feature_level().label == "5_2"
    refused(vector_scale, ".filter_scale: dimension count 1 needs feature level 5_2", "5_1")
    three_d = desc(input=TensorDesc(U8, [1, 4, 6]), filter=TensorDesc(I8, [6, 4, 3]),
                   output=TensorDesc(I8, [1, 6, 4]), bias=TensorDesc(I32, [1, 6, 1]),
                   filter_scale=TensorDesc(F32, [1, 6, 1]))  # fmt: skip
    assert three_d.minimum_feature_level().label == "4_0"


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"input_scale": TensorDesc(F32, [1, 4, 1, 1])},
         ".input_scale: sizes [1, 4, 1, 1] must be per-tensor (every size 1)"),
        ({"output_zero_point": TensorDesc(I8, [1, 6, 1, 1])},
         ".output_zero_point: sizes [1, 6, 1, 1] must be per-tensor (every size 1)"),
        ({"filter_scale": TensorDesc(F32, [1, 1, 6, 1])},
         ".filter_scale: sizes [1, 1, 6, 1] must be per-tensor (every size 1) or per-channel "
         "({1, C, 1, 1}, C = 6)"),
        ({"bias": TensorDesc(I32, [1, 1, 1, 1])},
         ".bias: sizes [1, 1, 1, 1] must be {1, M, 1, 1} (M = 6 values on dimension 1)"),
        ({"bias": TensorDesc(I32, [6])}, ".bias: dimension count 1 is not supported (supported: 3 to 4)"),
        ({"bias": TensorDesc(DataType.FLOAT32, [1, 6, 1, 1])},
         ".bias: data type FLOAT32 is not supported (supported: INT32)"),
        ({"output_zero_point": TensorDesc(U8, [1, 1, 1, 1])},
         ".output_zero_point: data type UINT8 differs from output's INT8"),
        ({"filter_zero_point": TensorDesc(U8, [1, 1, 1, 1])},
         ".filter_zero_point: data type UINT8 differs from filter's INT8"),
        ({"input_scale": None}, ".input_scale: tensor is required"),
        ({"input_scale": TensorDesc(DataType.FLOAT16, [1, 1, 1, 1])},
         ".input_scale: data type FLOAT16 is not supported (supported: FLOAT32)"),
        ({"dimension_count": 1, "strides": (1,), "dilations": (1,), "start_padding": (0,),
          "end_padding": (0,)},
         ".dimension_count: 1 is not supported (the page: only a value of 2 is supported)"),
        ({"output": TensorDesc(I8, [1, 6, 4, 5])},
         ".output: sizes [1, 6, 4, 5] must be [1, 6, 4, 4] ({N, M, *out} from the window and attributes)"),
        ({"group_count": 2}, ".filter: sizes [6, 4, 3, 3]: 4 channels per group times group_count 2 must be "
                             "the input's 4 channels"),
    ],
)  # fmt: skip
def test_refusals_name_field_and_rule(changes, message):
    refused(desc(**changes), message)


def test_optional_tensors_and_mixed_types():
    Device("2_1").compile_operator(desc(input_zero_point=None, filter_zero_point=None, bias=None,
                                        output_zero_point=None))  # fmt: skip
    for x, w, y in ((I8, U8, U8), (U8, U8, I8), (I8, I8, U8)):
        tensors = {"input": TensorDesc(x, [1, 4, 6, 6]), "filter": TensorDesc(w, [6, 4, 3, 3]),
                   "output": TensorDesc(y, [1, 6, 4, 4])}  # fmt: skip
        mixed = desc(input_zero_point=None, filter_zero_point=None, output_zero_point=None, **tensors)
        Device("2_1").compile_operator(mixed)
