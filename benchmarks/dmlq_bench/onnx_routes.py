"""onnxruntime: one-node ONNX models (SPEC-NOTES §12), inputs fed pre-made, threads per session."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper, numpy_helper

from . import data
from .timing import Contender

ORT, ORT_PREPACKED = "onnxruntime", "onnxruntime (B prepacked)"
OPSETS = [helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)]


def _model(nodes: Sequence[onnx.NodeProto], feeds: dict[str, np.ndarray], output_dtype: type,
           initializers: dict[str, np.ndarray]) -> bytes:  # fmt: skip
    def info(name: str, array: np.ndarray) -> onnx.ValueInfoProto:
        return helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(array.dtype), array.shape)

    output = helper.make_tensor_value_info("y", helper.np_dtype_to_tensor_dtype(np.dtype(output_dtype)), None)
    graph = helper.make_graph(
        list(nodes), "bench", [info(name, array) for name, array in feeds.items()], [output],
        initializer=[numpy_helper.from_array(array, name) for name, array in initializers.items()],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=OPSETS)
    model.ir_version = 10
    return model.SerializeToString()


def session(model: bytes, threads: int) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    # a spinning worker would keep a core busy after each run, slowing whichever contender runs next
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])


def contender(name: str, nodes: Sequence[onnx.NodeProto], feeds: dict[str, np.ndarray], output_dtype: type,
              initializers: dict[str, np.ndarray] | None = None) -> Contender:  # fmt: skip
    model = _model(nodes, feeds, output_dtype, initializers or {})

    def prepare(threads: int):
        run = session(model, threads).run
        return lambda: run(None, feeds)

    return Contender(name, prepare, result=lambda outputs: outputs[0])


def quantize(p: data.Quantize) -> list[Contender]:
    node = helper.make_node("QuantizeLinear", ["x", "s", "z"], ["y"])
    return [contender(ORT, [node], {"x": p.x, "s": p.scale, "z": p.zero_point}, np.uint8)]


def dequantize(p: data.Dequantize) -> list[Contender]:
    node = helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"])
    return [contender(ORT, [node], {"q": p.q, "s": p.scale, "z": p.zero_point}, np.float32)]


def quantized_add(p: data.QuantizedAdd) -> list[Contender]:
    feeds = {"a": p.a, "as": p.a_scale, "az": p.a_zero_point, "b": p.b, "bs": p.b_scale,
             "bz": p.b_zero_point, "ys": p.output_scale, "yz": p.output_zero_point}  # fmt: skip
    node = helper.make_node("QLinearAdd", list(feeds), ["y"], domain="com.microsoft")
    return [contender(ORT, [node], feeds, np.uint8)]


def add_relu(p: data.FloatAdd) -> list[Contender]:
    nodes = [helper.make_node("Add", ["a", "b"], ["sum"]), helper.make_node("Relu", ["sum"], ["y"])]
    return [contender(ORT, nodes, {"a": p.a, "b": p.b}, np.float32)]


def matmul(p: data.MatMul) -> list[Contender]:
    """QLinearMatMul with B fed at every run, and with B an initializer (prepacked by ORT)."""
    feeds = {"a": p.a, "as": p.a_scale, "az": p.a_zero_point, "b": p.b, "bs": p.b_scale,
             "bz": p.b_zero_point, "ys": p.output_scale, "yz": p.output_zero_point}  # fmt: skip
    node = helper.make_node("QLinearMatMul", list(feeds), ["y"])
    fed_without_b = {name: array for name, array in feeds.items() if name != "b"}
    return [
        contender(ORT, [node], feeds, np.uint8),
        contender(ORT_PREPACKED, [node], fed_without_b, np.uint8, initializers={"b": p.b}),
    ]
