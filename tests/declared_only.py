"""Use dmlq in a process that can import only what its declared distributions provide.

``python declared_only.py SCENARIO FOLDER`` reads a JSON list of the importable top-level modules
from stdin (the standard library's are always importable), makes every other import fail as a
missing distribution would, then runs SCENARIO (a function below) with FOLDER as its working
directory. Run by tests/test_dependencies.py. An import of a refused module by dmlq's own code is
an error even where dmlq catches the ImportError: the process exits 1 naming it.
"""

from __future__ import annotations

import contextlib
import importlib.abc
import io
import json
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


class RefuseUndeclared(importlib.abc.MetaPathFinder):
    """Raises ModuleNotFoundError for every top-level module outside ``allowed`` and the standard
    library, and remembers which of dmlq's modules asked for one."""

    def __init__(self, allowed: set[str]) -> None:
        self.allowed = allowed | set(sys.stdlib_module_names)
        self.refused_to_dmlq: list[str] = []

    def find_spec(self, fullname: str, path: object = None, target: object = None) -> None:
        if fullname.partition(".")[0] in self.allowed:
            return None  # the other finders find it, or not
        importer = _importer()
        if importer.partition(".")[0] == "dmlq":
            self.refused_to_dmlq.append(f"{importer} imports {fullname}")
        raise ModuleNotFoundError(f"No module named {fullname!r} (not a declared dependency)", name=fullname)


def _importer() -> str:
    """The module whose code runs the import: the first frame outside the import machinery."""
    frame = sys._getframe(2)
    while frame is not None and (
        frame.f_code.co_filename.startswith("<frozen") or "importlib" in frame.f_code.co_filename
    ):
        frame = frame.f_back
    return "" if frame is None else str(frame.f_globals.get("__name__", ""))


def numpy_layer_and_command_line() -> None:
    """Every function of ``dmlq.__all__`` (the NumPy layer, 4-bit included), the DirectML layer, and
    the command line on DxDispatch models."""
    import numpy as np

    import dmlq

    weights = np.int8([[1, -1], [2, 5]])
    int4 = dmlq.quantize_linear(np.float32([[0.5, -3, 9, 2]]), np.float32([[1, 0.5]]), dtype="int4",
                                axis=1, block_size=2)  # fmt: skip
    image = np.arange(18, dtype=np.uint8).reshape(1, 2, 3, 3)  # [N, C, H, W]
    filters = np.int8([[[[1]], [[-1]]], [[[2]], [[1]]]])  # two 1 x 1 filters
    calls: dict[str, Callable[[], object]] = {
        "quantize_linear": lambda: [
            dmlq.quantize_linear([0.5, 1.5, 2.5], 1.0),
            dmlq.quantize_linear(np.float32([-1, 1]), np.float32(0.5), np.int8(3)),
            dmlq.quantize_linear(np.float32([-1, 1]), 0.5, dtype="int4"),
            int4,
        ],
        "dequantize_linear": lambda: [
            dmlq.dequantize_linear(np.uint8([0, 128, 255]), 0.5, np.uint8(128)),
            dmlq.dequantize_linear(int4, np.float32([[1, 0.5]]), axis=1, block_size=2),
        ],
        "add": lambda: dmlq.add(
            [1.0, -3.0], [1.0, 1.0], fused_activation=dmlq.activations.LeakyRelu(alpha=0.1)
        ),
        "quantized_linear_add": lambda: dmlq.quantized_linear_add(
            np.uint8([10, 20]), 0.5, None, np.uint8([1, 3]), 1.0, None, 2.0, None
        ),
        "quantized_linear_matrix_multiply": lambda: dmlq.quantized_linear_matrix_multiply(
            np.uint8([[1, 2], [3, 4]]), 0.5, None, weights, 1.0, None, 0.5, None
        ),
        "pack_matrix_multiply_b": lambda: dmlq.quantized_linear_matrix_multiply(
            np.uint8([[1, 2], [3, 4]]),
            0.5,
            None,
            dmlq.pack_matrix_multiply_b(weights, [1.0, 0.5]),
            None,
            None,
            1.0,
            None,
        ),  # fmt: skip
        "quantized_linear_convolution": lambda: dmlq.quantized_linear_convolution(
            image,
            0.5,
            None,
            filters,
            np.float32([1, 0.5]).reshape(2, 1, 1, 1),
            None,
            [[[3]], [[-3]]],
            1.0,
            None,
            start_padding=[1, 1],
        ),
        "convolution_integer": lambda: dmlq.convolution_integer(
            image[:, :, 0], np.uint8(1), filters[:, :, 0], None, strides=[2]
        ),
        "quantized_linear_average_pooling": lambda: dmlq.quantized_linear_average_pooling(
            image, 0.5, None, 0.25, np.uint8(3), window_size=[2, 2], include_padding=True
        ),
        "matrix_multiply_integer": lambda: dmlq.matrix_multiply_integer(
            np.uint8([[1, 2], [3, 4]]), np.uint8([[1], [2]]), weights, None
        ),
        "matrix_multiply_integer_to_float": lambda: dmlq.matrix_multiply_integer_to_float(
            np.int16([[1, 2], [3, 4]]), 0.5, None, np.int16([[1], [-1]]), np.float16(0.25), None
        ),
        "dynamic_quantize_linear": lambda: dmlq.dynamic_quantize_linear([0.0, 2.0, -3.0], dtype="int8"),
        "gemm": lambda: dmlq.gemm(np.float32([[1, 2]]), np.float32([[3], [4]]), 1.0, fused_activation="relu"),
        "pack_int4": lambda: dmlq.pack_int4(int4),
        "unpack_int4": lambda: dmlq.unpack_int4(dmlq.pack_int4(int4), int4.shape, int4.dtype),
        "get_num_threads": dmlq.get_num_threads,
        "set_num_threads": lambda: dmlq.set_num_threads(1),
        "calc_buffer_tensor_size": lambda: dmlq.calc_buffer_tensor_size(
            dmlq.TensorDesc(dmlq.DataType.INT4, [4, 64])
        ),
    }
    functions = {name for name in dmlq.__all__ if _is_function(getattr(dmlq, name))}
    if set(calls) != functions:
        raise AssertionError(f"dmlq.__all__'s functions not called here: {sorted(functions - set(calls))}")
    for call in calls.values():
        call()
    _directml_layer()
    _command_line(["ops"], ["--version"], ["check", EXAMPLES / "add.json"])
    for example in ("quantized_linear_layer", "quantize_int4_blockwise", "dequantize_int4_blockwise"):
        _command_line(["run", EXAMPLES / f"{example}.json"])
        assert Path(f"{example}_out.npy").exists()


