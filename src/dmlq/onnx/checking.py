"""``check``: the verdicts of a prepared model at a feature level (:mod:`.verdicts`)."""

from __future__ import annotations

from ..types import FeatureLevel
from .loading import ModelSource
from .preparing import prepared
from .staging import stages
from .verdicts import Verdict, static_specs, verdict

__all__ = ["Verdict", "check"]


def check(model: ModelSource, feature_level: FeatureLevel | str | None = None) -> list[Verdict]:
    """One verdict per step (a mapped node or QDQ group, or nodes onnxruntime CPU computes).

    >>> import numpy as np
    >>> from onnx import helper, numpy_helper, TensorProto
    >>> graph = helper.make_graph(
    ...     [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["y"])], "g",
    ...     [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
    ...     [helper.make_tensor_value_info("y", TensorProto.UINT8, [2, 3])],
    ...     [numpy_helper.from_array(np.float32(0.5), "s"), numpy_helper.from_array(np.uint8(0), "z")])
    >>> model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    >>> [(v.operator, v.valid, v.lowest_level.label) for v in check(model, "1_0")]
    [('ELEMENT_WISE_QUANTIZE_LINEAR', True, '1_0')]

    Without a zero point the description has none, which DirectML accepts from feature level 6_2.
    """
    loaded = prepared(model)
    level = FeatureLevel.newest() if feature_level is None else FeatureLevel.parse(feature_level)
    return [
        verdict(loaded, step, level, static_specs(loaded, step))
        for stage in stages(loaded)
        for step in stage.steps
    ]
