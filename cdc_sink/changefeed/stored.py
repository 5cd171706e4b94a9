"""The read side of the pre-images a commit stores (``TableOptions.change_images``;
:mod:`cdc_sink.storage.preimages` captures, writes and reads them): the tablet a reader
of the change feed rebuilds from them and the version's own WAL segment.

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

import numpy as np
import pyarrow as pa

from cdc_sink.batch import OP_DELETE, OP_INSERT, ChangeBatch
from cdc_sink.schema import TableSchema
from cdc_sink.storage.preimages import LIVE, preimage_field, read_preimages
from cdc_sink.tablet import MemTablet, TabletOptions
from cdc_sink.tablet.fold import SEQ_NONE

__all__ = ["POST", "PRE", "read_preimages", "replay_tablet"]

PRE, POST = 1, 2
"""The versions of a :func:`replay_tablet` tablet: the stored rows, then the batch."""


def _as_events(schema: TableSchema, rows: pa.Table) -> ChangeBatch:
    """The stored rows as events recreating them in an empty tablet: an insert of every
    column per live row, a delete with its sequence per tombstone."""
    live = np.asarray(rows.column(LIVE).to_numpy(zero_copy_only=False), dtype=bool)
    seq_name = schema.sequence_column
    values: dict[int, pa.Array] = {}
    present: dict[int, np.ndarray] = {}
    for c in schema.value_columns:
        if c.name != seq_name:  # the apply writes the sequence column from ``seq``
            values[c.id] = rows.column(preimage_field(c.id)).combine_chunks()
            present[c.id] = live
    seq = None
    if seq_name is not None:
        s = rows.column(preimage_field(schema.column(seq_name).id)).cast(pa.int64())
        seq = np.asarray(s.fill_null(SEQ_NONE).to_numpy(), dtype=np.int64)
    return ChangeBatch(
        schema=schema,
        op=np.where(live, OP_INSERT, OP_DELETE).astype(np.int8),
        keys=tuple(rows.column(preimage_field(c.id)).combine_chunks() for c in schema.key_columns),
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
