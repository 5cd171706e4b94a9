"""``cdc-sink run``: the streaming job installed with the package, started in a plain
Python process (no spark-submit: it starts its own local Spark with the Kafka source's
jars), its settings from a TOML file and one environment variable."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

import cdc_sink
from cdc_sink.kafka.deadletter import ParquetDeadLetter
from cdc_sink_testkit.kafka import KafkaHandle
from tests.integration.streams import cdc_sink_command, job_process_env, produce_orders

pytestmark = [pytest.mark.integration, pytest.mark.kafka, pytest.mark.spark]

REPO = Path(__file__).resolve().parents[2]


def test_cdc_sink_run_applies_the_stream_from_a_settings_file(
    kafka: KafkaHandle, topic_name: str, tmp_path: Path
) -> None:
    orders = produce_orders(kafka, topic_name, 900, seed=23)

    config = tmp_path / "job.toml"
    config.write_text(
        f'bootstrap-servers = "{kafka.bootstrap_servers}"\n'
        f'topic = "{topic_name}"\n'
        f'table-path = "{tmp_path / "orders"}"\n'
        f'schema-file = "{REPO / "streaming_jobs" / "orders_schema.json"}"\n'
        f'checkpoint = "{tmp_path / "checkpoint"}"\n'
        f'dead-letter = "file://{tmp_path / "dlq"}"\n'
        'trigger = "available-now"\n'
        'master = "local[2]"\n'
    )
    cdc = cdc_sink_command()
    env = job_process_env()
    env["CDC_SINK_MAX_OFFSETS_PER_TRIGGER"] = "400"  # a setting from the environment
    done = subprocess.run(
        [cdc, "run", "--config", str(config), "--spark-log-level", "ERROR"],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr[-5000:]
    table = cdc_sink.open_table(tmp_path / "orders")
    assert table.version >= 3  # 900 records, at most 400 a batch
    assert orders.differences(table.read().to_pylist()) == []
    assert ParquetDeadLetter(tmp_path / "dlq").read().num_rows == orders.malformed
