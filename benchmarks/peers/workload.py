"""The peer benchmark's workload, its files and the full-content digest.

Shared by ``benchmarks/peers.py`` (which generates the data and the expected digests)
and every system's worker (which runs in its own virtualenv and imports only this module,
numpy and pyarrow).

Data (seeded, written once as Arrow IPC files, read by every worker):

* ``load.arrow``: the bulk load, ``rows`` rows of 20 columns: ``id`` (int64 key), 8
  int64, 5 float64, 3 string, 2 ``decimal128(18, 2)`` and 1 ``timestamp[us, UTC]``
  columns, no nulls;
* ``batch_NNN.arrow``: one micro-batch of change events in a neutral wire form:
  ``op`` (int8: :data:`OP_INSERT`, :data:`OP_UPDATE`, :data:`OP_DELETE`), ``id`` and
  every value column. An insert sets every column; an update sets the two columns named
  in the schema metadata ``updated`` (comma-separated, the same two for the whole
  batch; the other cells are null); a delete sets nothing. Within a batch a key occurs
  at most once, so the order of events in a batch does not change the result.

Digest: :func:`digest` of a table is order-independent (rows sorted by key) and the same
for any Arrow representation of the same content (chunking, string vs large_string,
timestamp time zone spelling), so every system's read-back can be compared with the
digest the generator computed from its own model of the table.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Protocol

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

OP_INSERT = 0
OP_UPDATE = 2
OP_DELETE = 3

INT_COLS = [f"i{j}" for j in range(8)]
FLOAT_COLS = [f"f{j}" for j in range(5)]
STR_COLS = [f"s{j}" for j in range(3)]
DEC_COLS = ["d0", "d1"]
TS_COLS = ["t0"]
VALUE_COLS = INT_COLS + FLOAT_COLS + STR_COLS + DEC_COLS + TS_COLS
DECIMAL = pa.decimal128(18, 2)
TIMESTAMP = pa.timestamp("us", tz="UTC")
TS_BASE = 1_700_000_000_000_000  # 2023-11-14 in microseconds
_SUFFIXES = pa.array(
    [
        "",
        "-a",
        "-bb",
        "-ccc",
        "-dddd",
        "-eeeee",
        "-ffffff",
        "-ggggggg",
        "-hhhhhhhhhhhhhhhh",
        "-paid",
        "-shipped",
        "-delivered",
        "-returned",
    ]
)


def arrow_type(name: str) -> pa.DataType:
    """The Arrow type of a column of the benchmark table."""
    if name == "id" or name in INT_COLS:
        return pa.int64()
    if name in FLOAT_COLS:
        return pa.float64()
    if name in STR_COLS:
        return pa.string()
    if name in DEC_COLS:
        return DECIMAL
    return TIMESTAMP


def table_schema(nullable_values: bool = True) -> pa.Schema:
    """The benchmark table's Arrow schema (``id`` not null)."""
    return pa.schema(
        [pa.field("id", pa.int64(), nullable=False)]
        + [pa.field(c, arrow_type(c), nullable=nullable_values) for c in VALUE_COLS]
    )


# ---------------------------------------------------------------- generation


def _draw(name: str, n: int, rng: np.random.Generator) -> np.ndarray:
    """Random numeric codes of a column (float64 for floats, int64 otherwise)."""
    if name in FLOAT_COLS:
        return np.round(rng.random(n) * 1e6) / 64.0  # exact in every engine
    if name in INT_COLS:
        return rng.integers(-(1 << 40), 1 << 40, n, dtype=np.int64)
    if name in STR_COLS:
        return rng.integers(0, 1 << 30, n, dtype=np.int64)
    if name in DEC_COLS:
        return rng.integers(-(10**12), 10**12, n, dtype=np.int64)
    return TS_BASE + rng.integers(0, 10**14, n, dtype=np.int64)


