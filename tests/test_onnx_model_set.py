"""dmlq.onnx on models built here and quantized with every onnxruntime.quantization route: a
BERT-like encoder block, a CNN (Conv with bias, MaxPool, AveragePool, Gemm, a residual Add) and an
MLP, through quantize_dynamic (int8 and uint8 weights, and saved by onnxruntime CPU optimized:
DynamicQuantizeMatMul); quantize_static in QDQ and QOperator form, u8/s8 and s8/s8, per tensor and
per channel; MatMulNBitsQuantizer (MatMulNBits, and blocked 4-bit DequantizeLinear-21); 4-bit
weights at opset 21 and in the com.microsoft domain below it; quant_pre_process first.

Each model is accepted, its steps are what the provider's rules make of it (the verdicts'
operators and sources), and a run agrees with onnxruntime CPU with its QDQ fusions off, every
difference with a known cause; where the provider would fail to create a kernel (a
DequantizeLinear-13 of a 1-D bias with a one-element scale, a 4-bit per-channel DequantizeLinear-21
of Conv weights) check says so and run refuses the model.
"""

from __future__ import annotations

import collections
import importlib.util
import logging
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnxruntime.quantization import QuantType

import dmlq
import dmlq.onnx as dx
from dmlq.onnx.comparing import UNEXPLAINED
from dmlq.onnx.running import execute
from onnx_oracle import assert_steps_match_numpy_layer, ort_outputs

_SPEC = importlib.util.spec_from_file_location(
    "make_models", Path(__file__).parents[1] / "examples" / "onnx" / "make_models.py"
)
make_models = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(make_models)

U8, S8, S4 = QuantType.QUInt8, QuantType.QInt8, QuantType.QInt4
FLOAT_MODELS = {
    "mlp": lambda: make_models.mlp([16, 32, 16], batch=2),
    "cnn": lambda: make_models.conv_net(average_pool=True),
    "encoder": lambda: make_models.encoder(),
}
ROUTES = {
    "dynamic": lambda m: make_models.quantize_dynamic_model(m),
    "dynamic-u8u8": lambda m: make_models.quantize_dynamic_model(m, weight_type=U8),
    "dynamic-ort-optimized": lambda m: make_models.ort_optimized(make_models.quantize_dynamic_model(m)),
    "qdq-u8s8-tensor": lambda m: make_models.quantize(m, qdq=True, per_channel=False),
    "qdq-u8s8-channel": lambda m: make_models.quantize(m, qdq=True, per_channel=True),
    "qdq-s8s8-channel": lambda m: make_models.quantize(m, qdq=True, per_channel=True, activation_type=S8),
    "qoperator-u8s8-tensor": lambda m: make_models.quantize(m, qdq=False, per_channel=False),
    "qoperator-u8s8-channel": lambda m: make_models.quantize(m, qdq=False, per_channel=True),
    "qoperator-s8s8-channel": lambda m: make_models.quantize(
        m, qdq=False, per_channel=True, activation_type=S8
    ),
    "preprocessed-qdq-u8s8-channel": lambda m: make_models.quantize(
        m, qdq=True, per_channel=True, preprocess=True
    ),
    "nbits-qoperator": lambda m: make_models.quantize_nbits(m, qdq=False),
    "nbits-qdq": lambda m: make_models.quantize_nbits(m, qdq=True),
    "int4-weights-opset21": lambda m: make_models.quantize(
        m, qdq=True, per_channel=True, weight_type=S4, opset=21
    ),
    "int4-weights-com.microsoft": lambda m: make_models.quantize(
        m, qdq=True, per_channel=True, weight_type=S4
    ),
}
CASES = [(model, route) for model in FLOAT_MODELS for route in ROUTES]
REFUSED = {  # the provider fails to create a kernel (DmlOperatorElementWise.cpp) or DirectML refuses one
    ("cnn", "qdq-u8s8-tensor"): "axis < outputShapeDimCount",  # the Gemm's int32 bias, scale [1]
    ("encoder", "qdq-u8s8-tensor"): "axis < outputShapeDimCount",  # LayerNormalization's int32 beta
    ("encoder", "qdq-u8s8-channel"): "axis < outputShapeDimCount",
    ("encoder", "qdq-s8s8-channel"): "axis < outputShapeDimCount",
    ("encoder", "preprocessed-qdq-u8s8-channel"): "axis < outputShapeDimCount",
    ("cnn", "int4-weights-opset21"): "must each divide",  # Conv weights' scale [4] laid on the last axis
}


@pytest.fixture(scope="session")
def built(tmp_path_factory):
    """Each route's model, made once per session (on disk, as the routes write them)."""
    folder = tmp_path_factory.mktemp("model_set")
    logging.getLogger().setLevel(logging.ERROR)  # the quantizers warn about pre-processing

    def make(model: str, route: str) -> onnx.ModelProto:
        path = folder / f"{model}-{route}.onnx"
        if not path.exists():
            onnx.save(ROUTES[route](FLOAT_MODELS[model]()), path)
        return onnx.load(path)

    return make


