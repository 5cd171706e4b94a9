"""The buckets of a batch prepared in several threads (``TableOptions.prepare_threads``).

Each bucket's segment is encoded and fsynced and its tablet applied in a worker thread;
the table's state is read and changed only in the committing thread. These tests check
that the threads are really used, that the result is the one the serial path gives (the
same rows at every version, the same log entries, the same segment bytes), and that a
failure in one bucket's thread leaves nothing of the version: no log entry, no file, no
pending change in a tablet, with the next batch committed as if the failed one had never
been tried. The durability suite (crash points, power-loss images, the table model) runs
with two threads too: ``TableOptions.for_tests()`` sets them.
"""

from __future__ import annotations

import os
import threading
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from cdc_sink.batch import ChangeBatch
from cdc_sink.engine import _commit as commit
from cdc_sink.engine import core_of
from cdc_sink.errors import InvalidOption
from cdc_sink.schema import TableSchema
from cdc_sink.storage.segments import read_change_segment
from cdc_sink.table import Table, TableOptions, create_table, open_table
from cdc_sink.tablet import MemTablet
from tests.fixtures import ID_A_B_SEQ, KEEP_VERSIONS
from tests.model import RefModel, model_rows, table_to_rows

SCHEMA = TableSchema.from_dict({**ID_A_B_SEQ, "num_buckets": 4})
OPTS = TableOptions(
    page_rows=16,
    bulk_events=100,
    snapshot_every=3,
    compact_every=2,
    **KEEP_VERSIONS,
)
BATCHES = 8


def _batch(i: int) -> list[dict[str, Any]]:
    """Batch ``i``: a load into the empty buckets (bulk path), then upserts, partial
    updates, deletes, a stale event and a refused update touching every bucket."""
    if i == 0:
        return [
            {"op": "insert", "key": {"id": k}, "set": {"a": k, "b": f"r{k}"}, "seq": 1}
            for k in range(600)
        ]
    evs: list[dict[str, Any]] = [
        {"op": "upsert", "key": {"id": k}, "set": {"a": k * i}, "seq": 10 + i}
        for k in range(i, 700, 7)
    ]
    evs += [{"op": "delete", "key": {"id": k}, "seq": 10 + i} for k in range(3 * i, 600, 53)]
    evs += [
        {"op": "upsert", "key": {"id": 1}, "set": {"b": "stale"}, "seq": 0},
        {"op": "update", "key": {"id": 10_000 + i}, "set": {"a": 1}, "seq": 10 + i},
    ]
    return evs


def _rows(t: Table, version: int | None = None) -> dict[Any, Any]:
    return table_to_rows(t.read(version=version), ["id"])


def _run(root: Path, threads: int) -> tuple[Table, list[dict[Any, Any]]]:
    t = create_table(root, SCHEMA, options=replace(OPTS, prepare_threads=threads))
    model = RefModel(SCHEMA)
    states: list[dict[Any, Any]] = [{}]
    for i in range(BATCHES):
        res = t.apply(_batch(i))
        model.apply(_batch(i))
        model.commit(res.version)
        states.append(model_rows(model.rows, SCHEMA))
        assert res.buckets == [0, 1, 2, 3]
    return t, states


def test_options_name_the_threads() -> None:
    assert TableOptions(prepare_threads=3).threads_for(8) == 3
    assert TableOptions(prepare_threads=3).threads_for(2) == 2  # never more than buckets
    assert TableOptions(prepare_threads=1).threads_for(8) == 1
    cpus = len(os.sched_getaffinity(0))
    assert TableOptions().threads_for(64) == min(cpus, 64)
    assert TableOptions().threads_for(0) == 1
    for bad in (0, -1, True, 2.0, "2"):
        with pytest.raises(InvalidOption, match="prepare_threads") as err:
            TableOptions(prepare_threads=bad)  # type: ignore[arg-type]
        assert err.value.option == "prepare_threads"


def test_buckets_are_applied_in_worker_threads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    names: set[str] = set()
    original = MemTablet.apply

    def apply(self: MemTablet, *args: Any, **kwargs: Any) -> Any:
        names.add(threading.current_thread().name)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(MemTablet, "apply", apply)
    t = create_table(tmp_path / "t", SCHEMA, options=replace(OPTS, prepare_threads=2))
    for i in range(3):
        t.apply(_batch(i))
    assert len(names) == 2 and all(n.startswith("cdc_sink-prepare") for n in names), names
    names.clear()
    serial = create_table(tmp_path / "s", SCHEMA, options=replace(OPTS, prepare_threads=1))
    serial.apply(_batch(0))
    assert names == {threading.current_thread().name}


