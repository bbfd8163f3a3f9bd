"""dmlq.onnx on one-node models built with onnx.helper: one per mapped node kind and opset.

Each mapped node's output is bit-identical to dmlq's NumPy layer on the same inputs, and the
report of ``compare`` counts exactly the elements an independent comparison with onnxruntime CPU
finds different.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from onnx import helper

import dmlq
import dmlq.onnx as dx
import onnx_oracle
from dmlq import TensorFlags
from dmlq.onnx import sessions
from dmlq.onnx.ort_int8 import pair_saturation, u8s8_saturates
from dmlq.onnx.program import program
from dmlq.onnx.running import execute
from dmlq.onnx.staging import stages
from dmlq.onnx.steps import Spec
from dmlq.threads import available_cores
from onnx_oracle import assert_steps_match_numpy_layer, model, ort_outputs

U8, I8, F32, F16 = np.uint8, np.int8, np.float32, np.float16


def quantize(opset: int) -> str:
    """The provider's operator for QuantizeLinear: QUANTIZE at opset 21 (DmlOperatorQuantization21)."""
    return "QUANTIZE" if opset == 21 else "ELEMENT_WISE_QUANTIZE_LINEAR"


def dequantize(opset: int) -> str:
    return "DEQUANTIZE" if opset == 21 else "ELEMENT_WISE_DEQUANTIZE_LINEAR"


def byte_data(rng, dtype, shape):
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, shape, endpoint=True).astype(dtype)


def verify(proto, feeds, operator: str) -> dx.Report:
    """:func:`onnx_oracle.verify`; the one node is the whole model, so compare's count for the node is
    the graph output's."""
    report = onnx_oracle.verify(proto, feeds, operator)
    assert report.nodes[0].differing == report.outputs[0].differing
    return report


@pytest.mark.parametrize("opset", [10, 13, 19, 21])
@pytest.mark.parametrize("dtype", [U8, I8])
def test_quantize_linear_per_tensor(opset, dtype, rng) -> None:
    x = (rng.standard_normal((2, 3, 5)) * 40).astype(F32)
    x[0, 0, :3] = [0.5, 1.5, -2.5]  # exact ties: both round halves to even
    node = helper.make_node("QuantizeLinear", ["x", "s", "z"], ["y"])
    proto = model([node], {"x": x}, {"s": np.float32(0.5), "z": dtype(3)}, ["y"], opset)
    report = verify(proto, {"x": x}, quantize(opset))
    assert report.identical


@pytest.mark.parametrize("opset", [13, 19, 21])
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_quantize_linear_per_axis(opset, axis, rng) -> None:
    x = rng.standard_normal((3, 4, 5)).astype(F32)
    length = x.shape[axis]
    constants = {"s": rng.uniform(0.01, 0.1, length).astype(F32), "z": byte_data(rng, I8, length)}
    node = helper.make_node("QuantizeLinear", ["x", "s", "z"], ["y"], axis=axis)
    proto = model([node], {"x": x}, constants, ["y"], opset)
    if opset == 21 and axis != -1:  # laid along the last dimension (5), which 3 and 4 do not divide
        (verdict,) = dx.check(proto)
        assert verdict.operator == "QUANTIZE" and verdict.valid is False
        with pytest.raises(dmlq.DmlError, match="must each divide"):
            dx.run(proto, {"x": x})
        return
    verify(proto, {"x": x}, quantize(opset))


def test_quantize_21_reads_a_1d_scale_along_the_last_dimension_whatever_axis_says(rng) -> None:
    """DmlOperatorQuantization21 describes the scale by its own shape: on data (2, 6), a per-row scale
    of 2 (axis 0) lines up with the last dimension, in blocks of 3 columns. check warns, run computes
    what DirectML would, compare names the cause."""
    x = rng.standard_normal((2, 6)).astype(F32)
    scale = np.float32([0.05, 0.2])
    node = helper.make_node("QuantizeLinear", ["x", "s", "z"], ["y"], axis=0)
    proto = model([node], {"x": x}, {"s": scale, "z": np.zeros(2, I8)}, ["y"], 21)
    (verdict,) = dx.check(proto)
    assert verdict.valid and "the provider does not read axis for opset 21" in verdict.warning
    y = dx.run(proto, {"x": x})["y"]
    np.testing.assert_array_equal(y, dmlq.quantize_linear(x, np.repeat(scale, 3), np.int8(0)))
    report = dx.compare(proto, {"x": x})
    assert report.nodes[0].differing and "does not read axis for opset 21" in report.nodes[0].cause


