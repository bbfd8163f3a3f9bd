"""dmlq is typed: ``mypy --strict`` finds nothing in the whole package (the public API, and the
kernels' adapters behind the device), with dmlq/_core.pyi typing the compiled core."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import dmlq

# Dask's functions are unannotated (its py.typed covers a few): calling them is allowed, and
# dmlq.dask names what each returns.
UNTYPED = ("dask",)


def test_mypy_strict_finds_nothing_in_dmlq(tmp_path: Path) -> None:
    pytest.importorskip("mypy", reason="mypy is not installed")
    command = [sys.executable, "-m", "mypy", "--strict", "--follow-imports=silent",
               "--cache-dir", str(tmp_path), *(f"--untyped-calls-exclude={name}" for name in UNTYPED),
               "-p", "dmlq"]  # fmt: skip
    source = Path(dmlq.__file__).parents[1]  # mypy reads dmlq, and _core.pyi, from where it is imported
    result = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=source)
    assert result.returncode == 0, result.stdout + result.stderr
