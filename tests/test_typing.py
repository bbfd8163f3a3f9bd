"""dmlq's public API as a type checker sees it: README's examples pass ``mypy --strict``, and the names
a module exports lazily or by a list are the ones it declares."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import dmlq.onnx
from dmlq import ops

EXAMPLES = Path(__file__).with_name("typing") / "readme_examples.py"


def test_the_readme_examples_pass_mypy_strict(tmp_path):
    pytest.importorskip("mypy", reason="mypy is in the test extras")
    command = [sys.executable, "-m", "mypy", "--strict", "--untyped-calls-exclude=dask",  # Dask is untyped
               "--cache-dir", str(tmp_path / "mypy-cache"), str(EXAMPLES)]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True, timeout=240)
    assert (result.returncode, result.stdout) == (0, "Success: no issues found in 1 source file\n"), (
        result.stdout
    )


def test_ops_exports_every_operator_by_a_written_out_list():
    assert {cls.__name__ for cls in ops.OPERATORS} <= set(ops.__all__)


def test_dmlq_onnx_declares_for_type_checkers_each_name_it_loads_lazily():
    tree = ast.parse(Path(dmlq.onnx.__file__).read_text(encoding="utf-8"))
    guarded = next(
        node for node in tree.body if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING"
    )
    imported = {
        alias.name for node in guarded.body if isinstance(node, ast.ImportFrom) for alias in node.names
    }
    assert imported == set(dmlq.onnx.__all__)
