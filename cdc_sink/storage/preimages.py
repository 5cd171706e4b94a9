"""The pre-images objects of the change feed (``TableOptions.change_images``): what a
commit captures of a bucket before its version, and how it is stored and read back
(what a reader rebuilds from them is :mod:`cdc_sink.changefeed.stored`'s).

**What is stored.** For version ``v`` of a bucket (a WAL segment whose batch has no
truncate): the state at ``v - 1`` of every key the batch's events name -- each live key's
full row (every column of the schema, as of ``v - 1``) and, with a sequence column, each
other key's tombstone (its sequence) -- as one object (why every key the events name:
:mod:`cdc_sink.changefeed.stored`).

On disk, under the table root::

    _change_data/<bucket>/<version:020d>-<attempt>.arrow     framed like a WAL segment (wal.py)
        record 0: JSON header {"version", "bucket", "schema_id", "rows", "bytes"}
        record 1: the rows, an Arrow IPC stream (buffers compressed with the table's
                  wal_compression): a field per column of the schema, named
                  c<column id>, then _live (bool, not null)
        "bytes": what record 1 holds once decompressed (bounded_ipc.py; objects
                 written before it have none, and are held to its expansion limit)

An object is written with one ``put_new`` of a name unique to its attempt, before the log
entry that names it (:attr:`BucketRef.images <cdc_sink.storage.log_entry.BucketRef.images>`),
and read with one ``get``. A reader refuses, as :class:`~cdc_sink.errors.WalCorruption`
naming the object and the offset: a header that is not what a writer writes (every field
an int in range), a header whose bucket or version is not the ones of the log entry that
named the object, a body that would decompress to more than the header declares (found
before anything is decompressed), and rows that are not of the version's schema or not as
many as the header says.
"""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa

from cdc_sink.batch import OP_TRUNCATE, ChangeBatch
from cdc_sink.errors import WalCorruption
from cdc_sink.schema import TableSchema
from cdc_sink.storage.bounded_ipc import check_expansion, decompressed_size
from cdc_sink.storage.change_codec import WalCompression
from cdc_sink.storage.faults import fault_point, register
from cdc_sink.storage.framing import RECORD_HEADER_SIZE, read_json_header
from cdc_sink.storage.layout import attempt_stem, images_file
from cdc_sink.storage.objectstore import StoreLike, as_store
from cdc_sink.storage.segments import body_limit, read_committed_records
from cdc_sink.storage.wal import WAL_MAGIC, encode_segment
from cdc_sink.tablet import MemTablet
from cdc_sink.tablet.reads import gather_columns, live_at

__all__ = [
    "LIVE",
    "capture_preimages",
    "preimage_field",
    "preimages_schema",
    "read_preimages",
    "write_preimages",
]

register("change_images.encoded", "change_images.written")

LIVE = "_live"
"""The field telling a live key's row (true) from a tombstone (false)."""

_HEADER_FIELDS = {"version": True, "bucket": True, "schema_id": True, "rows": True, "bytes": False}
_HEADER_AT = len(WAL_MAGIC)  # where the header record starts (a WalCorruption's offset)


def preimage_field(column_id: int) -> str:
    """The name of the field holding the column of id ``column_id``."""
    return f"c{column_id}"


def preimages_schema(schema: TableSchema) -> pa.Schema:
    """The stored rows' schema: every column of ``schema`` by id, then ``_live``."""
    fields = [pa.field(preimage_field(c.id), c.type) for c in schema.columns]
    return pa.schema([*fields, pa.field(LIVE, pa.bool_(), nullable=False)])


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
    return pa.Table.from_arrays([*arrays, pa.array(live)], schema=preimages_schema(schema))


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
    sink = pa.BufferOutputStream()
    opts = pa.ipc.IpcWriteOptions(compression=compression)
    with pa.ipc.new_stream(sink, rows.schema, options=opts) as w:
        w.write_table(rows)
    body = sink.getvalue()
    header = {
        "version": version,
        "bucket": bucket,
        "schema_id": schema_id,
        "rows": rows.num_rows,
        "bytes": decompressed_size(body),
    }
    data = encode_segment([json.dumps(header).encode(), body.to_pybytes()])
    rel = images_file(bucket, attempt_stem(version))
    fault_point("change_images.encoded")
    as_store(where).put_new(rel, data)
    fault_point("change_images.written")
    return rel


def read_preimages(
    where: StoreLike, rel: str, schema: TableSchema, *, bucket: int, version: int
) -> pa.Table:
    """Reads pre-images a committed log entry names (one ``get``).

    ``rel`` comes from the log, which checked it; it is checked again here
    (:func:`~cdc_sink.storage.layout.checked`).

    Args:
        where: The table's store.
        rel: The key.
        schema: The schema of the version (the images must have been written with it).
        bucket: The bucket the log entry names them for.
        version: The version of that entry.

    Raises:
        WalCorruption: The object is missing (a GC that overtook the read, or damage),
            damaged, of another bucket or version, or not of ``schema``.
    """
    path, records = read_committed_records(where, "images", rel, "a committed pre-images object")
    if len(records) != 2:
        raise WalCorruption(
            f"pre-images object has {len(records)} records, expected 2", path=path, offset=0
        )
    h = read_json_header(
        records[0], _HEADER_FIELDS, what="pre-images", path=path, offset=_HEADER_AT
    )
    if (h["bucket"], h["version"]) != (bucket, version):
        raise WalCorruption(
            f"pre-images of bucket {h['bucket']} at version {h['version']} are named by the "
            f"log entry of bucket {bucket} at version {version}",
            path=path,
            offset=_HEADER_AT,
        )
    body_at = _HEADER_AT + RECORD_HEADER_SIZE + len(records[0])  # record 1's start
    limit = body_limit(h.get("bytes"), len(records[1]), what="pre-images", path=path)
    check_expansion(records[1], limit=limit, what="pre-images body", path=path, offset=body_at)
    try:
        rows = pa.ipc.open_stream(pa.py_buffer(records[1])).read_all()
    except (pa.ArrowException, OSError) as exc:
        # Said without the bytes: an error message never shows file content.
        raise WalCorruption(
            f"pre-images are unreadable ({type(exc).__name__})", path=path, offset=body_at
        ) from None
    if (
        h["schema_id"] != schema.schema_id
        or rows.num_rows != h["rows"]
        or not rows.schema.equals(preimages_schema(schema))
    ):
        raise WalCorruption(
            f"pre-images are not the {h['rows']} rows of schema {schema.schema_id} they claim",
            path=path,
            offset=body_at,
        )
    return rows
