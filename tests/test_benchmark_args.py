"""The benchmarks that start subprocesses hand them the options they were given."""

from __future__ import annotations

import importlib.util
import statistics
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def _load(name: str) -> ModuleType:
    sys.path.insert(0, str(BENCHMARKS))
    try:
        spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCHMARKS / f"{name}.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(BENCHMARKS))


def test_cluster_runs_get_every_workload_option_back() -> None:
    cluster = _load("cluster")
    sys.path.insert(0, str(BENCHMARKS))  # parser() imports e2e, as the script does
    try:
        for argv in (
            [],
            ["--encode-ahead", "--format", "rowv2", "--events", "1234", "--cpu-from-batch", "3"],
            ["--spark-conf", "spark.a=1", "--spark-conf", "spark.b=x=y"],
            ["--s3", "--workers-list", "1,2", "--freshness-duration", "20", "--json", "x.json"],
        ):
            args = cluster.parser().parse_args(argv)
            again = cluster.parser().parse_args(["--one", *cluster.passthrough(args)])
            workload = {k for k in vars(args) if k not in cluster.MAIN_ONLY}
            assert {k: vars(again)[k] for k in workload} == {k: vars(args)[k] for k in workload}
    finally:
        sys.path.remove(str(BENCHMARKS))


def test_cluster_scale_out_runs_get_their_cluster_table_and_rate() -> None:
    """--s3 --workers-list: each run is told its cluster's worker count, its table on the
    S3 server (endpoint and server pid, never a key), and the freshness run its rate."""
    cluster = _load("cluster")
    sys.path.insert(0, str(BENCHMARKS))
    try:
        args = cluster.parser().parse_args(["--s3", "--workers-list", "1,2", "--rate", "auto"])
        assert cluster.worker_counts(args) == [1, 2]
        argv = cluster.run_argv(
            args,
            mode="executors-aligned",
            master="spark://127.0.0.1:7077",
            workers=1,
            worker_pids=[11],
            master_pid=10,
            table_url="s3://bucket/t1",
            s3_endpoint="http://127.0.0.1:8333",
            s3_pid=12,
            rate=42000,
        )
        one = cluster.parser().parse_args(argv[2:])
        assert (one.one, one.mode, one.master, one.workers) == (
            True,
            "executors-aligned",
            "spark://127.0.0.1:7077",
            1,
        )
        assert (one.worker_pids, one.master_pid, one.s3_pid) == ("11", 10, 12)
        assert (one.table_url, one.s3_endpoint, one.rate) == (
            "s3://bucket/t1",
            "http://127.0.0.1:8333",
            "42000",
        )
        assert not one.s3 and not one.workers_list  # the main process's, not a run's
        assert not any("secret" in a.lower() or "access_key" in a.lower() for a in argv)
        plain = cluster.parser().parse_args(
            cluster.run_argv(args, mode="driver", master="local[2]", workers=2, worker_pids=[])[2:]
        )
        assert (plain.workers, plain.rate, plain.table_url) == (2, "auto", "")
    finally:
        sys.path.remove(str(BENCHMARKS))


def test_cluster_worker_counts_refuse_a_count_below_one() -> None:
    cluster = _load("cluster")
    sys.path.insert(0, str(BENCHMARKS))
    try:
        args = cluster.parser().parse_args(["--workers-list", "2,0"])
        with pytest.raises(ValueError, match="worker counts"):
            cluster.worker_counts(args)
        assert cluster.worker_counts(cluster.parser().parse_args(["--workers", "3"])) == [3]
    finally:
        sys.path.remove(str(BENCHMARKS))


