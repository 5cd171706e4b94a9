"""Cold start and recovery benchmark (issue 8 item 3, issue 11 "cold reads").

Two measurements:

``job``: restart-to-first-commit of the real streaming job
(``streaming_jobs/cdc_to_tablets.py`` under ``spark-submit``, ``local[2]``) against a
real Kafka broker (:func:`cdc_sink_testkit.kafka.broker.start_kafka`), and its SIGTERM stop.
The table is pre-loaded with ``--rows`` orders rows (one snapshot per bucket); each cycle
produces ``--chunk`` orders records while the job is down, starts the job from its
checkpoint, waits for its first new commit, then (after a random 0-2 s) sends SIGTERM
to the Python driver (``--stop term``) or SIGKILLs the whole process group
(``--stop kill``), and measures how long the stop took and the exit code. The job runs
through ``benchmarks/recovery_job.py``, which prints timestamped marks, so each restart
is split into::

    launch        Popen -> the Python driver runs (spark-submit's launcher JVM, the
                  driver JVM, PythonRunner)
    imports       Python imports (pyspark, cdc_sink, the job)
    session       SparkSession.getOrCreate (SparkContext in the JVM)
    sink_open     cdc_sink.spark.sink: open_table (log, history)
    query_start   DataStreamWriter.start
    to_batch      query started -> first foreachBatch call (Kafka source, checkpoint
                  recovery, offsets, first batch planning)
    first_batch   first foreachBatch call -> first new commit (Spark's read of the
                  Kafka records, decode, tablet loads, apply, commit)

with the CPU seconds of the driver JVM and the Python driver at the first commit (the
machine may be loaded: CPU time is the figure to compare then), and the tablet loads.

``sink``: the sink's own share of a restart, in-process, for a large table: open the
table as the sink does and commit one micro-batch touching every bucket (each bucket's
tablet is loaded on first touch: newest snapshot, lazily verified pages, then the
segments after it). Wall and CPU seconds, median over ``--repeat``.

Run::

    .venv/bin/python benchmarks/recovery.py job --restarts 20 --rows 1000000
    .venv/bin/python benchmarks/recovery.py sink --rows 10000000 --segments 49
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import re
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

REPO = Path(__file__).resolve().parents[1]
WRAPPER = Path(__file__).with_name("recovery_job.py")
SCHEMA_FILE = REPO / "streaming_jobs" / "orders_schema.json"
MARK = re.compile(r"RECOVERY_MARK (\S+) wall=([\d.]+) py_cpu=([\d.na]+) jvm_cpu=([\d.na]+)(.*)$")

# ---------------------------------------------------------------------- the table


def orders_rows(start: int, n: int, rng: np.random.Generator) -> pa.Table:
    """``n`` inserts of orders rows (wire form) with keys from ``10**12 + start`` (the
    demo stream's keys are far below)."""
    keys = np.arange(start, start + n, dtype=np.int64) + 10**12
    ts = pa.array(1_700_000_000_000_000 + rng.integers(0, 10**12, n), pa.timestamp("us", "UTC"))
    statuses = pa.array(["new", "paid", "shipped", "delivered", "cancelled"])
    cur = pa.array(["EUR", "USD", "GBP"])
    return pa.table(
        {
            "__op": pa.array(np.zeros(n, np.int8)),
            "order_id": pa.array(keys),
            "customer_id": pa.array(rng.integers(0, 10**6, n)),
            "status": statuses.take(pa.array(rng.integers(0, 5, n))),
            "amount": pa.array(rng.integers(100, 10**7, n) / 100).cast(pa.decimal128(12, 2)),
            "currency": cur.take(pa.array(rng.integers(0, 3, n))),
            "payment_status": statuses.take(pa.array(rng.integers(0, 5, n))),
            "items": pa.array(rng.integers(1, 20, n).astype(np.int32)),
            "created_at": ts,
            "updated_at": ts,
            "seq": pa.array(np.ones(n, np.int64)),
            "__seq": pa.array(np.ones(n, np.int64)),
        }
    )


def orders_updates(rows: int, n: int, rng: np.random.Generator, seq: int) -> pa.Table:
    """``n`` partial updates (status, updated_at) of random pre-loaded rows."""
    keys = np.unique(rng.integers(0, rows, n)) + 10**12
    m = len(keys)
    return pa.table(
        {
            "__op": pa.array(np.full(m, 2, np.int8)),
            "order_id": pa.array(keys),
            "status": pa.array(["paid"] * m),
            "updated_at": pa.array(np.full(m, 1_800_000_000_000_000), pa.timestamp("us", "UTC")),
            "seq": pa.array(np.full(m, seq, np.int64)),
            "__seq": pa.array(np.full(m, seq, np.int64)),
            "__set__status": pa.array(np.ones(m, bool)),
            "__set__updated_at": pa.array(np.ones(m, bool)),
            "__set__seq": pa.array(np.ones(m, bool)),
        }
    )


def build_table(path: Path, rows: int, segments: int, seed: int = 5) -> None:
    """An orders table: ``rows`` rows, a snapshot of every bucket, then ``segments``
    update batches after it (what a restart replays)."""
    from cdc_sink import create_table
    from cdc_sink.batch import ChangeBatch

    with open(SCHEMA_FILE, encoding="utf-8") as f:
        schema = json.load(f)
    shutil.rmtree(path, ignore_errors=True)
    rng = np.random.default_rng(seed)
    table = create_table(path, schema)
    for start in range(0, rows, 1_000_000):
        n = min(1_000_000, rows - start)
        b, rejects = ChangeBatch.from_arrow(orders_rows(start, n, rng), table.schema)
        res = table.apply(b)
        assert not len(rejects) and res.counts["inserted"] == n, (rejects.reasons[:3], res)
    table.compact()
    for i in range(segments):
        b, rejects = ChangeBatch.from_arrow(orders_updates(rows, 1000, rng, i + 2), table.schema)
        res = table.apply(b)
        assert not len(rejects) and res.counts["updated"] == len(b), (rejects.reasons[:3], res)


# ---------------------------------------------------------------------- sink share


def bench_sink(args: argparse.Namespace) -> dict[str, Any]:
    """The sink's share of a restart, in-process (see the module docstring)."""
    from cdc_sink import open_table
    from cdc_sink.batch import ChangeBatch

    path = Path(args.dir) / "sink_table"
    if not args.reuse or not (path / "_table.json").exists():
        t0 = time.perf_counter()
        build_table(path, args.rows, args.segments)
        print(
            f"built {args.rows:,}-row orders table + {args.segments} segments in "
            f"{time.perf_counter() - t0:.1f}s",
            flush=True,
        )
    # The Spark driver has pandas imported (pyspark does) before the sink opens the table;
    # parsing a schema imports it here (pyarrow scalars), so do that before timing.
    from cdc_sink.schema import TableSchema

    with open(SCHEMA_FILE, encoding="utf-8") as f:
        TableSchema.from_dict(json.load(f))
    rng = np.random.default_rng(11)
    runs = []
    for r in range(args.repeat):
        t0, c0 = time.perf_counter(), time.process_time()
        table = open_table(path)
        v = table.version
        t1, c1 = time.perf_counter(), time.process_time()
        batch, rejects = ChangeBatch.from_arrow(
            orders_updates(args.rows, 2000, rng, time.time_ns() // 1000), table.schema
        )
        res = table.apply(batch)
        assert not len(rejects) and res.counts["updated"] == len(batch), res
        t2, c2 = time.perf_counter(), time.process_time()
        assert res.version == v + 1 and set(res.buckets) == set(range(table.schema.num_buckets))
        runs.append(
            {
                "open_s": t1 - t0,
                "open_cpu_s": c1 - c0,
                "first_commit_s": t2 - t1,
                "first_commit_cpu_s": c2 - c1,
                "total_s": t2 - t0,
                "total_cpu_s": c2 - c0,
            }
        )
        print(
            f"  run {r}: open {t1 - t0:.3f}s, first commit (loads {table.schema.num_buckets}"
            f" buckets) {t2 - t1:.3f}s, total {t2 - t0:.3f}s wall / {c2 - c0:.3f}s CPU",
            flush=True,
        )
        del table
    out = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
    print(
        f"sink share of a restart, {args.rows:,} rows, {args.segments} segments after the "
        f"snapshots: median {out['total_s']:.3f}s wall, {out['total_cpu_s']:.3f}s CPU "
        f"(open {out['open_s']:.3f}s, first commit {out['first_commit_s']:.3f}s)"
    )
    return out


# ---------------------------------------------------------------------- the job


class _Job:
    """The job as a process group; its output lines collected by threads."""

    def __init__(self, cmd: list[str], env: dict[str, str], log: Path) -> None:
        self.t_popen = time.time()
        self.proc = subprocess.Popen(
            cmd,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            text=True,
            start_new_session=True,
        )
        self.lines: list[str] = []
        self.marks: list[tuple[str, float, float, float, dict[str, str]]] = []
        self._log = open(log, "w", encoding="utf-8")  # noqa: SIM115 - closed in close()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            line = line.rstrip("\n")
            self.lines.append(line)
            self._log.write(line + "\n")
            m = MARK.search(line)
            if m:
                extra = dict(kv.split("=", 1) for kv in m.group(5).split() if "=" in kv)
                self.marks.append(
                    (m.group(1), float(m.group(2)), float(m.group(3)), float(m.group(4)), extra)
                )

    def first(
        self, name: str, **match: str
    ) -> tuple[str, float, float, float, dict[str, str]] | None:
        for mk in list(self.marks):
            if mk[0] == name and all(mk[4].get(k) == v for k, v in match.items()):
                return mk
        return None

    def first_commit(self) -> tuple[str, float, float, float, dict[str, str]] | None:
        for mk in list(self.marks):
            if (
                mk[0] == "batch_end"
                and mk[4].get("result") == "committed"
                and int(mk[4].get("events", "0")) > 0
            ):
                return mk
        return None

    def close(self) -> None:
        self._reader.join(timeout=30)
        self._log.close()


def _job_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CDC_SINK_CRASH")}
    env.update(
        PYSPARK_PYTHON=sys.executable,
        PYSPARK_DRIVER_PYTHON=sys.executable,
        SPARK_LOCAL_IP="127.0.0.1",
        PYTHONPATH=str(REPO),
    )
    return env


def _job_cmd(args: argparse.Namespace, bootstrap: str, topic: str, w: Path) -> list[str]:
    from cdc_sink.spark.session import local_submit_command

    extra = [a for c in args.spark_conf for a in ("--conf", c)]
    return [
        *local_submit_command({"spark.sql.shuffle.partitions": "2"}),
        *extra,
        str(WRAPPER),
        "--bootstrap-servers",
        bootstrap,
        "--topic",
        topic,
        "--table-path",
        str(w / "table"),
        "--schema-file",
        str(SCHEMA_FILE),
        "--checkpoint",
        str(w / "checkpoint"),
        "--trigger",
        args.trigger,
        "--max-offsets-per-trigger",
        str(args.max_offsets),
        "--gc-every",
        "0",
    ]


def _children_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def _cycle(
    args: argparse.Namespace, k: int, bootstrap: str, topic: str, w: Path, rng: random.Random
) -> dict[str, Any]:
    cpu0 = _children_cpu()
    job = _Job(_job_cmd(args, bootstrap, topic, w), _job_env(), w / f"job-{k}.log")
    out: dict[str, Any] = {"cycle": k}
    try:
        deadline = time.monotonic() + args.start_timeout
        while job.first_commit() is None:
            if job.proc.poll() is not None:
                raise RuntimeError(
                    f"job exited {job.proc.returncode} before its first commit"
                    f" (see {w / f'job-{k}.log'})"
                )
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"no commit within {args.start_timeout}s (see {w / f'job-{k}.log'})"
                )
            time.sleep(0.05)
        commit = job.first_commit()
        assert commit is not None
        t0 = job.t_popen
        at: dict[str, float] = {}
        for name in (
            "python_start",
            "imports_done",
            "session_begin",
            "session_up",
            "sink_open_begin",
            "sink_open_end",
            "query_start_begin",
            "query_start_end",
            "batch_begin",
        ):
            mk = job.first(name)
            if mk is not None:
                at[name] = mk[1]
        at["commit"] = commit[1]
        out["restart_to_commit_s"] = at["commit"] - t0
        out["phases_s"] = {
            "launch": at["python_start"] - t0,
            "imports": at["session_begin"] - at["python_start"],
            "session": at["session_up"] - at["session_begin"],
            "sink_open": at["sink_open_end"] - at["sink_open_begin"],
            "query_start": at["query_start_end"] - at["query_start_begin"],
            "to_batch": at["batch_begin"] - at["query_start_end"],
            "first_batch": at["commit"] - at["batch_begin"],
        }
        out["cpu_at_commit_s"] = {"jvm": commit[3], "python": commit[2]}
        loads = [mk for mk in job.marks if mk[0] == "load_bucket" and mk[1] <= commit[1]]
        out["tablet_loads"] = len(loads)
        out["tablet_load_s"] = sum(float(mk[4]["wall_s"]) for mk in loads)
        out["tablet_load_cpu_s"] = sum(float(mk[4]["cpu_s"]) for mk in loads)
        out["first_commit_phases"] = json.loads(commit[4].get("phases", "{}"))
        out["first_commit_events"] = int(commit[4].get("events", "0"))
        skipped = [
            mk
            for mk in job.marks
            if mk[0] == "batch_end" and mk[4].get("result") == "skipped" and mk[1] <= commit[1]
        ]
        out["replayed_batches"] = len(skipped)
        time.sleep(rng.uniform(0.0, 2.0))
        batch_totals = [
            float(json.loads(mk[4].get("phases", "{}")).get("total", 0.0))
            for mk in job.marks
            if mk[0] == "batch_end"
        ]
        ends = [mk for mk in job.marks if mk[0] == "batch_end"]
        begins = [mk for mk in job.marks if mk[0] == "batch_begin"]
        durations = [e[1] - b[1] for b, e in zip(begins, ends, strict=False)]
        out["max_batch_s"] = max(durations + batch_totals, default=0.0)
        pid_mark = job.first("python_start")
        assert pid_mark is not None
        t_stop = time.monotonic()
        if args.stop == "term":
            os.kill(int(pid_mark[4]["pid"]), signal.SIGTERM)
        else:
            os.killpg(job.proc.pid, signal.SIGKILL)
        try:
            rc = job.proc.wait(timeout=args.stop_timeout)
        except subprocess.TimeoutExpired:
            rc = None
        out["stop_s"] = time.monotonic() - t_stop
        out["exit_code"] = rc
        if rc is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(job.proc.pid, signal.SIGKILL)
            job.proc.wait()
    except BaseException:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(job.proc.pid, signal.SIGKILL)
        job.proc.wait()
        raise
    finally:
        job.close()
    progress = [mk for mk in job.marks if mk[0] == "progress"]
    if progress:  # Spark's own split of the first trigger (latestOffset, addBatch, ...)
        out["first_progress_ms"] = json.loads(progress[0][4].get("duration_ms", "{}"))
    out["run_cpu_s"] = _children_cpu() - cpu0
    return out


def bench_job(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Restart cycles of the real job (see the module docstring)."""
    from cdc_sink.kafka.producer import CdcProducer
    from cdc_sink_testkit.demo import generate_orders, orders_schema
    from cdc_sink_testkit.demo.stream import produce_records
    from cdc_sink_testkit.kafka import create_topic, start_kafka

    w = Path(args.dir) / "job"
    shutil.rmtree(w, ignore_errors=True)
    w.mkdir(parents=True)
    t0 = time.perf_counter()
    build_table(w / "table", args.rows, 0)
    print(f"pre-loaded {args.rows:,} rows in {time.perf_counter() - t0:.1f}s", flush=True)
    records = generate_orders(args.chunk * (args.restarts + 1), seed=3, malformed_rate=0.0)
    rng = random.Random(7)
    results = []
    with start_kafka(kind=args.kafka) as kafka:
        topic = "recovery"
        create_topic(kafka.bootstrap_servers, topic, args.partitions)
        with CdcProducer(kafka.bootstrap_servers, topic, orders_schema()) as producer:
            for k in range(args.restarts + 1):
                produce_records(producer, records[k * args.chunk : (k + 1) * args.chunk])
                producer.flush()
                try:
                    res = _cycle(args, k, kafka.bootstrap_servers, topic, w, rng)
                except RuntimeError as exc:
                    res = {"cycle": k, "error": str(exc)}
                res["warmup"] = k == 0
                results.append(res)
                with open(Path(args.dir) / "recovery_job.jsonl", "a", encoding="utf-8") as f:
                    f.write(json.dumps(res) + "\n")
                print(json.dumps(res), flush=True)
    _summarize(args, [r for r in results if not r["warmup"]])
    return results


def _summarize(args: argparse.Namespace, runs: list[dict[str, Any]]) -> None:
    ok = [r for r in runs if "error" not in r]
    print(f"\n{len(ok)} of {len(runs)} restarts committed")
    if not ok:
        return

    def line(label: str, xs: list[float]) -> None:
        print(f"  {label:<34} median {statistics.median(xs):7.2f}  max {max(xs):7.2f}")

    line("restart -> first new commit (s)", [r["restart_to_commit_s"] for r in ok])
    for p in ok[0]["phases_s"]:
        line(f"  {p} (s)", [r["phases_s"][p] for r in ok])
    line("  of which tablet loads (s)", [r["tablet_load_s"] for r in ok])
    line("driver JVM CPU at first commit (s)", [r["cpu_at_commit_s"]["jvm"] for r in ok])
    line("Python driver CPU at first commit (s)", [r["cpu_at_commit_s"]["python"] for r in ok])
    line("tablet load CPU (s)", [r["tablet_load_cpu_s"] for r in ok])
    for key in (
        "latestOffset",
        "queryPlanning",
        "getBatch",
        "addBatch",
        "walCommit",
        "commitOffsets",
        "triggerExecution",
    ):
        xs = [
            r["first_progress_ms"][key] / 1000 for r in ok if key in r.get("first_progress_ms", {})
        ]
        if xs:
            line(f"first trigger {key} (s)", xs)
    line("CPU of the whole run, all processes (s)", [r["run_cpu_s"] for r in ok])
    stops = [r for r in ok if "stop_s" in r]
    if args.stop == "term" and stops:
        zero = sum(1 for r in stops if r["exit_code"] == 0)
        bound = [float(args.trigger_s) + r["max_batch_s"] for r in stops]
        within = sum(
            1 for r, b in zip(stops, bound, strict=True) if r["exit_code"] == 0 and r["stop_s"] <= b
        )
        line("SIGTERM -> exit (s)", [r["stop_s"] for r in stops])
        print(
            f"  SIGTERM: exit 0 in {zero} of {len(stops)}; exit 0 within trigger interval "
            f"+ the run's longest batch in {within} of {len(stops)}"
        )


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = ap.add_subparsers(dest="cmd", required=True)
    j = sub.add_parser("job", help="restart cycles of the real streaming job")
    j.add_argument("--restarts", type=int, default=8, help="measured restarts (plus a warm-up)")
    j.add_argument("--rows", type=int, default=1_000_000, help="rows pre-loaded in the table")
    j.add_argument("--chunk", type=int, default=2000, help="records produced per cycle")
    j.add_argument("--partitions", type=int, default=3)
    j.add_argument("--max-offsets", type=int, default=5000)
    j.add_argument("--trigger", default="1 second")
    j.add_argument("--trigger-s", type=float, default=1.0, help="the trigger interval in s")
    j.add_argument("--stop", choices=("term", "kill"), default="term")
    j.add_argument("--start-timeout", type=float, default=300.0)
    j.add_argument("--stop-timeout", type=float, default=120.0)
    j.add_argument("--kafka", default="local", help="start_kafka kind (local, docker, auto)")
    j.add_argument(
        "--spark-conf",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra spark-submit --conf (repeatable)",
    )
    j.add_argument("--dir", default="/tmp/cdc_bench_recovery")
    s = sub.add_parser("sink", help="the sink's share of a restart, in-process")
    s.add_argument("--rows", type=int, default=10_000_000)
    s.add_argument(
        "--segments",
        type=int,
        default=49,
        help="update batches after the snapshot (snapshot_every is 50)",
    )
    s.add_argument("--repeat", type=int, default=5)
    s.add_argument("--reuse", action="store_true", help="reuse a table built before")
    s.add_argument("--dir", default="/tmp/cdc_bench_recovery")
    args = ap.parse_args()
    Path(args.dir).mkdir(parents=True, exist_ok=True)
    if args.cmd == "job":
        bench_job(args)
    else:
        bench_sink(args)


if __name__ == "__main__":
    main()
