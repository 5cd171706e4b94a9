"""Versions a table makes of its own: creation, snapshots, compaction, schema changes,
GC (private helpers of :class:`~cdc_sink.engine.core.TableCore`, whose methods call them
under its lock; :func:`create` is :func:`cdc_sink.create_table`'s).

Snapshot policy: a bucket is snapshotted (at the version before the one being prepared,
as part of that prepare) once ``snapshot_every`` versions changed it or its segments
since the last snapshot hold ``snapshot_events`` events, so loading a bucket never
replays much more than that. :func:`compact` snapshots every bucket at the newest
version in a version of kind ``snapshot``; a schema change is a version of kind
``schema`` that names the new schema file.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from cdc_sink.engine.options import TableOptions
from cdc_sink.engine.pending import PendingBucket
from cdc_sink.errors import CommitConflict, TableExists, VersionNotFound
from cdc_sink.schema import TableSchema, is_widening
from cdc_sink.storage.gc import GcPlan, GcPolicy, execute_gc, plan_gc
from cdc_sink.storage.layout import TABLE_FILE, file_version, schema_key
from cdc_sink.storage.objectstore import (
    ObjectExists,
    ObjectStore,
    ObjectStoreError,
    StoreLike,
    as_store,
)
from cdc_sink.storage.objectstore.local import LocalStore
from cdc_sink.storage.protocol import WIDENING_VERSION, protocol_fields, raised_fields
from cdc_sink.storage.snapshot import (
    LocationUpdate,
    apply_locations,
    read_manifest,
    write_snapshot,
)
from cdc_sink.storage.version_log import BucketRef, LogEntry, VersionLog
from cdc_sink.tablet import MemTablet
from cdc_sink.tablet.keyindex import new_seed, seed_to_json

if TYPE_CHECKING:
    from cdc_sink.engine.core import TableCore

logger = logging.getLogger(__name__)

__all__ = [
    "change_schema",
    "collect_garbage",
    "compact",
    "create",
    "maybe_snapshot",
    "snapshot",
    "write_schema",
]


def create(
    where: StoreLike, schema: TableSchema | Mapping[str, Any], options: TableOptions
) -> None:
    """Creates an empty table in ``where`` (version 0, kind ``create``).

    Args:
        where: The table's store (or its local directory).
        schema: The schema, or its dictionary form.
        options: The options; ``page_rows`` is fixed here.

    Raises:
        TableExists: ``where`` already holds a table, or another table is being created
            there (or its creation crashed) with other options or another schema.
        SchemaError: The schema is invalid.
    """
    if not isinstance(schema, TableSchema):
        schema = TableSchema.from_dict(schema)
    if schema.schema_id != 0:
        schema = replace(schema, schema_id=0)
    mode = options.file_mode
    store = where if isinstance(where, ObjectStore) else LocalStore(where, file_mode=mode)
    log = VersionLog(store.url, file_mode=options.file_mode, store=store)
    log.repair()
    if log.latest() is not None:
        raise TableExists(f"a table already exists at {store.url}")
    # Version 0's log entry is the commit point of creation. _table.json and schema 0 are
    # created with put_if_absent: racing creators (or one retrying after a crash) agree
    # on the first one's key index seed, drawn once per table; every tablet of the table,
    # in any process, hashes keys with it (cdc_sink.tablet.keyindex). A creation of other
    # options or another schema is refused, as entry 0 could name either.
    meta = {
        "format": 1,
        **protocol_fields(),
        "page_rows": options.page_rows,
        "index_seed": seed_to_json(new_seed()),
    }
    try:
        store.put_if_absent(TABLE_FILE, json.dumps(meta).encode())
    except ObjectExists:
        found = json.loads(store.get(TABLE_FILE))
        if found.get("format") != 1 or found.get("page_rows") != options.page_rows:
            raise TableExists(
                f"another table (other options) is being created at {store.url}, or its "
                "creation crashed before version 0: remove it to create one there"
            ) from None
    write_schema(store, schema, committed=True, creating=True)
    first = _own_entry(0, int(time.time() * 1000), 0, "create")
    try:
        log.commit(first)
    except CommitConflict:
        raise TableExists(f"a table already exists at {store.url}") from None


def write_schema(
    where: StoreLike,
    schema: TableSchema,
    *,
    committed: bool = False,
    creating: bool = False,
) -> None:
    """Creates ``_schema/<id>.json`` (``put_if_absent``).

    A file of an id no log entry uses yet is left by a schema change that failed before
    its commit, and is replaced; one of a committed id must hold the same schema.

    Args:
        where: The table's store (or its local directory).
        schema: The schema.
        committed: The id is in use (or may be, by a racing writer): never replace.
        creating: A creation writes it (a different file is another creator's).

    Raises:
        CommitConflict: ``committed`` and another writer wrote a different schema there.
        TableExists: ``creating`` and another creator wrote a different schema there.
    """
    store = as_store(where)
    key = schema_key(schema.schema_id)
    data = json.dumps(schema.to_dict(), indent=1).encode()
    try:
        store.put_if_absent(key, data)
    except ObjectExists:
        if TableSchema.from_dict(json.loads(store.get(key))) == schema:
            return
        if creating:
            raise TableExists(
                f"another table (another schema) is being created at {store.url}, or its "
                "creation crashed before version 0: remove it to create one there"
            ) from None
        if committed:
            raise CommitConflict(
                f"schema {schema.schema_id} was written by another writer"
            ) from None
        store.put(key, data)


def maybe_snapshot(
    s: TableCore,
    t: MemTablet,
    schema_id: int,
    written: list[str],
    events: int,
    pending: PendingBucket,
    wal_bytes: int = 0,
) -> str | None:
    """Snapshots ``t`` (at its committed version) when the policy says so.

    Counts a new version of ``events`` events and ``wal_bytes`` segment bytes
    (decompressed) for the bucket. The snapshot's files are appended to ``written`` and
    its page locations to ``pending`` (they become the tablet's when the prepared version
    commits).

    Returns:
        The snapshot manifest's relative path, or ``None``.
    """
    n, total, size = s._since_snapshot.get(t.bucket, (0, 0, 0))
    n, total, size = n + 1, total + events, size + wal_bytes
    s._since_snapshot[t.bucket] = (n, total, size)
    o = s.options
    if n < o.snapshot_every and total < o.snapshot_events and size < o.snapshot_wal_bytes:
        return None
    return snapshot(s, t, schema_id, written, pending.locations)


def snapshot(
    s: TableCore,
    t: MemTablet,
    schema_id: int,
    written: list[str],
    locations: list[LocationUpdate],
) -> str:
    """Writes a snapshot of ``t`` at its committed version (incremental on the bucket's
    newest snapshot); returns the manifest's relative path.

    The files written are appended to ``written``; the page locations to record once the
    snapshot's version commits, to ``locations``.
    """
    prev_ref = s.history.snapshot_at(t.bucket, t.committed)
    previous = read_manifest(s.store, prev_ref[1]) if prev_ref else None
    t.compact(t.committed)
    rel, manifest, updates = write_snapshot(
        s.store,
        t,
        t.committed,
        schema_id,
        previous=previous,
        compression=s.options.page_compression,
    )
    locations.extend(updates)
    written.append(rel)
    written.extend(
        f
        for f in manifest.files
        if file_version(f) == t.committed and (previous is None or f not in previous.files)
    )
    s._since_snapshot[t.bucket] = (0, 0, 0)
    return rel


def compact(s: TableCore) -> int:
    """Snapshots every bucket at the newest version and compacts it in memory.

    Commits a maintenance version (kind ``snapshot``) that references the snapshots;
    buckets already snapshotted at their current version (a bulk write's) are only
    compacted in memory.

    Returns:
        The version created.
    """
    s.refresh()
    schema = s.schema_at(s.version)
    for b in range(schema.num_buckets):
        s.tablet(b)
    refs: dict[int, BucketRef] = {}
    written: list[str] = []
    locations: list[LocationUpdate] = []
    v = s.version + 1
    try:
        for b, t in sorted(s._tablets.items()):
            newest = s.history.snapshot_at(b, t.committed)
            if newest is not None and newest[0] == t.committed:
                t.compact()  # a snapshot of this state exists (a bulk write's)
                continue
            rel = snapshot(s, t, schema.schema_id, written, locations)
            refs[b] = BucketRef(segment=None, snapshot=rel)
        entry = _own_entry(v, s.commit_time(), schema.schema_id, "snapshot", refs)
        s.log.commit(entry)
    except BaseException:
        if _committed_snapshots(s, v, refs):
            # The outcome was unknown (the directory fsync failed after the entry was
            # linked) and the entry is there: the version is committed, its snapshots
            # must stay. Publish it so memory matches the log, then report the error.
            apply_locations(locations)
            s.history.add(s.log.read(v))
            s.publish(v, [])
            raise
        s.discard(written)
        raise
    apply_locations(locations)
    s.history.add(entry)
    s.publish(v, [])
    write_last_checkpoint(s)
    return v


def _committed_snapshots(s: TableCore, version: int, refs: Mapping[int, BucketRef]) -> bool:
    """Whether log entry ``version`` exists and is the snapshot version of ``refs``."""
    if not refs:
        return False
    try:
        entry = s.log.read(version)
    except (VersionNotFound, FileNotFoundError):
        return False
    mine = {b: r.snapshot for b, r in refs.items()}
    return entry.kind == "snapshot" and {b: r.snapshot for b, r in entry.buckets.items()} == mine


def write_last_checkpoint(s: TableCore, *, force: bool = False) -> None:
    """After a commit of this writer: replaces the table's last-checkpoint pointer with
    the checkpoint as of the newest version when it is due
    (:meth:`~cdc_sink.storage.version_log.VersionLog.checkpoint_due`:
    ``TableOptions.checkpoint_every`` versions or ``checkpoint_tail_bytes`` of entries
    after the pointer it knows), or with ``force``. The pointer is a hint: a store that
    fails to write it is logged, and the committed version stands."""
    v = s.version
    opts = s.options
    due = s.log.checkpoint_due(v, opts.checkpoint_every, opts.checkpoint_tail_bytes)
    if not (force or due) or s.history.upto != v:
        return
    snaps = {}
    for b in range(s.schema_at(v).num_buckets):
        snap = s.history.snapshot_at(b, v)
        snaps[b] = snap[1] if snap else None
    try:
        s.log.write_last_checkpoint(v, snaps, s.history.schema_id_at(v), s.history.pointer_extra())
    except (ObjectStoreError, OSError) as exc:
        logger.warning("could not write the last-checkpoint pointer of %s: %s", s.root, exc)


def change_schema(s: TableCore, new: TableSchema) -> int:
    """Commits ``new`` as the table's schema in a version of its own; returns it.

    A schema that widens a column raises the table's protocol versions first
    (:func:`raise_protocol`): from that version on, the table holds pages, deltas and
    segments of a narrower type than its schema names.
    """
    s.refresh()
    if widens(s.schema_at(s.version), new):
        raise_protocol(s, WIDENING_VERSION)
    v = s.version + 1
    committed = new.schema_id <= max(sid for _, sid in s.history.schemas)
    write_schema(s.store, new, committed=committed)
    entry = _own_entry(v, s.commit_time(), new.schema_id, "schema")
    s.log.commit(entry)
    s._schemas[new.schema_id] = new
    s.history.add(entry)
    for t in s._tablets.values():
        t.set_schema(new)
    s.publish(v, [])
    write_last_checkpoint(s)
    return v


def widens(old: TableSchema, new: TableSchema) -> bool:
    """Whether ``new`` gives a column of ``old`` (by id) a wider type."""
    return any(
        o.id == c.id and is_widening(o.type, c.type) for o in old.columns for c in new.columns
    )


def raise_protocol(s: TableCore, version: int) -> None:
    """Raises the reader and writer versions in the table's ``_table.json`` to at least
    ``version`` (before the version that needs them commits: a crash in between leaves a
    table that older releases refuse a little early, never one they misread)."""
    meta = json.loads(s.store.get(TABLE_FILE))
    raised = raised_fields(meta, version)
    if raised is not None:
        s.store.put(TABLE_FILE, json.dumps(raised).encode())
        meta = raised
    s._meta = meta


def _own_entry(
    version: int,
    commit_time_ms: int,
    schema_id: int,
    kind: str,
    buckets: dict[int, BucketRef] | None = None,
) -> LogEntry:
    """The log entry of a version the table makes itself (no writer's batch)."""
    return LogEntry(
        version=version,
        app_id=None,
        batch_id=None,
        commit_time_ms=commit_time_ms,
        schema_id=schema_id,
        buckets=buckets or {},
        kind=kind,
    )


def collect_garbage(s: TableCore, policy: GcPolicy, *, dry_run: bool) -> GcPlan:
    """GC of the table (see :meth:`Table.gc <cdc_sink.table.Table.gc>`): plans what no
    retained version needs and, unless ``dry_run``, deletes it and releases what this
    process's tablets hold below the new horizon.

    Returns:
        The plan (:func:`cdc_sink.storage.gc.plan_gc`).
    """
    s.refresh()
    oldest = s.oldest_version()
    plan = plan_gc(
        s.store,
        s.log,
        s.history,
        latest=s.version,
        oldest=oldest,
        num_buckets=s.schema_at(s.version).num_buckets,
        policy=policy,
    )
    if dry_run:
        return plan
    execute_gc(s.log, s.history, plan, oldest=oldest)
    if plan.horizon > (s.log.last_checkpoint_version or -1):
        write_last_checkpoint(s, force=True)  # else an open lists the whole log
    s._cache.clear()
    for t in s._tablets.values():
        t.release(max(t.oldest, min(plan.horizon, t.committed)))
    return plan
