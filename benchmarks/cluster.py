"""Executors mode on a real Spark standalone cluster (issue 11, "scale-out"; issue 40).

Starts a Spark standalone cluster on this machine from pyspark's own ``spark-class``: a
master and ``--workers`` workers (each its own JVM with ``--cores-per-worker`` cores, its
own work directory and its own Python workers), all on 127.0.0.1. Then, each in a fresh
process so that each has its own SparkContext, the end-to-end run of ``e2e.py`` (a backlog
of CDC events drained by the streaming sink, then a live producer for freshness):

* executors mode on the cluster (``spark://...``; one executor per worker; the table on
  local disk, which every executor of this one machine sees);
* executors mode on a bucket-partitioned topic (``executors-aligned``: the backlog and
  the live events produced to their key's bucket modulo ``--partitions``, the sink run
  with ``bucket_partitioned=True``: decode and prepare in the tasks that read, no
  shuffle);
* driver mode on the same cluster (the Kafka read runs in the executors, decoding and
  applying in the driver);
* driver mode with the decode in the executors (``decode_in="executors"``: the Kafka
  read and the decode run in the executors, the driver applies);
* driver mode on ``local[N]`` (N = the cluster's cores), the usual single-JVM setup.

Reports events/s of each, and the rate per executor core of executors mode and of
driver mode decoding in the executors, against driver mode's rate: by wall time, and by
the CPU seconds the executors and the driver spent per event (from ``/proc``, from the
commit of micro-batch ``--cpu-from-batch`` to the end of the backlog), with the share
of the JVMs' JIT compiler and garbage collector threads. Every process started is
stopped at the end (also on failure).

Scale-out (issue 40):

* ``--s3``: every table on a SeaweedFS S3 server started for the run (the test kit's
  ``SeaweedS3``, stopped at the end), reached by URL; the keys go to the runs in
  ``AWS_*`` variables, never on a command line, and to the executors inside the sink's
  storage options. The server's CPU is measured too (it shares the machine);
* ``--workers-list 1,2``: one cluster per worker count, one after the other, each with
  the same workload; reports per setup the events/s, the CPU seconds per event of the
  executors and the driver, and the per-worker efficiency ``rate(n) / (n/m * rate(m))``
  of each count n against the first count m, by wall time and by CPU per event (the
  latter does not depend on how many of the machine's cores are free);
* ``--freshness-duration S``: after the repeats of each cluster, one more run of each
  setup whose live phase produces 80% of the median rate the repeats kept after their
  first micro-batch (their maximum rate), for S seconds: freshness p50/p99 there.

Every run records the 1-minute load average of the machine while it ran and the CPU
other processes took in its CPU window (the machine's busy time from ``/proc/stat``
less the run's own processes), since others may share these cores.

Run:  .venv/bin/python benchmarks/cluster.py [--workers 2] [--cores-per-worker 1]
      [--events 1000000] [--keys 200000] [--rate 10000] [--duration 10] [--repeat 1]
      [--cpu-from-batch 1]
      [--setups executors,driver-tasks,driver,local] (also: executors-aligned)
      [--spark-conf KEY=VALUE ...]
      [--s3] [--workers-list 1,2] [--freshness-duration 20] [--json out.json]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scale_out import (
    LoadSampler,
    freshness_rates,
    machine_busy_s,
    others_cores,
    scale_figures,
    scale_summary,
    setup_key,
    us_per_event,
)

from cdc_sink_testkit.cluster import StandaloneCluster

KEYS_ENV = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")
"""Where a run finds the S3 server's keys (set by the main process for its runs)."""

MAIN_ONLY = frozenset(
    {
        "one",
        "master",
        "mode",
        "repeat",
        "worker_pids",
        "master_pid",
        "setups",
        "s3",
        "workers_list",
        "freshness_duration",
        "json",
        "table_url",
        "s3_endpoint",
        "s3_pid",
    }
)
"""Options of the main process, or given to each run on their own (:func:`run_argv`),
never passed through as workload options."""


