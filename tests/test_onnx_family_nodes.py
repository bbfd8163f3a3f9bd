"""dmlq.onnx on one-node models of the quantized family the provider maps onto DirectML's
QUANTIZED_LINEAR_CONVOLUTION, CONVOLUTION_INTEGER, MATRIX_MULTIPLY_INTEGER(_TO_FLOAT),
DYNAMIC_QUANTIZE_LINEAR, QUANTIZED_LINEAR_AVERAGE_POOLING, DEQUANTIZE + GEMM and GEMM.

Each mapped step's output equals dmlq's reference formulas on ONNX's meaning of the same operands,
its descriptions are laid out as the provider's kernel builds them, and ``compare`` counts exactly
what an independent comparison with onnxruntime CPU finds, every difference with a named cause.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

import dmlq
import dmlq.onnx as dx
from dmlq import TensorFlags
from dmlq.onnx.comparing import UNEXPLAINED
from dmlq.onnx.program import program
from dmlq.onnx.running import execute
from dmlq.onnx.staging import stages
from dmlq.onnx.steps import Spec
from dmlq.types import MatrixTransform
from onnx_oracle import model, verify

U8, I8, I32, F32 = np.uint8, np.int8, np.int32, np.float32


def data(rng, dtype, shape):
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, shape, endpoint=True).astype(dtype)


def describe(proto, *specs: tuple) -> list:
    """The descriptions of the model's one step for operands of these (dtype, shape)s."""
    (step,) = [step for stage in stages(dx.load(proto)) for step in stage.steps]
    return [
        node.desc
        for node in step.describe([None if s is None else Spec(np.dtype(s[0]), s[1]) for s in specs]).nodes
    ]


def conv_operands(rng, x_shape, w_shape, per_channel=True):
    m = w_shape[0]
    return {
        "xs": F32(0.05),
        "xz": U8(120),
        "w": data(rng, I8, w_shape),
        "ws": rng.uniform(0.01, 0.02, m).astype(F32) if per_channel else F32(0.015),
        "wz": np.zeros(m, I8) if per_channel else I8(0),
        "ys": F32(0.3),
        "yz": U8(128),
        "bias": rng.integers(-2000, 2000, m).astype(I32),
    }


QLINEAR_CONV = ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "bias"]


