"""ONNX nodes and QDQ groups to dmlq's DirectML operator descriptions, as onnxruntime's DirectML
provider builds them. Every rule names the onnxruntime source it follows (paths under
``onnxruntime/core/``):

* ``QuantizeLinear`` and ``DequantizeLinear`` (opsets 10, 13, 19, 21; registered in
  ``providers/dml/DmlExecutionProvider/src/Operators/OperatorRegistration.cpp``) become
  ELEMENT_WISE_QUANTIZE_LINEAR / ELEMENT_WISE_DEQUANTIZE_LINEAR (``DmlOperatorElementWise.cpp``,
  ``DmlOperatorElementwiseQLinear``): every tensor has at least 4 dimensions, right-aligned; a 1-D
  scale or zero point that is not the data's own shape lies along ``axis`` (its length must be that
  dimension's) and broadcasts through zero strides over the others; any other scale shape
  broadcasts right-aligned. A missing zero point stays absent. 4-bit data and ``block_size`` are
  not mapped here (they need DirectML's QUANTIZE / DEQUANTIZE operators): such nodes are other nodes.
* ``com.microsoft.QLinearAdd`` (``DmlOperatorQLinearAdd.cpp``) becomes
  ELEMENT_WISE_QUANTIZED_LINEAR_ADD: A and B broadcast to the output's sizes, the scales and zero
  points right-aligned with A's dimension count.
* ``QLinearMatMul`` (opsets 10, 21; ``DmlOperatorQLinearMatMul.cpp``) becomes
  QUANTIZED_LINEAR_MATRIX_MULTIPLY: A and B 4-D, batches broadcast to the output's; a 1-D A or
  output scale or zero point is per-row ``{1, 1, M, 1}`` (moved to the H axis), a 1-D B one
  per-column ``{1, 1, 1, N}``; one-element ones are per-tensor.
* ``Add`` (opsets 7, 13, 14) and ``Sum`` of exactly two inputs (opsets 8, 13) on float32 / float16
  (``DmlOperatorElementWise.cpp``: ``DmlOperatorElementwiseBinary``, and for Sum
  ``DmlOperatorElementwiseBinaryLoop``, whose first pair is one ADD) become ELEMENT_WISE_ADD with
  both inputs broadcast to the output's sizes (at least 4 dimensions). A Sum of one or of three or
  more inputs is an other node (DirectML runs IDENTITY, or several ADDs in a row, there).
* Fusion (``providers/dml/DmlExecutionProvider/src/GraphTransformer.cpp`` and
  ``Operators/OperatorUtility.cpp``, ``FusionHelpers`` tables ``c_fusableOps`` /
  ``c_activationOps``): an Add (since-version 7, 13 or 14) or a two-input Sum (since-version 8 or
  13) whose output feeds exactly one node, a ``Relu`` (since-version 6, 13, 14) or ``LeakyRelu``
  (6, 16; alpha 0.01 unless given), and is not a graph output, becomes ELEMENT_WISE_ADD1 with that
  fused activation ("the filter for activation functions maps to what DML's fused op internally
  fuses at the shader level": only these two for Add and Sum). Any other activation after an Add
  stays a node of its own (an other node here).
* QDQ groups, as ``optimizer/qdq_transformer/selectors_actions/qdq_selector_action_transformer.cc``
  rewrites them for the DirectML provider: DQ + DQ → Add → Q (8-bit, per-tensor, the Add's only
  consumer the Q) becomes ``QLinearAdd`` (ELEMENT_WISE_QUANTIZED_LINEAR_ADD); DQ → Reshape /
  Transpose / Squeeze / Unsqueeze / Gather → Q with the same scale and zero point drops the DQ and
  Q (the middle node moves the quantized bytes); DQ → MatMul → Q stays as it is (a float MatMul).

Every other node runs on onnxruntime's CPU provider: it is not a DirectML operator of dmlq.

Opsets: the provider registers a kernel per ONNX schema version (``REGISTERED_SINCE``); a node of
any other version (QuantizeLinear-23, say) gets no DirectML kernel, onnxruntime gives it to its CPU
provider, and dmlq runs it as an other node saying so. The sources: the registration table
``Operators/OperatorRegistration.cpp`` (the stored versions read are of the ONNX opset 12 era:
QuantizeLinear and DequantizeLinear 10, QLinearMatMul 10, Add 7, Sum 7 and 8);
``OperatorAuthorHelper/OperatorVersions.h``, whose ``OnnxOperatorSet<N>::sc_sinceVer_<op>``
constants are the versions the table's rows name (the stored version, up to opset 17, has
QuantizeLinear and DequantizeLinear 10 and 13, Add 13 and 14, QLinearMatMul 10, and
``com.microsoft`` QLinearAdd 1); onnxruntime pull request 16939 ("[DML] Register DML operators for
opset 19", merged, its (de)quantization kernels among the changes to ``DmlOperatorElementWise.cpp``;
pull request 19026 lists QuantizeLinear19 and DequantizeLinear19 in that registration); pull request
21592 ("[DML] Add int4 QDQ", merged: QuantizeLinear-21 and DequantizeLinear-21, whose 4-bit types
the provider computes with DML_OPERATOR_QUANTIZE / DEQUANTIZE, supplying a zero point of 0 for
unsigned types where the model has none); pull request 22804 ("register Identity and QLinearMatmul
for opset21", merged: ``sc_sinceVer_QLinearMatMul = 21``). Sum-6 is what the table's ``Sum`` 7 row names.

4-bit and blocked Q/DQ stay other nodes: the stored sources predate pull request 21592, so how the
provider describes their scales, zero points and blocks for QUANTIZE / DEQUANTIZE cannot be read
there, and dmlq maps nothing it cannot follow.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import helper

from .. import activations
from ..errors import DmlError
from ..ops import (
    ElementWiseAdd,
    ElementWiseAdd1,
    ElementWiseDequantizeLinear,
    ElementWiseQuantizedLinearAdd,
    ElementWiseQuantizeLinear,
    OperatorDesc,
    QuantizedLinearMatrixMultiply,
)
from ..tensor import TensorDesc, packed_strides
from ..types import DataType
from .loading import DEFAULT_DOMAINS, MICROSOFT, Model

__all__ = ["Described", "Spec", "Step", "plan"]

NCHW = 4  # the provider's minimum dimension count (NchwDimensionCount)
BYTES = (np.dtype(np.uint8), np.dtype(np.int8))
FLOATS = (np.dtype(np.float32), np.dtype(np.float16))
QUANTIZE_INPUTS = (*FLOATS, np.dtype(np.int32))
DEQUANTIZE_INPUTS = (*BYTES, np.dtype(np.int32))
COLLAPSIBLE = ("Reshape", "Transpose", "Squeeze", "Unsqueeze", "Gather")
SOURCES = {
    "QuantizeLinear": "DmlOperatorElementWise.cpp (DmlOperatorElementwiseQLinear)",
    "DequantizeLinear": "DmlOperatorElementWise.cpp (DmlOperatorElementwiseQLinear)",
    "QLinearAdd": "DmlOperatorQLinearAdd.cpp",
    "QLinearMatMul": "DmlOperatorQLinearMatMul.cpp",
    "Add": "DmlOperatorElementWise.cpp (DmlOperatorElementwiseBinary)",
    "Sum": "DmlOperatorElementWise.cpp (DmlOperatorElementwiseBinaryLoop, two inputs: one ADD)",
    "Add+activation": "GraphTransformer.cpp + OperatorUtility.cpp (FusionHelpers: DmlFusedAdd)",
    "Sum+activation": "GraphTransformer.cpp + OperatorUtility.cpp (FusionHelpers: DmlFusedSum)",
    "QDQ Add": "qdq_selector_action_transformer.cc (DQ + DQ -> Add -> Q as QLinearAdd), "
    "DmlOperatorQLinearAdd.cpp",
    "QDQ collapse": "qdq_selector_action_transformer.cc (DQ -> data movement -> Q dropped)",
}


@dataclass(frozen=True)
class Spec:
    """An operand's dtype and shape: all a description needs."""

    dtype: np.dtype
    shape: tuple[int, ...]


