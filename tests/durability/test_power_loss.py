"""Power loss at every fault point and at random instants: recovery gives a committed state.

``SIGKILL`` (test_crash_points.py) keeps the page cache, so it cannot tell whether the
storage layer fsyncs the right files and directories in the right order. Here the
workload of the crash tests runs in-process with a :class:`PowerLossRecorder` installed
in ``fsutil`` (which every file operation of the storage layer goes through): at each
cut point -- every hit of every storage fault point, or random file operations -- the
recorder writes the tree a power cut at that instant would leave (only what was
fsynced: file bytes as of each file's last fsync, directory entries as of each
directory's last fsync). Each such image is then recovered (``open_table``) and checked:

* the table is there unless ``create_table`` had not returned;
* the recovered batches are at least those whose ``apply`` returned (acknowledged
  commits survive) and at most those begun: the last committed version or an earlier
  one, never a state that was never committed;
* every retained version reads exactly the reference model of its batches, each
  applied once (never a mix, never a torn read), and its log entry is byte-identical
  to the one the run committed for that version;
* a restarted job (batches replayed from 0 with the same ``batch_id``) skips exactly
  the recovered batches, commits the rest, and ends at the model of the whole run.

The workload compacts and garbage-collects as it goes, so the cut points cover the
apply, compaction and GC paths.
"""

from __future__ import annotations

import hashlib
import os
import random
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

import cdc_sink.table  # noqa: F401 - registers the table's fault points
from cdc_sink.errors import TableNotFound
from cdc_sink.storage import faults, fsutil
from cdc_sink.table import create_table, open_table
from tests.durability import checks, workload
from tests.durability.powerloss import PowerLossRecorder

SEED = 23
BATCHES = 10
# Reached only when a crashed commit left an unfinished newest log entry behind.
REPAIR_POINT = "log.repair_removing"


@dataclass
class Cut:
    """One simulated power cut: where it happened and what the run had acknowledged."""

    label: str
    image: Path
    phase: str
    created: bool
    acked: int
    started: int


@dataclass
class Run:
    """A recorded run of the workload and the images of its power cuts."""

    seed: int
    cuts: list[Cut] = field(default_factory=list)
    entries: dict[int, str] = field(default_factory=dict)
    points: set[str] = field(default_factory=set)
    same_as_before: int = 0
    stragglers: list[str] = field(default_factory=list)


@pytest.fixture
def scratch(tmp_path: Path) -> Iterator[Path]:
    """A directory for the table and its images (tmpfs when available)."""
    root = checks.scratch_dir()
    if root is None:
        yield tmp_path
        return
    try:
        yield Path(root)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def record_run(
    base: Path,
    seed: int,
    n: int,
    *,
    cut_here: Callable[[str], bool],
    rng: random.Random | None = None,
) -> Run:
    """Runs the workload (create, ``n`` batches, compaction, GC) with a recorder, and
    writes an image each time ``cut_here(label)`` says so (labels: ``point#hit`` at fault
    points, ``op:<kind>:<path>`` after file operations)."""
    root = base / "table"
    root.mkdir()
    run = Run(seed)
    state = {"phase": "create", "created": False, "acked": 0, "started": 0}
    recorder = PowerLossRecorder(root)
    seen: set[tuple[str, bool, int, int]] = set()

    def cut(label: str) -> None:
        if not cut_here(label):
            return
        image = base / f"image{len(run.cuts)}"
        recorder.image(image, rng)
        c = Cut(
            label,
            image,
            str(state["phase"]),
            bool(state["created"]),
            int(state["acked"]),
            int(state["started"]),
        )
        key = (tree_digest(image), c.created, c.acked, c.started)
        if key in seen:  # the same state was already cut (nothing was fsynced since)
            run.same_as_before += 1
            shutil.rmtree(image)
            return
        seen.add(key)
        run.cuts.append(c)

    def at_point(name: str, hit: int) -> None:
        run.points.add(name)
        cut(f"{name}#{hit}")

    def after_op(kind: str, path: str) -> None:
        cut(f"op:{kind}:{os.path.relpath(path, root)}")

    recorder.on_op = after_op
    previous_recorder = fsutil.set_recorder(recorder)
    previous_hook = faults.set_hook(at_point)
    try:
        table = create_table(root, workload.schema(), options=workload.options())
        state["created"] = True
        run.entries[0] = table.log.read(0).to_json()
        for i in range(n):
            state.update(phase="apply", started=i + 1)
            res = table.apply(workload.batch(seed, i), app_id=workload.APP_ID, batch_id=i)
            assert not res.skipped
            state["acked"] = i + 1
            run.entries[res.version] = table.log.read(res.version).to_json()
            for op in workload.maintenance(i):
                state["phase"] = op
                if op == "compact":
                    v = table.compact()
                    run.entries[v] = table.log.read(v).to_json()
                else:
                    table.gc(dry_run=False)
    finally:
        faults.set_hook(previous_hook)
        fsutil.set_recorder(previous_recorder)
    run.stragglers = recorder.stragglers
    return run


