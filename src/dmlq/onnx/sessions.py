"""onnxruntime CPU sessions: for the nodes dmlq does not map, for comparisons, and the check that
onnxruntime accepts the model at all.

Other nodes keep ONNX's numbers: their sessions run with ``session.disable_quant_qdq`` 1 (no QDQ
transformer, ``optimizer/graph_transformer_utils.cc``) and without the two quantization fusions
that option does not turn off (``MatMulIntegerToFloatFusion``, ``DynamicQuantizeMatMulFusion``), so
no CPU kernel's integer arithmetic passes for DirectML's. onnxruntime's float-only rewrites stay on
(:data:`FLOAT_FUSIONS`): they change results by float rounding at most.

An 8-bit MaxPool runs as onnxruntime runs it inside a whole model, between the layout Transposes
of its QLinearConvs: channels last, as ``com.microsoft`` NhwcMaxPool between two Transposes
(``HandleMaxPool``, ``optimizer/transpose_optimization/ort_transpose_optimization.cc``, onnxruntime
commit c4780e65b57e8c7e3f8f184a80c25aabc5530b06). A session of that one node does not rewrite it
(no Transpose to push through it) and runs the channels-first 8-bit kernel, some 15 times slower;
the maximum is the same either way.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

import numpy as np
import onnx
from onnx import helper, numpy_helper

from ..errors import DmlError
from ..threads import get_num_threads
from .loading import DEFAULT_DOMAINS, MICROSOFT, Model


class IoBinding(Protocol):
    """What dmlq uses of an ``onnxruntime.IOBinding`` (onnxruntime ships no type hints)."""

    def bind_ortvalue_input(self, name: str, value: object) -> None: ...
    def bind_ortvalue_output(self, name: str, value: object) -> None: ...
    def bind_cpu_input(self, name: str, array: np.ndarray) -> None: ...


class Session(Protocol):
    """What dmlq uses of an ``onnxruntime.InferenceSession`` (onnxruntime ships no type hints)."""

    def run(
        self, output_names: Sequence[str] | None, input_feed: Mapping[str, object]
    ) -> list[np.ndarray]: ...
    def io_binding(self) -> IoBinding: ...
    def run_with_iobinding(self, iobinding: IoBinding, run_options: object = None) -> None: ...


__all__ = [
    "FLOAT_FUSIONS",
    "QUANTIZATION_FUSIONS",
    "at_oldest_ir_version",
    "cpu_session",
    "ort_session",
    "refuse_invalid_graph",
    "sub_model",
]

QUANTIZATION_FUSIONS = ("MatMulIntegerToFloatFusion", "DynamicQuantizeMatMulFusion")
FLOAT_FUSIONS = (  # graph_transformer_utils.cc, level 2 and 3 on the CPU provider: float rounding only
    "GeluFusion",
    "LayerNormFusion",
    "SimplifiedLayerNormFusion",
    "AttentionFusion",
    "EmbedLayerNormFusion",
    "SkipLayerNormFusion",
    "BiasGeluFusion",
    "FastGeluFusion",
    "QuickGeluFusion",
    "BiasSoftmaxFusion",
    "MatMulAddFusion",
    "MatMulScaleFusion",
    "GemmActivationFusion",
    "ConvActivationFusion",
    "ConvAddActivationFusion",
    "NchwcTransformer",
)


def options(threads: int | None = None, optimized: bool = True) -> object:
    """Session options for ONNX's numbers at ``threads`` (default: dmlq's); no spinning, since dmlq's
    kernels run between the sessions' runs. ``optimized=False``: no graph optimization at all."""
    import onnxruntime  # type: ignore[import-untyped]  # onnxruntime ships no type hints

    made = onnxruntime.SessionOptions()
    made.intra_op_num_threads = get_num_threads() if threads is None else threads
    made.add_session_config_entry("session.intra_op.allow_spinning", "0")
    made.add_session_config_entry("session.disable_quant_qdq", "1")
    if not optimized:
        made.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL
    return made


def cpu_session(proto: onnx.ModelProto, session_options: object, what: str) -> Session:
    """An onnxruntime CPU session of ``proto``; a DmlError naming ``what`` when onnxruntime refuses it."""
    import onnxruntime

    try:
        session: Session = onnxruntime.InferenceSession(
            proto.SerializeToString(),
            session_options,
            providers=["CPUExecutionProvider"],
            disabled_optimizers=list(QUANTIZATION_FUSIONS),
        )
    except Exception as error:  # onnxruntime raises its own exception types for a model it refuses
        raise DmlError(f"model: onnxruntime CPU cannot run {what}: {str(error).splitlines()[0]}") from None
    return session