@pytest.mark.parametrize("threads", [1, 2, 4])
def test_every_version_equals_the_model_and_the_serial_log(tmp_path: Path, threads: int) -> None:
    t, states = _run(tmp_path / "t", threads)
    fresh = open_table(tmp_path / "t", options=OPTS)
    for v in range(BATCHES + 1):
        assert _rows(t, v) == states[v], v
        assert _rows(fresh, v) == states[v], v
    if threads == 1:
        return
    serial, _ = _run(tmp_path / "serial", 1)
    for v in range(1, BATCHES + 1):
        mine, theirs = t.log.read(v), serial.log.read(v)
        assert mine.stats == theirs.stats, v
        assert sorted(mine.buckets) == sorted(theirs.buckets), v
        for b, ref in mine.buckets.items():
            other = theirs.buckets[b]
            assert (ref.segment is None) == (other.segment is None), (v, b)
            assert (ref.snapshot is None) == (other.snapshot is None), (v, b)
            if ref.segment is not None and other.segment is not None:
                a = read_change_segment(str(tmp_path / "t"), ref.segment, SCHEMA)[1]
                s = read_change_segment(str(tmp_path / "serial"), other.segment, SCHEMA)[1]
                assert a.to_arrow().equals(s.to_arrow()), (v, b)
    assert t.rejects(2).to_pylist() == serial.rejects(2).to_pylist()


class _Boom(Exception):
    pass


@pytest.mark.parametrize("threads", [1, 3])
@pytest.mark.parametrize("where", ["segment", "apply", "bulk"])
def test_a_failing_bucket_leaves_nothing_of_the_version(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, threads: int, where: str
) -> None:
    root = tmp_path / "t"
    t = create_table(root, SCHEMA, options=replace(OPTS, prepare_threads=threads))
    model = RefModel(SCHEMA)
    first = 0 if where == "bulk" else 1
    for i in range(first):
        t.apply(_batch(i))
        model.apply(_batch(i))
        model.commit(i + 1)
    before = _files(root)
    fail_bucket = 2
    if where == "segment":
        original_seg = commit.write_change_segment

        def seg(root_: str, bucket: int, *args: Any, **kwargs: Any) -> tuple[str, int]:
            if bucket == fail_bucket:
                raise _Boom("disk full")
            return original_seg(root_, bucket, *args, **kwargs)

        monkeypatch.setattr(commit, "write_change_segment", seg)
    else:
        original_apply = MemTablet.apply

        def apply(self: MemTablet, *args: Any, **kwargs: Any) -> Any:
            res = original_apply(self, *args, **kwargs)
            if self.bucket == fail_bucket:
                raise _Boom("apply failed after changing the tablet")
            return res

        monkeypatch.setattr(MemTablet, "apply", apply)
    version = t.version
    with pytest.raises(_Boom):
        t.apply(_batch(first))
    monkeypatch.undo()
    assert t.version == version and open_table(root, options=OPTS).version == version
    assert _files(root) == before  # every bucket's files removed, the failed one's too
    assert _rows(t) == model_rows(model.rows, SCHEMA)
    for i in range(first, first + 3):  # the next batches commit as if nothing happened
        res = t.apply(_batch(i))
        model.apply(_batch(i))
        model.commit(res.version)
        assert res.version == version + 1 + i - first
        assert _rows(t) == model_rows(model.rows, SCHEMA)
        assert _rows(open_table(root, options=OPTS)) == model_rows(model.rows, SCHEMA)


def _files(root: Path) -> set[str]:
    return {os.path.relpath(os.path.join(d, f), root) for d, _, fs in os.walk(root) for f in fs}


def test_prepare_buckets_then_commit_is_the_driver_modes_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``Transaction.prepare`` (what the Spark sink's driver mode calls) prepares in the
    threads, returns the buckets in order, and rolls all of them back on a failure."""
    t = create_table(tmp_path / "t", SCHEMA, options=replace(OPTS, prepare_threads=2))
    model = RefModel(SCHEMA)
    for i in range(3):
        batch = ChangeBatch.from_events(_batch(i), SCHEMA)[0]
        parts = sorted(batch.split_by_bucket().items())
        txn = t.transaction()
        prepared = txn.prepare(parts)
        assert [p.bucket for p in prepared] == [b for b, _ in parts]
        res = txn.commit(events=len(batch))
        model.apply(_batch(i))
        model.commit(res.version)
    assert _rows(open_table(tmp_path / "t", options=OPTS)) == model_rows(model.rows, SCHEMA)
    before = _files(tmp_path / "t")
    original = MemTablet.apply

    def apply(self: MemTablet, *args: Any, **kwargs: Any) -> Any:
        if self.bucket == 3:
            raise _Boom("bucket 3")
        return original(self, *args, **kwargs)

    monkeypatch.setattr(MemTablet, "apply", apply)
    batch = ChangeBatch.from_events(_batch(3), SCHEMA)[0]
    txn = t.transaction()
    with pytest.raises(_Boom):
        txn.prepare(sorted(batch.split_by_bucket().items()))
    assert txn.prepared == []  # nothing of the failed prepare is kept for a commit
    monkeypatch.undo()
    assert _files(tmp_path / "t") == before
    assert all(core_of(t).tablet(b).pending_version is None for b in range(4))
    assert _rows(t) == model_rows(model.rows, SCHEMA)
