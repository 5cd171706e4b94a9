"""The one interface of the sink's apply modes (internal).

An apply mode turns a micro-batch's Kafka records into prepared buckets of an open
:class:`~cdc_sink.transaction.Transaction`, and says what it did in a
:class:`~cdc_sink.spark._batch.PreparedBatch` (the rejects to store with the version, the
Kafka end offsets, figures). The sink (:mod:`cdc_sink.spark.writer`) decides, commits,
forwards dead letters and aborts; a mode does none of that and never changes the sink.

The modes, one module each, none importing another:

=====================================  ==============================================
:mod:`cdc_sink.spark._driver`          driver mode: the records come to the driver
                                       and are decoded there (Python decoders, or
                                       Spark's ``from_json`` for native JSON)
:mod:`cdc_sink.spark._task_decode`     driver mode with ``decode_in="executors"``:
                                       tasks decode, the driver prepares
:mod:`cdc_sink.spark._executors`       executors mode: tasks decode and prepare
=====================================  ==============================================
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cdc_sink.spark.options import SinkOptions

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from cdc_sink.spark._batch import PreparedBatch
    from cdc_sink.stats import BucketFigures
    from cdc_sink.table import Table
    from cdc_sink.transaction import Transaction

__all__ = ["ApplyStrategy"]


class ApplyStrategy:
    """One apply mode of a sink.

    Args:
        path: The table's path (tasks open it in their own processes).
        options: The sink's checked options.
    """

    def __init__(self, path: str, options: SinkOptions) -> None:
        self.path = path
        self.options = options

    def prepare(self, table: Table, txn: Transaction, df: DataFrame) -> PreparedBatch:
        """Decodes the micro-batch ``df`` and prepares every bucket it touches into
        ``txn`` (a prepare that fails leaves ``txn`` to be aborted by the caller)."""
        raise NotImplementedError

    def bucket_figures(self) -> dict[int, BucketFigures]:
        """Memory figures of the buckets other processes hold, as last reported (only
        executors mode has any)."""
        return {}

    def close(self) -> None:
        """Releases what the mode started (worker processes)."""
