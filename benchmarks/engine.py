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

from cdc_sink.changes import ChangeBatch
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


def update_batch(schema: TableSchema, existing: int, next_key: int, size: int,
                 rng: np.random.Generator) -> pa.Table:
    """90% updates of 2 random columns on random existing keys, 10% new-key inserts."""
    n_ins = size // 10
    n_upd = size - n_ins
    names = [c.name for c in schema.value_columns]
    chosen = rng.choice(len(names), 2, replace=False)
    keys = np.concatenate([rng.integers(0, existing, n_upd),
                           np.arange(next_key, next_key + n_ins)])
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--rows", type=int, default=10_000_000)
    ap.add_argument("--batches", type=int, default=100)
    ap.add_argument("--batch-size", type=int, default=100_000)
    ap.add_argument("--load-batch", type=int, default=1_000_000)
    ap.add_argument("--lookups", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    pa.set_cpu_count(1)
    pa.set_io_thread_count(1)
    rng = np.random.default_rng(42)
    schema = make_schema()
    results: dict[str, Any] = {
        "machine": f"{platform.machine()} {os.cpu_count()} cores, {platform.python_version()}, "
                   f"numpy {np.__version__}, pyarrow {pa.__version__}",
        "rows": args.rows, "columns": len(schema.columns)}
    rss0 = rss_bytes()
    tablet = MemTablet(schema, options=TabletOptions(initial_capacity=args.rows))

    # 1. Bulk load.
    version = 0
    load_time = 0.0
    for start in range(0, args.rows, args.load_batch):
        keys = np.arange(start, min(start + args.load_batch, args.rows), dtype=np.int64)
        batch, rej = ChangeBatch.from_arrow(insert_batch(schema, keys, rng), schema)
        assert not len(rej)
        version += 1
        dt, _ = timed(lambda b=batch, v=version: (tablet.apply(b, v), tablet.commit(v)))
        load_time += dt
    tablet.compact()
    tablet.release(version)
    gc.collect()
    results["load_rows_per_s"] = args.rows / load_time
    print(f"bulk load: {args.rows:,} rows in {load_time:.2f}s = "
          f"{args.rows / load_time:,.0f} rows/s")

    # 2. Partial-update apply: 100 versions stay outstanding (no compaction).
    batches = []
    next_key = args.rows
    for _ in range(args.batches):
        t = update_batch(schema, next_key, next_key, args.batch_size, rng)
        b, rej = ChangeBatch.from_arrow(t, schema)
        assert not len(rej)
        batches.append(b)
        next_key += args.batch_size // 10
    per_batch = []
    t_all = 0.0
    for b in batches:
        version += 1
        dt, _res = timed(lambda b=b, v=version: tablet.apply(b, v))
        tablet.commit(version)
        per_batch.append(len(b) / dt)
        t_all += dt
    total_events = args.batches * args.batch_size
    results["apply_events_per_s"] = total_events / t_all
    results["apply_median_batch_events_per_s"] = statistics.median(per_batch)
    print(f"apply partial updates: {total_events:,} events in {t_all:.2f}s = "
          f"{total_events / t_all:,.0f} events/s "
          f"(median batch {statistics.median(per_batch):,.0f}/s)")
    del batches
    gc.collect()

    # 3. Scan with 100 outstanding deltas.
    latest = version
    scans = []
    table = None
    for _ in range(args.repeat):
        table = None
        gc.collect()
        dt, table = timed(lambda: tablet.read(latest))
        scans.append(raw_bytes(table) / dt)
    assert table is not None
    raw = raw_bytes(table)
    live_rows = table.num_rows
    results["scan_deltas_GBps"] = statistics.median(scans) / 1e9
    print(f"scan @latest with {tablet.delta_versions()} deltas/column: {raw / 1e9:.2f} GB, "
          f"median {statistics.median(scans) / 1e9:.2f} GB/s")

    # 4. Point lookups with deltas.
    probe = pa.table({"id": pa.array(rng.integers(0, next_key, args.lookups))})
    looks = []
    for _ in range(args.repeat):
        dt, _got = timed(lambda: tablet.get(probe, latest))
        looks.append(args.lookups / dt)
    results["lookup_deltas_keys_per_s"] = statistics.median(looks)
    print(f"point lookups with deltas: median {statistics.median(looks):,.0f} keys/s")
    # Lookup only (index), for the split of where time goes.
    from cdc_sink.bucketing import spark_xxhash64

    keys_arr = [probe.column("id").combine_chunks()]
    idx_rates = []
    for _ in range(args.repeat):
        dt, _ = timed(lambda: tablet.index.lookup(spark_xxhash64(keys_arr), keys_arr))
        idx_rates.append(args.lookups / dt)
    results["index_lookup_keys_per_s"] = statistics.median(idx_rates)
    print(f"  of which hash + index probe: median {statistics.median(idx_rates):,.0f} keys/s")

    # 5. Memory with 100 deltas retained.
    mem_deltas = tablet.memory_bytes()
    budget = 1.5 * raw + 24 * live_rows
    results["memory_with_deltas_bytes"] = mem_deltas
    results["raw_column_bytes"] = raw
    results["memory_budget_bytes"] = budget
    print(f"memory with 100 deltas: {mem_deltas / 1e9:.2f} GB; raw columns {raw / 1e9:.2f} GB; "
          f"budget 1.5x raw + 24 B/row = {budget / 1e9:.2f} GB")

    # 6. Compact, release old versions, scan and lookups again.
    dt, _ = timed(lambda: tablet.compact())
    results["compact_s"] = dt
    tablet.release(latest)
    del table
    gc.collect()
    scans = []
    for _ in range(args.repeat):
        gc.collect()
        dt, t2 = timed(lambda: tablet.read(latest))
        scans.append(raw_bytes(t2) / dt)
        del t2
    results["scan_compacted_GBps"] = statistics.median(scans) / 1e9
    print(f"compaction {results['compact_s']:.2f}s; scan compacted: median "
          f"{statistics.median(scans) / 1e9:.2f} GB/s")
    looks = []
    for _ in range(args.repeat):
        dt, _ = timed(lambda: tablet.get(probe, latest))
        looks.append(args.lookups / dt)
    results["lookup_compacted_keys_per_s"] = statistics.median(looks)
    print(f"point lookups compacted: median {statistics.median(looks):,.0f} keys/s")
    mem = tablet.memory_bytes()
    results["memory_compacted_bytes"] = mem
    results["memory_ratio_vs_budget"] = mem / budget
    results["rss_growth_bytes"] = rss_bytes() - rss0
    print(f"memory compacted: {mem / 1e9:.2f} GB = {mem / raw:.2f}x raw "
          f"({(mem - raw) / live_rows:.1f} B/row over raw); budget {budget / 1e9:.2f} GB; "
          f"process RSS growth {results['rss_growth_bytes'] / 1e9:.2f} GB, "
          f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6:.2f} GB")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
