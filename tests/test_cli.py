"""The ``dmlq`` command line, driven in subprocesses; every example checked against NumPy formulas."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import dmlq
from dmlq import _core
from dmlq.cli import main
from dmlq.dxdispatch import load_model
from dmlq.kernels import available_levels

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
SOURCE_ROOT = Path(dmlq.__file__).resolve().parents[1]  # src/ (or site-packages when installed)


def console_script() -> str:
    """The installed `dmlq` (README's install command installs it): next to this Python, else on PATH."""
    script = shutil.which("dmlq", path=str(Path(sys.executable).parent)) or shutil.which("dmlq")
    if script is None:
        pytest.fail("the dmlq console script is not installed; install the package with pip install -e .")
    return script


def dmlq_cli(
    *args: str, cwd: Path, program: tuple[str, ...] | None = None, stdout=subprocess.PIPE, **env: str
):
    """Run the console script (or ``program``) on this checkout's source, as users run it; ``env``
    adds environment variables."""
    path = os.pathsep.join(filter(None, [str(SOURCE_ROOT), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "PYTHONPATH": path, **env}
    command = [*(program or [console_script()]), *args]
    return subprocess.run(
        command, cwd=cwd, env=env, stdout=stdout, stderr=subprocess.PIPE, text=True, timeout=120
    )


def run_example(name: str, tmp_path: Path) -> tuple[dict[str, np.ndarray], Path]:
    """Run ``examples/<name>.json`` in ``tmp_path``; its printed resources, and the folder."""
    result = dmlq_cli("run", str(EXAMPLES / f"{name}.json"), cwd=tmp_path)
    assert (result.returncode, result.stderr) == (0, "")
    return printed(result.stdout), tmp_path


def printed(stdout: str) -> dict[str, np.ndarray]:
    values = {}
    for line in stdout.splitlines():
        head, separator, numbers = line.partition("': ")
        if head.startswith("Resource '") and separator:
            values[head.removeprefix("Resource '")] = np.array([float(v) for v in numbers.split(", ")])
    return values


def assert_same(got: np.ndarray, expected: np.ndarray) -> None:
    assert got.dtype == expected.dtype and got.shape == expected.shape
    np.testing.assert_array_equal(got, expected)


def f32(values) -> np.ndarray:
    return np.asarray(values, np.float64).astype(np.float32)


def quantize(x, scale, zero_point, low, high, dtype):
    """round(x / scale) + zero_point in float32, halves to even, clamped."""
    return np.clip(np.rint(f32(x) / f32(scale)) + zero_point, low, high).astype(dtype)


def leaky_relu_or_elu(total: np.ndarray, alpha: float, elu: bool) -> np.ndarray:
    """The activation on the float32 sum, evaluated in float64 and rounded once."""
    x, alpha = total.astype(np.float64), np.float64(np.float32(alpha))
    negative = alpha * np.expm1(x) if elu else alpha * x
    return np.where(x >= 0, x, negative).astype(np.float32)


def requantize_product(a, a_scale, a_zero_point, b, b_scale, out_scale, out_zero_point):
    """Exact integer product, then float64 requantization with the float32 scales."""
    accumulated = (np.asarray(a, np.int64) - a_zero_point) @ np.asarray(b, np.int64)
    wide = lambda scale: f32(scale).astype(np.float64)  # noqa: E731
    value = accumulated * (wide(a_scale) * wide(b_scale)) / wide(out_scale)
    return np.clip(np.rint(value) + out_zero_point, 0, 255).astype(np.uint8)


def quantized_add(a, a_scale, a_zero_point, b, b_scale, out_scale, out_zero_point, dtype=np.uint8):
    """((A - AZP) * AS + B * BS) / OS in float32, rounded, plus OZP, clamped."""
    a_value = (np.asarray(a, np.int32) - a_zero_point).astype(np.float32) * f32(a_scale)
    b_value = np.asarray(b, np.int32).astype(np.float32) * f32(b_scale)
    return np.clip(np.rint((a_value + b_value) / f32(out_scale)) + out_zero_point, 0, 255).astype(dtype)


def dequantize(q, scale, zero_point):
    return (np.asarray(q, np.int32) - zero_point).astype(np.float32) * f32(scale)


# -- every example, against an independent computation ---------------------------------------------------


def test_add(tmp_path):
    values, folder = run_example("add", tmp_path)
    a = f32([1, 2.5, -3, 0.1, np.inf, 65504]).astype(np.float16)
    b = np.fromfile(EXAMPLES / "data" / "add_b.bin", "<f2")
    expected = (a.astype(np.float32) + b.astype(np.float32)).astype(np.float16)
    assert_same(values["Out"].astype(np.float16), expected)
    assert_same(np.load(folder / "add_out.npy"), expected.reshape(2, 3))


def test_add1_in_place_on_a_slice(tmp_path):
    values, _ = run_example("add1", tmp_path)
    data = f32([9, 9, -4, -1, 2, 5, 9, 9])
    data[2:6] = leaky_relu_or_elu(data[2:6] + f32([-2, -1, 0, 1]), 0.1, elu=False)
    assert_same(values["Data"].astype(np.float32), data)


def test_add1_with_a_fused_elu(tmp_path):
    result = dmlq_cli("run", str(EXAMPLES / "add1_elu.json"), cwd=tmp_path)
    expected = leaky_relu_or_elu(
        f32([1, 2, 3, -1, -2, 0.25]) + f32([5, 8, -5, -1, 0.5, -0.25]), 0.5, elu=True
    )
    assert_same(printed(result.stdout)["Out"].astype(np.float32), expected)
    assert_same(np.load(tmp_path / "add1_elu_out.npy"), expected.reshape(2, 3))
    assert result.stdout == (
        "Resource 'Out': 6, 10, -0.43233237, -0.43233237, -0.38843492, 0\n"
        "Resource 'Out' written to 'add1_elu_out.npy'\n"
    )


def test_quantize_linear_per_row(tmp_path):
    values, folder = run_example("quantize_linear", tmp_path)
    x = f32(np.arange(8) * 0.5 - 1.5).reshape(2, 4)
    expected = quantize(x, [[0.25], [0.5]], np.array([[0], [-10]]), -128, 127, np.int8)
    assert_same(values["Q"].astype(np.int8), expected.reshape(-1))
    assert_same(np.load(folder / "quantize_linear_out.npy"), expected)


def test_dequantize_linear_from_npy(tmp_path):
    values, folder = run_example("dequantize_linear", tmp_path)
    q = np.load(EXAMPLES / "data" / "dequantize_input.npy")
    expected = dequantize(q, [0.5, 0.25, 0.125], 128)
    assert_same(values["Out"].astype(np.float32), expected.reshape(-1))
    assert_same(np.load(folder / "dequantize_linear_out.npy"), expected)


def test_quantized_linear_add(tmp_path):
    values, _ = run_example("quantized_linear_add", tmp_path)
    a = [0, 10, 100, 128, 129, 200, 250, 255]
    b = [0, 1, 4, 3, 50, 100, 140, 255]
    expected = quantized_add(a, 0.1, 128, b, 0.05, 0.2, 100)
    assert_same(values["Out"].astype(np.uint8), expected)


def test_quantized_linear_matrix_multiply_with_owned_weights(tmp_path):
    values, folder = run_example("quantized_linear_matrix_multiply", tmp_path)
    a = np.array([[130, 120, 140], [100, 160, 128]])
    b = np.array([[1, -2, 3, -4], [5, 6, -7, 8], [-9, 10, 11, -12]])
    expected = requantize_product(a, 0.5, 128, b, [0.25, 0.5, 1, 2], 0.75, 100)
    assert_same(values["Out"].astype(np.uint8), expected.reshape(-1))
    assert_same(np.load(folder / "quantized_linear_matrix_multiply_out.npy"), expected)


def test_quantized_linear_layer(tmp_path):
    values, folder = run_example("quantized_linear_layer", tmp_path)
    x = f32([[0.5, -1.2, 2.0, 0.3], [1.5, 0.7, -0.4, -2.1]])
    w = np.array([[10, -20, 30], [-5, 15, 25], [40, 0, -10], [7, -8, 9]])
    w_scale = [0.01, 0.02, 0.015]
    y_scale, y_zero_point = np.array([[0.008], [0.005]]), np.array([[128], [60]])
    z_scale, z_zero_point = np.array([[0.01], [0.005]]), np.array([[100], [60]])
    xq = quantize(x, 0.02, 128, 0, 255, np.uint8)
    yq = requantize_product(xq, 0.02, 128, w, w_scale, y_scale, y_zero_point)
    zq = np.vstack([
        quantized_add(yq[row], y_scale[row, 0], y_zero_point[row, 0], [50, -25, 10], 0.002,
                      z_scale[row, 0], z_zero_point[row, 0])
        for row in range(2)
    ])  # fmt: skip
    out = dequantize(zq, z_scale, z_zero_point)
    for name, expected in {"xq": xq, "yq": yq, "zq": zq, "out": out}.items():
        assert_same(values[name].astype(expected.dtype), expected.reshape(-1))
    assert_same(np.load(folder / "quantized_linear_layer_out.npy"), out)
    float_layer = x.astype(np.float64) @ (w * np.float64(w_scale)) + np.float64([0.1, -0.05, 0.02])
    np.testing.assert_allclose(out, float_layer, atol=0.03)  # within the quantization steps


def blocks(values, block: int) -> np.ndarray:
    """Per-block values repeated over their blocks along the last axis."""
    return np.repeat(np.asarray(values), block, axis=-1)


def test_dequantize_int4_blockwise(tmp_path):
    values, folder = run_example("dequantize_int4_blockwise", tmp_path)
    w = np.array([[-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7],
                  [7, 7, 3, 0, -1, -5, -8, 2, 1, 1, 1, 1, -2, -2, -2, -2]])  # fmt: skip
    scale = blocks(np.float16([[0.5, 0.25], [0.125, 2]]), 8).astype(np.float32)
    expected = ((w - blocks([[0, 1], [-2, 7]], 8)) * scale).astype(np.float16)
    assert_same(values["Out"].astype(np.float16), expected.reshape(-1))
    assert_same(np.load(folder / "dequantize_int4_blockwise_out.npy"), expected)


def test_quantize_int4_blockwise(tmp_path):
    values, folder = run_example("quantize_int4_blockwise", tmp_path)
    x = f32(np.arange(16) * 0.25).reshape(2, 8)
    expected = quantize(x, blocks([[0.25, 0.5], [0.5, 1]], 4), 8, 0, 15, np.uint8)  # SCALE alone: midpoint 8
    assert_same(values["Q"].astype(np.uint8), expected.reshape(-1))
    assert_same(np.load(folder / "quantize_int4_blockwise_out.npy"), expected)  # values, one per byte


def correlate_loops(x, w, strides, pads) -> np.ndarray:
    """A 2-D cross-correlation of int64 {C, H, W} with {M, C, kH, kW}, zero padding, by loops."""
    x = np.pad(x, [(0, 0), (pads, pads), (pads, pads)])
    m, _, kh, kw = w.shape
    rows, cols = (x.shape[1] - kh) // strides + 1, (x.shape[2] - kw) // strides + 1
    out = np.zeros((m, rows, cols), np.int64)
    for o, i, j in np.ndindex(*out.shape):
        out[o, i, j] = np.sum(x[:, i * strides : i * strides + kh, j * strides : j * strides + kw] * w[o])
    return out


def test_convolution_integer(tmp_path):
    values, folder = run_example("convolution_integer", tmp_path)
    image = np.arange(10, 170, 10).reshape(1, 4, 4) - 80
    filters = np.array([[1, 0, -1, 2, 0, -2, 1, 0, -1], [1, 2, 1, 0, 0, 0, -1, -2, -1]]).reshape(2, 1, 3, 3)
    expected = correlate_loops(image, filters - np.array([0, 1]).reshape(2, 1, 1, 1), 2, 1).astype(np.int32)
    assert_same(values["Out"].astype(np.int32), expected.reshape(-1))
    assert_same(np.load(folder / "convolution_integer_out.npy"), expected.reshape(1, 2, 2, 2))


def test_quantized_linear_convolution_with_owned_filters(tmp_path):
    values, folder = run_example("quantized_linear_convolution", tmp_path)
    model = load_model(EXAMPLES / "quantized_linear_convolution.json")
    image = model.resources["Image"].values(32).astype(np.int64).reshape(2, 4, 4) - 128
    filters = model.resources["Filters"].values(36).astype(np.int64).reshape(2, 2, 3, 3)
    sums = correlate_loops(image, filters, 2, 1) + np.array([500, -800]).reshape(2, 1, 1)
    real_scale = f32(0.02).astype(np.float64) * f32([0.01, 0.005]).astype(np.float64)
    value = sums * real_scale.reshape(2, 1, 1) / f32(0.01).astype(np.float64)
    expected = np.clip(np.rint(value) - 10, -128, 127).astype(np.int8)
    assert_same(values["Out"].astype(np.int8), expected.reshape(-1))
    assert_same(np.load(folder / "quantized_linear_convolution_out.npy"), expected.reshape(1, 2, 2, 2))


def test_matrix_multiply_integer(tmp_path):
    values, folder = run_example("matrix_multiply_integer", tmp_path)
    a = np.array([[130, 120, 140, 100], [255, 0, 128, 64]]) - 128
    b = np.array([[1, -2, 3], [-4, 5, 6], [-7, 8, -9], [127, -128, 0]]) - np.array([0, 1, -1])
    expected = (a @ b).astype(np.int32)
    assert_same(values["Out"].astype(np.int32), expected.reshape(-1))
    assert_same(np.load(folder / "matrix_multiply_integer_out.npy"), expected)


def test_matrix_multiply_integer_to_float(tmp_path):
    values, folder = run_example("matrix_multiply_integer_to_float", tmp_path)
    a = np.array([[10, 200, 128], [0, 255, 77]]) - 128
    b = np.array([[1, 250], [30, 100], [128, 129]]) - np.array([100, 150])
    scale = f32(0.05).astype(np.float64) * f32([0.02, 0.01]).astype(np.float64)
    expected = ((a @ b) * scale).astype(np.float32) + f32([0.5, -0.25])
    assert_same(values["Out"].astype(np.float32), expected.reshape(-1))
    assert_same(np.load(folder / "matrix_multiply_integer_to_float_out.npy"), expected)


def test_dynamic_quantize_linear(tmp_path):
    values, folder = run_example("dynamic_quantize_linear", tmp_path)
    x = f32([0, 2, -3, -2.5, 1.34, 0.5])
    scale = f32(2 - -3) / np.float32(255)  # the range, widened to include 0, over 255
    zero_point = np.rint(np.float32(0) - np.float32(-3) / scale)
    expected = quantize(x, scale, zero_point, 0, 255, np.uint8)
    assert_same(values["Y"].astype(np.uint8), expected)
    assert_same(values["Scale"].astype(np.float32), np.float32([scale]))
    assert values["ZeroPoint"].tolist() == [zero_point] == [153]
    assert_same(np.load(folder / "dynamic_quantize_linear_out.npy"), expected.reshape(2, 3))


def test_quantized_linear_average_pooling(tmp_path):
    values, folder = run_example("quantized_linear_average_pooling", tmp_path)
    image = (
        np.array([10, 20, 30, 40, 50, 60, 70, 80, 90, 100, 110, 120, 130, 140, 150, 255]).reshape(4, 4) - 100
    )
    expected = np.empty((2, 2), np.int8)
    for i, j in np.ndindex(2, 2):
        window = image[max(2 * i - 1, 0) : 2 * i + 2, max(2 * j - 1, 0) : 2 * j + 2]  # the taps inside
        average = window.sum() * f32(0.1).astype(np.float64) / window.size
        expected[i, j] = np.clip(np.rint(average / f32(0.05).astype(np.float64)), -128, 127)
    assert_same(values["Out"].astype(np.int8), expected.reshape(-1))
    assert_same(np.load(folder / "quantized_linear_average_pooling_out.npy"), expected.reshape(1, 1, 2, 2))


def test_gemm_with_transposed_weights_and_a_fused_relu(tmp_path):
    values, folder = run_example("gemm", tmp_path)
    a = f32([[1, -2, 0.5], [3, 0, -1]])
    weights = f32([[0.5, 1, -1], [2, 0, 0.25], [-0.5, 1, 1]])
    expected = np.maximum(a.astype(np.float64) @ weights.T.astype(np.float64) + f32([0.1, -0.2, 0.3]), 0)
    assert_same(values["Out"].astype(np.float32), expected.astype(np.float32).reshape(-1))
    assert_same(np.load(folder / "gemm_out.npy"), expected.astype(np.float32))


def test_every_example_is_tested_and_every_operator_has_one():
    tested = {"add", "add1", "add1_elu", "quantize_linear", "dequantize_linear", "quantized_linear_add",
              "quantized_linear_matrix_multiply", "quantized_linear_layer", "dequantize_int4_blockwise",
              "quantize_int4_blockwise", "convolution_integer", "quantized_linear_convolution",
              "matrix_multiply_integer", "matrix_multiply_integer_to_float",
              "dynamic_quantize_linear", "quantized_linear_average_pooling", "gemm"}  # fmt: skip
    assert {path.stem for path in EXAMPLES.glob("*.json")} == tested
    types = {
        dispatchable.desc.TYPE_NAME
        for path in EXAMPLES.glob("*.json")
        for dispatchable in load_model(path).dispatchables.values()
    }
    assert types == {cls.TYPE_NAME for cls in dmlq.ops.OPERATORS}


# -- check ------------------------------------------------------------------------------------------------


def test_check_valid_everywhere_exits_0(tmp_path):
    result = dmlq_cli("check", str(EXAMPLES / "quantized_linear_layer.json"), cwd=tmp_path)
    assert result.returncode == 0
    assert result.stdout.splitlines() == [
        "quantize: ELEMENT_WISE_QUANTIZE_LINEAR is valid at 6_4 (lowest feature level: 3_0)",
        "matmul: QUANTIZED_LINEAR_MATRIX_MULTIPLY is valid at 6_4 (lowest feature level: 4_0)",
        "add_bias: ELEMENT_WISE_QUANTIZED_LINEAR_ADD is valid at 6_4 (lowest feature level: 4_0)",
        "dequantize: ELEMENT_WISE_DEQUANTIZE_LINEAR is valid at 6_4 (lowest feature level: 3_0)",
        "4 of 4 dispatchables valid at feature level 6_4",
    ]


def test_check_invalid_at_a_low_level_exits_1(tmp_path):
    model = str(EXAMPLES / "quantize_linear.json")
    result = dmlq_cli("check", model, "--feature-level", "1_0", cwd=tmp_path)
    assert result.returncode == 1
    assert result.stdout.splitlines() == [
        "quantize: ELEMENT_WISE_QUANTIZE_LINEAR is NOT valid at 1_0 (lowest feature level: 2_1)",
        "  dispatchables.quantize.desc.ZeroPointTensor: data type INT8 needs feature level 2_1"
        " (device is 1_0)",
        "0 of 1 dispatchables valid at feature level 1_0",
    ]
    assert dmlq_cli("check", model, "-l", "2.1", cwd=tmp_path).returncode == 0


def test_check_reports_a_dispatch_that_run_would_refuse(tmp_path):
    model = base_model()
    model["commands"][0]["bindings"]["ATensor"] = {"name": "A", "elementCount": 3}
    (tmp_path / "model.json").write_text(json.dumps(model))
    result = dmlq_cli("check", "model.json", cwd=tmp_path)
    problem = (
        "commands[0].bindings.ATensor: buffer of 12 bytes is smaller than the 16 bytes its tensor "
        "addresses (device is 6_4)"
    )
    assert (result.returncode, result.stderr) == (1, "")
    assert result.stdout.splitlines()[1:] == [
        problem,
        "1 of 1 dispatchables valid at feature level 6_4",
        "1 dispatch command(s) cannot bind their resources",
    ]
    assert dmlq_cli("run", "model.json", cwd=tmp_path).stderr == f"dmlq: error: {problem}\n"


def test_a_scale_of_0_is_a_warning_from_check_and_run(tmp_path):
    text = (EXAMPLES / "quantize_linear.json").read_text()
    (tmp_path / "q.json").write_text(text.replace("[0.25, 0.5]", "[0.25, 0]"))
    checked, ran = (dmlq_cli(verb, "q.json", cwd=tmp_path) for verb in ("check", "run"))
    assert checked.returncode == 0 and ran.returncode == 0
    warning = checked.stderr
    assert warning.startswith("dmlq: warning: commands[0].bindings.ScaleTensor: a scale of 0, which DirectML")
    assert warning.count("\n") == 1 and ran.stderr == warning


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["check", "missing.json"], "dmlq: error: missing.json: no such file"),
        (["check", "bad.json"], "dmlq: error: malformed JSON: bad.json:1:"),
        (["check", "bad.json", "--feature-level", "9_9"], "dmlq check: error: argument --feature-level"),
        (["check"], "dmlq check: error: the following arguments are required: MODEL.json"),
    ],
)
def test_check_usage_and_file_errors_exit_2(tmp_path, args, message):
    (tmp_path / "bad.json").write_text("{]")
    result = dmlq_cli(*args, cwd=tmp_path)
    assert result.returncode == 2 and message in result.stderr and "Traceback" not in result.stderr


