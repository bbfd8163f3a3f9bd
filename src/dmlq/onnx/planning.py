"""The plan: the model's nodes as steps, in the graph's order, as onnxruntime's DirectML provider
would compute them.

Per node, in order: a node onnxruntime folds into a constant (:mod:`.fusions.constant_folding`) is
an other node; else the first fusion that takes it (the QDQ rules unless ``disable_quant_qdq``,
then MatMulIntegerToFloatFusion, then the provider's activation fusion: :mod:`.fusions`) gives the
node the provider builds its kernel from, standing for the model's nodes it replaces; else the node
itself. A node the provider does not take (:mod:`.provider`) is an other node, which onnxruntime
CPU computes; one it takes is mapped by :mod:`.rules`, or is an other node when dmlq has no such
DirectML operator (the verdict names the operator). Other steps run the model's own nodes, so that
onnxruntime CPU gives ONNX's numbers for them (or, for a dropped Q/DQ pair, the node that moves the
quantized data, which is the same numbers).
"""

from __future__ import annotations

import onnx

from .fusions import FUSIONS, QDQ_FUSIONS, Fusion
from .fusions.constant_folding import folded
from .graph import Graph
from .loading import DEFAULT_DOMAINS, Model
from .options import Options
from .provider import unclaimed
from .rules import Mapped, map_node
from .steps import Step

__all__ = ["FOLDED", "plan"]

FOLDED = "onnxruntime folds it into a constant at session creation (optimizer/constant_folding.cc)"


def plan(model: Model, options: Options) -> list[Step]:
    """The steps the graph outputs need. A group's later nodes (the Q of a QDQ group, an activation
    fused into an Add) are not repeated; its earlier DQ nodes keep steps of their own, dropped when
    nothing else reads them (each consumer of a DQ has its own copy, as EnsureUniqueDQForNodeUnit
    makes)."""
    graph = Graph(model, options)
    graph.folded = folded(graph)
    nodes = list(model.graph.node)
    order = {id(node): index for index, node in enumerate(nodes)}
    steps: list[Step] = []
    covered: set[int] = set()
    for index, node in enumerate(nodes):
        if id(node) in covered:
            continue
        step = _step(graph, node)
        covered.update(id(part) for part in step.covers if order[id(part)] > index)
        steps.append(step)
    return _needed(steps, graph.graph_outputs)


def _step(graph: Graph, node: onnx.NodeProto) -> Step:
    if any(name in graph.folded for name in node.output):
        return _other(node, (node,), FOLDED)
    fusion = _fusion(graph, node)
    if fusion is None:
        return _provider_step(graph, node, (node,), "")
    if fusion.moved is not None:
        return _other(fusion.node, fusion.covers, fusion.rule, runs=(fusion.moved,))
    return _provider_step(graph, fusion.node, fusion.covers, fusion.rule, fusion, anchor=node)


def _fusion(graph: Graph, node: onnx.NodeProto) -> Fusion | None:
    if node.domain not in DEFAULT_DOMAINS:
        return None
    qdq = () if graph.options.disable_quant_qdq else QDQ_FUSIONS.get(node.op_type, ())
    for fuse in (*qdq, *FUSIONS.get(node.op_type, ())):
        fusion = fuse(graph, node)
        if fusion is not None:
            return fusion
    return None


def _provider_step(
    graph: Graph,
    node: onnx.NodeProto,
    covers: tuple[onnx.NodeProto, ...],
    rule: str,
    fusion: Fusion | None = None,
    anchor: onnx.NodeProto | None = None,
) -> Step:
    """The step for ``node`` (the model's own, or a fusion's) on the provider, or an other step. A
    fused node goes where the node it was made from went (``CreateReplacementNode``)."""
    prefix = f"{rule}; " if rule else ""
    reason = (unclaimed(graph, anchor) if anchor is not None else None) or unclaimed(graph, node)
    if reason:
        return _other(node, covers, f"{prefix}{reason}")
    found = map_node(graph, node)
    outputs = tuple(name for name in node.output if name)
    if not isinstance(found, Mapped):
        return _other(node, covers, f"{prefix}{found.reason}", missing=found.missing, refusal=found.refusal)
    constants = {**(fusion.constants if fusion else {}), **found.constants}
    return Step(
        node,
        covers,
        found.inputs,
        outputs,
        f"{prefix}{found.source}",
        found.operators,
        found.build,
        constants=constants,
    )


def _other(
    node: onnx.NodeProto,
    covers: tuple[onnx.NodeProto, ...],
    rule: str,
    runs: tuple[onnx.NodeProto, ...] | None = None,
    missing: str = "",
    refusal: str = "",
) -> Step:
    """An other step: onnxruntime CPU computes ``runs`` (default: the model's nodes it covers), their
    values inside the group renamed so that they cannot clash with the same values of other steps."""
    outputs = tuple(name for name in node.output if name)
    runs = runs if runs is not None else _isolated(covers, outputs)
    produced = {name for part in runs for name in part.output}
    inputs = tuple(
        dict.fromkeys(name for part in runs for name in part.input if name and name not in produced)
    )
    return Step(node, covers, inputs, outputs, rule, runs=runs, missing=missing, refusal=refusal)


def _isolated(covers: tuple[onnx.NodeProto, ...], outputs: tuple[str, ...]) -> tuple[onnx.NodeProto, ...]:
    if len(covers) == 1:
        return covers
    renamed: dict[str, str] = {}
    copies = []
    for node in covers:
        copy = onnx.NodeProto()
        copy.CopyFrom(node)
        for index, name in enumerate(copy.input):
            copy.input[index] = renamed.get(name, name)
        for index, name in enumerate(copy.output):
            if name and name not in outputs:
                renamed[name] = copy.output[index] = f"{name}::{outputs[0]}"
        copies.append(copy)
    return tuple(copies)


def _needed(steps: list[Step], outputs: set[str]) -> list[Step]:
    needed, kept = set(outputs), []
    for step in reversed(steps):
        if needed.intersection(step.outputs):
            kept.append(step)
            needed.update(step.inputs)
    return kept[::-1]
