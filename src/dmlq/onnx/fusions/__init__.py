"""The graph rewrites onnxruntime applies before its DirectML provider builds kernels, one module
per rule (paths under ``onnxruntime/core/``, onnxruntime commit
c4780e65b57e8c7e3f8f184a80c25aabc5530b06):

* :mod:`.constant_folding`: ``optimizer/constant_folding.cc``;
* :mod:`.qdq_matmul`, :mod:`.qdq_conv`, :mod:`.qdq_binary`, :mod:`.qdq_unary`, :mod:`.qdq_variadic`,
  :mod:`.qdq_drop`, :mod:`.qdq_nbits`: the QDQ rules
  ``optimizer/qdq_transformer/selectors_actions/qdq_selector_action_transformer.cc`` registers for
  the DirectML provider, with the selectors of ``qdq_selectors.cc``;
* :mod:`.matmul_integer_to_float`: ``optimizer/matmul_integer_to_float.cc``;
* :mod:`.activation`: the provider's own ``GraphTransformer.cpp`` (an Add, Sum, Gemm or MatMul with
  an activation after it).

Each returns a :class:`.qdq.Fusion`: the node onnxruntime builds and the model's nodes it replaces.
``FUSIONS`` lists them by the operator they start from, in the order onnxruntime applies them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeAlias

import onnx

from ..graph import Graph
from . import (
    activation,
    matmul_integer_to_float,
    qdq_binary,
    qdq_conv,
    qdq_drop,
    qdq_matmul,
    qdq_nbits,
    qdq_unary,
    qdq_variadic,
)
from .qdq import Fusion

__all__ = ["FUSIONS", "QDQ_FUSIONS", "Fusion"]

Fuse: TypeAlias = "Callable[[Graph, onnx.NodeProto], Fusion | None]"

QDQ_FUSIONS: dict[str, tuple[Fuse, ...]] = {
    **dict.fromkeys(qdq_drop.DROPPED, (qdq_drop.drop,)),
    "Split": (qdq_drop.split,),
    "ArgMax": (qdq_drop.drop_dequantize,),
    **dict.fromkeys(qdq_unary.TARGETS, (qdq_unary.unary,)),
    "Add": (qdq_binary.binary,),
    "Concat": (qdq_variadic.concat,),
    "Conv": (qdq_conv.conv,),
    "MatMul": (qdq_matmul.matmul, qdq_nbits.matmul_nbits),
}
FUSIONS: dict[str, tuple[Fuse, ...]] = {
    "Mul": (matmul_integer_to_float.fuse,),
    "Add": (activation.fuse,),
    "Sum": (activation.fuse,),
    "Gemm": (activation.fuse,),
    "MatMul": (activation.fuse,),
}
