"""What planning produces: steps (DirectML operators, or nodes onnxruntime CPU computes) and the
operand specs a step's description is built from."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypeAlias

import numpy as np
import onnx

from ..ops import OperatorDesc

__all__ = ["Described", "Node", "Output", "Source", "Spec", "Step", "described", "node_name"]

# Where an operator's input tensor comes from: the step's operand i, output k of an earlier operator
# of the step (j, k), or nothing (an absent optional tensor).
Source: TypeAlias = "int | tuple[int, int] | None"
Typed: TypeAlias = "np.ndarray | Spec"  # what a signature is read from: a value, or its dtype and shape alone


@dataclass(frozen=True)
class Spec:
    """An operand's dtype and shape: all a description needs."""

    dtype: np.dtype
    shape: tuple[int, ...]


@dataclass(frozen=True)
class Node:
    """One DirectML operator of a step and the source of each of its input tensors, in its fields'
    order (``OperatorDesc.input_tensors``)."""

    desc: OperatorDesc
    sources: tuple[Source, ...]


@dataclass(frozen=True)
class Output:
    """One output of a step: operator ``node``'s output ``index`` (in its fields' order), its
    DirectML sizes, the ONNX shape and dtype it has."""

    sizes: tuple[int, ...]
    shape: tuple[int, ...]
    dtype: np.dtype
    node: int = -1
    index: int = 0


@dataclass(frozen=True)
class Described:
    """The DirectML operators the provider builds for a step (one, or the nodes of the operator
    graph it builds, ``MLOperatorGraphDesc``, in execution order) and the step's outputs, one per
    output of the ONNX node in its order.

    ``warning`` says where the provider's description means something else than ONNX's node (run
    computes the description's meaning, as DirectML would).
    """

    nodes: tuple[Node, ...]
    outputs: tuple[Output, ...]
    warning: str = ""

    @property
    def desc(self) -> OperatorDesc:
        """The operator of a one-operator step."""
        (node,) = self.nodes
        return node.desc


def described(
    desc: OperatorDesc, sizes: tuple[int, ...], shape: tuple[int, ...], dtype: np.dtype, warning: str = ""
) -> Described:
    """One operator reading the step's operands in its fields' order; its output is the step's."""
    node = Node(desc, tuple(range(len(desc.input_tensors()))))
    return Described((node,), (Output(sizes, shape, np.dtype(dtype)),), warning)


def required(spec: Spec | None) -> Spec:
    """A required operand's spec: every node ONNX's checker accepts names its required inputs."""
    assert spec is not None, "a required operand is absent"
    return spec


Build = Callable[[onnx.NodeProto, Sequence["Spec | None"]], Described]


@dataclass(frozen=True)
class Step:
    """One unit of execution: mapped DirectML operators, or nodes computed by onnxruntime CPU.

    ``node`` is the node the provider builds its kernel from: the model's own, or the one an
    onnxruntime fusion makes (a QLinearMatMul from DQ, DQ -> MatMul -> Q); ``covers`` the model's
    nodes it stands for; ``runs`` what onnxruntime CPU computes for an other step (the model's
    nodes with ONNX's meaning, or the node a dropped Q/DQ pair leaves). ``inputs`` are the operands
    the kernel takes ("" for an absent optional one); ``constants`` operands the provider or an
    onnxruntime rewrite makes itself (a zero point of 0, transposed 4-bit weights). ``operators``
    are the DirectML operators of the kernel in execution order (empty: an other step); ``rule``
    names the source of the mapping, or why the nodes are not mapped; ``missing`` the DirectML
    operator(s) the provider runs that dmlq does not have yet.
    """

    node: onnx.NodeProto
    covers: tuple[onnx.NodeProto, ...]
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    rule: str
    operators: tuple[type[OperatorDesc], ...] = ()
    build: Build | None = None
    runs: tuple[onnx.NodeProto, ...] = ()
    constants: Mapping[str, np.ndarray] = field(default_factory=dict)
    missing: str = ""
    refusal: str = ""  # why the provider fails to create this kernel (its session then fails)

    @property
    def mapped(self) -> bool:
        return bool(self.operators)

    @property
    def operator(self) -> type[OperatorDesc] | None:
        """The operator of a one-operator step (None for an other step or an operator graph)."""
        return self.operators[0] if len(self.operators) == 1 else None

    @property
    def operator_name(self) -> str:
        """DirectML's name of the operator, or of the graph's operators joined by " + "."""
        return " + ".join(operator.TYPE_NAME for operator in self.operators)

    @property
    def name(self) -> str:
        return ", ".join(node_name(node) for node in self.covers)

    def describe(self, specs: Sequence[Spec | None]) -> Described:
        """The description for operands of these dtypes and shapes (DmlError where the provider refuses)."""
        assert self.build is not None  # a mapped step
        return self.build(self.node, specs)


def node_name(node: onnx.NodeProto) -> str:
    return node.name or f"{node.op_type}({node.output[0]})"
