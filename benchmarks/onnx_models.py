"""dmlq.onnx.run on a prepared model against an onnxruntime CPU session of the same model (its
default optimizations), on the example models at realistic sizes.

    python benchmarks/onnx_models.py [--rounds 5] [--repeats 10] [--threads 1 2] [--models bert mlp cnn]

Models (``examples/onnx/make_models.py``, quantized by onnxruntime's ``quantize_static``, u8
activations, s8 weights): a BERT-like encoder (hidden 256, 4 layers, sequence 128, batch 8; QDQ
per channel with LayerNormalization left in float, since the provider cannot create the kernel of
the LayerNormalization bias's DequantizeLinear-17 (``DmlOperatorElementwiseQLinear``), and
QOperator per tensor), the 1024-wide MLP (3 layers, batch 64; QDQ per channel and QOperator per
tensor) and a CNN on 64 x 64 images (batch 8; QDQ per channel and QOperator per tensor), each also
at batch 1. Per model and thread count the contenders take turns: ``--rounds`` rounds of
``--repeats`` runs each (after a warm-up); a figure is the median over the rounds of each round's
median, so that the machine's load falls on both sides alike. The table gives the best thread
count of each side against the other's best, the ratio (targets: at most 1.0, at batch 1 at most
2.0), and where dmlq's time goes: dmlq's kernels (``CompiledOperator.run_arrays``), the binding
of their buffers (the rest of ``CompiledOperator.execute``), onnxruntime's sessions for the other
nodes (``InferenceSession.run``: the floor dmlq cannot go under while those nodes are
onnxruntime's) and the runner's bookkeeping (the rest of ``dmlq.onnx.run``: inputs checked, operands
and outputs handed from step to step).
"""

from __future__ import annotations

import argparse
import importlib.util
import logging
import statistics
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import numpy as np
import onnxruntime

import dmlq
import dmlq.onnx as dx
from dmlq.device import CompiledOperator
from dmlq.onnx.comparing import random_inputs

_SPEC = importlib.util.spec_from_file_location(
    "make_models", Path(__file__).parents[1] / "examples" / "onnx" / "make_models.py"
)
make_models = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(make_models)

PARTS = ("operators", "kernels", "other nodes")
NOT_LAYER_NORM = ["MatMul", "Add", "Mul", "Conv", "Gemm", "MaxPool", "Relu", "Transpose", "Softmax", "Erf"]


def models(names: list[str]) -> dict[str, object]:
    """Name -> quantized ModelProto, at full batch and at batch 1."""
    made = {}
    for batch in (8, 1):
        if "bert" in names:
            encoder = make_models.encoder(hidden=256, layers=4, seq=128, batch=batch)
            made[f"BERT QDQ, batch {batch}"] = make_models.quantize(
                encoder, qdq=True, per_channel=True, op_types=NOT_LAYER_NORM
            )
            made[f"BERT QOperator, batch {batch}"] = make_models.quantize(
                encoder, qdq=False, per_channel=False
            )
        if "cnn" in names:
            cnn = make_models.conv_net(channels=16, size=64, classes=10, batch=batch)
            made[f"CNN 64x64 QDQ, batch {batch}"] = make_models.quantize(cnn, qdq=True, per_channel=True)
            made[f"CNN 64x64 QOperator, batch {batch}"] = make_models.quantize(
                cnn, qdq=False, per_channel=False
            )
    for batch in (64, 1):
        if "mlp" in names:
            mlp = make_models.mlp([1024] * 4, batch=batch)
            made[f"MLP 1024, QDQ, batch {batch}"] = make_models.quantize(mlp, qdq=True, per_channel=True)
            made[f"MLP 1024, QOperator, batch {batch}"] = make_models.quantize(
                mlp, qdq=False, per_channel=False
            )
    return made


def median_seconds(call: Callable[[], object], repeats: int) -> float:
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


