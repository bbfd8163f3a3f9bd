"""The model as onnxruntime's graph transformers see it: producers and consumers, constants,
static types, schema versions, the session options that steer the QDQ transformers, and the
nodes onnxruntime folds into constants before any provider sees them."""

from __future__ import annotations

from typing import TypeGuard

import numpy as np
import onnx

from .loading import DEFAULT_DOMAINS, MICROSOFT, Model
from .options import Options

__all__ = ["Graph", "Options", "is_op"]


def is_op(node: onnx.NodeProto | None, op_type: str,
          domains: tuple[str, ...] = DEFAULT_DOMAINS) -> TypeGuard[onnx.NodeProto]:  # fmt: skip
    return node is not None and node.op_type == op_type and node.domain in domains


class Graph:
    """What the rules ask of the model: producers, consumers (one per input edge), constants, types."""

    def __init__(self, model: Model, options: Options) -> None:
        self.model = model
        self.options = options
        self.producer = {name: node for node in model.graph.node for name in node.output if name}
        self.consumers: dict[str, list[onnx.NodeProto]] = {}
        for node in model.graph.node:
            for name in node.input:
                if name:
                    self.consumers.setdefault(name, []).append(node)
        self.graph_outputs = set(model.output_names)
        self.opset = model.opset("")
        self.folded: set[str] = set()  # planning fills it in: fusions.constant_folding

    def only_consumer(self, name: str) -> onnx.NodeProto | None:
        """The one node reading ``name`` once, when ``name`` is not a graph output (ORT's
        ``CheckOutputEdges(graph, node, 1)``)."""
        found = self.consumers.get(name, [])
        return found[0] if len(found) == 1 and name not in self.graph_outputs else None

    def dtype(self, name: str) -> np.dtype | None:
        found = self.model.types.get(name)
        return None if found is None else found.dtype

    def shape(self, name: str) -> tuple[int | None, ...] | None:
        found = self.model.types.get(name)
        return None if found is None else found.shape

    def initializer(self, name: str) -> np.ndarray | None:
        """A constant initializer's value (``GetConstantInitializer``); None for anything else."""
        return self.model.initializers.get(name) if name else None

    def is_constant(self, name: str) -> bool:
        """An initializer, or a value onnxruntime folds into one."""
        return name in self.model.initializers or name in self.folded

    def since(self, node: onnx.NodeProto) -> int:
        """The version of the node's operator schema the model's opset selects (what ORT matches on)."""
        if node.domain == MICROSOFT:
            return 1
        opset = self.model.opset(node.domain)
        return onnx.defs.get_schema(node.op_type, opset, node.domain or "").since_version

    def scalar_initializer(self, name: str) -> np.ndarray | None:
        """A constant initializer with one element in 0 or 1 dimensions (``IsScalar``), or None."""
        value = self.initializer(name)
        return value if value is not None and value.ndim <= 1 and value.size == 1 else None
