"""Checks shared by the durability tests: the reference model and table comparisons."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa

from cdc_sink.errors import VersionNotFound
from cdc_sink.table import Table
from tests.durability import workload
from tests.model import Key, RefModel, Row, table_to_rows

DRIVER = str(Path(__file__).with_name("crash_driver.py"))
KEYS = ["id"]


def scratch_dir() -> str | None:
    """A fresh directory on tmpfs (``/dev/shm``), or None when there is none.

    The crash tests kill processes (``SIGKILL``), which keeps the page cache, so a tmpfs
    shows the same on-disk states as a disk while making each fsync free.
    """
    import tempfile

    shm = "/dev/shm"
    if os.path.isdir(shm) and os.access(shm, os.W_OK):
        return tempfile.mkdtemp(prefix="cdc_sink_durability_", dir=shm)
    return None


def normalized(rows: dict[Key, Row]) -> dict[Key, Row]:
    """The model's rows as a read gives them back (one Arrow round trip for all rows)."""
    schema = workload.schema()
    if not rows:
        return {}
    t = pa.Table.from_pylist(
        [{n: r[n] for n in schema.names} for r in rows.values()],
        schema=schema.arrow_schema(schema.names),
    )
    return rows_of(t)


_MODELS: dict[int, tuple[RefModel, list[dict[Key, Row]]]] = {}


def expected_rows(seed: int, batches: int) -> dict[Key, Row]:
    """The model's rows after batches ``0 .. batches-1`` of ``seed``, each applied once."""
    if seed not in _MODELS:
        if len(_MODELS) > 32:
            _MODELS.clear()
        _MODELS[seed] = (RefModel(workload.schema()), [{}])
    model, states = _MODELS[seed]
    while len(states) <= batches:
        model.apply(workload.batch(seed, len(states) - 1))
        model.commit(len(states))
        states.append(normalized(model.rows))
    return states[batches]


def model_after(batch_lists: Sequence[Sequence[dict[str, Any]]]) -> list[dict[Key, Row]]:
    """The model's rows after each prefix of ``batch_lists`` (index 0: empty table)."""
    model = RefModel(workload.schema())
    out: list[dict[Key, Row]] = [{}]
    for i, evs in enumerate(batch_lists):
        model.apply(evs)
        model.commit(i + 1)
        out.append(normalized(model.rows))
    return out


def rows_of(table: pa.Table) -> dict[Key, Row]:
    return table_to_rows(table, KEYS)


