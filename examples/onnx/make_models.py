"""Build the ONNX examples: a small MLP and a small CNN in float, quantized with onnxruntime.

    python examples/onnx/make_models.py [--out-dir examples/onnx]

writes ``mlp_qdq.onnx`` (QDQ format, per-channel weights) and ``mlp_qoperator.onnx`` (QOperator
format: QLinearMatMul, QLinearAdd), both quantized by ``onnxruntime.quantization.quantize_static``
with calibration data drawn from seed 0, so anyone can regenerate them. The functions are also
what dmlq's tests and ``benchmarks/onnx_models.py`` build their models with.
"""

from __future__ import annotations

import argparse
import tempfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

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


def _model(nodes, constants, inputs: dict, outputs: dict) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes,
        "float_model",
        [helper.make_tensor_value_info(name, TensorProto.FLOAT, shape) for name, shape in inputs.items()],
        [helper.make_tensor_value_info(name, TensorProto.FLOAT, shape) for name, shape in outputs.items()],
        constants,
    )
    made = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
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


def quantize(model: onnx.ModelProto, *, qdq: bool, per_channel: bool, seed: int = 0) -> onnx.ModelProto:
    """``model`` quantized by onnxruntime (uint8 activations, int8 weights), calibrated from ``seed``."""
    with tempfile.TemporaryDirectory() as folder:
        source, target = Path(folder, "float.onnx"), Path(folder, "quantized.onnx")
        onnx.save(model, source)
        quantize_static(
            source,
            target,
            _Calibration(model, seed),
            quant_format=QuantFormat.QDQ if qdq else QuantFormat.QOperator,
            per_channel=per_channel,
            activation_type=QuantType.QUInt8,
            weight_type=QuantType.QInt8,
        )
        return onnx.load(target)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out-dir", type=Path, default=Path(__file__).parent)
    args = parser.parse_args()
    float_mlp = mlp([16, 32, 32, 8], batch=4)
    models = {
        "mlp_qdq.onnx": quantize(float_mlp, qdq=True, per_channel=True),
        "mlp_qoperator.onnx": quantize(float_mlp, qdq=False, per_channel=False),
    }
    args.out_dir.mkdir(parents=True, exist_ok=True)
    for name, made in models.items():
        onnx.save(made, args.out_dir / name)
        print(f"wrote {args.out_dir / name}")


if __name__ == "__main__":
    main()
