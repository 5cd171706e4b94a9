"""WAL size benchmark (issue 11, "a compact WAL"): bytes per event of change segments,
format 1 (wire form, what cdc_sink wrote before) against format 2 (compact: only the
cells events set, ZSTD), against the same batches written as Parquet, and what each
costs to write and to replay.

Workload (the peer benchmark's): a 1-bucket table of --rows rows x 20 columns (id, 12
int64, 5 float64, 2 strings; benchmarks/engine.py's schema and values), loaded and
snapshotted, then --batches micro-batches of --batch-events events: 90% updates of two
random value columns of existing keys (--same-columns: the same two columns for the whole
batch), 5% inserts of new keys (every column), 5% deletes of existing keys; cells an
event does not set are null in the batch's wire form.

Two tables receive the same batches, alternately first: one writes format 2 segments
(the default), the other format 1 (``write_change_segment(body_format=FORMAT_WIRE)``,
byte for byte the old writer). Measured per batch: segment bytes/event of each, Parquet
bytes/event of the batch's wire-form table (``pyarrow.parquet.write_table`` defaults),
bytes/event of the format 2 body with ZSTD and uncompressed instead of LZ4 (the encoding
alone), CPU seconds of the Arrow IPC read (decompression) of the LZ4 and ZSTD bodies (best
of 3), and ``Table.apply`` seconds (validate, split, WAL segment + fsync, apply, log entry).
Then, --repeat times alternately: reopen of each table (``open_table`` + load the bucket:
its snapshot + the segments of every micro-batch) and the decode alone of those segments
(``read_change_segment``), wall and CPU seconds; with --cold the table's files are
dropped from the page cache (``posix_fadvise(DONTNEED)``, those files only) before each
reopen, as after a restart. Medians are printed.

Run:  .venv/bin/python benchmarks/wal_size.py [--rows 1000000] [--batches 20]
      [--batch-events 50000] [--repeat 5] [--same-columns] [--dir /tmp/cdc_wal_size]
      [--json out.json] [--keep] [--cold]
"""

from __future__ import annotations

import argparse
import functools
import io
import json
import os
import platform
import shutil
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

sys.path.insert(0, os.path.dirname(__file__))

from engine import column_values, insert_batch, make_schema

import cdc_sink.engine._commit
from cdc_sink import TableOptions, create_table, open_table
from cdc_sink.batch import SET_PREFIX, ChangeBatch
from cdc_sink.schema import TableSchema
from cdc_sink.storage.change_codec import FORMAT_COMPACT, FORMAT_WIRE, encode_compact
from cdc_sink.storage.segments import read_change_segment, write_change_segment
from cdc_sink.table import Table

OPTS = TableOptions(
    snapshot_every=10**9,
    snapshot_events=1 << 62,
    compact_every=10**9,
    memory_versions=10**6,
    retain_versions=10**6,
)


def micro_batch(
    schema: TableSchema,
    rows: int,
    next_key: int,
    n: int,
    rng: np.random.Generator,
    same_columns: bool,
) -> pa.Table:
    """One micro-batch in wire form: 90% two-column updates, 5% inserts, 5% deletes."""
    n_ins = n // 20
    n_del = n // 20
    n_upd = n - n_ins - n_del
    names = [c.name for c in schema.value_columns]
    op = np.concatenate(
        [np.full(n_upd, 2, np.int8), np.zeros(n_ins, np.int8), np.full(n_del, 3, np.int8)]
    )
    keys = np.concatenate(
        [
            rng.integers(0, rows, n_upd),
            np.arange(next_key, next_key + n_ins, dtype=np.int64),
            rng.integers(0, rows, n_del),
        ]
    )
    perm = rng.permutation(n)
    op, keys = op[perm], keys[perm]
    if same_columns:
        a, b = (np.full(n, j) for j in rng.choice(len(names), 2, replace=False))
    else:
        a = rng.integers(0, len(names), n)
        b = (a + rng.integers(1, len(names), n)) % len(names)
    cols: dict[str, pa.Array] = {"__op": pa.array(op), "id": pa.array(keys)}
    for j, name in enumerate(names):
        sets = (op == 0) | ((op == 2) & ((a == j) | (b == j)))
        vals = column_values(name, n, rng)
        cols[name] = pc.if_else(pa.array(sets), vals, pa.scalar(None, vals.type))
        cols[SET_PREFIX + name] = pa.array(sets)
    return pa.table(cols)


def parquet_bytes(table: pa.Table) -> int:
    buf = io.BytesIO()
    pq.write_table(table, buf)
    return len(buf.getvalue())


def segment_bytes(table: Table, version: int) -> int:
    entry = table.log.read(version)
    return sum(
        os.path.getsize(os.path.join(table.root, r.segment))
        for r in entry.buckets.values()
        if r.segment
    )


def timed(fn: Callable[[], Any]) -> tuple[float, float, Any]:
    t0, c0 = time.perf_counter(), time.process_time()
    out = fn()
    return time.perf_counter() - t0, time.process_time() - c0, out


