"""Spark: the streaming sink, the ``cdc_sink`` snapshot-read data source, sessions.

    fn = cdc_sink.spark.sink(path, schema=schema)        # foreachBatch function
    cdc_sink.spark.register(spark)                       # format("cdc_sink") reads

Importing this package does not import pyspark; the functions do.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["register", "sink"]


def sink(path: str, **kwargs: Any) -> Any:
    """The foreachBatch function of the sink (see :func:`cdc_sink.spark.writer.sink`)."""
    from cdc_sink.spark.writer import sink as _sink

    return _sink(path, **kwargs)


def register(spark: SparkSession) -> None:
    """Registers the ``cdc_sink`` data source (see :mod:`cdc_sink.spark.source`)."""
    from cdc_sink.spark.source import register as _register

    _register(spark)
