"""What planning produces: steps (one DirectML operator, or nodes onnxruntime CPU computes) and the
operand specs a step's description is built from."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import onnx

from ..ops import OperatorDesc

__all__ = ["Described", "Spec", "Step", "node_name"]


@dataclass(frozen=True)
class Spec:
    """An operand's dtype and shape: all a description needs."""

    dtype: np.dtype
    shape: tuple[int, ...]


@dataclass(frozen=True)
class Described:
    """A description and the output it produces: DirectML's sizes and the ONNX shape.

    ``warning`` says where the provider's description means something else than ONNX's node (run
    computes the description's meaning, as DirectML would).
    """

    desc: OperatorDesc
    sizes: tuple[int, ...]
    shape: tuple[int, ...]
    dtype: np.dtype
    warning: str = ""


Build = Callable[[onnx.NodeProto, Sequence["Spec | None"]], Described]


@dataclass(frozen=True)
class Step:
    """One unit of execution: a mapped DirectML operator, or nodes computed by onnxruntime CPU.

    ``node`` is the node the provider builds its kernel from: the model's own, or the one an
    onnxruntime fusion makes (a QLinearMatMul from DQ, DQ -> MatMul -> Q); ``covers`` the model's
    nodes it stands for; ``runs`` what onnxruntime CPU computes for an other step (the model's
    nodes with ONNX's meaning, or the node a dropped Q/DQ pair leaves). ``inputs`` are the operands
    in the operator's field order ("" for an absent optional one); ``constants`` operands the
    provider makes itself (a zero point of 0). ``rule`` names the source of the mapping, or why
    the nodes are not mapped; ``missing`` the DirectML operator(s) the provider runs that dmlq
    does not have yet.
    """

    node: onnx.NodeProto
    covers: tuple[onnx.NodeProto, ...]
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    rule: str
    operator: type[OperatorDesc] | None = None
    build: Build | None = None
    runs: tuple[onnx.NodeProto, ...] = ()
    constants: Mapping[str, np.ndarray] = field(default_factory=dict)
    missing: str = ""
    refusal: str = ""  # why the provider fails to create this kernel (its session then fails)

    @property
    def mapped(self) -> bool:
        return self.operator is not None

    @property
    def name(self) -> str:
        return ", ".join(node_name(node) for node in self.covers)

    def describe(self, specs: Sequence[Spec | None]) -> Described:
        """The description for operands of these dtypes and shapes (DmlError where the provider refuses)."""
        return self.build(self.node, specs)


def node_name(node: onnx.NodeProto) -> str:
    return node.name or f"{node.op_type}({node.output[0]})"
