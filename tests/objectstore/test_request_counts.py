"""Requests a writer makes per commit, on each backend (a directory and the S3 server),
counted by the store's own counters (``store.counters``).

A writer trusts its own view of the log: a steady-state commit is the WAL segment of
each bucket it touches and the conditional create of the log entry, nothing else (no
LIST, GET or HEAD; every ``TableOptions.checkpoint_every`` versions also the ``PUT`` of
the last-checkpoint pointer), and the exactly-once check of a replayed batch is answered from the
idempotency table the writer holds, without a request. Only a lost race (the
conditional create finds the entry taken) makes the writer read the log, and then only
the entries after the newest version it knew: the loser gets ``CommitConflict``, and its
next commit is a steady-state one again.

An open reads the table file and the last-checkpoint pointer, makes one listing of the
log entries after the pointer's version and reads those: at most 5 requests, however
many versions the table retains.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from cdc_sink.engine import core_of
from cdc_sink.errors import CommitConflict
from cdc_sink.schema import TableSchema
from cdc_sink.storage.framing import encode_file
from cdc_sink.storage.objectstore.counters import CALL_KINDS, CallKind
from cdc_sink.storage.version_log import LOG_MAGIC, LogEntry, VersionLog
from cdc_sink.table import Table, create_table, open_table
from tests.fixtures import ID_NAME
from tests.objectstore.conftest import Target

SCHEMA = TableSchema.from_dict(ID_NAME)
STEADY_COMMITS = 5
READS: tuple[CallKind, ...] = ("GET", "HEAD", "LIST")


def _events(batch: int, keys: range = range(16)) -> list[dict[str, object]]:
    """Upserts of ``keys`` (16 keys reach both buckets)."""
    return [{"op": "upsert", "key": {"id": k}, "set": {"name": f"b{batch}"}} for k in keys]


def _requests(table: Table, step: object) -> dict[CallKind, int]:
    """Runs ``step()`` and returns the requests ``table``'s store made meanwhile."""
    before = table.store.counters.snapshot()
    step()  # type: ignore[operator]
    return table.store.counters.snapshot().minus(before).requests


def _puts_only(puts: int) -> dict[CallKind, int]:
    return {k: puts if k == "PUT" else 0 for k in CALL_KINDS}


def _commit_puts(table: Table, writes: int) -> dict[CallKind, int]:
    """What a steady-state commit of ``writes`` WAL segments makes: those, the log
    entry, and the last-checkpoint pointer if the commit was the one that wrote it."""
    pointer = table.log.last_checkpoint_version == core_of(table).version
    return _puts_only(writes + 1 + pointer)


def _writer(target: Target) -> Table:
    """A new table on ``target`` with one warm-up commit (the writer's first commit
    proves the store's conditional writes and loads the buckets' tablets)."""
    table = create_table(target.url, SCHEMA, storage_options=target.options or None)
    table.apply(_events(0), app_id="job", batch_id=0)
    return table


def _buckets_touched(table: Table) -> int:
    return len(table.log.read(table.log.latest() or 0).buckets)


def test_a_steady_state_commit_is_its_segments_and_the_log_entry(target: Target) -> None:
    table = _writer(target)
    for batch in range(1, STEADY_COMMITS + 1):
        got = _requests(table, lambda b=batch: table.apply(_events(b), app_id="job", batch_id=b))
        assert _buckets_touched(table) == 2
        assert got == _commit_puts(table, 2), f"commit of batch {batch}"
    got = _requests(table, lambda: table.apply(_events(9, range(1)), app_id="job", batch_id=9))
    assert got == _commit_puts(table, 1)  # one key: one bucket
    assert table.version == STEADY_COMMITS + 2


def test_a_replayed_batch_is_skipped_without_a_request(target: Target) -> None:
    table = _writer(target)
    table.apply(_events(1), app_id="job", batch_id=1)
    for batch in (0, 1):
        assert _requests(
            table, lambda b=batch: table.apply(_events(b), app_id="job", batch_id=b).skipped
        ) == _puts_only(0)
        assert _requests(
            table,
            lambda b=batch: table.is_committed("job", b),  # type: ignore[arg-type]
        ) == _puts_only(0)
    assert table.is_committed("job", 1) and not table.is_committed("job", 2)
    assert table.apply(_events(0), app_id="job", batch_id=0).skipped


def test_a_reopened_writer_answers_the_exactly_once_check_from_what_it_read(
    target: Target,
) -> None:
    first = _writer(target)
    first.apply(_events(1), app_id="job", batch_id=1)
    first.gc(dry_run=False, retain_versions=1)  # a checkpoint, and entries below it gone
    first.apply(_events(2), app_id="other", batch_id=7)
    table = open_table(target.url, storage_options=target.options or None)
    asked = (("job", 1), ("job", 2), ("other", 7))
    for app, batch in asked:
        assert _requests(table, lambda a=app, b=batch: table.is_committed(a, b)) == _puts_only(0)
    assert [table.is_committed(a, b) for a, b in asked] == [True, False, True]
    assert table.apply(_events(1), app_id="job", batch_id=1).skipped
    table.apply(_events(2), app_id="job", batch_id=2)
    got = _requests(table, lambda: table.apply(_events(3), app_id="job", batch_id=3))
    assert got == _commit_puts(table, 2)


