"""Peer benchmark worker: DuckDB (one database file, ``id`` a PRIMARY KEY).

Bulk load: ``INSERT INTO t SELECT * FROM`` the Arrow table. Each micro-batch is one
transaction: the updates as ``INSERT (id, c1, c2) ... ON CONFLICT (id) DO UPDATE SET`` the
two columns, the inserts as ``INSERT``, the deletes as ``DELETE ... WHERE id IN``, then
``COMMIT``. DuckDB keeps no old versions: there is no time travel (the read phase reads
the latest version).
"""

from __future__ import annotations

import os
import sys
from typing import Any

import duckdb
import pyarrow as pa

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from workload import VALUE_COLS, run_worker, split_batch

_SQL_TYPES = {
    "int64": "BIGINT",
    "double": "DOUBLE",
    "string": "VARCHAR",
    "decimal128(18, 2)": "DECIMAL(18, 2)",
    "timestamp[us, tz=UTC]": "TIMESTAMPTZ",
}


def _fetch(rel: Any) -> pa.Table:
    if hasattr(rel, "to_arrow_table"):
        return rel.to_arrow_table()
    return rel.fetch_arrow_table()


class DuckDB:
    """One DuckDB database file."""

    def __init__(self, path: str) -> None:
        os.makedirs(path, exist_ok=True)
        self.file = os.path.join(path, "bench.duckdb")
        self.con: Any = None
        self.version = 0

    def _connect(self, read_only: bool) -> Any:
        if self.con is None:
            self.con = duckdb.connect(self.file, read_only=read_only)
            self.con.execute("SET TimeZone = 'UTC'")
        return self.con

    def load(self, table: pa.Table) -> Any:
        con = self._connect(False)
        cols = ", ".join(
            f"{f.name} {_SQL_TYPES[str(f.type)]}" for f in table.schema if f.name != "id"
        )
        con.execute(f"CREATE TABLE t (id BIGINT PRIMARY KEY, {cols})")
        con.register("load_src", table)
        con.execute("INSERT INTO t SELECT * FROM load_src")
        con.unregister("load_src")
        con.execute("CHECKPOINT")
        return self.version

    def apply(self, batch: pa.Table) -> Any:
        con = self.con
        upd, ins, dele = split_batch(batch)
        c1, c2 = upd.column_names[1:]
        con.register("upd", upd)
        con.register("ins", ins)
        con.register("del", pa.table({"id": dele}))
        con.execute("BEGIN TRANSACTION")
        con.execute(
            f"INSERT INTO t (id, {c1}, {c2}) SELECT id, {c1}, {c2} FROM upd "
            f"ON CONFLICT (id) DO UPDATE SET {c1} = excluded.{c1}, {c2} = excluded.{c2}"
        )
        con.execute(f"INSERT INTO t SELECT id, {', '.join(VALUE_COLS)} FROM ins")
        con.execute('DELETE FROM t WHERE id IN (SELECT id FROM "del")')
        con.execute("COMMIT")
        for name in ("upd", "ins", "del"):
            con.unregister(name)
        self.version += 1
        return self.version

    def close(self) -> None:
        if self.con is not None:
            self.con.close()
            self.con = None

    def read(self, version: Any) -> pa.Table:
        if version is not None:
            raise ValueError("DuckDB has no time travel")
        return _fetch(self._connect(True).sql("SELECT * FROM t"))


if __name__ == "__main__":
    run_worker(DuckDB)
