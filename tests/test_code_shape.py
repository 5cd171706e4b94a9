"""The size limits the package keeps, so that each module and function reads in one sitting.

* ``cdc_sink/table.py`` (the facade a newcomer reads first) is at most 450 lines;
* no other module of ``cdc_sink/`` is over 600 lines;
* no function or method of ``cdc_sink/`` is over 80 lines (decorators and docstring
  included).

Complexity is checked by ruff (C901, ``max-complexity`` in pyproject.toml) in ``make lint``.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "cdc_sink"
MODULE_LIMIT = 600
FACADE_LIMIT = 450
FUNCTION_LIMIT = 80


def _modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def test_the_package_is_where_the_test_looks() -> None:
    assert (PACKAGE / "table.py").is_file()
    assert len(_modules()) > 50


def test_no_module_is_over_its_limit() -> None:
    too_long = {}
    for path in _modules():
        lines = len(path.read_text().splitlines())
        limit = FACADE_LIMIT if path == PACKAGE / "table.py" else MODULE_LIMIT
        if lines > limit:
            too_long[str(path.relative_to(PACKAGE))] = (lines, limit)
    assert not too_long, f"modules over their line limit (lines, limit): {too_long}"


def test_no_function_is_over_80_lines() -> None:
    too_long = {}
    for path in _modules():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                first = min([node.lineno] + [d.lineno for d in node.decorator_list])
                lines = (node.end_lineno or node.lineno) - first + 1
                if lines > FUNCTION_LIMIT:
                    name = f"{path.relative_to(PACKAGE)}:{node.lineno} {node.name}"
                    too_long[name] = lines
    assert not too_long, f"functions over {FUNCTION_LIMIT} lines: {too_long}"
