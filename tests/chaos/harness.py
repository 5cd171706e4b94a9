"""The stream-level chaos run: the real streaming job, killed at random, checked against
a reference model fed from the topic itself.

One run (:func:`run_chaos`)::

    producer thread   orders events (valid, stale and malformed) -> topic (P partitions)
    reader process    tests/chaos/reader.py: reads the latest and a random older version
                      over and over, logging a digest of each read
    job process       streaming_jobs/cdc_to_tablets.py under spark-submit, with
                      --apply-mode driver|executors, a Parquet dead-letter directory,
                      compaction and GC every few batches; SIGKILLed (its whole process
                      group: spark-submit, the JVM, the Python workers) at a random
                      moment after it committed, then started again from its checkpoint;
                      some runs may instead die at random storage fault points
                      (CDC_SINK_CRASH_RANDOM in its environment)
    fault runs        environmental faults while the job runs (each optional):
                      broker bounces  the broker SIGKILLed and restarted on the same data
                                      directory and port, N times in one run of the job
                      ENOSPC          the table on its own small tmpfs, filled up by a
                                      ballast file after the job committed; then grown
                      EIO on fsync    fsync_eio.c preloaded (LD_PRELOAD) into the job:
                                      the N-th fsync under the table path fails and the
                                      file loses its unsynced data
                      the job must ride through (commit again) or exit non-zero with a
                      one-line reason naming the fault; the next run, without the
                      fault, must commit again (``resume_seconds``)
    final run         the job with --trigger available-now, until it has caught up (or
                      the job that rode through the last broker bounce, until it has)

Then, from the topic alone (every record consumed back, decoded as the job decodes
native JSON, applied to :class:`~cdc_sink_testkit.demo.ExpectedTable` in offset order per
partition -- a key always lives on one partition), :func:`verify` checks:

* every retained version reads exactly the model at its log entry's ``source_offsets``
  (the batch's Kafka end offsets), and the latest version is the model of the whole
  topic;
* batch ids and offsets only move forward, and each version's counters equal the
  model's outcome counts over the records between its offsets and the previous
  version's (a batch applied twice, or a lost one, cannot pass this);
* the dead letters are exactly the records the model rejects, each once;
* the reader saw one digest per version (repeatable reads), the model's digest for
  every version still retained, and no read error other than "not retained".
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import re
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from cdc_sink.table import Table

REPO = Path(__file__).resolve().parents[2]
JOB = REPO / "streaming_jobs" / "cdc_to_tablets.py"
SCHEMA_FILE = REPO / "streaming_jobs" / "orders_schema.json"
READER = Path(__file__).with_name("reader.py")


@dataclass
class ChaosConfig:
    """What one chaos run does.

    Attributes:
        bootstrap: Kafka bootstrap servers.
        topic: The topic (created by the run).
        workdir: Where the table, checkpoint, dead letters and logs go.
        apply_mode: ``driver`` or ``executors``.
        partitions: Partitions of the topic.
        events: Records produced over the run.
        kills: Random SIGKILLs of the job.
        fault_point_runs: Of the kills, how many are left to random storage fault
            points instead (the job dies by itself, CDC_SINK_CRASH_RANDOM).
        seed: Seeds the records and every random choice.
        malformed_rate: Share of malformed records.
        max_offsets: Records per micro-batch at most.
        kill_after: Seconds after the job's first commit of a run within which the
            SIGKILL falls (uniform).
        compact_every: Compact every N batches (0: never).
        gc_every: GC every N batches (0: never).
        retain_versions: GC keeps the newest N versions.
        produce_seconds: Roughly how long producing all records takes.
        run_timeout: Seconds a killed run may take to commit before it is killed anyway.
        final_timeout: Seconds the final available-now run may take.
        broker: The broker, for ``broker_bounces``: an object with ``kill()`` and
            ``restart()`` (:class:`~cdc_sink_testkit.kafka.broker.LocalKafka`).
        broker_bounces: In one run of the job, SIGKILL the broker and restart it (same
            data directory and port) this many times, each after the job committed.
        broker_down: Seconds the broker stays down (uniform).
        enospc_runs: Runs of the job during which the table's file system fills up (the
            table lives on a tmpfs of ``table_fs_mb``; a ballast file takes the free
            space after the job committed; afterwards the tmpfs grows by
            ``table_fs_mb``).
        table_fs_mb: Size of the table's tmpfs (with ``enospc_runs``).
        eio_runs: Runs of the job with ``fsync_eio.so`` preloaded: the N-th fsync under
            the table path (N uniform in ``eio_at``) fails with EIO and drops the
            file's unsynced data; the next run has no fault.
        eio_at: Range of N.
        eio_cmdline: Only processes whose command line contains this count and fail
            (``pyspark.daemon``: the Python workers of executors mode); empty: all.
        fault_timeout: Seconds a fault run waits for the job to fail or commit again.
        dead_letter: ``parquet`` (a directory in ``workdir``) or ``kafka`` (the topic
            ``<topic>.dead-letter`` on the same broker, written transactionally).
        json_decoder: ``python`` or ``jvm`` (the job's ``--json-decoder``).
        fault_points: After the killed runs, one run per name that dies at that storage
            fault point on purpose (``CDC_SINK_CRASH_AT=<name>:<n>``, ``n`` uniform in
            ``fault_point_hit``); a point the job does not reach within
            ``fault_timeout`` of its start is reported in ``fault_points_missed``.
        fault_point_hit: Range of ``n``.
        produce_rate: Records per second produced while a job runs, instead of
            spreading the records over ``produce_seconds`` (the producer pauses between
            runs, so every run has new records however long restarts take; records
            left when the runs are over are not produced). Not with environmental
            fault runs.
        driver_java_options: Extra JVM options of the Spark driver (e.g. C1-only JIT
            for quicker restarts).
        kills_seconds: No killed run starts after this many seconds of the run (None:
            all ``kills`` of them run); the fault point runs come first.
        final_max_offsets: Records per micro-batch of the final available-now run (None:
            ``max_offsets``); a long run leaves a backlog that small batches would take
            long to drain.
        cds_archive: A class-data-sharing archive for the driver JVM (built by a first,
            uncounted available-now run when the file is missing; see
            benchmarks/restart_cds.py): restarts cost about a third less CPU.
        table_url: The table on an object store (``s3://…``) instead of a directory of
            ``workdir``; the job, the reader process and the checks open it with
            ``storage_options``. The job gets the endpoint and region as
            ``--storage-option`` flags and the keys from ``AWS_*`` variables.
        storage_options: The object store's options (with ``table_url``).
    """

    bootstrap: str
    topic: str
    workdir: Path
    apply_mode: str = "driver"
    partitions: int = 3
    events: int = 3000
    kills: int = 3
    fault_point_runs: int = 0
    seed: int = 1
    malformed_rate: float = 0.02
    max_offsets: int = 200
    kill_after: tuple[float, float] = (0.0, 4.0)
    compact_every: int = 5
    gc_every: int = 3
    retain_versions: int = 30
    produce_seconds: float = 30.0
    run_timeout: float = 240.0
    final_timeout: float = 900.0
    broker: Any = None
    broker_bounces: int = 0
    broker_down: tuple[float, float] = (1.0, 6.0)
    enospc_runs: int = 0
    table_fs_mb: int = 32
    eio_runs: int = 0
    eio_at: tuple[int, int] = (10, 60)
    eio_cmdline: str = ""
    fault_timeout: float = 180.0
    dead_letter: str = "parquet"
    json_decoder: str = "python"
    fault_points: tuple[str, ...] = ()
    fault_point_hit: tuple[int, int] = (1, 2)
    produce_rate: float | None = None
    driver_java_options: str = ""
    kills_seconds: float | None = None
    cds_archive: str = ""
    final_max_offsets: int | None = None
    table_url: str = ""
    storage_options: dict[str, str] = field(default_factory=dict)

    @property
    def table(self) -> Path:
        """The table's directory (on its own tmpfs with ``enospc_runs``)."""
        return self.workdir / "fs" / "table" if self.enospc_runs else self.workdir / "table"

    @property
    def location(self) -> str:
        """Where the table is: its URL, or its directory."""
        return self.table_url or str(self.table)

    def open_table(self) -> Table:
        """The table, opened as a new reader would."""
        from cdc_sink.table import open_table

        return open_table(self.location, storage_options=self.storage_options or None)

    @property
    def dead_letter_uri(self) -> str:
        """The job's ``--dead-letter`` URI."""
        if self.dead_letter == "kafka":
            return f"kafka://{self.bootstrap}/{self.topic}.dead-letter"
        if self.dead_letter == "parquet":
            return f"file://{self.workdir / 'dead-letters'}"
        raise ValueError(f"dead_letter {self.dead_letter!r}: expected parquet or kafka")


@dataclass
class ChaosResult:
    """What a run did and what :func:`verify` found (``failures`` empty: it passed).

    ``faults`` has one entry per injected fault (broker bounce, full disk, fsync
    error): ``fault``, ``run``, ``outcome`` (``rode through`` or ``failed``), ``exit``
    and ``reason`` (the job's one-line reason) when it failed, ``table_version`` when the
    fault struck, and ``resume_seconds``: from the restart of the job (or, when it rode
    through a broker bounce, from the broker's return) to its next commit.
    """

    kills: int = 0
    fault_point_deaths: int = 0
    fault_points_hit: list[str] = field(default_factory=list)
    fault_points_missed: list[str] = field(default_factory=list)
    other_exits: list[int] = field(default_factory=list)
    events: int = 0
    malformed: int = 0
    versions: int = 0
    versions_checked: int = 0
    batches: int = 0
    rows: int = 0
    lost_or_wrong_rows: int = 0
    duplicated_batches: int = 0
    dead_letters: int = 0
    dead_letters_expected: int = 0
    dead_letters_missing: int = 0
    dead_letters_duplicated: int = 0
    dead_letters_unexpected: int = 0
    reads: int = 0
    read_versions: int = 0
    repeatable_read_violations: int = 0
    faults: list[dict[str, Any]] = field(default_factory=list)
    wall_seconds: float = 0.0
    failures: list[str] = field(default_factory=list)

    def to_json(self) -> str:
        """The result as one JSON object."""
        return json.dumps(asdict(self), sort_keys=True)


# ---------------------------------------------------------------------- processes


def job_env(cfg: ChaosConfig | None = None) -> dict[str, str]:
    """The environment of a job process: no crash injection inherited, this interpreter
    for PySpark, Spark bound to 127.0.0.1, the repository importable; for a table on an
    object store, its keys (``AWS_*``) and, for the reader, its options as JSON."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CDC_SINK_CRASH")}
    env.update(
        PYSPARK_PYTHON=sys.executable,
        PYSPARK_DRIVER_PYTHON=sys.executable,
        SPARK_LOCAL_IP="127.0.0.1",
        PYTHONPATH=str(REPO),
    )
    if cfg is not None and cfg.storage_options:
        so = cfg.storage_options
        env.update(
            AWS_ACCESS_KEY_ID=so["access_key_id"],
            AWS_SECRET_ACCESS_KEY=so["secret_access_key"],
            CHAOS_STORAGE_OPTIONS=json.dumps(so),
        )
    return env


def _storage_flags(cfg: ChaosConfig) -> list[str]:
    """The job's ``--storage-option`` flags: what is not a secret (keys come from the
    environment)."""
    secret = ("access_key_id", "secret_access_key", "session_token")
    return [
        arg
        for k, v in cfg.storage_options.items()
        if k not in secret
        for arg in ("--storage-option", f"{k}={v}")
    ]


def job_command(cfg: ChaosConfig, *, available_now: bool) -> list[str]:
    """The spark-submit command line of the streaming job."""
    from cdc_sink.spark.session import local_submit_command

    w = cfg.workdir
    java_options = cfg.driver_java_options
    if cfg.cds_archive:
        flag = "SharedArchiveFile" if os.path.exists(cfg.cds_archive) else "ArchiveClassesAtExit"
        java_options = f"{java_options} -XX:{flag}={cfg.cds_archive}".strip()
    jvm = ["--driver-java-options", java_options] if java_options else []
    return [
        *local_submit_command({"spark.sql.shuffle.partitions": "4"}),
        *jvm,
        str(JOB),
        "--bootstrap-servers",
        cfg.bootstrap,
        "--topic",
        cfg.topic,
        "--table-path",
        cfg.location,
        *_storage_flags(cfg),
        "--schema-file",
        str(SCHEMA_FILE),
        "--checkpoint",
        str(w / "checkpoint"),
        "--apply-mode",
        cfg.apply_mode,
        "--dead-letter",
        cfg.dead_letter_uri,
        "--json-decoder",
        cfg.json_decoder,
        "--trigger",
        "available-now" if available_now else "1 second",
        "--max-offsets-per-trigger",
        str(cfg.final_max_offsets or cfg.max_offsets if available_now else cfg.max_offsets),
        "--compact-every",
        str(cfg.compact_every),
        "--gc-every",
        str(cfg.gc_every),
        "--retain-versions",
        str(cfg.retain_versions),
        "--retain-seconds",
        "0",
    ]


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def _table_version(cfg: ChaosConfig) -> int | None:
    try:
        return cfg.open_table().version
    except Exception:  # not created yet, or mid-creation
        return None


class _Producer(threading.Thread):
    """Produces the run's records: spread over ``produce_seconds``, or, with
    ``produce_rate``, at that rate while :attr:`running` is set (a job runs)."""

    def __init__(self, cfg: ChaosConfig, records: list[Any]) -> None:
        super().__init__(daemon=True)
        self.cfg, self.records = cfg, records
        self.error: BaseException | None = None
        self.running = threading.Event()
        self.done = threading.Event()
        self.produced = 0

    def run(self) -> None:
        from cdc_sink.kafka.producer import CdcProducer
        from cdc_sink_testkit.demo import orders_schema
        from cdc_sink_testkit.demo.stream import produce_records

        try:
            with CdcProducer(self.cfg.bootstrap, self.cfg.topic, orders_schema()) as p:
                if self.cfg.produce_rate is None:
                    chunks = max(1, int(self.cfg.produce_seconds * 2))
                    size = -(-len(self.records) // chunks)
                    for i in range(0, len(self.records), size):
                        produce_records(p, self.records[i : i + size])
                        p.flush()
                        self.produced = min(len(self.records), i + size)
                        time.sleep(self.cfg.produce_seconds / chunks)
                    return
                size = max(1, round(self.cfg.produce_rate / 4))
                while not self.done.is_set() and self.produced < len(self.records):
                    if not self.running.wait(0.25):
                        continue
                    chunk = self.records[self.produced : self.produced + size]
                    produce_records(p, chunk)
                    p.flush()
                    self.produced += len(chunk)
                    time.sleep(0.25)
        except BaseException as exc:  # reported by run_chaos
            self.error = exc

    def finish(self) -> None:
        """Stops a paced producer (what it did not produce stays unproduced) and waits."""
        self.done.set()
        self.join()


def run_chaos(cfg: ChaosConfig, *, log: Any = print) -> ChaosResult:
    """One chaos run (see the module docstring); returns the verified result."""
    from cdc_sink.kafka.admin import create_topic
    from cdc_sink_testkit.demo import generate_orders

    t0 = time.monotonic()
    rng = random.Random(cfg.seed)
    w = cfg.workdir
    w.mkdir(parents=True, exist_ok=True)
    _check_config(cfg)
    eio_so = build_fsync_eio(w) if cfg.eio_runs else None
    fs = _TableFs(w / "fs", cfg.table_fs_mb) if cfg.enospc_runs else None
    create_topic(cfg.bootstrap, cfg.topic, cfg.partitions)
    records = generate_orders(cfg.events, seed=cfg.seed, malformed_rate=cfg.malformed_rate)
    res = ChaosResult(events=len(records))
    try:
        if fs is not None:
            fs.mount()
        producer = _Producer(cfg, records)
        producer.start()
        stop_file = w / "reader.stop"
        reader = subprocess.Popen(
            [sys.executable, str(READER), cfg.location, str(w / "reads.jsonl"), str(stop_file)],
            env=job_env(cfg),
            start_new_session=True,
        )
        try:
            _run_jobs(cfg, res, t0, rng, producer, fs, eio_so, log)
        finally:
            stop_file.touch()
            try:
                reader.wait(timeout=60)
            except subprocess.TimeoutExpired:
                _kill_group(reader)
        verify(cfg, res)
    finally:
        if fs is not None:
            fs.unmount()
    res.wall_seconds = round(time.monotonic() - t0, 1)
    return res


def _check_config(cfg: ChaosConfig) -> None:
    """Refuses a configuration whose parts do not go together (``ValueError``)."""
    if cfg.broker_bounces and cfg.broker is None:
        raise ValueError("broker_bounces needs cfg.broker (a LocalKafka)")
    if cfg.table_url and (cfg.enospc_runs or cfg.eio_runs):
        raise ValueError("full-disk and fsync-error runs need a table on the local disk")
    if cfg.produce_rate is not None and (cfg.broker_bounces or cfg.enospc_runs or cfg.eio_runs):
        raise ValueError("produce_rate is not for runs with environmental faults")
    cfg.dead_letter_uri  # noqa: B018 -- raises on an unknown dead_letter


def _run_jobs(
    cfg: ChaosConfig,
    res: ChaosResult,
    t0: float,
    rng: random.Random,
    producer: _Producer,
    fs: _TableFs | None,
    eio_so: Path | None,
    log: Any,
) -> None:
    """Every run of the job, in order: the class-data-sharing run, the fault point and
    killed runs, the environmental fault runs, then the final run (or the job that rode
    through, draining the topic)."""
    fault_runs = set(rng.sample(range(cfg.kills), min(cfg.fault_point_runs, cfg.kills)))
    _build_cds_archive(cfg, producer, log)
    _killed_runs(cfg, res, t0, fault_runs, rng, producer, log)
    if cfg.produce_rate is not None:
        producer.finish()
        res.events = producer.produced
    pending: list[dict[str, Any]] = []  # failed faults waiting for the job's return
    live = _environmental_fault_runs(cfg, res, rng, producer, fs, eio_so, pending, log)
    producer.join()
    if producer.error is not None:
        if live is not None:
            live.stop()
        raise RuntimeError(f"producing failed: {producer.error!r}")
    if live is not None:  # it drains the topic instead of a final run
        _drain(cfg, res, live)
    else:
        _final_run(cfg, res, pending)
    for f in pending:
        res.failures.append(
            f"after the {f['fault']} fault of run {f['run']} the job never committed again"
        )


def _build_cds_archive(cfg: ChaosConfig, producer: _Producer, log: Any) -> None:
    """A first, uncounted available-now run that writes ``cfg.cds_archive`` when it is
    wanted and missing."""
    if cfg.cds_archive and not os.path.exists(cfg.cds_archive):
        with _producing(producer):
            cds = _Job(cfg, "cds", job_env(cfg), available_now=True)
            code = cds.wait_exit(cfg.final_timeout)
            cds.stop()
        log(
            f"class-data-sharing archive {cfg.cds_archive}: run exited {code}, "
            f"archive {'built' if os.path.exists(cfg.cds_archive) else 'MISSING'}"
        )


def _killed_runs(
    cfg: ChaosConfig,
    res: ChaosResult,
    t0: float,
    fault_runs: set[int],
    rng: random.Random,
    producer: _Producer,
    log: Any,
) -> None:
    """The fault point runs, then the killed runs (those in ``fault_runs`` left to random
    fault points) until ``cfg.kills_seconds`` after ``t0``."""
    for i, point in enumerate(cfg.fault_points):
        with _producing(producer):
            _fault_point_run(cfg, res, i, point, rng, log)
    for k in range(cfg.kills):
        if cfg.kills_seconds is not None and time.monotonic() - t0 > cfg.kills_seconds:
            log(f"the killed runs' time is up after {k} runs")
            break
        with _producing(producer):
            _one_killed_run(cfg, res, k, k in fault_runs, rng, log)


def _environmental_fault_runs(
    cfg: ChaosConfig,
    res: ChaosResult,
    rng: random.Random,
    producer: _Producer,
    fs: _TableFs | None,
    eio_so: Path | None,
    pending: list[dict[str, Any]],
    log: Any,
) -> _Job | None:
    """The broker, full disk and fsync error runs; returns the job that rode through the
    last broker bounce when no other fault run follows (None otherwise)."""
    live: _Job | None = None  # a job that rode through, left to drain the topic
    if cfg.broker_bounces:
        live = _broker_run(cfg, res, rng, log, producer, pending)
        if live is not None and (cfg.enospc_runs or cfg.eio_runs):
            live.stop()
            live = None
    for i in range(cfg.enospc_runs):
        assert fs is not None
        _enospc_run(cfg, res, i, fs, log, pending)
    for i in range(cfg.eio_runs):
        assert eio_so is not None
        _eio_run(cfg, res, i, eio_so, rng, log, pending)
    return live


def _drain(cfg: ChaosConfig, res: ChaosResult, live: _Job) -> None:
    """Waits for the job that rode through to catch up with the topic, then stops it."""
    ends = _topic_ends(cfg.bootstrap, cfg.topic)
    caught_up = live.wait(lambda: _caught_up(cfg, ends), cfg.final_timeout)
    if caught_up:
        # The sink forwards a version's dead letters after committing it, then logs the
        # batch: a kill in between leaves them owed to the next run (kept in the table),
        # and this run is the last one. Wait for the last data version's batch line.
        last = _last_data_version(cfg)
        if not live.wait(lambda: live.logged_batch(last), cfg.final_timeout):
            res.failures.append(
                f"the job committed version {last} but never finished its batch "
                f"(forwarding dead letters; see {live.log_path})"
            )
    code = live.stop()
    if not caught_up:
        res.failures.append(
            f"the job that rode through did not catch up with "
            f"the topic (exit {code}, see {live.log_path})"
        )


def _final_run(cfg: ChaosConfig, res: ChaosResult, pending: list[dict[str, Any]]) -> None:
    """The final available-now run, which must exit 0 within ``cfg.final_timeout``."""
    final = _Job(cfg, "final", job_env(cfg), available_now=True, pending=pending)
    final.wait_exit(cfg.final_timeout)
    code = final.stop()
    if code is None:
        raise RuntimeError(
            f"the final available-now run took more than "
            f"{cfg.final_timeout}s (see {final.log_path})"
        )
    if code != 0:
        res.failures.append(
            f"the final available-now run exited {code}: {final.reason()} (see {final.log_path})"
        )


# ---------------------------------------------------------------------- fault runs

FAILED_PREFIX = "cdc_to_tablets: failed: "
_BATCH_LINE = re.compile(r"cdc_to_tablets: batch batch_id=\d+ result=committed version=(\d+) ")


class _Job:
    """One run of the streaming job, watched: its first commit, its exit, its reason."""

    def __init__(
        self,
        cfg: ChaosConfig,
        name: str,
        env: dict[str, str],
        *,
        available_now: bool = False,
        pending: list[dict[str, Any]] | None = None,
    ) -> None:
        self.cfg = cfg
        self.log_path = cfg.workdir / f"job-{name}.log"
        self.before = _table_version(cfg)
        self.pending = pending if pending is not None else []
        self.t0 = time.monotonic()
        self.first_commit: float | None = None
        self.code: int | None = None
        with open(self.log_path, "wb") as err:
            self.proc = subprocess.Popen(
                job_command(cfg, available_now=available_now),
                env=env,
                stdout=err,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def version(self) -> int | None:
        """The table's version now; notes the job's first commit."""
        v = _table_version(self.cfg)
        if self.first_commit is None and v is not None and v > (self.before or 0):
            self.first_commit = time.monotonic()
            for f in self.pending:  # the job is back: the restart took this long
                f["resume_seconds"] = round(self.first_commit - self.t0, 1)
            self.pending.clear()
        return v

    def wait(self, done: Any, timeout: float) -> bool:
        """Polls until ``done()`` (True), the job exits or ``timeout`` (False)."""
        deadline = time.monotonic() + timeout
        while True:
            self.version()
            if done():
                return True
            if self.proc.poll() is not None:
                self.version()
                return False
            if time.monotonic() > deadline:
                return False
            time.sleep(0.2)

    def wait_first_commit(self, timeout: float) -> bool:
        """Waits for the job's first commit (False: it exited or timed out first)."""
        return self.wait(lambda: self.first_commit is not None, timeout)

    def wait_commit_after(self, version: int | None, timeout: float) -> bool:
        """Waits until the table is past ``version`` (False: the job exited or timed
        out first)."""

        def past() -> bool:
            v = _table_version(self.cfg)
            return v is not None and (version is None or v > version)

        return self.wait(past, timeout)

    def wait_exit(self, timeout: float) -> int | None:
        """Waits for the job to exit; its exit code (None: still running)."""
        self.wait(lambda: False, timeout)
        return self.proc.poll()

    def stop(self) -> int | None:
        """SIGKILLs the job's process group if it still runs; its exit code (None: it
        was still running)."""
        self.code = self.proc.poll()
        _kill_group(self.proc)
        return self.code

    def logged_batch(self, version: int) -> bool:
        """Whether the job logged the end of a batch committed at ``version`` or later
        (the line comes after the batch's dead letters were forwarded)."""
        found = _BATCH_LINE.findall(self.text())
        return any(int(v) >= version for v in found)

    def text(self) -> str:
        """The job's log."""
        return self.log_path.read_text(errors="replace")

    def reason(self) -> str | None:
        """The job's one-line failure reason (None: it printed none)."""
        lines = [ln for ln in self.text().splitlines() if ln.startswith(FAILED_PREFIX)]
        return lines[-1][len(FAILED_PREFIX) :] if lines else None


def _failed(
    res: ChaosResult,
    fault: dict[str, Any],
    job: _Job,
    expect: tuple[str, ...],
    pending: list[dict[str, Any]],
    log: Any,
) -> None:
    """Records a job that died of a fault: its exit code and one-line reason, which must
    name one of ``expect`` (any reason when empty)."""
    code, reason = job.stop(), job.reason()
    fault.update(outcome="failed", exit=code, reason=reason, resume_seconds=None)
    if code == 0 or reason is None:
        res.failures.append(
            f"{fault['fault']} (run {fault['run']}): the job exited {code} "
            f"without a one-line reason (see {job.log_path})"
        )
    elif expect and not any(e in reason for e in expect):
        res.failures.append(
            f"{fault['fault']} (run {fault['run']}): the reason {reason!r} names none of {expect}"
        )
    pending.append(fault)
    log(f"{fault['fault']} run {fault['run']}: the job failed (exit {code}): {reason}")


def _topic_ends(bootstrap: str, topic: str) -> dict[int, int]:
    """The end offset of each partition of ``topic``."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    try:
        parts = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic))]
        return {tp.partition: int(o) for tp, o in consumer.end_offsets(parts).items()}
    finally:
        consumer.close()


def _last_data_version(cfg: ChaosConfig) -> int:
    """The table's newest version written by a batch (not by compaction or a schema
    change)."""

    table = cfg.open_table()
    return max(
        e.version for e in table.log.entries(from_version=table.oldest_version) if e.kind == "data"
    )


def _caught_up(cfg: ChaosConfig, ends: Mapping[int, int]) -> bool:
    """Whether the table's batches reached ``ends`` (a batch's ``source_offsets`` name
    only the partitions it had records of)."""

    try:
        table = cfg.open_table()
        entries = table.log.entries(from_version=table.oldest_version)
    except Exception:  # mid-creation, or a version GC just took
        return False
    reached: dict[int, int] = {}
    for e in entries:
        offsets = _offsets_of(e, cfg.topic)
        if e.kind == "data" and offsets is not None:
            reached.update(offsets)
    return all(reached.get(p, 0) >= o for p, o in ends.items())


def _broker_run(
    cfg: ChaosConfig,
    res: ChaosResult,
    rng: random.Random,
    log: Any,
    producer: _Producer,
    pending: list[dict[str, Any]],
) -> _Job | None:
    """One run of the job during which the broker is killed and restarted
    ``cfg.broker_bounces`` times; a job that dies of it is started again. Returns the
    job when it still runs at the end (it rode through the last bounce)."""
    starts = 0
    job = _Job(cfg, f"broker-{starts}", job_env(cfg), pending=pending)
    try:
        if not job.wait_first_commit(cfg.run_timeout):
            res.failures.append(
                f"broker run: the job did not commit (exit {job.proc.poll()}, see {job.log_path})"
            )
            job.stop()
            return None
        for b in range(cfg.broker_bounces):
            if job.proc.poll() is not None:  # it died of the previous bounce: again
                starts += 1
                job = _Job(cfg, f"broker-{starts}", job_env(cfg), pending=pending)
                job.wait_first_commit(cfg.run_timeout)
            v = _table_version(cfg)
            fault: dict[str, Any] = {"fault": "broker", "run": b, "table_version": v}
            res.faults.append(fault)
            t_kill = time.monotonic()
            cfg.broker.kill()
            time.sleep(rng.uniform(*cfg.broker_down))
            cfg.broker.restart()
            back = time.monotonic()
            fault["down_seconds"] = round(back - t_kill, 1)
            v_back = _table_version(cfg)  # batches may commit while it is down
            log(
                f"broker bounce {b}: killed at table version {v}, back after "
                f"{fault['down_seconds']}s at version {v_back}"
            )
            if job.wait_commit_after(v_back, cfg.fault_timeout):
                fault.update(
                    outcome="rode through", resume_seconds=round(time.monotonic() - back, 1)
                )
                log(
                    f"broker bounce {b}: the job rode through, committed again after "
                    f"{fault['resume_seconds']}s"
                )
            elif job.proc.poll() is not None:
                _failed(res, fault, job, (), pending, log)
            elif not producer.is_alive() and _caught_up(cfg, _topic_ends(cfg.bootstrap, cfg.topic)):
                fault.update(outcome="rode through", resume_seconds=None)  # nothing new
                log(f"broker bounce {b}: the job runs on, nothing was left to commit")
            else:
                fault.update(outcome="stalled")
                res.failures.append(
                    f"broker bounce {b}: the job neither committed nor "
                    f"failed within {cfg.fault_timeout}s"
                )
    except BaseException:
        job.stop()
        raise
    if job.proc.poll() is not None:
        job.stop()
        return None
    return job


class _TableFs:
    """The table's own small tmpfs (mounted, filled, grown, unmounted by the harness)."""

    def __init__(self, path: Path, size_mb: int) -> None:
        self.path, self.size_mb, self.mounted = path, size_mb, False
        self.ballasts = 0

    def mount(self) -> None:
        self.path.mkdir(parents=True, exist_ok=True)
        _run(["mount", "-t", "tmpfs", "-o", f"size={self.size_mb}m", "tmpfs", str(self.path)])
        self.mounted = True

    def fill(self) -> int:
        """Writes a ballast file until the file system is full; returns its bytes."""
        ballast = self.path / f"ballast-{self.ballasts}"
        self.ballasts += 1
        chunk = b"\0" * (1 << 20)
        n = 0
        with open(ballast, "wb", buffering=0) as f:
            with contextlib.suppress(OSError):  # ENOSPC
                while True:
                    n += f.write(chunk)
            with contextlib.suppress(OSError):
                while True:  # the last partial MiB
                    n += f.write(b"\0" * 4096)
        return n

    def grow(self, mb: int) -> None:
        self.size_mb += mb
        _run(["mount", "-o", f"remount,size={self.size_mb}m", str(self.path)])

    def unmount(self) -> None:
        if self.mounted:
            if subprocess.run(["umount", str(self.path)], capture_output=True).returncode:
                _run(["umount", "-l", str(self.path)])  # a straggler holds it: detach
            self.mounted = False


