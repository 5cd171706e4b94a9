"""Table schemas shared by the tests, in the dictionary form of ``TableSchema.from_dict``,
the table options several tests share, and the counter of the pages a read skips.

A test module that needs one of these imports it (and, when it needs another bucket
count, writes ``{**ID_V_SEQ, "num_buckets": 4}``) instead of copying the literal.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

__all__ = [
    "ID_A",
    "ID_A_B",
    "ID_A_B_C",
    "ID_A_B_SEQ",
    "ID_NAME",
    "ID_V",
    "ID_V_SEQ",
    "KEEP_VERSIONS",
    "SkippedPages",
    "count_skipped_pages",
    "keyed_by_id",
]

#: GC settings (``TableOptions`` fields) under which a test table keeps every version it
#: commits (the newest 1,000, none kept for its age), so each one can be read back:
#: ``TableOptions(**KEEP_VERSIONS, page_rows=16)``.
KEEP_VERSIONS: dict[str, Any] = {"retain_versions": 1000, "retain_seconds": 0.0}


def keyed_by_id(**columns: str) -> dict[str, Any]:
    """A schema of an int64 key ``id`` and ``columns`` (name -> type), in two buckets."""
    return {
        "columns": [
            {"name": "id", "type": "int64", "nullable": False},
            *({"name": n, "type": t} for n, t in columns.items()),
        ],
        "primary_key": ["id"],
        "num_buckets": 2,
    }


#: An int64 key ``id`` and a string ``a``, in two buckets.
ID_A: dict[str, Any] = keyed_by_id(a="string")

#: An int64 key ``id`` and a string ``name``, in two buckets (the object-store tests').
ID_NAME: dict[str, Any] = keyed_by_id(name="string")

#: An int64 key ``id``, an int64 ``a`` and a string ``b``, in two buckets.
ID_A_B: dict[str, Any] = keyed_by_id(a="int64", b="string")

#: :data:`ID_A_B` and a float64 ``c``.
ID_A_B_C: dict[str, Any] = {
    **ID_A_B,
    "columns": [*ID_A_B["columns"], {"name": "c", "type": "float64"}],
}

#: :data:`ID_A_B` and the int64 sequence column ``seq``.
ID_A_B_SEQ: dict[str, Any] = {
    **ID_A_B,
    "columns": [*ID_A_B["columns"], {"name": "seq", "type": "int64"}],
    "sequence_column": "seq",
}

#: An int64 key ``id`` and a string ``v``, in one bucket.
ID_V: dict[str, Any] = {
    "columns": [{"name": "id", "type": "int64"}, {"name": "v", "type": "string"}],
    "primary_key": ["id"],
}

#: An int64 key ``id``, a string ``v`` and the sequence column ``seq``, in one bucket.
ID_V_SEQ: dict[str, Any] = {
    "columns": [
        {"name": "id", "type": "int64"},
        {"name": "v", "type": "string"},
        {"name": "seq", "type": "int64"},
    ],
    "primary_key": ["id"],
    "sequence_column": "seq",
}


@dataclass
class SkippedPages:
    """How many pages the Python reader's page statistics excluded (``count``; a test may
    set it back to 0 between reads)."""

    count: int = 0


def count_skipped_pages(monkeypatch: pytest.MonkeyPatch) -> SkippedPages:
    """Counts, for the rest of the test, the pages ``cdc_sink.tablet.reads`` skips: each
    call of its ``may_match`` that proves no row of a page matches."""
    import cdc_sink.tablet.reads as reads

    counter = SkippedPages()
    real = reads.may_match

    def counting(stats: Any, p: Any) -> bool:
        ok = real(stats, p)
        counter.count += not ok
        return ok

    monkeypatch.setattr(reads, "may_match", counting)
    return counter
