"""The onnxruntime session options dmlq's ONNX front end takes (``dmlq.onnx.load``'s keywords)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Options"]


@dataclass(frozen=True)
class Options:
    """The session options of ``onnxruntime/core/session/onnxruntime_session_options_config_keys.h``
    that change what the DirectML provider is given.

    ``qdq_int8_allowed`` is ``session.qdqisint8allowed`` (default ``QDQIsInt8Allowed()``, false on
    x64: ``optimizer/qdq_transformer/selectors_actions/qdq_selector_action_transformer.h``);
    ``disable_quant_qdq`` is ``session.disable_quant_qdq``, which leaves out every QDQ transformer
    (``optimizer/graph_transformer_utils.cc``) and lets ConstantFolding fold DequantizeLinear.
    """

    qdq_int8_allowed: bool = False
    disable_quant_qdq: bool = False
