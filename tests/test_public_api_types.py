"""The public API is typed: ``mypy --strict`` finds nothing in the NumPy layer, the operator
descriptions and their formulas, the DxDispatch, ONNX and Dask front ends, the chunked file jobs,
the device, the CLI and the tensor model (imports followed silently), with dmlq/_core.pyi typing
the compiled core."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import dmlq

PACKAGES = ("dmlq.numpy_api", "dmlq.ops", "dmlq.reference", "dmlq.dxdispatch", "dmlq.onnx")
MODULES = ("dmlq", "dmlq.__main__", "dmlq.dask", "dmlq.chunked", "dmlq.device", "dmlq.packed", "dmlq.cli",
           "dmlq.tensor", "dmlq.types", "dmlq.activations", "dmlq.buffers", "dmlq.errors", "dmlq.int4",
           "dmlq.threads")  # fmt: skip
# Dask's functions are unannotated (its py.typed covers a few): calling them is allowed, and
# dmlq.dask names what each returns.
UNTYPED = ("dask",)


def test_mypy_strict_finds_nothing_in_the_public_api(tmp_path: Path) -> None:
    pytest.importorskip("mypy", reason="mypy is not installed")
    targets = [flag for name in PACKAGES for flag in ("-p", name)]
    targets += [flag for name in MODULES for flag in ("-m", name)]
    command = [sys.executable, "-m", "mypy", "--strict", "--follow-imports=silent",
               "--cache-dir", str(tmp_path), *(f"--untyped-calls-exclude={name}" for name in UNTYPED),
               *targets]  # fmt: skip
    source = Path(dmlq.__file__).parents[1]  # mypy reads dmlq, and _core.pyi, from where it is imported
    result = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=source)
    assert result.returncode == 0, result.stdout + result.stderr