def _jvm_threads(who: str, jvms: list[int]) -> dict[str, dict[int, float]]:
    """CPU seconds of the JIT compiler threads (``C1``/``C2 CompilerThread``) and of the
    garbage collector threads (``GC Thread``, ``G1 ...``) of each JVM of ``jvms``."""
    from proc_cpu import thread_cpu_s

    jit: dict[int, float] = {}
    gc: dict[int, float] = {}
    for pid in jvms:
        for name, secs in thread_cpu_s(pid).items():
            if "CompilerThre" in name:
                jit[pid] = jit.get(pid, 0.0) + secs
            elif name.startswith(("GC ", "G1 ")):
                gc[pid] = gc.get(pid, 0.0) + secs
    return {f"{who} JIT compilers": jit, f"{who} GC": gc}


def _storage_options(args: argparse.Namespace) -> dict[str, str] | None:
    """The S3 server's storage options for a run's table (None: the table is local): the
    endpoint from ``--s3-endpoint``, the keys from :data:`KEYS_ENV`."""
    if not args.s3_endpoint:
        return None
    key_id, secret = (os.environ[k] for k in KEYS_ENV)
    return {
        "endpoint": args.s3_endpoint,
        "region": "us-east-1",
        "access_key_id": key_id,
        "secret_access_key": secret,
        "allow_http": "true",
    }


def one_run(args: argparse.Namespace) -> dict[str, Any]:
    """One e2e run (``--one``) in this process: its own SparkContext on ``--master``."""
    from e2e import run_mode
    from proc_cpu import cpu_s, descendants, is_jvm, tree_cpu_s

    from cdc_sink.spark.session import local_spark
    from cdc_sink_testkit.kafka import start_kafka

    cores = args.workers * args.cores_per_worker
    conf = {
        "spark.driver.memory": "4g",
        "spark.sql.shuffle.partitions": str(cores),
        "spark.default.parallelism": str(cores),
    }
    conf.update(kv.split("=", 1) for kv in args.spark_conf)
    if args.master.startswith("spark://"):
        conf.update(
            {
                "spark.executor.cores": str(args.cores_per_worker),
                "spark.cores.max": str(cores),
                "spark.executor.memory": args.memory,
                "spark.executorEnv.PYTHONPATH": str(Path(__file__).resolve().parents[1]),
            }
        )
    kafka = start_kafka(num_partitions=args.partitions)
    spark = local_spark("cdc_sink-cluster", master=args.master, extra_conf=conf)
    workers = [int(p) for p in args.worker_pids.split(",") if p]

    def probe() -> dict[str, dict[int, float]]:
        """CPU of the executors (every process the workers started: executor JVMs and
        their Python workers), of the driver (this process, its JVM and children), of
        the broker, of the S3 server, of the cluster's daemons, and of the whole machine
        (busy time of every core, as pid 0), with the wall clock (as pid 0 of ``wall``)."""
        broker_pid = getattr(kafka, "pid", None)  # a local broker is a child: not the driver
        broker = {broker_pid, *descendants([broker_pid])} if broker_pid else set()
        mine = tree_cpu_s([os.getpid()])
        out = {
            "driver": {pid: s for pid, s in mine.items() if pid not in broker},
            "broker": {pid: s for pid, s in mine.items() if pid in broker},
            "s3 server": tree_cpu_s([args.s3_pid]) if args.s3_pid else {},
            "machine": {0: machine_busy_s()},
            "wall": {0: time.monotonic()},
        }
        if args.master.startswith("spark://"):
            out["executors"] = tree_cpu_s(workers, with_roots=False)
            daemons = [*workers, args.master_pid] if args.master_pid else workers
            out["daemons"] = {p: s for p in daemons if (s := cpu_s(p)) is not None}
            out["executor JVMs"] = {p: s for p, s in out["executors"].items() if is_jvm(p)}
            out.update(_jvm_threads("executor", list(out["executor JVMs"])))
        out.update(_jvm_threads("driver", [p for p in out["driver"] if is_jvm(p)]))
        return out

    try:
        out = run_mode(
            spark,
            kafka,
            args.mode,
            args,
            cpu_probe=probe,
            table=args.table_url or None,
            storage_options=_storage_options(args),
        )
    finally:
        spark.stop()
        kafka.stop()
    out.update(master=args.master, cores=cores, workers=args.workers, table=args.table_url)
    return out


