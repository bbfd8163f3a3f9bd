"""QUANTIZED_LINEAR_AVERAGE_POOLING: the reference and the compiled operator against a formula written
here with Python ints and floats and against onnxruntime CPU's com.microsoft QLinearAveragePool and
QLinearGlobalAveragePool (bit for bit where both are exact, within 1 elsewhere); its validation rules."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from conftest import round_even
from dmlq import DataType, Device, DmlError, TensorDesc, ops
from family import INT8 as ONNX_INT8
from family import UINT8, execute, node_model, onnxruntime_cpu, random_bytes, tensor_of

F32, U8, I8 = DataType.FLOAT32, DataType.UINT8, DataType.INT8

# (input sizes, attributes): padding on every side and with or without it in the divisor, strides,
# dilations, odd sizes, a window wholly in padding, 3-D pooling, a global window
GEOMETRIES = {
    "3x3-padded": ((2, 3, 7, 6), {"window_size": (3, 3), "start_padding": (1, 1), "end_padding": (1, 1)}),
    "2x2-stride-2": ((1, 4, 8, 8), {"window_size": (2, 2), "strides": (2, 2)}),
    "asymmetric": ((1, 2, 9, 11), {"window_size": (3, 2), "strides": (2, 3), "start_padding": (0, 2),
                                   "end_padding": (2, 1)}),
    "dilated": ((1, 2, 9, 9), {"window_size": (3, 3), "dilations": (2, 3), "start_padding": (2, 1),
                               "end_padding": (1, 2)}),
    "all-padding-windows": ((1, 2, 3, 3), {"window_size": (2, 2), "start_padding": (3, 0),
                                           "end_padding": (0, 3)}),
    "3-d": ((1, 2, 5, 4, 6), {"dimension_count": 3, "window_size": (2, 3, 2), "strides": (1, 2, 2),
                              "start_padding": (1, 1, 0), "end_padding": (0, 1, 1), "dilations": (1, 1, 1)}),
    "global": ((2, 5, 7, 7), {"window_size": (7, 7)}),
}  # fmt: skip


def attributes(x_ndim: int, given: dict) -> dict:
    count = x_ndim - 2
    ones, zeros = (1,) * count, (0,) * count
    return {"dimension_count": count, "strides": ones, "start_padding": zeros, "end_padding": zeros,
            "dilations": ones, "include_padding": False} | given  # fmt: skip


def output_sizes(x_sizes, attrs) -> tuple[int, ...]:
    out = [1 + (size + start + end - (1 + (k - 1) * d)) // s for size, start, end, k, s, d in zip(
        x_sizes[2:], attrs["start_padding"], attrs["end_padding"], attrs["window_size"], attrs["strides"],
        attrs["dilations"])]  # fmt: skip
    return (*x_sizes[:2], *out)


def pool(x, xs, xz, ys, yz, out_type, device=None, **given) -> np.ndarray:
    """dmlq's compiled operator; scales and zero points scalars or one per channel, shaped {1, C, 1, ...}."""
    attrs = attributes(x.ndim, given)

    def per_channel(values):
        return None if values is None else tensor_of(values, [1, values.size] + [1] * (x.ndim - 2))

    desc = ops.QuantizedLinearAveragePooling(
        input=tensor_of(x), input_scale=per_channel(xs), input_zero_point=per_channel(xz),
        output_scale=per_channel(ys), output_zero_point=per_channel(yz),
        output=TensorDesc(DataType.from_dtype(out_type), output_sizes(x.shape, attrs)), **attrs,
    )  # fmt: skip
    return execute(desc, [x, xs, xz, ys, yz], device)[0]


def python_formula(x, xs, xz, ys, yz, out_type, **given) -> np.ndarray:
    """Python-int window sums and counts, then ``s * XS / count / YS`` in Python floats (float64)."""
    attrs = attributes(x.ndim, given)
    info = np.iinfo(out_type)
    channels = x.shape[1]
    xs, xz, ys, yz = (np.broadcast_to(0 if v is None else v, (channels,)) for v in (xs, xz, ys, yz))
    out = np.empty(output_sizes(x.shape, attrs), out_type)
    for index in np.ndindex(*out.shape):
        n, c, position = index[0], index[1], index[2:]
        total = count = 0
        for tap in itertools.product(*(range(k) for k in attrs["window_size"])):
            where = [o * s - start + k * d for o, s, start, k, d in zip(
                position, attrs["strides"], attrs["start_padding"], tap, attrs["dilations"])]  # fmt: skip
            if all(0 <= i < size for i, size in zip(where, x.shape[2:])):
                total += int(x[(n, c, *where)]) - int(xz[c])
                count += 1
        if attrs["include_padding"]:
            count = math.prod(attrs["window_size"])
        average = total * float(xs[c]) / count if count else 0.0
        out[index] = min(max(round_even(average / float(ys[c])) + int(yz[c]), info.min), info.max)
    return out