@dataclass(frozen=True)
class Described:
    """A description and the output it produces: DirectML's sizes and the ONNX shape."""

    desc: OperatorDesc
    sizes: tuple[int, ...]
    shape: tuple[int, ...]
    dtype: np.dtype


@dataclass(frozen=True)
class Step:
    """One unit of execution: a mapped DirectML operator, or nodes computed by onnxruntime CPU.

    ``inputs`` are the operands in the operator's field order ("" for an absent optional one);
    ``covers`` the model's own nodes it stands for (a QDQ group covers several).
    """

    nodes: tuple[onnx.NodeProto, ...]
    covers: tuple[onnx.NodeProto, ...]
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    operator: type[OperatorDesc] | None = None
    rule: str = ""
    build: Callable[[onnx.NodeProto, Sequence[Spec | None]], Described] | None = None

    @property
    def mapped(self) -> bool:
        return self.operator is not None

    @property
    def name(self) -> str:
        return ", ".join(node_name(node) for node in self.covers)

    def describe(self, specs: Sequence[Spec | None]) -> Described:
        """The description for operands of these dtypes and shapes (DmlError where the provider refuses)."""
        return self.build(self.nodes[-1], specs)


def node_name(node: onnx.NodeProto) -> str:
    return node.name or f"{node.op_type}({node.output[0]})"


