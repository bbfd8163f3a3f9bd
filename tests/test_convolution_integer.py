"""CONVOLUTION_INTEGER: the reference and the compiled operator against ONNX's reference, onnxruntime
CPU and a loop written here with Python ints; its validation rules."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import exact_on_onnxruntime
from dmlq import DataType, Device, DmlError, TensorDesc, ops, reference
from dmlq.packed import PackedFilter
from family import (
    GEOMETRIES,
    INT32,
    TYPES,
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


def convolution_desc(x, x_zero_point, w, w_zero_point, **given) -> ops.ConvolutionInteger:
    """The description of packed buffers (zero points: scalars or per-channel vectors)."""
    attrs = attributes(given)
    ones = [1] * x.ndim
    filter_zero_point_sizes = None if w_zero_point is None else [1, w_zero_point.size, *ones[2:]]
    return ops.ConvolutionInteger(
        input=tensor_of(x), input_zero_point=tensor_of(x_zero_point, ones), filter=tensor_of(w),
        filter_zero_point=tensor_of(w_zero_point, filter_zero_point_sizes),
        output=TensorDesc(DataType.INT32, output_sizes(x.shape, w.shape, attrs)), **attrs,
    )  # fmt: skip


def convolution(x, x_zero_point, w, w_zero_point, **given) -> np.ndarray:
    """dmlq's compiled operator on packed buffers (zero points: scalars or per-channel vectors)."""
    desc = convolution_desc(x, x_zero_point, w, w_zero_point, **given)
    return execute(desc, [x, x_zero_point, w, w_zero_point])[0]


def onnx_model(x, x_zero_point, w, w_zero_point, given: dict):
    """ONNX ConvInteger with the same geometry."""
    inputs = [("x", x), ("w", w), ("x_zero_point", x_zero_point), ("w_zero_point", w_zero_point)]
    return node_model(
        "ConvInteger", inputs, [("y", INT32)], opset=10, **onnx_convolution_attributes(x.ndim, given)
    )


def loops(x, x_zero_point, w, w_zero_point, **given) -> np.ndarray:
    """The page's sum with Python ints, wrapped to 32 bits."""
    sums = convolution_sums(x, x_zero_point, w, w_zero_point, **given)
    return ((sums + 2**31) % 2**32 - 2**31).astype(np.int32)


def operands(rng, geometry: str, x_type: str, w_type: str, zero_points: str):
    x_sizes, w_sizes, given = GEOMETRIES[geometry]
    x, w = random_bytes(rng, x_type, x_sizes), random_bytes(rng, w_type, w_sizes)
    if zero_points == "none":
        return x, None, w, None, given
    w_zero_point = random_bytes(rng, w_type, (w_sizes[0],) if zero_points == "per-channel" else (1,))
    return x, random_bytes(rng, x_type, (1,)), w, w_zero_point, given


@pytest.mark.parametrize("geometry", GEOMETRIES)
@pytest.mark.parametrize("x_type, w_type", TYPES)
@pytest.mark.parametrize("zero_points", ["none", "per-tensor", "per-channel"])
def test_equals_onnx_reference_bit_for_bit(geometry, x_type, w_type, zero_points, rng):
    x, xz, w, wz, given = operands(rng, geometry, x_type, w_type, zero_points)
    got = convolution(x, xz, w, wz, **given)
    if geometry == "1-d" and zero_points == "per-channel":
        assert np.array_equal(got, loops(x, xz, w, wz, **given))  # ONNX's reference expands it for 2-D only
        return
    scalar = (
        (lambda v: v) if zero_points == "per-channel" else (lambda v: None if v is None else v.reshape(()))
    )
    inputs = [("x", x), ("w", w), ("x_zero_point", scalar(xz)), ("w_zero_point", scalar(wz))]
    [want] = onnx_reference(onnx_model(x, xz, w, wz, given), inputs)
    assert got.dtype == want.dtype == np.int32 and np.array_equal(got, want)


@pytest.mark.parametrize("geometry", GEOMETRIES)
@pytest.mark.parametrize("x_type, w_type", TYPES)
def test_equals_onnxruntime_cpu_bit_for_bit(geometry, x_type, w_type, rng):
    x, xz, w, wz, given = operands(rng, geometry, x_type, w_type, "per-tensor")  # ORT: per-tensor only
    (x, w), (xz, _) = exact_on_onnxruntime(x, w), exact_on_onnxruntime(xz, w)  # xz: the padding's value
    inputs = [("x", x), ("w", w), ("x_zero_point", xz.reshape(())), ("w_zero_point", wz.reshape(()))]
    [want] = onnxruntime_cpu(onnx_model(x, xz.reshape(()), w, wz.reshape(()), given), inputs)
    assert np.array_equal(convolution(x, xz, w, wz, **given), want)


