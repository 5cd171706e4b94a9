"""Model-based test: the durable Table equals the plain-Python reference at every version.

Extends the MemTablet model test (tests/tablet/test_memtablet_model.py) to the table on
disk (and, in :func:`test_table_model_on_the_s3_server`, on a real S3 server): a fresh
directory per example, random schemas (and ``num_buckets``), exactly-once batches per
``(app_id, batch_id)``, reopening, simulated crashes around the commit point,
compaction, GC, schema changes and time travel. After every step every retained version
(``oldest_version`` .. ``version``) is read back through the table (and every few steps
through a freshly opened one) and compared with the model's state at that version, under
that version's schema.

A "crash" drops the Table object in the middle of an operation: ``VersionLog.commit``
(or a fault point) raises, optionally without the clean-up a live process would do (what
a ``kill -9`` leaves behind), optionally leaving a torn log entry; the table is then
opened again.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import functools
import os
import shutil
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any, ClassVar
from unittest import mock

import pytest
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

import cdc_sink.engine._commit as commit_mod
import cdc_sink.storage.gc as gc_mod
from cdc_sink.engine import TableCore
from cdc_sink.errors import VersionNotFound
from cdc_sink.schema import TableSchema, type_to_str
from cdc_sink.storage import faults
from cdc_sink.storage.version_log import LOG_MAGIC, VersionLog
from cdc_sink.table import Table, TableOptions, create_table, open_table
from tests.model import RefModel, model_rows, table_to_rows
from tests.strategies import VALUE_TYPES, WIDER, events, key_pool, schemas, values_of

OPTS = TableOptions.for_tests()
# Options a reopened writer may use (page_rows always comes from the table itself).
# Each codec of pages and WAL is among them, so one table mixes them across reopens.
REOPEN_OPTS = [
    OPTS,
    # the buckets of a batch prepared one by one; lz4 pages, zstd WAL
    replace(OPTS, prepare_threads=1, page_compression="lz4", wal_compression="zstd"),
    TableOptions(),  # long in-memory retention, rare snapshots
    TableOptions(
        page_rows=8,
        memory_versions=1,
        compact_every=1,
        snapshot_every=1,
        retain_versions=1,
        retain_seconds=0.0,
        page_compression=None,  # uncompressed pages and WAL
        wal_compression=None,
    ),
]
APPS = ("app-a", "app-b")
ADD_NAMES = ("c0", "c1", "c2", "c5", "x", "y")
RENAME_NAMES = ("r0", "r1", "c0", "c3", "k9", "s2")

# Steps that hit a known, reported bug are switched off or worked around while its flag is
# set (each bug has a strict xfail test below that shows it); when a bug is fixed its xfail
# test XPASSes: drop the xfail marker and set the flag to False.
KNOWN_BUGS = {
    # drop_column: test_snapshot_after_drop_column_... and test_version_before_drop_...
    "drop_column": False,
    "failed_schema_change_blocks": False,
    "timestamp_below_oldest": False,
    "empty_batch_after_torn_entry": False,
}


class SimulatedCrash(BaseException):
    """The process 'dies' here (BaseException: nothing may swallow it)."""


@contextlib.contextmanager
def crashing_commit(mode: str) -> Iterator[None]:
    """Makes ``VersionLog.commit`` fail.

    Modes:
        before_commit: raises before the entry exists (the writer cleans up, then dies).
        orphans: as before_commit, but the writer dies before cleaning up (kill -9).
        torn_entry: leaves an unfinished (empty/torn) entry file of the version, no clean-up.
        after_commit: the entry is created, then the process dies (no clean-up).
        transient: an OSError before the entry exists; the Table object is kept.
        error_after_create: the entry is created, then an OSError (say the fsync of
            ``_log/`` fails: "outcome unknown"); the writer survives and goes on.
    """
    original = VersionLog.commit

    def commit(log: VersionLog, entry: Any) -> None:
        if mode == "after_commit":
            original(log, entry)
            raise SimulatedCrash(f"after committing {entry.version}")
        if mode == "error_after_create":
            original(log, entry)
            raise OSError(f"simulated fsync error after creating entry {entry.version}")
        if mode == "torn_entry":  # only on a local store (an object store's PUT is whole)
            os.makedirs(log.log_dir, exist_ok=True)
            with open(log.entry_path(entry.version), "wb") as f:
                f.write(LOG_MAGIC + b"\x10\x00" if entry.version % 2 else b"")
        if mode == "transient":
            raise OSError(f"simulated I/O error committing {entry.version}")
        raise SimulatedCrash(f"before committing {entry.version}")

    with contextlib.ExitStack() as stack:
        stack.enter_context(mock.patch.object(VersionLog, "commit", commit))
        if mode in ("orphans", "torn_entry", "after_commit"):
            stack.enter_context(mock.patch.object(TableCore, "discard", _no_cleanup))
        yield


def _no_cleanup(state: TableCore, rels: Any) -> None:
    """A killed process removes nothing."""


@contextlib.contextmanager
def crash_at_fault_point(name: str, nth: int) -> Iterator[None]:
    """Raises SimulatedCrash the ``nth`` time the table reaches fault point ``name``."""
    original = faults.fault_point
    hits = [0]

    def fp(point: str) -> None:
        original(point)
        if point == name:
            hits[0] += 1
            if hits[0] == nth:
                raise SimulatedCrash(f"at {point} #{nth}")

    with contextlib.ExitStack() as stack:
        for module in (commit_mod, gc_mod):  # where the table's fault points are
            stack.enter_context(mock.patch.object(module, "fault_point", fp))
        yield


def _model_events(evs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The engine ignores whatever a delete carries in ``set`` (changes.py); RefModel
    rejects a delete whose ``set`` names an unknown column. That only happens here when a
    batch drawn before a schema change is replayed after it, so drop a delete's ``set``."""
    return [
        {k: v for k, v in e.items() if k != "set"} if e.get("op") == "delete" else e for e in evs
    ]


