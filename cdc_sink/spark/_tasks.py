"""The decode that runs in Spark tasks, shared by the apply modes that use it (internal).

Executors mode and driver mode with ``decode_in="executors"`` both decode the Kafka values
in ``mapInArrow`` tasks: each task decodes its records with the format's Python decoder
(or takes the wire rows Spark's ``from_json`` produced), gives each event its bucket,
``pmod(xxhash64(key), N)``, and sends each decoded batch on as one Arrow IPC piece per
bucket (:mod:`cdc_sink.spark._pieces`). What the modes do with the pieces differs
(shuffle and prepare in tasks, or unpack and prepare in the driver); that is in their own
modules, which do not import each other.

The task bodies here are module-level functions: Spark pickles them by reference, so this
module must import cleanly in a Python worker and do nothing on import.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from cdc_sink.batch import ChangeBatch, Rejects
from cdc_sink.formats import FormatName
from cdc_sink.schema import TableSchema
from cdc_sink.spark._batch import with_raw_bytes
from cdc_sink.spark._pieces import PIECES_DDL, pack_batches, pack_decoded
from cdc_sink.spark.decode import decode_native_json
from cdc_sink.spark.options import SinkOptions

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = ["decoded_batches", "packed_in_spark", "rejected_records", "task_input"]


# ---------------------------------------------------------------------- driver side
def packed_in_spark(options: SinkOptions, df: DataFrame, schema: TableSchema) -> DataFrame:
    """The batch decoded in Spark tasks (or by ``from_json``), packed per bucket."""
    if options.jvm_json:
        wire = decode_native_json(df, schema, allow_truncate=options.allow_truncate)
        return wire.mapInArrow(partial(_pack_partition, schema_dict=schema.to_dict()), PIECES_DDL)
    task = partial(
        _decode_partition,
        fmt=options.format,
        schema_dict=schema.to_dict(),
        options=dict(options.decode.options),
    )
    return task_input(options.format, df).mapInArrow(task, PIECES_DDL)


def task_input(fmt: FormatName, df: DataFrame) -> DataFrame:
    """The Kafka columns a decode task reads (the key only when the decoder reads it)."""
    from pyspark.sql import functions as F

    from cdc_sink.formats import get_format

    keys = ["key"] if get_format(fmt).decoder.reads_keys else []  # else not moved
    return df.select(
        *keys, "value", "topic", "partition", "offset", F.unix_millis("timestamp").alias("ts_ms")
    )


def rejected_records(rejected: list[dict[str, Any]], df: DataFrame) -> pa.Table:
    """The tasks' rejects (Kafka coordinates and reason) as reject records in Kafka
    order, with their raw key and value bytes."""
    coords = pa.Table.from_pylist(
        rejected,
        schema=pa.schema(
            [
                ("topic", pa.string()),
                ("partition", pa.int32()),
                ("offset", pa.int64()),
                ("reason", pa.string()),
            ]
        ),
    )
    coords = coords.sort_by(
        [("topic", "ascending"), ("partition", "ascending"), ("offset", "ascending")]
    )
    return with_raw_bytes(
        pa.table(
            {
                "position": pa.nulls(coords.num_rows, pa.int64()),
                **{c: coords.column(c) for c in coords.column_names},
            }
        ),
        df,
    )


# ---------------------------------------------------------------------- task side
def _pack_partition(
    batches: Iterator[pa.RecordBatch], *, schema_dict: dict[str, Any]
) -> Iterator[pa.RecordBatch]:
    """mapInArrow body: wire rows decoded in the JVM, packed per bucket."""
    return pack_batches(batches, TableSchema.from_dict(schema_dict))


def _decode_partition(
    batches: Iterator[pa.RecordBatch],
    *,
    fmt: FormatName,
    schema_dict: dict[str, Any],
    options: dict[str, Any] | None = None,
) -> Iterator[pa.RecordBatch]:
    """mapInArrow body: Python decoding, each batch's events packed per bucket in their
    wire form (:func:`~cdc_sink.spark._pieces.pack_decoded`)."""
    for decoded in decoded_batches(batches, fmt, TableSchema.from_dict(schema_dict), options):
        yield from pack_decoded(*decoded)


def decoded_batches(
    batches: Iterator[pa.RecordBatch],
    fmt: FormatName,
    schema: TableSchema,
    options: dict[str, Any] | None,
) -> Iterator[tuple[ChangeBatch, Rejects, pa.Table]]:
    """Each Kafka batch decoded: its accepted events, its rejects and the Kafka meta rows
    (``__topic``, ``__partition``, ``__offset``, ``__ts_ms``) the positions index. Rows a
    decoder skipped on purpose (tombstones) get neither an op nor a reason."""
    from cdc_sink.formats import TS_MISSING, get_decoder

    decoder = get_decoder(fmt, **(options or {}))
    for rb in batches:
        n = rb.num_rows
        keys = rb.column("key") if "key" in rb.schema.names else None
        dec = decoder.decode_with_meta(
            rb.column("value"), schema, position=np.arange(n, dtype=np.int64), keys=keys
        )
        ts = np.full(n, TS_MISSING, dtype=np.int64)  # the Kafka record's, or the event's own
        if "ts_ms" in rb.schema.names:
            kafka_ms = rb.column("ts_ms").cast(pa.int64())
            ts = np.array(kafka_ms.fill_null(TS_MISSING).to_numpy(), dtype=np.int64)
        if dec.ts_ms is not None:
            own = dec.ts_ms != TS_MISSING
            ts[dec.batch.positions[own]] = dec.ts_ms[own]
        meta = pa.table(
            {
                "__topic": rb.column("topic"),
                "__partition": rb.column("partition"),
                "__offset": rb.column("offset"),
                "__ts_ms": pa.array(ts, pa.int64(), mask=ts == TS_MISSING),
            }
        )
        yield dec.batch, dec.rejects, meta