# -- tensor descriptions the provider's way ------------------------------------------------------


def _padded(shape: Sequence[int], count: int = NCHW) -> tuple[int, ...]:
    shape = tuple(shape)
    return (1,) * max(count - len(shape), 0) + shape


def _broadcast_desc(spec: Spec, sizes: tuple[int, ...], field: str) -> TensorDesc:
    """``spec`` read right-aligned against ``sizes``: zero strides where it broadcasts."""
    own = _padded(spec.shape, len(sizes))
    if len(own) > len(sizes):
        raise DmlError(f"{field}: shape {spec.shape} has more dimensions than the output {sizes}")
    strides = []
    for size, dim, stride in zip(sizes, own, packed_strides(own)):
        if dim != size and dim != 1:
            raise DmlError(f"{field}: shape {spec.shape} does not broadcast to {sizes}")
        strides.append(stride if dim == size and dim != 1 else 0)
    return TensorDesc(DataType.from_dtype(spec.dtype), sizes, strides)


def _own_desc(spec: Spec, count: int) -> TensorDesc:
    return TensorDesc(DataType.from_dtype(spec.dtype), _padded(spec.shape, count))


def _attribute(node: onnx.NodeProto, name: str, default: object) -> object:
    for attribute in node.attribute:
        if attribute.name == name:
            return helper.get_attribute_value(attribute)
    return default


def _broadcast(*shapes: tuple[int, ...]) -> tuple[int, ...]:
    try:
        return tuple(np.broadcast_shapes(*shapes))
    except ValueError:
        raise DmlError(f"inputs: shapes {', '.join(map(str, shapes))} do not broadcast") from None


# -- QuantizeLinear / DequantizeLinear -------------------------------------------------------------


def _along_axis(spec: Spec, shape: tuple[int, ...], axis: int, field: str) -> Spec:
    """A 1-D scale or zero point laid along ``axis`` of the data (the provider's reshape)."""
    if len(spec.shape) != 1 or spec.shape == shape:
        return spec
    if not -len(shape) <= axis < len(shape):
        raise DmlError(f"{field}: axis {axis} is outside the data's {len(shape)} dimensions")
    axis %= len(shape)
    if spec.shape[0] != shape[axis]:
        raise DmlError(f"{field}: {spec.shape[0]} elements, but the data has {shape[axis]} along axis {axis}")
    return Spec(spec.dtype, (1,) * axis + spec.shape + (1,) * (len(shape) - 1 - axis))


def _quantization_linear(operator: type[OperatorDesc], output_dtype: Callable[[list[Spec | None]], np.dtype]):
    def build(node: onnx.NodeProto, specs: Sequence[Spec | None]) -> Described:
        x, scale, zero_point = specs
        axis = int(_attribute(node, "axis", 1))
        sizes = _padded(x.shape)
        laid = [
            None if s is None else _along_axis(s, x.shape, axis, f)
            for s, f in ((scale, "scale"), (zero_point, "zero_point"))
        ]
        dtype = output_dtype([x, scale, zero_point])
        desc = operator(
            input=_own_desc(x, len(sizes)),
            scale=_broadcast_desc(laid[0], sizes, "scale"),
            zero_point=None if laid[1] is None else _broadcast_desc(laid[1], sizes, "zero_point"),
            output=TensorDesc(DataType.from_dtype(dtype), sizes),
        )
        return Described(desc, sizes, x.shape, dtype)

    return build


