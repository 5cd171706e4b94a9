"""A Python data source that only hands Spark Arrow batches: the floor of any Python
data source's read throughput (used by ``bench_spark_read``).

``spark.read.format("arrow_floor").load(dir)`` reads every ``*.arrow`` file (Arrow IPC)
of ``dir``, one file per partition, memory-mapped, yielding its record batches as they
are: no table logic at all. What ``format("cdc_sink")`` costs beyond this is cdc_sink's;
what this costs beyond Parquet is Spark's transport of Python batches into the JVM.

Imported by Spark's Python workers by reference: it does nothing on import.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.pandas.types import from_arrow_schema
from pyspark.sql.types import StructType


def _files(path: str) -> list[str]:
    return sorted(glob.glob(os.path.join(path, "*.arrow")))


class ArrowFloorSource(DataSource):
    """``format("arrow_floor")``: the Arrow IPC files of a directory, as they are."""

    @classmethod
    def name(cls) -> str:
        return "arrow_floor"

    def schema(self) -> StructType:
        with pa.memory_map(_files(self.options["path"])[0]) as f:
            return from_arrow_schema(pa.ipc.open_file(f).schema)

    def reader(self, schema: StructType) -> ArrowFloorReader:
        return ArrowFloorReader(self.options["path"])


@dataclass(frozen=True)
class FilePartition(InputPartition):  # type: ignore[misc]
    """One file."""

    file: str


class ArrowFloorReader(DataSourceReader):
    """One partition per file; yields the file's batches (zero-copy)."""

    def __init__(self, path: str) -> None:
        self.path = path

    def partitions(self) -> list[InputPartition]:
        return [FilePartition(f) for f in _files(self.path)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, FilePartition)
        reader = pa.ipc.open_file(pa.memory_map(partition.file))
        for i in range(reader.num_record_batches):
            yield reader.get_batch(i)
