"""``cdc-sink demo --remote sc://...``: the demo as a Spark Connect client of a real
Connect server, which runs its streaming query (the sink and its Kafka dead-letter sink
pickled to the server's ``foreachBatch`` worker) and its snapshot queries; the demo
reaches its own checks of the table at two versions and of the dead letters, and
passes them.

The demo runs in a subprocess (so pyspark's process-wide Connect mark stays there),
against the session's Kafka broker (``CDC_SINK_KAFKA_BOOTSTRAP``), with ``JAVA_HOME``
pointing nowhere: that process cannot start a JVM, so a local Spark could not have
done the work.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from cdc_sink_testkit.connect import ConnectServer
from cdc_sink_testkit.kafka import BOOTSTRAP_ENV, KafkaHandle
from tests.integration.streams import cdc_sink_command, job_process_env
from tests.integration.test_demo import _assert_checks

pytestmark = [pytest.mark.integration, pytest.mark.kafka, pytest.mark.spark]


def test_demo_remote_runs_its_query_through_connect_and_passes_its_checks(
    connect_server: ConnectServer, kafka: KafkaHandle, tmp_path: Path
) -> None:
    workdir = tmp_path / "demo"
    env = {
        **job_process_env(),
        BOOTSTRAP_ENV: kafka.bootstrap_servers,
        "JAVA_HOME": str(tmp_path / "no-java"),
    }
    done = subprocess.run(
        [
            cdc_sink_command(),
            "demo",
            "--remote",
            connect_server.url,
            "--events",
            "3000",
            "--workdir",
            str(workdir),
            "--metrics-port",
            "-1",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=840,
        check=False,
    )
    out = done.stdout
    assert done.returncode == 0, f"exit code {done.returncode}\n{out}\n{done.stderr[-5000:]}"
    _assert_checks(out)  # the query ended cleanly, both versions and the dead letters
    assert f"spark: the Spark Connect server at {connect_server.url}" in out
    assert "micro-batch statistics: in the Connect server's worker" in out
    assert f'SparkSession.builder.remote("{connect_server.url}")' in out.replace("'", '"')
