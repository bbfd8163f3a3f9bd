"""One rule for every argument (API.md, "Argument rules, stated once"; issue 20 item 3): each divergence
the two copies of the rules had, as the call that showed it, now decided by the one rule set of
:mod:`dmlq.numpy_api.rules` whichever route the call takes (the one-step C call or the general path)."""

from __future__ import annotations

import importlib
import re
from contextlib import nullcontext
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import dmlq
from dmlq import DmlError
from dmlq.numpy_api import one_step

U8, I8 = np.uint8, np.int8
OTHER_INTEGERS = [np.int16, np.int32, np.int64, np.uint16, np.uint32, np.uint64, np.bool_]
A, B = U8([[1, 2], [3, 4]]), I8([[1, -1], [2, 0]])
X = U8([[[[1, 2], [3, 4]], [[5, 6], [7, 8]]]])  # [N, C, H, W]
W = I8([[[[1]], [[-1]]], [[[2]], [[0]]]])  # two 1 x 1 filters


def _convolution(x=X, x_zero_point=None, w=W, w_zero_point=None, bias=None, output_zero_point=None):
    return dmlq.quantized_linear_convolution(x, 0.5, x_zero_point, w, 0.5, w_zero_point, bias, 1.0,
                                             output_zero_point)  # fmt: skip


def _pooling(x=X, x_zero_point=None, output_zero_point=None):
    return dmlq.quantized_linear_average_pooling(
        x, 0.5, x_zero_point, 0.5, output_zero_point, window_size=[2, 2]
    )


def _to_float(a=A, a_zero_point=None, b=A, b_zero_point=None, bias=None):
    return dmlq.matrix_multiply_integer_to_float(a, 0.5, a_zero_point, b, 0.25, b_zero_point, bias)


def _both_routes(call) -> list[str]:
    """The DmlError messages ``call()`` raises with the one-step route on and off (one each)."""
    messages = []
    for route in (nullcontext(), one_step.off()):
        with route, pytest.raises(DmlError) as error:
            call()
        messages.append(str(error.value))
    return messages


# -- a NumPy zero point has its tensor's dtype: any other is a ValueError, never converted ----------

ZERO_POINT_CALLS = {
    "quantize_linear": lambda z: dmlq.quantize_linear(np.float32([1, 2]), np.float32(0.5), z),
    "quantize_linear dtype=int8": lambda z: dmlq.quantize_linear(np.float32([1, 2]), 0.5, z, dtype="int8"),
    "quantize_linear axis=": lambda z: dmlq.quantize_linear(
        np.float32([[1, 2]]), np.float32([0.5, 1]), np.array([z, z]), axis=1
    ),  # fmt: skip
    "quantize_linear int4": lambda z: dmlq.quantize_linear(np.float32([1, 2]), 0.5, z, dtype="int4"),
    "dequantize_linear uint8 q": lambda z: dmlq.dequantize_linear(U8([1, 2]), 0.5, z),
    "dequantize_linear int4 q": lambda z: dmlq.dequantize_linear(np.array([1, 2], ml_dtypes.int4), 0.5, z),
    "quantized_linear_add a_zero_point": lambda z: dmlq.quantized_linear_add(A, 0.5, z, A, 0.5, 0, 0.5, 0),
    "quantized_linear_add b_zero_point": lambda z: dmlq.quantized_linear_add(A, 0.5, 0, A, 0.5, z, 0.5, 0),
    "quantized_linear_add output_zero_point": lambda z: dmlq.quantized_linear_add(
        A, 0.5, 0, A, 0.5, 0, 0.5, z
    ),  # fmt: skip
    "matrix multiply a_zero_point": lambda z: dmlq.quantized_linear_matrix_multiply(
        A, 0.5, z, B, 0.5, 0, 1.0, 0
    ),  # fmt: skip
    "matrix multiply b_zero_point": lambda z: dmlq.quantized_linear_matrix_multiply(
        A, 0.5, 0, B, 0.5, z, 1.0, 0
    ),  # fmt: skip
    "matrix multiply per-column b_zero_point": lambda z: dmlq.quantized_linear_matrix_multiply(
        A, 0.5, 0, B, 0.5, np.array([z, z]), 1.0, 0
    ),
    "matrix multiply output_zero_point": lambda z: dmlq.quantized_linear_matrix_multiply(
        A, 0.5, 0, B, 0.5, 0, 1.0, z
    ),  # fmt: skip
    "pack_matrix_multiply_b": lambda z: dmlq.pack_matrix_multiply_b(B, 0.5, z),
    "convolution x_zero_point": lambda z: _convolution(x_zero_point=z),
    "convolution per-filter w_zero_point": lambda z: _convolution(
        w_zero_point=np.array([z, z]).reshape(2, 1, 1, 1)
    ),
    "convolution output_zero_point": lambda z: _convolution(output_zero_point=z),
    "convolution_integer w_zero_point": lambda z: dmlq.convolution_integer(X, None, W, z),
    "pooling x_zero_point": lambda z: _pooling(x_zero_point=z),
    "pooling output_zero_point": lambda z: _pooling(output_zero_point=z),
    "matrix_multiply_integer a_zero_point": lambda z: dmlq.matrix_multiply_integer(A, z, B, None),
    "matrix_multiply_integer b_zero_point": lambda z: dmlq.matrix_multiply_integer(A, None, B, z),
    "integer to float a_zero_point": lambda z: _to_float(a_zero_point=z),  # int16 to uint32 are a's dtypes
    "integer to float b_zero_point": lambda z: _to_float(b_zero_point=z),
}