# -- errors: one line on stderr naming the JSON path, exit 2 -------------------------------------------------


def base_model() -> dict:
    tensor = {"DataType": "FLOAT32", "Sizes": [4]}
    return {
        "resources": {
            "A": {"initialValuesDataType": "FLOAT32", "initialValues": [1, 2, 3, 4]},
            "Out": {"initialValuesDataType": "FLOAT32", "initialValues": {"valueCount": 4, "value": 0}},
        },
        "dispatchables": {"add": {"type": "ELEMENT_WISE_ADD", "desc": {
            "ATensor": tensor, "BTensor": tensor, "OutputTensor": tensor}}},
        "commands": [{"type": "dispatch", "dispatchable": "add",
                      "bindings": {"ATensor": "A", "BTensor": "A", "OutputTensor": "Out"}}],
    }  # fmt: skip


def broken(edit) -> dict:
    model = base_model()
    edit(model)
    return model


ERRORS = {
    "unknown operator": (
        broken(lambda m: m["dispatchables"]["add"].update(type="ELEMENT_WISE_FROBNICATE")),
        "dispatchables.add.type: unknown operator (dmlq runs ELEMENT_WISE_QUANTIZE_LINEAR, ",
    ),
    "unknown field": (
        broken(
            lambda m: m["dispatchables"]["add"]["desc"].update(ATensor={"DataType": "FLOAT32", "Size": [4]})
        ),
        "dispatchables.add.desc.ATensor.Size: unknown field (expected Type, DataType, Sizes, ",
    ),
    "bad sizes": (
        broken(
            lambda m: m["dispatchables"]["add"]["desc"].update(ATensor={"DataType": "FLOAT32", "Sizes": 4})
        ),
        "dispatchables.add.desc.ATensor.Sizes: expected an array, not a number",
    ),
    "missing binding": (
        broken(lambda m: m["commands"][0]["bindings"].pop("BTensor")),
        "commands[0].bindings: missing binding for BTensor, which the desc declares",
    ),
    "buffer too small": (
        broken(lambda m: m["commands"][0]["bindings"].update(ATensor={"name": "A", "elementOffset": 2})),
        "commands[0].bindings.ATensor: buffer of 8 bytes is smaller than the 16 bytes its tensor addresses",
    ),
    "buffer beyond memory": (
        broken(lambda m: m["resources"]["Out"].update(sizeInBytes=2**40)),
        "resources.Out.sizeInBytes: a buffer of 1099511627776 bytes and the 16 bytes of initial values it is"
        " filled from need 1099511627792 bytes, more than the ",
    ),
    "hlsl dispatchable": (
        broken(lambda m: m["dispatchables"].update(add={"type": "hlsl", "sourcePath": "add.hlsl"})),
        "dispatchables.add.type: hlsl dispatchables are not supported by dmlq",
    ),
    "onnx dispatchable": (
        broken(lambda m: m["dispatchables"].update(add={"type": "onnx", "sourcePath": "m.onnx"})),
        "dispatchables.add.type: onnx dispatchables are not supported by dmlq",
    ),
    "image resource": (
        broken(lambda m: m["resources"]["A"].update(initialValues={"sourcePath": "cat.png"})),
        "resources.A.initialValues.sourcePath: image files are not supported by dmlq",
    ),
    "invalid at the level": (
        broken(lambda m: m.update(feature_level="2_1")),
        "dispatchables.add.desc.ATensor: dimension count 1 needs feature level 3_0 (device is 2_1)",
    ),
}


