"""The compact WAL: change segments store only the cells events set, ZSTD-compressed
(format 2, cdc_sink/storage/change_codec.py), and segments of the original format stay
readable.

``data/wal_v1`` is a table written by cdc_sink before format 2 existed (commit c61c887):
``create_table`` with ``TableOptions(snapshot_every=10**9, compact_every=10**9)``, then one
``apply`` per batch of ``events.json`` (four versions, two buckets, a truncate, deletes,
updates to null, a stale event), so its eight segments are format 1.
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import io
import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cdc_sink.batch import SET_PREFIX, ChangeBatch
from cdc_sink.errors import WalCorruption
from cdc_sink.schema import TableSchema
from cdc_sink.storage.bounded_ipc import decompressed_size
from cdc_sink.storage.change_codec import (
    FORMAT_COMPACT,
    FORMAT_WIRE,
    decode_compact,
    encode_compact,
    encode_wire,
)
from cdc_sink.storage.segments import read_change_segment, write_change_segment
from cdc_sink.storage.wal import SegmentWriter, read_segment
from cdc_sink.table import TableOptions, open_table
from tests.model import RefModel, model_rows, normalize, table_to_rows
from tests.strategies import events, key_pool, schemas

FIXTURE = Path(__file__).parent / "data" / "wal_v1"


def canonical(batch: ChangeBatch) -> dict[str, Any]:
    """What a batch means: ops, keys, seqs, and per column the mask and the set values."""
    cols = {}
    for cid, arr in batch.values.items():
        mask = batch.present[cid]
        cols[cid] = (mask.tolist(), [normalize(v) for v in arr.filter(pa.array(mask)).to_pylist()])
    return {
        "op": batch.op.tolist(),
        "seq": None if batch.seq is None else batch.seq.tolist(),
        "keys": [[normalize(v) for v in k.to_pylist()] for k in batch.keys],
        "cols": cols,
    }


def _wire_bytes(batch: ChangeBatch) -> int:
    return len(encode_wire(batch))


# ---------------------------------------------------------------------- round trips
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_compact_body_round_trips_any_batch(data: st.DataObject) -> None:
    schema = data.draw(schemas())
    keys = data.draw(key_pool(schema))
    batch, _ = ChangeBatch.from_events(
        data.draw(events(schema, keys, max_size=40, truncates=True)), schema
    )
    body = encode_compact(batch)
    got = decode_compact(body, schema, rows=len(batch), path="seg")
    assert canonical(got) == canonical(batch)
    assert len(got.op) == len(got.positions) == len(batch)
    for cid, arr in got.values.items():  # spread back to one cell per event, unset: null
        arr.validate(full=True)
        assert len(arr) == len(batch)
        assert not np.asarray(arr.is_valid())[~got.present[cid]].any()


@pytest.mark.parametrize("codec", ["zstd", None])
def test_bodies_of_any_codec_read_alike(codec: str | None) -> None:
    schema, wire = _benchmark_like(300, seed=3)
    batch, _ = ChangeBatch.from_arrow(wire, schema)
    body = encode_compact(batch, compression=codec)
    assert canonical(decode_compact(body, schema, rows=300, path="seg")) == canonical(batch)


def test_seq_deltas_round_trip_int64_extremes() -> None:
    schema = TableSchema.from_dict(
        {
            "columns": [
                {"name": "id", "type": "int64"},
                {"name": "v", "type": "int64"},
                {"name": "seq", "type": "int64"},
            ],
            "primary_key": ["id"],
            "sequence_column": "seq",
        }
    )
    seqs = [2**63 - 1, -(2**63), 0, -1, 2**63 - 1, 5, -(2**63) + 1, 3]
    batch, rejects = ChangeBatch.from_events(
        [{"op": "upsert", "key": i, "set": {"v": i}, "seq": s} for i, s in enumerate(seqs)], schema
    )
    assert not len(rejects)
    got = decode_compact(encode_compact(batch), schema, rows=len(batch), path="seg")
    assert got.seq is not None and got.seq.tolist() == seqs


def test_a_column_no_event_sets_and_an_empty_batch_round_trip() -> None:
    schema = TableSchema.from_dict(
        {
            "columns": [
                {"name": "id", "type": "string"},
                {"name": "a", "type": "float64"},
                {"name": "b", "type": "string"},
            ],
            "primary_key": ["id"],
        }
    )
    wire = pa.table(
        {
            "__op": pa.array([2, 2, 3], pa.int8()),
            "id": ["x", "y", "z"],
            "a": [1.5, None, 2.0],
            "__set__a": [True, True, False],
            "b": ["u", "v", "w"],
            "__set__b": [False, False, False],
        }
    )
    batch, _ = ChangeBatch.from_arrow(wire, schema)
    got = decode_compact(encode_compact(batch), schema, rows=3, path="seg")
    assert canonical(got) == canonical(batch)
    assert got.present[2].tolist() == [False, False, False]
    assert got.values[1].filter(pa.array(got.present[1])).to_pylist() == [1.5, None]
    empty = batch.take(np.empty(0, np.int64))
    got = decode_compact(encode_compact(empty), schema, rows=0, path="seg")
    assert len(got) == 0 and canonical(got) == canonical(empty)


SPREAD_CASES: list[tuple[pa.DataType, list[Any]]] = [
    (pa.int8(), [-128, 127, None, 0, 5]),
    (pa.uint16(), [0, 65535, None, 7, 8]),
    (pa.float32(), [1.5, None, -0.0, float("inf"), 2.0]),
    (pa.bool_(), [True, False, None, True, False]),
    (pa.string(), ["", "abc", None, "é" * 40, "z"]),
    (pa.large_binary(), [b"", b"\x00\x01", None, b"x" * 70, b"y"]),
    (
        pa.date32(),
        [dt.date(1, 1, 1), None, dt.date(9999, 12, 31), dt.date(2024, 2, 29), dt.date(1970, 1, 1)],
    ),
    (
        pa.timestamp("us", "UTC"),
        [
            dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc),
            None,
            dt.datetime(1, 1, 1, tzinfo=dt.timezone.utc),
            dt.datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=dt.timezone.utc),
            dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc),
        ],
    ),
    (
        pa.decimal128(38, 10),
        [
            decimal.Decimal("-" + "9" * 28 + "." + "9" * 10),
            None,
            decimal.Decimal(0),
            decimal.Decimal("1E-10"),
            decimal.Decimal("12.5"),
        ],
    ),
    (pa.list_(pa.int32()), [[1, 2], None, [], [3], [4, 5, 6]]),  # the generic path
]


@pytest.mark.parametrize(("type_", "pool"), SPREAD_CASES, ids=lambda x: str(x)[:20])
def test_spread_puts_each_set_value_at_its_event_and_null_elsewhere(
    type_: pa.DataType, pool: list[Any]
) -> None:
    from cdc_sink.storage.change_codec import _spread

    rng = np.random.default_rng(5)
    for n, density, skip in ((37, 0.3, 3), (64, 0.9, 0), (200, 0.05, 11), (9, 1.0, 1)):
        mask = rng.random(n) < density
        k = int(mask.sum())
        cells = [pool[i] for i in rng.integers(0, len(pool), k + skip)]
        values = pa.array(cells, type_).slice(skip)  # offsets that are not byte-aligned
        got = _spread(values, mask, n)
        got.validate(full=True)
        it = iter(cells[skip:])
        assert got.to_pylist() == [next(it) if m else None for m in mask]


def test_sliced_and_chunked_inputs_encode_only_their_own_cells() -> None:
    schema = TableSchema.from_dict(
        {
            "columns": [{"name": "id", "type": "int64"}, {"name": "s", "type": "string"}],
            "primary_key": ["id"],
        }
    )
    ids = pa.array(range(100), pa.int64()).slice(40, 5)
    vals = pa.array([f"v{i}" for i in range(100)]).slice(60, 5)
    batch = ChangeBatch(
        schema=schema,
        op=np.full(5, 1, np.int8),
        keys=(ids,),
        values={1: vals},
        present={1: np.array([1, 0, 1, 0, 1], bool)},
    )
    got = decode_compact(encode_compact(batch), schema, rows=5, path="seg")
    assert got.keys[0].to_pylist() == [40, 41, 42, 43, 44]
    assert got.values[1].filter(pa.array(got.present[1])).to_pylist() == ["v60", "v62", "v64"]


# ---------------------------------------------------------------------- size
def _benchmark_like(n: int, seed: int) -> tuple[TableSchema, pa.Table]:
    """benchmarks/wal_size.py's workload in small: 90% updates of two of 19 columns,
    5% inserts, 5% deletes; unset cells null."""
    rng = np.random.default_rng(seed)
    cols: list[dict[str, Any]] = [{"name": "id", "type": "int64", "nullable": False}]
    cols += [{"name": f"i{j}", "type": "int64"} for j in range(12)]
    cols += [{"name": f"f{j}", "type": "float64"} for j in range(5)]
    cols += [{"name": f"s{j}", "type": "string"} for j in range(2)]
    schema = TableSchema.from_dict({"columns": cols, "primary_key": ["id"]})
    op = rng.choice(np.array([2, 0, 3], np.int8), n, p=[0.9, 0.05, 0.05])
    a = rng.integers(0, 19, n)
    b = (a + rng.integers(1, 19, n)) % 19
    table: dict[str, pa.Array] = {"__op": pa.array(op), "id": pa.array(rng.integers(0, 10**6, n))}
    for j, c in enumerate(schema.value_columns):
        sets = (op == 0) | ((op == 2) & ((a == j) | (b == j)))
        if c.name.startswith("i"):
            v = pa.array(rng.integers(0, 1 << 40, n))
        elif c.name.startswith("f"):
            v = pa.array(rng.random(n) * 1000)
        else:
            v = pa.array(np.array(["new", "paid", "shipped", "void"])[rng.integers(0, 4, n)])
        table[c.name] = pc.if_else(pa.array(sets), v, pa.scalar(None, v.type))
        table[SET_PREFIX + c.name] = pa.array(sets)
    return schema, pa.table(table)


def test_sparse_segment_is_within_one_and_a_half_parquet_and_far_below_the_wire_form(
    tmp_path: Path,
) -> None:
    schema, wire = _benchmark_like(20_000, seed=7)
    batch, rejects = ChangeBatch.from_arrow(wire, schema)
    assert not len(rejects)
    rel = write_change_segment(str(tmp_path), 0, 1, 0, batch)[0]
    compact = (tmp_path / rel).stat().st_size
    rel1 = write_change_segment(str(tmp_path), 0, 1, 0, batch, body_format=FORMAT_WIRE)[0]
    legacy = (tmp_path / rel1).stat().st_size
    buf = io.BytesIO()
    pq.write_table(wire, buf)
    parquet = len(buf.getvalue())
    assert compact <= 1.5 * parquet, (compact, parquet)
    assert compact <= 0.25 * legacy, (compact, legacy)


# ---------------------------------------------------------------------- segments
def test_new_segments_say_format_2_and_read_back(tmp_path: Path) -> None:
    schema, wire = _benchmark_like(500, seed=1)
    batch, _ = ChangeBatch.from_arrow(wire, schema)
    rel = write_change_segment(str(tmp_path), 3, 9, 0, batch)[0]
    records = read_segment(tmp_path / rel, repair=False)
    assert json.loads(records[0]) == {
        "version": 9,
        "bucket": 3,
        "schema_id": 0,
        "rows": 500,
        "format": FORMAT_COMPACT,
        "bytes": decompressed_size(records[1]),
    }
    h, got = read_change_segment(str(tmp_path), rel, schema)
    assert (h.version, h.bucket, h.rows, h.format) == (9, 3, 500, FORMAT_COMPACT)
    assert canonical(got) == canonical(batch)


def _forge(tmp_path: Path, header: dict[str, Any], body: bytes) -> str:
    """A segment with correct CRCs holding whatever header and body it is given."""
    rel = f"_wal/0/{1:020d}-f0f0.wal"
    (tmp_path / "_wal" / "0").mkdir(parents=True, exist_ok=True)
    with SegmentWriter(tmp_path / rel) as w:
        w.append(json.dumps(header).encode())
        w.append(body)
        w.finish()
    return rel


@pytest.mark.parametrize(
    "case", ["unknown format", "wire body tagged 2", "row count", "cut stream", "wrong schema"]
)
def test_a_body_that_does_not_match_its_header_is_corruption(tmp_path: Path, case: str) -> None:
    schema, wire = _benchmark_like(50, seed=2)
    batch, _ = ChangeBatch.from_arrow(wire, schema)
    header = {"version": 1, "bucket": 0, "schema_id": 0, "rows": 50, "format": 2}
    body = encode_compact(batch)
    read_schema = schema
    if case == "unknown format":
        header["format"] = 7
    elif case == "wire body tagged 2":
        body = encode_wire(batch)
    elif case == "row count":
        header["rows"] = 51
    elif case == "cut stream":
        body = body[: len(body) // 2]
    else:  # the same column names with other types
        read_schema = TableSchema.from_dict(
            {
                "columns": [{"name": c.name, "type": "string"} for c in schema.columns],
                "primary_key": ["id"],
            }
        )
    rel = _forge(tmp_path, header, body)
    with pytest.raises(WalCorruption) as err:
        read_change_segment(str(tmp_path), rel, read_schema)
    assert err.value.path == str(tmp_path / rel)


# ---------------------------------------------------------------------- format 1
def _fixture_events() -> tuple[TableSchema, list[list[dict[str, Any]]]]:
    spec = json.loads((FIXTURE / "events.json").read_text())
    return TableSchema.from_dict(spec["schema"]), spec["batches"]


def _py(schema: TableSchema, event: dict[str, Any]) -> dict[str, Any]:
    """An event of events.json with Python values (for the reference model)."""

    def conv(name: str, v: Any) -> Any:
        t = schema.column(name).type
        if v is None:
            return None
        if pa.types.is_date32(t):
            return dt.date.fromisoformat(v)
        if pa.types.is_timestamp(t):
            return dt.datetime.fromisoformat(v.replace("Z", "+00:00"))
        if pa.types.is_decimal(t):
            return decimal.Decimal(v)
        if pa.types.is_binary(t):
            return base64.b64decode(v)
        return v

    out = dict(event)
    if "set" in out:
        out["set"] = {k: conv(k, v) for k, v in out["set"].items()}
    return out


def test_format_1_segments_of_the_fixture_read_as_the_events_they_were_written_from() -> None:
    schema, batches = _fixture_events()
    seen = 0
    for version, evs in enumerate(batches, start=1):
        expected = ChangeBatch.from_events(evs, schema)[0].split_by_bucket()
        for bucket in range(schema.num_buckets):
            segs = sorted((FIXTURE / "_wal" / str(bucket)).glob(f"{version:020d}-*.wal"))
            if bucket not in expected:
                assert not segs
                continue
            (seg,) = segs
            header, got = read_change_segment(str(FIXTURE), str(seg.relative_to(FIXTURE)), schema)
            assert (header.version, header.bucket, header.format) == (version, bucket, FORMAT_WIRE)
            assert canonical(got) == canonical(expected[bucket])
            # The same batch written as format 2 reads back the same.
            again = decode_compact(encode_compact(got), schema, rows=len(got), path="seg")
            assert canonical(again) == canonical(got)
            seen += 1
    assert seen == 8


def test_a_table_with_format_1_segments_opens_reads_every_version_and_takes_new_ones(
    tmp_path: Path,
) -> None:
    schema, batches = _fixture_events()
    root = tmp_path / "t"
    shutil.copytree(FIXTURE, root)
    model = RefModel(schema)
    for version, evs in enumerate(batches, start=1):
        model.apply([_py(schema, e) for e in evs])
        model.commit(version)
    opts = TableOptions(snapshot_every=10**9, compact_every=10**9)

    def check(upto: int) -> None:
        t = open_table(root, options=opts)
        assert t.version == upto
        for v in range(1, upto + 1):
            assert table_to_rows(t.read(version=v), schema.primary_key) == model_rows(
                model.versions[v], schema
            ), f"version {v}"

    check(len(batches))
    # New commits on top of the old segments are format 2; old and new replay together.
    t = open_table(root, options=opts)
    more = [
        {"op": "update", "key": {"k": 51, "name": "n0"}, "set": {"label": "new"}, "seq": 400},
        {"op": "insert", "key": {"k": 60, "name": "n0"}, "set": {"big": 1}, "seq": 401},
    ]
    version = t.apply(more).version
    model.apply([_py(schema, e) for e in more])
    model.commit(version)
    formats = {
        json.loads(read_segment(p, repair=False)[0]).get("format", 1)
        for p in root.glob("_wal/*/*.wal")
    }
    assert formats == {FORMAT_WIRE, FORMAT_COMPACT}
    check(version)
