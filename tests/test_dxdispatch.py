"""The DxDispatch model layer: parsing, resources, dispatchables, commands, check and run."""

from __future__ import annotations

import copy
import io
import json
import os
import re

import numpy as np
import pytest

from dmlq import DataType, DmlError, FeatureLevel, activations, dxdispatch
from dmlq.dxdispatch import check_model, load_model, parse_model, run_model

F32 = {"DataType": "FLOAT32", "Sizes": [3]}


def add1_model(**changes: object) -> dict:
    """A small ADD1 model; ``changes`` replace top-level members."""
    model = {
        "resources": {
            "A": {"initialValuesDataType": "FLOAT32", "initialValues": [1, 2, 3]},
            "B": {"initialValuesDataType": "FLOAT32", "initialValues": [5, 8, -5]},
            "Out": {"initialValuesDataType": "FLOAT32", "initialValues": {"valueCount": 3, "value": 0}},
        },
        "dispatchables": {
            "add": {
                "type": "DML_OPERATOR_ELEMENT_WISE_ADD1",
                "desc": {"ATensor": F32, "BTensor": F32, "OutputTensor": F32},
            }
        },
        "commands": [
            {
                "type": "dispatch",
                "dispatchable": "add",
                "bindings": {"ATensor": "A", "BTensor": "B", "OutputTensor": "Out"},
            },
            {"type": "print", "resource": "Out"},
        ],
    }
    model.update(copy.deepcopy(changes))
    return model


def parse(model: dict, base=".") -> object:
    return parse_model(json.dumps(model), base=base)


def run(model: dict, level: str | None = None, base=".") -> str:
    out = io.StringIO()
    run_model(parse(model, base), level, out)
    return out.getvalue()


def error_of(model: dict, level: str | None = None, base=".") -> str:
    with pytest.raises(DmlError) as caught:
        run(model, level, base)
    return str(caught.value)


def resource(model_resource: dict, base=".") -> object:
    model = add1_model(resources={"R": model_resource}, dispatchables={}, commands=[])
    return parse(model, base).resources["R"]


def edited(model: dict, path: str, value: object) -> dict:
    """``model`` with the member at a dotted ``path`` set to ``value`` (None deletes it)."""
    model = copy.deepcopy(model)
    *parents, last = path.split(".")
    target = model
    for key in parents:
        target = target[int(key)] if isinstance(target, list) else target[key]
    if value is None:
        del target[last]
    elif isinstance(target, list):
        target[int(last)] = value
    else:
        target[last] = value
    return model


# -- JSON text --------------------------------------------------------------------------------------


def test_comments_and_trailing_commas_are_accepted():
    text = """// a comment
    { "resources": { /* none */ }, "dispatchables": {}, "commands": [], "$schema": "./_schema.json", }"""
    model = parse_model(text)
    assert (model.resources, model.dispatchables, model.commands) == ({}, {}, [])


def test_malformed_json_names_line_and_column():
    with pytest.raises(DmlError, match="^malformed JSON: m\\.json:3:14: Invalid value$"):
        parse_model('{\n  "resources": {},\n  "x": [1, 2,, 3]\n}', source="m.json")


@pytest.mark.parametrize(
    ("text", "place", "problem"),
    [
        ('{\n  resources: {}}', "2:3", "Missing a name for object member"),
        ("{\n  'resources': {}}", "2:3", "Missing a name for object member"),
        ('{"x": [1,\n  NaN]}', "2:3", "NaN and infinity are not JSON numbers"),
        ('{"x": /* NaN */ [-Infinity]}', "1:18", "NaN and infinity are not JSON numbers"),
        ('{"x": [Inf]}', "1:8", "NaN and infinity are not JSON numbers"),
        ('{"x": [0x10]}', "1:9", "Missing a comma or ']' after an array element"),
        ('{"x": [+1]}', "1:8", "Invalid value"),
        ('{"x": [.5]}', "1:8", "Invalid value"),
        ('{"x": "\u00e9\u00e9", "y": [1 2]}', "1:21", "Missing a comma or ']' after an array element"),
        ('{"x": "\\ud800.npy"}', "1:8", "The surrogate pair in string is invalid"),
        ('{"x": 1} {"y": 2}', "1:10", "The document root must not be followed by other values"),
        ("", "1:1", "The document is empty"),
        # Limits python-rapidjson reports with a position on Python 3.11, without one on 3.12
        ("[" + "9" * 5000 + "]", None, "Invalid integer value"),
        ("[" * 5000 + "]" * 5000, None, "Maximum parse recursion depth exceeded"),
    ],
    ids=["unquoted key", "single quotes", "NaN", "-Infinity", "Inf", "hex", "plus sign", "leading dot",
         "column in characters", "lone surrogate", "two roots", "empty", "5000 digits", "5000 deep"],
)  # fmt: skip
def test_what_dxdispatch_refuses_is_malformed_json_at_a_line_and_column(text, place, problem):
    where = f":{place}[0-9]*" if place else "(:[0-9]+:[0-9]+)?"
    with pytest.raises(DmlError, match=f"^malformed JSON: m\\.json{where}: {re.escape(problem)}!?$"):
        parse_model(text, source="m.json")


def test_nan_words_in_strings_and_comments_are_not_literals():
    text = '{"resources": {"NaN": {"initialValuesDataType": "FLOAT32", "initialValues": ["NaN", "-inf"]}},'
    model = parse_model(text + '"dispatchables": {}, "commands": [], /* Infinity */ }')
    assert np.isnan(model.resources["NaN"].initialized_values()[0])


def test_a_repeated_member_is_refused():
    with pytest.raises(DmlError, match='^malformed JSON: m\\.json: duplicate member "A" in an object$'):
        parse_model('{"resources": {"A": {}, "A": {}}}', source="m.json")


def test_a_large_model_keeps_every_inline_value():
    """200 000 inline values (1.7 MB of text; benchmarks/dxdispatch_check.py times it) read exactly."""
    expected = np.linspace(-10, 10, 200_000).round(4).astype(np.float32)
    values = ", ".join(f"{v:.4f}" for v in np.linspace(-10, 10, 200_000))
    text = f'{{"resources": {{"A": {{"initialValuesDataType": "FLOAT32", "initialValues": [{values}]}}}},'
    text += '"dispatchables": {}, "commands": []}'
    assert np.array_equal(parse_model(text).resources["A"].initialized_values(), expected)


