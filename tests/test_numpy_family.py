"""The NumPy layer's functions for the rest of the quantized family (issue 22 item 4): each against its
reference (:mod:`dmlq.reference`) and against a formula independent of it (Python ints, Fractions,
ONNX's reference), on random and adversarial data, in any layout, with parameters broadcast as NumPy
operands, ``out=``, empty arrays, and refusals that name the argument and the rule.

The independent formulas are the ones the operators' own tests check the DirectML layer with."""

from __future__ import annotations

import re
import warnings

import numpy as np
import pytest

import dmlq
from dmlq import DmlError, activations, reference
from family import (
    GEOMETRIES,
    INT32,
    TYPES,
    convolution_sums,
    node_model,
    onnx_convolution_attributes,
    onnx_reference,
    random_bytes,
)
from test_dynamic_quantize_linear import scalar_model
from test_matrix_multiply_integer import loops
from test_matrix_multiply_integer_to_float import python_formula as to_float_formula
from test_one_step_route import _laid_out
from test_quantized_linear_average_pooling import GEOMETRIES as POOLING_GEOMETRIES
from test_quantized_linear_average_pooling import operands as pooling_operands
from test_quantized_linear_average_pooling import python_formula as pooling_formula
from test_quantized_linear_convolution import exact
from test_quantized_linear_convolution import operands as convolution_operands

U8, I8 = np.uint8, np.int8
CONVOLVE, POOL = dmlq.quantized_linear_convolution, dmlq.quantized_linear_average_pooling
INTEGER_PRODUCT, FLOAT_PRODUCT = dmlq.matrix_multiply_integer, dmlq.matrix_multiply_integer_to_float
LAYOUTS = ["fortran", "reversed", "strided", "misaligned", "swapped", "subclass"]
WINDOW = ("strides", "dilations", "start_padding", "end_padding")


def same(got: np.ndarray, want: np.ndarray) -> bool:
    """The same dtype, shape and bits."""
    return got.dtype == want.dtype and got.shape == want.shape and got.tobytes() == want.tobytes()


# -- convolutions ----------------------------------------------------------------------------------------


def numpy_window(ndim: int, given: dict) -> dict:
    """The ops tests' DirectML attributes (two values each) as the NumPy layer takes them: one value
    per spatial dimension of x (a 1-D convolution's H dropped)."""
    return {name: tuple(given[name][4 - ndim :]) for name in WINDOW if name in given} | (
        {"group_count": given["group_count"]} if "group_count" in given else {}
    )


def per_filter(values: np.ndarray | None, ndim: int) -> np.ndarray | None:
    """One value per filter as a NumPy operand against ``w`` (``ndim`` dimensions): ``(M, 1, ...)``."""
    return None if values is None else values.reshape(-1, *(1,) * (ndim - 1))


def per_output_channel(values: np.ndarray | None, ndim: int) -> np.ndarray | None:
    """One value per channel as a NumPy operand against ``[N, C, ...]``: ``(C, 1, ...)``."""
    return None if values is None else values.reshape(-1, *(1,) * (ndim - 2))


def convolve(args, given: dict, out_type=None, **keywords) -> np.ndarray:
    """dmlq.quantized_linear_convolution on the ops tests' operands (per-tensor ones as 0-d)."""
    x, xs, xz, w, ws, wz, bias, ys, yz = args
    scalar = [v.reshape(()) for v in (xs, xz, ys, yz)]
    return CONVOLVE(
        x, scalar[0], scalar[1], w, per_filter(ws, w.ndim), per_filter(wz, w.ndim),
        per_output_channel(bias, x.ndim), scalar[2], scalar[3], dtype=out_type,
        **numpy_window(x.ndim, given), **keywords,
    )  # fmt: skip


def reference_convolution(args, given: dict, out_type) -> np.ndarray:
    x = args[0]
    window = {name: given.get(name, (1, 1) if name in ("strides", "dilations") else (0, 0))[4 - x.ndim :]
              for name in WINDOW}  # fmt: skip
    return reference.quantized_linear_convolution(*args, np.dtype(out_type), **window,
                                                  group_count=given.get("group_count", 1))  # fmt: skip


@pytest.mark.parametrize("geometry", GEOMETRIES)
@pytest.mark.parametrize("x_type, w_type", TYPES)
@pytest.mark.parametrize("per_channel", [False, True], ids=["per-tensor", "per-channel"])
def test_quantized_linear_convolution_equals_exact_rationals_and_the_reference(
    geometry, x_type, w_type, per_channel, rng
):
    out_type = w_type  # the output's type is free: cover both against each input
    args, sums, given = convolution_operands(rng, geometry, x_type, w_type, out_type, per_channel)
    x, xs, xz, w, ws, wz, bias, ys, yz = args
    got = convolve(args, given)  # the output's dtype from the zero point's
    assert same(got, exact(sums, bias, xs, ws, ys, yz, out_type))
    assert same(got, reference_convolution(args, given, out_type))


