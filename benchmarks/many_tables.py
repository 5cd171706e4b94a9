"""A whole database in one job (issue 48): many tables against one, same events.

``DatabaseSink.write_rows`` (the code a Spark ``foreachBatch`` runs after ``toArrow``) is
given micro-batches of ``--events`` Debezium JSON events with schemas (the documented
MySQL envelope, tests/formats/debezium_docs), spread over ``N`` source tables (uniformly,
Zipf-skewed with s = 1.1, or uniformly over a subset of 100 tables drawn anew for each
measured batch), and the same batches' events all in one table. Each table:
``id`` int64 key, ``name`` and ``status`` strings, ``amount`` Connect ``Decimal(12, 2)``,
``qty`` int32, ``updated_at`` ``io.debezium.time.Timestamp``. A run: a fresh root, one
warm-up batch of inserts that creates every table (not timed), then ``--batches``
batches of 80% updates of existing keys (with ``before``), 15% inserts, 5% deletes. The
tables have ``--buckets`` buckets (the router's default), the one table
``--one-table-buckets`` (4, as the demo's and a one-table job's schema), and
``--prepare-threads`` prepare threads. A batch's records come grouped by topic-partition,
offsets ascending, as Spark's Kafka source gives them (one task per topic-partition);
``--interleaved`` shuffles the tables' records together instead. Every table has the
same columns unless ``--schemas K`` gives them K distinct schemas (table i's ``status``
column named after i mod K): the router decodes the tables of one schema together.

Each (configuration, run) is a child process of its own, so that its peak RSS is its
own. The runs go in rounds (every configuration once, then the next round), and a
configuration's share of the one table is the median over rounds of its run's figure
over the one table's run of the same round: a machine's speed can drift over an
invocation, which a ratio of two medians taken minutes apart carries and a paired one
cancels. Per configuration: events/s over the measured batches (median of the runs), and
per CPU second of the process (every thread; the figure to compare on a loaded machine),
wall time per batch (p50/p99 over every run's batches), peak and grown RSS of the
process, freshness per table (the time the table's commit returned, through the
``TableEvents.observe`` hook, minus the time the batch was handed to ``write_rows``: no
Kafka or trigger, the batch's hand-in time stands for every event's produce time), the
tablets' bytes per open table (``memory_bytes()`` of the tablets a table holds, as the
router's budget counts them) for the tables written in the last batch (hot) and those
not (idle), the tables open and their bytes after each batch
(``TableEvents.tables_open``) against ``memory_budget_bytes``, and the time of a
one-event batch to a table not open in the process (a reload: ``open_table`` and its
tablets' load) against one to an open table. The tables' ``BatchStats.phases`` summed
per batch, the router's own steps (``RouterStats.phases``: route, open, shared decode,
write), and the time of the budget's byte count over every open table, say where a
batch's time goes.

Configurations are ``<tables><u|z|w>-t<commit_threads>[-b<budget MiB>]`` (uniform, Zipf,
subset), e.g. ``1u-t8``, ``200u-t4``, ``1000w-t8-b16``.

Run::

    NUMPY_MADVISE_HUGEPAGE=0 .venv/bin/python benchmarks/many_tables.py \\
        [--configs 1u-t8,200u-t8,200z-t8,200u-t1,200u-t4,1000w-t8-b16,1000z-t8] \\
        [--runs 3] [--batches 3] [--events 50000] [--dir /tmp/cdc_many_tables] \\
        [--buckets 1] [--one-table-buckets 4] [--prepare-threads N] [--cpu-threads N] \\
        [--decode-processes N] [--interleaved] [--schemas K] \\
        [--json out.json] [--from-json out.json] \\
        [--profile 200u-t1]

``--profile CONFIG`` runs that configuration once under cProfile (the commit threads
included) and prints where the measured batches' time goes; ``--from-json`` prints the
report of a saved run. docs/benchmarks.md ("Many tables in one job") has the figures.
"""

from __future__ import annotations

import argparse
import base64
import copy
import cProfile
import json
import os
import platform
import pstats
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from cdc_sink import TableOptions
from cdc_sink.spark import DecodeOptions, SinkOptions
from cdc_sink.spark.database import DatabaseOptions, DatabaseSink, _held_bytes
from cdc_sink.spark.writer import BatchStats

