"""The NumPy layer's contract (API.md): argument errors, dtype rules, shapes, ``out=``, inputs kept."""

from __future__ import annotations

import inspect
import re
import subprocess
import sys
import typing
import warnings

import numpy as np
import pytest
from numpy.typing import ArrayLike, DTypeLike

import dmlq
from dmlq import DmlError, activations

U8, I8 = np.uint8, np.int8
QL_ADD_ARGS = dict(
    a=U8([1, 2]),
    a_scale=0.1,
    a_zero_point=None,
    b=U8([3, 4]),
    b_scale=0.2,
    b_zero_point=None,
    output_scale=0.3,
    output_zero_point=None,
)
MATMUL_ARGS = dict(
    a=U8([[1, 2, 3], [4, 5, 6]]),
    a_scale=0.1,
    a_zero_point=None,
    b=I8([[1], [2], [3]]),
    b_scale=0.2,
    b_zero_point=None,
    output_scale=0.3,
    output_zero_point=None,
)


def quantize(**changes):
    return dmlq.quantize_linear(**({"x": [1.0, 2.0], "scale": 0.5} | changes))


def dequantize(**changes):
    return dmlq.dequantize_linear(**({"q": U8([1, 2]), "scale": 0.5} | changes))


def add(**changes):
    return dmlq.add(**({"a": np.float32([1, 2]), "b": np.float32([3, 4])} | changes))


def quantized_add(**changes):
    return dmlq.quantized_linear_add(**(QL_ADD_ARGS | changes))


def matmul(**changes):
    return dmlq.quantized_linear_matrix_multiply(**(MATMUL_ARGS | changes))


FUNCTIONS = {
    "quantize": quantize,
    "dequantize": dequantize,
    "add": add,
    "qladd": quantized_add,
    "qlmm": matmul,
}

