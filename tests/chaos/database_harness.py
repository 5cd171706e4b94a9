"""The whole-database job killed at random (issue 48): ``cdc-sink run --table-root``
SIGKILLed, process group and all, at random moments while a many-table Debezium stream
arrives, started again from its checkpoint each time; then one ``available-now`` run.

One run (:func:`run_database_chaos`)::

    producer thread   Debezium JSON change events (with schemas) of ``tables`` tables,
                      one topic per table (``<prefix>.inventory.<table>``): inserts,
                      updates, deletes each followed by its tombstone, and now and then a
                      record that names no table (no ``source`` block); produced while
                      a job runs
    killed runs       the job (``--trigger 1 second``, a Parquet dead-letter directory),
                      SIGKILLed at a random moment: of its start, of a micro-batch (while
                      its tables commit, concurrently), or between two batches; or left
                      to die at a random storage fault point (``CDC_SINK_CRASH_RANDOM``),
                      most of them reached while a batch commits its tables
    final run         the job with ``--trigger available-now``, which must exit 0

Then :func:`verify` checks, from the stream as produced (each table's dictionary model)
and what the job left:

* every table holds exactly its model's rows;
* no table's log holds a batch id twice (no micro-batch applied twice to a table);
* the dead-letter directory holds every record that names no table exactly once, by
  (topic, partition, offset), and nothing else.

The table root is a local directory, or a prefix on an S3 server (``table_root`` and
``storage_options``: the job gets the endpoint and region as ``--storage-option`` flags
and the keys from ``AWS_*`` variables). The short run is tests/chaos/
test_database_kills.py; the long one (50 tables, 10 kills and more) benchmarks/
database_chaos.py.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import re
import signal
import statistics
import subprocess
import threading
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from cdc_sink.storage.faults import CRASH_RANDOM_ENV
from tests.integration.streams import cdc_sink_command, job_process_env
from tests.spark.test_database_router import message

__all__ = [
    "DatabaseChaosConfig",
    "DatabaseChaosResult",
    "DatabaseStream",
    "database_stream",
    "run_database_chaos",
    "verify",
]

FIELDS = [("id", "int32", False), ("name", "string", False), ("qty", "int64", True)]
"""The columns of every table of the stream (Connect types), ``id`` its key."""
BATCH_LINE = re.compile(r"database batch batch_id=(\d+) ")


@dataclass
class DatabaseChaosConfig:
    """What one run does.

    Attributes:
        bootstrap: Kafka bootstrap servers.
        workdir: Where the checkpoint, the dead letters, the logs and a local root go.
        prefix: The topics' prefix (Debezium's ``topic.prefix``; unique per run).
        tables: Source tables (one topic each).
        events: Change events over all tables.
        malformed: Records that name no table (dead letters).
        kills: SIGKILLed runs of the job.
        seed: Seeds the stream and every random choice.
        max_offsets: Records per micro-batch at most (killed runs).
        final_max_offsets: Records per micro-batch of the final run.
        chunk: Records produced at a time while a job runs (every ``pace`` seconds).
        pace: Seconds between two chunks.
        start_kill_share: Share of the kills that fall at a random moment of the job's
            start (before its first batch of the run).
        aimed_kill_share: Share of the kills aimed at the run's first batch, the backlog
            of the time the job was down, while it commits its tables: at a random
            fraction (``aim``) of the time the earlier runs took to log their first
            batch.
        aim: Range of that fraction.
        fault_point_share: Share of the runs left to die at a random storage fault
            point (``CDC_SINK_CRASH_RANDOM``: each point the job reaches kills it with
            ``fault_probability``), most of them while a batch commits its tables.
        fault_probability: The probability of dying at each fault point reached.
        kill_after: Seconds after the run's first batch within which the other kills
            fall.
        run_timeout: Seconds a killed run may take to log its first batch.
        final_timeout: Seconds the final run may take.
        table_root: The root's URL on an object store (empty: ``workdir/root``).
        storage_options: The object store's options (with ``table_root``).
        master: The job's Spark master.
    """

    bootstrap: str
    workdir: Path
    prefix: str
    tables: int = 10
    events: int = 3000
    malformed: int = 6
    kills: int = 3
    seed: int = 1
    max_offsets: int = 400
    final_max_offsets: int = 2000
    chunk: int = 150
    pace: float = 0.5
    start_kill_share: float = 0.2
    aimed_kill_share: float = 0.0
    aim: tuple[float, float] = (0.85, 1.02)
    fault_point_share: float = 0.0
    fault_probability: float = 0.005
    kill_after: tuple[float, float] = (0.0, 4.0)
    run_timeout: float = 240.0
    final_timeout: float = 600.0
    table_root: str = ""
    storage_options: dict[str, str] = field(default_factory=dict)
    master: str = "local[2]"

    @property
    def root(self) -> str:
        """The table root: its URL, or a directory of ``workdir``."""
        return self.table_root or str(self.workdir / "root")

    @property
    def dead_letters(self) -> Path:
        """The job's Parquet dead-letter directory."""
        return self.workdir / "dead-letters"