def test_scale_out_figures_are_the_medians_and_efficiency_against_the_first_count() -> None:
    """scale_out.py: per setup and worker count, the medians of the repeats; efficiency
    by wall time rate(n) / (n/m * rate(m)) and by CPU us(m) / us(n); the freshness run's
    figures from that run only; other processes' cores from the machine's busy time."""
    scale = _load("scale_out")

    def run(workers: int, rate: float, us_both: float, fresh: bool = False) -> dict[str, object]:
        events = 1000
        cpu = us_both * events / 1e6
        return {
            "mode": "executors-aligned",
            "master": "spark://h:1",
            "workers": workers,
            "throughput": rate / 2,
            "after_first": rate,
            "cpu_window_events": events,
            "cpu_window": {
                "executors": cpu * 0.75,
                "driver": cpu * 0.25,
                "s3 server": 0.0,
                "machine": cpu + 0.5,  # 0.5 CPU s of others over 2 s
                "wall": 2.0,
            },
            "load": [1.0, 2.0, 3.0],
            "rate": 999,
            "p50_ms": 100.0 if fresh else -1.0,
            "p99_ms": 200.0 if fresh else -1.0,
            "freshness": fresh,
        }

    rates_1, rates_2 = (10_000.0, 12_000.0, 11_000.0), (16_000.0, 20_000.0, 18_000.0)
    us_1, us_2 = (10.0, 12.0, 11.0), (12.0, 14.0, 13.0)
    results = [run(1, r, u) for r, u in zip(rates_1, us_1, strict=True)]
    results += [run(2, r, u) for r, u in zip(rates_2, us_2, strict=True)]
    results += [run(1, 1.0, 99.0, fresh=True), run(2, 1.0, 99.0, fresh=True)]
    fig = scale.scale_figures(results)["executors-aligned"]
    one, two = fig[1], fig[2]
    assert one["runs"] == two["runs"] == 3  # the freshness runs are not repeats
    assert one["after_first"] == statistics.median(rates_1)
    assert two["backlog"] == statistics.median(rates_2) / 2
    assert two["us_both"] == pytest.approx(statistics.median(us_2))
    assert two["eff_wall"] == pytest.approx(
        statistics.median(rates_2) / (2 * statistics.median(rates_1))
    )
    assert two["eff_cpu"] == pytest.approx(statistics.median(us_1) / statistics.median(us_2))
    assert one["eff_wall"] == one["eff_cpu"] == 1.0
    assert (two["fresh_rate"], two["fresh_p50"], two["fresh_p99"]) == (999, 100.0, 200.0)
    assert two["others_cores"] == pytest.approx(0.25)
    assert scale.freshness_rates(results[:3], 1) == {
        "executors-aligned": int(statistics.median(rates_1) * 0.8) // 1000 * 1000
    }


def test_process_tree_cpu_counts_the_children_the_benchmarks_sample() -> None:
    """cluster.py's per-core figures: the CPU of processes under a root, sampled twice."""
    proc_cpu = _load("proc_cpu")
    burn = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.3: pass"
    parent = f"import subprocess, sys; subprocess.run([sys.executable, '-c', {burn!r}])"
    root = subprocess.Popen([sys.executable, "-c", parent])
    try:
        before = proc_cpu.tree_cpu_s([root.pid], with_roots=False)
        deadline = time.monotonic() + 30
        while not proc_cpu.descendants([root.pid]) and time.monotonic() < deadline:
            time.sleep(0.005)
        child = proc_cpu.descendants([root.pid])[0]
        spent, after = 0.0, before
        while time.monotonic() < deadline:
            now = proc_cpu.tree_cpu_s([root.pid], with_roots=False)
            if child not in now:
                break
            spent, after = proc_cpu.cpu_between(before, now), now
            time.sleep(0.01)
        assert spent >= 0.2  # the grandchild's burn, seen from its grandparent's tree
        assert root.pid not in after  # the roots themselves left out
    finally:
        root.wait(30)


def test_thread_cpu_sums_every_thread_of_a_process_by_name() -> None:
    """cluster.py's JIT and GC shares: a process's CPU by thread name, digits dropped."""
    proc_cpu = _load("proc_cpu")
    burn = (  # two threads spin, then stay alive (a finished thread leaves /proc/PID/task)
        "import sys, threading, time\n"
        "spun = threading.Semaphore(0)\n"
        "def spin():\n"
        "    t = time.thread_time()\n"
        "    while time.thread_time() - t < 0.3: pass\n"
        "    spun.release(); time.sleep(60)\n"
        "for _ in range(2): threading.Thread(target=spin, daemon=True).start()\n"
        "spun.acquire(); spun.acquire(); print('done', flush=True); time.sleep(60)"
    )
    child = subprocess.Popen([sys.executable, "-c", burn], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline() == "done\n"
        by_name = proc_cpu.thread_cpu_s(child.pid)
        total = proc_cpu.cpu_s(child.pid)
        assert total is not None and total >= 0.5  # both spinning threads' time
        assert abs(sum(by_name.values()) - total) <= 0.05  # every thread, once
        assert not any(c.isdigit() for name in by_name for c in name)
    finally:
        child.kill()
        child.wait(30)