@pytest.mark.parametrize("member", ["resources", "dispatchables", "commands"])
def test_top_level_members_are_required(member):
    with pytest.raises(DmlError, match=f"top level: missing field '{member}'"):
        parse(edited(add1_model(), member, None))


def test_an_unknown_top_level_field_is_an_error():
    with pytest.raises(DmlError, match=r"^resourcez: unknown field"):
        parse(add1_model(resourcez={}))


# -- resources ----------------------------------------------------------------------------------------


def test_array_values_take_the_declared_type_and_the_float_words():
    r = resource({"initialValuesDataType": "DML_TENSOR_DATA_TYPE_FLOAT32",
                  "initialValues": [1, 0.1, "nan", "-INF", "inf"]})  # fmt: skip
    np.testing.assert_array_equal(r.initialized_values(), np.float32([1, 0.1, np.nan, -np.inf, np.inf]))


def test_float16_values_round_through_float32_like_dxdispatch():
    value = 1 + 2**-11 + 2**-30  # rounds to 1 in one step, up to 1 + 2**-10 through float32
    r = resource({"initialValuesDataType": "FLOAT16", "initialValues": [value]})
    assert r.initialized_values()[0] == np.float16(np.float32(value))


@pytest.mark.parametrize(
    ("data_type", "value"), [("UINT8", 256), ("UINT8", -1), ("INT8", 128), ("INT32", 1.0), ("UINT16", True)]
)
def test_integer_values_must_be_in_range_integers(data_type, value):
    with pytest.raises(DmlError, match=r"resources\.R\.initialValues\[1\]: expected an integer from"):
        resource({"initialValuesDataType": data_type, "initialValues": [0, value]})


def test_a_constant_repeats_a_value():
    r = resource({"initialValuesDataType": "INT16", "initialValues": {"valueCount": 3, "value": -7}})
    np.testing.assert_array_equal(r.initialized_values(), np.int16([-7, -7, -7]))


def test_a_sequence_accumulates_in_its_own_type():
    r = resource({"initialValuesDataType": "FLOAT16",
                  "initialValues": {"valueCount": 300, "valueStart": 0.1, "valueDelta": 0.3}})  # fmt: skip
    expected, value = [], np.float16(0.1)
    for _ in range(300):
        expected.append(value)
        value = np.float16(value + np.float16(0.3))
    np.testing.assert_array_equal(r.initialized_values(), np.array(expected, np.float16))


def test_an_unsigned_sequence_wraps_around():
    r = resource({"initialValuesDataType": "UINT8",
                  "initialValues": {"valueCount": 4, "valueStart": 250, "valueDelta": 3}})  # fmt: skip
    np.testing.assert_array_equal(r.initialized_values(), np.uint8([250, 253, 0, 3]))


def test_constant_and_sequence_fields_do_not_mix():
    with pytest.raises(DmlError, match=r"initialValues\.valueStart: unknown field"):
        initial = {"value": 1, "valueCount": 2, "valueStart": 0}
        resource({"initialValuesDataType": "UINT8", "initialValues": initial})


def test_a_default_size_rounds_up_to_four_bytes():
    r = resource({"initialValuesDataType": "UINT8", "initialValues": [1, 2, 3, 4, 5]})
    assert (r.memory.size, r.initialized_bytes) == (8, 5)


def test_an_explicit_size_is_kept_and_must_hold_the_values():
    r = resource({"initialValuesDataType": "UINT8", "initialValues": [1, 2, 3], "sizeInBytes": 3})
    assert r.memory.size == 3
    with pytest.raises(DmlError, match=r"resources\.R\.sizeInBytes: 2 bytes cannot hold the 3 bytes"):
        resource({"initialValuesDataType": "UINT8", "initialValues": [1, 2, 3], "sizeInBytes": 2})


def test_initial_values_start_at_their_offset():
    r = resource({"initialValuesDataType": "UINT16", "initialValues": [513],
                  "initialValuesOffsetInBytes": 3, "sizeInBytes": 6})  # fmt: skip
    assert r.memory.tolist() == [0, 0, 0, 1, 2, 0]


def test_an_offset_without_a_size_grows_the_default_size():
    r = resource({"initialValuesDataType": "UINT8", "initialValues": [7], "initialValuesOffsetInBytes": 4})
    assert r.memory.tolist() == [0, 0, 0, 0, 7, 0, 0, 0]


def resource_error(model_resource: dict, base=".") -> str:
    with pytest.raises(DmlError) as caught:
        resource(model_resource, base)
    return str(caught.value)


@pytest.fixture
def kilobyte_machine(monkeypatch):
    """A machine with 1000 bytes of memory: what would not fit is refused before anything is allocated."""
    monkeypatch.setattr(dxdispatch.resources, "_physical_memory", lambda: 1000)


@pytest.mark.parametrize(
    "initial_values",
    [{"valueCount": 200, "value": 0}, {"valueCount": 200, "valueStart": 0, "valueDelta": 1}],
    ids=["constant", "sequence"],
)
def test_initial_values_that_cannot_fit_in_memory_are_refused(kilobyte_machine, initial_values):
    assert resource_error({"initialValuesDataType": "FLOAT32", "initialValues": initial_values}) == (
        "resources.R.initialValues.valueCount: 200 FLOAT32 values (800 bytes) and the buffer they fill"
        " need 1600 bytes, more than the 1000 bytes this machine has"
    )


