"""The local broker's jars: an Apache Kafka broker (KRaft) from Maven Central, cached.

Declared as the ``kafka-broker`` profile of ``pom.xml`` beside this module and resolved
by the product's Maven resolution (:func:`cdc_sink.kafka.jars.resolve_pom_profile`) into
``<cache>/jars/kafka-broker-<version>/`` (:func:`cdc_sink.kafka.jars.cache_root`): once
cached, no Maven and no network is needed. ``docker/kafka/Dockerfile`` builds its image
from the same profile.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from functools import lru_cache
from pathlib import Path

from cdc_sink.kafka.jars import cache_root, resolve_pom_profile

__all__ = ["POM_PATH", "kafka_broker_version", "resolve_kafka_broker_jars"]

POM_PATH = Path(__file__).with_name("pom.xml")
_POM_NS = "{http://maven.apache.org/POM/4.0.0}"


@lru_cache(maxsize=1)
def _pom_properties() -> dict[str, str]:
    root = ET.parse(POM_PATH).getroot()
    props = root.find(f"{_POM_NS}properties")
    if props is None:
        return {}
    return {child.tag.removeprefix(_POM_NS): (child.text or "").strip() for child in props}


def kafka_broker_version() -> str:
    """The Apache Kafka version :func:`resolve_kafka_broker_jars` resolves."""
    return _pom_properties()["kafka.version"]


def resolve_kafka_broker_jars() -> list[Path]:
    """The classpath of a KRaft Kafka broker (``kafka.Kafka``), resolved once and cached.

    Raises:
        MavenNotFound: Maven is needed (nothing cached yet) and not installed.
        JarResolutionError: Maven could not resolve the profile.
    """
    directory = cache_root() / "jars" / f"kafka-broker-{kafka_broker_version()}"
    return resolve_pom_profile(POM_PATH, directory, profile="kafka-broker")