DOCS = Path(__file__).resolve().parent.parent / "tests" / "formats" / "debezium_docs"
CONFIG = re.compile(r"^(\d+)([uzw])-t(\d+)(?:-b(\d+))?$")
DEFAULT_CONFIGS = "1u-t8,200u-t8,200z-t8,200u-t1,200u-t4,1000w-t8-b16,1000z-t8"
SPREADS = {"u": "uniform", "z": "zipf", "w": "subset"}
SUBSET = 100
"""Tables a batch of the ``w`` spread writes (drawn anew each batch, uniform in them)."""
STATUSES = ("new", "paid", "shipped", "returned", "closed")
ROW = '{"id":%d,"name":"%s","status":"%s","amount":"%s","qty":%d,"updated_at":%d}'
VALUE_FIELDS: list[dict[str, Any]] = [
    {"type": "int64", "optional": False, "field": "id"},
    {"type": "string", "optional": False, "field": "name"},
    {"type": "string", "optional": True, "field": "status"},
    {
        "type": "bytes",
        "optional": True,
        "name": "org.apache.kafka.connect.data.Decimal",
        "version": 1,
        "parameters": {"scale": "2", "connect.decimal.precision": "12"},
        "field": "amount",
    },
    {"type": "int32", "optional": True, "field": "qty"},
    {
        "type": "int64",
        "optional": True,
        "name": "io.debezium.time.Timestamp",
        "version": 1,
        "field": "updated_at",
    },
]


@dataclass(frozen=True)
class Config:
    """One configuration: tables, distribution, commit threads, memory budget."""

    name: str
    tables: int
    spread: str
    threads: int
    budget_mb: int | None

    @staticmethod
    def parse(name: str) -> Config:
        m = CONFIG.match(name)
        if m is None:
            raise SystemExit(f"bad configuration {name!r}: <tables><u|z|w>-t<threads>[-b<MB>]")
        b = m.group(4)
        return Config(
            name, int(m.group(1)), SPREADS[m.group(2)], int(m.group(3)), int(b) if b else None
        )


# ---------------------------------------------------------------------- the events
class Templates:
    """Pre-rendered pieces of one table's Debezium messages: an event is their join with
    its rows' JSON (one string format per event, no json.dumps)."""

    def __init__(self, table: str, status: str = "status") -> None:
        doc = json.loads((DOCS / "mysql_customers_create.json").read_text())
        fields = [{**f, "field": status} if f["field"] == "status" else f for f in VALUE_FIELDS]
        self.row = ROW.replace('"status"', f'"{status}"')
        value = {
            "type": "struct",
            "fields": fields,
            "optional": True,
            "name": f"dbserver1.inventory.{table}.Value",
        }
        env = doc["schema"]
        for i, f in enumerate(env["fields"]):
            if f.get("field") in ("before", "after"):
                env["fields"][i] = {**copy.deepcopy(value), "field": f["field"]}
        env["name"] = f"dbserver1.inventory.{table}.Envelope"
        p = doc["payload"]
        p["source"]["db"], p["source"]["table"] = "inventory", table
        p["before"], p["after"], p["op"], p["ts_ms"] = "@B@", "@A@", "@O@", "@T@"
        text = json.dumps(doc, separators=(",", ":")).replace('"@T@"', "@T@")
        head, rest = text.split('"@B@"')
        mid, rest = rest.split('"@A@"')
        mid2, tail = rest.split('"@O@"')
        self.head, self.mid, self.mid2 = head, mid, mid2
        self.tail0, self.tail1 = tail.split("@T@")
        key_schema = {
            "type": "struct",
            "fields": [{"type": "int64", "optional": False, "field": "id"}],
            "optional": False,
            "name": f"dbserver1.inventory.{table}.Key",
        }
        self.key_head = json.dumps({"schema": key_schema}, separators=(",", ":"))[:-1]
        self.key_head += ',"payload":{"id":'
        self.topic = f"dbserver1.inventory.{table}"

    def value(self, op: str, before: str, after: str, ts: int) -> bytes:
        return (
            f'{self.head}{before}{self.mid}{after}{self.mid2}"{op}"{self.tail0}{ts}{self.tail1}'
        ).encode()

    def key(self, k: int) -> bytes:
        return f"{self.key_head}{k}}}}}".encode()


