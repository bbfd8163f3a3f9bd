"""dmlq.onnx refuses bad input with one clear DmlError (one line and exit 2 on the command line),
writing nothing; ``import dmlq`` does not import onnx or onnxruntime."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from onnx import helper

import dmlq.onnx as dx
from dmlq import DmlError
from dmlq.cli import main
from onnx_oracle import model


def quantize_model(opset: int = 13, domain: str = "", used: bool = True):
    """A QuantizeLinear; with ``domain``, a node of that domain after it (``used``) or only its import."""
    node = helper.make_node("QuantizeLinear", ["x", "s"], ["y"])
    made = model([node], {"x": np.zeros((2, 3), np.float32)}, {"s": np.float32(0.5)}, ["y"], opset)
    if domain:
        made.opset_import.append(helper.make_opsetid(domain, 1))
    if domain and used:
        made.graph.node.append(helper.make_node("Frobnicate", ["y"], ["z"], domain=domain))
        made.graph.output.append(helper.make_tensor_value_info("z", 2, [2, 3]))
    return made


def qlinear_add_model():
    node = helper.make_node(
        "QLinearAdd", ["a", "s", "z", "a", "s", "z", "s", "z"], ["y"], domain="com.microsoft"
    )
    return model(
        [node],
        {"a": np.zeros((2, 3), np.uint8)},
        {"s": np.float32(0.5), "z": np.uint8(3)},
        {"y": (np.uint8, [2, 3])},
        13,
        microsoft=True,
    )


GOOD = {"x": np.zeros((2, 3), np.float32)}
CASES = {
    "not ONNX": (lambda: b"certainly not a protobuf \xff\xfe", GOOD, None, "is not an ONNX model"),
    "missing input": (quantize_model, {}, None, "'x' is missing"),
    "extra input": (quantize_model, {**GOOD, "z": np.zeros(1)}, None, "'z' is not an input"),
    "wrong dtype": (
        quantize_model,
        {"x": np.zeros((2, 3))},
        None,
        "dtype float64 is not the model's float32",
    ),
    "wrong shape": (quantize_model, {"x": np.zeros((3, 2), np.float32)}, None, "shape (3, 2) does not fit"),
    "unknown opset": (lambda: quantize_model(opset=99), GOOD, None, "ONNX opset 99 is not one dmlq knows"),
    "unknown domain": (
        lambda: quantize_model(domain="org.example"),
        GOOD,
        None,
        "'org.example' is not one dmlq knows",
    ),
    "invalid at level": (
        qlinear_add_model,
        {"a": np.zeros((2, 3), np.uint8)},
        "3_0",
        "needs feature level 4_0",
    ),
}


def _write(case, tmp_path):
    made = case[0]()
    path = tmp_path / "model.onnx"
    path.write_bytes(made if isinstance(made, bytes) else made.SerializeToString())
    return path


def test_an_opset_import_no_node_uses_is_ignored() -> None:
    """quant_pre_process writes ai.onnx.training and others that no node uses: onnxruntime runs them."""
    made = quantize_model(domain="ai.onnx.training", used=False)
    assert dx.run(made, GOOD)["y"].shape == (2, 3)


def test_a_model_onnxruntime_refuses_is_refused_with_its_message() -> None:
    """onnx.checker passes a Reshape whose shape input is float; onnxruntime's type checks do not."""
    node = helper.make_node("Reshape", ["x", "shape"], ["y"])
    made = model(
        [node],
        {"x": np.zeros((2, 3), np.float32)},
        {"shape": np.float32([3, 2])},
        {"y": (np.float32, [3, 2])},
        13,
    )
    with pytest.raises(DmlError, match="onnxruntime CPU cannot run the model: .*INVALID"):
        dx.check(made)


@pytest.mark.parametrize("name", list(CASES))
def test_one_clear_dml_error(name, tmp_path) -> None:
    path = _write(CASES[name], tmp_path)
    _, inputs, level, message = CASES[name]
    with pytest.raises(DmlError, match=message.replace("(", r"\(").replace(")", r"\)")):
        dx.run(path, inputs, feature_level=level)