@pytest.mark.parametrize("geometry", GEOMETRIES)
@pytest.mark.parametrize("x_type, w_type", TYPES)
def test_convolution_integer_equals_python_int_sums_and_onnx_reference(geometry, x_type, w_type, rng):
    x_sizes, w_sizes, given = GEOMETRIES[geometry]
    x, w = random_bytes(rng, x_type, x_sizes), random_bytes(rng, w_type, w_sizes)
    xz, wz = random_bytes(rng, x_type, ()), random_bytes(rng, w_type, (w_sizes[0],))
    got = dmlq.convolution_integer(x, xz, w, per_filter(wz, w.ndim), **numpy_window(x.ndim, given))
    assert same(got, convolution_sums(x, xz, w, wz, **given).astype(np.int32))
    inputs = [("x", x), ("w", w), ("x_zero_point", xz), ("w_zero_point", wz[0])]  # ONNX's: one
    attributes = onnx_convolution_attributes(x.ndim, given)
    [want] = onnx_reference(node_model("ConvInteger", inputs, [("y", INT32)], opset=10, **attributes), inputs)
    assert same(dmlq.convolution_integer(x, xz, w, wz[0], **numpy_window(x.ndim, given)), want)


def test_convolution_integer_wraps_a_sum_past_int32_as_a_32_bit_accumulator():
    x, w = np.full((1, 4096, 3, 3), 255, U8), np.full((1, 4096, 3, 3), 255, U8)
    assert dmlq.convolution_integer(x, None, w, None).item() == 4096 * 9 * 65025 - 2**32


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("argument", ["x", "w", "w_scale", "bias", "out"])
def test_a_convolution_reads_and_writes_any_layout(layout, argument, rng):
    args, _, given = convolution_operands(rng, "strided-dilated", "uint8", "int8", "uint8", per_channel=True)
    x, xs, xz, w, ws, wz, bias, ys, yz = args
    want = convolve(args, given)
    laid = {"x": x, "w": w, "w_scale": ws, "bias": bias}
    if argument == "out":
        out = _laid_out(np.zeros_like(want), layout)
        assert convolve(args, given, out=out) is out and np.array_equal(out, want)
        return
    laid[argument] = _laid_out(laid[argument], layout)
    got = convolve((laid["x"], xs, xz, laid["w"], laid["w_scale"], wz, laid["bias"], ys, yz), given)
    assert same(got, want)


def test_convolution_parameters_broadcast_as_numpy_operands(rng):
    x, w = random_bytes(rng, "uint8", (2, 3, 5, 5)), random_bytes(rng, "int8", (4, 3, 3, 3))
    ws = np.float32([0.5, 1.0, 0.25, 2.0])
    bias = np.int32([10, -20, 30, -40])
    want = dmlq.quantized_linear_convolution(x, 0.5, 3, w, ws.reshape(4, 1, 1, 1), None,
                                             bias.reshape(4, 1, 1), 8.0, None)  # fmt: skip
    same_parameters = [  # (w_scale, bias): the same values in other NumPy shapes
        (ws.reshape(4, 1, 1, 1), bias.reshape(1, 4, 1, 1)),
        (list(ws.reshape(4, 1, 1, 1).tolist()), bias.reshape(4, 1, 1).tolist()),
    ]
    for w_scale, b in same_parameters:
        assert same(CONVOLVE(x, 0.5, 3, w, w_scale, None, b, 8.0, None), want)
    # a scalar bias is one value for every channel (DirectML's {1, M, 1, 1} through a zero stride)
    sevens = np.full((4, 1, 1), 7, np.int32)
    assert same(
        CONVOLVE(x, 0.5, 3, w, 1.0, None, 7, 8.0, None), CONVOLVE(x, 0.5, 3, w, 1.0, None, sevens, 8.0, None)
    )


