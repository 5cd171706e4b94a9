"""The options of ``spark.read.format("cdc_sink")``, parsed without a Spark session."""

from __future__ import annotations

import pytest

from cdc_sink.spark.source import _parse_options


def test_options_are_case_insensitive_and_stripped() -> None:
    o = _parse_options(
        {
            "path": "file:///data/my%20table",
            "VersionAsOf": " 7 ",
            "COLUMNS": "a, b",
            "pushFilters": "TRUE",
        }
    )
    assert (o.path, o.version, o.timestamp, o.columns, o.push_filters) == (
        "/data/my table",
        7,
        None,
        ("a", "b"),
        True,
    )


def test_defaults_and_blank_options() -> None:
    o = _parse_options({"path": "/t", "versionAsOf": " ", "columns": "", "timestampAsOf": ""})
    assert (o.path, o.version, o.timestamp, o.columns, o.push_filters) == (
        "/t",
        None,
        None,
        None,
        False,  # Spark 4.3 would reuse the pushed filters in later queries: PUSHDOWN_HAZARD
    )


def test_a_timestamp_is_epoch_milliseconds_or_text() -> None:
    assert _parse_options({"path": "/t", "timestampAsOf": "-12"}).timestamp == -12
    assert (
        _parse_options({"path": "/t", "timestampAsOf": " 2026-01-02T03:04:05 "}).timestamp
        == "2026-01-02T03:04:05"
    )


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({}, "no table path"),
        ({"path": "hdfs://nn/t"}, "unknown URL scheme 'hdfs'"),
        ({"path": "s3:///t"}, "no bucket"),
        ({"path": "/t", "versionAsOf": "x"}, "versionAsOf must be an integer, got 'x'"),
        ({"path": "/t", "versionAsOf": "1", "timestampAsOf": "2"}, "not both"),
        ({"path": "/t", "columns": "a,,b"}, "columns must be distinct names"),
        ({"path": "/t", "columns": "a,a"}, "columns must be distinct names"),
        ({"path": "/t", "pushFilters": "maybe"}, "pushFilters must be true or false"),
        ({"versionAsOf": "x"}, "no table path"),  # the path is checked first
    ],
)
def test_malformed_options(options: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        _parse_options(options)


def test_a_windows_drive_is_a_path() -> None:
    assert _parse_options({"path": "C:/data/t"}).path == "C:/data/t"


def test_an_object_store_url_and_its_storage_options() -> None:
    o = _parse_options(
        {"path": "s3://bucket/t/", "Storage.Endpoint": "http://127.0.0.1:1", "storage.": "x"}
    )
    assert (o.path, dict(o.storage_options)) == (
        "s3://bucket/t",
        {"endpoint": "http://127.0.0.1:1"},
    )