def materialize(name: str, codes: np.ndarray, valid: np.ndarray | None = None) -> pa.Array:
    """The Arrow column of numeric codes (``valid``: False cells become null)."""
    mask = None if valid is None else ~valid
    if name in FLOAT_COLS or name in INT_COLS or name == "id":
        return pa.array(codes, mask=mask)
    if name in STR_COLS:
        # e.g. "s1-000123456-…": a prefix plus the zero-padded code, variable length
        digits = pc.utf8_lpad(pc.cast(pa.array(codes), pa.string()), 10, "0")
        tail = _SUFFIXES.take(pa.array(codes % len(_SUFFIXES)))
        s = pc.binary_join_element_wise(pa.array(np.full(len(codes), f"{name}-")), digits, tail, "")
        if mask is not None:
            s = pc.if_else(pa.array(valid), s, pa.nulls(len(codes), pa.string()))
        return s
    if name in DEC_COLS:
        words = np.zeros((len(codes), 2), np.int64)
        words[:, 0] = codes
        words[:, 1] = np.where(codes < 0, -1, 0)
        arr = pa.Array.from_buffers(DECIMAL, len(codes), [None, pa.py_buffer(words.tobytes())])
        if mask is not None:
            arr = pc.if_else(pa.array(valid), arr, pa.nulls(len(codes), DECIMAL))
        return arr
    return pa.array(codes, type=pa.int64(), mask=mask).cast(TIMESTAMP)


class Model:
    """The generator's model of the table: numeric codes per column and a live mask,
    indexed by key (keys are 0..capacity-1)."""

    def __init__(self, rows: int, capacity: int, rng: np.random.Generator) -> None:
        self.cols = {
            c: np.zeros(capacity, np.float64 if c in FLOAT_COLS else np.int64) for c in VALUE_COLS
        }
        for c in VALUE_COLS:
            self.cols[c][:rows] = _draw(c, rows, rng)
        self.alive = np.zeros(capacity, bool)
        self.alive[:rows] = True
        self.next_key = rows

    def table(self, keys: np.ndarray | None = None) -> pa.Table:
        """The live rows (or the rows of ``keys``) as an Arrow table, by key."""
        if keys is None:
            keys = np.flatnonzero(self.alive).astype(np.int64)
        arrays = [pa.array(keys)] + [materialize(c, self.cols[c][keys]) for c in VALUE_COLS]
        return pa.Table.from_arrays(arrays, schema=table_schema())

    def batch(self, n: int, rng: np.random.Generator) -> pa.Table:
        """Draws one micro-batch of ``n`` events and applies it to the model."""
        n_ins = n // 20
        n_del = n // 20
        n_upd = n - n_ins - n_del
        live = np.flatnonzero(self.alive)
        picked = rng.choice(live, n_upd + n_del, replace=False).astype(np.int64)
        upd, dele = picked[:n_upd], picked[n_upd:]
        ins = np.arange(self.next_key, self.next_key + n_ins, dtype=np.int64)
        self.next_key += n_ins
        updated = [VALUE_COLS[j] for j in sorted(rng.choice(len(VALUE_COLS), 2, replace=False))]
        keys = np.concatenate([upd, ins, dele])
        op = np.concatenate(
            [
                np.full(n_upd, OP_UPDATE, np.int8),
                np.full(n_ins, OP_INSERT, np.int8),
                np.full(n_del, OP_DELETE, np.int8),
            ]
        )
        perm = rng.permutation(n)
        keys, op = keys[perm], op[perm]
        arrays: list[pa.Array] = [pa.array(op), pa.array(keys)]
        for c in VALUE_COLS:
            sets = op == OP_INSERT
            if c in updated:
                sets |= op == OP_UPDATE
            codes = np.zeros(n, self.cols[c].dtype)
            codes[sets] = _draw(c, int(sets.sum()), rng)
            self.cols[c][keys[sets]] = codes[sets]
            arrays.append(materialize(c, codes, sets))
        self.alive[ins] = True
        self.alive[dele] = False
        schema = pa.schema(
            [pa.field("op", pa.int8()), pa.field("id", pa.int64())]
            + [pa.field(c, arrow_type(c)) for c in VALUE_COLS],
            metadata={"updated": ",".join(updated)},
        )
        return pa.Table.from_arrays(arrays, schema=schema)


