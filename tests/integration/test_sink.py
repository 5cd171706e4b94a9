"""The streaming sink end to end: real Kafka broker, real Spark, real table files.

Streams are driven with ``processAllAvailable()``; tables are compared with the
plain-Python reference model of tests/model.py at the versions where every produced
event has been processed.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from cdc_sink import open_table
from cdc_sink.schema import TableSchema
from cdc_sink.spark import DecodeOptions, SinkOptions, sink
from cdc_sink.table import TableOptions
from tests.integration.streams import kafka_stream, start_sink_query
from tests.model import RefModel, model_rows, table_to_rows

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.kafka]

SCHEMA = TableSchema.from_dict(
    {
        "columns": [
            {"name": "order_id", "type": "int64"},
            {"name": "status", "type": "string", "default": "new"},
            {"name": "amount", "type": "decimal128(12, 2)"},
            {"name": "items", "type": "int32"},
            {"name": "paid", "type": "bool"},
            {"name": "updated_at", "type": "timestamp[us, UTC]"},
            {"name": "seq", "type": "int64"},
        ],
        "primary_key": ["order_id"],
        "num_buckets": 3,
        "sequence_column": "seq",
    }
)


class Collect:
    """A dead-letter sink that keeps what it is given."""

    def __init__(self) -> None:
        self.tables: list[pa.Table] = []

    def write(self, records: pa.Table) -> None:
        self.tables.append(records)

    def rows(self) -> list[dict[str, Any]]:
        return [r for t in self.tables for r in t.to_pylist()]


def make_events(rng: random.Random, n: int, first_seq: int, keys: range) -> list[Any]:
    """Realistic order events, plus malformed ones (raw strings)."""
    out: list[Any] = []
    for i in range(n):
        k = rng.choice(keys)
        seq = first_seq + i
        r = rng.random()
        if r < 0.35:
            out.append(
                {
                    "op": "upsert",
                    "key": {"order_id": k},
                    "seq": seq,
                    "set": {
                        "amount": f"{rng.randint(1, 99999) / 100:.2f}",
                        "items": rng.randint(1, 9),
                        "updated_at": f"2026-11-{rng.randint(1, 28):02d}T10:00:00Z",
                    },
                }
            )
        elif r < 0.7:
            out.append(
                {
                    "op": "update",
                    "key": {"order_id": k},
                    "seq": seq,
                    "set": {
                        "status": rng.choice(["paid", "packed", "shipped"]),
                        "paid": rng.random() < 0.5,
                    },
                }
            )
        elif r < 0.8:
            out.append({"op": "delete", "key": {"order_id": k}, "seq": seq})
        elif r < 0.9:
            out.append(
                {
                    "op": "insert",
                    "key": {"order_id": k},
                    "seq": seq,
                    "set": {"amount": "1.00", "status": None},
                }
            )
        elif r < 0.94:
            out.append("{not json")
        elif r < 0.97:
            out.append(
                {"op": "update", "key": {"order_id": k}, "seq": seq, "set": {"items": "many"}}
            )
        else:
            out.append(
                {"op": "upsert", "key": {"order_id": k}, "seq": seq, "set": {"colour": "red"}}
            )
    return out


def produce(bootstrap: str, topic: str, events: list[Any]) -> None:
    from confluent_kafka import Producer

    p = Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": 5, "enable.idempotence": True}
    )  # no reordering on a retried request
    for e in events:
        if isinstance(e, str):
            p.produce(topic, key=b"bad", value=e.encode())
        else:
            p.produce(topic, key=str(e["key"]["order_id"]).encode(), value=json.dumps(e).encode())
    assert p.flush(30) == 0


def is_malformed(e: Any) -> bool:
    """Events the decoder must send to the dead-letter sink."""
    if isinstance(e, str):
        return True
    sets = e.get("set") or {}
    return isinstance(sets.get("items"), str) or "colour" in sets


def _typed(e: dict[str, Any]) -> dict[str, Any]:
    """The JSON event with the Python values the reference model compares."""
    import datetime as dt
    import decimal

    sets = dict(e.get("set") or {})
    if isinstance(sets.get("amount"), str):
        sets["amount"] = decimal.Decimal(sets["amount"])
    if isinstance(sets.get("updated_at"), str):
        sets["updated_at"] = dt.datetime.fromisoformat(sets["updated_at"].replace("Z", "+00:00"))
    return {**e, "set": sets}


def start_query(spark: Any, bootstrap: str, topic: str, fn: Any, ckpt: Path) -> Any:
    return start_sink_query(spark, bootstrap, topic, fn, ckpt, max_offsets=400)


def expected(events: list[Any]) -> dict[Any, Any]:
    m = RefModel(SCHEMA)
    m.apply([_typed(e) for e in events if not is_malformed(e)])
    return model_rows(m.rows, SCHEMA)


def test_json_stream_restart_replay_and_dead_letters(
    spark: Any, kafka: Any, topic_name: str, tmp_path: Path
) -> None:
    kafka.create_topic(topic_name, 3)
    rng = random.Random(7)
    phase1 = make_events(rng, 1500, 1, range(300))
    phase2 = make_events(rng, 1500, 10_000, range(300))
    path = str(tmp_path / "orders")
    dlq = Collect()
    fn = sink(path, schema=SCHEMA, dead_letter=dlq, options=SinkOptions(app_id="orders-job"))
    produce(kafka.bootstrap_servers, topic_name, phase1)
    q = start_query(spark, kafka.bootstrap_servers, topic_name, fn, tmp_path / "ckpt")
    q.processAllAvailable()
    q.stop()
    table = open_table(path)
    v1 = table.version
    assert v1 >= 4  # maxOffsetsPerTrigger split the backlog into several versions
    assert table_to_rows(table.read(version=v1), ["order_id"]) == expected(phase1)

    # Restart on the same checkpoint with a new sink function (a new driver process).
    produce(kafka.bootstrap_servers, topic_name, phase2)
    fn2 = sink(path, dead_letter=dlq, options=SinkOptions(app_id="orders-job"))
    q = start_query(spark, kafka.bootstrap_servers, topic_name, fn2, tmp_path / "ckpt")
    q.processAllAvailable()
    q.stop()
    table = open_table(path)
    v2 = table.version
    assert v2 > v1
    assert table_to_rows(table.read(version=v2), ["order_id"]) == expected(phase1 + phase2)
    assert table_to_rows(table.read(version=v1), ["order_id"]) == expected(phase1)
    batch_ids = [v["batch_id"] for v in table.versions() if v["app_id"] == "orders-job"]
    assert batch_ids == sorted(set(batch_ids))  # every micro-batch exactly once

    # A replayed micro-batch (same batch_id) is a no-op.
    raw = spark.createDataFrame(
        [(b"k", b'{"op":"delete","key":{"order_id":1},"seq":99999}', topic_name, 0, 10**9)],
        "key binary, value binary, topic string, partition int, offset bigint",
    )
    fn2(raw, batch_ids[-1])
    assert open_table(path).version == v2

    # Malformed events went to the dead-letter sink with their coordinates and a reason;
    # so did updates of missing keys (refused by a tablet).
    bad = dlq.rows()
    reasons = [r["reason"] for r in bad]
    everything = phase1 + phase2
    assert sum("JSON" in r or "malformed" in r for r in reasons) == sum(
        isinstance(e, str) for e in everything
    )
    assert sum("not a valid int32" in r for r in reasons) == sum(
        not isinstance(e, str) and isinstance((e.get("set") or {}).get("items"), str)
        for e in everything
    )
    assert sum("unknown column" in r for r in reasons) == sum(
        not isinstance(e, str) and "colour" in (e.get("set") or {}) for e in everything
    )
    assert len([r for r in reasons if "missing key" not in r]) == sum(
        is_malformed(e) for e in everything
    )
    assert sum(fn.dead_letters for fn in (fn, fn2)) == len(bad)
    for r in bad:
        assert r["topic"] == topic_name and r["offset"] >= 0 and r["value"]
        assert r["app_id"] == "orders-job"


def test_every_apply_mode_and_decode_place_builds_identical_tables(
    spark: Any, kafka: Any, topic_name: str, tmp_path: Path
) -> None:
    kafka.create_topic(topic_name, 3)
    events = make_events(random.Random(11), 2000, 1, range(250))
    produce(kafka.bootstrap_servers, topic_name, events)
    tables = {}
    dead = {}
    # "bulk": the first micro-batch's events for each (empty) bucket are written as a
    # snapshot of the bucket, not as a WAL segment (TableOptions.bulk_events).
    # "driver-tasks": driver mode with the decode in Spark tasks (decode_in="executors").
    # "aligned": executors mode told the topic is bucket-partitioned when it is not (keys
    # hashed by murmur2): every batch is found split, rolled back and shuffled.
    for mode, decoder in (
        ("driver", "python"),
        ("driver-tasks", "python"),
        ("executors", "python"),
        ("driver", "jvm"),
        ("driver", "bulk"),
        ("driver-tasks", "bulk"),
        ("executors", "bulk"),
        ("aligned", "python"),
    ):
        path = str(tmp_path / f"{mode}-{decoder}")
        fn = sink(
            path,
            schema=SCHEMA,
            options=SinkOptions(
                app_id=f"job-{mode}",
                apply_mode={"driver-tasks": "driver", "aligned": "executors"}.get(mode, mode),
                table=TableOptions(bulk_events=20) if decoder == "bulk" else None,
                bucket_partitioned=mode == "aligned",
                decode=DecodeOptions(
                    where="executors" if mode == "driver-tasks" else None,
                    json_decoder="python" if decoder == "bulk" else decoder,
                ),
            ),
        )
        q = start_query(
            spark, kafka.bootstrap_servers, topic_name, fn, tmp_path / f"ck-{mode}-{decoder}"
        )
        q.processAllAvailable()
        q.stop()
        assert fn.misaligned_batches == (3 if mode == "aligned" else 0)
        t = open_table(path)
        tables[mode, decoder] = table_to_rows(t.read(), ["order_id"])
        dead[mode, decoder] = fn.dead_letters
        bulk = [
            b
            for e in t.log.entries()
            if e.kind == "data"
            for b, ref in e.buckets.items()
            if ref.segment is None and ref.snapshot
        ]
        assert (len(bulk) >= SCHEMA.num_buckets) == (decoder == "bulk"), (mode, decoder, bulk)
    first = tables["driver", "python"]
    for key, got in tables.items():  # the modes agree with each other ...
        wrong = [k for k in set(got) | set(first) if got.get(k) != first.get(k)]
        assert not wrong, (
            f"{key} and driver/python disagree on {len(wrong)} keys: "
            f"{[(k, got.get(k), first.get(k)) for k in wrong[:3]]}"
        )
    want = expected(events)
    for key, got in tables.items():  # ... and with the model
        wrong = {
            k: (got.get(k), want.get(k)) for k in set(got) | set(want) if got.get(k) != want.get(k)
        }
        assert not wrong, f"{key}: {len(wrong)} rows differ, e.g. {list(wrong.items())[:3]}"
    assert len(set(dead.values())) == 1, dead  # every path refuses the same events


@pytest.mark.parametrize("decoder", ["python", "jvm"])
def test_a_bucket_partitioned_topic_is_prepared_where_it_is_read(
    spark: Any, kafka: Any, topic_name: str, tmp_path: Path, decoder: str
) -> None:
    """The producer SDK's bucket partitioner on 2 partitions of a 3-bucket table: each
    batch is decoded and prepared in the tasks that read it (no batch found split), the
    records refused (malformed ones, on any partition, and updates of no row) are the
    dead letters driver mode sends, and the table is the model's."""
    from cdc_sink.kafka.producer import CdcProducer

    kafka.create_topic(topic_name, 2)
    events = make_events(random.Random(5), 1500, 1, range(200))
    with CdcProducer(
        kafka.bootstrap_servers, topic_name, SCHEMA, partitioner="bucket", stamp_ts=False
    ) as p:
        for e in events:
            if isinstance(e, str) or is_malformed(e):
                p.send_raw(b"bad", e.encode() if isinstance(e, str) else json.dumps(e).encode())
            else:
                p.send(e)
    letters = {}
    for mode in ("driver", "executors"):
        dlq = Collect()
        fn = sink(
            tmp_path / mode,
            schema=SCHEMA,
            dead_letter=dlq,
            options=SinkOptions(
                apply_mode=mode,
                bucket_partitioned=mode == "executors",
                decode=DecodeOptions(json_decoder=decoder),
            ),
        )
        q = start_query(spark, kafka.bootstrap_servers, topic_name, fn, tmp_path / f"ck-{mode}")
        q.processAllAvailable()
        q.stop()
        assert fn.misaligned_batches == 0
        letters[mode] = sorted((r["partition"], r["offset"]) for r in dlq.rows())
        assert len(letters[mode]) == fn.dead_letters
    t = open_table(tmp_path / "executors")
    got = table_to_rows(t.read(), ["order_id"])
    want = expected(events)
    wrong = {
        k: (got.get(k), want.get(k)) for k in set(got) | set(want) if got.get(k) != want.get(k)
    }
    assert not wrong, f"{len(wrong)} rows differ, e.g. {list(wrong.items())[:3]}"
    assert letters["executors"] == letters["driver"]  # malformed, and updates of no row
    assert len(letters["driver"]) >= sum(map(is_malformed, events))
    ends = t.log.read(t.version).source_offsets[topic_name]
    assert sorted(ends) == ["0", "1"] and sum(ends.values()) == len(events)