def tree_digest(top: Path) -> str:
    """A digest of the names and bytes of every file and directory under ``top``."""
    h = hashlib.sha256()
    for dirpath, dirnames, filenames in sorted(os.walk(top)):
        dirnames.sort()
        h.update(f"d:{os.path.relpath(dirpath, top)}\0".encode())
        for name in sorted(filenames):
            h.update(f"f:{name}\0".encode())
            h.update(hashlib.sha256(Path(dirpath, name).read_bytes()).digest())
    return h.hexdigest()


def recover_and_check(run: Run, cut: Cut, n: int) -> None:
    """Recovers one image and checks it (see the module docstring)."""
    opts = workload.options()
    try:
        table = open_table(cut.image, options=opts)
        recreated = False
    except TableNotFound:
        assert not cut.created, "create_table returned, yet the table is gone"
        table = create_table(cut.image, workload.schema(), options=opts)
        recreated = True
    committed = checks.check_table(table, run.seed)
    assert cut.acked <= committed <= cut.started, (
        f"recovered {committed} batches; acknowledged {cut.acked}, begun {cut.started}"
    )
    for e in table.log.entries(from_version=table.oldest_version):
        if not recreated:
            assert e.to_json() == run.entries.get(e.version), (
                f"version {e.version} differs from the entry the run committed"
            )
    # The restarted job replays from its last Spark checkpoint: the batches before it
    # come back skipped, the next ones are committed (and maintained) as in the run.
    end = min(n, committed + 2)
    for i in range(max(0, committed - 1), end):
        res = table.apply(workload.batch(run.seed, i), app_id=workload.APP_ID, batch_id=i)
        assert res.skipped == (i < committed), (i, committed, res)
        if not res.skipped:
            for op in workload.maintenance(i):
                table.compact() if op == "compact" else table.gc(dry_run=False)
    reopened = open_table(cut.image, options=opts)
    assert reopened.log.last_batch_id(workload.APP_ID) == end - 1
    assert checks.rows_of(reopened.read()) == checks.expected_rows(run.seed, end)


def check_all(run: Run, n: int) -> list[str]:
    """Recovers every image; returns one line per failed cut."""
    failures = []
    for cut in run.cuts:
        try:
            recover_and_check(run, cut, n)
        except Exception as exc:  # collected and reported together
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            failures.append(f"{cut.label} [{cut.phase}]: {type(exc).__name__}: {first}")
        finally:
            shutil.rmtree(cut.image, ignore_errors=True)
    return failures


# ---------------------------------------------------------------------- the model itself


def _images(tmp_path: Path, rec: PowerLossRecorder) -> Path:
    out = tmp_path / f"img{rec.ops}"
    rec.image(out)
    return out


def test_recorder_drops_what_was_not_fsynced(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "old").mkdir(parents=True)
    (root / "old" / "kept.bin").write_bytes(b"before")
    rec = PowerLossRecorder(root)
    previous = fsutil.set_recorder(rec)
    try:
        fsutil.makedirs(root / "new" / "sub")  # durable: each parent fsynced
        with fsutil.create_file(root / "new" / "sub" / "a.bin") as f:
            f.write(b"synced")
            fsutil.fsync_file(f)
            f.write(b" lost")
        img = _images(tmp_path, rec)
        assert not (img / "new" / "sub" / "a.bin").exists()  # its directory never fsynced
        fsutil.fsync_dir(root / "new" / "sub")
        img = _images(tmp_path, rec)
        assert (img / "new" / "sub" / "a.bin").read_bytes() == b"synced"
        os.mkdir(root / "plain")  # not through fsutil: its name is not durable
        fsutil.publish_exclusive(root / "old" / "b.bin", b"b", sync_dir=False)
        fsutil.remove(root / "old" / "kept.bin")
        img = _images(tmp_path, rec)
        assert sorted(os.listdir(img / "old")) == ["kept.bin"]
        assert (img / "old" / "kept.bin").read_bytes() == b"before"
        assert not (img / "plain").exists()
        fsutil.fsync_dir(root / "old")
        img = _images(tmp_path, rec)
        assert sorted(os.listdir(img / "old")) == ["b.bin"]
        fsutil.atomic_replace(root / "old" / "b.bin", b"bb")
        fsutil.write_file_durable(root / "c.bin", b"c", exclusive=True, sync_dir=False)
        img = _images(tmp_path, rec)
        assert (img / "old" / "b.bin").read_bytes() == b"bb"
        assert not (img / "c.bin").exists()
    finally:
        fsutil.set_recorder(previous)
    assert rec.stragglers == []


