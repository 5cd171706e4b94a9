"""Writes ``unsalted_v2``: a table as cdc_sink wrote it before the salted key index.

Run with the code of commit cead0e4 on the path (not this tree's), e.g.::

    git worktree add --detach /tmp/old cead0e4   # plus the built C extensions
    PYTHONPATH=/tmp/old .venv/bin/python tests/tablet/data/make_unsalted_v2.py \
        tests/tablet/data/unsalted_v2

Two buckets, a composite key (int64, string), pages of 64 rows: a load, updates and
deletes, a compaction (a snapshot of each bucket with its row hashes and index slots),
then upserts, deletes and revivals in WAL segments after it. ``expected.json`` holds the
latest version and its rows.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from typing import Any

from cdc_sink.table import TableOptions, create_table, open_table


def ev(op: str, k: int, **values: Any) -> dict[str, Any]:
    """An event on key ``(k, "n<k % 7>")``."""
    e: dict[str, Any] = {"op": op, "key": {"id": k, "name": f"n{k % 7}"}}
    if values:
        e["set"] = values
    return e


def main(out: str) -> None:
    shutil.rmtree(out, ignore_errors=True)
    schema = {
        "columns": [
            {"name": "id", "type": "int64", "nullable": False},
            {"name": "name", "type": "string", "nullable": False},
            {"name": "qty", "type": "int64"},
        ],
        "primary_key": ["id", "name"],
        "num_buckets": 2,
    }
    opts = TableOptions(page_rows=64, snapshot_every=10**9, compact_every=10**9, bulk_events=10**9)
    t = create_table(out, schema, options=opts)
    t.apply([ev("upsert", k, qty=k * 10) for k in range(300)])
    t.apply(
        [ev("update", k, qty=-k) for k in range(0, 300, 3)]
        + [ev("delete", k) for k in range(1, 300, 5)]
    )
    t.compact()
    t.apply(
        [ev("upsert", k, qty=k) for k in range(290, 340)]
        + [ev("delete", k) for k in range(2, 300, 11)]
    )
    t.apply([ev("upsert", k, qty=7) for k in range(1, 300, 5)])
    rows = sorted(open_table(out).read().to_pylist(), key=lambda r: (r["id"], r["name"]))
    with open(os.path.join(out, "expected.json"), "w") as f:
        json.dump({"version": t.version, "rows": rows}, f, separators=(",", ":"))


if __name__ == "__main__":
    main(sys.argv[1])
