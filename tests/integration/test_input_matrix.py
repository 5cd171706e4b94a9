"""Every input path through real Kafka and real Spark gives the same table and the same
dead letters: apply mode (driver, driver with the decode in Spark tasks, executors; each
with the JVM JSON decoder too) x format (json, debezium, rowv2)
x table with and without a sequence column; and poison messages never stop a live stream.

One format-neutral workload (full-row upserts, deletes, stale events when the table has
a sequence column) is encoded in each format, with malformed and schema-violating
messages at the same offsets. Each combination is consumed by its own query (trigger
``availableNow``, several micro-batches) into its own table, and compared with the
reference model (tests/model.py) and with the exact set of bad offsets.
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
import random
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from cdc_sink import open_table
from cdc_sink.formats.debezium import encode_debezium
from cdc_sink.formats.native_json import encode_json
from cdc_sink.formats.rowv2 import encode_event, pack_row
from cdc_sink.kafka.deadletter import ParquetDeadLetter
from cdc_sink.schema import TableSchema
from cdc_sink.spark import DecodeOptions, SinkOptions, sink
from tests.integration.streams import kafka_stream, start_sink_query
from tests.model import RefModel, model_rows, table_to_rows

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.kafka]

_COLUMNS = [
    {"name": "order_id", "type": "int64", "nullable": False},
    {"name": "status", "type": "string", "default": "new"},
    {"name": "amount", "type": "decimal128(12, 2)"},
    {"name": "items", "type": "int32"},
    {"name": "updated_at", "type": "timestamp[us, UTC]"},
]
SCHEMAS = {
    "seq": TableSchema.from_dict(
        {
            "columns": [*_COLUMNS, {"name": "seq", "type": "int64"}],
            "primary_key": ["order_id"],
            "num_buckets": 3,
            "sequence_column": "seq",
        }
    ),
    "noseq": TableSchema.from_dict(
        {"columns": _COLUMNS, "primary_key": ["order_id"], "num_buckets": 3}
    ),
}
MODES = {  # format -> (mode, json_decoder) pairs
    "json": [
        ("driver", "python"),
        ("driver-tasks", "python"),
        ("executors", "python"),
        ("driver", "jvm"),
        ("driver-tasks", "jvm"),
        ("executors", "jvm"),
        ("aligned", "python"),
        ("aligned", "jvm"),
    ],
    "debezium": [
        ("driver", "python"),
        ("driver-tasks", "python"),
        ("executors", "python"),
        ("aligned", "python"),
    ],
    "rowv2": [
        ("driver", "python"),
        ("driver-tasks", "python"),
        ("executors", "python"),
        ("aligned", "python"),
    ],
}


def mode_options(mode: str, decode: DecodeOptions | None = None, **fields: Any) -> SinkOptions:
    """The :func:`sink` options of a test mode, with ``decode`` and the other ``fields``:
    ``driver``, ``executors`` (apply modes), ``driver-tasks`` (driver mode, the decode in
    Spark tasks: ``decode.where="executors"``) or ``aligned`` (executors mode on a
    bucket-partitioned topic: a one-partition topic is one, its one task holding every
    bucket)."""
    decode = decode or DecodeOptions()
    if mode == "driver-tasks":
        return SinkOptions(apply_mode="driver", decode=replace(decode, where="executors"), **fields)
    if mode == "aligned":
        return SinkOptions(apply_mode="executors", bucket_partitioned=True, decode=decode, **fields)
    return SinkOptions(apply_mode=mode, decode=decode, **fields)  # type: ignore[arg-type]


N_EVENTS = 420
BATCH = 150


def workload(seed: int, seq: bool) -> list[dict[str, Any]]:
    """Format-neutral events: kind upsert/delete (valid), garbage/unknown_column (bad)."""
    rng = random.Random(seed)
    out: list[dict[str, Any]] = []
    for i in range(N_EVENTS):
        k = rng.randrange(40)
        s = i + 1
        if seq and rng.random() < 0.08:
            s = max(1, i - rng.randrange(1, 30))  # out of order: stale unless newer
        r = rng.random()
        row = {
            "order_id": k,
            "status": rng.choice(["new", "paid", "shipped", None]),
            "amount": decimal.Decimal(rng.randrange(0, 10**6)) / 100,
            "items": rng.randrange(1, 50),
            "updated_at": dt.datetime(
                2026, 11, rng.randrange(1, 28), 10, rng.randrange(60), tzinfo=dt.timezone.utc
            ),
        }
        if r < 0.70:
            kind = "upsert"
        elif r < 0.88:
            kind = "delete"
        elif r < 0.94:
            kind = "garbage"
        else:
            kind = "unknown_column"
        ev: dict[str, Any] = {"kind": kind, "key": k, "row": row}
        if seq:
            ev["seq"] = s
        out.append(ev)
    return out


def encode(ev: dict[str, Any], fmt: str, schema: TableSchema, i: int) -> tuple[bytes, bytes]:
    """(Kafka key, value) of one workload event in ``fmt``."""
    row = dict(ev["row"])
    if "seq" in ev:
        row["seq"] = ev["seq"]
    return _ENCODERS[fmt](ev, row, schema, i)


def _encode_json(
    ev: dict[str, Any], row: dict[str, Any], schema: TableSchema, i: int
) -> tuple[bytes, bytes]:
    k, kind = ev["key"], ev["kind"]
    key = json.dumps({"order_id": k}).encode()
    if kind == "garbage":
        return key, b'{"op": "upsert", "key": {"order_id": ' + str(k).encode() + b'}, "set": {'
    sets = {c: v for c, v in row.items() if c not in ("order_id", "seq")}
    event: dict[str, Any] = {"op": "upsert", "key": {"order_id": k}, "set": sets}
    if kind == "delete":
        event = {"op": "delete", "key": {"order_id": k}}
    if kind == "unknown_column":
        event["set"]["colour"] = "red"
    if "seq" in ev:
        event["seq"] = ev["seq"]
    return key, encode_json(event)


def _encode_debezium(
    ev: dict[str, Any], row: dict[str, Any], schema: TableSchema, i: int
) -> tuple[bytes, bytes]:
    k, kind = ev["key"], ev["kind"]
    envelope = i % 2 == 0
    key = json.dumps(
        {
            "schema": {
                "type": "struct",
                "fields": [{"field": "order_id", "type": "int64", "optional": False}],
            },
            "payload": {"order_id": k},
        }
        if envelope
        else {"order_id": k}
    ).encode()
    if kind == "garbage":
        return key, b'{"payload": {"op": "u", "after": {"order_id": [}}'
    if kind == "delete":
        before = {"order_id": k, **({"seq": ev["seq"]} if "seq" in ev else {})}
        return key, encode_debezium("d", before, None, schema, envelope=envelope)
    value = encode_debezium("u" if i % 3 else "c", None, row, schema, envelope=envelope)
    if kind == "unknown_column":
        value = _with_unknown_column(value, envelope)
    return key, value


def _with_unknown_column(value: bytes, envelope: bool) -> bytes:
    """A Debezium event whose ``after`` has a column the table does not have."""
    doc = json.loads(value)
    payload = doc["payload"] if envelope else doc
    payload["after"]["colour"] = "red"
    if envelope:  # the field schema names it too, as a real connector would
        for f in doc["schema"]["fields"]:
            if f["field"] == "after":
                f["fields"].append({"field": "colour", "type": "string", "optional": True})
    return json.dumps(doc).encode()


def _encode_rowv2(
    ev: dict[str, Any], row: dict[str, Any], schema: TableSchema, i: int
) -> tuple[bytes, bytes]:
    k, kind = ev["key"], ev["kind"]
    key = str(k).encode()
    if kind == "garbage":
        return key, encode_event({"op": "upsert", "key": {"order_id": k}, "set": {}}, schema)[:5]
    if kind == "unknown_column":
        return key, pack_row(1, {1: (k).to_bytes(8, "little", signed=True), 99: b"red"})
    sets = {c: v for c, v in row.items() if c not in ("order_id", "seq")}
    event = (
        {"op": "delete", "key": {"order_id": k}}
        if kind == "delete"
        else {"op": "upsert", "key": {"order_id": k}, "set": sets}
    )
    if "seq" in ev:
        event["seq"] = ev["seq"]
    return key, encode_event(event, schema)


_ENCODERS: dict[
    str, Callable[[dict[str, Any], dict[str, Any], TableSchema, int], tuple[bytes, bytes]]
] = {"json": _encode_json, "debezium": _encode_debezium, "rowv2": _encode_rowv2}


def expected_rows(events: list[dict[str, Any]], schema: TableSchema) -> dict[Any, Any]:
    m = RefModel(schema)
    native = []
    for ev in events:
        if ev["kind"] == "upsert":
            sets = {c: v for c, v in ev["row"].items() if c != "order_id"}
            e: dict[str, Any] = {"op": "upsert", "key": {"order_id": ev["key"]}, "set": sets}
        elif ev["kind"] == "delete":
            e = {"op": "delete", "key": {"order_id": ev["key"]}}
        else:
            continue
        if "seq" in ev:
            e["seq"] = ev["seq"]
        native.append(e)
    m.apply(native)
    return model_rows(m.rows, schema)


def produce(bootstrap: str, topic: str, records: list[tuple[bytes, bytes]]) -> None:
    from confluent_kafka import Producer

    p = Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": 5, "enable.idempotence": True}
    )  # no reordering on a retried request
    for key, value in records:
        p.produce(topic, key=key, value=value)
    assert p.flush(30) == 0


def run_available_now(spark: Any, bootstrap: str, topic: str, fn: Any, ckpt: Path) -> None:
    q = (
        kafka_stream(spark, bootstrap, topic, max_offsets=BATCH)
        .writeStream.foreachBatch(fn)
        .option("checkpointLocation", str(ckpt))
        .trigger(availableNow=True)
        .start()
    )
    q.awaitTermination()
    assert q.exception() is None


@pytest.mark.parametrize("variant", ["seq", "noseq"])
@pytest.mark.parametrize("fmt", ["json", "debezium", "rowv2"])
def test_every_apply_mode_gives_the_same_table_and_dead_letters(
    spark: Any, kafka: Any, topic_name: str, tmp_path: Path, fmt: str, variant: str
) -> None:
    schema = SCHEMAS[variant]
    events = workload(seed=11, seq=variant == "seq")
    kafka.create_topic(topic_name, partitions=1)
    produce(
        kafka.bootstrap_servers,
        topic_name,
        [encode(ev, fmt, schema, i) for i, ev in enumerate(events)],
    )
    want = expected_rows(events, schema)
    bad_offsets = sorted(
        i for i, ev in enumerate(events) if ev["kind"] in ("garbage", "unknown_column")
    )
    reasons_by_mode = {}
    for mode, decoder in MODES[fmt]:
        name = f"{mode}-{decoder}"
        dlq = ParquetDeadLetter(tmp_path / f"dlq-{name}")
        fn = sink(
            tmp_path / f"t-{name}",
            schema=schema,
            dead_letter=dlq,
            options=mode_options(
                mode,
                DecodeOptions(json_decoder=decoder),  # type: ignore[arg-type]
                format=fmt,
                app_id=f"matrix-{name}",
            ),
        )
        run_available_now(spark, kafka.bootstrap_servers, topic_name, fn, tmp_path / f"ckpt-{name}")
        assert fn.misaligned_batches == 0  # one partition: always aligned
        table = open_table(tmp_path / f"t-{name}")
        got = table_to_rows(table.read(), schema.primary_key)
        assert got == want, f"{fmt}/{variant}/{name}: table differs from the model"
        letters = dlq.read(deduplicate=False)
        offsets = sorted(letters.column("offset").to_pylist())
        assert offsets == bad_offsets, f"{fmt}/{variant}/{name}: dead letters"
        assert set(letters.column("topic").to_pylist()) == {topic_name}
        assert all(letters.column("reason").to_pylist())
        # Every version records its Kafka end offset; the last one is the topic's end.
        last = table.log.read(table.version).source_offsets
        assert last == {topic_name: {"0": N_EVENTS}}
        from_table = pa.concat_tables(table.rejects(v) for v in range(1, table.version + 1))
        assert sorted(from_table.column("offset").to_pylist()) == bad_offsets
        reasons_by_mode[name] = sorted(
            zip(
                letters.column("offset").to_pylist(),
                letters.column("reason").to_pylist(),
                strict=True,
            )
        )
    if fmt != "json":  # the JVM decoder words its reasons its own way
        assert len({json.dumps(r) for r in reasons_by_mode.values()}) == 1, reasons_by_mode
    else:
        py = [r for n, r in reasons_by_mode.items() if n.endswith("python")]
        assert all(r == py[0] for r in py), reasons_by_mode


POISON = [
    b"\xff\xfe\xfd not utf-8",
    b"[" * 20_000 + b"]" * 20_000,
    b'{"schema": ' + b'{"type": "struct", "fields": [' * 3000 + b'{"payload": {}}',
    b'{"schema": {"type": "struct", "fields": [{"field": "after", "type": "struct", '
    b'"fields": [{"field": "amount", "type": "bytes", "name": '
    b'"org.apache.kafka.connect.data.Decimal", "parameters": {"scale": "abc"}}]}]}, '
    b'"payload": {"op": "c", "after": {"order_id": 1, "amount": "AA=="}}}',
    b'{"payload": {"op": "c", "after": {"order_id": 1, "amount": 1e400}}}',
    b'{"payload": {"op": "c", "after": {"order_id": 1, "items": 99999999999999999999}}}',
    b'{"payload": {"op": "c", "after": {"order_id": 1, "updated_at": 9223372036825200000}}}',
    b'{"payload": {"op": "c", "after": {"order_id": 1, "amount": "12345678901234567.5"}}}',
    b"\x00",  # (an empty value is a tombstone, like a null one: skipped, not poison)
]


@pytest.mark.parametrize("mode", ["driver", "driver-tasks", "executors", "aligned"])
def test_poison_messages_never_stop_a_live_stream(
    spark: Any, kafka: Any, topic_name: str, tmp_path: Path, mode: str
) -> None:
    schema = SCHEMAS["noseq"]
    kafka.create_topic(topic_name, partitions=1)
    dlq = ParquetDeadLetter(tmp_path / "dlq")
    fn = sink(
        tmp_path / "t",
        schema=schema,
        dead_letter=dlq,
        options=mode_options(mode, format="debezium", app_id="poison"),
    )
    q = start_sink_query(spark, kafka.bootstrap_servers, topic_name, fn, tmp_path / "ckpt")
    try:
        good = workload(seed=3, seq=False)[:60]
        good = [ev for ev in good if ev["kind"] in ("upsert", "delete")]
        poison_at: dict[int, bytes] = {}
        offset = 0
        for r in range(2):  # poison, then good events: the stream must keep committing
            recs = [(b"p", p) for p in POISON]
            recs += [encode(ev, "debezium", schema, i) for i, ev in enumerate(good)]
            produce(kafka.bootstrap_servers, topic_name, recs)
            q.processAllAvailable()
            poison_at.update({offset + j: p for j, p in enumerate(POISON)})
            offset += len(recs)
            assert q.isActive, f"round {r}: the query stopped"
        table = open_table(tmp_path / "t")
        assert table_to_rows(table.read(), schema.primary_key) == expected_rows(good, schema)
        letters = dlq.read(deduplicate=False)
        assert sorted(letters.column("offset").to_pylist()) == sorted(poison_at)
        for rec in letters.to_pylist():
            assert rec["topic"] == topic_name and rec["partition"] == 0 and rec["reason"]
            assert rec["value"] == poison_at[rec["offset"]]
    finally:
        q.stop()


@pytest.mark.parametrize("mode", ["driver", "executors", "aligned"])
def test_compaction_and_gc_after_every_batch_keep_the_table_exact(
    spark: Any, kafka: Any, topic_name: str, tmp_path: Path, mode: str
) -> None:
    """Maintenance by the committing driver between micro-batches (as the job's
    --compact-every/--gc-every do) must not lose or resurrect anything in either mode."""
    schema = SCHEMAS["seq"]
    events = workload(seed=5, seq=True)
    kafka.create_topic(topic_name, partitions=1)
    produce(
        kafka.bootstrap_servers,
        topic_name,
        [encode(ev, "json", schema, i) for i, ev in enumerate(events)],
    )
    fn = sink(
        tmp_path / "t",
        schema=schema,
        options=mode_options(mode, format="json", app_id=f"maint-{mode}"),
    )

    def with_maintenance(df: Any, batch_id: int) -> None:
        fn(df, batch_id)
        fn.table.compact()
        fn.table.gc(dry_run=False, retain_versions=2, retain_seconds=0, orphan_grace_seconds=0)

    run_available_now(
        spark, kafka.bootstrap_servers, topic_name, with_maintenance, tmp_path / "ckpt"
    )
    want = expected_rows(events, schema)
    assert table_to_rows(fn.table.read(), schema.primary_key) == want
    assert table_to_rows(open_table(tmp_path / "t").read(), schema.primary_key) == want