def operators(verdicts) -> collections.Counter:
    return collections.Counter(v.operator or (f"({v.missing})" if v.missing else "-") for v in verdicts)


@pytest.mark.parametrize("case", CASES, ids=[f"{m}-{r}" for m, r in CASES])
def test_every_route_is_accepted_and_agrees_within_known_causes(built, case) -> None:
    proto = built(*case)
    loaded = dx.load(proto)
    verdicts = dx.check(loaded)
    refusal = REFUSED.get(case, "")
    invalid = [v for v in verdicts if v.valid is False]
    if refusal:
        assert invalid and all(refusal in v.reason for v in invalid), [v.reason for v in invalid]
        with pytest.raises(dmlq.DmlError, match=refusal):
            dx.run(loaded, dx.comparing.random_inputs(loaded, 0, loaded.input_names))
        return
    assert not invalid, [v.reason for v in invalid]
    feeds = dx.comparing.random_inputs(loaded, 1, loaded.input_names)
    report = dx.compare(loaded, feeds)
    unexplained = [d for d in [*report.outputs, *report.nodes] if d.differing and d.cause == UNEXPLAINED]
    assert not unexplained, report.table()
    values = {}
    ours = execute(loaded, feeds, keep=values)
    for difference, name, theirs in zip(report.outputs, loaded.output_names, ort_outputs(proto, feeds)):
        assert difference.differing == np.count_nonzero(ours[name] != theirs)
    assert_steps_match_numpy_layer(loaded, values)  # each mapped step: ONNX's meaning of its operands
    for _ in range(2):  # the first run plans its signature (dmlq.onnx.plans), the second runs the plan
        planned = dx.run(loaded, feeds)
        for name in loaded.output_names:
            assert planned[name].dtype == ours[name].dtype
            np.testing.assert_array_equal(planned[name], ours[name])


def mapped(built, model: str, route: str) -> collections.Counter:
    return operators(dx.check(built(model, route)))


def rules(verdicts, operator: str) -> set[str]:
    """The sources the verdicts of ``operator`` name (the kernel's file, after any fusion's rule)."""
    return {v.rule.split("; ")[-1] for v in verdicts if v.operator == operator}


@pytest.mark.parametrize("model", FLOAT_MODELS)
def test_quantize_dynamic_is_dynamic_quantize_linear_and_matmul_integer_to_float(built, model) -> None:
    """quantize_dynamic writes DynamicQuantizeLinear -> MatMulInteger -> Cast -> Mul (-> Add): the
    provider fuses the last four into MatMulIntegerToFloat (matmul_integer_to_float.cc). Its default
    int8 weights against uint8 A are a mix MATRIX_MULTIPLY_INTEGER_TO_FLOAT accepts (docs/operators.md)."""
    for route in ("dynamic", "dynamic-u8u8"):
        verdicts = dx.check(built(model, route))
        found = operators(verdicts)
        assert found["DYNAMIC_QUANTIZE_LINEAR"] == {"mlp": 2, "cnn": 4, "encoder": 4}[model]
        assert found["CONVOLUTION_INTEGER"] == (2 if model == "cnn" else 0)
        assert found["MATRIX_MULTIPLY_INTEGER_TO_FLOAT"] == {"mlp": 2, "cnn": 2, "encoder": 6}[model]
        assert rules(verdicts, "MATRIX_MULTIPLY_INTEGER_TO_FLOAT") == {"DmlOperatorMatMulIntegerToFloat.cpp"}
        assert rules(verdicts, "DYNAMIC_QUANTIZE_LINEAR") == {"DmlOperatorDynamicQuantizeLinear.cpp"}
        valid = {v.valid for v in verdicts if v.operator == "MATRIX_MULTIPLY_INTEGER_TO_FLOAT"}
        assert valid == {True}


@pytest.mark.parametrize("model", FLOAT_MODELS)
def test_onnxruntime_optimized_dynamic_models_are_dynamic_quantize_matmul(built, model) -> None:
    """onnxruntime CPU's DynamicQuantizeMatMulFusion (a model saved optimized): the provider computes
    DynamicQuantizeMatMul as DYNAMIC_QUANTIZE_LINEAR then MATRIX_MULTIPLY_INTEGER_TO_FLOAT, A quantized
    to B's int8 type (DmlOperatorDynamicQuantizeMatMul.cpp), which keeps one integer type."""
    verdicts = dx.check(built(model, "dynamic-ort-optimized"))
    fused = [
        v for v in verdicts if v.operator == "DYNAMIC_QUANTIZE_LINEAR + MATRIX_MULTIPLY_INTEGER_TO_FLOAT"
    ]
    assert len(fused) == {"mlp": 2, "cnn": 2, "encoder": 3}[model]
    assert all(v.valid and v.lowest_level.label == "6_2" for v in fused)
    assert rules(verdicts, fused[0].operator) == {"DmlOperatorDynamicQuantizeMatMul.cpp"}