@pytest.mark.parametrize("opset", [19, 21])
def test_quantize_linear_float16_without_zero_point(opset, rng) -> None:
    x = rng.standard_normal((4, 6)).astype(F16)
    node = helper.make_node("QuantizeLinear", ["x", "s"], ["y"])
    proto = model([node], {"x": x}, {"s": np.float16(0.03)}, ["y"], opset)
    verify(proto, {"x": x}, quantize(opset))


@pytest.mark.parametrize("opset", [10, 13, 19, 21])
@pytest.mark.parametrize("dtype", [U8, I8])
def test_dequantize_linear(opset, dtype, rng) -> None:
    q = byte_data(rng, dtype, (2, 7))
    node = helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"])
    proto = model([node], {"q": q}, {"s": np.float32(0.07), "z": dtype(5)}, ["y"], opset)
    assert verify(proto, {"q": q}, dequantize(opset)).identical


@pytest.mark.parametrize("opset", [13, 19])
def test_dequantize_linear_per_axis_and_int32(opset, rng) -> None:
    q = byte_data(rng, U8, (2, 3, 4))
    constants = {"s": rng.uniform(0.01, 0.1, 3).astype(F32), "z": byte_data(rng, U8, 3)}
    node = helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"], axis=1)
    verify(model([node], {"q": q}, constants, ["y"], opset), {"q": q}, "ELEMENT_WISE_DEQUANTIZE_LINEAR")
    bias = rng.integers(-5000, 5000, (6,)).astype(np.int32)
    node = helper.make_node("DequantizeLinear", ["q", "s"], ["y"])
    proto = model([node], {"q": bias}, {"s": np.float32(0.001)}, ["y"], opset)
    verify(proto, {"q": bias}, "ELEMENT_WISE_DEQUANTIZE_LINEAR")


@pytest.mark.parametrize("opset, valid", [(10, True), (13, False), (19, False)])
def test_a_bias_dequantize_with_a_1_element_1d_scale(opset, valid, rng) -> None:
    """An int32 bias [6] with scale [1] and no axis: DmlOperatorElementwiseQLinear lays a 1-D scale that
    is not the data's shape along axis, which onnxruntime fills in as 1 from opset 13 (axis < 1 fails:
    the provider cannot create the kernel); DequantizeLinear-10 has no axis (0): a broadcast scale."""
    bias = rng.integers(-5000, 5000, (6,)).astype(np.int32)
    node = helper.make_node("DequantizeLinear", ["q", "s"], ["y"])
    proto = model([node], {"q": bias}, {"s": np.float32([0.001])}, ["y"], opset)
    (verdict,) = dx.check(proto)
    assert verdict.operator == "ELEMENT_WISE_DEQUANTIZE_LINEAR" and verdict.valid is valid
    if valid:
        verify(proto, {"q": bias}, "ELEMENT_WISE_DEQUANTIZE_LINEAR")
    else:
        assert "axis < outputShapeDimCount" in verdict.reason
        with pytest.raises(dmlq.DmlError, match="axis < outputShapeDimCount"):
            dx.run(proto, {"q": bias})


def test_an_int32_dequantize_21_is_not_the_providers() -> None:
    """DequantizeLinear-21 is registered for 8- and 4-bit data only (OperatorRegistration.cpp)."""
    node = helper.make_node("DequantizeLinear", ["q", "s"], ["y"])
    proto = model([node], {"q": np.zeros(6, np.int32)}, {"s": np.float32(0.001)}, ["y"], 21)
    (verdict,) = dx.check(proto)
    assert verdict.operator is None and "without int32" in verdict.rule


