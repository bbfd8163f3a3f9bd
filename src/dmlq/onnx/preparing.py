"""Loading once, running many times: :func:`load` reads a model, checks that onnxruntime accepts it,
plans it with the session options given, and prepares it (compiled operators with their constant
operands bound, the constants computed, the onnxruntime sessions of the other nodes created), so
that each run only binds the inputs and executes."""

from __future__ import annotations

from ..types import FeatureLevel
from .loading import Model, ModelSource, read
from .options import Options
from .program import program
from .sessions import refuse_invalid_graph
from .staging import stages

__all__ = ["load", "prepared"]


def load(
    model: ModelSource,
    *,
    qdq_int8_allowed: bool = False,
    disable_quant_qdq: bool = False,
) -> Model:
    """The model, read, checked and prepared at the newest feature level, for :func:`dmlq.onnx.check`,
    :func:`dmlq.onnx.run` and :func:`dmlq.onnx.compare`.

    ``qdq_int8_allowed`` and ``disable_quant_qdq`` are onnxruntime's session options
    ``session.qdqisint8allowed`` and ``session.disable_quant_qdq`` (:class:`.options.Options`). A
    model onnxruntime refuses is a DmlError with onnxruntime's message. A node the provider would
    fail to create is no error here: :func:`dmlq.onnx.check` names it, and a run refuses the model.

    >>> from onnx import helper, TensorProto
    >>> graph = helper.make_graph(
    ...     [helper.make_node("Relu", ["x"], ["y"])], "g",
    ...     [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
    ...     [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    >>> model = load(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]))
    >>> model.input_names, model.types["y"], model.options.disable_quant_qdq
    (['x'], TensorType(dtype=dtype('float32'), shape=(2,)), False)
    """
    options = Options(qdq_int8_allowed=qdq_int8_allowed, disable_quant_qdq=disable_quant_qdq)
    if isinstance(model, Model):
        if model.options == options and model.cache.get("prepared"):
            return model
        loaded = Model(model.proto, model.opsets, model.initializers, model.types, options)
    else:
        loaded = read(model)
        loaded.options = options
    refuse_invalid_graph(loaded)
    stages(loaded)
    program(loaded, FeatureLevel.newest())
    loaded.cache["prepared"] = True
    return loaded


def prepared(model: ModelSource) -> Model:
    """``model`` as :func:`load` returns it: itself when it was, else loaded with the default options."""
    if isinstance(model, Model) and model.cache.get("prepared"):
        return model
    return load(model)
