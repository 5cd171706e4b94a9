"""``cdc-sink run --remote sc://...``: the streaming job as a Spark Connect client of a
real Connect server; the server runs every micro-batch (the sink pickled to it)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

import cdc_sink
from cdc_sink.kafka.deadletter import ParquetDeadLetter
from cdc_sink_testkit.connect import ConnectServer
from cdc_sink_testkit.kafka import KafkaHandle
from tests.integration.streams import cdc_sink_command, job_process_env, produce_orders

pytestmark = [pytest.mark.integration, pytest.mark.kafka, pytest.mark.spark]

REPO = Path(__file__).resolve().parents[2]


def test_cdc_sink_run_remote_applies_the_stream_through_connect(
    connect_server: ConnectServer, kafka: KafkaHandle, topic_name: str, tmp_path: Path
) -> None:
    orders = produce_orders(kafka, topic_name, 700, seed=40)
    cdc = cdc_sink_command()
    env = job_process_env()
    done = subprocess.run(
        [
            cdc,
            "run",
            "--remote",
            connect_server.url,
            "--bootstrap-servers",
            kafka.bootstrap_servers,
            "--topic",
            topic_name,
            "--table-path",
            str(tmp_path / "orders"),
            "--schema-file",
            str(REPO / "streaming_jobs" / "orders_schema.json"),
            "--checkpoint",
            str(tmp_path / "checkpoint"),
            "--dead-letter",
            f"file://{tmp_path / 'dlq'}",
            "--trigger",
            "available-now",
            "--max-offsets-per-trigger",
            "300",
            "--compact-every",
            "2",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr[-5000:]
    table = cdc_sink.open_table(tmp_path / "orders")
    kinds = [v["kind"] for v in table.versions()]
    assert kinds.count("data") >= 3  # 700 records, at most 300 a batch
    assert "snapshot" in kinds  # --compact-every 2: the maintenance ran in the server
    assert orders.differences(table.read().to_pylist()) == []
    assert ParquetDeadLetter(tmp_path / "dlq").read().num_rows == orders.malformed