def test_batch_query_of_a_version_is_repeatable_while_the_stream_commits(
    spark: Any, kafka: Any, topic_name: str, tmp_path: Path
) -> None:
    import threading

    from cdc_sink.spark import register

    register(spark)
    kafka.create_topic(topic_name, 3)
    rng = random.Random(5)
    first = make_events(rng, 800, 1, range(200))
    produce(kafka.bootstrap_servers, topic_name, first)
    path = str(tmp_path / "t")
    fn = sink(path, schema=SCHEMA, options=SinkOptions(app_id="live"))
    df = kafka_stream(spark, kafka.bootstrap_servers, topic_name, max_offsets=200)
    q = (
        df.writeStream.foreachBatch(fn)
        .trigger(processingTime="200 milliseconds")
        .option("checkpointLocation", str(tmp_path / "ck"))
        .start()
    )
    try:
        q.processAllAvailable()
        v = open_table(path).version

        def read_v() -> list[Any]:
            return sorted(
                spark.read.format("cdc_sink")
                .option("versionAsOf", v)
                .load(path)
                .toArrow()
                .to_pylist(),
                key=lambda r: r["order_id"],
            )

        reference = read_v()
        more = threading.Thread(
            target=produce,
            args=(kafka.bootstrap_servers, topic_name, make_events(rng, 2000, 10_000, range(200))),
        )
        more.start()
        reads = [read_v() for _ in range(4)]
        more.join()
        q.processAllAvailable()
        assert open_table(path).version > v  # the stream kept committing meanwhile
        assert all(r == reference for r in reads)
        assert reference == sorted(
            (dict(r) for r in open_table(path).read(version=v).to_pylist()),
            key=lambda r: r["order_id"],
        )
    finally:
        q.stop()