def _scratch_root() -> str | None:
    """/dev/shm when writable: the simulated crashes keep the page cache, so a tmpfs shows
    the same states as a disk and makes the many fsyncs free."""
    shm = "/dev/shm"
    return shm if os.path.isdir(shm) and os.access(shm, os.W_OK) else None


def _set_column(row: dict[str, Any], *, name: str, value: Any) -> None:
    row[name] = value


def _rename_column(row: dict[str, Any], *, old: str, new: str) -> None:
    row[new] = row.pop(old)


def _drop_column(row: dict[str, Any], *, name: str) -> None:
    del row[name]


def _same_values(row: dict[str, Any]) -> None:
    """A widening changes no value."""


def _files(root: str) -> set[str]:
    out = set()
    for d, _, names in os.walk(root):
        out.update(os.path.join(d, n) for n in names)
    return out


class TableMachine(RuleBasedStateMachine):
    """Drives one durable table and the reference model side by side."""

    table: Table
    model: RefModel
    #: The table's object store (a URL prefix and options) instead of a directory.
    s3: ClassVar[tuple[Callable[[], str], dict[str, str]] | None] = None

    # ------------------------------------------------------------------ setup
    @initialize(data=st.data())
    def setup(self, data: st.DataObject) -> None:
        schema = data.draw(schemas())
        self.storage: dict[str, str] | None = None
        if self.s3 is None:
            self.dir = tempfile.mkdtemp(prefix="cdc_table_model_", dir=_scratch_root())
            self.path = os.path.join(self.dir, "t")
        else:
            new_url, self.storage = self.s3
            self.path = new_url()
        self.keys = [tuple(k[n] for n in schema.primary_key) for k in data.draw(key_pool(schema))]
        self.opts = OPTS
        self.table = create_table(
            self.path, schema, options=self.opts, storage_options=self.storage
        )
        assert self.table.schema == schema
        self.model = RefModel(schema)
        self.vschemas: dict[int, TableSchema] = {0: schema}  # schema of every version
        self.meta: dict[int, tuple[str | None, int | None]] = {0: (None, None)}
        self.last_bid: dict[str, int] = {}  # idempotency table
        self.committed: dict[tuple[str, int], list[dict[str, Any]]] = {}
        self.crashed: list[tuple[str, int, list[dict[str, Any]]]] = []
        self.version = 0
        self.oldest = 0
        self.checks = 0
        self.gc_crashed = False  # an interrupted GC may leave log entries below oldest

    def teardown(self) -> None:
        if hasattr(self, "dir"):
            shutil.rmtree(self.dir, ignore_errors=True)

    # ------------------------------------------------------------------ helpers
    @property
    def schema(self) -> TableSchema:
        return self.model.schema

    def _key_dicts(self, schema: TableSchema | None = None) -> list[dict[str, Any]]:
        pk = (schema or self.schema).primary_key
        return [dict(zip(pk, k, strict=True)) for k in self.keys]

    def _draw_events(self, data: st.DataObject) -> list[dict[str, Any]]:
        return data.draw(events(self.schema, self._key_dicts(), max_size=20, truncates=True))

    def _next_batch(self, data: st.DataObject) -> tuple[str | None, int | None]:
        app = data.draw(st.sampled_from([*APPS, None]))
        if app is None:
            return None, None
        return app, self.last_bid.get(app, -1) + data.draw(st.integers(1, 3))

    def _commit_model(self, v: int, app: str | None = None, bid: int | None = None) -> None:
        assert v == self.version + 1
        self.model.commit(v)
        self.vschemas[v] = self.schema
        self.meta[v] = (app, bid)
        if app is not None and bid is not None:
            self.last_bid[app] = bid
        self.version = v

    def _apply(self, evs: list[dict[str, Any]], app: str | None, bid: int | None) -> None:
        skip = app is not None and bid is not None and bid <= self.last_bid.get(app, -1)
        res = self.table.apply(evs, app_id=app, batch_id=bid)
        event(f"apply: {'skipped' if skip else 'committed'}")
        if skip:
            assert res.skipped, f"({app}, {bid}) was committed before"
            assert res.version == self.version
            return
        assert not res.skipped
        assert res.version == self.version + 1
        expected = self.model.apply(_model_events(evs))
        invalid = expected.pop("invalid")
        assert res.counts == expected
        assert len(res.rejects) == invalid + expected["rejected"]
        self._commit_model(res.version, app, bid)
        if app is not None and bid is not None:
            self.committed[(app, bid)] = evs

    def _reopen(self) -> None:
        del self.table
        self.table = self._open(self.opts)

    def _open(self, opts: TableOptions) -> Table:
        return open_table(self.path, options=opts, storage_options=self.storage)

    def _objects(self) -> set[str]:
        """Every file of the table (its keys on an object store)."""
        if self.storage is None:
            return _files(self.path)
        return set(self.table.store.list_keys(""))

    def _exists(self, location: str) -> bool:
        """Whether what GC named (a file, or an object's URL) still exists."""
        if self.storage is None:
            return os.path.exists(location)
        return location.removeprefix(self.path.rstrip("/") + "/") in self._objects()

    def _expected_rows(self, v: int, schema: TableSchema) -> dict[Any, Any]:
        return model_rows(self.model.versions[v], schema)

    # ------------------------------------------------------------------ data rules
    @rule(data=st.data())
    def apply_batch(self, data: st.DataObject) -> None:
        app, bid = self._next_batch(data)
        self._apply(self._draw_events(data), app, bid)

    @rule(data=st.data())
    def apply_two_batches(self, data: st.DataObject) -> None:
        """(More data steps than the one rule among many would give.)"""
        for _ in range(2):
            self.apply_batch(data)

    @precondition(lambda self: bool(self.last_bid))
    @rule(data=st.data())
    def reapply_old_batch(self, data: st.DataObject) -> None:
        """A batch id <= the last one committed for its app is a no-op, whatever it holds."""
        app = data.draw(st.sampled_from(sorted(self.last_bid)))
        bid = data.draw(st.integers(0, self.last_bid[app]))
        same = (app, bid) in self.committed and data.draw(st.booleans())
        evs = self.committed[(app, bid)] if same else self._draw_events(data)
        before = self.table.version
        res = self.table.apply(evs, app_id=app, batch_id=bid)
        assert res.skipped and res.version == self.version == before == self.table.version

    @rule(
        data=st.data(),
        mode=st.sampled_from(
            [
                "before_commit",
                "orphans",
                "torn_entry",
                "after_commit",
                "transient",
                "error_after_create",
            ]
        ),
    )
    def crash_during_apply(self, data: st.DataObject, mode: str) -> None:
        app = data.draw(st.sampled_from(APPS))
        bid = self.last_bid.get(app, -1) + 1
        evs = self._draw_events(data)
        if mode == "torn_entry" and self.storage is not None:
            mode = "orphans"  # no torn object on an object store: a death before the PUT
        exc: type[BaseException] = SimulatedCrash
        if mode in ("transient", "error_after_create"):
            exc = OSError
        event(f"crash during apply: {mode}")
        with crashing_commit(mode), pytest.raises(exc):
            self.table.apply(evs, app_id=app, batch_id=bid)
        if mode not in ("transient", "error_after_create"):
            self._reopen()  # the process died; a new one opens the table
        if mode == "torn_entry" and KNOWN_BUGS["empty_batch_after_torn_entry"]:
            self.table.log.repair()  # workaround: an empty batch would not repair first
        if mode in ("after_commit", "error_after_create"):
            # The entry was created: the version is committed (and a replay is skipped).
            self.model.apply(_model_events(evs))
            self._commit_model(self.version + 1, app, bid)
            self.committed[(app, bid)] = evs
        assert self.table.version == self.version
        self.crashed.append((app, bid, evs))

    @precondition(lambda self: bool(self.crashed))
    @rule()
    def replay_crashed_batch(self) -> None:
        """Spark replays the batch that was in flight when the job died."""
        app, bid, evs = self.crashed.pop()
        self._apply(evs, app, bid)

    @rule(opts=st.sampled_from(range(len(REOPEN_OPTS))))
    def reopen(self, opts: int) -> None:
        self.opts = REOPEN_OPTS[opts]
        self._reopen()

    # ------------------------------------------------------------------ maintenance
    @rule()
    def compact(self) -> None:
        v = self.table.compact()
        self._commit_model(v)

    @rule(mode=st.sampled_from(["before_commit", "orphans", "after_commit"]))
    def crash_during_compact(self, mode: str) -> None:
        with crashing_commit(mode), pytest.raises(SimulatedCrash):
            self.table.compact()
        self._reopen()
        if mode == "after_commit":
            self._commit_model(self.version + 1)
        assert self.table.version == self.version

    @rule(n=st.integers(0, 6))
    def gc(self, n: int) -> None:
        horizon = max(self.oldest, self.version - max(n, 1) + 1)
        before = self._objects()
        would = self.table.gc(dry_run=True, retain_versions=n, retain_seconds=0)
        assert self._objects() == before, "gc(dry_run=True) deleted files"
        done = self.table.gc(dry_run=False, retain_versions=n, retain_seconds=0)
        assert sorted(done) == sorted(would)
        assert not any(self._exists(p) for p in done)
        assert self.table.oldest_version == horizon
        event(f"gc: {'moved oldest' if horizon > self.oldest else 'kept oldest'}")
        self.oldest = horizon
        assert self.table.gc(dry_run=True, retain_versions=n, retain_seconds=0) == [], (
            "a second gc would delete more"
        )

    # ------------------------------------------------------------------ schema changes
    @rule(data=st.data(), type_name=st.sampled_from(VALUE_TYPES), nullable=st.booleans())
    def add_column(self, data: st.DataObject, type_name: str, nullable: bool) -> None:
        names = [n for n in ADD_NAMES if not self.schema.has_column(n)]
        if not names:
            return
        name = data.draw(st.sampled_from(names))
        default = None
        if not nullable or data.draw(st.booleans()):
            default = data.draw(values_of(type_name))
        new = self.schema.add_column(name, type_name, nullable=nullable, default=default)
        v = self.table.add_column(name, type_name, nullable=nullable, default=default)
        value = new.column(name).default.as_py()
        self._change_model(v, new, functools.partial(_set_column, name=name, value=value))

    @rule(data=st.data())
    def rename_column(self, data: st.DataObject) -> None:
        old = data.draw(st.sampled_from(self.schema.names))
        names = [n for n in RENAME_NAMES if not self.schema.has_column(n)]
        if not names:
            return
        new_name = data.draw(st.sampled_from(names))
        new = self.schema.rename_column(old, new_name)
        v = self.table.rename_column(old, new_name)
        self._change_model(v, new, functools.partial(_rename_column, old=old, new=new_name))

    @precondition(
        lambda self: (
            not KNOWN_BUGS["drop_column"]
            and any(c.name != self.schema.sequence_column for c in self.schema.value_columns)
        )
    )
    @rule(data=st.data())
    def drop_column(self, data: st.DataObject) -> None:
        name = data.draw(
            st.sampled_from(
                [c.name for c in self.schema.value_columns if c.name != self.schema.sequence_column]
            )
        )
        new = self.schema.drop_column(name)
        v = self.table.drop_column(name)
        self._change_model(v, new, functools.partial(_drop_column, name=name))

    @rule(data=st.data())
    def widen_column(self, data: st.DataObject) -> None:
        """Rows written before read their values in the wider type; the events drawn
        after it hold values only the wider type holds."""
        wider = [
            (c.name, t)
            for c in self.schema.value_columns
            for t in WIDER.get(type_to_str(c.type), ())
        ]
        if not wider:
            return
        name, to = data.draw(st.sampled_from(wider))
        new = self.schema.widen_column(name, to)
        v = self.table.widen_column(name, to)
        event(f"widen_column: {type_to_str(self.schema.column(name).type)} -> {to}")
        self._change_model(v, new, _same_values)

    def _change_model(self, v: int, new: TableSchema, fix: Callable[[dict[str, Any]], Any]) -> None:
        self.model.schema = new
        for row in self.model.rows.values():
            fix(row)
        self._commit_model(v)
        assert self.table.schema == new

    @rule(data=st.data(), mode=st.sampled_from(["before_commit", "orphans", "after_commit"]))
    def crash_during_schema_change(self, data: st.DataObject, mode: str) -> None:
        """Before the commit point the new schema file may be written but nothing changes,
        and later (different) schema changes must still succeed; after it the change is
        committed."""
        if KNOWN_BUGS["failed_schema_change_blocks"] and mode != "after_commit":
            return
        free = [n for n in ("z0", "z1", "z2", "z3") if not self.schema.has_column(n)]
        if not free:
            return
        new_name = data.draw(st.sampled_from(free))
        if data.draw(st.booleans()):
            default = data.draw(st.integers(0, 9))
            new = self.schema.add_column(new_name, "int32", default=default)
            fix = functools.partial(_set_column, name=new_name, value=default)
            method, args, kwargs = "add_column", (new_name, "int32"), {"default": default}
        else:
            old = data.draw(st.sampled_from(self.schema.names))
            new = self.schema.rename_column(old, new_name)
            fix = functools.partial(_rename_column, old=old, new=new_name)
            method, args, kwargs = "rename_column", (old, new_name), {}
        event(f"crash during schema change: {mode}")
        with crashing_commit(mode), pytest.raises(SimulatedCrash):
            getattr(self.table, method)(*args, **kwargs)
        self._reopen()
        if mode == "after_commit":
            self._change_model(self.version + 1, new, fix)
        assert self.table.version == self.version
        assert self.table.schema == self.schema

    @rule(n=st.integers(0, 3), nth=st.integers(1, 4))
    def crash_during_gc(self, n: int, nth: int) -> None:
        """GC dies after deleting ``nth - 1`` files; every version the log still lists
        must stay readable, and a later GC finishes the job."""
        horizon = max(self.oldest, self.version - max(n, 1) + 1)
        with contextlib.suppress(SimulatedCrash), crash_at_fault_point("gc.deleting", nth):
            self.table.gc(dry_run=False, retain_versions=n, retain_seconds=0)
        self._reopen()
        assert self.oldest <= self.table.oldest_version <= horizon
        self.oldest = self.table.oldest_version
        self.gc_crashed = True

    # ------------------------------------------------------------------ time travel
    @rule(data=st.data())
    def time_travel(self, data: st.DataObject) -> None:
        vers = self.table.versions()
        assert [e["version"] for e in vers] == list(range(self.oldest, self.version + 1))
        e = data.draw(st.sampled_from(vers))
        ts = e["commit_time_ms"]
        # Several versions may share a millisecond: the newest of them is read.
        v = max(x["version"] for x in vers if x["commit_time_ms"] <= ts)
        assert v >= e["version"]
        by_version = self.table.read(version=v)
        schema = self.vschemas[v]
        as_dt = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc) + dt.timedelta(milliseconds=ts)
        for when in (ts, as_dt, as_dt.isoformat()):
            got = self.table.read(timestamp=when)
            assert got.equals(by_version), f"timestamp {when!r} vs version {v}"
        assert table_to_rows(by_version, schema.primary_key) == self._expected_rows(v, schema)
        if not (KNOWN_BUGS["timestamp_below_oldest"] and self.gc_crashed):
            with pytest.raises(VersionNotFound):
                self.table.read(timestamp=vers[0]["commit_time_ms"] - 1)

    # ------------------------------------------------------------------ invariants
    def _check(self, t: Table) -> None:
        assert t.version == self.version
        assert t.oldest_version == self.oldest
        vers = t.versions()
        assert [e["version"] for e in vers] == list(range(self.oldest, self.version + 1))
        times = [e["commit_time_ms"] for e in vers]
        assert times == sorted(times), "commit times go backwards"
        for e in vers:
            assert (e["app_id"], e["batch_id"]) == self.meta[e["version"]]
            assert e["schema_id"] == self.vschemas[e["version"]].schema_id
        for v in range(self.oldest, self.version + 1):
            schema = self.vschemas[v]
            assert t.schema_at(v) == schema, f"schema of version {v}"
            got = t.read(version=v)
            assert got.schema == schema.arrow_schema(), f"version {v}"
            assert table_to_rows(got, schema.primary_key) == self._expected_rows(v, schema), (
                f"version {v}"
            )
        for v in {self.oldest, self.version}:
            schema = self.vschemas[v]
            expect = self._expected_rows(v, schema)
            keys = [tuple(k) for k in self.keys]
            found = table_to_rows(t.get(self._key_dicts(schema), version=v), schema.primary_key)
            assert found == {k: expect[k] for k in keys if k in expect}, f"get at {v}"
        for v in {0, self.oldest - 1} if self.oldest > 0 else ():
            with pytest.raises(VersionNotFound):
                t.read(version=v)
            with pytest.raises(VersionNotFound):
                t.get(self._key_dicts(), version=v)
        with pytest.raises(VersionNotFound):
            t.read(version=self.version + 1)

    @invariant()
    def every_retained_version_equals_the_model(self) -> None:
        if not hasattr(self, "table"):
            return
        self._check(self.table)
        self.checks += 1
        if self.checks % 3 == 0:
            self._check(self._open(OPTS))
        for v in [v for v in self.model.versions if v < self.oldest]:
            del self.model.versions[v]


