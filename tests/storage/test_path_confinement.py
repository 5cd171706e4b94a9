"""Every path read from a table file stays inside the table (storage/layout.py ``checked``).

A log entry, a checkpoint or a snapshot manifest whose record is intact (its CRC holds) but
names a path outside the table, a path climbing out with ``..``, or a file of another kind
is refused with :class:`WalCorruption` naming the file that held the reference and the
kind of reference. The file it points at is never opened, so nothing of it reaches the
error; GC neither lists nor deletes anything outside the table.

Each test writes sentinel files outside the table, named like the files a table holds and
filled with a marker no table file contains, and checks that the marker never appears in
an error, that no sentinel is opened, and that every sentinel survives.
"""

from __future__ import annotations

import json
import os
import secrets
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from cdc_sink.engine import core_of
from cdc_sink.errors import WalCorruption
from cdc_sink.storage import layout
from cdc_sink.storage.framing import encode_file, read_records
from cdc_sink.storage.gc import GcPlan, execute_gc
from cdc_sink.storage.log_files import CHECKPOINT_MAGIC, LOG_MAGIC
from cdc_sink.storage.snapshot import SNAPSHOT_MAGIC
from cdc_sink.table import Table, TableOptions, create_table, open_table
from tests.fixtures import ID_A

MARKER = secrets.token_hex(4)
"""Eight characters that only the sentinel files hold (a reader echoing a file's first
bytes would show them)."""

#: The name a sentinel of each kind gets: a valid file name of that kind.
_EXT = {"segment": "wal", "snapshot": "manifest", "pages": "pages", "rejects": "arrow"}


# ---------------------------------------------------------------- audit of opened files

_opened: list[str] | None = None


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if event == "open" and _opened is not None and isinstance(args[0], (str, bytes)):
        _opened.append(os.fsdecode(args[0]))


sys.addaudithook(_audit)  # idle unless a test collects (an audit hook cannot be removed)


@pytest.fixture
def opened() -> Iterator[list[str]]:
    """The paths the process opens (``open``/``os.open``) while the test runs."""
    global _opened
    _opened = []
    try:
        yield _opened
    finally:
        _opened = None


# ---------------------------------------------------------------- the table and sentinels


def _events(first: int, n: int) -> list[dict[str, Any]]:
    """``n`` inserts into both buckets and one update of a missing key (a reject)."""
    rows: list[dict[str, Any]] = [
        {"op": "insert", "key": {"id": k}, "set": {"a": f"v{k}"}} for k in range(first, first + n)
    ]
    return [*rows, {"op": "update", "key": {"id": -1}, "set": {"a": "x"}}]


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """A table with segments, snapshots, page files and rejects files in both buckets,
    and the newest versions in segments after the newest snapshot."""
    path = tmp_path / "t"
    t = create_table(path, ID_A, options=TableOptions.for_tests())
    for i in range(4):
        t.apply(_events(10 * i, 6))
    t.compact()
    for i in range(4, 6):
        t.apply(_events(10 * i, 6))
    return path


@pytest.fixture
def outside(tmp_path: Path) -> dict[str, Path]:
    """Per kind, a sentinel file outside the table, named as a table file of that kind."""
    d = tmp_path / "outside"
    d.mkdir()
    files = {}
    for kind, ext in _EXT.items():
        p = d / f"{1:020d}-abcdef012345.{ext}"
        p.write_bytes(MARKER.encode() * 64)
        files[kind] = p
    return files


def _sentinels_intact(outside: dict[str, Path]) -> bool:
    return all(p.read_bytes() == MARKER.encode() * 64 for p in outside.values())


def _no_sentinel_opened(opened: list[str], outside: dict[str, Path]) -> bool:
    names = {os.path.realpath(p) for p in outside.values()}
    return not any(os.path.realpath(p) in names for p in opened)


# ---------------------------------------------------------------- tampering


def _rewrite(path: Path, magic: bytes, change: Callable[[dict[str, Any]], None]) -> None:
    """Rewrites the one framed JSON record of ``path`` with ``change`` applied, keeping it
    intact (a correct CRC): what a tamperer, not a crash, leaves."""
    res = read_records(path.read_bytes(), path=str(path), magic=magic, allow_torn_tail=False)
    doc = json.loads(res.records[0])
    change(doc)
    path.write_bytes(encode_file([json.dumps(doc).encode()], magic=magic))


def _entry_files(root: Path) -> list[Path]:
    return sorted((root / layout.LOG_DIR).glob("[0-9]*.json"))


def _newest_entry_with_segment(root: Path, bucket: str) -> tuple[Path, dict[str, Any]]:
    for p in reversed(_entry_files(root)):
        res = read_records(p.read_bytes(), path=str(p), magic=LOG_MAGIC, allow_torn_tail=False)
        doc = json.loads(res.records[0])
        ref = doc["buckets"].get(bucket)
        if ref and ref["segment"] and doc.get("rejects"):
            return p, doc
    raise AssertionError("no entry with a segment and rejects")


