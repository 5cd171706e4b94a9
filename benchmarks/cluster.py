"""Executors mode on a real Spark standalone cluster (issue 11, "scale-out").

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

Run:  .venv/bin/python benchmarks/cluster.py [--workers 2] [--cores-per-worker 1]
      [--events 1000000] [--keys 200000] [--rate 10000] [--duration 10] [--repeat 1]
      [--cpu-from-batch 1]
      [--setups executors,driver-tasks,driver,local] (also: executors-aligned)
      [--spark-conf KEY=VALUE ...]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class StandaloneCluster:
    """A Spark standalone master and workers on 127.0.0.1, started with ``spark-class``."""

    def __init__(self, workers: int, cores: int, memory: str, workdir: Path) -> None:
        self.workers, self.cores, self.memory, self.workdir = workers, cores, memory, workdir
        self.port, self.ui_port = _free_port(), _free_port()
        self.procs: list[subprocess.Popen[bytes]] = []

    @property
    def worker_pids(self) -> list[int]:
        """The worker processes (each starts the executors of the applications it serves)."""
        return [p.pid for p in self.procs[1:]]

    @property
    def url(self) -> str:
        """The master URL."""
        return f"spark://127.0.0.1:{self.port}"

    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            SPARK_LOCAL_IP="127.0.0.1",
            SPARK_MASTER_HOST="127.0.0.1",
            PYSPARK_PYTHON=sys.executable,
            PYTHONPATH=os.pathsep.join(
                [str(Path(__file__).resolve().parents[1]), env.get("PYTHONPATH", "")]
            ).rstrip(os.pathsep),
        )
        return env

    def _spawn(self, name: str, args: list[str]) -> None:
        spark_class = str(Path(sys.executable).with_name("spark-class"))
        log = open(self.workdir / f"{name}.log", "wb")  # noqa: SIM115 -- lives with the proc
        self.procs.append(
            subprocess.Popen(
                [spark_class, *args],
                env=self._env(),
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        )

    def start(self, timeout: float = 120.0) -> None:
        """Starts the master and the workers; waits until every worker is ALIVE.

        Raises:
            RuntimeError: The workers did not register within ``timeout``.
        """
        self.workdir.mkdir(parents=True, exist_ok=True)
        self._spawn(
            "master",
            [
                "org.apache.spark.deploy.master.Master",
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--webui-port",
                str(self.ui_port),
            ],
        )
        for i in range(self.workers):
            wd = self.workdir / f"worker-{i}"
            wd.mkdir(exist_ok=True)
            self._spawn(
                f"worker-{i}",
                [
                    "org.apache.spark.deploy.worker.Worker",
                    self.url,
                    "--host",
                    "127.0.0.1",
                    "--cores",
                    str(self.cores),
                    "--memory",
                    self.memory,
                    "--webui-port",
                    str(_free_port()),
                    "--work-dir",
                    str(wd),
                ],
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError, ValueError):
                with urllib.request.urlopen(
                    f"http://127.0.0.1:{self.ui_port}/json/", timeout=2
                ) as r:
                    state = json.loads(r.read())
                alive = [w for w in state.get("workers", []) if w.get("state") == "ALIVE"]
                if len(alive) >= self.workers:
                    return
            time.sleep(0.5)
        raise RuntimeError(
            f"{self.workers} workers did not register with {self.url} in "
            f"{timeout}s (logs in {self.workdir})"
        )

    def stop(self) -> None:
        """Stops every process of the cluster (SIGTERM, then SIGKILL)."""
        for p in reversed(self.procs):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGTERM)
        for p in reversed(self.procs):
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        self.procs.clear()

    def __enter__(self) -> StandaloneCluster:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


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


def one_run(args: argparse.Namespace) -> dict[str, Any]:
    """One e2e run (``--one``) in this process: its own SparkContext on ``--master``."""
    from e2e import run_mode
    from proc_cpu import descendants, is_jvm, tree_cpu_s

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
        their Python workers) and of the driver (this process, its JVM and children)."""
        broker_pid = getattr(kafka, "pid", None)  # a local broker is a child: not the driver
        broker = {broker_pid, *descendants([broker_pid])} if broker_pid else set()
        mine = tree_cpu_s([os.getpid()])
        out = {"driver": {pid: s for pid, s in mine.items() if pid not in broker}}
        if args.master.startswith("spark://"):
            out["executors"] = tree_cpu_s(workers, with_roots=False)
            out["executor JVMs"] = {p: s for p, s in out["executors"].items() if is_jvm(p)}
            out.update(_jvm_threads("executor", list(out["executor JVMs"])))
        out.update(_jvm_threads("driver", [p for p in out["driver"] if is_jvm(p)]))
        return out

    try:
        out = run_mode(spark, kafka, args.mode, args, cpu_probe=probe)
    finally:
        spark.stop()
        kafka.stop()
    out.update(master=args.master, cores=cores)
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
    ap.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--master", default="", help=argparse.SUPPRESS)
    ap.add_argument("--mode", default="", help=argparse.SUPPRESS)
    ap.add_argument("--worker-pids", default="", help=argparse.SUPPRESS)
    return ap


