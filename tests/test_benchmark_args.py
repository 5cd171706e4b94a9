"""The benchmarks that start subprocesses hand them the options they were given."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType

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
        ):
            args = cluster.parser().parse_args(argv)
            again = cluster.parser().parse_args(["--one", *cluster.passthrough(args)])
            assert {k: v for k, v in vars(again).items() if k != "one"} == {
                k: v for k, v in vars(args).items() if k != "one"
            }
    finally:
        sys.path.remove(str(BENCHMARKS))


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
