"""GEMM (float32 / float16): the reference and the compiled operator against float64 products and
onnxruntime CPU's Gemm (within float32 rounding: MLAS sums in its own order, and DirectML promises
none), exact where the products are; its validation rules. tests/test_gemm_kernels.py holds the
kernel to the reference's order bit for bit."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto

from dmlq import DataType, Device, DmlError, TensorDesc, activations, ops, reference
from dmlq.types import MatrixTransform
from family import broadcast_tensor, execute, node_model, onnxruntime_cpu

F32, F16 = DataType.FLOAT32, DataType.FLOAT16


def gemm(a, b, c, *, trans_a=False, trans_b=False, alpha=1.0, beta=1.0, activation=None, device=None):
    """dmlq's compiled operator; C broadcast to the output through zero strides."""
    m = a.shape[-1] if trans_a else a.shape[-2]
    n = b.shape[-2] if trans_b else b.shape[-1]
    out_sizes = (*a.shape[:-2], m, n)
    desc = ops.Gemm(
        a=TensorDesc(DataType.from_dtype(a.dtype), a.shape),
        b=TensorDesc(DataType.from_dtype(b.dtype), b.shape),
        c=None if c is None else broadcast_tensor(c, out_sizes),
        output=TensorDesc(DataType.from_dtype(a.dtype), out_sizes), trans_a=trans_a, trans_b=trans_b,
        alpha=alpha, beta=beta, fused_activation=activation,
    )  # fmt: skip
    return execute(desc, [a, b, c], device)[0]


def float64_gemm(a, b, c, trans_a=False, trans_b=False, alpha=1.0, beta=1.0) -> np.ndarray:
    a, b = a.astype(np.float64), b.astype(np.float64)
    a, b = (np.swapaxes(a, -1, -2) if trans_a else a), (np.swapaxes(b, -1, -2) if trans_b else b)
    total = float(np.float32(alpha)) * (a @ b)
    return total if c is None else total + float(np.float32(beta)) * c.astype(np.float64)


@pytest.mark.parametrize("trans_a", [False, True])
@pytest.mark.parametrize("trans_b", [False, True])
@pytest.mark.parametrize("with_c", [False, True])
def test_float32_within_rounding_of_float64_and_equal_to_the_reference(trans_a, trans_b, with_c, rng):
    a = rng.standard_normal((2, 3, 33, 17) if trans_a else (2, 3, 17, 33)).astype(np.float32)
    b = rng.standard_normal((2, 3, 9, 33) if trans_b else (2, 3, 33, 9)).astype(np.float32)
    c = rng.standard_normal(9).astype(np.float32) if with_c else None
    got = gemm(a, b, c, trans_a=trans_a, trans_b=trans_b, alpha=0.75, beta=-1.5)
    want = float64_gemm(a, b, c, trans_a, trans_b, 0.75, -1.5)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    c_full = None if c is None else np.broadcast_to(c, got.shape)
    same = reference.gemm(a, b, c_full, np.float32, trans_a=trans_a, trans_b=trans_b, alpha=0.75, beta=-1.5)
    assert np.array_equal(got, same)


def test_small_integers_multiply_exactly():
    a = np.arange(-6, 6, dtype=np.float32).reshape(3, 4)
    b = np.arange(8, dtype=np.float32).reshape(4, 2)
    c = np.float32([[1, -1]])
    assert np.array_equal(gemm(a, b, c, alpha=2.0, beta=3.0), 2 * (a @ b) + 3 * c)


@pytest.mark.parametrize("trans_a, trans_b", [(0, 0), (1, 0), (0, 1), (1, 1)])
def test_within_rounding_of_onnxruntime_cpu(trans_a, trans_b, rng):
    a = rng.standard_normal((40, 24) if trans_a else (24, 40)).astype(np.float32)
    b = rng.standard_normal((16, 40) if trans_b else (40, 16)).astype(np.float32)
    c = rng.standard_normal((1, 16)).astype(np.float32)
    inputs = [("A", a), ("B", b), ("C", c)]
    model = node_model("Gemm", inputs, [("Y", TensorProto.FLOAT)], opset=13, alpha=0.5, beta=2.0,
                       transA=trans_a, transB=trans_b)  # fmt: skip
    [want] = onnxruntime_cpu(model, inputs)
    got = gemm(a, b, c, trans_a=bool(trans_a), trans_b=bool(trans_b), alpha=0.5, beta=2.0)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_float16_is_computed_in_float32_and_rounded_once(rng):
    a = (rng.standard_normal((8, 64)) * 4).astype(np.float16)
    b = (rng.standard_normal((64, 8)) * 4).astype(np.float16)
    c = rng.standard_normal((8, 8)).astype(np.float16)
    got = gemm(a, b, c, beta=0.5)
    assert got.dtype == np.float16
    single = reference.gemm(
        a.astype(np.float32), b.astype(np.float32), c.astype(np.float32), np.float32, beta=0.5
    )
    assert np.array_equal(got, single.astype(np.float16))
    np.testing.assert_allclose(got.astype(np.float64), float64_gemm(a, b, c, beta=0.5), rtol=2e-3, atol=2e-2)


