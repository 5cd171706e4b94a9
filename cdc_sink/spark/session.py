"""A local SparkSession configured for cdc_sink (tests, the demo, notebooks).

pyspark (the ``spark`` extra) is imported inside the functions only, so importing this
module is cheap.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from cdc_sink.errors import SparkSessionConflict
from cdc_sink.utils.extras import require

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = [
    "CONNECTOR_EXTENSIONS",
    "CONNECTOR_JAR",
    "CONNECTOR_SPARK",
    "JVM_READER_ENV",
    "SparkSessionConflict",
    "connector_jar",
    "local_spark",
    "local_spark_conf",
    "local_submit_command",
    "local_submit_env",
]

logger = logging.getLogger(__name__)

CONNECTOR_JAR = Path(__file__).resolve().parents[1] / "_jars" / "cdc-sink-spark.jar"
"""Where the JVM connector's jar is installed (``make install`` builds it, the wheel ships
it): ``format("cdc_sink")`` and the ``io.cdcsink.spark.CdcSinkCatalog`` SQL catalog."""

CONNECTOR_EXTENSIONS = "io.cdcsink.spark.CdcSinkExtensions"
"""The connector's ``spark.sql.extensions`` class: the ``table_changes(table, start[, end])``
table-valued function (a table's change feed in SQL)."""

CONNECTOR_SPARK = "4.3"
"""The Spark release (major.minor) the connector is compiled against."""

JVM_READER_ENV = "CDC_SINK_JVM_READER"
"""``0`` keeps the connector off the sessions :func:`local_spark` builds (the Python data
source then reads ``format("cdc_sink")``)."""


def connector_jar(spark_version: str | None = None) -> Path | None:
    """The JVM connector's jar, or None: not installed (a source checkout before
    ``make install``), or built for another Spark than ``spark_version`` (default: the
    installed pyspark's).

    Args:
        spark_version: The Spark version the jar is for (``4.3.0``).
    """
    if not CONNECTOR_JAR.is_file():
        return None
    if spark_version is None:
        from importlib.metadata import PackageNotFoundError, version

        try:
            spark_version = version("pyspark")
        except PackageNotFoundError:
            return None
    same = ".".join(spark_version.split(".")[:2]) == CONNECTOR_SPARK
    return CONNECTOR_JAR if same else None


def local_spark_conf(
    *, with_kafka: bool = True, extra_conf: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The configuration :func:`local_spark` applies (``extra_conf`` wins)."""
    conf = {
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": "2",
        "spark.default.parallelism": "2",
        "spark.sql.session.timeZone": "UTC",
        "spark.driver.memory": "1g",
        "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.sql.python.filterPushdown.enabled": "true",
        "spark.sql.streaming.forceDeleteTempCheckpointLocation": "true",
    }
    if with_kafka:
        from cdc_sink.kafka.jars import spark_kafka_conf

        conf.update(spark_kafka_conf())
    jar = connector_jar() if os.environ.get(JVM_READER_ENV, "1") != "0" else None
    if jar is not None:
        conf["spark.jars"] = ",".join(filter(None, [conf.get("spark.jars"), str(jar)]))
        conf["spark.sql.extensions"] = CONNECTOR_EXTENSIONS
    conf.update(extra_conf or {})
    return conf


def local_spark(
    app_name: str = "cdc_sink",
    *,
    master: str = "local[2]",
    with_kafka: bool = True,
    extra_conf: Mapping[str, str] | None = None,
) -> SparkSession:
    """Build (or return the running) local SparkSession.

    Settings: no UI, 2 shuffle partitions, UTC session time zone, 1 GiB driver, Arrow
    for pandas conversion, Python data source filter pushdown, and - with
    ``with_kafka`` - Spark's Kafka source (``spark-sql-kafka-0-10``, resolved from
    Maven Central by :mod:`cdc_sink.kafka.jars`) on ``spark.jars``, and cdc_sink's JVM
    connector (:func:`connector_jar`, unless ``$CDC_SINK_JVM_READER`` is ``0``) with its SQL
    extensions (:data:`CONNECTOR_EXTENSIONS`: ``table_changes``) on ``spark.sql.extensions``.
    ``PYSPARK_PYTHON``/``PYSPARK_DRIVER_PYTHON`` default to this interpreter.

    Raises:
        SparkSessionConflict: a SparkContext already runs without the Kafka jars
            (``spark.jars`` cannot be added to a running JVM).
        MissingExtra: pyspark is not installed (the ``spark`` extra).
    """
    require("pyspark", feature="cdc_sink.spark.session.local_spark")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    if master.startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # bind nothing else

    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    conf = local_spark_conf(with_kafka=with_kafka, extra_conf=extra_conf)
    running = SparkContext._active_spark_context
    if running is not None and with_kafka:
        have = set(filter(None, running.getConf().get("spark.jars", "").split(",")))
        wanted = conf["spark.jars"].split(",")
        missing = [j for j in wanted if j and j not in have and j != str(CONNECTOR_JAR)]
        if missing:
            raise SparkSessionConflict(
                "a SparkContext already runs in this process without the Spark-Kafka "
                f"jars ({', '.join(os.path.basename(j) for j in missing)}); stop it "
                "first: spark.jars cannot be added to a running JVM"
            )

    builder = SparkSession.builder.master(master).appName(app_name)
    for key, value in conf.items():
        builder = builder.config(key, value)
    logger.debug("SparkSession %r on %s with %s", app_name, master, conf)
    session = builder.getOrCreate()
    logger.info("SparkSession %r up (master %s, Spark %s)", app_name, master, session.version)
    return session


def local_submit_command(
    conf: Mapping[str, str] | None = None, *, master: str = "local[2]"
) -> list[str]:
    """The ``spark-submit`` command of a local streaming job that reads Kafka, up to the
    application: pyspark's own ``spark-submit``, ``master``, the Kafka source's jars
    (resolved once from Maven Central), no UI, UTC session time zone, then ``conf``.

    Args:
        conf: More Spark settings, passed as ``--conf key=value`` in order.
        master: The Spark master.
    """
    from pathlib import Path

    from cdc_sink.kafka.jars import spark_kafka_conf

    submit = str(Path(sys.executable).with_name("spark-submit"))
    cmd = [submit, "--master", master, "--jars", spark_kafka_conf()["spark.jars"]]
    settings = {"spark.ui.enabled": "false", "spark.sql.session.timeZone": "UTC"}
    for key, value in {**settings, **(conf or {})}.items():
        cmd += ["--conf", f"{key}={value}"]
    return cmd


def local_submit_env(**extra: str) -> dict[str, str]:
    """The environment of :func:`local_submit_command`: this process's, with this
    Python for the driver and the workers and Spark bound to 127.0.0.1, plus ``extra``."""
    return dict(
        os.environ,
        PYSPARK_PYTHON=sys.executable,
        PYSPARK_DRIVER_PYTHON=sys.executable,
        SPARK_LOCAL_IP="127.0.0.1",
        **extra,
    )