@pytest.mark.parametrize("kind", ERRORS)
def test_model_errors_are_one_line_with_the_json_path(tmp_path, kind):
    model, message = dict(ERRORS[kind][0]), ERRORS[kind][1]
    level = model.pop("feature_level", "6_4")
    (tmp_path / "model.json").write_text(json.dumps(model, indent=2))
    result = dmlq_cli("run", "model.json", "--feature-level", level, cwd=tmp_path)
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr.startswith("dmlq: error: " + message)
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        ("-8, -7, -6", "-9, -7, -6",
         "resources.W.initialValues[0]: expected an integer from -8 to 7, not -9"),
        ('"FLOAT16", "Sizes": [2, 2]', '"FLOAT16", "Sizes": [2, 3]',
         "dispatchables.dequantize.desc.QuantizationTensors[0]: Sizes [2, 3] must each divide input's "
         "[2, 16]"),
        ('["Scales", "ZeroPoints"]', '["Scales"]',
         "commands[0].bindings.QuantizationTensors: binds 1 resource(s); the desc's QuantizationTensors "
         "has 2 tensor(s)"),
        ('"DML_QUANTIZATION_TYPE_SCALE_ZERO_POINT"', '"ZERO_POINT"',
         "dispatchables.dequantize.desc.QuantizationType: unknown quantization type"),
    ],
    ids=["int4 value out of range", "blocks that do not divide", "one binding for two", "unknown type"],
)  # fmt: skip
def test_4_bit_model_errors_are_one_line_with_the_json_path(tmp_path, old, new, message):
    text = (EXAMPLES / "dequantize_int4_blockwise.json").read_text()
    assert old in text
    (tmp_path / "model.json").write_text(text.replace(old, new))
    result = dmlq_cli("run", "model.json", cwd=tmp_path)
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr.startswith("dmlq: error: " + message) and result.stderr.count("\n") == 1


