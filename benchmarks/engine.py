"""Engine benchmark: one MemTablet of 10M rows x 20 columns (issue "Engine core").

Measures, on one core (the tablet is single-threaded):
  * bulk load (inserts of every column), for context;
  * apply of partial updates: batches where 90% of events update 2 of the 20 columns of
    an existing key and 10% insert new keys (target >= 1M events/s);
  * full scan at the latest version with 100 outstanding delta versions (>= 2 GB/s),
    and after compaction;
  * point lookups of random keys (>= 5M keys/s), with deltas outstanding and compacted;
  * memory: tablet bytes vs raw column bytes (target <= 1.5x raw + 24 B/row).

Run:  .venv/bin/python benchmarks/engine.py [--rows 10000000] [--batches 100]
      [--batch-size 100000] [--repeat 3] [--json out.json]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import resource
import statistics
import time
from typing import Any

import numpy as np
import pyarrow as pa

from cdc_sink.batch import ChangeBatch
from cdc_sink.schema import TableSchema
from cdc_sink.tablet import MemTablet, TabletOptions

N_INT = 12
N_FLOAT = 5
N_STR = 2
STATUSES = np.array(["new", "paid", "packed", "shipped", "delivered", "returned", "void"])


def make_schema() -> TableSchema:
    cols: list[dict[str, Any]] = [{"name": "id", "type": "int64", "nullable": False}]
    cols += [{"name": f"i{j}", "type": "int64"} for j in range(N_INT)]
    cols += [{"name": f"f{j}", "type": "float64"} for j in range(N_FLOAT)]
    cols += [{"name": f"s{j}", "type": "string"} for j in range(N_STR)]
    return TableSchema.from_dict({"columns": cols, "primary_key": ["id"]})


def column_values(name: str, n: int, rng: np.random.Generator) -> pa.Array:
    if name.startswith("i"):
        return pa.array(rng.integers(0, 1 << 40, n))
    if name.startswith("f"):
        return pa.array(rng.random(n) * 1000)
    return pa.array(STATUSES[rng.integers(0, len(STATUSES), n)])


def insert_batch(schema: TableSchema, keys: np.ndarray, rng: np.random.Generator) -> pa.Table:
    n = len(keys)
    cols: dict[str, Any] = {"__op": pa.array(np.zeros(n, np.int8)), "id": pa.array(keys)}
    for c in schema.value_columns:
        cols[c.name] = column_values(c.name, n, rng)
    return pa.table(cols)


def update_batch(
    schema: TableSchema, existing: int, next_key: int, size: int, rng: np.random.Generator
) -> pa.Table:
    """90% updates of 2 random columns on random existing keys, 10% new-key inserts."""
    n_ins = size // 10
    n_upd = size - n_ins
    names = [c.name for c in schema.value_columns]
    chosen = rng.choice(len(names), 2, replace=False)
    keys = np.concatenate([rng.integers(0, existing, n_upd), np.arange(next_key, next_key + n_ins)])
    perm = rng.permutation(size)
    keys = keys[perm]
    is_ins = np.zeros(size, bool)
    is_ins[n_upd:] = True
    is_ins = is_ins[perm]
    op = np.where(is_ins, 0, 2).astype(np.int8)
    cols: dict[str, Any] = {"__op": pa.array(op), "id": pa.array(keys)}
    for j, name in enumerate(names):
        vals = column_values(name, size, rng)
        cols[name] = vals
        sets = is_ins | (j in chosen)
        cols["__set__" + name] = pa.array(sets)
    return pa.table(cols)


def raw_bytes(table: pa.Table) -> int:
    return int(sum(c.nbytes for c in table.columns))


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def timed(fn: Any) -> tuple[float, Any]:
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--rows", type=int, default=10_000_000)
    ap.add_argument("--batches", type=int, default=100)
    ap.add_argument("--batch-size", type=int, default=100_000)
    ap.add_argument("--load-batch", type=int, default=1_000_000)
    ap.add_argument("--lookups", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", default=None)
    return ap.parse_args()


class Run:
    """The state the phases of the benchmark share (one tablet, one random stream)."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.rng = np.random.default_rng(42)
        self.schema = make_schema()
        self.results: dict[str, Any] = {
            "machine": f"{platform.machine()} {os.cpu_count()} cores, "
            f"{platform.python_version()}, "
            f"numpy {np.__version__}, pyarrow {pa.__version__}",
            "rows": args.rows,
            "columns": len(self.schema.columns),
        }
        self.rss0 = rss_bytes()
        self.tablet = MemTablet(self.schema, options=TabletOptions(initial_capacity=args.rows))
        self.version = 0
        self.next_key = args.rows
        self.raw = 0
        self.live_rows = 0
        self.scanned: pa.Table | None = None  # the last scan, kept until compaction

    def medians(self, fn: Any, per: Any) -> float:
        """The median over ``--repeat`` runs of ``per(seconds, result of fn())``."""
        out = []
        for _ in range(self.args.repeat):
            dt, got = timed(fn)
            out.append(per(dt, got))
        return statistics.median(out)


