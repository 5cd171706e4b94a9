"""The dashboard proven against a real Prometheus scraping the real streaming job.

A real Kafka broker, the demo's orders workload, ``streaming_jobs/cdc_to_tablets.py``
under ``spark-submit`` with ``--metrics-port`` (both apply modes), and Debian's
``prometheus`` scraping the job every second with the alert rules loaded. Once the job
has applied every event, every query of every panel of the committed dashboard JSON,
with its template variables substituted, must return at least one series with a finite
value through Prometheus's HTTP API (a panel that returns nothing fails the test, named);
every alert rule must evaluate without error on the real series; and the counters must
agree with the table (events, dead letters, version).
"""

from __future__ import annotations

import contextlib
import math
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from cdc_sink_testkit.kafka import KafkaHandle, start_kafka
from tests.dashboards.dashboard_files import RULES, committed_dashboard
from tests.dashboards.panel_check import check_panels, wait_for
from tests.dashboards.prometheus_server import PrometheusServer, free_port
from tests.procs import descendants

pytestmark = [pytest.mark.integration, pytest.mark.kafka, pytest.mark.spark]

REPO = Path(__file__).resolve().parents[2]
MODES = ("driver", "executors")
EVENTS = 1200  # demo orders records per job (valid, stale and malformed)
PER_TRIGGER = 300  # --max-offsets-per-trigger: several micro-batches, a visible lag
# Maintenance the dashboard shows: compaction and GC every few committed batches.
MAINTENANCE = [
    "--compact-every",
    "1",
    "--gc-every",
    "2",
    "--retain-versions",
    "3",
    "--retain-seconds",
    "0",
]


@pytest.fixture(scope="module")
def kafka() -> Iterator[KafkaHandle]:
    handle = start_kafka(num_partitions=2)
    try:
        yield handle
    finally:
        handle.stop()


@pytest.fixture(scope="module")
def metrics_ports() -> dict[str, int]:
    """The ``--metrics-port`` of the job of each mode (Prometheus scrapes both)."""
    return {mode: free_port() for mode in MODES}


@pytest.fixture(scope="module")
def prometheus(
    tmp_path_factory: pytest.TempPathFactory, metrics_ports: dict[str, int]
) -> Iterator[PrometheusServer]:
    server = PrometheusServer(
        tmp_path_factory.mktemp("prometheus"),
        [f"127.0.0.1:{p}" for p in metrics_ports.values()],
        rule_files=[RULES],
        scrape_interval="1s",
    )
    with server:
        yield server


@dataclass
class _Job:
    proc: subprocess.Popen[bytes]
    log: Path

    def stop(self, timeout: float = 60.0) -> int:
        """Stops the job as an operator does: SIGTERM to its Python driver (the job stops
        its query and exits, then spark-submit's JVM exits with its code). Whatever is
        left of the process group after ``timeout`` is killed."""
        if self.proc.poll() is None:
            drivers = []
            for pid in descendants(self.proc.pid):
                try:
                    cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
                except OSError:
                    continue
                if (
                    any(arg.endswith(b"cdc_to_tablets.py") for arg in cmdline[1:])
                    and b"java" not in cmdline[0]
                ):
                    drivers.append(pid)
            for pid in drivers or [self.proc.pid]:
                os.kill(pid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=timeout)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)  # leftovers (none when all went well)
        if self.proc.poll() is None:
            self.proc.wait(timeout=30)
        return self.proc.returncode


def _start_job(
    kafka: KafkaHandle, topic: str, table: Path, workdir: Path, mode: str, port: int
) -> _Job:
    from cdc_sink.spark.session import local_submit_command, local_submit_env

    env = local_submit_env()
    cmd = [
        *local_submit_command({"spark.sql.shuffle.partitions": "2"}),
        str(REPO / "streaming_jobs" / "cdc_to_tablets.py"),
        "--bootstrap-servers",
        kafka.bootstrap_servers,
        "--topic",
        topic,
        "--table-path",
        str(table),
        "--schema-file",
        str(REPO / "streaming_jobs" / "orders_schema.json"),
        "--checkpoint",
        str(workdir / "checkpoint"),
        "--trigger",
        "1 second",
        "--apply-mode",
        mode,
        "--dead-letter",
        f"file://{workdir / 'dlq'}",
        "--max-offsets-per-trigger",
        str(PER_TRIGGER),
        "--metrics-port",
        str(port),
        *MAINTENANCE,
    ]
    log = workdir / "job.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            cmd,
            env=env,
            cwd=REPO,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    return _Job(proc, log)


def _sum(prom: PrometheusServer, expr: str) -> float | None:
    v = prom.value(f"sum({expr})")
    return None if v is None or math.isnan(v) else v


