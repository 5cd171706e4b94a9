"""Unit tests of the producer SDK without a broker: keys, validation, backends, errors."""

from __future__ import annotations

import datetime as dt
import decimal
import json
from typing import Any

import pytest

from cdc_sink.formats import FORMATS
from cdc_sink.kafka.producer import (
    DeliveryError,
    DeliveryFailure,
    encode_key,
    event_keys,
    resolve_backend,
)
from cdc_sink.schema import TableSchema

# debezium-avro needs a schema registry: its own tests are tests/formats/test_avro_*.py
SELF_CONTAINED = tuple(f for f in FORMATS if f != "debezium-avro")

ORDERS = TableSchema.from_dict(
    {
        "columns": [
            {"name": "order_id", "type": "int64", "nullable": False},
            {"name": "status", "type": "string", "default": "new"},
            {"name": "amount", "type": "decimal128(12, 2)"},
            {"name": "items", "type": "int32"},
            {"name": "seq", "type": "int64"},
        ],
        "primary_key": ["order_id"],
        "num_buckets": 4,
        "sequence_column": "seq",
    }
)

COMPOSITE = TableSchema.from_dict(
    {
        "columns": [
            {"name": "region", "type": "string", "nullable": False},
            {"name": "day", "type": "date32", "nullable": False},
            {"name": "price", "type": "decimal128(10, 3)", "nullable": False},
            {"name": "n", "type": "int64"},
        ],
        "primary_key": ["region", "day", "price"],
    }
)


def _ev(
    op: str = "upsert", key: Any = 1, sets: dict[str, Any] | None = None, seq: int | None = 1
) -> dict[str, Any]:
    e: dict[str, Any] = {"op": op, "key": {"order_id": key} if not isinstance(key, dict) else key}
    if sets is not None:
        e["set"] = sets
    if seq is not None:
        e["seq"] = seq
    return e


def test_key_is_json_of_key_values_in_key_order() -> None:
    assert encode_key([42]) == b"[42]"
    assert encode_key(["eu", 7]) == b'["eu",7]'
    assert json.loads(encode_key(["ü", None])) == ["ü", None]


def test_key_encodes_decimal_date_timestamp_and_binary_canonically() -> None:
    ts = dt.datetime(2025, 3, 1, 10, 0, tzinfo=dt.timezone(dt.timedelta(hours=1)))
    key = encode_key([decimal.Decimal("1.50"), dt.date(2025, 3, 1), ts, b"\x00\xff"])
    assert json.loads(key) == ["1.50", "2025-03-01", "2025-03-01T09:00:00", "AP8="]


def test_same_key_gives_same_bytes_whatever_the_event() -> None:
    events = [
        _ev("insert", 7, {"status": "new"}, 1),
        _ev("update", 7, {"items": 3}, 2),
        _ev("delete", 7, None, 3),
        {"op": "upsert", "key": 7, "set": {}, "seq": 4},
    ]
    keys = event_keys(events, ORDERS)
    assert keys == [b"[7]"] * 4


def test_key_values_are_cast_to_the_key_types_before_encoding() -> None:
    events = [
        {"op": "upsert", "key": {"region": "eu", "day": "2025-03-01", "price": p}, "set": {"n": 1}}
        for p in ("1.5", 1.5, "1.500", decimal.Decimal("1.50"))
    ]
    keys = event_keys(events, COMPOSITE)
    assert len(set(keys)) == 1
    assert json.loads(keys[0]) == ["eu", "2025-03-01", "1.500"]


def test_key_order_follows_primary_key_not_dict_order() -> None:
    a = {"op": "upsert", "key": {"price": "2", "day": "2025-01-02", "region": "us"}, "set": {}}
    assert json.loads(event_keys([a], COMPOSITE)[0]) == ["us", "2025-01-02", "2.000"]


@pytest.mark.parametrize(
    ("event", "needle"),
    [
        (_ev("update", 1, {"coupon": "X"}, 1), "unknown column 'coupon'"),
        (_ev("update", 1, {"items": "three"}, 1), "'items'"),
        (_ev("update", 1, {"order_id": 2}, 1), "key column 'order_id' inside 'set'"),
        (_ev("update", 1, {"items": 1}, None), "seq is missing"),
        (_ev("rename", 1, {}, 1), "unknown op 'rename'"),
        (_ev("update", {"order": 1}, {}, 1), "unknown key column 'order'"),
        ({"op": "delete", "seq": 3}, "no 'key'"),
        ({**_ev("upsert", 1, {}, 1), "payload": {}}, "unknown field(s) ['payload']"),
        (_ev("update", 1, {"items": 2**40}, 1), "'items'"),
    ],
)
def test_invalid_events_raise_value_error_naming_the_problem(
    event: dict[str, Any], needle: str
) -> None:
    with pytest.raises(ValueError) as info:
        event_keys([event], ORDERS)
    assert needle in str(info.value)