def test_a_4_bit_model_below_6_3_names_the_level(tmp_path):
    result = dmlq_cli("run", str(EXAMPLES / "dequantize_int4_blockwise.json"), "-l", "6_2", cwd=tmp_path)
    assert (result.returncode, result.stderr) == (
        2, "dmlq: error: dispatchables.dequantize: operator needs feature level 6_3 (device is 6_2)\n"
    )  # fmt: skip


def test_run_error_for_a_missing_file_and_malformed_json(tmp_path):
    (tmp_path / "bad.json").write_text('{\n  "resources": {},\n  "commands": [1 2]\n}')
    missing = dmlq_cli("run", "missing.json", cwd=tmp_path)
    malformed = dmlq_cli("run", "bad.json", cwd=tmp_path)
    assert (missing.returncode, missing.stderr) == (2, "dmlq: error: missing.json: no such file\n")
    assert (malformed.returncode, malformed.stderr) == (
        2,
        "dmlq: error: malformed JSON: bad.json:3:18: Missing a comma or ']' after an array element\n",
    )


@pytest.mark.parametrize(
    ("text", "problem"),
    [("", "1:1: The document is empty"), ('{"A": 1, "A": 2}', ' duplicate member "A" in an object')],
    ids=["empty", "repeated member"],
)
def test_malformed_json_is_one_line_naming_the_file(tmp_path, text, problem):
    (tmp_path / "bad.json").write_text(text)
    result = dmlq_cli("run", "bad.json", cwd=tmp_path)
    assert (result.returncode, result.stderr) == (2, f"dmlq: error: malformed JSON: bad.json:{problem}\n")