def test_a_file_that_cannot_fit_in_memory_is_refused(kilobyte_machine, tmp_path):
    (tmp_path / "big.bin").write_bytes(bytes(600))
    source = {"sourcePath": "big.bin"}
    assert resource_error({"initialValuesDataType": "UINT8", "initialValues": source}, tmp_path) == (
        f"resources.R.initialValues.sourcePath: the values of {tmp_path / 'big.bin'} (600 bytes) and the"
        " buffer they fill need 1200 bytes, more than the 1000 bytes this machine has"
    )


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"sizeInBytes": 997}, "resources.R.sizeInBytes: a buffer of 997 bytes and the 4 bytes of initial"
         " values it is filled from need 1001 bytes, more than the 1000 bytes this machine has"),
        ({"initialValuesOffsetInBytes": 993}, "resources.R: a buffer of 1000 bytes and the 4 bytes of initial"
         " values it is filled from need 1004 bytes, more than the 1000 bytes this machine has"),
    ],
    ids=["sizeInBytes", "offset"],
)  # fmt: skip
def test_a_buffer_that_cannot_fit_in_memory_is_refused(kilobyte_machine, extra, message):
    assert (
        resource_error({"initialValuesDataType": "UINT8", "initialValues": [1, 2, 3, 4], **extra}) == message
    )


def test_a_buffer_beyond_the_real_memory_is_refused_without_allocating():
    huge = {"initialValuesDataType": "UINT8", "initialValues": [1, 2, 3, 4], "sizeInBytes": 2**40}
    message = resource_error(huge)
    assert message.startswith("resources.R.sizeInBytes: a buffer of 1099511627776 bytes and the 4 bytes of")
    assert message.endswith("bytes this machine has")


def test_npy_files_give_data_and_type_relative_to_the_model(tmp_path):
    np.save(tmp_path / "x.npy", np.arange(6, dtype=">i2").reshape(2, 3))  # big-endian on disk
    r = resource({"initialValues": {"sourcePath": "x.npy"}}, base=tmp_path)
    assert r.data_type == DataType.INT16
    np.testing.assert_array_equal(r.initialized_values(), np.arange(6, dtype=np.int16))


def test_npy_booleans_are_uint8(tmp_path):
    np.save(tmp_path / "b.npy", np.array([True, False, True]))
    r = resource({"initialValues": {"sourcePath": "b.npy"}}, base=tmp_path)
    assert r.data_type == DataType.UINT8 and r.initialized_values().tolist() == [1, 0, 1]


def test_an_npy_type_must_agree_with_a_declared_type(tmp_path):
    np.save(tmp_path / "x.npy", np.float32([1]))
    with pytest.raises(DmlError, match="the file holds FLOAT32, initialValuesDataType says INT32"):
        resource({"initialValuesDataType": "INT32", "initialValues": {"sourcePath": "x.npy"}}, base=tmp_path)


def test_raw_files_need_a_declared_type(tmp_path):
    np.float32([1.5, -2]).tofile(tmp_path / "x.dat")
    source = {"sourcePath": "x.dat"}
    r = resource({"initialValuesDataType": "FLOAT32", "initialValues": source}, base=tmp_path)
    np.testing.assert_array_equal(r.initialized_values(), np.float32([1.5, -2]))
    with pytest.raises(DmlError, match="needs an initialValuesDataType"):
        resource({"initialValues": source}, base=tmp_path)


def test_source_paths_fall_back_to_the_working_directory(tmp_path, monkeypatch):
    np.save(tmp_path / "here.npy", np.uint8([9]))
    monkeypatch.chdir(tmp_path)
    r = resource({"initialValues": {"sourcePath": "here.npy"}}, base=tmp_path / "elsewhere")
    assert r.initialized_values().tolist() == [9]


def test_a_missing_source_file_is_named(tmp_path):
    with pytest.raises(DmlError, match=r"initialValues\.sourcePath: file not found next to the model"):
        resource({"initialValues": {"sourcePath": "nope.npy"}}, base=tmp_path)


@pytest.mark.parametrize(
    ("model_resource", "rule"),
    [
        ({"initialValuesDataType": "FLOAT32", "initialValues": "deferred"}, '"deferred" resources'),
        ({"initialValuesDataType": "FLOAT32", "initialValues": {"sourcePath": "a.png"}}, "image files"),
        ({"initialValuesDataType": "FLOAT32", "initialValues": [1], "resampleSize": [1, 3, 2, 2]},
         "image resources"),
        ({"initialValuesDataType": "UNKNOWN", "initialValues": [{"type": "UINT32", "value": 1}]},
         "mixed lists"),
        ({"initialValuesDataType": "FLOAT32", "initialValues": []}, "the initial values are empty"),
        ({"initialValuesDataType": "FLOAT33", "initialValues": [1]}, "unknown data type 'FLOAT33'"),
    ],
)  # fmt: skip
def test_unsupported_resources_are_refused(model_resource, rule):
    with pytest.raises(DmlError, match=rf"^resources\.R[.\w]*: .*{rule}"):
        resource(model_resource)


@pytest.mark.parametrize(
    "path", ["resources.A.initialValuesDataType", "dispatchables.add.desc.ATensor.DataType"]
)
def test_a_data_type_that_is_not_a_string_names_its_path_once(path):
    with pytest.raises(DmlError, match=rf"^{re.escape(path)}: expected a string, not a number$"):
        parse(edited(add1_model(), path, 5))


# -- dispatchables ------------------------------------------------------------------------------------


def test_runs_the_dxdispatch_add1_example_shape():
    assert run(add1_model()) == "Resource 'Out': 6, 10, -2\n"


@pytest.mark.parametrize("type_name", ["ELEMENT_WISE_ADD1", "DML_OPERATOR_ELEMENT_WISE_ADD1"])
@pytest.mark.parametrize("desc_key", ["desc", "Desc"])
def test_type_prefix_and_desc_spelling_are_optional(type_name, desc_key):
    model = add1_model()
    dispatchable = model["dispatchables"]["add"]
    dispatchable["type"] = type_name
    dispatchable[desc_key] = dispatchable.pop("desc")
    assert run(model) == "Resource 'Out': 6, 10, -2\n"


def test_long_form_tensor_desc_and_prefixed_enums():
    long_form = {"Type": "DML_TENSOR_TYPE_BUFFER",
                 "Desc": {"DataType": "DML_TENSOR_DATA_TYPE_FLOAT32", "Flags": "DML_TENSOR_FLAG_NONE",
                          "DimensionCount": 1, "Sizes": [3], "Strides": [1],
                          "TotalTensorSizeInBytes": 12, "GuaranteedBaseOffsetAlignment": 4}}  # fmt: skip
    model = edited(add1_model(), "dispatchables.add.desc.ATensor", long_form)
    assert run(model) == "Resource 'Out': 6, 10, -2\n"
    tensor = parse(model).dispatchables["add"].desc.a
    assert (tensor.strides, tensor.total_tensor_size_in_bytes, tensor.guaranteed_base_offset_alignment) == (
        (1,), 12, 4)  # fmt: skip