def _rule_health(prom: PrometheusServer) -> dict[str, tuple[str, str, str]]:
    """``alert name -> (health, last error, last evaluation)`` from /api/v1/rules."""
    return {
        r["name"]: (r["health"], r.get("lastError", ""), r.get("lastEvaluation", ""))
        for g in prom.api("rules")["groups"]
        for r in g["rules"]
    }


@dataclass
class _Run:
    """The job of one apply mode: its topic, workload, table, endpoint and process."""

    mode: str
    workdir: Path
    port: int
    records: list[Any]
    job: _Job | None = None

    @property
    def topic(self) -> str:
        return f"dash-{self.mode}-{os.getpid()}"

    @property
    def table_path(self) -> Path:
        return self.workdir / f"orders_{self.mode}"

    @property
    def instance(self) -> str:
        """The matcher of this job's series (Prometheus's ``instance`` label)."""
        return f'instance="127.0.0.1:{self.port}"'


def _wait_all(what: str, runs: list[_Run], fn: Callable[[_Run], bool], timeout: float) -> None:
    """Polls until ``fn`` holds for every run; fails with the log of a job that died, or
    of the first job still waiting at the timeout."""
    pending = list(runs)
    deadline = time.monotonic() + timeout
    while True:
        pending = [r for r in pending if not fn(r)]
        if not pending:
            return
        for r in pending:
            assert r.job is not None
            if r.job.proc.poll() is not None:
                pytest.fail(
                    f"the {r.mode} job exited ({r.job.proc.returncode}) before "
                    f"{what}:\n{r.job.log.read_text(errors='replace')[-6000:]}"
                )
        if time.monotonic() > deadline:
            assert pending[0].job is not None
            pytest.fail(
                f"{pending[0].mode} job: timed out after {timeout}s waiting for "
                f"{what}:\n{pending[0].job.log.read_text(errors='replace')[-6000:]}"
            )
        time.sleep(0.5)


def test_every_panel_returns_data_from_the_real_job_in_both_apply_modes(
    kafka: KafkaHandle, prometheus: PrometheusServer, metrics_ports: dict[str, int], tmp_path: Path
) -> None:
    """Both jobs run at the same time (one per apply mode, each on its own topic, table
    and metrics port); Prometheus scrapes both."""
    from cdc_sink_testkit.demo import generate_orders

    records = generate_orders(EVENTS, seed=29)
    runs = [_Run(mode, tmp_path / mode, metrics_ports[mode], records) for mode in MODES]
    producers: dict[str, Any] = {}
    started = time.time()
    try:
        _start_jobs(kafka, runs, producers)
        _wait_for_the_workload(prometheus, runs, producers)
        _assert_lag_and_gc_seen(prometheus, runs)
        app_ids = _assert_every_panel_has_data(prometheus, runs, started)
        _assert_alert_rules_evaluate(prometheus)
        scraped = _scrape_counters(prometheus, runs)
    finally:
        codes = {run.mode: run.job.stop() for run in runs if run.job is not None}
        for producer in producers.values():
            producer.close()
    for run in runs:
        assert run.job is not None
        assert codes[run.mode] == 0, run.job.log.read_text(errors="replace")[-6000:]
    assert len(set(app_ids.values())) == len(runs)
    _assert_counters_agree(runs, scraped)


