"""Permission bits of what cdc_sink creates: table files ``0o640`` in ``0o750``
directories by default (``TableOptions.file_mode``), Parquet dead letters, which hold raw
message values, ``0o600`` in ``0o700`` (``ParquetDeadLetter(file_mode=...)``); the umask
may clear more bits, and files that exist keep theirs."""

from __future__ import annotations

import dataclasses
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from cdc_sink.errors import InvalidOption
from cdc_sink.kafka.deadletter import DEAD_LETTER_SCHEMA, ParquetDeadLetter, forward
from cdc_sink.table import TableOptions, create_table, open_table
from tests.fixtures import ID_A

#: A file name pattern (relative to the table root) of every kind of file a table holds.
KINDS = {
    "table": "_table.json",
    "schema": "_schema/*.json",
    "log entry": "_log/[0-9]*.json",
    "checkpoint": "_log/_checkpoint.*.json",
    "segment": "_wal/*/*.wal",
    "manifest": "_snapshots/*/*.manifest",
    "pages": "_pages/*/*.pages",
    "rejects": "_rejects/*.arrow",
}


@pytest.fixture
def umask() -> Iterator[None]:
    """The usual umask, 0o022 (it clears only write bits of group and others)."""
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


def _mode(p: Path) -> int:
    return stat.S_IMODE(p.stat().st_mode)


def _events(first: int, n: int) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = [
        {"op": "insert", "key": {"id": k}, "set": {"a": f"v{k}"}} for k in range(first, first + n)
    ]
    return [*rows, {"op": "update", "key": {"id": -1}, "set": {"a": "x"}}]  # one reject


def _fill(root: Path, options: TableOptions) -> None:
    """A table at ``root`` with a file of every kind: segments, snapshot manifests and
    pages (bulk load, ``compact``), rejects, and a checkpoint (GC)."""
    t = create_table(root, ID_A, options=options)
    for i in range(5):
        t.apply(_events(10 * i, 6))
    t.compact()
    t.apply(_events(100, 6))
    t.gc(dry_run=False, retain_versions=2, retain_seconds=0.0)


def _files_by_kind(root: Path) -> dict[str, list[Path]]:
    return {kind: sorted(root.glob(pattern)) for kind, pattern in KINDS.items()}


def _assert_modes(root: Path, file_mode: int, dir_mode: int) -> None:
    by_kind = _files_by_kind(root)
    assert all(by_kind.values()), {k: len(v) for k, v in by_kind.items()}
    for kind, files in by_kind.items():
        assert {oct(_mode(p)) for p in files} == {oct(file_mode)}, kind
    every = [p for p in root.rglob("*") if p.is_file()]
    assert {oct(_mode(p)) for p in every} == {oct(file_mode)}
    dirs = [root, *(p for p in root.rglob("*") if p.is_dir())]
    assert {oct(_mode(d)) for d in dirs} == {oct(dir_mode)}


def test_table_files_are_created_0o640_in_0o750_directories(tmp_path: Path, umask: None) -> None:
    root = tmp_path / "t"
    _fill(root, TableOptions.for_tests())
    _assert_modes(root, 0o640, 0o750)


@pytest.mark.parametrize(
    ("file_mode", "dir_mode"), [(0o600, 0o700), (0o644, 0o755), (0o604, 0o705)]
)
def test_the_file_mode_option_sets_the_modes(
    tmp_path: Path, umask: None, file_mode: int, dir_mode: int
) -> None:
    root = tmp_path / "t"
    _fill(root, dataclasses.replace(TableOptions.for_tests(), file_mode=file_mode))
    _assert_modes(root, file_mode, dir_mode)


def test_the_umask_clears_more_bits(tmp_path: Path) -> None:
    old = os.umask(0o077)
    try:
        root = tmp_path / "t"
        _fill(root, TableOptions.for_tests())
    finally:
        os.umask(old)
    _assert_modes(root, 0o600, 0o700)


def test_a_table_written_with_other_modes_keeps_them_and_keeps_working(
    tmp_path: Path, umask: None
) -> None:
    root = tmp_path / "t"
    old = dataclasses.replace(TableOptions.for_tests(), file_mode=0o644)
    t = create_table(root, ID_A, options=old)
    t.apply(_events(0, 6))
    before = {p: _mode(p) for p in root.rglob("*")}
    assert set(before.values()) == {0o644, 0o755}
    reopened = open_table(root, options=TableOptions.for_tests())
    reopened.apply(_events(10, 6))
    assert reopened.read().num_rows == 12
    assert {p: _mode(p) for p in before} == before  # nothing chmod-ed
    new = [p for p in root.rglob("*") if p not in before]
    assert {_mode(p) for p in new if p.is_file()} == {0o640}


@pytest.mark.parametrize("bad", [0o200, 0o400, 0o1640, 0o4750, -1, 0o1000, True, "0o640", None])
def test_a_file_mode_that_is_not_owner_read_write_permission_bits_is_refused(
    tmp_path: Path, bad: Any
) -> None:
    with pytest.raises(InvalidOption) as err:
        TableOptions(file_mode=bad)
    assert err.value.option == "file_mode"
    with pytest.raises(InvalidOption):
        ParquetDeadLetter(tmp_path / "dl", file_mode=bad)


# ---------------------------------------------------------------- dead letters


def _dead_letters(n: int) -> pa.Table:
    return pa.table(
        {
            "topic": ["t"] * n,
            "partition": pa.array([0] * n, pa.int32()),
            "offset": pa.array(range(n), pa.int64()),
            "key": [b"k"] * n,
            "value": [b"secret value"] * n,
            "reason": ["bad"] * n,
            "batch_id": pa.array([7] * n, pa.int64()),
            "app_id": ["job"] * n,
        },
        schema=DEAD_LETTER_SCHEMA,
    )


@pytest.mark.parametrize(("file_mode", "dir_mode"), [(None, 0o700), (0o640, 0o750)])
def test_parquet_dead_letters_are_created_0o600_or_with_their_file_mode(
    tmp_path: Path, umask: None, file_mode: int | None, dir_mode: int
) -> None:
    path = tmp_path / "dl" / "sink"
    sink = (
        ParquetDeadLetter(path)
        if file_mode is None
        else ParquetDeadLetter(path, file_mode=file_mode)
    )
    sink.write(_dead_letters(3))
    sink.write_version(_dead_letters(2), app_id="other job", version=4)
    table = create_table(tmp_path / "t", ID_A, options=TableOptions.for_tests())
    table.apply(_events(0, 6), app_id="job", batch_id=0)
    assert forward(table, sink, "job") == 1
    files = sink.files()
    assert len(files) == 3
    expected = 0o600 if file_mode is None else file_mode
    assert {oct(_mode(p)) for p in files} == {oct(expected)}
    assert _mode(path) == dir_mode
    assert _mode(path.parent) == dir_mode
    assert sink.read(deduplicate=False).num_rows == 6  # readable by its owner