def _quantized_dtype(node: onnx.NodeProto) -> Callable[[list[Spec | None]], np.dtype]:
    def dtype(specs: list[Spec | None]) -> np.dtype:
        zero_point = specs[2]
        if zero_point is not None:
            return zero_point.dtype
        requested = int(_attribute(node, "output_dtype", 0))
        return helper.tensor_dtype_to_np_dtype(requested) if requested else np.dtype(np.uint8)

    return dtype


# -- Add, Add1, QLinearAdd ---------------------------------------------------------------------------


def _add(activation: activations.Activation | None):
    def build(node: onnx.NodeProto, specs: Sequence[Spec | None]) -> Described:
        a, b = specs
        shape = _broadcast(a.shape, b.shape)
        sizes = _padded(shape)
        fields = {
            "a": _broadcast_desc(a, sizes, "A"),
            "b": _broadcast_desc(b, sizes, "B"),
            "output": TensorDesc(DataType.from_dtype(a.dtype), sizes),
        }
        if activation is None:
            desc = ElementWiseAdd(**fields)
        else:
            desc = ElementWiseAdd1(**fields, fused_activation=activation)
        return Described(desc, sizes, shape, a.dtype)

    return build


def _qlinear_add(node: onnx.NodeProto, specs: Sequence[Spec | None]) -> Described:
    a, a_scale, a_zero_point, b, b_scale, b_zero_point, y_scale, y_zero_point = specs
    shape = _broadcast(a.shape, b.shape)
    sizes = _padded(shape)
    count = len(_padded(a.shape))
    dtype = y_zero_point.dtype if y_zero_point is not None else a.dtype

    def own(spec: Spec | None) -> TensorDesc | None:
        return None if spec is None else _own_desc(spec, count)

    desc = ElementWiseQuantizedLinearAdd(
        a=_broadcast_desc(a, sizes, "A"),
        a_scale=own(a_scale),
        a_zero_point=own(a_zero_point),
        b=_broadcast_desc(b, sizes, "B"),
        b_scale=own(b_scale),
        b_zero_point=own(b_zero_point),
        output_scale=own(y_scale),
        output_zero_point=own(y_zero_point),
        output=TensorDesc(DataType.from_dtype(dtype), sizes),
    )
    return Described(desc, sizes, shape, dtype)


# -- QLinearMatMul -----------------------------------------------------------------------------------


def _qlinear_matmul(node: onnx.NodeProto, specs: Sequence[Spec | None]) -> Described:
    a, a_scale, a_zero_point, b, b_scale, b_zero_point, y_scale, y_zero_point = specs
    a_shape = (1, *a.shape) if len(a.shape) == 1 else a.shape
    b_shape = (*b.shape, 1) if len(b.shape) == 1 else b.shape
    if a_shape[-1] != b_shape[-2]:
        raise DmlError(f"B: shape {b.shape} does not continue A's K = {a_shape[-1]}")
    batch = _broadcast(a_shape[:-2], b_shape[:-2])
    m, n = a_shape[-2], b_shape[-1]
    sizes = _padded((*batch, m, n))
    shape = (*batch, m, n)
    if len(a.shape) == 1:
        shape = shape[:-2] + shape[-1:]
    if len(b.shape) == 1:
        shape = shape[:-1]
    count = len(sizes)
    dtype = y_zero_point.dtype if y_zero_point is not None else a.dtype

    def quantization(spec: Spec | None, per_row: bool) -> TensorDesc | None:
        if spec is None:
            return None
        if len(spec.shape) == 1 and spec.shape[0] != 1:
            laid = (
                (*(1,) * (count - 2), spec.shape[0], 1) if per_row else (*(1,) * (count - 1), spec.shape[0])
            )
            return TensorDesc(DataType.from_dtype(spec.dtype), laid)
        return _own_desc(spec, count)

    desc = QuantizedLinearMatrixMultiply(
        a=_broadcast_desc(Spec(a.dtype, a_shape), sizes[:-1] + (a_shape[-1],), "A"),
        a_scale=quantization(a_scale, True),
        a_zero_point=quantization(a_zero_point, True),
        b=_broadcast_desc(Spec(b.dtype, b_shape), sizes[:-2] + b_shape[-2:], "B"),
        b_scale=quantization(b_scale, False),
        b_zero_point=quantization(b_zero_point, False),
        output_scale=quantization(y_scale, True),
        output_zero_point=quantization(y_zero_point, True),
        output=TensorDesc(DataType.from_dtype(dtype), sizes),
    )
    return Described(desc, sizes, shape, dtype)