BAD_ARGUMENTS = [
    # (function, changes, argument named first in the message)
    ("quantize", dict(scale=0.0), "scale"),
    ("quantize", dict(scale=np.float32(np.nan)), "scale"),
    ("quantize", dict(scale=np.inf), "scale"),
    ("quantize", dict(scale=[0.5, 0.0]), "scale"),
    ("quantize", dict(scale=1e-50), "scale"),  # zero once it is a float32
    ("quantize", dict(scale="0.5"), "scale"),
    ("quantize", dict(scale=np.int32(2)), "scale"),
    ("quantize", dict(scale=None), "scale"),
    ("quantize", dict(zero_point=np.int32(300)), "zero_point"),
    ("quantize", dict(zero_point=np.uint16([3, 256])), "zero_point"),
    ("quantize", dict(zero_point=np.float32(3)), "zero_point"),
    ("quantize", dict(zero_point=300), "zero_point"),
    ("quantize", dict(zero_point=-1), "zero_point"),
    ("quantize", dict(zero_point=2.5), "zero_point"),
    ("quantize", dict(zero_point=I8(3), dtype=np.uint8), "dtype"),
    ("quantize", dict(zero_point=U8(3), dtype="int8"), "dtype"),
    ("quantize", dict(dtype=np.int16), "dtype"),
    ("quantize", dict(dtype="float32"), "dtype"),
    ("quantize", dict(dtype="bogus"), "dtype"),
    ("quantize", dict(x="abc"), "x"),
    ("quantize", dict(x=["1", "2"]), "x"),
    ("quantize", dict(x=np.int64([1, 2**31])), "x"),
    ("quantize", dict(x=np.uint64([2**32])), "x"),
    ("quantize", dict(x=np.array([True])), "x"),
    ("quantize", dict(x=np.complex64([1])), "x"),
    ("quantize", dict(x=None), "x"),
    ("quantize", dict(x=[[1.0], [1.0, 2.0]]), "x"),
    ("quantize", dict(x=np.zeros((1,) * 9, np.float32)), "x"),
    ("quantize", dict(x=np.zeros((2, 3), np.float32), scale=np.ones(2, np.float32)), "x, scale"),
    ("quantize", dict(x=[1.0, 2.0], scale=0.5, zero_point=U8([1, 2, 3])), "x, zero_point"),
    ("dequantize", dict(scale=0.0), "scale"),
    ("dequantize", dict(scale=-np.inf), "scale"),
    ("dequantize", dict(scale=np.float16(1e-8)), "scale"),
    ("dequantize", dict(zero_point=I8(1)), "zero_point"),
    ("dequantize", dict(zero_point=np.int32([1])), "zero_point"),
    ("dequantize", dict(q=np.int64([1, -1])), "q"),
    ("dequantize", dict(q=np.int64([2**15]), zero_point=np.int16(0)), "q"),
    ("dequantize", dict(q=np.float32([1])), "q"),
    ("dequantize", dict(q=[1.5]), "q"),
    ("dequantize", dict(q=[1, 300]), "q"),
    ("dequantize", dict(q="1"), "q"),
    ("dequantize", dict(q=np.zeros((1,) * 9, U8)), "q"),
    ("dequantize", dict(q=U8([1, 2, 3]), scale=np.float32([1, 2])), "q, scale"),
    ("add", dict(a=np.float32([1]), b=np.float16([1])), "a, b"),
    ("add", dict(a=np.float16([1]), b=np.float32([1])), "a, b"),
    ("add", dict(a=np.int32([1])), "a"),
    ("add", dict(b=np.uint8([1])), "b"),
    ("add", dict(a="x"), "a"),
    ("add", dict(a=np.zeros((2, 3), np.float32), b=np.zeros(2, np.float32)), "a, b"),
    ("add", dict(a=np.zeros((1,) * 9, np.float32)), "a"),
    ("add", dict(out=np.zeros(2, np.float64)), "out"),
    ("add", dict(out=np.zeros(3, np.float32)), "out"),
    ("add", dict(out=[0.0, 0.0]), "out"),
    ("add", dict(out=np.broadcast_to(np.float32(0), (2,))), "out"),
    ("add", dict(fused_activation="swish"), "fused_activation"),
    ("add", dict(fused_activation="linear"), "fused_activation"),
    ("add", dict(fused_activation=3), "fused_activation"),
    ("add", dict(fused_activation=activations.LeakyRelu(alpha="x")), "fused_activation"),
    ("add", dict(fused_activation=activations.LeakyRelu(alpha=2**2000)), "fused_activation"),
    ("add", dict(fused_activation=activations.Elu(alpha=1e300)), "fused_activation"),
    ("add", dict(fused_activation=activations.Linear(alpha=np.nan, beta=0.0)), "fused_activation"),
    ("qladd", dict(a_scale=[0.1, 0.2]), "a_scale"),
    ("qladd", dict(b_zero_point=U8([1, 2])), "b_zero_point"),
    ("qladd", dict(output_scale=0.0), "output_scale"),
    ("qladd", dict(a_zero_point=I8(0)), "a_zero_point"),
    ("qladd", dict(a=np.int16([1, 256])), "a"),
    ("qladd", dict(a=np.float32([1, 2])), "a"),
    ("qladd", dict(b=U8([1, 2, 3])), "a, b"),
    ("qladd", dict(output_zero_point=I8(0), dtype="uint8"), "dtype"),
    ("qladd", dict(output_zero_point=np.int32(-1)), "output_zero_point"),
    ("qladd", dict(output_zero_point=np.int32(0), dtype="int8", b_zero_point=np.int64(-1)), "b_zero_point"),
    ("qladd", dict(a=[1, 256]), "a"),
    ("qladd", dict(a_scale=np.ones((1,) * 9, np.float32)), "a_scale"),
    ("qlmm", dict(a_scale=np.float32([0.1, 0.2, 0.3])), "a_scale"),  # (K,) varies along K
    ("qlmm", dict(a_scale=np.float32([[0.1, 0.2, 0.3]])), "a_scale"),
    ("qlmm", dict(b_scale=np.float32([[0.1], [0.2], [0.3]])), "b_scale"),
    ("qlmm", dict(a_zero_point=U8([[1, 2, 3]])), "a_zero_point"),
    ("qlmm", dict(b_zero_point=I8([[1], [2], [3]])), "b_zero_point"),
    ("qlmm", dict(output_scale=np.float32([0.1, 0.2])), "output_scale"),  # per-column output
    ("qlmm", dict(a_scale=np.float32([[[0.1]], [[0.2]]])), "a_scale"),  # per-batch
    ("qlmm", dict(a_scale=0.0), "a_scale"),
    ("qlmm", dict(a=U8([1, 2, 3])), "a"),
    ("qlmm", dict(a=np.zeros((1, 1, 1, 2, 3), U8)), "a"),
    ("qlmm", dict(b=I8([[1], [2]])), "a, b"),
    ("qlmm", dict(a=np.zeros((2, 2, 3), U8), b=np.zeros((3, 3, 1), I8)), "a, b"),
    ("qlmm", dict(output_zero_point=U8(0), dtype=np.int8), "dtype"),
    ("qlmm", dict(b=np.float32([[1], [2], [3]])), "b"),
    ("qlmm", dict(a_scale=np.ones((1,) * 5, np.float32)), "a_scale"),  # the result would be 5-D
    ("qlmm", dict(output_zero_point=np.zeros((1, 1, 1, 2, 1), U8)), "output_zero_point"),
]


