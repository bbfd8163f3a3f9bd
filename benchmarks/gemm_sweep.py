"""dmlq's matrix multiply sweep: packed and unpacked B against onnxruntime and PyTorch, at every CPU level.

    python benchmarks/gemm_sweep.py [--quick] [--m 1,8] [--shapes 768x768,4096x11008] [--dtypes u8s8,u8u8]
        [--scales tensor,column] [--levels avx2,portable] [--threads 1,2] [--no-torch] [--out DIR]

Writes gemm_sweep.json (every sample), gemm_sweep.md (the table, limits and targets) and
gemm_sweep.png (GOPS against M per shape) to ``--out`` (default benchmarks/results), prints the table.
The dmlq measured is the one Python imports: this work tree's after ``pip install -e .``.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any, NoReturn

import bench  # the harness's command-line helpers; it puts dmlq_bench on the path
import numpy as np
from dmlq_bench import ceilings, data, report, sweep
from dmlq_bench.timing import Case, Plan

from dmlq import _core, kernels

PLANS = {
    "full": Plan(runs=15, warmups=1, budget=60.0, min_sample=0.02, min_runs=15),
    "quick": Plan(runs=3, warmups=1, budget=1.0, min_sample=0.005),
}
NOTES = [
    "reading B (rows with M <= 8): a bare loop in which T threads read a buffer of B's size, each its "
    "share, read only (as a multiply streams B; from L2, L3 or DRAM as B is), timed as one of the row's "
    "contenders, its samples interleaved with theirs; a call makes its passes over 2 GiB; at T2 the "
    "better of 1 and 2 threads",
    "multiply peak: GOPS of a bare loop of the level's multiply instruction shaped as its kernel's tile "
    "(vpdpbusd zmm 8 x 48 at avx512_vnni, vpmaddwd + vpaddd ymm 6 x 16 at avx2 and avx512, SSE2 pmaddwd "
    "at portable; operands loaded from L1 and broadcast), on T threads, timed as one of each row's "
    "contenders (wall time, its samples interleaved with theirs, the median; a call makes 2**23 steps of "
    "the loop), at T2 the better of 1 and 2; the run's peaks before and after its rows, the best of 7 "
    "runs per second of each thread's CPU time, are for the reader",
    "onnxruntime: session.intra_op.allow_spinning = 0, intra-op threads = T, one inter-op thread",
    "u8 x s8 on a CPU without VNNI: onnxruntime and fbgemm add pairs of products in saturating int16 "
    "(vpmaddubsw), so their results can differ from the exact ones; fbgemm multiplies u8 x u8 as u8 x s8 "
    "too (B xor 0x80)",
]


def fail(message: str) -> NoReturn:
    print(f"gemm_sweep.py: {message}", file=sys.stderr)
    sys.exit(2)


def available_levels() -> list[str]:
    """The CPU levels this machine runs, best first."""
    return list(reversed(kernels.available_levels()))


def _choices(text: str, allowed: list[str] | tuple[str, ...], option: str) -> list[str]:
    chosen = text.split(",")
    unknown = [c for c in chosen if c not in allowed]
    if unknown:
        fail(f"{option}: unknown {', '.join(unknown)}; choose from {','.join(allowed)}")
    return chosen


def _numbers(text: str, option: str) -> list[int]:
    try:
        values = [int(value) for value in text.split(",")]
    except ValueError:
        fail(f"{option}: expected comma-separated whole numbers, got {text!r}")
    if min(values) < 1:
        fail(f"{option}: every value must be at least 1, got {text!r}")
    return values


def _shapes(text: str) -> list[tuple[int, int]]:
    shapes = []
    for item in text.split(","):
        k, cross, n = item.partition("x")
        if not (cross and k.isdigit() and n.isdigit()):
            fail(f"--shapes: expected KxN, like 4096x11008, got {item!r}")
        shapes.append(tuple(_numbers(f"{k},{n}", "--shapes")))
    return shapes


def parse(argv: list[str] | None) -> argparse.Namespace:
    every = ",".join
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="3 samples per contender instead of 15")
    parser.add_argument("--m", default=every(map(str, sweep.MS)), help="rows of A (default %(default)s)")
    parser.add_argument("--shapes", default=every(f"{k}x{n}" for k, n in sweep.SHAPES),
                        help="KxN of B (default %(default)s)")  # fmt: skip
    parser.add_argument("--dtypes", default=every(sweep.DTYPES), help="default %(default)s")
    parser.add_argument("--scales", default=every(sweep.SCALES), help="B's scale: default %(default)s")
    parser.add_argument("--levels", default=every(available_levels()), help="CPU levels: default %(default)s")
    parser.add_argument("--threads", default="1,2", help="thread counts (default %(default)s)")
    parser.add_argument("--no-torch", action="store_true", help="leave PyTorch out even when importable")
    parser.add_argument("--out", type=Path, default=bench.HERE / "results", help="output directory")
    args = parser.parse_args(argv)
    args.m, args.shapes = _numbers(args.m, "--m"), _shapes(args.shapes)
    args.dtypes = _choices(args.dtypes, list(sweep.DTYPES), "--dtypes")
    args.scales = _choices(args.scales, sweep.SCALES, "--scales")
    args.levels = _choices(args.levels, available_levels(), "--levels")
    args.threads = sorted(set(_numbers(args.threads, "--threads")))
    return args


class Runner:
    """Measures cases at every thread count with the bench harness, and labels the progress."""

    def __init__(self, threads: list[int], plan: Plan, torch_routes: ModuleType | None) -> None:
        self.threads, self.plan = threads, plan
        self.setters = bench.thread_setters(torch_routes)

    def run(self, case: Case) -> dict[str, Any]:
        return bench.run_cases([case], self.threads, self.plan, self.setters)[case.key]


def measure_limits(args: argparse.Namespace, plan: Plan) -> dict[str, Any]:
    """Every level's multiply peak, each probe's runs as long as the plan's samples, for the reader (a
    row's limits are probes among its contenders: sweep.multiply_peak, sweep.reading_b); where the
    probes cannot be built, why not (the rows are then held against no limit)."""
    instructions = {level: ceilings.multiply_instruction(level) for level in args.levels}
    limits: dict[str, Any] = {"unavailable": None, "peak": {}, "peak_instruction": instructions}
    try:
        limits["peak"] = sweep.peaks(args.levels, args.threads, plan.min_sample)
    except ceilings.CeilingError as error:
        limits.update(unavailable=str(error), peak={})
    return limits


Peers = dict[str, tuple[ModuleType | None, str]]  # contender name: its module, or None and why


def measure_rows(args: argparse.Namespace, runner: Runner, rng: np.random.Generator,
                 peers: Peers) -> tuple[list[dict], list[dict]]:  # fmt: skip
    """Every row's summary and per-level analysis, and the targets' verdicts. Each row is held against
    probes timed among its own samples (sweep.limit): the machine's speed drifts within a run (the
    vpdpbusd loop measured 1956 GOPS before a run's rows and 2169 after them, Zen 5), so each row's
    limit comes from the same seconds as the row."""
    entries, verdicts = [], []
    for row in sweep.rows(args.dtypes, args.scales, args.shapes, args.m):
        case = sweep.row_case(row, args.levels, rng, peers[sweep.ORT][0], peers[sweep.TORCH][0])
        for name, (_, why) in peers.items():
            if why:
                case.skipped.setdefault(name, why)
        summary = runner.run(case)
        del case  # its sessions and packings: one row's worth of memory at a time
        levels = {level: sweep.analyse(row, summary, level) for level in args.levels}
        entries.append({"key": row.key, **dataclasses.asdict(row), "summary": summary, "levels": levels})
        for level, analysis in levels.items():
            verdicts += sweep.verdicts(row, level, analysis)
    return entries, verdicts


def meta(args: argparse.Namespace, plan: Plan, peers: Peers) -> dict:
    return {
        "started": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "mode": "quick" if args.quick else "full",
        "plan": vars(plan),
        "threads": args.threads,
        "levels": args.levels,
        "detected_level": _core.detected_level(),
        "versions": bench.versions(peers[sweep.ORT][0], peers[sweep.TORCH][0]),
        "cpu": bench.cpu_info(),
        "notes": list(NOTES),
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse(argv)
    plan = PLANS["quick" if args.quick else "full"]
    onnx_routes = bench.optional("onnx_routes")
    torch_routes = (None, "--no-torch") if args.no_torch else bench.optional("torch_routes")
    peers = {sweep.ORT: onnx_routes, sweep.ORT_PREPACKED: onnx_routes, sweep.TORCH: torch_routes}
    runner, rng = Runner(args.threads, plan, torch_routes[0]), np.random.default_rng(data.SEED)
    started, load_before = time.perf_counter(), os.getloadavg()
    result = {"meta": meta(args, plan, peers)}
    try:
        result["limits"] = measure_limits(args, plan)
        result["rows"], result["targets"] = measure_rows(args, runner, rng, peers)
        if not result["limits"]["unavailable"]:  # the machine's drift over the run, for the reader
            result["limits"]["peak_after"] = sweep.peaks(args.levels, args.threads, plan.min_sample)
    finally:
        _core.set_level(_core.detected_level())
    report.write_results(
        args.out, "gemm_sweep", result, started, load_before[0], sweep.chart, sweep.markdown, sweep.console
    )
    return result


if __name__ == "__main__":
    main()
