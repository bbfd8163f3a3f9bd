"""The float GEMM (``_core.gemm``, DirectML's GEMM) beside NumPy's BLAS, torch and onnxruntime, in one run.

    python benchmarks/gemm_float.py [--quick] [--threads 1,2] [--levels avx512,avx2] [--cases cnn,mlp,...]

Cases: the float GEMMs of the ONNX models in ``benchmarks/onnx_models.py`` (the CNN's Gemm layers with
their bias at batch 1 and 8, the 1024-wide MLP's layers at batch 64 and 1, the BERT-like encoder's
projections and attention products at batch 8, sequence 128, hidden 256), MatMulNBits' GEMM after
DEQUANTIZE (B [N, K], TransB) at 1 and 128 rows, and 1024 cubed.

Contenders, each at every thread count of ``--threads``, timed interleaved (dmlq, NumPy, ...) in bursts
of calls, medians over the runs, with the harness waiting between samples until no thread of the
process spins (``dmlq_bench.timing``):

- dmlq: ``_core.gemm`` into an output from ``_core.empty`` (as ``dmlq.kernels`` computes a compiled
  GEMM), on ``dmlq.set_num_threads`` threads;
- numpy: ``a @ b`` (``+ c``), its OpenBLAS on that many threads (threadpoolctl, from the bench extra;
  the contender is left out without it);
- numpy default: the same with OpenBLAS's own thread count (what a program gets that does not set one,
  as dmlq may not set it for its callers), timed in a block of its own after the others: its threads
  spin on after each call, beyond the harness's wait, and would slow whoever runs next;
- torch (when installed): ``torch.matmul`` (``torch.addmm`` with C) on tensors sharing the arrays'
  memory, B transposed as a view where TransB, on ``torch.set_num_threads`` threads;
- onnxruntime: a one-node MatMul or Gemm model, B (and C) initializers it prepacks at session creation
  (dmlq packs B on every call), ``intra_op_num_threads`` as the block's.

One row per case, dmlq level and thread count: each contender's GFLOPS (2 per multiply-add of the
product), dmlq's and NumPy's as a share of the level's FMA peak at that many threads (``vfmadd231ps`` in
the kernel's tile, measured in the same run by ``dmlq_bench.ceilings.fma_peak``, the best of that many
threads or fewer), and each peer's time over dmlq's (above 1: dmlq is faster). A last row per case and
level gives NumPy at its default thread count. Levels below the CPU's run dmlq's kernels for that level
(the peers run their own kernels whatever the level, against the same peak).
dmlq's results are its own order of additions (each sum over k in order, one fused multiply-add per
term); the peers' differ by float rounding: the last column is the largest difference between dmlq's
and NumPy's warm-up results.
"""

from __future__ import annotations

import argparse
import contextlib
import platform
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import numpy as np  # noqa: E402
import onnxruntime as ort  # noqa: E402
from dmlq_bench import ceilings  # noqa: E402
from dmlq_bench.timing import Case, Contender, Plan, blas_limit, measure_block, median  # noqa: E402
from onnx import helper, numpy_helper  # noqa: E402

from dmlq import _core  # noqa: E402

try:
    from threadpoolctl import threadpool_info
except ImportError:  # the bench extra's; NumPy's thread count cannot be set without it
    threadpool_info = None
try:
    import torch
except ImportError:  # a peer only where installed
    torch = None

# Samples of 50 ms (20 with --quick): a thread pool woken after the harness's idle wait may first share
# the caller's core, which a burst of several calls outlasts (a program calls its GEMMs back to back).
PLANS = {
    "full": Plan(runs=21, warmups=2, budget=3.0, min_sample=0.05),
    "quick": Plan(runs=5, warmups=1, budget=0.6, min_sample=0.02),
}
RNG = np.random.default_rng(20260219)