@pytest.mark.parametrize(
    "activation",
    [activations.Relu(), activations.Gelu(), activations.LeakyRelu(alpha=0.2), activations.Tanh()],
)
def test_fused_activations_apply_to_the_float32_value(activation, rng):
    a = rng.standard_normal((5, 6)).astype(np.float32)
    b = rng.standard_normal((6, 7)).astype(np.float32)
    got = gemm(a, b, None, alpha=1.25, activation=activation)
    plain = gemm(a, b, None, alpha=1.25)
    assert np.array_equal(got, activation.apply(plain).astype(np.float32))


def test_a_transposed_strided_a_and_a_broadcast_batch_through_the_device(rng):
    a = rng.standard_normal((4, 3)).astype(np.float32)  # memory [K, M]; logical [2, M, K] batch-broadcast
    b = rng.standard_normal((2, 4, 5)).astype(np.float32)
    desc = ops.Gemm(a=TensorDesc(F32, [2, 3, 4], strides=[0, 1, 3]), b=TensorDesc(F32, [2, 4, 5]),
                    output=TensorDesc(F32, [2, 3, 5]))  # fmt: skip
    out = np.zeros((2, 3, 5), np.float32)
    Device("4_0").compile_operator(desc).execute([a, b, None], [out])
    np.testing.assert_allclose(out, a.T @ b, rtol=1e-6)
    assert np.array_equal(out, reference.gemm(np.broadcast_to(a.T, (2, 3, 4)), b, None, np.float32))


# -- validation ----------------------------------------------------------------------------------------


def desc(**changes) -> ops.Gemm:
    fields = dict(a=TensorDesc(F32, [1, 2, 3, 4]), b=TensorDesc(F32, [1, 2, 4, 5]),
                  c=TensorDesc(F32, [1, 2, 3, 5]), output=TensorDesc(F32, [1, 2, 3, 5]))  # fmt: skip
    return ops.Gemm(**(fields | changes))


def refused(description, message: str, level: str = "6_4") -> None:
    with pytest.raises(DmlError) as error:
        Device(level).compile_operator(description)
    assert str(error.value) == f"Gemm{message} (device is {level})"


def test_levels_of_the_two_tables_and_the_activations():
    assert desc().minimum_feature_level().label == "1_0"
    two_d = desc(a=TensorDesc(F16, [3, 4]), b=TensorDesc(F16, [4, 5]), c=None, output=TensorDesc(F16, [3, 5]))
    assert two_d.minimum_feature_level().label == "4_0"
    refused(two_d, ".a: dimension count 2 needs feature level 4_0", "3_1")
    gelu = desc(fused_activation=activations.Gelu())
    assert gelu.minimum_feature_level().label == "5_1"
    refused(gelu, ".fused_activation: ACTIVATION_GELU needs feature level 5_1", "5_0")
    transposed = desc(
        a=TensorDesc(F32, [1, 2, 4, 3]), b=TensorDesc(F32, [1, 2, 5, 4]), trans_a=True, trans_b=1
    )
    assert (
        transposed.trans_b is MatrixTransform.TRANSPOSE and transposed.minimum_feature_level().label == "1_0"
    )


REFUSALS = [
    ({"b": TensorDesc(F32, [1, 2, 5, 5])},
     ".b: sizes [1, 2, 5, 5] do not continue a's K = 4 (b is [..., K, N])"),
    ({"trans_b": True}, ".b: sizes [1, 2, 4, 5] do not continue a's K = 4 (b is [..., N, K] (TransB))"),
    ({"output": TensorDesc(F32, [1, 2, 3, 4]), "c": None},
     ".output: sizes [1, 2, 3, 4] must end in [M, N] = [3, 5]"),
    ({"a": TensorDesc(F32, [1, 1, 3, 4])},
     ".a: batch sizes [1, 1] differ from output's [1, 2] (broadcast batches through zero strides)"),
    ({"c": TensorDesc(F32, [1, 1, 1, 5])}, ".c: sizes [1, 1, 1, 5] differs from output's [1, 2, 3, 5]"),
    ({"c": TensorDesc(F16, [1, 2, 3, 5])}, ".c: data type FLOAT16 differs from a's FLOAT32"),
    ({"b": TensorDesc(F32, [2, 4, 5])}, ".b: dimension count 3 differs from a's 4"),
    ({"trans_a": 2}, ".trans_a: 2 must be MatrixTransform.NONE (0) or TRANSPOSE (1)"),
    ({"alpha": float("nan")},
     ".alpha: is NaN; refused because DirectML defines no result for a NaN parameter"),
    ({"beta": 1e39}, ".beta: overflows float32 (DirectML's FLOAT parameters are finite float32 values)"),
    ({"fused_activation": "relu"},
     ".fused_activation: str is not a fusable activation (use one of dmlq.activations)"),
    ({"a": TensorDesc(DataType.INT32, [1, 2, 3, 4])},
     ".a: data type INT32 is not supported (supported: FLOAT32, FLOAT16)"),
    ({"a": TensorDesc(F32, [1, 1, 2, 3, 4])}, ".a: dimension count 5 is not supported (supported: 2 to 4)"),
    ({"b": None}, ".b: tensor is required"),
]  # fmt: skip


@pytest.mark.parametrize("changes, message", REFUSALS)
def test_refusals_name_field_and_rule(changes, message):
    refused(desc(**changes), message)
