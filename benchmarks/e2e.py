"""End-to-end benchmark: Kafka -> Spark foreachBatch -> visible in a table version.

Two measurements per mode (``driver``, ``executors``: the apply modes; ``driver-tasks``:
driver mode with ``decode_in="executors"``; ``executors-aligned``: executors mode on a
bucket-partitioned topic, ``bucket_partitioned=True``), on a real local KRaft broker and
local Spark:

* throughput: a backlog of --events CDC events (90% partial updates of 2 of 10 columns,
  10% inserts) is pre-produced, then the streaming query drains it with a 1 s trigger and
  --max-per-trigger events per micro-batch; events/s = events / (last commit - first
  batch start);
* freshness: a live producer sends --rate events/s for --duration seconds, each stamped
  with its produce time (``ts_ms``); freshness = commit time of the version that made
  the event visible - produce time, sampled per batch; reported as p50/p99. ``--rate
  auto`` is 80% of the throughput this mode just reached on the backlog (its maximum
  rate), rounded down to a thousand. ``--trigger`` sets the processing-time trigger of
  both phases.

Run:  .venv/bin/python benchmarks/e2e.py [--events 2000000] [--rate 20000|auto]
      [--duration 30] [--trigger "1 second"] [--modes driver,driver-tasks,executors]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "peers"))

from kafka_source import earliest_stream
from proc_cpu import cpu_between

from cdc_sink.runtime.arrow_pool import POOLS, use_arrow_memory_pool
from cdc_sink.schema import TableSchema
from cdc_sink_testkit.kafka import start_kafka

SCHEMA = TableSchema.from_dict(
    {
        "columns": [
            {"name": "order_id", "type": "int64"},
            {"name": "customer_id", "type": "int64"},
            {"name": "status", "type": "string", "default": "new"},
            {"name": "payment_status", "type": "string"},
            {"name": "amount", "type": "float64"},
            {"name": "items", "type": "int32"},
            {"name": "warehouse", "type": "int32"},
            {"name": "carrier", "type": "string"},
            {"name": "priority", "type": "bool"},
            {"name": "seq", "type": "int64"},
        ],
        "primary_key": ["order_id"],
        "num_buckets": 4,
        "sequence_column": "seq",
    }
)
STATUSES = ["paid", "packed", "shipped", "delivered"]


FORMATS = ("json", "rowv2")
"""The event formats the benchmarks can produce (``--format``)."""


def encode_events(
    n: int,
    keys: int,
    first_key: int,
    seq0: int,
    rng: np.random.Generator,
    now_ms: int | None,
    fmt: str = "json",
) -> list[tuple[bytes, bytes]]:
    """Pre-encoded (key, value) messages: 10% inserts of new keys, 90% updates of 2
    columns. ``fmt`` is ``json`` (native JSON; with ``now_ms``, each event carries it as
    ``ts_ms``) or ``rowv2`` (the compact binary row format, encoded by the producer SDK's
    :func:`cdc_sink.formats.rowv2.encode_rows`; no ``ts_ms``: the sink takes the Kafka
    record timestamp). Both formats encode the same events for the same ``rng``."""
    is_insert = rng.random(n) < 0.1
    upd_keys = rng.integers(0, keys, n)
    cols = rng.integers(0, 3, n)
    events = list(_events(n, first_key, seq0, is_insert, upd_keys, cols))
    if fmt == "rowv2":
        return _rowv2_messages(events)
    if fmt != "json":
        raise ValueError(f"format must be one of {FORMATS}, not {fmt!r}")
    ts = "" if now_ms is None else f',"ts_ms":{now_ms}'
    out = []
    for k, seq, kind in events:
        if kind < 0:
            op = "insert"
            body = (
                f'"customer_id":{k % 9973},"amount":{(k % 1000) / 10},"items":{k % 7},'
                f'"warehouse":{k % 13},"carrier":"ups","priority":false,'
                f'"payment_status":"pending"'
            )
        else:
            op = "upsert"
            if kind == 0:
                body = f'"status":"{STATUSES[seq % 4]}","payment_status":"captured"'
            elif kind == 1:
                body = f'"amount":{seq % 997 / 10},"items":{seq % 9}'
            else:
                body = f'"carrier":"dhl","warehouse":{seq % 13}'
        v = f'{{"op":"{op}","key":{{"order_id":{k}}},"seq":{seq}{ts},"set":{{{body}}}}}'
        out.append((str(k).encode(), v.encode()))
    return out


def _events(
    n: int,
    first_key: int,
    seq0: int,
    is_insert: np.ndarray,
    upd_keys: np.ndarray,
    cols: np.ndarray,
) -> Iterator[tuple[int, int, int]]:
    """(key, seq, kind) of each event: kind -1 inserts a new key, 0-2 names the pair of
    columns an update sets."""
    new_key = first_key
    for i in range(n):
        if is_insert[i]:
            yield new_key, seq0 + i, -1
            new_key += 1
        else:
            yield int(upd_keys[i]), seq0 + i, int(cols[i])


def _rowv2_messages(events: list[tuple[int, int, int]]) -> list[tuple[bytes, bytes]]:
    """The events of :func:`_events` in the ``rowv2`` format (the producer SDK's
    :func:`cdc_sink.formats.rowv2.encode_rows`)."""
    from cdc_sink.formats.rowv2 import encode_rows

    sets: list[dict[str, Any]] = []
    for k, seq, kind in events:
        if kind < 0:
            sets.append(
                {
                    "customer_id": k % 9973,
                    "amount": (k % 1000) / 10,
                    "items": k % 7,
                    "warehouse": k % 13,
                    "carrier": "ups",
                    "priority": False,
                    "payment_status": "pending",
                }
            )
        elif kind == 0:
            sets.append({"status": STATUSES[seq % 4], "payment_status": "captured"})
        elif kind == 1:
            sets.append({"amount": seq % 997 / 10, "items": seq % 9})
        else:
            sets.append({"carrier": "dhl", "warehouse": seq % 13})
    values = encode_rows(
        ["insert" if kind < 0 else "upsert" for _, _, kind in events],
        [{"order_id": k} for k, _, _ in events],
        sets,
        SCHEMA,
        seqs=[seq for _, seq, _ in events],
    )
    return [(str(k).encode(), v) for (k, _, _), v in zip(events, values, strict=True)]


def bucket_partition_of(msgs: list[tuple[bytes, bytes]], partitions: int | None) -> list[int]:
    """The partition of each message: its key's table bucket modulo ``partitions`` (the
    producer SDK's ``partitioner="bucket"``), or -1 (Kafka's partitioner) without
    ``partitions``."""
    if partitions is None:
        return [-1] * len(msgs)
    import pyarrow as pa

    from cdc_sink.bucketing import bucket_partitions

    keys = pa.array([int(k) for k, _ in msgs], pa.int64())
    return bucket_partitions([keys], SCHEMA.num_buckets, partitions).tolist()


def produce(
    bootstrap: str, topic: str, msgs: list[tuple[bytes, bytes]], partitions: int | None = None
) -> None:
    """Produces ``msgs``, keyed (with ``partitions``: to their bucket's partition)."""
    from confluent_kafka import Producer

    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 20,
            "batch.size": 1 << 20,
            "enable.idempotence": True,
            "queue.buffering.max.messages": 2_000_000,
        }
    )
    for (k, v), part in zip(msgs, bucket_partition_of(msgs, partitions), strict=True):
        while True:
            try:
                p.produce(topic, key=k, value=v, partition=part)
                break
            except BufferError:
                p.poll(0.05)
    assert p.flush(120) == 0


