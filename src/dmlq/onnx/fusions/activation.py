"""The DirectML provider's own activation fusion (``providers/dml/DmlExecutionProvider/src/
GraphTransformer.cpp`` and ``Operators/OperatorUtility.cpp``, ``FusionHelpers`` tables
``c_fusableOps`` / ``c_activationOps``, onnxruntime commit c4780e65b57e8c7e3f8f184a80c25aabc5530b06):
a node of ``c_fusableOps`` whose output feeds exactly one node, a one-input activation of
``c_activationOps`` its filter allows, and is not a graph output, both the provider's, becomes
DmlFused<op> with the node's attributes and the activation's, each renamed ``fused_<name>``:

* Add (since-version 7, 13 or 14) or a two-input Sum (8, 13), float: DmlFusedAdd / DmlFusedSum,
  computed as ELEMENT_WISE_ADD1, with Relu or LeakyRelu only ("the filter for activation functions
  maps to what DML's fused op internally fuses at the shader level");
* Gemm (7, 9, 11, 13) or MatMul (1, 9, 13), float: DmlFusedGemm / DmlFusedMatMul, computed as GEMM,
  with any activation of the table (no filter; the Relu / LeakyRelu filter applies to MCDM devices
  only, and dmlq is a GPU's DirectML): Sigmoid, HardSigmoid, Tanh, Relu, LeakyRelu, ThresholdedRelu,
  Elu, Selu, Softsign, Softplus and Dropout-7 (no activation at all). PRelu takes two inputs and
  never fuses; ScaledTanh and ParametricSoftplus are in no ONNX opset.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import onnx
from onnx import helper

from ..graph import Graph
from ..loading import DEFAULT_DOMAINS
from ..provider import unclaimed
from ..rules import DML

if TYPE_CHECKING:
    from .qdq import Fusion

__all__ = ["ACTIVATIONS", "FUSING_SINCE", "fuse"]

FUSING_SINCE = {"Add": (7, 13, 14), "Sum": (8, 13), "Gemm": (7, 9, 11, 13), "MatMul": (1, 9, 13)}
ACTIVATIONS = {  # c_activationOps: activation -> the since-versions listed
    "Relu": (6, 13, 14),
    "LeakyRelu": (6, 16),
    "Sigmoid": (6, 13),
    "HardSigmoid": (6,),
    "Tanh": (6, 13),
    "ThresholdedRelu": (10,),
    "Elu": (6,),
    "Selu": (6,),
    "Softsign": (1,),
    "Softplus": (1,),
    "Dropout": (7,),
}
FILTERS = {"Add": ("Relu", "LeakyRelu"), "Sum": ("Relu", "LeakyRelu")}  # activationFilter; none: any
FLOATS = (np.dtype(np.float32), np.dtype(np.float16))
SOURCE = "providers/dml/DmlExecutionProvider/src/GraphTransformer.cpp + Operators/OperatorUtility.cpp"


def fuse(graph: Graph, node: onnx.NodeProto) -> Fusion | None:
    from .qdq import Fusion

    if node.domain not in DEFAULT_DOMAINS or graph.since(node) not in FUSING_SINCE[node.op_type]:
        return None
    if node.op_type == "Sum" and len(node.input) != 2:
        return None
    if graph.dtype(node.output[0]) not in FLOATS:  # the DmlFused kernels: float16 and float32 only
        return None
    follower = graph.only_consumer(node.output[0])
    if follower is None or follower.domain not in DEFAULT_DOMAINS or follower.op_type not in ACTIVATIONS:
        return None
    if graph.since(follower) not in ACTIVATIONS[follower.op_type] or len(follower.input) != 1:
        return None
    if len(follower.output) != 1:  # "Activation only produces one output"
        return None
    if follower.op_type not in FILTERS.get(node.op_type, ACTIVATIONS):
        return None
    if unclaimed(graph, node) or unclaimed(graph, follower):  # IsSupportedProvider: both the provider's
        return None
    fused = helper.make_node(
        f"DmlFused{node.op_type}", list(node.input), [follower.output[0]], name=node.name, domain=DML
    )
    fused.attribute.extend(node.attribute)
    for found in follower.attribute:  # the activation's attributes, renamed (GetFusedAttributeName)
        renamed = fused.attribute.add()
        renamed.CopyFrom(found)
        renamed.name = f"fused_{found.name}"
    fused.attribute.append(helper.make_attribute("fused_activation", follower.op_type))
    return Fusion(fused, (node, follower), f"{SOURCE} (DmlFused{node.op_type})")