@pytest.mark.parametrize("opset", [10, 21])
@pytest.mark.parametrize("b_type", [U8, I8])
@pytest.mark.parametrize("per_column", [False, True])
def test_qlinear_matmul(opset, b_type, per_column, rng) -> None:
    a, b = (
        byte_data(rng, U8, (2, 3, 8)),
        (rng.integers(-20, 20, (8, 5)) + (128 if b_type == U8 else 0)).astype(b_type),
    )
    n = b.shape[-1]
    b_scale = rng.uniform(0.01, 0.03, n).astype(F32) if per_column else np.float32(0.02)
    b_zero = (
        (np.full(n, 128 if b_type == U8 else 0, b_type)) if per_column else b_type(128 if b_type == U8 else 0)
    )
    constants = {
        "sa": np.float32(0.05),
        "za": U8(120),
        "sb": b_scale,
        "zb": b_zero,
        "sy": np.float32(0.2),
        "zy": U8(128),
    }
    node = helper.make_node("QLinearMatMul", ["a", "sa", "za", "b", "sb", "zb", "sy", "zy"], ["y"])
    proto = model([node], {"a": a, "b": b}, constants, ["y"], opset)
    verify(proto, {"a": a, "b": b}, "QUANTIZED_LINEAR_MATRIX_MULTIPLY")


@pytest.mark.parametrize("constant", [True, False])
def test_a_constant_b_is_owned_by_dml_and_bound_once(constant, rng) -> None:
    a, b = byte_data(rng, U8, (3, 8)), byte_data(rng, I8, (8, 5))
    scales = {"sa": F32(0.05), "za": U8(120), "sb": F32(0.02), "zb": I8(0), "sy": F32(0.5), "zy": U8(128)}
    node = helper.make_node("QLinearMatMul", ["a", "sa", "za", "b", "sb", "zb", "sy", "zy"], ["y"])
    feeds = {"a": a} if constant else {"a": a, "b": b}
    loaded = dx.load(model([node], feeds, {**scales, **({"b": b} if constant else {})}, ["y"], 21))
    values = {}
    execute(loaded, feeds, keep=values)
    assert assert_steps_match_numpy_layer(loaded, values) == 1
    (compiled,) = program(loaded, dmlq.FeatureLevel.newest()).compiled_operators()
    assert bool(compiled.desc.b.flags & TensorFlags.OWNED_BY_DML) == constant
    np.testing.assert_array_equal(execute(loaded, feeds)["y"], values["y"])  # run again: B stays bound


def test_every_constant_operand_is_owned_by_dml_and_bound_once(rng) -> None:
    """Initializers and values computed from them alone are bound at initialization; fed ones per run."""
    x = rng.uniform(-4, 4, (2, 3, 5)).astype(F32)
    scale, zero_point = np.float32([0.5, 0.25, 0.125]), U8([120, 128, 136])
    node = helper.make_node("QuantizeLinear", ["x", "s", "z"], ["y"], axis=1)
    loaded = dx.load(model([node], {"x": x, "z": zero_point}, {"s": scale}, ["y"], 13))
    feeds = {"x": x, "z": zero_point}
    values = {}
    execute(loaded, feeds, keep=values)
    assert assert_steps_match_numpy_layer(loaded, values) == 1
    (compiled,) = program(loaded, dmlq.FeatureLevel.newest()).compiled_operators()
    owned = {name: bool(t.flags & TensorFlags.OWNED_BY_DML) for name, t in compiled.desc.input_tensors()}
    assert owned == {"input": False, "scale": True, "zero_point": False}
    again = {}
    execute(loaded, {"x": x, "z": zero_point + U8(1)}, keep=again)  # a fed operand is bound per run
    assert assert_steps_match_numpy_layer(loaded, again) == 1
    assert not np.array_equal(again["y"], values["y"])


