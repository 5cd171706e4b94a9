"""Pre-images stored by the commit for the change feed (``TableOptions.change_images``).

A reader of the change feed that does not hold a version in memory had to open the
bucket at the version before (its key index, from the newest snapshot, plus the
segments after it) and read the pages of the changed rows; with keys spread over the
table that is every page. Delta's Change Data Feed answers the same problem by having the
writer, which holds the data, persist at commit what a cold reader cannot get cheaply
(its ``_change_data/`` files). Here the writer stores the *pre-images*; the version's own
WAL segment gives the rest.

**What is stored.** For version ``v`` of a bucket (a WAL segment whose batch has no
truncate): the state at ``v - 1`` of every key the batch's events name -- each live key's
full row (every column of the schema, as of ``v - 1``) and, with a sequence column, each
other key's tombstone (its sequence) -- as one object,
``_change_data/<bucket>/<v>-<attempt>.arrow`` (framed like a WAL segment: a JSON header,
then the rows as Arrow IPC with the table's ``wal_compression`` codec; fields named by
column id, plus ``_live``). It is written with ``put_new`` before the log entry, which
names it (:attr:`BucketRef.images <cdc_sink.storage.log_entry.BucketRef.images>`): an
attempt that never commits leaves an orphan no entry names, which no reader ever opens
and GC removes by the orphan rule.

**Why every key the events name, not only the rows the version changed.** An apply is
per key: what a batch does to a key depends only on the key's state before it (live or
not, its values, its sequence) and on the key's events -- except for a truncate, which
removes every live row (a batch with one stores nothing). So the segment's batch applied
to a tablet holding only the stored rows (:func:`replay_tablet`) does to every key of
the batch exactly what it did in the table's tablet: the same rows change, with the same
liveness on both sides and the same pre- and post-images
(:mod:`cdc_sink.changefeed.images` then reads them as from any tablet). Keys whose
events were stale or refused must be there too, or the replay would apply them; with
only the changed rows it would still need the bucket's key index to tell an insert from
a refused update, and opening that index is most of what a cold read costs.
"""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa

from cdc_sink.changefeed.images import gather_columns, live_at
from cdc_sink.changes import OP_DELETE, OP_INSERT, OP_TRUNCATE, ChangeBatch
from cdc_sink.errors import WalCorruption
from cdc_sink.schema import TableSchema
from cdc_sink.storage.change_codec import WalCompression
from cdc_sink.storage.faults import fault_point, register
from cdc_sink.storage.layout import attempt_stem, images_file
from cdc_sink.storage.objectstore import StoreLike, as_store
from cdc_sink.storage.segments import read_committed_records
from cdc_sink.storage.wal import encode_segment
from cdc_sink.tablet import MemTablet, TabletOptions
from cdc_sink.tablet.fold import SEQ_NONE

__all__ = [
    "POST",
    "PRE",
    "capture_preimages",
    "read_preimages",
    "replay_tablet",
    "write_preimages",
]

register("change_images.encoded", "change_images.written")

PRE, POST = 1, 2
"""The versions of a :func:`replay_tablet` tablet: the stored rows, then the batch."""

_LIVE = "_live"


def _field(column_id: int) -> str:
    return f"c{column_id}"


def _arrow_schema(schema: TableSchema) -> pa.Schema:
    """The stored rows' schema: every column of ``schema`` by id, then ``_live``."""
    fields = [pa.field(_field(c.id), c.type) for c in schema.columns]
    return pa.schema([*fields, pa.field(_LIVE, pa.bool_(), nullable=False)])