def bulk_load(run: Run) -> None:
    """1. Bulk load."""
    args, tablet = run.args, run.tablet
    load_time = 0.0
    for start in range(0, args.rows, args.load_batch):
        keys = np.arange(start, min(start + args.load_batch, args.rows), dtype=np.int64)
        batch, rej = ChangeBatch.from_arrow(insert_batch(run.schema, keys, run.rng), run.schema)
        assert not len(rej)
        run.version += 1
        dt, _ = timed(lambda b=batch, v=run.version: (tablet.apply(b, v), tablet.commit(v)))
        load_time += dt
    tablet.compact()
    tablet.release(run.version)
    gc.collect()
    run.results["load_rows_per_s"] = args.rows / load_time
    print(
        f"bulk load: {args.rows:,} rows in {load_time:.2f}s = {args.rows / load_time:,.0f} rows/s"
    )


def apply_updates(run: Run) -> None:
    """2. Partial-update apply: 100 versions stay outstanding (no compaction)."""
    args, tablet = run.args, run.tablet
    batches = []
    for _ in range(args.batches):
        t = update_batch(run.schema, run.next_key, run.next_key, args.batch_size, run.rng)
        b, rej = ChangeBatch.from_arrow(t, run.schema)
        assert not len(rej)
        batches.append(b)
        run.next_key += args.batch_size // 10
    per_batch = []
    t_all = 0.0
    for b in batches:
        run.version += 1
        dt, _res = timed(lambda b=b, v=run.version: tablet.apply(b, v))
        tablet.commit(run.version)
        per_batch.append(len(b) / dt)
        t_all += dt
    total_events = args.batches * args.batch_size
    run.results["apply_events_per_s"] = total_events / t_all
    run.results["apply_median_batch_events_per_s"] = statistics.median(per_batch)
    print(
        f"apply partial updates: {total_events:,} events in {t_all:.2f}s = "
        f"{total_events / t_all:,.0f} events/s "
        f"(median batch {statistics.median(per_batch):,.0f}/s)"
    )
    del batches
    gc.collect()


def scan_with_deltas(run: Run) -> None:
    """3. Scan with 100 outstanding deltas."""
    tablet, latest = run.tablet, run.version
    scans = []
    table = None
    for _ in range(run.args.repeat):
        table = None
        gc.collect()
        dt, table = timed(lambda: tablet.read(latest))
        scans.append(raw_bytes(table) / dt)
    assert table is not None
    run.scanned = table
    run.raw = raw_bytes(table)
    run.live_rows = table.num_rows
    run.results["scan_deltas_GBps"] = statistics.median(scans) / 1e9
    print(
        f"scan @latest with {tablet.delta_versions()} deltas/column: {run.raw / 1e9:.2f} GB, "
        f"median {statistics.median(scans) / 1e9:.2f} GB/s"
    )


