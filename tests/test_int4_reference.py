"""The 4-bit blockwise references against independent ones: ONNX's reference evaluator
(QuantizeLinear/DequantizeLinear, opset 21, int4/uint4, ``block_size``), onnxruntime's
DequantizeLinear where it takes int4, and hand-computed ties, saturation, NaN and infinities.
"""

from __future__ import annotations

import itertools

import ml_dtypes
import numpy as np
import pytest

from dmlq import reference

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

INT4, UINT4 = np.dtype(ml_dtypes.int4), np.dtype(ml_dtypes.uint4)
ONNX_TYPES = {INT4: TensorProto.INT4, UINT4: TensorProto.UINT4, np.dtype(np.float32): TensorProto.FLOAT}
CASES = [  # shape, axis, block size (dividing the axis; the odd counts leave a last byte one nibble)
    ((6, 4), 0, 2), ((6, 4), 1, 4), ((3, 64), 1, 32), ((5, 7), 1, 7), ((2, 3, 8), 2, 4), ((9,), 0, 3),
]  # fmt: skip


def block_shape(shape: tuple[int, ...], axis: int, block: int) -> tuple[int, ...]:
    return tuple(size // block if d == axis else size for d, size in enumerate(shape))


def onnx_model(op: str, x_type, y_type, shape, axis: int, block: int, zero_point_type) -> onnx.ModelProto:
    blocks = block_shape(shape, axis, block)
    inputs = [helper.make_tensor_value_info("x", x_type, shape),
              helper.make_tensor_value_info("scale", TensorProto.FLOAT, blocks)]  # fmt: skip
    if zero_point_type is not None:
        inputs.append(helper.make_tensor_value_info("zero_point", zero_point_type, blocks))
    attributes = {"output_dtype": y_type} if op == "QuantizeLinear" else {}  # else uint8 without a zero point
    node = helper.make_node(op, [i.name for i in inputs], ["y"], axis=axis, block_size=block, **attributes)
    graph = helper.make_graph([node], op, inputs, [helper.make_tensor_value_info("y", y_type, shape)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10)


def random_case(seed: int, shape, axis: int, block: int, dtype):
    rng = np.random.default_rng(seed)
    info = ml_dtypes.iinfo(dtype)
    blocks = block_shape(shape, axis, block)
    scale = rng.choice(np.float32([0.25, 0.5, 1.0, 2.0, 0.1, 3.0]), blocks).astype(np.float32)
    zero_point = rng.integers(info.min, info.max + 1, blocks).astype(dtype)
    x = (rng.integers(-40, 41, shape) * np.float32(0.125)).astype(np.float32)  # many exact ties
    return x, scale, zero_point


@pytest.mark.parametrize(
    ("case", "dtype", "with_zero_point"), list(itertools.product(CASES, (INT4, UINT4), (0, 1)))
)
def test_quantize_equals_onnx_reference(case, dtype, with_zero_point) -> None:
    shape, axis, block = case
    x, scale, zero_point = random_case(len(shape) * 7 + block, shape, axis, block, dtype)
    feeds = {"x": x, "scale": scale}
    if with_zero_point:
        feeds["zero_point"] = zero_point
    model = onnx_model("QuantizeLinear", TensorProto.FLOAT, ONNX_TYPES[dtype], shape, axis, block,
                       ONNX_TYPES[dtype] if with_zero_point else None)  # fmt: skip
    (expected,) = ReferenceEvaluator(model).run(None, feeds)
    got = reference.quantize(x, scale, zero_point if with_zero_point else None, dtype)
    assert got.dtype == dtype and got.shape == shape
    np.testing.assert_array_equal(got.astype(int), np.asarray(expected).astype(int))


@pytest.mark.parametrize(
    ("case", "dtype", "with_zero_point"), list(itertools.product(CASES, (INT4, UINT4), (0, 1)))
)
def test_dequantize_equals_onnx_reference(case, dtype, with_zero_point) -> None:
    shape, axis, block = case
    rng = np.random.default_rng(block)
    info = ml_dtypes.iinfo(dtype)
    q = rng.integers(info.min, info.max + 1, shape).astype(dtype)
    _, scale, zero_point = random_case(block, shape, axis, block, dtype)
    feeds = {"x": q, "scale": scale}
    if with_zero_point:
        feeds["zero_point"] = zero_point
    model = onnx_model("DequantizeLinear", ONNX_TYPES[dtype], TensorProto.FLOAT, shape, axis, block,
                       ONNX_TYPES[dtype] if with_zero_point else None)  # fmt: skip
    (expected,) = ReferenceEvaluator(model).run(None, feeds)
    got = reference.dequantize(q, scale, zero_point if with_zero_point else None, np.float32)
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("dtype", [INT4, UINT4])
def test_dequantize_equals_onnxruntime(dtype) -> None:
    """onnxruntime takes 4-bit tensors only as initializers (its NumPy feeds know no ml_dtypes)."""
    ort = pytest.importorskip("onnxruntime")
    shape, axis, block = (8, 64), 1, 32
    q = np.random.default_rng(1).integers(ml_dtypes.iinfo(dtype).min, ml_dtypes.iinfo(dtype).max + 1, shape)
    _, scale, zero_point = random_case(2, shape, axis, block, dtype)
    weights = [helper.make_tensor("x", ONNX_TYPES[dtype], shape, q.reshape(-1).tolist()),
               helper.make_tensor("zero_point", ONNX_TYPES[dtype], scale.shape,
                                  zero_point.astype(int).reshape(-1).tolist())]  # fmt: skip
    node = helper.make_node(
        "DequantizeLinear", ["x", "scale", "zero_point"], ["y"], axis=axis, block_size=block
    )
    scale_input = helper.make_tensor_value_info("scale", TensorProto.FLOAT, scale.shape)
    output = helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)
    graph = helper.make_graph([node], "dq", [scale_input], [output], weights)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (expected,) = session.run(None, {"scale": scale})
    got = reference.dequantize(q.astype(dtype), scale, zero_point, np.float32)
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize(
    ("x", "dtype", "expected"),
    [
        ([0.5, 1.5, 2.5, -0.5, -1.5, -2.5], INT4, [0, 2, 2, 0, -2, -2]),  # halves to even
        ([7.5, 8.0, -8.5, -9.0, 100.0], INT4, [7, 7, -8, -8, 7]),  # saturation to [-8, 7]
        ([14.5, 15.5, 16.0, -0.4, -1.0], UINT4, [14, 15, 15, 0, 0]),  # saturation to [0, 15]
        ([np.nan, np.inf, -np.inf], INT4, [0, 7, -8]),
        ([np.nan, np.inf, -np.inf], UINT4, [0, 15, 0]),
    ],
)
def test_ties_saturation_nan_and_infinities(x, dtype, expected) -> None:
    with np.errstate(invalid="ignore"):
        got = reference.quantize(np.float32(x), np.float32([1.0]), None, dtype)
    assert got.astype(int).tolist() == expected


def test_nan_gives_zero_even_with_a_zero_point() -> None:
    """dmlq's NaN policy (as for 8 bits): the saturated result is 0, the zero point not added."""
    with np.errstate(invalid="ignore"):
        got = reference.quantize(np.float32([np.nan, 1.0]), np.float32([1.0]), np.array([3], INT4), INT4)
    assert got.astype(int).tolist() == [0, 4]


def test_blocks_are_per_dimension_splits() -> None:
    x = np.float32([[1, 2, 3, 4], [5, 6, 7, 8]])
    scale = np.float32([[1, 2], [4, 8]])  # blocks of 2 along the last dimension
    assert reference.quantize(x, scale, None, INT4).astype(int).tolist() == [[1, 2, 2, 2], [1, 2, 1, 1]]
