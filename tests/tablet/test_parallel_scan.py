"""Scans build their pages in a few threads (``cdc_sink.tablet.reads``): a parallel scan
returns exactly what the one-thread scan returns and what the events say (every codec,
deleted rows, deltas, filters, warm and cold), its pages really are built in the pool,
and a cold scan keeps in memory only the stored pages it returns as they are."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from cdc_sink.engine import core_of
from cdc_sink.table import Table, TableOptions, create_table, open_table
from cdc_sink.tablet import reads
from tests.fixtures import ID_A_B_C, KEEP_VERSIONS

ROWS = 400


@pytest.fixture(params=["parallel", "serial"])
def mode(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Scans in two threads whatever their size, or always in the calling thread."""
    monkeypatch.setattr(reads, "usable_cores", lambda: 2)
    cells = 0 if request.param == "parallel" else 1 << 62
    monkeypatch.setattr(reads, "MIN_PARALLEL_CELLS", cells)
    return str(request.param)


def _build(path: Path, opts: TableOptions) -> tuple[Table, dict[int, dict[int, tuple[Any, ...]]]]:
    """A table with a stored load, deletes and partial updates; the rows of each version."""
    rng = np.random.default_rng(7)
    t = create_table(path, ID_A_B_C, options=opts)
    model = {k: (k, f"s{k}", k / 2) for k in range(ROWS)}
    t.apply(
        [
            {"op": "upsert", "key": {"id": k}, "set": {"a": a, "b": b, "c": c}}
            for k, (a, b, c) in model.items()
        ]
    )
    t.compact()
    states = {t.version: dict(model)}
    for step in range(3):
        dead = rng.choice(sorted(model), 25, replace=False).tolist()
        upd = rng.choice(sorted(set(model) - set(dead)), 60, replace=False).tolist()
        events: list[dict[str, Any]] = [{"op": "delete", "key": {"id": k}} for k in dead]
        for k in upd:
            events.append({"op": "update", "key": {"id": k}, "set": {"b": f"u{step}-{k}"}})
            a, _, c = model[k]
            model[k] = (a, f"u{step}-{k}", c)
        for k in dead:
            del model[k]
        t.apply(events)
        states[t.version] = dict(model)
    return t, states


def _rows(table: pa.Table) -> dict[int, tuple[Any, ...]]:
    d = table.to_pydict()
    return {k: (a, b, c) for k, a, b, c in zip(d["id"], d["a"], d["b"], d["c"], strict=True)}


@pytest.mark.parametrize("codec", [None, "lz4", "zstd"])
def test_a_scan_returns_the_rows_of_each_version_warm_and_cold(
    tmp_path: Path, codec: str | None, mode: str
) -> None:
    opts = TableOptions(page_rows=8, page_compression=codec, **KEEP_VERSIONS)  # type: ignore[arg-type]
    warm, states = _build(tmp_path / "t", opts)
    for v, want in states.items():
        assert _rows(warm.read(version=v)) == want, f"warm, version {v}"
        cold = open_table(tmp_path / "t", options=opts)
        assert _rows(cold.read(version=v)) == want, f"cold, version {v}"
        flt = [("a", ">=", 100), ("b", "!=", "s150")]
        got = _rows(cold.read(version=v, filter=flt))
        assert got == {k: r for k, r in want.items() if r[0] >= 100 and r[1] != "s150"}
        some = cold.read(version=v, columns=["c", "id"])
        assert dict(zip(some["id"].to_pylist(), some["c"].to_pylist(), strict=True)) == {
            k: r[2] for k, r in want.items()
        }


def test_a_parallel_scan_builds_its_pages_in_the_pool(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    opts = TableOptions(page_rows=8, **KEEP_VERSIONS)
    t, _ = _build(tmp_path / "t", opts)
    names: set[str] = set()
    build = reads._PageBuilder.build

    def recording(self: reads._PageBuilder, page_no: int) -> pa.RecordBatch | None:
        names.add(threading.current_thread().name)
        return build(self, page_no)

    monkeypatch.setattr(reads._PageBuilder, "build", recording)
    t.read()
    if mode == "parallel":
        assert names and all(n.startswith("cdc_sink-scan") for n in names)
    else:
        assert names == {threading.current_thread().name}


@pytest.mark.parametrize("codec", [None, "zstd"])
def test_a_cold_scan_keeps_only_the_stored_pages_it_returns_whole(
    tmp_path: Path, codec: str | None, mode: str
) -> None:
    opts = TableOptions(page_rows=8, page_compression=codec, **KEEP_VERSIONS)  # type: ignore[arg-type]
    _, states = _build(tmp_path / "t", opts)
    v = max(states)
    cold = open_table(tmp_path / "t", options=opts)
    assert _rows(cold.read(version=v)) == states[v]
    for b in range(cold.schema.num_buckets):
        tablet = core_of(cold).reader_tablet(b, v)
        dv = tablet.deletion_vector(v)
        col = tablet.columns[cold.schema.column("a").id]  # no delta on "a"
        pages = col.base_at(v).pages
        for p in range(len(pages)):
            has_dead = any(p * 8 <= r < (p + 1) * 8 for r in dv)
            assert pages.loaded(p) != has_dead, f"bucket {b} page {p}"
    assert _rows(cold.read(version=v)) == states[v]  # and reads them again when asked