@pytest.mark.parametrize("geometry", ["padded-every-side", "strided-dilated", "groups", "1-d"])
def test_equals_python_int_loops(geometry, rng):
    x, xz, w, wz, given = operands(rng, geometry, "uint8", "int8", "per-channel")
    assert np.array_equal(convolution(x, xz, w, wz, **given), loops(x, xz, w, wz, **given))
    x4, w4 = (x, w) if x.ndim == 4 else (x[:, :, None], w[:, :, None])  # the reference takes H explicitly
    direct = reference.convolution_integer(x4, xz, w4, wz, **attributes(given))
    assert np.array_equal(direct.reshape(-1), loops(x, xz, w, wz, **given).reshape(-1))


@pytest.mark.parametrize("geometry", GEOMETRIES)
@pytest.mark.parametrize("zero_points", ["none", "per-tensor", "per-channel"])
def test_an_owned_filter_is_packed_once_and_gives_the_same_bits(geometry, zero_points, level, rng):
    """An OWNED_BY_DML filter is kept packed (PackedFilter), at every CPU level, with the same bits."""
    x, xz, w, wz, given = operands(rng, geometry, "uint8", "int8", zero_points)
    desc = convolution_desc(x, xz, w, wz, **given)
    [got], operator = execute_owned(desc, [x, xz, w, wz], "filter")
    assert isinstance(operator._owned["filter"], PackedFilter)
    assert np.array_equal(got, loops(x, xz, w, wz, **given))


