"""Wire rows packed per bucket for executors mode's shuffle: every row reaches its
bucket exactly once and in order, a truncate reaches every bucket, and nothing depends
on how the batches were sliced or how big the pieces are."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cdc_sink.batch import SET_PREFIX, ChangeBatch
from cdc_sink.bucketing import bucket_ids
from cdc_sink.formats import REGISTRY
from cdc_sink.schema import Column, TableSchema
from cdc_sink.spark import _pieces
from cdc_sink.spark._batch import to_change_batch
from cdc_sink.spark._pieces import PIECES, in_kafka_order, pack, pack_batches, pack_decoded, unpack
from tests.strategies import events, key_pool, schemas

OPS = ["insert", "upsert", "update", "delete", "truncate", None]


def _schema(num_buckets: int) -> TableSchema:
    return TableSchema(
        (
            Column(0, "region", pa.string(), False),
            Column(1, "id", pa.int64(), False),
            Column(2, "v", pa.string()),
        ),
        ("region", "id"),
        num_buckets=num_buckets,
    )


rows_st = st.lists(
    st.tuples(
        st.sampled_from(OPS),
        st.one_of(st.none(), st.sampled_from(["eu", "us", "ap", "ü€"])),
        st.one_of(st.none(), st.integers(-(2**63), 2**63 - 1)),
        st.one_of(st.none(), st.text(max_size=30)),
    ),
    max_size=300,
)


def _batch(rows: list[tuple[Any, ...]]) -> pa.RecordBatch:
    return pa.record_batch(
        {
            "__op": pa.array([r[0] for r in rows], pa.string()),
            "region": pa.array([r[1] for r in rows], pa.string()),
            "id": pa.array([r[2] for r in rows], pa.int64()),
            "v": pa.array([r[3] for r in rows], pa.string()),
            "__offset": pa.array(range(len(rows)), pa.int64()),
        }
    )


def _expected(rb: pa.RecordBatch, schema: TableSchema) -> dict[int, list[dict[str, Any]]]:
    """Each bucket's rows, computed row by row (the reference)."""
    nb = schema.num_buckets
    buckets = bucket_ids([rb.column("region"), rb.column("id")], nb).tolist()
    rows = rb.to_pylist()
    has_truncate = any(r["__op"] == "truncate" for r in rows)
    out: dict[int, list[dict[str, Any]]] = {b: [] for b in range(nb)} if has_truncate else {}
    for r, b in zip(rows, buckets, strict=True):
        targets = range(nb) if r["__op"] == "truncate" else [0 if nb == 1 else b]
        for t in targets:
            out.setdefault(t, []).append(r)
    return out


@settings(max_examples=150, deadline=None)
@given(
    rows=rows_st,
    num_buckets=st.integers(1, 9),
    lo=st.integers(0, 20),
    piece_bytes=st.sampled_from([1, 600, 10_000, 1 << 28]),
)
def test_every_row_reaches_its_bucket_once_and_in_order(
    rows: list[tuple[Any, ...]], num_buckets: int, lo: int, piece_bytes: int
) -> None:
    schema = _schema(num_buckets)
    rb = _batch(rows).slice(min(lo, len(rows)))  # a slice: buffers with an offset
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(_pieces, "_PIECE_BYTES", piece_bytes)
        packed = list(pack(rb, schema))
    for p in packed:
        assert p.schema == PIECES
    got = {b: t.to_pylist() for b, t in unpack(packed).items()}
    assert got == _expected(rb, schema)


@settings(max_examples=40, deadline=None)
@given(batches=st.lists(rows_st, min_size=1, max_size=4), num_buckets=st.integers(2, 6))
def test_pieces_of_several_batches_keep_batch_order(
    batches: list[list[tuple[Any, ...]]], num_buckets: int
) -> None:
    schema = _schema(num_buckets)
    rbs = [_batch(rows) for rows in batches]
    got = {b: t.to_pylist() for b, t in unpack(pack_batches(rbs, schema)).items()}
    want: dict[int, list[dict[str, Any]]] = {}
    for rb in rbs:
        for b, rows in _expected(rb, schema).items():
            want.setdefault(b, []).extend(rows)
    assert got == want


