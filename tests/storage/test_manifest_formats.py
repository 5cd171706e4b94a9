"""A snapshot manifest's format markers (docs/format.md, "Protocol versions"): a reader
takes every ``page_format`` and ``stats_format`` this release knows and refuses any other
value as damage naming the manifest, rather than misreading pages or statistics a newer
writer laid out differently."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import cdc_sink
from cdc_sink.engine import core_of
from cdc_sink.errors import WalCorruption
from cdc_sink.storage.framing import encode_file, read_records
from cdc_sink.storage.snapshot import PAGE_FORMAT, SNAPSHOT_MAGIC, STATS_FORMAT, read_manifest

SCHEMA = {
    "columns": [
        {"name": "id", "type": "int64", "nullable": False},
        {"name": "v", "type": "int64"},
    ],
    "primary_key": ["id"],
    "num_buckets": 1,
}


@pytest.fixture
def manifest(tmp_path: Path) -> tuple[Path, str]:
    """A table with one snapshot; its root and the manifest's key."""
    t = cdc_sink.create_table(tmp_path / "t", SCHEMA)
    t.apply([{"op": "upsert", "key": {"id": k}, "set": {"v": k}} for k in range(50)])
    t.compact()
    snap = core_of(t).history.snapshot_at(0, t.version)
    assert snap is not None
    return tmp_path / "t", snap[1]


def _rewrite(root: Path, rel: str, **fields: int) -> None:
    path = root / rel
    record = read_records(
        path.read_bytes(), path=str(path), magic=SNAPSHOT_MAGIC, allow_torn_tail=False
    ).records[0]
    d = json.loads(record)
    d.update(fields)
    path.write_bytes(encode_file([json.dumps(d).encode()], magic=SNAPSHOT_MAGIC))


def test_the_formats_this_release_writes_read_back(manifest: tuple[Path, str]) -> None:
    root, rel = manifest
    m = read_manifest(str(root), rel)
    assert (m.page_format, m.stats_format) == (PAGE_FORMAT, STATS_FORMAT)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("page_format", PAGE_FORMAT + 1),
        ("page_format", 0),
        ("stats_format", STATS_FORMAT + 1),
        ("stats_format", 0),
    ],
)
def test_a_format_marker_this_release_does_not_know_is_damage_naming_the_manifest(
    manifest: tuple[Path, str], field: str, value: int
) -> None:
    root, rel = manifest
    _rewrite(root, rel, **{field: value})
    name = {"page_format": "page format", "stats_format": "statistics format"}[field]
    with pytest.raises(WalCorruption, match=f"{name} {value}, (newer|which is no)") as err:
        read_manifest(str(root), rel)
    assert err.value.path == str(root / rel)
    with pytest.raises(WalCorruption):
        cdc_sink.open_table(root).read()