def test_extreme_sums_wrap_in_32_bits_like_onnx():
    # 4096 channels * 3 * 3 taps of 255 * 255: 2.4e9, past 2^31; with -(255 * 255) products too
    x = np.full((1, 4096, 3, 3), 255, np.uint8)
    w = np.full((2, 4096, 3, 3), 255, np.uint8)
    w[1, ::2] = 0
    got = convolution(x, np.uint8([0]), w, np.uint8([0]))
    taps = 4096 * 9
    expected = [taps * 65025, taps // 2 * 65025]
    assert got.ravel().tolist() == [(v + 2**31) % 2**32 - 2**31 for v in expected]
    assert expected[0] > 2**31
    zero = np.array(0, np.uint8)
    inputs = [("x", x), ("w", w), ("x_zero_point", zero), ("w_zero_point", zero)]
    model = onnx_model(x, zero, w, zero, {})
    assert np.array_equal(got, onnx_reference(model, inputs)[0])
    assert np.array_equal(got, onnxruntime_cpu(model, inputs)[0])


def test_zero_points_reach_both_ends():
    x = np.uint8([[[[0, 255], [255, 0]]]])
    w = np.int8([[[[-128, 127], [127, -128]]]])
    got = convolution(x, np.uint8([255]), w, np.int8([127]))
    assert got.item() == (0 - 255) * (-128 - 127) * 2 + 0  # (255 - 255) terms vanish


@pytest.mark.parametrize("ndim", [3, 4])
def test_padding_reads_the_zero_point(ndim):
    x = np.full((1, 1) + (3,) * (ndim - 2), 9, np.uint8)
    w = np.ones((1, 1) + (3,) * (ndim - 2), np.uint8)
    pads = {"start_padding": (0, 1) if ndim == 3 else (1, 1), "end_padding": (0, 1) if ndim == 3 else (1, 1)}
    got = convolution(x, np.uint8([9]), w, None, **pads)
    assert not got.any()  # padding contributes (9 - 9) * 1, like every element


def test_strided_views_and_broadcast_zero_points_through_the_device():
    rng = np.random.default_rng(5)
    x_logical = random_bytes(rng, "uint8", (1, 2, 5, 6))
    w = random_bytes(rng, "int8", (3, 2, 2, 2))
    # the input in NHWC memory, the filter zero point broadcast through zero strides
    memory = np.ascontiguousarray(x_logical.transpose(0, 2, 3, 1))
    input_desc = TensorDesc(DataType.UINT8, [1, 2, 5, 6], strides=[60, 1, 12, 2])
    desc = ops.ConvolutionInteger(
        input=input_desc, input_zero_point=TensorDesc(DataType.UINT8, [1, 1, 1, 1]),
        filter=tensor_of(w), filter_zero_point=TensorDesc(DataType.INT8, [1, 3, 1, 1], strides=[0, 0, 0, 0]),
        output=TensorDesc(DataType.INT32, [1, 3, 4, 5]),
    )  # fmt: skip
    out = np.zeros((1, 3, 4, 5), np.int32)
    Device().compile_operator(desc).execute([memory.ravel(), np.uint8([100]), w, np.int8([7])], [out])
    assert np.array_equal(out, loops(x_logical, np.uint8(100), w, np.int8(7)))


# -- validation ----------------------------------------------------------------------------------------

U8, I8, I32 = DataType.UINT8, DataType.INT8, DataType.INT32


def desc(**changes) -> ops.ConvolutionInteger:
    fields = dict(input=TensorDesc(U8, [1, 4, 6, 6]), input_zero_point=TensorDesc(U8, [1, 1, 1, 1]),
                  filter=TensorDesc(I8, [6, 2, 3, 3]), filter_zero_point=TensorDesc(I8, [1, 6, 1, 1]),
                  output=TensorDesc(I32, [1, 6, 3, 3]), strides=(2, 2), start_padding=(1, 1),
                  end_padding=(0, 0), group_count=2)  # fmt: skip
    return ops.ConvolutionInteger(**(fields | changes))


def refused(description, message: str, level: str = "6_4") -> None:
    with pytest.raises(DmlError) as error:
        Device(level).compile_operator(description)
    assert str(error.value) == f"ConvolutionInteger{message} (device is {level})"


def test_valid_and_its_lowest_level():
    assert desc().minimum_feature_level().label == "2_1"
    three_d = desc(input=TensorDesc(U8, [1, 4, 6]), filter=TensorDesc(I8, [6, 2, 3]),
                   output=TensorDesc(I32, [1, 6, 3]), start_padding=(0, 1))  # fmt: skip
    assert three_d.minimum_feature_level().label == "4_0"
    refused(three_d, ".input: dimension count 3 needs feature level 4_0", "3_1")
    one_d_zero_points = desc(input_zero_point=TensorDesc(U8, [1]), filter_zero_point=TensorDesc(I8, [6]))
    assert one_d_zero_points.minimum_feature_level().label == "4_0"


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"dimension_count": 3, "strides": (1, 1, 1)},
         ".dimension_count: 3 is not supported (the page: only a value of 2 is supported)"),
        ({"dimension_count": "2"}, ".dimension_count: '2' must be an integer from 1 to 2^32 - 1"),
        ({"strides": (2,)}, ".strides: [2] holds 1 values; dimension_count is 2"),
        ({"strides": (2, 0)}, ".strides[1]: 0 must be an integer from 1 to 2^32 - 1"),
        ({"dilations": 2}, ".dilations: must be a sequence of 2 integers, not 2"),
        ({"start_padding": (1, -1)}, ".start_padding[1]: -1 must be an integer from 0 to 2^32 - 1"),
        ({"group_count": 0}, ".group_count: 0 must be an integer from 1 to 2^32 - 1"),
        ({"group_count": 3}, ".group_count: 3 must divide the input's 4 channels and the filter's 6 (M)"),
        ({"group_count": 1},
         ".filter: sizes [6, 2, 3, 3]: 2 channels per group times group_count 1 must be the input's 4 "
         "channels"),
        ({"output": TensorDesc(I32, [1, 6, 3, 4])},
         ".output: sizes [1, 6, 3, 4] must be [1, 6, 3, 3] ({N, M, *out} from the window and attributes)"),
        ({"filter": TensorDesc(I8, [6, 2, 8, 3])},
         ".filter: the window's extent 8 along spatial dimension 0 exceeds the padded input's 7"),
        ({"input_zero_point": TensorDesc(U8, [1, 4, 1, 1])},
         ".input_zero_point: sizes [1, 4, 1, 1] must be per-tensor (every size 1)"),
        ({"filter_zero_point": TensorDesc(I8, [1, 1, 1, 6])},
         ".filter_zero_point: sizes [1, 1, 1, 6] must be per-tensor (every size 1) or per-channel "
         "({1, C, 1, 1}, C = 6)"),
        ({"filter_zero_point": TensorDesc(U8, [1, 6, 1, 1])},
         ".filter_zero_point: data type UINT8 differs from filter's INT8"),
        ({"input_zero_point": TensorDesc(I8, [1, 1, 1, 1])},
         ".input_zero_point: data type INT8 differs from input's UINT8"),
        ({"filter_zero_point": TensorDesc(I8, [6])},
         ".input_zero_point: dimension count 4 differs from filter_zero_point's 1"),
        ({"output": TensorDesc(DataType.INT16, [1, 6, 3, 3])},
         ".output: data type INT16 is not supported (supported: INT32)"),
        ({"input": TensorDesc(DataType.INT16, [1, 4, 6, 6])},
         ".input: data type INT16 is not supported (supported: INT8, UINT8)"),
        ({"input": TensorDesc(U8, [1, 1, 4, 6, 6])},
         ".input: dimension count 5 is not supported (supported: 3 to 4)"),
        ({"filter": None}, ".filter: tensor is required"),
    ],
)  # fmt: skip
def test_refusals_name_field_and_rule(changes, message):
    refused(desc(**changes), message)


def test_a_3_d_output_cannot_hold_padding_along_h():
    description = desc(input=TensorDesc(U8, [1, 4, 6]), filter=TensorDesc(I8, [6, 2, 3]),
                       output=TensorDesc(I32, [1, 6, 3]), strides=(1, 2), start_padding=(1, 1))  # fmt: skip
    refused(description, ".output: is 3-D, but the padding along H gives 2 rows (a 3-D tensor holds one)")


def test_absent_zero_points_and_one_dimensional_per_channel():
    Device("2_1").compile_operator(desc(input_zero_point=None, filter_zero_point=None))
    for one, channels in (([1], [6]), ([1, 1], [6, 1]), ([1, 1], [1, 6]), ([1, 1, 1], [1, 6, 1])):
        zero_points = desc(input_zero_point=TensorDesc(U8, one), filter_zero_point=TensorDesc(I8, channels))
        Device("4_0").compile_operator(zero_points)
