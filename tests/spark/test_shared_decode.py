"""Tables of one schema decoded together (cdc_sink.spark._shared_decode): each table's
share of the joint decode equals decoding its records alone, whatever the records
(updates, deletes, tombstones, malformed values, a second envelope schema), and the
envelope schemas of many tables' events, one table after another, are cut off each
table's events. Through the router: tables of one schema, each equal to its model, in
both decode placements.

The messages are the router tests' (Debezium's documented MySQL event, renamed).
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cdc_sink.formats import Decoded, get_decoder
from cdc_sink.formats._arrays import binary_parts
from cdc_sink.formats._debezium_schema import strip_shared_schema
from cdc_sink.schema import Column, TableSchema
from cdc_sink.spark._shared_decode import (
    SharedInput,
    decode_passes,
    decode_shared,
    split_decoded,
)
from tests.spark.test_database_router import CUSTOMERS, batch, customer, message, rows_of, sink

SCHEMA = TableSchema(
    columns=(
        Column(0, "id", pa.int32(), nullable=False),
        Column(1, "first_name", pa.string()),
        Column(2, "last_name", pa.string()),
        Column(3, "email", pa.string()),
    ),
    primary_key=("id",),
    num_buckets=2,
)
WIDER = [*CUSTOMERS[:3], ("email", "string", True)]  # a second envelope schema, same table
DEC = get_decoder("debezium")


def _messages(rng: random.Random, table: str, n: int) -> list[tuple[bytes | None, bytes | None]]:
    """``n`` messages of ``table``: inserts, updates, deletes with their tombstones,
    malformed values, and events of a second envelope schema."""
    out: list[tuple[bytes | None, bytes | None]] = []
    for _ in range(n):
        i, kind = rng.randrange(50), rng.random()
        if kind < 0.5:
            out.append(message(table, CUSTOMERS, "c", customer(i)))
        elif kind < 0.7:
            out.append(message(table, CUSTOMERS, "u", customer(i, email="new"), before=customer(i)))
        elif kind < 0.8:
            key, value = message(table, CUSTOMERS, "d", None, before=customer(i))
            out += [(key, value), (key, None)]
        elif kind < 0.9:
            out.append(message(table, WIDER, "c", customer(i)))
        else:
            key, value = message(table, CUSTOMERS, "c", customer(i))
            out.append((key, value[: rng.randrange(5, len(value))]))  # cut short: refused
    return out


def _raw(messages: list[tuple[bytes | None, bytes | None]]) -> pa.Table:
    """The decoder's input columns of ``messages`` (malformed ones too)."""
    return pa.table(
        {
            "key": pa.array([k for k, _ in messages], pa.binary()),
            "value": pa.array([v for _, v in messages], pa.binary()),
        }
    )


def _decode(raw: pa.Table) -> Decoded:
    return DEC.decode_with_meta(
        raw.column("value"),
        SCHEMA,
        position=np.arange(raw.num_rows, dtype=np.int64),
        keys=raw.column("key"),
    )


def _same(a: Decoded, b: Decoded) -> None:
    assert a.batch.positions.tolist() == b.batch.positions.tolist()
    assert a.batch.to_arrow().equals(b.batch.to_arrow())
    assert a.rejects.as_dict() == b.rejects.as_dict()
    assert a.skipped == b.skipped
    ts = [None if d.ts_ms is None else d.ts_ms.tolist() for d in (a, b)]
    assert ts[0] == ts[1] or ts[0] is None or ts[1] is None


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**31), sizes=st.lists(st.integers(0, 40), min_size=2, max_size=6))
def test_a_tables_share_of_a_joint_decode_equals_its_decode_alone(
    seed: int, sizes: list[int]
) -> None:
    rng = random.Random(seed)
    raws = [_raw(_messages(rng, f"t{k}", n)) for k, n in enumerate(sizes)]
    items = [SharedInput(f"t{k}", raw, SCHEMA) for k, raw in enumerate(raws)]
    calls: list[int] = []

    def submit(raw: pa.Table, schema: TableSchema) -> Any:
        calls.append(raw.num_rows)
        return lambda: _decode(raw)

    shared = decode_shared(items, submit)
    assert calls == [sum(r.num_rows for r in raws)]  # one pass for every table
    for it in items:
        _same(shared[it.name][0], _decode(it.raw))


def test_tables_of_another_schema_or_alone_are_left_to_their_writers() -> None:
    rng = random.Random(7)
    other = TableSchema(SCHEMA.columns[:3], ("id",), num_buckets=2)
    items = [
        SharedInput("a", _raw(_messages(rng, "a", 5)), SCHEMA),
        SharedInput("b", _raw(_messages(rng, "b", 5)), SCHEMA),
        SharedInput("c", _raw(_messages(rng, "c", 5)), other),
    ]
    shared = decode_shared(items, lambda raw, schema: lambda: _decode(raw))
    assert sorted(shared) == ["a", "b"]


