"""The storage seam (issue 47): code above the object-store interface asks a store for a
capability by name, never for its type, and the local backend's file primitives are its
own.

- No module of ``cdc_sink`` outside ``storage/objectstore/`` tests ``isinstance(...,
  LocalStore)``: what differs between backends (a file to map, an object cache, how
  orphans age, temporary files, ordered deletes) is a capability of
  :class:`~cdc_sink.storage.objectstore.ObjectStore`.
- ``cdc_sink.storage.fsutil`` is imported by the local backend only (file modes come from
  :mod:`cdc_sink.storage.objectstore.local`, which re-exports them).

Both scan the source (no module is imported), with nothing excluded.
"""

from __future__ import annotations

import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "cdc_sink"
BACKENDS = PACKAGE / "storage" / "objectstore"
LOCAL_BACKEND = BACKENDS / "local.py"

_LOCAL_STORE = re.compile(r"\bLocalStore\b")
_FSUTIL_IMPORT = re.compile(
    r"^\s*(?:from\s+cdc_sink\.storage\.fsutil\s+import|from\s+cdc_sink\.storage\s+import\s+"
    r"(?:\([^)]*\bfsutil\b|[^\n]*\bfsutil\b)|import\s+cdc_sink\.storage\.fsutil\b)",
    re.M,
)


def _local_type_tests(source: str) -> list[int]:
    """The lines of the ``isinstance(...)`` calls of ``source`` naming ``LocalStore`` in
    their arguments (their parentheses balanced)."""
    lines = []
    for m in re.finditer(r"\bisinstance\s*\(", source):
        depth, end = 1, m.end()
        while depth and end < len(source):
            depth += {"(": 1, ")": -1}.get(source[end], 0)
            end += 1
        if _LOCAL_STORE.search(source, m.end(), end):
            lines.append(source.count("\n", 0, m.start()) + 1)
    return lines


def _modules() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if ".venv" not in p.parts)


def test_no_module_above_the_backends_asks_a_store_whether_it_is_local() -> None:
    found = [
        f"{path.relative_to(PACKAGE)}:{line}"
        for path in _modules()
        if BACKENDS not in path.parents
        for line in _local_type_tests(path.read_text())
    ]
    assert not found, f"isinstance(..., LocalStore) outside storage/objectstore/: {found}"


def test_fsutil_is_imported_by_the_local_backend_only() -> None:
    found = [
        str(path.relative_to(PACKAGE))
        for path in _modules()
        if path not in (LOCAL_BACKEND, PACKAGE / "storage" / "fsutil.py")
        and _FSUTIL_IMPORT.search(path.read_text())
    ]
    assert not found, f"modules importing cdc_sink.storage.fsutil besides local.py: {found}"


def test_the_scans_find_what_they_look_for() -> None:
    assert _local_type_tests("if isinstance(store, LocalStore) and x:") == [1]
    assert _local_type_tests("a\nisinstance(\n    f(x),\n    (LocalStore, Other),\n)") == [2]
    assert _local_type_tests("isinstance(s, Other) and LocalStore(root)") == []
    assert _FSUTIL_IMPORT.search("from cdc_sink.storage.fsutil import remove\n")
    assert _FSUTIL_IMPORT.search("    from cdc_sink.storage import faults, fsutil\n")
    assert _FSUTIL_IMPORT.search("import cdc_sink.storage.fsutil\n")
    assert not _FSUTIL_IMPORT.search('"""see :mod:`cdc_sink.storage.fsutil`"""\n')
