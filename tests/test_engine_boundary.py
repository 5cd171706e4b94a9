"""The engine owns a table's state, and everything above it goes through one door.

* No module of the product outside ``cdc_sink/engine/`` imports the engine's state module
  (``engine.core``) or its private helpers (``engine._commit``, ``engine._maintenance``,
  ``engine.pending``): the layers above get a table's core from
  :func:`cdc_sink.engine.core_of` and the public names of ``cdc_sink.engine``. (Tests and
  benchmarks may patch a private function to inject a fault or time it.)
* Nothing reads a ``_state`` attribute any more, and ``._core`` is read only by the
  facade (``table.py``) and the door itself.
* Outside the engine, nobody touches the core's own state: its tablets, what it
  prepared, its caches, its lock.
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PRODUCT = REPO / "cdc_sink"
ENGINE = PRODUCT / "engine"
SCANNED = [PRODUCT, REPO / "tests", REPO / "benchmarks", REPO / "testkit", REPO / "streaming_jobs"]

PRIVATE_MODULES = {
    "cdc_sink.engine.core",
    "cdc_sink.engine._commit",
    "cdc_sink.engine._maintenance",
    "cdc_sink.engine.pending",
}
CORE_STATE = {
    "_tablets",
    "_pending",
    "_cache",
    "_since_snapshot",
    "_schemas",
    "_lock",
    "_repaired",
    "_meta",
}


def _sources(roots: list[Path]) -> list[Path]:
    return sorted(p for root in roots for p in root.rglob("*.py") if "__pycache__" not in p.parts)


def _imports(tree: ast.AST) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{a.name}" for a in node.names)
    return names


def _attributes(tree: ast.AST) -> list[tuple[str, int]]:
    """Every ``x.name`` read or written, except on ``self`` and ``cls`` (an object's own)."""
    return [
        (n.attr, n.lineno)
        for n in ast.walk(tree)
        if isinstance(n, ast.Attribute)
        and not (isinstance(n.value, ast.Name) and n.value.id in ("self", "cls"))
    ]


def _outside_engine(path: Path) -> bool:
    return ENGINE not in path.parents and path != Path(__file__).resolve()


def test_the_scan_finds_the_engine_and_its_users() -> None:
    assert (ENGINE / "core.py").is_file()
    users = [p for p in _sources([PRODUCT]) if "core_of(" in p.read_text()]
    assert PRODUCT / "spark" / "_executors.py" in users  # an executor task's prepare


def test_no_module_outside_the_engine_imports_its_state_or_private_helpers() -> None:
    found = {}
    for path in filter(_outside_engine, _sources([PRODUCT, REPO / "streaming_jobs"])):
        bad = _imports(ast.parse(path.read_text())) & PRIVATE_MODULES
        if bad:
            found[str(path.relative_to(REPO))] = sorted(bad)
    assert not found, f"imports of the engine's state or private helpers: {found}"


def test_no_state_attribute_and_the_core_read_only_by_its_owner_and_the_door() -> None:
    owners = {PRODUCT / "table.py", ENGINE / "__init__.py"}
    found = []
    for path in _sources(SCANNED):
        if path == Path(__file__).resolve():
            continue
        for attr, line in _attributes(ast.parse(path.read_text().replace("np._core.", "np."))):
            if attr == "_state" or (attr == "_core" and path not in owners):
                found.append(f"{path.relative_to(REPO)}:{line} .{attr}")
    assert not found, f"reaches into a table's state: {found}"


def test_nothing_outside_the_engine_touches_the_cores_own_state() -> None:
    found = []
    for path in filter(_outside_engine, _sources(SCANNED)):
        for attr, line in _attributes(ast.parse(path.read_text())):
            if attr in CORE_STATE:
                found.append(f"{path.relative_to(REPO)}:{line} .{attr}")
    assert not found, f"touches the core's state from outside the engine: {found}"