@pytest.mark.parametrize("dtype", OTHER_INTEGERS, ids=lambda t: np.dtype(t).name)
@pytest.mark.parametrize("call", ZERO_POINT_CALLS)
def test_a_numpy_zero_point_of_another_integer_dtype_is_refused(call: str, dtype: type) -> None:
    # quantize_linear(np.float32([1, 2]), np.float32(0.5), np.uint16(3)) returned [5 7] (uint8).
    messages = _both_routes(lambda: ZERO_POINT_CALLS[call](dtype(3)))
    assert messages[0] == messages[1]
    rule = r"is not a zero point dtype|differs from \w+'s uint8"  # int32 is one of int32 data (dequantize)
    assert re.match(rf"(\w+_)?zero_point: dtype {np.dtype(dtype).name} ({rule})", messages[0])


def test_dequantize_refuses_int32_and_int64_zero_points_of_uint8_data_alike() -> None:
    # It refused np.int32(3) ("differs from its tensor's uint8") but converted np.int64(3).
    assert _both_routes(lambda: dmlq.dequantize_linear(U8([1, 2]), 0.5, np.int32(3)))[0] == (
        "zero_point: dtype int32 differs from q's uint8"
    )
    assert _both_routes(lambda: dmlq.dequantize_linear(U8([1, 2]), 0.5, np.int64(3)))[0] == (
        "zero_point: dtype int64 is not a zero point dtype (int32, int16, int8, uint32, uint16, uint8): "
        "a NumPy zero point has q's dtype, never converted (a Python int takes it)"
    )


def test_a_zero_point_of_the_tensors_dtype_or_a_python_int_is_taken() -> None:
    assert dmlq.dequantize_linear(np.int32([1, 300]), 0.5, np.int32(100)).tolist() == [-49.5, 100.0]
    assert dmlq.quantize_linear(np.float32([1, 2]), 0.5, 3, dtype="int8").dtype == np.int8
    assert dmlq.quantize_linear(np.float32([1, 2]), 0.5, np.array(3, ">u1")).tolist() == [5, 7]


# -- integer data only in the dtypes the operator's support table lists -----------------------------


def _quantized_add(a: object, b: object) -> np.ndarray:
    return dmlq.quantized_linear_add(a, 0.5, None, b, 0.5, None, 0.5, None)


def _matrix_multiply(a: object, b: object) -> np.ndarray:
    return dmlq.quantized_linear_matrix_multiply(a, 1.0, None, b, 1.0, None, 2.0, None)


