"""Model-based test of the batch change feed: random workloads (inserts, partial updates,
deletes, re-inserts, truncates, schema changes between versions; tables with and without
a sequence column) committed through ``Table.apply``; for every pair of versions (a, b),
the feed replayed onto the snapshot at a gives the snapshot at b, and equals the diff of
consecutive snapshots computed by the tests' reference (tests/changefeed/diff.py), both
from the writer (its tablets in memory) and from a table opened afresh (loaded from
snapshots and segments); and per version, ``set_columns_only`` agrees with the full feed
and its written cells hold the version's values. All of it with the writer storing the
pre-images of its versions (``TableOptions.change_images``: the versions it no longer
holds in memory, and every version of the table opened afresh, are read from them and
their segments, except those with a truncate) and without."""

from __future__ import annotations

import dataclasses
import itertools
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import cdc_sink
from cdc_sink.schema import type_to_str
from cdc_sink.table import Table, TableOptions
from tests.changefeed.diff import feed_records, reference_feed, replay, snapshot
from tests.model import normalize
from tests.strategies import VALUE_TYPES, WIDER, events, key_pool, schemas, values_of

_FRESH = itertools.count()  # column names never reused within a run


def _schema_change(data: st.DataObject, table: Table) -> None:
    """Adds (with or without a default), drops, renames or widens a value column."""
    schema = table.schema
    droppable = [c.name for c in schema.value_columns if c.name != schema.sequence_column]
    wider = [(c.name, t) for c in schema.value_columns for t in WIDER.get(type_to_str(c.type), ())]
    kind = data.draw(st.sampled_from(["add", "add", "drop", "rename", "widen"]))
    if kind == "widen" and wider:
        table.widen_column(*data.draw(st.sampled_from(wider)))
        event("widen_column")
    elif kind in ("add", "widen") or len(droppable) < 2:
        t = data.draw(st.sampled_from(VALUE_TYPES))
        default: Any = data.draw(st.one_of(st.none(), values_of(t)))
        table.add_column(f"n{next(_FRESH)}", t, default=default)
    elif kind == "drop":
        table.drop_column(data.draw(st.sampled_from(droppable)))
    else:
        table.rename_column(data.draw(st.sampled_from(droppable)), f"r{next(_FRESH)}")


def _options(images: bool) -> TableOptions:
    return dataclasses.replace(TableOptions.for_tests(), change_images=images)


def _build(data: st.DataObject, root: Path, images: bool) -> Table:
    schema = data.draw(schemas())
    keys = data.draw(key_pool(schema))
    table = cdc_sink.create_table(root, schema, options=_options(images))
    for _ in range(data.draw(st.integers(1, 7))):
        if data.draw(st.integers(0, 4)) == 0:
            _schema_change(data, table)
        else:
            table.apply(data.draw(events(table.schema, keys, max_size=20, truncates=True)))
    return table


def _check_pairs(table: Table) -> None:
    latest = table.version
    for end in range(1, latest + 1):
        schema = table.schema_at(end)
        names = [*schema.primary_key, *(c.name for c in schema.value_columns)]
        nkeys = len(schema.primary_key)
        for start in range(end):
            feed = table.changes(start, end)
            assert feed.column_names[: len(names)] == names
            got = feed_records(feed, names)
            before = snapshot(table, start, end, names)
            assert replay(before, got, nkeys) == snapshot(table, end, end, names), (start, end)
            assert sorted(got, key=repr) == reference_feed(table, start, end, names), (start, end)


def _check_set_columns_only(table: Table) -> None:
    """Per version: the same inserted and deleted keys as the full feed, an
    ``update_postimage`` for every key the full feed updates (a data version writes a
    cell to change a row), and every cell marked written holds the row's value at v."""
    schema_versions = {e["version"] for e in table.versions() if e["kind"] == "schema"}
    for v in range(1, table.version + 1):
        schema = table.schema_at(v)
        names = [*schema.primary_key, *(c.name for c in schema.value_columns)]
        nkeys = len(schema.primary_key)
        after = snapshot(table, v, v, names)
        full = feed_records(table.changes(v - 1, v), names)
        only = table.changes(v - 1, v, set_columns_only=True).to_pylist()

        def keys(records: list[Any], kind: str, nkeys: int = nkeys) -> set[Any]:
            return {r[2][:nkeys] for r in records if r[0] == kind}

        got = [(r["_change_type"], v, tuple(normalize(r[n]) for n in names)) for r in only]
        assert keys(got, "insert") == keys(full, "insert")
        assert keys(got, "delete") == keys(full, "delete")
        if v not in schema_versions:
            assert keys(full, "update_postimage") <= keys(got, "update_postimage")
        assert not keys(got, "update_preimage")
        for r, (_, _, row) in zip(only, got, strict=True):
            for i, n in enumerate(names[nkeys:], start=nkeys):
                if r[f"_set_{n}"]:
                    assert row[i] == after[row[:nkeys]][i], (v, n, row)
                else:
                    assert row[i] is None


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@pytest.mark.parametrize("images", [False, True], ids=["pages", "stored-images"])
@given(data=st.data())
def test_feed_replays_onto_start_and_equals_reference_diff(
    images: bool, data: st.DataObject, tmp_path_factory: Any
) -> None:
    root = tmp_path_factory.mktemp("feed") / "t"
    writer = _build(data, root, images)
    if not images:  # the option is off by default: nothing is stored
        assert not any(r.images for e in writer.log.entries() for r in e.buckets.values())
    _check_pairs(writer)
    reader = cdc_sink.open_table(root, options=TableOptions.for_tests())
    _check_pairs(reader)
    _check_set_columns_only(reader)
