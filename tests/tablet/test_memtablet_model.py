"""Model-based test: the MemTablet equals a plain-Python reference at every version.

Random schemas and event streams (all ops, truncates, nulls, absent columns, duplicate
keys in a batch, out-of-order sequences, deletes then re-inserts), with commits, rollbacks,
compactions and in-memory retention; after every step every retained version is read
back (full scans, column subsets, point lookups) and compared with the model.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from cdc_sink.batch import ChangeBatch
from cdc_sink.errors import VersionNotFound
from cdc_sink.schema import TableSchema
from cdc_sink.tablet import MemTablet, TabletOptions
from tests.model import RefModel, model_rows, table_to_rows
from tests.strategies import events, key_pool, schemas


class TabletMachine(RuleBasedStateMachine):
    """Drives one MemTablet and the reference model side by side."""

    schema: TableSchema
    tablet: MemTablet
    model: RefModel

    @initialize(data=st.data())
    def setup(self, data: st.DataObject) -> None:
        self.schema = data.draw(schemas())
        self.keys = data.draw(key_pool(self.schema))
        self.tablet = MemTablet(self.schema, options=TabletOptions.for_tests())
        self.model = RefModel(self.schema)
        self.version = 0
        self.retained = [0]

    @rule(data=st.data(), commit=st.sampled_from([True, True, True, False]))
    def apply_batch(self, data: st.DataObject, commit: bool) -> None:
        evs = data.draw(events(self.schema, self.keys, truncates=True))
        batch, rejects = ChangeBatch.from_events(evs, self.schema)
        v = self.version + 1
        res = self.tablet.apply(batch, v)
        expected = self.model.apply(evs)
        assert len(rejects) == expected.pop("invalid")
        assert res.counts() == expected
        assert len(res.rejects) == res.rejected
        if commit:
            self.tablet.commit(v)
            self.model.commit(v)
            self.version = v
            self.retained.append(v)
        else:
            assert self.tablet.rollback() == v
            self.model.rollback()

    @rule()
    def compact(self) -> None:
        self.tablet.compact()

    @precondition(lambda self: len(self.retained) > 2)
    @rule(data=st.data())
    def release_old_versions(self, data: st.DataObject) -> None:
        oldest = data.draw(st.sampled_from(self.retained[:-1]))
        self.tablet.release(oldest)
        gone = [v for v in self.retained if v < oldest]
        self.retained = [v for v in self.retained if v >= oldest]
        for v in gone:
            with pytest.raises(VersionNotFound):
                self.tablet.read(v)

    @invariant()
    def every_retained_version_equals_the_model(self) -> None:
        if not hasattr(self, "tablet"):
            return
        names = self.schema.names
        pk = self.schema.primary_key
        for v in self.retained:
            got = self.tablet.read(v)
            assert got.schema == self.schema.arrow_schema()
            expect = model_rows(self.model.versions[v], self.schema)
            assert table_to_rows(got, pk) == expect, f"version {v}"
            assert self.tablet.num_rows(v) == len(expect)
        # Column subsets and point lookups at the latest version.
        v = self.version
        expect = model_rows(self.model.versions[v], self.schema)
        subset = [*pk, *names[len(pk) :][::-1][:2]]
        got = table_to_rows(self.tablet.read(v, columns=subset), pk)
        assert got == {k: {n: r[n] for n in subset} for k, r in expect.items()}
        probe = pa.Table.from_pylist(
            [dict(k) for k in self.keys], schema=self.schema.arrow_schema(list(pk))
        )
        found = table_to_rows(self.tablet.get(probe, v), pk)
        live_keys = [tuple(k[n] for n in pk) for k in self.keys]
        assert found == {k: expect[k] for k in live_keys if k in expect}


TestTabletModel = TabletMachine.TestCase
TestTabletModel.settings = settings(
    max_examples=60,
    stateful_step_count=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


def test_filter_reads_equal_filtered_model() -> None:
    schema = TableSchema.from_dict(
        {
            "columns": [
                {"name": "id", "type": "int64"},
                {"name": "x", "type": "int32"},
                {"name": "s", "type": "string"},
            ],
            "primary_key": ["id"],
        }
    )
    t = MemTablet(schema, options=TabletOptions.for_tests())
    rng = np.random.default_rng(1)
    evs: list[dict[str, Any]] = [
        {"op": "insert", "key": i, "set": {"x": int(i % 17), "s": f"s{i}"}} for i in range(100)
    ]
    t.apply(ChangeBatch.from_events(evs, schema)[0], 1)
    t.commit(1)
    t.compact()
    upd = [{"op": "update", "key": int(i), "set": {"x": None}} for i in rng.choice(100, 10)]
    t.apply(ChangeBatch.from_events(upd, schema)[0], 2)
    t.commit(2)
    full = t.read(2).to_pylist()
    for flt, pred in [
        ([("x", "=", 3)], lambda r: r["x"] == 3),
        (
            [("x", ">", 10), ("id", "<", 50)],
            lambda r: r["x"] is not None and r["x"] > 10 and r["id"] < 50,
        ),
        ([("x", "is null")], lambda r: r["x"] is None),
        ([("s", "in", ["s1", "s2", "s99"])], lambda r: r["s"] in ("s1", "s2", "s99")),
    ]:
        assert t.read(2, filter=flt).to_pylist() == [r for r in full if pred(r)]
