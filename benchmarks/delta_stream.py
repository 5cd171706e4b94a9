"""Spark-level comparison (issue 11): the same Kafka CDC events consumed by Structured
Streaming into cdc_sink's sink and into a Delta MERGE ``foreachBatch``, freshness included.

On the project's local KRaft broker, one topic is produced once: the workload of
``benchmarks/e2e.py`` (``--keys`` inserts, then ``--events`` CDC events: 90% partial
updates of 2 of 10 columns, 10% inserts; e2e's workload has no deletes). Then, per repeat,
each consumer runs in its own process, one after the other (``delta_merge`` first):

* ``delta_merge`` (the pinned Delta virtualenv of ``benchmarks/peers.py``: pyspark 4.2.0,
  delta-spark 4.4.0, Spark's Kafka source of the same version through
  ``spark.jars.packages``): ``foreachBatch`` parsing the values with ``from_json``,
  folding the events of a key in the batch into one row, one ``MERGE`` on the key;
* ``cdc_sink`` (the project's virtualenv, the code of ``--cdc-sink``):
  ``cdc_sink.spark.sink(..., apply_mode="driver")``.

Each run subscribes to the backlog topic and to an empty live topic of its own, from
``earliest``, with a fresh checkpoint and table, ``--max-per-trigger`` records per
micro-batch and a 1 s processing-time trigger, local[2] Spark:

1. backlog: events/s = backlog events / (query start -> last backlog commit);
2. live: this script produces to the run's live topic at a rate for ``--duration`` s,
   every event stamped with its produce time ``ts_ms``; freshness = commit wall time of
   the batch that made an event visible - its ``ts_ms`` (a sample of up to 4,096
   evenly spaced events per batch for both consumers, cdc_sink's rule), p50/p99 over the
   phase; lag = events produced but not visible when the producer stopped; catch-up =
   producer stopped -> all of the phase's events visible; kept up = caught up (within
   max(60 s, duration)) and freshness did not grow: p50 of the phase's second half (by
   ``ts_ms``) <= ``--growth`` x p50 of its first half + 1 s. Rates
   (``--rate auto``): ``delta_merge`` at 80% of its backlog rate; ``cdc_sink`` at that same
   rate, then at 80% of its own backlog rate (both fixed by repeat 1). ``--rate 20000,50000``:
   every consumer at each rate.

The live events are one deterministic sequence (chunks of 100 events, chunk j seeded by
j; a phase at rate R produces R * duration events, rounded to whole chunks), so two runs whose
live phases had the same rates in the same order applied the same events. After every
phase the worker takes a full-content digest of its table (rows sorted by key; cdc_sink:
``open_table(path).read()``, Delta: Spark's read), the query idle; every two tables that
applied the same events must have the same digest, or the script fails. With ``--rate
auto`` that compares Delta's final table with cdc_sink's after its phase at Delta's rate
(its last phase, at its own rate, has no Delta counterpart).

Every process started here (the broker, the workers and their Spark JVMs, in their own
process groups) is stopped at the end, also on failure; the work directory (tables, the
workers' logs) is deleted after a successful run unless ``--work`` names it (kept for
its logs otherwise).

Run::

    .venv/bin/python benchmarks/delta_stream.py [--events 600000] [--keys 100000]
        [--rate auto] [--duration 45] [--repeats 1] [--json out.json]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import queue
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from typing import IO, Any

import numpy as np
from e2e import SCHEMA, encode_events, produce_backlog  # benchmarks/ is sys.path[0]
from peers import ROOT, SYSTEMS, WORKERS, export_cdc_sink, venv_python

WORKER = os.path.join(WORKERS, "delta_stream_worker.py")
CONSUMERS = ("delta_merge", "cdc_sink")  # delta first: its backlog rate sets the live rate
CHUNK = 100  # events per deterministic live chunk
LIVE_SEED = 9
LIVE_KEY0 = 10**9  # inserted keys of the live events: LIVE_KEY0 + chunk * CHUNK + i
LIVE_SEQ0 = 10**10


# -- worker processes --------------------------------------------------------------------


class Worker:
    """A worker process (its own process group) and its ``@@`` report lines."""

    def __init__(self, cmd: list[str], env: dict[str, str], log_path: str) -> None:
        self.log_path = log_path
        self.log: IO[str] = open(log_path, "w")  # noqa: SIM115  (closed in close())
        self.proc = subprocess.Popen(
            cmd,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log,
            text=True,
            env=env,
            start_new_session=True,
        )
        self.reports: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith("@@ "):
                self.reports.put(json.loads(line[3:]))
            else:
                self.log.write(line)
        self.reports.put(None)

    def send(self, line: str) -> None:
        """One command line to the worker."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def expect(self, event: str, timeout: float) -> dict[str, Any]:
        """The next report, which must be ``event``."""
        try:
            rep = self.reports.get(timeout=timeout)
        except queue.Empty:
            raise RuntimeError(f"no {event!r} report within {timeout:.0f}s{self._tail()}") from None
        if rep is None or rep.get("event") != event:
            raise RuntimeError(f"expected {event!r}, got {rep}{self._tail()}")
        return rep

    def _tail(self) -> str:
        self.log.flush()
        with open(self.log_path, errors="replace") as f:
            return f"; worker log {self.log_path} ends:\n" + f.read()[-3000:]

    def close(self) -> None:
        """Closes its stdin (the worker then stops its query and exits), waits briefly for
        a clean exit, then ends whatever is left of the worker's process group (its JVM)."""
        with contextlib.suppress(OSError):
            if self.proc.stdin is not None:
                self.proc.stdin.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=60)
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(self.proc.pid, sig)  # the group this worker leads, nothing else
            except ProcessLookupError:
                break
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=20)
            time.sleep(1)
        self.reader.join(timeout=10)
        self.log.close()