def test_recorder_random_states_lie_between_durable_and_current(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    rec = PowerLossRecorder(root)
    previous = fsutil.set_recorder(rec)
    try:
        with fsutil.create_file(root / "f.bin") as f:
            f.write(b"0123")
            fsutil.fsync_file(f)
            f.write(b"456789")
        fsutil.fsync_dir(root)
        fsutil.write_file_durable(root / "g.bin", b"g", exclusive=True, sync_dir=False)
    finally:
        fsutil.set_recorder(previous)
    seen_f, seen_g = set(), set()
    for s in range(40):
        out = tmp_path / f"r{s}"
        rec.image(out, random.Random(s))
        data = (out / "f.bin").read_bytes()
        assert b"0123456789".startswith(data) and data.startswith(b"0123")
        seen_f.add(data)
        seen_g.add((out / "g.bin").exists())
    assert {b"0123", b"0123456789"} <= seen_f and len(seen_f) > 2
    assert seen_g == {True, False}


# ---------------------------------------------------------------------- the table


def test_power_loss_at_every_fault_point_recovers_a_committed_version(scratch: Path) -> None:
    run = record_run(scratch, SEED, BATCHES, cut_here=lambda label: "#" in label)
    expected = set(faults.KNOWN_POINTS) - {REPAIR_POINT}
    assert expected <= run.points, f"never reached: {expected - run.points}"
    assert {c.phase for c in run.cuts} == {"create", "apply", "compact", "gc"}
    failures = check_all(run, BATCHES)
    assert not failures, (
        f"{len(failures)} of {len(run.cuts)} power cuts recovered wrongly:\n" + "\n".join(failures)
    )
    print(
        f"{len(run.cuts)} distinct power-cut states recovered "
        f"({run.same_as_before} more cuts repeated one of them)"
    )
    assert run.stragglers == [], f"made outside fsutil: {run.stragglers}"


@pytest.mark.parametrize("variant", range(2))
def test_power_loss_at_random_instants_recovers_a_committed_version(
    scratch: Path, variant: int
) -> None:
    """Cuts after random file operations (any create, fsync, link, rename, unlink,
    mkdir); variant 1 also keeps a random part of what was not fsynced."""
    pick = random.Random(1000 + variant)
    torn = random.Random(2000 + variant) if variant == 1 else None
    run = record_run(
        scratch,
        SEED + 1 + variant,
        BATCHES,
        rng=torn,
        cut_here=lambda label: label.startswith("op:") and pick.random() < 0.1,
    )
    assert len(run.cuts) >= 15, len(run.cuts)
    failures = check_all(run, BATCHES)
    assert not failures, (
        f"{len(failures)} of {len(run.cuts)} power cuts recovered wrongly:\n" + "\n".join(failures)
    )


def _bucket_dirs_without_parent_fsync(monkeypatch: pytest.MonkeyPatch) -> None:
    """How the segment and snapshot writers made their directories before fsutil.makedirs
    (now the local store's, whose open_new the page files' writer uses)."""
    import cdc_sink.storage.objectstore.local as local

    real = fsutil.makedirs

    def plain(path: str, **kwargs: Any) -> None:
        if any(f"{os.sep}{d}" in os.fspath(path) for d in ("_wal", "_snapshots", "_pages")):
            os.makedirs(path, exist_ok=True)
        else:
            real(path, **kwargs)

    monkeypatch.setattr(local, "makedirs", plain)


def _commit_without_log_dir_fsync(monkeypatch: pytest.MonkeyPatch) -> None:
    """The commit's fsync of _log skipped (fsutil's: the local store's put_if_absent)."""
    real = fsutil.fsync_dir
    monkeypatch.setattr(
        fsutil, "fsync_dir", lambda p: None if os.fspath(p).endswith("_log") else real(p)
    )


@pytest.mark.parametrize(
    "mutation", [_bucket_dirs_without_parent_fsync, _commit_without_log_dir_fsync]
)
def test_the_check_detects_a_missing_directory_fsync(
    scratch: Path, monkeypatch: pytest.MonkeyPatch, mutation: Callable[[pytest.MonkeyPatch], None]
) -> None:
    mutation(monkeypatch)
    run = record_run(scratch, SEED, 3, cut_here=lambda label: label.startswith("wal.fsynced"))
    failures = check_all(run, 3)
    assert failures, "a power cut lost committed data, yet every recovery passed"