@pytest.mark.parametrize("function, changes, argument", BAD_ARGUMENTS)
def test_bad_arguments_raise_value_error_naming_the_argument(
    function: str, changes: dict, argument: str
) -> None:
    with pytest.raises(ValueError) as error:
        FUNCTIONS[function](**changes)
    assert isinstance(error.value, DmlError)
    assert str(error.value).startswith(f"{argument}:") or str(error.value).startswith(f"{argument} "), (
        error.value
    )


@pytest.mark.parametrize(
    "call, message",
    [
        (
            lambda: quantized_add(a_scale=1e-50),
            "a_scale: 1e-50 underflows to 0 in float32; a scale of 0 is undefined",
        ),
        (lambda: quantize(scale=[0.5, 1e39]), "scale: 1e+39 overflows float32; scales must be finite"),
        (lambda: quantize(x=np.float16([1]), scale=1e-8), "scale: 1e-08 underflows to 0 in float16"),
        (lambda: quantize(x=np.float16([1]), scale=np.float64(70000)), "scale: 70000.0 overflows float16"),
        (
            lambda: dequantize(scale=np.float64([1, 0.0, 1e-50])),
            "scale: a scale of 0 is undefined in DirectML",
        ),
        (lambda: matmul(b_scale=[np.nan, 1e-50]), "b_scale: scales must be finite (got nan)"),
        (lambda: matmul(output_scale=[[-np.inf], [1.0]]), "output_scale: scales must be finite (got -inf)"),
    ],
)
def test_scale_messages_name_the_value_given(call, message: str) -> None:
    with pytest.raises(DmlError, match=f"^{re.escape(message)}"):
        call()


# -- shapes -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "function, changes, shape, dtype",
    [
        ("quantize", dict(x=np.zeros((0, 3), np.float32)), (0, 3), np.uint8),
        ("quantize", dict(x=np.zeros((2, 0)), zero_point=I8(1)), (2, 0), np.int8),
        ("dequantize", dict(q=np.zeros((3, 0), np.int16), scale=np.float16(1)), (3, 0), np.float16),
        ("add", dict(a=np.zeros((0, 2), np.float16), b=np.float16([1, 2])), (0, 2), np.float16),
        ("qladd", dict(a=np.zeros((0,), I8), b=I8(3)), (0,), np.int8),
        ("qlmm", dict(a=np.zeros((0, 3), U8)), (0, 1), np.uint8),
        ("qlmm", dict(b=np.zeros((3, 0), I8)), (2, 0), np.uint8),
        ("qlmm", dict(a=np.zeros((2, 0, 3), U8)), (2, 0, 1), np.uint8),
    ],
)
def test_zero_size_gives_an_empty_result(function: str, changes: dict, shape: tuple, dtype) -> None:
    result = FUNCTIONS[function](**changes)
    assert result.shape == shape and result.dtype == dtype


def test_matmul_with_k_zero_gives_the_output_zero_point() -> None:
    got = matmul(a=np.zeros((2, 0), U8), b=np.zeros((0, 3), I8), output_zero_point=U8([[7], [9]]))
    assert got.tolist() == [[7, 7, 7], [9, 9, 9]]