def operands(rng, geometry, x_type, out_type, per_channel: bool, powers_of_two=False):
    x_sizes, given = GEOMETRIES[geometry]
    x = random_bytes(rng, x_type, x_sizes)
    channels = (x_sizes[1],) if per_channel else (1,)
    if powers_of_two:
        xs, ys = np.exp2(rng.integers(-4, 0, channels)).astype(np.float32), np.float32([0.25])
    else:
        xs, ys = rng.uniform(0.01, 0.1, channels).astype(np.float32), rng.uniform(0.01, 0.1, channels)
        ys = ys.astype(np.float32)
    xz, yz = random_bytes(rng, x_type, channels), random_bytes(rng, out_type, channels)
    return (x, xs, xz, ys.reshape(-1) if per_channel else ys, yz), given


@pytest.mark.parametrize("geometry", GEOMETRIES)
@pytest.mark.parametrize("x_type, out_type", list(itertools.product(("uint8", "int8"), ("uint8", "int8"))))
@pytest.mark.parametrize("include_padding", [False, True])
def test_equals_the_python_formula(geometry, x_type, out_type, include_padding, rng):
    args, given = operands(rng, geometry, x_type, out_type, per_channel=True)
    given = given | {"include_padding": include_padding}
    assert np.array_equal(pool(*args, out_type, **given), python_formula(*args, out_type, **given))


def test_a_window_wholly_in_padding_gives_the_output_zero_point():
    x = np.full((1, 1, 2, 2), 200, np.uint8)
    one = np.float32([1])
    got = pool(x, one, np.uint8([0]), one, np.uint8([7]), "uint8", window_size=(1, 1), start_padding=(1, 0))
    assert got[0, 0].tolist() == [[7, 7], [207, 207], [207, 207]]
    with_padding = pool(x, one, np.uint8([0]), one, np.uint8([7]), "uint8", window_size=(2, 1),
                        start_padding=(3, 0), include_padding=True)  # fmt: skip
    assert with_padding[0, 0].tolist() == [[7, 7], [7, 7], [107, 107], [207, 207]]


def test_ties_round_half_to_even_and_the_reciprocal_division():
    x = np.uint8([[[[1, 2, 3, 4, 5, 6, 7, 8]]]])
    one, zero = np.float32([1]), np.uint8([0])
    got = pool(x, one, zero, one, zero, "uint8", window_size=(1, 2), strides=(1, 2))
    assert got.ravel().tolist() == [2, 4, 6, 8]  # 1.5, 3.5, 5.5, 7.5
    s = np.float32(10 / 255)
    five = np.uint8([[[[5]]]])
    divided = pool(five, one, zero, np.float32([s]), zero, "uint8", window_size=(1, 1))
    reciprocal = pool(five, one, zero, np.float32([s]), zero, "uint8", Device(reciprocal_division=True),
                      window_size=(1, 1))  # fmt: skip
    assert (divided.item(), reciprocal.item()) == (127, 128)


def ort_pool(x, xs, xz, ys, yz, attrs, global_pool: bool) -> np.ndarray:
    inputs = [("X", x), ("x_scale", xs), ("x_zero_point", xz), ("y_scale", ys), ("y_zero_point", yz)]
    y = ("Y", UINT8 if yz.dtype == np.uint8 else ONNX_INT8)
    if global_pool:
        model = node_model("QLinearGlobalAveragePool", inputs, [y], domain="com.microsoft")
    else:
        count = len(attrs["window_size"])
        model = node_model("QLinearAveragePool", inputs, [y], domain="com.microsoft",
                           kernel_shape=list(attrs["window_size"]), strides=list(attrs["strides"]),
                           pads=list(attrs["start_padding"][:count] + attrs["end_padding"][:count]),
                           count_include_pad=int(attrs["include_padding"]))  # fmt: skip
    return onnxruntime_cpu(model, inputs)[0]


EXACT_IN_FLOAT32 = {  # every divisor a power of two
    "2x2-stride-2": ((1, 3, 8, 6), {"window_size": (2, 2), "strides": (2, 2)}),
    "2x2-padded": ((2, 2, 5, 7), {"window_size": (2, 2), "start_padding": (1, 1), "end_padding": (1, 1)}),
    "4x4-include-padding": ((1, 2, 9, 9), {"window_size": (4, 4), "strides": (2, 2), "start_padding": (1, 2),
                                           "end_padding": (2, 1), "include_padding": True}),
    "3-d-2x2x2": ((1, 2, 4, 5, 6), {"dimension_count": 3, "window_size": (2, 2, 2), "strides": (2, 1, 2)}),
}  # fmt: skip