def test_base_model_runs_at_a_level_that_accepts_it(tmp_path):
    model = broken(lambda m: m["commands"].append({"type": "print", "resource": "Out"}))
    (tmp_path / "model.json").write_text(json.dumps(model))
    result = dmlq_cli("run", "model.json", "--feature-level", "3_0", cwd=tmp_path)
    assert (result.returncode, result.stdout) == (0, "Resource 'Out': 2, 4, 6, 8\n")


def test_a_name_the_output_encoding_cannot_encode_is_printed_escaped(tmp_path):
    model = broken(lambda m: m.update(commands=[{"type": "print", "resource": "\u00e9"}]))
    model["resources"]["\u00e9"] = model["resources"].pop("A")
    (tmp_path / "model.json").write_text(json.dumps(model))
    result = dmlq_cli("run", "model.json", cwd=tmp_path, PYTHONIOENCODING="ascii")  # e.g. a legacy console
    assert (result.returncode, result.stdout, result.stderr) == (0, "Resource '\\xe9': 1, 2, 3, 4\n", "")


# -- ops, help, version ------------------------------------------------------------------------------------


def test_ops_lists_operators_and_activations(tmp_path):
    result = dmlq_cli("ops", cwd=tmp_path)
    rows = {line.split()[0]: line.split()[1:] for line in result.stdout.splitlines() if line.strip()}
    assert result.returncode == 0
    assert rows["DML_OPERATOR_QUANTIZED_LINEAR_MATRIX_MULTIPLY"] == ["2_1", "4_0"]
    assert rows["DML_OPERATOR_ELEMENT_WISE_QUANTIZED_LINEAR_ADD"] == ["4_0", "-"]
    assert rows["DML_OPERATOR_ACTIVATION_GELU"] == ["5_1", "-"]
    assert rows["DML_OPERATOR_ACTIVATION_LINEAR"] == ["1_0", "Alpha,", "Beta"]
    assert {f"DML_OPERATOR_{cls.TYPE_NAME}" for cls in dmlq.ops.OPERATORS} <= rows.keys()
    assert {f"DML_OPERATOR_{cls.TYPE_NAME}" for cls in dmlq.activations.ACTIVATIONS.values()} <= rows.keys()


