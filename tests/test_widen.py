"""Lossless column widening (TableSchema.widen_column, Table.widen_column) and columns
added with a default, end to end: rows written before the change read the new type (or
the default) in memory, after a restart that replays the WAL, after a snapshot that
mixes pages of both types, through point reads, filters and the change feed; versions
before the change keep their own schema; refused widenings raise SchemaError."""

from __future__ import annotations

import decimal
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import cdc_sink.storage.protocol as protocol
from cdc_sink.engine import core_of
from cdc_sink.errors import SchemaError, UnsupportedTableVersion
from cdc_sink.schema import TableSchema, is_widening, parse_type, type_to_str
from cdc_sink.storage.layout import TABLE_FILE
from cdc_sink.table import Table, TableOptions, create_table, open_table
from cdc_sink.tablet.column import LazyPage

OPTS = TableOptions.for_tests()  # pages of 8 rows, frequent snapshots
D = decimal.Decimal

#: (old type, new type, a value of the old type, a value only the new type holds)
WIDENINGS = [
    ("int8", "int16", -128, 30_000),
    ("int8", "int64", 127, -(2**63)),
    ("int16", "int32", -32_768, 2**31 - 1),
    ("int16", "int64", 32_767, 2**40),
    ("int32", "int64", 2**31 - 1, 2**62),
    ("float32", "float64", 0.5, 1e300),
    ("decimal128(5, 2)", "decimal128(12, 2)", D("-999.99"), D("1234567890.12")),
    ("decimal128(5, 2)", "decimal128(38, 2)", D("123.45"), D("1" + "0" * 30 + ".25")),
]

REFUSED = [
    ("int64", "int32"),  # narrowing
    ("int32", "int32"),  # no change
    ("int32", "float64"),  # another kind
    ("float64", "float32"),
    ("float32", "int64"),
    ("decimal128(5, 2)", "decimal128(12, 3)"),  # another scale
    ("decimal128(12, 2)", "decimal128(5, 2)"),
    ("int16", "decimal128(10, 0)"),
    ("date32", "timestamp[us, UTC]"),
    ("string", "binary"),
]


def _schema(old: str, *, key: str = "int64") -> dict[str, Any]:
    return {
        "columns": [
            {"name": "k", "type": key, "nullable": False},
            {"name": "v", "type": old},
            {"name": "w", "type": "string"},
        ],
        "primary_key": ["k"],
        "num_buckets": 2,
    }


def _rows(t: pa.Table) -> dict[int, dict[str, Any]]:
    return {r["k"]: r for r in t.to_pylist()}


# ---------------------------------------------------------------------- the schema
@pytest.mark.parametrize(("old", "new", "small", "big"), WIDENINGS)
def test_widen_column_keeps_the_id_and_default_and_bumps_schema_id(
    old: str, new: str, small: Any, big: Any
) -> None:
    s = TableSchema.from_dict(
        {
            **_schema(old),
            "columns": [
                *_schema(old)["columns"][:1],
                {"name": "v", "type": old, "nullable": False, "default": small},
            ],
        }
    )
    w = s.widen_column("v", new)
    assert w.column("v").type == parse_type(new)
    assert w.column("v").id == s.column("v").id
    assert w.column("v").default.as_py() == small
    assert w.column("v").default.type == parse_type(new)
    assert (w.schema_id, w.next_column_id) == (s.schema_id + 1, s.next_column_id)
    assert TableSchema.from_dict(w.to_dict()) == w
    assert s.widen_column("v", parse_type(new)) == w  # an Arrow type works too


@pytest.mark.parametrize(("old", "new"), REFUSED)
def test_a_change_that_is_not_a_widening_is_refused_naming_column_and_types(
    old: str, new: str
) -> None:
    s = TableSchema.from_dict(_schema(old))
    with pytest.raises(SchemaError) as err:
        s.widen_column("v", new)
    msg = str(err.value)
    assert "'v'" in msg
    assert type_to_str(parse_type(old)) in msg and type_to_str(parse_type(new)) in msg
    assert not is_widening(parse_type(old), parse_type(new))


@pytest.mark.parametrize(
    ("key", "new"), [("int8", "int16"), ("int16", "int32"), ("int32", "int64")]
)
def test_a_key_column_is_never_widened(key: str, new: str) -> None:
    """Keys are hashed by their stored width (the key index's SipHash of the key's bytes;
    Spark's xxhash64 for int64 differs from that of int32), so rows would move."""
    s = TableSchema.from_dict(_schema("int8", key=key))
    with pytest.raises(SchemaError, match=rf"key column 'k' from {key} to {new}"):
        s.widen_column("k", new)