@pytest.mark.parametrize("geometry", EXACT_IN_FLOAT32)
@pytest.mark.parametrize("dtype", ["uint8", "int8"])
def test_equals_onnxruntime_cpu_bit_for_bit_where_exact(geometry, dtype, rng):
    x_sizes, given = EXACT_IN_FLOAT32[geometry]
    x = random_bytes(rng, dtype, x_sizes)
    xs, ys = np.array(0.5, np.float32), np.array(0.25, np.float32)
    # an even output zero point: onnxruntime rounds avg / YS + YZP, the page round(avg / YS) + YZP, and the
    # two differ at exact ties when YZP is odd (test_the_zero_point_is_added_after_rounding)
    xz, yz = random_bytes(rng, dtype, ()), np.array(random_bytes(rng, dtype, ()) // 2 * 2, dtype)
    got = pool(x, xs.reshape(1), xz.reshape(1), ys.reshape(1), yz.reshape(1), dtype, **given)
    want = ort_pool(x, xs, xz, ys, yz, attributes(x.ndim, given), global_pool=False)
    assert np.array_equal(got, want)


def test_the_zero_point_is_added_after_rounding(rng):
    x = np.uint8([[[[1, 2]]]])  # average 1.5, a tie
    one, zero = np.float32([1]), np.uint8([0])
    assert pool(x, one, zero, one, np.uint8([45]), "uint8", window_size=(1, 2)) == 47
    # onnxruntime's general path rounds avg / YS + YZP: with an odd YZP its ties go the other way
    x = random_bytes(rng, "uint8", (1, 2, 9, 9))
    scales, zero_points = np.array(0.5, np.float32), (np.array(0, np.uint8), np.array(47, np.uint8))
    attrs = attributes(4, {"window_size": (4, 4), "include_padding": True, "start_padding": (1, 1)})
    got = pool(x, scales.reshape(1), zero_points[0].reshape(1), scales.reshape(1), zero_points[1].reshape(1),
               "uint8", **attrs)  # fmt: skip
    want = ort_pool(x, scales, zero_points[0], scales, zero_points[1], attrs, global_pool=False)
    average = python_formula(x, scales, zero_points[0], scales, np.uint8(0), "uint8", **attrs).astype(int)
    ties = (got.astype(int) != want) & (np.abs(got.astype(int) - want) == 1)
    assert ties.any() and (got == want)[~ties].all()
    assert (average[ties] % 2 == 0).all()  # ours: round(avg / YS) to even, then + 47


@pytest.mark.parametrize("geometry", ["3x3-padded", "3-d", "global"])  # onnxruntime: pads below the window
@pytest.mark.parametrize("include_padding", [False, True])
def test_within_1_of_onnxruntime_cpu_on_any_scales(geometry, include_padding, rng):
    x_sizes, given = GEOMETRIES[geometry]
    given = given | {"include_padding": include_padding}
    x = random_bytes(rng, "uint8", x_sizes)
    xs, ys = np.array(0.037, np.float32), np.array(0.011, np.float32)
    xz, yz = np.array(120, np.uint8), np.array(130, np.uint8)
    got = pool(x, xs.reshape(1), xz.reshape(1), ys.reshape(1), yz.reshape(1), "uint8", **given)
    want = ort_pool(x, xs, xz, ys, yz, attributes(x.ndim, given), global_pool=geometry == "global")
    difference = np.abs(got.astype(int) - want)
    assert difference.max() <= 1 and np.mean(difference == 0) > 0.97


def test_strided_input_and_broadcast_parameters_through_the_device(rng):
    x = random_bytes(rng, "int8", (1, 3, 5, 6))
    memory = np.ascontiguousarray(x.transpose(0, 2, 3, 1))  # NHWC
    desc = ops.QuantizedLinearAveragePooling(
        input=TensorDesc(I8, [1, 3, 5, 6], strides=[90, 1, 18, 3]), input_scale=TensorDesc(F32, [3]),
        input_zero_point=TensorDesc(I8, [1, 3, 1, 1], strides=[0, 0, 0, 0]),
        output_scale=TensorDesc(F32, [1, 1, 1, 1]), output=TensorDesc(U8, [1, 3, 3, 3]),
        window_size=[3, 2], strides=[2, 2], start_padding=[1, 0], end_padding=[1, 0], include_padding=1,
    )  # fmt: skip
    out = np.zeros((1, 3, 3, 3), np.uint8)
    xs, ys = np.float32([0.1, 0.2, 0.3]), np.float32([0.05])
    Device().compile_operator(desc).execute([memory, xs, np.int8([-5]), ys, None], [out])
    want = python_formula(x, xs, np.int8([-5, -5, -5]), ys, None, "uint8", window_size=(3, 2), strides=(2, 2),
                          start_padding=(1, 0), end_padding=(1, 0), include_padding=True)  # fmt: skip
    assert np.array_equal(out, want)


# -- validation ----------------------------------------------------------------------------------------


def desc(**changes) -> ops.QuantizedLinearAveragePooling:
    one = TensorDesc(F32, [1, 1, 1, 1])
    fields = dict(input=TensorDesc(U8, [1, 4, 6, 6]), input_scale=one,
                  input_zero_point=TensorDesc(U8, [1, 4, 1, 1]), output_scale=one,
                  output_zero_point=TensorDesc(I8, [1, 1, 1, 1]),
                  output=TensorDesc(I8, [1, 4, 3, 3]), window_size=(2, 2), strides=(2, 2))  # fmt: skip
    return ops.QuantizedLinearAveragePooling(**(fields | changes))


def refused(description, message: str, level: str = "6_4") -> None:
    with pytest.raises(DmlError) as error:
        Device(level).compile_operator(description)
    assert str(error.value) == f"QuantizedLinearAveragePooling{message} (device is {level})"


def test_valid_from_6_2_in_2_and_3_dimensions():
    assert desc().minimum_feature_level().label == "6_2"
    refused(desc(), ": operator needs feature level 6_2", "6_1")
    three_d = desc(input=TensorDesc(U8, [1, 4, 2, 6, 6]), output=TensorDesc(I8, [1, 4, 1, 3, 3]),
                   input_zero_point=TensorDesc(U8, [4]), dimension_count=3, window_size=(2, 2, 2),
                   strides=(2, 2, 2), start_padding=(0, 0, 0), end_padding=(0, 0, 0),
                   dilations=(1, 1, 1))  # fmt: skip
    Device("6_2").compile_operator(three_d)
    Device("6_2").compile_operator(desc(input_zero_point=None, output_zero_point=None, include_padding=True))


REFUSALS = [
    ({"window_size": None}, ".window_size: must be a sequence of 2 integers, not None"),
    ({"window_size": (2, 0)}, ".window_size[1]: 0 must be an integer from 1 to 2^32 - 1"),
    ({"dilations": (1,)}, ".dilations: [1] holds 1 values; dimension_count is 2"),
    ({"dimension_count": 3, "window_size": (1, 2, 2), "strides": (1, 2, 2)},
     ".dimension_count: 3 must be the input's spatial dimension count, 2"),
    ({"include_padding": "yes"}, ".include_padding: 'yes' must be True or False (a BOOL)"),
    ({"output": TensorDesc(I8, [1, 4, 3, 2])},
     ".output: sizes [1, 4, 3, 2] must be [1, 4, 3, 3] ({N, C, *out} from the window and attributes)"),
    ({"window_size": (7, 2)},
     ".window_size: the window's extent 7 along spatial dimension 0 exceeds the padded input's 6"),
    ({"dilations": (4, 1), "window_size": (2, 2)},
     ".output: sizes [1, 4, 3, 3] must be [1, 4, 1, 3] ({N, C, *out} from the window and attributes)"),
    ({"input_scale": TensorDesc(F32, [1, 1, 4, 1])},
     ".input_scale: sizes [1, 1, 4, 1] must be per-tensor (every size 1) or per-channel "
     "({1, C, 1, 1}, C = 4)"),
    ({"input_zero_point": TensorDesc(I8, [1, 4, 1, 1])},
     ".input_zero_point: data type INT8 differs from input's UINT8"),
    ({"output_zero_point": TensorDesc(U8, [1, 1, 1, 1])},
     ".output_zero_point: data type UINT8 differs from output's INT8"),
    ({"input": TensorDesc(U8, [4, 6, 6]), "output": TensorDesc(I8, [4, 3, 3])},
     ".input: dimension count 3 is not supported (supported: 4 to 5)"),
    ({"output": TensorDesc(I8, [1, 4, 3, 3, 1])}, ".output: dimension count 5 differs from input's 4"),
    ({"input_scale": TensorDesc(DataType.FLOAT16, [1, 1, 1, 1])},
     ".input_scale: data type FLOAT16 is not supported (supported: FLOAT32)"),
    ({"output_scale": None}, ".output_scale: tensor is required"),
]  # fmt: skip


@pytest.mark.parametrize("changes, message", REFUSALS)
def test_refusals_name_field_and_rule(changes, message):
    refused(desc(**changes), message)