def test_the_error_names_the_index_of_the_first_bad_event() -> None:
    events = [_ev("upsert", 1, {}, 1), _ev("upsert", 2, {"nope": 1}, 2)]
    with pytest.raises(ValueError, match=r"event #1 \(key \{'order_id': 2\}\)"):
        event_keys(events, ORDERS)


def test_without_validation_only_keys_are_read() -> None:
    events = [_ev("update", 5, {"coupon": "X"}, None)]
    assert event_keys(events, ORDERS, validate=False) == [b"[5]"]


def test_ts_ms_is_an_allowed_event_field() -> None:
    assert event_keys([{**_ev("upsert", 1, {}, 1), "ts_ms": 1}], ORDERS) == [b"[1]"]


def test_backend_resolution() -> None:
    assert resolve_backend("auto") == "confluent"
    assert resolve_backend("confluent") == "confluent"
    assert resolve_backend("kafka-python") == "kafka-python"
    with pytest.raises(ValueError, match="backend must be"):
        resolve_backend("librdkafka")  # type: ignore[arg-type]


def test_auto_backend_falls_back_to_kafka_python(monkeypatch: pytest.MonkeyPatch) -> None:
    import builtins

    real_import = builtins.__import__

    def no_confluent(name: str, *args: Any, **kwargs: Any) -> Any:
        if name == "confluent_kafka" or name.startswith("confluent_kafka."):
            raise ImportError("no confluent_kafka here")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_confluent)
    assert resolve_backend("auto") == "kafka-python"
    with pytest.raises(ImportError):
        resolve_backend("confluent")


def test_delivery_error_is_a_cdc_sink_error_and_lists_failures() -> None:
    from cdc_sink.errors import CdcSinkError

    f = DeliveryFailure(topic="t", key=b"[1]", error="too large", code="MSG_SIZE_TOO_LARGE")
    err = DeliveryError([f, f])
    assert isinstance(err, CdcSinkError)
    assert err.failures == [f, f]
    assert "2 record(s)" in str(err) and "MSG_SIZE_TOO_LARGE" in str(err)


def test_producer_rejects_unknown_format() -> None:
    from cdc_sink.kafka.producer import CdcProducer

    with pytest.raises(ValueError, match="format must be"):
        CdcProducer("127.0.0.1:9", "t", ORDERS, format="avro")  # type: ignore[arg-type]


def test_unknown_format_is_an_invalid_option_naming_the_formats() -> None:
    from cdc_sink.errors import InvalidOption
    from cdc_sink.kafka.producer import CdcProducer, value_encoder

    with pytest.raises(
        InvalidOption,
        match=r"format must be one of \['json', 'debezium', "
        r"'rowv2', 'debezium-avro'\]",
    ):
        CdcProducer("127.0.0.1:9", "t", ORDERS, format="avro")  # type: ignore[arg-type]
    with pytest.raises(InvalidOption, match="unknown event format 'avro'"):
        value_encoder("avro", ORDERS)  # type: ignore[arg-type]


@pytest.mark.parametrize("fmt", SELF_CONTAINED)
def test_value_encoders_are_the_registry_encoders(fmt: str) -> None:
    from cdc_sink.formats import get_format
    from cdc_sink.kafka.producer import value_encoder

    events = [
        {"op": "insert", "key": {"order_id": 1}, "set": {"status": "new"}, "seq": 1},
        {"op": "update", "key": 1, "set": {"amount": decimal.Decimal("2.50")}, "seq": 2},
        {"op": "delete", "key": {"order_id": 1}, "seq": 3, "ts_ms": 5},
    ]
    for envelope in (True, False):
        encode = value_encoder(fmt, ORDERS, debezium_envelope=envelope)  # type: ignore[arg-type]
        options = {"envelope": envelope} if fmt == "debezium" else {}
        assert [encode(e) for e in events] == get_format(fmt).encode(events, ORDERS, **options)


def test_debezium_values_map_native_ops_onto_connector_events() -> None:
    from cdc_sink.kafka.producer import value_encoder

    encode = value_encoder("debezium", ORDERS, debezium_envelope=False)
    ins = json.loads(
        encode({"op": "insert", "key": {"order_id": 1}, "set": {"items": 2}, "seq": 4, "ts_ms": 9})
    )
    assert (ins["op"], ins["before"], ins["after"], ins["ts_ms"]) == (
        "c",
        None,
        {"order_id": 1, "items": 2, "seq": 4},
        9,
    )
    upd = json.loads(encode({"op": "upsert", "key": 1, "set": {"status": "x"}}))
    assert (upd["op"], upd["after"]) == ("u", {"order_id": 1, "status": "x"})
    dele = json.loads(encode({"op": "delete", "key": {"order_id": 1}, "seq": 5}))
    assert (dele["op"], dele["before"], dele["after"]) == ("d", {"order_id": 1, "seq": 5}, None)
    enveloped = json.loads(
        value_encoder("debezium", ORDERS)({"op": "delete", "key": {"order_id": 1}, "seq": 5})
    )
    assert set(enveloped) == {"schema", "payload"} and enveloped["payload"]["op"] == "d"
