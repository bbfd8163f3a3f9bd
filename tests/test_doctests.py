"""The examples in every dmlq module's docstrings, run against the dmlq that Python imports.

They run from here rather than through ``--doctest-modules`` on ``src/dmlq``, so the suite checks an
installed wheel as well as an editable checkout without importing a second copy of the package.
"""

from __future__ import annotations

import doctest
import importlib
import io
import pkgutil

import pytest

import dmlq

# The optional packages whose absence skips a module's examples (the module imports them lazily).
OPTIONAL_IMPORTS = {"dmlq.dask": ("dask",), "dmlq.chunked": ("dask", "zarr")}


def module_names() -> list[str]:
    """Every module of the imported dmlq package, the compiled core included."""
    return sorted(["dmlq", *(module.name for module in pkgutil.walk_packages(dmlq.__path__, "dmlq."))])


@pytest.mark.parametrize("name", module_names())
def test_docstring_examples_pass(name):
    for dependency in OPTIONAL_IMPORTS.get(name, ()):
        pytest.importorskip(dependency, reason=f"{name}'s examples need {dependency}")
    module = importlib.import_module(name)
    output = io.StringIO()
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    for test in doctest.DocTestFinder().find(module, name):
        runner.run(test, out=output.write)
    assert runner.failures == 0, output.getvalue()


def test_the_examples_are_found():
    # Guards against the finder silently seeing nothing, e.g. docstrings stripped by python -OO.
    names = [name for name in module_names() if name not in OPTIONAL_IMPORTS]
    examples = sum(len(test.examples) for name in names
                   for test in doctest.DocTestFinder().find(importlib.import_module(name), name))  # fmt: skip
    assert examples > 50