# -- the live producer -------------------------------------------------------------------


class LiveProducer:
    """Produces the deterministic live sequence (chunk j of :data:`CHUNK` events, seeded by
    j) to each live topic, continuing where that topic's sequence stopped."""

    def __init__(self, bootstrap: str, keys: int) -> None:
        from confluent_kafka import Producer

        self.keys = keys
        self.next: dict[str, int] = {}  # topic -> next chunk
        self.producer = Producer(
            {"bootstrap.servers": bootstrap, "linger.ms": 5, "enable.idempotence": True}
        )

    def _chunk(self, topic: str, j: int, ts_ms: int) -> None:
        rng = np.random.default_rng([LIVE_SEED, j])
        for k, v in encode_events(
            CHUNK, self.keys, LIVE_KEY0 + j * CHUNK, LIVE_SEQ0 + j * CHUNK, rng, ts_ms
        ):
            while True:
                try:
                    self.producer.produce(topic, key=k, value=v)
                    break
                except BufferError:
                    self.producer.poll(0.01)

    def paced(self, topic: str, rate: int, duration: float) -> tuple[int, int, float]:
        """``round(rate * duration)`` events (whole chunks; the same count for the same rate
        and duration), chunk i due ``i * CHUNK / rate`` s after the start; (events, stop
        time in ms after the flush, seconds)."""
        chunks = max(1, round(rate * duration / CHUNK))
        j0 = self.next.get(topic, 0)
        start = time.time()
        for i in range(chunks):
            wait = start + i * CHUNK / rate - time.time()
            if wait > 0:
                time.sleep(wait)
            self._chunk(topic, j0 + i, int(time.time() * 1000))
            self.producer.poll(0)
        assert self.producer.flush(60) == 0, "live events not delivered"
        stop = time.time()
        self.next[topic] = j0 + chunks
        return chunks * CHUNK, int(stop * 1000), stop - start


