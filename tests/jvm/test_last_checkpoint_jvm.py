"""The JVM reader follows the last-checkpoint pointer (docs/format.md §8.8) as a hint.

A table with several GC checkpoints and a pointer is read by ``DumpTable`` with the
pointer intact, deleted, damaged, stale (an older pointer put back) and older than GC's
newest checkpoint: every variant resolves the same versions, history and bucket plans
(``<v>.plan``, ``history.txt``), and the rows equal ``Table.read``. A damaged entry below
the pointer's version shows which path the reader took: with the pointer the latest
version reads (that entry is never opened), without it the read fails naming the entry.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from cdc_sink.storage.framing import read_records
from cdc_sink.storage.layout import LAST_CHECKPOINT_KEY
from cdc_sink.storage.log_files import LAST_CHECKPOINT_MAGIC
from cdc_sink.table import Table, TableOptions, create_table
from tests.fixtures import ID_NAME
from tests.jvm.test_format_crosscheck import _flip, assert_same_versions, dump

OPTIONS = TableOptions(
    page_rows=4, snapshot_every=3, checkpoint_every=3, retain_versions=6, retain_seconds=0.0
)


def _pointer(root: Path) -> Path:
    return root.joinpath(*LAST_CHECKPOINT_KEY.split("/"))


def _apply(table: Table, batch: int) -> None:
    events = [{"op": "upsert", "key": {"id": k}, "set": {"name": f"b{batch}"}} for k in range(9)]
    events.append({"op": "delete", "key": {"id": batch % 9}})
    table.apply(events, app_id="app", batch_id=batch)


def _build(root: Path) -> tuple[bytes, bytes]:
    """A table with GC checkpoints and a pointer above the newest; returns the pointers
    of before the last GC (older than its checkpoint) and of right after it (stale)."""
    table = create_table(root, ID_NAME, options=OPTIONS)
    for b in range(1, 9):
        _apply(table, b)
    table.gc(dry_run=False)
    for b in range(9, 15):
        _apply(table, b)
    before_gc = _pointer(root).read_bytes()
    table.gc(dry_run=False, retain_versions=1)
    _apply(table, 15)
    after_gc = _pointer(root).read_bytes()
    for b in range(16, 22):
        _apply(table, b)
    return before_gc, after_gc


def _pointer_version(root: Path) -> int:
    """The version of the pointer file's checkpoint."""
    data = _pointer(root).read_bytes()
    res = read_records(data, path="p", magic=LAST_CHECKPOINT_MAGIC, allow_torn_tail=False)
    return int(json.loads(res.records[0])["checkpoint"]["version"])


def _checkpoints(root: Path) -> list[int]:
    return sorted(int(p.name.split(".")[1]) for p in (root / "_log").glob("_checkpoint.*.json"))


def _outputs(out: Path) -> dict[str, str]:
    assert not (out / "error.txt").exists(), (out / "error.txt").read_text()
    return {p.name: p.read_text() for p in sorted(out.iterdir()) if p.suffix in (".plan", ".txt")}


def test_with_and_without_the_pointer_the_plans_are_the_same(tmp_path: Path) -> None:
    base = tmp_path / "base"
    before_gc, after_gc = _build(base)
    ckpts = _checkpoints(base)
    assert len(ckpts) >= 1
    c = _pointer_version(base)
    assert c > ckpts[-1], "the pointer must be usable for this test"
    variants = {"intact": base}
    for name in ("deleted", "damaged", "stale", "behind_gc"):
        root = tmp_path / name
        shutil.copytree(base, root)
        variants[name] = root
    _pointer(variants["deleted"]).unlink()
    _flip(_pointer(variants["damaged"]), 0.6)
    # stale: a valid pointer of an older version above GC's checkpoint
    _pointer(variants["stale"]).write_bytes(after_gc)
    assert ckpts[-1] <= _pointer_version(variants["stale"]) < c
    _pointer(variants["behind_gc"]).write_bytes(before_gc)
    assert _pointer_version(variants["behind_gc"]) < ckpts[-1]
    jobs = [(root, tmp_path / f"{name}.out", "all") for name, root in variants.items()]
    res = dump(jobs)
    assert res.returncode == 0, res.stderr
    want = _outputs(tmp_path / "intact.out")
    assert len([n for n in want if n.endswith(".plan")]) >= 5
    for name, root in variants.items():
        assert _outputs(tmp_path / f"{name}.out") == want, name
        assert_same_versions(root, tmp_path / f"{name}.out")


def test_the_pointer_spares_reading_the_entries_below_it(tmp_path: Path) -> None:
    root = tmp_path / "t"
    _build(root)
    c = _pointer_version(root)
    ckpt = _checkpoints(root)[-1]
    assert c - 1 > ckpt
    victim = root / "_log" / f"{c - 1:020d}.json"
    _flip(victim)
    got = dump([(root, tmp_path / "ptr.out", "latest")])
    assert got.returncode == 0, got.stderr
    _pointer(root).unlink()
    res = dump([(root, tmp_path / "listed.out", "latest")])
    assert res.returncode == 2
    assert victim.relative_to(root).as_posix() in res.stderr