@pytest.mark.parametrize(
    "function, changes, value",
    [
        ("quantize", dict(x=np.float32(2.5), scale=1.0), 2),
        ("quantize", dict(x=2.5, scale=np.float32(1.0), zero_point=I8(-1)), 1),
        ("dequantize", dict(q=U8(5), scale=2.0, zero_point=3), 4.0),
        ("add", dict(a=np.float32(1.5), b=2.0), 3.5),
        ("qladd", dict(a=U8(10), b=U8(20)), 17),  # (1 + 4) / 0.3
    ],
)
def test_zero_dimensional_gives_zero_dimensional(function: str, changes: dict, value) -> None:
    result = FUNCTIONS[function](**changes)
    assert isinstance(result, np.ndarray) and result.shape == () and result.item() == value


def test_broadcasting_like_numpy() -> None:
    x = np.float32([[1.0], [2.0], [3.0]])
    got = dmlq.quantize_linear(x, np.float32([0.5, 1.0]), U8([[0], [1], [2]]))
    assert got.tolist() == [[2, 1], [5, 3], [8, 5]]
    assert dmlq.add(np.float32([[1], [2]]), np.float32([10, 20, 30])).shape == (2, 3)
    assert dmlq.quantized_linear_add(
        U8([[1], [2]]), 1.0, None, U8([1, 2, 3]), 1.0, None, 1.0, None
    ).shape == (2, 3)


QUANTIZATION_SHAPES = {
    # case: (function, data operand changes, scales and zero points given)
    "qladd 1-D data, 2-D scale": ("qladd", {}, dict(a_scale=np.float32([[0.1]]))),
    "qladd 3-D zero point": ("qladd", {}, dict(output_zero_point=U8([[[4]]]))),
    "qladd 0-d data": ("qladd", dict(a=U8(1), b=U8(3)), dict(b_scale=np.float32([0.2]))),
    "qlmm 3-D per-tensor scale": ("qlmm", {}, dict(a_scale=np.float32([[[0.1]]]))),
    "qlmm 4-D per-row scale": ("qlmm", {}, dict(a_scale=np.float32([0.1, 0.2]).reshape(1, 1, 2, 1))),
    "qlmm batch and 4-D zero point": (
        "qlmm",
        dict(a=np.stack([MATMUL_ARGS["a"]] * 3)),
        dict(b_zero_point=I8([[[[1]]]])),
    ),
    "qlmm 3-D per-column scale": ("qlmm", {}, dict(b_scale=np.float32([[[0.2]]]))),
}


@pytest.mark.parametrize("case", QUANTIZATION_SHAPES)
def test_scales_and_zero_points_broadcast_into_the_result_like_numpy_operands(case: str) -> None:
    function, data, quantization = QUANTIZATION_SHAPES[case]
    got = FUNCTIONS[function](**data, **quantization)
    arguments = (QL_ADD_ARGS if function == "qladd" else MATMUL_ARGS) | data
    a, b = np.asarray(arguments["a"]), np.asarray(arguments["b"])
    data_shape = np.broadcast_shapes(a.shape, b.shape) if function == "qladd" else np.matmul(a, b).shape
    assert got.shape == np.broadcast_shapes(data_shape, *(np.shape(v) for v in quantization.values()))
    # the same numbers without the leading dimensions: one-element qladd operands as scalars,
    # the matrix multiply's as (M, 1), (1, N) or (1, 1)
    trimmed = {
        name: v.reshape(() if function == "qladd" else v.shape[-2:]) for name, v in quantization.items()
    }
    assert np.array_equal(got, np.broadcast_to(FUNCTIONS[function](**data, **trimmed), got.shape))