@dataclass
class DatabaseChaosResult:
    """What a run did and what :func:`verify` found (``failures`` empty: it passed)."""

    tables: int = 0
    events: int = 0
    records: int = 0
    kills: int = 0
    start_kills: int = 0
    aimed_kills: int = 0
    fault_point_deaths: list[str] = field(default_factory=list)
    last_batch_logged: int = -1
    batches_at_kills: list[int] = field(default_factory=list)
    tables_ahead_at_kills: list[int] = field(default_factory=list)
    first_batch_seconds: list[float] = field(default_factory=list)
    batches: int = 0
    versions: int = 0
    rows: int = 0
    wrong_tables: list[str] = field(default_factory=list)
    duplicated_batches: int = 0
    dead_letters: int = 0
    dead_letters_expected: int = 0
    dead_letters_missing: int = 0
    dead_letters_duplicated: int = 0
    dead_letters_unexpected: int = 0
    final_seconds: float = 0.0
    wall_seconds: float = 0.0
    failures: list[str] = field(default_factory=list)

    def to_json(self) -> str:
        """The result as one JSON object."""
        return json.dumps(asdict(self), sort_keys=True)


# ---------------------------------------------------------------------- the stream


@dataclass
class DatabaseStream:
    """A many-table Debezium stream and its model.

    Attributes:
        records: (topic, key, value) in produce order.
        model: Qualified table name -> id -> row, after every record.
        malformed: (topic, partition, offset) of each record that names no table.
        events: Change events (not tombstones, not malformed records).
    """

    records: list[tuple[str, bytes | None, bytes | None]]
    model: dict[str, dict[int, dict[str, Any]]]
    malformed: set[tuple[str, int, int]]
    events: int


def database_stream(
    prefix: str, tables: int, events: int, malformed: int, seed: int
) -> DatabaseStream:
    """The stream of ``tables`` tables (``t000``...), ``events`` change events spread over
    them (a few tables hot), and ``malformed`` records naming no table at random places
    of random topics."""
    rng = random.Random(seed)
    names = [f"t{i:03d}" for i in range(tables)]
    weights = [3.0 if i % 7 == 0 else 1.0 for i in range(tables)]
    model: dict[str, dict[int, dict[str, Any]]] = {f"inventory.{n}": {} for n in names}
    next_id = dict.fromkeys(names, 1)
    offsets: Counter[str] = Counter()
    records: list[tuple[str, bytes | None, bytes | None]] = []
    bad_at = set(rng.sample(range(events), malformed))
    bad: set[tuple[str, int, int]] = set()

    def put(topic: str, key: bytes | None, value: bytes | None) -> None:
        records.append((topic, key, value))
        offsets[topic] += 1

    for i in range(events):
        name = rng.choices(names, weights)[0]
        topic = f"{prefix}.inventory.{name}"
        if i in bad_at:
            bad.add((topic, 0, offsets[topic]))
            doc = {"payload": {"op": "c", "after": {"id": i}, "ts_ms": 1}}
            put(topic, None, json.dumps(doc).encode())
        live = model[f"inventory.{name}"]
        roll = rng.random()
        if not live or roll < 0.55:
            row = {"id": next_id[name], "name": f"n{i}", "qty": rng.choice([None, i])}
            next_id[name] += 1
            put(topic, *message(name, FIELDS, "r" if i < tables else "c", row))
            live[row["id"]] = row
        elif roll < 0.85:
            old = live[rng.choice(list(live))]
            row = {**old, "name": f"u{i}", "qty": i * 3}
            put(topic, *message(name, FIELDS, "u", row, before=old))
            live[row["id"]] = row
        else:
            old = live.pop(rng.choice(list(live)))
            key, value = message(name, FIELDS, "d", None, before=old)
            put(topic, key, value)
            put(topic, key, None)  # the delete's tombstone
    return DatabaseStream(records, model, bad, events)


