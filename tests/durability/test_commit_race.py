"""Writers in several processes race for the same version: one wins, the others lose
cleanly (nothing of theirs visible, their files removed) and commit afterwards.

Four spawned processes open the same table, on each backend: a local directory, and a
prefix of the session's real S3 server (where the commit point is a conditional PUT). In
each round every writer decides and prepares the same next version ``v`` (a barrier in
front of the log commit makes the race certain), then commits: exactly one gets ``v``,
the others ``CommitConflict``. The test process then checks the table (``v`` is the
winner's batch, no loser's segment or snapshot is left), and the losers commit again one
at a time: each refreshes and gets the next version. At the end every version equals the
reference model of all committed batches applied in version order, and each ``(app_id,
batch_id)`` appears once. A reader process reads version 1 (by number, by timestamp,
through a table it keeps open) all through the later rounds: every read gives the same
bytes.
"""

from __future__ import annotations

import multiprocessing as mp
import queue
import uuid
from pathlib import Path
from typing import Any

import pytest

from cdc_sink.storage.segments import file_version
from cdc_sink.storage.snapshot import read_manifest
from cdc_sink.table import Table, create_table, open_table
from tests.durability import checks, workload
from tests.durability.workers import race_batch, race_writer, repeat_reader

WRITERS = 4
ROUNDS = 4


def _get(results: Any, procs: list[Any], got: list[Any]) -> Any:
    try:
        item = results.get(timeout=180)
    except queue.Empty:
        raise AssertionError(f"writers stalled; results so far: {got}") from None
    assert item[0] != "error", item[3]
    got.append(item)
    return item


def _check_versions(table: Table) -> None:
    """Every version equals the model of the committed batches in version order."""
    entries = [e for e in table.versions() if e["kind"] == "data"]
    ids = [(e["app_id"], e["batch_id"]) for e in entries]
    assert len(ids) == len(set(ids)), ids
    batches = [race_batch(int(app[3:]), b) for app, b in ids]
    states = checks.model_after(batches)
    assert table.oldest_version == 0
    n = 0
    for v in range(table.version + 1):
        if n < len(entries) and entries[n]["version"] == v:
            n += 1
        assert checks.rows_of(table.read(version=v)) == states[n], f"version {v}"


def _assert_only_committed_files(table: Table) -> None:
    """No segment, manifest or page file of a losing attempt is left in the store."""
    named: set[str] = set()
    for v in range(table.version + 1):
        for ref in table.log.read(v).buckets.values():
            named.update(r for r in (ref.segment, ref.snapshot) if r)
    files = {kind: table.store.list_keys(kind) for kind in ("_wal", "_snapshots", "_pages")}
    for rel in files["_wal"] + files["_snapshots"]:
        assert rel in named, f"{rel} belongs to no committed version"
    pages = set()
    for rel in files["_snapshots"]:
        pages.update(read_manifest(table.store, rel).files)
    for rel in files["_pages"]:
        assert rel in pages, f"{rel} belongs to no committed snapshot"
        assert file_version(rel) is not None


@pytest.fixture(params=["local", "s3"])
def race_table(request: pytest.FixtureRequest, durable_dir: Path) -> tuple[str, Any]:
    """Where the race's table lives: ``(directory or URL, storage options)``."""
    if request.param == "local":
        return str(durable_dir), None
    server = request.getfixturevalue("s3_server")
    return server.url(f"race-{uuid.uuid4().hex}/t"), server.storage_options()


def test_racing_writers_one_wins_losers_commit_afterwards(race_table: tuple[str, Any]) -> None:
    where, storage = race_table
    create_table(where, workload.schema(), options=workload.options(), storage_options=storage)
    ctx = mp.get_context("spawn")
    attempt = ctx.Barrier(WRITERS)
    checked = ctx.Barrier(WRITERS + 1)
    round_done = ctx.Barrier(WRITERS + 1)
    retry_lock = ctx.Lock()
    results = ctx.Queue()
    procs = [
        ctx.Process(
            target=race_writer,
            args=(where, i, ROUNDS, attempt, checked, round_done, retry_lock, results, storage),
        )
        for i in range(WRITERS)
    ]
    for p in procs:
        p.start()
    got: list[Any] = []
    stop, reads = ctx.Event(), ctx.Queue()
    reader = None
    try:
        version = 0
        for r in range(ROUNDS):
            outcome = [_get(results, procs, got) for _ in range(WRITERS)]
            checked.wait(180)
            won = [o for o in outcome if o[0] == "won"]
            lost = [o for o in outcome if o[0] == "lost"]
            assert len(won) == 1 and len(lost) == WRITERS - 1, outcome
            assert won[0][3] == version + 1 and not won[0][4], won
            assert all("committed by another writer" in o[3] for o in lost), lost
            t = open_table(where, options=workload.options(), storage_options=storage)
            assert t.version == version + 1
            last = t.versions()[-1]
            assert (last["app_id"], last["batch_id"]) == (won[0][1], r)
            for o in lost:
                assert t.log.last_batch_id(o[1]) == (None if r == 0 else r - 1)
            _check_versions(t)
            _assert_only_committed_files(t)
            if reader is None:  # version 1 is committed: read it while the others race
                ts = t.versions()[1]["commit_time_ms"]
                reader = ctx.Process(
                    target=repeat_reader, args=(where, 1, ts, stop, reads, 10, storage)
                )
                reader.start()
            checked.wait(180)
            retried = [_get(results, procs, got) for _ in range(WRITERS - 1)]
            round_done.wait(180)
            assert sorted(o[1] for o in retried) == sorted(o[1] for o in lost)
            assert sorted(o[3] for o in retried) == list(range(version + 2, version + WRITERS + 1))
            assert not any(o[4] for o in retried), "a loser's retry was skipped"
            version += WRITERS
    finally:
        for p in procs:
            p.join(timeout=60)
            if p.is_alive():
                p.kill()
        stop.set()
    assert [p.exitcode for p in procs] == [0] * WRITERS
    assert reader is not None
    read: list[Any] = []
    while not read or read[-1][0] != "done":
        read.append(reads.get(timeout=120))
    reader.join(timeout=60)
    assert reader.exitcode == 0
    assert not [x for x in read if x[0] == "error"], read
    want = checks.digest(open_table(where, storage_options=storage).read(version=1))
    assert {x[1] for x in read[:-1]} == {want} and len(read) > 3
    t = open_table(where, options=workload.options(), storage_options=storage)
    assert t.version == ROUNDS * WRITERS
    _check_versions(t)
    _assert_only_committed_files(t)
    for i in range(WRITERS):  # exactly once: a replayed batch is skipped
        assert t.apply(race_batch(i, 0), app_id=f"app{i}", batch_id=0).skipped