def test_dimension_count_must_match_sizes():
    model = edited(add1_model(), "dispatchables.add.desc.ATensor", {**F32, "DimensionCount": 2})
    with pytest.raises(DmlError, match=r"dispatchables\.add\.desc\.ATensor\.DimensionCount: differs"):
        parse(model)


def test_execution_flags_and_compile_type_are_accepted():
    model = add1_model()
    model["dispatchables"]["add"].update(
        executionFlags=["ALLOW_HALF_PRECISION_COMPUTATION", "DML_EXECUTION_FLAG_DESCRIPTORS_VOLATILE"],
        dmlCompileType="DmlCompileGraph",
    )
    assert run(model) == "Resource 'Out': 6, 10, -2\n"


@pytest.mark.parametrize(
    ("activation", "expected"),
    [
        ({"Type": "ACTIVATION_ELU", "Alpha": 0.5}, activations.Elu(alpha=0.5)),
        ({"type": "DML_OPERATOR_ACTIVATION_LINEAR", "Desc": {"Alpha": 2, "Beta": "-inf"}},
         activations.Linear(alpha=2.0, beta=-np.inf)),
        ({"Type": "ACTIVATION_RELU"}, activations.Relu()),
        ({"Type": "ACTIVATION_SHRINK", "desc": {"Bias": 0.25, "Threshold": 1}},
         activations.Shrink(bias=0.25, threshold=1.0)),
    ],
)  # fmt: skip
def test_fused_activations_flat_and_nested(activation, expected):
    model = edited(add1_model(), "dispatchables.add.desc.FusedActivation", activation)
    assert parse(model).dispatchables["add"].desc.fused_activation == expected


@pytest.mark.parametrize(
    ("activation", "path", "rule"),
    [
        ({"Type": "ACTIVATION_LINEAR", "Alpha": 2}, "FusedActivation", "missing field 'Beta'"),
        ({"Type": "ACTIVATION_ELU", "Alpha": 1, "Beta": 2}, r"FusedActivation\.Beta", "unknown field"),
        ({"Type": "ACTIVATION_SOFTMAX"}, r"FusedActivation\.Type", "not an activation DirectML fuses"),
        ({"Alpha": 1}, "FusedActivation", "missing field 'Type'"),
    ],
)
def test_fused_activation_errors_name_their_path(activation, path, rule):
    model = edited(add1_model(), "dispatchables.add.desc.FusedActivation", activation)
    with pytest.raises(DmlError, match=rf"^dispatchables\.add\.desc\.{path}: {rule}"):
        parse(model)


def test_an_optional_tensor_is_left_out():
    model = quantize_model()
    del model["dispatchables"]["q"]["desc"]["ZeroPointTensor"]
    del model["commands"][0]["bindings"]["ZeroPointTensor"]
    assert parse(model).dispatchables["q"].desc.zero_point is None
    assert run(model, "6_2") == "Resource 'Q': 2, 4, 6, 8\n"
    assert error_of(model, "6_0") == (
        "dispatchables.q.desc.ZeroPointTensor: tensor is required before feature level 6_2 (device is 6_0)"
    )


def quantize_model() -> dict:
    tensor = {"DataType": "FLOAT32", "Sizes": [1, 1, 1, 4]}
    broadcast = {**tensor, "Strides": [0, 0, 0, 0]}
    return add1_model(
        resources={
            "X": {"initialValuesDataType": "FLOAT32", "initialValues": [1, 2, 3, 4]},
            "S": {"initialValuesDataType": "FLOAT32", "initialValues": [0.5]},
            "Z": {"initialValuesDataType": "UINT8", "initialValues": [10]},
            "Q": {"initialValuesDataType": "UINT8", "initialValues": {"valueCount": 4, "value": 0}},
        },
        dispatchables={"q": {"type": "ELEMENT_WISE_QUANTIZE_LINEAR", "desc": {
            "InputTensor": tensor, "ScaleTensor": broadcast,
            "ZeroPointTensor": {**broadcast, "DataType": "UINT8"},
            "OutputTensor": {**tensor, "DataType": "UINT8"}}}},
        commands=[{"type": "dispatch", "dispatchable": "q", "bindings": {
            "InputTensor": "X", "ScaleTensor": "S", "ZeroPointTensor": "Z", "OutputTensor": "Q"}},
            {"type": "print", "resource": "Q"}],
    )  # fmt: skip


def test_a_required_tensor_cannot_be_left_out():
    with pytest.raises(DmlError, match=r"^dispatchables\.add\.desc: missing field 'BTensor'"):
        parse(edited(add1_model(), "dispatchables.add.desc.BTensor", None))


def test_unknown_fields_and_operators_name_their_path():
    with pytest.raises(DmlError, match=r"^dispatchables\.add\.desc\.ATensor\.Size: unknown field"):
        parse(edited(add1_model(), "dispatchables.add.desc.ATensor", {"DataType": "FLOAT32", "Size": [3]}))
    with pytest.raises(DmlError, match=r"^dispatchables\.add\.type: unknown operator \(dmlq runs"):
        parse(edited(add1_model(), "dispatchables.add.type", "ELEMENT_WISE_SUBTRACT"))


def test_a_bad_size_names_its_element():
    model = edited(add1_model(), "dispatchables.add.desc.ATensor.Sizes", [3, -1])
    with pytest.raises(DmlError, match=r"^dispatchables\.add\.desc\.ATensor\.Sizes\[1\]: expected an int"):
        parse(model)


@pytest.mark.parametrize("kind", ["hlsl", "onnx", "dmlSerializedGraph"])
def test_other_dispatchable_kinds_are_refused(kind):
    model = edited(add1_model(), "dispatchables.add", {"type": kind, "sourcePath": "x"})
    with pytest.raises(DmlError, match=rf"^dispatchables\.add\.type: {kind} dispatchables are not supported"):
        parse(model)


