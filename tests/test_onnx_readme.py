"""README's "ONNX models" section shows what ``dmlq check`` and ``dmlq compare`` print on the examples."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from dmlq import _core
from dmlq.cli import main

ROOT = Path(__file__).resolve().parents[1]
SECTION = ROOT.joinpath("README.md").read_text().split("## ONNX models", 1)[1].split("\n## ", 1)[0]
SHOWN = [
    (command, output)
    for block in re.findall(r"```console\n(.*?)```", SECTION, re.S)
    for command, output in re.findall(r"^\$ (.*?)\n(.*?)(?=^\$ |\Z)", block, re.S | re.M)
]


def test_the_section_shows_check_and_compare() -> None:
    assert [command.split()[1] for command, _ in SHOWN] == ["check", "compare", "compare"]


@pytest.mark.parametrize(("command", "shown"), SHOWN, ids=[command for command, _ in SHOWN])
def test_readme_shows_real_output(command, shown, capsys, monkeypatch) -> None:
    if "mlp_qdq" in command and "compare" in command and "vnni" in _core.get_level():
        pytest.skip("the README shows onnxruntime's AVX2 kernel; VNNI CPUs compute that output otherwise")
    monkeypatch.chdir(ROOT)
    words, _, head = command.partition(" | head -")
    main(shlex.split(words)[1:])
    lines = capsys.readouterr().out.splitlines()
    assert (lines[: int(head)] if head else lines) == shown.splitlines()