@pytest.mark.parametrize("ahead", [1, 3])
def test_a_lost_race_reads_only_the_entries_after_the_losers_version(
    target: Target, ahead: int
) -> None:
    winner = _writer(target)
    loser = open_table(target.url, storage_options=target.options or None)
    loser.apply(_events(1), app_id="loser", batch_id=1)  # both writers are warm
    winner.read()  # the winner follows the loser's version
    known = loser.version
    for batch in range(1, ahead + 1):
        winner.apply(_events(batch), app_id="job", batch_id=batch)

    def lose() -> None:
        with pytest.raises(CommitConflict, match="committed by another writer"):
            loser.apply(_events(2), app_id="loser", batch_id=2)

    got = _requests(loser, lose)
    assert got["PUT"] == 2 + 1  # its segments and the failed create (then removed)
    # The taken entry, the others after it up to a probe that finds none, and the
    # segments of each version it lost to (2 buckets: replayed into its tablets); one
    # listing of _log for the oldest readable version.
    assert got["GET"] <= 1 + ahead + 2 * ahead
    assert got["LIST"] <= 1 and got["HEAD"] == 0
    assert got["DELETE"] <= 2  # its abort removes its segments
    assert not loser.is_committed("loser", 2) and loser.is_committed("job", ahead)
    assert core_of(loser).version == known + ahead  # what the next transaction starts from
    got = _requests(loser, lambda: loser.apply(_events(2), app_id="loser", batch_id=2))
    assert got == _commit_puts(loser, 2)
    assert loser.read().equals(open_table(target.url, storage_options=target.options).read())


def test_two_writers_deciding_the_same_version_one_wins(target: Target) -> None:
    a = _writer(target)
    b = open_table(target.url, storage_options=target.options or None)
    txns = [t.transaction(app_id=name, batch_id=1) for t, name in ((a, "a"), (b, "b"))]
    assert txns[0].version == txns[1].version
    for t, txn in zip((a, b), txns, strict=True):
        txn.prepare(sorted(_to_parts(t, txn)))
    txns[0].commit()
    with pytest.raises(CommitConflict, match="committed by another writer"):
        txns[1].commit()
    txns[1].abort()
    assert [v["app_id"] for v in b.versions()][-1] == "a"
    assert b.apply(_events(2), app_id="b", batch_id=1).version == txns[0].version + 1


def _to_parts(table: Table, txn: object) -> list[tuple[int, object]]:
    from cdc_sink.engine.inputs import to_batch

    batch, _ = to_batch(_events(7), txn.schema)  # type: ignore[attr-defined]
    return list(batch.split_by_bucket().items())


def test_a_table_that_reads_follows_the_other_writers_versions(target: Target) -> None:
    writer = _writer(target)
    both = open_table(target.url, storage_options=target.options or None)
    both.apply(_events(1), app_id="both", batch_id=1)
    writer.read()
    writer.apply(_events(2), app_id="job", batch_id=2)
    assert both.version == writer.version  # a read follows the log, as before
    assert both.read().equals(writer.read())
    assert both.is_committed("job", 2)
    newest = writer.version
    assert both.apply(_events(3), app_id="both", batch_id=2).version == newest + 1


OPEN_REQUESTS = 5


def _open_requests(target: Target) -> tuple[Table, dict[CallKind, int]]:
    """A new open of the table on ``target`` and every request it made (its store is
    new: its counters hold the open alone)."""
    table = open_table(target.url, storage_options=target.options or None)
    store = getattr(table.store, "inner", table.store)  # the cache counts what reaches it
    return table, store.counters.snapshot().requests


def _raw_entries(target: Target, versions: range) -> None:
    """Commits empty versions (no bucket, no writer) straight to the log, concurrently:
    a long history made quickly."""
    store = target.open(check_conditional_writes=False)

    def put(v: int) -> None:
        entry = LogEntry(version=v, app_id=None, batch_id=None, commit_time_ms=v, schema_id=0)
        data = encode_file([entry.to_json().encode("utf-8")], magic=LOG_MAGIC)
        store.put_if_absent(VersionLog.entry_key(v), data)

    with ThreadPoolExecutor(16) as pool:
        list(pool.map(put, versions))


@pytest.mark.parametrize("retained", [10, 1000])
def test_an_open_makes_a_constant_number_of_requests(target: Target, retained: int) -> None:
    """Whatever the tail after the pointer (each position of the checkpoint cadence),
    an open makes at most 5 requests, with 10 or 1,000 retained versions, and sees the
    writer's newest version, rows and idempotency table."""
    table = create_table(target.url, SCHEMA, storage_options=target.options or None)
    first = 1
    if retained > 10:  # a long history of empty versions, then the writer's own
        _raw_entries(target, range(1, retained - 6))
        table = open_table(target.url, storage_options=target.options or None)
        first = table.version + 1
    cadence = table.options.checkpoint_every
    for batch in range(first, retained):
        table.apply(_events(batch, range(batch % 16, batch % 16 + 2)), app_id="job", batch_id=batch)
        if batch + cadence < retained:
            continue
        opened, got = _open_requests(target)
        assert sum(got.values()) <= OPEN_REQUESTS, f"open at version {batch}: {got}"
        assert got["LIST"] == 1 and got["HEAD"] == 0 and got["PUT"] == 0
        assert opened.version == table.version == batch
        assert opened.is_committed("job", batch) and not opened.is_committed("job", batch + 1)
    assert opened.oldest_version == 0 and len(opened.versions()) == retained
    assert opened.read().equals(table.read())


def test_a_listing_after_a_key_lists_only_the_keys_after_it(target: Target) -> None:
    store = target.open()
    for name in ("a", "b", "c", "d"):
        store.put(f"p/{name}", b"x")
    store.put("q/e", b"x")
    before = store.counters.snapshot()
    assert store.list_keys("p", start_after="p/b") == ["p/c", "p/d"]
    assert store.list_keys("p", start_after="p/bb") == ["p/c", "p/d"]
    assert store.list_keys("p", start_after="p/d") == []
    assert store.counters.snapshot().minus(before).requests["LIST"] == 3