def test_matmul_scale_shapes() -> None:
    a, b = U8([[1, 2], [3, 4], [5, 6]]), I8([[1, -1], [2, -2]])
    per_row = matmul(a=a, b=b, a_scale=np.float32([[1], [2], [3]]), b_scale=1.0, output_scale=1.0)
    assert per_row.tolist() == [[5, 0], [22, 0], [51, 0]]
    per_column = [
        matmul(a=a, b=b, a_scale=1.0, b_scale=scale, output_scale=1.0, dtype="int8")
        for scale in (np.float32([1, 2]), np.float32([[1, 2]]), [1.0, 2.0])
    ]
    assert all(p.tolist() == [[5, -10], [11, -22], [17, -34]] for p in per_column)
    per_row_output = matmul(
        a=a,
        b=b,
        a_scale=1.0,
        b_scale=1.0,
        output_scale=[[1.0], [2.0], [4.0]],
        output_zero_point=[[0], [1], [2]],
    )
    assert per_row_output.tolist() == [[5, 0], [7, 0], [6, 0]]  # 11 / 2 = 5.5 rounds to 6


# -- dtype rules ------------------------------------------------------------------------------


def test_quantize_output_dtype_rules() -> None:
    assert quantize().dtype == np.uint8
    assert quantize(dtype="int8").dtype == np.int8
    assert quantize(dtype=np.uint8).dtype == np.uint8
    assert quantize(zero_point=I8(0)).dtype == np.int8
    assert quantize(zero_point=I8([0, 1])).dtype == np.int8
    assert quantize(zero_point=5, dtype="int8").tolist() == [7, 9]  # a Python int takes the output's type
    assert quantize(zero_point=-5, dtype="int8").tolist() == [-3, -1]
    assert quantize(zero_point=I8(5), dtype="int8").dtype == np.int8  # agreeing is fine


def test_operand_conversions() -> None:
    x64 = np.float64([0.3, 1.7, -2.2])
    assert np.array_equal(dmlq.quantize_linear(x64, 0.5), dmlq.quantize_linear(x64.astype(np.float32), 0.5))
    assert dmlq.quantize_linear(np.float16([1.0]), 0.25).tolist() == [4]  # Python scale becomes float16
    assert dmlq.quantize_linear(np.int32([7]), 2.0).tolist() == [4]  # int32 with a float32 scale
    assert dmlq.dequantize_linear(U8([2]), np.float16(0.5)).dtype == np.float16
    assert dmlq.dequantize_linear(U8([2]), np.float64(0.5)).dtype == np.float32
    assert dmlq.dequantize_linear([1, 300], 1.0, np.int16(0)).tolist() == [1.0, 300.0]  # list takes zp's type
    assert dmlq.dequantize_linear([-3], 1.0, I8(0)).tolist() == [-3.0]
    assert dmlq.add(1.0, 2.0).dtype == np.float32
    assert dmlq.add([1.0], np.float16([2.0])).dtype == np.float16
    assert dmlq.add(np.float64([1.0]), [2.0]).dtype == np.float32
    assert dmlq.quantized_linear_add([200], 1.0, None, [100], 1.0, None, 1.0, None).dtype == np.uint8
    assert dmlq.quantized_linear_add([-100], 1.0, I8(0), I8([100]), 1.0, None, 1.0, None).dtype == np.int8
    assert dmlq.quantized_linear_add(I8([-100]), 1.0, None, U8([100]), 1.0, None, 1.0, None).dtype == np.int8
    assert matmul(a=I8([[1, 2, 3]])).dtype == np.int8  # the dtype of a
    assert matmul(output_zero_point=I8(0)).dtype == np.int8


def test_integers_out_of_range_name_the_first_offending_value() -> None:
    with pytest.raises(DmlError, match=re.escape("q: -7 is outside the uint8 range [0, 255]")):
        dmlq.dequantize_linear([[1, 300], [-7, 2]][::-1], 1.0)  # Python ints take q's dtype: uint8
    with pytest.raises(DmlError, match=re.escape("q: 2147483648 is outside the int32 range")):
        dmlq.dequantize_linear([5, 2**31], 1.0, np.int32(0))  # ... or their zero point's
    with pytest.raises(DmlError, match=re.escape("a_zero_point: 128 is outside the int8 range [-128, 127]")):
        quantized_add(a=I8([1]), b=I8([1]), a_zero_point=128)


