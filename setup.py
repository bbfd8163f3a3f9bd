"""Builds dmlq's compiled core, the extension module ``dmlq._core`` (everything else is pyproject.toml).

The C sources carry their own per-function CPU targets and dispatch at run time, so the flags here
stay generic: one binary runs on any x86-64 or ARM64 machine. ``-ffp-contract=off`` keeps every
float operation a separately rounded IEEE operation, as the NumPy reference evaluates it.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import numpy
from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.errors import CompileError

CORE = Path("src/dmlq/_core")
UNIX_FLAGS = ["-std=gnu11", "-O3", "-ffp-contract=off", "-fno-strict-aliasing", "-fvisibility=hidden",
              "-pthread"]  # fmt: skip
MSVC_FLAGS = ["/O2", "/fp:precise", "/std:c11"]


class BuildCore(build_ext):
    """``build_ext`` choosing the flags per compiler.

    POSIX builds run their own pthread pool; MSVC builds use OpenMP when it is available.
    """

    def build_extensions(self) -> None:
        msvc = self.compiler.compiler_type == "msvc"
        compile_flags = list(MSVC_FLAGS if msvc else UNIX_FLAGS)
        link_flags = [] if msvc else ["-pthread"]
        if msvc and self._compiles_with("/openmp"):
            compile_flags.append("/openmp")
        for extension in self.extensions:
            extension.extra_compile_args = compile_flags
            extension.extra_link_args = link_flags
        super().build_extensions()

    def _compiles_with(self, flag: str) -> bool:
        """Whether a small OpenMP program compiles with ``flag``."""
        with tempfile.TemporaryDirectory() as directory:
            source = os.path.join(directory, "probe.c")
            Path(source).write_text("#include <omp.h>\nint main(void) { return omp_get_max_threads(); }\n")
            try:
                self.compiler.compile([source], output_dir=directory, extra_postargs=[flag])
            except CompileError:
                return False
        return True


core = Extension(
    "dmlq._core",
    sources=sorted(str(path) for path in CORE.glob("*.c")),
    depends=sorted(str(path) for path in CORE.glob("*.h")),
    include_dirs=[numpy.get_include(), str(CORE)],
    define_macros=[
        ("NPY_NO_DEPRECATED_API", "NPY_1_23_API_VERSION"),
        ("NPY_TARGET_VERSION", "NPY_1_23_API_VERSION"),
    ],  # fmt: skip
)

setup(ext_modules=[core], cmdclass={"build_ext": BuildCore})