class _Producer(threading.Thread):
    """Produces the stream's records, ``chunk`` every ``pace`` seconds while
    :attr:`running` is set (a job runs)."""

    def __init__(self, cfg: DatabaseChaosConfig, records: list[Any]) -> None:
        super().__init__(daemon=True)
        self.cfg, self.records = cfg, records
        self.running = threading.Event()
        self.error: BaseException | None = None
        self.produced = 0

    def run(self) -> None:
        from cdc_sink.kafka.producer import RawProducer

        try:  # idempotent: each topic's records keep their order (offsets as counted)
            with RawProducer(
                self.cfg.bootstrap, backend="confluent", **{"enable.idempotence": True}
            ) as p:
                while self.produced < len(self.records):
                    if not self.running.wait(0.25):
                        continue
                    chunk = self.records[self.produced : self.produced + self.cfg.chunk]
                    for topic, key, value in chunk:
                        p.produce(topic, key, value, partition=0)
                    assert p.flush(60) == 0, "records not delivered"
                    self.produced += len(chunk)
                    time.sleep(self.cfg.pace)
        except BaseException as exc:  # re-raised by run_database_chaos
            self.error = exc

    def drain(self) -> None:
        """Produces what is left, and waits for it."""
        self.running.set()
        self.join()
        if self.error is not None:
            raise self.error


# ---------------------------------------------------------------------- the job


def job_command(cfg: DatabaseChaosConfig, *, available_now: bool) -> list[str]:
    """The ``cdc-sink run`` command line of the whole-database job."""
    secret = ("access_key_id", "secret_access_key", "session_token")
    storage = [
        arg
        for k, v in cfg.storage_options.items()
        if k not in secret
        for arg in ("--storage-option", f"{k}={v}")
    ]
    return [
        cdc_sink_command(),
        "run",
        "--bootstrap-servers",
        cfg.bootstrap,
        "--subscribe-pattern",
        rf"{re.escape(cfg.prefix)}\.inventory\..*",
        "--table-root",
        cfg.root,
        *storage,
        "--format",
        "debezium",
        "--default-buckets",
        "2",
        "--checkpoint",
        str(cfg.workdir / "checkpoint"),
        "--dead-letter",
        f"file://{cfg.dead_letters}",
        "--trigger",
        "available-now" if available_now else "1 second",
        "--max-offsets-per-trigger",
        str(cfg.final_max_offsets if available_now else cfg.max_offsets),
        "--master",
        cfg.master,
        "--spark-log-level",
        "ERROR",
    ]


def job_env(cfg: DatabaseChaosConfig) -> dict[str, str]:
    """The job's environment: none of the job's settings, the object store's keys."""
    env = job_process_env("AWS_")
    if cfg.storage_options:
        env["AWS_ACCESS_KEY_ID"] = cfg.storage_options["access_key_id"]
        env["AWS_SECRET_ACCESS_KEY"] = cfg.storage_options["secret_access_key"]
    return env