_GLOB = {
    "segment": "_wal/*/*.wal",
    "snapshot": "_snapshots/*/*.manifest",
    "pages": "_pages/*/*.pages",
    "rejects": "_rejects/*.arrow",
}


def _files_of(root: Path, kind: str) -> list[str]:
    """The table's files of ``kind``, relative to ``root``."""
    return sorted(p.relative_to(root).as_posix() for p in root.glob(_GLOB[kind]))


def _use(root: Path) -> None:
    """What a user does with a table: open it, read it, read every version's rejects,
    and plan a GC."""
    t = open_table(root)
    t.read()
    for v in range(t.oldest_version, t.version + 1):
        t.rejects(v)
    t.gc(dry_run=True)


def _bad_paths(
    root: Path, outside: dict[str, Path], kind: str
) -> list[tuple[str, Callable[[], str]]]:
    """Bad values of a ``kind`` reference: (case id, the value) -- absolute, climbing out
    with ``..``, climbing out from inside a bucket directory, a real table file of
    another kind, and names with a backslash or a NUL."""
    other = {"segment": "rejects", "snapshot": "segment", "pages": "segment", "rejects": "segment"}
    return [
        ("absolute", lambda: str(outside[kind])),
        ("dotdot", lambda: os.path.relpath(outside[kind], root)),
        (
            "dotdot-inside",
            lambda: (
                f"{_files_of(root, kind)[0].rsplit('/', 1)[0]}/../../"
                + os.path.relpath(outside[kind], root)
            ),
        ),
        ("wrong-kind", lambda: _files_of(root, other[kind])[0]),
        ("backslash", lambda: _files_of(root, kind)[0].replace("/", "\\")),
        ("nul", lambda: _files_of(root, kind)[0] + "\x00"),
    ]


_CASES = ["absolute", "dotdot", "dotdot-inside", "wrong-kind", "backslash", "nul"]


def _check_refusal(
    err: pytest.ExceptionInfo[WalCorruption],
    holder: Path,
    kind: str,
    outside: dict[str, Path],
    opened: list[str],
) -> None:
    message = str(err.value)
    assert err.value.path == str(holder)
    assert f"invalid {kind} path" in message
    assert MARKER not in message
    assert _no_sentinel_opened(opened, outside)
    assert _sentinels_intact(outside)


# ---------------------------------------------------------------- the checks themselves


@pytest.mark.parametrize("kind", ["segment", "snapshot", "pages", "rejects"])
def test_the_layout_accepts_its_own_names_and_refuses_everything_else(kind: str) -> None:
    dirs = {"segment": "_wal/3/", "snapshot": "_snapshots/3/", "pages": "_pages/3/"}
    good = f"{dirs.get(kind, '_rejects/')}{7:020d}-0123abcd.{_EXT[kind]}"
    assert layout.checked(kind, good, source="/t/_log/x.json") == good  # type: ignore[arg-type]
    assert layout.kind_of(good) == kind
    name = good.rsplit("/", 1)[1]
    bad: list[object] = [
        "/" + good,
        f"../{good}",
        f"{good.rsplit('/', 1)[0]}/../../../{name}",
        f"./{good}",
        good.replace("/", "//", 1),
        good.replace("/", "\\"),
        good + "\x00",
        good + "\n",
        name,
        good.replace(f".{_EXT[kind]}", ".json"),
        None,
        7,
        [good],
    ]
    for value in bad:
        with pytest.raises(WalCorruption) as err:
            layout.checked(kind, value, source="/t/_log/x.json", ref="bucket 3")  # type: ignore[arg-type]
        assert err.value.path == "/t/_log/x.json"
        assert f"invalid {kind} path (bucket 3)" in str(err.value)


# ---------------------------------------------------------------- log entries


@pytest.mark.parametrize("case", _CASES)
@pytest.mark.parametrize("field", ["segment", "snapshot", "rejects"])
def test_a_log_entry_naming_a_path_outside_the_table_is_refused_unread(
    root: Path, outside: dict[str, Path], opened: list[str], field: str, case: str
) -> None:
    entry, _ = _newest_entry_with_segment(root, "0")
    value = dict(_bad_paths(root, outside, field))[case]()

    def change(doc: dict[str, Any]) -> None:
        if field == "rejects":
            doc["rejects"] = value
        else:
            doc["buckets"]["0"][field] = value

    _rewrite(entry, LOG_MAGIC, change)
    # The last-checkpoint pointer holds its own copy of the entries it summarizes (an
    # open would not read this one): without it the open reads every entry.
    (root / layout.LAST_CHECKPOINT_KEY).unlink(missing_ok=True)
    with pytest.raises(WalCorruption) as err:
        _use(root)
    _check_refusal(err, entry, field, outside, opened)


# ---------------------------------------------------------------- snapshot manifests