def _run(cmd: list[str]) -> None:
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(
            f"{' '.join(cmd)} failed ({done.returncode}): {(done.stderr or done.stdout).strip()}"
        )


def _enospc_run(
    cfg: ChaosConfig,
    res: ChaosResult,
    i: int,
    fs: _TableFs,
    log: Any,
    pending: list[dict[str, Any]],
) -> None:
    """One run of the job during which the table's file system fills up; afterwards the
    file system grows (the ballast stays)."""
    job = _Job(cfg, f"enospc-{i}", job_env(cfg), pending=pending)
    try:
        if not job.wait_first_commit(cfg.run_timeout):
            res.failures.append(
                f"enospc run {i}: the job did not commit (exit "
                f"{job.proc.poll()}, see {job.log_path})"
            )
            return
        v = _table_version(cfg)
        fault: dict[str, Any] = {"fault": "enospc", "run": i, "table_version": v}
        res.faults.append(fault)
        fault["ballast_mb"] = round(fs.fill() / (1 << 20), 1)
        log(
            f"enospc run {i}: the table's file system is full ({fault['ballast_mb']} MiB "
            f"ballast) at table version {v}"
        )
        if job.wait_exit(cfg.fault_timeout) is None:
            fault.update(outcome="stalled")
            res.failures.append(
                f"enospc run {i}: the job did not fail within {cfg.fault_timeout}s of a full disk"
            )
        else:
            _failed(res, fault, job, ("No space left on device", "[Errno 28]"), pending, log)
    finally:
        job.stop()
        fs.grow(fs.size_mb)
        log(f"enospc run {i}: the table's file system grew to {fs.size_mb} MiB")


