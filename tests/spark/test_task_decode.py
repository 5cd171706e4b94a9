"""Driver mode with the decode in Spark tasks (``decode_in="executors"``), without Spark:
what the driver rebuilds from the tasks' packed pieces is, bucket by bucket, what driver
mode's own decode and split give for the same records; every reject keeps its Kafka
coordinates and reason; the batch's records, ops and end offsets are counted once; and
``decode_in`` is checked before anything is created. (The same path through real Kafka
and Spark: tests/integration/test_input_matrix.py and test_sink.py.)"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from cdc_sink.engine import core_of
from cdc_sink.errors import InvalidOption
from cdc_sink.formats import REGISTRY
from cdc_sink.schema import TableSchema
from cdc_sink.spark import DecodeOptions, SinkOptions, sink
from cdc_sink.spark._batch import end_offsets, op_counts
from cdc_sink.spark._pieces import PIECES, unpack
from cdc_sink.spark._task_decode import _Buckets
from cdc_sink.spark._tasks import _decode_partition
from tests.fixtures import ID_A_B
from tests.spark.test_pieces import _decoded_records, _events, decoder_options

TOPIC = "orders"


def _partition(values: list[bytes | None], partition: int) -> pa.RecordBatch:
    """One Kafka partition's records as the decode task gets them."""
    n = len(values)
    return pa.record_batch(
        {
            "value": pa.array(values, pa.binary()),
            "topic": pa.array([TOPIC] * n, pa.string()),
            "partition": pa.array([partition] * n, pa.int32()),
            "offset": pa.array(range(n), pa.int64()),
            "ts_ms": pa.array(range(10_000, 10_000 + n), pa.int64()),
        }
    )


def _tasks(
    values: list[bytes | None], fmt: str, schema: TableSchema, partitions: int, rows: int
) -> list[pa.RecordBatch]:
    """The packed output of one decode task per partition (records dealt round-robin),
    each task fed Arrow batches of ``rows`` records."""
    out: list[pa.RecordBatch] = []
    for p in range(partitions):
        rb = _partition(values[p::partitions], p)
        batches = [rb.slice(i, rows) for i in range(0, rb.num_rows, rows)]
        out.extend(
            _decode_partition(
                iter(batches),
                fmt=fmt,  # type: ignore[arg-type]
                schema_dict=schema.to_dict(),
                options=decoder_options(fmt),
            )
        )
    return out


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=_decoded_records(), partitions=st.integers(1, 3), rows=st.integers(1, 50))
def test_the_driver_prepares_what_driver_mode_would_decode_and_split(
    case: tuple[TableSchema, str, list[bytes | None]], partitions: int, rows: int
) -> None:
    """Every format, every op, rejects, tombstones, truncates, with and without a
    sequence column, over several partitions and any batch size."""
    schema, fmt, values = case
    got = _Buckets.of(unpack(_tasks(values, fmt, schema, partitions, rows)), schema)

    decoder = REGISTRY[fmt].new_decoder(**decoder_options(fmt))
    want: dict[int, list[tuple[Any, ...]]] = {}
    want_rejects: dict[tuple[int, int], str] = {}
    want_ops: Counter[str] = Counter()
    for p in range(partitions):  # driver mode: each partition's records decoded and split
        mine = values[p::partitions]
        raw = pa.array(mine, pa.binary())
        batch, rejects = decoder.decode(raw, schema, position=np.arange(len(mine)))
        for b, part in batch.split_by_bucket().items():
            want.setdefault(b, []).extend((p, *e) for e in _events(part, part.positions))
        want_rejects.update({(p, o): r for o, r in rejects.as_dict().items()})
        want_ops.update(op_counts(batch))

    rebuilt: dict[int, list[tuple[Any, ...]]] = {}
    for b, batch in got.parts:
        meta = got._metas[b]
        offsets = meta.column("__offset").to_numpy()[batch.positions]
        parts = meta.column("__partition").to_numpy()[batch.positions]
        rebuilt[b] = [(int(p), *e) for p, e in zip(parts, _events(batch, offsets), strict=True)]
    assert rebuilt == {b: evs for b, evs in want.items() if evs}
    assert {(r["partition"], r["offset"]): r["reason"] for r in got.rejected} == want_rejects
    assert all(r["topic"] == TOPIC for r in got.rejected)
    assert len(got.rejected) == len(want_rejects)  # each once
    assert got.records == len(values)  # a truncate counted once
    assert dict(got.ops) == dict(want_ops)
    meta = got.meta
    ends = end_offsets(meta.column("__topic"), meta.column("__partition"), meta.column("__offset"))
    counts = {str(p): len(values[p::partitions]) for p in range(partitions)}
    assert ends == ({TOPIC: {p: c for p, c in counts.items() if c}} if values else {})


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=_decoded_records(), seed=st.integers(0, 2**32 - 1))
def test_a_decoder_that_reads_no_keys_decodes_the_same_without_them(
    case: tuple[TableSchema, str, list[bytes | None]], seed: int
) -> None:
    """The decode tasks move the Kafka keys into Python only for decoders that read them
    (``Decoder.reads_keys``); for the others, keys must change nothing."""
    schema, fmt, values = case
    decoder = REGISTRY[fmt].new_decoder(**decoder_options(fmt))
    assume(not decoder.reads_keys)
    rng = np.random.default_rng(seed)
    keys = pa.array(
        [None if k % 3 == 0 else rng.bytes(int(k)) for k in rng.integers(0, 12, len(values))],
        pa.binary(),
    )
    raw = pa.array(values, pa.binary())
    with_keys = decoder.decode(raw, schema, keys=keys)
    without = decoder.decode(raw, schema)
    assert _events(with_keys[0], with_keys[0].positions) == _events(
        without[0], without[0].positions
    )
    assert with_keys[1].as_dict() == without[1].as_dict()


