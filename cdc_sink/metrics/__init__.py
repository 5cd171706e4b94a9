"""Prometheus metrics of the streaming job (prometheus-client), on a registry of its own.

::

    from cdc_sink.metrics import SinkMetrics, start_metrics_server
    metrics = SinkMetrics(table="orders", app_id="job-1")
    server = start_metrics_server(metrics.registry, port=9108)   # 127.0.0.1 by default
    sink_fn.on_batch = metrics.observe_batch                     # every micro-batch
    metrics.observe_table(sink_fn.table.stats())                 # table gauges

Modules: :mod:`~cdc_sink.metrics.sink` (the metric families and their updates),
:mod:`~cdc_sink.metrics.reasons` (reject reasons -> bounded classes),
:mod:`~cdc_sink.metrics.histogram` (a histogram observed with numpy arrays),
:mod:`~cdc_sink.metrics.server` (the ``/metrics`` endpoint) and
:mod:`~cdc_sink.metrics.listener` (Kafka figures from Spark's query progress).
docs/observability.md lists every metric.
"""

try:
    from cdc_sink.metrics.listener import (
        KafkaProgress,
        ProgressPoller,
        attach_progress_listener,
        kafka_progress,
    )
    from cdc_sink.metrics.reasons import REASON_CLASSES, classify_reason, classify_reasons
    from cdc_sink.metrics.server import MetricsServer, MetricsServerError, start_metrics_server
    from cdc_sink.metrics.sink import OPS, OUTCOMES, PHASES, RESULTS, BatchFigures, SinkMetrics
except ModuleNotFoundError as exc:  # prometheus-client: the "metrics" extra
    from cdc_sink.utils.extras import missing_extra

    raise missing_extra(exc, feature="cdc_sink.metrics") from exc

__all__ = [
    "OPS",
    "OUTCOMES",
    "PHASES",
    "REASON_CLASSES",
    "RESULTS",
    "BatchFigures",
    "KafkaProgress",
    "MetricsServer",
    "MetricsServerError",
    "ProgressPoller",
    "SinkMetrics",
    "attach_progress_listener",
    "classify_reason",
    "classify_reasons",
    "kafka_progress",
    "start_metrics_server",
]