# -- the benchmark -----------------------------------------------------------------------


class Bench:
    """The runs of every consumer on one broker and one backlog topic."""

    def __init__(self, kafka: Any, args: argparse.Namespace, work: str, cdc_path: str) -> None:
        self.kafka = kafka
        self.args = args
        self.work = work
        self.stamp = int(time.time())
        self.backlog_topic = f"delta-stream-backlog-{self.stamp}"
        kafka.create_topic(self.backlog_topic, args.partitions)
        self.total = produce_backlog(
            kafka.bootstrap_servers,
            self.backlog_topic,
            args.keys,
            args.events,
            np.random.default_rng(1),
        )
        self.producer = LiveProducer(kafka.bootstrap_servers, args.keys)
        self.fixed = [int(r) for r in args.rate.split(",")] if args.rate != "auto" else None
        self.auto: dict[str, int] = {}  # consumer -> its own 80% rate (repeat 1)
        self.runs: list[dict[str, Any]] = []
        delta_python = venv_python("spark_delta", SYSTEMS["spark_delta"][2], args.venvs)
        self.pythons = {"cdc_sink": sys.executable, "delta_merge": delta_python}
        self.paths = {"cdc_sink": cdc_path, "delta_merge": ""}

    def _env(self, consumer: str) -> dict[str, str]:
        env = {
            k: v
            for k, v in os.environ.items()
            if k not in ("SPARK_HOME", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "PYTHONPATH")
        }
        env["PYSPARK_PYTHON"] = env["PYSPARK_DRIVER_PYTHON"] = self.pythons[consumer]
        if self.paths[consumer]:
            env["PYTHONPATH"] = self.paths[consumer]
        return env

    def _worker(self, consumer: str, extra: list[str], log: str) -> Worker:
        cmd = [
            self.pythons[consumer],
            WORKER,
            "--consumer",
            consumer,
            "--bootstrap",
            self.kafka.bootstrap_servers,
            "--schema",
            json.dumps(SCHEMA.to_dict()),
            "--max-per-trigger",
            str(self.args.max_per_trigger),
            "--driver-memory",
            self.args.driver_memory,
            *extra,
        ]
        return Worker(cmd, self._env(consumer), os.path.join(self.work, log))

    def _rates(self, consumer: str, backlog_eps: float) -> list[int]:
        """The live rates of this run (auto: fixed by the first run of each consumer)."""
        if self.fixed is not None:
            return self.fixed
        self.auto.setdefault(consumer, max(CHUNK, int(backlog_eps * 0.8) // CHUNK * CHUNK))
        if consumer == "delta_merge":
            return [self.auto["delta_merge"]]
        rates = (self.auto.get("delta_merge"), self.auto[consumer])
        return list(dict.fromkeys(r for r in rates if r))

    def run(self, consumer: str, repeat: int) -> dict[str, Any]:
        """One run: backlog drain, the live phases, stop."""
        name = f"{consumer}-{repeat}"
        live_topic = f"delta-stream-live-{name}-{self.stamp}"
        self.kafka.create_topic(live_topic, self.args.partitions)
        rdir = os.path.join(self.work, name)
        os.makedirs(rdir)
        topics = f"{self.backlog_topic},{live_topic}"
        timeout = max(60.0, self.args.duration)
        w = self._worker(
            consumer,
            [
                *("--dir", rdir, "--topics", topics, "--app-id", f"delta-stream-{name}"),
                *("--catchup-timeout", str(timeout)),
            ],
            f"{name}.log",
        )
        try:
            b = w.expect("backlog", timeout=self.args.backlog_timeout)
            eps = self.total / ((b["last_commit_ms"] - b["t0_ms"]) / 1000)
            print(f"  {name}: backlog {self.total:,} events, {eps:,.0f} events/s", flush=True)
            phases = [
                self._live(w, live_topic, rate, timeout) for rate in self._rates(consumer, eps)
            ]
            w.send("stop")
            w.expect("stopped", timeout=120)
        finally:
            w.close()
        out = {"consumer": consumer, "repeat": repeat, "backlog_eps": eps, "phases": phases}
        self.runs.append(out)
        return out

    def _live(self, w: Worker, topic: str, rate: int, timeout: float) -> dict[str, Any]:
        """One live phase at ``rate``."""
        w.send("live")
        w.expect("live_ready", timeout=60)
        n, t_stop, secs = self.producer.paced(topic, rate, self.args.duration)
        secs = max(secs, self.args.duration)  # the last chunk goes out CHUNK / rate early
        w.send(f"end {n} {t_stop}")
        ph = w.expect("phase", timeout=timeout + 120)
        w.send("digest")
        d = w.expect("digest", timeout=600)
        cu = ph["catch_up_s"]
        ph.update(
            rate=rate,
            produced=n,
            produced_eps=n / secs,
            kept_up=_kept_up(ph, self.args.growth),
            digest=d["digest"],
            rows=d["rows"],
        )
        print(
            f"    live {rate:,}/s (produced {n / secs:,.0f}/s): p50 {_ms(ph['p50_ms'])}, "
            f"p99 {_ms(ph['p99_ms'])} ({ph['samples']:,} samples, {ph['batches']} batches); "
            f"lag at stop {ph['lag_at_stop']:,} events, catch-up "
            f"{'-' if cu is None else f'{cu:.1f}s'}; p50 1st/2nd half "
            f"{_ms(ph['p50_first_half_ms'])}/{_ms(ph['p50_second_half_ms'])}; table "
            f"{d['rows']:,} rows, digest {d['digest'][:16]}",
            flush=True,
        )
        return ph

    def identical(self) -> bool:
        """Whether every two tables that applied the same events (the backlog and live
        phases at the same rates, in the same order) have the same digest."""
        groups: dict[tuple[int, ...], dict[str, str]] = {}
        for r in self.runs:
            rates: tuple[int, ...] = ()
            for ph in r["phases"]:
                rates = (*rates, ph["rate"])
                groups.setdefault(rates, {})[f"{r['consumer']}-{r['repeat']}"] = ph["digest"]
        for rates, tables in groups.items():
            if len(tables) > 1:
                same = "identical" if len(set(tables.values())) == 1 else "DIFFERENT"
                each = ", ".join(f"{t} {d[:16]}" for t, d in tables.items())
                print(f"  tables after live rates {list(rates)}: {same} ({each})")
        return all(len(set(tables.values())) == 1 for tables in groups.values())


def _kept_up(ph: dict[str, Any], growth: float) -> bool:
    """Caught up, and the freshness of the second half no worse than ``growth`` times
    the first half's plus a second."""
    first, second = ph["p50_first_half_ms"], ph["p50_second_half_ms"]
    if ph["catch_up_s"] is None or first is None or second is None:
        return False
    return bool(second <= growth * first + 1000)


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v:,.0f} ms"


# -- report ------------------------------------------------------------------------------


def summary_rows(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per consumer and live rate: medians over the repeats."""
    rows = []
    for consumer in CONSUMERS:
        mine = [r for r in runs if r["consumer"] == consumer]
        if not mine:
            continue
        eps = statistics.median(r["backlog_eps"] for r in mine)
        for rate in dict.fromkeys(p["rate"] for r in mine for p in r["phases"]):
            ph = [p for r in mine for p in r["phases"] if p["rate"] == rate]

            def med(k: str, ph: list[dict[str, Any]] = ph) -> float | None:
                vals = [p[k] for p in ph if p[k] is not None]
                return statistics.median(vals) if vals else None

            rows.append(
                {
                    "consumer": consumer,
                    "backlog_eps": eps,
                    "rate": rate,
                    "produced_eps": med("produced_eps"),
                    "p50_ms": med("p50_ms"),
                    "p99_ms": med("p99_ms"),
                    "lag_at_stop": med("lag_at_stop"),
                    "catch_up_s": med("catch_up_s"),
                    "kept_up": sum(p["kept_up"] for p in ph),
                    "phases": len(ph),
                }
            )
    return rows


def markdown(rows: list[dict[str, Any]]) -> str:
    """The summary as a markdown table."""
    out = [
        "| consumer | backlog events/s | live rate events/s (produced) | freshness p50 | "
        "freshness p99 | kept up (lag at stop, catch-up) |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        kept = "yes" if r["kept_up"] == r["phases"] else f"**no** ({r['kept_up']}/{r['phases']})"
        cu = "-" if r["catch_up_s"] is None else f"{r['catch_up_s']:.1f} s"
        out.append(
            f"| {r['consumer']} | {r['backlog_eps']:,.0f} | {r['rate']:,} "
            f"({r['produced_eps']:,.0f}) | {_ms(r['p50_ms'])} | {_ms(r['p99_ms'])} | "
            f"{kept} ({r['lag_at_stop']:,.0f} events, {cu}) |"
        )
    return "\n".join(out)


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--events", type=int, default=600_000, help="backlog CDC events")
    ap.add_argument("--keys", type=int, default=100_000, help="backlog inserts first")
    ap.add_argument("--max-per-trigger", type=int, default=100_000)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--rate", default="auto", help="live events/s: 'auto' or comma-separated rates")
    ap.add_argument("--duration", type=float, default=45.0, help="seconds per live phase")
    ap.add_argument(
        "--growth", type=float, default=1.5, help="kept up: freshness growth allowed (x)"
    )
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--driver-memory", default="4g")
    ap.add_argument("--backlog-timeout", type=float, default=3600.0)
    ap.add_argument("--cdc-sink", default="HEAD", help="HEAD, a commit, or 'tree'")
    ap.add_argument("--venvs", default=os.path.join(ROOT, ".bench_venvs"))
    ap.add_argument("--work", default=None, help="tables and logs (default: a temp dir)")
    ap.add_argument("--json", default=None, help="also write the results here")
    return ap.parse_args()


def main() -> None:
    args = parse_args()
    from cdc_sink_testkit.kafka import start_kafka

    work = args.work or tempfile.mkdtemp(prefix="cdc_delta_stream_")
    os.makedirs(work, exist_ok=True)
    cdc_path, cdc_code = export_cdc_sink(args.cdc_sink, work)
    print(f"cdc_sink: {cdc_code}; work {work}; load average {os.getloadavg()[0]:.1f}", flush=True)
    started = time.time()
    kafka = start_kafka(num_partitions=args.partitions)
    ok = False
    try:
        bench = Bench(kafka, args, work, cdc_path)
        print(f"backlog topic: {bench.total:,} records in {args.partitions} partitions", flush=True)
        for rep in range(args.repeats):
            for consumer in CONSUMERS:
                bench.run(consumer, rep)
        ok = bench.identical()
    finally:
        kafka.stop()
    rows = summary_rows(bench.runs)
    print()
    print(markdown(rows))
    result = {
        "bench": "delta_stream",
        "cdc_sink": cdc_code,
        "events": args.events,
        "keys": args.keys,
        "max_per_trigger": args.max_per_trigger,
        "duration": args.duration,
        "repeats": args.repeats,
        "tables_identical": ok,
        "rows": rows,
        "runs": bench.runs,
        "wall_s": time.time() - started,
        "loadavg_1min": os.getloadavg()[0],
    }
    print(json.dumps(result, separators=(",", ":")))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    print(f"tables that applied the same events identical: {'yes' if ok else 'NO'}")
    if ok and not args.work:
        shutil.rmtree(work, ignore_errors=True)
    if not ok:
        sys.exit("FAILED: tables that applied the same events differ (digests above)")


if __name__ == "__main__":
    main()