def test_widening_a_missing_column_or_to_an_unknown_type_is_refused() -> None:
    s = TableSchema.from_dict(_schema("int8"))
    with pytest.raises(SchemaError, match="'nope'"):
        s.widen_column("nope", "int64")
    with pytest.raises(SchemaError, match="column 'v' from int8 to int128: unsupported"):
        s.widen_column("v", "int128")
    with pytest.raises(SchemaError, match="column 'v' from int8 to uint64: unsupported"):
        s.widen_column("v", pa.uint64())


# ---------------------------------------------------------------------- the table
def _build(root: Path, old: str, new: str, small: Any, big: Any) -> tuple[Table, dict[str, Any]]:
    """A table whose column ``v`` was widened from ``old`` to ``new``: pages snapshotted
    and deltas in the WAL before the widening, rows written after it with values only
    the new type holds. Returns the table and what each version should read."""
    t = create_table(root, _schema(old), options=OPTS)
    t.apply(
        [{"op": "insert", "key": {"k": i}, "set": {"v": small, "w": f"r{i}"}} for i in range(20)]
    )
    t.compact()  # pages of the old type in a snapshot
    t.apply([{"op": "update", "key": {"k": 3}, "set": {"v": None}}])  # a delta in the WAL
    before = t.version
    widened = t.widen_column("v", new)
    assert widened == before + 1
    t.apply(
        [
            {"op": "insert", "key": {"k": 100}, "set": {"v": big, "w": "new"}},
            {"op": "update", "key": {"k": 5}, "set": {"v": big}},
        ]
    )
    old_rows = {i: {"k": i, "v": None if i == 3 else small, "w": f"r{i}"} for i in range(20)}
    new_rows = {**old_rows, 5: {"k": 5, "v": big, "w": "r5"}, 100: {"k": 100, "v": big, "w": "new"}}
    return t, {"before": before, "widened": widened, "old_rows": old_rows, "new_rows": new_rows}


def _check(t: Table, old: str, new: str, want: dict[str, Any]) -> None:
    """Current, widened and older versions read with their own types and values."""
    cur = t.read()
    assert cur.schema.field("v").type == parse_type(new)
    assert _rows(cur) == want["new_rows"]
    at_widening = t.read(version=want["widened"])
    assert at_widening.schema.field("v").type == parse_type(new)
    assert _rows(at_widening) == want["old_rows"]
    older = t.read(version=want["before"])
    assert older.schema.field("v").type == parse_type(old)
    assert _rows(older) == want["old_rows"]
    got = t.get([{"k": 100}, {"k": 5}, {"k": 3}, {"k": 7}])
    assert got.schema.field("v").type == parse_type(new)
    assert _rows(got) == {k: want["new_rows"][k] for k in (100, 5, 3, 7)}
    got_old = t.get([{"k": 5}, {"k": 7}], version=want["before"])
    assert got_old.schema.field("v").type == parse_type(old)
    assert _rows(got_old) == {k: want["old_rows"][k] for k in (5, 7)}


def _stored_page_types(t: Table) -> set[pa.DataType]:
    """The Arrow types of the stored pages of ``v`` that the table's snapshots hold."""
    core = core_of(t)
    types = set()
    for b in range(t.schema.num_buckets):
        tablet = core.tablet(b)
        base = tablet.columns[t.schema.column("v").id].base_at(tablet.committed)
        for p in range(len(base.pages)):
            entry = base.page_entry(p)
            assert isinstance(entry, LazyPage)
            types.add(entry.loader().type)
    return types


@pytest.mark.parametrize(("old", "new", "small", "big"), WIDENINGS)
def test_widened_column_reads_old_and_new_values_in_memory_and_after_restarts(
    tmp_path: Path, old: str, new: str, small: Any, big: Any
) -> None:
    root = tmp_path / "t"
    t, want = _build(root, old, new, small, big)
    _check(t, old, new, want)
    _check(open_table(root, options=OPTS), old, new, want)  # snapshot + WAL replay
    t.compact()  # a snapshot of both types' pages (old ones reused)
    reopened = open_table(root, options=OPTS)
    assert _stored_page_types(reopened) == {parse_type(old), parse_type(new)}
    _check(reopened, old, new, want)
    reopened.apply([{"op": "update", "key": {"k": 1}, "set": {"v": big}}])  # written after
    assert _rows(open_table(root, options=OPTS).read())[1]["v"] == big


@pytest.mark.parametrize(("old", "new", "small", "big"), WIDENINGS)
def test_change_feed_across_a_widening_has_the_end_type(
    tmp_path: Path, old: str, new: str, small: Any, big: Any
) -> None:
    t, want = _build(tmp_path / "t", old, new, small, big)
    for table in (t, open_table(tmp_path / "t", options=OPTS)):
        feed = table.changes(0, table.version)
        assert feed.schema.field("v").type == parse_type(new)
        recs = feed.to_pylist()
        inserts = {r["k"]: r["v"] for r in recs if r["_change_type"] == "insert"}
        assert inserts == {**{i: small for i in range(20)}, 100: big}
        post = [r for r in recs if r["_change_type"] == "update_postimage"]
        assert {(r["k"], r["v"]) for r in post} == {(3, None), (5, big)}
        pre = {r["k"]: r["v"] for r in recs if r["_change_type"] == "update_preimage"}
        assert pre == {3: small, 5: small}
        # A feed ending before the widening keeps the old type.
        early = table.changes(0, want["before"])
        assert early.schema.field("v").type == parse_type(old)
        assert not any(r["_change_type"] == "schema" for r in recs)