class _Job:
    """One run of the job, its output in ``job-<name>.log``."""

    def __init__(
        self,
        cfg: DatabaseChaosConfig,
        name: str,
        *,
        available_now: bool,
        env: dict[str, str] | None = None,
    ) -> None:
        self.t0 = time.monotonic()
        self.log_path = cfg.workdir / f"job-{name}.log"
        with open(self.log_path, "wb") as out:
            self.proc = subprocess.Popen(
                job_command(cfg, available_now=available_now),
                env={**job_env(cfg), **(env or {})},
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own group: the JVM and the Python workers
            )

    def batches(self) -> int:
        """Micro-batches the run logged as done."""
        return len(self.batch_ids())

    def batch_ids(self) -> list[int]:
        """The ids of the micro-batches the run logged as done."""
        return [int(b) for b in BATCH_LINE.findall(self.log_path.read_text(errors="replace"))]

    def wait_batches(self, n: int, timeout: float) -> bool:
        """Waits until the run logged ``n`` batches (False: it exited or timed out)."""
        deadline = time.monotonic() + timeout
        while self.batches() < n:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                return False
            time.sleep(0.1)
        return True

    def kill(self) -> int | None:
        """SIGKILLs the group; the exit code it had before (None: it was running)."""
        code = self.proc.poll()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        return code

    def tail(self) -> str:
        """The end of the run's log."""
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-40:])


def _tables_holding(cfg: DatabaseChaosConfig, names: list[str], batch_id: int) -> int:
    """How many of the tables ``names`` hold micro-batch ``batch_id``."""
    from cdc_sink.errors import TableNotFound
    from cdc_sink.spark.database import table_path
    from cdc_sink.table import open_table

    n = 0
    for name in names:
        try:
            table = open_table(
                table_path(cfg.root, name), storage_options=cfg.storage_options or None
            )
        except TableNotFound:
            continue
        n += any(v.get("batch_id") == batch_id for v in table.versions()[-3:])
    return n


def _killed_run(
    cfg: DatabaseChaosConfig,
    res: DatabaseChaosResult,
    k: int,
    rng: random.Random,
    names: list[str],
    log: Any,
) -> None:
    roll = rng.random()
    fault_run = 1.0 - roll <= cfg.fault_point_share
    crash = {CRASH_RANDOM_ENV: f"{cfg.seed * 1000 + k}:{cfg.fault_probability}"}
    job = _Job(cfg, str(k), available_now=False, env=crash if fault_run else None)
    try:
        if fault_run:
            with contextlib.suppress(subprocess.TimeoutExpired):
                job.proc.wait(timeout=cfg.run_timeout)
        elif roll < cfg.start_kill_share:
            time.sleep(rng.uniform(1.0, 12.0))  # in the JVM's start, the session's, the plan's
            res.start_kills += 1
        elif roll < cfg.start_kill_share + cfg.aimed_kill_share and res.first_batch_seconds:
            time.sleep(rng.uniform(*cfg.aim) * statistics.median(res.first_batch_seconds))
            res.aimed_kills += 1
        elif job.wait_batches(1, cfg.run_timeout):
            res.first_batch_seconds.append(round(time.monotonic() - job.t0, 1))
            time.sleep(rng.uniform(*cfg.kill_after))
    finally:
        code = job.kill()
    text = job.log_path.read_text(errors="replace")
    if code is not None and fault_run and "crash injected at fault point " in text:
        point = text.split("crash injected at fault point ", 1)[1].split("\n", 1)[0]
        res.fault_point_deaths.append(point)
        log(f"run {k}: died at fault point {point}")
    elif code is not None:
        res.failures.append(f"run {k}: the job exited {code} by itself: {job.tail()}")
        log(f"run {k}: exited {code} by itself (see {job.log_path})")
        return
    else:
        res.kills += 1
    ids = job.batch_ids()
    res.batches_at_kills.append(len(ids))
    res.last_batch_logged = max([res.last_batch_logged, *ids])
    # the batch after the last one logged: the tables that committed it before the kill
    ahead = _tables_holding(cfg, names, res.last_batch_logged + 1)
    res.tables_ahead_at_kills.append(ahead)
    log(f"run {k}: after {len(ids)} batches of the run {ahead} tables held the next batch")


