"""The reference the change-feed tests hold the feed to: snapshots of two versions read
back whole, projected onto the feed's columns, diffed key by key in plain Python; and the
replay of a feed onto a snapshot."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from cdc_sink.table import Table
from tests.model import normalize

Key = tuple[Any, ...]
Row = tuple[Any, ...]
Record = tuple[str, int, Row]  # change type, commit version, the row's values

__all__ = ["Key", "Record", "Row", "feed_records", "reference_feed", "replay", "snapshot"]


def snapshot(table: Table, version: int, end: int, names: Sequence[str]) -> dict[Key, Row]:
    """The table at ``version`` as {key: row}, its columns those of the schema at ``end``
    named ``names`` (matched by column id; a column ``version`` lacks reads None)."""
    at_end = table.schema_at(end)
    here = table.schema_at(version)
    ids = {c.id: c.name for c in here.columns}
    own = [ids.get(at_end.column(n).id) for n in names]
    data = table.read(version=version, columns=[n for n in own if n is not None]).to_pylist()
    nkeys = len(at_end.primary_key)
    out: dict[Key, Row] = {}
    for r in data:
        row = tuple(normalize(r[n]) if n is not None else None for n in own)
        out[row[:nkeys]] = row
    return out


def _diff(old: dict[Key, Row], new: dict[Key, Row], version: int) -> list[Record]:
    out: list[Record] = []
    for k in old.keys() - new.keys():
        out.append(("delete", version, old[k]))
    for k in new.keys() - old.keys():
        out.append(("insert", version, new[k]))
    for k in old.keys() & new.keys():
        if old[k] != new[k]:
            out += [("update_preimage", version, old[k]), ("update_postimage", version, new[k])]
    return out


def reference_feed(table: Table, start: int, end: int, names: Sequence[str]) -> list[Record]:
    """The diff of every two consecutive snapshots in [start, end], sorted."""
    snaps = {v: snapshot(table, v, end, names) for v in range(start, end + 1)}
    out = [r for v in range(start + 1, end + 1) for r in _diff(snaps[v - 1], snaps[v], v)]
    return sorted(out, key=repr)


def feed_records(feed: pa.Table, names: Sequence[str]) -> list[Record]:
    """The records of a change feed, in feed order."""
    return [
        (r["_change_type"], r["_commit_version"], tuple(normalize(r[n]) for n in names))
        for r in feed.to_pylist()
    ]


def replay(start: dict[Key, Row], records: Sequence[Record], nkeys: int) -> dict[Key, Row]:
    """``start`` with ``records`` applied in order; a pre-image or delete must match the
    row it replaces, and a post-image must follow its pre-image."""
    rows = dict(start)
    expect_post: Key | None = None
    for kind, _, row in records:
        k = row[:nkeys]
        assert (kind == "update_postimage") == (expect_post is not None), (kind, row)
        if kind == "insert":
            assert k not in rows, ("insert of a live key", row)
            rows[k] = row
        elif kind in ("delete", "update_preimage"):
            assert rows.get(k) == row, ("stale image", row, rows.get(k))
            del rows[k]
            expect_post = k if kind == "update_preimage" else None
        else:
            assert k == expect_post, ("post-image without its pre-image", row)
            rows[k] = row
            expect_post = None
    assert expect_post is None
    return rows