@pytest.mark.parametrize("name", list(CASES))
def test_the_command_line_says_one_line_and_exits_2_writing_nothing(name, tmp_path, capsys) -> None:
    path = _write(CASES[name], tmp_path)
    _, inputs, level, message = CASES[name]
    arguments = []
    for input_name, value in inputs.items():
        np.save(tmp_path / f"{input_name}.npy", value)
        arguments += ["--input", f"{input_name}={tmp_path / f'{input_name}.npy'}"]
    out_dir = tmp_path / "out"
    status = main(
        [
            "run",
            str(path),
            *arguments,
            "--output-dir",
            str(out_dir),
            *(["--feature-level", level] if level else []),
        ]
    )
    captured = capsys.readouterr()
    assert status == 2 and not out_dir.exists()
    assert captured.err.count("\n") == 1 and message in captured.err


def test_check_exits_1_and_names_the_reason_for_an_invalid_node(tmp_path, capsys) -> None:
    path = tmp_path / "add.onnx"
    path.write_bytes(qlinear_add_model().SerializeToString())
    assert main(["check", str(path), "--feature-level", "3_0"]) == 1
    assert "operator needs feature level 4_0 (device is 3_0)" in capsys.readouterr().out
    assert main(["check", str(path)]) == 0


def test_compare_alone_draws_inputs_from_a_seed_it_prints(tmp_path, capsys) -> None:
    path = tmp_path / "q.onnx"
    path.write_bytes(quantize_model().SerializeToString())
    assert main(["compare", str(path), "--seed", "7"]) == 0
    out = capsys.readouterr().out
    assert "inputs drawn at random with seed 7: x" in out and "ELEMENT_WISE_QUANTIZE_LINEAR" in out


def test_run_writes_each_output(tmp_path, capsys) -> None:
    path = tmp_path / "q.onnx"
    path.write_bytes(quantize_model().SerializeToString())
    np.save(tmp_path / "x.npy", np.float32([[0.5, 1.5, 2.5], [-1, 0, 1]]))
    assert (
        main(["run", str(path), "--input", f"x={tmp_path / 'x.npy'}", "--output-dir", str(tmp_path / "o")])
        == 0
    )
    assert np.array_equal(np.load(tmp_path / "o" / "y.npy"), np.uint8([[1, 3, 5], [0, 0, 2]]))


def test_help_lists_compare_and_routes_onnx_models_to_their_own_help(capsys) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["--help"])
    assert exit_.value.code == 0
    assert "compare ONNX: compare with onnxruntime" in " ".join(capsys.readouterr().out.split())  # any width
    with pytest.raises(SystemExit):
        main(["run", "m.onnx", "--help"])
    assert "--output-dir DIR" in capsys.readouterr().out


def test_compare_usage_error_is_one_line_exit_2(capsys) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["compare", "m.onnx", "--seed", "x"])
    assert exit_.value.code == 2
    assert capsys.readouterr().err.count("\n") == 1


def test_import_dmlq_imports_neither_onnx_nor_onnxruntime() -> None:
    code = "import sys, dmlq, dmlq.cli; print(sorted({'onnx', 'onnxruntime'} & set(sys.modules)))"
    assert (
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
        == "[]\n"
    )


def test_onnxruntime_gets_the_oldest_ir_version_the_opsets_allow() -> None:
    """A model written by a newer onnx records a newer IR version than an older onnxruntime reads
    (onnx 1.23 writes 13 or more; onnxruntime 1.23 reads up to 11): the sessions dmlq builds for
    other nodes carry the oldest IR version their opsets allow, never more than the model's."""
    from dmlq.onnx.sessions import ir_version as _ir_version

    x, y = (helper.make_tensor_value_info(name, 1, [2]) for name in "xy")  # 1: FLOAT
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x], [y])
    newest = dx.load(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=13))
    assert _ir_version(newest) == 7
    oldest = dx.load(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=7))
    assert _ir_version(oldest) == 7
    assert dx.run(newest, {"x": np.float32([-1, 2])})["y"].tolist() == [0.0, 2.0]
