"""A downstream copy of a table maintained from its change stream, and its checks (shared
by tests/integration/test_change_stream_spark.py and the SIGKILL test's reader process).

The copy is another cdc_sink table of the same schema. Each micro-batch of the stream is
applied to it as one version (``app_id`` :data:`COPY_APP`, Spark's ``batch_id``: a batch
Spark runs again after a crash is a no-op), the records turned into events without a
Python loop: a post-image or an insert becomes an ``insert`` of the whole row, a delete a
``delete``, pre-images are dropped. The same commit records, in its log entry's
``source_offsets`` under :data:`LEDGER`, how many records of each source version the batch
held, so the copy's log says which source versions reached it and how often.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Mapping
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from cdc_sink import Table

COPY_APP = "stream-copy"
LEDGER = "changefeed"

SCHEMA: dict[str, Any] = {
    "columns": [
        {"name": "id", "type": "int64", "nullable": False},
        {"name": "s", "type": "string"},
        {"name": "n", "type": "int64"},
    ],
    "primary_key": ["id"],
    "num_buckets": 3,
}
META = ("_change_type", "_commit_version", "_commit_timestamp")


def apply_records(copy: Table, records: pa.Table, batch_id: int) -> None:
    """Applies one micro-batch of change records to ``copy`` (see the module docstring)."""
    records = records.take(pc.sort_indices(records, [("_commit_version", "ascending")]))
    kinds = records.column("_change_type")
    kept = records.filter(pc.not_equal(kinds, "update_preimage"))
    op = pc.if_else(pc.equal(kept.column("_change_type"), "delete"), "delete", "insert")
    wire = kept.select([c for c in kept.column_names if c not in META]).append_column("__op", op)
    versions = pc.value_counts(records.column("_commit_version")).to_pylist()
    ledger = {str(d["values"]): int(d["counts"]) for d in versions}
    copy.apply(wire, app_id=COPY_APP, batch_id=batch_id, source_offsets={LEDGER: ledger})


def ledger(copy: Table) -> tuple[Counter[int], dict[int, int]]:
    """How many of the copy's batches held each source version, and its record count."""
    batches: Counter[int] = Counter()
    counts: dict[int, int] = {}
    for entry in copy.log.entries(from_version=copy.oldest_version):
        if entry.app_id != COPY_APP:
            continue
        for v, n in entry.source_offsets.get(LEDGER, {}).items():
            batches[int(v)] += 1
            counts[int(v)] = n
    return batches, counts


def reached(copy: Table) -> int:
    """The last source version the copy holds (every version of the workloads below
    changes something, so each reaches the ledger)."""
    batches, _ = ledger(copy)
    return max(batches, default=0)


def _sorted(t: pa.Table) -> pa.Table:
    return t.select(["id", "s", "n"]).sort_by("id")


class CopyCheck:
    """Checks a copy against its source again and again (the record counts of versions
    already checked are kept: a version's records never change)."""

    def __init__(self, source: Table, copy: Table, start: int) -> None:
        self.source, self.copy, self.start = source, copy, start
        self.counted = start  # the source's record counts are known up to here
        self.expected: dict[int, int] = {}
        self.first: int | None = None  # the first version counted

    def _count(self, top: int) -> None:
        since = max(self.counted, self.source.oldest_version)
        if self.first is None:
            self.first = since + 1
        for a in range(since, top, 50):  # (the versions after GC's horizon only)
            feed = self.source.changes(a, min(a + 50, top), columns=["s", "n"])
            for d in pc.value_counts(feed.column("_commit_version")).to_pylist():
                self.expected[int(d["values"])] = int(d["counts"])
        self.counted = max(self.counted, top)

    def check(self, top: int | None = None) -> int:
        """Asserts that the copy is the source at the version the stream reached
        (``top``, default the last one in the copy's ledger), and that every source
        version after ``start`` up to it with records reached the copy in exactly one
        batch, with all its records (counted for the versions retained when first
        checked). Returns that version."""
        batches, counts = ledger(self.copy)
        top = max(batches, default=self.start) if top is None else top
        twice = sorted(v for v, k in batches.items() if k > 1)
        assert not twice, f"source versions applied in more than one batch: {twice}"
        assert max(batches, default=self.start) <= top, "the copy holds versions past the stream's"
        self._count(top)
        known = {v: n for v, n in self.expected.items() if v <= top}
        first = top + 1 if self.first is None else self.first
        recorded = {v: n for v, n in counts.items() if v >= first}
        assert recorded == known, "the copy's batches did not hold each version's records"
        empty = set(range(first, top + 1)) - set(known)  # e.g. compact()'s versions
        lost = sorted(set(range(self.start + 1, top + 1)) - set(batches) - empty)
        assert not lost, f"source versions that never reached the copy: {lost}"
        got, want = _sorted(self.copy.read()), _sorted(self.source.read(version=top))
        assert got.equals(want), f"the copy differs from the source at version {top}"
        return top


def check_copy(source: Table, copy: Table, start: int, top: int | None = None) -> int:
    """:meth:`CopyCheck.check` once."""
    return CopyCheck(source, copy, start).check(top)


def random_batch(
    rng: random.Random, next_id: int, size: int
) -> tuple[list[Mapping[str, Any]], int]:
    """One version's events: fresh inserts (so every version has records), partial
    updates, deletes and re-inserts of older keys, now and then a truncate first.
    Returns the events and the next fresh key."""
    events: list[Mapping[str, Any]] = []
    if next_id > 0 and rng.random() < 0.02:
        events.append({"op": "truncate"})
    for _ in range(size):
        r = rng.random()
        old = rng.randrange(next_id) if next_id else 0
        if r < 0.3 or not next_id:
            events.append(
                {"op": "insert", "key": {"id": next_id}, "set": {"s": f"v{next_id}", "n": 0}}
            )
            next_id += 1
        elif r < 0.6:
            events.append({"op": "upsert", "key": {"id": old}, "set": {"n": rng.randrange(1000)}})
        elif r < 0.7:
            events.append({"op": "upsert", "key": {"id": old}, "set": {"s": None}})
        elif r < 0.85:
            events.append({"op": "delete", "key": {"id": old}})
        else:
            events.append({"op": "insert", "key": {"id": old}, "set": {"s": f"again{old}"}})
    events.append({"op": "insert", "key": {"id": next_id}, "set": {"s": "fresh"}})
    return events, next_id + 1