def test_packed_batches_read_back_from_a_slice() -> None:
    """Spark may hand the preparing task a batch whose arrays start at an offset."""
    schema = _schema(4)
    rb = _batch([("insert", "eu", i, str(i)) for i in range(200)])
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(_pieces, "_PIECE_BYTES", 1)  # one piece per row group, many rows
        packed = pa.Table.from_batches(list(pack(rb, schema))).combine_chunks().to_batches()[0]
    assert packed.num_rows > 4
    head, tail = packed.slice(0, 3), packed.slice(3)
    got = unpack([head, tail])
    assert sum(t.num_rows for t in got.values()) == 200
    assert sorted(np.concatenate([t.column("id").to_numpy() for t in got.values()])) == list(
        range(200)
    )
    assert unpack([packed.slice(0, 0)]) == {}


def _events(batch: ChangeBatch, offsets: np.ndarray) -> list[tuple[Any, ...]]:
    """Each event as (offset, op, seq, keys, the cells it sets), for comparing batches."""
    rows = batch.to_arrow().to_pylist()
    out = []
    for off, row in zip(offsets.tolist(), rows, strict=True):
        keys = tuple(row[k] for k in batch.schema.primary_key)
        cells = {
            c.name: row[c.name] for c in batch.schema.value_columns if row.get(SET_PREFIX + c.name)
        }
        out.append((off, row["__op"], row.get("__seq"), keys, cells))
    return out


def decoder_options(fmt: str) -> dict[str, Any]:
    """The options these tests decode ``fmt`` with: native JSON truncates applied (the
    generated streams hold some; Debezium applies its own by default)."""
    return {"allow_truncate": True} if fmt == "json" else {}


@st.composite
def _decoded_records(draw: st.DrawFn) -> tuple[TableSchema, str, list[bytes | None]]:
    schema = draw(schemas())
    # debezium-avro needs a schema registry: its own tests are tests/formats/test_avro_*.py
    fmt = draw(st.sampled_from([f for f in REGISTRY if f != "debezium-avro"]))
    evs = draw(events(schema, draw(key_pool(schema)), max_size=40, truncates=True))
    values: list[bytes | None] = []
    encode = REGISTRY[fmt].new_encoder(schema)
    for e in evs:
        try:
            values.append(encode(e))
        except (ValueError, TypeError):
            values.append(json.dumps(e, default=str).encode())  # not this format: a reject
        if draw(st.integers(0, 15)) == 0:
            values.append(draw(st.sampled_from([None, b"", b"{", b"\x00\xff"])))
    return schema, fmt, values


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=_decoded_records())
def test_decoded_batches_prepare_as_driver_mode_splits_them(
    case: tuple[TableSchema, str, list[bytes | None]],
) -> None:
    """Every format, every op, rejects, tombstones, truncates, with and without a
    sequence column: what each bucket's task rebuilds from the pieces is the driver's
    split of the same decode, and every reject keeps its offset and reason."""
    schema, fmt, values = case
    n = len(values)
    decoder = REGISTRY[fmt].new_decoder(**decoder_options(fmt))
    raw = pa.array(values, pa.binary())
    batch, rejects = decoder.decode(raw, schema, position=np.arange(n, dtype=np.int64))
    meta = pa.table(
        {
            "__topic": pa.array(["t"] * n, pa.string()),
            "__partition": pa.array([0] * n, pa.int32()),
            "__offset": pa.array(range(n), pa.int64()),
            "__ts_ms": pa.array(range(1000, 1000 + n), pa.int64()),
        }
    )
    got = unpack(pack_decoded(batch, rejects, meta))
    want = {b: _events(p, p.positions) for b, p in batch.split_by_bucket().items()}
    got_rejects: dict[int, str] = {}
    seen = 0
    for b, part in got.items():
        part = in_kafka_order(part, schema)
        rebuilt, rej, got_meta = to_change_batch(part, schema)
        offsets = got_meta.column("__offset").to_numpy()
        assert _events(rebuilt, offsets[rebuilt.positions]) == want.get(b, [])
        got_rejects.update(zip(offsets[rej.positions].tolist(), rej.reasons, strict=True))
        seen += part.num_rows
    assert got_rejects == rejects.as_dict()
    copies = (len(want) - 1) * int((batch.op == 4).sum()) if want else 0
    assert seen == n + copies  # every record once (a truncate once per bucket)
