"""Key pages carry statistics (docs/format.md §10.4) and readers skip key pages by them.

A snapshot writes each key page's min/max (reused pages keep theirs), and a filter on a
key column skips the pages whose keys cannot match, at the snapshot's version and at
every later one (a row id's key never changes, so the statistics stay true whatever the
segments after the snapshot do). A skipped page must never hide a matching row: the
filtered read equals the unfiltered read filtered afterwards, for random tables, keys and
predicates, before and after later updates, deletes and returning keys.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cdc_sink.engine import core_of
from cdc_sink.filters import Predicate, evaluate
from cdc_sink.storage.snapshot import read_manifest
from cdc_sink.table import Table, TableOptions, create_table
from tests.fixtures import count_skipped_pages

PAGE_ROWS = 8


def _schema(key_type: str, buckets: int = 1) -> dict[str, Any]:
    return {
        "columns": [
            {"name": "id", "type": key_type, "nullable": False},
            {"name": "v", "type": "int64"},
        ],
        "primary_key": ["id"],
        "num_buckets": buckets,
    }


def _key(i: int, key_type: str) -> Any:
    return f"k{i:06d}" if key_type == "string" else i


def _manifest(t: Table, bucket: int = 0) -> Any:
    core = core_of(t)
    snap = core.history.snapshot_at(bucket, t.version)
    assert snap is not None
    return read_manifest(core.store, snap[1])


@pytest.mark.parametrize("key_type", ["int64", "string"])
def test_key_pages_carry_their_keys_min_and_max(tmp_path: Path, key_type: str) -> None:
    t = create_table(tmp_path / "t", _schema(key_type), options=TableOptions(page_rows=PAGE_ROWS))
    n = 3 * PAGE_ROWS + 3
    t.apply([{"op": "insert", "key": _key(i, key_type), "set": {"v": i}} for i in range(n)])
    t.compact()
    first = _manifest(t).keys[0]
    # more rows: the full pages are reused with their statistics, the others rewritten
    t.apply([{"op": "insert", "key": _key(i, key_type), "set": {"v": i}} for i in range(n, 2 * n)])
    t.compact()
    second = _manifest(t).keys[0]
    assert second[:3] == first[:3]
    for p, loc in enumerate(second):
        ids = range(p * PAGE_ROWS, min((p + 1) * PAGE_ROWS, 2 * n))  # row ids in insert order
        assert (loc.min, loc.max) == (_key(ids[0], key_type), _key(ids[-1], key_type)), p
        assert loc.null_count == 0


def test_a_key_range_skips_the_pages_whose_keys_cannot_match(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    t = create_table(tmp_path / "t", _schema("int64"), options=TableOptions(page_rows=PAGE_ROWS))
    n = 10 * PAGE_ROWS
    t.apply([{"op": "insert", "key": i, "set": {"v": i}} for i in range(n)])
    t.compact()
    # after the snapshot: a row inside the range changes, one is deleted and comes back
    t.apply([{"op": "update", "key": 42, "set": {"v": -1}}, {"op": "delete", "key": 43}])
    t.apply([{"op": "insert", "key": 43, "set": {"v": 430}}])
    skipped = count_skipped_pages(monkeypatch)
    got = t.read(filter=[("id", ">=", 40), ("id", "<", 44)])
    assert got.to_pylist() == [
        {"id": 40, "v": 40},
        {"id": 41, "v": 41},
        {"id": 42, "v": -1},
        {"id": 43, "v": 430},
    ]
    assert skipped.count == 9  # every page but the one of keys 40..47


@settings(max_examples=40, deadline=None, database=None)
@given(data=st.data())
def test_key_filters_never_drop_a_matching_row(tmp_path_factory: Any, data: st.DataObject) -> None:
    key_type = data.draw(st.sampled_from(["int64", "string"]))
    path = tmp_path_factory.mktemp("keys") / "t"
    t = create_table(path, _schema(key_type, buckets=2), options=TableOptions(page_rows=4))
    pool = st.integers(0, 60)
    for _ in range(data.draw(st.integers(1, 5))):
        if data.draw(st.booleans()):
            t.compact()
        ops = data.draw(
            st.lists(st.tuples(st.sampled_from(["upsert", "delete"]), pool), max_size=30)
        )
        t.apply(
            [
                {
                    "op": op,
                    "key": _key(k, key_type),
                    **({"set": {"v": k}} if op == "upsert" else {}),
                }
                for op, k in ops
            ]
        )
    op = data.draw(st.sampled_from(["=", "!=", "<", "<=", ">", ">=", "in", "not in"]))
    value: Any = (
        [_key(k, key_type) for k in data.draw(st.lists(pool, max_size=4))]
        if op.endswith("in")
        else _key(data.draw(pool), key_type)
    )
    for version in range(t.oldest_version, t.version + 1):
        whole = t.read(version=version)
        want = whole.filter(pa.array(evaluate(whole, [Predicate("id", op, value)])))
        got = t.read(version=version, filter=[("id", op, value)])
        assert got.sort_by("id").equals(want.sort_by("id")), (version, op, value)
