"""One change feed, two readers: the JVM's (``io.cdcsink.format.ChangePlan`` /
``ChangeReader``) equals ``Table.changes``.

The tables of ``test_format_crosscheck`` (both apply modes, every column type, schema
changes, deletes, truncates, bulk loads, sequence columns, compaction, GC), written with
and without stored pre-images (``TableOptions(change_images=True)``, docs/format.md §12),
and random tables: the jar's ``DumpChanges`` writes the records of every single version,
a few multi-version ranges, a ``columns=`` subset and ``set_columns_only`` reads, which
must equal ``Table.changes`` of a table opened afresh (sorted by version, key and change
type; compared as Arrow tables with their types). A range GC collected is refused naming
the oldest readable version, and a tampered pre-images file names the file.

Needs ``java`` and ``jvm/target/cdc-sink-spark.jar`` (``make install`` builds it).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.ipc as ipc
import pytest
from hypothesis import strategies as st

from cdc_sink.table import TableOptions, open_table
from tests.jvm.test_format_crosscheck import (
    SCRIPTED,
    _flip,
    gc_collected_table,
    random_tables,
    run_jvm,
    write_all_types,
    write_no_seq,
)

#: Random tables of the hypothesis-driven test (more for a longer local run).
EXAMPLES = int(os.environ.get("CDC_SINK_JVM_CHANGE_EXAMPLES", "12"))

#: Scripted tables whose commits store pre-images (the JVM reads them instead of pages).
WITH_IMAGES: dict[str, Callable[[Path], None]] = {
    "all_types_images": lambda p: write_all_types(
        p, executors=False, options=TableOptions(page_rows=8, change_images=True)
    ),
    "all_types_executors_images": lambda p: write_all_types(
        p,
        executors=True,
        options=TableOptions(page_rows=16, snapshot_every=2, change_images=True),
    ),
    "no_seq_images": lambda p: write_no_seq(
        p, TableOptions(page_rows=4, change_images=True, bulk_events=10)
    ),
}

Job = tuple[Path, Path, list[tuple[int, int]], Sequence[str] | None, bool]


def dump_changes(jobs: Sequence[Job]) -> subprocess.CompletedProcess[str]:
    """Runs DumpChanges once (one JVM) over ``(table, out_dir, ranges, columns, set_only)``."""
    listing = jobs[0][1].parent.parent / f"{jobs[0][1].parent.name}.changes"
    lines = [
        "\t".join(
            [
                str(table),
                str(out),
                ",".join(f"{s}:{e}" for s, e in ranges),
                "*" if cols is None else ",".join(cols),
                "1" if only else "0",
            ]
        )
        for table, out, ranges, cols, only in jobs
    ]
    listing.write_text("\n".join(lines) + "\n")
    return run_jvm("io.cdcsink.format.DumpChanges", f"@{listing}")


def _ordered(t: pa.Table, keys: Sequence[str]) -> pa.Table:
    order = [("_commit_version", "ascending"), *((k, "ascending") for k in keys)]
    return t.sort_by([*order, ("_change_type", "ascending")]).combine_chunks()


def assert_same_changes(job: Job) -> int:
    """Every range of ``job`` read by the JVM equals ``Table.changes``; returns the
    records compared."""
    table, out, ranges, cols, only = job
    t = open_table(table)
    seen = 0
    for s, e in ranges:
        err = out / f"{s}_{e}.error"
        assert not err.exists(), err.read_text()
        want = t.changes(s, e, columns=cols, set_columns_only=only)
        got = ipc.open_file(out / f"{s}_{e}.arrow").read_all()
        keys = t.schema_at(e).primary_key
        where = f"{table.name} ({s}, {e}] columns={cols} set_only={only}"
        assert got.schema == want.schema, f"{where}: {got.schema} != {want.schema}"
        assert _ordered(got, keys).equals(_ordered(want, keys)), f"{where}: records differ"
        seen += want.num_rows
    return seen


def _ranges(table: Path) -> list[tuple[int, int]]:
    """Every single version, the whole retained history, and two halves of it."""
    t = open_table(table)
    lo, hi = t.oldest_version, t.version
    single = [(v - 1, v) for v in range(lo + 1, hi + 1)]
    mid = (lo + hi) // 2
    return [*single, (lo, hi), (lo, mid), (mid, hi)]


def _jobs(table: Path, out: Path, cols: Sequence[str] | None = None) -> list[Job]:
    """Full images and set columns only of every range; with ``cols``, of the ranges
    whose end has those columns, the same reads of ``cols`` alone."""
    ranges = _ranges(table)
    t = open_table(table)
    has = [r for r in ranges if cols and all(t.schema_at(r[1]).has_column(c) for c in cols)]
    subset: list[Job] = [
        (table, out / "cols", has, cols, False),
        (table, out / "cols_set", has, cols, True),
    ]
    return [
        (table, out / "full", ranges, None, False),
        (table, out / "set", ranges, None, True),
        *(subset if has else []),
    ]


SUBSETS = {"all_types": ["i64", "added", "seq"], "no_seq": ["w"]}


def test_scripted_tables_changes_equal(tmp_path: Path) -> None:
    jobs: list[Job] = []
    for name, write in {**SCRIPTED, **WITH_IMAGES}.items():
        write(tmp_path / name)
        cols = SUBSETS["no_seq" if name.startswith("no_seq") else "all_types"]
        jobs += _jobs(tmp_path / name, tmp_path / f"{name}.out", cols)
    res = dump_changes(jobs)
    assert res.returncode == 0, res.stderr
    records = sum(assert_same_changes(job) for job in jobs)
    assert records > 1000
    # The pre-images were there to be read.
    assert list((tmp_path / "all_types_images" / "_change_data").rglob("*.arrow"))


def test_random_tables_changes_equal(tmp_path: Path) -> None:
    def images(data: st.DataObject) -> dict[str, Any]:
        return {"change_images": data.draw(st.booleans())}

    made = random_tables(tmp_path, EXAMPLES, images, (2, 7))
    jobs = [job for p in made for job in _jobs(p, p.with_suffix(".out"))]
    res = dump_changes(jobs)
    assert res.returncode == 0, res.stderr
    for job in jobs:
        assert_same_changes(job)


def test_a_range_gc_collected_is_refused_naming_the_oldest(tmp_path: Path) -> None:
    path = tmp_path / "t"
    oldest = gc_collected_table(path)
    res = dump_changes([(path, tmp_path / "out", [(0, 2)], None, False)])
    assert res.returncode == 2
    assert "VersionNotRetainedException" in res.stderr
    assert f"the oldest readable version is {oldest}" in res.stderr


def test_tampered_pre_images_name_the_file(tmp_path: Path) -> None:
    path = tmp_path / "t"
    opts = TableOptions(page_rows=4, change_images=True)
    write_no_seq(path, opts)
    t = open_table(path, options=opts)  # the option is each writer's
    v = t.version
    t.apply([{"op": "upsert", "key": {"k1": 1, "k2": "a"}, "set": {"v": 7}}])
    (victim,) = [p for p in (path / "_change_data").rglob("*.arrow") if f"{v + 1:020d}" in p.name]
    _flip(victim)
    res = dump_changes([(path, tmp_path / "out", [(v, v + 1)], None, False)])
    assert res.returncode == 2
    assert victim.relative_to(path).as_posix() in res.stderr
    with pytest.raises(Exception):  # noqa: B017 - any of the Python reader's errors
        open_table(path).changes(v, v + 1)


def test_a_version_with_stored_pre_images_reads_no_page(tmp_path: Path) -> None:
    path = tmp_path / "t"
    opts = TableOptions(page_rows=4, snapshot_every=1, change_images=True)
    write_no_seq(path, opts)
    t = open_table(path, options=opts)
    t.apply([{"op": "upsert", "key": {"k1": i, "k2": "a"}, "set": {"v": 70 + i}} for i in range(5)])
    v = t.version
    want = open_table(path).changes(v - 1, v)
    assert want.num_rows > 0
    shutil.rmtree(path / "_pages")  # every snapshot's pages gone: only v's two objects left
    job: Job = (path, tmp_path / "out", [(v - 1, v)], None, False)
    res = dump_changes([job])
    assert res.returncode == 0, res.stderr
    got = ipc.open_file(tmp_path / "out" / f"{v - 1}_{v}.arrow").read_all()
    keys = ["k1", "k2"]
    assert _ordered(got, keys).equals(_ordered(want, keys))
