"""The NumPy layer's package is typed: ``mypy --strict`` finds nothing in dmlq.numpy_api (its imports
followed silently: the rest of dmlq is not held to --strict), with dmlq/_core.pyi typing the compiled core."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import dmlq


def test_mypy_strict_finds_nothing_in_the_numpy_layer(tmp_path: Path) -> None:
    pytest.importorskip("mypy", reason="mypy is not installed")
    command = [sys.executable, "-m", "mypy", "--strict", "--follow-imports=silent",
               "--cache-dir", str(tmp_path), "-p", "dmlq.numpy_api"]  # fmt: skip
    source = Path(dmlq.__file__).parents[
        1
    ]  # mypy reads the package, and _core.pyi, from where it is imported
    result = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=source)
    assert result.returncode == 0, result.stdout + result.stderr
