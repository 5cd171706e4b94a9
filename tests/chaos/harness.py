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
    final run         the job with --trigger available-now, until it has caught up

Then, from the topic alone (every record consumed back, decoded as the job decodes
native JSON, applied to :class:`~cdc_sink.demo.ExpectedTable` in offset order per
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
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

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


@dataclass
class ChaosResult:
    """What a run did and what :func:`verify` found (``failures`` empty: it passed)."""

    kills: int = 0
    fault_point_deaths: int = 0
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
    wall_seconds: float = 0.0
    failures: list[str] = field(default_factory=list)

    def to_json(self) -> str:
        """The result as one JSON object."""
        return json.dumps(asdict(self), sort_keys=True)


# ---------------------------------------------------------------------- processes


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CDC_SINK_CRASH")}
    env.update(PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable,
               SPARK_LOCAL_IP="127.0.0.1", PYTHONPATH=str(REPO))
    return env


def job_command(cfg: ChaosConfig, *, available_now: bool) -> list[str]:
    """The spark-submit command line of the streaming job."""
    from cdc_sink.kafka.jars import spark_kafka_conf

    submit = str(Path(sys.executable).with_name("spark-submit"))
    w = cfg.workdir
    return [submit, "--master", "local[2]", "--jars", spark_kafka_conf()["spark.jars"],
            "--conf", "spark.ui.enabled=false", "--conf", "spark.sql.session.timeZone=UTC",
            "--conf", "spark.sql.shuffle.partitions=4",
            str(JOB), "--bootstrap-servers", cfg.bootstrap, "--topic", cfg.topic,
            "--table-path", str(w / "table"), "--schema-file", str(SCHEMA_FILE),
            "--checkpoint", str(w / "checkpoint"), "--apply-mode", cfg.apply_mode,
            "--dead-letter", f"file://{w / 'dead-letters'}",
            "--trigger", "available-now" if available_now else "1 second",
            "--max-offsets-per-trigger", str(cfg.max_offsets),
            "--compact-every", str(cfg.compact_every), "--gc-every", str(cfg.gc_every),
            "--retain-versions", str(cfg.retain_versions), "--retain-seconds", "0"]


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def _table_version(path: Path) -> int | None:
    from cdc_sink.table import open_table

    try:
        return open_table(path).version
    except Exception:  # not created yet, or mid-creation
        return None


class _Producer(threading.Thread):
    """Produces the run's records in chunks spread over ``produce_seconds``."""

    def __init__(self, cfg: ChaosConfig, records: list[Any]) -> None:
        super().__init__(daemon=True)
        self.cfg, self.records = cfg, records
        self.error: BaseException | None = None

    def run(self) -> None:
        from cdc_sink.demo import orders_schema
        from cdc_sink.demo.stream import produce_records
        from cdc_sink.kafka.producer import CdcProducer

        try:
            chunks = max(1, int(self.cfg.produce_seconds * 2))
            size = -(-len(self.records) // chunks)
            with CdcProducer(self.cfg.bootstrap, self.cfg.topic, orders_schema()) as p:
                for i in range(0, len(self.records), size):
                    produce_records(p, self.records[i: i + size])
                    p.flush()
                    time.sleep(self.cfg.produce_seconds / chunks)
        except BaseException as exc:  # reported by run_chaos
            self.error = exc


def run_chaos(cfg: ChaosConfig, *, log: Any = print) -> ChaosResult:
    """One chaos run (see the module docstring); returns the verified result."""
    from cdc_sink.demo import generate_orders
    from cdc_sink.kafka.broker import create_topic

    t0 = time.monotonic()
    rng = random.Random(cfg.seed)
    w = cfg.workdir
    w.mkdir(parents=True, exist_ok=True)
    create_topic(cfg.bootstrap, cfg.topic, cfg.partitions)
    records = generate_orders(cfg.events, seed=cfg.seed, malformed_rate=cfg.malformed_rate)
    producer = _Producer(cfg, records)
    producer.start()
    res = ChaosResult(events=len(records))
    stop_file = w / "reader.stop"
    reader = subprocess.Popen([sys.executable, str(READER), str(w / "table"),
                               str(w / "reads.jsonl"), str(stop_file)],
                              env=_env(), start_new_session=True)
    try:
        fault_runs = set(rng.sample(range(cfg.kills), min(cfg.fault_point_runs, cfg.kills)))
        for k in range(cfg.kills):
            _one_killed_run(cfg, res, k, k in fault_runs, rng, log)
        producer.join()
        if producer.error is not None:
            raise RuntimeError(f"producing failed: {producer.error!r}")
        with open(w / "job-final.log", "wb") as err:
            final = subprocess.Popen(job_command(cfg, available_now=True), env=_env(),
                                     stdout=err, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        try:
            code = final.wait(timeout=cfg.final_timeout)
        except subprocess.TimeoutExpired:
            _kill_group(final)
            raise RuntimeError(f"the final available-now run took more than "
                               f"{cfg.final_timeout}s (see {w / 'job-final.log'})") from None
        if code != 0:
            res.failures.append(f"the final available-now run exited {code} "
                                f"(see {w / 'job-final.log'})")
    finally:
        stop_file.touch()
        try:
            reader.wait(timeout=60)
        except subprocess.TimeoutExpired:
            _kill_group(reader)
    verify(cfg, res)
    res.wall_seconds = round(time.monotonic() - t0, 1)
    return res


def _one_killed_run(cfg: ChaosConfig, res: ChaosResult, k: int, at_fault_point: bool,
                    rng: random.Random, log: Any) -> None:
    env = _env()
    if at_fault_point:
        env["CDC_SINK_CRASH_RANDOM"] = f"{cfg.seed * 1000 + k}:0.02"
    table = cfg.workdir / "table"
    before = _table_version(table)
    with open(cfg.workdir / f"job-{k}.log", "wb") as err:
        proc = subprocess.Popen(job_command(cfg, available_now=False), env=env, stdout=err,
                                stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + cfg.run_timeout
        while proc.poll() is None and time.monotonic() < deadline:
            v = _table_version(table)
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
        log(f"run {k}: SIGKILL at table version {_table_version(table)}")
    elif "crash injected at fault point" in log_text:
        res.fault_point_deaths += 1
        point = log_text.split("crash injected at fault point ", 1)[1].split("\n", 1)[0]
        log(f"run {k}: died at fault point {point} (exit {code}, table version "
            f"{_table_version(table)})")
    else:
        res.other_exits.append(code)
        res.failures.append(f"run {k}: the job exited {code} by itself "
                            f"(see {cfg.workdir / f'job-{k}.log'})")
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

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                             consumer_timeout_ms=5000)
    try:
        parts = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic))]
        consumer.assign(parts)
        consumer.seek_to_beginning(*parts)
        ends = consumer.end_offsets(parts)
        out: dict[int, list[_TopicRecord]] = {tp.partition: [] for tp in parts}
        while any(consumer.position(tp) < ends[tp] for tp in parts):
            for tp, msgs in consumer.poll(timeout_ms=1000).items():
                for m in msgs:
                    out[tp.partition].append(_TopicRecord(m.partition, m.offset,
                                                          _decode(m.value)))
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
        from cdc_sink.demo import ExpectedTable, orders_schema

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
    from cdc_sink.demo import diff_rows
    from cdc_sink.kafka.deadletter import ParquetDeadLetter
    from cdc_sink.table import open_table
    from tests.chaos.reader import rows_digest

    topic = consume_topic(cfg.bootstrap, cfg.topic)
    res.malformed = sum(r.event is None for recs in topic.values() for r in recs)
    ends = {p: (recs[-1].offset + 1 if recs else 0) for p, recs in topic.items()}
    table = open_table(cfg.workdir / "table")
    model = _Model(topic)
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
        if e.batch_id is not None:
            if e.batch_id <= last_batch:
                res.duplicated_batches += 1
                res.failures.append(f"version {e.version}: batch {e.batch_id} again")
            last_batch = e.batch_id
        if last_offsets is not None and any(offsets.get(p, 0) < o
                                            for p, o in last_offsets.items()):
            res.failures.append(f"version {e.version}: offsets went back {offsets}")
        outcomes = model.advance(offsets)
        if not first:  # the oldest retained version's delta starts below the horizon
            want = {k: v for k, v in outcomes.items() if k != "rejected" and v}
            got = {k: e.stats.get(k, 0) for k in want}
            extra = {k: v for k, v in e.stats.items()
                     if k in ("inserted", "updated", "deleted") and v and k not in want}
            if got != want or extra:
                res.duplicated_batches += 1
                res.failures.append(f"version {e.version} counts {e.stats} != model {want}")
        first = False
        last_offsets = offsets
        res.batches += 1
        try:
            data = table.read(version=e.version)
        except Exception as exc:
            res.failures.append(f"version {e.version}: {type(exc).__name__}: {exc}")
            continue
        want_rows = model.table.snapshot()
        diff = diff_rows(want_rows, data.to_pylist(), model.schema)
        if diff:
            res.lost_or_wrong_rows += len(diff)
            res.failures.append(f"version {e.version} != model at {offsets}: {diff[:3]}")
        res.versions_checked += 1
        digests[e.version] = rows_digest(model.table.to_arrow(), keys)
    if last_offsets != ends:
        res.failures.append(f"the latest batch ends at {last_offsets}, the topic at {ends}")
    model.advance(ends)
    latest = table.read()
    res.rows = latest.num_rows
    diff = diff_rows(model.table.snapshot(), latest.to_pylist(), model.schema)
    if diff:
        res.lost_or_wrong_rows += len(diff)
        res.failures.append(f"the latest version != the model of the topic: {diff[:3]}")
    # Dead letters: exactly the records the model rejects, each once.
    dl = ParquetDeadLetter(cfg.workdir / "dead-letters").read()
    got = Counter(zip(dl.column("partition").to_pylist(), dl.column("offset").to_pylist(),
                      strict=True))
    want_dl = Counter(model.rejected)
    res.dead_letters, res.dead_letters_expected = dl.num_rows, len(model.rejected)
    res.dead_letters_missing = len(set(want_dl) - set(got))
    res.dead_letters_duplicated = sum(n - 1 for n in got.values() if n > 1)
    res.dead_letters_unexpected = sum(n for key, n in got.items() if key not in want_dl)
    if res.dead_letters_missing or res.dead_letters_duplicated or res.dead_letters_unexpected:
        res.failures.append(
            f"dead letters: {res.dead_letters} written, {res.dead_letters_expected} expected, "
            f"{res.dead_letters_missing} missing, {res.dead_letters_duplicated} duplicated, "
            f"{res.dead_letters_unexpected} unexpected")
    _check_reads(cfg, res, digests)


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