BYTE_ORDER_CASES = {
    "quantize float32": (
        "quantize",
        dict(x=np.float32([[0.5, 7], [-3, 2.5]]), scale=np.float32([[0.5], [2]])),
    ),
    "quantize float16": ("quantize", dict(x=np.float16([0.5, 7]), scale=np.float16(0.25), zero_point=I8(3))),
    "quantize int32": ("quantize", dict(x=np.int32([5, -7]), scale=np.float64(2), zero_point=U8(9))),
    "dequantize int16": (
        "dequantize",
        dict(q=np.int16([5, -700]), scale=np.float32(0.5), zero_point=np.int16(3)),
    ),
    "dequantize float16": ("dequantize", dict(q=np.uint16([5, 700]), scale=np.float16([0.5, 2]))),
    "dequantize list": ("dequantize", dict(q=[-300, 2], scale=1.0, zero_point=np.int32([1, 2]))),
    "add float32": ("add", dict(a=np.float32([1, 2]), b=np.float32([[3], [4]]))),
    "add float16": ("add", dict(a=np.float16([1, 2]), b=[3.0, 4.0], fused_activation="elu")),
    "qladd": (
        "qladd",
        dict(
            a_scale=np.float32(0.1),
            b_scale=np.float64(0.2),
            output_scale=np.float32(0.3),
            a_zero_point=U8(1),
        ),
    ),
    "qlmm": (
        "qlmm",
        dict(a=U8([[1, 2, 3], [4, 5, 6]]), a_scale=np.float32([[0.1], [0.2]]), b_scale=np.float32([0.2])),
    ),
}


@pytest.mark.parametrize("case", BYTE_ORDER_CASES)
def test_byte_swapped_operands_behave_like_native_ones(case: str) -> None:
    function, arguments = BYTE_ORDER_CASES[case]
    want = FUNCTIONS[function](**arguments)
    swappable = [name for name, value in arguments.items() if isinstance(value, (np.ndarray, np.generic))]
    for name in swappable:
        value = np.asarray(arguments[name])
        got = FUNCTIONS[function](**arguments | {name: value.astype(value.dtype.newbyteorder())})
        assert got.dtype == want.dtype and np.array_equal(got, want), name


def test_non_contiguous_reversed_and_big_endian_inputs() -> None:
    base = np.arange(24, dtype=np.float32).reshape(4, 6) / 4
    views = [base[::2, 1::2], base[::-1], base.T, base.astype(">f4")]
    for view in views:
        assert np.array_equal(
            dmlq.quantize_linear(view, 0.5), dmlq.quantize_linear(np.ascontiguousarray(view), 0.5)
        )
        assert np.array_equal(dmlq.add(view, view[..., ::-1]), np.ascontiguousarray(view) + view[..., ::-1])


# -- out= -------------------------------------------------------------------------------------


def test_out_is_written_and_returned() -> None:
    out = np.zeros(2, np.float32)
    assert add(out=out) is out and out.tolist() == [4.0, 6.0]


@pytest.mark.parametrize("function", FUNCTIONS)
@pytest.mark.parametrize("layout", ["packed", "strided", "reversed", "fortran", "byte-swapped", "0-d"])
def test_every_function_writes_out_in_any_layout(function: str, layout: str) -> None:
    grid = {
        "quantize": dict(x=np.float32([[0.5, 1.5, 2.5], [3.5, -1.0, 7.0]])),
        "dequantize": dict(q=U8([[1, 2, 3], [250, 0, 9]])),
        "add": dict(a=np.float32([[1, 2, 3], [4, 5, 6]]), b=np.float32([0.5, -9, 2])),
        "qladd": dict(a=U8([[1, 2, 3], [4, 5, 6]]), b=U8([7, 8, 9])),
        "qlmm": dict(a=U8([[1, 2], [3, 4]]), b=I8([[1, 2, 3], [4, 5, 6]])),
    }[function]
    if layout == "0-d":
        if function == "qlmm":
            pytest.skip("the matrix multiply has no 0-d result")
        grid = {name: value[0, 0] if value.ndim == 2 else value[0] for name, value in grid.items()}
    want = FUNCTIONS[function](**grid)
    storage = np.zeros((want.shape[0] * 2, want.shape[-1] * 2), want.dtype) if want.ndim else None
    out = {
        "packed": lambda: np.zeros_like(want),
        "strided": lambda: storage[::2, 1::2],
        "reversed": lambda: storage[::-2, ::-2],
        "fortran": lambda: np.asfortranarray(np.zeros_like(want)),
        "byte-swapped": lambda: np.zeros(want.shape, want.dtype.newbyteorder()),
        "0-d": lambda: np.zeros((), want.dtype),
    }[layout]()
    assert FUNCTIONS[function](**grid, out=out) is out
    assert np.array_equal(out, want) and out.shape == want.shape


