"""What a packager gets: an sdist whose own tests can run, and metadata that matches the README."""

from __future__ import annotations

import importlib.metadata
import importlib.resources
import re
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
TEST_INPUTS = ("tests", "examples", "docs", "benchmarks")  # what the suite reads besides the package
BUILD_SDIST = "import setuptools.build_meta as backend, sys; print(backend.build_sdist(sys.argv[1]))"


@pytest.fixture(scope="module")
def sdist_files(tmp_path_factory) -> set[str]:
    """The paths in an sdist built from this source tree, relative to its top folder."""
    if not (ROOT / "setup.py").is_file():
        pytest.skip("builds an sdist from the source tree, absent next to tests run on an installed wheel")
    pytest.importorskip("setuptools", minversion="77", reason="license-files needs setuptools 77")
    folder = tmp_path_factory.mktemp("sdist")
    build = subprocess.run([sys.executable, "-c", BUILD_SDIST, str(folder)], cwd=ROOT, capture_output=True,
                           text=True, timeout=300)  # fmt: skip
    assert build.returncode == 0, build.stderr
    with tarfile.open(folder / build.stdout.split()[-1]) as sdist:
        return {name.partition("/")[2] for name in sdist.getnames()}


def source_files(folder: str) -> list[str]:
    """The files under ``folder`` of the source tree, without Python's and tools' caches."""
    paths = (path for path in (ROOT / folder).rglob("*") if path.is_file())
    return sorted(str(path.relative_to(ROOT)) for path in paths
                  if not any(part.startswith((".", "__pycache__")) for part in path.relative_to(ROOT).parts)
                  and path.suffix not in (".pyc", ".tmp"))  # fmt: skip


@pytest.mark.parametrize("folder", TEST_INPUTS)
def test_the_sdist_carries_everything_the_tests_read(sdist_files, folder):
    assert source_files(folder), f"{folder}/ is empty here"
    assert set(source_files(folder)) - sdist_files == set()


def test_the_sdist_carries_the_license_and_the_c_core(sdist_files):
    assert {"LICENSE", "README.md", "tests/conftest.py", "src/dmlq/py.typed"} <= sdist_files
    assert ".ci/run" in sdist_files  # tests/test_docs.py holds README's commands against it
    assert {str(path.relative_to(ROOT)) for path in (ROOT / "src/dmlq/_core").glob("*.[ch]")} <= sdist_files


def test_the_package_says_it_is_typed():
    assert importlib.resources.files("dmlq").joinpath("py.typed").is_file()


def test_the_metadata_names_the_license_and_the_pythons_the_readme_promises():
    metadata = importlib.metadata.metadata("dmlq")
    assert metadata["License-Expression"] == "MIT"
    promise = re.search(r"supports CPython 3\.(\d+) to 3\.(\d+)", metadata["Description"])
    first, last = map(int, promise.groups())
    assert metadata["Requires-Python"] == f">=3.{first}"
    versions = [re.search(r":: Python :: (3\.\d+)$", line) for line in metadata.get_all("Classifier")]
    listed = {version[1] for version in versions if version}
    assert listed == {f"3.{minor}" for minor in range(first, last + 1)}
