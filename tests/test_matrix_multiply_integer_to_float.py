"""MATRIX_MULTIPLY_INTEGER_TO_FLOAT: the reference and the compiled operator against onnxruntime CPU's
com.microsoft MatMulIntegerToFloat (bit for bit where both are exact, within an ulp elsewhere) and a
formula written here with Python ints and floats; its validation rules."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import exact_on_onnxruntime, f16, f32
from dmlq import DataType, Device, DmlError, TensorDesc, ops, reference
from family import (
    FLOAT,
    broadcast_tensor,
    execute,
    matrix_sizes,
    node_model,
    onnxruntime_cpu,
    random_bytes,
)

F32, F16, U8, I8, I32 = DataType.FLOAT32, DataType.FLOAT16, DataType.UINT8, DataType.INT8, DataType.INT32


def multiply(a, a_scale, a_zero_point, b, b_scale, b_zero_point, bias, out_type, device=None) -> np.ndarray:
    """dmlq's compiled operator; scales and zero points ``[M, 1]`` / ``[1, N]`` (or ``[1, 1]``), the bias
    ``[N]`` broadcast to the output through zero strides."""
    a_sizes, b_sizes, out_sizes = matrix_sizes(a, b)
    rank = len(out_sizes)

    def parameter(values):
        if values is None:
            return None
        return TensorDesc(DataType.from_dtype(values.dtype), [1] * (rank - 2) + list(values.shape))

    desc = ops.MatrixMultiplyIntegerToFloat(
        a=broadcast_tensor(a, a_sizes), a_scale=parameter(a_scale), a_zero_point=parameter(a_zero_point),
        b=broadcast_tensor(b, b_sizes), b_scale=parameter(b_scale), b_zero_point=parameter(b_zero_point),
        bias=None if bias is None else broadcast_tensor(bias, out_sizes),
        output=TensorDesc(DataType.from_dtype(out_type), out_sizes),
    )  # fmt: skip
    return execute(desc, [a, a_scale, a_zero_point, b, b_scale, b_zero_point, bias], device)[0]


def python_formula(a, a_scale, a_zero_point, b, b_scale, b_zero_point, bias, out_type) -> np.ndarray:
    """2-D: Python-int sums, ``f32(float(acc) * (float(AS) * float(BS)))``, a float32 bias addition."""
    m, k = a.shape
    n = b.shape[1]
    az = np.broadcast_to(0 if a_zero_point is None else a_zero_point, (m, 1))
    bz = np.broadcast_to(0 if b_zero_point is None else b_zero_point, (1, n))
    a_s, b_s = np.broadcast_to(a_scale, (m, 1)), np.broadcast_to(b_scale, (1, n))
    out = np.empty((m, n), out_type)
    for i, j in np.ndindex(m, n):
        acc = sum((int(a[i, r]) - int(az[i, 0])) * (int(b[r, j]) - int(bz[0, j])) for r in range(k))
        value = f32(float(acc) * (float(a_s[i, 0]) * float(b_s[0, j])))
        if bias is not None:
            value = f32(value + float(np.broadcast_to(bias, (m, n))[i, j]))
        out[i, j] = f16(value) if out_type == np.float16 else value
    return out


def operands(rng, a_type, b_type, m, k, n, powers_of_two: bool, scale_type=np.float32, bias=True):
    a, b = random_bytes(rng, a_type, (m, k)), random_bytes(rng, b_type, (k, n))
    az, bz = random_bytes(rng, a_type, (m, 1)), random_bytes(rng, b_type, (1, n))
    if powers_of_two:
        a_scale = np.exp2(rng.integers(-8, -3, (m, 1))).astype(scale_type)
        b_scale = np.exp2(rng.integers(-8, -3, (1, n))).astype(scale_type)
        bias_values = (rng.integers(-64, 64, n) / 8).astype(scale_type)
    else:
        a_scale = rng.uniform(-0.1, 0.1, (m, 1)).astype(scale_type)
        b_scale = rng.uniform(-0.1, 0.1, (1, n)).astype(scale_type)
        bias_values = rng.uniform(-1, 1, n).astype(scale_type)
    return a, a_scale, az, b, b_scale, bz, bias_values if bias else None


def ort_model(a, a_scale, az, b, b_scale, bz, bias):
    inputs = [("A", a), ("B", b), ("a_scale", a_scale), ("b_scale", b_scale), ("a_zero_point", az),
              ("b_zero_point", bz), ("bias", bias)]  # fmt: skip
    model = node_model("MatMulIntegerToFloat", inputs, [("Y", FLOAT)], domain="com.microsoft")
    return model, inputs


@pytest.mark.parametrize(
    "a_type, b_type", [("uint8", "uint8"), ("uint8", "int8"), ("int8", "int8")]
)  # ORT CPU's
@pytest.mark.parametrize("bias", [False, True], ids=["no-bias", "bias"])
def test_equals_onnxruntime_cpu_bit_for_bit_where_exact(a_type, b_type, bias, rng):
    a, a_scale, az, b, b_scale, bz, bias_values = operands(rng, a_type, b_type, 5, 96, 7, True, bias=bias)
    a, b = exact_on_onnxruntime(a, b)
    a_scale, az = a_scale[:1, 0], az[:1, 0]  # onnxruntime CPU: a per-tensor A side
    model, inputs = ort_model(a, a_scale, az, b, b_scale[0], bz[0], bias_values)
    [want] = onnxruntime_cpu(model, inputs)
    args = (a, a_scale.reshape(1, 1), az.reshape(1, 1), b, b_scale, bz, bias_values, np.float32)
    assert np.array_equal(reference.matrix_multiply_integer_to_float(*args), want)
    assert np.array_equal(multiply(*args), want)


@pytest.mark.parametrize("a_type, b_type", [("uint8", "uint8"), ("int8", "int8")])
def test_within_an_ulp_of_onnxruntime_cpu_on_any_scales(a_type, b_type, rng):
    a, a_scale, az, b, b_scale, bz, bias_values = operands(rng, a_type, b_type, 4, 128, 128, False)
    model, inputs = ort_model(a, a_scale[:1, 0], az[:1, 0], b, b_scale[0], bz[0], bias_values)
    [want] = onnxruntime_cpu(model, inputs)
    got = multiply(a, a_scale[:1], az[:1], b, b_scale, bz, bias_values, np.float32)
    np.testing.assert_allclose(got, want, rtol=3e-7, atol=1e-6)  # one float32 rounding of the scale apart


@pytest.mark.parametrize("a_type, b_type", [("uint8", "uint8"), ("int8", "int8")])
@pytest.mark.parametrize("scale_type, out_type", [(np.float32, np.float32), (np.float16, np.float16)])
def test_equals_the_python_formula(a_type, b_type, scale_type, out_type, rng):
    args = operands(rng, a_type, b_type, 6, 40, 5, False, scale_type=scale_type)
    got = multiply(*args, out_type)
    assert got.dtype == out_type and np.array_equal(got, python_formula(*args, out_type))


@pytest.mark.parametrize("dtype", ["int16", "uint16", "int32", "uint32"])
def test_wide_integers_multiply_exactly(dtype):
    info = np.iinfo(dtype)
    a = np.array([[info.max, info.min, info.max]], dtype)
    b = np.array([[info.max], [info.min], [info.min]], dtype)
    az, bz = np.array([[info.min]], dtype), np.array([[info.max]], dtype)
    one = np.float32([[1.0]])
    got = multiply(a, one, az, b, one, bz, None, np.float32)
    assert got.item() == np.float32(python_formula(a, one, az, b, one, bz, None, np.float32).item())
    exact = sum((int(x) - int(info.min)) * (int(y) - int(info.max)) for x, y in zip(a[0], b[:, 0]))
    assert abs(exact) > 2**53 or dtype.endswith("16")
    assert got.item() == np.float32(float(exact))


def test_batches_broadcast_and_a_one_dimensional_row_scale(rng):
    a = random_bytes(rng, "uint8", (2, 1, 3, 8))
    b = random_bytes(rng, "uint8", (4, 8, 5))
    scale_a, scale_b = np.float32([0.5, 0.25, 2.0]), np.float32([[0.125] * 5])
    desc = ops.MatrixMultiplyIntegerToFloat(
        a=broadcast_tensor(a, (2, 4, 3, 8)), a_scale=TensorDesc(F32, [3]),
        b=broadcast_tensor(b, (2, 4, 8, 5)), b_scale=TensorDesc(F32, [5], strides=[0]),
        output=TensorDesc(F32, [2, 4, 3, 5]),
    )  # fmt: skip
    out = np.zeros((2, 4, 3, 5), np.float32)
    Device().compile_operator(desc).execute([a, scale_a, None, b, scale_b[0, :1], None, None], [out])
    for i, j in np.ndindex(2, 4):
        want = python_formula(a[i, 0], scale_a.reshape(3, 1), None, b[j], scale_b, None, None, np.float32)
        assert np.array_equal(out[i, j], want)


# -- validation ----------------------------------------------------------------------------------------


def desc(**changes) -> ops.MatrixMultiplyIntegerToFloat:
    fields = dict(a=TensorDesc(U8, [2, 3, 4]), a_scale=TensorDesc(F32, [1, 3, 1]),
                  a_zero_point=TensorDesc(U8, [1, 3, 1]), b=TensorDesc(U8, [2, 4, 5]),
                  b_scale=TensorDesc(F32, [1, 1, 5]), b_zero_point=TensorDesc(U8, [1, 1, 1]),
                  bias=TensorDesc(F32, [2, 3, 5], strides=[0, 0, 1]),
                  output=TensorDesc(F32, [2, 3, 5]))  # fmt: skip
    return ops.MatrixMultiplyIntegerToFloat(**(fields | changes))


def refused(description, message: str, level: str = "6_4") -> None:
    with pytest.raises(DmlError) as error:
        Device(level).compile_operator(description)
    assert str(error.value) == f"MatrixMultiplyIntegerToFloat{message} (device is {level})"


def test_valid_from_6_2():
    assert desc().minimum_feature_level().label == "6_2"
    refused(desc(), ": operator needs feature level 6_2", "6_1")
    for integer in (DataType.INT32, DataType.INT16, I8, DataType.UINT32, DataType.UINT16):
        wide = desc(a=TensorDesc(integer, [2, 3, 4]), a_zero_point=None, b=TensorDesc(integer, [2, 4, 5]),
                    b_zero_point=TensorDesc(integer, [1, 1, 1]))  # fmt: skip
        Device("6_2").compile_operator(wide)
    halves = desc(a_scale=TensorDesc(F16, [1, 3, 1]), b_scale=TensorDesc(F16, [1, 1, 5]), bias=None,
                  output=TensorDesc(F16, [2, 3, 5]))  # fmt: skip
    Device("6_2").compile_operator(halves)


@pytest.mark.parametrize("a_type, b_type", [(U8, I8), (I8, U8)])
def test_a_uint8_and_an_int8_side_may_mix_as_onnxruntimes_directml_tests_show(a_type, b_type):
    Device("6_2").compile_operator(
        desc(
            a=TensorDesc(a_type, [2, 3, 4]),
            a_zero_point=None,
            b=TensorDesc(b_type, [2, 4, 5]),
            b_zero_point=None,
        )
    )


def test_other_mixed_integer_types_are_refused():
    message = ".b: data type INT16 differs from a's UINT8 (only UINT8 and INT8 may mix)"
    refused(desc(b=TensorDesc(DataType.INT16, [2, 4, 5]), b_zero_point=None), message)


def test_a_zero_point_keeps_its_own_tensors_type():
    refused(desc(b=TensorDesc(I8, [2, 4, 5])), ".b_zero_point: data type UINT8 differs from b's INT8")


REFUSALS = [
    ({"a_zero_point": TensorDesc(I8, [1, 3, 1])}, ".a_zero_point: data type INT8 differs from a's UINT8"),
    ({"bias": TensorDesc(F16, [2, 3, 5])}, ".bias: data type FLOAT16 differs from a_scale's FLOAT32"),
    ({"output": TensorDesc(F16, [2, 3, 5]), "bias": None},
     ".output: data type FLOAT16 differs from a_scale's FLOAT32"),
    ({"bias": TensorDesc(F32, [1, 3, 5])}, ".bias: sizes [1, 3, 5] differs from output's [2, 3, 5]"),
    ({"bias": TensorDesc(F32, [3, 5])}, ".bias: dimension count 2 differs from a's 3"),
    ({"b_scale": TensorDesc(F32, [1, 5])}, ".b_scale: dimension count 2 differs from a_scale's 3"),
    ({"a_scale": TensorDesc(F32, [1, 1, 3])},
     ".a_scale: sizes [1, 1, 3] must be per-tensor (every size 1) or per-row {1, 1, M, 1} (or [M]), M = 3"),
    ({"b_zero_point": TensorDesc(U8, [2, 1, 5])},
     ".b_zero_point: sizes [2, 1, 5] must be per-tensor (every size 1) or per-column {1, 1, 1, N}, N = 5"),
    ({"a_scale": None}, ".a_scale: tensor is required"),
    ({"a": TensorDesc(DataType.INT64, [2, 3, 4])},
     ".a: data type INT64 is not supported (supported: INT32, INT16, INT8, UINT32, UINT16, UINT8)"),
    ({"output": TensorDesc(I32, [2, 3, 5]), "bias": None},
     ".output: data type INT32 is not supported (supported: FLOAT32, FLOAT16)"),
]  # fmt: skip


@pytest.mark.parametrize("changes, message", REFUSALS)
def test_refusals_name_field_and_rule(changes, message):
    refused(desc(**changes), message)
