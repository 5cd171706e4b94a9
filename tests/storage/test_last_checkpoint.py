"""The last-checkpoint pointer (``_log/_last_checkpoint``) is a hint: an open that starts
from it answers exactly what an open that lists the whole log answers, and a pointer that
is missing, stale, damaged or older than GC's newest checkpoint (its version's entry
deleted) falls back to that listing.

Every test compares the answers of an open (newest version, oldest readable version,
every retained version's entry, rows and time-travel version, the idempotency table,
what the history says of each readable version, what GC would delete) with those of an
open after the pointer was removed.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cdc_sink.engine import core_of
from cdc_sink.errors import InvalidOption, TableNotFound, WalCorruption
from cdc_sink.schema import TableSchema
from cdc_sink.storage.framing import encode_file, read_records
from cdc_sink.storage.history import History
from cdc_sink.storage.layout import LAST_CHECKPOINT_KEY
from cdc_sink.storage.log_files import LAST_CHECKPOINT_MAGIC
from cdc_sink.storage.objectstore.local import LocalStore
from cdc_sink.table import Table, TableOptions, create_table, open_table
from cdc_sink_testkit.faults import FaultStore
from tests.fixtures import ID_NAME

SCHEMA = TableSchema.from_dict(ID_NAME)
OPTIONS = TableOptions(snapshot_every=3, retain_seconds=0.0, change_images=True, bulk_events=4)
"""Snapshots, pre-images and bulk versions in the history the pointer carries."""


def _pointer(root: Path) -> Path:
    return root.joinpath(*LAST_CHECKPOINT_KEY.split("/"))


def _apply(table: Table, batch: int) -> None:
    events = [{"op": "upsert", "key": {"id": k}, "set": {"name": f"b{batch}"}} for k in range(6)]
    events.append({"op": "delete", "key": {"id": batch % 6}})
    table.apply(events, app_id=f"app{batch % 2}", batch_id=batch)


def _answers(root: Path) -> dict[str, Any]:
    """What a new open of the table at ``root`` answers."""
    table = open_table(root, options=OPTIONS)
    core = core_of(table)
    history = core.history
    latest = table.version
    oldest = table.oldest_version
    versions = table.versions()
    return {
        "latest": latest,
        "oldest": oldest,
        "versions": versions,
        "rows": [table.read(version=v).to_pylist() for v in range(oldest, latest + 1)],
        "at_time": [table.log.version_at(e["commit_time_ms"]) for e in versions],
        "txns": table.log.app_transactions(),
        "committed": [table.is_committed(f"app{b % 2}", b) for b in range(latest + 2)],
        "history": [_bucket_at(history, b, v) for v in range(oldest, latest + 1) for b in (0, 1)],
        "gc": sorted(table.gc(dry_run=True, retain_versions=2)),
    }


def _bucket_at(history: History, bucket: int, version: int) -> tuple[Any, ...]:
    """What the history says of ``bucket`` at a readable ``version``: the snapshot a load
    starts from, the segments it replays, the schema, a bulk version since."""
    snap = history.snapshot_at(bucket, version)
    start = snap[0] if snap else -1
    return (
        snap,
        history.segments_between(bucket, start, version),
        history.schema_id_at(version),
        history.bulk_between(bucket, start, version),
        history.images.get(bucket, {}).get(version),
    )


def _listed_answers(root: Path) -> dict[str, Any]:
    """:func:`_answers` without the pointer (an open that lists the whole log); the
    pointer is put back after."""
    pointer = _pointer(root)
    saved = pointer.read_bytes() if pointer.exists() else None
    if saved is not None:
        pointer.unlink()
    try:
        return _answers(root)
    finally:
        if saved is not None:
            pointer.write_bytes(saved)


def _same_answers(root: Path) -> None:
    assert _answers(root) == _listed_answers(root)


def _table(root: Path, batches: int) -> Table:
    table = create_table(root, SCHEMA, options=OPTIONS)
    for b in range(1, batches + 1):
        _apply(table, b)
    return table


def test_the_writer_keeps_the_pointer_within_its_cadence(tmp_path: Path) -> None:
    table = _table(tmp_path, 10)
    every = table.options.checkpoint_every
    pointed = table.log.last_checkpoint_version
    assert pointed is not None and table.version - every < pointed <= table.version
    assert _pointer(tmp_path).exists()
    _same_answers(tmp_path)


def test_an_open_from_the_pointer_lists_only_the_entries_after_it(tmp_path: Path) -> None:
    _table(tmp_path, 10)
    table = open_table(tmp_path, options=OPTIONS)
    got = table.store.counters.snapshot().requests
    assert got["LIST"] == 1 and got["HEAD"] == 0
    assert got["GET"] <= 2 + table.options.checkpoint_every - 1


@pytest.mark.parametrize("cadence", [1, 2, 5])
def test_the_cadence_is_an_option(tmp_path: Path, cadence: int) -> None:
    options = TableOptions(checkpoint_every=cadence)
    table = create_table(tmp_path, SCHEMA, options=options)
    pointed = []
    for b in range(1, 12):
        _apply(table, b)
        pointed.append(table.log.last_checkpoint_version)
    # the first commit of a writer that knows no pointer writes one, then every `cadence`
    assert pointed == [1 + cadence * ((v - 1) // cadence) for v in range(1, 12)]


def test_the_pointer_is_written_by_bytes_too(tmp_path: Path) -> None:
    options = TableOptions(checkpoint_every=1000, checkpoint_tail_bytes=1)
    table = create_table(tmp_path, SCHEMA, options=options)
    for b in range(1, 5):
        _apply(table, b)
        assert table.log.last_checkpoint_version == table.version


@pytest.mark.parametrize("option", ["checkpoint_every", "checkpoint_tail_bytes"])
def test_the_cadence_options_are_checked(option: str) -> None:
    with pytest.raises(InvalidOption, match=option):
        TableOptions(**{option: 0})


def test_a_missing_pointer_falls_back_to_the_listing(tmp_path: Path) -> None:
    _table(tmp_path, 8)
    _pointer(tmp_path).unlink()
    answers = _answers(tmp_path)
    assert answers["latest"] == 8 and answers["committed"][8]
    _table_reopened = open_table(tmp_path, options=OPTIONS)
    _apply(_table_reopened, 9)  # a writer that knows no pointer writes one
    assert _pointer(tmp_path).exists()
    _same_answers(tmp_path)


def test_a_stale_pointer_gives_the_same_answers(tmp_path: Path) -> None:
    table = _table(tmp_path, 4)
    stale = _pointer(tmp_path).read_bytes()
    for b in range(5, 15):
        _apply(table, b)
    _pointer(tmp_path).write_bytes(stale)
    _same_answers(tmp_path)


@pytest.mark.parametrize(
    "damage", ["truncated", "zeros", "flipped", "garbage", "empty", "wrong_magic"]
)
def test_a_damaged_pointer_gives_the_same_answers(tmp_path: Path, damage: str) -> None:
    _table(tmp_path, 7)
    pointer = _pointer(tmp_path)
    data = bytearray(pointer.read_bytes())
    if damage == "truncated":
        data = data[: len(data) // 2]
    elif damage == "zeros":
        data = bytearray(len(data))
    elif damage == "flipped":
        data[len(data) // 2] ^= 0x40
    elif damage == "garbage":
        data = bytearray(b"{not a pointer}")
    elif damage == "empty":
        data = bytearray()
    else:
        data[:6] = b"CDCXXX"
    pointer.write_bytes(bytes(data))
    answers = _answers(tmp_path)
    assert answers["latest"] == 7
    assert answers == _listed_answers(tmp_path)


def test_a_pointer_older_than_gcs_checkpoint_gives_the_same_answers(tmp_path: Path) -> None:
    table = _table(tmp_path, 4)
    old = _pointer(tmp_path).read_bytes()
    for b in range(5, 16):
        _apply(table, b)
    plan = table.gc(dry_run=False, retain_versions=3)
    assert plan.horizon > 4  # the old pointer's version and its entry are collected
    assert not (tmp_path / "_log" / f"{4:020d}.json").exists()
    pointed = table.log.last_checkpoint_version
    assert pointed is not None and pointed >= plan.horizon  # GC leaves none older
    _same_answers(tmp_path)
    _pointer(tmp_path).write_bytes(old)
    answers = _answers(tmp_path)
    assert answers["oldest"] == plan.horizon and answers["latest"] == 15
    assert answers == _listed_answers(tmp_path)


def test_an_unfinished_newest_entry_after_the_pointer_is_not_committed(
    tmp_path: Path,
) -> None:
    _table(tmp_path, 6)
    table = open_table(tmp_path, options=OPTIONS)
    unfinished = tmp_path / "_log" / f"{table.version + 1:020d}.json"
    unfinished.write_bytes(b"")  # a crashed commit on a file system without hard links
    answers = _answers(tmp_path)
    assert answers["latest"] == 6
    assert answers == _listed_answers(tmp_path)
    os.unlink(unfinished)


def test_an_open_of_what_is_no_table_raises_table_not_found(tmp_path: Path) -> None:
    with pytest.raises(TableNotFound, match="no cdc_sink table"):
        open_table(tmp_path / "nothing")
    _table(tmp_path / "t", 1)
    for name in os.listdir(tmp_path / "t" / "_log"):
        os.unlink(tmp_path / "t" / "_log" / name)
    with pytest.raises(TableNotFound, match="never created completely"):
        open_table(tmp_path / "t")


@pytest.mark.parametrize("field", ["bucket_snapshots", "segments", "snapshots", "entry"])
def test_an_intact_pointer_naming_a_path_outside_the_table_is_refused(
    tmp_path: Path, field: str
) -> None:
    _table(tmp_path, 7)
    pointer = _pointer(tmp_path)
    res = read_records(
        pointer.read_bytes(), path=str(pointer), magic=LAST_CHECKPOINT_MAGIC, allow_torn_tail=False
    )
    doc = json.loads(res.records[0])
    outside = str(tmp_path / f"{1:020d}-abcdef012345.wal")
    extra = doc["checkpoint"]["extra"]
    if field == "bucket_snapshots":
        doc["checkpoint"]["bucket_snapshots"]["0"] = outside
    elif field == "segments":
        extra["segments"]["0"][0][1] = outside
    elif field == "snapshots":
        extra["snapshots"]["0"][0][1] = outside
    else:
        doc["entry"]["buckets"]["0"]["segment"] = outside
    pointer.write_bytes(encode_file([json.dumps(doc).encode()], magic=LAST_CHECKPOINT_MAGIC))
    with pytest.raises(WalCorruption, match="invalid") as err:
        open_table(tmp_path)
    assert err.value.path == str(pointer)


@pytest.mark.parametrize("fault", ["fail", "tear"])
def test_a_pointer_write_that_fails_leaves_the_commit_standing(
    tmp_path: Path, fault: str, caplog: pytest.LogCaptureFixture
) -> None:
    _table(tmp_path, 2)
    store = FaultStore(LocalStore(tmp_path))
    table = Table(str(tmp_path), options=OPTIONS, store=store)
    if fault == "fail":
        store.fail("put", key=LAST_CHECKPOINT_KEY, times=None)
    else:  # a store that kept part of the object (a local store never does)
        store.tear("put", key=LAST_CHECKPOINT_KEY, keep=0.5, times=None)
    for b in range(3, 9):
        _apply(table, b)
    assert table.version == 8
    assert "could not write the last-checkpoint pointer" in caplog.text
    assert _answers(tmp_path)["latest"] == 8
    _same_answers(tmp_path)


_STEPS = st.lists(
    st.sampled_from(["apply", "apply", "apply", "compact", "gc", "add_column", "save"]),
    min_size=1,
    max_size=14,
)


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(steps=_STEPS, pointer=st.sampled_from(["current", "missing", "saved", "damaged"]))
def test_any_history_and_pointer_give_the_answers_of_the_listing(
    tmp_path_factory: pytest.TempPathFactory, steps: list[str], pointer: str
) -> None:
    root = tmp_path_factory.mktemp("lcp") / "t"
    table = create_table(root, SCHEMA, options=OPTIONS)
    saved: bytes | None = None
    batch = 0
    for step in steps:
        if step == "apply":
            batch += 1
            _apply(table, batch)
        elif step == "compact":
            table.compact()
        elif step == "gc":
            table.gc(dry_run=False, retain_versions=2)
        elif step == "add_column":
            table.add_column(f"c{table.version}", "int64")
        elif _pointer(root).exists():
            saved = _pointer(root).read_bytes()
    if pointer == "missing" and _pointer(root).exists():
        _pointer(root).unlink()
    elif pointer == "saved" and saved is not None:
        _pointer(root).write_bytes(saved)
    elif pointer == "damaged" and _pointer(root).exists():
        data = bytearray(_pointer(root).read_bytes())
        data[-1] ^= 0x01
        _pointer(root).write_bytes(bytes(data))
    _same_answers(root)