def passthrough(args: argparse.Namespace) -> list[str]:
    """The workload options of ``args`` as arguments of a one-run subprocess (a flag
    appears only when set: ``--encode-ahead=False`` is no argument argparse accepts)."""
    out = []
    for k, v in vars(args).items():
        if k in ("one", "master", "mode", "repeat", "worker_pids", "setups"):
            continue
        flag = f"--{k.replace('_', '-')}"
        if isinstance(v, bool):
            out += [flag] if v else []
        elif isinstance(v, list):
            out += [f"{flag}={x}" for x in v]
        else:
            out.append(f"{flag}={v}")
    return out


def _summary(results: list[dict[str, Any]], cores: int) -> None:
    """Prints the medians and executors mode's rate per executor core against driver
    mode's, over the whole backlog and after the first micro-batch."""
    import statistics

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
    import statistics

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
    """Starts the cluster, runs the three setups, prints the comparison."""
    args = parser().parse_args()
    if args.one:
        print("RESULT " + json.dumps(one_run(args)), flush=True)
        return 0
    cores = args.workers * args.cores_per_worker
    results: list[dict[str, Any]] = []
    with (
        tempfile.TemporaryDirectory(prefix="cdc_cluster_") as tmp,
        StandaloneCluster(args.workers, args.cores_per_worker, args.memory, Path(tmp)) as cluster,
    ):
        setups = [
            ("driver", f"local[{cores}]") if name == "local" else (name, cluster.url)
            for name in args.setups.split(",")
        ]
        for r in range(args.repeat):
            for mode, master in setups:
                done = subprocess.run(
                    [
                        sys.executable,
                        __file__,
                        "--one",
                        f"--mode={mode}",
                        f"--master={master}",
                        f"--worker-pids={','.join(str(p) for p in cluster.worker_pids)}",
                        *passthrough(args),
                    ],
                    capture_output=True,
                    text=True,
                )
                line = next(
                    (ln for ln in done.stdout.splitlines() if ln.startswith("RESULT ")), None
                )
                if done.returncode != 0 or line is None:
                    print(done.stdout[-3000:], done.stderr[-3000:], file=sys.stderr)
                    raise RuntimeError(f"{mode} on {master} failed ({done.returncode})")
                res = json.loads(line[len("RESULT ") :])
                res["repeat"] = r
                results.append(res)
                print(
                    f"[{r}] {mode:17s} on {master:24s} {res['throughput']:>10,.0f} events/s "
                    f"(after the first batch {res['after_first']:,.0f}) "
                    f"(freshness p50 {res['p50_ms']:,.0f} ms, p99 {res['p99_ms']:,.0f} ms)"
                    + (
                        f" misaligned batches {res['misaligned_batches']}"
                        if "aligned" in mode
                        else ""
                    ),
                    flush=True,
                )
    _summary(results, cores)
    _cpu_summary(results)
    print(json.dumps({"command": " ".join([sys.executable, *sys.argv]), "results": results}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
