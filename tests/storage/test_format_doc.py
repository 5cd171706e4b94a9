"""docs/format.md describes every file the layout names, every magic, every key of
``_table.json`` and every key of the JSON records a table writes.

The spec is what a second reader is written from, so a kind of file, a magic header or a
key that the code writes and the spec does not describe is a bug of the spec. These tests
take the names from the code (``cdc_sink/storage/layout.py``'s name table and directory
constants, the magic constants of ``cdc_sink/storage``, the ``_table.json`` of a table
just created, the log entries, bucket references, checkpoints, manifests, WAL segment and
pre-images headers of a table that went through writes, a compaction and a GC) and fail
for each one the document does not name.
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from cdc_sink.storage import layout
from cdc_sink.storage.framing import read_records
from cdc_sink.table import TableOptions, create_table

ROOT = Path(__file__).resolve().parents[2]
FORMAT_MD = ROOT / "docs" / "format.md"
STORAGE = ROOT / "cdc_sink" / "storage"

SCHEMA = {
    "columns": [{"name": "id", "type": "int64"}, {"name": "v", "type": "string"}],
    "primary_key": ["id"],
    "num_buckets": 2,
}

SEQ_SCHEMA = {
    "columns": [
        {"name": "id", "type": "int64"},
        {"name": "v", "type": "string", "default": "none"},
        {"name": "seq", "type": "int64"},
    ],
    "primary_key": ["id"],
    "num_buckets": 2,
    "sequence_column": "seq",
}


def _doc() -> str:
    return FORMAT_MD.read_text(encoding="utf-8")


def _table_rows(text: str) -> list[str]:
    """The lines of the Markdown tables in ``text``."""
    return [line for line in text.splitlines() if line.startswith("|")]


def _section(doc: str, heading: str) -> str:
    """The text of the ``##`` section whose heading contains ``heading``."""
    parts = re.split(r"^## ", doc, flags=re.M)
    found = [p for p in parts if heading in p.splitlines()[0]]
    assert len(found) == 1, f"format.md has {len(found)} sections titled with {heading!r}"
    return found[0]


