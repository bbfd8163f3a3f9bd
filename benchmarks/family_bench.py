"""The quantized family's kernels against onnxruntime's CPU operators, side by side in one process.

    python benchmarks/family_bench.py [--quick] [--threads 1,2] [--levels avx512_vnni,avx2] [--cases conv,...]

Cases (issue 22's targets): QLinearConv on ResNet-50's shapes (3 x 3 64->64 at 56², 1 x 1 256->64 at
56², 3 x 3 stride 2 128->128 from 56², and a depthwise 3 x 3 over 32 channels at 112², MobileNet's),
batch 1 and 8; MatMulInteger on BERT-base's shapes ([8 x 128, 768] x [768, 768] and x [768, 3072]);
DynamicQuantizeLinear of BERT's activations ([8 x 128, 768] and [8 x 128, 3072] float32).

Both sides get their weights once, before timing: onnxruntime as initializers (which it prepacks at
session creation), dmlq as a pack_b packing (MatMulInteger) or a pack_convolution_filter packing. Both
allocate their outputs on every call: onnxruntime from its arena, dmlq from its output cache (_core.empty,
as dmlq's NumPy layer does). Scales are powers of two, so that onnxruntime's float32
requantization is exact and both outputs must be equal (verified on the warm-up results).

Contenders are timed interleaved (dmlq, onnxruntime, dmlq, ...), in bursts of calls, medians over the
runs; each side's best thread count is compared with the other's best. A ratio above 1 means dmlq is
faster. Levels below the CPU's run dmlq's kernels for that level; onnxruntime always runs its best.
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import numpy as np  # noqa: E402
import onnxruntime as ort  # noqa: E402
from dmlq_bench.timing import Case, Contender, Plan, measure_block, median  # noqa: E402
from onnx import helper, numpy_helper  # noqa: E402

from dmlq import _core  # noqa: E402
from dmlq.kernels import dynamic_quantize_linear  # noqa: E402

PLANS = {
    "full": Plan(runs=21, warmups=2, budget=3.0, min_sample=0.01),
    "quick": Plan(runs=5, warmups=1, budget=0.6, min_sample=0.004),
}
RNG = np.random.default_rng(20260219)

# name, x shape (batch 1), w shape, stride, padding, groups
CONVOLUTIONS = [
    ("3x3 64->64 56²", (1, 64, 56, 56), (64, 64, 3, 3), 1, 1, 1),
    ("1x1 256->64 56²", (1, 256, 56, 56), (64, 256, 1, 1), 1, 0, 1),
    ("3x3/2 128->128 56²", (1, 128, 56, 56), (128, 128, 3, 3), 2, 1, 1),
    ("dw 3x3 32ch 112²", (1, 32, 112, 112), (32, 1, 3, 3), 1, 1, 32),
]
MATMULS = [("[1024,768]x[768,768]", 1024, 768, 768), ("[1024,768]x[768,3072]", 1024, 768, 3072)]
DYNAMIC = [("[1024,768]", (1024, 768)), ("[1024,3072]", (1024, 3072))]


def session(node, inputs: dict[str, np.ndarray], constants: dict[str, np.ndarray], opset: int, threads: int):
    graph = helper.make_graph(
        [node],
        "bench",
        [
            helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
            for n, v in inputs.items()
        ],
        [helper.ValueInfoProto(name=name) for name in node.output],
        [numpy_helper.from_array(np.asarray(v), name) for name, v in constants.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def dmlq_call(threads: int, call):
    _core.set_num_threads(threads)
    return call


def convolution_case(name, x_shape, w_shape, stride, pad, groups, batch) -> Case:
    x = RNG.integers(0, 256, (batch, *x_shape[1:]), dtype=np.uint8)
    w = RNG.integers(-128, 128, w_shape, dtype=np.int8)
    m = w_shape[0]
    x_scale, y_scale = np.array(2.0**-4, np.float32), np.array(1.0, np.float32)
    w_scale = (2.0 ** -RNG.integers(6, 9, m)).astype(np.float32)
    x_zero, w_zero, y_zero = np.array(128, np.uint8), np.zeros(m, np.int8), np.array(128, np.uint8)
    bias = RNG.integers(-20000, 20000, m).astype(np.int32)
    size = (x_shape[2] + 2 * pad - w_shape[2]) // stride + 1
    out_shape = (batch, m, size, size)
    window = ((stride, stride), (1, 1), (pad, pad), (pad, pad))

    def dmlq(threads):
        _core.set_num_threads(threads)
        packed = _core.pack_convolution_filter(w, groups)  # once, as onnxruntime prepacks its initializer

        def run():
            out = _core.empty(out_shape, np.dtype(np.uint8))
            _core.convolution(
                x,
                x_scale,
                x_zero,
                packed,
                w_scale,
                w_zero,
                bias,
                y_scale,
                y_zero,
                out,
                *window,
                groups,
                False,
            )
            return out

        return run

    def onnxruntime(threads):
        node = helper.make_node(
            "QLinearConv",
            ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b"],
            ["y"],
            strides=[stride] * 2,
            pads=[pad] * 4,
            group=groups,
        )
        constants = {
            "xs": x_scale,
            "xz": x_zero,
            "w": w,
            "ws": w_scale,
            "wz": w_zero,
            "ys": y_scale,
            "yz": y_zero,
            "b": bias,
        }
        run = session(node, {"x": x}, constants, 13, threads).run
        return lambda: run(None, {"x": x})[0]

    work = 2.0 * batch * m * size * size * w_shape[1] * w_shape[2] * w_shape[3]
    return Case(
        f"conv {name} N={batch}",
        f"QLinearConv {name}, batch {batch}",
        "GOPS",
        work,
        [Contender("dmlq", dmlq), Contender("onnxruntime", onnxruntime)],
    )


def matmul_case(name, m, k, n) -> Case:
    a = RNG.integers(0, 256, (m, k), dtype=np.uint8)
    b = RNG.integers(-128, 128, (k, n), dtype=np.int8)
    a_zero, b_zero = np.array([[131]], np.uint8), np.array([[0]], np.int8)

    def dmlq(threads):
        _core.set_num_threads(threads)
        packed = _core.pack_b(b)  # the weights, packed once (onnxruntime prepacks its initializer)

        def run():
            out = _core.empty((m, n), np.dtype(np.int32))
            _core.matmul_integer(a, a_zero, packed, b_zero, out)
            return out

        return run

    def onnxruntime(threads):
        node = helper.make_node("MatMulInteger", ["a", "b", "az", "bz"], ["y"])
        constants = {"b": b, "az": a_zero.reshape(()), "bz": b_zero.reshape(())}
        run = session(node, {"a": a}, constants, 10, threads).run
        return lambda: run(None, {"a": a})[0]

    return Case(
        f"matmul {name}",
        f"MatMulInteger {name}",
        "GOPS",
        2.0 * m * n * k,
        [Contender("dmlq", dmlq), Contender("onnxruntime", onnxruntime)],
    )


def dynamic_case(name, shape) -> Case:
    x = (RNG.standard_normal(shape) * 3).astype(np.float32)

    def dmlq(threads):
        def run():
            out = _core.empty(shape, np.dtype(np.uint8))
            scale, zero_point = np.empty((), np.float32), np.empty((), np.uint8)
            dynamic_quantize_linear(None, {"input": x}, (out, scale, zero_point), False)
            return out

        return dmlq_call(threads, run)

    def onnxruntime(threads):
        node = helper.make_node("DynamicQuantizeLinear", ["x"], ["y", "s", "z"])
        run = session(node, {"x": x}, {}, 11, threads).run
        return lambda: run(None, {"x": x})[0]

    return Case(
        f"dql {name}",
        f"DynamicQuantizeLinear {name}",
        "GB/s",
        x.nbytes + x.size,
        [Contender("dmlq", dmlq), Contender("onnxruntime", onnxruntime)],
    )


def cases(selected: set[str] | None) -> list[Case]:
    made = []
    if not selected or "conv" in selected:
        made += [convolution_case(*c, batch) for c in CONVOLUTIONS for batch in (1, 8)]
    if not selected or "matmul" in selected:
        made += [matmul_case(*c) for c in MATMULS]
    if not selected or "dql" in selected:
        made += [dynamic_case(*c) for c in DYNAMIC]
    return made


def run(case: Case, threads: list[int], plan: Plan) -> dict:
    """Median seconds per contender and thread count, and the dmlq/onnxruntime mismatch count."""
    medians, mismatches = {}, 0
    for t in threads:
        block = measure_block(case, t, plan, verify=True)
        for name, samples in block["samples"].items():
            medians[(name, t)] = median(samples)
        mismatches += sum(v["mismatches"] for v in block["verification"].values())
    return {"medians": medians, "mismatches": mismatches}


def best(medians: dict, name: str) -> tuple[float, int]:
    return min((seconds, t) for (who, t), seconds in medians.items() if who == name)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer runs")
    parser.add_argument("--threads", default="1,2", help="comma-separated thread counts")
    parser.add_argument(
        "--levels", default="avx512_vnni,avx2", help="dmlq's CPU levels to run (those this CPU has)"
    )
    parser.add_argument("--cases", help="comma-separated groups: conv, matmul, dql (default: all)")
    args = parser.parse_args(argv)
    threads = sorted({int(t) for t in args.threads.split(",")})
    available = _core.LEVELS[: _core.LEVELS.index(_core.detected_level()) + 1]
    levels = [level for level in args.levels.split(",") if level in available]
    plan = PLANS["quick" if args.quick else "full"]
    print(f"# {' '.join(sys.argv)}")
    print(
        f"# {time.strftime('%Y-%m-%d %H:%M')}, {platform.machine()}, {_core.detected_level()}, onnxruntime "
        f"{ort.__version__}, threads {threads}; medians; ratio = onnxruntime best / dmlq best"
    )
    print("| case | level | dmlq ms (threads) | onnxruntime ms (threads) | ratio | mismatches |")
    print("|---|---|---|---|---|---|")
    all_cases = cases(set(args.cases.split(",")) if args.cases else None)
    try:
        for level in levels:
            _core.set_level(level)
            for case in all_cases:
                result = run(case, threads, plan)
                mine, mine_t = best(result["medians"], "dmlq")
                theirs, theirs_t = best(result["medians"], "onnxruntime")
                print(
                    f"| {case.title} | {level} | {mine * 1e3:.3f} ({mine_t}) | "
                    f"{theirs * 1e3:.3f} ({theirs_t}) | {theirs / mine:.2f} | {result['mismatches']} |",
                    flush=True,
                )
    finally:
        _core.set_level(_core.detected_level())


if __name__ == "__main__":
    main()