def capture_preimages(t: MemTablet, batch: ChangeBatch, schema: TableSchema) -> pa.Table | None:
    """The state at ``t.committed`` of every key ``batch``'s events name (see the module
    docstring), read from ``t`` before the batch is applied to it.

    Its cost is a key lookup of the batch and a gather of every column for those rows,
    which reads the pages holding them that ``t`` has not read yet.

    Args:
        t: The bucket's tablet at the version before the batch, nothing pending.
        batch: The bucket's events of the version being prepared.
        schema: The schema the version's segment is written with (its columns, by id,
            are the stored rows' columns).

    Returns:
        The rows (live keys' full rows; with a sequence column, the others' tombstones),
        or None when the batch cannot be replayed onto them: it holds a truncate, or a
        live row has no sequence.
    """
    if bool((batch.op == OP_TRUNCATE).any()):
        return None
    prev = t.committed
    rid = t.index.lookup(batch.key_hash(), list(batch.keys))
    rows = np.unique(rid[rid >= 0]).astype(np.int64)
    live = live_at(t, rows, prev)
    if schema.sequence_column is None:
        rows, live = rows[live], live[live]
    else:
        seq = t.ensure_column(schema.column(schema.sequence_column)).gather(rows, prev)
        has = np.asarray(seq.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
        if not has[live].all():
            return None
        keep = live | has
        rows, live = rows[keep], live[keep]
    arrays = gather_columns(t, rows, prev, schema.columns, schema)
    return pa.Table.from_arrays([*arrays, pa.array(live)], schema=_arrow_schema(schema))


def write_preimages(
    where: StoreLike,
    bucket: int,
    version: int,
    schema_id: int,
    rows: pa.Table,
    *,
    compression: WalCompression,
) -> str:
    """Writes the pre-images of ``bucket`` at ``version`` under a name unique to this
    attempt (one ``put_new``); returns its key.

    Args:
        where: The table's store.
        bucket: The bucket.
        version: The version being prepared.
        schema_id: The schema of ``rows`` (the one the version's segment is written with).
        rows: What :func:`capture_preimages` returned.
        compression: The IPC buffers' codec (the table's ``wal_compression``).
    """
    header = {"version": version, "bucket": bucket, "schema_id": schema_id, "rows": rows.num_rows}
    sink = pa.BufferOutputStream()
    opts = pa.ipc.IpcWriteOptions(compression=compression)
    with pa.ipc.new_stream(sink, rows.schema, options=opts) as w:
        w.write_table(rows)
    data = encode_segment([json.dumps(header).encode(), sink.getvalue().to_pybytes()])
    rel = images_file(bucket, attempt_stem(version))
    fault_point("change_images.encoded")
    as_store(where).put_new(rel, data)
    fault_point("change_images.written")
    return rel


def read_preimages(where: StoreLike, rel: str, schema: TableSchema) -> pa.Table:
    """Reads pre-images a committed log entry names (one ``get``).

    ``rel`` comes from the log, which checked it; it is checked again here
    (:func:`~cdc_sink.storage.layout.checked`).

    Args:
        where: The table's store.
        rel: The key.
        schema: The schema of the version (the images must have been written with it).

    Raises:
        WalCorruption: The object is missing (a GC that overtook the read, or damage),
            damaged, or not of ``schema``.
    """
    path, records = read_committed_records(where, "images", rel, "a committed pre-images object")
    try:
        header = json.loads(records[0])
        schema_id, nrows = int(header["schema_id"]), int(header["rows"])
        rows = pa.ipc.open_stream(pa.py_buffer(records[1])).read_all()
    except (IndexError, ValueError, TypeError, KeyError, pa.ArrowInvalid, OSError) as exc:
        # Said without the bytes: an error message never shows file content.
        raise WalCorruption(
            f"pre-images are unreadable ({type(exc).__name__})", path=path, offset=0
        ) from None
    if (
        schema_id != schema.schema_id
        or rows.num_rows != nrows
        or not rows.schema.equals(_arrow_schema(schema))
    ):
        raise WalCorruption(
            f"pre-images are not the {nrows} rows of schema {schema.schema_id} they claim",
            path=path,
            offset=0,
        )
    return rows


def _as_events(schema: TableSchema, rows: pa.Table) -> ChangeBatch:
    """The stored rows as events recreating them in an empty tablet: an insert of every
    column per live row, a delete with its sequence per tombstone."""
    live = np.asarray(rows.column(_LIVE).to_numpy(zero_copy_only=False), dtype=bool)
    seq_name = schema.sequence_column
    values: dict[int, pa.Array] = {}
    present: dict[int, np.ndarray] = {}
    for c in schema.value_columns:
        if c.name != seq_name:  # the apply writes the sequence column from ``seq``
            values[c.id] = rows.column(_field(c.id)).combine_chunks()
            present[c.id] = live
    seq = None
    if seq_name is not None:
        s = rows.column(_field(schema.column(seq_name).id)).cast(pa.int64())
        seq = np.asarray(s.fill_null(SEQ_NONE).to_numpy(), dtype=np.int64)
    return ChangeBatch(
        schema=schema,
        op=np.where(live, OP_INSERT, OP_DELETE).astype(np.int8),
        keys=tuple(rows.column(_field(c.id)).combine_chunks() for c in schema.key_columns),
        values=values,
        present=present,
        seq=seq,
    )


def replay_tablet(
    schema: TableSchema, rows: pa.Table, batch: ChangeBatch, *, bucket: int
) -> MemTablet:
    """A tablet holding only the stored ``rows`` at :data:`PRE` and ``batch`` applied to
    them at :data:`POST`: for every key of ``batch``, what the version did to it.

    Args:
        schema: The version's schema (the one ``rows`` and ``batch`` are of).
        rows: What :func:`read_preimages` returned.
        batch: The version's batch of the bucket (its WAL segment).
        bucket: The bucket (informational).
    """
    opts = TabletOptions(initial_capacity=rows.num_rows + len(batch) + 1)
    t = MemTablet(schema, bucket=bucket, options=opts, version=0)
    t.apply(_as_events(schema, rows), PRE)
    t.commit(PRE)
    t.apply(batch, POST)
    t.commit(POST)
    return t