@pytest.mark.parametrize("subcommand", [[], ["run"], ["check"], ["ops"], ["quantize"], ["dequantize"]])
def test_help(tmp_path, subcommand):
    result = dmlq_cli(*subcommand, "--help", cwd=tmp_path)
    assert result.returncode == 0
    assert result.stdout.startswith(" ".join(["usage: dmlq", *subcommand]))
    assert "options:" in result.stdout


def help_text(capsys, *subcommand: str) -> str:
    """``dmlq SUBCOMMAND --help`` as one line of words: what it says, not where a terminal wraps it."""
    with pytest.raises(SystemExit) as stop:
        main([*subcommand, "--help"])
    assert stop.value.code == 0
    return " ".join(capsys.readouterr().out.split())


def test_quantize_help_names_every_output_type(capsys):
    text = help_text(capsys, "quantize")
    assert "to uint8, int8, uint4 or int4 (4-bit values written one per byte)" in text
    assert "--dtype {uint8,int8,uint4,int4}" in text


@pytest.mark.parametrize(
    ("subcommand", "measured"), [("quantize", "input"), ("dequantize", "float32 output")]
)
def test_chunk_mb_help_names_the_side_it_measures(capsys, subcommand, measured):
    assert f"--chunk-mb N MiB of {measured} per chunk (default: 64)" in help_text(capsys, subcommand)