def _decimals(n: int, rng: np.random.Generator) -> list[str]:
    """``n`` Connect Decimal(12, 2) values (base64 of the unscaled big-endian bytes)."""
    out = []
    for unscaled in rng.integers(1, 10_000_000, n).tolist():
        size = (unscaled.bit_length() + 8) // 8
        out.append(base64.b64encode(unscaled.to_bytes(size, "big", signed=True)).decode())
    return out


class Workload:
    """The events of a configuration: the tables' next keys, and the batches."""

    def __init__(
        self, cfg: Config, events: int, seed: int, *, interleaved: bool = False, schemas: int = 1
    ) -> None:
        self.cfg = cfg
        self.events = events
        self.interleaved = interleaved
        self.rng = np.random.default_rng(seed)
        # ``schemas`` distinct schemas: table i's status column is named after i % schemas
        self.templates = [
            Templates(f"t{i:04d}", f"status{i % schemas}" if i % schemas else "status")
            for i in range(cfg.tables)
        ]
        self.next_key = np.zeros(cfg.tables, np.int64)
        zipf = cfg.spread == "zipf"
        w = 1.0 / np.arange(1, cfg.tables + 1) ** 1.1 if zipf else np.ones(cfg.tables)
        self.weights = w / w.sum()
        self.amounts = _decimals(997, self.rng)
        self.offset = 0

    def _row(self, tpl: Templates, k: int, j: int, ts: int) -> str:
        a = self.amounts
        return tpl.row % (k, f"name-{k}-{j % 89}", STATUSES[j % 5], a[j % len(a)], j % 1000, ts)

    def batch(self, warm: bool) -> pa.Table:
        """One micro-batch's raw columns: inserts that give every table rows (``warm``),
        or the mix of updates, inserts and deletes."""
        n, rng, cfg = self.events, self.rng, self.cfg
        tables = rng.choice(cfg.tables, n, p=self.weights)
        if cfg.spread == "subset" and not warm:
            subset = rng.choice(cfg.tables, min(SUBSET, cfg.tables), replace=False)
            tables = subset[rng.integers(0, len(subset), n)]
        if warm:
            tables[: cfg.tables] = np.arange(cfg.tables)
            ops = np.full(n, 1)
        else:
            ops = rng.choice(3, n, p=[0.80, 0.15, 0.05])  # update, insert, delete
        jitter = rng.integers(0, 1 << 30, n).tolist()
        ts = int(time.time() * 1000)
        keys, values, topics = [], [], []
        for t, op, j in zip(tables.tolist(), ops.tolist(), jitter, strict=True):
            tpl = self.templates[t]
            if op == 1:
                k = int(self.next_key[t])
                self.next_key[t] = k + 1
                v = tpl.value("c", "null", self._row(tpl, k, j, ts), ts)
            else:
                k = j % int(self.next_key[t])
                if op == 0:
                    v = tpl.value("u", self._row(tpl, k, j + 1, ts), self._row(tpl, k, j, ts), ts)
                else:
                    v = tpl.value("d", self._row(tpl, k, j, ts), "null", ts)
            keys.append(tpl.key(k))
            values.append(v)
            topics.append(tpl.topic)
        start, self.offset = self.offset, self.offset + n
        out = pa.table(
            {
                "key": pa.array(keys, pa.binary()),
                "value": pa.array(values, pa.binary()),
                "topic": pa.array(topics, pa.string()),
                "partition": pa.array(np.zeros(n, np.int32)),
                "offset": pa.array(np.arange(start, start + n, dtype=np.int64)),
                "__kafka_ms": pa.array(np.full(n, ts, np.int64)),
            }
        )
        if self.interleaved:
            return out
        # Spark's Kafka source reads each topic-partition in a task of its own: a
        # micro-batch's rows come grouped by topic-partition, offsets ascending.
        return out.take(pa.array(np.argsort(tables, kind="stable")))

    def one_event(self, t: int) -> pa.Table:
        """A batch of one update, to table ``t``'s first key."""
        tpl, ts = self.templates[t], int(time.time() * 1000)
        v = tpl.value("u", self._row(tpl, 0, 1, ts), self._row(tpl, 0, 2, ts), ts)
        self.offset += 1
        return pa.table(
            {
                "key": pa.array([tpl.key(0)], pa.binary()),
                "value": pa.array([v], pa.binary()),
                "topic": pa.array([tpl.topic], pa.string()),
                "partition": pa.array([0], pa.int32()),
                "offset": pa.array([self.offset - 1], pa.int64()),
                "__kafka_ms": pa.array([ts], pa.int64()),
            }
        )