def _is_function(value: object) -> bool:
    return callable(value) and not isinstance(value, type)


def _directml_layer() -> None:
    import numpy as np

    from dmlq import DataType, Device, TensorDesc, ops

    x = TensorDesc(DataType.FLOAT32, sizes=[1, 1, 2, 3])
    s = TensorDesc(DataType.FLOAT32, sizes=[1, 1, 2, 3], strides=[0, 0, 0, 0])
    desc = ops.ElementWiseQuantizeLinear(input=x, scale=s, zero_point=None,
                                         output=TensorDesc(DataType.UINT8, sizes=[1, 1, 2, 3]))  # fmt: skip
    y = np.zeros(6, np.uint8)
    Device().compile_operator(desc).execute(inputs=[np.float32([0, 1, 2, 3, 4, 5]), np.float32([2]), None],
                                            outputs=[y])  # fmt: skip
    assert y.tolist() == [0, 0, 1, 2, 2, 2]


def _command_line(*commands: Sequence[object]) -> None:
    """Each command through ``dmlq.cli.main`` in this process, its output kept from the test's."""
    from dmlq.cli import main

    for command in commands:
        with contextlib.redirect_stdout(io.StringIO()):
            try:
                status = main([str(arg) for arg in command])
            except SystemExit as stop:  # --version, as argparse ends it
                status = stop.code
        if status != 0:
            raise AssertionError(f"dmlq {' '.join(map(str, command))}: exit status {status}")


def onnx_front_end() -> None:
    """dmlq.onnx's load, check, run and compare on a small model, and the command line on it."""
    import numpy as np

    import dmlq.onnx

    model = dmlq.onnx.load(EXAMPLES / "onnx" / "mlp_qdq.onnx")
    assert dmlq.onnx.check(model, feature_level="4_0")
    x = {name: np.zeros(shape, np.float32) for name, shape in _input_shapes(model).items()}
    assert dmlq.onnx.run(model, x, feature_level="4_0")
    dmlq.onnx.compare(model, x, seed=0)
    _command_line(
        ["check", EXAMPLES / "onnx" / "mlp_qdq.onnx"], ["compare", EXAMPLES / "onnx" / "mlp_qdq.onnx"]
    )


def _input_shapes(model: object) -> dict[str, tuple[int, ...]]:
    from dmlq.onnx import comparing

    return {name: value.shape for name, value in comparing.random_inputs(model, 0, model.input_names).items()}


def dask_front_end() -> None:
    """dmlq.dask's five functions, and dmlq quantize / dequantize (Zarr where zarr is declared)."""
    import dask.array as da
    import numpy as np

    import dmlq.dask

    x = da.from_array(np.float32([[0.5, 1.5, 2.5], [-1.0, 1.0, 4.0]]), chunks=(1, 2))
    q = dmlq.dask.quantize_linear(x, [[1.0], [0.5]], np.int8(0))
    dmlq.dask.dequantize_linear(q, 0.5).compute()
    dmlq.dask.add(x, x, fused_activation="relu").compute()
    dmlq.dask.quantized_linear_add(q, 0.5, None, q, 0.5, None, 1.0, None).compute()
    dmlq.dask.quantized_linear_matrix_multiply(q, 0.5, None, q.T, 1.0, None, 2.0, np.int8(0)).compute()
    np.save("x.npy", np.float32([[0.5, 1.5], [-1.0, 4.0]]))
    try:
        import zarr  # noqa: F401  (declared for Pythons from 3.11 on)

        quantized = "q.zarr"
    except ImportError:
        quantized = "q.npy"
    _command_line(["quantize", "x.npy", quantized, "--scale", "0.5", "--dtype", "int8"],
                  ["dequantize", quantized, "y.npy", "--scale", "0.5"])  # fmt: skip
    assert np.load("y.npy").tolist() == [[0.5, 1.5], [-1.0, 4.0]]


SCENARIOS = {function.__name__: function for function in (numpy_layer_and_command_line, onnx_front_end,
                                                          dask_front_end)}  # fmt: skip


def main(scenario: str, folder: str) -> int:
    finder = RefuseUndeclared(set(json.load(sys.stdin)))
    sys.meta_path.insert(0, finder)
    os.chdir(folder)
    SCENARIOS[scenario]()
    if finder.refused_to_dmlq:
        print("\n".join(finder.refused_to_dmlq), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
