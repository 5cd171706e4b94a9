"""The figures of the cluster benchmark's scale-out comparison (issue 40).

``cluster.py --workers-list 1,2`` runs the same setups on clusters of different worker
counts. This module holds what turns those runs into the comparison: the CPU
microseconds per event of a run's process groups, the cores other processes took while
it ran (the machine's busy time from ``/proc/stat`` less the run's own processes), the
1-minute load average sampled during each run, the medians per setup and worker count,
the per-worker efficiency against the first count, and the rate of the freshness runs
(80% of the maximum rate the repeats kept).
"""

from __future__ import annotations

import os
import statistics
import threading
import time
from typing import Any


def machine_busy_s() -> float:
    """CPU seconds every core of the machine spent busy since boot (``/proc/stat``: all
    but idle and iowait)."""
    with open("/proc/stat", encoding="ascii") as f:
        fields = [int(x) for x in f.readline().split()[1:9]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = fields
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


class LoadSampler:
    """The machine's 1-minute load average, sampled every ``every`` seconds in a thread."""

    def __init__(self, every: float = 2.0) -> None:
        self.every = every
        self.samples: list[tuple[float, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while True:
            self.samples.append((time.monotonic(), os.getloadavg()[0]))
            if self._stop.wait(self.every):
                return

    def between(self, t0: float, t1: float) -> list[float]:
        """The samples taken from ``t0`` to ``t1`` (monotonic clock)."""
        return [load for t, load in list(self.samples) if t0 <= t <= t1]

    def __enter__(self) -> LoadSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def us_per_event(res: dict[str, Any], *groups: str) -> float:
    """CPU microseconds per event of the process groups ``groups`` in a run's CPU window
    (nan without one)."""
    events = res.get("cpu_window_events") or 0
    if not events:
        return float("nan")
    return float(sum(res["cpu_window"].get(g, 0.0) for g in groups)) / events * 1e6


def others_cores(res: dict[str, Any]) -> float:
    """Cores' worth of CPU that processes other than the run's own took during its CPU
    window: the machine's busy time less the driver, executors, broker, S3 server and
    cluster daemons (nan without a window)."""
    w = res.get("cpu_window", {})
    if not w.get("wall"):
        return float("nan")
    ours = sum(w.get(g, 0.0) for g in ("driver", "executors", "broker", "s3 server", "daemons"))
    return float(w.get("machine", 0.0) - ours) / float(w["wall"])


def setup_key(mode: str, master: str) -> str:
    """A setup's name in the summaries: the mode, ``... on local`` off the cluster."""
    return f"{mode} on local" if master.startswith("local") else mode


def scale_figures(results: list[dict[str, Any]]) -> dict[str, dict[int, dict[str, float]]]:
    """Per setup and worker count, the medians of the repeats (``freshness`` runs apart):
    events/s over the backlog and after the first batch, CPU us/event of the executors,
    the driver, both, and the S3 server; the per-worker efficiency of each count n
    against the first count m (by wall time after the first batch, over the whole
    backlog, and by CPU: us/event at m over us/event at n); and the freshness run's rate
    and p50/p99, with the load average and other processes' cores of all the runs."""
    out: dict[str, dict[int, dict[str, float]]] = {}
    for r in results:
        out.setdefault(setup_key(r["mode"], r["master"]), {}).setdefault(r["workers"], {})
    for key, by_count in out.items():
        for n, fig in by_count.items():
            mine = [r for r in results if setup_key(r["mode"], r["master"]) == key]
            runs = [r for r in mine if r["workers"] == n]
            rep = [r for r in runs if not r.get("freshness")] or runs
            fig.update(
                runs=len(rep),
                backlog=statistics.median(r["throughput"] for r in rep),
                after_first=statistics.median(r["after_first"] for r in rep),
                load_min=min(r["load"][0] for r in runs),
                load_max=max(r["load"][2] for r in runs),
                others_cores=statistics.median(others_cores(r) for r in runs),
            )
            for name, groups in (
                ("us_executors", ("executors",)),
                ("us_driver", ("driver",)),
                ("us_both", ("executors", "driver")),
                ("us_s3", ("s3 server",)),
            ):
                fig[name] = statistics.median(us_per_event(r, *groups) for r in rep)
            for r in runs:
                if r.get("freshness"):
                    fig.update(fresh_rate=r["rate"], fresh_p50=r["p50_ms"], fresh_p99=r["p99_ms"])
        first = min(by_count)
        base = by_count[first]
        for n, fig in by_count.items():
            share = n / first
            fig["eff_wall"] = fig["after_first"] / (share * base["after_first"])
            fig["eff_backlog"] = fig["backlog"] / (share * base["backlog"])
            fig["eff_cpu"] = base["us_both"] / fig["us_both"]
    return out


def scale_summary(figures: dict[str, dict[int, dict[str, float]]]) -> None:
    """Prints :func:`scale_figures`, one line per setup and worker count."""
    for key, by_count in figures.items():
        first = min(by_count)
        for n, f in sorted(by_count.items()):
            fresh = (
                f"freshness at {f['fresh_rate']:,.0f} events/s: p50 {f['fresh_p50']:,.0f} ms, "
                f"p99 {f['fresh_p99']:,.0f} ms"
                if "fresh_rate" in f
                else "no freshness run"
            )
            print(
                f"scale-out {key}, {n} worker(s), medians of {f['runs']:.0f}: "
                f"{f['backlog']:,.0f} events/s over the backlog, {f['after_first']:,.0f} after "
                f"the first batch; CPU us/event executors {f['us_executors']:.2f} + driver "
                f"{f['us_driver']:.2f} = {f['us_both']:.2f} ({1e6 / f['us_both']:,.0f} events "
                f"per CPU second), S3 server {f['us_s3']:.2f}; per-worker efficiency against "
                f"{first}: wall {f['eff_wall']:.2f} (backlog {f['eff_backlog']:.2f}), CPU "
                f"{f['eff_cpu']:.2f}; {fresh}; load average {f['load_min']:.1f}-"
                f"{f['load_max']:.1f}, other processes {f['others_cores']:.2f} cores"
            )


def freshness_rates(results: list[dict[str, Any]], workers: int) -> dict[str, int]:
    """Setup key -> 80% of the median rate its repeats on ``workers`` workers kept after
    their first batch, rounded down to a thousand."""
    rates: dict[str, list[float]] = {}
    for r in results:
        if r["workers"] == workers:
            rates.setdefault(setup_key(r["mode"], r["master"]), []).append(r["after_first"])
    return {k: int(statistics.median(v) * 0.8) // 1000 * 1000 for k, v in rates.items()}
