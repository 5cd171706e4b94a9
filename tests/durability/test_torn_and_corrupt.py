"""Torn and corrupt files of a table on disk: detected, never a silently different table.

A golden table is written once (the workload's batches, with compaction and GC); each
test damages a copy:

* a committed WAL segment truncated at every byte offset of its last record raises
  ``WalCorruption`` naming the file, and the file is left as it is (a committed segment
  is never "repaired" by truncation: that would drop committed events);
* >= 1,000 random single-bit flips across committed segments, log entries, snapshot
  manifests and page files are each detected (``WalCorruption``), or, for the newest log
  entry, make that version uncommitted; a read never returns a different table;
* a torn segment/manifest/page file of an attempt that never committed is ignored by
  reads and removed by GC;
* a torn newest log entry (a partial write of a commit) is not committed, and after
  reopening that version is committed again.
"""

from __future__ import annotations

import os
import random
import shutil
import struct
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

from cdc_sink.errors import WalCorruption
from cdc_sink.storage.framing import RECORD_HEADER_SIZE, encode_file
from cdc_sink.storage.segments import file_version
from cdc_sink.storage.snapshot import read_manifest
from cdc_sink.storage.version_log import LOG_MAGIC, LogEntry
from cdc_sink.storage.wal import WAL_MAGIC
from cdc_sink.table import Table, create_table, open_table
from tests.durability import checks, crash_driver, workload

SEED = 23
BATCHES = 9  # the last step is an apply: the newest version needs its segments


