"""Overhead of the job's metrics on the end-to-end path (issue 9): events/s, metrics off vs on.

The workload of ``benchmarks/e2e.py``'s throughput phase (same schema and event mix:
90% partial updates of 2 of 10 columns, 10% inserts), on a real local broker and local
Spark (``local[2]``, in-process): a topic holding ``--keys`` inserts then ``--events``
CDC events is produced once; each run drains it from ``earliest`` into a fresh table and
checkpoint with a 1 s trigger and ``--max-per-trigger`` events per micro-batch.

* ``off``: the bare ``SinkFunction`` (``on_batch`` is ``None``), as in ``e2e.py``;
* ``on``: what the streaming job adds for metrics: a :class:`SinkMetrics` registry served
  on ``/metrics`` (:func:`start_metrics_server`), a :class:`BatchObserver` on
  ``on_batch`` (counters, histograms, the per-batch log line, the table gauges from
  ``table.stats()``) and the Kafka progress poller (``ProgressPoller``: reads
  ``query.lastProgress`` every 0.5 s, on a thread here, in the job's wait loop), with
  ``/metrics`` scraped every ``--scrape-every`` seconds by a thread (as a Prometheus
  would; 5 s by default, a third of the usual 15 s interval, so that a run of ~40 s sees
  some scrapes).

After ``--warmup`` uncounted runs (JIT, first query), runs alternate (off, on, off, on,
...; ``--pairs`` of each). Per run: events/s = events /
(start -> ``processAllAvailable()`` returns) and the CPU seconds of the process (Python
driver) plus its driver JVM over the run; for ``on`` runs also the wall time spent in the
observer's ``on_batch`` (the only metrics work inside the batch path: the progress poller and
the scrapes run on other threads). ``--without progress`` / ``--without scrape`` leave
those parts out of the ``on`` runs. Prints per-run figures, the medians and the
difference of the medians.

Run::

    .venv/bin/python benchmarks/metrics_overhead.py --pairs 3
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import statistics
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np
from e2e import SCHEMA, produce_backlog, workload_parser  # benchmarks/ is sys.path[0] when run
from kafka_source import earliest_stream  # benchmarks/peers, on the path after e2e
from proc_cpu import cpu_s


def _jvm_pid() -> int:
    """The java child of this process (the local Spark driver JVM)."""
    me = os.getpid()
    for task in Path(f"/proc/{me}/task").glob("*"):
        try:
            kids = (task / "children").read_text().split()
        except OSError:
            continue
        for k in kids:
            if b"java" in Path(f"/proc/{k}/cmdline").read_bytes().split(b"\0", 1)[0]:
                return int(k)
    raise RuntimeError("no driver JVM under this process")


def _scraper(url: str, every: float, stop: threading.Event, times: list[float]) -> None:
    while not stop.wait(every):
        t0 = time.perf_counter()
        try:
            with urllib.request.urlopen(url, timeout=5) as r:
                r.read()
        except OSError:
            continue
        times.append(time.perf_counter() - t0)


def _poll_progress(poller: Any, stop: threading.Event) -> None:
    while not stop.wait(0.5):  # as the job's wait loop does
        poller.poll()


def run_once(
    spark: Any,
    bootstrap: str,
    topic: str,
    total: int,
    metrics_on: bool,
    k: int,
    args: argparse.Namespace,
    jvm: int,
) -> dict[str, Any]:
    """One drain of ``topic`` into a fresh table; events/s and CPU seconds."""
    from cdc_sink.metrics import ProgressPoller, SinkMetrics, start_metrics_server
    from cdc_sink.metrics.observer import BatchObserver
    from cdc_sink.spark import SinkOptions, sink

    work = tempfile.mkdtemp(prefix=f"cdc_overhead_{k}_")
    app_id = f"overhead-{k}"
    fn = sink(
        f"{work}/table", schema=SCHEMA, options=SinkOptions(app_id=app_id, apply_mode=args.mode)
    )
    server = None
    metrics = None
    stop = threading.Event()
    scrapes: list[float] = []
    in_observer: list[float] = []
    scraper = None
    if metrics_on:
        metrics = SinkMetrics("orders", app_id)
        server = start_metrics_server(metrics.registry, port=0)
        observer = BatchObserver(fn, metrics)
        observer.refresh_table()

        def timed_on_batch(st: Any) -> None:  # the time metrics add inside the batch path
            t = time.perf_counter()
            observer.on_batch(st)
            in_observer.append(time.perf_counter() - t)

        fn.on_batch = timed_on_batch
        if "scrape" not in args.without:
            scraper = threading.Thread(
                target=_scraper, daemon=True, args=(server.url, args.scrape_every, stop, scrapes)
            )
            scraper.start()
    df = earliest_stream(spark, bootstrap, topic, args.max_per_trigger)
    c0 = time.process_time() + cpu_s(jvm)
    t0 = time.perf_counter()
    q = (
        df.writeStream.queryName(app_id)
        .foreachBatch(fn)
        .trigger(processingTime="1 second")
        .option("checkpointLocation", f"{work}/ckpt")
        .start()
    )
    poller = None
    if metrics is not None and "progress" not in args.without:
        poller = threading.Thread(
            target=_poll_progress, daemon=True, args=(ProgressPoller(q, metrics), stop)
        )
        poller.start()
    q.processAllAvailable()
    wall = time.perf_counter() - t0
    cpu = time.process_time() + cpu_s(jvm) - c0
    q.stop()
    stop.set()
    if scraper is not None:
        scraper.join(10)
    if poller is not None:
        poller.join(10)
    if server is not None:
        server.close()
    events = sum(s.events for s in fn.stats if not s.skipped)
    assert events == total, (events, total)
    batches = sum(1 for s in fn.stats if not s.skipped and s.events)
    shutil.rmtree(work, ignore_errors=True)
    out = {
        "on": metrics_on,
        "eps": total / wall,
        "wall": wall,
        "cpu": cpu,
        "batches": batches,
        "scrapes": len(scrapes),
        "scrape_ms": float(np.median(scrapes)) * 1000 if scrapes else float("nan"),
        "observer_s": sum(in_observer),
    }
    print(
        f"  run {k} metrics {'on ' if metrics_on else 'off'}: {total:,} events in "
        f"{batches} batches, {wall:.1f}s wall -> {out['eps']:,.0f} events/s; "
        f"CPU {cpu:.1f}s (Python driver + driver JVM)"
        + (
            f"; on_batch observer {out['observer_s'] * 1000:.0f} ms in all "
            f"({out['observer_s'] / wall * 100:.2f}% of the wall time); {len(scrapes)} "
            f"scrapes, median {out['scrape_ms']:.1f} ms"
            if metrics_on
            else ""
        ),
        flush=True,
    )
    return out


def main() -> None:
    ap = workload_parser(__doc__, events=600_000, max_per_trigger=50_000)
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument(
        "--scrape-every",
        type=float,
        default=5.0,
        help="seconds between two GETs of /metrics in 'on' runs",
    )
    ap.add_argument(
        "--without",
        default="",
        help="leave parts out of the 'on' runs to "
        "tell their shares apart: 'progress', 'scrape' or 'progress,scrape'",
    )
    ap.add_argument("--warmup", type=int, default=1, help="runs first, not counted")
    ap.add_argument("--mode", default="driver", choices=["driver", "executors"])
    args = ap.parse_args()
    logging.getLogger("cdc_sink").setLevel(logging.INFO)  # the per-batch line is emitted
    logging.basicConfig(level=logging.WARNING, filename=os.devnull)
    from prometheus_client import disable_created_metrics

    from cdc_sink.spark.session import local_spark
    from cdc_sink_testkit.kafka import start_kafka

    disable_created_metrics()  # as the job does
    kafka = start_kafka(num_partitions=args.partitions)
    spark = local_spark(
        "cdc_sink-metrics-overhead", master="local[2]", extra_conf={"spark.driver.memory": "4g"}
    )
    try:
        jvm = _jvm_pid()
        topic = f"orders-overhead-{int(time.time())}"
        kafka.create_topic(topic, args.partitions)
        total = produce_backlog(
            kafka.bootstrap_servers, topic, args.keys, args.events, np.random.default_rng(1)
        )
        plan = [True] * args.warmup + [False, True] * args.pairs
        runs = [
            run_once(spark, kafka.bootstrap_servers, topic, total, on, k, args, jvm)
            for k, on in enumerate(plan)
        ][args.warmup :]
    finally:
        spark.stop()
        kafka.stop()
    off = [r for r in runs if not r["on"]]
    on = [r for r in runs if r["on"]]
    for key, name in (("eps", "events/s"), ("cpu", "CPU s")):
        m_off = statistics.median(r[key] for r in off)
        m_on = statistics.median(r[key] for r in on)
        print(
            f"median {name}: off {m_off:,.1f}, on {m_on:,.1f} "
            f"({(m_on - m_off) / m_off * 100:+.1f}%)",
            flush=True,
        )
    obs = [r["observer_s"] / r["wall"] * 100 for r in on]
    print(
        f"on_batch observer: median {statistics.median(obs):.2f}% of a run's wall time "
        f"(max {max(obs):.2f}%)",
        flush=True,
    )


if __name__ == "__main__":
    main()