# group, title, batch, M, K, N, TransB, with C (a bias row)
SHAPES = [
    ("cnn", "CNN Gemm 1 [1,16384]x[16384,40]+bias", (), 1, 16384, 40, False, True),
    ("cnn", "CNN Gemm 1 [8,16384]x[16384,40]+bias", (), 8, 16384, 40, False, True),
    ("cnn", "CNN Gemm 2 [8,40]x[40,10]+bias", (), 8, 40, 10, False, True),
    ("mlp", "MLP [64,1024]x[1024,1024]", (), 64, 1024, 1024, False, False),
    ("mlp", "MLP [1,1024]x[1024,1024]", (), 1, 1024, 1024, False, False),
    ("bert", "BERT FFN [1024,256]x[256,1024]", (), 1024, 256, 1024, False, False),
    ("bert", "BERT proj. [1024,256]x[256,256]", (), 1024, 256, 256, False, False),
    ("bert", "BERT scores [8,128,256]x[8,256,128]", (8,), 128, 256, 128, False, False),
    ("small", "[16,256]x[256,256]", (), 16, 256, 256, False, False),
    ("small", "[64,512]x[512,512]", (), 64, 512, 512, False, False),
    ("nbits", "MatMulNBits [1,1024]x[1024,1024]^T", (), 1, 1024, 1024, True, False),
    ("nbits", "MatMulNBits [128,1024]x[1024,1024]^T", (), 128, 1024, 1024, True, False),
    ("cube", "1024^3", (), 1024, 1024, 1024, False, False),
]


# NumPy's BLAS threads where a program sets none; None without threadpoolctl (NumPy is then left out,
# since its thread count cannot be set per block)
BLAS_DEFAULT = (
    max(library["num_threads"] for library in threadpool_info() if library["user_api"] == "blas")
    if threadpool_info is not None
    else None
)