def lookups_with_deltas(run: Run, probe: pa.Table) -> None:
    """4. Point lookups with deltas, and the index probe alone."""
    tablet, latest, n = run.tablet, run.version, run.args.lookups
    med = run.medians(lambda: tablet.get(probe, latest), lambda dt, _: n / dt)
    run.results["lookup_deltas_keys_per_s"] = med
    print(f"point lookups with deltas: median {med:,.0f} keys/s")
    # Lookup only (index), for the split of where time goes.
    from cdc_sink.bucketing import spark_xxhash64

    keys_arr = [probe.column("id").combine_chunks()]
    med = run.medians(
        lambda: tablet.index.lookup(spark_xxhash64(keys_arr), keys_arr), lambda dt, _: n / dt
    )
    run.results["index_lookup_keys_per_s"] = med
    print(f"  of which hash + index probe: median {med:,.0f} keys/s")


def memory_with_deltas(run: Run) -> float:
    """5. Memory with 100 deltas retained; returns the budget."""
    mem_deltas = run.tablet.memory_bytes()
    budget = 1.5 * run.raw + 24 * run.live_rows
    run.results["memory_with_deltas_bytes"] = mem_deltas
    run.results["raw_column_bytes"] = run.raw
    run.results["memory_budget_bytes"] = budget
    print(
        f"memory with 100 deltas: {mem_deltas / 1e9:.2f} GB; raw columns "
        f"{run.raw / 1e9:.2f} GB; budget 1.5x raw + 24 B/row = {budget / 1e9:.2f} GB"
    )
    return budget


def compacted(run: Run, probe: pa.Table, budget: float) -> None:
    """6. Compact, release old versions, scan and lookups again."""
    tablet, latest, results = run.tablet, run.version, run.results
    dt, _ = timed(lambda: tablet.compact())
    results["compact_s"] = dt
    tablet.release(latest)
    run.scanned = None
    gc.collect()
    scans = []
    for _ in range(run.args.repeat):
        gc.collect()
        dt, t2 = timed(lambda: tablet.read(latest))
        scans.append(raw_bytes(t2) / dt)
        del t2
    results["scan_compacted_GBps"] = statistics.median(scans) / 1e9
    print(
        f"compaction {results['compact_s']:.2f}s; scan compacted: median "
        f"{statistics.median(scans) / 1e9:.2f} GB/s"
    )
    med = run.medians(lambda: tablet.get(probe, latest), lambda dt, _: run.args.lookups / dt)
    results["lookup_compacted_keys_per_s"] = med
    print(f"point lookups compacted: median {med:,.0f} keys/s")
    mem, raw = tablet.memory_bytes(), run.raw
    results["memory_compacted_bytes"] = mem
    results["memory_ratio_vs_budget"] = mem / budget
    results["rss_growth_bytes"] = rss_bytes() - run.rss0
    print(
        f"memory compacted: {mem / 1e9:.2f} GB = {mem / raw:.2f}x raw "
        f"({(mem - raw) / run.live_rows:.1f} B/row over raw); budget {budget / 1e9:.2f} GB; "
        f"process RSS growth {results['rss_growth_bytes'] / 1e9:.2f} GB, "
        f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6:.2f} GB"
    )


def main() -> None:
    args = parse_args()
    pa.set_cpu_count(1)
    pa.set_io_thread_count(1)
    run = Run(args)
    bulk_load(run)
    apply_updates(run)
    scan_with_deltas(run)
    probe = pa.table({"id": pa.array(run.rng.integers(0, run.next_key, args.lookups))})
    lookups_with_deltas(run, probe)
    budget = memory_with_deltas(run)
    compacted(run, probe, budget)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(run.results, f, indent=2)


if __name__ == "__main__":
    main()
