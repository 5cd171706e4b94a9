"""Metrics soak (issue 9): the real job over many small micro-batches, driver RSS sampled.

The streaming job (``streaming_jobs/cdc_to_tablets.py`` under ``spark-submit``,
``local[2]``, ``--metrics-port``) reads a topic of a local Kafka broker
(:func:`cdc_sink_testkit.kafka.broker.start_kafka`) while a producer thread feeds it the demo's
orders stream (:func:`cdc_sink_testkit.demo.orders.generate_orders`, 1% malformed records
included) at a steady ``--rate`` events/s. With a short ``--trigger`` and a small
``--max-offsets`` every micro-batch is small, so the run covers ``--batches`` batches.

Every ``--sample-every`` seconds the RSS (``VmRSS`` of ``/proc/<pid>/status``) of the
driver JVM (spark-submit's ``SparkSubmit`` java process) and of the Python driver (its
``python`` child) is sampled, with the number of committed batches read from the job's
own ``/metrics`` (``cdc_sink_batches_total``). At the end the endpoint is timed: the
median of ``--gets`` GETs of ``/metrics`` (target < 50 ms). Prints the RSS curve every
``--print-every`` batches and the slope of a least-squares line over the second half
of the run (MiB per 1,000 batches).

``--table-only`` runs no job: the same orders applied ``--max-offsets`` events at a time
with ``Table.apply`` in this process (no Spark, no metrics), printing RSS and the table's
``memory_bytes``, to tell a growth of the table from one of the job.

Run::

    .venv/bin/python benchmarks/soak.py --batches 1000 --trigger '300 milliseconds'
    .venv/bin/python benchmarks/soak.py --table-only --batches 600
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import numpy as np
from proc_cpu import children, cpu_s  # benchmarks/ is sys.path[0] when run

REPO = Path(__file__).resolve().parents[1]
JOB = REPO / "streaming_jobs" / "cdc_to_tablets.py"
SCHEMA_FILE = REPO / "streaming_jobs" / "orders_schema.json"
TABLE_MEM = re.compile(r"^cdc_sink_table_memory_bytes\{[^}]*\}\s+([0-9.eE+]+)", re.M)
BATCHES = re.compile(
    r'^cdc_sink_batches_total\{[^}]*result="committed"[^}]*\}\s+([0-9.eE+]+)', re.M
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _rss_mib(pid: int) -> float | None:
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def find_drivers(root: int) -> tuple[int | None, int | None]:
    """(driver JVM pid, Python driver pid) in the process tree under ``root``."""
    jvm = py = None
    todo = [root]
    while todo:
        pid = todo.pop()
        cmd = _cmdline(pid)
        if jvm is None and "java" in cmd.split(" ", 1)[0] and "SparkSubmit" in cmd:
            jvm = pid
        elif py is None and "python" in cmd.split(" ", 1)[0] and str(JOB) in cmd:
            py = pid
        todo += children(pid)
    return jvm, py


def get_metrics(url: str, timeout: float = 5.0) -> tuple[str, float]:
    """Body of one GET of ``url`` and its wall time in seconds."""
    t0 = time.perf_counter()
    with urllib.request.urlopen(url, timeout=timeout) as r:
        body = r.read().decode()
    return body, time.perf_counter() - t0


def committed_batches(body: str) -> int:
    return int(sum(float(v) for v in BATCHES.findall(body)))


def producer_loop(
    bootstrap: str, topic: str, rate: int, stop: threading.Event, sent: list[int]
) -> None:
    """Sends the demo's orders stream at ``rate`` events/s in 100 ms slices until stopped."""
    import json

    from cdc_sink.kafka.producer import CdcProducer
    from cdc_sink_testkit.demo.orders import generate_orders
    from cdc_sink_testkit.demo.stream import produce_records

    with open(SCHEMA_FILE, encoding="utf-8") as f:
        schema = json.load(f)
    producer = CdcProducer(bootstrap, topic, schema, format="json")
    seed = 7
    records = generate_orders(200_000, seed=seed)
    i = 0
    per_slice = max(1, rate // 10)
    t_next = time.monotonic()
    while not stop.is_set():
        if i + per_slice > len(records):  # a new stream (new order ids start over: upserts)
            seed += 1
            records, i = generate_orders(200_000, seed=seed), 0
        produce_records(producer, records[i : i + per_slice])
        producer.flush(30)
        i += per_slice
        sent[0] += per_slice
        t_next += 0.1
        time.sleep(max(0.0, t_next - time.monotonic()))
    producer.flush(30)
    producer.close()


def job_cmd(
    args: argparse.Namespace, bootstrap: str, topic: str, work: Path, port: int
) -> list[str]:
    from cdc_sink.kafka.jars import spark_kafka_conf

    submit = str(Path(sys.executable).with_name("spark-submit"))
    return [
        submit,
        "--master",
        "local[2]",
        "--jars",
        spark_kafka_conf()["spark.jars"],
        "--driver-memory",
        args.driver_memory,
        "--conf",
        "spark.ui.enabled=false",
        "--conf",
        "spark.sql.session.timeZone=UTC",
        "--conf",
        "spark.sql.shuffle.partitions=2",
        str(JOB),
        "--bootstrap-servers",
        bootstrap,
        "--topic",
        topic,
        "--table-path",
        str(work / "table"),
        "--schema-file",
        str(SCHEMA_FILE),
        "--checkpoint",
        str(work / "checkpoint"),
        "--trigger",
        args.trigger,
        "--max-offsets-per-trigger",
        str(args.max_offsets),
        "--metrics-port",
        str(port),
        "--log-level",
        "WARNING",
        "--gc-every",
        str(args.gc_every),
        "--compact-every",
        str(args.compact_every),
        "--retain-versions",
        str(args.retain_versions),
        "--retain-seconds",
        str(args.retain_seconds),
    ]


def table_only(batches: int, batch_events: int, print_every: int) -> None:
    """The table alone (no Spark, no metrics): the demo's orders applied in small batches
    with ``Table.apply`` in this process; RSS and ``table.stats().memory_bytes``."""
    import json

    from cdc_sink.table import create_table
    from cdc_sink_testkit.demo.orders import generate_orders

    with open(SCHEMA_FILE, encoding="utf-8") as f:
        schema = json.load(f)
    work = Path(tempfile.mkdtemp(prefix="cdc_soak_table_"))
    table = create_table(work / "table", schema)
    events = [r.event for r in generate_orders(batches * batch_events, malformed_rate=0.0)]
    for b in range(batches):
        table.apply(events[b * batch_events : (b + 1) * batch_events])
        if (b + 1) % print_every == 0 or b == 0:
            st = table.stats()
            print(
                f"  batches={b + 1:5d} RSS {_rss_mib(os.getpid()):7.1f} MiB  table memory "
                f"{st.memory_bytes / 2**20:6.1f} MiB  live rows {st.live_rows:,}",
                flush=True,
            )
    shutil.rmtree(work, ignore_errors=True)


# (t, batches, jvm MiB, python MiB, jvm cpu s, python cpu s)
Sample = tuple[float, int, float, float, float, float]


def _parse_args() -> argparse.Namespace:
    """The command line (see the module docstring)."""
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--batches", type=int, default=1000, help="committed batches to run")
    ap.add_argument("--trigger", default="300 milliseconds")
    ap.add_argument("--rate", type=int, default=300, help="events/s produced")
    ap.add_argument("--max-offsets", type=int, default=200, help="maxOffsetsPerTrigger")
    ap.add_argument("--partitions", type=int, default=2)
    ap.add_argument("--gc-every", type=int, default=100)
    ap.add_argument("--compact-every", type=int, default=200)
    ap.add_argument("--retain-versions", type=int, default=100)
    ap.add_argument(
        "--retain-seconds",
        type=float,
        default=30,
        help="the job's default (3600) keeps every version of the last hour "
        "readable, so the table grows with the batches of a soak",
    )
    ap.add_argument("--driver-memory", default="2g")
    ap.add_argument("--sample-every", type=float, default=3.0)
    ap.add_argument("--print-every", type=int, default=100)
    ap.add_argument("--gets", type=int, default=20)
    ap.add_argument("--timeout", type=float, default=3600, help="give up after (s)")
    ap.add_argument(
        "--table-only",
        action="store_true",
        help="no job: apply the orders to a table in this process, --max-offsets "
        "events per batch (is a growth the table's?)",
    )
    return ap.parse_args()


def _take_sample(url: str, jvm: int, py: int, t0: float) -> tuple[Sample, float] | None:
    """One sample of the job (and its table memory gauge in MiB), or None when the
    endpoint or a process could not be read."""
    try:
        body, _ = get_metrics(url)
    except OSError:
        return None
    n = committed_batches(body)
    m = TABLE_MEM.search(body)
    t_mem = float(m.group(1)) / 2**20 if m else float("nan")
    r_j, r_p = _rss_mib(jvm), _rss_mib(py)
    c_j, c_p = cpu_s(jvm), cpu_s(py)
    if r_j is None or r_p is None or c_j is None or c_p is None:
        return None
    return (time.time() - t0, n, r_j, r_p, c_j, c_p), t_mem


def _print_progress(samples: list[Sample], print_every: int, t_mem: float, sent: int) -> None:
    """Prints the newest sample when it is the first or crossed a ``print_every`` mark."""
    t, n, r_j, r_p = samples[-1][:4]
    if n and (len(samples) == 1 or n // print_every > samples[-2][1] // print_every):
        print(
            f"  t={t:6.0f}s batches={n:5d} driver JVM RSS {r_j:7.1f} MiB"
            f"  Python driver RSS {r_p:6.1f} MiB  (table memory gauge {t_mem:6.1f} MiB; "
            f"sent {sent:,} events)",
            flush=True,
        )


def _sample_job(
    args: argparse.Namespace, job: subprocess.Popen[bytes], url: str, work: Path, sent: list[int]
) -> list[Sample]:
    """Samples the running job every ``--sample-every`` s until ``--batches`` committed
    batches (or ``--timeout``)."""
    samples: list[Sample] = []
    t0 = time.time()
    jvm = py = None
    while True:
        time.sleep(args.sample_every)
        if job.poll() is not None:
            raise SystemExit(f"job exited with {job.returncode}; see {work / 'job.log'}")
        if jvm is None or py is None:
            jvm, py = find_drivers(job.pid)
            if jvm is None or py is None:
                continue
        got = _take_sample(url, jvm, py, t0)
        if got is None:
            continue
        samples.append(got[0])
        _print_progress(samples, args.print_every, got[1], sent[0])
        n = got[0][1]
        if n >= args.batches:
            break
        if time.time() - t0 > args.timeout:
            print(f"timeout after {args.timeout:.0f}s at {n} batches", flush=True)
            break
    return samples


def _time_endpoint(url: str, gets: int) -> None:
    """Times ``gets`` GETs of ``/metrics`` and prints their median."""
    body, times = "", []
    for _ in range(gets):
        body, dt = get_metrics(url)
        times.append(dt * 1000)
    print(
        f"/metrics: {len(body):,} bytes, median of {gets} GETs "
        f"{statistics.median(times):.1f} ms (min {min(times):.1f}, "
        f"max {max(times):.1f})",
        flush=True,
    )


def _stop_job(job: subprocess.Popen[bytes]) -> None:
    """Stops the job if it still runs (killed after 60 s)."""
    if job.poll() is None:
        job.terminate()  # the SparkSubmit wrapper; the driver finishes its batch
        try:
            job.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(job.pid, 9)
            job.wait()


def _print_summary(samples: list[Sample], sent: int) -> None:
    """The RSS curve's start, middle, end, max and second-half slope; CPU times."""
    arr = np.array([s for s in samples if s[1] >= 1])  # from the first committed batch
    half = arr[len(arr) // 2 :]
    n_end = int(arr[-1, 1])
    for col, name in ((2, "driver JVM"), (3, "Python driver")):
        mid = arr[np.searchsorted(arr[:, 1], n_end // 2), col]
        slope = np.polyfit(half[:, 1], half[:, col], 1)[0] * 1000
        print(
            f"{name}: RSS start {arr[0, col]:.1f} MiB (batch {int(arr[0, 1])}), "
            f"middle {mid:.1f} MiB, end {arr[-1, col]:.1f} MiB (batch {n_end}), "
            f"max {arr[:, col].max():.1f} MiB; second-half slope "
            f"{slope:+.1f} MiB per 1,000 batches",
            flush=True,
        )
    print(
        f"{n_end} batches in {arr[-1, 0]:.0f}s; CPU: driver JVM {arr[-1, 4]:.0f}s, "
        f"Python driver {arr[-1, 5]:.0f}s; {sent:,} events sent",
        flush=True,
    )


def main() -> None:
    args = _parse_args()
    if args.table_only:
        table_only(args.batches, args.max_offsets, args.print_every)
        return

    from cdc_sink_testkit.kafka import start_kafka

    work = Path(tempfile.mkdtemp(prefix="cdc_soak_"))
    kafka = start_kafka(num_partitions=args.partitions)
    topic = f"orders-soak-{int(time.time())}"
    kafka.create_topic(topic, args.partitions)
    stop = threading.Event()
    sent = [0]
    prod = threading.Thread(
        target=producer_loop,
        daemon=True,
        args=(kafka.bootstrap_servers, topic, args.rate, stop, sent),
    )
    prod.start()
    port = _free_port()
    url = f"http://127.0.0.1:{port}/metrics"
    env = dict(
        os.environ,
        PYSPARK_PYTHON=sys.executable,
        PYSPARK_DRIVER_PYTHON=sys.executable,
        SPARK_LOCAL_IP="127.0.0.1",
        PYTHONPATH=str(REPO),
    )
    log = open(work / "job.log", "w", encoding="utf-8")  # noqa: SIM115 - closed below
    cmd = job_cmd(args, kafka.bootstrap_servers, topic, work, port)
    print("job:", " ".join([*cmd[:1], "...", *cmd[cmd.index(str(JOB)) :]]), flush=True)
    job = subprocess.Popen(
        cmd,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        samples = _sample_job(args, job, url, work, sent)
        _time_endpoint(url, args.gets)
    finally:
        stop.set()
        _stop_job(job)
        log.close()
        prod.join(30)
        kafka.stop()
    if len(samples) >= 4:
        _print_summary(samples, sent[0])
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