def evict(path: str) -> None:
    """Drops the table's files (only them) from the page cache, as after a restart."""
    for d, _, files in os.walk(path):
        for f in files:
            fd = os.open(os.path.join(d, f), os.O_RDONLY)
            try:
                os.fdatasync(fd)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


def reopen(path: str, latest: int) -> None:
    t = open_table(path, options=OPTS)
    t.get([0], version=latest)  # loads the bucket: snapshot + every segment


def decode_all(path: str, first: int) -> None:
    t = open_table(path, options=OPTS)
    schema = t.schema_at(t.version)
    for v in range(first, t.version + 1):
        for r in t.log.read(v).buckets.values():
            if r.segment:
                read_change_segment(path, r.segment, schema)


def parse_args() -> argparse.Namespace:
    """The command line (see the module docstring)."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--batches", type=int, default=20)
    ap.add_argument("--batch-events", type=int, default=50_000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument(
        "--same-columns",
        action="store_true",
        help="updates of a batch all set the same two columns",
    )
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("--dir", default="/tmp/cdc_wal_size")
    ap.add_argument("--json", help="write the medians here")
    ap.add_argument("--keep", action="store_true", help="leave both tables in --dir")
    ap.add_argument(
        "--cold",
        action="store_true",
        help="evict the table's files from the page cache before each reopen",
    )
    return ap.parse_args()


# the segment writer the commit protocol calls, and the one each table gets
REAL_WRITE = cdc_sink.engine._commit.write_change_segment
WRITERS = {
    FORMAT_COMPACT: REAL_WRITE,
    FORMAT_WIRE: functools.partial(write_change_segment, body_format=FORMAT_WIRE),
}


def apply(fmt: int, t: Table, batch: ChangeBatch) -> tuple[float, float, Any]:
    """``t.apply(batch)`` timed (:func:`timed`), writing change segments of format ``fmt``."""
    cdc_sink.engine._commit.write_change_segment = WRITERS[fmt]  # type: ignore[assignment]
    try:
        return timed(lambda: t.apply(batch))
    finally:
        cdc_sink.engine._commit.write_change_segment = REAL_WRITE


def load(
    args: argparse.Namespace, schema: TableSchema, rng: np.random.Generator, paths: dict[int, str]
) -> dict[int, Table]:
    """Both tables with --rows rows, compacted into one snapshot."""
    tables = {fmt: create_table(p, schema, options=OPTS) for fmt, p in paths.items()}
    step = 250_000
    for start in range(0, args.rows, step):
        keys = np.arange(start, min(start + step, args.rows), dtype=np.int64)
        b, _ = ChangeBatch.from_arrow(insert_batch(schema, keys, rng), schema)
        for fmt, t in tables.items():
            apply(fmt, t, b)
    for t in tables.values():
        t.compact()  # a snapshot: reopen loads it, then replays only the micro-batches
    return tables


def measure_encodings(wire: pa.Table, batch: ChangeBatch, per: dict[str, list[float]]) -> None:
    """Parquet bytes/event of the batch, format 2 body bytes/event with the other codecs,
    and the CPU of an Arrow IPC read of the LZ4 and ZSTD bodies (best of 3)."""
    per["parquet_B_per_event"].append(parquet_bytes(wire) / len(wire))
    for codec in ("zstd", None):  # format 2 bodies with the other codecs, for scale
        per.setdefault(f"format2_{codec}_body_B_per_event", []).append(
            len(encode_compact(batch, compression=codec)) / len(batch)
        )
    for codec in ("lz4", "zstd"):  # what the codec costs a reader: IPC read alone
        body = encode_compact(batch, compression=codec)
        per.setdefault(f"ipc_read_{codec}_cpu_s", []).append(
            min(timed(lambda body=body: pa.ipc.open_stream(body).read_all())[1] for _ in range(3))
        )


def run_batches(
    args: argparse.Namespace,
    schema: TableSchema,
    rng: np.random.Generator,
    tables: dict[int, Table],
) -> dict[str, list[float]]:
    """The --batches micro-batches applied to both tables (alternately first), with their
    sizes and costs per batch."""
    per: dict[str, list[float]] = {
        k: []
        for k in (
            "format1_B_per_event",
            "format2_B_per_event",
            "parquet_B_per_event",
            "apply_format1_s",
            "apply_format2_s",
        )
    }
    next_key = args.rows
    for i in range(args.batches):
        wire = micro_batch(schema, args.rows, next_key, args.batch_events, rng, args.same_columns)
        next_key += args.batch_events // 20
        batch, rejects = ChangeBatch.from_arrow(wire, schema)
        assert not len(rejects)
        measure_encodings(wire, batch, per)
        order = (FORMAT_WIRE, FORMAT_COMPACT) if i % 2 == 0 else (FORMAT_COMPACT, FORMAT_WIRE)
        for fmt in order:
            w, _, res = apply(fmt, tables[fmt], batch)
            per[f"apply_format{fmt}_s"].append(w)
            per[f"format{fmt}_B_per_event"].append(
                segment_bytes(tables[fmt], res.version) / len(batch)
            )
    return per


def check_same(tables: dict[int, Table], paths: dict[int, str]) -> tuple[int, pa.Table]:
    """Both tables at the same version with the same rows and one snapshot each; returns
    that version and its rows."""
    latest = tables[FORMAT_WIRE].version
    assert tables[FORMAT_COMPACT].version == latest
    expect = tables[FORMAT_WIRE].read(version=latest)
    assert tables[FORMAT_COMPACT].read(version=latest).equals(expect)
    snaps = {fmt: os.listdir(os.path.join(p, "_snapshots", "0")) for fmt, p in paths.items()}
    assert all(len(s) == 1 for s in snaps.values()), snaps  # the compact() one only
    return latest, expect


def time_reopens(
    args: argparse.Namespace,
    paths: dict[int, str],
    latest: int,
    first: int,
    per: dict[str, list[float]],
) -> None:
    """--repeat reopens and segment decodes of each table, alternately first (after one
    warm-up reopen each)."""
    for fmt in paths:  # warm: imports, page cache
        reopen(paths[fmt], latest)
    for i in range(args.repeat):
        for fmt in paths if i % 2 == 0 else reversed(list(paths)):
            if args.cold:
                evict(paths[fmt])
            w, c, _ = timed(lambda fmt=fmt: reopen(paths[fmt], latest))
            per.setdefault(f"reopen_format{fmt}_s", []).append(w)
            per.setdefault(f"reopen_format{fmt}_cpu_s", []).append(c)
            w, c, _ = timed(lambda fmt=fmt: decode_all(paths[fmt], first))
            per.setdefault(f"decode_format{fmt}_s", []).append(w)
            per.setdefault(f"decode_format{fmt}_cpu_s", []).append(c)


def print_medians(args: argparse.Namespace, med: dict[str, float]) -> None:
    """The medians: bytes/event, IPC read CPU, apply, reopen and decode times."""
    pq_b = med["parquet_B_per_event"]
    print(
        f"segment bytes/event, median of {args.batches} batches: "
        f"format 1 {med['format1_B_per_event']:.1f} "
        f"({med['format1_B_per_event'] / pq_b:.2f}x Parquet), "
        f"format 2 {med['format2_B_per_event']:.1f} "
        f"({med['format2_B_per_event'] / pq_b:.2f}x Parquet), Parquet {pq_b:.1f}; "
        f"format 2 body alone with ZSTD {med['format2_zstd_body_B_per_event']:.1f}, "
        f"uncompressed {med['format2_None_body_B_per_event']:.1f}"
    )
    print(
        f"Arrow IPC read of one format 2 body, median CPU: LZ4 "
        f"{med['ipc_read_lz4_cpu_s'] * 1e3:.2f} ms, "
        f"ZSTD {med['ipc_read_zstd_cpu_s'] * 1e3:.2f} ms"
    )
    print(
        f"Table.apply of one batch, median: format 1 {med['apply_format1_s'] * 1e3:.0f} ms, "
        f"format 2 {med['apply_format2_s'] * 1e3:.0f} ms"
    )
    for what in ("reopen", "decode"):
        print(
            f"{what} ({'snapshot + ' if what == 'reopen' else ''}{args.batches} segments), "
            f"median of {args.repeat}: format 1 {med[f'{what}_format1_s']:.2f} s wall / "
            f"{med[f'{what}_format1_cpu_s']:.2f} s CPU, format 2 "
            f"{med[f'{what}_format2_s']:.2f} s / {med[f'{what}_format2_cpu_s']:.2f} s CPU"
        )


def main() -> None:
    args = parse_args()
    rng = np.random.default_rng(args.seed)
    schema = make_schema()
    paths = {fmt: os.path.join(args.dir, f"format{fmt}") for fmt in (FORMAT_WIRE, FORMAT_COMPACT)}
    shutil.rmtree(args.dir, ignore_errors=True)
    print(
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
        f"python {platform.python_version()}, pyarrow {pa.__version__}; "
        f"{args.rows:,} rows x 20 columns, {args.batches} batches of "
        f"{args.batch_events:,} events ({'same' if args.same_columns else 'random'} two "
        f"columns per update)",
        flush=True,
    )

    tables = load(args, schema, rng, paths)
    first = tables[FORMAT_WIRE].version + 1
    per = run_batches(args, schema, rng, tables)
    latest, expect = check_same(tables, paths)
    del tables

    time_reopens(args, paths, latest, first, per)
    t = open_table(paths[FORMAT_COMPACT], options=OPTS)
    assert t.read(version=latest).equals(expect)

    med = {k: statistics.median(v) for k, v in per.items()}
    print_medians(args, med)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "medians": med, "runs": per}, f, indent=1)
    if not args.keep:
        shutil.rmtree(args.dir, ignore_errors=True)


if __name__ == "__main__":
    main()