@pytest.mark.parametrize("dtype", [U8, I8])
@pytest.mark.parametrize(
    "shape, attributes",
    [
        ((2, 3, 9, 10), {"kernel_shape": [2, 2], "strides": [2, 2]}),
        ((1, 4, 7, 7), {"kernel_shape": [3, 3], "pads": [1, 0, 1, 2], "ceil_mode": 1}),
        ((1, 2, 9, 8), {"kernel_shape": [2, 3], "dilations": [2, 1], "auto_pad": "SAME_UPPER"}),
        ((2, 3, 11), {"kernel_shape": [3], "strides": [2]}),
        ((1, 2, 4, 5, 6), {"kernel_shape": [2, 2, 2], "storage_order": 1}),
    ],
)
def test_an_8bit_max_pool_runs_channels_last_with_onnxs_numbers(dtype, shape, attributes, rng) -> None:
    """An other node: onnxruntime's NhwcMaxPool between Transposes (HandleMaxPool), as inside a whole
    model; the maxima of the model's own MaxPool."""
    x = byte_data(rng, dtype, shape)
    proto = model([helper.make_node("MaxPool", ["x"], ["y"], **attributes)], {"x": x}, {}, ["y"], 13)
    loaded = dx.load(proto)
    for _ in range(2):  # step by step, then by the plan
        np.testing.assert_array_equal(dx.run(loaded, {"x": x})["y"], ort_outputs(proto, {"x": x})[0])
    made = sessions.sub_model(loaded, list(proto.graph.node), {"x": x.dtype}, ["y"])
    assert [node.op_type for node in made.graph.node] == ["Transpose", "NhwcMaxPool", "Transpose"]


def test_a_max_pool_with_its_indices_runs_as_the_model_has_it(rng) -> None:
    x = byte_data(rng, U8, (1, 2, 6, 6))
    node = helper.make_node("MaxPool", ["x"], ["y", "i"], kernel_shape=[2, 2], strides=[2, 2])
    proto = model([node], {"x": x}, {}, ["y", "i"], 13)
    found = dx.run(proto, {"x": x})
    for name, expected in zip(["y", "i"], ort_outputs(proto, {"x": x})):
        np.testing.assert_array_equal(found[name], expected)
    made = sessions.sub_model(dx.load(proto), [node], {"x": x.dtype}, ["y", "i"])
    assert [node.op_type for node in made.graph.node] == ["MaxPool"]


def test_other_nodes_run_at_the_thread_count_dmlq_has_when_it_changes(rng) -> None:
    if available_cores() < 2:
        pytest.skip("needs two cores to tell the thread counts apart")
    a = rng.standard_normal((4, 4)).astype(F32)
    loaded = dx.load(model([helper.make_node("Neg", ["a"], ["y"])], {"a": a}, {}, ["y"], 13))
    previous = dmlq.get_num_threads()
    try:
        for threads in (1, 2):
            dmlq.set_num_threads(threads)
            np.testing.assert_array_equal(dx.run(loaded, {"a": a})["y"], -a)
            made = program(loaded, dmlq.FeatureLevel.newest()).sessions()
            assert threads in [session.get_session_options().intra_op_num_threads for session in made]
    finally:
        dmlq.set_num_threads(previous)


def test_pair_saturation_is_what_int16_pair_sums_take_off(rng) -> None:
    a, b = byte_data(rng, U8, (2, 5, 7)), byte_data(rng, I8, (7, 3))
    products = a.astype(np.int64)[..., :, :, None] * b.astype(np.int64)[None, None, :, :]
    padded = np.concatenate([products, np.zeros_like(products[..., :1, :])], axis=-2)
    pairs = padded[..., 0::2, :] + padded[..., 1::2, :]
    expected = (np.clip(pairs, -32768, 32767) - pairs).sum(axis=-2)
    np.testing.assert_array_equal(pair_saturation(a, b), expected)


