"""The changes of one micro-batch against a full scan and a diff of two snapshots.

Usage::

    .venv/bin/python benchmarks/change_feed.py [--rows 10000000] [--events 50000]
        [--repeat 3] [--data /tmp/cdc_feed_data] [--table /tmp/cdc_feed_t]

Loads ``load.arrow`` of the peer workload (generated into ``--data`` if missing:
``--rows`` rows x 20 columns, seed 11, as ``benchmarks/peers.py``; its micro-batch is
``--events`` events: 90% updates of two columns, 5% inserts, 5% deletes, keys uniform
over the table) into a new one-bucket table with default options, commits the
micro-batch as version v, and times, ``--repeat`` times each (median printed, one JSON
line):

* ``changes_hot``: ``Table.changes(v - 1, v)`` in the writer, whose tablet holds both
  versions in memory;
* ``changes_cold`` and ``set_only_cold``: the same (full images; ``set_columns_only``)
  from a table opened afresh each repeat: the bucket loaded at v - 1 from its snapshot
  (key index, value pages on first access) plus v's WAL segment;
* ``full_scan``: ``read(version=v)`` from a table opened afresh;
* ``snapshot_diff``: reads of v - 1 and v from a table opened afresh, and their diff by
  key (Arrow joins): what a consumer does without a change feed.

Every repeat runs in this process, so the OS page cache and the allocator are warm for
all of them alike.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "peers"))

from workload import generate, read_ipc  # noqa: E402


def snapshot_diff(old: pa.Table, new: pa.Table) -> dict[str, int]:
    """Inserted, deleted and updated keys between two snapshots (full-row compare)."""
    values = [c for c in new.column_names if c != "id"]
    joined = old.join(new, keys="id", join_type="full outer", left_suffix="_a", right_suffix="_b")
    a_live = pc.is_valid(joined.column(f"{values[0]}_a"))
    b_live = pc.is_valid(joined.column(f"{values[0]}_b"))
    changed = pa.array([False] * joined.num_rows)
    for c in values:
        x, y = joined.column(f"{c}_a"), joined.column(f"{c}_b")
        same = pc.or_(pc.fill_null(pc.equal(x, y), False), pc.and_(pc.is_null(x), pc.is_null(y)))
        changed = pc.or_(changed, pc.invert(same))
    both = pc.and_(a_live, b_live)
    return {
        "inserts": pc.sum(pc.and_(pc.invert(a_live), b_live)).as_py() or 0,
        "deletes": pc.sum(pc.and_(a_live, pc.invert(b_live))).as_py() or 0,
        "updates": pc.sum(pc.and_(both, changed)).as_py() or 0,
    }


def _median(fn: Callable[[], Any], repeat: int) -> tuple[float, Any]:
    times, out = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def main() -> None:
    """Runs the comparison (see the module docstring)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=10_000_000)
    ap.add_argument("--events", type=int, default=50_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--data", default="/tmp/cdc_feed_data")
    ap.add_argument("--table", default=f"/tmp/cdc_feed_t_{os.getpid()}")
    args = ap.parse_args()
    if not os.path.exists(os.path.join(args.data, "expected.json")):
        generate(args.data, args.rows, 1, args.events, 1, 11)
    from cdc_sink_worker import CdcSink

    import cdc_sink

    shutil.rmtree(args.table, ignore_errors=True)
    try:
        writer = CdcSink(args.table)
        writer.load(read_ipc(os.path.join(args.data, "load.arrow")))
        v = writer.apply(read_ipc(os.path.join(args.data, "batch_000.arrow")))
        w = writer.table

        def cold(fn: Callable[[Any], Any]) -> Callable[[], Any]:
            return lambda: fn(cdc_sink.open_table(args.table))

        res: dict[str, Any] = {"rows": args.rows, "events": args.events, "version": v}
        res["changes_hot"], hot = _median(lambda: w.changes(v - 1, v), args.repeat)
        res["changes_cold"], feed = _median(cold(lambda t: t.changes(v - 1, v)), args.repeat)
        res["set_only_cold"], _ = _median(
            cold(lambda t: t.changes(v - 1, v, set_columns_only=True)), args.repeat
        )
        res["full_scan"], _ = _median(cold(lambda t: t.read(version=v)), args.repeat)
        res["snapshot_diff"], diff = _median(
            cold(lambda t: snapshot_diff(t.read(version=v - 1), t.read(version=v))), args.repeat
        )
        kinds = pc.value_counts(feed.column("_change_type")).to_pylist()
        res["feed_records"] = {d["values"]: d["counts"] for d in kinds}
        res["diff_counts"] = diff
        assert hot.num_rows == feed.num_rows
        for k in ("changes_hot", "changes_cold", "set_only_cold", "snapshot_diff"):
            res[f"{k}_vs_scan"] = round(res[k] / res["full_scan"], 4)
        print(json.dumps(res))
    finally:
        shutil.rmtree(args.table, ignore_errors=True)


if __name__ == "__main__":
    main()
