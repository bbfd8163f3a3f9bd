"""Test helpers for dmlq.onnx: one-node models and each mapped step recomputed with dmlq's NumPy layer."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper, numpy_helper

import dmlq
from dmlq import ops
from dmlq.onnx.steps import Step

ACTIVATIONS = {
    "Relu": lambda node: "relu",
    "Sigmoid": lambda node: "sigmoid",
    "LeakyRelu": lambda node: dmlq.activations.LeakyRelu(alpha=_attr(node, "alpha", 0.01)),
    "HardSigmoid": lambda node: dmlq.activations.HardSigmoid(
        alpha=_attr(node, "alpha", 0.2), beta=_attr(node, "beta", 0.5)
    ),
}


def _attr(node, name, default):
    found = [a for a in node.attribute if a.name == name]
    value = helper.get_attribute_value(found[0]) if found else default
    return value.decode() if isinstance(value, bytes) else value


def model(
    nodes,
    inputs: dict[str, np.ndarray],
    constants: dict[str, np.ndarray],
    outputs,
    opset: int,
    microsoft: bool = False,
):
    """A model of ``nodes`` with typed, shaped graph inputs and ``constants`` as initializers.

    ``outputs`` names the graph outputs; their types are ONNX's inference, or a dict name -> (dtype, shape).
    """
    value_infos = [
        helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
        for name, v in inputs.items()
    ]
    graph = helper.make_graph(
        nodes,
        "test",
        value_infos,
        [helper.ValueInfoProto(name=name) for name in outputs],
        [numpy_helper.from_array(np.asarray(v), name) for name, v in constants.items()],
    )
    opsets = [helper.make_opsetid("", opset)] + (
        [helper.make_opsetid("com.microsoft", 1)] if microsoft else []
    )
    made = helper.make_model(graph, opset_imports=opsets)
    made.ir_version = 10 if opset >= 21 else 8
    if isinstance(outputs, dict):
        declared = [
            helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(np.dtype(dtype)), shape)
            for name, (dtype, shape) in outputs.items()
        ]
    else:
        inferred = onnx.shape_inference.infer_shapes(made).graph
        found = {v.name: v for v in [*inferred.value_info, *inferred.output]}
        declared = [found[name] for name in outputs]
    del made.graph.output[:]
    made.graph.output.extend(declared)
    return made


def ort_outputs(proto, feeds: dict[str, np.ndarray], fusions: bool = False) -> list[np.ndarray]:
    """onnxruntime CPU's outputs: with its QDQ and quantization fusions off (ONNX's numbers, the
    reference dmlq is held to), or with every default optimization (``fusions=True``)."""
    options = ort.SessionOptions()
    disabled = []
    if not fusions:
        options.add_session_config_entry("session.disable_quant_qdq", "1")
        disabled = ["MatMulIntegerToFloatFusion", "DynamicQuantizeMatMulFusion"]
    session = ort.InferenceSession(
        proto.SerializeToString(), options, providers=["CPUExecutionProvider"], disabled_optimizers=disabled
    )
    return session.run(None, feeds)


def _along_axis(param, data, node):
    if param is None or param.ndim != 1 or param.shape == data.shape:
        return param
    axis = _attr(node, "axis", 0 if node.domain == "com.microsoft" else 1) % data.ndim
    return param.reshape((1,) * axis + param.shape + (1,) * (data.ndim - 1 - axis))


def _blockwise(node) -> dict:
    """Quantize / Dequantize (opset 21): DirectML lays the scale right-aligned (NumPy's broadcasting)
    and takes blocks from the sizes; with a block_size that is ONNX's meaning too."""
    block = _attr(node, "block_size", 0)
    return {"axis": _attr(node, "axis", 1), "block_size": block} if block else {}


def numpy_layer(step: Step, values: dict[str, np.ndarray]) -> np.ndarray:
    """The step's output from dmlq's NumPy layer on the same operands, per ONNX's meaning of them."""
    operands = [values[name] if name else None for name in step.inputs]
    node = step.node
    if step.operator is ops.ElementWiseQuantizeLinear:
        x, scale, zero_point = operands
        dtype = None if zero_point is not None else np.uint8
        return dmlq.quantize_linear(
            x, _along_axis(scale, x, node), _along_axis(zero_point, x, node), dtype=dtype
        )
    if step.operator is ops.ElementWiseDequantizeLinear:
        q, scale, zero_point = operands
        return dmlq.dequantize_linear(q, _along_axis(scale, q, node), _along_axis(zero_point, q, node))
    if step.operator is ops.ElementWiseAdd:
        return dmlq.add(*operands)
    if step.operator is ops.ElementWiseAdd1:
        return dmlq.add(*operands, fused_activation=ACTIVATIONS[_attr(node, "fused_activation", "")](node))
    if step.operator is ops.Quantize:
        x, scale, zero_point = (*operands, None)[:3]
        zero_point = None if name_is_filled(step, 2) else zero_point
        dtype = _integer_dtype(step, node) if zero_point is None else None
        return dmlq.quantize_linear(x, scale, zero_point, dtype=dtype, **_blockwise(node))
    if step.operator is ops.Dequantize:
        q, scale, zero_point = (*operands, None)[:3]
        zero_point = None if name_is_filled(step, 2) else zero_point
        return dmlq.dequantize_linear(q, scale, zero_point, **_blockwise(node))
    if step.operator is ops.ElementWiseQuantizedLinearAdd:
        a, sa, za, b, sb, zb, sy, zy = operands
        return dmlq.quantized_linear_add(
            a, sa, za, b, sb, zb, sy, zy, dtype=None if zy is not None else a.dtype
        )
    if step.operator is ops.QuantizedLinearMatrixMultiply:
        a, sa, za, b, sb, zb, sy, zy = operands
        per_row = [
            p.reshape(-1, 1) if p is not None and p.ndim == 1 and p.size > 1 else p for p in (sa, za, sy, zy)
        ]
        return dmlq.quantized_linear_matrix_multiply(
            a,
            per_row[0],
            per_row[1],
            b,
            sb,
            zb,
            per_row[2],
            per_row[3],
            dtype=None if zy is not None else a.dtype,
        )
    raise AssertionError(f"no NumPy layer for {step.operator}")


def name_is_filled(step: Step, index: int) -> bool:
    """Whether operand ``index`` is a constant the provider makes (a zero point of 0)."""
    return index < len(step.inputs) and step.inputs[index] in step.constants


def _integer_dtype(step: Step, node) -> np.dtype:
    requested = _attr(node, "output_dtype", 0)
    return helper.tensor_dtype_to_np_dtype(requested) if requested else np.dtype(np.uint8)


def assert_steps_match_numpy_layer(loaded, values: dict[str, np.ndarray]) -> int:
    """Every mapped step's output equals the NumPy layer's bit for bit; returns how many were checked."""
    from dmlq.onnx.staging import stages

    checked = 0
    for stage in stages(loaded):
        for step in stage.steps:
            if step.mapped:
                expected = numpy_layer(step, values)
                got = values[step.outputs[0]]
                assert got.dtype == expected.dtype and got.shape == expected.shape, step.name
                assert np.array_equal(got, expected, equal_nan=got.dtype.kind == "f"), step.name
                checked += 1
    return checked
