"""Build the ONNX examples: an MLP, CNNs and a BERT-like encoder in float, quantized with onnxruntime.

    python examples/onnx/make_models.py [--out-dir examples/onnx]

writes ``mlp_qdq.onnx`` (QDQ format, per-channel weights), ``mlp_qoperator.onnx`` (QOperator
format: QLinearMatMul, QLinearAdd), both quantized by ``onnxruntime.quantization.quantize_static``
with calibration data drawn from seed 0, so anyone can regenerate them, and ``matmul_qdq.onnx``
(one u8 QDQ MatMul with exact float arithmetic: :func:`matmul_qdq`). The functions are also
what dmlq's tests and ``benchmarks/onnx_models.py`` build their models with: :func:`mlp`,
:func:`cnn`, :func:`conv_net` (Conv with bias, MaxPool, Gemm, a residual Add, optionally an
AveragePool), :func:`encoder` (a
BERT-like stack: LayerNormalization, MatMul, Softmax, GELU written with Erf), and every
onnxruntime.quantization route over them (:func:`quantize`, :func:`quantize_dynamic_model`,
:func:`quantize_nbits`, with ``quant_pre_process`` first when asked; :func:`ort_optimized`, a model as
onnxruntime CPU saves it optimized).
"""

from __future__ import annotations

import argparse
import tempfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from onnxruntime.quantization import (
    CalibrationDataReader,
    QuantFormat,
    QuantType,
    quantize_dynamic,
    quantize_static,
)

OPSET = 13


def mlp(widths: Sequence[int], batch: int, seed: int = 0) -> onnx.ModelProto:
    """A float MLP: ``MatMul -> Add -> Relu`` per layer (no Relu after the last), ``widths[0]`` inputs."""
    rng = np.random.default_rng(seed)
    nodes, constants, current = [], [], "x"
    for index, (fan_in, fan_out) in enumerate(zip(widths, widths[1:])):
        weight, bias = f"w{index}", f"b{index}"
        constants += [
            numpy_helper.from_array(
                (rng.standard_normal((fan_in, fan_out)) / np.sqrt(fan_in)).astype(np.float32), weight
            ),
            numpy_helper.from_array((rng.standard_normal(fan_out) * 0.1).astype(np.float32), bias),
        ]
        nodes += [
            helper.make_node("MatMul", [current, weight], [f"mm{index}"], name=f"matmul{index}"),
            helper.make_node("Add", [f"mm{index}", bias], [f"sum{index}"], name=f"add{index}"),
        ]
        current = f"sum{index}"
        if index < len(widths) - 2:
            nodes.append(helper.make_node("Relu", [current], [f"relu{index}"], name=f"relu{index}"))
            current = f"relu{index}"
    nodes.append(helper.make_node("Identity", [current], ["y"], name="output"))
    return _model(nodes, constants, {"x": [batch, widths[0]]}, {"y": [batch, widths[-1]]})


def cnn(channels: int = 4, size: int = 8, classes: int = 5, seed: int = 0) -> onnx.ModelProto:
    """A float CNN: ``Conv -> Relu -> Conv -> Add (residual) -> Relu -> Flatten -> MatMul -> Add``."""
    rng = np.random.default_rng(seed)

    def weight(name: str, shape: tuple[int, ...]) -> onnx.TensorProto:
        return numpy_helper.from_array(
            (rng.standard_normal(shape) / np.sqrt(np.prod(shape[1:]))).astype(np.float32), name
        )

    constants = [
        weight("k0", (channels, 1, 3, 3)),
        weight("k1", (channels, channels, 3, 3)),
        weight("fc", (channels * size * size, classes)),
        numpy_helper.from_array((rng.standard_normal(classes) * 0.1).astype(np.float32), "fc_bias"),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "k0"], ["c0"], pads=[1, 1, 1, 1], name="conv0"),
        helper.make_node("Relu", ["c0"], ["r0"], name="relu0"),
        helper.make_node("Conv", ["r0", "k1"], ["c1"], pads=[1, 1, 1, 1], name="conv1"),
        helper.make_node("Add", ["c1", "r0"], ["res"], name="residual"),
        helper.make_node("Relu", ["res"], ["r1"], name="relu1"),
        helper.make_node("Flatten", ["r1"], ["flat"], name="flatten"),
        helper.make_node("MatMul", ["flat", "fc"], ["logits0"], name="fc"),
        helper.make_node("Add", ["logits0", "fc_bias"], ["y"], name="fc_add"),
    ]
    return _model(nodes, constants, {"x": [1, 1, size, size]}, {"y": [1, classes]})


