"""MATRIX_MULTIPLY_INTEGER: the reference and the compiled operator against ONNX's reference, onnxruntime
CPU and Python ints (exact, wrapped to 32 bits); its validation rules."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import exact_on_onnxruntime
from dmlq import DataType, Device, DmlError, TensorDesc, ops
from family import (
    INT32,
    TYPES,
    broadcast_tensor,
    execute,
    matrix_sizes,
    node_model,
    onnx_reference,
    onnxruntime_cpu,
    random_bytes,
)

U8, I8, I32 = DataType.UINT8, DataType.INT8, DataType.INT32
SHAPES = {  # A, B: 2-D, odd sizes, batches broadcast both ways
    "2-d": ((5, 7), (7, 3)),
    "odd": ((1, 33), (33, 17)),
    "batched": ((2, 3, 4, 9), (2, 3, 9, 6)),
    "broadcast": ((2, 1, 4, 9), (3, 9, 5)),
    "row-vector-b": ((3, 6), (6, 1)),
}


def multiply(a, a_zero_point, b, b_zero_point, device: Device | None = None) -> np.ndarray:
    """dmlq's compiled operator; zero points ``[..., M, 1]`` / ``[..., 1, N]`` or scalars, batches broadcast
    through zero strides."""
    a_sizes, b_sizes, out_sizes = matrix_sizes(a, b)
    rank = len(out_sizes)

    def zero_point(values):
        return (
            None
            if values is None
            else TensorDesc(
                DataType.from_dtype(values.dtype),
                [1] * (rank - 2) + list(values.shape[-2:] if values.ndim >= 2 else (1, 1)),
            )
        )

    desc = ops.MatrixMultiplyInteger(
        a=broadcast_tensor(a, a_sizes), a_zero_point=zero_point(a_zero_point), b=broadcast_tensor(b, b_sizes),
        b_zero_point=zero_point(b_zero_point), output=TensorDesc(I32, out_sizes),
    )  # fmt: skip
    return execute(desc, [a, a_zero_point, b, b_zero_point], device)[0]


def loops(a, a_zero_point, b, b_zero_point) -> np.ndarray:
    """Python-int sums of 2-D ``a`` and ``b`` (zero points: scalars, ``[M, 1]`` and ``[1, N]``), wrapped."""
    m, k = a.shape
    n = b.shape[1]
    az = np.broadcast_to(0 if a_zero_point is None else a_zero_point, (m, 1))
    bz = np.broadcast_to(0 if b_zero_point is None else b_zero_point, (1, n))
    out = np.zeros((m, n), np.int64)
    for i, j in np.ndindex(m, n):
        out[i, j] = sum((int(a[i, r]) - int(az[i, 0])) * (int(b[r, j]) - int(bz[0, j])) for r in range(k))
    return ((out + 2**31) % 2**32 - 2**31).astype(np.int32)


def zero_points(rng, a, b, kind: str):
    if kind == "none":
        return None, None
    if kind == "per-tensor":
        return random_bytes(rng, a.dtype.name, (1, 1)), random_bytes(rng, b.dtype.name, (1, 1))
    return random_bytes(rng, a.dtype.name, (a.shape[-2], 1)), random_bytes(
        rng, b.dtype.name, (1, b.shape[-1])
    )


def onnx_model(a, a_zero_point, b, b_zero_point):
    inputs = [("A", a), ("B", b), ("a_zero_point", a_zero_point), ("b_zero_point", b_zero_point)]
    return node_model("MatMulInteger", inputs, [("Y", INT32)], opset=10), inputs


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("a_type, b_type", TYPES)
@pytest.mark.parametrize("kind", ["none", "per-tensor", "per-row-and-column"])
def test_equals_onnx_reference_bit_for_bit(shape, a_type, b_type, kind, rng):
    a, b = random_bytes(rng, a_type, SHAPES[shape][0]), random_bytes(rng, b_type, SHAPES[shape][1])
    az, bz = zero_points(rng, a, b, kind)
    got = multiply(a, az, b, bz)
    if kind == "per-tensor":  # ONNX's reference aligns a 1-D zero point right: give scalars or [M, 1]
        az, bz = az.reshape(()), bz.reshape(())
    model, inputs = onnx_model(a, az, b, bz)
    [want] = onnx_reference(model, inputs)
    assert got.dtype == want.dtype == np.int32 and np.array_equal(got, want)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("a_type, b_type", TYPES)
def test_equals_onnxruntime_cpu_bit_for_bit(shape, a_type, b_type, rng):
    a, b = random_bytes(rng, a_type, SHAPES[shape][0]), random_bytes(rng, b_type, SHAPES[shape][1])
    a, b = exact_on_onnxruntime(a, b)
    az = random_bytes(rng, a_type, ())  # onnxruntime CPU: a per-tensor A zero point
    bz = random_bytes(rng, b_type, (1, b.shape[-1]))
    per_batch = np.ascontiguousarray(
        np.broadcast_to(bz, (*b.shape[:-2], 1, b.shape[-1]))
    )  # B's rank, as ORT wants
    model, inputs = onnx_model(a, az, b, per_batch)
    [want] = onnxruntime_cpu(model, inputs)
    assert np.array_equal(multiply(a, az.reshape(1, 1), b, bz), want)


@pytest.mark.parametrize("a_type, b_type", TYPES)
def test_equals_python_int_loops(a_type, b_type, rng):
    a, b = random_bytes(rng, a_type, (6, 11)), random_bytes(rng, b_type, (11, 4))
    az, bz = zero_points(rng, a, b, "per-row-and-column")
    assert np.array_equal(multiply(a, az, b, bz), loops(a, az, b, bz))


@pytest.mark.parametrize("a_type, b_type", TYPES)
def test_k_70000_wraps_like_32_bit_accumulation(a_type, b_type):
    k = 70_000
    a_info, b_info = np.iinfo(a_type), np.iinfo(b_type)
    a = np.full((2, k), a_info.max, a_type)
    a[1] = a_info.min
    b = np.full((k, 3), b_info.max, b_type)
    b[:, 1] = b_info.min
    b[::2, 2] = b_info.min
    az, bz = np.array([[a_info.min], [a_info.max]], a_type), np.array([[b_info.min, b_info.max, 0]], b_type)
    got = multiply(a, az, b, bz)
    exact = (a.astype(np.int64) - az) @ (b.astype(np.int64) - bz)
    assert np.abs(exact).max() > 2**31  # the exact sums do not fit
    assert np.array_equal(got, ((exact + 2**31) % 2**32 - 2**31).astype(np.int32))
    model, inputs = onnx_model(a, az, b, bz)
    assert np.array_equal(got, onnx_reference(model, inputs)[0])


def test_a_transposed_a_and_a_one_dimensional_row_zero_point_through_the_device(rng):
    a = random_bytes(rng, "int8", (5, 3))  # memory holds A transposed: logical [3, 5]
    b = random_bytes(rng, "uint8", (5, 4))
    desc = ops.MatrixMultiplyInteger(
        a=TensorDesc(I8, [3, 5], strides=[1, 3]), a_zero_point=TensorDesc(I8, [3]),
        b=TensorDesc(U8, [5, 4]), b_zero_point=TensorDesc(U8, [1, 4], strides=[0, 0]),
        output=TensorDesc(I32, [3, 4]),
    )  # fmt: skip
    out = np.zeros((3, 4), np.int32)
    az, bz = np.int8([-128, 0, 127]), np.uint8([200])
    Device("4_0").compile_operator(desc).execute([a, az, b, bz], [out])
    assert np.array_equal(out, loops(a.T, az.reshape(3, 1), b, bz.reshape(1, 1)))


# -- validation ----------------------------------------------------------------------------------------


def desc(**changes) -> ops.MatrixMultiplyInteger:
    fields = dict(a=TensorDesc(U8, [1, 2, 3, 4]), a_zero_point=TensorDesc(U8, [1, 1, 3, 1]),
                  b=TensorDesc(I8, [1, 2, 4, 5]), b_zero_point=TensorDesc(I8, [1, 1, 1, 5]),
                  output=TensorDesc(I32, [1, 2, 3, 5]))  # fmt: skip
    return ops.MatrixMultiplyInteger(**(fields | changes))


def refused(description, message: str, level: str = "6_4") -> None:
    with pytest.raises(DmlError) as error:
        Device(level).compile_operator(description)
    assert str(error.value) == f"MatrixMultiplyInteger{message} (device is {level})"


def test_levels_of_the_three_tables():
    assert desc().minimum_feature_level().label == "2_1"
    refused(desc(), ": operator needs feature level 2_1", "2_0")
    two_d = desc(a=TensorDesc(U8, [3, 4]), a_zero_point=TensorDesc(U8, [3]), b=TensorDesc(I8, [4, 5]),
                 b_zero_point=TensorDesc(I8, [1, 5]), output=TensorDesc(I32, [3, 5]))  # fmt: skip
    assert two_d.minimum_feature_level().label == "4_0"
    refused(two_d, ".a: dimension count 2 needs feature level 4_0", "3_1")
    vector_b_zero_point = two_d.replace(b_zero_point=TensorDesc(I8, [5]))
    assert vector_b_zero_point.minimum_feature_level().label == "5_2"
    refused(vector_b_zero_point, ".b_zero_point: dimension count 1 needs feature level 5_2", "5_1")


REFUSALS = [
    ({"a_zero_point": TensorDesc(U8, [1, 1, 1, 3])},
     ".a_zero_point: sizes [1, 1, 1, 3] must be per-tensor (every size 1) or per-row {1, 1, M, 1} "
     "(or [M]), M = 3"),
    ({"b_zero_point": TensorDesc(I8, [1, 2, 1, 5])},
     ".b_zero_point: sizes [1, 2, 1, 5] must be per-tensor (every size 1) or per-column {1, 1, 1, N}, "
     "N = 5"),
    ({"b_zero_point": TensorDesc(U8, [1, 1, 1, 5])},
     ".b_zero_point: data type UINT8 differs from b's INT8"),
    ({"a_zero_point": TensorDesc(I8, [1, 1, 3, 1])},
     ".a_zero_point: data type INT8 differs from a's UINT8"),
    ({"b": TensorDesc(I8, [1, 2, 5, 5])},
     ".b: sizes [1, 2, 5, 5] do not continue a's K = 4 (b is [..., K, N])"),
    ({"output": TensorDesc(I32, [1, 2, 3, 4])},
     ".output: sizes [1, 2, 3, 4] must end in [M, N] = [3, 5]"),
    ({"a": TensorDesc(U8, [1, 1, 3, 4])},
     ".a: batch sizes [1, 1] differ from output's [1, 2] (broadcast batches through zero strides)"),
    ({"output": TensorDesc(DataType.FLOAT32, [1, 2, 3, 5])},
     ".output: data type FLOAT32 is not supported (supported: INT32)"),
    ({"b": TensorDesc(I8, [2, 4, 5])},
     ".b: dimension count 3 differs from a's 4"),
    ({"a": TensorDesc(U8, [1, 1, 2, 3, 4])},
     ".a: dimension count 5 is not supported (supported: 2 to 4)"),
    ({"a": None}, ".a: tensor is required"),
]  # fmt: skip


@pytest.mark.parametrize("changes, message", REFUSALS)
def test_refusals_name_field_and_rule(changes, message):
    refused(desc(**changes), message)


def test_zero_points_optional_and_of_any_allowed_layout():
    Device("2_1").compile_operator(desc(a_zero_point=None, b_zero_point=None))
    for a_sizes, b_sizes in (
        ([1, 1, 1, 1], [1, 1, 1, 1]),
        ([3, 1], [1, 5]),
        ([1, 3, 1], [1, 1, 5]),
        ([3], [5]),
    ):
        Device().compile_operator(
            desc(a_zero_point=TensorDesc(U8, a_sizes), b_zero_point=TensorDesc(I8, b_sizes))
        )
