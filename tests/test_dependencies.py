"""The distributions dmlq declares are the ones it imports: each front end, used in a process where
only the declared distributions (and what they require in turn) can be imported, works.

The test extras install far more than any front end needs (onnx brings ml_dtypes, for one), so
without this a missing declaration shows only on a user's plain install.
"""

from __future__ import annotations

import functools
import importlib.metadata
import json
import os
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

import dmlq

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
SOURCE_ROOT = Path(dmlq.__file__).resolve().parents[1]  # src/ (or site-packages when installed)
SCRIPT = Path(__file__).with_name("declared_only.py")


@functools.cache
def project() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]


def declared(*extras: str) -> list[Requirement]:
    """``[project.dependencies]`` and those of ``extras``, as pyproject.toml lists them."""
    texts = [
        *project()["dependencies"],
        *(text for extra in extras for text in project()["optional-dependencies"][extra]),
    ]
    return [Requirement(text) for text in texts]


def distributions(requirements: Iterable[Requirement]) -> set[str]:
    """The installed distributions ``requirements`` bring in, with their own requirements (extras
    and environment markers evaluated as pip does)."""
    seen: set[tuple[str, str]] = set()  # (distribution, extra): "" for the distribution itself
    pending = [(requirement, "") for requirement in requirements]
    while pending:
        requirement, extra_asked = pending.pop()
        if requirement.marker and not requirement.marker.evaluate({"extra": extra_asked}):
            continue
        name = canonicalize_name(requirement.name)
        for extra in ("", *requirement.extras):
            if (name, extra) in seen:
                continue
            if name == "dmlq":  # an extra naming dmlq's own
                pending += [(own, "") for own in declared(*requirement.extras)]
                continue
            try:
                needs = importlib.metadata.requires(name) or []
            except importlib.metadata.PackageNotFoundError:
                break  # not installed here: nothing of it can be imported anyway
            seen.add((name, extra))
            pending += [(Requirement(text), extra) for text in needs]
    return {name for name, _ in seen}


def importable(requirements: Iterable[Requirement]) -> list[str]:
    """The top-level modules of the distributions ``requirements`` bring in, and dmlq."""
    allowed = distributions(requirements)
    modules = importlib.metadata.packages_distributions()
    return sorted({"dmlq"} | {module for module, names in modules.items()
                              if allowed & {canonicalize_name(name) for name in names}})  # fmt: skip


def run_declared_only(scenario: str, extras: tuple[str, ...], folder: Path,
                      refused: frozenset[str] = frozenset()) -> subprocess.CompletedProcess:  # fmt: skip
    """``scenario`` of declared_only.py, with the modules of dmlq's dependencies and ``extras``
    importable (less ``refused``)."""
    allowed = [module for module in importable(declared(*extras)) if module not in refused]
    path = os.pathsep.join(filter(None, [str(SOURCE_ROOT), os.environ.get("PYTHONPATH")]))
    return subprocess.run(
        [sys.executable, str(SCRIPT), scenario, str(folder)], input=json.dumps(allowed),
        env={**os.environ, "PYTHONPATH": path}, capture_output=True, text=True, timeout=240,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("scenario", "extras"),
    [("numpy_layer_and_command_line", ()), ("onnx_front_end", ("onnx",)), ("dask_front_end", ("dask",))],
)
def test_each_front_end_needs_only_what_it_declares(tmp_path, scenario, extras):
    result = run_declared_only(scenario, extras, tmp_path)
    assert (result.returncode, result.stderr) == (0, ""), result.stderr


def test_an_import_outside_the_declared_ones_fails_the_process(tmp_path):
    """Without ml_dtypes (4-bit's types), the NumPy layer's scenario fails, naming it."""
    result = run_declared_only("numpy_layer_and_command_line", (), tmp_path, refused=frozenset({"ml_dtypes"}))
    assert (
        result.returncode == 1 and "No module named 'ml_dtypes' (not a declared dependency)" in result.stderr
    )


def test_the_closure_follows_extras_and_markers():
    found = distributions(
        [Requirement("dask[array]>=2024.1"), Requirement("nothing-such; python_version < '3'")]
    )
    assert {"dask", "numpy", "toolz"} <= found and "distributed" not in found
