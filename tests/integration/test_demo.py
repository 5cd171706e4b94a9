"""End to end in subprocesses: ``cdc-sink demo`` (local Kafka, producer, Spark streaming
job, snapshot queries at two versions, dead letters: every check must pass), and the
spark-submit entry points of ``streaming_jobs/``."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from cdc_sink_testkit.kafka import KafkaHandle
from tests.integration.streams import orders_job_args

pytestmark = [pytest.mark.integration, pytest.mark.kafka, pytest.mark.spark]

REPO = Path(__file__).resolve().parents[2]
# A phase may take more than one micro-batch (the trigger can fire while events are
# produced), so the versions checked are not always 1 and 2.
CHECKS = [
    r"check streaming query ended without error: OK",
    r"check spark snapshot at version (\d+) == expected state \(\d+ rows\): OK",
    r"check python read at version (\d+) == expected state \(\d+ rows\): OK",
    r"check spark snapshot at version (\d+) == expected state \(\d+ rows\): OK",
    r"check python read at version (\d+) == expected state \(\d+ rows\): OK",
    r"check dead letters == malformed records \(\d+\): OK",
]


def _run_demo(tmp_path: Path, *args: str) -> str:
    cmd = [
        sys.executable,
        "-m",
        "cdc_sink.cli",
        "demo",
        "--events",
        "3000",
        "--workdir",
        str(tmp_path / "demo"),
        *args,
    ]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=840, check=False)
    out = proc.stdout
    assert proc.returncode == 0, f"exit code {proc.returncode}\n{out}\n{proc.stderr[-5000:]}"
    return out


def _assert_checks(out: str) -> None:
    lines = [ln.strip() for ln in out.splitlines() if ln.startswith("check ")]
    assert len(lines) == len(CHECKS), out
    versions = []
    for want, got in zip(CHECKS, lines, strict=True):
        m = re.fullmatch(want, got)
        assert m is not None, f"{got!r} does not match {want!r}\n{out}"
        versions += [int(v) for v in m.groups()]
    v1, _, v2, _ = versions
    assert 1 <= v1 < v2
    assert "demo passed" in out


def test_demo_json_driver_mode_passes_every_check(tmp_path: Path) -> None:
    out = _run_demo(tmp_path)
    _assert_checks(out)
    assert "format json, apply mode driver" in out
    assert (tmp_path / "demo" / "orders" / "_table.json").is_file()  # kept for queries
    assert 'spark.read.format("cdc_sink").option("versionAsOf", ' in out


@pytest.mark.slow
@pytest.mark.parametrize(
    ("fmt", "mode"),
    [("rowv2", "executors"), ("debezium", "driver"), ("debezium-avro", "executors")],
)
def test_demo_other_formats_and_modes(tmp_path: Path, fmt: str, mode: str) -> None:
    out = _run_demo(tmp_path, "--format", fmt, "--apply-mode", mode)
    _assert_checks(out)
    if fmt == "debezium-avro":  # the demo started its own registry
        assert re.search(r"registry http://127\.0\.0\.1:\d+/apis/ccompat/v7 ", out), out


@pytest.mark.slow
def test_streaming_job_under_spark_submit(
    kafka: KafkaHandle, topic_name: str, tmp_path: Path
) -> None:
    """streaming_jobs/cdc_to_tablets.py as its docstring runs it (jars instead of
    --packages: no network), then again from its checkpoint, then snapshot_query.py."""
    import cdc_sink
    from cdc_sink.kafka.deadletter import ParquetDeadLetter
    from cdc_sink.kafka.producer import CdcProducer
    from cdc_sink.spark.session import local_submit_command, local_submit_env
    from cdc_sink_testkit.demo import ExpectedTable, diff_rows, generate_orders, orders_schema
    from cdc_sink_testkit.demo.stream import produce_records

    kafka.create_topic(topic_name, 3)
    records = generate_orders(1500, seed=21)
    with CdcProducer(kafka.bootstrap_servers, topic_name, orders_schema()) as producer:
        produce_records(producer, records)
    expected = ExpectedTable(orders_schema())
    expected.apply_all(r.event if r.decodable else None for r in records)

    env = local_submit_env()
    table, dlq = tmp_path / "orders", tmp_path / "dlq"
    job = [
        *local_submit_command(),
        str(REPO / "streaming_jobs" / "cdc_to_tablets.py"),
        *orders_job_args(
            kafka.bootstrap_servers,
            topic_name,
            tmp_path,
            "--trigger",
            "available-now",
            "--dead-letter",
            f"file://{dlq}",
            "--max-offsets-per-trigger",
            "600",
        ),
    ]
    first = subprocess.run(job, env=env, capture_output=True, text=True, timeout=600, check=False)
    assert first.returncode == 0, first.stdout + first.stderr[-5000:]
    assert "batch batch_id=0 result=committed version=1 " in first.stdout  # the driver's log
    version = cdc_sink.open_table(table).version
    assert version >= 3  # 1500 records at most 600 per batch
    assert (
        diff_rows(
            expected.snapshot(), cdc_sink.open_table(table).read().to_pylist(), orders_schema()
        )
        == []
    )
    assert ParquetDeadLetter(dlq).read().num_rows == sum(r.malformed for r in records)

    again = subprocess.run(
        job, env=env, capture_output=True, text=True, timeout=600, check=False
    )  # from the checkpoint: nothing new to commit
    assert again.returncode == 0, again.stdout + again.stderr[-5000:]
    assert cdc_sink.open_table(table).version == version

    submit = str(Path(sys.executable).with_name("spark-submit"))
    query = subprocess.run(
        [
            submit,
            "--master",
            "local[1]",
            "--conf",
            "spark.ui.enabled=false",
            str(REPO / "streaming_jobs" / "snapshot_query.py"),
            "--table-path",
            str(table),
            "--version",
            "1",
            "--group-by",
            "status",
            "--sum",
            "amount",
            "--sql",
            "SELECT count(*) AS n FROM t",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert query.returncode == 0, query.stdout + query.stderr[-5000:]
    rows_v1 = cdc_sink.open_table(table).read(version=1).num_rows
    assert f"at version 1 (latest {version})" in query.stdout
    assert f"rows: {rows_v1}" in query.stdout
    assert "sum_amount" in query.stdout


def test_demo_database_builds_every_table_of_the_inventory_database(tmp_path: Path) -> None:
    """``cdc-sink demo --database``: nine tables created from their messages' schemas by
    one job, each equal to the stream's reference (the demo checks; its exit code and
    table say so)."""
    cmd = [sys.executable, "-m", "cdc_sink.cli", "demo", "--database", "--events", "200"]
    cmd += ["--workdir", str(tmp_path / "demo")]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600, check=False)
    out = proc.stdout
    assert proc.returncode == 0, f"exit code {proc.returncode}\n{out}\n{proc.stderr[-5000:]}"
    assert out.count(" equal ") == 9, out
    assert "DIFFERS" not in out
    assert "OK: 9 tables" in out
    assert (tmp_path / "demo" / "tables" / "inventory.customers" / "_table.json").is_file()
