"""The streaming job on a real multi-worker Spark cluster (issue 40).

A Spark standalone cluster of a master and two workers (one core each), the job
(``cdc-sink run``) in executors mode against it, the table on the session's S3 server
(``s3://``, SeaweedFS) and Spark's checkpoint on the same server through Hadoop's S3A
(``s3a://``). The orders stream (inserts, partial updates, deletes, stale re-sends and
malformed records) goes to a two-partition topic a chunk at a time, each chunk produced
just before the next fault, so that the job has a backlog whenever something fails:

1. after the job committed two micro-batches, worker 0 is SIGKILLed with its executor
   and that executor's Python workers (a machine lost mid-stream); the job commits on
   with worker 1 alone;
2. worker 0 is started again, the master gives the job a new executor there, and worker
   0 is SIGKILLed again while that executor runs its first task (the driver's REST API
   tells; a first task starts Python and opens tablets cold, so it is still running
   when the kill lands): the driver counts the task lost and runs it again on worker 1,
   and the job commits on;
3. worker 0 is started again and the job commits on two workers; then the driver's
   whole process group (the job's Python, its JVM, its Python workers) is SIGKILLed,
   and the job is started again from its checkpoint on S3 with
   ``--trigger available-now``, which drains the topic and ends.

Then, from the topic alone (every record consumed back and applied to the reference
model partition by partition, a key living on one partition): the table read back
through cdc_sink equals the model, its micro-batches are each committed once and their
counters add up to the model's outcomes (a batch applied twice or lost cannot pass), the
last batch ends at the topic's end, and the Parquet dead letters are exactly the records
the model rejects, each once with its Kafka coordinates.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from cdc_sink_testkit.cluster import StandaloneCluster
from cdc_sink_testkit.kafka import KafkaHandle
from cdc_sink_testkit.kafka.probes import free_port
from cdc_sink_testkit.s3 import SeaweedS3
from tests.chaos.harness import consume_topic
from tests.integration.streams import cdc_sink_command, job_process_env, orders_job_args

pytestmark = [pytest.mark.integration, pytest.mark.kafka, pytest.mark.spark]

EVENTS = 3000  # records the stream may need (what is produced is checked)
CHUNK = 300  # records produced at each step of the test
MAX_OFFSETS = 150  # records per micro-batch: a chunk is 2 batches
PHASE_TIMEOUT = 150.0  # seconds one phase may take to commit what it waits for


def test_executors_mode_on_a_cluster_rides_through_a_lost_worker_and_a_killed_driver(
    cluster: StandaloneCluster,
    cluster_kafka: KafkaHandle,
    s3_server: SeaweedS3,
    tmp_path: Path,
) -> None:
    from cdc_sink.kafka.admin import create_topic
    from cdc_sink.kafka.producer import CdcProducer
    from cdc_sink_testkit.demo import generate_orders, orders_schema
    from cdc_sink_testkit.demo.stream import produce_records

    t0 = time.monotonic()
    name = f"cluster-{uuid.uuid4().hex[:8]}"
    storage = s3_server.storage_options()
    url = s3_server.url(f"{name}/orders")
    checkpoint = f"s3a://{s3_server.first_bucket}/{name}/checkpoint"
    bootstrap = cluster_kafka.bootstrap_servers
    create_topic(bootstrap, name, 2)
    records = generate_orders(EVENTS, seed=40, malformed_rate=0.02)
    chunks = (records[i : i + CHUNK] for i in range(0, EVENTS, CHUNK))
    produced: list[int] = []
    job_cmd = _job_command(cluster, bootstrap, name, url, checkpoint, storage, tmp_path)
    ui_port = free_port("127.0.0.1")
    env = _job_env(cluster, storage, tmp_path, ui_port)
    phases: dict[str, float] = {}

    with CdcProducer(bootstrap, name, orders_schema()) as producer:

        def feed() -> None:  # the next chunk of the stream: a backlog of 2 batches
            chunk = next(chunks)
            produce_records(producer, chunk)
            producer.flush()
            produced.append(len(chunk))

        feed()
        feed()
        first_log = tmp_path / "job-1.log"
        job = _spawn(job_cmd, env, first_log)
        try:
            version = _wait_for_version(url, storage, 2, job, first_log)
            phases["first commits"] = time.monotonic() - t0
            feed()
            cluster.kill_worker(0)  # warm, between or in tasks: a machine lost mid-stream
            version = _wait_for_version(url, storage, version + 2, job, first_log)
            phases["commits on one worker"] = time.monotonic() - t0
            known = {p.name for p in (cluster.worker_dir(0) / "work").glob("app-*/*")}
            cluster.start_worker(0)
            lost_tasks = _kill_worker_in_its_first_task(
                cluster, 0, ui_port, known, feed, job, first_log
            )
            version = _wait_for_version(url, storage, version + 2, job, first_log)
            phases["lost in a task, commits on one worker"] = time.monotonic() - t0
            feed()
            cluster.start_worker(0)
            _wait_for_version(url, storage, version + 2, job, first_log)
            phases["commits after worker 0's return"] = time.monotonic() - t0
            feed()  # left for the restarted job
        finally:
            _kill_group(job)
    first_output = first_log.read_text(errors="replace")
    assert first_output.count("Lost executor") == 2, first_output[-5000:]  # the driver saw
    # the tasks its executor was running lost with worker 0 (and, every batch being
    # committed once below, run again on the other executor)
    assert lost_tasks > 0, first_output[-5000:]

    final_log = tmp_path / "job-2.log"
    final = _spawn([*job_cmd, "--trigger", "available-now"], env, final_log)
    try:
        code = final.wait(timeout=PHASE_TIMEOUT)
    finally:
        _kill_group(final)
    final_output = final_log.read_text(errors="replace")
    assert code == 0, final_output[-5000:]
    phases["drained"] = time.monotonic() - t0
    for output in (first_output, final_output):
        assert storage["secret_access_key"] not in output

    _check_against_the_topic(
        bootstrap, name, sum(produced), url, storage, tmp_path / "dead-letters"
    )
    print({k: round(v, 1) for k, v in phases.items()}, f"lost tasks {lost_tasks}")


# -- the job ----------------------------------------------------------------------------


def _job_command(
    cluster: StandaloneCluster,
    bootstrap: str,
    topic: str,
    url: str,
    checkpoint: str,
    storage: dict[str, str],
    workdir: Path,
) -> list[str]:
    """``cdc-sink run`` in executors mode on the cluster: the table on S3, the
    checkpoint on S3A, the store's options without its keys, Parquet dead letters in
    ``workdir/dead-letters``."""
    args = orders_job_args(bootstrap, topic, workdir)
    args[args.index("--table-path") + 1] = url
    args[args.index("--checkpoint") + 1] = checkpoint
    for key in ("endpoint", "region", "allow_http"):
        args += ["--storage-option", f"{key}={storage[key]}"]
    return [
        cdc_sink_command(),
        "run",
        *args,
        "--master",
        cluster.url,
        "--apply-mode",
        "executors",
        "--dead-letter",
        f"file://{workdir / 'dead-letters'}",
        "--max-offsets-per-trigger",
        str(MAX_OFFSETS),
        "--gc-every",
        "0",  # every version stays: the counters of each batch are checked
        "--spark-log-level",
        "WARN",
    ]


def _job_env(
    cluster: StandaloneCluster, storage: dict[str, str], workdir: Path, ui_port: int
) -> dict[str, str]:
    """The job's environment: the keys in ``AWS_*`` (obstore and S3A read them there),
    the application's cluster settings in a ``spark-defaults.conf`` of its own (the
    driver's UI on ``ui_port``, for its REST API)."""
    conf_dir = workdir / "spark-conf"
    conf_dir.mkdir()
    conf = cluster.app_conf(
        extra={
            "spark.ui.port": str(ui_port),
            "spark.port.maxRetries": "0",  # that port or none: the test reads it
            "spark.ui.showConsoleProgress": "false",
            "spark.sql.shuffle.partitions": "2",
            # a task goes to a free executor at once: the restarted worker's new
            # executor gets work without the locality wait
            "spark.locality.wait": "0",
        }
    )
    conf.pop("spark.master")  # --master
    (conf_dir / "spark-defaults.conf").write_text("".join(f"{k} {v}\n" for k, v in conf.items()))
    env = job_process_env("AWS_")
    env.update(
        AWS_ACCESS_KEY_ID=storage["access_key_id"],
        AWS_SECRET_ACCESS_KEY=storage["secret_access_key"],
        SPARK_CONF_DIR=str(conf_dir),
        SPARK_LOCAL_IP="127.0.0.1",
        PYSPARK_PYTHON=sys.executable,
        PYSPARK_DRIVER_PYTHON=sys.executable,
    )
    return env


