"""The changes of one micro-batch against a full scan and a diff of two snapshots, with
and without the pre-images a commit stores (``TableOptions.change_images``), and what
storing them costs the writer.

Usage::

    .venv/bin/python benchmarks/change_feed.py [--rows 10000000] [--events 50000]
        [--repeat 3] [--data /tmp/cdc_feed_data] [--table /tmp/cdc_feed_t] [--skip-diff]

Loads ``load.arrow`` of the peer workload (generated into ``--data`` if missing:
``--rows`` rows x 20 columns, seed 11, as ``benchmarks/peers.py``, and ``2 + 5 *
--repeat`` micro-batches of ``--events`` events: 90% updates of two columns, 5% inserts,
5% deletes, keys uniform over the table) into a new one-bucket table with default
options, commits micro-batch 0 as version ``v0`` without pre-images and micro-batch 1 as
``v1`` with them, and times, ``--repeat`` times each (medians, one JSON line):

* ``changes_hot``: ``Table.changes(v1 - 1, v1)`` in the writer, whose tablet holds both
  versions in memory;
* ``changes_cold`` and ``set_only_cold``: ``changes(v0 - 1, v0)`` (full images;
  ``set_columns_only``) from a table opened afresh each repeat: the bucket loaded at
  ``v0 - 1`` from its snapshot (key index, value pages on first access) plus v0's WAL
  segment;
* ``changes_cold_images`` and ``set_only_cold_images``: the same of ``v1``, read from its
  stored pre-images and its segment;
* ``full_scan``: ``read(version=v1)`` from a table opened afresh;
* ``snapshot_diff`` (unless ``--skip-diff``, which spares its peak memory): reads of
  ``v1 - 1`` and ``v1`` from a table opened afresh, and their diff by key (Arrow joins):
  what a consumer does without a change feed;
* ``commit_hot_off``/``_on``: ``Table.apply`` of a micro-batch by the writer that loaded
  the table (every page in memory), the option off and on in turn;
* ``commit_reopened_off``/``_on``: ``Table.apply`` of a micro-batch by a table opened
  afresh (the bucket loaded on the way, its pages read lazily, so storing pre-images
  reads the pages of the batch's keys), the option off and on in turn, and
  ``commit_reopened_on_next``: the next micro-batch of the same table (its pages read);
* ``images_bytes``/``segment_bytes``: the sizes of v1's two objects.

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
from dataclasses import replace
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "peers"))

from workload import generate, read_ipc  # noqa: E402

from cdc_sink.engine import core_of  # noqa: E402


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


def _timed(fn: Callable[[], Any]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


class _Batches:
    """The workload's micro-batches, in order."""

    def __init__(self, data: str, sink: Any) -> None:
        self.data, self.sink, self.next = data, sink, 0

    def apply(self, table: Any) -> int:
        """Commits the next micro-batch to ``table``; returns its version."""
        batch = read_ipc(os.path.join(self.data, f"batch_{self.next:03d}.arrow"))
        self.next += 1
        self.sink.table = table
        return int(self.sink.apply(batch))


def _set_images(table: Any, on: bool) -> None:
    """Switches the writer's ``change_images`` between commits (this benchmark only: a
    process sets it when it opens the table)."""
    core_of(table).options = replace(core_of(table).options, change_images=on)


def _hot_costs(res: dict[str, Any], args: argparse.Namespace, batches: _Batches) -> None:
    """``commit_hot_*``: the writer that loaded the table, the option off and on in turn."""
    times: dict[str, list[float]] = {"commit_hot_off": [], "commit_hot_on": []}
    hot = batches.sink.table
    for _ in range(args.repeat):
        for on in (False, True):
            _set_images(hot, on)
            times[f"commit_hot_{'on' if on else 'off'}"].append(_timed(lambda: batches.apply(hot)))
    _medians(res, times)


def _reopened_costs(res: dict[str, Any], args: argparse.Namespace, batches: _Batches) -> None:
    """``commit_reopened_*``: a table opened afresh for each commit, off and on in turn."""
    import cdc_sink
    from cdc_sink.table import TableOptions

    base = batches.sink.options or TableOptions()
    times: dict[str, list[float]] = {
        "commit_reopened_off": [],
        "commit_reopened_on": [],
        "commit_reopened_on_next": [],
    }
    for _ in range(args.repeat):
        for on in (False, True):
            batches.sink.table = None  # one opened table at a time
            fresh = cdc_sink.open_table(args.table, options=replace(base, change_images=on))
            times[f"commit_reopened_{'on' if on else 'off'}"].append(
                _timed(lambda t=fresh: batches.apply(t))
            )
            if on:
                times["commit_reopened_on_next"].append(_timed(lambda t=fresh: batches.apply(t)))
            del fresh
    _medians(res, times)