def test_only_the_debezium_decoder_reads_kafka_keys() -> None:
    readers = {name for name, f in REGISTRY.items() if f.decoder.reads_keys}
    assert readers == {"debezium", "debezium-avro"}


def test_coordinates_of_tablet_refusals_name_their_bucket_rows() -> None:
    schema = TableSchema.from_dict({**ID_A_B, "num_buckets": 3})
    events = [{"op": "upsert", "key": {"id": k}, "set": {"a": k}} for k in range(30)]
    values: list[bytes | None] = list(REGISTRY["json"].encode(events, schema))
    got = _Buckets.of(unpack(_tasks(values, "json", schema, 2, 7)), schema)
    for b, batch in got.parts:
        coords = got.coordinates(b, batch.positions, ["why"] * len(batch))
        ids = batch.to_arrow().column("id").to_pylist()
        for c, k in zip(coords, ids, strict=True):  # record k is partition k % 2, offset k // 2
            assert (c["partition"], c["offset"], c["reason"]) == (k % 2, k // 2, "why")


def test_an_events_own_timestamp_is_its_producer_time() -> None:
    """Freshness uses an event's own ``ts_ms`` where it has one, the Kafka record's
    timestamp otherwise (as driver mode does)."""
    schema = TableSchema.from_dict(ID_A_B)
    values = [
        b'{"op":"upsert","key":{"id":1},"set":{"a":1},"ts_ms":42}',
        b'{"op":"upsert","key":{"id":2},"set":{"a":2}}',
        b"{",
    ]
    got = _Buckets.of(unpack(_tasks(values, "json", schema, 1, 10)), schema)
    ts = sorted(got.meta.column("__ts_ms").to_pylist())
    assert ts == [42, 10_001, 10_002]


class _Packed:
    """Stands in for the DataFrame of packed pieces (``toArrow`` is all the driver calls)."""

    def __init__(self, batches: list[pa.RecordBatch]) -> None:
        self.batches = batches

    def toArrow(self) -> pa.Table:
        return pa.Table.from_batches(self.batches, schema=PIECES)


def test_a_failure_after_the_prepare_leaves_no_pending_version(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The rejects' raw bytes come from a Spark join after the buckets are prepared; when
    it fails, the sink's transaction rolls the prepared buckets back and removes their
    files."""
    from cdc_sink.spark import _task_decode

    schema = TableSchema.from_dict(ID_A_B)
    events = [{"op": "upsert", "key": {"id": k}, "set": {"a": k}} for k in range(20)]
    values: list[bytes | None] = [*REGISTRY["json"].encode(events, schema), b"{"]
    packed = _tasks(values, "json", schema, 1, 8)
    monkeypatch.setattr(_task_decode, "packed_in_spark", lambda *a: _Packed(packed))

    def join_fails(*a: object) -> None:
        raise RuntimeError("the join failed")

    monkeypatch.setattr(_task_decode, "rejected_records", join_fails)
    fn = sink(
        str(tmp_path / "t"),
        schema=ID_A_B,
        options=SinkOptions(decode=DecodeOptions(where="executors")),
    )
    try:
        before = sorted(p.name for p in (tmp_path / "t").rglob("*") if p.is_file())
        with pytest.raises(RuntimeError, match="the join failed"):
            fn(None, 0)  # type: ignore[arg-type]
        assert fn.stats[-1].result == "failed"
        for b in range(schema.num_buckets):
            assert core_of(fn.table).tablet(b).pending_version is None
        assert sorted(p.name for p in (tmp_path / "t").rglob("*") if p.is_file()) == before
        assert fn.table.version == 0
    finally:
        fn.close()


def test_an_empty_batch_has_no_parts_and_no_offsets() -> None:
    schema = TableSchema.from_dict(ID_A_B)
    got = _Buckets.of(unpack([]), schema)
    assert got.parts == [] and got.rejected == [] and got.records == 0
    assert got.meta.num_rows == 0


@pytest.mark.parametrize(
    ("options", "option"),
    [
        (SinkOptions(decode=DecodeOptions(where="tasks")), "decode_in"),  # type: ignore[arg-type]
        (SinkOptions(apply_mode="executors", decode=DecodeOptions(where="driver")), "decode_in"),
        (SinkOptions(decode=DecodeOptions(where="executors", processes=2)), "decode_processes"),
    ],
)
def test_bad_decode_in_is_refused_before_the_table_is_created(
    tmp_path: Path, options: SinkOptions, option: str
) -> None:
    with pytest.raises(InvalidOption, match=option) as e:
        sink(str(tmp_path / "t"), schema=ID_A_B, options=options)
    assert e.value.option == option
    assert not (tmp_path / "t").exists()


@pytest.mark.parametrize(
    ("options", "where"),
    [
        (SinkOptions(), "driver"),
        (SinkOptions(decode=DecodeOptions(where="executors")), "executors"),
        (SinkOptions(apply_mode="executors"), "executors"),
        (SinkOptions(apply_mode="executors", decode=DecodeOptions(where="executors")), "executors"),
    ],
)
def test_decode_in_defaults_to_where_the_apply_mode_decodes(
    tmp_path: Path, options: SinkOptions, where: str
) -> None:
    fn = sink(str(tmp_path / "t"), schema=ID_A_B, options=options)
    try:
        assert fn.decode_in == where
    finally:
        fn.close()
