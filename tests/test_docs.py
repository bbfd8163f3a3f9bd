"""The documentation is true: README.md and every page of docs/ run as written.

Each page's ``python`` blocks run as one doctest, its ``console`` blocks as commands whose output
must be the one shown, its links lead to files and headings that exist, and no block is left
unchecked. The generated support page stays equal to the tables the validator reads.
"""

from __future__ import annotations

import argparse
import doctest
import io
import re
from pathlib import Path

import pytest

from dmlq.cli import build_parser
from dmlq.ops import report
from test_cli import EXAMPLES, dmlq_cli

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "operators.md"
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# The packages without which a page's examples are skipped (they are extras, not dependencies).
OPTIONAL_IMPORTS = {"dask.md": ("dask", "distributed"), "onnx.md": ("onnx", "onnxruntime")}
CHECKED_LANGUAGES = {"python", "console"}


def page_id(page: Path) -> str:
    return str(page.relative_to(ROOT))


def fenced_blocks(page: Path) -> list[tuple[str, int, list[str]]]:
    """(language, line number of the opening fence, lines) of every fenced block of ``page``."""
    blocks, language, start, body = [], None, 0, []
    for number, line in enumerate(page.read_text().splitlines(), 1):
        if language is None and line.startswith("```"):
            language, start, body = line[3:].strip(), number, []
        elif language is not None and line.rstrip() == "```":
            blocks.append((language, start, body))
            language = None
        elif language is not None:
            body.append(line)
    assert language is None, f"{page_id(page)}:{start}: a fenced block is not closed"
    return blocks


def doctest_source(page: Path) -> str:
    """The page with everything but its python blocks blanked, so doctest's line numbers are the page's."""
    lines = [""] * (len(page.read_text().splitlines()) + 1)
    for language, start, body in fenced_blocks(page):
        if language == "python":
            lines[start : start + len(body)] = body
    return "\n".join(lines)


def console_blocks() -> list[tuple[str, list[tuple[str, str]]]]:
    """(page:line, [(command, output), ...]) for every console block of the pages."""
    found = []
    for page in PAGES:
        for language, start, body in fenced_blocks(page):
            if language == "console":
                sessions = "\n".join(body).split("$ ")[1:]
                pairs = [(command, output.rstrip("\n")) for command, _, output in
                         (session.partition("\n") for session in sessions)]  # fmt: skip
                found.append((f"{page_id(page)}:{start}", pairs))
    return found


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_the_python_examples_pass(page, tmp_path, monkeypatch):
    for module in OPTIONAL_IMPORTS.get(page.name, ()):
        pytest.importorskip(module, reason=f"{page_id(page)}'s examples need {module}")
    (tmp_path / "examples").symlink_to(EXAMPLES)
    monkeypatch.chdir(tmp_path)  # the examples name files as a reader in the checkout's root does
    test = doctest.DocTestParser().get_doctest(doctest_source(page), {}, page_id(page), str(page), 0)
    output = io.StringIO()
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    runner.run(test, out=output.write)
    assert runner.failures == 0, output.getvalue()
    has_python = any(language == "python" for language, _, _ in fenced_blocks(page))
    assert bool(test.examples) == has_python


@pytest.mark.parametrize(("block", "sessions"), console_blocks(), ids=[b for b, _ in console_blocks()])
def test_the_console_sessions_print_what_they_show(tmp_path, block, sessions):
    # A block's commands run in order in one folder, so a later one can read what an earlier wrote.
    (tmp_path / "examples").symlink_to(EXAMPLES)
    for command, output in sessions:
        result = dmlq_cli(*command.split()[1:], cwd=tmp_path)
        assert (result.stdout + result.stderr).rstrip("\n") == output, f"{block}: $ {command}"


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_every_block_is_checked(page):
    for language, start, body in fenced_blocks(page):
        where = f"{page_id(page)}:{start}"
        if language == "python":
            assert any(line.startswith(">>> ") for line in body), f"{where}: a python block without >>>"
        elif language == "console":
            commands = [line for line in body if line.startswith("$ ")]
            assert body[0].startswith("$ ") and all(c.startswith("$ dmlq ") for c in commands), where
        else:
            assert (page.name, language) == ("README.md", "bash"), (
                f"{where}: a {language!r} block is unchecked"
            )
            assert body == ci_commands(), f"{where}: README's commands are not the ones .ci/run runs"


def ci_commands() -> list[str]:
    """The commands of .ci/run, which CI runs on a clean clone."""
    lines = (ROOT / ".ci" / "run").read_text().splitlines()
    return [line for line in lines if line and not line.startswith(("#", "set "))]


def test_the_docs_show_run_check_and_ops_with_real_output():
    commands = {command.split()[1] for _, sessions in console_blocks() for command, _ in sessions}
    assert {"run", "check", "ops", "compare", "quantize", "dequantize"} <= commands


def test_the_command_line_section_names_every_subcommand():
    readme = (ROOT / "README.md").read_text()
    section = " ".join(readme.split("## Command line")[1].split("\n## ")[0].split())
    [subcommands] = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    count = ("One", "Two", "Three", "Four", "Five", "Six", "Seven")[len(subcommands.choices) - 1]
    assert f"{count} subcommands" in section
    assert all(f"`{name}`" in section for name in subcommands.choices)


def heading_anchors(page: Path) -> set[str]:
    """The anchors GitHub gives the page's headings: lower case, punctuation dropped, spaces as -."""
    headings = (line.lstrip("#").strip() for line in page.read_text().splitlines() if line.startswith("#"))
    return {re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-") for heading in headings}


@pytest.mark.parametrize("page", [*PAGES, ROOT / "benchmarks" / "README.md"], ids=page_id)
def test_the_links_lead_somewhere(page):
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.DOTALL)
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if target.startswith(("http://", "https://")):
            continue
        path, _, anchor = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        assert linked.exists(), f"{page_id(page)}: {target} does not exist"
        if anchor:
            assert anchor in heading_anchors(linked), f"{page_id(page)}: {target} has no such heading"


def test_support_page_is_generated_from_the_tables():
    assert PAGE.read_text() == report.markdown(), "run: python -m dmlq.ops.report > docs/operators.md"


def test_support_page_lists_every_operator_and_activation():
    from dmlq import activations, ops

    text = PAGE.read_text()
    for cls in ops.OPERATORS:
        assert f"## {cls.__name__}" in text
    for cls in activations.ACTIVATIONS.values():
        assert f"`{cls.TYPE_NAME}`" in text