@pytest.mark.parametrize("function", FUNCTIONS)
def test_out_must_be_exactly_the_result(function: str) -> None:
    want = FUNCTIONS[function]()
    wrong_dtype = np.uint8 if want.dtype != np.uint8 else np.int8
    read_only = np.zeros_like(want)
    read_only.flags.writeable = False
    for out, message in [
        (np.zeros(want.shape, wrong_dtype), f"out: expected shape {want.shape} and dtype {want.dtype}, got"),
        (np.zeros((*want.shape, 1), want.dtype), "out: expected shape"),
        (np.zeros(want.shape[1:], want.dtype), "out: expected shape"),
        (want.tolist(), "out: must be a numpy.ndarray, not list"),
        (read_only, "out: array is read-only"),
    ]:
        with pytest.raises(DmlError, match=f"^{re.escape(message)}"):
            FUNCTIONS[function](out=out)


def test_out_aliasing_an_input_of_another_dtype() -> None:
    x = np.float32([0.5, 1.5, 2.5, 3.5, 300.0])
    buffer = x.copy()
    same_bytes = buffer.view(U8)[::4]  # each output element inside its own input element
    assert dmlq.quantize_linear(buffer, 1.0, out=same_bytes) is same_bytes
    assert same_bytes.tolist() == dmlq.quantize_linear(x, 1.0).tolist()
    buffer = x.copy()
    overlapping = buffer.view(U8)[:5]  # output elements inside the first two inputs: computed aside
    dmlq.quantize_linear(buffer, 1.0, out=overlapping)
    assert overlapping.tolist() == dmlq.quantize_linear(x, 1.0).tolist()
    storage = np.zeros(4, np.float32)
    q = storage.view(U8)[:6]
    q[:] = [1, 2, 3, 4, 5, 6]
    dmlq.dequantize_linear(q[:4], 0.5, out=storage)  # the float32 output overwrites q's bytes
    assert storage.tolist() == [0.5, 1.0, 1.5, 2.0]


def test_out_aliasing_quantized_operands() -> None:
    a, b = U8([[1, 2], [3, 4]]), I8([[1, -1], [2, 5]])
    want = dmlq.quantized_linear_matrix_multiply(a, 1.0, None, b.view(U8), 1.0, None, 1.0, None)
    assert dmlq.quantized_linear_matrix_multiply(a, 1.0, None, b.view(U8), 1.0, None, 1.0, None, out=a) is a
    assert np.array_equal(a, want)  # a @ b read a's rows after the first was written: computed aside
    a = U8([10, 20, 30])
    want = dmlq.quantized_linear_add(a, 1.0, None, a[::-1], 1.0, None, 1.0, None)
    dmlq.quantized_linear_add(a, 1.0, None, a[::-1], 1.0, None, 1.0, None, out=a)
    assert np.array_equal(a, want)


def test_matmul_out_with_k_zero_holds_the_output_zero_point() -> None:
    out = np.full((2, 3), 99, U8)
    matmul(a=np.zeros((2, 0), U8), b=np.zeros((0, 3), I8), output_zero_point=U8([[7], [9]]), out=out)
    assert out.tolist() == [[7, 7, 7], [9, 9, 9]]


@pytest.mark.parametrize("alias", ["a", "b"])
def test_out_aliasing_an_input_in_place(alias: str, rng: np.random.Generator) -> None:
    a = rng.standard_normal((64, 33)).astype(np.float32)
    b = rng.standard_normal((64, 33)).astype(np.float32)
    want = dmlq.add(a.copy(), b.copy(), fused_activation="elu")
    target = a if alias == "a" else b
    assert dmlq.add(a, b, fused_activation="elu", out=target) is target
    assert np.array_equal(target, want)


