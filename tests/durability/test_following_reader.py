"""A reader that follows the newest version reads exactly that version's rows.

The chaos suite once saw a reader read the newest version ``v`` and get version
``v - 1``'s rows: a commit landed while the reader opened the table, between building
its history from the log and asking the log for the newest version, so the reader named
the new version but had not seen its segments. These tests make a commit land at every
point where a reader looks at the log (opening, and following an open table), and run a
reader process that follows a table while another process commits as fast as it can.
Every read is compared with what a table opened afterwards reads at that version.
"""

from __future__ import annotations

import multiprocessing as mp
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from cdc_sink.storage.version_log import VersionLog
from cdc_sink.table import Table, create_table, open_table
from tests.durability import checks, workload
from tests.durability.workers import follow_reader

SEED = 47


def _apply(t: Table, i: int) -> int:
    return t.apply(workload.batch(SEED, i), app_id=workload.APP_ID, batch_id=i).version


def _commit_at_probe(writer: Table, probe: int, action: Callable[[], Any]) -> tuple[Any, int]:
    """Runs ``action`` with one commit of ``writer`` landing just before the ``probe``-th
    time a log other than the writer's looks for the newest version; returns what
    ``action`` returned and the number of probes it made."""
    calls = 0
    original = VersionLog.latest

    def latest(log: VersionLog) -> int | None:
        nonlocal calls
        if log is not writer.log:
            if calls == probe:
                _apply(writer, writer.version + 1)
            calls += 1
        return original(log)

    with pytest.MonkeyPatch.context() as mp_:
        mp_.setattr(VersionLog, "latest", latest)
        out = action()
    return out, calls


def _check_read(path: Path, version: int, got: str) -> None:
    want = checks.content_digest(open_table(path).read(version=version))
    assert got == want, f"a read of version {version} returned other rows"


def _check_latest_read(path: Path, lo: int, got: str) -> None:
    """A read of "the newest version" that began when ``lo`` was the newest returns the
    rows of ``lo`` or of a version committed during the read."""
    fresh = open_table(path)
    wants = {checks.content_digest(fresh.read(version=u)) for u in range(lo, fresh.version + 1)}
    assert got in wants, f"a read of the newest version (>= {lo}) returned other rows"


def test_a_commit_while_a_reader_opens_the_table(durable_dir: Path) -> None:
    writer = create_table(durable_dir, workload.schema(), options=workload.options())
    for i in range(3):
        _apply(writer, i)
    probe = 0
    while True:

        def open_and_read() -> tuple[int, str, str]:
            r = open_table(durable_dir)
            v = r.version
            return v, checks.content_digest(r.read()), checks.content_digest(r.read(version=v))

        (v, latest_read, by_version), calls = _commit_at_probe(writer, probe, open_and_read)
        _check_latest_read(durable_dir, v, latest_read)
        _check_read(durable_dir, v, by_version)
        if probe >= calls:  # the commit came after every probe: all points covered
            break
        probe += 1
    assert probe >= 2


def test_a_commit_while_an_open_reader_follows(durable_dir: Path) -> None:
    writer = create_table(durable_dir, workload.schema(), options=workload.options())
    for i in range(3):
        _apply(writer, i)
    reader = open_table(durable_dir)
    checks.content_digest(reader.read())  # tablets loaded: following replays into them
    probe = 0
    while True:

        def follow() -> list[tuple[int, str, bool]]:
            out = []
            for _ in range(3):
                v = reader.version
                out.append((v, checks.content_digest(reader.read(version=v)), True))
                out.append((reader.version, checks.content_digest(reader.read()), False))
            return out

        reads, calls = _commit_at_probe(writer, probe, follow)
        for v, got, exact in reads:
            if exact:
                _check_read(durable_dir, v, got)
            else:
                _check_latest_read(durable_dir, v, got)
        if probe >= calls:
            break
        probe += 1
    assert probe >= 2


def test_a_reader_process_follows_a_fast_writer(durable_dir: Path) -> None:
    writer = create_table(durable_dir, workload.schema(), options=workload.options())
    _apply(writer, 0)
    ctx = mp.get_context("spawn")
    stop = ctx.Event()
    results = ctx.Queue()
    proc = ctx.Process(target=follow_reader, args=(str(durable_dir), stop, results))
    proc.start()
    got: list[Any] = []
    try:
        got.append(results.get(timeout=120))  # the reader is up before the writes
        i = 1
        while i < 400 and (i < 60 or len(got) < 100):
            _apply(writer, i)
            if i % 7 == 0:
                writer.compact()
            i += 1
            checks.drain(results, got)
        stop.set()
        while (item := results.get(timeout=120))[0] != "done":
            got.append(item)
    finally:
        code = checks.stop_child(proc, stop)
    assert code == 0
    errors = [g for g in got if g[0] == "error"]
    assert not errors, errors[:3]
    assert len(got) >= 100
    versions = {v for _, v, _ in got}
    assert len(versions) >= 20, "the reader did not see the table move"
    fresh = open_table(durable_dir)
    want = {v: checks.content_digest(fresh.read(version=v)) for v in versions}
    wrong = [(kind, v) for kind, v, d in got if d != want[v]]
    assert not wrong, f"{len(wrong)} of {len(got)} reads returned other rows: {wrong[:5]}"
