"""The optional dependencies (``pip install 'cdc_sink[<extra>]'``) and a clear error for each.

The core - the table engine (:mod:`cdc_sink.table`), schemas, formats - needs numpy,
pyarrow, pyroaring and google-crc32c only. The rest is optional:

=========  =======================================  =====================================
extra      packages                                 for
=========  =======================================  =====================================
spark      pyspark (4.1.3 to 4.3), pandas < 3       :mod:`cdc_sink.spark`: the sink, reads
kafka      confluent-kafka, kafka-python            producer, Kafka dead letters, brokers
metrics    prometheus-client                        :mod:`cdc_sink.metrics`
cli        rich                                     the ``cdc-sink`` command's tables, demo
s3         obstore                                  tables on object stores (s3://, gs://,
                                                    az://: :mod:`cdc_sink.storage.objectstore`)
avro       fastavro, confluent-kafka[avro]          writing ``debezium-avro`` (the encoder);
                                                    the decoder needs only the core
all        every one of the above
=========  =======================================  =====================================

:func:`require` (and :func:`require_any`, :func:`missing_extra`) turn a missing package
into :class:`MissingExtra`, an ``ImportError`` that names the extra to install.
"""

from __future__ import annotations

import importlib.util

from cdc_sink.errors import MissingExtra

__all__ = ["EXTRA_OF", "MissingExtra", "missing_extra", "require", "require_any"]

EXTRA_OF: dict[str, str] = {
    "pyspark": "spark",
    "pandas": "spark",
    "confluent_kafka": "kafka",
    "kafka": "kafka",
    "prometheus_client": "metrics",
    "rich": "cli",
    "obstore": "s3",
    "fastavro": "avro",
}
"""The extra that installs each optional top-level module."""


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent package missing, or a None placeholder
        return False


def require(*modules: str, feature: str) -> None:
    """Checks that ``modules`` can be imported (without importing them).

    Args:
        *modules: Top-level module names, keys of :data:`EXTRA_OF`.
        feature: What needs them, for the message (e.g. ``"cdc_sink.spark"``).

    Raises:
        MissingExtra: One of them is not installed; the message names its extra.
    """
    for module in modules:
        if not _installed(module):
            extra = EXTRA_OF.get(module, "all")
            raise MissingExtra(
                f"{feature} needs {module!r}, which is not installed: install the "
                f"{extra!r} extra, e.g. pip install 'cdc_sink[{extra}]'",
                extra=extra,
                module=module,
            )


def require_any(*modules: str, feature: str) -> None:
    """Checks that at least one of ``modules`` can be imported (e.g. either Kafka client).

    Raises:
        MissingExtra: None of them is installed; the message names the first's extra.
    """
    if not any(_installed(m) for m in modules):
        require(modules[0], feature=feature)


def missing_extra(exc: ModuleNotFoundError, *, feature: str) -> ImportError:
    """``exc`` as a :class:`MissingExtra` when the missing module is an optional one.

    For ``except ModuleNotFoundError as exc: raise missing_extra(exc, feature=...) from exc``
    around the imports of a package that needs an extra; other missing modules are
    returned unchanged.
    """
    top = (exc.name or "").partition(".")[0]
    extra = EXTRA_OF.get(top)
    if extra is None:
        return exc
    return MissingExtra(
        f"{feature} needs {top!r}, which is not installed: install the {extra!r} extra, "
        f"e.g. pip install 'cdc_sink[{extra}]'",
        extra=extra,
        module=top,
    )