@pytest.fixture(scope="module")
def golden(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A table after the workload (compacted and garbage-collected along the way)."""
    root = Path(tmp_path_factory.mktemp("golden"))
    scratch = checks.scratch_dir()
    if scratch is not None:
        root = Path(scratch)
    path = root / "table"
    create_table(path, workload.schema(), options=workload.options())
    crash_driver.run(str(path), SEED, BATCHES)
    open_table(path, options=workload.options()).gc(dry_run=False)
    yield path
    if scratch is not None:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def table_copy(golden: Path, durable_dir: Path) -> Path:
    shutil.copytree(golden, durable_dir)
    return durable_dir


def _open(path: Path) -> Table:
    return open_table(path, options=workload.options())


def _read_all(path: Path) -> tuple[int, dict[int, dict[tuple[object, ...], dict[str, object]]]]:
    """Opens the table and reads every retained version: (latest, rows by version)."""
    t = _open(path)
    return t.version, {
        v: checks.rows_of(t.read(version=v)) for v in range(t.oldest_version, t.version + 1)
    }


def _committed_files(path: Path) -> dict[str, list[str]]:
    """Files the retained versions of the table reference, by kind (relative paths)."""
    t = _open(path)
    out: dict[str, set[str]] = {
        "segment": set(),
        "manifest": set(),
        "pages": set(),
        "log": set(),
        "checkpoint": set(),
    }
    for v in range(t.oldest_version, t.version + 1):
        out["log"].add(os.path.relpath(t.log.entry_path(v), path))
        for ref in t.log.read(v).buckets.values():
            if ref.segment:
                out["segment"].add(ref.segment)
            if ref.snapshot:
                out["manifest"].add(ref.snapshot)
    ckpt = t.log.read_checkpoint()
    if ckpt is not None:
        out["checkpoint"].add(os.path.relpath(t.log.checkpoint_path(ckpt.version), path))
        out["manifest"].update(s for s in ckpt.bucket_snapshots.values() if s)
    for m in out["manifest"]:
        if (path / m).exists():
            out["pages"].update(read_manifest(str(path), m).files)
    # GC deletes what the kept snapshots cover, even if a retained entry names it.
    return {k: sorted(r for r in v if (path / r).exists()) for k, v in out.items()}


def _expected(path: Path) -> dict[int, dict[tuple[object, ...], dict[str, object]]]:
    """The model's rows of every retained version of the (undamaged) table."""
    t = _open(path)
    checks.check_table(t, SEED)
    return {v: checks.rows_of(t.read(version=v)) for v in range(t.oldest_version, t.version + 1)}


def _newest_segments(path: Path) -> list[str]:
    t = _open(path)
    return sorted(r.segment for r in t.log.read(t.version).buckets.values() if r.segment)


def _record_offsets(data: bytes, magic: bytes) -> list[int]:
    offsets, pos = [], len(magic)
    while pos < len(data):
        offsets.append(pos)
        (length,) = struct.unpack_from("<I", data, pos)
        pos += RECORD_HEADER_SIZE + length
    assert pos == len(data)
    return offsets


# ---------------------------------------------------------------------- (a) truncation
def test_committed_segment_truncated_anywhere_in_its_last_record_is_corruption(
    table_copy: Path,
) -> None:
    rel = _newest_segments(table_copy)[0]
    seg = table_copy / rel
    data = seg.read_bytes()
    last = _record_offsets(data, WAL_MAGIC)[-1]
    latest = _open(table_copy).version
    assert len(data) - last > 100
    for cut in range(last, len(data)):
        seg.write_bytes(data[:cut])
        with pytest.raises(WalCorruption) as info:
            _open(table_copy).read(version=latest)
        assert info.value.path == str(seg), (cut, info.value)
        assert rel in str(info.value)
        assert seg.stat().st_size == cut, f"the committed segment was modified at cut {cut}"
    for cut in (last, last + 5, len(data) - 1):  # the writer refuses it too
        seg.write_bytes(data[:cut])
        with pytest.raises(WalCorruption):
            _open(table_copy).apply(
                workload.batch(SEED, BATCHES), app_id=workload.APP_ID, batch_id=BATCHES
            )
        assert seg.stat().st_size == cut
    seg.write_bytes(data)
    checks.check_table(_open(table_copy), SEED)


# ---------------------------------------------------------------------- (b) bit flips
FLIPS = 1000


Rows = dict[tuple[object, ...], dict[str, object]]


def _bucket_rows(t: Table, bucket: int, version: int) -> Rows:
    schema = t.schema_at(version)
    return checks.rows_of(
        pa.Table.from_batches(
            list(t.bucket_batches(bucket, version)), schema=schema.arrow_schema(schema.names)
        )
    )


def _reads(path: Path, buckets: list[int]) -> tuple[int, dict[tuple[int, int], Rows]]:
    """Opens the table and reads ``buckets`` at every retained version."""
    t = _open(path)
    t.versions()
    return t.version, {
        (b, v): _bucket_rows(t, b, v)
        for b in buckets
        for v in range(t.oldest_version, t.version + 1)
    }


def _flip_trials(path: Path, kinds: list[str], flips: int, seed: int) -> Counter[str]:
    """Flips one random bit at a time in the given kinds of committed files and reads
    every retained version (of the file's bucket; of all buckets for log files) after
    each flip; returns the outcomes; fails on a silently different table. The undamaged
    table must equal the model (checked by the caller)."""
    files = _committed_files(path)
    pool = [rel for k in kinds for rel in files[k]]
    assert pool, kinds
    originals = {rel: (path / rel).read_bytes() for rel in pool}
    nb = workload.SCHEMA_DICT["num_buckets"]
    latest, expected = _reads(path, list(range(nb)))
    newest_entry = os.path.relpath(_open(path).log.entry_path(latest), path)
    rng = random.Random(seed)
    outcomes: Counter[str] = Counter()
    bad: list[str] = []
    for n in range(flips):
        rel = pool[n % len(pool)]
        data = bytearray(originals[rel])
        pos = rng.randrange(len(data))
        data[pos] ^= 1 << rng.randrange(8)
        (path / rel).write_bytes(bytes(data))
        what = f"{rel} byte {pos}"
        buckets = list(range(nb)) if rel.startswith("_log") else [int(rel.split("/")[1])]
        try:
            got_latest, got = _reads(path, buckets)
        except WalCorruption as exc:
            outcomes["WalCorruption"] += 1
            if exc.path != str(path / rel):
                bad.append(f"{what}: WalCorruption names {exc.path}")
        except Exception as exc:
            outcomes[type(exc).__name__] += 1
            bad.append(f"{what}: {type(exc).__name__} instead of WalCorruption: {exc}")
        else:
            if got_latest == latest:
                outcomes["same table"] += 1  # a byte no read needs
            elif rel == newest_entry and got_latest == latest - 1:
                outcomes["newest entry uncommitted"] += 1
            else:
                bad.append(f"{what}: latest version {got_latest} instead of {latest}")
            for key, rows in got.items():
                if rows != expected.get(key):
                    bad.append(f"{what}: bucket {key[0]} version {key[1]} reads different rows")
        (path / rel).write_bytes(originals[rel])
    assert not bad, f"{len(bad)} of {flips} flips not detected properly:\n" + "\n".join(bad[:20])
    return outcomes


def test_random_bit_flips_in_committed_files_are_always_detected(table_copy: Path) -> None:
    checks.check_table(_open(table_copy), SEED)
    outcomes = _flip_trials(table_copy, ["segment", "log", "manifest", "pages"], FLIPS, 1)
    assert outcomes["WalCorruption"] > FLIPS // 2, outcomes


def test_random_bit_flips_in_the_checkpoint_are_detected(durable_dir: Path) -> None:
    """The checkpoint is the only record of a bucket's kept snapshot once GC deleted the
    entries that named it (a bucket no recent version touched)."""
    batches = workload.skewed_table(durable_dir)
    files = _committed_files(durable_dir)
    assert files["checkpoint"], "no checkpoint"
    assert checks.rows_of(_open(durable_dir).read()) == checks.model_after(batches)[-1]
    _flip_trials(durable_dir, ["checkpoint"], 40, 2)


def test_a_log_entry_missing_below_the_latest_is_detected(durable_dir: Path) -> None:
    t = create_table(durable_dir, workload.schema(), options=workload.options())
    for i in range(8):  # data versions only, then GC keeps 1 + 4 entries
        t.apply(workload.batch(SEED, i), app_id=workload.APP_ID, batch_id=i)
    t.gc(dry_run=False, retain_versions=4)
    checks.check_table(_open(durable_dir), SEED)
    expected = {
        v: checks.rows_of(t.read(version=v)) for v in range(t.oldest_version, t.version + 1)
    }
    ckpt = t.log.read_checkpoint()
    assert ckpt is not None and ckpt.version < t.version - 1
    os.unlink(t.log.entry_path(t.version - 1))  # a data version between the two
    try:
        _, got = _read_all(durable_dir)
    except WalCorruption:
        return
    assert got == {v: expected[v] for v in got}, "a version reads other rows"


def test_a_missing_committed_file_is_corruption_naming_it(table_copy: Path) -> None:
    files = _committed_files(table_copy)
    nb = workload.SCHEMA_DICT["num_buckets"]
    for kind in ("segment", "manifest", "pages"):
        rel = files[kind][-1]
        data = (table_copy / rel).read_bytes()
        os.unlink(table_copy / rel)
        with pytest.raises(WalCorruption) as info:
            _reads(table_copy, list(range(nb)))
        assert info.value.path == str(table_copy / rel)
        (table_copy / rel).write_bytes(data)


def test_a_missing_committed_file_is_never_silently_skipped(table_copy: Path) -> None:
    files = _committed_files(table_copy)
    nb = workload.SCHEMA_DICT["num_buckets"]
    for kind in ("segment", "manifest", "pages"):
        for rel in files[kind]:
            data = (table_copy / rel).read_bytes()
            os.unlink(table_copy / rel)
            with pytest.raises((WalCorruption, FileNotFoundError)) as info:
                _reads(table_copy, list(range(nb)))
            assert rel in str(info.value)
            (table_copy / rel).write_bytes(data)


# ---------------------------------------------------------------------- (c) orphans
def _plant_torn_orphans(path: Path, version: int) -> list[Path]:
    """Torn files of a crashed attempt at ``version``: a segment, manifest and pages."""
    src_seg = path / _newest_segments(path)[0]
    data = src_seg.read_bytes()
    snaps = sorted((path / "_snapshots").rglob("*.manifest"))
    manifest = snaps[-1].read_bytes()
    planted = []
    for sub, ext, content in (
        ("_wal", "wal", data[: len(data) * 2 // 3]),
        ("_snapshots", "manifest", manifest[: len(manifest) // 2]),
        ("_pages", "pages", b"\x00" * 100),
    ):
        p = path / sub / "1" / f"{version:020d}-0bad0bad0bad.{ext}"
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(content)
        planted.append(p)
    return planted


def test_torn_orphans_of_a_superseded_attempt_are_ignored_and_collected(table_copy: Path) -> None:
    expected = _expected(table_copy)
    latest = max(expected)
    planted = _plant_torn_orphans(table_copy, latest)  # a losing attempt at `latest`
    planted += _plant_torn_orphans(table_copy, latest + 1)  # the crashed next attempt
    assert _read_all(table_copy) == (latest, expected)
    t = _open(table_copy)
    assert (
        t.apply(workload.batch(SEED, BATCHES), app_id=workload.APP_ID, batch_id=BATCHES).version
        == latest + 1
    )
    listed = t.gc(dry_run=True)
    for p in planted:
        assert str(p) in listed
    assert sorted(t.gc(dry_run=False)) == sorted(listed)
    for p in planted:
        assert not p.exists()
    checks.check_table(_open(table_copy), SEED)


def test_torn_orphans_of_a_crashed_next_attempt_are_collected(table_copy: Path) -> None:
    expected = _expected(table_copy)
    latest = max(expected)
    planted = _plant_torn_orphans(table_copy, latest + 1)
    old = 1_000_000_000  # an attempt that crashed long ago (2001): no commit is in flight
    for p in planted:
        os.utime(p, (old, old))
    assert _read_all(table_copy) == (latest, expected)
    t = _open(table_copy)
    assert all(str(p) in t.gc(dry_run=True) for p in planted)
    t.gc(dry_run=False)
    assert not any(p.exists() for p in planted)


# ---------------------------------------------------------------------- (d) torn log entry
def test_torn_newest_log_entry_is_not_committed_and_the_version_commits_again(
    golden: Path, table_copy: Path
) -> None:
    expected = _expected(table_copy)
    latest = max(expected)
    t = _open(table_copy)
    prev = t.log.read(latest)
    entry = LogEntry(
        version=latest + 1,
        app_id=workload.APP_ID,
        batch_id=BATCHES,
        commit_time_ms=prev.commit_time_ms + 1,
        schema_id=prev.schema_id,
        buckets=dict(prev.buckets),
        stats={},
    )
    full = encode_file([entry.to_json().encode()], magic=LOG_MAGIC)
    target = Path(t.log.entry_path(latest + 1))
    torn = [full[:cut] for cut in range(len(full))] + [b"\x00" * len(full)]
    for data in torn:  # every partial write: a reader sees `latest`, unchanged
        target.write_bytes(data)
        t2 = _open(table_copy)
        assert t2.version == latest, len(data)
        assert target.exists(), "a reader must not repair the log"
        t2.log.repair()  # what a writer does before its first commit
        assert not target.exists(), "the unfinished entry was not removed by repair"
    for data in (torn[0], torn[9], torn[len(full) // 2], torn[-2], torn[-1]):
        shutil.rmtree(table_copy)
        shutil.copytree(golden, table_copy)
        target.write_bytes(data)
        t3 = _open(table_copy)
        assert checks.rows_of(t3.read()) == expected[latest]
        res = t3.apply(workload.batch(SEED, BATCHES), app_id=workload.APP_ID, batch_id=BATCHES)
        assert (res.version, res.skipped) == (latest + 1, False)
        assert checks.check_table(_open(table_copy), SEED) == BATCHES + 1


def test_segments_of_the_golden_table_exist(golden: Path) -> None:
    """Sanity of the fixture: versions, a checkpoint, snapshots and segments on disk."""
    files = _committed_files(golden)
    assert files["segment"] and files["manifest"] and files["pages"] and files["checkpoint"]
    assert all(file_version(f) is not None for f in files["segment"])
    assert _open(golden).version > _open(golden).oldest_version