# ---------------------------------------------------------------------- one run
class Events:
    """The benchmark's ``TableEvents``: when each table's commit returned, and the tables
    open after each batch."""

    def __init__(self) -> None:
        self.committed: dict[str, float] = {}
        self.open: list[tuple[int, int]] = []
        self.phases: dict[str, float] = {}

    def observe(self, table: str, st: BatchStats) -> None:
        self.committed[table] = time.perf_counter()
        for k, v in [*st.phases.items(), ("table_total", st.total_s)]:
            self.phases[k] = self.phases.get(k, 0.0) + v

    def table_created(self, table: str) -> None:
        pass

    def table_stopped(self, table: str, reason: str) -> None:
        raise AssertionError(f"table {table} stopped: {reason}")

    def table_skipped(self, table: str, reason: str, events: int) -> None:
        raise AssertionError(f"table {table} skipped: {reason}")

    def tables_open(self, n: int, bytes_: int) -> None:
        self.open.append((n, bytes_))


def workers_cpu(sink: DatabaseSink) -> float:
    """CPU seconds the sink's decode worker processes have spent (0 without them)."""
    pool = sink._decode_pool
    executor = None if pool is None else pool._pool
    if executor is None:
        return 0.0
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for pid in list(executor._processes or {}):
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        total += (int(fields[11]) + int(fields[12])) / tick  # utime, stime
    return total