def conv_net(
    channels: int = 4,
    size: int = 8,
    classes: int = 5,
    batch: int = 1,
    seed: int = 0,
    average_pool: bool = False,
) -> onnx.ModelProto:
    """A float CNN: ``Conv -> Relu -> MaxPool -> Conv -> Relu -> Add (residual) -> Flatten -> Gemm -> Relu
    -> Gemm``, every Conv and Gemm with a bias, on ``batch`` images of ``size`` x ``size``;
    ``average_pool`` puts a 3 x 3 ``AveragePool`` (stride 1, padded, padding not counted) after the Add."""
    rng = np.random.default_rng(seed)

    def weight(name: str, shape: tuple[int, ...], fan_in: int) -> onnx.TensorProto:
        return numpy_helper.from_array(
            (rng.standard_normal(shape) / np.sqrt(fan_in)).astype(np.float32), name
        )

    def bias(name: str, length: int) -> onnx.TensorProto:
        return numpy_helper.from_array((rng.standard_normal(length) * 0.1).astype(np.float32), name)

    half = size // 2
    hidden = 4 * classes
    constants = [
        weight("k0", (channels, 3, 3, 3), 27),
        bias("kb0", channels),
        weight("k1", (channels, channels, 3, 3), channels * 9),
        bias("kb1", channels),
        weight("g0", (channels * half * half, hidden), channels * half * half),
        bias("gb0", hidden),
        weight("g1", (hidden, classes), hidden),
        bias("gb1", classes),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "k0", "kb0"], ["c0"], pads=[1, 1, 1, 1], name="conv0"),
        helper.make_node("Relu", ["c0"], ["r0"], name="relu0"),
        helper.make_node("MaxPool", ["r0"], ["p0"], kernel_shape=[2, 2], strides=[2, 2], name="pool0"),
        helper.make_node("Conv", ["p0", "k1", "kb1"], ["c1"], pads=[1, 1, 1, 1], name="conv1"),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("Add", ["r1", "p0"], ["res"], name="residual"),
    ]
    if average_pool:
        nodes.append(
            helper.make_node(
                "AveragePool", ["res"], ["smooth"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], name="pool1"
            )
        )
    nodes += [
        helper.make_node("Flatten", ["smooth" if average_pool else "res"], ["flat"], name="flatten"),
        helper.make_node("Gemm", ["flat", "g0", "gb0"], ["h0"], name="gemm0"),
        helper.make_node("Relu", ["h0"], ["hr0"], name="relu2"),
        helper.make_node("Gemm", ["hr0", "g1", "gb1"], ["y"], name="gemm1"),
    ]
    return _model(nodes, constants, {"x": [batch, 3, size, size]}, {"y": [batch, classes]})


