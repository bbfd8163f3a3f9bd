"""dmlq's benchmark: dmlq against onnxruntime, NumPy and PyTorch, side by side in one process.

    python benchmarks/bench.py [--quick] [--sizes full|tiny] [--threads 1,2] [--cases K,...] [--level L]
                               [--out DIR]

Writes bench.json (raw timings, medians, ratios, targets, versions, CPU), bench.md (the table)
and bench.png (the ratios) to ``--out`` (default benchmarks/results) and prints the table. The run
also measures the machine's limits with bare loops (dmlq_bench.ceilings) at each thread count: read,
write and copy bandwidth over buffers of each element-wise case's size, and the multiply peak of
dmlq's level; it shows each element-wise contender's GB/s as a fraction of the copy's, each product's
GOPS as a fraction of the peak.
The dmlq measured is the one Python imports: this work tree's after ``pip install -e .``.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import platform
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import numpy as np  # noqa: E402
from dmlq_bench import cases, ceilings, data, memory, report  # noqa: E402
from dmlq_bench.timing import Case, Plan, blas_limit, measure_block  # noqa: E402

import dmlq  # noqa: E402
from dmlq.kernels import available_levels  # noqa: E402

PLANS = {
    "full": Plan(runs=25, warmups=2, budget=4.0, min_sample=0.02),
    "quick": Plan(runs=3, warmups=1, budget=1.0, min_sample=0.005),
}
SIMD_FLAGS = ("avx2", "avx512f", "avx512bw", "avx512_vnni", "avx_vnni", "avx512_bf16")


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer runs and warm-ups")
    parser.add_argument("--sizes", choices=sorted(data.SIZES), default="full",
                        help="full: the issue's sizes; tiny: a smoke run in seconds")  # fmt: skip
    parser.add_argument("--threads", default="1,2", help="comma-separated thread counts (default 1,2)")
    parser.add_argument("--out", type=Path, default=HERE / "results", help="output directory")
    parser.add_argument("--no-torch", action="store_true", help="leave PyTorch out even when importable")
    parser.add_argument("--cases", help="comma-separated case keys to run (default: all), e.g. quantize")
    parser.add_argument("--level", choices=available_levels(),
                        help="dmlq's kernel level (default: the CPU's highest, %(choices)s)")  # fmt: skip
    args = parser.parse_args(argv)
    args.threads = sorted({int(t) for t in args.threads.split(",")})
    args.cases = set(args.cases.split(",")) if args.cases else None
    return args


def optional(name: str) -> tuple[ModuleType | None, str]:
    """A peer module of the harness, or None and why its library cannot be imported."""
    try:
        return importlib.import_module(f"dmlq_bench.{name}"), ""
    except ImportError as error:
        return None, str(error)


def thread_setters(torch_routes: ModuleType | None) -> list[Any]:
    """Callables setting one library's global thread count (onnxruntime's is per session)."""
    setters = []
    dmlq_threads = getattr(dmlq, "set_num_threads", None)
    if dmlq_threads is not None:
        setters.append(dmlq_threads)
    if torch_routes is not None:
        setters.append(torch_routes.set_threads)
    return setters


def run_cases(all_cases: list[Case], thread_counts: list[int], plan: Plan,
              setters: list[Any]) -> dict[str, dict[str, Any]]:  # fmt: skip
    """Every case at every thread count; results checked against dmlq in the first block only."""
    blocks: dict[str, dict[int, dict[str, Any]]] = {case.key: {} for case in all_cases}
    for threads in thread_counts:
        for setter in setters:
            setter(threads)
        with blas_limit(threads):
            for case in all_cases:
                print(f"  T{threads} {case.key}", file=sys.stderr, flush=True)
                verify = threads == thread_counts[0]
                blocks[case.key][threads] = measure_block(case, threads, plan, verify)
    return {case.key: report.summarize(case, blocks[case.key]) for case in all_cases}


def cpu_info() -> dict[str, Any]:
    model, flags = platform.processor(), set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name":
                model = value.strip()
            elif key.strip() == "flags":
                flags = set(value.split())
    except OSError:
        pass
    simd = [f for f in SIMD_FLAGS if f in flags]
    return {"model": model, "cores": os.cpu_count(), "machine": platform.machine(), "simd": simd}


def versions(onnx_routes: ModuleType | None, torch_routes: ModuleType | None) -> dict[str, str]:
    found = {"python": platform.python_version(), "dmlq": dmlq.__version__, "numpy": np.__version__}
    if onnx_routes is not None:
        found["onnxruntime"] = onnx_routes.ort.__version__
        found["onnx"] = onnx_routes.onnx.__version__
    if torch_routes is not None:
        found["torch"] = torch_routes.version()
    return found


def dmlq_kernels() -> str:
    if getattr(dmlq, "set_num_threads", None) is None:
        return "no dmlq.set_num_threads: the NumPy reference kernels, thread count not settable"
    level = getattr(getattr(dmlq, "_core", None), "get_level", None)  # informational, private
    return f"compiled core{f' ({level()})' if level else ''}, thread count set per block"


def notes(blas_threads: bool) -> list[str]:
    found = []
    blas_env = {k: os.environ[k] for k in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE") if k in os.environ}
    if blas_env and blas_threads:
        found.append(f"numpy float64 uses OpenBLAS with {blas_env} as set on this machine "
                     "(they slow a current OpenBLAS)")  # fmt: skip
    found.append("numpy formula/roofline are single-threaded whatever the block's thread count")
    return found


def meta(args: argparse.Namespace, mode: str, plan: Plan, onnx_routes: ModuleType | None,
         torch_routes: ModuleType | None, blas_threads: bool) -> dict[str, Any]:  # fmt: skip
    return {
        "started": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "mode": f"{mode}, sizes {args.sizes}",
        "sizes": vars(data.SIZES[args.sizes]),
        "plan": vars(plan),
        "threads": args.threads,
        "ratio_modes": ["best", *(f"T{t}" for t in args.threads)],
        "versions": versions(onnx_routes, torch_routes),
        "cpu": cpu_info(),
        "dmlq": {"file": dmlq.__file__, "kernels": dmlq_kernels()},
        "environment": {k: v for k, v in os.environ.items() if k.startswith(("OPENBLAS_", "OMP_", "MKL_"))},
        "notes": notes(blas_threads),
    }


def build_cases(args: argparse.Namespace, onnx_routes: ModuleType | None,
                torch_routes: ModuleType | None, blas_threads: bool) -> list[Case]:  # fmt: skip
    sizes, rng = data.SIZES[args.sizes], np.random.default_rng(data.SEED)
    return [
        *cases.elementwise_cases(sizes, rng, onnx_routes, torch_routes),
        cases.call_case(sizes, rng, onnx_routes, torch_routes),
        *cases.matmul_cases(sizes, rng, onnx_routes, torch_routes, blas_threads),
    ]


def measure_memory(elements: int) -> dict[str, dict[str, Any]]:
    pythonpath = os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])
    return {op: memory.measure(op, elements, pythonpath) for op in cases.ELEMENTWISE}


def memory_limits(
    footprint: int, thread_counts: list[int], plan: Plan
) -> dict[str, dict[str, dict[str, Any]]]:
    """Read, write and copy bandwidth over ``footprint`` bytes (an element-wise call's operands: the copy
    from one half to the other) per thread count: ``{"read": {"1": {"bytes_per_second": 7.1e10,
    "stores": None}, ...}, "write": ...}``, at T threads the best of T or fewer."""
    buffer_bytes = {"read": footprint, "write": footprint, "copy": footprint // 2}
    found = {}
    for kind, size in buffer_bytes.items():
        rates = {t: ceilings.memory_bandwidth(kind, size, t, plan.min_sample) for t in thread_counts}
        found[kind] = {t: rate._asdict() for t, rate in ceilings.best_of_fewer_threads(rates).items()}
    return found


def measure_limits(all_cases: list[Case], thread_counts: list[int], plan: Plan) -> dict[str, Any]:
    """The machine's limits the cases are held against, by bare loops (dmlq_bench.ceilings) whose runs
    last as long as the plan's samples: the memory bandwidth over each element-wise case's footprint
    (the bytes one call reads and writes; cases of one footprint share it), and the multiply peak of
    dmlq's level for the products; where the probes cannot be built, why not."""
    level = dmlq._core.get_level()
    peak: dict[str, Any] = {"level": level, "instruction": ceilings.multiply_instruction(level), "gops": {}}
    limits: dict[str, Any] = {"unavailable": None, "memory": {}, "multiply_peak": peak}
    footprints = {case.key: int(case.work) for case in all_cases if case.key in cases.ELEMENTWISE}
    try:
        measured = {
            size: memory_limits(size, thread_counts, plan) for size in sorted(set(footprints.values()))
        }
        limits["memory"] = {key: measured[size] for key, size in footprints.items()}
        if any(case.unit == "GOPS" for case in all_cases):
            rates = {t: ceilings.multiply_peak(level, t, plan.min_sample) for t in thread_counts}
            peak["gops"] = ceilings.best_of_fewer_threads(rates)
    except ceilings.CeilingError as error:
        limits.update(unavailable=str(error), memory={})
        peak["gops"] = {}
    return limits


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse(argv)
    if args.level:
        dmlq._core.set_level(args.level)
    mode = "quick" if args.quick else "full"
    plan = PLANS[mode]
    onnx_routes, onnx_missing = optional("onnx_routes")
    torch_routes, torch_missing = (None, "--no-torch") if args.no_torch else optional("torch_routes")
    blas_threads = importlib.util.find_spec("threadpoolctl") is not None
    started, load_before = time.perf_counter(), os.getloadavg()
    all_cases = build_cases(args, onnx_routes, torch_routes, blas_threads)
    if args.cases:
        unknown = args.cases - {case.key for case in all_cases}
        if unknown:
            sys.exit(f"bench.py: unknown case(s) {', '.join(sorted(unknown))}; "
                     f"known: {', '.join(case.key for case in all_cases)}")  # fmt: skip
        all_cases = [case for case in all_cases if case.key in args.cases]
    for case in all_cases:
        for name, why in (("onnxruntime", onnx_missing), ("torch", torch_missing)):
            if why:
                case.skipped.setdefault(name, why)
    print(f"dmlq benchmark ({mode}, sizes {args.sizes}, threads {args.threads})", file=sys.stderr)
    print("  memory", file=sys.stderr)  # first: a failing probe stops the run before the long part
    memory_results = measure_memory(data.SIZES[args.sizes].elements)
    print("  limits", file=sys.stderr)
    limits = measure_limits(all_cases, args.threads, plan)
    summaries = run_cases(all_cases, args.threads, plan, thread_setters(torch_routes))
    result = {
        "meta": meta(args, mode, plan, onnx_routes, torch_routes, blas_threads),
        "limits": limits,
        "cases": summaries,
        "ratios": report.ratios(summaries, ["best", *(f"T{t}" for t in args.threads)]),
        "targets": report.targets(summaries, memory_results),
        "memory": memory_results,
    }
    report.write_results(
        args.out, "bench", result, started, load_before[0], report.chart, report.markdown, report.console
    )
    return result


if __name__ == "__main__":
    main()