# -- fused activations ---------------------------------------------------------------------------


REGISTERED_SINCE = {  # the provider's kernels, by the ONNX schema version they implement (module docstring)
    "QuantizeLinear": (10, 13, 19, 21),
    "DequantizeLinear": (10, 13, 19, 21),
    "QLinearMatMul": (10, 21),
    "Add": (7, 13, 14),
    "Sum": (6, 8, 13),
}
FUSING_SINCE = {"Add": (7, 13, 14), "Sum": (8, 13)}  # c_fusableOps, activation filter Relu/LeakyRelu
FUSED_SINCE = {"Relu": (6, 13, 14), "LeakyRelu": (6, 16)}  # their rows in c_activationOps


def _since_version(node: onnx.NodeProto, opset: int) -> int:
    """The version of the node's operator schema the model's opset selects (what ORT matches on)."""
    return onnx.defs.get_schema(node.op_type, opset, node.domain or "").since_version


def _unregistered(node: onnx.NodeProto, opset: int) -> str | None:
    """Why the provider has no kernel for this version of the node's operator (onnxruntime then runs
    the node on its CPU provider), or None when it has one."""
    since = _since_version(node, opset)
    if since in REGISTERED_SINCE[node.op_type]:
        return None
    versions = ", ".join(map(str, REGISTERED_SINCE[node.op_type]))
    return f"the DirectML provider registers {node.op_type} {versions}, not {since}"


def _fused_activation(node: onnx.NodeProto, opset: int) -> activations.Activation | None:
    """The DirectML activation an ONNX activation node fuses into an Add or Sum as, or None."""
    if node.domain not in DEFAULT_DOMAINS or node.op_type not in FUSED_SINCE:
        return None
    if _since_version(node, opset) not in FUSED_SINCE[node.op_type]:
        return None
    if node.op_type == "Relu":
        return activations.Relu()
    return activations.LeakyRelu(alpha=float(_attribute(node, "alpha", activations.LeakyRelu.alpha)))


# -- the plan ---------------------------------------------------------------------------------------


@dataclass
class _Graph:
    """What the mapping rules ask of the graph: producers, consumers, constants, static types."""

    model: Model

    def __post_init__(self) -> None:
        self.producer = {name: node for node in self.model.graph.node for name in node.output if name}
        self.consumers: dict[str, list[onnx.NodeProto]] = {}
        for node in self.model.graph.node:
            for name in set(node.input):
                self.consumers.setdefault(name, []).append(node)
        self.graph_outputs = set(self.model.output_names)
        self.opset = self.model.opset("")

    def only_consumer(self, name: str) -> onnx.NodeProto | None:
        found = self.consumers.get(name, [])
        return found[0] if len(found) == 1 and name not in self.graph_outputs else None

    def dtype(self, name: str) -> np.dtype | None:
        found = self.model.types.get(name)
        return None if found is None else found.dtype

    def constant(self, name: str) -> np.ndarray | None:
        return self.model.initializers.get(name) if name else None


def _inputs(node: onnx.NodeProto, count: int) -> tuple[str, ...]:
    return tuple(node.input) + ("",) * (count - len(node.input))


def _is(node: onnx.NodeProto | None, op_type: str, domains: Sequence[str] = DEFAULT_DOMAINS) -> bool:
    return node is not None and node.op_type == op_type and node.domain in domains


