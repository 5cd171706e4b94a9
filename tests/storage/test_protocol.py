"""The table's protocol versions in ``_table.json``: a release refuses a table that needs
a newer reader (to read) or a newer writer (to write), with an error naming both
versions, and reads a table written before the fields existed as version 1."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import cdc_sink
from cdc_sink.errors import UnsupportedTableVersion
from cdc_sink.storage.layout import TABLE_FILE
from cdc_sink.storage.protocol import CREATED_VERSION, READER_VERSION, WRITER_VERSION

SCHEMA = {
    "columns": [
        {"name": "id", "type": "int64", "nullable": False},
        {"name": "v", "type": "string"},
    ],
    "primary_key": ["id"],
    "num_buckets": 2,
}


def _table(tmp_path: Path) -> Path:
    root = tmp_path / "t"
    t = cdc_sink.create_table(root, SCHEMA)
    t.apply([{"op": "upsert", "key": {"id": 1}, "set": {"v": "a"}}])
    return root


def _edit_meta(root: Path, **fields: object) -> None:
    meta = json.loads((root / TABLE_FILE).read_text())
    for k, v in fields.items():
        if v is None:
            meta.pop(k, None)
        else:
            meta[k] = v
    (root / TABLE_FILE).write_text(json.dumps(meta))


def test_a_new_table_names_the_versions_its_files_need(tmp_path: Path) -> None:
    meta = json.loads((_table(tmp_path) / TABLE_FILE).read_text())
    assert (meta["reader_version"], meta["writer_version"]) == (CREATED_VERSION, CREATED_VERSION)


def test_a_table_needing_a_newer_reader_is_refused_naming_both_versions(
    tmp_path: Path,
) -> None:
    root = _table(tmp_path)
    _edit_meta(root, reader_version=READER_VERSION + 1)
    with pytest.raises(UnsupportedTableVersion) as err:
        cdc_sink.open_table(root)
    assert (err.value.kind, err.value.needed) == ("reader", READER_VERSION + 1)
    assert f"reader protocol version {READER_VERSION + 1}" in str(err.value)
    assert f"implements version {READER_VERSION}" in str(err.value)


def test_a_table_needing_a_newer_writer_reads_but_refuses_a_write(tmp_path: Path) -> None:
    root = _table(tmp_path)
    _edit_meta(root, writer_version=WRITER_VERSION + 1)
    t = cdc_sink.open_table(root)
    assert t.read().to_pylist() == [{"id": 1, "v": "a"}]
    with pytest.raises(UnsupportedTableVersion) as err:
        t.apply([{"op": "upsert", "key": {"id": 2}, "set": {"v": "b"}}])
    assert (err.value.kind, err.value.needed) == ("writer", WRITER_VERSION + 1)
    assert cdc_sink.open_table(root).version == 1  # nothing was written
    with pytest.raises(UnsupportedTableVersion):
        t.compact()


def test_a_table_written_before_the_versions_existed_is_version_1(tmp_path: Path) -> None:
    root = _table(tmp_path)
    _edit_meta(root, reader_version=None, writer_version=None)
    t = cdc_sink.open_table(root)
    res = t.apply([{"op": "upsert", "key": {"id": 2}, "set": {"v": "b"}}])
    assert res.version == 2 and t.read().num_rows == 2


@pytest.mark.parametrize("bad", ["2", 0, -1, 1.5, True, [1]])
def test_a_version_that_is_not_a_positive_integer_is_refused(tmp_path: Path, bad: object) -> None:
    root = _table(tmp_path)
    _edit_meta(root, reader_version=bad)
    with pytest.raises(UnsupportedTableVersion, match="invalid reader_version"):
        cdc_sink.open_table(root)