def _start_jobs(kafka: KafkaHandle, runs: list[_Run], producers: dict[str, Any]) -> None:
    """Per run: its topic, a producer (into ``producers``) that sends the first half of
    the records before the job starts (a lag), and the job."""
    from cdc_sink.kafka.producer import CdcProducer
    from cdc_sink_testkit.demo import orders_schema
    from cdc_sink_testkit.demo.stream import produce_records

    for run in runs:
        run.workdir.mkdir()
        kafka.create_topic(run.topic, 2)
        producers[run.mode] = CdcProducer(kafka.bootstrap_servers, run.topic, orders_schema())
        produce_records(producers[run.mode], run.records[: len(run.records) // 2])
        producers[run.mode].flush()
        run.job = _start_job(kafka, run.topic, run.table_path, run.workdir, run.mode, run.port)


def _wait_for_the_workload(
    prometheus: PrometheusServer, runs: list[_Run], producers: dict[str, Any]
) -> None:
    """Waits for each job's first commit (then produces the second half of its records)
    and for all its events, a compaction and a GC run, as Prometheus scraped them."""
    from cdc_sink_testkit.demo.stream import produce_records

    # once a job is up, scraped, and has committed, the second half of its events
    # arrives while it works through the first
    def first_commit(r: _Run) -> bool:
        if not _sum(prometheus, f"cdc_sink_table_version{{{r.instance}}}"):
            return False
        produce_records(producers[r.mode], r.records[len(r.records) // 2 :])
        producers[r.mode].flush()
        return True

    _wait_all("a first commit scraped by Prometheus", runs, first_commit, 420)

    def caught_up(r: _Run) -> bool:
        read = _sum(prometheus, f'cdc_sink_events_total{{{r.instance}, op="all"}}')
        gc = _sum(prometheus, f"cdc_sink_gc_runs_total{{{r.instance}}}")
        compactions = _sum(prometheus, f"cdc_sink_compactions_total{{{r.instance}}}")
        return read == len(r.records) and (gc or 0) > 0 and (compactions or 0) > 0

    _wait_all(
        f"all {len(runs[0].records)} events, a compaction and a GC run in Prometheus",
        runs,
        caught_up,
        300,
    )


def _assert_lag_and_gc_seen(prometheus: PrometheusServer, runs: list[_Run]) -> None:
    """The workload did what the panels are for: a Kafka lag, files removed by GC."""
    for run in runs:
        lag = prometheus.value(
            f"max_over_time(cdc_sink_kafka_max_offsets_behind_latest{{{run.instance}}}[10m])"
        )
        removed = _sum(prometheus, f"cdc_sink_gc_removed_files_total{{{run.instance}}}")
        assert lag is not None and lag > 0, f"{run.mode} job: no Kafka lag seen ({lag})"
        assert removed is not None and removed > 0, f"{run.mode} job: GC removed nothing"


def _assert_every_panel_has_data(
    prometheus: PrometheusServer, runs: list[_Run], started: float
) -> dict[str, str]:
    """Every panel has data, for each job's table and app id; returns the app id of each
    job."""
    empty = []
    app_ids = {}
    for run in runs:
        series = prometheus.query(f"cdc_sink_table_version{{{run.instance}}}")
        assert len(series) == 1, series
        table, app_id = series[0]["metric"]["table"], series[0]["metric"]["app_id"]
        app_ids[run.mode] = app_id
        empty += [
            f"{run.mode} job: {e}"
            for e in check_panels(
                prometheus, committed_dashboard(), table, app_id, started, time.time()
            )
        ]
    assert empty == [], "panels without data:\n" + "\n".join(empty)
    return app_ids


def _assert_alert_rules_evaluate(prometheus: PrometheusServer) -> None:
    """Every alert rule's expression runs on the real series, the rules Prometheus loaded
    evaluate without error, and none fires."""
    rules = [r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]]
    for r in rules:
        prometheus.query(r["expr"])  # raises on an error

    def evaluated() -> dict[str, tuple[str, str, str]] | None:
        h = _rule_health(prometheus)
        done = all(v[2] and not v[2].startswith("0001") for v in h.values())
        return h if h and done else None

    health = wait_for("an evaluation of every alert rule", evaluated, 30)
    assert set(health) == {r["alert"] for r in rules}
    assert all(v[0] == "ok" and not v[1] for v in health.values()), health
    # healthy runs fire nothing
    firing = [a for a in prometheus.api("alerts")["alerts"] if a["state"] == "firing"]
    assert firing == []


def _scrape_counters(
    prometheus: PrometheusServer, runs: list[_Run]
) -> dict[str, dict[str, float | None]]:
    """Once each job's version gauge equals its table's version: the scraped version,
    dead letters and received events of each job."""
    import cdc_sink

    scraped: dict[str, dict[str, float | None]] = {}
    for run in runs:
        # the version gauge follows the table (a compaction after the last batch
        # commits a version too: the job's stats catch up within seconds)
        def version_agrees(r: _Run = run) -> bool | None:
            gauge = prometheus.value(f"cdc_sink_table_version{{{r.instance}}}")
            return True if gauge == cdc_sink.open_table(r.table_path).version else None

        wait_for(f"the {run.mode} job's version gauge to equal table.version", version_agrees, 30)
        scraped[run.mode] = {
            "version": prometheus.value(f"cdc_sink_table_version{{{run.instance}}}"),
            "dead_letters": _sum(prometheus, f"cdc_sink_dead_letters_total{{{run.instance}}}"),
            "received": _sum(
                prometheus, f'cdc_sink_events_total{{{run.instance}, outcome="received"}}'
            ),
        }
    return scraped


def _assert_counters_agree(runs: list[_Run], scraped: dict[str, dict[str, float | None]]) -> None:
    """The scraped counters agree with each table and its dead-letter sink."""
    import cdc_sink
    from cdc_sink.kafka.deadletter import ParquetDeadLetter

    for run in runs:
        records = run.records
        got = scraped[run.mode]
        version = cdc_sink.open_table(run.table_path).version
        dead_letters = ParquetDeadLetter(run.workdir / "dlq").read().num_rows
        malformed = sum(r.malformed for r in records)
        why = (
            f"{run.mode} job: scraped {got}; table version {version}, {dead_letters} dead "
            f"letters written, {malformed} malformed records, {len(records)} records"
        )
        assert got["version"] == version, why
        assert got["dead_letters"] == dead_letters == malformed, why
        assert got["received"] == len(records), why
