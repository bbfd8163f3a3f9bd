"""What the QDQ rules share: the group a selector finds around a target node
(``NodeGroupSelector::GetQDQSelection`` and ``CheckQDQNodes`` in
``optimizer/qdq_transformer/selectors_actions/qdq_selectors.cc``; ``QDQ::NodeGroup::
CanCreateNodeGroup`` in ``framework/node_unit.cc``), the zero points an action fills in
(``SetOptionalZeroPoint`` in ``qdq_actions.cc``) and the Q/DQ pair test of ``qdq_util.cc``.

Every DQ feeding one input of one node is its own here: ``EnsureUniqueDQForNodeUnit``
(``optimizer/qdq_transformer/ensure_unique_dq_for_node_unit.cc``, run before level 1 whenever the
QDQ transformers are on) gives each consumer edge of a DQ a DQ of its own.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import ml_dtypes
import numpy as np
import onnx
from onnx import helper

from ..descs import attribute
from ..graph import Graph

__all__ = [
    "FOUR_BIT",
    "SIXTEEN_BIT",
    "SOURCE",
    "Fusion",
    "Group",
    "check_nodes",
    "covers",
    "find_group",
    "fused_node",
    "pair_supported",
    "positive_scale",
    "quantization_inputs",
]

SIXTEEN_BIT = (np.dtype(np.int16), np.dtype(np.uint16))
FOUR_BIT = (np.dtype(ml_dtypes.int4), np.dtype(ml_dtypes.uint4))
SOURCE = "optimizer/qdq_transformer/selectors_actions/qdq_selector_action_transformer.cc"


@dataclass(frozen=True)
class Fusion:
    """A rewrite: the node onnxruntime builds, the model's nodes it replaces (in graph order), the
    constants it adds (zero points of 0), the rule and, for a rewrite that keeps a node of the
    model (a dropped Q/DQ pair), the node onnxruntime CPU can compute in its place."""

    node: onnx.NodeProto
    covers: tuple[onnx.NodeProto, ...]
    rule: str
    constants: Mapping[str, np.ndarray] = field(default_factory=dict)
    moved: onnx.NodeProto | None = None


@dataclass(frozen=True)
class Group:
    """A selector's QDQ node group: DQs by target input, the target, its Q nodes, a redundant clip."""

    dequantizes: tuple[onnx.NodeProto, ...]
    target: onnx.NodeProto
    quantizes: tuple[onnx.NodeProto, ...]
    clip: onnx.NodeProto | None


def find_group(graph: Graph, target: onnx.NodeProto) -> Group | None:
    """``GetQDQSelection``: the DQ parents, the Q children (past a Relu or Clip that the Q makes
    redundant); None where a Relu or Clip stands between that no single Q makes redundant."""
    dequantizes = tuple(
        producer
        for name in target.input
        if name
        and (producer := graph.producer.get(name)) is not None
        and producer.op_type == "DequantizeLinear"
    )
    clip = None
    consumers = _output_edges(graph, target)
    if len(consumers) == 1 and consumers[0].op_type in ("Relu", "Clip"):
        follower = consumers[0]
        if len(_output_edges(graph, follower)) == 1 and not _produces_output(graph, follower):
            clip = follower
    quantizes = tuple(
        node for node in _output_edges(graph, clip or target) if node.op_type == "QuantizeLinear"
    )
    if clip is not None and (len(quantizes) != 1 or not _clip_made_redundant(graph, clip, quantizes[0])):
        return None
    return Group(dequantizes, target, quantizes, clip)


def check_nodes(
    graph: Graph, group: Group, dequantize_count: int = -1, empty_q_allowed: bool = False
) -> bool:
    """``CheckQDQNodes``: a DQ for each of ``dequantize_count`` inputs (default: every input the target
    has), and a Q on each of the target's outputs, read by nothing else and no graph output."""
    target = group.target
    if dequantize_count == -1:
        dequantize_count = sum(1 for name in target.input if name)
    if dequantize_count != len(group.dequantizes):
        return False
    if not group.quantizes:
        return empty_q_allowed
    if group.clip is None and not _q_consumers_alone(graph, target):
        return False
    outputs = sum(1 for name in target.output if name)
    edges = len(_output_edges(graph, target))
    return outputs == len(group.quantizes) == edges and not _produces_output(graph, target)


def fused_node(
    group: Group, op_type: str, domain: str, inputs: Sequence[str], outputs: Sequence[str] | None = None
) -> onnx.NodeProto:
    """The replacement node (``CreateReplacementNode``): the target's name and attributes, new inputs."""
    target = group.target
    outputs = list(outputs if outputs is not None else [q.output[0] for q in group.quantizes])
    node = helper.make_node(op_type, list(inputs), outputs, name=target.name, domain=domain)
    node.attribute.extend(target.attribute)
    return node


