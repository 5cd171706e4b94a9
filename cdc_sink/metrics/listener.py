"""Kafka figures from Spark's own query progress (a PySpark ``StreamingQueryListener``).

Spark reports after every trigger the input and processed rows/s and, for the Kafka
source, how many offsets the query is behind the latest ones (``avgOffsetsBehindLatest``,
``maxOffsetsBehindLatest`` in the source's ``metrics``). :func:`attach_progress_listener`
copies them into :class:`~cdc_sink.metrics.sink.SinkMetrics` gauges. pyspark is imported
only when a listener is attached.

The streaming job does not attach a listener: a PySpark listener makes Spark call back
into Python over Py4J on every query event (started, progress, idle), which costs
events/s and CPU end to end (``benchmarks/metrics_overhead.py``: docs/benchmarks-history.md,
"Metrics overhead"). It polls instead:
:class:`ProgressPoller` reads ``query.lastProgress`` from the loop that already waits on
the query, and copies each new progress once.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cdc_sink.metrics.sink import SinkMetrics

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["KafkaProgress", "ProgressPoller", "attach_progress_listener", "kafka_progress"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class KafkaProgress:
    """The Kafka figures of one query progress (``None``: not reported)."""

    input_rows_per_second: float | None
    processed_rows_per_second: float | None
    avg_offsets_behind: float | None
    max_offsets_behind: float | None


def _number(v: Any) -> float | None:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def kafka_progress(progress: Mapping[str, Any]) -> KafkaProgress:
    """Reads a ``StreamingQueryProgress`` (or its dict/JSON form).

    Offsets behind latest: the largest ``maxOffsetsBehindLatest`` and the mean
    ``avgOffsetsBehindLatest`` over the sources that report them.
    """
    avgs: list[float] = []
    maxes: list[float] = []
    for src in progress.get("sources") or []:
        m = src.get("metrics") or {}
        a, x = _number(m.get("avgOffsetsBehindLatest")), _number(m.get("maxOffsetsBehindLatest"))
        if a is not None:
            avgs.append(a)
        if x is not None:
            maxes.append(x)
    return KafkaProgress(
        input_rows_per_second=_number(progress.get("inputRowsPerSecond")),
        processed_rows_per_second=_number(progress.get("processedRowsPerSecond")),
        avg_offsets_behind=sum(avgs) / len(avgs) if avgs else None,
        max_offsets_behind=max(maxes) if maxes else None,
    )


def _observe(metrics: SinkMetrics, k: KafkaProgress) -> None:
    metrics.observe_progress(
        input_rows_per_second=k.input_rows_per_second,
        processed_rows_per_second=k.processed_rows_per_second,
        avg_offsets_behind=k.avg_offsets_behind,
        max_offsets_behind=k.max_offsets_behind,
    )


class ProgressPoller:
    """Copies each new ``query.lastProgress`` of one query into ``metrics``.

    Call :meth:`poll` from the loop that waits on the query (it never raises); a
    progress already seen (same batch id and timestamp) is not counted again.
    """

    def __init__(self, query: Any, metrics: SinkMetrics) -> None:
        self._query = query
        self._metrics = metrics
        self._seen: tuple[Any, Any] | None = None

    def poll(self) -> bool:
        """Reads the last progress; returns whether it was new and copied."""
        try:
            p = self._query.lastProgress
            if not p:
                return False
            ident = (p.get("batchId"), p.get("timestamp"))
            if ident == self._seen:
                return False
            self._seen = ident
            k = kafka_progress(p)
        except Exception:
            logger.warning("could not read the query progress", exc_info=True)
            return False
        _observe(self._metrics, k)
        return True


def attach_progress_listener(
    spark: SparkSession, metrics: SinkMetrics, *, query_name: str | None = None
) -> Any:
    """Adds a listener that feeds ``metrics`` from the progress of query ``query_name``
    (every query when ``None``).

    Returns:
        The listener (``spark.streams.removeListener(listener)`` detaches it).
    """
    from pyspark.sql.streaming.listener import StreamingQueryListener

    class _KafkaProgressListener(StreamingQueryListener):
        def onQueryStarted(self, event: Any) -> None:
            pass

        def onQueryProgress(self, event: Any) -> None:
            try:
                p = event.progress
                if query_name is not None and p.name != query_name:
                    return
                k = kafka_progress(p)
            except Exception:
                logger.warning("could not read the query progress", exc_info=True)
                return
            _observe(metrics, k)

        def onQueryIdle(self, event: Any) -> None:
            pass

        def onQueryTerminated(self, event: Any) -> None:
            pass

    listener = _KafkaProgressListener()
    spark.streams.addListener(listener)
    return listener
