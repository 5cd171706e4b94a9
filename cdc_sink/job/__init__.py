"""The CDC streaming job: Kafka change events -> a cdc_sink table, one version per batch.

Installed with the package: ``cdc-sink run …`` or ``python -m cdc_sink.job …`` start it
in this Python process (a local Spark, ``--master`` or ``$SPARK_MASTER``, default
``local[*]``, with the Kafka source's jars cdc_sink caches); ``spark-submit
streaming_jobs/cdc_to_tablets.py …`` (a thin script calling :func:`main`) submits it to a
cluster. Settings come from flags, ``CDC_SINK_*`` environment variables or a TOML file
(``--config``; :mod:`cdc_sink.job.args`), and the Kafka and schema-registry connection
settings from a client properties file (``--client-properties``).

Run it with spark-submit (cdc_sink and its Python dependencies installed on the driver
and every executor, e.g. ``pip install cdc_sink`` in the image, or a virtual environment
packed with venv-pack and shipped with ``--archives``: README.md, "Run on a cluster";
``--py-files`` with the wheel does not work, docs/deployment.md says why)::

    spark-submit \\
      --master 'local[4]' \\
      --packages org.apache.spark:spark-sql-kafka-0-10_2.13:4.2.0 \\
      --conf spark.sql.session.timeZone=UTC \\
      --conf spark.sql.execution.arrow.pyspark.enabled=true \\
      streaming_jobs/cdc_to_tablets.py \\
      --bootstrap-servers kafka:9092 --topic orders \\
      --table-path /data/orders --schema-file streaming_jobs/orders_schema.json \\
      --checkpoint /data/checkpoints/orders --trigger "$TRIGGER" \\
      --dead-letter kafka://kafka:9092/orders.dead-letter   # TRIGGER: a Spark interval

``--packages`` takes the spark-sql-kafka build of your Spark's version (Scala 2.13 for
Spark 4); Maven Central publishes none for pyspark 4.3.0 yet, and the 4.2.0 connector
works with it. Offline, give the jars cdc_sink caches instead of ``--packages``::

    --jars "$(python -c 'from cdc_sink.kafka.jars import spark_kafka_conf as c; \\
print(c()["spark.jars"])')"

Options (``--help`` lists them all): ``--format json|rowv2|debezium|debezium-avro`` and
``--decoder-option KEY=VALUE`` (repeatable; the value is parsed as JSON when it parses,
e.g. ``--decoder-option decimal_handling=string``); ``--allow-truncate`` applies native
JSON ``{"op": "truncate"}`` events (rejected by default); ``--trigger`` a processing-time
interval (Spark's interval syntax) or ``available-now`` (process what is on the topic, then exit);
``--apply-mode driver|executors``; ``--dead-letter`` ``kafka://host:port/topic``,
``file:///dir`` or a path (Parquet); ``--schema-file`` creates the table when the path
holds none; ``--app-id`` identifies the writer for exactly-once commits (default: derived
from the checkpoint, so a restart from the same checkpoint never commits a batch twice);
``--starting-offsets`` for the first run; ``--kafka-option key=value`` for more Kafka
source options (security, timeouts); ``--decode-processes N`` decodes in N worker
processes (driver mode); ``--decode-in executors`` decodes in the executors' Spark tasks
instead and sends the driver only the decoded events (driver mode, for a cluster whose
executors have the cores); ``--numpy-hugepages off|on|numpy`` whether numpy
asks for transparent huge pages in the driver and the executors' Python workers (default
off, see :mod:`cdc_sink.hugepages`); ``--arrow-memory-pool auto|jemalloc|mimalloc|system|
pyarrow`` pyarrow's allocator there (default auto: jemalloc when pyarrow has it, see
:mod:`cdc_sink.arrow_pool`). The sink's flags are made from the fields of
:class:`~cdc_sink.spark.options.SinkOptions` (:mod:`cdc_sink.job.sink_flags`): besides
those above, one per other option (``--bucket-partitioned``, ``--stats-limit``, the table's
``--page-rows``, ``--memory-versions``, ``--tablet-compact-every``, ``--snapshot-every``,
``--change-images``, ``--prepare-threads``, ``--file-mode``...).

Observability (docs/observability.md): ``--metrics-port P`` serves Prometheus metrics on
``http://127.0.0.1:P/metrics`` (``--metrics-host`` to bind elsewhere, ``0`` picks a free
port and logs it; a port in use is an error naming it; ``--metrics-tls-cert``/
``--metrics-tls-key`` serve HTTPS, ``--metrics-auth-file`` or ``$CDC_SINK_METRICS_AUTH``
require basic auth, docs/security.md), labelled with ``--table-name``
(default: the table directory's name) and the app id. The job logs one ``key=value`` line
per micro-batch (version, events, rejects, seconds per phase, freshness p50/p99) and one
per compaction (``--compact-every N`` batches) and GC run (``--gc-every N`` batches);
``--log-level`` sets the level.

SIGTERM/SIGINT stop the job gracefully: the batch in flight finishes (or is replayed at
the next start), the dead-letter producers are flushed and closed, the metrics endpoint
stops, and the job exits 0. A query that fails exits 1 with one line
``cdc_to_tablets: failed: <reason>`` on stderr.
"""

from __future__ import annotations

from cdc_sink.job.args import (
    LOG_LEVELS,
    build_parser,
    job_decoder_options,
    parse_args,
    parse_decoder_options,
    parse_kafka_options,
    table_options,
)
from cdc_sink.job.runner import (
    apply_numpy_hugepages,
    configure_logging,
    failure_reason,
    main,
)
from cdc_sink.job.schedule import Maintenance

__all__ = [
    "LOG_LEVELS",
    "Maintenance",
    "apply_numpy_hugepages",
    "build_parser",
    "configure_logging",
    "failure_reason",
    "job_decoder_options",
    "main",
    "parse_args",
    "parse_decoder_options",
    "parse_kafka_options",
    "table_options",
]