def owned_model(**dispatchable_changes: object) -> dict:
    model = add1_model()
    model["dispatchables"]["add"]["desc"]["ATensor"] = {**F32, "Flags": ["OWNED_BY_DML"]}
    model["dispatchables"]["add"]["bindings"] = {"ATensor": "A"}
    model["dispatchables"]["add"].update(dispatchable_changes)
    del model["commands"][0]["bindings"]["ATensor"]
    return model


def test_owned_by_dml_inputs_are_copied_at_initialization():
    model = owned_model()
    # Out = A + B, then A = Out + B: the second dispatch still reads A as it was initialized.
    model["commands"] = [
        model["commands"][0],
        {"type": "dispatch", "dispatchable": "add", "bindings": {"BTensor": "B", "OutputTensor": "A"}},
        {"type": "print", "resource": "A"},
    ]
    assert run(model) == "Resource 'A': 6, 10, -2\n"


def test_owned_by_dml_binding_rules():
    with pytest.raises(DmlError, match=r"^dispatchables\.add: OWNED_BY_DML tensor ATensor needs a binding"):
        parse(edited(owned_model(), "dispatchables.add.bindings", None))
    with pytest.raises(DmlError, match=r"^dispatchables\.add\.bindings\.BTensor: only OWNED_BY_DML inputs"):
        parse(owned_model(bindings={"ATensor": "A", "BTensor": "B"}))
    model = edited(owned_model(), "commands.0.bindings.ATensor", "A")
    with pytest.raises(DmlError, match=r"^commands\[0\]\.bindings\.ATensor: OWNED_BY_DML, bound once"):
        parse(model)


# -- commands -------------------------------------------------------------------------------------------


def test_bindings_take_element_ranges():
    model = add1_model()
    model["resources"]["A"]["initialValues"] = [0, 0, 1, 2, 3]
    model["commands"][0]["bindings"]["ATensor"] = {"name": "A", "elementOffset": 2, "elementCount": 3}
    model["commands"][0]["bindings"]["BTensor"] = ["B"]
    assert run(model) == "Resource 'Out': 6, 10, -2\n"


def test_element_size_in_bytes_reinterprets_the_offset():
    model = add1_model()
    one = [0, 0, 128, 63]  # float32 1.0, little-endian
    model["resources"]["A"] = {"initialValuesDataType": "UINT8", "initialValues": [0] * 4 + one * 3}
    model["commands"][0]["bindings"]["ATensor"] = {"name": "A", "elementOffset": 1, "elementSizeInBytes": 4}
    assert run(model) == "Resource 'Out': 6, 9, -4\n"


@pytest.mark.parametrize(
    ("binding", "path", "rule"),
    [
        ({"name": "A", "elementOffset": 4}, r"ATensor\.elementOffset", "starts at byte 16, past the end"),
        ({"name": "A", "elementOffset": 1, "elementCount": 3}, r"ATensor\.elementCount",
         "reaches byte 16, but resource 'A' has 12 bytes"),
        ("C", r"ATensor", "no resource named 'C'"),
        (["A", "B"], r"ATensor", "binds 2 resources; a tensor takes exactly one"),
        ({"name": "A", "view": "R32_FLOAT"}, r"ATensor\.view", "unknown field"),
    ],
)  # fmt: skip
def test_binding_errors_name_their_path(binding, path, rule):
    model = edited(add1_model(), "commands.0.bindings.ATensor", binding)
    with pytest.raises(DmlError, match=rf"^commands\[0\]\.bindings\.{path}: {rule}"):
        parse(model)


def test_a_missing_binding_is_an_error():
    model = edited(add1_model(), "commands.0.bindings.BTensor", None)
    with pytest.raises(DmlError, match=r"^commands\[0\]\.bindings: missing binding for BTensor"):
        parse(model)


def test_binding_a_tensor_the_desc_leaves_out_is_an_error():
    model = quantize_model()
    del model["dispatchables"]["q"]["desc"]["ZeroPointTensor"]
    with pytest.raises(DmlError, match=r"^commands\[0\]\.bindings\.ZeroPointTensor: not a tensor of this"):
        parse(model)


def test_a_buffer_smaller_than_its_tensor_fails_at_dispatch():
    model = edited(add1_model(), "commands.0.bindings.ATensor", {"name": "A", "elementOffset": 1})
    assert error_of(model) == (
        "commands[0].bindings.ATensor: buffer of 8 bytes is smaller than the 12 bytes its tensor addresses"
        " (device is 6_4)"
    )


def test_print_shows_numbers_for_8_bit_buffers():
    model = add1_model(
        resources={"U": {"initialValuesDataType": "UINT8", "initialValues": [0, 65, 255]},
                   "I": {"initialValuesDataType": "INT8", "initialValues": [-128, 10]}},
        dispatchables={}, commands=[{"type": "print", "resource": "U"}, {"type": "print", "resource": "I"}],
    )  # fmt: skip
    assert run(model) == "Resource 'U': 0, 65, 255\nResource 'I': -128, 10\n"


def test_print_verbose_lists_index_value_and_bits():
    model = add1_model(
        resources={"F": {"initialValuesDataType": "FLOAT32", "initialValues": [1, -2.5]}},
        dispatchables={}, commands=[{"type": "print", "resource": "F", "verbose": True}],
    )  # fmt: skip
    assert run(model) == "Resource 'F':\n[0] 1 (0x3F800000)\n[1] -2.5 (0xC0200000)\n"