def _magic_constants() -> dict[str, bytes]:
    """Every module-level ``*MAGIC*`` bytes constant of ``cdc_sink/storage`` (layout.py
    and the modules that frame files), read from the source."""
    found: dict[str, bytes] = {}
    for path in sorted(STORAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in tree.body:
            targets = node.targets if isinstance(node, ast.Assign) else []
            for target in targets:
                value = node.value if isinstance(node, ast.Assign) else None
                if (
                    isinstance(target, ast.Name)
                    and "MAGIC" in target.id
                    and isinstance(value, ast.Constant)
                    and isinstance(value.value, bytes)
                ):
                    found[f"{path.relative_to(ROOT)}:{target.id}"] = value.value
    return found


def _escaped(magic: bytes) -> str:
    """A magic as the spec writes it: printable ASCII as is, other bytes as ``\\xNN``."""
    return "".join(chr(b) if 0x20 <= b < 0x7F else f"\\x{b:02x}" for b in magic)


#: The layout's name table: each path kind with its pattern.
KIND_PATTERNS = sorted((kind, p.pattern) for kind, p in layout._KIND_PATTERNS.items())


def test_the_name_table_is_read() -> None:
    assert {"segment", "snapshot", "pages", "entry"} <= {kind for kind, _ in KIND_PATTERNS}


@pytest.mark.parametrize(("kind", "pattern"), KIND_PATTERNS)
def test_every_path_kind_of_the_layout_is_in_the_spec_with_its_pattern(
    kind: str, pattern: str
) -> None:
    rows = [r for r in _table_rows(_doc()) if f"| `{kind}` |" in r]
    assert rows, f"docs/format.md has no table row for the path kind {kind!r}"
    assert any(f"`{pattern}`" in r for r in rows), (
        f"docs/format.md's row of path kind {kind!r} does not give its pattern {pattern!r}"
    )


def test_every_directory_and_file_name_of_the_layout_is_in_the_spec() -> None:
    names = {
        name: value
        for name, value in vars(layout).items()
        if name.isupper() and name.endswith(("_DIR", "_FILE")) and isinstance(value, str)
    }
    assert {"TABLE_FILE", "LOG_DIR", "WAL_DIR"} <= set(names), names
    tree = _section(_doc(), "layout")
    shown = [v + "/" if n.endswith("_DIR") else v for n, v in names.items()]
    missing = [s for s in shown if s not in tree]
    assert not missing, f"docs/format.md's layout section does not show {missing}"
    for bucket_dir in layout.BUCKET_DIRS:
        assert f"{bucket_dir}/<bucket>/" in tree, f"no {bucket_dir}/<bucket>/ in the layout"


def test_every_magic_header_is_in_the_spec_with_its_bytes() -> None:
    magics = _magic_constants()
    assert len(magics) >= 4, f"found only {sorted(magics)}: the scan of cdc_sink/storage broke"
    doc = _doc()
    for where, magic in magics.items():
        assert f"`{_escaped(magic)}`" in doc, f"docs/format.md does not name {where} = {magic!r}"
        hexed = " ".join(f"{b:02x}" for b in magic)
        assert hexed in doc, f"docs/format.md does not give the bytes of {where} ({hexed})"


def test_every_key_a_new_table_writes_in_table_json_is_in_the_spec(tmp_path: Path) -> None:
    create_table(tmp_path / "t", SCHEMA)
    meta = json.loads((tmp_path / "t" / layout.TABLE_FILE).read_text(encoding="utf-8"))
    assert meta, "a new table's _table.json is empty"
    rows = _table_rows(_section(_doc(), f"`{layout.TABLE_FILE}`"))
    documented = {m.group(1) for r in rows if (m := re.match(r"\| `(\w+)` \|", r))}
    missing = sorted(set(meta) - documented)
    assert not missing, f"docs/format.md does not document _table.json key(s) {missing}"


def test_the_protocol_version_keys_are_in_the_spec() -> None:
    rows = _table_rows(_section(_doc(), f"`{layout.TABLE_FILE}`"))
    for key in ("reader_version", "writer_version"):
        assert any(r.startswith(f"| `{key}` |") for r in rows), f"{key} is not documented"


def _records(path: Path) -> list[bytes]:
    """The records of a framed file (its own magic taken as the expected one)."""
    data = path.read_bytes()
    return read_records(data, path=str(path), magic=data[:8], allow_torn_tail=False).records


def _documented(section: str) -> set[str]:
    """The keys a section's tables document (first column, in backquotes)."""
    return {m.group(1) for r in _table_rows(section) if (m := re.match(r"\| `([\w.]+)` \|", r))}


def _written_json(root: Path) -> dict[str, set[str]]:
    """The keys of every JSON record the table at ``root`` holds, per kind of record."""
    keys: dict[str, set[str]] = {k: set() for k in ("entry", "ref", "checkpoint", "manifest")}
    keys.update(segment=set(), images=set())
    for path in (root / layout.LOG_DIR).iterdir():
        rec: dict[str, Any] = json.loads(_records(path)[0])
        if f"{layout.LOG_DIR}/{path.name}" == layout.LAST_CHECKPOINT_KEY:  # §8.8
            keys["checkpoint"] |= set(rec) | set(rec["checkpoint"]) - {"extra"}
            keys["checkpoint"] |= {f"extra.{k}" for k in rec["checkpoint"].get("extra", {})}
            keys["entry"] |= set(rec["entry"])
        elif path.name.startswith("_checkpoint."):
            keys["checkpoint"] |= set(rec) - {"extra"}
            keys["checkpoint"] |= {f"extra.{k}" for k in rec.get("extra", {})}
        else:
            keys["entry"] |= set(rec)
            for ref in rec["buckets"].values():
                keys["ref"] |= set(ref)
    for kind, sub, ext in (
        ("manifest", layout.SNAPSHOTS_DIR, "manifest"),
        ("segment", layout.WAL_DIR, "wal"),
        ("images", layout.CHANGE_DATA_DIR, "arrow"),
    ):
        for path in (root / sub).glob(f"*/*.{ext}"):
            keys[kind] |= set(json.loads(_records(path)[0]))
    return keys


def test_every_key_of_the_json_records_a_table_writes_is_in_the_spec(tmp_path: Path) -> None:
    options = replace(TableOptions.for_tests(), change_images=True, bulk_events=10**6)
    table = create_table(tmp_path / "t", SEQ_SCHEMA, options=options)
    events = [{"op": "upsert", "key": {"id": i}, "set": {"v": f"{i}"}, "seq": i} for i in range(20)]
    table.apply(events, app_id="app", batch_id=1, source_offsets={"topic": {"0": 20}})
    table.apply(
        [
            {"op": "update", "key": {"id": 1}, "set": {"v": None}, "seq": 50},
            {"op": "delete", "key": {"id": 2}, "seq": 50},
            {"op": "bogus", "key": {"id": 3}},
        ],
        app_id="app",
        batch_id=2,
    )
    table.compact()
    table.apply([{"op": "update", "key": {"id": 4}, "set": {"v": "x"}, "seq": 60}])
    written = _written_json(tmp_path / "t")
    table.gc(dry_run=False, retain_versions=1, retain_seconds=0)  # a checkpoint
    for kind, keys in _written_json(tmp_path / "t").items():
        written[kind] |= keys
    assert all(written.values()), f"a kind of record was not written: {written}"
    doc = _doc()
    log, wal = _section(doc, "version log"), _section(doc, "WAL change segments")
    sections = {
        "entry": log,
        "ref": log,
        "checkpoint": log,
        "manifest": _section(doc, "Snapshots"),
        "segment": wal,
    }
    missing = {
        kind: sorted(written[kind] - _documented(text))
        for kind, text in sections.items()
        if written[kind] - _documented(text)
    }
    images = _section(doc, "Pre-images")
    missing_images = sorted(k for k in written["images"] if f'"{k}"' not in images)
    assert not missing, f"docs/format.md does not document these keys: {missing}"
    assert not missing_images, f"docs/format.md's pre-images header lacks {missing_images}"