@pytest.mark.parametrize(
    "attributes",
    [{"pads": [1, 1, 1, 1]}, {"strides": [2, 1], "dilations": [1, 2]},
     {"auto_pad": "SAME_UPPER", "strides": [2, 2]}, {"auto_pad": "SAME_LOWER", "strides": [2, 2]},
     {"group": 2, "pads": [0, 1, 2, 1]}],
)  # fmt: skip
def test_qlinear_conv(attributes, rng) -> None:
    x = data(rng, U8, (2, 4, 7, 6))
    w_shape = (6, 4 // attributes.get("group", 1), 3, 3)
    node = helper.make_node("QLinearConv", QLINEAR_CONV, ["y"], **attributes)
    verify(model([node], {"x": x}, conv_operands(rng, x.shape, w_shape), ["y"], 13), {"x": x},
           "QUANTIZED_LINEAR_CONVOLUTION")  # fmt: skip


def test_qlinear_conv_is_described_as_the_provider_builds_it(rng) -> None:
    """DmlOperatorQLinearConv.cpp: B in BiasTensor, per-channel w scale and B on the C axis, x's scale
    right-aligned, 2 spatial dimensions; a 1-D convolution [N, C, W] as {N, C, 1, W}."""
    x = data(rng, U8, (2, 4, 9))
    node = helper.make_node("QLinearConv", QLINEAR_CONV, ["y"], pads=[1, 1], strides=[2])
    proto = model([node], {"x": x}, conv_operands(rng, x.shape, (6, 4, 3)), ["y"], 13)
    (desc,) = describe(proto, (U8, x.shape), (F32, ()), (U8, ()), (I8, (6, 4, 3)), (F32, (6,)), (I8, (6,)),
                       (I32, (6,)), (F32, ()), (U8, ()))  # fmt: skip
    assert desc.input.sizes == (2, 4, 1, 9) and desc.filter.sizes == (6, 4, 1, 3)
    assert desc.filter_scale.sizes == desc.filter_zero_point.sizes == desc.bias.sizes == (1, 6, 1, 1)
    assert desc.input_scale.sizes == desc.output_zero_point.sizes == (1, 1, 1, 1)
    assert (desc.strides, desc.start_padding, desc.end_padding) == ((1, 2), (0, 1), (0, 1))
    assert desc.output.sizes == (2, 6, 1, 5)
    verify(proto, {"x": x}, "QUANTIZED_LINEAR_CONVOLUTION")


def test_qlinear_conv_of_5d_data_is_refused_as_the_kernel_does(rng) -> None:
    x = data(rng, U8, (1, 2, 3, 4, 4))
    node = helper.make_node("QLinearConv", QLINEAR_CONV, ["y"])
    proto = model([node], {"x": x}, conv_operands(rng, x.shape, (3, 2, 1, 1, 1)), ["y"], 13)
    (verdict,) = dx.check(proto)
    assert verdict.valid is False and "Input can only be used with 3D/4D tensors" in verdict.reason
    with pytest.raises(dmlq.DmlError, match="3D/4D"):
        dx.run(proto, {"x": x})


def test_a_constant_filter_is_owned_by_dml(rng) -> None:
    x = data(rng, U8, (1, 4, 5, 5))
    node = helper.make_node("QLinearConv", QLINEAR_CONV, ["y"], pads=[1, 1, 1, 1])
    loaded = dx.load(model([node], {"x": x}, conv_operands(rng, x.shape, (2, 4, 3, 3)), ["y"], 13))
    dx.run(loaded, {"x": x})
    (compiled,) = program(loaded, dmlq.FeatureLevel.newest()).compiled_operators()
    owned = {name for name, tensor in compiled.desc.input_tensors()
             if tensor is not None and tensor.flags & TensorFlags.OWNED_BY_DML}  # fmt: skip
    assert owned == {"input_scale", "input_zero_point", "filter", "filter_scale", "filter_zero_point", "bias",
                     "output_scale", "output_zero_point"}  # fmt: skip


@pytest.mark.parametrize("w_type", [U8, I8])
def test_conv_integer(w_type, rng) -> None:
    x = data(rng, U8, (2, 3, 6, 6))
    w = data(rng, w_type, (4, 3, 3, 3)) // 4
    node = helper.make_node("ConvInteger", ["x", "w", "xz", "wz"], ["y"], pads=[1, 0, 1, 0])
    proto = model([node], {"x": x}, {"w": w, "xz": U8(100), "wz": w_type(1)}, ["y"], 13)
    verify(proto, {"x": x}, "CONVOLUTION_INTEGER", exact=True)
    (desc,) = describe(proto, (U8, x.shape), (U8, ()), (w_type, w.shape), (w_type, ()))
    assert desc.input_zero_point.sizes == desc.filter_zero_point.sizes == (1, 1, 1, 1)


def test_conv_integer_of_5d_data_is_refused_by_directml(rng) -> None:
    """The kernel takes 3-D to 5-D data; DirectML's CONVOLUTION_INTEGER only DimensionCount 2."""
    x = data(rng, U8, (1, 2, 3, 3, 3))
    node = helper.make_node("ConvInteger", ["x", "w"], ["y"])
    (verdict,) = dx.check(model([node], {"x": x}, {"w": data(rng, U8, (2, 2, 1, 1, 1))}, ["y"], 13))
    assert verdict.operator == "CONVOLUTION_INTEGER" and verdict.valid is False
    assert "dimension count 5 is not supported" in verdict.reason


@pytest.mark.parametrize(("a_shape", "b_shape"), [((5, 8), (8, 3)), ((2, 5, 8), (8, 3)), ((8,), (2, 8, 3))])
def test_matmul_integer(a_shape, b_shape, rng) -> None:
    """onnxruntime CPU takes scalar zero points (and a per-column one for 2-D B) only."""
    a, b = data(rng, U8, a_shape), data(rng, U8, b_shape)
    zero_points = {"az": U8(7), "bz": data(rng, U8, (3,)) if len(b_shape) == 2 else U8(9)}
    node = helper.make_node("MatMulInteger", ["a", "b", "az", "bz"], ["y"])
    proto = model([node], {"a": a, "b": b}, zero_points, ["y"], 13)
    verify(proto, {"a": a, "b": b}, "MATRIX_MULTIPLY_INTEGER", exact=True)


def test_matmul_integer_zero_points_are_per_row_and_per_column(rng) -> None:
    node = helper.make_node("MatMulInteger", ["a", "b", "az", "bz"], ["y"])
    constants = {"b": data(rng, I8, (8, 3)), "az": data(rng, U8, (5,)), "bz": data(rng, I8, (3,))}
    proto = model([node], {"a": data(rng, U8, (5, 8))}, constants, ["y"], 13)
    (desc,) = describe(proto, (U8, (5, 8)), (U8, (5,)), (I8, (8, 3)), (I8, (3,)))
    assert desc.a_zero_point.sizes == (1, 1, 5, 1) and desc.b_zero_point.sizes == (1, 1, 1, 3)


def integer_to_float(rng, b_type=U8, largest_pair=False):
    """``largest_pair``: y[0, 0, 0] sums 255 * 127 twice (int8 B), past int16's range."""
    node = helper.make_node("MatMulIntegerToFloat", ["a", "b", "as", "bs", "az", "bz", "bias"], ["y"],
                            domain="com.microsoft")  # fmt: skip
    b_scale, bias = rng.uniform(0.01, 0.02, 6).astype(F32), rng.standard_normal(6).astype(F32)
    constants = {"b": data(rng, b_type, (8, 6)), "as": F32(0.02), "bs": b_scale, "az": U8(100),
                 "bz": data(rng, b_type, (6,)), "bias": bias}  # fmt: skip
    a = data(rng, U8, (2, 5, 8))
    if largest_pair:
        a[0, 0, :2], constants["b"][:2, 0] = 255, 127
    return model([node], {"a": a}, constants, {"y": (F32, [2, 5, 6])}, 13, microsoft=True), {"a": a}


def test_matmul_integer_to_float_differs_by_float_sums_at_most(rng) -> None:
    proto, feeds = integer_to_float(rng)
    report = verify(proto, feeds, "MATRIX_MULTIPLY_INTEGER_TO_FLOAT")
    assert not report.nodes[0].differing or "float32 sums in another order" in report.nodes[0].cause


def test_matmul_integer_to_float_names_int16_saturation_where_it_explains_the_gap(rng, monkeypatch) -> None:
    """Where onnxruntime's u8 x s8 kernel saturates pair sums, its MatMulInteger -> Cast -> Mul (-> Add)
    loses ``pair_saturation(a, b)`` times the scales: that gap is named, a gap of another size is not."""
    from dmlq.onnx import causes
    from dmlq.onnx.ort_int8 import pair_saturation

    monkeypatch.setattr(causes, "u8s8_saturates", lambda: True)
    proto, feeds = integer_to_float(rng, I8, largest_pair=True)
    loaded = dx.load(proto)
    values = {}
    ours = execute(loaded, feeds, keep=values)["y"]
    (step,) = [step for stage in stages(loaded) for step in stage.steps]
    a_scale, b_scale = (values[step.inputs[index]].astype(np.float64) for index in (1, 4))
    lost = pair_saturation(feeds["a"], values[step.inputs[3]]) * a_scale * b_scale
    assert lost[0, 0, 0] != 0
    theirs = (ours + lost).astype(F32)
    cause = causes.step_cause(step, "", values, "y", ours, theirs)
    assert "saturates int16 pair sums" in cause and "float32 sums" in cause
    assert causes.step_cause(step, "", values, "y", ours, (ours + 2 * lost).astype(F32)) == UNEXPLAINED


def test_matmul_integer_to_float_checks_its_feature_level_and_types(rng) -> None:
    proto, feeds = integer_to_float(rng)
    (verdict,) = dx.check(proto, "6_1")
    assert verdict.valid is False and "needs feature level 6_2" in verdict.reason
    (verdict,) = dx.check(integer_to_float(rng, I8)[0])  # uint8 A, int8 B: a mix DirectML accepts
    assert verdict.valid is True


def test_dynamic_quantize_linear_has_three_outputs(rng) -> None:
    x = rng.standard_normal((3, 5)).astype(F32)
    node = helper.make_node("DynamicQuantizeLinear", ["x"], ["y", "s", "z"])
    report = verify(model([node], {"x": x}, {}, ["y", "s", "z"], 13), {"x": x}, "DYNAMIC_QUANTIZE_LINEAR")
    assert [d.output for d in report.nodes] == ["y", "s", "z"]


def test_dynamic_quantize_linear_of_zeros_names_the_scale_decision() -> None:
    x = np.zeros((2, 3), F32)
    node = helper.make_node("DynamicQuantizeLinear", ["x"], ["y", "s", "z"])
    report = verify(model([node], {"x": x}, {}, ["y", "s", "z"], 13), {"x": x}, "DYNAMIC_QUANTIZE_LINEAR")
    scale = report.nodes[1]
    assert scale.differing == 1 and "dmlq's scale is 1 / 255" in scale.cause


@pytest.mark.parametrize("b_type", [U8, I8])
def test_dynamic_quantize_matmul_quantizes_a_to_bs_type(b_type, rng) -> None:
    a = rng.standard_normal((2, 5, 8)).astype(F32)
    node = helper.make_node(
        "DynamicQuantizeMatMul", ["a", "b", "bs", "bz", "bias"], ["y"], domain="com.microsoft"
    )
    constants = {"b": data(rng, b_type, (8, 6)), "bs": F32(0.02), "bz": b_type(3),
                 "bias": rng.standard_normal(6).astype(F32)}  # fmt: skip
    proto = model([node], {"a": a}, constants, {"y": (F32, [2, 5, 6])}, 13, microsoft=True)
    report = verify(proto, {"a": a}, "DYNAMIC_QUANTIZE_LINEAR + MATRIX_MULTIPLY_INTEGER_TO_FLOAT")
    if b_type is I8:
        assert report.nodes[0].differing and "quantizes A to B's type (int8)" in report.nodes[0].cause
    first, second = describe(proto, (F32, a.shape), (b_type, (8, 6)), (F32, ()), (b_type, ()), (F32, (6,)))
    assert first.output.data_type == second.b.data_type == dmlq.DataType.from_dtype(b_type)
    assert first.output_scale.sizes == (1, 1, 1, 1) and second.a is first.output
    assert second.bias.sizes == (1, 2, 5, 6) and second.bias.strides == (0, 0, 0, 1)


POOL = ["x", "xs", "xz", "ys", "yz"]


@pytest.mark.parametrize(
    ("op_type", "attributes", "shape"),
    [("QLinearAveragePool", {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "strides": [2, 2]}, [2, 3, 4, 3]),
     ("QLinearAveragePool", {"kernel_shape": [2, 3], "pads": [1, 0, 0, 1], "count_include_pad": 1},
      [2, 3, 7, 5]),
     ("QLinearGlobalAveragePool", {}, [2, 3, 1, 1])],
)  # fmt: skip
def test_qlinear_average_pool(op_type, attributes, shape, rng) -> None:
    x = data(rng, U8, (2, 3, 7, 6))
    node = helper.make_node(op_type, POOL, ["y"], domain="com.microsoft", **attributes)
    constants = {"xs": F32(0.05), "xz": U8(120), "ys": F32(0.04), "yz": U8(128)}
    proto = model([node], {"x": x}, constants, {"y": (U8, shape)}, 13, microsoft=True)
    verify(proto, {"x": x}, "QUANTIZED_LINEAR_AVERAGE_POOLING")


def test_qlinear_average_pool_ties_with_an_odd_zero_point_are_a_named_cause() -> None:
    """dmlq rounds avg / scale to even, then adds the zero point; onnxruntime CPU adds it before rounding."""
    x = np.uint8([[[[1, 2, 5, 6]]]])
    node = helper.make_node("QLinearAveragePool", POOL, ["y"], domain="com.microsoft", kernel_shape=[1, 2],
                            strides=[1, 2])  # fmt: skip
    constants = {"xs": F32(1), "xz": U8(0), "ys": F32(1), "yz": U8(3)}
    proto = model([node], {"x": x}, constants, {"y": (U8, [1, 1, 1, 2])}, 13, microsoft=True)
    report = verify(proto, {"x": x}, "QUANTIZED_LINEAR_AVERAGE_POOLING")
    assert report.nodes[0].differing and "zero point before rounding" in report.nodes[0].cause


def test_qlinear_average_pool_reads_channels_last_data_through_permuted_strides(rng) -> None:
    x = data(rng, U8, (2, 5, 6, 3))  # NHWC
    node = helper.make_node("QLinearAveragePool", POOL, ["y"], domain="com.microsoft", kernel_shape=[2, 2],
                            channels_last=1)  # fmt: skip
    constants = {"xs": F32(0.05), "xz": U8(120), "ys": F32(0.05), "yz": U8(120)}
    proto = model([node], {"x": x}, constants, {"y": (U8, [2, 4, 5, 3])}, 13, microsoft=True)
    (desc,) = describe(proto, (U8, x.shape), (F32, ()), (U8, ()), (F32, ()), (U8, ()))
    assert desc.input.sizes == (2, 3, 5, 6) and desc.input.strides == (90, 1, 18, 3)
    y = dx.run(proto, {"x": x})["y"]
    np.testing.assert_array_equal(y.shape, (2, 4, 5, 3))
    centred = x.astype(np.float64) - 120
    windows = (centred[:, :-1, :-1] + centred[:, 1:, :-1] + centred[:, :-1, 1:] + centred[:, 1:, 1:]) / 4
    assert np.abs(y.astype(np.float64) - (np.clip(np.round(windows) + 120, 0, 255))).max() <= 1


def test_qlinear_average_pool_with_ceil_mode_is_refused_by_directml(rng) -> None:
    x = data(rng, U8, (1, 1, 5, 5))
    node = helper.make_node("QLinearAveragePool", POOL, ["y"], domain="com.microsoft", kernel_shape=[2, 2],
                            strides=[2, 2], ceil_mode=1)  # fmt: skip
    constants = {"xs": F32(0.05), "xz": U8(120), "ys": F32(0.05), "yz": U8(120)}
    (verdict,) = dx.check(model([node], {"x": x}, constants, {"y": (U8, [1, 1, 3, 3])}, 13, microsoft=True))
    assert verdict.valid is False and "output: sizes [1, 1, 3, 3] must be [1, 1, 2, 2]" in verdict.reason


def nbits(rng, bits=4, zero_points=True, k=64, block=32, n=6):
    blocks = k // block
    packed = rng.integers(0, 256, (n, blocks, block * bits // 8)).astype(U8)
    constants = {"b": packed, "s": rng.uniform(0.01, 0.05, n * blocks).astype(F32)}
    inputs = ["a", "b", "s"]
    if zero_points:
        constants["z"] = rng.integers(0, 256, n * (-(-blocks // 2) if bits == 4 else blocks)).astype(U8)
        inputs.append("z")
    a = rng.standard_normal((2, 3, k)).astype(F32)
    node = helper.make_node("MatMulNBits", inputs, ["y"], domain="com.microsoft", K=k, N=n, bits=bits,
                            block_size=block)  # fmt: skip
    return model([node], {"a": a}, constants, {"y": (F32, [2, 3, n])}, 13, microsoft=True), {"a": a}


@pytest.mark.parametrize(("bits", "zero_points", "k", "block"),
                         [(4, True, 64, 32), (4, True, 96, 32), (4, False, 64, 16), (8, True, 64, 32),
                          (8, False, 64, 32)])  # fmt: skip
def test_matmul_nbits_is_dequantize_then_gemm(bits, zero_points, k, block, rng) -> None:
    """Without zero points DEQUANTIZE's SCALE alone: DirectML's midpoint (8, 128), MatMulNBits' default."""
    proto, feeds = nbits(rng, bits, zero_points, k, block)
    report = verify(proto, feeds, "DEQUANTIZE + GEMM")
    assert not report.nodes[0].differing or "float32 sums in another order" in report.nodes[0].cause


def test_matmul_nbits_is_described_as_the_provider_builds_it(rng) -> None:
    """An odd count of 4-bit blocks per row: the zero points' rows start on whole bytes (stride 4, not 3)."""
    proto, feeds = nbits(rng, 4, True, 96, 32)
    dequantize, gemm = describe(proto, (F32, (2, 3, 96)), (U8, (6, 3, 16)), (F32, (18,)), (U8, (12,)),
                                None, None)  # fmt: skip
    assert dequantize.input.sizes == (2, 6, 96) and dequantize.input.strides == (0, 96, 1)
    assert dequantize.quantization_tensors[1].strides == (0, 4, 1)
    assert gemm.trans_b == MatrixTransform.TRANSPOSE and gemm.a.sizes == (2, 3, 96) and gemm.c is None


def test_matmul_nbits_the_kernel_refuses_or_the_query_declines(rng) -> None:
    proto, feeds = nbits(rng)
    proto.graph.node[0].input.extend(["", "bias"])
    proto.graph.initializer.extend([helper.make_tensor("bias", 1, [6], np.zeros(6, F32))])
    (verdict,) = dx.check(proto)
    assert verdict.valid is False and "g_idx, bias" in verdict.reason
    odd = helper.make_node("MatMulNBits", ["a", "b", "s"], ["y"], domain="com.microsoft", K=40, N=6, bits=4,
                           block_size=32)  # fmt: skip
    constants = {"b": np.zeros((6, 2, 16), U8), "s": np.ones(12, F32)}
    a = rng.standard_normal((2, 40)).astype(F32)
    (verdict,) = dx.check(model([odd], {"a": a}, constants, {"y": (F32, [2, 6])}, 13, microsoft=True))
    assert verdict.operator is None and "not a multiple of block_size" in verdict.rule


@pytest.mark.parametrize(
    ("a_shape", "b_shape"), [((5, 8), (8, 3)), ((2, 5, 8), (8, 3)), ((2, 1, 5, 8), (3, 8, 4))]
)
def test_float_matmul_is_gemm(a_shape, b_shape, rng) -> None:
    a, b = rng.standard_normal(a_shape).astype(F32), rng.standard_normal(b_shape).astype(F32)
    node = helper.make_node("MatMul", ["a", "b"], ["y"])
    verify(model([node], {"a": a, "b": b}, {}, ["y"], 13), {"a": a, "b": b}, "GEMM")


@pytest.mark.parametrize("attributes", [{}, {"transA": 1, "alpha": 0.5}, {"transB": 1, "beta": 2.0}])
def test_gemm(attributes, rng) -> None:
    a = rng.standard_normal((8, 5) if attributes.get("transA") else (5, 8)).astype(F32)
    b = rng.standard_normal((3, 8) if attributes.get("transB") else (8, 3)).astype(F32)
    node = helper.make_node("Gemm", ["a", "b", "c"], ["y"], **attributes)
    proto = model([node], {"a": a}, {"b": b, "c": rng.standard_normal(3).astype(F32)}, ["y"], 13)
    verify(proto, {"a": a}, "GEMM")


@pytest.mark.parametrize(
    ("op_type", "activation"), [("Gemm", "Relu"), ("MatMul", "Sigmoid"), ("Gemm", "LeakyRelu")]
)
def test_gemm_and_matmul_fuse_the_following_activation(op_type, activation, rng) -> None:
    """The provider's GraphTransformer.cpp: DmlFusedGemm / DmlFusedMatMul, GEMM with the activation."""
    a, b = rng.standard_normal((4, 6)).astype(F32), rng.standard_normal((6, 3)).astype(F32)
    attributes = {"alpha": 0.3} if activation == "LeakyRelu" else {}
    nodes = [helper.make_node(op_type, ["a", "b"], ["t"], **({"alpha": 2.0} if op_type == "Gemm" else {})),
             helper.make_node(activation, ["t"], ["y"], **attributes)]  # fmt: skip
    proto = model(nodes, {"a": a}, {"b": b}, ["y"], 13)
    (verdict,) = dx.check(proto)
    assert verdict.op_types == (op_type, activation) and "with a fused activation" in verdict.rule
    (desc,) = describe(proto, (F32, a.shape), (F32, b.shape), None)
    assert type(desc.fused_activation).__name__ == activation
    assert desc.alpha == (2.0 if op_type == "Gemm" else 1.0)
    if activation == "LeakyRelu":
        assert desc.fused_activation.alpha == F32(0.3)  # the activation's alpha, not Gemm's
    verify(proto, {"a": a}, "GEMM")


def test_qlinear_sigmoid_names_the_missing_operator(rng) -> None:
    x = data(rng, U8, (2, 3))
    node = helper.make_node("QLinearSigmoid", POOL, ["y"], domain="com.microsoft")
    constants = {"xs": F32(0.05), "xz": U8(120), "ys": F32(1 / 256), "yz": U8(0)}
    (verdict,) = dx.check(model([node], {"x": x}, constants, {"y": (U8, [2, 3])}, 13, microsoft=True))
    assert verdict.operator is None and verdict.missing == "ACTIVATION_SIGMOID"
    assert "DmlOperatorQLinearSigmoid.cpp" in verdict.rule


def test_convolution_saturation_is_named_only_where_two_products_pass_int16(rng, monkeypatch) -> None:
    """On a CPU without VNNI onnxruntime's u8 x s8 kernels saturate int16 pair sums: compare names that
    cause for an element only where two of its window's products |x * w| sum past 32767."""
    from dmlq.onnx import causes

    monkeypatch.setattr(causes, "u8s8_saturates", lambda: True)
    x = np.zeros((1, 2, 3, 3), U8)
    x[0, :, 0, 0] = 255  # output (0, 0) reads two products 255 * 127; output (1, 1) reads none
    w = np.full((1, 2, 2, 2), 127, I8)
    node = helper.make_node("ConvInteger", ["x", "w"], ["y"])
    loaded = dx.load(model([node], {"x": x}, {"w": w}, ["y"], 13))
    values = {}
    ours = execute(loaded, {"x": x}, keep=values)["y"]
    (step,) = [step for stage in stages(loaded) for step in stage.steps]
    for position, named in (((0, 0), True), ((1, 1), False)):
        theirs = ours.copy()
        theirs[(0, 0, *position)] -= 1
        cause = causes.step_cause(step, "", values, "y", ours, theirs)
        assert ("saturates int16 pair sums" in cause) == named and (cause == UNEXPLAINED) != named
