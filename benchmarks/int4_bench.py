"""Blockwise 4-bit benchmark: a 4096 x 11008 int4 weight, blocks of 32 and 128 along its rows.

    python benchmarks/int4_bench.py [--runs N] [--rows R] [--cols C] [--threads 1,2] [--cases quantize]
                                    [--level portable]

Dequantization to float32 and float16 and float32 -> int4 quantization, each timed four ways:
dmlq (a compiled DirectML-layer operator on packed buffers), onnxruntime's DequantizeLinear /
QuantizeLinear (opset 21, CPU provider, the same thread count as dmlq), a NumPy route (unpack, repeat
the scales, multiply; or divide, round, clip, pack), and plain copies of the output's and the input's
bytes (the memory limit: the bytes written, the bytes read). dmlq, onnxruntime and the copies are
interleaved, one call each per round in an order rotated every round. Prints medians and the ratios
``onnxruntime / dmlq`` (target >= 1.5), ``dmlq / copy out`` (target <= 1.5) and ``dmlq / copy in``.
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
    return interleaved_medians({"f": function}, runs)["f"]


def interleaved_medians(contenders: dict[str, Callable[[], object]], runs: int) -> dict[str, float]:
    """Each contender's median time over ``runs`` rounds of one call each, the order rotated per round."""
    for function in contenders.values():
        function()  # warm up: first touch of the output pages, caches
    names = list(contenders)
    times: dict[str, list[float]] = {name: [] for name in names}
    for round_ in range(runs):
        for name in names[round_ % len(names) :] + names[: round_ % len(names)]:
            start = time.perf_counter()
            contenders[name]()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(samples) for name, samples in times.items()}


def onnx_session(op: str, shape, block: int, in_type, out_type, threads: int, weight=None):
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
    options = ort.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def dequantize_rows(shape, block: int, float_type, runs: int, threads: int, rng) -> dict[str, float]:
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
    session = onnx_session("DequantizeLinear", shape, block, TensorProto.INT4, onnx_out, threads, packed)
    binding = session.io_binding()
    binding.bind_cpu_input("scale", scale)
    ort_out = np.empty(shape, float_type)
    binding.bind_output("y", "cpu", 0, float_type, shape, ort_out.ctypes.data)

    def numpy_route() -> np.ndarray:
        values = dmlq.unpack_int4(packed, shape, ml_dtypes.int4).astype(np.float32)
        return (values.reshape(shape[0], -1, block) * scale.astype(np.float32)[:, :, None]).astype(float_type)

    operator.execute([packed, scale], [out])
    session.run_with_iobinding(binding)
    assert np.array_equal(out, ort_out.reshape(shape)), "onnxruntime and dmlq differ"
    return timed(
        lambda: operator.execute([packed, scale], [out]),
        lambda: session.run_with_iobinding(binding),
        numpy_route,
        packed,
        out,
        runs,
    )


def quantize_rows(shape, block: int, runs: int, threads: int, rng) -> dict[str, float]:
    from onnx import TensorProto

    x = rng.normal(size=shape).astype(np.float32)
    scale = rng.uniform(0.1, 1.0, (shape[0], shape[1] // block)).astype(np.float32)
    packed = np.empty((shape[0] * shape[1] + 1) // 2, np.uint8)
    desc = ops.Quantize(input=TensorDesc(DataType.FLOAT32, shape), quantization_type=QuantizationType.SCALE,
                        quantization_tensors=[TensorDesc(DataType.FLOAT32, scale.shape)],
                        output=TensorDesc(DataType.INT4, shape))  # fmt: skip
    operator = Device().compile_operator(desc)
    session = onnx_session("QuantizeLinear", shape, block, TensorProto.FLOAT, TensorProto.INT4, threads)
    binding = session.io_binding()
    binding.bind_cpu_input("x", x)
    binding.bind_cpu_input("scale", scale)
    binding.bind_output("y", "cpu")  # onnxruntime's Python binding cannot hand int4 to NumPy

    def numpy_route() -> np.ndarray:
        quotient = x.reshape(shape[0], -1, block) / scale[:, :, None]
        return dmlq.pack_int4(np.clip(np.rint(quotient), -8, 7).astype(ml_dtypes.int4))

    return timed(
        lambda: operator.execute([x, scale], [packed]),
        lambda: session.run_with_iobinding(binding),
        numpy_route,
        x,
        packed,
        runs,
    )


def timed(dmlq_call: Callable[[], object], onnxruntime_call: Callable[[], object],
          numpy_route: Callable[[], object], source: np.ndarray, result: np.ndarray,
          runs: int) -> dict[str, float]:  # fmt: skip
    """Median seconds of each contender, interleaved, beside plain copies of the result's and the
    source's bytes (the NumPy route, much slower, timed apart)."""
    copy_out, copy_in = np.empty_like(result), np.empty_like(source)
    contenders = {
        "dmlq": dmlq_call,
        "onnxruntime": onnxruntime_call,
        "copy out": lambda: np.copyto(copy_out, result),
        "copy in": lambda: np.copyto(copy_in, source),
    }
    return {**interleaved_medians(contenders, runs), "numpy": median_seconds(numpy_route, max(3, runs // 4))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--rows", type=int, default=4096)
    parser.add_argument("--cols", type=int, default=11008)
    parser.add_argument("--threads", default="1,2", help="thread counts, comma-separated (default 1,2)")
    parser.add_argument("--cases", default="dequantize,quantize", help="dequantize, quantize or both")
    parser.add_argument("--level", help="the compiled core's CPU level (default: the best this CPU has)")
    args = parser.parse_args()
    if args.level:
        dmlq._core.set_level(args.level)
    shape, rng = (args.rows, args.cols), np.random.default_rng(0)
    print(f"{shape[0]} x {shape[1]} int4, level {dmlq._core.get_level()}")
    print("| case | threads | dmlq ms | onnxruntime ms | NumPy ms | copy out ms | copy in ms | ort / dmlq "
          "| dmlq / copy out | dmlq / copy in |")  # fmt: skip
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    kinds = args.cases.split(",")
    cases = [(f"dequantize block {b} -> {np.dtype(t).name}",
              lambda threads, b=b, t=t: dequantize_rows(shape, b, t, args.runs, threads, rng))
             for b in (32, 128) for t in (np.float32, np.float16) if "dequantize" in kinds]  # fmt: skip
    cases += [(f"quantize float32 -> int4 block {b}",
               lambda threads, b=b: quantize_rows(shape, b, args.runs, threads, rng))
              for b in (32, 128) if "quantize" in kinds]  # fmt: skip
    for name, run in cases:
        for threads in map(int, args.threads.split(",")):
            dmlq.set_num_threads(threads)
            t = run(threads)
            ratios = " | ".join(f"{r:.2f}" for r in (t["onnxruntime"] / t["dmlq"], t["dmlq"] / t["copy out"],
                                                      t["dmlq"] / t["copy in"]))  # fmt: skip
            columns = ("dmlq", "onnxruntime", "numpy", "copy out", "copy in")
            times = " | ".join(f"{t[k] * 1e3:.2f}" for k in columns)
            print(f"| {name} | {threads} | {times} | {ratios} |", flush=True)


if __name__ == "__main__":
    main()
