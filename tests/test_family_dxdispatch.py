"""The quantized family in DxDispatch models: attributes (DimensionCount, Strides, ..., TransA, Alpha, ...)
are read, required as DxDispatch requires them, and their problems named by JSON path; several outputs
bind; every example checks at its lowest feature level and not below."""

from __future__ import annotations

import copy
import io
import json
from pathlib import Path

import numpy as np
import pytest
import rapidjson

from dmlq import DmlError, FeatureLevel, ops
from dmlq.dxdispatch import check_model, load_model, parse_model, run_model
from dmlq.types import MatrixTransform

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
FAMILY = {
    "convolution_integer": "2_1", "quantized_linear_convolution": "2_1", "matrix_multiply_integer": "2_1",
    "matrix_multiply_integer_to_float": "6_2", "dynamic_quantize_linear": "4_0",
    "quantized_linear_average_pooling": "6_2", "gemm": "1_0",
}  # fmt: skip


def example(name: str) -> dict:
    """An example model as JSON data (DxDispatch's comments and trailing commas allowed)."""
    text = (EXAMPLES / f"{name}.json").read_text()
    return rapidjson.loads(text, parse_mode=rapidjson.PM_COMMENTS | rapidjson.PM_TRAILING_COMMAS)


def edited(model: dict, dispatchable: str, field: str, value: object) -> str:
    model = copy.deepcopy(model)
    desc = model["dispatchables"][dispatchable]["desc"]
    if value is None:
        del desc[field]
    else:
        desc[field] = value
    return json.dumps(model)


def error_of(text: str, level: str | None = None) -> str:
    with pytest.raises(DmlError) as caught:
        run_model(parse_model(text, base=EXAMPLES), level, io.StringIO())
    return str(caught.value)


@pytest.mark.parametrize("name", FAMILY)
def test_each_example_is_valid_from_its_level_and_not_below(name):
    model = load_model(EXAMPLES / f"{name}.json")
    level = FeatureLevel.parse(FAMILY[name])
    [verdict] = check_model(model, level)
    assert verdict.valid and verdict.lowest_level == level
    if level != FeatureLevel.FL_1_0:
        below = sorted(FeatureLevel)[sorted(FeatureLevel).index(level) - 1]
        [refused] = check_model(model, below)
        assert refused.problem.endswith(
            f"operator needs feature level {level.label} (device is {below.label})"
        )


def test_attributes_become_the_description_fields():
    conv = load_model(EXAMPLES / "quantized_linear_convolution.json").dispatchables["conv"].desc
    assert isinstance(conv, ops.QuantizedLinearConvolution)
    assert (conv.dimension_count, conv.strides, conv.dilations, conv.start_padding, conv.end_padding,
            conv.group_count) == (2, (2, 2), (1, 1), (1, 1), (1, 1), 1)  # fmt: skip
    pool = load_model(EXAMPLES / "quantized_linear_average_pooling.json").dispatchables["pool"].desc
    assert (pool.window_size, pool.include_padding) == ((3, 3), False)
    layer = load_model(EXAMPLES / "gemm.json").dispatchables["layer"].desc
    transforms = (MatrixTransform.NONE, MatrixTransform.TRANSPOSE)
    assert (layer.trans_a, layer.trans_b, layer.alpha, layer.beta) == (*transforms, 1.0, 1.0)


