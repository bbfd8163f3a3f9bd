"""The activation a DmlFused node carries, as ``FusionHelpers::TryGetFusedActivationDesc`` builds it
(``Operators/OperatorUtility.cpp``, onnxruntime commit c4780e65b57e8c7e3f8f184a80c25aabc5530b06): the
activation node's type and its attributes, named ``fused_<name>`` on the fused node
(:mod:`..fusions.activation`), ONNX's defaults where one is missing; a fused Dropout is no
activation at all."""

from __future__ import annotations

from typing import TypeAlias, cast

import onnx

from ... import activations
from ..descs import attribute

__all__ = ["ACTIVATIONS", "fused_activation"]

Activations: TypeAlias = dict[str, tuple[type[activations.Activation], dict[str, str]]]
# ONNX operator -> the DirectML activation, its parameters by ONNX attribute name
ACTIVATIONS: Activations = {
    "Relu": (activations.Relu, {}),
    "LeakyRelu": (activations.LeakyRelu, {"alpha": "alpha"}),
    "Sigmoid": (activations.Sigmoid, {}),
    "HardSigmoid": (activations.HardSigmoid, {"alpha": "alpha", "beta": "beta"}),
    "Tanh": (activations.Tanh, {}),
    "ThresholdedRelu": (activations.ThresholdedRelu, {"alpha": "alpha"}),
    "Elu": (activations.Elu, {"alpha": "alpha"}),
    "Selu": (activations.ScaledElu, {"alpha": "alpha", "gamma": "gamma"}),
    "Softsign": (activations.Softsign, {}),
    "Softplus": (activations.Softplus, {}),
}


def fused_activation(node: onnx.NodeProto) -> activations.Activation | None:
    """The fused node's activation (None for a fused Dropout, which ONNX inference makes an identity)."""
    kind = str(attribute(node, "fused_activation", ""))
    if kind == "Dropout":
        return None
    cls, names = ACTIVATIONS[kind]
    given = {field: attribute(node, f"fused_{name}", None) for field, name in names.items()}
    # FLOAT attributes, as the fused operator's schema declares them
    parameters = {field: float(cast("float", value)) for field, value in given.items() if value is not None}
    return cls(**parameters)