def base_inserts(keys: int, fmt: str = "json") -> list[tuple[bytes, bytes]]:
    """The base population: one insert (``seq`` 0) of each key ``0 .. keys-1``."""
    if fmt == "rowv2":
        from cdc_sink.formats.rowv2 import encode_rows

        sets = [{"customer_id": k % 9973, "amount": 1.0} for k in range(keys)]
        values = encode_rows(
            ["insert"] * keys, [{"order_id": k} for k in range(keys)], sets, SCHEMA, seqs=[0] * keys
        )
        return [(str(k).encode(), v) for k, v in enumerate(values)]
    return [
        (
            str(k).encode(),
            (
                f'{{"op":"insert","key":{{"order_id":{k}}},"seq":0,"set":{{'
                f'"customer_id":{k % 9973},"amount":1.0}}}}'
            ).encode(),
        )
        for k in range(keys)
    ]


def produce_backlog(
    bootstrap: str,
    topic: str,
    keys: int,
    events: int,
    rng: np.random.Generator,
    fmt: str = "json",
    partitions: int | None = None,
) -> int:
    """Produces the base population (``keys`` inserts), then ``events`` CDC events of
    :func:`encode_events`, in format ``fmt`` (with ``partitions``, bucket-partitioned);
    returns the records produced."""
    produce(bootstrap, topic, base_inserts(keys, fmt), partitions)
    produce(bootstrap, topic, encode_events(events, keys, keys, 1, rng, None, fmt), partitions)
    return keys + events


