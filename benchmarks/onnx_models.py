"""dmlq.onnx.run against an onnxruntime CPU session on the two example models at realistic sizes.

    python benchmarks/onnx_models.py [--width 1024] [--layers 3] [--batch 64] [--rounds 6] [--repeats 10]
                                     [--threads 1]

Builds the MLP of ``examples/onnx/make_models.py`` with ``--layers`` layers ``--width`` wide,
quantizes it (QDQ per-channel, QOperator per-tensor) with onnxruntime's ``quantize_static``, then
times one run of each, interleaved: ``--rounds`` rounds, each timing ``--repeats`` runs of dmlq,
then of onnxruntime, then of onnxruntime on the float model (after a warm-up); the figures are
medians over the rounds of each round's median, so that a change in the machine's load falls on
both sides alike. It prints the ratio dmlq / onnxruntime (target: at most 1.5) and where dmlq's
time goes: dmlq's operators (``CompiledOperator.execute``), the onnxruntime sessions of the other
nodes (``InferenceSession.run``), and the rest (graph bookkeeping). The float model's time is the
floor of the QDQ model's other nodes: its MatMuls are the float MatMuls the DirectML provider
keeps, computed by onnxruntime CPU.
"""

from __future__ import annotations

import argparse
import importlib.util
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

_SPEC = importlib.util.spec_from_file_location(
    "make_models", Path(__file__).parents[1] / "examples" / "onnx" / "make_models.py"
)
make_models = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(make_models)

PARTS = ("operators", "other nodes")


def median_seconds(call: Callable[[], object], repeats: int) -> float:
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


class PartTimer:
    """Seconds spent in dmlq's operators and in onnxruntime's sessions while it is installed."""

    def __init__(self) -> None:
        self.spent = dict.fromkeys(PARTS, 0.0)
        self._originals = {
            (CompiledOperator, "execute"): ("operators", CompiledOperator.execute),
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
    """Seconds per dmlq run in its operators, in the other nodes' sessions, and in the rest."""
    with PartTimer() as timer:
        start = time.perf_counter()
        for _ in range(repeats):
            dx.run(model, feeds)
        total = time.perf_counter() - start
    parts = {part: seconds / repeats for part, seconds in timer.spent.items()}
    parts["bookkeeping"] = total / repeats - sum(parts.values())
    return parts


def cpu_session(proto, threads: int) -> onnxruntime.InferenceSession:
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    # no spinning after a run: a spinning worker would hold a core while dmlq's turn runs next
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    providers = ["CPUExecutionProvider"]
    return onnxruntime.InferenceSession(proto.SerializeToString(), options, providers=providers)


def interleaved(calls: dict[str, Callable[[], object]], rounds: int, repeats: int) -> dict[str, float]:
    """Each call's median over ``rounds`` rounds of its median of ``repeats`` runs, the calls taking
    turns within every round."""
    for call in calls.values():
        call()
    medians = {name: [] for name in calls}
    for _ in range(rounds):
        for name, call in calls.items():
            medians[name].append(median_seconds(call, repeats))
    return {name: statistics.median(values) for name, values in medians.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--width", type=int, default=1024)
    parser.add_argument("--layers", type=int, default=3)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--repeats", type=int, default=10, help="runs per round")
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
        f"interleaved, median of {args.rounds} rounds of {args.repeats} runs"
    )
    print(
        "| model | dmlq.onnx.run | onnxruntime CPU session | ratio | onnxruntime, float model "
        "| dmlq: operators / other nodes / bookkeeping |"
    )
    print("|---|---|---|---|---|---|")
    dmlq.set_num_threads(args.threads)
    float_session = cpu_session(float_model, args.threads)
    for name, proto in models.items():
        loaded = dx.load(proto)
        session = cpu_session(proto, args.threads)
        times = interleaved(
            {
                "dmlq": partial(dx.run, loaded, feeds),
                "onnxruntime": partial(session.run, None, feeds),
                "float": partial(float_session.run, None, feeds),
            },
            args.rounds,
            args.repeats,
        )
        parts = parts_of_a_run(loaded, feeds, args.rounds * args.repeats)
        shown = " / ".join(f"{seconds * 1e3:.2f}" for seconds in parts.values())
        print(
            f"| {name} | {times['dmlq'] * 1e3:.2f} ms | {times['onnxruntime'] * 1e3:.2f} ms "
            f"| {times['dmlq'] / times['onnxruntime']:.2f}x | {times['float'] * 1e3:.2f} ms | {shown} ms |"
        )


if __name__ == "__main__":
    main()
