"""Blockwise 4-bit benchmark: a 4096 x 11008 int4 weight, blocks of 32 and 128 along its rows.

    python benchmarks/int4_bench.py [--runs N] [--rows R] [--cols C]

Dequantization to float32 and float16 and float32 -> int4 quantization, each timed four ways:
dmlq (a compiled DirectML-layer operator on packed buffers), onnxruntime's DequantizeLinear /
QuantizeLinear (opset 21, CPU provider), a NumPy route (unpack, repeat the scales, multiply; or
divide, round, clip, pack), and a plain copy of the output's bytes (the memory limit). Prints
medians and the ratios ``onnxruntime / dmlq`` (target >= 1.5) and ``dmlq / copy`` (target <= 1.5).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

import ml_dtypes  # noqa: E402
import numpy as np  # noqa: E402

import dmlq  # noqa: E402
from dmlq import DataType, Device, QuantizationType, TensorDesc, ops  # noqa: E402


def median_seconds(function: Callable[[], object], runs: int) -> float:
    function()  # warm up: first touch of the output pages, caches
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def onnx_session(op: str, shape, block: int, in_type, out_type, weight=None):
    """An onnxruntime session of one opset-21 (De)QuantizeLinear, the int4 weight as an initializer."""
    import onnxruntime as ort
    from onnx import TensorProto, helper

    blocks = (shape[0], shape[1] // block)
    scale_type = TensorProto.FLOAT16 if out_type == TensorProto.FLOAT16 else TensorProto.FLOAT
    inputs = [helper.make_tensor_value_info("scale", scale_type, blocks)]
    initializers = []
    if weight is None:
        inputs.insert(0, helper.make_tensor_value_info("x", in_type, shape))
    else:
        initializers.append(helper.make_tensor("x", in_type, shape, weight.tobytes(), raw=True))
    extra = {"output_dtype": out_type} if op == "QuantizeLinear" else {}
    node = helper.make_node(op, ["x", "scale"], ["y"], axis=1, block_size=block, **extra)
    graph = helper.make_graph([node], op, inputs, [helper.make_tensor_value_info("y", out_type, shape)],
                              initializers)  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


def dequantize_rows(shape, block: int, float_type, runs: int, rng) -> dict[str, float]:
    from onnx import TensorProto

    q = rng.integers(-8, 8, shape).astype(ml_dtypes.int4)
    packed = dmlq.pack_int4(q)
    scale = rng.uniform(0.01, 1.0, (shape[0], shape[1] // block)).astype(float_type)
    out = np.empty(shape, float_type)
    data_type = DataType.from_dtype(float_type)
    desc = ops.Dequantize(input=TensorDesc(DataType.INT4, shape), quantization_type=QuantizationType.SCALE,
                          quantization_tensors=[TensorDesc(data_type, scale.shape)],
                          output=TensorDesc(data_type, shape))  # fmt: skip
    operator = Device().compile_operator(desc)
    onnx_out = TensorProto.FLOAT16 if float_type == np.float16 else TensorProto.FLOAT
    session = onnx_session("DequantizeLinear", shape, block, TensorProto.INT4, onnx_out, packed)
    binding = session.io_binding()
    binding.bind_cpu_input("scale", scale)
    ort_out = np.empty(shape, float_type)
    binding.bind_output("y", "cpu", 0, float_type, shape, ort_out.ctypes.data)

    def numpy_route() -> np.ndarray:
        values = dmlq.unpack_int4(packed, shape, ml_dtypes.int4).astype(np.float32)
        return (values.reshape(shape[0], -1, block) * scale.astype(np.float32)[:, :, None]).astype(float_type)

    copy = np.empty_like(out)
    operator.execute([packed, scale], [out])
    session.run_with_iobinding(binding)
    assert np.array_equal(out, ort_out.reshape(shape)), "onnxruntime and dmlq differ"
    return {
        "dmlq": median_seconds(lambda: operator.execute([packed, scale], [out]), runs),
        "onnxruntime": median_seconds(lambda: session.run_with_iobinding(binding), runs),
        "numpy": median_seconds(numpy_route, max(3, runs // 4)),
        "copy": median_seconds(lambda: np.copyto(copy, out), runs),
    }


def quantize_rows(shape, block: int, runs: int, rng) -> dict[str, float]:
    from onnx import TensorProto

    x = rng.normal(size=shape).astype(np.float32)
    scale = rng.uniform(0.1, 1.0, (shape[0], shape[1] // block)).astype(np.float32)
    packed = np.empty((shape[0] * shape[1] + 1) // 2, np.uint8)
    desc = ops.Quantize(input=TensorDesc(DataType.FLOAT32, shape), quantization_type=QuantizationType.SCALE,
                        quantization_tensors=[TensorDesc(DataType.FLOAT32, scale.shape)],
                        output=TensorDesc(DataType.INT4, shape))  # fmt: skip
    operator = Device().compile_operator(desc)
    session = onnx_session("QuantizeLinear", shape, block, TensorProto.FLOAT, TensorProto.INT4)
    binding = session.io_binding()
    binding.bind_cpu_input("x", x)
    binding.bind_cpu_input("scale", scale)
    binding.bind_output("y", "cpu")  # onnxruntime's Python binding cannot hand int4 to NumPy

    def numpy_route() -> np.ndarray:
        quotient = x.reshape(shape[0], -1, block) / scale[:, :, None]
        return dmlq.pack_int4(np.clip(np.rint(quotient), -8, 7).astype(ml_dtypes.int4))

    copy = np.empty_like(packed)
    return {
        "dmlq": median_seconds(lambda: operator.execute([x, scale], [packed]), runs),
        "onnxruntime": median_seconds(lambda: session.run_with_iobinding(binding), runs),
        "numpy": median_seconds(numpy_route, max(3, runs // 4)),
        "copy": median_seconds(lambda: np.copyto(copy, packed), runs),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--rows", type=int, default=4096)
    parser.add_argument("--cols", type=int, default=11008)
    args = parser.parse_args()
    shape, rng = (args.rows, args.cols), np.random.default_rng(0)
    print(f"{shape[0]} x {shape[1]} int4, {dmlq.get_num_threads()} threads, level {dmlq._core.get_level()}")
    print("| case | dmlq ms | onnxruntime ms | NumPy ms | copy ms | ort / dmlq | dmlq / copy |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    cases = [(f"dequantize block {b} -> {np.dtype(t).name}",
              lambda b=b, t=t: dequantize_rows(shape, b, t, args.runs, rng))
             for b in (32, 128) for t in (np.float32, np.float16)]  # fmt: skip
    cases += [(f"quantize float32 -> int4 block {b}", lambda b=b: quantize_rows(shape, b, args.runs, rng))
              for b in (32, 128)]  # fmt: skip
    for name, run in cases:
        t = run()
        ratios = f"{t['onnxruntime'] / t['dmlq']:.2f} | {t['dmlq'] / t['copy']:.2f}"
        print(f"| {name} | {t['dmlq'] * 1e3:.2f} | {t['onnxruntime'] * 1e3:.2f} | {t['numpy'] * 1e3:.1f} "
              f"| {t['copy'] * 1e3:.2f} | {ratios} |")  # fmt: skip


if __name__ == "__main__":
    main()
