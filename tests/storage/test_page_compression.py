"""Snapshot page compression (``TableOptions.page_compression``): pages written with any
codec read back exactly, a table whose snapshots mix codecs (the option changed between
opens) reads every retained version exactly, and a bad codec is a typed error.

Value pages and key pages are compressed; row hashes (random bits) and the index slots
(decoded at every bucket load) never are."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from cdc_sink.errors import InvalidOption
from cdc_sink.storage.pages import PAGE_CODECS, PageCompression, page_array, page_blob
from cdc_sink.storage.snapshot import SnapshotManifest, read_manifest
from cdc_sink.table import Table, TableOptions, create_table, open_table
from tests.fixtures import KEEP_VERSIONS
from tests.model import RefModel, model_rows, table_to_rows

SCHEMA: dict[str, Any] = {
    "columns": [
        {"name": "id", "type": "int64", "nullable": False},
        {"name": "n", "type": "int64"},
        {"name": "s", "type": "string"},
        {"name": "d", "type": "decimal(18,2)"},
        {"name": "ts", "type": "timestamp"},
    ],
    "primary_key": ["id"],
    "num_buckets": 2,
}


def _events(lo: int, hi: int, tag: int) -> list[dict[str, Any]]:
    return [
        {
            "op": "upsert",
            "key": {"id": k},
            "set": {
                "n": k * tag,
                "s": None if k % 7 == 0 else f"v{tag}-{k % 13}",
                "d": f"{k % 1000}.{tag % 100:02d}",
                "ts": f"2026-01-0{1 + k % 9}T00:00:00Z",
            },
        }
        for k in range(lo, hi)
    ]


@pytest.mark.parametrize("codec", PAGE_CODECS)
def test_a_page_blob_round_trips_with_every_codec(codec: PageCompression) -> None:
    arrays = [
        pa.array(range(10_000), pa.int64()),
        pa.array([None if i % 5 == 0 else f"x{i % 17}" for i in range(10_000)]),
        pa.array([], pa.float64()),
    ]
    for arr in arrays:
        blob = page_blob(arr, codec)
        back = page_array(blob)
        assert back.equals(arr)
    repetitive = pa.array([i % 3 for i in range(100_000)], pa.int64())
    if codec is not None:
        assert len(page_blob(repetitive, codec)) < len(page_blob(repetitive)) // 10


def _manifests(root: Path) -> list[SnapshotManifest]:
    """Every snapshot manifest written under ``root``."""
    return [
        read_manifest(str(root), os.path.relpath(os.path.join(d, f), root))
        for d, _, fs in os.walk(root / "_snapshots")
        for f in fs
        if f.endswith(".manifest")
    ]


def _rows(t: Table, version: int | None = None) -> dict[Any, Any]:
    return table_to_rows(t.read(version=version), ["id"])


@pytest.mark.parametrize("first,second", [("zstd", None), (None, "lz4"), ("lz4", "zstd")])
def test_a_table_whose_snapshots_mix_codecs_reads_every_version_exactly(
    tmp_path: Path, first: PageCompression, second: PageCompression
) -> None:
    root = tmp_path / "t"
    opts: dict[str, Any] = dict(page_rows=64, snapshot_every=2, **KEEP_VERSIONS)
    t = create_table(str(root), SCHEMA, options=TableOptions(page_compression=first, **opts))
    model = RefModel(t.schema)
    expected: dict[int, Any] = {}
    for i in range(9):
        if i == 5:  # the option changes: later snapshots use the other codec
            t.compact()
            t = open_table(str(root), options=TableOptions(page_compression=second, **opts))
        evs = _events(i * 60, i * 60 + 300, i + 1)
        v = t.apply(evs).version
        model.apply(evs)
        expected[v] = model_rows(model.rows, t.schema)
    t.compact()
    assert len(_manifests(root)) >= 4
    for reopened in (t, open_table(str(root))):
        for v, rows in expected.items():
            assert _rows(reopened, v) == rows, v


def test_compressed_pages_are_smaller_slots_and_hashes_stay_uncompressed(tmp_path: Path) -> None:
    sizes: dict[PageCompression, dict[str, int]] = {}
    for codec in PAGE_CODECS:
        root = tmp_path / str(codec)
        t = create_table(
            str(root), SCHEMA, options=TableOptions(page_compression=codec, bulk_events=1000)
        )
        t.apply(_events(0, 20_000, 3))  # the bulk path: one snapshot of each bucket
        size = {"values": 0, "keys": 0, "hashes": 0, "slots": 0}
        rows = 0
        for man in _manifests(root):
            size["values"] += sum(loc.length for locs in man.columns.values() for loc in locs)
            size["keys"] += sum(loc.length for loc in man.keys[0])
            size["hashes"] += sum(loc.length for loc in man.row_hash)
            assert man.index_slots is not None
            size["slots"] += man.index_slots.length
            rows += sum(loc.rows for loc in man.keys[0])
        assert rows == 20_000
        sizes[codec] = size
        reopened = open_table(str(root))
        assert _rows(reopened) == _rows(t)
        # the stored slots serve lookups: every key found, a missing one not
        got = reopened.get([{"id": k} for k in (0, 7, 19_999, 20_000)])
        assert sorted(got.column("id").to_pylist()) == [0, 7, 19_999]
    plain = sizes[None]
    assert plain["keys"] >= 8 * 20_000  # int64 keys, no nulls: 8 bytes a row
    for codec in ("zstd", "lz4"):
        assert sizes[codec]["keys"] < plain["keys"] * 0.6, codec  # sequential ids
        assert sizes[codec]["slots"] == plain["slots"], codec  # never compressed
        assert sizes[codec]["hashes"] == plain["hashes"], codec  # never compressed
    assert sizes["zstd"]["values"] < plain["values"] * 0.7
    assert sizes["lz4"]["values"] < plain["values"] * 0.8


def test_an_unknown_codec_is_a_typed_error() -> None:
    with pytest.raises(InvalidOption, match="page_compression") as e:
        TableOptions(page_compression="gzip")  # type: ignore[arg-type]
    assert e.value.option == "page_compression"
