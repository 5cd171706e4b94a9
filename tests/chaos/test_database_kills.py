"""The whole-database job (``cdc-sink run --table-root``) SIGKILLed at random moments
while a ten-table Debezium stream arrives (tests/chaos/database_harness.py), once by
itself at a random storage fault point (most of them are reached while a batch commits
its tables, so it dies between two tables' commits): afterwards
every table equals its model, no table holds a micro-batch twice, and the records that
name no table are in the dead letters exactly once.

Each kill costs a Spark start (JVM, session, streaming query, first micro-batch), the
most of this test's time: the suite runs :data:`KILLS` of them
(``CDC_SINK_DATABASE_KILLS``, default 1: seed 48 makes it a death at a storage fault
point while the batch commits its tables; 2 adds a SIGKILL). The issue's run (50
tables, 10 kills and more, a local root and one on S3) is
``benchmarks/database_chaos.py`` (docs/benchmarks.md, "Many tables: SIGKILL").
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest

from cdc_sink_testkit.kafka import KafkaHandle
from tests.chaos.database_harness import DatabaseChaosConfig, run_database_chaos

pytestmark = [pytest.mark.integration, pytest.mark.kafka, pytest.mark.spark, pytest.mark.slow]

KILLS = int(os.environ.get("CDC_SINK_DATABASE_KILLS", "1"))


def test_random_sigkills_of_a_many_table_job_lose_and_double_nothing(
    chaos_kafka: KafkaHandle, tmp_path: Path
) -> None:
    cfg = DatabaseChaosConfig(
        bootstrap=chaos_kafka.bootstrap_servers,
        workdir=tmp_path / "chaos",
        prefix=f"dbk{uuid.uuid4().hex[:8]}",
        tables=10,
        events=1500,
        malformed=5,
        kills=KILLS,
        seed=48,
        start_kill_share=0.0,
        fault_point_share=0.5,  # seed 48: run 0 dies at a fault point, run 1 is SIGKILLed
        fault_probability=0.02,
        kill_after=(0.0, 2.0),
    )
    res = run_database_chaos(cfg)
    print(res.to_json())
    assert res.failures == [], "\n".join(res.failures)
    assert res.kills + len(res.fault_point_deaths) == KILLS, res
    assert res.rows > 0 and res.batches >= KILLS, res
    assert res.dead_letters == res.dead_letters_expected == 5, res
