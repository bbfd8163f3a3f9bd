"""setup.py's probes: the AMX kernel is left out, with one line saying why, when the compiler is not one
known to build it correctly or cannot assemble AMX instructions."""

from __future__ import annotations

import importlib.util
import platform
import sys

# distutils as setuptools provides it to builds (its own copy under that name): the compiler it makes
# raises the CompileError setup.py catches, which setuptools._distutils' copy of the class is not
from distutils.ccompiler import new_compiler
from distutils.sysconfig import customize_compiler
from pathlib import Path

import pytest
from setuptools import Distribution
from setuptools.errors import CompileError

ROOT = Path(__file__).resolve().parents[1]


def load_setup_script():
    spec = importlib.util.spec_from_file_location("dmlq_setup_script", ROOT / "setup.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # its setup() runs only as __main__
    return module


if not (ROOT / "setup.py").is_file():
    pytest.skip("tests setup.py, absent next to tests run on an installed wheel", allow_module_level=True)
setup_script = load_setup_script()


class StubCompiler:
    """A compiler that refuses sources containing ``refused`` (every source when it is empty)."""

    compiler_type = "unix"

    def __init__(self, refused: str | None) -> None:
        self.refused = refused
        self.sources: list[str] = []

    def compile(self, sources, output_dir, extra_postargs):
        source = Path(sources[0]).read_text()
        self.sources.append(source)
        if self.refused is not None and self.refused in source:
            raise CompileError("refused by the stub")
        return [str(Path(output_dir, "probe.o"))]


def test_a_compiler_not_known_to_be_good_leaves_amx_out():
    reason = setup_script.amx_left_out_because(StubCompiler(refused=""), [])
    assert reason == "the compiler is not one known to build it correctly (GCC >= 11 or clang >= 14)"


def test_an_assembler_without_amx_leaves_amx_out():
    reason = setup_script.amx_left_out_because(StubCompiler(refused="_tile_dpbusd"), [])
    assert reason == "the compiler or its assembler does not know the AMX instructions"


def test_amx_is_built_when_both_probes_compile():
    compiler = StubCompiler(refused=None)
    assert setup_script.amx_left_out_because(compiler, []) is None
    assert len(compiler.sources) == 2


def test_the_build_says_in_one_line_why_amx_is_left_out(capsys):
    command = setup_script.BuildCore(Distribution())
    command.compiler = StubCompiler(refused="_tile_dpbusd")
    assert command._amx_macros([]) == [("DMLQ_NO_AMX", None)]
    assert capsys.readouterr().err == (
        "dmlq: building without the AMX kernel: the compiler or its assembler does not know the AMX"
        " instructions\n"
    )


@pytest.fixture
def real_compiler():
    if not (sys.platform.startswith("linux") and platform.machine() == "x86_64"):
        pytest.skip("the AMX probes run on x86-64 Linux builds only")
    compiler = new_compiler()
    customize_compiler(compiler)
    return compiler


def test_this_machines_compiler_passes_both_probes(real_compiler):
    assert setup_script.amx_left_out_because(real_compiler, setup_script.UNIX_FLAGS) is None


@pytest.mark.parametrize("version", ["-D__GNUC__=10", "-D__clang__ -D__clang_major__=13"])
def test_the_version_probe_refuses_gcc_10_and_clang_13(real_compiler, version):
    forget_own = ["-U__GNUC__", "-U__clang__", "-U__clang_major__", "-Wno-builtin-macro-redefined"]
    pretend = [*forget_own, *version.split()]
    reason = setup_script.amx_left_out_because(real_compiler, pretend)
    assert reason is not None and "known to build it correctly" in reason
