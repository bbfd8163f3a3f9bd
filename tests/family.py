"""Test helpers for the quantized family: descriptions from arrays, execution on a Device, and the
independent oracles (one-node ONNX models run by onnx.reference and by onnxruntime CPU)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from dmlq import DataType, Device, TensorDesc

BYTE_TYPES = ("uint8", "int8")


def tensor_of(array: np.ndarray | None, sizes: Sequence[int] | None = None) -> TensorDesc | None:
    """The packed description of ``array`` (or of its values laid out as ``sizes``)."""
    if array is None:
        return None
    return TensorDesc(DataType.from_dtype(array.dtype), array.shape if sizes is None else sizes)


def execute(desc, inputs: Sequence[np.ndarray | None], device: Device | None = None) -> list[np.ndarray]:
    """``desc`` compiled and executed on packed arrays; the outputs, shaped as their descriptions."""
    operator = (device or Device()).compile_operator(desc)
    outputs = [np.zeros(getattr(desc, f.name).sizes, getattr(desc, f.name).data_type.dtype)
               for f in desc.output_fields()]  # fmt: skip
    operator.execute([None if a is None else np.ascontiguousarray(a) for a in inputs], outputs)
    return outputs


def random_bytes(rng: np.random.Generator, dtype: str, shape) -> np.ndarray:
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max + 1, shape).astype(dtype)


# -- ONNX one-node models ------------------------------------------------------------------------------


def node_model(
    op_type: str,
    inputs: Sequence[tuple[str, np.ndarray | None]],
    outputs: Sequence[tuple[str, int]],
    opset: int = 13,
    domain: str = "",
    **attributes,
):
    """A model of one node; ``inputs`` as (name, array or None for an absent optional input),
    ``outputs`` as (name, TensorProto element type)."""
    names = [name if array is not None else "" for name, array in inputs]
    output_names = [name for name, _ in outputs]
    node = helper.make_node(op_type, names, output_names, domain=domain or None, **attributes)
    graph_inputs = [
        helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(array.dtype), array.shape)
        for name, array in inputs
        if array is not None
    ]
    graph_outputs = [helper.make_tensor_value_info(name, kind, None) for name, kind in outputs]
    graph = helper.make_graph([node], "family", graph_inputs, graph_outputs)
    opsets = [helper.make_opsetid("", opset)] + ([helper.make_opsetid(domain, 1)] if domain else [])
    model = helper.make_model(graph, opset_imports=opsets)
    model.ir_version = 8
    return model


def feeds(inputs: Sequence[tuple[str, np.ndarray | None]]) -> dict[str, np.ndarray]:
    return {name: array for name, array in inputs if array is not None}


def onnx_reference(model, inputs) -> list[np.ndarray]:
    return ReferenceEvaluator(model).run(None, feeds(inputs))


def onnxruntime_cpu(model, inputs) -> list[np.ndarray]:
    import onnxruntime

    session = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds(inputs))


INT32, FLOAT, UINT8, INT8 = TensorProto.INT32, TensorProto.FLOAT, TensorProto.UINT8, TensorProto.INT8
