"""A whole-database sink in executors mode: records routed in Spark tasks (internal).

With ``apply_mode="executors"`` the router (:mod:`cdc_sink.spark.database`) does not
bring the micro-batch to the driver. A ``mapInArrow`` task, :class:`TagTask`, gives
each Kafka record the table it goes to (``__table``: a table name, :data:`UNROUTED`, or
:data:`IGNORED` and the kind of a record left out), a flag on the first record of each
distinct schema in each Kafka partition of its Arrow batch (``__rep``: what the driver
reads to create and evolve the table) and the reason of a record that names no table
(``__reason``). The tagged batch is cached; the driver collects only the counts per
table, the representatives and the unrouted records, and each table's writer prepares
its own records (``where __table = name``) in tasks, as a one-table sink in executors
mode does (:mod:`cdc_sink.spark._executors`).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
import pyarrow as pa

from cdc_sink.formats import source_tables
from cdc_sink.formats.source_tables import route

__all__ = ["IGNORED", "KAFKA_COLUMNS", "TAGGED_DDL", "TAG_COLUMNS", "TagTask"]

KAFKA_COLUMNS = ("key", "value", "topic", "partition", "offset", "timestamp")
"""The Kafka source's columns a tagged record keeps (what a decode task reads)."""
TAG_COLUMNS = ("__table", "__rep", "__reason")
TAGGED_DDL = (
    "key binary, value binary, topic string, partition int, offset bigint, "
    "timestamp timestamp, __table string, __rep boolean, __reason string"
)
IGNORED = "\x00"
"""``__table`` of a record left out starts with this (no table name does), followed by
its label (``heartbeat``, ``excluded``...)."""


class TagTask:
    """The ``mapInArrow`` task that tags each record with its table (module docstring).

    Args:
        format: The sink's format (``debezium`` or ``debezium-avro``).
        decoder_options: The decoder's options (the registry's, for Avro).
        name_of: The table name of a source table (``DatabaseOptions.name_of``).
        selects: Whether a table name is written (``DatabaseOptions.selects``).
        valid: Whether a table name can be a table's.
        ignored: Labels of the record kinds left out.
        unrouted: The table of records that name no table.
    """

    def __init__(
        self,
        format: str,
        decoder_options: Mapping[str, Any],
        *,
        name_of: Any,
        selects: Any,
        valid: Any,
        ignored: Mapping[int, str],
        unrouted: str,
    ) -> None:
        self.format = format
        self.decoder_options = dict(decoder_options)
        self.name_of, self.selects, self.valid = name_of, selects, valid
        self.ignored = dict(ignored)
        self.unrouted = unrouted

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """Each input batch with its tag columns."""
        for rb in batches:
            yield self.tag(rb)

    def tag(self, rb: pa.RecordBatch) -> pa.RecordBatch:
        """``rb`` (the Kafka columns) with ``__table``, ``__rep`` and ``__reason``."""
        routed = route(
            self.format, rb.column("value"), rb.column("key"), decoder_options=self.decoder_options
        )
        labels, why = self._labels(routed, rb.column("topic"))
        kind_label = np.array(
            [IGNORED + self.ignored[k] if k in self.ignored else self.unrouted for k in range(7)],
            dtype=object,
        )
        codes = routed.codes.astype(np.int64)
        named = codes >= 0
        at = np.where(named, codes, len(labels))  # one past the tables: a record of none
        none = np.array([None], dtype=object)
        labels, why = np.concatenate([labels, none]), np.concatenate([why, none])
        table = np.where(named, labels[at], kind_label[routed.kinds])
        reason = np.where(named, why[at], routed.reasons)
        partition = np.asarray(rb.column("partition").to_numpy(zero_copy_only=False), np.int64)
        rep = np.zeros(len(codes), dtype=bool)
        if named.any():
            at = np.flatnonzero(named)
            key = np.stack([codes[at], routed.schema_keys[at], partition[at]])
            _, first = np.unique(key, axis=1, return_index=True)
            rep[at[first]] = True
        cols = [rb.column(c) for c in KAFKA_COLUMNS]
        return pa.RecordBatch.from_arrays(
            [
                *cols,
                pa.array(table, pa.string()),
                pa.array(rep, pa.bool_()),
                pa.array(reason, pa.string()),
            ],
            names=[*KAFKA_COLUMNS, *TAG_COLUMNS],
        )

    def _labels(
        self, routed: source_tables.Routed, topics: pa.Array
    ) -> tuple[np.ndarray, np.ndarray]:
        """Per table code: its ``__table`` label and the reason of its records (None:
        they go to their table)."""
        values, first = np.unique(routed.codes, return_index=True)
        first_of = dict(zip(values.tolist(), first.tolist(), strict=True))
        labels = np.empty(len(routed.tables), dtype=object)
        why = np.full(len(routed.tables), None, dtype=object)
        for code, source in enumerate(routed.tables):
            name = self.name_of(source, str(topics[first_of[code]]))
            if not self.valid(name):
                labels[code] = self.unrouted
                why[code] = (
                    f"table name {name!r} (of source table {source.qualified()}) is not valid"
                )
            elif not self.selects(name):
                labels[code] = IGNORED + "excluded"
            else:
                labels[code] = name
        return labels, why
