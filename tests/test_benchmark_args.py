"""The benchmarks that start subprocesses hand them the options they were given."""

from __future__ import annotations

import importlib.util
import sys
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