def generate(
    data_dir: str,
    rows: int,
    batches: int,
    batch_events: int,
    tt_batch: int,
    seed: int,
    digest_after: Iterable[int] = (),
) -> dict[str, Any]:
    """Writes the workload's files and ``expected.json``: digests of the model's table
    after micro-batch ``tt_batch``, after the last one and after each of ``digest_after``
    (1-based)."""
    wanted = {tt_batch, batches, *digest_after}
    os.makedirs(data_dir, exist_ok=True)
    rng = np.random.default_rng(seed)
    model = Model(rows, rows + batches * (batch_events // 20) + 1, rng)
    write_ipc(os.path.join(data_dir, "load.arrow"), model.table())
    digests = {}
    for i in range(batches):
        write_ipc(os.path.join(data_dir, f"batch_{i:03d}.arrow"), model.batch(batch_events, rng))
        if i + 1 in wanted:
            digests[i + 1] = digest(model.table())
    expected = {
        "rows": rows,
        "batches": batches,
        "batch_events": batch_events,
        "seed": seed,
        "tt_batch": tt_batch,
        "after_batch": digests,
        "final_rows": int(model.alive.sum()),
    }
    with open(os.path.join(data_dir, "expected.json"), "w") as f:
        json.dump(expected, f, indent=1)
    return expected


def write_ipc(path: str, table: pa.Table) -> None:
    """Writes ``table`` as one Arrow IPC file."""
    with pa.OSFile(path, "wb") as sink, pa.ipc.new_file(sink, table.schema) as w:
        w.write_table(table, max_chunksize=1 << 20)


def read_ipc(path: str) -> pa.Table:
    """Reads an Arrow IPC file fully into memory."""
    with pa.OSFile(path, "rb") as f:
        return pa.ipc.open_file(f).read_all().combine_chunks()


def updated_columns(batch: pa.Table) -> list[str]:
    """The two value columns a batch's updates set."""
    return (batch.schema.metadata or {})[b"updated"].decode().split(",")


def split_batch(batch: pa.Table) -> tuple[pa.Table, pa.Table, pa.Array]:
    """A batch's (updates: id + updated columns, inserts: every column, deleted keys)."""
    op = batch.column("op")
    cols = ["id", *updated_columns(batch)]
    upd = batch.filter(pc.equal(op, OP_UPDATE)).select(cols)
    ins = batch.filter(pc.equal(op, OP_INSERT)).drop_columns(["op"])
    dele = batch.filter(pc.equal(op, OP_DELETE)).column("id").combine_chunks()
    return upd, ins, dele


# ---------------------------------------------------------------- digest


def _canonical(name: str, col: pa.ChunkedArray) -> pa.Array:
    arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    want = arrow_type(name)
    if pa.types.is_timestamp(arr.type):
        arr = arr.cast(pa.timestamp("us", tz=arr.type.tz)).view(pa.int64())
    elif pa.types.is_large_string(arr.type) or pa.types.is_string_view(arr.type):
        arr = arr.cast(pa.string())
    elif arr.type != want and not pa.types.is_timestamp(want):
        arr = arr.cast(want)
    return arr


def _hash_array(h: Any, arr: pa.Array) -> None:
    valid = np.asarray(arr.is_valid())
    h.update(np.packbits(valid).tobytes())
    if pa.types.is_string(arr.type):
        arr = pc.fill_null(arr, "")
        ls = pc.binary_length(arr).to_numpy(zero_copy_only=False).astype(np.int64)
        h.update(ls.tobytes())
        off = np.frombuffer(arr.buffers()[1], np.int32, len(arr) + 1, arr.offset * 4)
        h.update(memoryview(arr.buffers()[2])[int(off[0]) : int(off[-1])])
    elif pa.types.is_decimal(arr.type):
        arr = pc.fill_null(arr, pa.scalar(0, arr.type).cast(arr.type))
        h.update(memoryview(arr.buffers()[1])[arr.offset * 16 : (arr.offset + len(arr)) * 16])
    else:
        a = pc.fill_null(arr, 0).to_numpy(zero_copy_only=False)
        h.update(np.ascontiguousarray(a).tobytes())


def digest(table: pa.Table) -> str:
    """Order-independent full-content digest (rows sorted by ``id``; columns by name)."""
    names = ["id", *VALUE_COLS]
    missing = set(names) - set(table.column_names)
    if missing:
        raise ValueError(f"table lacks columns {sorted(missing)}")
    table = table.select(names).sort_by("id")
    h = hashlib.sha256(f"{table.num_rows}:{','.join(names)}".encode())
    for name in names:
        _hash_array(h, _canonical(name, table.column(name)))
    return h.hexdigest()


# ---------------------------------------------------------------- worker protocol


class System(Protocol):
    """What a worker implements for one system (one process per phase)."""

    def load(self, table: pa.Table) -> Any:
        """Creates the table from the bulk load; returns its version id."""

    def apply(self, batch: pa.Table) -> Any:
        """Applies and commits one micro-batch (wire form); returns its version id."""

    def close(self) -> None:
        """Releases handles (the data must be durable on return)."""

    def read(self, version: Any) -> pa.Table:
        """Reads the whole table at a version (``None``: the latest) from a fresh handle."""


def dir_bytes(path: str) -> int:
    """Bytes of the files under ``path``."""
    total = 0
    for d, _, files in os.walk(path):
        for f in files:
            with contextlib.suppress(OSError):
                total += os.path.getsize(os.path.join(d, f))
    return total


def _batches(data_dir: str, limit: int | None) -> Iterator[pa.Table]:
    i = 0
    while os.path.exists(p := os.path.join(data_dir, f"batch_{i:03d}.arrow")):
        if limit is not None and i >= limit:
            return
        yield read_ipc(p)
        i += 1


def run_worker(make: Callable[[str], System]) -> None:
    """Command line of a worker: ``write`` (bulk load, then the micro-batches, each
    timed) or ``read`` (a fresh process: cold read of one version, then digests). Wall
    and CPU seconds (``time.process_time``: every thread of the process) are recorded."""
    ap = argparse.ArgumentParser()
    ap.add_argument("phase", choices=["write", "read"])
    ap.add_argument("--data", required=True)
    ap.add_argument("--dir", required=True, help="the system's table directory")
    ap.add_argument("--out", required=True)
    ap.add_argument("--max-batches", type=int, default=None)
    ap.add_argument("--version", default=None, help="read: the version to time travel to")
    ap.add_argument(
        "--digest-version",
        action="append",
        default=[],
        help="read: digest this version too (after the timed read)",
    )
    args = ap.parse_args()
    out: dict[str, Any] = {"pid": os.getpid()}
    if args.phase == "write":
        load = read_ipc(os.path.join(args.data, "load.arrow"))
        batches = list(_batches(args.data, args.max_batches))
        t0, c0 = time.perf_counter(), time.process_time()
        system = make(args.dir)
        out["load_version"] = system.load(load)
        out["load_s"] = time.perf_counter() - t0
        out["load_cpu_s"] = time.process_time() - c0
        out["load_rows"] = load.num_rows
        del load
        for k in ("batch_s", "batch_cpu_s", "batch_events", "versions"):
            out[k] = []
        for b in batches:
            t0, c0 = time.perf_counter(), time.process_time()
            v = system.apply(b)
            out["batch_s"].append(time.perf_counter() - t0)
            out["batch_cpu_s"].append(time.process_time() - c0)
            out["batch_events"].append(b.num_rows)
            out["versions"].append(v)
        system.close()
        out["disk_bytes"] = dir_bytes(args.dir)
    else:
        version = None if args.version is None else json.loads(args.version)
        t0, c0 = time.perf_counter(), time.process_time()
        system = make(args.dir)
        got = system.read(version)
        out["read_s"] = time.perf_counter() - t0
        out["read_cpu_s"] = time.process_time() - c0
        out["read_rows"] = got.num_rows
        out["digests"] = {json.dumps(version): digest(got)}
        del got
        for dv in args.digest_version:
            v = json.loads(dv)
            out["digests"][json.dumps(v)] = digest(system.read(v))
        system.close()
    with open(args.out, "w") as f:
        json.dump(out, f, indent=1)
