"""The deterministic workload of the durability tests: schema, batches, maintenance plan.

Imported both by the test process and by child processes (``crash_driver.py``, the
commit-race and reader workers), so it imports nothing heavy beyond cdc_sink itself.

Every batch ``i`` of a seed is a pure function of ``(seed, i)``: inserts, upserts,
partial updates (absent columns keep their value, explicit nulls), deletes, stale events
(older ``seq``), a few invalid events, and a *marker* pair that makes applying a batch
twice visible in the data: ``update`` of a key that does not exist yet (rejected the
first time) followed by an ``upsert`` that creates it. Applied a second time the
``update`` finds the key live and sets ``name = "dup"``.
"""

from __future__ import annotations

import dataclasses
import random
from typing import Any

from cdc_sink.schema import TableSchema
from cdc_sink.table import TableOptions

SCHEMA_DICT: dict[str, Any] = {
    "columns": [
        {"name": "id", "type": "int64", "nullable": False},
        {"name": "name", "type": "string", "default": "new"},
        {"name": "amount", "type": "float64"},
        {"name": "qty", "type": "int32", "nullable": False, "default": 0},
        {"name": "flag", "type": "bool"},
        {"name": "seq", "type": "int64"},
    ],
    "primary_key": ["id"],
    "num_buckets": 3,
    "sequence_column": "seq",
}

APP_ID = "job"
KEY_POOL = 24
MARKER_BASE = 1_000_000


def schema() -> TableSchema:
    """The schema every durability test uses."""
    return TableSchema.from_dict(SCHEMA_DICT)


def options() -> TableOptions:
    """Test-sized options: tiny pages, frequent snapshots, compaction and GC; every
    commit also stores the change feed's pre-images (``change_images``), so the crash
    tests cover that write too."""
    return dataclasses.replace(TableOptions.for_tests(), change_images=True)


def marker_key(i: int) -> int:
    """The key of batch ``i``'s double-application marker."""
    return MARKER_BASE + i


def batch(seed: int, i: int, size: int = 14) -> list[dict[str, Any]]:
    """Batch ``i`` of workload ``seed`` (a pure function of both)."""
    rng = random.Random(seed * 100_003 + i)
    base_seq = 10 * (i + 1)
    out: list[dict[str, Any]] = []
    for _ in range(size):
        k = rng.randrange(KEY_POOL)
        op = rng.choice(["insert", "upsert", "upsert", "update", "update", "delete"])
        seq = base_seq + rng.randrange(10)
        if rng.random() < 0.1:
            seq = max(0, base_seq - 15)  # stale: older than what earlier batches wrote
        e: dict[str, Any] = {"op": op, "key": {"id": k}, "seq": seq}
        if op != "delete":
            sets: dict[str, Any] = {}
            if rng.random() < 0.6:
                sets["name"] = rng.choice([None, f"n{rng.randrange(1000)}", ""])
            if rng.random() < 0.6:
                sets["amount"] = rng.choice([None, round(rng.uniform(-1e4, 1e4), 3)])
            if rng.random() < 0.4:
                sets["qty"] = rng.randrange(-50, 50)
            if rng.random() < 0.3:
                sets["flag"] = rng.choice([None, True, False])
            e["set"] = sets
        out.append(e)
    if rng.random() < 0.3:  # invalid events are rejected, never applied
        out.insert(
            rng.randrange(len(out) + 1),
            {"op": "upsert", "key": {"id": 1}, "set": {"qty": None}, "seq": base_seq},
        )
    m = marker_key(i)
    out.append({"op": "update", "key": {"id": m}, "set": {"name": "dup"}, "seq": base_seq})
    out.append({"op": "upsert", "key": {"id": m}, "set": {"amount": float(i)}, "seq": base_seq})
    return out


def maintenance(i: int) -> list[str]:
    """What the driver does after committing batch ``i``: ``compact`` and/or ``gc``."""
    todo = []
    if i % 4 == 3:
        todo.append("compact")
    if i % 5 == 4:
        todo.append("gc")
    return todo


def keys_of_bucket(bucket: int, count: int) -> list[int]:
    """The first ``count`` ids (from 0) that the table routes to ``bucket``."""
    import pyarrow as pa

    from cdc_sink.bucketing import bucket_ids

    ids = list(range(40 * count))
    buckets = bucket_ids([pa.array(ids, pa.int64())], SCHEMA_DICT["num_buckets"]).tolist()
    return [k for k, b in zip(ids, buckets, strict=True) if b == bucket][:count]


def skewed_batches() -> list[list[dict[str, Any]]]:
    """Batch 0 fills every bucket; batches 1..8 touch bucket 0 only."""
    first = [
        {"op": "upsert", "key": {"id": k}, "set": {"qty": k, "name": f"r{k}"}, "seq": 1}
        for k in range(30)
    ]
    hot = keys_of_bucket(0, 4)
    return [first] + [
        [{"op": "upsert", "key": {"id": hot[i % 4]}, "set": {"qty": 100 + i}, "seq": 2 + i}]
        for i in range(8)
    ]


def skewed_table(path: Any) -> list[list[dict[str, Any]]]:
    """A table whose buckets 1 and 2 keep a snapshot that only the GC checkpoint names:
    batch 0, ``compact()``, batches 1..8 (bucket 0 only), ``gc(dry_run=False)``.

    Returns the batches (batch ``i`` has ``app_id="skew", batch_id=i``).
    """
    from cdc_sink.table import create_table

    batches = skewed_batches()
    t = create_table(path, schema(), options=options())
    t.apply(batches[0], app_id="skew", batch_id=0)
    t.compact()
    for i, b in enumerate(batches[1:], start=1):
        t.apply(b, app_id="skew", batch_id=i)
    t.gc(dry_run=False)
    return batches
