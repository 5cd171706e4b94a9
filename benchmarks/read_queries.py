"""The queries the Spark read benchmarks run and how they time them (``spark_read.py``
and ``delta_read.py``'s worker, which runs in another virtualenv: this module imports
only the standard library)."""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable
from typing import Any

#: columns of the benchmark table: ``id`` and ``c1`` .. ``c19``
N_COLUMNS = 20


def queries(rows: int) -> dict[str, str]:
    """Query name -> SQL over the view ``t`` of a ``rows``-row benchmark table: a full
    scan, a narrow aggregate, a 1% key range and a count."""
    everything = ", ".join(["sum(id)"] + [f"sum(c{i})" for i in range(1, N_COLUMNS)])
    return {
        "full scan (sum of 20 columns)": f"SELECT {everything} FROM t",
        "sum(c1)": "SELECT sum(c1) FROM t",
        "1% of keys: sum(c1) WHERE id < rows/100": (
            f"SELECT sum(c1) FROM t WHERE id < {rows // 100}"
        ),
        "count(*)": "SELECT count(*) FROM t",
    }


def process_cpu_s(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` (and its reaped children), from /proc."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return sum(int(x) for x in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def alternated(
    runs: dict[str, Callable[[], object]], repeat: int, clocks: dict[str, Callable[[], float]]
) -> dict[str, dict[str, list[float]]]:
    """``repeat`` rounds, each running every one of ``runs`` once in turn; per run, the
    elapsed ``wall`` seconds of each and the difference of each of ``clocks`` across it."""
    out = {n: {c: [] for c in ["wall", *clocks]} for n in runs}
    for _ in range(repeat):
        for name, run in runs.items():
            start = {c: clock() for c, clock in clocks.items()}
            w0 = time.perf_counter()
            run()
            out[name]["wall"].append(time.perf_counter() - w0)
            for c, clock in clocks.items():
                out[name][c].append(clock() - start[c])
    return out


def summary(timed: dict[str, dict[str, list[float]]]) -> dict[str, dict[str, Any]]:
    """Per run of :func:`alternated`'s result: ``median_s`` and ``wall_s`` (every round's
    wall time), and ``<clock>_median_s`` per clock."""
    out: dict[str, dict[str, Any]] = {}
    for name, clocks in timed.items():
        out[name] = {"median_s": statistics.median(clocks["wall"]), "wall_s": clocks["wall"]}
        for c, values in clocks.items():
            if c != "wall":
                out[name][f"{c}_median_s"] = statistics.median(values)
    return out
