"""The float GEMM benchmark's harness at a tiny size: its rows, its peers' results and the FMA probes.

Only the harness is checked (cells computed from the medians, peers agreeing with dmlq), never a speed.
"""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

pytest.importorskip("onnxruntime")
pytest.importorskip("onnx")

from dmlq import _core  # noqa: E402

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.fixture
def gemm_float(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    threads = _core.get_num_threads()
    yield importlib.import_module("gemm_float")
    _core.set_num_threads(threads)


def test_a_tiny_case_gives_a_row_per_thread_count_with_its_share_of_the_peak(gemm_float):
    # K = 67, N = 33: no kernel's step divides them; TransB and a bias, as MatMulNBits' and the CNN's
    case, default = gemm_float.gemm_case("tiny", "tiny", (), 3, 67, 33, True, True)
    plan = gemm_float.Plan(runs=1, warmups=1, budget=0.01, min_sample=0.0, min_runs=1, settle_limit=0.0)
    medians, widest = gemm_float.run_case(case, default, [1, 2], plan)
    assert widest < 1e-5  # NumPy's sums round differently, never by more (0 without threadpoolctl)
    rows = gemm_float.rows(case, "avx2", medians, widest, {"1": 100.0, "2": 200.0})
    assert len(rows) == 2 + (gemm_float.BLAS_DEFAULT is not None)
    cells = [row.strip("| ").split(" | ") for row in rows]
    assert [row[2] for row in cells[:2]] == ["1", "2"] and all(len(row) == 14 for row in cells[:2])
    for row, threads in zip(cells[:2], (1, 2)):
        rate = case.work / medians[("dmlq", threads)] / 1e9
        assert row[4] == f"{rate:.1f}" and row[5] == f"{rate / (100.0 * threads):.0%}"
        numpy = medians.get(("numpy", threads))  # None without threadpoolctl: NumPy is left out
        assert row[10] == ("-" if numpy is None else f"{numpy / medians[('dmlq', threads)]:.2f}")


def test_the_fma_peak_is_probed_at_the_vector_levels_only(gemm_float):
    ceilings = gemm_float.ceilings
    assert ceilings.fma_peak("portable", 1) is None and ceilings.fma_instruction("portable") is None
    vector_levels = [level for level in ("avx2", "avx512") if level in _core.LEVELS[: _core.LEVELS.index(
        _core.detected_level()) + 1]]  # fmt: skip
    for level in vector_levels:
        assert ceilings.fma_peak(level, 1, sample_seconds=0.001) > 0