@pytest.mark.parametrize(
    "name, dispatchable, field, value, message",
    [
        ("convolution_integer", "edges", "GroupCount", None,
         "dispatchables.edges.desc: missing field 'GroupCount'"),
        ("convolution_integer", "edges", "Strides", [2, 2, 2],
         "dispatchables.edges.desc.Strides: [2, 2, 2] holds 3 values; dimension_count is 2 (device is 6_4)"),
        ("convolution_integer", "edges", "Strides", [2, 0],
         "dispatchables.edges.desc.Strides[1]: 0 must be an integer from 1 to 2^32 - 1 (device is 6_4)"),
        ("convolution_integer", "edges", "Dilations", [1, -1],
         "dispatchables.edges.desc.Dilations[1]: expected an integer from 0 to 4294967295, not -1"),
        ("convolution_integer", "edges", "DimensionCount", 3,
         "dispatchables.edges.desc.DimensionCount: 3 is not supported (the page: only a value of 2 is "
         "supported) (device is 6_4)"),
        ("quantized_linear_convolution", "conv", "GroupCount", 2,
         "dispatchables.conv.desc.FilterTensor: Sizes [2, 2, 3, 3]: 2 channels per group times group_count 2 "
         "must be the input's 2 channels (device is 6_4)"),
        ("quantized_linear_average_pooling", "pool", "IncludePadding", "yes",
         "dispatchables.pool.desc.IncludePadding: expected an integer from 0 to 1, not \"yes\""),
        ("quantized_linear_average_pooling", "pool", "WindowSize", None,
         "dispatchables.pool.desc: missing field 'WindowSize'"),
        ("gemm", "layer", "TransB", "FLIP",
         "dispatchables.layer.desc.TransB: unknown matrix transform (expected NONE, TRANSPOSE)"),
        ("gemm", "layer", "Alpha", "nan",
         "dispatchables.layer.desc.Alpha: is NaN; refused because DirectML defines no result for a NaN "
         "parameter (device is 6_4)"),
        ("gemm", "layer", "Beta", None, "dispatchables.layer.desc: missing field 'Beta'"),
    ],
)  # fmt: skip
def test_attribute_problems_name_their_json_path(name, dispatchable, field, value, message):
    assert error_of(edited(example(name), dispatchable, field, value), "6_4") == message


def test_include_padding_takes_dxdispatchs_integer_booleans_too():
    text = edited(example("quantized_linear_average_pooling"), "pool", "IncludePadding", 1)
    assert parse_model(text, base=EXAMPLES).dispatchables["pool"].desc.include_padding is True


def test_the_three_outputs_of_dynamic_quantization_bind_and_print(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    out = io.StringIO()
    run_model(load_model(EXAMPLES / "dynamic_quantize_linear.json"), "4_0", out)
    assert out.getvalue().splitlines()[:3] == [
        "Resource 'Y': 153, 255, 0, 26, 221, 179",
        "Resource 'Scale': 0.019607844",
        "Resource 'ZeroPoint': 153",
    ]
    np.testing.assert_array_equal(np.load(tmp_path / "dynamic_quantize_linear_out.npy"),
                                  np.uint8([[153, 255, 0], [26, 221, 179]]))  # fmt: skip


def test_an_unbound_second_output_is_named():
    model = example("dynamic_quantize_linear")
    del model["commands"][0]["bindings"]["OutputScaleTensor"]
    assert error_of(json.dumps(model)) == (
        "commands[0].bindings: missing binding for OutputScaleTensor, which the desc declares"
    )


def test_outputs_sharing_a_resource_are_refused_at_dispatch():
    model = example("dynamic_quantize_linear")
    model["commands"][0]["bindings"]["OutputZeroPointTensor"] = "Y"
    assert "outputs output and output_zero_point overlap" in error_of(json.dumps(model))


@pytest.mark.parametrize("name", FAMILY)
def test_bad_buffers_are_one_dml_error_naming_the_binding(name):
    """Each example's operator, executed directly: a buffer of another dtype, or one too short, is refused
    with the field it was bound to."""
    from dmlq import Device

    [dispatchable] = load_model(EXAMPLES / f"{name}.json").dispatchables.values()
    desc, operator = dispatchable.desc, dispatchable.compile(Device())  # OWNED_BY_DML inputs initialized
    owned = [name in dispatchable.initialized for name in dispatchable.input_names()]
    inputs = [
        None if tensor is None or is_owned else np.zeros(tensor.total_tensor_size_in_bytes, np.uint8)
        for (_, tensor), is_owned in zip(desc.input_tensors(), owned)
    ]
    outputs = [
        np.zeros(getattr(desc, f.name).total_tensor_size_in_bytes, np.uint8) for f in desc.output_fields()
    ]
    operator.execute(inputs, outputs)  # raw bytes of the right sizes run
    first = next(i for i, buffer in enumerate(inputs) if buffer is not None)
    short = list(inputs)
    short[first] = inputs[first][:1]
    with pytest.raises(DmlError, match=rf"^{type(desc).__name__}\.execute inputs\[{first}\] \(\w+\): "):
        operator.execute(short, outputs)
    wrong = list(inputs)
    wrong[first] = np.zeros(64, np.float64)
    with pytest.raises(DmlError, match=r"ndarray of dtype float64 bound to a \w+ tensor"):
        operator.execute(wrong, outputs)
