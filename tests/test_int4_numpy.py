"""The NumPy layer's 4-bit and blockwise calls: ONNX's axis/block_size (opset 21), ml_dtypes results."""

from __future__ import annotations

import subprocess
import sys

import ml_dtypes
import numpy as np
import pytest

import dmlq
from dmlq import DmlError, reference

INT4, UINT4 = np.dtype(ml_dtypes.int4), np.dtype(ml_dtypes.uint4)


def test_the_issues_one_liner_prints_the_right_values() -> None:
    code = ("import dmlq, ml_dtypes; print(dmlq.dequantize_linear("
            "dmlq.quantize_linear([0.5, -3.0, 9.0], 1.0, dtype='int4'), 1.0))")  # fmt: skip
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[ 0. -3.  7.]"


@pytest.mark.parametrize("dtype", ["int4", "uint4", ml_dtypes.int4, ml_dtypes.uint4, INT4])
def test_dtype_spellings_give_ml_dtypes_arrays(dtype) -> None:
    q = dmlq.quantize_linear([1.0, 2.5, 100.0], 0.5, dtype=dtype)
    assert q.dtype == np.dtype(ml_dtypes.int4 if str(np.dtype(q.dtype)) == "int4" else ml_dtypes.uint4)
    assert q.astype(int).tolist() == [2, 5, 7 if q.dtype == INT4 else 15]


@pytest.mark.parametrize("dtype", [INT4, UINT4])
@pytest.mark.parametrize(("shape", "axis", "block"), [((8, 64), 1, 32), ((8, 64), 0, 4), ((3, 5, 6), -1, 3)])
def test_blockwise_round_trip_equals_the_reference(dtype, shape, axis, block) -> None:
    rng = np.random.default_rng(block)
    x = rng.normal(size=shape).astype(np.float32) * 4
    blocks = list(shape)
    blocks[axis] //= block
    scale = rng.uniform(0.25, 1.0, blocks).astype(np.float32)
    info = ml_dtypes.iinfo(dtype)
    zero_point = rng.integers(info.min, info.max + 1, blocks).astype(dtype)
    q = dmlq.quantize_linear(x, scale, zero_point, axis=axis, block_size=block)
    assert q.dtype == dtype and q.shape == shape
    assert q.tobytes() == reference.quantize(x, scale, zero_point, dtype).tobytes()
    y = dmlq.dequantize_linear(q, scale, zero_point, axis=axis, block_size=block)
    assert y.tobytes() == reference.dequantize(q, scale, zero_point, np.float32).tobytes()


def test_per_axis_scales_and_float16() -> None:
    x = np.float16([[1, 2], [3, 4], [5, 6]])
    q = dmlq.quantize_linear(x, np.float16([1, 2, 4]), dtype="uint4", axis=0)
    assert q.astype(int).tolist() == [[1, 2], [2, 2], [1, 2]]
    y = dmlq.dequantize_linear(q, np.float16([1, 2, 4]), axis=0)
    assert y.dtype == np.float16 and y.tolist() == [[1, 2], [4, 4], [4, 8]]


def test_8_bit_with_axis_and_block_size() -> None:
    q = dmlq.quantize_linear(
        np.float32([[1, 2, 3, 4]]), np.float32([[1, 2]]), np.int8([[0, 1]]), axis=1, block_size=2
    )
    assert q.dtype == np.int8 and q.tolist() == [[1, 2, 3, 3]]
    assert dmlq.dequantize_linear(
        q, np.float32([[1, 2]]), np.int8([[0, 1]]), axis=1, block_size=2
    ).tolist() == [[1, 2, 4, 4]]


def test_a_large_weight_matches_the_reference() -> None:
    rng = np.random.default_rng(5)
    q = rng.integers(-8, 8, (256, 1024)).astype(ml_dtypes.int4)
    scale = rng.uniform(0.01, 1, (256, 8)).astype(np.float16)
    y = dmlq.dequantize_linear(q, scale, axis=1, block_size=128)
    assert y.tobytes() == reference.dequantize(q, scale, None, np.float16).tobytes()


def test_out_receives_the_result() -> None:
    out = np.zeros(3, ml_dtypes.int4)
    assert dmlq.quantize_linear([1.0, -2.0, 3.0], 1.0, dtype="int4", out=out) is out
    assert out.astype(int).tolist() == [1, -2, 3]


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: dmlq.quantize_linear(np.zeros((2, 6), np.float32), np.ones((2, 2), np.float32), dtype="int4",
                                      axis=1, block_size=4),
         r"block_size: 4 does not divide axis 1 of size 6"),
        (lambda: dmlq.quantize_linear(np.zeros((2, 6), np.float32), np.ones((2, 2), np.float32), dtype="int4",
                                      axis=1, block_size=2), r"scale: shape \(2, 2\) must be \(2, 3\)"),
        (lambda: dmlq.quantize_linear(np.zeros(4, np.float32), np.ones(3, np.float32), dtype="int4"),
         r"scale: shape \(3,\) does not broadcast"),
        (lambda: dmlq.quantize_linear(np.zeros(4, np.float32), np.ones(3, np.float32), dtype="int4", axis=0),
         r"scale: shape \(3,\) must be \(4,\) along axis 0"),
        (lambda: dmlq.quantize_linear([1.0], 1.0, np.array([1], ml_dtypes.uint4), dtype="int4"),
         r"dtype: int4 disagrees with zero_point's dtype uint4"),
        (lambda: dmlq.dequantize_linear(np.array([1], ml_dtypes.int4), 1.0, np.uint8(1)),
         r"zero_point: dtype uint8 differs from q's int4"),
        (lambda: dmlq.quantize_linear([1.0], 1.0, 9, dtype="int4"),
         r"zero_point: 9 is outside the int4 range \[-8, 7\]"),
        (lambda: dmlq.quantize_linear([1.0], 1.0, dtype="int3"),
         r"dtype: 'int3' is not int8, uint8, int4 or uint4"),
        (lambda: dmlq.quantize_linear([1.0], 1.0, dtype="int4", axis=2), r"axis: 2 is out of range for 1"),
        (lambda: dmlq.quantize_linear([1.0], 1.0, dtype="int4", block_size=-1),
         r"block_size: -1 is negative"),
        (lambda: dmlq.quantize_linear(np.int32([1]), 1.0, dtype="int4"), r"x: int32 data has no 4-bit"),
        (lambda: dmlq.dequantize_linear(np.int16([1]), 1.0, axis=0),
         r"q: dtype int16 is not supported \(expected int8, int4, uint8, uint4\)"),
        (lambda: dmlq.dequantize_linear(np.array([1], ml_dtypes.int4), 0.0),
         r"scale: a scale of 0 is undefined"),
    ],
)  # fmt: skip
def test_bad_input_names_the_argument(call, message) -> None:
    with pytest.raises(DmlError, match=message):
        call()
