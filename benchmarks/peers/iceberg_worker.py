"""Peer benchmark worker: Apache Iceberg through pyiceberg, with a SQLite catalog.

Bulk load: ``append``. Each micro-batch is one transaction: ``upsert`` on ``id`` of the
updated rows and the inserted rows, and ``delete`` of the deleted keys. pyiceberg's upsert
takes whole rows (a missing column would be written as null), so the updated rows are
first read from the table (a scan filtered with ``id IN (...)``) and their two updated
columns replaced. Time travel: ``scan(snapshot_id=...)``.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import pyarrow as pa
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.expressions import In

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from workload import VALUE_COLS, run_worker, split_batch, table_schema

NAME = "bench.t"


class Iceberg:
    """One Iceberg table in a SQLite catalog."""

    def __init__(self, path: str) -> None:
        os.makedirs(os.path.join(path, "warehouse"), exist_ok=True)
        self.catalog = SqlCatalog(
            "bench", uri=f"sqlite:///{path}/catalog.db", warehouse=f"file://{path}/warehouse"
        )
        self.table: Any = None

    def load(self, table: pa.Table) -> Any:
        self.catalog.create_namespace_if_not_exists("bench")
        self.table = self.catalog.create_table(NAME, schema=table_schema())
        self.table.append(table.cast(table_schema()))
        return self.table.current_snapshot().snapshot_id

    def apply(self, batch: pa.Table) -> Any:
        upd, ins, dele = split_batch(batch)
        keys = upd.column("id").to_pylist()
        current = self.table.scan(row_filter=In("id", keys)).to_arrow()
        current = current.select(["id", *VALUE_COLS]).drop_columns(upd.column_names[1:])
        full = current.join(upd, "id").select(["id", *VALUE_COLS])
        if full.num_rows != upd.num_rows:
            raise RuntimeError(f"{upd.num_rows - full.num_rows} updated keys not found")
        rows = pa.concat_tables(
            [full.cast(table_schema()), ins.select(["id", *VALUE_COLS]).cast(table_schema())]
        )
        with self.table.transaction() as tx:
            tx.upsert(rows, join_cols=["id"])
            tx.delete(In("id", dele.to_pylist()))
        return self.table.current_snapshot().snapshot_id

    def close(self) -> None:
        self.table = None

    def read(self, version: Any) -> pa.Table:
        table = self.catalog.load_table(NAME)
        return table.scan(snapshot_id=version).to_arrow()


if __name__ == "__main__":
    run_worker(Iceberg)