def test_compare_names_onnxruntime_int16_saturation_where_it_reaches_the_differences(rng) -> None:
    """On a CPU without VNNI onnxruntime's u8 x s8 kernel saturates pair sums; elsewhere it does not."""
    a = rng.integers(200, 255, (6, 16), endpoint=True).astype(U8)
    b = (rng.integers(100, 127, (16, 4), endpoint=True) * rng.choice([-1, 1], (16, 4))).astype(I8)
    constants = {"sa": F32(0.05), "za": U8(128), "sb": F32(0.02), "zb": I8(0), "sy": F32(2.5), "zy": U8(128)}
    node = helper.make_node("QLinearMatMul", ["a", "sa", "za", "b", "sb", "zb", "sy", "zy"], ["y"])
    report = verify(
        model([node], {"a": a}, {**constants, "b": b}, ["y"], 21),
        {"a": a},
        "QUANTIZED_LINEAR_MATRIX_MULTIPLY",
    )
    (step,) = report.nodes
    if u8s8_saturates():
        assert step.differing > 0
        assert "saturates int16 pair sums" in step.cause
        assert f"reaches {step.differing} of {step.differing} differing" in step.cause
    else:
        assert "saturates" not in step.cause


@pytest.mark.parametrize("dtype", [U8, I8])
def test_com_microsoft_qlinear_add(dtype, rng) -> None:
    a, b = byte_data(rng, dtype, (3, 4, 5)), byte_data(rng, dtype, (4, 5))
    constants = {
        "sa": np.float32(0.02),
        "za": dtype(3),
        "sb": np.float32(0.03),
        "zb": dtype(-1 if dtype == I8 else 9),
        "sy": np.float32(0.05),
        "zy": dtype(7),
    }
    node = helper.make_node(
        "QLinearAdd", ["a", "sa", "za", "b", "sb", "zb", "sy", "zy"], ["y"], domain="com.microsoft"
    )
    proto = model([node], {"a": a, "b": b}, constants, {"y": (dtype, [3, 4, 5])}, 13, microsoft=True)
    verify(proto, {"a": a, "b": b}, "ELEMENT_WISE_QUANTIZED_LINEAR_ADD")


@pytest.mark.parametrize("opset", [7, 13, 14])
@pytest.mark.parametrize("dtype", [F32, F16])
def test_add(opset, dtype, rng) -> None:
    a, b = rng.standard_normal((2, 3, 4)).astype(dtype), rng.standard_normal((3, 1)).astype(dtype)
    node = helper.make_node("Add", ["a", "b"], ["y"])
    report = verify(model([node], {"a": a, "b": b}, {}, ["y"], opset), {"a": a, "b": b}, "ELEMENT_WISE_ADD")
    assert report.identical


@pytest.mark.parametrize(
    "activation, opset",
    [(("Relu", {}), 13), (("Relu", {}), 14), (("LeakyRelu", {"alpha": 0.2}), 13), (("LeakyRelu", {}), 16)],
)
def test_add_then_relu_or_leaky_relu_is_add1(activation, opset, rng) -> None:
    a, b = rng.standard_normal((4, 6)).astype(F32), rng.standard_normal(6).astype(F32)
    name, attributes = activation
    nodes = [helper.make_node("Add", ["a", "b"], ["t"]), helper.make_node(name, ["t"], ["y"], **attributes)]
    verify(model(nodes, {"a": a, "b": b}, {}, ["y"], opset), {"a": a, "b": b}, "ELEMENT_WISE_ADD1")


def test_leaky_relu_fuses_with_its_default_alpha(rng) -> None:
    a = rng.standard_normal((3, 5)).astype(F32)
    nodes = [helper.make_node("Add", ["a", "a"], ["t"]), helper.make_node("LeakyRelu", ["t"], ["y"])]
    (step,) = stages(dx.load(model(nodes, {"a": a}, {}, ["y"], 16)))[0].steps
    assert step.describe([Spec(a.dtype, a.shape)] * 2).desc.fused_activation.alpha == F32(0.01)


@pytest.mark.parametrize(
    "activation", [("Sigmoid", {}), ("Elu", {}), ("HardSigmoid", {"alpha": 0.3}), ("Tanh", {})]
)
def test_add_then_another_activation_stays_add_and_the_activation_runs_as_other(activation, rng) -> None:
    """DmlFusedAdd's activation filter is Relu and LeakyRelu only (OperatorUtility.cpp)."""
    a, b = rng.standard_normal((4, 6)).astype(F32), rng.standard_normal(6).astype(F32)
    name, attributes = activation
    nodes = [helper.make_node("Add", ["a", "b"], ["t"]), helper.make_node(name, ["t"], ["y"], **attributes)]
    proto = model(nodes, {"a": a, "b": b}, {}, ["y"], 13)
    assert [v.operator for v in dx.check(proto)] == ["ELEMENT_WISE_ADD", None]
    np.testing.assert_array_equal(
        dx.run(proto, {"a": a, "b": b})["y"], ort_outputs(proto, {"a": a, "b": b})[0]
    )


