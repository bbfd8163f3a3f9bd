"""Per-call overhead: each NumPy-layer function on 16 elements against onnxruntime's ``session.run``.

    python benchmarks/small_calls.py [--samples 15] [--calls 1000]

Every function gets per-tensor parameters as 0-d NumPy arrays, the same arrays fed to a one-node
onnxruntime model (one thread, ``session.intra_op.allow_spinning = 0``, outputs allocated by
onnxruntime). The two contenders are timed interleaved, ``--samples`` bursts of ``--calls`` calls
each, after a short pause; the table shows medians in µs per call and dmlq / onnxruntime (≤ 1 is
the target).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import numpy as np
import onnxruntime as ort
from onnx import helper

import dmlq

ELEMENTS = 16
Call = Callable[[], object]


def session_run(nodes: list, feeds: dict[str, np.ndarray], output_dtype: type) -> Call:
    """``session.run`` of a model of ``nodes`` reading ``feeds`` and writing ``y``."""

    def info(name: str, dtype: np.dtype, shape: tuple[int, ...] | None) -> object:
        return helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(np.dtype(dtype)), shape)

    inputs = [info(name, array.dtype, array.shape) for name, array in feeds.items()]
    graph = helper.make_graph(nodes, "small", inputs, [info("y", output_dtype, None)])
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)]
    )
    model.ir_version = 10
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    run = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"]).run
    return lambda: run(None, feeds)


def contenders(rng: np.random.Generator) -> dict[str, tuple[Call, Call]]:
    """Per function: the dmlq call and the onnxruntime call on the same inputs."""
    x = rng.standard_normal(ELEMENTS, dtype=np.float32)
    a8, b8 = (rng.integers(0, 256, ELEMENTS, dtype=np.uint8) for _ in range(2))
    a = rng.integers(0, 256, (4, 4), dtype=np.uint8)
    b = rng.integers(-128, 128, (4, 4), dtype=np.int8)
    s, z, z8 = np.array(0.05, np.float32), np.array(128, np.uint8), np.array(0, np.int8)
    fa, fb = rng.standard_normal(ELEMENTS, dtype=np.float32), rng.standard_normal(ELEMENTS, dtype=np.float32)
    quantized = {"a": a8, "as": s, "az": z, "b": b8, "bs": s, "bz": z, "ys": s, "yz": z}
    matmul = {"a": a, "as": s, "az": z, "b": b, "bs": s, "bz": z8, "ys": s, "yz": z}
    node = helper.make_node
    return {
        "quantize_linear": (
            lambda: dmlq.quantize_linear(x, s, z),
            session_run([node("QuantizeLinear", ["x", "s", "z"], ["y"])], {"x": x, "s": s, "z": z}, np.uint8),
        ),
        "dequantize_linear": (
            lambda: dmlq.dequantize_linear(a8, s, z),
            session_run(
                [node("DequantizeLinear", ["q", "s", "z"], ["y"])], {"q": a8, "s": s, "z": z}, np.float32
            ),
        ),
        "add": (
            lambda: dmlq.add(fa, fb),
            session_run([node("Add", ["a", "b"], ["y"])], {"a": fa, "b": fb}, np.float32),
        ),
        "add (relu)": (
            lambda: dmlq.add(fa, fb, fused_activation="relu"),
            session_run(
                [node("Add", ["a", "b"], ["sum"]), node("Relu", ["sum"], ["y"])],
                {"a": fa, "b": fb},
                np.float32,
            ),
        ),
        "quantized_linear_add": (
            lambda: dmlq.quantized_linear_add(a8, s, z, b8, s, z, s, z),
            session_run(
                [node("QLinearAdd", list(quantized), ["y"], domain="com.microsoft")], quantized, np.uint8
            ),
        ),
        "quantized_linear_matrix_multiply 4×4": (
            lambda: dmlq.quantized_linear_matrix_multiply(a, s, z, b, s, z8, s, z),
            session_run([node("QLinearMatMul", list(matmul), ["y"])], matmul, np.uint8),
        ),
    }


def burst_us(call: Call, calls: int) -> float:
    """µs per call over one burst of ``calls`` calls, after a short pause."""
    time.sleep(0.002)
    start = time.perf_counter()
    for _ in range(calls):
        call()
    return (time.perf_counter() - start) / calls * 1e6


def measure(pair: tuple[Call, Call], samples: int, calls: int) -> tuple[float, float]:
    """Median µs per call of both contenders, their bursts interleaved (order alternating)."""
    times: tuple[list[float], list[float]] = ([], [])
    for call in pair:
        burst_us(call, calls // 10)  # warm-up: compile, caches
    for sample in range(samples):
        order = (0, 1) if sample % 2 == 0 else (1, 0)
        for index in order:
            times[index].append(burst_us(pair[index], calls))
    return statistics.median(times[0]), statistics.median(times[1])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=15)
    parser.add_argument("--calls", type=int, default=1000)
    args = parser.parse_args(argv)
    dmlq.set_num_threads(1)
    print(f"dmlq {dmlq.__version__}, CPU level {dmlq._core.get_level()}, onnxruntime {ort.__version__}, "
          f"{ELEMENTS} elements, medians of {args.samples} × {args.calls} calls\n")  # fmt: skip
    print("| function | dmlq µs | onnxruntime µs | dmlq / onnxruntime |")
    print("|---|---:|---:|---:|")
    for name, pair in contenders(np.random.default_rng(12)).items():
        ours, theirs = measure(pair, args.samples, args.calls)
        print(f"| {name} | {ours:.2f} | {theirs:.2f} | {ours / theirs:.2f} |", flush=True)


if __name__ == "__main__":
    main()
