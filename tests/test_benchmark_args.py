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
        for argv in ([], ["--encode-ahead", "--format", "rowv2", "--events", "1234"]):
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