def _spawn(cmd: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    """The job in a process group of its own, its output in ``log``."""
    with open(log, "wb") as out:
        return subprocess.Popen(
            cmd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL of the job's process group: its Python, its JVM, its Python workers."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)


def _kill_worker_in_its_first_task(
    cluster: StandaloneCluster,
    i: int,
    ui_port: int,
    known: set[str],
    feed: Callable[[], None],
    job: subprocess.Popen[bytes],
    log: Path,
) -> int:
    """SIGKILLs worker ``i`` while the job's new executor there (none of ``known``) runs
    its first task, as the driver's REST API tells: a first task starts the executor's
    Python workers and opens its buckets' tablets cold, so it is still running when the
    kill lands (later tasks may end within the driver's view's lag). ``feed()`` makes
    the work once the executor has registered. Returns how many tasks the driver then
    counts as failed."""
    api = f"http://127.0.0.1:{ui_port}/api/v1/applications"
    app = _poll(lambda: _only(_get_json(api))["id"], job, log, "application")
    work = cluster.worker_dir(i) / "work"
    executor = _poll(
        lambda: _only([p.name for p in work.glob("app-*/*") if p.name not in known]),
        job,
        log,
        f"executor on worker {i}",
    )
    (before,) = _poll(lambda: (_failed_tasks(api, app),), job, log, "stages")

    def active_tasks() -> int | None:
        """The executor's running tasks (None: not registered with the driver yet)."""
        states = [e for e in _get_json(f"{api}/{app}/executors") if e["id"] == executor]
        return int(states[0]["activeTasks"]) if states else None

    _poll(lambda: active_tasks() is not None, job, log, f"executor {executor} registered")
    feed()
    _poll(lambda: active_tasks(), job, log, f"task on executor {executor}", interval=0.05)
    cluster.kill_worker(i)
    return int(_poll(lambda: _failed_tasks(api, app) - before, job, log, "lost task"))


def _failed_tasks(api: str, app: str) -> int:
    """Tasks the driver counts as failed, over every stage of application ``app``."""
    return sum(int(s["numFailedTasks"]) for s in _get_json(f"{api}/{app}/stages"))


def _only(items: list[Any]) -> Any:
    (item,) = items
    return item


def _poll(
    probe: Callable[[], Any],
    job: subprocess.Popen[bytes],
    log: Path,
    what: str,
    *,
    timeout: float = PHASE_TIMEOUT,
    interval: float = 0.2,
) -> Any:
    """``probe()``'s first truthy result (OSError, ValueError, LookupError: not yet)."""
    deadline = time.monotonic() + timeout
    while True:
        with contextlib.suppress(OSError, ValueError, LookupError):
            got = probe()
            if got:
                return got
        assert job.poll() is None, f"the job exited:\n{_tail(log)}"
        assert time.monotonic() < deadline, f"no {what} within {timeout}s:\n{_tail(log)}"
        time.sleep(interval)


def _get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=5) as r:
        return json.loads(r.read())


def _wait_for_version(
    url: str,
    storage: dict[str, str],
    minimum: int,
    job: subprocess.Popen[bytes],
    log: Path,
) -> int:
    """The table's version once it is at least ``minimum`` (the job must keep running)."""
    from cdc_sink.errors import CdcSinkError
    from cdc_sink.table import Table, open_table

    deadline = time.monotonic() + PHASE_TIMEOUT
    table: Table | None = None
    version = -1
    while True:
        if table is None:
            with contextlib.suppress(CdcSinkError):  # the job has not created it yet
                table = open_table(url, storage_options=storage)
        if table is not None:
            version = table.version  # the log's latest entry, read again
        if version >= minimum:
            return version
        code = job.poll()
        assert code is None, f"the job exited with {code}:\n{_tail(log)}"
        assert time.monotonic() < deadline, (
            f"version {version} after {PHASE_TIMEOUT}s, waiting for {minimum}:\n{_tail(log)}"
        )
        time.sleep(0.5)  # the poll interval


def _tail(log: Path) -> str:
    return log.read_text(errors="replace")[-5000:]


# -- the checks -------------------------------------------------------------------------


def _check_against_the_topic(
    bootstrap: str,
    topic: str,
    produced: int,
    url: str,
    storage: dict[str, str],
    dead_letters: Path,
) -> None:
    """The table, its batches and the dead letters against the model of the topic (of
    ``produced`` records)."""
    from cdc_sink.kafka.deadletter import ParquetDeadLetter
    from cdc_sink.table import open_table
    from cdc_sink_testkit.demo import ExpectedTable, diff_rows, orders_schema

    model = ExpectedTable(orders_schema())
    outcomes: Counter[str] = Counter()
    rejected: list[tuple[str, int, int]] = []
    ends: dict[int, int] = {}
    for partition, recs in sorted(consume_topic(bootstrap, topic).items()):
        for r in recs:
            outcome = model.apply(r.event)
            outcomes[outcome] += 1
            if outcome == "rejected":
                rejected.append((topic, partition, r.offset))
        ends[partition] = recs[-1].offset + 1 if recs else 0
    assert sum(outcomes.values()) == produced
    assert outcomes["rejected"] > 0 and outcomes["deleted"] > 0 and outcomes["updated"] > 0

    table = open_table(url, storage_options=storage)
    assert diff_rows(model.snapshot(), table.read().to_pylist(), orders_schema()) == []

    batches = [e for e in table.log.entries(from_version=0) if e.kind == "data"]
    ids = [e.batch_id for e in batches]
    assert ids == sorted(set(ids)), f"a batch committed twice or out of order: {ids}"
    applied = Counter[str]()
    for e in batches:
        applied.update(
            {k: v for k, v in e.stats.items() if k in ("inserted", "updated", "deleted")}
        )
    assert applied == Counter(
        {k: outcomes[k] for k in ("inserted", "updated", "deleted") if outcomes[k]}
    )
    last: dict[str, Any] = {}
    for e in batches:  # a batch names the partitions it read
        last.update(e.source_offsets[topic])
    assert {int(p): int(o) for p, o in last.items()} == ends

    dl = ParquetDeadLetter(dead_letters).read(deduplicate=False)
    got = Counter(
        zip(
            dl.column("topic").to_pylist(),
            dl.column("partition").to_pylist(),
            dl.column("offset").to_pylist(),
            strict=True,
        )
    )
    assert got == Counter(rejected), "dead letters differ from the rejected records"