@pytest.mark.parametrize(
    ("keywords", "message"),
    [
        ({"w_scale": np.float32([1, 2, 3])}, "w_scale: shape (3,) varies along w's axis 3; per-tensor or "
                                             "per-channel (4, 1, 1, 1) only"),
        ({"w_scale": np.ones((4, 1, 1), np.float32)},
         "w_scale: shape (4, 1, 1) does not broadcast against w's (4, 3, 3, 3); per-tensor or per-channel "
         "(4, 1, 1, 1)"),
        ({"w_zero_point": np.ones((1, 3, 1, 1), np.int8)},
         "w_zero_point: shape (1, 3, 1, 1) varies along w's axis 1"),
        ({"bias": np.int32([1, 2, 3, 4])},
         "bias: shape (4,) does not broadcast against the result's (2, 4, 3, 3); per-tensor or per-channel "
         "(4, 1, 1) only"),
        ({"x_scale": np.float32([1, 2, 3]).reshape(3, 1, 1)},
         "x_scale: sizes [1, 3, 1, 1] must be per-tensor (every size 1) "
         "(QuantizedLinearConvolution.input_scale)"),
        ({"output_zero_point": np.uint8([1, 2, 3, 4]).reshape(4, 1, 1)},
         "output_zero_point: sizes [1, 4, 1, 1] must be per-tensor (every size 1) "
         "(QuantizedLinearConvolution.output_zero_point)"),
        ({"w_zero_point": np.ones((1, 1, 1, 1, 1), np.int8)}, "w_zero_point: 5 dimensions; w has 4"),
        ({"group_count": 2}, "group_count: 2 must divide the input's 3 channels and the filter's 4 (M) "
                             "(QuantizedLinearConvolution.group_count)"),
        ({"group_count": 0}, "group_count: 0 must be an integer from 1 to 2^32 - 1"),
        ({"dilations": [3, 3]},
         "w: the window's extent 7 along spatial dimension 0 exceeds the padded input's 5 "
         "(QuantizedLinearConvolution.filter)"),
        ({"strides": [1, 0]}, "strides[1]: 0 must be an integer from 1 to 2^32 - 1"),
        ({"strides": [1.5, 1]}, "strides[0]: 1.5 must be an integer from 1 to 2^32 - 1"),
        ({"strides": [1]}, "strides: [1] holds 1 value; x has 2 spatial dimensions"),
        ({"start_padding": 1}, "start_padding: must be a sequence of 2 integers, not 1"),
        ({"end_padding": [-1, 0]}, "end_padding[0]: -1 must be an integer from 0 to 2^32 - 1"),
        ({"bias": np.int64([1, 2, 3, 4]).reshape(4, 1, 1)},
         "bias: dtype int64 is not supported (expected int32)"),
        ({"bias": [2**31, 0, 0, 0]}, "bias: 2147483648 is outside the int32 range"),
        ({"x_scale": 0.0}, "x_scale: a scale of 0 is undefined in DirectML"),
        ({"dtype": "int8", "output_zero_point": U8(0)}, "dtype: int8 disagrees with output_zero_point's"),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)  # fmt: skip
def test_convolution_refusals_name_the_argument_and_the_rule(keywords, message, rng):
    x, w = random_bytes(rng, "uint8", (2, 3, 5, 5)), random_bytes(rng, "int8", (4, 3, 3, 3))
    arguments = {"x": x, "x_scale": 1.0, "x_zero_point": None, "w": w, "w_scale": 1.0, "w_zero_point": None,
                 "bias": None, "output_scale": 1.0, "output_zero_point": None}  # fmt: skip
    refused(CONVOLVE, arguments | keywords, message)


def refused(function, arguments: dict, message: str) -> None:
    """``function(**arguments)`` raises a DmlError whose message starts with ``message``."""
    with pytest.raises(DmlError, match="^" + re.escape(message)):
        function(**arguments)


@pytest.mark.parametrize(
    ("x_shape", "w_shape", "message"),
    [
        ((2, 3, 5), (4, 3, 3, 3), "x: dimension count 3 differs from filter's 4 (ConvolutionInteger.input)"),
        ((2, 3), (4, 3), "x: 2 dimensions; ConvolutionInteger takes 3 to 4"),
        ((1, 2, 3, 5, 5), (4, 2, 3, 3, 3), "x: 5 dimensions; ConvolutionInteger takes 3 to 4"),
        ((2, 0, 5, 5), (4, 0, 3, 3), "x: sizes[1] = 0 must be an integer of at least 1 "
                                     "(ConvolutionInteger.input)"),
    ],
)  # fmt: skip
def test_convolution_shapes_the_operator_refuses(x_shape, w_shape, message):
    with pytest.raises(DmlError, match="^" + re.escape(message)):
        dmlq.convolution_integer(np.zeros(x_shape, U8), None, np.zeros(w_shape, I8), None)


def test_a_one_dimensional_convolution_names_its_own_attribute_positions():
    x, w = np.zeros((1, 2, 9), U8), np.zeros((3, 2, 2), I8)
    with pytest.raises(DmlError, match=re.escape("strides[0]: 0 must be an integer from 1 to 2^32 - 1 "
                                                 "(ConvolutionInteger.strides[1])")):  # fmt: skip
        dmlq.convolution_integer(x, None, w, None, strides=[0])
    assert dmlq.convolution_integer(x, None, w, None, strides=[2], dilations=[3], end_padding=[1]).shape == (
        1,
        3,
        4,
    )


@pytest.mark.parametrize(("n", "m", "groups"), [(0, 4, 2), (2, 0, 1), (0, 0, 1)])
def test_an_empty_batch_or_filter_set_gives_an_empty_result_checked_as_one(n, m, groups):
    x, w = np.zeros((n, 6, 5, 5), U8), np.zeros((m, 6 // groups, 3, 3), I8)
    got = dmlq.quantized_linear_convolution(x, 1.0, None, w, 1.0, None, None, 1.0, None, group_count=groups)
    assert got.shape == (n, m, 3, 3) and got.dtype == U8
    out = np.zeros((n, m, 3, 3), np.int32)
    assert dmlq.convolution_integer(x, None, w, None, group_count=groups, out=out) is out
    # refused as the call with the empty sizes taken as 1 is
    with pytest.raises(
        DmlError, match=f"^group_count: 4 must divide the input's 6 channels and the filter's {m or 1}"
    ):
        dmlq.quantized_linear_convolution(x, 1.0, None, w, 1.0, None, None, 1.0, None, group_count=4)
    with pytest.raises(DmlError, match="^w: the window's extent 9"):
        dmlq.convolution_integer(x, None, w, None, group_count=groups, dilations=[4, 1])


def test_a_convolution_into_its_own_input_reads_the_input_first(rng):
    x = random_bytes(rng, "int8", (1, 4, 5, 5))
    w = random_bytes(rng, "int8", (4, 4, 3, 3))
    padding = {"start_padding": [1, 1], "end_padding": [1, 1]}
    want = CONVOLVE(x, 0.1, None, w, 0.02, None, None, 0.5, None, **padding)
    got = CONVOLVE(x, 0.1, None, w, 0.02, None, None, 0.5, None, **padding, out=x)
    assert got is x and np.array_equal(x, want)


@pytest.mark.parametrize(
    ("out", "message"),
    [
        (np.zeros((2, 4, 3, 3), I8), "out: expected shape (2, 4, 3, 3) and dtype uint8, got (2, 4, 3, 3) "
                                     "int8"),
        (np.zeros((2, 4, 3), U8), "out: expected shape (2, 4, 3, 3) and dtype uint8, got (2, 4, 3) uint8"),
        ([0], "out: must be a numpy.ndarray, not list"),
    ],
)  # fmt: skip
def test_a_convolution_refuses_an_out_of_another_dtype_or_shape(out, message):
    x, w = np.zeros((2, 3, 5, 5), U8), np.zeros((4, 3, 3, 3), I8)
    with pytest.raises(DmlError, match="^" + re.escape(message)):
        dmlq.quantized_linear_convolution(x, 1.0, None, w, 1.0, None, None, 1.0, None, out=out)


# -- pooling ---------------------------------------------------------------------------------------------


def pool(args, given: dict, **keywords) -> np.ndarray:
    x, xs, xz, ys, yz = args
    channel = [per_output_channel(v, x.ndim) for v in (xs, xz, ys, yz)]
    window = {name: value for name, value in given.items() if name != "dimension_count"}
    return POOL(x, *channel, **window, **keywords)


@pytest.mark.parametrize("geometry", POOLING_GEOMETRIES)
@pytest.mark.parametrize("x_type, out_type", [("uint8", "uint8"), ("int8", "uint8"), ("int8", "int8")])
@pytest.mark.parametrize("include_padding", [False, True])
@pytest.mark.parametrize("per_channel", [False, True], ids=["per-tensor", "per-channel"])
def test_pooling_equals_the_python_formula_and_the_reference(geometry, x_type, out_type, include_padding,
                                                             per_channel, rng):  # fmt: skip
    args, given = pooling_operands(rng, geometry, x_type, out_type, per_channel)
    given = given | {"include_padding": include_padding}
    got = pool(args, given)
    assert same(got, pooling_formula(*args, out_type, **given))
    x = args[0]
    window = {"strides": (1,) * (x.ndim - 2), "start_padding": (0,) * (x.ndim - 2),
              "end_padding": (0,) * (x.ndim - 2), "dilations": (1,) * (x.ndim - 2)} | given  # fmt: skip
    window.pop("dimension_count", None)
    assert same(got, reference.quantized_linear_average_pooling(*args, np.dtype(out_type), **window))


@pytest.mark.parametrize("layout", LAYOUTS)
def test_pooling_reads_and_writes_any_layout(layout, rng):
    args, given = pooling_operands(rng, "asymmetric", "int8", "uint8", per_channel=True)
    want = pool(args, given)
    assert same(pool((_laid_out(args[0], layout), *args[1:]), given), want)
    out = _laid_out(np.zeros_like(want), layout)
    assert pool(args, given, out=out) is out and np.array_equal(out, want)


@pytest.mark.parametrize(
    ("keywords", "message"),
    [
        ({"x": np.zeros((2, 3, 5), U8)}, "x: 3 dimensions; QuantizedLinearAveragePooling takes 4 to 5"),
        ({"window_size": None}, "window_size: must be a sequence of 2 integers, not None"),
        ({"window_size": [2, 2, 2]}, "window_size: [2, 2, 2] holds 3 values; x has 2 spatial dimensions"),
        ({"window_size": [0, 2]}, "window_size[0]: 0 must be an integer from 1 to 2^32 - 1"),
        ({"window_size": [6, 2]},
         "window_size: the window's extent 6 along spatial dimension 0 exceeds the padded input's 5 "
         "(QuantizedLinearAveragePooling.window_size)"),
        ({"include_padding": 2}, "include_padding: 2 must be True or False (a BOOL)"),
        ({"output_scale": np.ones((2, 1, 1), np.float32)},
         "output_scale: shape (2, 1, 1) does not broadcast against the result's (2, 3, 4, 4)"),
        ({"x_zero_point": np.int8(0)}, "x_zero_point: dtype int8 differs from x's uint8"),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)  # fmt: skip
def test_pooling_refusals_name_the_argument_and_the_rule(keywords, message):
    arguments = {"x": np.zeros((2, 3, 5, 5), U8), "x_scale": 1.0, "x_zero_point": None, "output_scale": 1.0,
                 "output_zero_point": None, "window_size": [2, 2]} | keywords  # fmt: skip
    with pytest.raises(DmlError, match="^" + re.escape(message)):
        POOL(**arguments)


def test_pooling_takes_numpy_booleans_and_gives_empty_results_for_empty_channels():
    x = np.arange(16, dtype=U8).reshape(1, 1, 4, 4)
    padded = dict(window_size=[3, 3], start_padding=[1, 1], end_padding=[1, 1])
    with_padding = POOL(x, 1.0, None, 1.0, None, include_padding=np.True_,
                                                         **padded)  # fmt: skip
    assert with_padding[0, 0, 0, 0] == round((0 + 1 + 4 + 5) / 9)
    assert POOL(x[:, :0], 1.0, None, 1.0, None, **padded).shape == (
        1,
        0,
        4,
        4,
    )


# -- integer matrix multiplies ---------------------------------------------------------------------------

MATRIX_SHAPES = {  # a, b: 2-D, odd sizes, batches broadcast both ways
    "2-d": ((5, 7), (7, 3)),
    "odd": ((1, 33), (33, 17)),
    "batched": ((2, 3, 4, 9), (2, 3, 9, 6)),
    "broadcast": ((2, 1, 4, 9), (3, 9, 5)),
    "3-d with 2-d": ((3, 4, 6), (6, 2)),
}


def batches(*arrays: np.ndarray):
    """Each batch index of the broadcast ``arrays`` ([..., rows, columns]) with its 2-D matrices."""
    batch = np.broadcast_shapes(*(a.shape[:-2] for a in arrays))
    views = [np.broadcast_to(a, (*batch, *a.shape[-2:])) for a in arrays]
    for index in np.ndindex(*batch):
        yield index, [view[index] for view in views]


@pytest.mark.parametrize("shape", MATRIX_SHAPES)
@pytest.mark.parametrize("a_type, b_type", TYPES)
@pytest.mark.parametrize("kind", ["none", "per-tensor", "per-row-and-column"])
def test_matrix_multiply_integer_equals_python_ints_and_the_reference(shape, a_type, b_type, kind, rng):
    a, b = (
        random_bytes(rng, a_type, MATRIX_SHAPES[shape][0]),
        random_bytes(rng, b_type, MATRIX_SHAPES[shape][1]),
    )
    m, n = a.shape[-2], b.shape[-1]
    shapes = {"none": None, "per-tensor": ((), ()), "per-row-and-column": ((m, 1), (n,))}[kind]
    az, bz = (None, None) if shapes is None else (random_bytes(rng, a_type, shapes[0]),
                                                  random_bytes(rng, b_type, shapes[1]))  # fmt: skip
    got = INTEGER_PRODUCT(a, az, b, bz)
    for index, (a2, b2) in batches(a, b):
        assert same(got[index], loops(a2, az, b2, bz))
    assert same(got, reference.matrix_multiply_integer(a, az, b, None if bz is None else bz.reshape(1, -1)))
    if kind != "per-row-and-column" and a.ndim == b.ndim == 2:
        inputs = [("A", a), ("B", b), ("a_zero_point", az), ("b_zero_point", bz)]
        [want] = onnx_reference(node_model("MatMulInteger", inputs, [("Y", INT32)], opset=10), inputs)
        assert same(got, want)


def test_matrix_multiply_integer_wraps_past_int32():
    a, b = np.full((1, 40000), 255, U8), np.full((40000, 1), 255, U8)
    assert INTEGER_PRODUCT(a, None, b, None).item() == 40000 * 65025 - 2**32


@pytest.mark.parametrize("integer_type", ["uint8", "int8", "int16", "uint16", "int32", "uint32"])
@pytest.mark.parametrize("float_type", [np.float32, np.float16])
def test_integer_to_float_equals_the_python_formula_and_the_reference(integer_type, float_type, rng):
    a, b = random_bytes(rng, integer_type, (2, 5, 7)), random_bytes(rng, integer_type, (7, 3))
    az, bz = random_bytes(rng, integer_type, (5, 1)), random_bytes(rng, integer_type, (1, 3))
    a_scale = rng.uniform(-0.01, 0.01, (5, 1)).astype(float_type) if a.itemsize < 4 else float_type(2**-20)
    b_scale = rng.uniform(-0.01, 0.01, 3).astype(float_type)
    bias = rng.uniform(-1, 1, (2, 1, 3)).astype(float_type)  # a per-batch bias
    got = FLOAT_PRODUCT(a, a_scale, az, b, b_scale, bz, bias)
    assert got.dtype == float_type and got.shape == (2, 5, 3)
    for index, (a2, bias2) in batches(a, bias):
        want = to_float_formula(a2, np.asarray(a_scale), az, b, b_scale.reshape(1, 3), bz, bias2, float_type)
        assert same(got[index], want)
    assert same(got, reference.matrix_multiply_integer_to_float(a, a_scale, az, b, b_scale.reshape(1, 3), bz,
                                                                bias, float_type))  # fmt: skip


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("argument", ["a", "b", "a_scale", "bias", "out"])
def test_matrix_multiplies_read_and_write_any_layout(layout, argument, rng):
    arguments = {"a": random_bytes(rng, "int16", (3, 4, 6)), "a_scale": np.float32([[0.5], [1], [0.25], [2]]),
                 "a_zero_point": np.int16(3), "b": random_bytes(rng, "int16", (6, 5)), "b_scale": 0.5,
                 "b_zero_point": None, "bias": rng.uniform(-1, 1, (4, 5)).astype(np.float32)}  # fmt: skip
    want = FLOAT_PRODUCT(**arguments)
    if argument == "out":
        out = _laid_out(np.zeros_like(want), layout)
        assert FLOAT_PRODUCT(**arguments, out=out) is out and np.array_equal(out, want)
        return
    arguments[argument] = _laid_out(arguments[argument], layout)
    assert same(FLOAT_PRODUCT(**arguments), want)


def test_k_of_zero_is_an_empty_sum_and_empty_batches_give_empty_results():
    a, b = np.zeros((2, 0), U8), np.zeros((0, 3), I8)
    assert same(INTEGER_PRODUCT(a, U8(7), b, I8([1, 2, 3])), np.zeros((2, 3), np.int32))
    bias = np.float32([1, 2, 3])
    assert same(
        FLOAT_PRODUCT(a, 0.5, None, b.view(U8), 2.0, None, bias), np.broadcast_to(bias, (2, 3)).copy()
    )
    assert INTEGER_PRODUCT(np.zeros((0, 4, 2), U8), None, np.zeros((2, 3), U8), None).shape == (0, 4, 3)
    assert INTEGER_PRODUCT(np.zeros((2, 0, 4), U8), None, np.zeros((4, 3), U8), None).shape == (2, 0, 3)
    with pytest.raises(DmlError, match=r"^a, b: a is \[..., M, K\] with K = 4 but b has 3 rows"):
        INTEGER_PRODUCT(np.zeros((0, 4), U8), None, np.zeros((3, 3), U8), None)


MATRICES = {"a": np.zeros((4, 3), U8), "a_zero_point": None, "b": np.zeros((3, 5), U8), "b_zero_point": None}
TO_FLOAT = MATRICES | {"a_scale": 1.0, "b_scale": 1.0}


@pytest.mark.parametrize(
    ("function", "keywords", "message"),
    [
        (INTEGER_PRODUCT, {"a": np.zeros((2, 4, 3), U8), "a_zero_point": U8([[[1]], [[2]]])},
         "a_zero_point: shape (2, 1, 1) is not supported; expected per-tensor or per-row (4, 1)"),
        (INTEGER_PRODUCT, {"a_zero_point": U8([1, 2, 3])},
         "a_zero_point: shape (3,) is not supported; it would vary along K"),
        (INTEGER_PRODUCT, {"b_zero_point": U8([[1]] * 3)},
         "b_zero_point: shape (3, 1) is not supported; it would vary along K"),
        (INTEGER_PRODUCT, {"a": np.zeros((1, 1, 1, 4, 3), U8)},
         "a: 5 dimensions; the matrix multiply takes 2 to 4"),
        (INTEGER_PRODUCT, {"a": np.zeros(3, U8)}, "a: 1 dimensions; the matrix multiply takes 2 to 4"),
        (INTEGER_PRODUCT, {"a": np.zeros((2, 4, 3), U8), "b": np.zeros((3, 3, 5), U8)},
         "a, b: shapes do not broadcast (a (2,), b (3,))"),
        (FLOAT_PRODUCT, {"b": np.zeros((3, 5), np.int16)},
         "b: data type INT16 differs from a's UINT8 (only UINT8 and INT8 may mix)"),
        (FLOAT_PRODUCT, {"a_scale": np.float16(1), "b_scale": np.float32(1)},
         "a_scale, b_scale: float16 and float32 differ (MatrixMultiplyIntegerToFloat has one data type"),
        (FLOAT_PRODUCT, {"a_scale": np.float64(1), "bias": np.float16([1])},
         "a_scale, bias: float32 and float16 differ"),
        (FLOAT_PRODUCT, {"bias": np.zeros(4, np.float32)},
         "bias: shape (4,) does not broadcast to the result's (4, 5)"),
        (FLOAT_PRODUCT, {"bias": np.int32([1])},
         "bias: dtype int32 is not supported (expected float32, float16)"),
        (FLOAT_PRODUCT, {"a_scale": 1e5, "b_scale": np.float16(1)},
         "a_scale: 100000.0 overflows float16; scales must be finite"),
        (FLOAT_PRODUCT, {"a_scale": np.int32(1)}, "a_scale: dtype int32 is not a float type"),
        (FLOAT_PRODUCT, {"a": np.zeros((4, 3), np.int64)},
         "a: dtype int64 is not supported (expected int32, int16, int8, uint32, uint16, uint8)"),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)  # fmt: skip
def test_matrix_multiply_refusals_name_the_argument_and_the_rule(function, keywords, message):
    refused(function, (MATRICES if function is INTEGER_PRODUCT else TO_FLOAT) | keywords, message)


def test_a_float16_scale_alone_makes_the_result_float16_and_python_numbers_follow():
    a, b = np.uint8([[1, 2]]), np.uint8([[3], [4]])
    got = FLOAT_PRODUCT(a, 0.5, None, b, np.float16(0.25), None, bias=[1.0])
    assert same(got, np.float16([[1 + 11 * 0.125]]))


# -- dynamic quantization --------------------------------------------------------------------------------


@pytest.mark.parametrize("out_type", ["uint8", "int8"])
@pytest.mark.parametrize("case", ["mixed", "positive", "negative", "ties", "eight-dims", "float16"])
def test_dynamic_quantize_equals_the_scalar_model_and_the_reference(case, out_type, rng):
    spread = (rng.standard_normal(256) * np.exp2(rng.uniform(-6, 6, 256))).astype(np.float32)
    x = {"mixed": spread.reshape(16, 16), "positive": np.abs(spread[:30]), "negative": -np.abs(spread[:7]),
         "ties": np.float32([0, 2, -3, -2.5, 1.34, 0.5]), "eight-dims": spread.reshape((2,) * 8),
         "float16": spread[:40].astype(np.float16).reshape(5, 8)}[case]  # fmt: skip
    y, scale, zero_point = dmlq.dynamic_quantize_linear(x, dtype=out_type if out_type == "int8" else None)
    values, want_scale, want_zero_point = scalar_model(x, out_type)
    assert y.dtype == out_type and y.shape == x.shape and y.ravel().tolist() == values
    assert (scale.shape, zero_point.shape, scale.dtype, zero_point.dtype) == ((), (), np.float32, out_type)
    assert (float(scale), int(zero_point)) == (want_scale, want_zero_point)
    want = reference.dynamic_quantize_linear(x, np.dtype(out_type))
    assert all(same(got, expected) for got, expected in zip((y, scale, zero_point), want))


def test_dynamic_quantize_equals_onnx_reference(rng):
    x = (rng.standard_normal((3, 7)) * 10).astype(np.float32)
    model = node_model("DynamicQuantizeLinear", [("x", x)], [("y", 2), ("y_scale", 1), ("y_zero_point", 2)],
                       opset=11)  # fmt: skip
    want = onnx_reference(model, [("x", x)])
    assert all(
        same(got, np.asarray(expected)) for got, expected in zip(dmlq.dynamic_quantize_linear(x), want)
    )


def test_dynamic_quantize_takes_any_layout_zero_d_empty_and_python_numbers():
    x = np.float32([[1.5, -2.0, 3.25], [0.5, 7.0, -1.0]])
    want = dmlq.dynamic_quantize_linear(x)
    for layout in LAYOUTS:
        assert all(same(got, w) for got, w in zip(dmlq.dynamic_quantize_linear(_laid_out(x, layout)), want))
    assert all(same(got, w) for got, w in zip(dmlq.dynamic_quantize_linear(x.astype(np.float64)), want))
    assert all(same(got, w) for got, w in zip(dmlq.dynamic_quantize_linear(x.tolist()), want))
    y, scale, zero_point = dmlq.dynamic_quantize_linear(np.float32(-3.0))
    assert (y.shape, y.item(), int(zero_point)) == ((), 0, 255)
    empty = dmlq.dynamic_quantize_linear(np.zeros((2, 0), np.float32), dtype="int8")  # the range of [0]
    zero = dmlq.dynamic_quantize_linear(np.zeros((1, 1), np.float32), dtype="int8")
    assert empty[0].shape == (2, 0) and same(empty[1], zero[1]) and same(empty[2], zero[2])


@pytest.mark.parametrize(
    ("keywords", "message"),
    [
        ({"x": np.int32([1, 2])}, "x: dtype int32 is not supported (expected float32, float16)"),
        ({"dtype": "int16"}, "dtype: 'int16' is not int8 or uint8"),
        ({"x": np.zeros((1,) * 9, np.float32)},
         "x: dimension count 9 is outside 1 to 8 (DynamicQuantizeLinear.input)"),
        ({"x": [True]}, "x: boolean values are not numbers here"),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)  # fmt: skip
def test_dynamic_quantize_refusals_name_the_argument_and_the_rule(keywords, message):
    refused(dmlq.dynamic_quantize_linear, {"x": [1.0]} | keywords, message)


# -- GEMM ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("trans_a", [False, True])
@pytest.mark.parametrize("trans_b", [False, True])
@pytest.mark.parametrize("float_type", [np.float32, np.float16])
def test_gemm_multiplies_small_integers_exactly_and_equals_the_reference(trans_a, trans_b, float_type, rng):
    a = rng.integers(-8, 8, (2, 1, 6, 5) if trans_a else (2, 1, 5, 6)).astype(float_type)
    b = rng.integers(-8, 8, (3, 4, 6) if trans_b else (3, 6, 4)).astype(float_type)
    c = rng.integers(-8, 8, (5, 1)).astype(float_type)  # per-row: broadcast along N
    got = dmlq.gemm(a, b, c, trans_a=trans_a, trans_b=trans_b, alpha=2.0, beta=-0.5)
    op_a, op_b = (np.swapaxes(a, -1, -2) if trans_a else a), (np.swapaxes(b, -1, -2) if trans_b else b)
    exact = 2 * (op_a.astype(np.int64) @ op_b.astype(np.int64)) - 0.5 * c
    assert same(got, exact.astype(float_type))
    full = np.broadcast_to(c, got.shape)
    batch = got.shape[:-2]
    a_full, b_full = (np.broadcast_to(m, (*batch, *m.shape[-2:])) for m in (a, b))
    transposes = {"trans_a": trans_a, "trans_b": trans_b}
    want = reference.gemm(a_full, b_full, full, float_type, alpha=2.0, beta=-0.5, **transposes)
    assert same(got, want)


def test_gemm_fuses_an_activation_by_name_or_object(rng):
    a, b = rng.standard_normal((4, 3)).astype(np.float32), rng.standard_normal((3, 5)).astype(np.float32)
    plain = dmlq.gemm(a, b)
    assert same(dmlq.gemm(a, b, fused_activation="relu"), np.maximum(plain, 0))
    leaky = dmlq.gemm(a, b, fused_activation=activations.LeakyRelu(alpha=0.5))
    assert same(
        leaky, reference.gemm(a, b, None, np.float32, fused_activation=activations.LeakyRelu(alpha=0.5))
    )


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("argument", ["a", "b", "c", "out"])
def test_gemm_reads_and_writes_any_layout(layout, argument, rng):
    normal = rng.standard_normal
    arguments = {"a": normal((3, 4)).astype(np.float32), "b": normal((5, 4)).astype(np.float32),
                 "c": normal((3, 5)).astype(np.float32)}  # fmt: skip
    want = dmlq.gemm(**arguments, trans_b=True)
    if argument == "out":
        out = _laid_out(np.zeros_like(want), layout)
        assert dmlq.gemm(**arguments, trans_b=True, out=out) is out and np.array_equal(out, want)
        return
    arguments[argument] = _laid_out(arguments[argument], layout)
    assert same(dmlq.gemm(**arguments, trans_b=True), want)


def test_gemm_into_its_own_operand_and_with_k_of_zero(rng):
    a = rng.standard_normal((4, 4)).astype(np.float32)
    want = dmlq.gemm(a, a, a, beta=2.0)
    assert dmlq.gemm(a, a, a, beta=2.0, out=a) is a and same(a, want)
    assert same(dmlq.gemm(np.zeros((2, 0)), np.zeros((0, 3)), [1.0, 2.0, 3.0], beta=2.0),
                np.float32([[2, 4, 6], [2, 4, 6]]))  # fmt: skip
    assert same(dmlq.gemm(np.zeros((0, 2), np.float16), np.zeros((0, 3), np.float16), trans_a=True),
                np.zeros((2, 3), np.float16))  # fmt: skip


@pytest.mark.parametrize(
    ("keywords", "message"),
    [
        ({"b": np.zeros((4, 5), np.float32)},
         "b: sizes [4, 5] do not continue a's K = 3 (b is [..., K, N]) (Gemm.b)"),
        ({"b": np.zeros((3, 5), np.float16)},
         "a, b: float32 and float16 differ (DirectML's GEMM has one data type)"),
        ({"c": np.zeros(4, np.float32)}, "c: shape (4,) does not broadcast to the result's (2, 5)"),
        ({"a": np.zeros((2, 3), np.int32)}, "a: dtype int32 is not supported (expected float32, float16)"),
        ({"alpha": float("inf")},
         "alpha: is inf; DirectML's FLOAT parameters are finite float32 values (Gemm.alpha)"),
        ({"trans_a": "yes"},
         "trans_a: 'yes' must be MatrixTransform.NONE (0) or TRANSPOSE (1) (Gemm.trans_a)"),
        ({"fused_activation": "nope"}, "fused_activation: unknown activation 'nope'"),
        ({"fused_activation": "linear"}, "fused_activation: 'linear' has no default parameters"),
        ({"a": np.zeros((1, 1, 1, 2, 3), np.float32)}, "a: 5 dimensions; the matrix multiply takes 2 to 4"),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)  # fmt: skip
def test_gemm_refusals_name_the_argument_and_the_rule(keywords, message):
    refused(
        dmlq.gemm, {"a": np.zeros((2, 3), np.float32), "b": np.zeros((3, 5), np.float32)} | keywords, message
    )


# -- every function ---------------------------------------------------------------------------------------

CALLS = {
    "quantized_linear_convolution": lambda a: dmlq.quantized_linear_convolution(
        a["x"], 0.5, None, a["w"], 0.25, None, a["bias"], 2.0, None, start_padding=[1, 0]),
    "convolution_integer": lambda a: dmlq.convolution_integer(a["x"], U8(3), a["w"], None, strides=[1, 2]),
    "quantized_linear_average_pooling": lambda a: POOL(
        a["x"], 0.5, None, 1.0, U8(1), window_size=[2, 2]),
    "matrix_multiply_integer": lambda a: INTEGER_PRODUCT(a["x"][0, 0], None, a["w"][0, 0], None),
    "matrix_multiply_integer_to_float": lambda a: FLOAT_PRODUCT(
        a["x"][0, 0], 0.5, None, a["x"][1, 0].T, 0.25, None),
    "dynamic_quantize_linear": lambda a: dmlq.dynamic_quantize_linear(a["f"]),
    "gemm": lambda a: dmlq.gemm(a["f"], a["f"].T, 1.0),
}  # fmt: skip


@pytest.mark.parametrize("name", CALLS)
def test_no_input_is_modified(name, rng):
    arguments = {"x": random_bytes(rng, "uint8", (2, 3, 4, 4)), "w": random_bytes(rng, "uint8", (2, 3, 4, 4)),
                 "bias": np.int32([5, -5]).reshape(2, 1, 1),
                 "f": rng.standard_normal((4, 4)).astype(np.float32)}  # fmt: skip
    copies = {name: value.copy() for name, value in arguments.items()}
    CALLS[name](arguments)
    assert all(np.array_equal(arguments[key], copies[key]) for key in arguments)


def test_every_function_is_exported_from_dmlq():
    for name in CALLS:
        assert name in dmlq.__all__ and name in dmlq.numpy_api.__all__
        assert getattr(dmlq, name) is getattr(dmlq.numpy_api, name)


@pytest.mark.parametrize("dtype", [np.uint8, np.int16])
def test_a_float16_result_beyond_its_range_is_infinity_without_a_warning(dtype):
    a, b = np.full((1, 300), 255, dtype), np.full((300, 1), 255, dtype)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        result = FLOAT_PRODUCT(a, np.float16(1), None, b, np.float16(1), None)
    assert result.dtype == np.float16 and result[0, 0] == np.inf
