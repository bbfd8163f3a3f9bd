"""The generated support page stays equal to the tables the validator reads."""

from pathlib import Path

from dmlq.ops import report

PAGE = Path(__file__).resolve().parents[1] / "docs" / "operators.md"


def test_support_page_is_generated_from_the_tables():
    assert PAGE.read_text() == report.markdown(), "run: python -m dmlq.ops.report > docs/operators.md"


def test_support_page_lists_every_operator_and_activation():
    from dmlq import activations, ops

    text = PAGE.read_text()
    for cls in ops.OPERATORS:
        assert f"## {cls.__name__}" in text
    for cls in activations.ACTIVATIONS.values():
        assert f"`{cls.TYPE_NAME}`" in text