DATA_CALLS = {  # each call with data of a dtype: (call, the argument, the dtypes its table lists)
    "quantize_linear x": (lambda d: dmlq.quantize_linear(np.array([1, 2], d), 0.5), "x",
                          "float32, float16, int32"),
    "dequantize_linear q": (lambda d: dmlq.dequantize_linear(np.array([1, 2], d), 0.5), "q",
                            "int32, int16, int8, uint32, uint16, uint8"),
    "dequantize_linear q axis=": (lambda d: dmlq.dequantize_linear(np.array([1, 2], d), np.ones(2), axis=0),
                                  "q", "int8, int4, uint8, uint4"),
    "quantized_linear_add a": (lambda d: _quantized_add(np.array([1, 2], d), U8([1, 2])), "a", "int8, uint8"),
    "quantized_linear_add b": (lambda d: _quantized_add(U8([1, 2]), np.array([1, 2], d)), "b", "int8, uint8"),
    "matrix multiply a": (lambda d: _matrix_multiply(np.array([[1, 2]], d), B), "a", "int8, uint8"),
    "matrix multiply b": (lambda d: _matrix_multiply(A, np.array(B, d)), "b", "int8, uint8"),
    "add a": (lambda d: dmlq.add(np.array([1, 2], d), np.float32([1, 2])), "a", "float32, float16"),
    "convolution x": (lambda d: _convolution(x=X.astype(d)), "x", "int8, uint8"),
    "convolution w": (lambda d: _convolution(w=W.astype(d)), "w", "int8, uint8"),
    "convolution bias": (lambda d: _convolution(bias=np.array([[[1]], [[2]]], d)), "bias", "int32"),
    "convolution_integer x": (lambda d: dmlq.convolution_integer(X.astype(d), None, W, None), "x",
                              "int8, uint8"),
    "pooling x": (lambda d: _pooling(x=X.astype(d)), "x", "int8, uint8"),
    "matrix_multiply_integer b": (lambda d: dmlq.matrix_multiply_integer(A, None, B.astype(d), None), "b",
                                  "int8, uint8"),
    "integer to float b": (lambda d: _to_float(b=A.astype(d)), "b",
                           "int32, int16, int8, uint32, uint16, uint8"),
    "integer to float bias": (lambda d: _to_float(bias=np.array([1, 2], d)), "bias", "float32, float16"),
    "dynamic_quantize_linear x": (lambda d: dmlq.dynamic_quantize_linear(np.array([1, 2], d)), "x",
                                  "float32, float16"),
    "gemm c": (lambda d: dmlq.gemm(np.float32([[1]]), np.float32([[2]]), np.array([3], d)), "c",
               "float32, float16"),
}  # fmt: skip
UNLISTED = {
    "quantize_linear x": [np.uint8, np.int8, np.int16, np.uint16, np.int64, np.uint32, np.bool_],
    "dequantize_linear q": [np.int64, np.uint64, np.bool_, np.float32, np.float16],
    "dequantize_linear q axis=": [np.int16, np.int32, np.int64, np.bool_],
    "quantized_linear_add a": [np.int64, np.int16, np.uint16, np.int32, np.bool_],
    "quantized_linear_add b": [np.int64, np.uint32],
    "matrix multiply a": [np.int16, np.int64, np.uint64],
    "matrix multiply b": [np.int16, np.int32],
    "add a": [np.int32, np.uint8, np.bool_],
    "convolution x": [np.int16, np.int32, np.int64, np.uint16, np.bool_],
    "convolution w": [np.int32, np.uint64],
    "convolution bias": [np.int8, np.int16, np.int64, np.uint32, np.bool_],
    "convolution_integer x": [np.int16, np.int64],
    "pooling x": [np.int16, np.int32, np.bool_],
    "matrix_multiply_integer b": [np.int16, np.int32],
    "integer to float b": [np.int64, np.uint64, np.bool_],
    "integer to float bias": [np.int32, np.uint8, np.bool_],
    "dynamic_quantize_linear x": [np.int8, np.uint8, np.int32, np.int64, np.bool_],
    "gemm c": [np.int32, np.uint8, np.bool_],
}


@pytest.mark.parametrize(("call", "dtype"), [(call, t) for call, dtypes in UNLISTED.items() for t in dtypes],
                         ids=lambda v: v if isinstance(v, str) else np.dtype(v).name)  # fmt: skip