def test_run_help_lists_the_onnx_options(capsys):
    text = help_text(capsys, "run")
    assert (
        "options for an ONNX model (MODEL.onnx): --input NAME=FILE.npy, -i NAME=FILE.npy an input from a "
        ".npy file (repeat for each input) --output-dir DIR, -o DIR write each output to DIR/NAME.npy" in text
    )
    assert "--qdq-int8-allowed" in text and "--disable-quant-qdq" in text


@pytest.mark.parametrize(
    ("options", "named"),
    [
        (["--output-dir", "out"], "--output-dir"),
        (["--input", "x=x.npy", "--qdq-int8-allowed"], "--input, --qdq-int8-allowed"),
        (["--disable-quant-qdq"], "--disable-quant-qdq"),
    ],
)
def test_onnx_options_with_a_dxdispatch_model_are_one_line_exit_2(tmp_path, options, named):
    result = dmlq_cli("run", str(EXAMPLES / "add.json"), *options, cwd=tmp_path)
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == f"dmlq: error: {named}: for an ONNX model (MODEL.onnx) only\n"
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["frobnicate"], "dmlq: error: argument COMMAND: invalid choice: 'frobnicate'"),
        (["ops", "--bogus"], "dmlq: error: unrecognized arguments: --bogus"),
        (["run"], "dmlq run: error: the following arguments are required: MODEL.json"),
        (["check", "m.json", "-l", "9_9"],
         "dmlq check: error: argument --feature-level/-l: unknown feature level '9_9' (known: 1_0, "),
        (["quantize", "in.npy"], "dmlq quantize: error: the following arguments are required: OUT, --scale"),
        (["dequantize", "in.npy", "out.npy", "--scale", "x"], "dmlq dequantize: error: argument --scale: "),
    ],
)  # fmt: skip
def test_usage_errors_are_one_line(tmp_path, args, message):
    result = dmlq_cli(*args, cwd=tmp_path)
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr.startswith(message) and result.stderr.count("\n") == 1


def test_bare_dmlq_prints_its_usage(tmp_path):
    result = dmlq_cli(cwd=tmp_path)
    assert (result.returncode, result.stdout) == (2, "")
    usage, error = result.stderr.rstrip("\n").rsplit("\n", 1)
    assert (
        " ".join(usage.split()) == "usage: dmlq [-h] [--version] COMMAND ..."
    )  # wrapped on a narrow terminal
    assert error == "dmlq: error: a command is required; dmlq --help lists them"


@pytest.mark.parametrize("value", ["abc", "0", "-2"])
def test_a_bad_thread_count_in_the_environment_is_a_warning_line(tmp_path, value):
    result = dmlq_cli("--help", cwd=tmp_path, DMLQ_NUM_THREADS=value)
    assert result.returncode == 0 and result.stdout.startswith("usage: dmlq")
    assert result.stderr == (
        f"DMLQ_NUM_THREADS:0: RuntimeWarning: {value!r} is not a positive integer; using the default, "
        f"{dmlq.threads.available_cores()} threads\n"
    )


