"""The JVM reader's filters (``io.cdcsink.format.Filter``): pages skipped by statistics
(docs/format.md §10.4, §14.6) and buckets skipped by key lookups (§13) never drop a
matching row.

Random tables (every value type, small pages, snapshots, compaction, segments after
them) are read at their latest version by ``DumpTable`` with random conjunctive filters;
the rows it returns, filtered again in Python (:func:`cdc_sink.filters.evaluate`), equal
``Table.read(filter=...)``. On a compacted table of many pages a selective filter makes
the reader return far fewer rows than the table holds, and still the rows events after
the snapshot changed into matches.
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import json
import shutil
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.ipc as ipc
from hypothesis import given, settings
from hypothesis import strategies as st

from cdc_sink.filters import Predicate, evaluate
from cdc_sink.table import TableOptions, create_table, open_table
from tests.jvm.test_format_crosscheck import EXAMPLES, SEEDED, _sorted, dump
from tests.strategies import events, key_pool, schemas, type_name, values_of

#: Filter ops: the JVM's spelling -> the Python reader's.
OPS = {
    "=": "=",
    "!=": "!=",
    "<": "<",
    "<=": "<=",
    ">": ">",
    ">=": ">=",
    "in": "in",
    "is_null": "is null",
    "is_not_null": "is not null",
}
EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)


def _json(v: Any) -> Any:
    """A filter value as DumpTable reads it (JSON of the column's physical form)."""
    if v is None:
        return None
    if isinstance(v, list):
        return [_json(x) for x in v]
    if isinstance(v, bytes):
        return base64.b64encode(v).decode()
    if isinstance(v, dt.datetime):
        return (v - EPOCH) // dt.timedelta(microseconds=1)
    if isinstance(v, dt.date):
        return (v - dt.date(1970, 1, 1)).days
    if isinstance(v, decimal.Decimal):
        return str(v)
    return v


def _arg(column: str, op: str, value: Any) -> str:
    return f"{column},{op}," + ("" if op.startswith("is_") else json.dumps(_json(value)))


def _read_dump(out: Path) -> pa.Table:
    assert not (out / "error.txt").exists(), (out / "error.txt").read_text()
    (arrow,) = out.glob("*.arrow")
    return ipc.open_file(arrow).read_all()


def test_random_filters_never_drop_a_matching_row(tmp_path: Path) -> None:
    cases: list[tuple[Path, list[tuple[str, str, Any]]]] = []

    @settings(max_examples=max(10, EXAMPLES), deadline=None, database=None, derandomize=not SEEDED)
    @given(data=st.data())
    def build(data: st.DataObject) -> None:
        schema = data.draw(schemas())
        keys = data.draw(key_pool(schema))
        opts = TableOptions(page_rows=data.draw(st.sampled_from([2, 4])), snapshot_every=2)
        path = tmp_path / f"r{len(cases)}"
        shutil.rmtree(path, ignore_errors=True)
        t = create_table(path, schema, options=opts)
        for _ in range(data.draw(st.integers(1, 5))):
            if data.draw(st.integers(0, 3)) == 0:
                t.compact()
            else:
                t.apply(data.draw(events(t.schema, keys, truncates=False)))
        rows = t.read().to_pylist()
        preds = []
        for _ in range(data.draw(st.integers(1, 2))):
            col = data.draw(st.sampled_from([c.name for c in t.schema.columns]))
            tname = type_name(t.schema, col)
            op = data.draw(st.sampled_from(sorted(OPS)))
            seen = [r[col] for r in rows if r[col] is not None]
            pick = st.sampled_from(seen) if seen else values_of(tname)
            one = st.one_of(pick, values_of(tname))
            if op == "in":
                value: Any = data.draw(st.lists(one, min_size=0, max_size=3))
            elif op.startswith("is_"):
                value = None
            else:
                value = data.draw(one)
            preds.append((col, op, value))
        cases.append((path, preds))

    build()
    jobs = [(p, p.with_suffix(".out"), "latest", *[_arg(*f) for f in preds]) for p, preds in cases]
    res = dump(jobs)
    assert res.returncode == 0, res.stderr

    skipped = 0
    for (path, preds), job in zip(cases, jobs, strict=True):
        t = open_table(path)
        keys = t.schema.primary_key
        py = [(c, OPS[op], v) for c, op, v in preds]
        want = t.read(filter=py)
        got = _read_dump(job[1])
        skipped += got.num_rows < t.read().num_rows
        got = got.filter(pa.array(evaluate(got, [Predicate(*p) for p in py])))
        assert got.schema == want.schema
        assert _sorted(got, keys).equals(_sorted(want, keys)), f"{path}: {preds}"
    assert skipped > 0, "no filter skipped a page or a bucket"


SCHEMA = {
    "columns": [
        {"name": "id", "type": "int64", "nullable": False},
        {"name": "v", "type": "int64"},
        {"name": "s", "type": "string"},
    ],
    "primary_key": ["id"],
    "num_buckets": 4,
}


def test_selective_filters_skip_pages_and_buckets(tmp_path: Path) -> None:
    path = tmp_path / "t"
    t = create_table(path, SCHEMA, options=TableOptions(page_rows=16, snapshot_every=1000))
    n = 2000
    rows = [{"op": "insert", "key": {"id": i}, "set": {"v": i, "s": f"{i:05d}"}} for i in range(n)]
    t.apply(rows)
    t.compact()
    # after the snapshot: a row far outside the filter's pages becomes a match, one inside
    # stops being one
    t.apply(
        [
            {"op": "update", "key": {"id": 1900}, "set": {"v": 3}},
            {"op": "update", "key": {"id": 5}, "set": {"v": 10_000}},
        ]
    )
    # filter -> the most rows the reader may return: two pages per bucket (and the changed
    # row), two of the four buckets, one bucket
    filters = {
        "range": ([("v", "<", 40)], 4 * 2 * 16 + 1),
        "string": ([("s", ">=", "01990")], 4 * 2 * 16),
        "key": ([("id", "in", [7, 1900])], n * 3 // 4),
        "key_eq": ([("id", "=", 1234)], n * 2 // 5),
        # key page statistics: the keys 1990.. are in the last page or two of each bucket,
        # and 5 (named by an event after the snapshot) comes along
        "key_range": ([("id", ">=", 1990)], 4 * 2 * 16 + 1),
    }
    jobs = [
        (path, tmp_path / f"{name}.out", "latest", *[_arg(*f) for f in fs])
        for name, (fs, _) in filters.items()
    ]
    res = dump(jobs)
    assert res.returncode == 0, res.stderr
    for name, (fs, most) in filters.items():
        got = _read_dump(tmp_path / f"{name}.out")
        py = [Predicate(c, OPS[op], v) for c, op, v in fs]
        want = t.read(filter=[(p.column, p.op, p.value) for p in py])
        matched = got.filter(pa.array(evaluate(got, py)))
        assert _sorted(matched, ["id"]).equals(_sorted(want, ["id"])), name
        assert got.num_rows <= most, f"{name}: {got.num_rows} rows returned of {n}"
    ids = _read_dump(tmp_path / "range.out").column("id").to_pylist()
    assert 1900 in ids  # named by an event after the snapshot: kept