def test_integer_data_of_a_dtype_the_table_does_not_list_is_refused(call: str, dtype: type) -> None:
    # quantize_linear(np.uint8([1, 2]), 0.5) read uint8 as int32; an int64 a of the quantized add and an
    # int16 a of the matrix multiply were converted too.
    function, name, listed = DATA_CALLS[call]
    messages = _both_routes(lambda: function(dtype))
    assert (
        messages[0]
        == messages[1]
        == f"{name}: dtype {np.dtype(dtype).name} is not supported (expected {listed})"
    )


def test_int64_data_is_refused_by_its_dtype_not_by_its_values() -> None:
    # It said "q: 300 is outside the uint8 range [0, 255]" where np.int32([1, 300]) computes.
    assert _both_routes(lambda: dmlq.dequantize_linear(np.int64([1, 300]), 0.5))[0] == (
        "q: dtype int64 is not supported (expected int32, int16, int8, uint32, uint16, uint8)"
    )
    assert dmlq.dequantize_linear(np.int32([1, 300]), 0.5).tolist() == [0.5, 150.0]


def test_lists_and_python_ints_take_the_operators_dtype() -> None:
    assert dmlq.dequantize_linear([1, 2], 0.5, axis=0, block_size=0).dtype == np.float32  # q: uint8
    four_bit = dmlq.dequantize_linear([1, -2], 1.0, np.array(0, ml_dtypes.int4), axis=None, block_size=0)
    assert four_bit.tolist() == [1.0, -2.0]  # q takes the zero point's int4
    assert dmlq.quantized_linear_matrix_multiply([[1, 2]], 1.0, np.int8(0), [[1], [1]], 1.0, None, 1.0,
                                                 None).dtype == np.int8  # fmt: skip


# -- any view NumPy can describe, as input or out -----------------------------------------------------

REVERSED_LENGTH_ONE = {
    "quantize_linear": lambda: dmlq.quantize_linear(np.float32([2.0])[::-1], 0.5),
    "dequantize_linear": lambda: dmlq.dequantize_linear(U8([3])[::-1], 0.5),
    "add": lambda: dmlq.add(np.float32([2.0])[::-1], np.float32([1.0])),
    "quantized_linear_add": lambda: dmlq.quantized_linear_add(
        U8([2])[::-1], 0.5, None, U8([4]), 0.5, None, 1.0, None
    ),  # fmt: skip
    "matrix multiply": lambda: dmlq.quantized_linear_matrix_multiply(
        U8([[1, 2]])[::-1], 1.0, None, B[:, :1], 1.0, None, 1.0, None
    ),  # fmt: skip
    "quantize_linear blockwise": lambda: dmlq.quantize_linear(np.float32([2.0])[::-1], 0.5, axis=0),
    "convolution": lambda: dmlq.quantized_linear_convolution(
        U8([[[[3]]]])[::-1, ::-1],
        0.5,
        None,
        I8([[[[2]]]])[::-1],
        np.float32([[[[0.5]]]])[::-1],
        None,
        np.int32([[[7]]])[::-1],
        1.0,
        None,
    ),
    "convolution_integer": lambda: dmlq.convolution_integer(
        U8([[[3, 4]]])[::-1], None, I8([[[2]]])[:, ::-1], None
    ),
    "pooling": lambda: dmlq.quantized_linear_average_pooling(
        U8([[[[3]]]])[:, ::-1], 0.5, None, 1.0, None, window_size=[1, 1]
    ),
    "matrix_multiply_integer": lambda: dmlq.matrix_multiply_integer(U8([[1, 2]])[::-1], None, B[:, :1], None),
    "integer to float": lambda: dmlq.matrix_multiply_integer_to_float(
        U8([[1, 2]])[::-1], np.float32([[0.5]])[::-1], None, A[:, :1], 1.0, None, np.float32([1.0])[::-1]
    ),
    "dynamic_quantize_linear": lambda: dmlq.dynamic_quantize_linear(np.float32([2.0])[::-1])[0],
    "gemm": lambda: dmlq.gemm(
        np.float32([[1, 2]])[::-1], np.float32([[3], [4]]), np.float32([[5]])[::-1, ::-1]
    ),
}


