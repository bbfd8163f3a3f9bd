"""dmlq.onnx on models onnxruntime's quantizer made (QDQ and QOperator, per-tensor and per-channel)
from a small float MLP and a small float CNN: every mapped step is bit-identical to dmlq's NumPy
layer (or, for the operators it has no call for, dmlq's reference formulas) on the same inputs, and
``compare`` counts exactly what an independent comparison finds."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

import dmlq.onnx as dx
from dmlq.onnx import comparing
from dmlq.onnx.running import execute
from onnx_oracle import assert_steps_match_numpy_layer, ort_outputs

_SPEC = importlib.util.spec_from_file_location(
    "make_models", Path(__file__).parents[1] / "examples" / "onnx" / "make_models.py"
)
make_models = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(make_models)

FLOAT_MODELS = {"mlp": lambda: make_models.mlp([12, 16, 16, 6], batch=3), "cnn": lambda: make_models.cnn()}
KINDS = [
    (name, qdq, per_channel)
    for name in FLOAT_MODELS
    for qdq in (True, False)
    for per_channel in (False, True)
]


@pytest.fixture(
    scope="module",
    params=KINDS,
    ids=lambda k: f"{k[0]}-{'qdq' if k[1] else 'qoperator'}-{'per_channel' if k[2] else 'per_tensor'}",
)
def quantized(request):
    name, qdq, per_channel = request.param
    return make_models.quantize(FLOAT_MODELS[name](), qdq=qdq, per_channel=per_channel)


def test_mapped_steps_match_the_numpy_layer(quantized) -> None:
    loaded = dx.load(quantized)
    feeds = comparing.random_inputs(loaded, 1, loaded.input_names)
    values = {}
    execute(loaded, feeds, keep=values)
    assert assert_steps_match_numpy_layer(loaded, values) >= 3


def test_compare_counts_what_an_independent_comparison_finds(quantized) -> None:
    loaded = dx.load(quantized)
    feeds = comparing.random_inputs(loaded, 2, loaded.input_names)
    report = dx.compare(loaded, feeds)
    ours = dx.run(loaded, feeds)
    theirs = ort_outputs(quantized, feeds)
    for difference, name, expected in zip(report.outputs, loaded.output_names, theirs):
        assert difference.differing == np.count_nonzero(ours[name] != expected)
        assert not difference.differing or difference.cause != comparing.UNEXPLAINED
    mapped = [d for d in report.nodes if d.differing is not None]
    assert mapped and all(d.differing == 0 or d.cause for d in mapped)
    others = [d for d in report.nodes if d.differing is None]
    assert all(d.operator == dx.OTHER for d in others)


def test_qoperator_models_map_every_quantized_node(quantized) -> None:
    ops = {verdict.op_types[-1]: verdict.operator for verdict in dx.check(quantized)}
    if "QLinearMatMul" in ops:
        assert ops["QLinearMatMul"] == "QUANTIZED_LINEAR_MATRIX_MULTIPLY"
    if "QLinearAdd" in ops:
        assert ops["QLinearAdd"] == "ELEMENT_WISE_QUANTIZED_LINEAR_ADD"
    if "QLinearConv" in ops:
        assert ops["QLinearConv"] == "QUANTIZED_LINEAR_CONVOLUTION"


def test_a_symbolic_batch_is_checked_through_qlinear_add_and_runs_at_any_size() -> None:
    float_model = make_models.mlp([8, 16, 4], batch=2)
    for value in [*float_model.graph.input, *float_model.graph.output]:
        value.type.tensor_type.shape.dim[0].dim_param = "N"
    loaded = dx.load(make_models.quantize(float_model, qdq=False, per_channel=True))
    verdicts = [v for v in dx.check(loaded) if v.op_types != ("Identity",)]
    assert verdicts[-1].op_types == ("DequantizeLinear",) and all(v.valid for v in verdicts)
    values = {}
    execute(loaded, {"x": np.random.default_rng(3).uniform(-2, 2, (5, 8)).astype(np.float32)}, keep=values)
    assert values["y"].shape == (5, 4) and assert_steps_match_numpy_layer(loaded, values) == 6