def rss_bytes() -> int:
    """The process's resident set now."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def held_bytes(sink: DatabaseSink, name: str) -> int:
    """Bytes of the tablets table ``name`` holds (what the router's budget counts)."""
    return _held_bytes(sink.writers[name])


@dataclass
class RunResult:
    """What one run measured."""

    config: str
    events_per_s: float
    batch_s: list[float]
    cpu_s: float
    freshness_s: list[float]
    event_freshness_s: list[float]
    open_after_batch: list[tuple[int, int]]
    budget_bytes: int | None
    rss_start: int
    rss_end: int
    rss_peak: int
    hot_bytes: list[int] = field(default_factory=list)
    idle_bytes: list[int] = field(default_factory=list)
    reload_s: list[float] = field(default_factory=list)
    open_write_s: list[float] = field(default_factory=list)
    load_avg: float = 0.0
    phases_s: dict[str, float] = field(default_factory=dict)
    router_s: dict[str, float] = field(default_factory=dict)
    accounting_s: float = 0.0
    profile: str = ""


def _options(
    cfg: Config, args: argparse.Namespace, root: str, budget: int | None
) -> tuple[DatabaseOptions, SinkOptions]:
    """The router's options of a run of ``cfg``."""
    buckets = args.one_table_buckets if cfg.tables == 1 else args.buckets
    dbo = DatabaseOptions(root, commit_threads=cfg.threads, num_buckets=buckets)
    if budget:
        dbo = replace(dbo, memory_budget_bytes=budget)
    if args.cpu_threads:
        dbo = replace(dbo, cpu_threads=args.cpu_threads)
    sink_options = SinkOptions(
        format="debezium",
        table=TableOptions(prepare_threads=args.prepare_threads),
        decode=DecodeOptions(processes=args.decode_processes),
    )
    return dbo, sink_options


def run_once(cfg: Config, args: argparse.Namespace, seed: int, profile: bool) -> RunResult:
    """One run of ``cfg`` in this process."""
    work = Workload(cfg, args.events, seed, interleaved=args.interleaved, schemas=args.schemas)
    warm = work.batch(True)
    root = tempfile.mkdtemp(prefix=f"{cfg.name}_", dir=args.dir)
    budget = cfg.budget_mb << 20 if cfg.budget_mb else None
    dbo, sink_options = _options(cfg, args, root, budget)
    sink = DatabaseSink(dbo, options=sink_options)
    thread_profiles: list[cProfile.Profile] = []
    if profile:
        _profile_tables(sink, thread_profiles)
    events = Events()
    sink.events = events
    try:
        rss_start = rss_bytes()
        sink.write_rows(warm, 0)
        times, fresh, event_fresh = [], [], []
        router: dict[str, float] = {}
        prof = cProfile.Profile() if profile else None
        cpu0 = time.process_time() + workers_cpu(sink)
        del warm
        events.phases.clear()
        for i in range(1, args.batches + 1):
            cpu0 -= time.process_time()
            raw = work.batch(False)  # generated before the timer, one batch held at a time
            cpu0 += time.process_time()
            events.committed.clear()
            if prof is not None:
                sink.profiling[0] = True  # type: ignore[attr-defined]
                prof.enable()
            t0 = time.perf_counter()
            st = sink.write_rows(raw, i)
            times.append(time.perf_counter() - t0)
            for k, v in st.phases.items():
                router[k] = router.get(k, 0.0) + v
            if prof is not None:
                prof.disable()
            assert set(st.tables.values()) == {"committed"}, st.tables
            counts = {}
            for name, n in zip(
                *np.unique(raw.column("topic").to_numpy(), return_counts=True), strict=True
            ):
                counts[f"inventory.{str(name).rsplit('.', 1)[1]}"] = int(n)
            for name, at in events.committed.items():
                fresh.append(at - t0)
                event_fresh += [at - t0] * counts[name]
        cpu = time.process_time() + workers_cpu(sink) - cpu0
        rss_end = rss_bytes()
        last = set(st.tables)
        t0 = time.perf_counter()
        sum(held_bytes(sink, n) for n in sink.writers)  # what the budget's check adds
        accounting = time.perf_counter() - t0
        hot = [held_bytes(sink, n) for n in sink.writers if n in last]
        idle = [held_bytes(sink, n) for n in sink.writers if n not in last]
        res = RunResult(
            cfg.name,
            args.events * len(times) / sum(times),
            times,
            cpu,
            fresh,
            event_fresh,
            events.open,
            budget,
            rss_start,
            rss_end,
            peak_rss_bytes(),
            hot,
            idle,
            load_avg=os.getloadavg()[0],
            phases_s={k: v / len(times) for k, v in events.phases.items()},
            router_s={k: v / len(times) for k, v in router.items()},
            accounting_s=accounting,
        )
        # A released table's reload: a new sink (nothing open), one batch to warm its
        # process state, then one-event batches to tables it has not opened, and again
        # to the same (now open) tables.
        sink.close()
        again = DatabaseSink(dbo, options=sink_options)
        bid = len(times) + 1
        again.write_rows(work.one_event(0), bid)
        picks = list(range(1, min(cfg.tables, 6)))
        for pass_ in (res.reload_s, res.open_write_s):
            for t in picks or [0]:
                bid += 1
                raw = work.one_event(t)
                t0 = time.perf_counter()
                again.write_rows(raw, bid)
                pass_.append(time.perf_counter() - t0)
        again.close()
        if prof is not None:
            res.profile = _profile_text(prof, thread_profiles)
        return res
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _profile_tables(sink: DatabaseSink, profiles: list[cProfile.Profile]) -> None:
    """Profiles each table's work on its commit thread too (cProfile sees one thread):
    its opening and its write."""
    on = [False]

    def profiled(fn: Any) -> Any:
        def run(*a: Any) -> Any:
            if not on[0]:
                return fn(*a)
            prof = cProfile.Profile()
            prof.enable()
            try:
                return fn(*a)
            finally:
                prof.disable()
                profiles.append(prof)

        return run

    sink._open_part = profiled(sink._open_part)  # type: ignore[method-assign]
    sink._write_ready = profiled(sink._write_ready)  # type: ignore[method-assign]
    sink.profiling = on  # type: ignore[attr-defined]


def _profile_text(prof: cProfile.Profile, threads: list[cProfile.Profile]) -> str:
    import io

    out = io.StringIO()
    st = pstats.Stats(prof, *threads, stream=out).strip_dirs()
    st.dump_stats(os.path.join(tempfile.gettempdir(), "many_tables.prof"))
    st.sort_stats("cumulative").print_stats(45)
    st.sort_stats("tottime").print_stats(30)
    return out.getvalue()


# ---------------------------------------------------------------------- the report
def pct(xs: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(xs), q)) if xs else float("nan")