@pytest.mark.parametrize("opset", [8, 13])
@pytest.mark.parametrize("dtype", [F32, F16])
def test_sum_of_two_is_add(opset, dtype, rng) -> None:
    a, b = rng.standard_normal((2, 3, 4)).astype(dtype), rng.standard_normal((3, 1)).astype(dtype)
    node = helper.make_node("Sum", ["a", "b"], ["y"])
    verify(model([node], {"a": a, "b": b}, {}, ["y"], opset), {"a": a, "b": b}, "ELEMENT_WISE_ADD")


@pytest.mark.parametrize("opset", [8, 13, 16])
def test_sum_of_two_then_relu_is_add1(opset, rng) -> None:
    a, b = rng.standard_normal((4, 6)).astype(F32), rng.standard_normal(6).astype(F32)
    nodes = [
        helper.make_node("Sum", ["a", "b"], ["t"]),
        helper.make_node("LeakyRelu", ["t"], ["y"], alpha=0.3),
    ]
    verify(model(nodes, {"a": a, "b": b}, {}, ["y"], opset), {"a": a, "b": b}, "ELEMENT_WISE_ADD1")


def test_sum_of_opset_7_does_not_fuse(rng) -> None:
    """Sum's since-version 6 is not in c_fusableOps (8 and 13 are)."""
    a = rng.standard_normal((2, 2)).astype(F32)
    nodes = [helper.make_node("Sum", ["a", "a"], ["t"]), helper.make_node("Relu", ["t"], ["y"])]
    assert [v.operator for v in dx.check(model(nodes, {"a": a}, {}, ["y"], 7))] == ["ELEMENT_WISE_ADD", None]


@pytest.mark.parametrize("count", [1, 3])
def test_sum_of_other_than_two_inputs_is_other(count, rng) -> None:
    a = rng.standard_normal((2, 2)).astype(F32)
    proto = model([helper.make_node("Sum", ["a"] * count, ["y"])], {"a": a}, {}, ["y"], 13)
    (verdict,) = dx.check(proto)
    assert verdict.operator is None and "two inputs only" in verdict.rule
    np.testing.assert_array_equal(dx.run(proto, {"a": a})["y"], ort_outputs(proto, {"a": a})[0])


@pytest.mark.parametrize("op_type", ["QuantizeLinear", "DequantizeLinear"])
def test_a_quantization_version_the_provider_does_not_register_is_an_other_node(op_type, rng) -> None:
    """The provider registers (De)QuantizeLinear 10, 13, 19 and 21 (dmlq.onnx.mapping's sources): at
    opset 23 the node is (De)QuantizeLinear-23, which onnxruntime gives its CPU provider."""
    quantize = op_type == "QuantizeLinear"
    data = rng.standard_normal((2, 3)).astype(F32) if quantize else byte_data(rng, U8, (2, 3))
    node = helper.make_node(op_type, ["x", "s", "z"], ["y"])
    proto = model([node], {"x": data}, {"s": np.float32(0.25), "z": U8(7)}, ["y"], 23)
    (verdict,) = dx.check(proto)
    assert verdict.operator is None
    assert verdict.rule == f"the DirectML provider registers {op_type} 10, 13, 19, 21, not 23"
    np.testing.assert_array_equal(dx.run(proto, {"x": data})["y"], ort_outputs(proto, {"x": data})[0])


def test_a_qdq_add_of_unregistered_q_and_dq_versions_still_fuses(rng) -> None:
    """The 2DQ_DML selector looks at the target's provider only (BaseSelector::Select): at opset 23 the
    Q and DQ (version 23) are not the provider's, the Add (14) is, and the group becomes QLinearAdd."""
    proto, feeds = qdq_add_model(rng)
    proto.opset_import[0].version = 23
    (verdict,) = dx.check(proto)
    assert verdict.operator == "ELEMENT_WISE_QUANTIZED_LINEAR_ADD" and len(verdict.op_types) == 4


