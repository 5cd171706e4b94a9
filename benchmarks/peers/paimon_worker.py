"""Peer benchmark worker: Apache Paimon through pypaimon, a primary-key table on local disk.

The table has primary key ``id``, one bucket, the default ``deduplicate`` merge engine, and
``rowkind.field`` naming a string column ``rk`` (``+I``/``+U``/``-D``) so that one commit
can carry inserts, updates and deletes. pypaimon's reader does not implement deletes for
the ``partial-update`` merge engine (it refuses ``partial-update.remove-record-on-delete``
and ``ignore-delete``), so an update must write the whole row: each micro-batch reads the
current rows of its updated keys (a scan filtered with ``id IN (...)``), replaces the two
updated columns, and writes them with the inserts and the deletes in one commit (one
snapshot). Time travel: ``scan.snapshot-id``.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import numpy as np
import pyarrow as pa
from pypaimon import CatalogFactory, Schema

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from workload import VALUE_COLS, run_worker, split_batch, table_schema

NAME = "bench.t"


class Paimon:
    """One Paimon primary-key table in a filesystem catalog."""

    def __init__(self, path: str) -> None:
        self.catalog = CatalogFactory.create({"warehouse": path})
        self.table: Any = None

    def _write(self, data: pa.Table) -> Any:
        wb = self.table.new_batch_write_builder()
        w = wb.new_write()
        c = wb.new_commit()
        try:
            w.write_arrow(data)
            c.commit(w.prepare_commit())
        finally:
            w.close()
            c.close()
        return self.table.snapshot_manager().get_latest_snapshot().id

    def load(self, table: pa.Table) -> Any:
        self.catalog.create_database("bench", True)
        schema = table_schema().append(pa.field("rk", pa.string()))
        self.catalog.create_table(
            NAME,
            Schema.from_pyarrow_schema(
                schema,
                primary_keys=["id"],
                options={"bucket": "1", "rowkind.field": "rk", "file.format": "parquet"},
            ),
            False,
        )
        self.table = self.catalog.get_table(NAME)
        return self._write(table.append_column("rk", pa.array(np.full(table.num_rows, "+I"))))

    def apply(self, batch: pa.Table) -> Any:
        upd, ins, dele = split_batch(batch)
        rb = self.table.new_read_builder()
        rb = rb.with_filter(rb.new_predicate_builder().is_in("id", upd.column("id").to_pylist()))
        current = rb.new_read().to_arrow(rb.new_scan().plan().splits())
        current = current.select(["id", *VALUE_COLS]).drop_columns(upd.column_names[1:])
        full = current.join(upd, "id").select(["id", *VALUE_COLS])
        if full.num_rows != upd.num_rows:
            raise RuntimeError(f"{upd.num_rows - full.num_rows} updated keys not found")
        deleted = pa.Table.from_arrays(
            [dele, *[pa.nulls(len(dele), f.type) for f in table_schema()][1:]],
            schema=table_schema(),
        )
        parts = [
            full.cast(table_schema()).append_column("rk", pa.array(np.full(full.num_rows, "+U"))),
            ins.select(["id", *VALUE_COLS])
            .cast(table_schema())
            .append_column("rk", pa.array(np.full(ins.num_rows, "+I"))),
            deleted.append_column("rk", pa.array(np.full(len(dele), "-D"))),
        ]
        return self._write(pa.concat_tables(parts))

    def close(self) -> None:
        self.table = None

    def read(self, version: Any) -> pa.Table:
        table = self.catalog.get_table(NAME)
        if version is not None:
            table = table.copy({"scan.snapshot-id": str(version)})
        rb = table.new_read_builder()
        return rb.new_read().to_arrow(rb.new_scan().plan().splits())


if __name__ == "__main__":
    run_worker(Paimon)
