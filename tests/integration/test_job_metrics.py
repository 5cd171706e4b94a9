"""The real streaming job (spark-submit, real Kafka broker) observed from outside: its
/metrics endpoint agrees with the table, SIGTERM stops it with exit code 0, a failing
query exits non-zero with one line, a busy metrics port is refused."""

from __future__ import annotations

import logging
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from cdc_sink_testkit.kafka import KafkaHandle
from tests.cleanup import stopped_after
from tests.integration.streams import orders_job_args
from tests.procs import descendants

pytestmark = [pytest.mark.integration, pytest.mark.kafka, pytest.mark.spark]

REPO = Path(__file__).resolve().parents[2]
JOB = REPO / "streaming_jobs" / "cdc_to_tablets.py"
TRIGGER_S = 1.0


class Job:
    """The job as a child process; its output collected line by line in threads."""

    def __init__(self, args: list[str]) -> None:
        from cdc_sink.spark.session import local_submit_command, local_submit_env

        env = local_submit_env()
        cmd = [
            *local_submit_command({"spark.sql.shuffle.partitions": "2"}),
            str(JOB),
            *args,
        ]
        self.proc = subprocess.Popen(
            cmd,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
            start_new_session=True,
        )
        # spark-submit runs the Python driver with its stderr merged into its stdout, which
        # the JVM copies to its own stdout: both streams are the job's log.
        self.lines: list[str] = []
        self._readers = [
            threading.Thread(target=self._read, args=(stream, self.lines), daemon=True)
            for stream in (self.proc.stdout, self.proc.stderr)
        ]
        for t in self._readers:
            t.start()

    @staticmethod
    def _read(stream: object, into: list[str]) -> None:
        for line in stream:  # type: ignore[attr-defined]
            into.append(line.rstrip("\n"))

    @property
    def log(self) -> str:
        return "\n".join(self.lines)

    def wait_for(self, what: str, check: Callable[[], object], timeout: float) -> object:
        """Polls ``check`` (the job runs in another process) until it returns a truthy
        value; fails with the job's log when it exits or the time is up."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            got = check()
            if got:
                return got
            if self.proc.poll() is not None:
                pytest.fail(
                    f"job exited ({self.proc.returncode}) before {what}:\n{self.log[-6000:]}"
                )
            time.sleep(0.2)
        pytest.fail(f"timed out waiting for {what}:\n{self.log[-6000:]}")

    def metrics_url(self) -> str:
        def find() -> str | None:
            for ln in self.lines:
                m = re.search(r"metrics on (http://127\.0\.0\.1:\d+/metrics)", ln)
                if m:
                    return m.group(1)
            return None

        return str(self.wait_for("the metrics endpoint", find, 300))

    def driver_pid(self) -> int:
        """The Python driver: spark-submit's JVM runs the job as its child process."""
        family = [self.proc.pid, *descendants(self.proc.pid)]
        drivers = []
        for pid in family:
            try:
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if b"java" not in cmdline[0] and any(
                a.endswith(b"cdc_to_tablets.py") for a in cmdline[1:]
            ):
                drivers.append(pid)
        assert len(drivers) == 1, (family, drivers)
        return drivers[0]

    def finish(self, timeout: float) -> int:
        rc = self.proc.wait(timeout=timeout)
        for t in self._readers:
            t.join(timeout=10)
        return rc

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)


@pytest.fixture
def jobs() -> Iterator[list[Job]]:
    """Jobs the test starts; every one is killed after it."""
    yield from stopped_after(Job.kill)


def scrape(url: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    with urllib.request.urlopen(url, timeout=10) as resp:
        text = resp.read().decode()
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
    }


def total(
    samples: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str, **labels: str
) -> float:
    want = set(labels.items())
    return sum(v for (n, ls), v in samples.items() if n == name and want <= ls)


