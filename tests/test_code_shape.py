"""The size limit the package keeps: no function or method of ``cdc_sink/`` is over 80
lines (decorators and docstring included), so that each reads in one sitting.

Files have no limit: a file holds one concept, however long that concept is, and is
split by concept, never to fit a number (TigerBeetle's TIGER_STYLE.md limits functions,
not files, and says how to split one: centralize the control flow in the parent, push
the leaf work down into helpers).

Complexity is checked by ruff (C901, ``max-complexity`` in pyproject.toml) in ``make lint``.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "cdc_sink"
FUNCTION_LIMIT = 80


def _modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def test_the_package_is_where_the_test_looks() -> None:
    assert (PACKAGE / "table.py").is_file()
    assert len(_modules()) > 50


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