def test_write_file_npy_with_dimensions_raw_and_whole_buffer(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    model = add1_model()
    model["resources"]["Out"]["sizeInBytes"] = 16
    model["commands"][1:] = [
        {"type": "writeFile", "resource": "Out", "targetPath": "out/shaped.npy", "dimensions": [3, 1]},
        {"type": "writeFile", "resource": "Out", "targetPath": "flat.npy"},
        {"type": "writeFile", "resource": "Out", "targetPath": "raw.dat"},
    ]
    assert run(model).splitlines() == [
        "Resource 'Out' written to 'out/shaped.npy'",
        "Resource 'Out' written to 'flat.npy'",
        "Resource 'Out' written to 'raw.dat'",
    ]
    np.testing.assert_array_equal(np.load("out/shaped.npy"), np.float32([[6], [10], [-2]]))
    np.testing.assert_array_equal(np.load("flat.npy"), np.float32([6, 10, -2, 0]))  # the whole buffer
    assert (tmp_path / "raw.dat").read_bytes() == np.float32([6, 10, -2, 0]).tobytes()


def test_write_file_dimensions_must_fit_the_resource():
    model = add1_model()
    model["commands"][1] = {"type": "writeFile", "resource": "Out", "targetPath": "x.npy",
                            "dimensions": [2, 2]}  # fmt: skip
    with pytest.raises(DmlError, match=r"^commands\[1\]\.dimensions: need 16 bytes, but resource 'Out' has"):
        parse(model)


@pytest.mark.parametrize(
    ("path", "value"),
    [
        ("commands.1", {"type": "writeFile", "resource": "Out", "targetPath": "\u00e9.npy"}),
        ("resources.A.initialValues", {"sourcePath": "\u00e9.npy"}),
    ],
    ids=["targetPath", "sourcePath"],
)
def test_a_file_name_the_file_system_cannot_encode_is_refused(path, value, monkeypatch):
    monkeypatch.setattr(os, "fsencode", lambda name: name.encode("ascii"))  # as on an ASCII file system
    with pytest.raises(DmlError, match=r'(targetPath|sourcePath): "\\u00e9\.npy" cannot name a file here'):
        parse(edited(add1_model(), path, value))


@pytest.mark.parametrize(
    ("command", "path", "rule"),
    [
        ({"type": "print", "resource": "Nope"}, r"commands\[1\]\.resource", "no resource named 'Nope'"),
        ({"type": "dispatch", "dispatchable": "x", "bindings": {}}, r"commands\[1\]\.dispatchable",
         "no dispatchable named 'x'"),
        ({"type": "sleep"}, r"commands\[1\]\.type", "unknown command"),
        ({"type": "writeFile", "resource": "Out", "targetPath": "o.png"}, r"commands\[1\]\.targetPath",
         "image files"),
    ],
)  # fmt: skip
def test_command_errors_name_their_path(command, path, rule):
    with pytest.raises(DmlError, match=rf"^{path}: {rule}"):
        parse(edited(add1_model(), "commands.1", command))


# -- check and run at a feature level ---------------------------------------------------------------------


def test_check_reports_validity_and_the_lowest_level():
    model = parse(edited(add1_model(), "dispatchables.add.desc.FusedActivation", {"Type": "ACTIVATION_GELU"}))
    [valid] = check_model(model, "6_4")
    assert (valid.valid, valid.problem, valid.lowest_level) == (True, None, FeatureLevel.FL_5_1)
    [invalid] = check_model(model, "5_0")
    assert invalid.problem == (
        "dispatchables.add.desc.FusedActivation: ACTIVATION_GELU needs feature level 5_1 (device is 5_0)"
    )


def test_check_names_a_description_no_level_accepts():
    output = {"DataType": "INT32", "Sizes": [3]}
    model = parse(edited(add1_model(), "dispatchables.add.desc.OutputTensor", output))
    [verdict] = check_model(model)
    assert verdict.lowest_level is None
    assert verdict.problem.startswith("dispatchables.add.desc.OutputTensor: data type INT32 is not supported")


@pytest.mark.parametrize(
    ("tensor", "rule"),
    [
        ({**F32, "TotalTensorSizeInBytes": 1}, "TotalTensorSizeInBytes 1 is less than the 12 bytes"),
        ({**F32, "Sizes": [0]}, "Sizes[0] = 0 must be an integer of at least 1"),
        ({**F32, "Strides": [1, 1]}, "has 2 strides for 1 sizes"),
    ],
    ids=["TotalTensorSizeInBytes", "Sizes", "Strides"],
)
def test_tensor_rules_name_the_fields_as_the_model_does(tensor, rule):
    model = edited(add1_model(), "dispatchables.add.desc.ATensor", tensor)
    assert error_of(model).startswith(f"dispatchables.add.desc.ATensor: {rule}")


def test_run_refuses_a_dispatchable_invalid_at_its_level():
    assert error_of(add1_model(), "2_1") == (
        "dispatchables.add.desc.ATensor: dimension count 1 needs feature level 3_0 (device is 2_1)"
    )


def test_load_model_reads_a_file_and_resolves_next_to_it(tmp_path):
    np.save(tmp_path / "a.npy", np.float32([1, 2, 3]))
    model = edited(add1_model(), "resources.A", {"initialValues": {"sourcePath": "a.npy"}})
    (tmp_path / "m.json").write_text(json.dumps(model))
    out = io.StringIO()
    run_model(load_model(tmp_path / "m.json"), out=out)
    assert out.getvalue() == "Resource 'Out': 6, 10, -2\n"


def test_load_model_names_a_missing_file(tmp_path):
    with pytest.raises(DmlError, match="no such file"):
        load_model(tmp_path / "missing.json")


# -- DxDispatch's schema, and check seeing what run would refuse ------------------------------------------


def test_what_the_schema_lists_is_accepted():
    model = edited(add1_model(), "resources.A.type", "buffer")
    model["commands"][0]["bindings"]["ATensor"] = {
        "name": "A", "format": "DXGI_FORMAT_R32_FLOAT", "counter": "B", "counterOffsetBytes": 0, "shape": [3],
    }  # fmt: skip
    assert run(model) == "Resource 'Out': 6, 10, -2\n"


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        ("resources.A.type", "texture", r'^resources\.A\.type: expected "buffer"'),
        ("commands.0.bindings.ATensor", {"name": "A", "format": 41}, r"ATensor\.format: expected a string"),
        ("commands.0.bindings.ATensor", {"name": "A", "counter": "C"}, r"ATensor\.counter: no resource"),
        ("commands.0.bindings.ATensor", {"name": "A", "shape": [1.5]}, r"ATensor\.shape\[0\]: expected an"),
    ],
    ids=["resource type", "format", "counter", "shape"],
)
def test_schema_fields_are_checked(path, value, message):
    with pytest.raises(DmlError, match=message):
        parse(edited(add1_model(), path, value))