def build_fsync_eio(outdir: Path) -> Path:
    """Compiles ``fsync_eio.c`` (next to this file) into ``outdir/fsync_eio.so``.

    Raises:
        RuntimeError: No C compiler, or it failed.
    """
    import shutil

    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if not cc:
        raise RuntimeError("no C compiler (cc/gcc) to build fsync_eio.so")
    outdir.mkdir(parents=True, exist_ok=True)
    so = outdir / "fsync_eio.so"
    _run(
        [
            cc,
            "-shared",
            "-fPIC",
            "-O2",
            "-o",
            str(so),
            str(Path(__file__).with_name("fsync_eio.c")),
            "-ldl",
        ]
    )
    return so


def _eio_run(
    cfg: ChaosConfig,
    res: ChaosResult,
    i: int,
    so: Path,
    rng: random.Random,
    log: Any,
    pending: list[dict[str, Any]],
) -> None:
    """One run of the job whose N-th fsync under the table path fails with EIO (and its
    file's unsynced data is dropped); the next run has no fault."""
    n = rng.randint(*cfg.eio_at)
    env = job_env(cfg)
    env.update(
        LD_PRELOAD=str(so),
        CHAOS_EIO_PREFIX=os.path.realpath(cfg.table),
        CHAOS_EIO_AT=str(n),
        CHAOS_EIO_COUNT="1",
        CHAOS_EIO_DROP="1",
        CHAOS_EIO_CMDLINE=cfg.eio_cmdline,
    )
    job = _Job(cfg, f"eio-{i}", env, pending=pending)
    try:
        fired = job.wait(lambda: "chaos-eio: " in job.text(), cfg.run_timeout)
        v = _table_version(cfg)
        line = next((ln for ln in job.text().splitlines() if ln.startswith("chaos-eio: ")), None)
        fault: dict[str, Any] = {
            "fault": "eio",
            "run": i,
            "fsync_call": n,
            "table_version": v,
            "injected": line,
        }
        res.faults.append(fault)
        if not fired and line is None:
            fault.update(outcome="not injected")
            res.failures.append(
                f"eio run {i}: fsync #{n} never came (exit {job.proc.poll()}, see {job.log_path})"
            )
            return
        log(f"eio run {i}: {line} (table version {v})")
        t_fault = time.monotonic()
        if job.wait_commit_after(None if v is None else v + 1, cfg.fault_timeout):
            after = job.text().split("chaos-eio: ", 1)[1].splitlines()[1:]
            logged = next(
                (ln.split(" ERROR ", 1)[1] for ln in after if " ERROR cdc_to_tablets" in ln), None
            )  # e.g. "gc failed"
            fault.update(
                outcome="rode through",
                logged=logged,
                resume_seconds=round(time.monotonic() - t_fault, 1),
            )
            log(f"eio run {i}: the job rode through (committed again); it logged: {logged}")
        elif job.proc.poll() is not None:
            _failed(res, fault, job, ("Input/output error", "[Errno 5]"), pending, log)
        else:
            fault.update(outcome="stalled")
            res.failures.append(
                f"eio run {i}: the job neither failed nor committed within "
                f"{cfg.fault_timeout}s of the fsync error"
            )
    finally:
        job.stop()


