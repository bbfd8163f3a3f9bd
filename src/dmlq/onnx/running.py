"""``run``: a prepared model's outputs, its mapped steps on dmlq's DirectML operators and every other
node on onnxruntime CPU (:mod:`.program`)."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from ..types import FeatureLevel
from .loading import Model, ModelSource
from .plans import learn, planned
from .preparing import prepared
from .program import checked_inputs, program

__all__ = ["execute", "run"]

NEWEST = FeatureLevel.newest()


def run(
    model: ModelSource, inputs: Mapping[str, object], feature_level: FeatureLevel | str | None = None
) -> dict[str, np.ndarray]:
    """The model's outputs as the DirectML provider computes its mapped nodes: ``{name: array}``.

    ``model`` is what :func:`dmlq.onnx.load` returned (prepared once, run many times), or a path or
    ``ModelProto`` (prepared now). Nodes dmlq does not map run on onnxruntime's CPU provider (see
    :func:`dmlq.onnx.check`). A node the provider would fail to create a kernel for, or one invalid
    at ``feature_level`` (default: the newest), is a DmlError before anything runs, as the provider
    fails to create its session.

    >>> import numpy as np
    >>> from onnx import helper, numpy_helper, TensorProto
    >>> graph = helper.make_graph(
    ...     [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["y"])], "g",
    ...     [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
    ...     [helper.make_tensor_value_info("y", TensorProto.UINT8, [3])],
    ...     [numpy_helper.from_array(np.float32(1), "s"), numpy_helper.from_array(np.uint8(0), "z")])
    >>> model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    >>> run(model, {"x": np.float32([0.5, 1.5, 2.5])})
    {'y': array([0, 2, 2], dtype=uint8)}
    """
    return execute(prepared(model), inputs, feature_level)


def execute(
    model: Model,
    inputs: Mapping[str, object],
    feature_level: FeatureLevel | str | None = None,
    keep: dict[str, np.ndarray] | None = None,
) -> dict[str, np.ndarray]:
    """:func:`run` on a prepared model; every value computed goes into ``keep`` when given."""
    level = NEWEST if feature_level is None else FeatureLevel.parse(feature_level)
    found = program(model, level)
    values = checked_inputs(model, inputs)
    found.check(values)
    if keep is None:
        outputs = planned(found, values)
        if outputs is not None:
            return outputs
    for call in found.calls:
        call(values)
    if keep is None:
        learn(found, values)
    else:
        keep.update(found.constants)
        keep.update(values)
    return {name: values[name] if name in values else found.constants[name] for name in model.output_names}