@pytest.mark.parametrize("call", REVERSED_LENGTH_ONE)
def test_a_negative_stride_on_a_length_one_axis_is_a_valid_input(call: str) -> None:
    # quantize_linear(np.float32([2.0])[::-1], 0.5) raised "strides[0] = -1 must be an integer from 0 ...".
    with one_step.off():
        general = REVERSED_LENGTH_ONE[call]()
    one = REVERSED_LENGTH_ONE[call]()
    assert general.dtype == one.dtype and general.tobytes() == one.tobytes()


@pytest.mark.parametrize("dtype", [None, "uint8"])
def test_a_negative_stride_on_a_length_one_axis_is_a_valid_out(dtype) -> None:
    # The one-step C call wrote into it; the general path (dtype= takes it) refused it.
    out = np.zeros(1, np.uint8)[::-1]
    assert dmlq.quantize_linear(np.float32([2.0]), 0.5, dtype=dtype, out=out) is out
    assert out.tolist() == [4]


@pytest.mark.parametrize("out", ["byte-swapped", "reversed"])
def test_blockwise_out_follows_the_same_rule(out: str) -> None:
    # The blockwise route refused a byte-swapped out that the element-wise route takes.
    expected = dmlq.dequantize_linear(U8([[1, 2], [3, 4]]), np.float32([1, 2]), axis=1)
    given = np.zeros((2, 2), ">f4") if out == "byte-swapped" else np.zeros((2, 2), np.float32)[::-1, ::-1]
    assert dmlq.dequantize_linear(U8([[1, 2], [3, 4]]), np.float32([1, 2]), axis=1, out=given) is given
    assert np.array_equal(given, expected)


def test_blockwise_out_read_only_is_a_dml_error() -> None:
    out = np.zeros(2, np.uint8)
    out.flags.writeable = False
    with pytest.raises(DmlError, match="^out: array is read-only$"):
        dmlq.quantize_linear(np.float32([1, 2]), np.float32([1, 1]), axis=0, out=out)


# -- blockwise: block_size divides the blocked axis --------------------------------------------------


def test_a_block_size_that_does_not_divide_its_axis_names_axis_and_sizes() -> None:
    x = np.zeros((2, 6), np.float32)
    with pytest.raises(DmlError, match=r"^block_size: 4 does not divide axis 1 of size 6"):
        dmlq.quantize_linear(x, np.ones((2, 2), np.float32), axis=1, block_size=4)  # ONNX's last block of 2
    with pytest.raises(DmlError, match=r"^block_size: 4 does not divide axis 0 of size 6"):
        dmlq.dequantize_linear(U8(x.T), np.ones((2, 2), np.float32), axis=0, block_size=4)


@pytest.mark.parametrize(
    "call",
    [
        lambda: dmlq.quantize_linear(np.zeros((0, 4), np.float32), np.float32([1, 1, 1, 1]), axis=1),
        lambda: dmlq.dequantize_linear(np.zeros((0, 4), np.uint8), np.ones((0, 2), np.float32), axis=1,
                                       block_size=2),
        lambda: dmlq.quantize_linear(np.zeros(0, np.float32), 1.0, dtype="int4"),
    ],
    ids=["quantize axis=", "dequantize block_size=", "quantize int4"],
)  # fmt: skip
def test_zero_size_blockwise_arrays_give_an_empty_result(call) -> None:
    # The blockwise route described them as DirectML tensors, whose sizes are at least 1, and refused them.
    assert call().size == 0


# -- the rules written down (tests/test_docs.py runs the page's examples) -------------------------------

DOCUMENT = Path(__file__).resolve().parents[1] / "docs" / "arguments.md"


def test_the_rules_document_names_code_that_exists() -> None:
    names = set(re.findall(r"`(dmlq\.numpy_api[\w.]*)`", DOCUMENT.read_text()))
    assert len(names) > 20
    for name in names:
        module, _, attribute = name.rpartition(".")
        try:
            importlib.import_module(name)
        except ModuleNotFoundError:
            assert hasattr(importlib.import_module(module), attribute), name