@contextlib.contextmanager
def _producing(producer: _Producer) -> Any:
    """A paced producer produces while the block (a run of the job) lasts."""
    producer.running.set()
    try:
        yield
    finally:
        producer.running.clear()


def _fault_point_run(
    cfg: ChaosConfig, res: ChaosResult, i: int, point: str, rng: random.Random, log: Any
) -> None:
    """One run of the job that dies the n-th time it reaches fault point ``point``."""
    n = rng.randint(*cfg.fault_point_hit)
    env = job_env(cfg)
    env["CDC_SINK_CRASH_AT"] = f"{point}:{n}"
    job = _Job(cfg, f"point-{i}", env)
    marker = f"crash injected at fault point {point}"
    try:
        died = job.wait(lambda: marker in job.text(), cfg.fault_timeout)
        code = job.wait_exit(30.0) if died else job.proc.poll()
    finally:
        job.stop()
    if died:
        res.fault_point_deaths += 1
        res.fault_points_hit.append(point)
        log(
            f"fault point run {i}: died at {point} (hit {n}, exit {code}, table version "
            f"{_table_version(cfg)})"
        )
    elif code is not None and code != 0:
        res.other_exits.append(code)
        res.failures.append(
            f"fault point run {i} ({point}): the job exited {code} by itself (see {job.log_path})"
        )
    else:
        res.fault_points_missed.append(point)
        log(f"fault point run {i}: {point} (hit {n}) not reached in {cfg.fault_timeout}s")


