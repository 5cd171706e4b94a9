"""``cdc-sink jars``: the Kafka source's jars for ``spark-submit --jars``, resolved for the
Spark version asked for (default: the installed pyspark's), printed comma-separated on
one line; no pyspark and no version, or a version that is not one, is an error (exit 2).
Maven itself is not run here (tests/kafka/test_jars.py covers the choice of connector;
tests/cluster/test_run_on_cluster.py runs the command for real)."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError
from pathlib import Path

import pytest

from cdc_sink import cli
from cdc_sink.kafka import jars


@pytest.fixture
def resolved(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[Path]:
    """Each directory the resolution was asked to fill (Maven replaced by two jars)."""
    asked: list[Path] = []

    def resolve(pom: Path, directory: Path, **_: object) -> list[Path]:
        asked.append(directory)
        return [
            directory / "kafka-clients-3.9.2.jar",
            directory / "spark-sql-kafka-0-10_2.13-4.2.0.jar",
        ]

    monkeypatch.setenv("CDC_SINK_CACHE", str(tmp_path))
    monkeypatch.setattr(jars, "resolve_pom_profile", resolve)
    return asked


def test_the_jars_of_the_version_asked_for_are_printed_on_one_line(
    resolved: list[Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["jars", "--spark-version", "4.2.0"]) == 0
    (directory,) = resolved
    assert directory == tmp_path / "jars" / "spark-kafka-4.2.0"
    out = capsys.readouterr().out
    assert out == (
        f"{directory / 'kafka-clients-3.9.2.jar'},"
        f"{directory / 'spark-sql-kafka-0-10_2.13-4.2.0.jar'}\n"
    )


def test_the_installed_pysparks_version_is_the_default(
    resolved: list[Path], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(jars, "pyspark_version", lambda: "4.1.3")
    assert cli.main(["jars"]) == 0
    assert [d.name for d in resolved] == ["spark-kafka-4.1.3"]
    assert capsys.readouterr().out.count(",") == 1


def test_without_pyspark_the_version_must_be_given(
    resolved: list[Path], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def missing() -> str:
        raise PackageNotFoundError("pyspark")

    monkeypatch.setattr(jars, "pyspark_version", missing)
    assert cli.main(["jars"]) == 2
    assert "--spark-version" in capsys.readouterr().err
    assert resolved == []


@pytest.mark.parametrize("version", ["latest", "../../etc", "4.2"])
def test_a_version_that_is_not_one_is_refused(
    resolved: list[Path], version: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["jars", "--spark-version", version]) == 2
    assert "not a Spark version" in capsys.readouterr().err
    assert resolved == []
