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
``--repeats`` runs each (after warm-up runs, the first of which plans the model's runs: see
``dmlq.onnx.plans``); a figure is the median over the rounds of each round's median, so that the
machine's load falls on both sides alike. Per model, the table gives each thread count's times and
ratio, then the best thread count of each side against the other's best (targets: at most 1.0, at
batch 1 at most 2.0), and where dmlq's time goes: dmlq's kernels (``CompiledOperator.run_arrays``),
the binding of their buffers (``CompiledOperator.bind``: a planned run binds only the model's inputs
and outputs), onnxruntime's sessions for the other nodes (``InferenceSession.run`` and
``run_with_iobinding``) and the runner's bookkeeping (the rest of ``dmlq.onnx.run``: inputs
checked, the plan's calls made; the timer's own cost per timed call taken out). "floor" is
(kernels + other nodes) / onnxruntime: the ratio with no binding and no bookkeeping at all, below
which only faster kernels, or onnxruntime's other nodes, go.
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

PARTS = ("kernels", "binding", "other nodes", "bookkeeping")
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
    """Seconds spent in dmlq's kernels, in binding their buffers and in onnxruntime's sessions while
    it is installed."""

    TIMED = {
        (CompiledOperator, "run_arrays"): "kernels",
        (CompiledOperator, "bind"): "binding",
        (onnxruntime.InferenceSession, "run"): "other nodes",
        (onnxruntime.InferenceSession, "run_with_iobinding"): "other nodes",
    }

    def __init__(self) -> None:
        self.spent = dict.fromkeys(PARTS, 0.0)
        self.calls = 0
        self._own: dict[tuple[type, str], object] = {}

    def __enter__(self) -> PartTimer:
        for (owner, name), part in self.TIMED.items():
            self._own[owner, name] = owner.__dict__.get(name)
            setattr(owner, name, self._timed(part, getattr(owner, name)))
        return self

    def __exit__(self, *exception) -> None:
        for (owner, name), method in self._own.items():
            if method is None:  # inherited: the base class's again
                delattr(owner, name)
            else:
                setattr(owner, name, method)

    def _timed(self, part: str, method):
        def call(*args, **kwargs):
            start = time.perf_counter()
            try:
                return method(*args, **kwargs)
            finally:
                self.spent[part] += time.perf_counter() - start
                self.calls += 1

        return call

    @classmethod
    def cost(cls, calls: int = 20000) -> float:
        """Seconds a timed call adds outside what it times (which a run's bookkeeping would hold)."""
        timer = cls()
        timed = timer._timed("kernels", lambda: None)
        start = time.perf_counter()
        for _ in range(calls):
            timed()
        return (time.perf_counter() - start - timer.spent["kernels"]) / calls


def parts_of_runs(model: dx.Model, feeds: dict[str, np.ndarray], repeats: int) -> list[dict[str, float]]:
    """Per dmlq run, seconds in its kernels, in binding their buffers, in the other nodes' sessions,
    and in the runner's bookkeeping."""
    samples = []
    cost = PartTimer.cost()
    with PartTimer() as timer:  # installed once: installing it costs the next calls their method caches
        for _ in range(repeats):
            timer.spent, timer.calls = dict.fromkeys(PARTS, 0.0), 0
            start = time.perf_counter()
            dx.run(model, feeds)
            total = time.perf_counter() - start
            timer.spent["bookkeeping"] = total - sum(timer.spent.values()) - timer.calls * cost
            samples.append(timer.spent)
    return samples


def cpu_session(proto, threads: int) -> onnxruntime.InferenceSession:
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    # no spinning after a run: a spinning worker would hold a core while dmlq's turn runs next
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return onnxruntime.InferenceSession(
        proto.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )


def measure(proto, threads: list[int], rounds: int, repeats: int) -> dict[int, dict[str, object]]:
    """Per thread count: each side's seconds per run, and the parts of dmlq's."""
    loaded = dx.load(proto)
    feeds = random_inputs(loaded, 0, loaded.input_names)
    found = {}
    for count in threads:
        found[count] = measure_threads(loaded, feeds, proto, count, rounds, repeats)
    return found


def measure_threads(
    loaded: dx.Model, feeds, proto, count: int, rounds: int, repeats: int
) -> dict[str, object]:
    """Each side's seconds per run at ``count`` threads, and the parts of dmlq's."""
    dmlq.set_num_threads(count)
    session = cpu_session(proto, count)
    calls = {"dmlq": partial(dx.run, loaded, feeds), "onnxruntime": partial(session.run, None, feeds)}
    for call in calls.values():
        call(), call()
    medians = {name: [] for name in calls}
    parts = []
    for _ in range(rounds):  # the parts' runs take their turn too, timed apart (the timer costs)
        for name, call in calls.items():
            medians[name].append(median_seconds(call, repeats))
        parts += parts_of_runs(loaded, feeds, repeats)
    found: dict[str, object] = {name: statistics.median(values) for name, values in medians.items()}
    found["parts"] = {part: statistics.median(sample[part] for sample in parts) for part in PARTS}
    return found


def rows(name: str, found: dict[int, dict[str, object]]) -> list[str]:
    """The model's rows: each thread count, then the best of each side against the other's best."""
    lines = []
    for count, measured in found.items():
        ours, theirs, parts = measured["dmlq"], measured["onnxruntime"], measured["parts"]
        shown = " / ".join(f"{seconds * 1e3:.3f}" for seconds in parts.values())
        floor = (parts["kernels"] + parts["other nodes"]) / theirs
        lines.append(f"| {name} | {count} | {ours * 1e3:.3f} ms | {theirs * 1e3:.3f} ms "
                     f"| {ours / theirs:.2f}x | {shown} ms | {floor:.2f}x |")  # fmt: skip
    ours_threads = min(found, key=lambda count: found[count]["dmlq"])
    theirs_threads = min(found, key=lambda count: found[count]["onnxruntime"])
    ours, theirs = found[ours_threads]["dmlq"], found[theirs_threads]["onnxruntime"]
    lines.append(f"| {name} | best | {ours * 1e3:.3f} ms ({ours_threads}) | {theirs * 1e3:.3f} ms "
                 f"({theirs_threads}) | **{ours / theirs:.2f}x** | | |")  # fmt: skip
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=10, help="runs per round")
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--models", nargs="+", default=["bert", "mlp", "cnn"], choices=["bert", "mlp", "cnn"])
    args = parser.parse_args()
    logging.getLogger().setLevel(logging.ERROR)  # the quantizer's advice on pre-processing
    print(f"threads {args.threads}; interleaved, "
          f"median of {args.rounds} rounds of {args.repeats} runs")  # fmt: skip
    print("| model | threads | dmlq.onnx.run | onnxruntime CPU | ratio "
          "| dmlq: kernels / binding / other nodes / bookkeeping | floor |")  # fmt: skip
    print("|---|---|---|---|---|---|---|")
    previous = dmlq.get_num_threads()
    try:
        for name, proto in models(args.models).items():
            print("\n".join(rows(name, measure(proto, args.threads, args.rounds, args.repeats))), flush=True)
    finally:
        dmlq.set_num_threads(previous)


if __name__ == "__main__":
    main()