@pytest.mark.parametrize(
    ("binding", "problem"),
    [
        ({"name": "A", "elementCount": 2}, "buffer of 8 bytes is smaller than the 12 bytes its tensor"),
        ({"name": "A", "elementSizeInBytes": 1, "elementOffset": 1}, "not aligned to its 4-byte elements"),
        ("Out", "output overlaps input a; in place, the output must start where the input does"),
    ],
    ids=["too small", "misaligned", "overlap"],
)
def test_check_binds_the_dispatches_as_run_does(binding, problem):
    model = edited(add1_model(), "commands.0.bindings.ATensor", binding)
    model["resources"]["A"]["sizeInBytes"] = 16
    if binding == "Out":
        model["commands"][0]["bindings"]["OutputTensor"] = {"name": "Out", "elementOffset": 1}
        model["resources"]["Out"]["initialValues"]["valueCount"] = 4
    report = dxdispatch.check_bindings(parse(model))
    assert len(report.problems) == 1 and not report.valid
    assert report.problems[0].startswith("commands[0]") and problem in report.problems[0]
    assert error_of(model) == report.problems[0]  # run refuses it with the same words
    assert all(verdict.valid for verdict in check_model(parse(model)))  # the dispatchable itself is valid


def test_check_bindings_passes_a_model_that_runs():
    report = dxdispatch.check_bindings(parse(quantize_model()))
    assert (report.valid, report.problems, report.warnings) == (True, [], [])


def test_a_scale_of_0_is_reported_by_check_and_warned_about_by_run():
    model = edited(quantize_model(), "resources.S.initialValues", [0.0])
    expected = "commands[0].bindings.ScaleTensor: a scale of 0, which DirectML leaves undefined (here x / 0)"
    assert dxdispatch.check_bindings(parse(model)).warnings == [expected]
    with pytest.warns(dxdispatch.UndefinedBehaviour, match=re.escape(expected)):
        assert run(model) == "Resource 'Q': 255, 255, 255, 255\n"


def test_a_scale_of_0_in_quantize_is_warned_about():
    model = add1_model(
        resources={"X": {"initialValuesDataType": "FLOAT32", "initialValues": [1, -1]},
                   "S": {"initialValuesDataType": "FLOAT32", "initialValues": [0.0]},
                   "Q": {"initialValuesDataType": "INT4", "initialValues": [0, 0]}},
        dispatchables={"q": {"type": "QUANTIZE", "desc": {
            "InputTensor": {"DataType": "FLOAT32", "Sizes": [2]}, "QuantizationType": "SCALE",
            "QuantizationTensors": [{"DataType": "FLOAT32", "Sizes": [1]}],
            "OutputTensor": {"DataType": "INT4", "Sizes": [2]}}}},
        commands=[{"type": "dispatch", "dispatchable": "q",
                   "bindings": {"InputTensor": "X", "QuantizationTensors": ["S"], "OutputTensor": "Q"}},
                  {"type": "print", "resource": "Q"}],
    )  # fmt: skip
    expected = "commands[0].bindings.QuantizationTensors[0]: a scale of 0, which DirectML leaves undefined"
    with pytest.warns(dxdispatch.UndefinedBehaviour, match=re.escape(expected)):
        assert run(model) == "Resource 'Q': 7, -8\n"


# -- 4-bit resources and the 6_3 operators ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("model_resource", "packed", "values"),
    [
        ({"initialValuesDataType": "INT4", "initialValues": [1, -2, 3]}, [0xE1, 0x03], [1, -2, 3]),
        ({"initialValuesDataType": "DML_TENSOR_DATA_TYPE_UINT4",
          "initialValues": {"valueCount": 3, "value": 15}}, [0xFF, 0x0F], [15, 15, 15]),
        ({"initialValuesDataType": "INT4",
          "initialValues": {"valueCount": 4, "valueStart": -8, "valueDelta": 5}},
         [0xD8, 0x72], [-8, -3, 2, 7]),
    ],
    ids=["inline, odd count", "constant", "sequence"],
)  # fmt: skip
def test_4_bit_values_are_packed_low_nibble_first(model_resource, packed, values):
    r = resource(model_resource)
    assert r.memory.tolist() == [*packed, 0, 0]  # 4 bytes: the default size rounds up
    assert (r.initialized_count, r.initialized_bytes) == (len(values), 2)
    assert r.initialized_values().tolist() == values


@pytest.mark.parametrize(
    ("model_resource", "path", "rule"),
    [
        ({"initialValuesDataType": "INT4", "initialValues": [7, 8]}, r"initialValues\[1\]",
         "expected an integer from -8 to 7, not 8"),
        ({"initialValuesDataType": "UINT4", "initialValues": [-1]}, r"initialValues\[0\]",
         "expected an integer from 0 to 15, not -1"),
        ({"initialValuesDataType": "UINT4", "initialValues": {"valueCount": 2, "value": 16}},
         r"initialValues\.value", "expected an integer from 0 to 15, not 16"),
        ({"initialValuesDataType": "INT4",
          "initialValues": {"valueCount": 9, "valueStart": 0, "valueDelta": 1}},
         r"initialValues", "the sequence reaches 8, outside INT4's range -8 to 7"),
    ],
    ids=["int4 inline", "uint4 inline", "constant", "sequence"],
)  # fmt: skip
def test_4_bit_values_out_of_range_name_their_path(model_resource, path, rule):
    with pytest.raises(DmlError, match=rf"^resources\.R\.{path}: {re.escape(rule)}$"):
        resource(model_resource)


def test_4_bit_files_raw_bytes_are_packed_and_npy_holds_values(tmp_path):
    (tmp_path / "w.bin").write_bytes(bytes([0xE1, 0x73]))
    np.save(tmp_path / "w.npy", np.int8([1, -2, 3]))
    raw = resource({"initialValuesDataType": "INT4", "initialValues": {"sourcePath": "w.bin"}}, tmp_path)
    assert raw.initialized_values().tolist() == [1, -2, 3, 7]
    npy = resource({"initialValuesDataType": "INT4", "initialValues": {"sourcePath": "w.npy"}}, tmp_path)
    assert npy.memory[:2].tolist() == [0xE1, 0x03] and npy.initialized_count == 3
    np.save(tmp_path / "w.npy", np.int8([1, -9]))
    with pytest.raises(DmlError, match=r"sourcePath: element 1 is -9, outside INT4's range -8 to 7$"):
        resource({"initialValuesDataType": "INT4", "initialValues": {"sourcePath": "w.npy"}}, tmp_path)


