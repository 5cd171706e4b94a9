"""``cdc-sink run --table-path s3://...`` (issue 39, step 7): the streaming job onto a table
on the session's real S3 server (SeaweedFS), its endpoint and region from the settings
file's ``[storage-option]`` table and a ``--storage-option`` flag, its credentials from
the environment variables obstore reads (``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``),
in one ``available-now`` run."""

from __future__ import annotations

import subprocess
import uuid
from pathlib import Path

import pytest

import cdc_sink
from cdc_sink_testkit.kafka import KafkaHandle
from cdc_sink_testkit.s3 import SeaweedS3
from tests.integration.streams import (
    cdc_sink_command,
    job_process_env,
    orders_job_args,
    produce_orders,
)

pytestmark = [pytest.mark.integration, pytest.mark.kafka, pytest.mark.spark]


def test_cdc_sink_run_applies_the_stream_onto_an_s3_table(
    kafka: KafkaHandle, topic_name: str, tmp_path: Path, s3_server: SeaweedS3
) -> None:
    orders = produce_orders(kafka, topic_name, 600, seed=39)

    url = s3_server.url(f"job-{uuid.uuid4().hex}/orders")
    storage = s3_server.storage_options()
    config = tmp_path / "job.toml"
    config.write_text(f'[storage-option]\nregion = "{storage["region"]}"\nallow_http = true\n')
    args = orders_job_args(kafka.bootstrap_servers, topic_name, tmp_path)
    args[args.index("--table-path") + 1] = url
    env = job_process_env("AWS_")
    env["AWS_ACCESS_KEY_ID"] = storage["access_key_id"]
    env["AWS_SECRET_ACCESS_KEY"] = storage["secret_access_key"]
    cdc = cdc_sink_command()
    done = subprocess.run(
        [
            cdc,
            "run",
            "--config",
            str(config),
            *args,
            "--storage-option",
            f"endpoint={storage['endpoint']}",
            "--trigger",
            "available-now",
            "--max-offsets-per-trigger",
            "250",
            "--master",
            "local[2]",
            "--spark-log-level",
            "ERROR",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr[-5000:]
    assert storage["secret_access_key"] not in done.stdout + done.stderr

    table = cdc_sink.open_table(url, storage_options=storage)
    assert table.version >= 3  # 600 records, at most 250 a batch
    assert orders.differences(table.read().to_pylist()) == []
    rejects = sum(table.rejects(v).num_rows for v in range(1, table.version + 1))
    assert rejects == orders.malformed