@pytest.mark.parametrize("channel", ["tensor", "channel"])
def test_u8_qdq_matmul_groups_become_qlinear_matmul_and_adds_qlinear_add(built, channel) -> None:
    found = mapped(built, "mlp", f"qdq-u8s8-{channel}")
    assert found["QUANTIZED_LINEAR_MATRIX_MULTIPLY"] == 2 and found["ELEMENT_WISE_QUANTIZED_LINEAR_ADD"] == 2
    assert found["GEMM"] == 0  # no MatMul stays float


def test_u8_qdq_convolutions_become_qlinear_conv_average_pool_and_gemm_stays_float(built) -> None:
    verdicts = dx.check(built("cnn", "qdq-u8s8-channel"))
    found = operators(verdicts)
    assert found["QUANTIZED_LINEAR_CONVOLUTION"] == 2  # the bias DQ absorbed into each
    assert rules(verdicts, "QUANTIZED_LINEAR_CONVOLUTION") == {"DmlOperatorQLinearConv.cpp"}
    assert found["QUANTIZED_LINEAR_AVERAGE_POOLING"] == 1  # the 1DQ rule's QLinearAveragePool
    assert rules(verdicts, "QUANTIZED_LINEAR_AVERAGE_POOLING") == {"DmlOperatorQLinearAveragePooling.cpp"}
    assert found["GEMM"] == 2  # Gemm -> QGemm is the CPU provider's rule only: DQ + float Gemm + Q
    assert rules(verdicts, "GEMM") == {"DmlOperatorGemm.cpp"}
    assert found["ELEMENT_WISE_QUANTIZED_LINEAR_ADD"] == 1


def test_s8_activations_stay_unfused_unless_int8_is_allowed(built) -> None:
    """QDQIsInt8Allowed() is false on x64: int8-activation MatMul and Conv groups stay DQ -> op -> Q."""
    proto = built("mlp", "qdq-s8s8-channel")
    assert operators(dx.check(proto))["QUANTIZED_LINEAR_MATRIX_MULTIPLY"] == 0
    allowed = dx.load(proto, qdq_int8_allowed=True)
    assert operators(dx.check(allowed))["QUANTIZED_LINEAR_MATRIX_MULTIPLY"] == 2
    cnn = dx.load(built("cnn", "qdq-s8s8-channel"), qdq_int8_allowed=True)
    assert operators(dx.check(cnn))["QUANTIZED_LINEAR_CONVOLUTION"] == 2


def test_disable_quant_qdq_turns_every_qdq_rewrite_off(built) -> None:
    """With session.disable_quant_qdq the groups stay as they are and ConstantFolding folds the
    weights' DequantizeLinear nodes on onnxruntime's CPU."""
    loaded = dx.load(built("mlp", "qdq-u8s8-channel"), disable_quant_qdq=True)
    found = operators(dx.check(loaded))
    assert found["QUANTIZED_LINEAR_MATRIX_MULTIPLY"] == 0 and found["ELEMENT_WISE_QUANTIZED_LINEAR_ADD"] == 0
    assert found["GEMM"] == 2
    folded = [v for v in dx.check(loaded) if "constant_folding.cc" in v.rule]
    assert folded and all(v.op_types == ("DequantizeLinear",) for v in folded)


@pytest.mark.parametrize("model", ["mlp", "encoder", "cnn"])
def test_qoperator_nodes_are_mapped(built, model) -> None:
    found = mapped(built, model, "qoperator-u8s8-tensor")
    assert found["QUANTIZED_LINEAR_MATRIX_MULTIPLY"] == {"mlp": 2, "encoder": 8, "cnn": 0}[model]
    assert found["QUANTIZED_LINEAR_CONVOLUTION"] == (2 if model == "cnn" else 0)
    assert found["QUANTIZED_LINEAR_AVERAGE_POOLING"] == (1 if model == "cnn" else 0)


@pytest.mark.parametrize("route", ["nbits-qoperator", "nbits-qdq"])
def test_4bit_matmuls_are_matmul_nbits(built, route) -> None:
    """MatMulNBits (the model's own, or DQMatMulToMatMulNBits from a blocked uint4 DQ): DEQUANTIZE then
    GEMM in DmlOperatorMatMulNBits.cpp, valid from feature level 6_3 (DEQUANTIZE's)."""
    verdicts = dx.check(built("mlp", route))
    nbits = [v for v in verdicts if v.operator == "DEQUANTIZE + GEMM"]
    assert len(nbits) == 2 and all(v.valid and v.lowest_level.label == "6_3" for v in nbits)
    assert rules(verdicts, "DEQUANTIZE + GEMM") == {"DmlOperatorMatMulNBits.cpp"}


def test_4bit_weights_at_opset_21_are_dequantize(built) -> None:
    found = mapped(built, "mlp", "int4-weights-opset21")
    assert found["DEQUANTIZE"] >= 2 and found["GEMM"] == 2  # 4-bit MatMul groups never fuse


def test_4bit_com_microsoft_dequantize_is_not_the_providers(built) -> None:
    verdicts = dx.check(built("mlp", "int4-weights-com.microsoft"))
    weights = [v for v in verdicts if v.op_types == ("DequantizeLinear",) and "int4" in v.rule]
    assert len(weights) == 2 and all(v.operator is None for v in weights)
