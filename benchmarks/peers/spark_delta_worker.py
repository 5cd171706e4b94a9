"""Peer benchmark worker: Delta Lake MERGE in Spark (delta-spark on pyspark, local[2]).

What a Structured Streaming ``foreachBatch`` into Delta runs per micro-batch: one ``MERGE``
on ``id`` (matched update of the two updated columns, matched delete, unmatched insert,
chosen by the event's op) of the batch, here created from the Arrow batch with
``spark.createDataFrame``. The Spark session (JVM start, Delta's jars from Maven Central
through ``spark.jars.packages``) is started before anything is timed; the cold read is the
first query of that fresh session: ``versionAsOf`` read of the whole table to Arrow.
``spark.sql.shuffle.partitions`` is 4 and ``spark.databricks.delta.snapshotPartitions`` 2
(the defaults, 200 and 50, only add task overhead on 2 cores). CPU seconds are the Python
driver's only (the work is in the JVM).
"""

from __future__ import annotations

import os
import sys
from typing import Any

import pyarrow as pa
from delta import configure_spark_with_delta_pip
from delta.tables import DeltaTable
from pyspark.sql import SparkSession

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from workload import OP_DELETE, OP_INSERT, OP_UPDATE, VALUE_COLS, run_worker, updated_columns

_SPARK: Any = None


def delta_builder(app: str, driver_memory: str = "4g") -> Any:
    """A local[2] session builder with Delta's extension and catalog and the settings of
    the module docstring (also used by ``delta_stream_worker.py``)."""
    return (
        SparkSession.builder.master("local[2]")
        .appName(app)
        .config("spark.sql.extensions", "io.delta.sql.DeltaSparkSessionExtension")
        .config(
            "spark.sql.catalog.spark_catalog", "org.apache.spark.sql.delta.catalog.DeltaCatalog"
        )
        .config("spark.driver.memory", driver_memory)
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.databricks.delta.snapshotPartitions", "2")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
    )


def _session() -> Any:
    builder = delta_builder("peers-delta")
    spark = configure_spark_with_delta_pip(builder).getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


class SparkDelta:
    """One Delta table written and read through Spark."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.spark = _SPARK
        self.dt: Any = None
        self.version = 0

    def _history_version(self) -> int:
        return int(self.dt.history(1).select("version").first()[0])

    def load(self, table: pa.Table) -> Any:
        self.spark.createDataFrame(table).write.format("delta").save(self.path)
        self.dt = DeltaTable.forPath(self.spark, self.path)
        self.version = self._history_version()
        return self.version

    def apply(self, batch: pa.Table) -> Any:
        src = self.spark.createDataFrame(batch.rename_columns(["op_", *batch.column_names[1:]]))
        (
            self.dt.alias("t")
            .merge(src.alias("s"), "t.id = s.id")
            .whenMatchedUpdate(
                condition=f"s.op_ = {OP_UPDATE}", set={c: f"s.{c}" for c in updated_columns(batch)}
            )
            .whenMatchedDelete(condition=f"s.op_ = {OP_DELETE}")
            .whenNotMatchedInsert(
                condition=f"s.op_ = {OP_INSERT}", values={c: f"s.{c}" for c in ["id", *VALUE_COLS]}
            )
            .execute()
        )
        self.version += 1  # one MERGE, one commit (checked in close())
        return self.version

    def close(self) -> None:
        if self.dt is not None and self._history_version() != self.version:
            raise RuntimeError("a MERGE did not make exactly one Delta commit")
        self.dt = None

    def read(self, version: Any) -> pa.Table:
        reader = self.spark.read.format("delta")
        if version is not None:
            reader = reader.option("versionAsOf", int(version))
        return reader.load(self.path).toArrow()


if __name__ == "__main__":
    _SPARK = _session()
    run_worker(SparkDelta)
    _SPARK.stop()