def _one_killed_run(
    cfg: ChaosConfig, res: ChaosResult, k: int, at_fault_point: bool, rng: random.Random, log: Any
) -> None:
    env = job_env(cfg)
    if at_fault_point:
        env["CDC_SINK_CRASH_RANDOM"] = f"{cfg.seed * 1000 + k}:0.02"
    before = _table_version(cfg)
    with open(cfg.workdir / f"job-{k}.log", "wb") as err:
        proc = subprocess.Popen(
            job_command(cfg, available_now=False),
            env=env,
            stdout=err,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + cfg.run_timeout
        while proc.poll() is None and time.monotonic() < deadline:
            v = _table_version(cfg)
            if v is not None and v > (before or 0):
                break  # it committed a batch: from now on a kill lands mid-stream
            time.sleep(0.2)
        if proc.poll() is None and not at_fault_point:
            time.sleep(rng.uniform(*cfg.kill_after))
        elif at_fault_point:
            proc.wait(timeout=max(1.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        pass
    finally:
        code = proc.poll()
        _kill_group(proc)
    log_text = (cfg.workdir / f"job-{k}.log").read_text(errors="replace")
    if code is None:
        res.kills += 1
        log(f"run {k}: SIGKILL at table version {_table_version(cfg)}")
    elif "crash injected at fault point" in log_text:
        res.fault_point_deaths += 1
        point = log_text.split("crash injected at fault point ", 1)[1].split("\n", 1)[0]
        log(
            f"run {k}: died at fault point {point} (exit {code}, table version "
            f"{_table_version(cfg)})"
        )
    else:
        res.other_exits.append(code)
        res.failures.append(
            f"run {k}: the job exited {code} by itself (see {cfg.workdir / f'job-{k}.log'})"
        )
        log(f"run {k}: exited {code} by itself (see job-{k}.log)")


# ---------------------------------------------------------------------- verification


@dataclass
class _TopicRecord:
    partition: int
    offset: int
    event: Any  # the decoded event, None when the value does not decode


def consume_topic(bootstrap: str, topic: str) -> dict[int, list[_TopicRecord]]:
    """Every record of ``topic``, per partition in offset order."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap, enable_auto_commit=False, consumer_timeout_ms=5000
    )
    try:
        parts = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic))]
        consumer.assign(parts)
        consumer.seek_to_beginning(*parts)
        ends = consumer.end_offsets(parts)
        out: dict[int, list[_TopicRecord]] = {tp.partition: [] for tp in parts}
        while any(consumer.position(tp) < ends[tp] for tp in parts):
            for tp, msgs in consumer.poll(timeout_ms=1000).items():
                for m in msgs:
                    out[tp.partition].append(_TopicRecord(m.partition, m.offset, _decode(m.value)))
        return out
    finally:
        consumer.close()


def _decode(value: bytes | None) -> Any:
    if value is None:
        return None
    try:
        event = json.loads(value)
    except (UnicodeDecodeError, json.JSONDecodeError):
        return None
    return event if isinstance(event, dict) else None


class _Model:
    """The reference table, advanced partition by partition to given offsets."""

    def __init__(self, topic: dict[int, list[_TopicRecord]]) -> None:
        from cdc_sink_testkit.demo import ExpectedTable, orders_schema

        self.schema = orders_schema()
        self.table = ExpectedTable(self.schema)
        self.topic = topic
        self.pos = dict.fromkeys(topic, 0)  # next index per partition
        self.rejected: list[tuple[int, int]] = []

    def advance(self, offsets: Mapping[int, int]) -> Counter[str]:
        """Apply the records below ``offsets``; returns the outcome counts."""
        outcomes: Counter[str] = Counter()
        for p, recs in self.topic.items():
            end = offsets.get(p, 0)
            while self.pos[p] < len(recs) and recs[self.pos[p]].offset < end:
                r = recs[self.pos[p]]
                outcome = self.table.apply(r.event)
                outcomes[outcome] += 1
                if outcome == "rejected":
                    self.rejected.append((p, r.offset))
                self.pos[p] += 1
        return outcomes


def _offsets_of(entry: Any, topic: str) -> dict[int, int] | None:
    so = getattr(entry, "source_offsets", None) or {}
    parts = so.get(topic)
    return None if parts is None else {int(p): int(o) for p, o in parts.items()}


def verify(cfg: ChaosConfig, res: ChaosResult) -> None:
    """Checks the table, the dead letters and the reads against the topic (see the
    module docstring); appends what is wrong to ``res.failures``."""

    topic = consume_topic(cfg.bootstrap, cfg.topic)
    res.malformed = sum(r.event is None for recs in topic.values() for r in recs)
    ends = {p: (recs[-1].offset + 1 if recs else 0) for p, recs in topic.items()}
    table = cfg.open_table()
    model = _Model(topic)
    digests, last_offsets = _check_versions(cfg, res, table, model)
    _check_latest(res, table, model, ends, last_offsets)
    _check_dead_letters(cfg, res, model)
    _check_reads(cfg, res, digests)


def _check_versions(
    cfg: ChaosConfig, res: ChaosResult, table: Table, model: _Model
) -> tuple[dict[int, str], dict[int, int] | None]:
    """Every retained data version against the model advanced to its source offsets.

    Returns the model's digest of each version read, and the latest batch's offsets.
    """
    from tests.chaos.reader import rows_digest

    keys = list(model.schema.primary_key)
    entries = table.log.entries(from_version=table.oldest_version)
    res.versions = table.version
    digests: dict[int, str] = {}
    last_batch = -1
    last_offsets: dict[int, int] | None = None
    first = True
    for e in entries:
        offsets = _offsets_of(e, cfg.topic)
        if e.kind != "data" or offsets is None:
            continue
        offsets = _check_progress(res, e, offsets, last_offsets, last_batch)
        if e.batch_id is not None:
            last_batch = e.batch_id
        outcomes = model.advance(offsets)
        if not first:  # the oldest retained version's delta starts below the horizon
            _check_counts(res, e, outcomes)
        first = False
        last_offsets = offsets
        res.batches += 1
        if _check_rows(res, table, e.version, model, offsets):
            digests[e.version] = rows_digest(model.table.to_arrow(), keys)
    return digests, last_offsets


def _check_progress(
    res: ChaosResult,
    e: Any,
    offsets: dict[int, int],
    last_offsets: dict[int, int] | None,
    last_batch: int,
) -> dict[int, int]:
    """A version's batch id and offsets move forward; returns its offsets with the
    partitions it does not name where the previous version left them."""
    if last_offsets is not None and set(last_offsets) - set(offsets):
        res.failures.append(
            f"version {e.version}: its source_offsets {offsets} lack "
            f"partitions an earlier version named"
        )
    # A batch names only the partitions it had records of: the others stay put.
    offsets = {**(last_offsets or {}), **offsets}
    if e.batch_id is not None and e.batch_id <= last_batch:
        res.duplicated_batches += 1
        res.failures.append(f"version {e.version}: batch {e.batch_id} again")
    if last_offsets is not None and any(offsets.get(p, 0) < o for p, o in last_offsets.items()):
        res.failures.append(f"version {e.version}: offsets went back {offsets}")
    return offsets


def _check_counts(res: ChaosResult, e: Any, outcomes: Counter[str]) -> None:
    """A version's counters equal the model's outcome counts over its records."""
    want = {k: v for k, v in outcomes.items() if k != "rejected" and v}
    got = {k: e.stats.get(k, 0) for k in want}
    extra = {
        k: v
        for k, v in e.stats.items()
        if k in ("inserted", "updated", "deleted") and v and k not in want
    }
    if got != want or extra:
        res.duplicated_batches += 1
        res.failures.append(f"version {e.version} counts {e.stats} != model {want}")


def _check_rows(
    res: ChaosResult, table: Table, version: int, model: _Model, offsets: dict[int, int]
) -> bool:
    """A version reads exactly the model's rows; False when it could not be read."""
    from cdc_sink_testkit.demo import diff_rows

    try:
        data = table.read(version=version)
    except Exception as exc:
        res.failures.append(f"version {version}: {type(exc).__name__}: {exc}")
        return False
    want_rows = model.table.snapshot()
    diff = diff_rows(want_rows, data.to_pylist(), model.schema)
    if diff:
        res.lost_or_wrong_rows += len(diff)
        res.failures.append(f"version {version} != model at {offsets}: {diff[:3]}")
    res.versions_checked += 1
    return True


def _check_latest(
    res: ChaosResult,
    table: Table,
    model: _Model,
    ends: dict[int, int],
    last_offsets: dict[int, int] | None,
) -> None:
    """The latest batch ends where the topic ends, and the latest version is the model
    of the whole topic."""
    from cdc_sink_testkit.demo import diff_rows

    if last_offsets != ends:
        res.failures.append(f"the latest batch ends at {last_offsets}, the topic at {ends}")
    model.advance(ends)
    latest = table.read()
    res.rows = latest.num_rows
    diff = diff_rows(model.table.snapshot(), latest.to_pylist(), model.schema)
    if diff:
        res.lost_or_wrong_rows += len(diff)
        res.failures.append(f"the latest version != the model of the topic: {diff[:3]}")


def _check_dead_letters(cfg: ChaosConfig, res: ChaosResult, model: _Model) -> None:
    """Dead letters: exactly the records the model rejects, each once."""
    from cdc_sink.kafka.deadletter import KafkaDeadLetter, ParquetDeadLetter

    if cfg.dead_letter == "kafka":
        dl = KafkaDeadLetter(cfg.bootstrap, f"{cfg.topic}.dead-letter").read(deduplicate=False)
    else:
        dl = ParquetDeadLetter(cfg.workdir / "dead-letters").read(deduplicate=False)
    got_dl: Counter[tuple[int, int]] = Counter(
        zip(dl.column("partition").to_pylist(), dl.column("offset").to_pylist(), strict=True)
    )
    want_dl = Counter(model.rejected)
    res.dead_letters, res.dead_letters_expected = dl.num_rows, len(model.rejected)
    res.dead_letters_missing = len(set(want_dl) - set(got_dl))
    res.dead_letters_duplicated = sum(n - 1 for n in got_dl.values() if n > 1)
    res.dead_letters_unexpected = sum(n for key, n in got_dl.items() if key not in want_dl)
    if res.dead_letters_missing or res.dead_letters_duplicated or res.dead_letters_unexpected:
        res.failures.append(
            f"dead letters: {res.dead_letters} written, {res.dead_letters_expected} expected, "
            f"{res.dead_letters_missing} missing, {res.dead_letters_duplicated} duplicated, "
            f"{res.dead_letters_unexpected} unexpected"
        )


def _check_reads(cfg: ChaosConfig, res: ChaosResult, model_digests: dict[int, str]) -> None:
    seen: dict[int, set[str]] = {}
    bad_errors: Counter[str] = Counter()
    path = cfg.workdir / "reads.jsonl"
    lines = path.read_text().splitlines() if path.exists() else []
    for line in lines:
        d = json.loads(line)
        if "error" in d:
            kind = d["error"].split(":", 1)[0]
            if kind not in ("VersionNotFound", "TableNotFound"):
                bad_errors[d["error"][:160]] += 1
            continue
        res.reads += 1
        seen.setdefault(d["v"], set()).add(d["digest"])
    res.read_versions = len(seen)
    for v, ds in sorted(seen.items()):
        if len(ds) > 1:
            res.repeatable_read_violations += 1
            res.failures.append(f"version {v} read {len(ds)} different ways")
        elif v in model_digests and ds != {model_digests[v]}:
            res.failures.append(f"the reader's version {v} differs from the model")
    if res.reads == 0:
        res.failures.append("the reader read nothing")
    for err, n in bad_errors.most_common(3):
        res.failures.append(f"reader error x{n}: {err}")
