"""Peer benchmark worker: cdc_sink (this project), run in the project's own ``.venv``.

The bulk load is one ``Table.apply`` of inserts; each micro-batch is one ``Table.apply``
of the batch in cdc_sink's wire form (``__op``, key, values, ``__set__<col>`` masks:
updates set only their two columns). Default ``TableOptions``, one bucket.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import numpy as np
import pyarrow as pa

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from workload import OP_INSERT, OP_UPDATE, VALUE_COLS, arrow_type, run_worker, updated_columns

from cdc_sink import create_table, open_table
from cdc_sink.batch import SET_PREFIX
from cdc_sink.table import TableOptions


def _schema() -> dict[str, Any]:
    from cdc_sink.schema import type_to_str

    cols = [{"name": "id", "type": "int64", "nullable": False}]
    cols += [{"name": c, "type": type_to_str(arrow_type(c))} for c in VALUE_COLS]
    return {"columns": cols, "primary_key": ["id"], "num_buckets": 1}


def _codecs() -> dict[str, Any]:
    """The page and WAL codecs of ``$CDC_SINK_BENCH_PAGE_COMPRESSION`` and
    ``$CDC_SINK_BENCH_WAL_COMPRESSION`` (``none``, ``lz4``, ``zstd``), where set."""
    out: dict[str, Any] = {}
    for option, var in (
        ("page_compression", "CDC_SINK_BENCH_PAGE_COMPRESSION"),
        ("wal_compression", "CDC_SINK_BENCH_WAL_COMPRESSION"),
    ):
        codec = os.environ.get(var)
        if codec:
            out[option] = None if codec == "none" else codec
    return out


class CdcSink:
    """One cdc_sink table: default options but one bucket, and the codecs of
    :func:`_codecs`."""

    options: TableOptions | None = TableOptions(**_codecs()) if _codecs() else None

    def __init__(self, path: str) -> None:
        self.path = path
        self.table: Any = None

    def load(self, table: pa.Table) -> Any:
        self.table = create_table(self.path, _schema(), options=self.options)
        n = table.num_rows
        wire = table.add_column(0, "__op", pa.array(np.full(n, OP_INSERT, np.int8)))
        return self.table.apply(wire).version

    def apply(self, batch: pa.Table) -> Any:
        op = batch.column("op").to_numpy()
        ins = op == OP_INSERT
        upd = ins | (op == OP_UPDATE)
        updated = set(updated_columns(batch))
        wire = batch.rename_columns(["__op", *batch.column_names[1:]])
        for c in VALUE_COLS:
            wire = wire.append_column(SET_PREFIX + c, pa.array(upd if c in updated else ins))
        return self.table.apply(wire).version

    def close(self) -> None:
        self.table = None

    def read(self, version: Any) -> pa.Table:
        if self.table is None:
            self.table = open_table(self.path, options=self.options)
        return self.table.read(version=version)


if __name__ == "__main__":
    run_worker(CdcSink)