TestTableModel = TableMachine.TestCase
# CDC_SINK_MODEL_EXAMPLES=300 for a long bug hunt.
EXAMPLES = int(os.environ.get("CDC_SINK_MODEL_EXAMPLES", "25"))
TestTableModel.settings = settings(
    max_examples=EXAMPLES,
    stateful_step_count=20,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


def test_table_model_on_the_s3_server(s3_server: Any) -> None:
    """The same machine, rules and checks with each example's table on a fresh prefix of
    the session's real S3 server (fewer examples: every step is requests)."""

    class OnS3(TableMachine):
        s3 = (lambda: s3_server.url(f"model-{uuid.uuid4().hex}/t"), s3_server.storage_options())

    run_state_machine_as_test(
        OnS3,
        settings=settings(
            max_examples=max(1, EXAMPLES // 3),
            stateful_step_count=20,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow],
        ),
    )


# ---------------------------------------------------------------------- found bugs
def _small_schema(**extra: Any) -> dict[str, Any]:
    return {
        "columns": [
            {"name": "k", "type": "int64", "nullable": False},
            {"name": "a", "type": "int8"},
        ],
        "primary_key": ["k"],
        **extra,
    }


def test_snapshot_after_drop_column_is_readable_after_reopen(tmp_path: Any) -> None:
    t = create_table(tmp_path / "t", _small_schema(), options=OPTS)
    t.apply([{"op": "insert", "key": {"k": 1}, "set": {"a": 5}}])
    t.drop_column("a")
    v = t.compact()  # snapshot under the new schema
    assert t.read(version=v).to_pylist() == [{"k": 1}]
    assert open_table(tmp_path / "t").read(version=v).to_pylist() == [{"k": 1}]


def test_failed_schema_change_does_not_block_later_ones(tmp_path: Any) -> None:
    t = create_table(tmp_path / "t", _small_schema(), options=OPTS)
    with crashing_commit("before_commit"), pytest.raises(SimulatedCrash):
        t.add_column("b", "int32")
    t = open_table(tmp_path / "t", options=OPTS)
    assert t.version == 0 and t.schema.names == ["k", "a"]
    v = t.rename_column("a", "a2")
    assert t.schema_at(v).names == ["k", "a2"]


@pytest.mark.parametrize("nth", [1, 2])
def test_crash_during_gc_keeps_listed_versions_readable(tmp_path: Any, nth: int) -> None:
    """Found by the machine (fixed in 8a4ec92): gc() wrote its checkpoint and deleted data
    files before the log entries below the horizon; after a crash in between a reopened
    table read the still listed versions as EMPTY."""
    t = create_table(tmp_path / "t", _small_schema(), options=OPTS)
    t.apply([{"op": "insert", "key": {"k": 1}, "set": {"a": 5}}])  # v1
    t.apply([{"op": "update", "key": {"k": 1}, "set": {"a": 6}}])  # v2
    t.compact()  # v3: snapshot of v2
    t.compact()  # v4: snapshot of v3
    # nth=1: dies after the checkpoint, before deleting anything; nth=2: after 1 deletion.
    with crash_at_fault_point("gc.deleting", nth), pytest.raises(SimulatedCrash):
        t.gc(dry_run=False, retain_versions=1, retain_seconds=0)
    t = open_table(tmp_path / "t", options=OPTS)
    expected = {
        0: [],
        1: [{"k": 1, "a": 5}],
        2: [{"k": 1, "a": 6}],
        3: [{"k": 1, "a": 6}],
        4: [{"k": 1, "a": 6}],
    }
    for v in range(t.oldest_version, t.version + 1):
        # Either still listed and right, or not listed any more; never wrong.
        assert t.read(version=v).to_pylist() == expected[v], f"version {v}"


def test_error_after_entry_created_keeps_the_committed_version(tmp_path: Any) -> None:
    """Found by the machine (fixed in 8a4ec92): an error from VersionLog.commit after the
    entry was created made Table.apply delete the WAL segments of the committed version."""
    t = create_table(tmp_path / "t", _small_schema(), options=OPTS)
    with crashing_commit("error_after_create"), pytest.raises(OSError):
        t.apply([{"op": "insert", "key": {"k": 1}, "set": {"a": 5}}], app_id="job", batch_id=1)
    t = open_table(tmp_path / "t", options=OPTS)
    assert t.version == 1  # the entry exists: version 1 is committed ...
    assert t.apply([], app_id="job", batch_id=1).skipped  # ... and a replay is skipped
    assert t.read(version=1).to_pylist() == [{"k": 1, "a": 5}]  # so its data must be there


def test_version_before_drop_column_readable_after_reopen(tmp_path: Any) -> None:
    t = create_table(tmp_path / "t", _small_schema(), options=OPTS)
    t.apply([{"op": "insert", "key": {"k": 1}, "set": {"a": 1}}])  # v1
    t.add_column("b", "int8", default=3)  # v2: column id 2
    t.drop_column("b")  # v3
    t = open_table(tmp_path / "t", options=OPTS)
    t.apply([{"op": "insert", "key": {"k": 2}, "set": {"a": 2}}])  # v4: loads the bucket at v3
    assert t.read(version=2).to_pylist() == [{"k": 1, "a": 1, "b": 3}]


def test_timestamp_below_oldest_after_interrupted_gc(tmp_path: Any) -> None:
    t = create_table(tmp_path / "t", _small_schema(), options=OPTS)
    t.apply([{"op": "insert", "key": {"k": 1}, "set": {"a": 5}}])  # v1
    time.sleep(0.005)  # distinct commit times (ms)
    t.compact()  # v2
    t.compact()  # v3
    with crash_at_fault_point("gc.deleting", 1), pytest.raises(SimulatedCrash):
        t.gc(dry_run=False, retain_versions=1, retain_seconds=0)  # after the checkpoint
    t = open_table(tmp_path / "t", options=OPTS)
    assert t.oldest_version == 3
    assert t.log.read(1).commit_time_ms < t.log.read(3).commit_time_ms
    ts = t.log.read(1).commit_time_ms  # the entry of version 1 is still on disk
    with pytest.raises(VersionNotFound):
        t.read(version=1)
    # Reading "as of" version 1's commit time must not give version 1's (lost) state:
    # either VersionNotFound (older than the oldest readable version) or right rows.
    try:
        got = t.read(timestamp=ts).to_pylist()
    except VersionNotFound:
        return
    assert got == [{"k": 1, "a": 5}]


@pytest.mark.parametrize("events", [[], [{"op": "merge", "key": {"k": 1}}]])
def test_empty_batch_after_torn_entry(tmp_path: Any, events: list[dict[str, Any]]) -> None:
    t = create_table(tmp_path / "t", _small_schema(), options=OPTS)
    with crashing_commit("torn_entry"), pytest.raises(SimulatedCrash):
        t.apply(events, app_id="job", batch_id=1)  # dies publishing entry 1
    t = open_table(tmp_path / "t", options=OPTS)
    assert t.version == 0
    assert t.apply(events, app_id="job", batch_id=1).version == 1  # the replay
