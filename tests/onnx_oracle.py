"""Test helpers for dmlq.onnx: one-node models and each mapped step recomputed from ONNX's meaning of
its operands: with dmlq's NumPy layer, or, for the operators it has no call for, with dmlq's
reference formulas (the windows, layouts and defaults read here from the node's attributes)."""

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
    "LeakyRelu": lambda node: dmlq.activations.LeakyRelu(alpha=_attr(node, "fused_alpha", 0.01)),
    "HardSigmoid": lambda node: dmlq.activations.HardSigmoid(
        alpha=_attr(node, "fused_alpha", 0.2), beta=_attr(node, "fused_beta", 0.5)
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
    family = FAMILY.get(step.operators)
    if family is None:
        raise AssertionError(f"no NumPy layer for {step.operator_name}")
    return family(node, operands)


def _rows(value):
    """A per-row operand ([M] or a scalar) as the reference's [M, 1] column."""
    return value.reshape(-1, 1) if value is not None and value.ndim == 1 and value.size > 1 else value


def _window(node, x, window=None):
    """ONNX's window attributes: strides, dilations, pads (SAME_UPPER / SAME_LOWER: ONNX's padding
    for ``ceil(in / stride)`` outputs, the odd one at the end or the start)."""
    count = x.ndim - 2
    strides, dilations = _attr(node, "strides", [1] * count), _attr(node, "dilations", [1] * count)
    pads = _attr(node, "pads", [0] * 2 * count)
    mode = _attr(node, "auto_pad", "NOTSET")
    if mode in ("SAME_UPPER", "SAME_LOWER"):
        totals = [max(0, (-(-size // s) - 1) * s + (k - 1) * d + 1 - size)
                  for size, s, k, d in zip(x.shape[2:], strides, window, dilations)]  # fmt: skip
        starts = [t // 2 if mode == "SAME_UPPER" else t - t // 2 for t in totals]
        pads = starts + [t - start for t, start in zip(totals, starts)]
    return {
        "strides": strides,
        "dilations": dilations,
        "start_padding": pads[:count],
        "end_padding": pads[count:],
    }


def _qlinear_conv(node, operands):
    x, xs, xz, w, ws, wz, bias, ys, yz = operands
    dtype = yz.dtype if yz is not None else x.dtype
    return dmlq.reference.quantized_linear_convolution(
        x, xs, xz, w, ws.reshape(-1), wz, bias, ys, yz, dtype, group_count=_attr(node, "group", 1),
        **_window(node, x, w.shape[2:]),
    )  # fmt: skip


def _conv_integer(node, operands):
    x, xz, w, wz = operands
    return dmlq.reference.convolution_integer(
        x, xz, w, wz, group_count=_attr(node, "group", 1), **_window(node, x)
    )


def _matmul_integer(node, operands):
    a, az, b, bz = operands
    return dmlq.reference.matrix_multiply_integer(a, _rows(az), b, bz)


def _integer_to_float(node, operands):
    a, a_scale, az, b, b_scale, bz, bias = operands
    return dmlq.reference.matrix_multiply_integer_to_float(
        a, _rows(a_scale), _rows(az), b, b_scale, bz, bias, a_scale.dtype
    )


def _dynamic_quantize(node, operands):
    return dmlq.reference.dynamic_quantize_linear(operands[0], np.uint8)[0]


def _dynamic_quantize_matmul(node, operands):
    """A quantized to B's type, as DmlOperatorDynamicQuantizeMatMul.cpp does."""
    a, b, b_scale, bz, bias = operands
    q, scale, zero_point = dmlq.reference.dynamic_quantize_linear(a, b.dtype)
    return dmlq.reference.matrix_multiply_integer_to_float(
        q, scale, zero_point, b, b_scale, bz, bias, a.dtype
    )


def _pool(node, operands):
    x, xs, xz, ys, yz = operands
    if node.op_type == "QLinearGlobalAveragePool":
        ones, zeros = [1] * (x.ndim - 2), [0] * (x.ndim - 2)
        window = {"strides": ones, "dilations": ones, "start_padding": zeros, "end_padding": zeros,
                  "window_size": list(x.shape[2:])}  # fmt: skip
    else:
        window = {
            **_window(node, x, _attr(node, "kernel_shape", None)),
            "window_size": _attr(node, "kernel_shape", None),
        }
    dtype = yz.dtype if yz is not None else x.dtype
    return dmlq.reference.quantized_linear_average_pooling(
        x, xs, xz, ys, yz, dtype, include_padding=bool(_attr(node, "count_include_pad", 0)), **window
    )


def _activation(node):
    kind = _attr(node, "fused_activation", "")
    found = ACTIVATIONS[kind](node) if kind else None
    return {"relu": dmlq.activations.Relu(), "sigmoid": dmlq.activations.Sigmoid()}.get(found, found)


def _gemm(node, operands):
    a, b, c = operands
    activation = _activation(node)
    if node.op_type.endswith("MatMul"):
        return dmlq.reference.gemm(a, b, None, a.dtype, alpha=1.0, beta=0.0, fused_activation=activation)
    return dmlq.reference.gemm(
        a, b, c, a.dtype, trans_a=bool(_attr(node, "transA", 0)), trans_b=bool(_attr(node, "transB", 0)),
        alpha=_attr(node, "alpha", 1.0), beta=_attr(node, "beta", 1.0), fused_activation=activation,
    )  # fmt: skip


def _matmul_nbits(node, operands):
    """com.microsoft MatMulNBits: B's blocks of nibbles (the first low), default zero point 2^(bits - 1)."""
    a, b, scales, zero_points = operands[:4]
    n, k, bits, block = (_attr(node, name, 0) for name in ("N", "K", "bits", "block_size"))
    blocks = -(-k // block)

    def values(packed, count):
        packed = packed.reshape(n, -1)
        if bits == 4:
            packed = np.stack([packed & 0xF, packed >> 4], axis=-1).reshape(n, -1)
        return packed[:, :count].astype(np.float32)

    zero = values(zero_points, blocks) if zero_points is not None else np.full((n, blocks), 2.0 ** (bits - 1))
    weights = (values(b, blocks * block) - np.repeat(zero, block, 1)) * np.repeat(
        scales.reshape(n, blocks), block, 1
    )
    return dmlq.reference.gemm(
        a, weights[:, :k].astype(a.dtype), None, a.dtype, trans_b=True, alpha=1.0, beta=0.0
    )


FAMILY = {
    (ops.QuantizedLinearConvolution,): _qlinear_conv,
    (ops.ConvolutionInteger,): _conv_integer,
    (ops.MatrixMultiplyInteger,): _matmul_integer,
    (ops.MatrixMultiplyIntegerToFloat,): _integer_to_float,
    (ops.DynamicQuantizeLinear,): _dynamic_quantize,
    (ops.DynamicQuantizeLinear, ops.MatrixMultiplyIntegerToFloat): _dynamic_quantize_matmul,
    (ops.QuantizedLinearAveragePooling,): _pool,
    (ops.Gemm,): _gemm,
    (ops.Dequantize, ops.Gemm): _matmul_nbits,
}


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


def verify(proto, feeds: dict[str, np.ndarray], operator: str, exact: bool = False):
    """The model's one step maps onto ``operator`` and matches :func:`numpy_layer`; ``compare`` counts
    in each graph output what an independent comparison with onnxruntime CPU finds and names the
    cause of every difference of the step (``exact``: there is none)."""
    import dmlq.onnx as dx
    from dmlq.onnx.comparing import UNEXPLAINED
    from dmlq.onnx.running import execute

    loaded = dx.load(proto)
    assert [v.operator for v in dx.check(loaded)] == [operator]
    values: dict[str, np.ndarray] = {}
    outputs = execute(loaded, feeds, keep=values)
    assert assert_steps_match_numpy_layer(loaded, values) == 1
    report = dx.compare(loaded, feeds)
    for difference, name, theirs in zip(report.outputs, loaded.output_names, ort_outputs(proto, feeds)):
        ours = outputs[name]
        same = ours == theirs
        if ours.dtype.kind == "f":
            same |= np.isnan(ours) & np.isnan(theirs)
        assert difference.differing == np.count_nonzero(~same)
    assert all(d.cause != UNEXPLAINED for d in report.nodes if d.differing), report.table()
    assert not exact or report.identical, report.table()
    return report
