"""Spark: the streaming sink, the ``cdc_sink`` snapshot-read data source, sessions.

    fn = cdc_sink.spark.sink(path, schema=schema)        # foreachBatch function
    fn = cdc_sink.spark.sink(path, options=SinkOptions(apply_mode="executors"))
    fn = cdc_sink.spark.database_sink("s3://lake/inventory",  # a whole database
                                      options=SinkOptions(format="debezium"))
    cdc_sink.spark.register(spark)                       # format("cdc_sink") reads

Names are imported on first use, so importing this package does not import pyspark
(:func:`register` and the data source do; the sink imports it when a batch runs).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cdc_sink.utils.extras import require
from cdc_sink.utils.lazy import lazy_exports

if TYPE_CHECKING:
    from cdc_sink.spark.database import DatabaseOptions, DatabaseSink, database_sink
    from cdc_sink.spark.source import register
    from cdc_sink.spark.writer import (
        DEAD_LETTER_SCHEMA,
        ApplyMode,
        BatchStats,
        DeadLetterSink,
        DecodeIn,
        DecodeOptions,
        JsonDecoder,
        SinkFunction,
        SinkOptions,
        sink,
    )

__all__ = [
    "DEAD_LETTER_SCHEMA",
    "ApplyMode",
    "BatchStats",
    "DatabaseOptions",
    "DatabaseSink",
    "DeadLetterSink",
    "DecodeIn",
    "DecodeOptions",
    "JsonDecoder",
    "SinkFunction",
    "SinkOptions",
    "database_sink",
    "register",
    "sink",
]

# Without pyspark nothing here works: say which extra installs it (pyspark is not imported).
require("pyspark", feature="cdc_sink.spark")

_WHERE = {
    "DEAD_LETTER_SCHEMA": "cdc_sink.spark.writer",
    "ApplyMode": "cdc_sink.spark.options",
    "BatchStats": "cdc_sink.spark.writer",
    "DatabaseOptions": "cdc_sink.spark.database",
    "DatabaseSink": "cdc_sink.spark.database",
    "database_sink": "cdc_sink.spark.database",
    "DeadLetterSink": "cdc_sink.spark.writer",
    "DecodeIn": "cdc_sink.spark.options",
    "DecodeOptions": "cdc_sink.spark.options",
    "JsonDecoder": "cdc_sink.spark.options",
    "SinkFunction": "cdc_sink.spark.writer",
    "SinkOptions": "cdc_sink.spark.options",
    "sink": "cdc_sink.spark.writer",
    "register": "cdc_sink.spark.source",
}


__getattr__, __dir__ = lazy_exports(__name__, _WHERE)
