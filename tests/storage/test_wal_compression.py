"""WAL segment compression (``TableOptions.wal_compression``): segments written with any
codec replay exactly, a table whose segments mix codecs (the option changed between opens)
reads every retained version exactly, zstd writes fewer bytes than lz4 and lz4 fewer than
none, and a bad codec is a typed error."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from cdc_sink.errors import InvalidOption
from cdc_sink.storage.change_codec import COMPRESS_MIN_EVENTS, WAL_CODECS, WalCompression
from cdc_sink.table import Table, TableOptions, create_table, open_table
from tests.fixtures import ID_A_B_C, KEEP_VERSIONS
from tests.model import RefModel, model_rows, table_to_rows

SCHEMA = ID_A_B_C
KEYS = 5 * COMPRESS_MIN_EVENTS  # each bucket's share of every batch is compressed

#: No snapshot is taken, so a reopen replays every segment.
OPTS: dict[str, Any] = dict(
    snapshot_every=10_000,
    snapshot_events=10**9,
    bulk_events=10**9,
    **KEEP_VERSIONS,
)


def _batch(i: int) -> list[dict[str, Any]]:
    """Partial updates of one column (inserts in batch 0), and a few deletes."""
    if i == 0:
        return [
            {"op": "insert", "key": {"id": k}, "set": {"a": k, "b": f"s{k % 97}", "c": k / 3}}
            for k in range(KEYS)
        ]
    evs: list[dict[str, Any]] = [
        {"op": "update", "key": {"id": k}, "set": {"a": k * i} if i % 2 else {"b": f"t{i}"}}
        for k in range(i, KEYS, 2)
    ]
    evs += [{"op": "delete", "key": {"id": k}} for k in range(i * 11, i * 11 + 5)]
    return evs


def _wal_bytes(root: Path) -> int:
    return sum(
        os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(root / "_wal") for f in fs
    )


def _rows(t: Table, version: int | None = None) -> dict[Any, Any]:
    return table_to_rows(t.read(version=version), ["id"])


@pytest.mark.parametrize("codec", WAL_CODECS)
def test_segments_of_every_codec_replay_exactly(tmp_path: Path, codec: WalCompression) -> None:
    root = tmp_path / "t"
    t = create_table(str(root), SCHEMA, options=TableOptions(wal_compression=codec, **OPTS))
    model = RefModel(t.schema)
    expected: dict[int, Any] = {}
    for i in range(4):
        evs = _batch(i)
        v = t.apply(evs).version
        model.apply(evs)
        expected[v] = model_rows(model.rows, t.schema)
    reopened = open_table(str(root))  # no snapshot: every bucket replays its segments
    for v, rows in expected.items():
        assert _rows(reopened, v) == rows, v


def test_zstd_segments_are_smaller_than_lz4_and_lz4_than_none(tmp_path: Path) -> None:
    sizes = {}
    for codec in WAL_CODECS:
        root = tmp_path / str(codec)
        t = create_table(str(root), SCHEMA, options=TableOptions(wal_compression=codec, **OPTS))
        for i in range(3):
            t.apply(_batch(i))
        sizes[codec] = _wal_bytes(root)
    assert sizes["zstd"] < sizes["lz4"] < sizes[None]


def test_a_table_whose_segments_mix_codecs_reads_every_version_exactly(tmp_path: Path) -> None:
    root = tmp_path / "t"
    model = RefModel(create_table(str(root), SCHEMA).schema)
    expected: dict[int, Any] = {}
    for i, codec in enumerate(["zstd", None, "lz4", "zstd"]):
        t = open_table(str(root), options=TableOptions(wal_compression=codec, **OPTS))  # type: ignore[arg-type]
        evs = _batch(i)
        v = t.apply(evs).version
        model.apply(evs)
        expected[v] = model_rows(model.rows, t.schema)
    reopened = open_table(str(root))
    for v, rows in expected.items():
        assert _rows(reopened, v) == rows, v


@pytest.mark.parametrize("bad", ["gzip", "LZ4", 4, True])
def test_an_unknown_wal_codec_is_a_typed_error(bad: object) -> None:
    with pytest.raises(InvalidOption, match="wal_compression") as e:
        TableOptions(wal_compression=bad)  # type: ignore[arg-type]
    assert e.value.option == "wal_compression"