def ipc_bytes(table: pa.Table) -> bytes:
    """The Arrow IPC stream of ``table`` (what a reader hashes)."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table)
    return sink.getvalue().to_pybytes()


def digest(table: pa.Table) -> str:
    return hashlib.sha256(ipc_bytes(table)).hexdigest()


def content_digest(table: pa.Table) -> str:
    """SHA-256 of the rows in key order: equal for two reads of the same rows in any
    order (a snapshot written later may store a version's rows in another order)."""
    if table.num_rows:
        table = table.sort_by([(k, "ascending") for k in KEYS])
    return digest(table.combine_chunks())


def job_batches_by_version(table: Table) -> list[tuple[int, int]]:
    """``(version, batch_id)`` of the retained versions written by the workload's app."""
    return [
        (e["version"], e["batch_id"]) for e in table.versions() if e["app_id"] == workload.APP_ID
    ]


def check_table(table: Table, seed: int, *, below_checkpoint: str = "strict") -> int:
    """Checks a table written by the workload; returns how many batches are committed.

    * ``versions()``: each retained batch_id once, in version order, contiguous;
    * the idempotency table agrees with the newest retained batch;
    * every retained version reads exactly the model of the batches committed at or
      below it, each applied once.

    A GC that crashed after writing its checkpoint leaves log entries below the
    checkpoint (see ``BUG_GC_CRASH`` in test_gc.py). With ``below_checkpoint="strict"``
    such a version must read right or raise ``VersionNotFound``; ``"skip"`` does not
    read them (for tests that are about something else).
    """
    latest = table.version
    oldest = table.oldest_version
    job = job_batches_by_version(table)
    ids = [b for _, b in job]
    assert len(ids) == len(set(ids)), f"a batch_id appears twice in versions(): {job}"
    assert ids == sorted(ids), f"batch_ids out of version order: {job}"
    if ids:
        assert ids == list(range(ids[0], ids[-1] + 1)), f"a batch is missing: {job}"
    last = table.log.last_batch_id(workload.APP_ID)
    committed = 0 if last is None else last + 1
    if ids:
        assert ids[-1] == last, f"idempotency table says {last}, log says {ids[-1]}"
    ckpt = table.log.read_checkpoint()
    horizon = ckpt.version if ckpt is not None else 0
    for v in range(oldest, latest + 1):
        if v < horizon and below_checkpoint == "skip":
            continue
        at_or_below = [b for ver, b in job if ver <= v]
        above = [b for ver, b in job if ver > v]
        if at_or_below:
            n = at_or_below[-1] + 1
        elif above:
            n = above[0]
        else:
            n = committed
        try:
            got = rows_of(table.read(version=v))
        except VersionNotFound:
            if v < horizon:
                continue
            raise
        want = expected_rows(seed, n)
        if got != want:
            raise AssertionError(
                f"version {v} (after {n} batches) differs from the model "
                f"(retained {oldest}..{latest}, checkpoint at {horizon}):\n"
                f"{describe_diff(got, want)}"
            )
    return committed


def describe_diff(got: dict[Key, Row], want: dict[Key, Row], limit: int = 6) -> str:
    lines = []
    for k in sorted(set(got) | set(want), key=repr):
        if got.get(k) != want.get(k):
            lines.append(f"  key {k}: table {got.get(k)} model {want.get(k)}")
            if len(lines) >= limit:
                lines.append("  ...")
                break
    return "\n".join(lines)


def child_env(**crash: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CDC_SINK_CRASH")}
    env.update(crash)
    return env


def run_driver(
    path: str | os.PathLike[str],
    seed: int,
    n: int,
    *extra: str,
    env: dict[str, str] | None = None,
    timeout: float = 120,
) -> subprocess.CompletedProcess[str]:
    """Runs ``crash_driver.py`` in a fresh child process of ``sys.executable``."""
    return subprocess.run(
        [sys.executable, DRIVER, os.fspath(path), str(seed), str(n), *extra],
        env=env if env is not None else child_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


class DriverServer:
    """``crash_driver.py --serve``: runs the driver in children forked from one process
    that has already imported cdc_sink (a child costs milliseconds, not an interpreter
    start). Results look like :func:`run_driver`'s."""

    def __init__(self, scratch: str | os.PathLike[str]) -> None:
        self.scratch = Path(scratch)
        env = child_env()
        # No BLAS thread pool in the process that forks (Arrow's jemalloc background
        # thread remains: jemalloc and Arrow install their own at-fork handlers).
        env["OPENBLAS_NUM_THREADS"] = "1"
        self.proc = subprocess.Popen(
            [sys.executable, DRIVER, "--serve"],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self._n = 0

    def run(
        self,
        path: str | os.PathLike[str],
        seed: int,
        n: int,
        *extra: str,
        crash: dict[str, str] | None = None,
    ) -> subprocess.CompletedProcess[str]:
        import json

        self._n += 1
        out = self.scratch / f"run{self._n}.out"
        err = self.scratch / f"run{self._n}.err"
        args = [os.fspath(path), str(seed), str(n), *extra]
        req = {"args": args, "env": crash or {}, "stdout": str(out), "stderr": str(err)}
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(req) + "\n")
        self.proc.stdin.flush()
        reply = self.proc.stdout.readline()
        if not reply:
            raise RuntimeError(f"the driver server died (returncode {self.proc.poll()})")
        rc = json.loads(reply)["returncode"]
        res = subprocess.CompletedProcess(args, rc, out.read_text(), err.read_text())
        out.unlink()
        err.unlink()
        return res

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def driver_lines(out: str) -> list[dict[str, Any]]:
    import json

    return [json.loads(line) for line in out.splitlines() if line.strip()]


def check_replay(lines: list[dict[str, Any]], committed_before: int) -> None:
    """A driver run replayed batches from 0: those committed before came back skipped,
    the others were committed, each once."""
    steps = [d for d in lines if "i" in d]
    assert [d["i"] for d in steps] == list(range(len(steps))), steps
    for d in steps:
        if d["i"] < committed_before:
            assert d["skipped"], f"batch {d['i']} was committed before, yet applied again: {d}"
        else:
            assert not d["skipped"], f"batch {d['i']} was never committed, yet skipped: {d}"
    applied = [d["version"] for d in steps if not d["skipped"]]
    assert applied == sorted(set(applied)), f"versions reused: {steps}"


def data_files(root: str | os.PathLike[str]) -> dict[str, list[str]]:
    """Relative paths of the segment, manifest and page files on disk, by kind."""
    out: dict[str, list[str]] = {"_wal": [], "_snapshots": [], "_pages": []}
    for sub in out:
        top = os.path.join(root, sub)
        if not os.path.isdir(top):
            continue
        for b in sorted(os.listdir(top)):
            for name in sorted(os.listdir(os.path.join(top, b))):
                out[sub].append(f"{sub}/{b}/{name}")
    return out


def assert_no_garbage(table: Table) -> None:
    """After ``gc(dry_run=False)``: nothing on disk that no retained version needs.

    Computed from the retained log entries and the manifests, independently of GC:

    * a segment or manifest of a retained version is named by that version's entry
      (an apply's snapshot is of the previous version: named by entry ``fv + 1``);
    * below the oldest retained version, each bucket keeps at most one snapshot (the
      newest at or below the horizon) and only the segments after it;
    * every page file is referenced by a manifest on disk;
    * files of version ``latest + 1`` may belong to a commit in flight and are skipped.
    """
    latest, oldest = table.version, table.oldest_version
    named = _named_by_retained_entries(table, oldest, latest)
    files = data_files(table.root)
    old_snaps = _check_manifests(files["_snapshots"], named, oldest, latest)
    _check_segments(files["_wal"], named, old_snaps, oldest, latest)
    _check_pages(table.root, files, latest)


def _named_by_retained_entries(table: Table, oldest: int, latest: int) -> set[str]:
    """The segments and manifests named by the log entries ``oldest..latest``."""
    named: set[str] = set()
    for v in range(oldest, latest + 1):
        for ref in table.log.read(v).buckets.values():
            named.update(r for r in (ref.segment, ref.snapshot) if r)
    return named


def _check_manifests(
    snapshots: list[str], named: set[str], oldest: int, latest: int
) -> dict[str, list[int]]:
    """Manifests of retained versions are named; at most one per bucket below the horizon.

    Returns the versions of the manifests kept below the horizon, by bucket.
    """
    from cdc_sink.storage.segments import file_version

    old_snaps: dict[str, list[int]] = {}
    for rel in snapshots:
        fv = file_version(rel)
        assert fv is not None, rel
        if fv > latest:
            continue
        if fv >= oldest or rel in named:
            assert rel in named, f"orphan manifest {rel} (retained {oldest}..{latest})"
        else:
            old_snaps.setdefault(rel.split("/")[1], []).append(fv)
    for b, vs in old_snaps.items():
        assert len(vs) <= 1, f"bucket {b} keeps old snapshots {vs} below horizon {oldest}"
    return old_snaps


def _check_segments(
    segments: list[str], named: set[str], old_snaps: dict[str, list[int]], oldest: int, latest: int
) -> None:
    """Segments of retained versions are named; older ones follow their bucket's kept
    snapshot."""
    from cdc_sink.storage.segments import file_version

    for rel in segments:
        fv = file_version(rel)
        assert fv is not None, rel
        if fv > latest:
            continue
        if fv >= oldest:
            assert rel in named, f"orphan segment {rel} (retained {oldest}..{latest})"
        else:
            kept = old_snaps.get(rel.split("/")[1], [-1])[0]
            assert fv > kept, f"segment {rel} is older than bucket's kept snapshot {kept}"


def _check_pages(root: str, files: dict[str, list[str]], latest: int) -> None:
    """Every page file (but those of a commit in flight) is referenced by a manifest."""
    from cdc_sink.storage.segments import file_version
    from cdc_sink.storage.snapshot import read_manifest

    referenced: set[str] = set()
    for rel in files["_snapshots"]:
        referenced.update(read_manifest(root, rel).files)
    for rel in files["_pages"]:
        fv = file_version(rel)
        if fv is not None and fv > latest:
            continue
        assert rel in referenced, f"page file {rel} is referenced by no manifest"


def drain(results: Any, got: list[Any]) -> None:
    """Appends to ``got`` what a child process has queued so far (without waiting)."""
    import queue

    while True:
        try:
            got.append(results.get_nowait())
        except queue.Empty:
            return


def stop_child(proc: Any, stop: Any) -> int | None:
    """Sets ``stop``, waits up to 60 s for ``proc`` (killed after that), returns its
    exit code."""
    stop.set()
    proc.join(timeout=60)
    if proc.is_alive():
        proc.kill()
        proc.join(timeout=10)
    return proc.exitcode  # type: ignore[no-any-return]
