"""Table schemas shared by the tests, in the dictionary form of ``TableSchema.from_dict``,
and the table options several tests share.

A test module that needs one of these imports it (and, when it needs another bucket
count, writes ``{**ID_V_SEQ, "num_buckets": 4}``) instead of copying the literal.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "ID_A",
    "ID_A_B",
    "ID_A_B_C",
    "ID_A_B_SEQ",
    "ID_NAME",
    "ID_V",
    "ID_V_SEQ",
    "KEEP_VERSIONS",
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