def run_database_chaos(cfg: DatabaseChaosConfig, *, log: Any = print) -> DatabaseChaosResult:
    """One run (see the module docstring); returns the verified result."""
    from cdc_sink.kafka.admin import create_topic
    from cdc_sink.spark.database import UNROUTED

    t0 = time.monotonic()
    cfg.workdir.mkdir(parents=True, exist_ok=True)
    stream = database_stream(cfg.prefix, cfg.tables, cfg.events, cfg.malformed, cfg.seed)
    res = DatabaseChaosResult(tables=cfg.tables, events=stream.events, records=len(stream.records))
    for topic in sorted({t for t, _, _ in stream.records}):
        create_topic(cfg.bootstrap, topic, 1)
    names = [*sorted(stream.model), UNROUTED]
    producer = _Producer(cfg, stream.records)
    producer.start()
    rng = random.Random(cfg.seed)
    for k in range(cfg.kills):
        producer.running.set()
        try:
            _killed_run(cfg, res, k, rng, names, log)
        finally:
            producer.running.clear()
    producer.drain()
    log(f"produced {len(stream.records)} records; the final run")
    t1 = time.monotonic()
    final = _Job(cfg, "final", available_now=True)
    try:
        code = final.proc.wait(timeout=cfg.final_timeout)
    except subprocess.TimeoutExpired:
        code = None
    finally:
        final.kill()
    res.final_seconds = round(time.monotonic() - t1, 1)
    if code != 0:
        res.failures.append(f"the final run exited {code}: {final.tail()}")
    else:
        verify(cfg, stream, res)
    res.wall_seconds = round(time.monotonic() - t0, 1)
    return res


# ---------------------------------------------------------------------- verification


def verify(cfg: DatabaseChaosConfig, stream: DatabaseStream, res: DatabaseChaosResult) -> None:
    """Every table equals its model, no table holds a batch twice, the dead letters are
    the records naming no table, each once; failures go to ``res.failures``."""
    from cdc_sink.kafka.deadletter import ParquetDeadLetter
    from cdc_sink.spark.database import UNROUTED, table_path
    from cdc_sink.table import open_table

    storage = cfg.storage_options or None
    batch_ids: set[int] = set()
    for name in [*sorted(stream.model), UNROUTED]:
        table = open_table(table_path(cfg.root, name), storage_options=storage)
        entries = [v for v in table.versions() if v.get("batch_id") is not None]
        res.versions += len(entries)
        seen = Counter((v["app_id"], v["batch_id"]) for v in entries)
        batch_ids |= {b for _, b in seen}
        twice = {k: n for k, n in seen.items() if n > 1}
        if twice:
            res.duplicated_batches += sum(n - 1 for n in twice.values())
            res.failures.append(f"{name}: batches applied more than once: {twice}")
        if name == UNROUTED:
            continue
        expected = sorted(stream.model[name].values(), key=lambda r: r["id"])
        rows = sorted(table.read().select(["id", "name", "qty"]).to_pylist(), key=lambda r: r["id"])
        res.rows += len(rows)
        if rows != expected:
            res.wrong_tables.append(name)
            res.failures.append(
                f"{name}: {len(rows)} rows, the model has {len(expected)}; first difference "
                f"{next(((a, b) for a, b in zip(rows, expected, strict=False) if a != b), None)}"
            )
    res.batches = len(batch_ids)
    letters = ParquetDeadLetter(cfg.dead_letters).read(deduplicate=False)
    got = Counter(
        zip(
            letters.column("topic").to_pylist(),
            letters.column("partition").to_pylist(),
            letters.column("offset").to_pylist(),
            strict=True,
        )
    )
    res.dead_letters = letters.num_rows
    res.dead_letters_expected = len(stream.malformed)
    res.dead_letters_missing = len(stream.malformed - set(got))
    res.dead_letters_duplicated = sum(n - 1 for k, n in got.items() if n > 1)
    res.dead_letters_unexpected = len(set(got) - stream.malformed)
    if res.dead_letters_missing or res.dead_letters_duplicated or res.dead_letters_unexpected:
        res.failures.append(
            f"dead letters: {res.dead_letters_missing} missing, {res.dead_letters_duplicated} "
            f"duplicated, {res.dead_letters_unexpected} unexpected"
        )