def encoder(
    hidden: int = 32, layers: int = 1, seq: int = 8, batch: int = 1, seed: int = 0
) -> onnx.ModelProto:
    """A float BERT-like encoder, opset 17: per layer ``LayerNormalization``, single-head attention
    (``MatMul``s with biases, ``Transpose``, scaling ``Mul``, ``Softmax``), a residual ``Add``, then
    ``LayerNormalization``, a feed-forward ``MatMul`` with GELU written as ``x * 0.5 * (1 + Erf(x / sqrt 2))``
    and another residual ``Add``. Inputs ``x`` ``[batch, seq, hidden]``."""
    rng = np.random.default_rng(seed)
    constants = [
        numpy_helper.from_array(np.float32(1 / np.sqrt(hidden)), "attention_scale"),
        numpy_helper.from_array(np.float32(1 / np.sqrt(2)), "inverse_sqrt2"),
        numpy_helper.from_array(np.float32(1), "one"),
        numpy_helper.from_array(np.float32(0.5), "half"),
    ]
    nodes, current = [], "x"

    def linear(name: str, source: str, fan_in: int, fan_out: int) -> str:
        weight = (rng.standard_normal((fan_in, fan_out)) / np.sqrt(fan_in)).astype(np.float32)
        bias = (rng.standard_normal(fan_out) * 0.1).astype(np.float32)
        constants.extend(
            [numpy_helper.from_array(weight, f"{name}_w"), numpy_helper.from_array(bias, f"{name}_b")]
        )
        nodes.append(helper.make_node("MatMul", [source, f"{name}_w"], [f"{name}_mm"], name=f"{name}_matmul"))
        nodes.append(helper.make_node("Add", [f"{name}_mm", f"{name}_b"], [name], name=f"{name}_add"))
        return name

    def norm(name: str, source: str) -> str:
        gamma = (1 + rng.standard_normal(hidden) * 0.1).astype(np.float32)
        beta = (rng.standard_normal(hidden) * 0.1).astype(np.float32)
        constants.extend(
            [numpy_helper.from_array(gamma, f"{name}_gamma"), numpy_helper.from_array(beta, f"{name}_beta")]
        )
        nodes.append(
            helper.make_node(
                "LayerNormalization", [source, f"{name}_gamma", f"{name}_beta"], [name], axis=-1, name=name
            )
        )
        return name

    for layer in range(layers):
        p = f"l{layer}"
        normed = norm(f"{p}_ln0", current)
        q, k, v = (linear(f"{p}_{part}", normed, hidden, hidden) for part in "qkv")
        nodes += [
            helper.make_node("Transpose", [k], [f"{p}_kt"], perm=[0, 2, 1], name=f"{p}_transpose"),
            helper.make_node("MatMul", [q, f"{p}_kt"], [f"{p}_scores"], name=f"{p}_scores"),
            helper.make_node("Mul", [f"{p}_scores", "attention_scale"], [f"{p}_scaled"], name=f"{p}_scale"),
            helper.make_node("Softmax", [f"{p}_scaled"], [f"{p}_probs"], axis=-1, name=f"{p}_softmax"),
            helper.make_node("MatMul", [f"{p}_probs", v], [f"{p}_context"], name=f"{p}_context"),
        ]
        attended = linear(f"{p}_o", f"{p}_context", hidden, hidden)
        nodes.append(helper.make_node("Add", [attended, current], [f"{p}_res0"], name=f"{p}_residual0"))
        normed = norm(f"{p}_ln1", f"{p}_res0")
        up = linear(f"{p}_ff0", normed, hidden, 2 * hidden)
        nodes += [
            helper.make_node("Mul", [up, "inverse_sqrt2"], [f"{p}_gx"], name=f"{p}_gelu_scale"),
            helper.make_node("Erf", [f"{p}_gx"], [f"{p}_gerf"], name=f"{p}_gelu_erf"),
            helper.make_node("Add", [f"{p}_gerf", "one"], [f"{p}_g1"], name=f"{p}_gelu_add"),
            helper.make_node("Mul", [up, f"{p}_g1"], [f"{p}_g2"], name=f"{p}_gelu_mul"),
            helper.make_node("Mul", [f"{p}_g2", "half"], [f"{p}_gelu"], name=f"{p}_gelu_half"),
        ]
        down = linear(f"{p}_ff1", f"{p}_gelu", 2 * hidden, hidden)
        nodes.append(helper.make_node("Add", [down, f"{p}_res0"], [f"{p}_out"], name=f"{p}_residual1"))
        current = f"{p}_out"
    nodes.append(helper.make_node("Identity", [current], ["y"], name="output"))
    return _model(nodes, constants, {"x": [batch, seq, hidden]}, {"y": [batch, seq, hidden]}, opset=17)