def refuse_invalid_graph(model: Model) -> None:
    """DmlError with onnxruntime's message where onnxruntime refuses the model (an invalid graph)."""
    cpu_session(at_oldest_ir_version(model), options(1, optimized=False), "the model")


def ort_session(
    model: Model,
    nodes: Sequence[onnx.NodeProto],
    feeds: Mapping[str, np.dtype],
    outputs: Sequence[str],
    constants: Mapping[str, np.ndarray] | None = None,
    session_options: object = None,
) -> Session:
    """A session computing ``nodes`` of ``model`` (:func:`sub_model`)."""
    names = ", ".join(node.name or node.op_type for node in nodes)
    made = sub_model(model, nodes, feeds, outputs, constants)
    return cpu_session(made, session_options or options(), f"node(s) {names}")


def sub_model(
    model: Model,
    nodes: Sequence[onnx.NodeProto],
    feeds: Mapping[str, np.dtype],
    outputs: Sequence[str],
    constants: Mapping[str, np.ndarray] | None = None,
) -> onnx.ModelProto:
    """The model computing ``nodes`` of ``model`` from inputs of these dtypes; ``constants`` are values
    computed once (dequantized weights), given as initializers so that onnxruntime may pre-pack them
    as it does the model's own."""
    nodes = [rewritten for node in nodes for rewritten in _channels_last_max_pool(model, node, feeds)]
    used = {name for node in nodes for name in node.input}
    graph = helper.make_graph(
        nodes,
        "dmlq_other",
        [
            helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(dtype), None)
            for name, dtype in feeds.items()
        ],
        [onnx.ValueInfoProto(name=name) for name in outputs],
        initializer=[tensor for tensor in model.graph.initializer if tensor.name in used]
        + [numpy_helper.from_array(np.asarray(value), name) for name, value in (constants or {}).items()],
    )
    opsets = list(model.proto.opset_import)
    if any(node.domain == MICROSOFT for node in nodes) and model.opset(MICROSOFT) == 0:
        opsets.append(helper.make_opsetid(MICROSOFT, 1))
    made = helper.make_model(graph, opset_imports=opsets, ir_version=ir_version(model))
    made.functions.extend(model.proto.functions)
    return made


def _channels_last_max_pool(
    model: Model, node: onnx.NodeProto, feeds: Mapping[str, np.dtype]
) -> list[onnx.NodeProto]:
    """``node``, or for an 8-bit MaxPool without its Indices output the three nodes ``HandleMaxPool``
    makes of it: Transpose to channels last, NhwcMaxPool (without ``storage_order``, which only
    orders the indices), Transpose back."""
    found = model.types.get(node.input[0]) if node.input else None
    dtype = feeds.get(node.input[0]) or (found.dtype if found else None)
    rank = len(found.shape) if found and found.shape is not None else 0
    if (
        node.op_type != "MaxPool"
        or node.domain not in DEFAULT_DOMAINS
        or dtype not in (np.dtype(np.uint8), np.dtype(np.int8))
        or rank < 3
        or any(node.output[1:])
    ):
        return [node]
    x, y = node.input[0], node.output[0]
    last = [0, *range(2, rank), 1]
    pooled = helper.make_node(
        "NhwcMaxPool", [f"{x}::channels_last"], [f"{y}::channels_last"], name=node.name, domain=MICROSOFT
    )
    pooled.attribute.extend(attribute for attribute in node.attribute if attribute.name != "storage_order")
    return [
        helper.make_node("Transpose", [x], pooled.input, perm=last),
        pooled,
        helper.make_node("Transpose", pooled.output, [y], perm=[0, rank - 1, *range(1, rank - 1)]),
    ]


def at_oldest_ir_version(model: Model) -> onnx.ModelProto:
    """The model as onnxruntime should read it: at :func:`ir_version`."""
    proto = onnx.ModelProto()
    proto.CopyFrom(model.proto)
    proto.ir_version = ir_version(model)
    return proto


def ir_version(model: Model) -> int:
    """The IR version of the models dmlq hands onnxruntime: the oldest the model's opsets allow, so an
    onnxruntime older than the onnx that wrote the model (which records its own, newer IR) still reads
    them; never newer than the model's own."""
    needed = helper.find_min_ir_version_for(list(model.proto.opset_import), ignore_unknown=True)
    return min(model.proto.ir_version, needed)
