"""Truncate in a MemTablet: every row live at the truncate's position goes, in one version."""

from __future__ import annotations

from typing import Any

from cdc_sink.batch import ChangeBatch
from cdc_sink.schema import TableSchema
from cdc_sink.tablet import MemTablet, TabletOptions
from tests.fixtures import ID_V, ID_V_SEQ

PLAIN = TableSchema.from_dict(ID_V)
SEQ = TableSchema.from_dict(ID_V_SEQ)


def tablet_with(schema: TableSchema, events: list[dict[str, Any]]) -> MemTablet:
    t = MemTablet(schema, options=TabletOptions.for_tests())
    apply(t, events, 1)
    return t


def apply(t: MemTablet, events: list[dict[str, Any]], version: int) -> dict[str, int]:
    batch, rejects = ChangeBatch.from_events(events, t.schema)
    assert len(rejects) == 0, rejects
    res = t.apply(batch, version)
    t.commit(version)
    return res.counts()


def ids(t: MemTablet, version: int | None = None) -> list[int]:
    return sorted(t.read(version).column("id").to_pylist())


def test_truncate_deletes_every_live_row_and_later_events_apply():
    t = tablet_with(PLAIN, [{"op": "insert", "key": i, "set": {"v": "a"}} for i in range(30)])
    counts = apply(
        t,
        [
            {"op": "update", "key": 3, "set": {"v": "b"}},
            {"op": "truncate"},
            {"op": "upsert", "key": 4, "set": {"v": "c"}},
            {"op": "update", "key": 5, "set": {"v": "d"}},
            {"op": "insert", "key": 100, "set": {"v": "e"}},
        ],
        2,
    )
    assert counts == {
        "inserted": 2,
        "updated": 1,
        "deleted": 0,
        "ignored": 0,
        "stale": 0,
        "rejected": 1,
        "truncated": 30,
    }
    assert t.read(2).to_pylist() == [{"id": 4, "v": "c"}, {"id": 100, "v": "e"}]
    assert ids(t, 1) == list(range(30))  # the version before keeps its rows


def test_a_row_recreated_after_a_truncate_takes_defaults_not_its_old_values():
    schema = TableSchema.from_dict(
        {
            "columns": [
                {"name": "id", "type": "int64"},
                {"name": "v", "type": "string"},
                {"name": "w", "type": "int32", "default": 7},
            ],
            "primary_key": ["id"],
        }
    )
    t = tablet_with(schema, [{"op": "insert", "key": 1, "set": {"v": "a", "w": 1}}])
    apply(t, [{"op": "truncate"}, {"op": "upsert", "key": 1, "set": {"v": "b"}}], 2)
    assert t.read(2).to_pylist() == [{"id": 1, "v": "b", "w": 7}]


def test_a_batch_of_only_a_truncate_empties_the_tablet_and_rolls_back():
    t = tablet_with(PLAIN, [{"op": "insert", "key": i, "set": {"v": "a"}} for i in range(10)])
    batch, _ = ChangeBatch.from_events([{"op": "truncate"}, {"op": "truncate"}], PLAIN)
    res = t.apply(batch, 2)
    assert res.truncated == 10
    assert t.rollback() == 2
    assert apply(t, [{"op": "update", "key": 2, "set": {"v": "b"}}], 2)["updated"] == 1
    assert apply(t, [{"op": "truncate"}], 3)["truncated"] == 10
    assert t.num_rows(3) == 0 and ids(t, 2) == list(range(10))
    assert apply(t, [{"op": "insert", "key": 2, "set": {"v": "z"}}], 4)["inserted"] == 1
    assert t.read(4).to_pylist() == [{"id": 2, "v": "z"}]


def test_truncated_rows_keep_their_sequence_as_tombstone():
    t = tablet_with(
        SEQ, [{"op": "insert", "key": i, "set": {"v": "a"}, "seq": 10} for i in range(5)]
    )
    counts = apply(
        t,
        [
            {"op": "truncate"},
            {"op": "insert", "key": 0, "set": {"v": "old"}, "seq": 9},
            {"op": "insert", "key": 1, "set": {"v": "new"}, "seq": 10},
        ],
        2,
    )
    assert counts["stale"] == 1 and counts["inserted"] == 1 and counts["truncated"] == 5
    assert t.read(2).to_pylist() == [{"id": 1, "v": "new", "seq": 10}]
    # Untouched keys too: an older event after the truncate stays stale.
    assert apply(t, [{"op": "upsert", "key": 3, "set": {"v": "x"}, "seq": 3}], 3)["stale"] == 1
    assert apply(t, [{"op": "upsert", "key": 3, "set": {"v": "x"}, "seq": 11}], 4)["inserted"] == 1


def test_several_truncates_in_one_batch_each_clear_what_is_live_at_their_position():
    t = tablet_with(PLAIN, [{"op": "insert", "key": 1, "set": {"v": "a"}}])
    counts = apply(
        t,
        [
            {"op": "insert", "key": 2, "set": {"v": "b"}},
            {"op": "truncate"},
            {"op": "insert", "key": 3, "set": {"v": "c"}},
            {"op": "truncate"},
            {"op": "truncate"},
            {"op": "upsert", "key": 1, "set": {"v": "d"}},
        ],
        2,
    )
    assert counts["truncated"] == 3 and counts["inserted"] == 3
    assert t.read(2).to_pylist() == [{"id": 1, "v": "d"}]


def test_truncate_then_compact_and_point_lookups():
    t = tablet_with(PLAIN, [{"op": "insert", "key": i, "set": {"v": str(i)}} for i in range(40)])
    apply(t, [{"op": "truncate"}, {"op": "insert", "key": 39, "set": {"v": "again"}}], 2)
    t.compact()
    assert t.read(2).to_pylist() == [{"id": 39, "v": "again"}]
    assert t.get([[1, 39]], 2).to_pylist() == [{"id": 39, "v": "again"}]
    assert t.get([[1, 39]], 1).num_rows == 2