def matmul_qdq() -> onnx.ModelProto:
    """A u8 QDQ MatMul whose float arithmetic is exact (power-of-two scales, small K), so that ONNX's
    nodes and DirectML's QLinearMatMul give the same numbers on any CPU: ``x -> Q -> DQ -> MatMul
    (DQ of int8 weights) -> Q -> DQ -> y``, x ``[4, 8]``, weights ``[8, 3]``."""
    rng = np.random.default_rng(0)
    constants = [
        numpy_helper.from_array(np.float32(2**-4), "x_scale"),
        numpy_helper.from_array(np.uint8(128), "x_zero_point"),
        numpy_helper.from_array(rng.integers(-127, 128, (8, 3)).astype(np.int8), "w_quantized"),
        numpy_helper.from_array(np.float32(2**-6), "w_scale"),
        numpy_helper.from_array(np.int8(0), "w_zero_point"),
        numpy_helper.from_array(np.float32(2**-3), "y_scale"),
        numpy_helper.from_array(np.uint8(128), "y_zero_point"),
    ]
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "x_scale", "x_zero_point"], ["x_q"], name="x_Q"),
        helper.make_node("DequantizeLinear", ["x_q", "x_scale", "x_zero_point"], ["x_dq"], name="x_DQ"),
        helper.make_node("DequantizeLinear", ["w_quantized", "w_scale", "w_zero_point"], ["w"], name="w_DQ"),
        helper.make_node("MatMul", ["x_dq", "w"], ["mm"], name="matmul"),
        helper.make_node("QuantizeLinear", ["mm", "y_scale", "y_zero_point"], ["y_q"], name="y_Q"),
        helper.make_node("DequantizeLinear", ["y_q", "y_scale", "y_zero_point"], ["y"], name="y_DQ"),
    ]
    return _model(nodes, constants, {"x": [4, 8]}, {"y": [4, 3]})


def _model(nodes, constants, inputs: dict, outputs: dict, opset: int = OPSET) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes,
        "float_model",
        [helper.make_tensor_value_info(name, TensorProto.FLOAT, shape) for name, shape in inputs.items()],
        [helper.make_tensor_value_info(name, TensorProto.FLOAT, shape) for name, shape in outputs.items()],
        constants,
    )
    made = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    made.ir_version = 8
    return made


class _Calibration(CalibrationDataReader):
    def __init__(self, model: onnx.ModelProto, seed: int, count: int = 8) -> None:
        rng = np.random.default_rng(seed)
        shapes = {
            value.name: [d.dim_value for d in value.type.tensor_type.shape.dim] for value in model.graph.input
        }
        self._batches = iter(
            [
                {name: rng.uniform(-2, 2, shape).astype(np.float32) for name, shape in shapes.items()}
                for _ in range(count)
            ]
        )

    def get_next(self) -> dict[str, np.ndarray] | None:
        return next(self._batches, None)


def quantize(
    model: onnx.ModelProto,
    *,
    qdq: bool,
    per_channel: bool,
    seed: int = 0,
    activation_type: QuantType = QuantType.QUInt8,
    weight_type: QuantType = QuantType.QInt8,
    preprocess: bool = False,
    opset: int | None = None,
    op_types: Sequence[str] | None = None,
) -> onnx.ModelProto:
    """``model`` quantized by ``quantize_static`` (default: uint8 activations, int8 weights), calibrated
    from ``seed``; ``preprocess`` runs ``quant_pre_process`` first, ``opset`` converts the float
    model first (21: Q/DQ of opset 21, where 4-bit weights are ONNX types); ``op_types`` limits the
    operators quantized (default: all the quantizer knows)."""
    with tempfile.TemporaryDirectory() as folder:
        source, target = _prepared(model, Path(folder), preprocess, opset), Path(folder, "quantized.onnx")
        quantize_static(
            source,
            target,
            _Calibration(model, seed),
            quant_format=QuantFormat.QDQ if qdq else QuantFormat.QOperator,
            per_channel=per_channel,
            activation_type=activation_type,
            weight_type=weight_type,
            op_types_to_quantize=list(op_types) if op_types is not None else None,
        )
        return onnx.load(target)