def produce(kafka: KafkaHandle, topic: str, n: int, seed: int) -> list[object]:
    from cdc_sink.kafka.producer import CdcProducer
    from cdc_sink_testkit.demo import generate_orders, orders_schema
    from cdc_sink_testkit.demo.stream import produce_records

    records = generate_orders(n, seed=seed)
    with CdcProducer(kafka.bootstrap_servers, topic, orders_schema()) as producer:
        produce_records(producer, records)
    return list(records)


def job_args(kafka: KafkaHandle, topic: str, tmp_path: Path, *extra: str) -> list[str]:
    return orders_job_args(
        kafka.bootstrap_servers,
        topic,
        tmp_path,
        "--trigger",
        f"{TRIGGER_S} second",
        "--metrics-port",
        "0",
        "--table-name",
        "orders",
        *extra,
    )


def test_metrics_agree_with_the_table_and_sigterm_exits_zero(
    kafka: KafkaHandle, topic_name: str, tmp_path: Path, jobs: list[Job]
) -> None:
    import cdc_sink

    kafka.create_topic(topic_name, 2)
    records = produce(kafka, topic_name, 1200, seed=5)
    malformed = sum(r.malformed for r in records)  # type: ignore[attr-defined]
    assert malformed > 0
    job = Job(
        job_args(
            kafka,
            topic_name,
            tmp_path,
            "--max-offsets-per-trigger",
            "400",
            "--app-id",
            "metrics-test",
            "--compact-every",
            "2",
            "--gc-every",
            "2",
            "--retain-versions",
            "2",
            "--retain-seconds",
            "0",
        )
    )
    jobs.append(job)
    url = job.metrics_url()
    read = lambda: total(scrape(url), "cdc_sink_events_total", op="all")  # noqa: E731
    job.wait_for(f"{len(records)} events counted", lambda: read() >= len(records), 300)
    # Spark's listener bus delivers the progress of the last batch a little later: the
    # lag gauge then says the query caught up.
    job.wait_for(
        "the Kafka lag gauge at 0",
        lambda: (
            (
                "cdc_sink_kafka_max_offsets_behind_latest",
                frozenset({"table": "orders", "app_id": "metrics-test"}.items()),
            )
            in scrape(url)
            and total(scrape(url), "cdc_sink_kafka_max_offsets_behind_latest") == 0
        ),
        60,
    )
    live = cdc_sink.open_table(tmp_path / "orders").read(columns=["order_id"]).num_rows

    # The version gauge follows every batch; the other table gauges catch up within 5 s.
    def gauges_caught_up() -> bool:
        s = scrape(url)
        version = cdc_sink.open_table(tmp_path / "orders").version
        return (
            total(s, "cdc_sink_table_version") == version
            and total(s, "cdc_sink_table_live_rows") == live
        )

    job.wait_for("the table gauges", gauges_caught_up, 60)
    s = scrape(url)
    table = cdc_sink.open_table(tmp_path / "orders")

    outcomes = {
        o: total(s, "cdc_sink_events_total", op="all", outcome=o)
        for o in ("applied", "stale", "ignored", "rejected")
    }
    assert sum(outcomes.values()) == len(records), outcomes
    assert total(s, "cdc_sink_events_total", outcome="received") == len(records)
    assert outcomes["rejected"] == malformed
    assert total(s, "cdc_sink_dead_letters_total") == malformed
    assert total(s, "cdc_sink_dead_letters_total", reason="other") == 0
    committed = total(s, "cdc_sink_batches_total", result="committed")
    assert committed >= 3  # 1200 records, at most 400 per batch
    assert total(s, "cdc_sink_batch_duration_seconds_count") == committed
    assert total(s, "cdc_sink_batch_phase_seconds_count", phase="read") == committed
    assert total(s, "cdc_sink_batch_events_sum") == len(records)
    assert total(s, "cdc_sink_freshness_seconds_count") > 0
    assert total(s, "cdc_sink_last_commit_timestamp_seconds") > time.time() - 300
    assert total(s, "cdc_sink_table_version") == table.version
    assert total(s, "cdc_sink_table_oldest_version") == table.oldest_version
    assert total(s, "cdc_sink_table_live_rows") == table.read(columns=["order_id"]).num_rows == live
    assert total(s, "cdc_sink_table_memory_bytes") > 0
    # With --compact-every 2 --gc-every 2 --retain-versions 2 a run that ends on a
    # compaction + GC has no segment left (the snapshot covers them all): WAL bytes may be
    # 0 then, but the retained snapshot never is.
    assert "cdc_sink_table_wal_bytes" in {n for n, _ in s}
    assert total(s, "cdc_sink_table_snapshot_bytes") > 0
    assert total(s, "cdc_sink_compactions_total") >= 1
    assert total(s, "cdc_sink_gc_runs_total", result="ok") >= 1
    assert total(s, "cdc_sink_gc_runs_total", result="failed") == 0
    assert total(s, "cdc_sink_kafka_avg_offsets_behind_latest") == 0  # caught up
    assert "cdc_sink_kafka_input_rows_per_second" in {n for n, _ in s}
    assert re.search(
        r"batch batch_id=0 result=committed version=1 events=\d+ rejects=\d+ "
        r".*read_s=\S+ .*total_s=\S+ freshness_p50_ms=\d+ freshness_p99_ms=\d+",
        job.log,
    ), job.log[-4000:]
    assert re.search(r"compaction version=\d+ duration_s=", job.log)
    assert re.search(r"gc removed_files=\d+ removed_bytes=\d+", job.log)

    driver = job.driver_pid()
    t0 = time.monotonic()
    os.kill(driver, signal.SIGTERM)  # as an operator stops it: the Python driver
    rc = job.finish(timeout=60)
    elapsed = time.monotonic() - t0
    logging.getLogger(__name__).info("SIGTERM to exit: %.2fs", elapsed)
    assert rc == 0, job.log[-6000:]
    assert "Traceback" not in job.log, job.log[-6000:]
    assert re.search(r"stopped after \S+s at table version \d+", job.log)
    # The trigger interval plus one batch, plus Spark's own shutdown.
    assert elapsed < TRIGGER_S + 15, f"SIGTERM took {elapsed:.1f}s"