def _per_tensor_8bit(graph: _Graph, node: onnx.NodeProto) -> bool:
    """A Q or DQ node with one constant scale and an 8-bit constant (or absent) zero point."""
    scale = graph.constant(node.input[1])
    zero_point = graph.constant(node.input[2]) if len(node.input) > 2 else None
    if scale is None or scale.size != 1 or (len(node.input) > 2 and node.input[2] and zero_point is None):
        return False
    quantized = node.output[0] if node.op_type == "QuantizeLinear" else node.input[0]
    return (zero_point is None or zero_point.size == 1) and graph.dtype(quantized) in BYTES


def _quantization_reason(graph: _Graph, node: onnx.NodeProto) -> str | None:
    """Why a QuantizeLinear / DequantizeLinear cannot be ELEMENT_WISE_(DE)QUANTIZE_LINEAR, or None."""
    if int(_attribute(node, "block_size", 0)):
        return "blocked quantization (block_size) is not mapped: it needs DirectML's QUANTIZE/DEQUANTIZE"
    quantize = node.op_type == "QuantizeLinear"
    data, quantized = (node.input[0], node.output[0]) if quantize else (node.output[0], node.input[0])
    allowed = BYTES if quantize else DEQUANTIZE_INPUTS
    if graph.dtype(quantized) not in allowed:
        found = graph.dtype(quantized) or "an unknown type"
        return f"{found} data is not mapped (8-bit only; 4-bit needs QUANTIZE/DEQUANTIZE)"
    if graph.dtype(data) not in (QUANTIZE_INPUTS if quantize else FLOATS):
        return f"{graph.dtype(data) or 'an unknown type'} values are not mapped"
    return None


def _quantization_step(graph: _Graph, node: onnx.NodeProto) -> Step:
    reason = _quantization_reason(graph, node)
    if reason:
        return _other(node, reason)
    if node.op_type == "QuantizeLinear":
        build = _quantization_linear(ElementWiseQuantizeLinear, _quantized_dtype(node))
        operator = ElementWiseQuantizeLinear
    else:
        build = _quantization_linear(ElementWiseDequantizeLinear, lambda specs: specs[1].dtype)
        operator = ElementWiseDequantizeLinear
    return Step((node,), (node,), _inputs(node, 3), (node.output[0],), operator, SOURCES[node.op_type], build)


def _qdq_add(graph: _Graph, add: onnx.NodeProto) -> Step | None:
    """DQ + DQ -> Add -> Q as one QLinearAdd, when every part is 8-bit and per-tensor."""
    dequantized = [graph.producer.get(name) for name in add.input]
    quantize = graph.only_consumer(add.output[0])
    if not (all(_is(dq, "DequantizeLinear") for dq in dequantized) and _is(quantize, "QuantizeLinear")):
        return None
    parts = [*dequantized, quantize]
    if not all(_per_tensor_8bit(graph, part) and _registered(graph, part) for part in parts):
        return None
    inputs = tuple(name for dq in dequantized for name in _inputs(dq, 3)) + _inputs(quantize, 3)[1:]
    covers = (*dequantized, add, quantize)
    return Step(
        (add,),
        covers,
        inputs,
        (quantize.output[0],),
        ElementWiseQuantizedLinearAdd,
        SOURCES["QDQ Add"],
        _qlinear_add,
    )


def _collapse(graph: _Graph, node: onnx.NodeProto) -> Step | None:
    """DQ -> data movement -> Q with equal quantization: the node moves the quantized bytes itself."""
    dequantize = graph.producer.get(node.input[0])
    quantize = graph.only_consumer(node.output[0])
    if not (_is(dequantize, "DequantizeLinear") and _is(quantize, "QuantizeLinear")):
        return None
    if graph.only_consumer(dequantize.output[0]) is not node:
        return None
    if not all(_per_tensor_8bit(graph, part) and _registered(graph, part) for part in (dequantize, quantize)):
        return None
    same = all(
        np.array_equal(graph.constant(a), graph.constant(b))
        and graph.constant(a).dtype == graph.constant(b).dtype
        for a, b in zip(_inputs(dequantize, 3)[1:], _inputs(quantize, 3)[1:])
        if a or b
    )
    if not same:
        return None
    moved = onnx.NodeProto()
    moved.CopyFrom(node)
    moved.input[0] = dequantize.input[0]
    moved.output[0] = quantize.output[0]
    reason = f"{SOURCES['QDQ collapse']}: {node.op_type} moves the quantized bytes"
    return _other(moved, reason, covers=(dequantize, node, quantize))