def test_print_and_write_file_show_4_bit_values(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    model = add1_model(
        resources={"W": {"initialValuesDataType": "INT4", "initialValues": [1, -2, 3]}},
        dispatchables={},
        commands=[{"type": "print", "resource": "W"}, {"type": "print", "resource": "W", "verbose": True},
                  {"type": "writeFile", "resource": "W", "targetPath": "w.npy", "dimensions": [3]},
                  {"type": "writeFile", "resource": "W", "targetPath": "whole.npy"},
                  {"type": "writeFile", "resource": "W", "targetPath": "w.bin"}],
    )  # fmt: skip
    assert run(model).splitlines()[:5] == [
        "Resource 'W': 1, -2, 3", "Resource 'W':", "[0] 1 (0x1)", "[1] -2 (0xE)", "[2] 3 (0x3)"
    ]  # fmt: skip
    assert_npy = np.load("w.npy")
    assert assert_npy.dtype == np.int8 and assert_npy.tolist() == [1, -2, 3]
    assert np.load("whole.npy").tolist() == [1, -2, 3, 0, 0, 0, 0, 0]  # the 4-byte buffer: 8 elements
    assert (tmp_path / "w.bin").read_bytes() == bytes([0xE1, 0x03, 0, 0])


def dequantize_model() -> dict:
    """A blockwise INT4 DEQUANTIZE: [2, 4] in blocks of 2, a scale and a zero point per block."""
    return add1_model(
        resources={
            "W": {"initialValuesDataType": "INT4", "initialValues": [-8, 7, 1, 2, 0, -1, 5, 6]},
            "S": {"initialValuesDataType": "FLOAT32", "initialValues": [1, 0.5, 2, 0.25]},
            "Z": {"initialValuesDataType": "INT4", "initialValues": [0, 1, -1, 2]},
            "Out": {"initialValuesDataType": "FLOAT32", "initialValues": {"valueCount": 8, "value": 0}},
        },
        dispatchables={"d": {"type": "DEQUANTIZE", "desc": {
            "InputTensor": {"DataType": "INT4", "Sizes": [2, 4]},
            "QuantizationType": "SCALE_ZERO_POINT",
            "QuantizationTensors": [{"DataType": "FLOAT32", "Sizes": [2, 2]},
                                    {"DataType": "INT4", "Sizes": [2, 2]}],
            "OutputTensor": {"DataType": "FLOAT32", "Sizes": [2, 4]}}}},
        commands=[{"type": "dispatch", "dispatchable": "d",
                   "bindings": {"InputTensor": "W", "QuantizationTensors": ["S", "Z"],
                                "OutputTensor": "Out"}},
                  {"type": "print", "resource": "Out"}],
    )  # fmt: skip


def test_dequantize_binds_its_quantization_tensors_as_an_array():
    assert run(dequantize_model()) == "Resource 'Out': -8, 7, 0, 0.5, 2, 0, 0.75, 1\n"
    verdicts = check_model(parse(dequantize_model()), "6_2")
    assert [(verdict.valid, verdict.lowest_level.label) for verdict in verdicts] == [(False, "6_3")]


def test_quantization_type_takes_the_prefix_and_a_single_tensor_binds_by_name():
    model = dequantize_model()
    desc = model["dispatchables"]["d"]["desc"]
    desc["QuantizationType"] = "DML_QUANTIZATION_TYPE_SCALE"
    desc["QuantizationTensors"] = desc["QuantizationTensors"][:1]
    model["commands"][0]["bindings"]["QuantizationTensors"] = "S"
    assert run(model) == "Resource 'Out': -8, 7, 0.5, 1, 0, -2, 1.25, 1.5\n"


def test_a_4_bit_binding_starts_on_a_byte():
    model = dequantize_model()
    model["resources"]["W"]["initialValues"] = [0, 0, -8, 7, 1, 2, 0, -1, 5, 6]
    model["commands"][0]["bindings"]["InputTensor"] = {"name": "W", "elementOffset": 2}
    assert run(model) == "Resource 'Out': -8, 7, 0, 0.5, 2, 0, 0.75, 1\n"
    model["commands"][0]["bindings"]["InputTensor"] = {"name": "W", "elementOffset": 1}
    with pytest.raises(DmlError, match=r"^commands\[0\]\.bindings\.InputTensor\.elementOffset: starts in"):
        parse(model)


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        ("dispatchables.d.desc.QuantizationType", "AFFINE",
         "dispatchables.d.desc.QuantizationType: unknown quantization type (expected NONE, SCALE, "
         "SCALE_ZERO_POINT)"),
        ("dispatchables.d.desc.QuantizationType", None,
         "dispatchables.d.desc: missing field 'QuantizationType'"),
        ("commands.0.bindings.QuantizationTensors", ["S"],
         "commands[0].bindings.QuantizationTensors: binds 1 resource(s); the desc's QuantizationTensors has 2"
         " tensor(s)"),
        ("dispatchables.d.desc.QuantizationTensors.1.DataType", "UINT4",
         "dispatchables.d.desc.QuantizationTensors[1]: the zero point has data type UINT4, not input's INT4"
         " (device is 6_4)"),
        ("dispatchables.d.desc.QuantizationTensors.0.Sizes", [2, 3],
         "dispatchables.d.desc.QuantizationTensors[0]: Sizes [2, 3] must each divide input's [2, 4]"),
    ],
    ids=["unknown type", "missing type", "binding count", "zero point type", "block size"],
)  # fmt: skip
def test_quantization_errors_name_their_path(path, value, message):
    with pytest.raises(DmlError) as caught:
        run(edited(dequantize_model(), path, value))
    assert str(caught.value).startswith(message)
