"""Unit tests of the demo's orders stream and its reference applier (no Kafka, no Spark).

(They live beside the producer tests: the demo is the producer SDK's main user.)
"""

from __future__ import annotations

import collections
import json
from pathlib import Path

import pytest

import cdc_sink
from cdc_sink.cli import build_parser, parse_timestamp
from cdc_sink.kafka.producer import event_keys
from cdc_sink_testkit.demo import (
    ORDERS_SCHEMA,
    ExpectedTable,
    diff_rows,
    generate_orders,
    orders_schema,
)

REPO = Path(__file__).resolve().parents[2]


def test_schema_file_of_the_streaming_job_is_the_demo_schema() -> None:
    with open(REPO / "streaming_jobs" / "orders_schema.json") as f:
        on_disk = json.load(f)
    assert cdc_sink.TableSchema.from_dict(on_disk) == orders_schema()
    assert on_disk == ORDERS_SCHEMA


def test_stream_is_deterministic_from_the_seed() -> None:
    assert generate_orders(3000, seed=11) == generate_orders(3000, seed=11)
    assert generate_orders(3000, seed=11) != generate_orders(3000, seed=12)


def test_stream_has_every_kind_of_change() -> None:
    recs = generate_orders(5000, seed=3)
    kinds = collections.Counter(r.kind for r in recs)
    ops = collections.Counter(r.event["op"] for r in recs if r.kind == "valid")
    assert set(kinds) == {
        "valid",
        "stale",
        "bad_json",
        "unknown_column",
        "wrong_type",
        "missing_key",
    }
    assert 30 <= sum(r.malformed for r in recs) <= 70
    assert set(ops) == {"insert", "update", "upsert", "delete"}
    partial = [r.event for r in recs if r.event["op"] == "update" and r.kind == "valid"]
    assert all(set(e["set"]) < set(orders_schema().names) for e in partial)


def test_valid_events_pass_the_producer_validation() -> None:
    recs = generate_orders(3000, seed=5)
    good = [r.event for r in recs if r.kind in ("valid", "stale", "missing_key")]
    assert len(event_keys(good, orders_schema())) == len(good)
    for r in recs:
        if r.kind in ("unknown_column", "wrong_type"):
            with pytest.raises(ValueError):
                event_keys([r.event], orders_schema())


@pytest.mark.parametrize("style", ["partial", "full_rows"])
def test_expected_state_equals_the_engine(tmp_path: Path, style: str) -> None:
    recs = generate_orders(4000, seed=9, style=style)  # type: ignore[arg-type]
    schema = orders_schema()
    expected = ExpectedTable(schema)
    table = cdc_sink.create_table(tmp_path / "t", schema)
    half = len(recs) // 2
    snaps = []
    for part in (recs[:half], recs[half:]):
        expected.apply_all(r.event if r.decodable else None for r in part)
        table.apply([r.event for r in part if r.decodable])
        snaps.append(expected.snapshot())
    for version, snap in enumerate(snaps, 1):
        assert diff_rows(snap, table.read(version=version).to_pylist(), schema) == []
    n_bad = sum(r.malformed for r in recs)
    assert expected.counts["rejected"] == n_bad
    assert expected.counts["stale"] == sum(r.kind == "stale" for r in recs)
    if style == "full_rows":
        assert {r.event["op"] for r in recs if r.kind == "valid"} == {"upsert", "delete"}


def test_full_rows_malformed_changes_carry_the_whole_row() -> None:
    """A Debezium connector sends whole rows, so a malformed change in ``full_rows`` style
    must too: formats that carry full rows (Avro) can only encode it that way."""
    recs = generate_orders(3000, seed=5, style="full_rows")
    columns = {c.name for c in orders_schema().columns} - {"order_id"}
    bad = [r for r in recs if r.kind in ("bad_json", "unknown_column", "wrong_type")]
    assert {r.kind for r in bad} == {"bad_json", "unknown_column", "wrong_type"}
    for r in bad:
        assert r.event["op"] == "upsert"
        assert columns <= set(r.event["set"]), r


def test_reference_applier_semantics() -> None:
    schema = orders_schema()
    t = ExpectedTable(schema)
    k = {"order_id": 1}
    assert t.apply({"op": "update", "key": k, "set": {"items": 1}, "seq": 1}) == "rejected"
    assert t.apply({"op": "upsert", "key": k, "set": {"items": 1}, "seq": 2}) == "inserted"
    assert t.row((1,))["status"] == "new"  # the default
    assert t.apply({"op": "update", "key": k, "set": {"status": None}, "seq": 3}) == "updated"
    assert t.row((1,))["status"] is None  # absent is not null; null is a real update
    assert t.apply({"op": "insert", "key": k, "set": {"items": 5}, "seq": 2}) == "stale"
    assert t.apply({"op": "delete", "key": k, "seq": 4}) == "deleted"
    assert t.apply({"op": "insert", "key": k, "set": {}, "seq": 3}) == "stale"  # tombstone
    assert t.apply({"op": "delete", "key": k, "seq": 5}) == "ignored"
    assert t.apply({"op": "insert", "key": k, "set": {"amount": "1.5"}, "seq": 6}) == "inserted"
    assert str(t.row((1,))["amount"]) == "1.50"
    assert t.apply(None) == "rejected"
    assert t.apply({"op": "upsert", "key": k, "set": {"items": "3"}, "seq": 7}) == "rejected"
    assert t.apply({"op": "upsert", "key": k, "set": {}}) == "rejected"  # no seq


def test_diff_rows_describes_differences() -> None:
    schema = orders_schema()
    t = ExpectedTable(schema)
    for i in (1, 2):
        t.apply({"op": "insert", "key": {"order_id": i}, "set": {"items": i}, "seq": i})
    rows = t.to_arrow().to_pylist()
    assert diff_rows(t.snapshot(), rows, schema) == []
    rows[0]["items"] = 9
    out = diff_rows(t.snapshot(), [rows[0], {**rows[1], "order_id": 3}], schema)
    assert any("missing row (2,)" in d for d in out)
    assert any("unexpected row (3,)" in d for d in out)
    assert any("row (1,) differs in ['items']" in d for d in out)


def test_cli_parser() -> None:
    args = build_parser().parse_args(
        ["demo", "--events", "100", "--format", "rowv2", "--apply-mode", "executors"]
    )
    assert (args.events, args.format, args.apply_mode) == (100, "rowv2", "executors")
    args = build_parser().parse_args(["query", "/t", "--timestamp", "1700000000000"])
    assert parse_timestamp(args.timestamp) == 1_700_000_000_000
    assert parse_timestamp("2025-03-01T00:00:00").tzinfo is not None
    with pytest.raises(SystemExit):
        build_parser().parse_args(["query", "/t", "--version", "1", "--timestamp", "1"])


def test_cli_query_and_versions(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from cdc_sink.cli import main

    table = cdc_sink.create_table(tmp_path / "t", orders_schema())
    table.apply([{"op": "insert", "key": {"order_id": 1}, "set": {"items": 2}, "seq": 1}])
    table.apply([{"op": "insert", "key": {"order_id": 2}, "set": {"items": 3}, "seq": 1}])
    assert main(["versions", str(tmp_path / "t")]) == 0
    assert main(["query", str(tmp_path / "t"), "--version", "1"]) == 0
    out = capsys.readouterr().out
    assert "at version 1: 1 rows" in out
    assert main(["query", str(tmp_path / "t"), "--version", "9"]) == 1
    assert "not readable" in capsys.readouterr().err