def test_add_whose_sum_is_a_graph_output_fuses_nothing(rng) -> None:
    a = rng.standard_normal((2, 2)).astype(F32)
    nodes = [helper.make_node("Add", ["a", "a"], ["t"]), helper.make_node("Relu", ["t"], ["y"])]
    verdicts = dx.check(model(nodes, {"a": a}, {}, ["t", "y"], 13))
    assert [v.operator for v in verdicts] == ["ELEMENT_WISE_ADD", None]


def test_add_read_by_two_nodes_fuses_nothing(rng) -> None:
    """GraphTransformer.cpp fuses only a node whose output has exactly one consumer edge."""
    a = rng.standard_normal((2, 2)).astype(F32)
    nodes = [
        helper.make_node("Add", ["a", "a"], ["t"]),
        helper.make_node("Relu", ["t"], ["y"]),
        helper.make_node("Neg", ["t"], ["z"]),
    ]
    verdicts = dx.check(model(nodes, {"a": a}, {}, ["y", "z"], 13))
    assert [v.operator for v in verdicts] == ["ELEMENT_WISE_ADD", None, None]


def qdq_add_model(rng, dtype=U8):
    dq = [helper.make_node("DequantizeLinear", [name, "s" + name, "z"], ["f" + name]) for name in ("a", "b")]
    nodes = [
        *dq,
        helper.make_node("Add", ["fa", "fb"], ["sum"]),
        helper.make_node("QuantizeLinear", ["sum", "sy", "z"], ["y"]),
    ]
    constants = {"sa": np.float32(0.02), "sb": np.float32(0.02), "sy": np.float32(0.04), "z": dtype(10)}
    feeds = {"a": byte_data(rng, dtype, (8, 16)), "b": byte_data(rng, dtype, (8, 16))}
    return model(nodes, feeds, constants, ["y"], 13), feeds


def test_qdq_add_group_is_one_quantized_linear_add(rng) -> None:
    proto, feeds = qdq_add_model(rng)
    verdicts = dx.check(proto)
    assert [(v.operator, v.op_types) for v in verdicts] == [
        (
            "ELEMENT_WISE_QUANTIZED_LINEAR_ADD",
            ("DequantizeLinear", "DequantizeLinear", "Add", "QuantizeLinear"),
        )
    ]
    report = verify(proto, feeds, "ELEMENT_WISE_QUANTIZED_LINEAR_ADD")
    if report.nodes[0].differing:  # 0.02 + 0.02 -> 0.04 makes exact halves: ORT's ratios break them otherwise
        assert report.nodes[0].largest == 1 and "ratios" in report.nodes[0].cause


def test_dq_transpose_q_collapses_onto_the_quantized_bytes(rng) -> None:
    nodes = [
        helper.make_node("DequantizeLinear", ["q", "s", "z"], ["f"]),
        helper.make_node("Transpose", ["f"], ["t"]),
        helper.make_node("QuantizeLinear", ["t", "s", "z"], ["y"]),
    ]
    q = byte_data(rng, U8, (3, 5))
    proto = model(nodes, {"q": q}, {"s": np.float32(0.1), "z": U8(4)}, ["y"], 13)
    (verdict,) = dx.check(proto)
    assert verdict.operator is None and verdict.op_types == (
        "DequantizeLinear",
        "Transpose",
        "QuantizeLinear",
    )
    assert np.array_equal(dx.run(proto, {"q": q})["y"], q.T)