def summarize(
    cfg: Config, runs: list[RunResult], events: int, base: dict[str, Any] | None
) -> dict[str, Any]:
    eps = statistics.median(r.events_per_s for r in runs)
    cpu = statistics.median(r.cpu_s / len(r.batch_s) for r in runs)
    eps_runs = [r.events_per_s for r in runs]
    cpu_runs = [r.cpu_s / len(r.batch_s) for r in runs]
    if base is None and cfg.tables == 1:
        base = {"events_per_s_runs": eps_runs, "cpu_s_per_batch_runs": cpu_runs}
    batch = [t for r in runs for t in r.batch_s]
    fresh = [t for r in runs for t in r.freshness_s]
    efresh = [t for r in runs for t in r.event_freshness_s]
    hot = [b for r in runs for b in r.hot_bytes]
    idle = [b for r in runs for b in r.idle_bytes]
    opened = [o for r in runs for o in r.open_after_batch[1:]]  # after the measured batches
    return {
        "config": cfg.name,
        "tables": cfg.tables,
        "spread": cfg.spread,
        "commit_threads": cfg.threads,
        "budget_mb": cfg.budget_mb,
        "events_per_s": eps,
        "events_per_s_runs": eps_runs,
        "cpu_s_per_batch_runs": cpu_runs,
        "share_of_one_table": _paired(eps_runs, base["events_per_s_runs"]) if base else None,
        "cpu_s_per_batch": cpu,
        "events_per_cpu_s": events / cpu,
        "cpu_share_of_one_table": (
            _paired(base["cpu_s_per_batch_runs"], cpu_runs) if base else None
        ),
        "batch_p50_s": pct(batch, 50),
        "batch_p99_s": pct(batch, 99),
        "fresh_p50_s": pct(fresh, 50),
        "fresh_p99_s": pct(fresh, 99),
        "event_fresh_p50_s": pct(efresh, 50),
        "event_fresh_p99_s": pct(efresh, 99),
        "rss_peak_mb": max(r.rss_peak for r in runs) / 2**20,
        "rss_growth_mb": statistics.median((r.rss_end - r.rss_start) for r in runs) / 2**20,
        "rss_growth_per_table_kb": statistics.median(
            (r.rss_end - r.rss_start) / cfg.tables for r in runs
        )
        / 1024,
        "hot_kb_per_table": statistics.median(hot) / 1024 if hot else None,
        "idle_kb_per_table": statistics.median(idle) / 1024 if idle else None,
        "open_tables_max": max((n for n, _ in opened), default=0),
        "open_mb_max": max((b for _, b in opened), default=0) / 2**20,
        "open_mb_last": [r.open_after_batch[-1][1] / 2**20 for r in runs],
        "open_mb_after_warm_up": max(r.open_after_batch[0][1] for r in runs) / 2**20,
        "over_budget_batches": sum(
            1
            for r in runs
            for _, b in r.open_after_batch[1:]
            if r.budget_bytes and b > r.budget_bytes
        ),
        "reload_ms": statistics.median(t for r in runs for t in r.reload_s) * 1e3,
        "open_write_ms": statistics.median(t for r in runs for t in r.open_write_s) * 1e3,
        "load_avg": [r.load_avg for r in runs],
        "phases_s_per_batch": {
            k: statistics.median(r.phases_s.get(k, 0.0) for r in runs) for k in runs[0].phases_s
        },
        "budget_check_ms": statistics.median(r.accounting_s for r in runs) * 1e3,
        "router_s_per_batch": {
            k: statistics.median(r.router_s.get(k, 0.0) for r in runs) for k in runs[0].router_s
        },
    }


def _paired(num: list[float], den: list[float]) -> float:
    """The median over rounds of ``num[i] / den[i]`` (run ``i`` of a configuration and run
    ``i`` of the one table, made one after the other: the machine's drift over an
    invocation cancels); a base of fewer runs pairs its last run with the rest."""
    return statistics.median(n / den[min(i, len(den) - 1)] for i, n in enumerate(num))