@pytest.mark.parametrize("case", _CASES)
def test_a_manifest_naming_a_page_file_outside_the_table_is_refused_unread(
    root: Path, outside: dict[str, Path], opened: list[str], case: str
) -> None:
    t = open_table(root)
    snap = core_of(t).history.snapshot_at(0, t.version)
    assert snap is not None
    manifest = root / snap[1]
    value = dict(_bad_paths(root, outside, "pages"))[case]()
    res = read_records(
        manifest.read_bytes(), path=str(manifest), magic=SNAPSHOT_MAGIC, allow_torn_tail=False
    )
    original = next(iter(json.loads(res.records[0])["files"]))
    text = res.records[0].decode().replace(json.dumps(original), json.dumps(value))
    manifest.write_bytes(encode_file([text.encode()], magic=SNAPSHOT_MAGIC))
    with pytest.raises(WalCorruption) as err:
        _use(root)
    _check_refusal(err, manifest, "pages", outside, opened)


# ---------------------------------------------------------------- checkpoints


@pytest.fixture
def collected(root: Path) -> Path:
    """``root`` after a GC that wrote a checkpoint and deleted the entries below it (the
    checkpoint is needed to open the table); returns the checkpoint."""
    plan = open_table(root).gc(dry_run=False, retain_versions=2, retain_seconds=0.0)
    (ckpt,) = (root / layout.LOG_DIR).glob("_checkpoint.*.json")
    assert not (root / layout.LOG_DIR / layout.entry_name(0)).exists(), plan
    (root / layout.LAST_CHECKPOINT_KEY).unlink()  # else an open starts from the pointer
    return ckpt


@pytest.mark.parametrize("case", _CASES)
@pytest.mark.parametrize("field", ["snapshot", "segment"])
def test_a_checkpoint_naming_a_path_outside_the_table_is_refused_unread(
    root: Path,
    collected: Path,
    outside: dict[str, Path],
    opened: list[str],
    field: str,
    case: str,
) -> None:
    value = dict(_bad_paths(root, outside, field))[case]()

    def change(doc: dict[str, Any]) -> None:
        if field == "snapshot":
            doc["bucket_snapshots"]["0"] = value
        else:
            doc["extra"].setdefault("segments", {}).setdefault("0", []).append([1, value])

    _rewrite(collected, CHECKPOINT_MAGIC, change)
    with pytest.raises(WalCorruption) as err:
        _use(root)
    _check_refusal(err, collected, field, outside, opened)


# ---------------------------------------------------------------- GC


@pytest.mark.parametrize("dry_run", [True, False])
@pytest.mark.parametrize("field", ["segment", "snapshot", "rejects"])
def test_gc_neither_lists_nor_deletes_outside_the_table(
    root: Path, outside: dict[str, Path], opened: list[str], field: str, dry_run: bool
) -> None:
    gc_table = open_table(root)  # open before the tampered version exists
    writer = open_table(root)
    writer.apply(_events(100, 6))
    entry, _ = _newest_entry_with_segment(root, "0")
    value = os.path.relpath(outside[field], root)

    def change(doc: dict[str, Any]) -> None:
        if field == "rejects":
            doc["rejects"] = value
        else:
            doc["buckets"]["0"][field] = value

    _rewrite(entry, LOG_MAGIC, change)
    before = sorted(p for p in root.rglob("*") if p.is_file())
    with pytest.raises(WalCorruption) as err:
        gc_table.gc(dry_run=dry_run, retain_versions=1, retain_seconds=0.0)
    _check_refusal(err, entry, field, outside, opened)
    assert sorted(p for p in root.rglob("*") if p.is_file()) == before


def test_gc_refuses_a_plan_holding_a_path_outside_the_table(
    root: Path, outside: dict[str, Path]
) -> None:
    t: Table = open_table(root)
    s = core_of(t)
    inside = str(root / _files_of(root, "segment")[0])
    for bad in (str(outside["segment"]), str(root / ".." / "outside" / outside["segment"].name)):
        plan = GcPlan(t.version, {inside: "old", bad: "tampered"}, {}, {})
        with pytest.raises(WalCorruption) as err:
            execute_gc(t.log, s.history, plan, oldest=t.oldest_version)
        assert err.value.path == bad
        assert _sentinels_intact(outside)
        assert os.path.exists(inside)  # nothing deleted


# ---------------------------------------------------------------- errors never echo content


@pytest.mark.parametrize("kind", ["segment", "snapshot"])
def test_a_table_file_with_foreign_content_is_refused_without_echoing_it(
    root: Path, kind: str
) -> None:
    t = open_table(root)
    if kind == "segment":
        rel = core_of(t).history.segments_between(0, -1, t.version)[-1][1]
    else:
        snap = core_of(t).history.snapshot_at(0, t.version)
        assert snap is not None
        rel = snap[1]
    (root / rel).write_bytes(MARKER.encode() * 64)
    with pytest.raises(WalCorruption) as err:
        open_table(root).read()
    assert err.value.path == str(root / rel)
    assert MARKER not in str(err.value)
