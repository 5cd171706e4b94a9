"""The sink against Spark's own Kafka transport, in the same run (issue 11).

One topic holding ``--keys`` inserts then ``--events`` CDC events (the workload of
``benchmarks/e2e.py``: 90% partial updates of 2 of 10 columns, 10% inserts) is produced
once on a real local KRaft broker; then, ``--repeats`` times and interleaved, each
consumer below drains it from ``earliest`` with a fresh checkpoint, ``local[2]`` Spark in
this process, no trigger interval (micro-batches back to back) and
``--max-per-trigger`` records per micro-batch:

* ``noop``: ``foreachBatch`` writing the batch to Spark's ``noop`` sink (Kafka read only);
* ``toArrow``: ``foreachBatch`` collecting the columns the sink reads
  (key, value, topic, partition, offset, timestamp) with ``toArrow()``: the ceiling of
  any driver-side sink;
* ``sink-driver``: cdc_sink's sink, driver apply mode, Python decoder of ``--format``
  (``json``, the default, or ``rowv2``, the compact binary row format: the same events);
* ``sink-driver-pool``: the same with ``decode_processes=--decode-processes`` (decoding in
  worker processes);
* ``sink-driver-jvm``: driver apply mode, ``json_decoder="jvm"`` (Spark's ``from_json``);
* ``sink-driver-tasks``: driver apply mode, ``decode_in="executors"`` (decoded in Spark
  tasks, each bucket's events packed to the driver);
* ``sink-executors``: executors apply mode (decode and prepare in Spark tasks).

events/s = events / (query start -> ``processAllAvailable()`` returns). CPU: the
machine's busy CPU seconds over the drain (``/proc/stat``: the Spark JVM, the broker and
this process; run it on an otherwise quiet machine) and this Python process's own
(``time.process_time``), per event and as cores busy. For the sink
runs, the seconds of each phase summed over the batches (read = ``toArrow`` or
``from_json`` + ``toArrow``, decode, apply, commit) and the rest of the wall time (Spark's
per-batch planning and scheduling, the trigger loop).

Run::

    .venv/bin/python benchmarks/e2e_ceiling.py [--events 1000000] [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa
from e2e import (
    FORMATS,
    SCHEMA,
    add_pool_arg,
    produce_backlog,
    use_pool,
    workload_parser,
)  # benchmarks/ is sys.path[0] when run
from kafka_source import earliest_stream  # benchmarks/peers, on the path after e2e

CONSUMERS = (
    "noop",
    "toArrow",
    "sink-driver",
    "sink-driver-pool",
    "sink-driver-jvm",
    "sink-driver-tasks",
    "sink-executors",
)


def _consumer(
    name: str, table: str, decode_processes: int, fmt: str
) -> tuple[Callable[[Any, int], None], Any]:
    """The foreachBatch function of ``name`` and the sink behind it (or None)."""
    from cdc_sink.spark import DecodeOptions, SinkOptions, sink
    from cdc_sink.spark._driver import raw_columns

    if name == "noop":
        return (lambda df, _id: df.write.format("noop").mode("overwrite").save()), None
    if name == "toArrow":

        def collect(df: Any, _id: int) -> None:
            raw_columns(df).toArrow()  # exactly the columns the sink reads

        return collect, None
    mode = "executors" if name == "sink-executors" else "driver"
    decoder = "jvm" if name == "sink-driver-jvm" else "python"
    fn = sink(
        table,
        schema=SCHEMA,
        options=SinkOptions(
            app_id=f"ceiling-{name}",
            apply_mode=mode,
            format=fmt,
            decode=DecodeOptions(
                json_decoder=decoder,
                processes=decode_processes if name == "sink-driver-pool" else 0,
                where="executors" if name == "sink-driver-tasks" else None,
            ),
        ),
    )
    return fn, fn


def machine_cpu_s() -> float:
    """Busy CPU seconds of the whole machine since boot (``/proc/stat``, all cores)."""
    with open("/proc/stat", encoding="ascii") as f:
        fields = [int(x) for x in f.readline().split()[1:9]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = fields
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def drain(
    spark: Any, bootstrap: str, topic: str, name: str, total: int, args: argparse.Namespace
) -> dict[str, Any]:
    """One drain of the topic by consumer ``name``; events/s and the sink's phases."""
    work = tempfile.mkdtemp(prefix=f"cdc_ceiling_{name}_")
    max_per_trigger = args.max_per_trigger
    sink_fn = None
    try:
        fn, sink_fn = _consumer(name, f"{work}/table", args.decode_processes, args.format)
        if sink_fn is not None and sink_fn.decode_pool is not None:
            sink_fn.decode_pool.start()  # a running job starts its workers once
        df = earliest_stream(spark, bootstrap, topic, max_per_trigger, args.min_partitions)
        t0, c0, p0 = time.perf_counter(), machine_cpu_s(), time.process_time()
        q = df.writeStream.foreachBatch(fn).option("checkpointLocation", f"{work}/ckpt").start()
        q.processAllAvailable()
        wall = time.perf_counter() - t0
        cpu, py_cpu = machine_cpu_s() - c0, time.process_time() - p0
        q.stop()
        out: dict[str, Any] = {
            "name": name,
            "wall": wall,
            "eps": total / wall,
            "cpu_us": cpu / total * 1e6,
            "py_cpu_us": py_cpu / total * 1e6,
            "cores": cpu / wall,
        }
        if sink_fn is not None:
            stats = [s for s in sink_fn.stats if not s.skipped]
            assert sum(s.events for s in stats) == total, "the sink missed events"
            phases: dict[str, float] = {}
            for s in stats:
                for k, v in s.phases.items():
                    phases[k] = phases.get(k, 0.0) + v
            out["phases"] = phases
            out["batches"] = len(stats)
            out["in_sink"] = sum(s.total_s for s in stats)
        return out
    finally:
        if sink_fn is not None:
            sink_fn.close()
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    ap = workload_parser(__doc__, events=1_000_000, max_per_trigger=200_000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--consumers", default=",".join(CONSUMERS))
    ap.add_argument("--decode-processes", type=int, default=2, help="of sink-driver-pool")
    ap.add_argument("--format", choices=FORMATS, default="json", help="of the Kafka values")
    ap.add_argument(
        "--min-partitions",
        type=int,
        default=0,
        help="the Kafka source's minPartitions, for every consumer (default: one read task "
        "per Kafka partition)",
    )
    add_pool_arg(ap)
    args = ap.parse_args()
    if args.format != "json" and "sink-driver-jvm" in args.consumers.split(","):
        ap.error("sink-driver-jvm decodes JSON only: use --format json or leave it out")
    from cdc_sink.spark.session import local_spark
    from cdc_sink_testkit.kafka import start_kafka

    names = args.consumers.split(",")
    kafka = start_kafka(num_partitions=args.partitions)
    spark = local_spark(
        "cdc_sink-ceiling",
        master="local[2]",
        extra_conf={"spark.driver.memory": "6g", **use_pool(args)},
    )
    spark.sparkContext.setLogLevel("ERROR")
    try:
        topic = f"ceiling-{int(time.time())}"
        kafka.create_topic(topic, args.partitions)
        total = produce_backlog(
            kafka.bootstrap_servers,
            topic,
            args.keys,
            args.events,
            np.random.default_rng(1),
            args.format,
        )
        print(
            f"topic: {total:,} {args.format} records in {args.partitions} partitions; "
            f"{args.max_per_trigger:,} per micro-batch; pyarrow pool "
            f"{pa.default_memory_pool().backend_name}; load average "
            f"{os.getloadavg()[0]:.1f}",
            flush=True,
        )
        drain(
            spark, kafka.bootstrap_servers, topic, "toArrow", total, args
        )  # warm-up: JIT, first query, page cache
        runs: dict[str, list[dict[str, Any]]] = {n: [] for n in names}
        for r in range(args.repeats):
            for name in names:
                res = drain(spark, kafka.bootstrap_servers, topic, name, total, args)
                runs[name].append(res)
                extra = ""
                if "phases" in res:
                    ph = ", ".join(f"{k} {v:.1f}s" for k, v in res["phases"].items())
                    extra = f"; {res['batches']} batches, in the sink {res['in_sink']:.1f}s ({ph})"
                print(
                    f"  repeat {r} {name:16s} {res['wall']:6.1f}s wall -> "
                    f"{res['eps']:>9,.0f} events/s; CPU {res['cpu_us']:.1f} us/event "
                    f"(this Python process {res['py_cpu_us']:.1f}), {res['cores']:.2f} cores busy"
                    f"{extra}  (load "
                    f"{os.getloadavg()[0]:.1f})",
                    flush=True,
                )
        ceiling = (
            statistics.median(x["eps"] for x in runs.get("toArrow", []))
            if runs.get("toArrow")
            else None
        )
        print(
            "\n| consumer | events/s (median) | of toArrow | CPU us/event, machine (Python)"
            " | cores busy |\n|---|---|---|---|---|"
        )
        for name in names:
            eps = statistics.median(x["eps"] for x in runs[name])
            share = f"{eps / ceiling * 100:.0f}%" if ceiling else "-"
            cpu = statistics.median(x["cpu_us"] for x in runs[name])
            py = statistics.median(x["py_cpu_us"] for x in runs[name])
            cores = statistics.median(x["cores"] for x in runs[name])
            print(f"| {name} | {eps:,.0f} | {share} | {cpu:.1f} ({py:.1f}) | {cores:.2f} |")
    finally:
        spark.stop()
        kafka.stop()


if __name__ == "__main__":
    main()