def test_a_model_mixing_mapped_and_other_nodes_matches_onnxruntime(rng) -> None:
    x, bias = rng.standard_normal((2, 3, 4)).astype(F32), rng.standard_normal((3, 2)).astype(F32)
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"]),
        helper.make_node("DequantizeLinear", ["q", "s", "z"], ["d"]),
        helper.make_node("Transpose", ["d"], ["t"], perm=[2, 1, 0]),
        helper.make_node("Add", ["t", "bias"], ["u"]),
        helper.make_node("Relu", ["u"], ["r"]),
        helper.make_node("Softmax", ["r"], ["y"], axis=-1),
    ]
    proto = model(nodes, {"x": x}, {"s": np.float32(0.05), "z": I8(2), "bias": bias}, ["y"], 13)
    loaded = dx.load(proto)
    assert [s.mapped for stage in stages(loaded) for s in stage.steps] == [True, True, False, True, False]
    report = dx.compare(loaded, {"x": x})
    assert all(d.differing in (0, None) for d in report.nodes)
    assert report.identical
    assert np.array_equal(dx.run(loaded, {"x": x})["y"], ort_outputs(proto, {"x": x})[0])


def test_values_computed_from_initializers_are_computed_once_and_stay_right(rng) -> None:
    weight = rng.integers(-100, 100, (4, 3)).astype(I8)
    nodes = [
        helper.make_node("DequantizeLinear", ["w", "s"], ["wf"]),
        helper.make_node("MatMul", ["x", "wf"], ["y"]),
    ]
    proto = model(nodes, {"x": np.zeros((2, 4), F32)}, {"w": weight, "s": np.float32(0.01)}, ["y"], 13)
    loaded = dx.load(proto)
    for seed in (1, 2):
        x = np.random.default_rng(seed).standard_normal((2, 4)).astype(F32)
        assert np.array_equal(dx.run(loaded, {"x": x})["y"], dx.run(proto, {"x": x})["y"])
        assert np.allclose(dx.run(loaded, {"x": x})["y"], x @ (weight * np.float32(0.01)), rtol=1e-6)


def test_a_4bit_dequantize_21_is_dequantize_then_gemm(rng) -> None:
    weight = rng.integers(-8, 8, (4, 3)).astype(ml_dtypes.int4)
    nodes = [
        helper.make_node("DequantizeLinear", ["w", "s"], ["wf"]),
        helper.make_node("MatMul", ["x", "wf"], ["y"]),
    ]
    proto = model(nodes, {"x": np.zeros((2, 4), F32)}, {"w": weight, "s": np.float32(0.5)}, ["y"], 21)
    verdicts = dx.check(proto)
    assert [(v.operator, v.missing) for v in verdicts] == [("DEQUANTIZE", ""), ("GEMM", "")]
    x = rng.standard_normal((2, 4)).astype(F32)
    np.testing.assert_allclose(dx.run(proto, {"x": x})["y"], ort_outputs(proto, {"x": x})[0], rtol=1e-6)


def test_a_4bit_com_microsoft_dequantize_is_not_the_providers(rng) -> None:
    """com.microsoft DequantizeLinear is registered with opset 19's types: no 4-bit data."""
    weight = rng.integers(-8, 8, (4, 3)).astype(ml_dtypes.int4)
    node = helper.make_node("DequantizeLinear", ["w", "s"], ["y"], domain="com.microsoft")
    proto = model([node], {}, {"w": weight, "s": np.float32(0.5)}, {"y": (F32, [4, 3])}, 13, microsoft=True)
    proto.graph.input.append(helper.make_tensor_value_info("unused", 1, [1]))
    (verdict,) = dx.check(proto)
    assert verdict.operator is None and "without int4" in verdict.rule


class _UntypedGraph:
    """A graph whose types give no dtype for any value (a model that shape inference left untyped)."""

    def dtype(self, name: str) -> None:
        return None


@pytest.mark.parametrize("op_type", ["DequantizeLinear", "QuantizeLinear"])
def test_a_q_dq_21_of_unknown_integer_type_is_left_to_onnxruntime_with_the_reason(op_type: str) -> None:
    from dmlq.onnx.rules import Unmapped, quantization21

    node = helper.make_node(op_type, ["x", "scale", "zero_point"], ["y"])
    verdict = quantization21.rule(_UntypedGraph(), node)  # type: ignore[arg-type]
    role = "zero point's" if op_type == "QuantizeLinear" else "input's"
    assert verdict == Unmapped(f"{op_type} 21 is not mapped: the model's types do not give its {role} dtype")
