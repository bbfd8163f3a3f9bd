"""The benchmark harness runs end to end at tiny sizes and writes consistent results.

Only the harness is checked here (files, keys, ratios computed from the medians), never a speed.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import math
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("onnxruntime")
pytest.importorskip("onnx")

BENCH = Path(__file__).resolve().parents[1] / "benchmarks" / "bench.py"
ELEMENTWISE = {"quantize", "dequantize", "quantized_add", "add_relu"}
CASES = {*ELEMENTWISE, "quantize_call", "gemm_u8s8", "gemm_u8u8", "gemm_batched", "gemm_per_row"}


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict, str]:
    out = tmp_path_factory.mktemp("bench")
    finished = subprocess.run(
        [sys.executable, str(BENCH), "--quick", "--sizes", "tiny", "--no-torch", "--out", str(out)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert finished.returncode == 0, finished.stderr
    return out, json.loads((out / "bench.json").read_text()), finished.stdout


def test_every_case_has_dmlq_and_onnxruntime_at_both_thread_counts(run):
    _, result, _ = run
    assert set(result["cases"]) == CASES
    for key, case in result["cases"].items():
        expected = {"dmlq", "dmlq per-tensor"} if key == "gemm_per_row" else {"dmlq", "onnxruntime"}
        assert expected <= set(case["contenders"]), key
        for contender in case["contenders"].values():
            assert set(contender["threads"]) == {"1", "2"}
            for measured in contender["threads"].values():
                assert len(measured["samples"]) >= 3
                assert measured["median"] == statistics.median(measured["samples"])


def test_ratios_are_peer_time_over_dmlq_time(run):
    _, result, _ = run
    assert result["ratios"]
    for row in result["ratios"]:
        contenders = result["cases"][row["case"]]["contenders"]
        dmlq, peer = contenders["dmlq"], contenders[row["peer"]]
        assert math.isclose(row["best"], peer["best"]["median"] / dmlq["best"]["median"])
        assert math.isclose(row["T1"], peer["threads"]["1"]["median"] / dmlq["threads"]["1"]["median"])


def test_every_target_has_a_verdict_from_its_value(run):
    _, result, _ = run
    verdicts = result["targets"]
    assert {t["case"] for t in verdicts} == CASES
    for target in verdicts:
        value, threshold = target["value"], target["threshold"]
        met = value >= threshold if target["rule"] == ">=" else value <= threshold
        assert target["verdict"] == ("PASS" if met else "MISS"), target
    assert set(result["memory"]) == ELEMENTWISE


def test_onnxruntime_computes_what_dmlq_computes_except_near_ties(run):
    from dmlq.onnx.ort_int8 import u8s8_saturates

    _, result, _ = run
    checks = {key: case["verification"] for key, case in result["cases"].items()}
    assert checks["quantize"]["onnxruntime"]["mismatches"] == 0
    u8s8 = {"gemm_u8s8", "gemm_batched", "gemm_per_row"}
    if u8s8_saturates():  # onnxruntime's int16 pair saturation on this CPU (dmlq.onnx.ort_int8)
        checks = {key: check for key, check in checks.items() if key not in u8s8}
    else:
        assert checks["gemm_u8s8"]["onnxruntime (B prepacked)"]["mismatches"] == 0
    assert all(c["max_abs_diff"] <= 1 for case in checks.values() for c in case.values())


def test_the_limits_are_measured_by_the_bare_loops(run):
    _, result, _ = run
    limits = result["limits"]
    assert limits["unavailable"] is None  # a C compiler and x86-64: the suite's machines have both
    assert set(limits["memory"]) == ELEMENTWISE
    for passes in limits["memory"].values():
        assert set(passes) == {"read", "write", "copy"}
        for kind, by_threads in passes.items():
            assert set(by_threads) == {"1", "2"}
            assert by_threads["2"]["bytes_per_second"] >= by_threads["1"]["bytes_per_second"] > 0
            stores = {by_threads[t]["stores"] for t in by_threads}
            assert stores <= ({None} if kind == "read" else {"ordinary", "non-temporal"})
    peak = limits["multiply_peak"]
    assert peak["level"] in result["meta"]["dmlq"]["kernels"]
    if peak["instruction"] is not None:  # AMX: no loop measures its peak
        assert peak["gops"]["2"] >= peak["gops"]["1"] > 0


def test_each_contender_is_shown_against_its_case_s_limit(run):
    _, result, stdout = run
    assert "T2 (of the limit)" in stdout
    add = result["cases"]["quantized_add"]["contenders"]["dmlq"]["threads"]["2"]["rate"]
    copy = result["limits"]["memory"]["quantized_add"]["copy"]["2"]["bytes_per_second"] / 1e9
    assert f"{add:.4g} GB/s ({add / copy:.0%})" in stdout
    peak = result["limits"]["multiply_peak"]
    if peak["instruction"] is not None:
        gemm = result["cases"]["gemm_u8s8"]["contenders"]["onnxruntime"]["threads"]["1"]["rate"]
        assert f"{gemm:.4g} GOPS ({gemm / peak['gops']['1']:.0%})" in stdout
        assert f"multiply peak at {peak['level']}" in stdout


def test_without_the_probes_the_report_says_why_and_claims_no_limit(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCH.parent))
    bench = importlib.import_module("bench")

    def not_x86():
        raise bench.ceilings.CeilingError("the probes are x86-64 loops; this machine is arm64")

    monkeypatch.setattr(bench.ceilings, "_library", not_x86)
    cases = [bench.Case("quantize", "quantize", "GB/s", 5.0 * 1024, []),
             bench.Case("gemm_u8s8", "gemm", "GOPS", 2.0 * 64**3, [])]  # fmt: skip
    limits = bench.measure_limits(cases, [1, 2], bench.PLANS["quick"])
    assert limits["unavailable"] == "the probes are x86-64 loops; this machine is arm64"
    assert limits["memory"] == limits["multiply_peak"]["gops"] == {}
    section = bench.report.limit_section({"limits": limits}, bench.report.text_table, explained=True)
    assert section == ["Limits not measured: the probes are x86-64 loops; this machine is arm64"]


def test_table_and_files_are_written(run):
    out, result, stdout = run
    assert "MISS" in stdout or "PASS" in stdout
    assert result["meta"]["versions"]["onnxruntime"]
    assert (out / "bench.md").read_text().startswith("# dmlq benchmark")
    if importlib.util.find_spec("matplotlib") is not None:
        assert (out / "bench.png").read_bytes()[:4] == b"\x89PNG"