def live_producer(
    bootstrap: str,
    topic: str,
    rate: int,
    duration: float,
    keys: int,
    first_key: int,
    stop: threading.Event,
    fmt: str = "json",
    ahead: bool = False,
    partitions: int | None = None,
) -> None:
    """Produces ``rate`` events/s in 50 ms slices. Each slice is encoded when it is sent
    (JSON events stamped with that time as ``ts_ms``), or, with ``ahead``, every slice is
    encoded before the first is sent, so the producer's CPU is spent before the
    measurement, and freshness is taken from the Kafka record timestamps (set when a
    message is handed to the client)."""
    from confluent_kafka import Producer

    p = Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": 5, "enable.idempotence": True}
    )  # no reordering on a retried request
    rng = np.random.default_rng(9)
    seq = 10**9
    slice_n = max(1, rate // 20)
    slices = int(duration * 20)
    encoded = []
    if ahead:
        for i in range(slices):
            encoded.append(
                encode_events(
                    slice_n, keys, first_key + i * slice_n, seq + i * slice_n, rng, None, fmt
                )
            )
    t_end = time.time() + duration
    i = 0
    while time.time() < t_end and not stop.is_set() and i < slices:
        t0 = time.time()
        msgs = (
            encoded[i]
            if ahead
            else encode_events(
                slice_n, keys, first_key + i * slice_n, seq + i * slice_n, rng, int(t0 * 1000), fmt
            )
        )
        for (k, v), part in zip(msgs, bucket_partition_of(msgs, partitions), strict=True):
            p.produce(topic, key=k, value=v, partition=part)
        i += 1
        p.poll(0)
        time.sleep(max(0.0, 0.05 - (time.time() - t0)))
    p.flush(30)


CpuProbe = Callable[[], dict[str, dict[int, float]]]
"""Samples the CPU seconds of groups of processes (group -> pid -> seconds)."""


def run_mode(
    spark: Any,
    kafka: Any,
    mode: str,
    args: argparse.Namespace,
    cpu_probe: CpuProbe | None = None,
    table: str | None = None,
    storage_options: dict[str, str] | None = None,
) -> dict[str, Any]:
    """The backlog drain then the live phase of ``mode``; with ``cpu_probe``, also the
    CPU seconds of each of its process groups from the commit of the backlog's
    ``args.cpu_from_batch``-th micro-batch to the end of the backlog (``cpu_window``,
    over ``cpu_window_events`` events). The table is ``table`` (a new URL, reached with
    ``storage_options``), else a new one in a temporary directory."""
    from cdc_sink.spark import DecodeOptions, SinkOptions, sink

    work = tempfile.mkdtemp(prefix=f"cdc_e2e_{mode}_")
    topic = f"orders-{mode}-{int(time.time())}"
    kafka.create_topic(topic, args.partitions)
    keys = args.keys
    rng = np.random.default_rng(1)
    aligned = args.partitions if mode == "executors-aligned" else None  # bucket-partitioned
    produce_backlog(kafka.bootstrap_servers, topic, keys, args.events, rng, args.format, aligned)
    fn = sink(
        table or f"{work}/table",
        schema=SCHEMA,
        options=SinkOptions(
            storage_options=storage_options or {},
            app_id=f"bench-{mode}",
            apply_mode="driver" if mode == "driver-tasks" else "executors" if aligned else mode,  # type: ignore[arg-type]
            format=args.format,
            bucket_partitioned=aligned is not None,
            decode=DecodeOptions(
                where="executors" if mode == "driver-tasks" else None,
                processes=args.decode_processes if mode == "driver" else 0,
            ),
        ),
    )
    if fn.decode_pool is not None:
        fn.decode_pool.start()  # a running job starts its workers once
    cpu_at_first: dict[str, dict[int, float]] = {}
    done: list[int] = []  # events of each committed micro-batch with events
    if cpu_probe is not None:

        def sample_first(st: Any) -> None:
            if st.version is not None and st.events:
                done.append(st.events)
                if len(done) == args.cpu_from_batch:
                    cpu_at_first.update(cpu_probe())

        fn.on_batch = sample_first
    df = earliest_stream(spark, kafka.bootstrap_servers, topic, args.max_per_trigger)
    q = (
        df.writeStream.foreachBatch(fn)
        .trigger(processingTime=args.trigger)
        .option("checkpointLocation", f"{work}/ckpt")
        .start()
    )
    t_start = time.time()
    q.processAllAvailable()
    cpu_at_end = cpu_probe() if cpu_probe is not None else {}
    total = keys + args.events
    stats = [s for s in fn.stats if not s.skipped]
    t_first = t_start
    t_last = max(s.committed_ms for s in stats) / 1000
    throughput = total / (t_last - t_first)
    batch_rates = [s.events / s.total_s for s in stats if s.events]
    # After the first micro-batch (whose wall time includes the query's and the
    # executors' start: Kafka consumers, Python workers): the rate a running job keeps.
    first = min(stats, key=lambda s: s.committed_ms)
    after_first = (total - first.events) / (t_last - first.committed_ms / 1000)
    print(
        f"[{mode}] backlog {total:,} events in {len(stats)} batches: "
        f"{throughput:,.0f} events/s (wall, incl. Kafka read + decode + commit); "
        f"after the first batch ({first.events:,} events, committed "
        f"{first.committed_ms / 1000 - t_first:.1f} s after the start) "
        f"{after_first:,.0f} events/s; median batch {np.median(batch_rates):,.0f} events/s"
    )
    # Freshness with a live producer.
    rate = int(throughput * 0.8) // 1000 * 1000 if args.rate == "auto" else int(args.rate)
    last_backlog_batch = max(s.batch_id for s in fn.stats)  # fn.stats: the newest 256
    stop = threading.Event()
    th = threading.Thread(
        target=live_producer,
        args=(kafka.bootstrap_servers, topic, rate, args.duration, keys, 10**8 + keys, stop),
        kwargs={"fmt": args.format, "ahead": args.encode_ahead, "partitions": aligned},
    )
    th.start()
    th.join()
    q.processAllAvailable()
    q.stop()
    fn.close()
    live_stats = [s for s in fn.stats if s.batch_id > last_backlog_batch]
    fresh = np.concatenate([s.freshness_ms() for s in live_stats] or [np.empty(0, np.int64)])
    live = [s for s in live_stats if s.events]
    live_events = sum(s.events for s in live)
    p50, p99 = (
        (float(np.percentile(fresh, 50)), float(np.percentile(fresh, 99)))
        if len(fresh)
        else (float("nan"), float("nan"))
    )
    print(
        f"[{mode}] live {rate:,} events/s for {args.duration:.0f}s, trigger {args.trigger}: "
        f"{live_events:,} events in {len(live)} batches; freshness p50 {p50:,.0f} ms, "
        f"p99 {p99:,.0f} ms ({len(fresh):,} sampled events)"
    )
    for s in sorted(live, key=lambda s: -s.total_s)[:3]:  # where the tail comes from
        ph = ", ".join(f"{k} {v:.2f}s" for k, v in s.phases.items())
        worst = int(s.freshness_ms().max()) if s.ts_sample is not None else -1
        print(
            f"[{mode}]   slow batch {s.batch_id}: {s.events:,} events in {s.total_s:.2f}s "
            f"({ph}); oldest event visible after {worst:,} ms"
        )
    shutil.rmtree(work, ignore_errors=True)
    return {
        "mode": mode,
        "throughput": throughput,
        "after_first": after_first,
        "cpu_window_events": total - sum(done[: args.cpu_from_batch]) if cpu_at_first else 0,
        "cpu_window": {
            g: cpu_between(cpu_at_first.get(g, {}), after) for g, after in cpu_at_end.items()
        },
        "rate": rate,
        "misaligned_batches": fn.misaligned_batches,
        "p50_ms": p50,
        "p99_ms": p99,
    }


def workload_parser(
    doc: str | None, *, events: int, keys: int = 100_000, max_per_trigger: int | None = None
) -> argparse.ArgumentParser:
    """A benchmark's parser with the size of the workload of :func:`encode_events`:
    ``--events`` and ``--keys``; with ``max_per_trigger``, also the topic's
    ``--max-per-trigger`` and ``--partitions``."""
    ap = argparse.ArgumentParser(
        description=doc, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--events", type=int, default=events)
    ap.add_argument("--keys", type=int, default=keys)
    if max_per_trigger is not None:
        ap.add_argument("--max-per-trigger", type=int, default=max_per_trigger)
        ap.add_argument("--partitions", type=int, default=4)
    return ap


def add_workload_args(
    ap: argparse.ArgumentParser,
    *,
    events: int = 2_000_000,
    max_per_trigger: int = 500_000,
    rate: int = 20_000,
    duration: float = 30,
) -> None:
    """The options :func:`run_mode` reads (backlog, live producer, topic), with defaults."""
    ap.add_argument("--events", type=int, default=events)
    ap.add_argument("--keys", type=int, default=200_000)
    ap.add_argument("--max-per-trigger", type=int, default=max_per_trigger)
    ap.add_argument(
        "--rate", default=str(rate), help="live events/s, or auto: 80%% of the backlog's rate"
    )
    ap.add_argument("--trigger", default="1 second", help="processing-time trigger")
    ap.add_argument("--duration", type=float, default=duration)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--format", choices=FORMATS, default="json", help="of the Kafka values")
    ap.add_argument(
        "--encode-ahead",
        action="store_true",
        help="encode the live events before the live phase (freshness from Kafka timestamps)",
    )
    ap.add_argument(
        "--decode-processes", type=int, default=0, help="decode worker processes (driver mode)"
    )
    ap.add_argument(
        "--cpu-from-batch",
        type=int,
        default=1,
        help="with a CPU probe: measure CPU from the commit of this micro-batch (1: the "
        "first) to the end of the backlog",
    )


def add_pool_arg(ap: argparse.ArgumentParser) -> None:
    """``--arrow-memory-pool``, applied by :func:`use_pool` (the streaming job's flag)."""
    ap.add_argument(
        "--arrow-memory-pool",
        choices=("auto", *POOLS, "pyarrow"),
        default="auto",
        help="pyarrow's allocator in the driver and the Python workers (default auto, as "
        "the streaming job: jemalloc when pyarrow has it)",
    )


def use_pool(args: argparse.Namespace) -> dict[str, str]:
    """Applies ``--arrow-memory-pool`` here; returns the Spark conf for the workers."""
    return use_arrow_memory_pool(args.arrow_memory_pool)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    add_workload_args(ap)
    add_pool_arg(ap)
    ap.add_argument("--modes", default="driver,executors")
    args = ap.parse_args()
    from cdc_sink.spark.session import local_spark

    kafka = start_kafka(num_partitions=args.partitions)
    spark = local_spark(
        "cdc_sink-e2e",
        master="local[2]",
        extra_conf={"spark.driver.memory": "6g", **use_pool(args)},
    )
    try:
        for mode in args.modes.split(","):
            run_mode(spark, kafka, mode, args)
    finally:
        spark.stop()
        kafka.stop()


if __name__ == "__main__":
    main()