def session(op_type: str, a: np.ndarray, constants: dict[str, np.ndarray], threads: int, **attributes):
    node = helper.make_node(op_type, ["a", *constants], ["y"], **attributes)
    graph = helper.make_graph(
        [node],
        "bench",
        [helper.make_tensor_value_info("a", helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)],
        [helper.ValueInfoProto(name="y")],
        [numpy_helper.from_array(v, name) for name, v in constants.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    run = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"]).run
    return lambda: run(None, {"a": a})[0]


def gemm_case(group, title, batch, m, k, n, trans_b, with_c) -> Case:
    a = RNG.standard_normal((*batch, m, k)).astype(np.float32)
    b = (RNG.standard_normal((*batch, n, k) if trans_b else (*batch, k, n)) / np.sqrt(k)).astype(np.float32)
    c = RNG.standard_normal(n).astype(np.float32) if with_c else None
    op_b = np.swapaxes(b, -1, -2) if trans_b else b
    shape = (*batch, m, n)
    c_full = None if c is None else np.broadcast_to(c, shape)

    def dmlq(threads):
        _core.set_num_threads(threads)

        def run():
            out = _core.empty(shape, np.dtype(np.float32))
            _core.gemm(a, b, c_full, out, False, trans_b, 1.0, 1.0, 0, (0.0, 0.0))
            return out

        return run

    def numpy(threads):  # its BLAS threads are the block's (run_case)
        def run():
            product = a @ op_b
            return product if c is None else product + c

        return run

    def torch_matmul(threads):
        torch.set_num_threads(threads)
        a_t, b_t = torch.from_numpy(a), torch.from_numpy(b)
        op_b_t = b_t.transpose(-1, -2) if trans_b else b_t
        if c is None:
            return lambda: torch.matmul(a_t, op_b_t)
        c_t = torch.from_numpy(c)
        return lambda: torch.addmm(c_t, a_t, op_b_t)

    def onnxruntime(threads):
        if batch or not with_c:
            return session("MatMul", a, {"b": op_b if not trans_b else np.ascontiguousarray(op_b)}, threads)
        return session("Gemm", a, {"b": b, "c": c}, threads, transB=int(trans_b))

    contenders = [Contender("dmlq", dmlq)]
    if BLAS_DEFAULT is not None:
        contenders.append(Contender("numpy", numpy))
    if torch is not None:
        contenders.append(Contender("torch", torch_matmul, result=lambda t: t.numpy()))
    contenders.append(Contender("onnxruntime", onnxruntime))
    work = 2.0 * np.prod(batch, dtype=float) * m * n * k
    default = [Contender("numpy default", numpy)] if BLAS_DEFAULT is not None else []
    return Case(group, title, "GFLOP/s", work, contenders), Case(group, title, "GFLOP/s", work, default)


PEERS = ("numpy", "torch", "onnxruntime")


def run_case(case: Case, default: Case, threads: list[int], plan: Plan) -> tuple[dict, float]:
    """Median seconds per (contender, threads), and the largest difference of NumPy's result from dmlq's:
    a block per thread count with NumPy's BLAS limited to it, then NumPy alone with its default threads."""
    medians, widest = {}, 0.0
    blocks = [(case, t) for t in threads] + ([(default, BLAS_DEFAULT)] if default.contenders else [])
    for block_case, t in blocks:
        with blas_limit(t) if block_case is case else contextlib.nullcontext():
            block = measure_block(block_case, t, plan, verify=True)
        for name, samples in block["samples"].items():
            medians[(name, t)] = median(samples)
        for name, check in block["verification"].items():
            if name == "numpy":
                widest = max(widest, check["max_abs_diff"])
    return medians, widest


def fma_peaks(levels: list[str], threads: list[int]) -> dict[str, dict[str, float | None]]:
    """Per level, GFLOPS of its FMA loop at each thread count (the best of that many threads or fewer)."""
    return {
        level: ceilings.best_of_fewer_threads({t: ceilings.fma_peak(level, t) for t in threads})
        for level in levels
    }


def gflops(work: float, seconds: float | None) -> str:
    return "-" if seconds is None else f"{work / seconds / 1e9:.1f}"


def share(work: float, seconds: float | None, peak: float | None) -> str:
    return "-" if seconds is None or peak is None else f"{work / seconds / 1e9 / peak:.0%}"


def ratio(seconds: float | None, mine: float | None) -> str:
    return "-" if seconds is None or mine is None else f"{seconds / mine:.2f}"


def rows(case: Case, level: str, medians: dict, widest: float, peaks: dict[str, float | None]) -> list[str]:
    """The table's rows of one case at one level: a row per thread count, then NumPy's default."""
    lines, work = [], case.work
    for t in sorted({t for _, t in medians if (("dmlq", t) in medians)}):
        peak, mine = peaks.get(str(t)), medians.get(("dmlq", t))
        theirs = [medians.get((name, t)) for name in PEERS]
        peak_cell = "-" if peak is None else f"{peak:.0f}"
        lines.append(
            f"| {case.title} | {level} | {t} | {peak_cell} | {gflops(work, mine)} | "
            f"{share(work, mine, peak)} | "
            + " | ".join(gflops(work, seconds) for seconds in theirs)
            + f" | {share(work, theirs[0], peak)} | "
            + " | ".join(ratio(seconds, mine) for seconds in theirs)
            + f" | {widest:.1e} |"
        )
    if ("numpy default", BLAS_DEFAULT) in medians:
        seconds = medians[("numpy default", BLAS_DEFAULT)]
        lines.append(f"| {case.title} | {level} | NumPy's default ({BLAS_DEFAULT}) | | | | "
                     f"{gflops(work, seconds)} | | | | | | | |")  # fmt: skip
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer runs")
    parser.add_argument("--threads", default="1,2", help="comma-separated thread counts")
    parser.add_argument(
        "--levels", default="avx512,avx2", help="dmlq's CPU levels to run (those this CPU has)"
    )
    parser.add_argument(
        "--cases", help="comma-separated groups: cnn, mlp, bert, small, nbits, cube (default: all)"
    )
    args = parser.parse_args(argv)
    threads = sorted({int(t) for t in args.threads.split(",")})
    available = _core.LEVELS[: _core.LEVELS.index(_core.detected_level()) + 1]
    levels = [level for level in args.levels.split(",") if level in available]
    groups = set(args.cases.split(",")) if args.cases else None
    plan = PLANS["quick" if args.quick else "full"]
    blas = f"NumPy's BLAS default {BLAS_DEFAULT} threads" if BLAS_DEFAULT else "no threadpoolctl: no NumPy"
    peers = f"torch {torch.__version__}" if torch is not None else "no torch"
    peaks = fma_peaks(levels, threads)
    print(f"# {' '.join(sys.argv)}")
    print(f"# {time.strftime('%Y-%m-%d %H:%M')}, {platform.machine()}, {_core.detected_level()}, onnxruntime "
          f"{ort.__version__}, NumPy {np.__version__}, {blas}, {peers}; medians; GFLOPS; peak: the level's "
          f"FMA loop ({', '.join(f'{lv} {ceilings.fma_instruction(lv)}' for lv in levels)}); "
          "peer / dmlq: the peer's time over dmlq's")  # fmt: skip
    print("| case | level | threads | peak | dmlq | dmlq / peak | numpy | torch | onnxruntime | numpy / peak "
          "| numpy / dmlq | torch / dmlq | onnxruntime / dmlq | dmlq - numpy |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    try:
        for level in levels:
            _core.set_level(level)
            for shape in SHAPES:
                if groups and shape[0] not in groups:
                    continue
                case, default = gemm_case(*shape)
                medians, widest = run_case(case, default, threads, plan)
                print("\n".join(rows(case, level, medians, widest, peaks[level])), flush=True)
    finally:
        _core.set_level(_core.detected_level())


if __name__ == "__main__":
    main()