def test_a_decode_with_messages_it_cannot_attribute_is_not_split() -> None:
    raw = _raw([message("a", CUSTOMERS, "c", customer(1))] * 2)
    dec = _decode(raw)
    assert split_decoded(dec, [1, 1], [SCHEMA, SCHEMA]) is not None
    odd = Decoded(dec.batch, dec.rejects, dec.ts_ms, skipped=dec.skipped, messages=1)
    assert split_decoded(odd, [1, 1], [SCHEMA, SCHEMA]) is None


def test_each_tables_envelope_schema_is_cut_off_its_run_of_events() -> None:
    tables = [f"t{k}" for k in range(6)]
    values = [message(t, CUSTOMERS, "c", customer(i))[1] for t in tables for i in range(5)]
    parts, shared = strip_shared_schema(binary_parts(pa.array(values, pa.binary())))
    assert shared is not None and shared.mask.all()
    assert len(shared.schemas) == len(tables)
    assert shared.ids.tolist() == [k for k in range(len(tables)) for _ in range(5)]
    heads = [parts.data[s : s + 12].tobytes().replace(b" ", b"") for s in parts.starts]
    assert all(h.startswith(b'{"payload":') for h in heads)


@pytest.fixture
def passes(monkeypatch: pytest.MonkeyPatch) -> list[list[int]]:
    """The router's shared decode passes, each as its tables' count, batch after batch."""
    import cdc_sink.spark.database as database

    seen: list[list[int]] = []

    def counted(plan: Any, submit: Any, **kw: Any) -> Any:
        seen.append([len(p) for p in plan])
        return decode_passes(plan, submit, **kw)

    monkeypatch.setattr(database, "decode_passes", counted)
    return seen


@pytest.mark.parametrize("processes", [0, 1])
def test_the_router_decodes_tables_of_one_schema_together_and_each_equals_its_model(
    tmp_path: Path, processes: int, passes: list[list[int]]
) -> None:
    rng = random.Random(3)
    tables = [f"shard{k}" for k in range(5)]
    model: dict[str, dict[int, dict[str, Any]]] = {t: {} for t in tables}
    router = sink(tmp_path, processes)
    try:
        for b in range(3):
            msgs = []
            for t in tables:
                for _ in range(rng.randrange(1, 12)):
                    i = rng.randrange(20)
                    if rng.random() < 0.2 and i in model[t]:
                        msgs.append(message(t, CUSTOMERS, "d", None, before=model[t].pop(i)))
                    else:
                        model[t][i] = customer(i, email=f"{b}-{rng.random()}")
                        msgs.append(message(t, CUSTOMERS, "c", model[t][i]))
            st = router.write_rows(batch(msgs, start=1000 * b), b)
            assert {"route", "open", "decode", "write"} <= set(st.phases)
    finally:
        router.close()
    assert passes and passes[-1] == [len(tables)]  # every table's records in one pass
    for t in tables:
        want = sorted(model[t].values(), key=lambda r: r["id"])
        assert rows_of(tmp_path, f"inventory.{t}", "id") == want


def test_events_whose_schemas_differ_before_the_sampled_bytes_keep_their_own() -> None:
    """Blocks are found by the end of their prefix (a sample); every cut event's whole
    prefix is then compared, so a schema differing earlier is never given another's."""
    wide = [("id", "int64", False), *CUSTOMERS[1:]]
    first = [message("a", CUSTOMERS, "c", customer(i))[1] for i in range(4)]
    second = [message("a", wide, "c", customer(i))[1] for i in range(4, 8)]
    values = pa.array(first + second, pa.binary())
    _, shared = strip_shared_schema(binary_parts(values))
    assert shared is not None and shared.mask[:4].all()
    assert not (shared.ids[4:] == shared.ids[0]).any()
    both = _decode(_raw([(None, v) for v in first + second]))
    alone = [_decode(_raw([(None, v) for v in half])) for half in (first, second)]
    assert both.batch.to_arrow().to_pylist() == [
        r for d in alone for r in d.batch.to_arrow().to_pylist()
    ]


@pytest.mark.usefixtures("schema_registry")
def test_avro_tables_of_one_schema_are_decoded_together_and_each_equals_its_model(
    tmp_path: Path, schema_registry: Any, passes: list[list[int]]
) -> None:
    """The same through the registry: each table's writer schema has its own id."""
    from tests.spark.test_database_router_avro import avro_message, avro_sink
    from tests.spark.test_database_router_avro import raw as avro_raw

    url = schema_registry.url
    tables = [f"avro_shard{k}" for k in range(4)]
    msgs, names = [], []
    for t in tables:
        for i in range(3):
            msgs.append(avro_message(url, t, CUSTOMERS, customer(i, email=f"{t}-{i}")))
            names.append(t)
    router = avro_sink(tmp_path, url)
    try:
        st = router.write_rows(avro_raw(msgs, names), 0)
    finally:
        router.close()
    assert set(st.tables.values()) == {"committed"}
    assert passes == [[len(tables)]]
    for t in tables:
        want = [customer(i, email=f"{t}-{i}") for i in range(3)]
        assert rows_of(tmp_path, f"inventory.{t}", "id") == want