def quantize_dynamic_model(
    model: onnx.ModelProto, *, preprocess: bool = False, weight_type: QuantType = QuantType.QInt8
) -> onnx.ModelProto:
    """``model`` quantized by ``quantize_dynamic`` (DynamicQuantizeLinear, MatMulInteger, ConvInteger),
    int8 weights by default."""
    with tempfile.TemporaryDirectory() as folder:
        source, target = _prepared(model, Path(folder), preprocess, None), Path(folder, "quantized.onnx")
        quantize_dynamic(source, target, weight_type=weight_type)
        return onnx.load(target)


def ort_optimized(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` as onnxruntime CPU saves it after its extended graph optimizations
    (``SessionOptions.optimized_model_filepath``): quantize_dynamic's MatMuls become com.microsoft
    DynamicQuantizeMatMul or MatMulIntegerToFloat."""
    import onnxruntime

    with tempfile.TemporaryDirectory() as folder:
        options = onnxruntime.SessionOptions()
        options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
        options.optimized_model_filepath = str(Path(folder, "optimized.onnx"))
        onnxruntime.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
        return onnx.load(options.optimized_model_filepath)


def quantize_nbits(model: onnx.ModelProto, *, qdq: bool, block_size: int = 16) -> onnx.ModelProto:
    """``model``'s MatMul weights quantized to 4 bits by ``MatMulNBitsQuantizer``: com.microsoft MatMulNBits
    (``qdq=False``) or blocked DequantizeLinear-21 of uint4 weights before each MatMul (``qdq=True``)."""
    from onnxruntime.quantization.matmul_nbits_quantizer import (
        DefaultWeightOnlyQuantConfig,
        MatMulNBitsQuantizer,
    )

    config = DefaultWeightOnlyQuantConfig(
        block_size=block_size,
        is_symmetric=False,
        quant_format=QuantFormat.QDQ if qdq else QuantFormat.QOperator,
    )
    quantizer = MatMulNBitsQuantizer(_copy(model), algo_config=config)
    quantizer.process()
    return quantizer.model.model


def _prepared(model: onnx.ModelProto, folder: Path, preprocess: bool, opset: int | None) -> Path:
    source = folder / "float.onnx"
    if opset is not None:
        model = onnx.version_converter.convert_version(model, opset)
        model.ir_version = 10
    onnx.save(model, source)
    if preprocess:
        from onnxruntime.quantization.shape_inference import quant_pre_process

        processed = folder / "preprocessed.onnx"
        quant_pre_process(str(source), str(processed))
        return processed
    return source


def _copy(model: onnx.ModelProto) -> onnx.ModelProto:
    copied = onnx.ModelProto()
    copied.CopyFrom(model)
    return copied


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out-dir", type=Path, default=Path(__file__).parent)
    args = parser.parse_args()
    float_mlp = mlp([16, 32, 32, 8], batch=4)
    models = {
        "mlp_qdq.onnx": quantize(float_mlp, qdq=True, per_channel=True),
        "mlp_qoperator.onnx": quantize(float_mlp, qdq=False, per_channel=False),
        "matmul_qdq.onnx": matmul_qdq(),
    }
    args.out_dir.mkdir(parents=True, exist_ok=True)
    for name, made in models.items():
        onnx.save(made, args.out_dir / name)
        print(f"wrote {args.out_dir / name}")


if __name__ == "__main__":
    main()