class PartTimer:
    """Seconds spent in dmlq's operators (their kernels among them) and in onnxruntime's sessions while
    it is installed."""

    def __init__(self) -> None:
        self.spent = dict.fromkeys(PARTS, 0.0)
        self._originals = {
            (CompiledOperator, "execute"): ("operators", CompiledOperator.execute),
            (CompiledOperator, "run_arrays"): ("kernels", CompiledOperator.run_arrays),
            (onnxruntime.InferenceSession, "run"): ("other nodes", onnxruntime.InferenceSession.run),
        }

    def __enter__(self) -> PartTimer:
        for (owner, name), (part, method) in self._originals.items():
            setattr(owner, name, self._timed(part, method))
        return self

    def __exit__(self, *exception) -> None:
        for (owner, name), (_, method) in self._originals.items():
            setattr(owner, name, method)

    def _timed(self, part: str, method):
        def call(*args, **kwargs):
            start = time.perf_counter()
            try:
                return method(*args, **kwargs)
            finally:
                self.spent[part] += time.perf_counter() - start

        return call


def parts_of_a_run(model: dx.Model, feeds: dict[str, np.ndarray], repeats: int) -> dict[str, float]:
    """Median seconds per dmlq run in its kernels, in binding their buffers, in the other nodes'
    sessions, and in the runner's bookkeeping."""
    samples = []
    for _ in range(repeats):
        with PartTimer() as timer:
            start = time.perf_counter()
            dx.run(model, feeds)
            total = time.perf_counter() - start
        spent = timer.spent
        samples.append({
            "kernels": spent["kernels"],
            "binding": spent["operators"] - spent["kernels"],
            "other nodes": spent["other nodes"],
            "bookkeeping": total - spent["operators"] - spent["other nodes"],
        })  # fmt: skip
    return {part: statistics.median(sample[part] for sample in samples) for part in samples[0]}


def cpu_session(proto, threads: int) -> onnxruntime.InferenceSession:
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    # no spinning after a run: a spinning worker would hold a core while dmlq's turn runs next
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return onnxruntime.InferenceSession(
        proto.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )


def measure(proto, threads: list[int], rounds: int, repeats: int) -> dict[str, object]:
    loaded = dx.load(proto)
    feeds = random_inputs(loaded, 0, loaded.input_names)
    best: dict[str, tuple[float, int]] = {}
    parts = {}
    for count in threads:
        dmlq.set_num_threads(count)
        session = cpu_session(proto, count)
        calls = {"dmlq": partial(dx.run, loaded, feeds), "onnxruntime": partial(session.run, None, feeds)}
        for call in calls.values():
            call()
        medians = {name: [] for name in calls}
        for _ in range(rounds):
            for name, call in calls.items():
                medians[name].append(median_seconds(call, repeats))
        for name, values in medians.items():
            seconds = statistics.median(values)
            if name not in best or seconds < best[name][0]:
                best[name] = (seconds, count)
                if name == "dmlq":
                    parts = parts_of_a_run(loaded, feeds, repeats)
    return {"best": best, "parts": parts}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=10, help="runs per round")
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--models", nargs="+", default=["bert", "mlp", "cnn"], choices=["bert", "mlp", "cnn"])
    args = parser.parse_args()
    logging.getLogger().setLevel(logging.ERROR)  # the quantizer's advice on pre-processing
    print(f"threads {args.threads}; interleaved, median of {args.rounds} rounds of {args.repeats} runs")
    print(
        "| model | dmlq.onnx.run (threads) | onnxruntime CPU (threads) | ratio "
        "| dmlq: kernels / binding / other nodes / bookkeeping |"
    )
    print("|---|---|---|---|---|")
    previous = dmlq.get_num_threads()
    try:
        for name, proto in models(args.models).items():
            found = measure(proto, args.threads, args.rounds, args.repeats)
            (ours, ours_threads), (theirs, theirs_threads) = (
                found["best"]["dmlq"],
                found["best"]["onnxruntime"],
            )
            shown = " / ".join(f"{seconds * 1e3:.2f}" for seconds in found["parts"].values())
            print(
                f"| {name} | {ours * 1e3:.2f} ms ({ours_threads}) | {theirs * 1e3:.2f} ms ({theirs_threads}) "
                f"| {ours / theirs:.2f}x | {shown} ms |",
                flush=True,
            )
    finally:
        dmlq.set_num_threads(previous)


if __name__ == "__main__":
    main()