def _add_step(graph: _Graph, add: onnx.NodeProto) -> Step:
    """Add, or a two-input Sum, as ELEMENT_WISE_ADD; with a Relu / LeakyRelu after it, ADD1."""
    kind = add.op_type
    if graph.dtype(add.output[0]) not in FLOATS:
        found = graph.dtype(add.output[0]) or "an unknown type"
        return _other(add, f"{kind} on {found} is not mapped (float32/float16 only)")
    follower = graph.only_consumer(add.output[0])
    fusing = _since_version(add, graph.opset) in FUSING_SINCE[kind]
    activation = _fused_activation(follower, graph.opset) if follower is not None and fusing else None
    if activation is None:
        return Step(
            (add,), (add,), tuple(add.input), (add.output[0],), ElementWiseAdd, SOURCES[kind], _add(None)
        )
    return Step(
        (add, follower),
        (add, follower),
        tuple(add.input),
        (follower.output[0],),
        ElementWiseAdd1,
        SOURCES[f"{kind}+activation"],
        _add(activation),
    )


def _other(node: onnx.NodeProto, reason: str, covers: tuple[onnx.NodeProto, ...] | None = None) -> Step:
    inputs = tuple(name for name in node.input if name)
    return Step((node,), covers or (node,), inputs, tuple(name for name in node.output if name), rule=reason)


def _registered(graph: _Graph, node: onnx.NodeProto) -> bool:
    return _unregistered(node, graph.opset) is None


def _step(graph: _Graph, node: onnx.NodeProto) -> Step:
    if node.domain in DEFAULT_DOMAINS:
        unregistered = node.op_type in REGISTERED_SINCE and _unregistered(node, graph.opset)
        if unregistered:
            return _other(node, unregistered)
        if node.op_type in ("QuantizeLinear", "DequantizeLinear"):
            return _quantization_step(graph, node)
        if node.op_type == "QLinearMatMul":
            return Step(
                (node,),
                (node,),
                _inputs(node, 8),
                (node.output[0],),
                QuantizedLinearMatrixMultiply,
                SOURCES["QLinearMatMul"],
                _qlinear_matmul,
            )
        if node.op_type == "Add":
            return _qdq_add(graph, node) or _add_step(graph, node)
        if node.op_type == "Sum":
            if len(node.input) == 2:
                return _add_step(graph, node)
            return _other(node, f"Sum of {len(node.input)} inputs is not mapped (two inputs only)")
        if node.op_type in COLLAPSIBLE:
            return _collapse(graph, node) or _other(node, "no DirectML operator of dmlq")
    if _is(node, "QLinearAdd", (MICROSOFT,)):
        return Step(
            (node,),
            (node,),
            _inputs(node, 8),
            (node.output[0],),
            ElementWiseQuantizedLinearAdd,
            SOURCES["QLinearAdd"],
            _qlinear_add,
        )
    return _other(node, "no DirectML operator of dmlq")


def plan(model: Model) -> list[Step]:
    """The model's nodes as steps in the graph's order, keeping only those the graph outputs need.

    A group's later nodes (the Q after a QDQ Add, an activation fused into an Add) are not repeated;
    its earlier DQ nodes keep their own steps, dropped when nothing else reads them.
    """
    graph = _Graph(model)
    order = {id(node): index for index, node in enumerate(model.graph.node)}
    steps, covered = [], set()
    for index, node in enumerate(model.graph.node):
        if id(node) in covered:
            continue
        step = _step(graph, node)
        covered.update(id(part) for part in step.covers if order[id(part)] > index)
        steps.append(step)
    return _needed(steps, graph.graph_outputs)


def _needed(steps: list[Step], outputs: set[str]) -> list[Step]:
    needed, kept = set(outputs), []
    for step in reversed(steps):
        if needed.intersection(step.outputs):
            kept.append(step)
            needed.update(step.inputs)
    return kept[::-1]