def test_failing_query_exits_non_zero_with_one_line(
    kafka: KafkaHandle, topic_name: str, tmp_path: Path, jobs: list[Job]
) -> None:
    kafka.create_topic(topic_name, 1)
    produce(kafka, topic_name, 50, seed=6)
    job = Job(job_args(kafka, topic_name, tmp_path))
    jobs.append(job)
    url = job.metrics_url()
    job.wait_for(
        "the first commit",
        lambda: total(scrape(url), "cdc_sink_batches_total", result="committed") >= 1,
        300,
    )
    # The table's WAL directory becomes a file: the next batch cannot write its segment.
    wal = tmp_path / "orders" / "_wal"
    wal.rename(tmp_path / "wal.moved")
    wal.write_text("not a directory")
    produce(kafka, topic_name, 50, seed=7)
    rc = job.finish(timeout=120)
    assert rc == 1, job.log[-6000:]
    failed = [ln for ln in job.lines if ln.startswith("cdc_to_tablets: failed: ")]
    assert len(failed) == 1, job.log[-6000:]
    assert re.fullmatch(r"cdc_to_tablets: failed: \w+Error: .+", failed[0]), failed[0]
    assert "StreamingQueryException" not in failed[0]
    assert not any(ln.startswith("pyspark.errors.exceptions") for ln in job.lines)
    assert re.search(r"batch batch_id=\d+ result=failed", job.log), job.log[-6000:]


def test_busy_metrics_port_is_refused_naming_it(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        port = s.getsockname()[1]
        proc = subprocess.run(
            [
                sys.executable,
                str(JOB),
                "--bootstrap-servers",
                "127.0.0.1:1",
                "--topic",
                "t",
                "--table-path",
                str(tmp_path / "t"),
                "--metrics-port",
                str(port),
            ],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1] == (
        f"cdc_to_tablets: error: metrics port {port} on 127.0.0.1 is already in use "
        "(choose another --metrics-port, or 0 for a free one)"
    )