def test_change_feed_from_stored_pre_images_across_a_widening(tmp_path: Path) -> None:
    opts = replace(OPTS, change_images=True, memory_versions=1)
    t = create_table(tmp_path / "t", _schema("int16"), options=opts)
    t.apply([{"op": "insert", "key": {"k": i}, "set": {"v": i}} for i in range(10)])
    t.widen_column("v", "int64")
    t.apply([{"op": "update", "key": {"k": 2}, "set": {"v": 2**40}}])
    feed = open_table(tmp_path / "t", options=opts).changes(t.version - 1, t.version)
    assert feed.schema.field("v").type == pa.int64()
    got = {(r["_change_type"], r["k"], r["v"]) for r in feed.to_pylist()}
    assert got == {("update_preimage", 2, 2), ("update_postimage", 2, 2**40)}


def test_filters_on_a_widened_column_use_old_page_statistics_correctly(tmp_path: Path) -> None:
    t, _ = _build(tmp_path / "t", "int16", "int64", 7, 2**40)
    t.compact()
    for table in (t, open_table(tmp_path / "t", options=OPTS)):
        big = table.read(filter=[("v", ">", 2**31)])
        assert sorted(big.column("k").to_pylist()) == [5, 100]
        small = table.read(filter=[("v", "=", 7)])
        assert sorted(small.column("k").to_pylist()) == [i for i in range(20) if i not in (3, 5)]


def test_widening_in_steps_with_snapshots_in_between(tmp_path: Path) -> None:
    """int8 pages, then int16 pages, under an int64 schema: every page is cast."""
    root = tmp_path / "t"
    t = create_table(root, _schema("int8"), options=OPTS)
    t.apply([{"op": "insert", "key": {"k": i}, "set": {"v": -100}} for i in range(10)])
    t.compact()
    t.widen_column("v", "int16")
    t.apply([{"op": "insert", "key": {"k": i}, "set": {"v": -30_000}} for i in range(10, 20)])
    v16 = t.compact()
    t.widen_column("v", "int64")
    t.apply([{"op": "insert", "key": {"k": 20}, "set": {"v": -(2**60)}}])
    want = {**dict.fromkeys(range(10), -100), **dict.fromkeys(range(10, 20), -30_000), 20: -(2**60)}
    for table in (t, open_table(root, options=OPTS)):
        cur = table.read()
        assert cur.schema.field("v").type == pa.int64()
        assert {k: r["v"] for k, r in _rows(cur).items()} == want
        mid = table.read(version=v16)
        assert mid.schema.field("v").type == pa.int16()
        assert {k: r["v"] for k, r in _rows(mid).items()} == {
            k: v for k, v in want.items() if k < 20
        }


def test_widening_the_sequence_column(tmp_path: Path) -> None:
    """The sequence column's pages feed the tablet's dense sequences on load; a snapshot
    after the widening reuses int32 pages and adds int64 ones."""
    root = tmp_path / "t"
    schema = {**_schema("int32"), "sequence_column": "v"}
    t = create_table(root, schema, options=OPTS)
    t.apply([{"op": "upsert", "key": {"k": i}, "seq": 10, "set": {"w": "a"}} for i in range(20)])
    t.compact()
    t.widen_column("v", "int64")
    t.apply([{"op": "upsert", "key": {"k": 19}, "seq": 2**40, "set": {"w": "b"}}])
    t.compact()
    again = open_table(root, options=OPTS)
    res = again.apply(
        [
            {"op": "upsert", "key": {"k": 19}, "seq": 2**40 - 1, "set": {"w": "stale"}},
            {"op": "upsert", "key": {"k": 0}, "seq": 11, "set": {"w": "c"}},
        ]
    )
    assert res.counts["stale"] == 1
    rows = _rows(again.read())
    assert (rows[19]["v"], rows[19]["w"]) == (2**40, "b")
    assert (rows[0]["v"], rows[0]["w"]) == (11, "c")
    assert again.read().schema.field("v").type == pa.int64()


# ---------------------------------------------------------------------- protocol versions
def _versions(root: Path) -> tuple[int, int]:
    meta = json.loads((root / TABLE_FILE).read_text())
    return meta["reader_version"], meta["writer_version"]