def quantization_inputs(node: onnx.NodeProto, constants: dict[str, np.ndarray], graph: Graph) -> list[str]:
    """A Q or DQ node's (data, scale, zero point), the zero point filled in where it is missing
    (``SetOptionalZeroPoint``: a scalar 0, int8 for a DQ of int8 data, uint8 otherwise)."""
    data, scale, zero_point = (list(node.input) + ["", ""])[:3]
    if not zero_point:
        signed = node.op_type == "DequantizeLinear" and graph.dtype(data) == np.dtype(np.int8)
        zero_point = f"init_optional_zero_point_{'int8' if signed else 'uint8'}"
        constants[zero_point] = np.zeros((), np.int8 if signed else np.uint8)
    return [data, scale, zero_point]


def covers(graph: Graph, group: Group, *extra: onnx.NodeProto) -> tuple[onnx.NodeProto, ...]:
    """The group's nodes in graph order."""
    members = {id(node) for node in (*group.dequantizes, group.target, *group.quantizes, *extra)}
    if group.clip is not None:
        members.add(id(group.clip))
    return tuple(node for node in graph.model.graph.node if id(node) in members)


def pair_supported(graph: Graph, quantize: onnx.NodeProto, dequantize: onnx.NodeProto) -> bool:
    """``IsQDQPairSupported``: both with a constant scalar scale and zero point, equal in type and value."""
    if (
        len(quantize.input) != 3
        or len(dequantize.input) != 3
        or not quantize.input[2]
        or not dequantize.input[2]
    ):
        return False
    values = [graph.scalar_initializer(name) for name in (*quantize.input[1:], *dequantize.input[1:])]
    present = [value for value in values if value is not None]
    if len(present) != len(values):
        return False
    q_scale, q_zero, dq_scale, dq_zero = present
    return (
        q_zero.dtype == dq_zero.dtype
        and q_scale.dtype == dq_scale.dtype
        and q_zero.reshape(-1)[0] == dq_zero.reshape(-1)[0]
        and q_scale.reshape(-1)[0] == dq_scale.reshape(-1)[0]
    )


def positive_scale(graph: Graph, node: onnx.NodeProto) -> bool:
    """``IsQOrDQScalePositiveConstantScalar``."""
    scale = graph.scalar_initializer(node.input[1])
    return scale is not None and float(scale.reshape(-1)[0]) > 0


def _output_edges(graph: Graph, node: onnx.NodeProto) -> list[onnx.NodeProto]:
    return [consumer for name in node.output if name for consumer in graph.consumers.get(name, [])]


def _produces_output(graph: Graph, node: onnx.NodeProto) -> bool:
    return any(name in graph.graph_outputs for name in node.output)


def _q_consumers_alone(graph: Graph, target: onnx.NodeProto) -> bool:
    """``CanCreateNodeGroup``: an output read by a Q is read by Q nodes only and is no graph output."""
    for name in target.output:
        readers = graph.consumers.get(name, [])
        kinds = {reader.op_type == "QuantizeLinear" for reader in readers}
        if True in kinds and (len(kinds) > 1 or name in graph.graph_outputs):
            return False
    return True


def _clip_made_redundant(graph: Graph, clip: onnx.NodeProto, quantize: onnx.NodeProto) -> bool:
    """``IsClipMadeRedundantByQ`` (``qdq_util.cc``): a Relu whose Q's zero point is its type's minimum,
    or a Clip whose range covers the Q's whole range. The Q needs a 0-D float32 constant scale."""
    scale = graph.initializer(quantize.input[1])
    if scale is None or scale.ndim != 0 or scale.dtype != np.float32:
        return False
    if len(quantize.input) > 2 and quantize.input[2]:
        zero = graph.initializer(quantize.input[2])
        if zero is None:
            return False
        dtype, zero_point = zero.dtype, int(zero.reshape(-1)[0])
    else:
        output_dtype = int(attribute(quantize, "output_dtype", 0))
        dtype, zero_point = helper.tensor_dtype_to_np_dtype(output_dtype or onnx.TensorProto.UINT8), 0
    if dtype not in (np.dtype(np.int8), np.dtype(np.uint8), *SIXTEEN_BIT):
        return False
    low, high = np.iinfo(dtype).min, np.iinfo(dtype).max
    if clip.op_type == "Relu":
        return zero_point == low
    bounds = _clip_bounds(graph, clip)
    if bounds is None:
        return False
    q_low, q_high = (int(np.rint(np.float32(bound) / scale)) + zero_point for bound in bounds)
    return q_low <= low and q_high >= high


def _clip_bounds(graph: Graph, clip: onnx.NodeProto) -> tuple[float, float] | None:
    """``GetClipConstantMinMax``: attributes before opset 11, constant inputs after."""
    if graph.since(clip) < 11:
        return float(attribute(clip, "min", float(np.finfo(np.float32).min))), float(
            attribute(clip, "max", float(np.finfo(np.float32).max))
        )
    bounds = [float(np.finfo(np.float32).min), float(np.finfo(np.float32).max)]
    for index, name in enumerate(clip.input[1:3]):
        if name:
            value = graph.initializer(name)
            if value is None:
                return None
            bounds[index] = float(value.reshape(-1)[0])
    return bounds[0], bounds[1]
