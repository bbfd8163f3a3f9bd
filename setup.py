"""Builds dmlq's compiled core, the extension module ``dmlq._core`` (everything else is pyproject.toml).

The C sources carry their own per-function CPU targets and dispatch at run time, so the flags here
stay generic: one binary runs on any x86-64 or ARM64 machine. ``-ffp-contract=off`` keeps every
float operation a separately rounded IEEE operation, as the NumPy reference evaluates it.

The AMX kernel is built only where a probe shows the compiler is one known to build it correctly
and its assembler knows the AMX instructions; otherwise the build says why and leaves it out.
"""

from __future__ import annotations

import platform
import sys
import tempfile
from pathlib import Path

import numpy
from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.errors import CompileError

CORE = Path("src/dmlq/_core")
# The oldest NumPy whose C API the core may use: the run-time floor in pyproject's dependencies.
NUMPY_API = "NPY_1_24_API_VERSION"
# -fwrapv is Python's own flag, which a CFLAGS of one's own replaces: without it GCC 12 kept the few-row
# VNNI kernel's accumulators in memory, a store after each vpdpbusd (1 x 768 x 768 at 1 thread 3.3 ->
# 4.4 us, Zen 5), and the build would differ from the one tested.
UNIX_FLAGS = ["-std=gnu11", "-O3", "-fwrapv", "-ffp-contract=off", "-fno-strict-aliasing",
              "-fvisibility=hidden", "-pthread", "-Werror=implicit-function-declaration"]  # fmt: skip
MSVC_FLAGS = ["/O2", "/fp:precise", "/std:c11"]

OPENMP_PROBE = "#include <omp.h>\nint main(void) { return omp_get_max_threads(); }\n"
# clang 13 adds a tilerelease inside the AMX kernel; GCC before 11 and clang before 12 lack AMX.
KNOWN_GOOD_AMX_COMPILER_PROBE = """
#if defined(__clang__)
#if __clang_major__ < 14
#error "clang before 14"
#endif
#elif !defined(__GNUC__) || __GNUC__ < 11
#error "not GCC 11 or later"
#endif
"""
AMX_INSTRUCTIONS_PROBE = """
#include <immintrin.h>
__attribute__((target("amx-tile,amx-int8"))) void probe(const void *data) {
    _tile_loadd(1, data, 64);
    _tile_loadd(2, data, 64);
    _tile_dpbusd(0, 1, 2);
    _tile_stored(0, (void *)data, 64);
    _tile_release();
}
"""


def compiles(compiler, source: str, flags: list[str]) -> bool:
    """Whether ``compiler`` (a distutils-style compiler) compiles ``source`` to an object file.

    The object file is assembled too, so an assembler that lacks an instruction fails here.
    """
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory, "probe.c")
        path.write_text(source)
        try:
            compiler.compile([str(path)], output_dir=directory, extra_postargs=flags)
        except CompileError:
            return False
    return True


def amx_left_out_because(compiler, flags: list[str]) -> str | None:
    """Why the AMX kernel cannot be built with ``compiler``, or None when it can."""
    if not compiles(compiler, KNOWN_GOOD_AMX_COMPILER_PROBE, flags):
        return "the compiler is not one known to build it correctly (GCC >= 11 or clang >= 14)"
    if not compiles(compiler, AMX_INSTRUCTIONS_PROBE, flags):
        return "the compiler or its assembler does not know the AMX instructions"
    return None


def builds_for_x86_64_linux() -> bool:
    """Whether this build targets x86-64 Linux, the only platform with an AMX kernel (cpu.c)."""
    return sys.platform.startswith("linux") and platform.machine().lower() in ("x86_64", "amd64")


class BuildCore(build_ext):
    """``build_ext`` choosing the flags per compiler.

    POSIX builds run their own pthread pool; MSVC builds use OpenMP when it is available.
    """

    def build_extensions(self) -> None:
        msvc = self.compiler.compiler_type == "msvc"
        compile_flags = list(MSVC_FLAGS if msvc else UNIX_FLAGS)
        link_flags = [] if msvc else ["-pthread"]
        if msvc and compiles(self.compiler, OPENMP_PROBE, ["/openmp"]):
            compile_flags.append("/openmp")
        macros = [] if msvc or not builds_for_x86_64_linux() else self._amx_macros(compile_flags)
        for extension in self.extensions:
            extension.extra_compile_args = compile_flags
            extension.extra_link_args = link_flags
            extension.define_macros = extension.define_macros + macros
        super().build_extensions()

    def _amx_macros(self, flags: list[str]) -> list[tuple[str, str | None]]:
        reason = amx_left_out_because(self.compiler, flags)
        if reason is None:
            return []
        print(f"dmlq: building without the AMX kernel: {reason}", file=sys.stderr)
        return [("DMLQ_NO_AMX", None)]


core = Extension(
    "dmlq._core",
    sources=sorted(str(path) for path in CORE.glob("*.c")),
    depends=sorted(str(path) for path in CORE.glob("*.h")),
    include_dirs=[numpy.get_include(), str(CORE)],
    define_macros=[("NPY_NO_DEPRECATED_API", NUMPY_API), ("NPY_TARGET_VERSION", NUMPY_API)],
)

if __name__ == "__main__":  # as setuptools runs it; tests import the probes
    setup(ext_modules=[core], cmdclass={"build_ext": BuildCore})
