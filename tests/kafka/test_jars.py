"""The Spark-Kafka connector version is chosen to match the running Spark
(cdc_sink/kafka/jars.py; docs/compatibility.md)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from cdc_sink.kafka import jars
from cdc_sink.kafka.jars import choose_spark_kafka_version, connector_version

# What Maven Central listed for spark-sql-kafka-0-10_2.13 (4.x part) when this was written.
CENTRAL = [
    "3.5.9",
    "4.0.0",
    "4.0.0-preview1",
    "4.0.0-preview2",
    "4.0.1",
    "4.0.2",
    "4.0.3",
    "4.0.4",
    "4.1.0",
    "4.1.0-preview1",
    "4.1.0-preview4",
    "4.1.1",
    "4.1.2",
    "4.1.3",
    "4.2.0",
    "4.2.0-preview1",
    "4.2.0-preview5",
]
TOKEN_PROVIDER = ["3.5.4", "4.0.0", "4.0.0-preview2", "4.1.0-preview1", "4.1.1", "4.2.0"]


@pytest.mark.parametrize(
    ("spark", "chosen"),
    [
        ("4.1.0", "4.1.0"),  # published: exactly that
        ("4.2.0", "4.2.0"),
        ("4.0.2", "4.0.2"),
        ("4.1.4", "4.1.3"),  # not published: the newest patch of the same minor
        ("4.0.5", "4.0.4"),
        ("4.2.1", "4.2.0"),
        ("4.3.0", "4.2.0"),  # no 4.3.x at all: the newest of the nearest lower minor
        ("4.5.1", "4.2.0"),
        ("4.2.0.dev0", "4.2.0"),  # a dev build: its minor's newest release
        ("5.0.0", None),  # another major: nothing to fall back to
        ("nonsense", None),
    ],
)
def test_the_connector_matches_the_running_spark_where_it_exists(
    spark: str, chosen: str | None
) -> None:
    assert choose_spark_kafka_version(spark, CENTRAL) == chosen


def test_previews_are_never_chosen() -> None:
    assert choose_spark_kafka_version("4.3.0", ["4.2.0", "4.3.0-preview1"]) == "4.2.0"


def test_maven_is_asked_for_the_chosen_versions(monkeypatch: pytest.MonkeyPatch) -> None:
    listed = {
        jars.SPARK_KAFKA_ARTIFACT: CENTRAL,
        jars.SPARK_TOKEN_PROVIDER_ARTIFACT: TOKEN_PROVIDER,
    }
    monkeypatch.setattr(jars, "_maven_versions", listed.__getitem__)
    assert jars._spark_kafka_attempts("4.1.0")[0] == {
        "spark.kafka.version": "4.1.0",
        "spark.token.provider.version": "4.0.0",
    }
    assert jars._spark_kafka_attempts("4.1.4")[0] == {
        "spark.kafka.version": "4.1.3",
        "spark.token.provider.version": "4.1.1",
    }
    assert jars._spark_kafka_attempts("4.3.0")[0] == {
        "spark.kafka.version": "4.2.0",
        "spark.token.provider.version": "4.2.0",
    }
    assert jars._spark_kafka_attempts("4.3.0")[-1] == {}  # then the pom's defaults


def test_without_the_metadata_the_exact_version_then_the_default_is_tried(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def offline(artifact: str) -> list[str]:
        raise OSError("no network")

    monkeypatch.setattr(jars, "_maven_versions", offline)
    with caplog.at_level(logging.WARNING, logger=jars.__name__):
        assert jars._spark_kafka_attempts("4.1.0") == [{"spark.kafka.version": "4.1.0"}, {}]
    assert "no network" in caplog.text


def test_a_mismatched_connector_is_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    found = [Path("/c/kafka-clients-3.9.2.jar"), Path("/c/spark-sql-kafka-0-10_2.13-4.2.0.jar")]
    assert connector_version(found) == "4.2.0"
    assert connector_version(found[:1]) is None
    with caplog.at_level(logging.WARNING, logger=jars.__name__):
        jars._warn_if_mismatched("4.9.7", "4.2.0")
        jars._warn_if_mismatched("4.9.7", "4.2.0")
        jars._warn_if_mismatched("4.2.0", "4.2.0")
    assert caplog.text.count("Spark 4.9.7 runs with the Kafka source 4.2.0") == 1