def parser() -> argparse.ArgumentParser:
    """The command line of this script (and of the one-run subprocesses it starts)."""
    from e2e import add_workload_args

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--cores-per-worker", type=int, default=1)
    ap.add_argument("--memory", default="3g", help="memory per worker / executor")
    add_workload_args(ap, events=1_000_000, max_per_trigger=250_000, rate=10_000, duration=10)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument(
        "--setups",
        default="executors,driver-tasks,driver,local",
        help="which setups to run, in this order (local: driver mode on local[N])",
    )
    ap.add_argument(
        "--spark-conf",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a Spark setting for every setup (repeatable)",
    )
    ap.add_argument(
        "--s3", action="store_true", help="the tables on a SeaweedFS S3 server started for the run"
    )
    ap.add_argument(
        "--workers-list",
        default="",
        help="worker counts, comma-separated: one cluster each, in this order (instead of "
        "--workers); the efficiency is each count's against the first",
    )
    ap.add_argument(
        "--freshness-duration",
        type=float,
        default=0.0,
        help="seconds of one more run per setup and cluster whose live phase produces 80%% "
        "of the repeats' median rate after the first batch (0: none)",
    )
    ap.add_argument("--json", default="", help="also write every result to this file")
    ap.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--master", default="", help=argparse.SUPPRESS)
    ap.add_argument("--mode", default="", help=argparse.SUPPRESS)
    ap.add_argument("--worker-pids", default="", help=argparse.SUPPRESS)
    ap.add_argument("--master-pid", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--table-url", default="", help=argparse.SUPPRESS)
    ap.add_argument("--s3-endpoint", default="", help=argparse.SUPPRESS)
    ap.add_argument("--s3-pid", type=int, default=0, help=argparse.SUPPRESS)
    return ap


def passthrough(args: argparse.Namespace) -> list[str]:
    """The workload options of ``args`` as arguments of a one-run subprocess (a flag
    appears only when set: ``--encode-ahead=False`` is no argument argparse accepts)."""
    out = []
    for k, v in vars(args).items():
        if k in MAIN_ONLY:
            continue
        flag = f"--{k.replace('_', '-')}"
        if isinstance(v, bool):
            out += [flag] if v else []
        elif isinstance(v, list):
            out += [f"{flag}={x}" for x in v]
        else:
            out.append(f"{flag}={v}")
    return out


def run_argv(
    args: argparse.Namespace,
    *,
    mode: str,
    master: str,
    workers: int,
    worker_pids: list[int],
    master_pid: int = 0,
    table_url: str = "",
    s3_endpoint: str = "",
    s3_pid: int = 0,
    rate: int | None = None,
) -> list[str]:
    """The command line of one run: the workload options of ``args``, on a cluster of
    ``workers`` workers, with its table (``table_url`` on the S3 server at
    ``s3_endpoint``, else a local one) and, with ``rate``, that live rate."""
    overrides: dict[str, Any] = {"workers": workers}
    if rate is not None:
        overrides["rate"] = str(rate)
    return [
        sys.executable,
        __file__,
        "--one",
        f"--mode={mode}",
        f"--master={master}",
        f"--worker-pids={','.join(str(p) for p in worker_pids)}",
        f"--master-pid={master_pid}",
        f"--table-url={table_url}",
        f"--s3-endpoint={s3_endpoint}",
        f"--s3-pid={s3_pid}",
        *passthrough(argparse.Namespace(**{**vars(args), **overrides})),
    ]


def worker_counts(args: argparse.Namespace) -> list[int]:
    """The worker count of each cluster: ``--workers-list``, else ``--workers``.

    Raises:
        ValueError: A count is not a positive integer.
    """
    counts = [int(x) for x in args.workers_list.split(",")] if args.workers_list else [args.workers]
    if any(n < 1 for n in counts):
        raise ValueError(f"worker counts must be >= 1, not {args.workers_list!r}")
    return counts


def _one(argv: list[str], env: dict[str, str], load: LoadSampler) -> dict[str, Any]:
    """Runs one ``--one`` subprocess; its result, with the load average while it ran.

    Raises:
        RuntimeError: The run failed (its output's tail is printed first).
    """
    t0 = time.monotonic()
    done = subprocess.run(argv, capture_output=True, text=True, env=env)
    t1 = time.monotonic()
    line = next((ln for ln in done.stdout.splitlines() if ln.startswith("RESULT ")), None)
    if done.returncode != 0 or line is None:
        print(done.stdout[-3000:], done.stderr[-3000:], file=sys.stderr)
        raise RuntimeError(f"run {argv[3:5]} failed ({done.returncode})")
    res: dict[str, Any] = json.loads(line[len("RESULT ") :])
    loads = load.between(t0, t1) or [os.getloadavg()[0]]
    res.update(wall_s=t1 - t0, load=[min(loads), statistics.median(loads), max(loads)])
    return res


def _report(tag: str, res: dict[str, Any]) -> None:
    """One line per run."""
    mode, master = res["mode"], res["master"]
    print(
        f"[{tag}] {mode:17s} on {master:24s} {res['throughput']:>10,.0f} events/s "
        f"(after the first batch {res['after_first']:,.0f}); CPU us/event: executors+driver "
        f"{us_per_event(res, 'executors', 'driver'):.2f}, S3 server "
        f"{us_per_event(res, 's3 server'):.2f}; freshness at {res['rate']:,} events/s p50 "
        f"{res['p50_ms']:,.0f} ms, p99 {res['p99_ms']:,.0f} ms; load average "
        f"{res['load'][0]:.1f}-{res['load'][2]:.1f}, other processes "
        f"{others_cores(res):.2f} cores"
        + (f"; misaligned batches {res['misaligned_batches']}" if "aligned" in mode else ""),
        flush=True,
    )


def _setups(args: argparse.Namespace, cores: int, url: str) -> list[tuple[str, str]]:
    """(mode, master) of each setup of ``--setups`` on the cluster at ``url``."""
    return [
        ("driver", f"local[{cores}]") if name == "local" else (name, url)
        for name in args.setups.split(",")
    ]


def _on_cluster(
    args: argparse.Namespace,
    workers: int,
    s3: Any,
    load: LoadSampler,
    rates: dict[str, int] | None = None,
) -> Iterator[dict[str, Any]]:
    """Starts a cluster of ``workers`` workers and runs every setup on it once (with
    ``rates``, setup key -> live rate, only those setups, at those rates); yields each
    run's result."""
    env = dict(os.environ)
    if s3 is not None:
        env.update(zip(KEYS_ENV, (s3.access_key, s3.secret_key), strict=True))
    cores = workers * args.cores_per_worker
    with StandaloneCluster(
        workers, args.cores_per_worker, args.memory, executor_memory=args.memory
    ) as cluster:
        for mode, master in _setups(args, cores, cluster.url):
            key = setup_key(mode, master)
            if rates is not None and key not in rates:
                continue
            table = f"cluster-{workers}w-{mode}-{uuid.uuid4().hex[:8]}"
            argv = run_argv(
                args,
                mode=mode,
                master=master,
                workers=workers,
                worker_pids=[p for p in cluster.worker_pids if p is not None],
                master_pid=cluster.master_pid or 0,
                table_url=s3.url(table) if s3 is not None else "",
                s3_endpoint=s3.endpoint if s3 is not None else "",
                s3_pid=_s3_pid() if s3 is not None else 0,
                rate=None if rates is None else rates[key],
            )
            yield _one(argv, env, load)


def _s3_pid() -> int:
    """The pid of the S3 server this process started (0: none)."""
    from proc_cpu import descendants

    for pid in descendants([os.getpid()]):
        with contextlib.suppress(OSError):
            if Path(f"/proc/{pid}/comm").read_text().strip() == "weed":
                return pid
    return 0


def _summary(results: list[dict[str, Any]], cores: int) -> None:
    """Prints the medians and executors mode's rate per executor core against driver
    mode's, over the whole backlog and after the first micro-batch."""
    for figure, label in (("throughput", "backlog"), ("after_first", "after the first batch")):

        def med(mode: str, local: bool, figure: str = figure) -> float:
            got = [
                r[figure]
                for r in results
                if r["mode"] == mode and r["master"].startswith("local") == local
            ]
            return float(statistics.median(got)) if got else float("nan")  # setup not run

        drv_cluster, drv_local = med("driver", False), med("driver", True)
        print(
            f"{label}, median events/s: driver mode on the cluster {drv_cluster:,.0f}; "
            f"driver mode on local[{cores}] {drv_local:,.0f}"
        )
        for mode in ("executors", "executors-aligned", "driver-tasks"):
            ex = med(mode, False)
            if ex != ex:  # not run
                continue
            print(
                f"  {mode} on the cluster {ex:,.0f} ({ex / cores:,.0f} per executor core); "
                f"per executor core / driver mode: {ex / cores / drv_cluster:.2f} (cluster), "
                f"{ex / cores / drv_local:.2f} (local[{cores}])"
            )


def _cpu_summary(results: list[dict[str, Any]]) -> None:
    """Prints, per mode on the cluster, the CPU each event cost the executors (and how
    much of it their JVMs' JIT compilers and garbage collectors took) and the driver in
    the CPU window (``--cpu-from-batch``), and what one fully used executor core could
    carry: a per-core rate that does not depend on driver and executors sharing this
    machine's cores. Without the JIT compilers' share, it is the rate of warmed-up JVMs."""
    cluster = [r for r in results if r["master"].startswith("spark://")]
    rates = [r["after_first"] for r in cluster if r["mode"] == "driver"]
    driver_rate = statistics.median(rates) if rates else float("nan")  # setup not run
    for mode in ("executors", "executors-aligned", "driver-tasks", "driver"):
        rows = [r for r in cluster if r["mode"] == mode and r.get("cpu_window_events")]
        if not rows:
            continue

        def us(group: str, rows: list[dict[str, Any]] = rows) -> float:
            return statistics.median(
                r["cpu_window"].get(group, 0.0) / r["cpu_window_events"] * 1e6 for r in rows
            )

        ex, jit = us("executors"), us("executor JIT compilers")
        print(
            f"{mode} on the cluster, in the CPU window: executors {ex:.2f} CPU us/event "
            f"(JVMs {us('executor JVMs'):.2f}, of which JIT compilers {jit:.2f} and GC "
            f"{us('executor GC'):.2f}): {1e6 / ex:,.0f} events per executor CPU second, "
            f"{1e6 / ex / driver_rate:.2f}x driver mode's rate on the cluster; without the "
            f"JIT compilers {1e6 / (ex - jit):,.0f}, {1e6 / (ex - jit) / driver_rate:.2f}x. "
            f"Driver {us('driver'):.2f} CPU us/event (JIT compilers "
            f"{us('driver JIT compilers'):.2f})"
        )


def main() -> int:
    """Starts the cluster(s), runs the setups, prints the comparisons."""
    args = parser().parse_args()
    if args.one:
        print("RESULT " + json.dumps(one_run(args)), flush=True)
        return 0
    counts = worker_counts(args)
    results: list[dict[str, Any]] = []
    s3 = None
    with LoadSampler() as load:
        try:
            if args.s3:
                from cdc_sink_testkit.s3 import SeaweedS3

                s3 = SeaweedS3().start()
            for r in range(args.repeat):  # the counts interleaved: drifting load hits each
                for n in counts:
                    for res in _on_cluster(args, n, s3, load):
                        res["repeat"] = r
                        results.append(res)
                        _report(f"{r} {n}w", res)
            if args.freshness_duration:
                fresh_args = argparse.Namespace(
                    **{**vars(args), "duration": args.freshness_duration}
                )
                for n in counts:
                    rates = freshness_rates(results, n)
                    for res in _on_cluster(fresh_args, n, s3, load, rates):
                        res["freshness"] = True
                        results.append(res)
                        _report(f"fresh {n}w", res)
        finally:
            if s3 is not None:
                s3.stop()
    for n in counts:
        rep = [r for r in results if r["workers"] == n and not r.get("freshness")]
        print(f"--- {n} worker(s) x {args.cores_per_worker} core(s)")
        _summary(rep, n * args.cores_per_worker)
        _cpu_summary(rep)
    figures = scale_figures(results)
    scale_summary(figures)
    out = {"command": " ".join([sys.executable, *sys.argv]), "scale": figures, "results": results}
    print(json.dumps(out))
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