def test_out_aliasing_with_broadcast_and_shifted_views() -> None:
    x = np.arange(8, dtype=np.float32)
    dmlq.add(x[:7], x[1:], out=x[1:])  # out overlaps both inputs, shifted by one element
    assert x.tolist() == [0, 1, 3, 5, 7, 9, 11, 13]
    y = np.ones((3, 3), np.float32) * np.arange(3, dtype=np.float32)
    want = y + y.T
    dmlq.add(y, y.T, out=y.T)  # out is b's exact layout, and overlaps a transposed
    assert np.array_equal(y.T, want)
    row = np.float32([1, 2, 3])
    grid = np.zeros((2, 3), np.float32)
    dmlq.add(row, grid, out=grid)
    assert grid.tolist() == [[1, 2, 3], [1, 2, 3]]


def test_out_refuses_read_only() -> None:
    out = np.zeros(2, np.float32)
    out.flags.writeable = False
    with pytest.raises(ValueError, match="^out: "):
        add(out=out)


# -- inputs are never modified ---------------------------------------------------------------


def test_inputs_are_never_modified(rng: np.random.Generator) -> None:
    x = rng.standard_normal((5, 7)).astype(np.float32)
    q = rng.integers(0, 256, (5, 7)).astype(np.uint8)
    s, zp = np.float32([[0.1], [0.2], [0.3], [0.4], [0.5]]), np.uint8([[1], [2], [3], [4], [5]])
    b = rng.integers(-128, 128, (7, 4)).astype(np.int8)
    arguments = [x, q, s, zp, b]
    copies = [argument.copy() for argument in arguments]
    dmlq.quantize_linear(x, s, zp)
    dmlq.dequantize_linear(q, s, zp)
    dmlq.add(x, x.T.T, fused_activation="gelu")
    dmlq.quantized_linear_add(q, 0.1, np.uint8(3), q[::-1], 0.2, None, 0.3, np.uint8(4))
    dmlq.quantized_linear_matrix_multiply(q, s, zp, b, 0.01, np.int8(2), 0.5, None)
    for argument, copy in zip(arguments, copies):
        assert np.array_equal(argument, copy)


@pytest.mark.parametrize("name", dmlq.numpy_api.__all__)
def test_every_parameter_and_result_is_annotated(name: str) -> None:
    function = getattr(dmlq, name)
    hints = typing.get_type_hints(function)
    assert set(hints) == {*inspect.signature(function).parameters, "return"}
    assert hints["return"] == RETURNS.get(name, np.ndarray)
    assert hints.get("out", np.ndarray | None) == np.ndarray | None
    assert hints.get("dtype", DTypeLike | None) == DTypeLike | None  # NumPy 2.4's DTypeLike omits None
    packed_b = name == "quantized_linear_matrix_multiply"  # b may be a PackedMatrix
    accepted = (ArrayLike, ArrayLike | None, *((ArrayLike | dmlq.PackedMatrix,) if packed_b else ()))
    assert all(hints[p] in accepted for p in ("a", "b", "c", "x", "q", "w", "scale", "bias") if p in hints)
    if name in ("add", "gemm"):
        assert hints["fused_activation"] == activations.Activation | str | None


RETURNS = {"pack_matrix_multiply_b": dmlq.PackedMatrix,
           "dynamic_quantize_linear": tuple[np.ndarray, np.ndarray, np.ndarray]}  # fmt: skip


def test_readme_one_liner_in_a_fresh_interpreter() -> None:
    # The installed dmlq, as the tests import it: src/ holds no compiled core outside an editable install.
    result = subprocess.run(
        [sys.executable, "-c", "import dmlq; print(dmlq.quantize_linear([0.5, 1.5, 2.5], 1.0))"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert result.stdout == "[0 2 2]\n"


def test_values_beyond_float32_become_infinities_without_warnings() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert dmlq.quantize_linear([1e40, -1e40, 3.0], 1.0, I8(0)).tolist() == [127, -128, 3]
        assert dmlq.add(np.float64([1e300]), [1.0]).tolist() == [np.inf]