def started_writing(output: Path) -> bool:
    """A .npy output exists once the job computes; a Zarr array once its first chunk is written (chunk
    files are what Ctrl-C used to race with: the removal met chunks written after it began)."""
    return output.exists() if output.suffix == ".npy" else any((output / "c").glob("*"))


def heeding_ctrl_c() -> None:
    """SIGINT's default action in the child: a shell's background job (a suite started with &) ignores
    SIGINT, its children inherit that, and Python then never raises KeyboardInterrupt."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def zero_floats(count: int) -> np.ndarray:
    return np.zeros(count, np.float32)


def random_floats(count: int) -> np.ndarray:
    return np.random.default_rng(0).random(count, np.float32)


def random_bytes(count: int) -> np.ndarray:
    return np.random.default_rng(0).integers(0, 256, count, np.uint8)


# 2**24 values: thousands of tasks in 4 KiB chunks, hundreds of Zarr chunks in 256 KiB ones (random values:
# Zarr writes no chunk holding only its fill value, 0)
@pytest.mark.parametrize(
    ("command", "values", "target", "chunk_mb"),
    [
        ("quantize", zero_floats, "out.npy", "0.004"),
        ("quantize", random_floats, "out.zarr", "0.25"),
        ("dequantize", random_bytes, "out.zarr", "0.25"),
    ],
    ids=["quantize-npy", "quantize-zarr", "dequantize-zarr"],
)
def test_ctrl_c_during_a_job_is_one_line_exit_130_and_removes_the_output(
    tmp_path, command, values, target, chunk_mb
):
    if target.endswith(".zarr"):
        pytest.importorskip("zarr", reason="Zarr arrays need Python >= 3.11 and zarr >= 3")
    np.save(tmp_path / "in.npy", values(2**24))
    command = [console_script(), command, "in.npy", target, "--scale", "1", "--chunk-mb", chunk_mb]
    env = {**os.environ, "PYTHONPATH": str(SOURCE_ROOT)}
    job = subprocess.Popen(command, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True, preexec_fn=heeding_ctrl_c)  # fmt: skip
    deadline = time.monotonic() + 60
    while not started_writing(tmp_path / target) and job.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    job.send_signal(signal.SIGINT)
    stdout, stderr = job.communicate(timeout=60)
    assert (job.returncode, stdout, stderr) == (130, "", "dmlq: interrupted\n")
    assert not (tmp_path / target).exists()


COMMANDS_THAT_PRINT = [
    ["ops"],
    ["run", str(EXAMPLES / "add1_elu.json")],
    ["check", str(EXAMPLES / "add.json")],
]


@pytest.fixture(params=["buffered", "unbuffered"])
def output_buffering(request, monkeypatch):
    """dmlq's output block-buffered (as for any file or pipe) or written at once (PYTHONUNBUFFERED)."""
    if request.param == "buffered":
        monkeypatch.delenv("PYTHONUNBUFFERED", raising=False)
    else:
        monkeypatch.setenv("PYTHONUNBUFFERED", "1")


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full, a device that is always full")
@pytest.mark.parametrize("args", COMMANDS_THAT_PRINT, ids=["ops", "run", "check"])
def test_a_failing_standard_output_is_one_line_exit_2(tmp_path, args, output_buffering):
    with open("/dev/full", "w") as full:
        result = dmlq_cli(*args, cwd=tmp_path, stdout=full)
    assert (result.returncode, result.stderr) == (
        2,
        "dmlq: error: cannot write the output: No space left on device\n",
    )


@pytest.mark.parametrize("args", COMMANDS_THAT_PRINT, ids=["ops", "run", "check"])
def test_a_closed_pipe_ends_quietly(tmp_path, args, output_buffering):
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader left before dmlq writes, as `head` can in `dmlq ops | head -1`
    with os.fdopen(write_end, "w") as pipe:
        result = dmlq_cli(*args, cwd=tmp_path, stdout=pipe)
    assert (result.returncode, result.stderr) == (0, "")


@pytest.mark.parametrize("columns", ["40", "200"])
def test_version_names_the_kernels_in_use_on_one_line_at_any_width(tmp_path, columns):
    result = dmlq_cli("--version", cwd=tmp_path, DMLQ_NUM_THREADS="1", COLUMNS=columns)
    levels = ", ".join(available_levels())
    expected = f"dmlq {dmlq.__version__} (kernels: {_core.detected_level()} of {levels}; threads: 1)\n"
    assert (result.returncode, result.stdout) == (0, expected)


def test_python_m_dmlq_is_the_same_command_line(tmp_path):
    model = str(EXAMPLES / "add1_elu.json")
    result = dmlq_cli("run", model, cwd=tmp_path, program=(sys.executable, "-m", "dmlq"))
    assert (result.returncode, result.stdout) == (0, dmlq_cli("run", model, cwd=tmp_path).stdout)