def _medians(res: dict[str, Any], times: dict[str, list[float]]) -> None:
    for k, ts in times.items():
        res[k] = statistics.median(ts)
        res[f"{k}_runs"] = [round(x, 3) for x in ts]


def main() -> None:
    """Runs the comparison (see the module docstring)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=10_000_000)
    ap.add_argument("--events", type=int, default=50_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--data", default="/tmp/cdc_feed_data")
    ap.add_argument("--table", default=f"/tmp/cdc_feed_t_{os.getpid()}")
    ap.add_argument("--skip-diff", action="store_true", help="do not time snapshot_diff")
    args = ap.parse_args()
    nbatches = 2 + 5 * args.repeat
    expected = os.path.join(args.data, "expected.json")
    if not os.path.exists(expected):
        generate(args.data, args.rows, nbatches, args.events, 1, 11)
    with open(expected) as f:
        have = json.load(f)["batches"]
    if have < nbatches:
        sys.exit(f"{args.data} holds {have} micro-batches, --repeat {args.repeat} needs {nbatches}")
    from cdc_sink_worker import CdcSink

    import cdc_sink

    shutil.rmtree(args.table, ignore_errors=True)
    try:
        writer = CdcSink(args.table)
        writer.load(read_ipc(os.path.join(args.data, "load.arrow")))
        w = writer.table
        batches = _Batches(args.data, writer)
        v0 = batches.apply(w)
        _set_images(w, True)
        v1 = batches.apply(w)

        def cold(fn: Callable[[Any], Any]) -> Callable[[], Any]:
            return lambda: fn(cdc_sink.open_table(args.table))

        res: dict[str, Any] = {"rows": args.rows, "events": args.events, "versions": [v0, v1]}
        res["changes_hot"], hot = _median(lambda t=w: t.changes(v1 - 1, v1), args.repeat)
        res["changes_cold"], feed = _median(cold(lambda t: t.changes(v0 - 1, v0)), args.repeat)
        res["set_only_cold"], _ = _median(
            cold(lambda t: t.changes(v0 - 1, v0, set_columns_only=True)), args.repeat
        )
        res["changes_cold_images"], stored = _median(
            cold(lambda t: t.changes(v1 - 1, v1)), args.repeat
        )
        res["set_only_cold_images"], _ = _median(
            cold(lambda t: t.changes(v1 - 1, v1, set_columns_only=True)), args.repeat
        )
        res["full_scan"], _ = _median(cold(lambda t: t.read(version=v1)), args.repeat)
        if not args.skip_diff:
            res["snapshot_diff"], res["diff_counts"] = _median(
                cold(lambda t: snapshot_diff(t.read(version=v1 - 1), t.read(version=v1))),
                args.repeat,
            )
        ref = w.log.read(v1).buckets[0]
        store = core_of(w).store
        res["images_bytes"] = store.head(ref.images).size
        res["segment_bytes"] = store.head(ref.segment).size
        for name, f in (("feed_records", feed), ("feed_records_images", stored)):
            kinds = pc.value_counts(f.column("_change_type")).to_pylist()
            res[name] = {d["values"]: d["counts"] for d in kinds}
        assert hot.num_rows == stored.num_rows
        order = [("id", "ascending"), ("_change_type", "ascending")]
        hot_rows = hot.drop_columns(["_commit_timestamp"]).sort_by(order)
        assert hot_rows.equals(stored.drop_columns(["_commit_timestamp"]).sort_by(order))
        del w, hot, hot_rows, feed, stored
        _hot_costs(res, args, batches)
        _reopened_costs(res, args, batches)
        for k in [k for k in res if k.startswith(("changes_", "set_only_", "snapshot_diff"))]:
            if isinstance(res[k], float):
                res[f"{k}_vs_scan"] = round(res[k] / res["full_scan"], 4)
        print(json.dumps(res))
    finally:
        shutil.rmtree(args.table, ignore_errors=True)


if __name__ == "__main__":
    main()
