"""dmlq.onnx.run against an onnxruntime CPU session on the two example models at realistic sizes.

    python benchmarks/onnx_models.py [--width 1024] [--layers 3] [--batch 64] [--repeats 30] [--threads 1]

Builds the MLP of ``examples/onnx/make_models.py`` with ``--layers`` layers ``--width`` wide,
quantizes it (QDQ per-channel, QOperator per-tensor) with onnxruntime's ``quantize_static``, then
times one run of each (median of ``--repeats`` after a warm-up) and prints the ratio
dmlq / onnxruntime (target: at most 1.5) and the share of dmlq's time spent computing (its
operators and the onnxruntime sessions of the other nodes) rather than in graph bookkeeping.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import time
from functools import partial
from pathlib import Path

import numpy as np
import onnxruntime

import dmlq
import dmlq.onnx as dx
from dmlq.device import CompiledOperator

_SPEC = importlib.util.spec_from_file_location(
    "make_models", Path(__file__).parents[1] / "examples" / "onnx" / "make_models.py"
)
make_models = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(make_models)


def median_seconds(call, repeats: int) -> float:
    call()
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def operator_share(model: dx.Model, feeds: dict[str, np.ndarray], repeats: int) -> float:
    """The fraction of a dmlq run spent computing: in dmlq's operators (CompiledOperator.execute) and in
    the onnxruntime sessions of the other nodes; the rest is graph bookkeeping."""
    spent = [0.0]
    patched = {
        CompiledOperator: CompiledOperator.execute,
        onnxruntime.InferenceSession: onnxruntime.InferenceSession.run,
    }

    def timed(method):
        def call(self, *args, **kwargs):
            start = time.perf_counter()
            try:
                return method(self, *args, **kwargs)
            finally:
                spent[0] += time.perf_counter() - start

        return call

    CompiledOperator.execute = timed(CompiledOperator.execute)
    onnxruntime.InferenceSession.run = timed(onnxruntime.InferenceSession.run)
    try:
        start = time.perf_counter()
        for _ in range(repeats):
            dx.run(model, feeds)
        total = time.perf_counter() - start
    finally:
        CompiledOperator.execute, onnxruntime.InferenceSession.run = patched.values()
    return spent[0] / total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--width", type=int, default=1024)
    parser.add_argument("--layers", type=int, default=3)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--threads", type=int, default=1, help="threads for dmlq and onnxruntime alike")
    args = parser.parse_args()
    float_model = make_models.mlp([args.width] * (args.layers + 1), batch=args.batch)
    models = {
        "MLP, QDQ per-channel": make_models.quantize(float_model, qdq=True, per_channel=True),
        "MLP, QOperator per-tensor": make_models.quantize(float_model, qdq=False, per_channel=False),
    }
    feeds = {"x": np.random.default_rng(0).uniform(-2, 2, (args.batch, args.width)).astype(np.float32)}
    print(
        f"{args.layers} layers {args.width} wide, batch {args.batch}, {args.threads} thread(s); "
        f"median of {args.repeats} runs"
    )
    print("| model | dmlq.onnx.run | onnxruntime CPU session | ratio | dmlq's time in operators |")
    print("|---|---|---|---|---|")
    dmlq.set_num_threads(args.threads)
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = args.threads
    for name, proto in models.items():
        loaded = dx.load(proto)
        session = onnxruntime.InferenceSession(
            proto.SerializeToString(), options, providers=["CPUExecutionProvider"]
        )
        ours = median_seconds(partial(dx.run, loaded, feeds), args.repeats)
        theirs = median_seconds(partial(session.run, None, feeds), args.repeats)
        share = operator_share(loaded, feeds, args.repeats)
        print(
            f"| {name} | {ours * 1e3:.2f} ms | {theirs * 1e3:.2f} ms | {ours / theirs:.2f}x | {share:.0%} |"
        )


if __name__ == "__main__":
    main()