def test_the_first_widening_raises_the_protocol_versions_and_old_readers_refuse(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "t"
    t = create_table(root, _schema("int32"), options=OPTS)
    t.add_column("x", "int16", default=1)
    t.rename_column("x", "y")
    assert _versions(root) == (protocol.CREATED_VERSION,) * 2  # no widening yet
    t.widen_column("v", "int64")
    assert _versions(root) == (protocol.WIDENING_VERSION,) * 2
    t.widen_column("y", "int32")
    assert _versions(root) == (protocol.WIDENING_VERSION,) * 2
    meta = json.loads((root / TABLE_FILE).read_text())
    assert set(meta) >= {"format", "page_rows", "index_seed"}  # the rest is kept
    monkeypatch.setattr(protocol, "READER_VERSION", 1)  # a release before widening
    with pytest.raises(UnsupportedTableVersion) as err:
        open_table(root)
    assert (err.value.kind, err.value.needed) == ("reader", protocol.WIDENING_VERSION)


def test_a_refused_widening_changes_nothing(tmp_path: Path) -> None:
    root = tmp_path / "t"
    t = create_table(root, _schema("int32"), options=OPTS)
    with pytest.raises(SchemaError):
        t.widen_column("k", "int64")
    with pytest.raises(SchemaError):
        t.widen_column("v", "int16")
    assert t.version == 0 and _versions(root) == (protocol.CREATED_VERSION,) * 2


# ---------------------------------------------------------------------- add_column
def test_added_required_column_reads_its_default_everywhere_but_older_versions(
    tmp_path: Path,
) -> None:
    """``add_column(nullable=False, default=x)``: rows written before read ``x`` in
    memory, after a WAL replay and after a snapshot; versions before it lack the column;
    rows written after it take the default unless an event sets it."""
    root = tmp_path / "t"
    t = create_table(root, _schema("int32"), options=OPTS)
    t.apply([{"op": "insert", "key": {"k": i}, "set": {"v": i}} for i in range(12)])
    t.compact()
    t.apply([{"op": "update", "key": {"k": 1}, "set": {"v": 100}}])
    before = t.version
    added = t.add_column("d", "decimal128(8, 3)", nullable=False, default="2.5")
    t.apply(
        [
            {"op": "insert", "key": {"k": 50}, "set": {"v": 50}},
            {"op": "insert", "key": {"k": 51}, "set": {"v": 51, "d": "9.125"}},
            {"op": "update", "key": {"k": 2}, "set": {"d": "0.001"}},
        ]
    )
    want = {i: D("2.5") for i in range(12)} | {50: D("2.5"), 51: D("9.125"), 2: D("0.001")}

    def check(table: Table) -> None:
        cur = table.read()
        assert cur.schema.field("d").type == pa.decimal128(8, 3)
        assert not cur.schema.field("d").nullable
        assert {k: r["d"] for k, r in _rows(cur).items()} == want
        assert _rows(table.read(version=added)) == {
            i: {"k": i, "v": 100 if i == 1 else i, "w": None, "d": D("2.5")} for i in range(12)
        }
        old = table.read(version=before)
        assert old.schema.names == ["k", "v", "w"]
        assert table.get([{"k": 3}], version=before).schema.names == ["k", "v", "w"]
        got = _rows(table.get([{"k": 3}, {"k": 51}]))
        assert {k: r["d"] for k, r in got.items()} == {3: D("2.5"), 51: D("9.125")}

    check(t)
    check(open_table(root, options=OPTS))
    t.compact()
    check(open_table(root, options=OPTS))
    feed = open_table(root, options=OPTS).changes(before, added)
    assert {(r["k"], r["_change_type"], r["d"]) for r in feed.to_pylist()} >= {
        (0, "update_preimage", None),
        (0, "update_postimage", D("2.5")),
    }


def test_a_table_open_elsewhere_follows_the_widening(tmp_path: Path) -> None:
    """A second process's table, loaded before the widening, replays it (its tablets
    switch to the wider type) and then writes values only the wider type holds."""
    root = tmp_path / "t"
    a = create_table(root, _schema("int16"), options=OPTS)
    a.apply([{"op": "insert", "key": {"k": i}, "set": {"v": i}} for i in range(12)])
    b = open_table(root, options=OPTS)
    assert b.read().num_rows == 12  # b's tablets are loaded, at int16
    a.widen_column("v", "int32")
    a.apply([{"op": "update", "key": {"k": 0}, "set": {"v": 100_000}}])
    got = b.read()
    assert got.schema.field("v").type == pa.int32()
    assert {k: r["v"] for k, r in _rows(got).items()} == {0: 100_000} | {i: i for i in range(1, 12)}
    b.apply([{"op": "update", "key": {"k": 1}, "set": {"v": -100_000}}])
    assert _rows(a.read())[1]["v"] == -100_000