def markdown(rows: list[dict[str, Any]]) -> str:
    def f(v: Any, fmt: str) -> str:
        return "—" if v is None else format(v, fmt)

    out = [
        "| configuration | events/s (median) | x one table | events per CPU s | x one table "
        "| batch p50 / p99 s | CPU s/batch "
        "| freshness p50 / p99 s (per table) | peak RSS MiB | RSS growth KiB/table "
        "| tablets KiB/table hot / idle | open tables, max MiB (budget) | reload / open ms |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        budget = f" ({r['budget_mb']})" if r["budget_mb"] else ""
        out.append(
            f"| {r['tables']} {r['spread']}, {r['commit_threads']} threads{budget} "
            f"| {r['events_per_s']:,.0f} | {f(r['share_of_one_table'], '.2f')} "
            f"| {r['events_per_cpu_s']:,.0f} | {f(r['cpu_share_of_one_table'], '.2f')} "
            f"| {r['batch_p50_s']:.2f} / {r['batch_p99_s']:.2f} | {r['cpu_s_per_batch']:.2f} "
            f"| {r['fresh_p50_s']:.2f} / {r['fresh_p99_s']:.2f} | {r['rss_peak_mb']:,.0f} "
            f"| {r['rss_growth_per_table_kb']:,.0f} "
            f"| {f(r['hot_kb_per_table'], ',.0f')} / {f(r['idle_kb_per_table'], ',.0f')} "
            f"| {r['open_tables_max']}, {r['open_mb_max']:.1f}{budget} "
            + (
                f"| {r['reload_ms']:.0f} / {r['open_write_ms']:.0f} |"
                if r["tables"] > 1
                else "| — |"  # its one table is open: no other table to reload
            )
        )
    return "\n".join(out)


def machine() -> str:
    cpu = "?"
    with open("/proc/cpuinfo") as fh:
        for line in fh:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    fs = subprocess.run(
        ["df", "-T", "/tmp"], capture_output=True, text=True, check=False
    ).stdout.splitlines()[-1:]
    return (
        f"{os.cpu_count()} CPUs ({cpu}), Python {platform.python_version()}, "
        f"numpy {np.__version__}, pyarrow {pa.__version__}, "
        f"filesystem of the root: {fs[0].split()[1] if fs else '?'}, "
        f"load average at start {os.getloadavg()[0]:.1f}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--configs", default=DEFAULT_CONFIGS)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--batches", type=int, default=3, help="measured batches per run")
    ap.add_argument("--events", type=int, default=50_000, help="events per micro-batch")
    ap.add_argument("--dir", default="/tmp/cdc_many_tables", help="where the roots are made")
    ap.add_argument(
        "--buckets",
        type=int,
        default=DatabaseOptions("-").num_buckets,
        help="buckets of each table when there are several (default: the router's default)",
    )
    ap.add_argument(
        "--cpu-threads",
        type=int,
        default=None,
        help="DatabaseOptions.cpu_threads (default: the router's, one)",
    )
    ap.add_argument(
        "--one-table-buckets",
        type=int,
        default=4,
        help="buckets of the one table (default 4, as a one-table job's schema has)",
    )
    ap.add_argument(
        "--prepare-threads",
        type=int,
        default=None,
        help="TableOptions.prepare_threads of every table (default: one per CPU)",
    )
    ap.add_argument(
        "--decode-processes",
        type=int,
        default=0,
        help="decode worker processes of the router (DecodeOptions.processes; default 0)",
    )
    ap.add_argument(
        "--interleaved",
        action="store_true",
        help="the tables' events shuffled together in each batch (default: grouped by "
        "topic-partition, as Spark's Kafka source gives them)",
    )
    ap.add_argument(
        "--schemas",
        type=int,
        default=1,
        help="distinct table schemas (default 1: every table has the same columns; the "
        "tables of one schema are decoded together)",
    )
    ap.add_argument("--json", default=None, help="write every run's figures here")
    ap.add_argument("--profile", default=None, help="profile one run of this configuration")
    ap.add_argument("--from-json", default=None, help="print the report of a --json file")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--seed", type=int, default=1, help=argparse.SUPPRESS)
    args = ap.parse_args()
    os.makedirs(args.dir, exist_ok=True)
    if args.child:
        res = run_once(Config.parse(args.child), args, args.seed, args.profile == args.child)
        print("RESULT " + json.dumps(asdict(res)))
        return
    if args.profile:
        cfg = Config.parse(args.profile)
        res = _child(cfg, args, 1, profile=True)
        print(res.profile)
        print(f"events/s {res.events_per_s:,.0f}; batches s {res.batch_s}")
        return
    rows: list[dict[str, Any]] = []
    base: dict[str, Any] | None = None
    if args.from_json:
        saved = json.loads(Path(args.from_json).read_text())
        for name, got in saved.items():
            cfg = Config.parse(name)
            runs = [RunResult(**r) for r in got["runs"]]
            rows.append(summarize(cfg, runs, got.get("events", args.events), base))
            base = base or (rows[-1] if cfg.tables == 1 else None)
        report(rows)
        return
    print(machine())
    configs = [Config.parse(name) for name in args.configs.split(",")]
    done: dict[str, list[RunResult]] = {c.name: [] for c in configs}
    for i in range(args.runs):  # rounds: every configuration once, then again
        for cfg in configs:
            done[cfg.name].append(_child(cfg, args, i + 1, profile=False))
            got = done[cfg.name][-1]
            print(
                f"{cfg.name} run {i + 1}: {got.events_per_s:,.0f} events/s, batches "
                + " ".join(f"{t:.2f}" for t in got.batch_s)
                + f" s, load {got.load_avg:.1f}",
                flush=True,
            )
        if args.json:
            saved = {
                name: {"events": args.events, "runs": [asdict(r) for r in runs]}
                for name, runs in done.items()
                if runs
            }
            Path(args.json).write_text(json.dumps(saved, indent=1))
    for cfg in configs:
        row = summarize(cfg, done[cfg.name], args.events, base)
        if cfg.tables == 1 and base is None:
            base = row
        rows.append(row)
    report(rows)


def report(rows: list[dict[str, Any]]) -> None:
    """Prints the table, the tables' phases and the budget's line."""
    print(markdown(rows))
    print("\nTables' seconds per batch, summed over the tables (overlapping across threads):")
    for r in rows:
        ph = ", ".join(f"{k} {v:.2f}" for k, v in r["phases_s_per_batch"].items())
        print(f"- {r['config']}: {ph}; the budget's byte count {r['budget_check_ms']:.0f} ms")
    print("\nThe router's steps, seconds per batch (RouterStats.phases, wall time):")
    for r in rows:
        steps = ", ".join(f"{k} {v:.2f}" for k, v in r.get("router_s_per_batch", {}).items())
        print(f"- {r['config']}: {steps}")
    for r in rows:
        if r["budget_mb"]:
            print(
                f"{r['config']}: after each measured batch at most {r['open_mb_max']:.1f} MiB "
                f"open (budget {r['budget_mb']} MiB), over budget after "
                f"{r['over_budget_batches']} of them; after the warm-up batch (every table "
                f"written) {r['open_mb_after_warm_up']:.1f} MiB"
            )


def _child(cfg: Config, args: argparse.Namespace, seed: int, *, profile: bool) -> RunResult:
    """One run of ``cfg`` in a process of its own."""
    cmd = [
        sys.executable,
        __file__,
        "--child",
        cfg.name,
        "--batches",
        str(args.batches),
        "--events",
        str(args.events),
        "--dir",
        args.dir,
        "--seed",
        str(seed),
        "--buckets",
        str(args.buckets),
        "--one-table-buckets",
        str(args.one_table_buckets),
    ]
    if args.prepare_threads:
        cmd += ["--prepare-threads", str(args.prepare_threads)]
    if args.cpu_threads:
        cmd += ["--cpu-threads", str(args.cpu_threads)]
    if args.decode_processes:
        cmd += ["--decode-processes", str(args.decode_processes)]
    if args.interleaved:
        cmd.append("--interleaved")
    if args.schemas != 1:
        cmd += ["--schemas", str(args.schemas)]
    if profile:
        cmd += ["--profile", cfg.name]
    out = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise SystemExit(f"{cfg.name} failed:\n{out.stderr[-4000:]}")
    line = next(x for x in out.stdout.splitlines() if x.startswith("RESULT "))
    return RunResult(**json.loads(line[len("RESULT ") :]))


if __name__ == "__main__":
    main()
