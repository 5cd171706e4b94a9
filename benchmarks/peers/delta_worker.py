"""Peer benchmark worker: delta-rs (the ``deltalake`` package), a Delta table on local disk.

Bulk load: ``write_deltalake``. Each micro-batch is one ``MERGE`` on ``id``: matched
updates set the two updated columns, matched deletes delete, unmatched inserts insert
every column (the batch's ``op`` column selects the clause). Time travel:
``DeltaTable(path, version=v)``. No vacuum or optimize during the run.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from workload import OP_DELETE, OP_INSERT, OP_UPDATE, VALUE_COLS, run_worker, updated_columns


class Delta:
    """One Delta table."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.dt: Any = None

    def load(self, table: pa.Table) -> Any:
        write_deltalake(self.path, table, mode="error")
        self.dt = DeltaTable(self.path)
        return self.dt.version()

    def apply(self, batch: pa.Table) -> Any:
        src = batch.rename_columns(["op_", *batch.column_names[1:]])
        updates = {c: f"s.{c}" for c in updated_columns(batch)}
        inserts = {c: f"s.{c}" for c in ["id", *VALUE_COLS]}
        (
            self.dt.merge(source=src, predicate="t.id = s.id", source_alias="s", target_alias="t")
            .when_matched_update(updates=updates, predicate=f"s.op_ = {OP_UPDATE}")
            .when_matched_delete(predicate=f"s.op_ = {OP_DELETE}")
            .when_not_matched_insert(updates=inserts, predicate=f"s.op_ = {OP_INSERT}")
            .execute()
        )
        return self.dt.version()

    def close(self) -> None:
        self.dt = None

    def read(self, version: Any) -> pa.Table:
        dt = DeltaTable(self.path, version=version)
        return dt.to_pyarrow_table()


if __name__ == "__main__":
    run_worker(Delta)
