"""Unit tests of the spark-submit entry points' command lines (no Spark is started)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

JOBS = Path(__file__).resolve().parents[2] / "streaming_jobs"


def _load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"_jobs_{name}", JOBS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_cdc_to_tablets_arguments_and_defaults() -> None:
    job = _load("cdc_to_tablets")
    args = job.build_parser().parse_args([
        "--bootstrap-servers", "k:9092", "--topic", "orders", "--table-path", "/data/o"])
    assert (args.format, args.trigger, args.apply_mode) == ("json", "1 second", "driver")
    assert args.checkpoint is None and args.dead_letter is None
    assert args.starting_offsets == "earliest"
    args = job.build_parser().parse_args([
        "--bootstrap-servers", "k:9092", "--topic", "orders", "--table-path", "/data/o",
        "--format", "debezium", "--trigger", "available-now", "--apply-mode", "executors",
        "--dead-letter", "kafka://k:9092/dlq", "--kafka-option", "kafka.security.protocol=SSL",
        "--kafka-option", "kafka.sasl.jaas.config=a=b"])
    assert args.format == "debezium" and args.apply_mode == "executors"
    assert job.parse_kafka_options(args.kafka_option) == {
        "kafka.security.protocol": "SSL", "kafka.sasl.jaas.config": "a=b"}


def test_cdc_to_tablets_refuses_bad_arguments() -> None:
    job = _load("cdc_to_tablets")
    with pytest.raises(SystemExit):
        job.build_parser().parse_args(["--topic", "t", "--table-path", "/x"])
    with pytest.raises(ValueError, match="KEY=VALUE"):
        job.parse_kafka_options(["novalue"])


def test_snapshot_query_arguments() -> None:
    q = _load("snapshot_query")
    args = q.build_parser().parse_args(["--table-path", "/t", "--timestamp", "1700000000000",
                                        "--group-by", "status", "--sum", "amount",
                                        "--sum", "items"])
    assert args.sum == ["amount", "items"] and args.version is None
    with pytest.raises(SystemExit):
        q.build_parser().parse_args(["--table-path", "/t", "--version", "1",
                                     "--timestamp", "1"])
