"""Crash at every fault point of the table path, then recover: every batch exactly once.

A child process (``crash_driver.py``: a fresh interpreter, or for most runs a child
forked from ``crash_driver.py --serve``, which saves the imports) applies the workload's
batches with ``app_id="job", batch_id=i`` (compacting and garbage-collecting) and is
killed by ``SIGKILL`` at a fault point: each registered point at its first, a middle and
its last hit of a clean run (``CDC_SINK_CRASH_AT=name:N``), and at >= 200 random points
(``CDC_SINK_CRASH_RANDOM=seed:prob``). After each crash the test process reopens the
table and checks it (every retained version equals the reference model of the batches
committed so far, each applied once; ``versions()`` names each batch once); then the
driver is run again from batch 0, without crash injection: the batches committed before
come back ``skipped``, the others are committed, and the final table equals the model of
the whole sequence applied exactly once, with no garbage left after GC.
"""

from __future__ import annotations

import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import cdc_sink
import cdc_sink.table  # registers the table's fault points
from cdc_sink.errors import TableNotFound
from cdc_sink.storage import faults
from cdc_sink.storage.framing import encode_file
from cdc_sink.storage.version_log import LOG_MAGIC, LogEntry
from cdc_sink.table import create_table, open_table
from tests.durability import checks, workload
from tests.durability.checks import DriverServer

KILLED = -signal.SIGKILL
SEED = 11
BATCHES = 10
# Reached only when a crashed commit left an unfinished newest log entry behind.
REPAIR_POINT = "log.repair_removing"
TABLE_POINTS = [p for p in faults.KNOWN_POINTS if p != REPAIR_POINT]


def _new_table(path: Path) -> None:
    create_table(path, workload.schema(), options=workload.options())


def _recover_and_check(
    path: Path,
    seed: int,
    lines: list[dict[str, Any]],
    before: int,
    *,
    below_checkpoint: str = "strict",
) -> int:
    """Reopens a crashed table and checks it; returns the number of committed batches.

    ``before``: batches committed when the crashed run started.
    """
    table = open_table(path, options=workload.options())
    committed = checks.check_table(table, seed, below_checkpoint=below_checkpoint)
    reported = [d["i"] for d in lines if "i" in d and not d["skipped"]]
    # What the child saw committed is committed, and at most the batch in flight more.
    assert committed >= (reported[-1] + 1 if reported else before), (committed, lines)
    last_seen = max((d["i"] for d in lines if "i" in d), default=-1)
    assert committed <= max(before, last_seen + 1) + 1, (committed, before, lines)
    return committed


def _finish_and_check(
    server: DriverServer,
    path: Path,
    seed: int,
    n: int,
    committed: int,
    *,
    below_checkpoint: str = "strict",
) -> None:
    """Re-runs the driver without crashes and checks the final table."""
    res = server.run(path, seed, n)
    assert res.returncode == 0, res.stderr
    lines = checks.driver_lines(res.stdout)
    assert lines[-1] == {"done": True}
    checks.check_replay(lines, committed)
    table = open_table(path, options=workload.options())
    assert checks.check_table(table, seed, below_checkpoint=below_checkpoint) == n
    table.gc(dry_run=False)
    checks.assert_no_garbage(table)
    reopened = open_table(path, options=workload.options())
    assert checks.rows_of(reopened.read()) == checks.expected_rows(seed, n)


@pytest.fixture(scope="module")
def clean_hits(
    driver_server: DriverServer, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, int]:
    """How often a clean run of the driver reaches each fault point."""
    root = checks.scratch_dir() or str(tmp_path_factory.mktemp("hits"))
    path = Path(root) / "table"
    _new_table(path)
    res = driver_server.run(
        path, SEED, BATCHES, "--count-hits", crash={faults.CRASH_AT_ENV: "__count_only__"}
    )
    shutil.rmtree(root, ignore_errors=True)
    assert res.returncode == 0, res.stderr
    hits: dict[str, int] = checks.driver_lines(res.stdout)[-1]["hits"]
    return hits


def test_every_fault_point_of_the_table_path_is_registered_and_reached(
    clean_hits: dict[str, int],
) -> None:
    src = Path(cdc_sink.__file__).parent
    used = set()
    for f in src.rglob("*.py"):
        used.update(re.findall(r"fault_point\(\s*\"([^\"]+)\"", f.read_text()))
    known = set(faults.KNOWN_POINTS)
    assert used <= known, f"unregistered fault points: {used - known}"
    assert known <= used, f"registered but never called: {known - used}"
    unreached = [p for p in TABLE_POINTS if not clean_hits.get(p)]
    assert not unreached, f"the driver never reaches {unreached}: extend the workload"


# Crash positions of the workload where GC was killed after its checkpoint and before
# the last log entry below the horizon was deleted.


def _point_cases() -> list[Any]:
    out = []
    for point in TABLE_POINTS:
        for which in ("first", "middle", "last"):
            out.append(pytest.param(point, which, id=f"{point}-{which}"))
    return out


@pytest.mark.parametrize(("point", "which"), _point_cases())
def test_crash_at_fault_point_then_replay_commits_every_batch_once(
    point: str,
    which: str,
    clean_hits: dict[str, int],
    durable_dir: Path,
    driver_server: DriverServer,
) -> None:
    total = clean_hits.get(point, 0)
    if not total:
        pytest.fail(f"the driver never reaches {point}")
    nth = {"first": 1, "middle": max(1, (total + 1) // 2), "last": total}[which]
    _new_table(durable_dir)
    crash = {faults.CRASH_AT_ENV: f"{point}:{nth}"}
    if which == "first":  # a fresh interpreter, as in production
        res = checks.run_driver(durable_dir, SEED, BATCHES, env=checks.child_env(**crash))
    else:  # forked from the driver server: the same process state, much cheaper
        res = driver_server.run(durable_dir, SEED, BATCHES, crash=crash)
    assert res.returncode == KILLED, (res.returncode, res.stderr)
    assert f"crash injected at fault point {point} (hit {nth})" in res.stderr
    committed = _recover_and_check(durable_dir, SEED, checks.driver_lines(res.stdout), 0)
    _finish_and_check(driver_server, durable_dir, SEED, BATCHES, committed)


def test_crash_while_repairing_an_unfinished_log_entry(
    durable_dir: Path, driver_server: DriverServer
) -> None:
    _new_table(durable_dir)
    res = driver_server.run(durable_dir, SEED, 4)
    assert res.returncode == 0, res.stderr
    table = open_table(durable_dir, options=workload.options())
    nxt = table.version + 1
    data = encode_file([LogEntry(nxt, "other", 0, 1, 0).to_json().encode()], magic=LOG_MAGIC)
    Path(table.log.entry_path(nxt)).write_bytes(data[: len(data) // 2])  # a torn commit
    res = checks.run_driver(
        durable_dir, SEED, BATCHES, env=checks.child_env(**{faults.CRASH_AT_ENV: REPAIR_POINT})
    )
    assert res.returncode == KILLED, (res.returncode, res.stderr)
    assert f"crash injected at fault point {REPAIR_POINT}" in res.stderr
    committed = _recover_and_check(durable_dir, SEED, checks.driver_lines(res.stdout), 4)
    assert committed == 4
    _finish_and_check(driver_server, durable_dir, SEED, BATCHES, committed)


CREATE_CHILD = """
import sys
from cdc_sink.table import create_table
sys.path.insert(0, sys.argv[2])
from tests.durability import workload
create_table(sys.argv[1], workload.schema(), options=workload.options())
"""


def test_crash_while_creating_the_table_is_recoverable(durable_dir: Path) -> None:
    repo = str(Path(__file__).resolve().parents[2])
    res = subprocess.run(
        [sys.executable, "-c", CREATE_CHILD, str(durable_dir), repo],
        env=checks.child_env(**{faults.CRASH_AT_ENV: "log.before_create"}),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == KILLED, res.stderr
    try:  # what a job does on start: open the table, or create it
        table = open_table(durable_dir, options=workload.options())
    except TableNotFound:
        table = create_table(durable_dir, workload.schema(), options=workload.options())
    assert table.apply(workload.batch(SEED, 0), app_id=workload.APP_ID, batch_id=0).version == 1
    checks.check_table(open_table(durable_dir, options=workload.options()), SEED)


RANDOM_CHAINS = 20
CRASHES_PER_CHAIN = 10
PROBABILITIES = [0.03, 0.06, 0.12, 0.25]


@pytest.mark.parametrize("chain", range(RANDOM_CHAINS))
def test_random_crashes_then_replay_commits_every_batch_once(
    chain: int, durable_dir: Path, driver_server: DriverServer
) -> None:
    """Each chain collects CRASHES_PER_CHAIN random crashes (>= 200 in all); after each
    one the table is checked and the next run resumes it; a table whose run completes is
    finished and checked, and the chain goes on with a fresh table."""
    prob = PROBABILITIES[chain % len(PROBABILITIES)]
    points: set[str] = set()
    crashes = 0
    attempt = 0
    tables = 0
    while crashes < CRASHES_PER_CHAIN:
        path = durable_dir.parent / f"{durable_dir.name}-{tables}"
        seed = 1000 * chain + tables
        tables += 1
        _new_table(path)
        committed = 0
        while crashes < CRASHES_PER_CHAIN:
            attempt += 1
            crash = {faults.CRASH_RANDOM_ENV: f"{chain * 7919 + attempt}:{prob}"}
            res = driver_server.run(path, seed, BATCHES, crash=crash)
            lines = checks.driver_lines(res.stdout)
            checks.check_replay(lines, committed)
            if res.returncode == 0:
                assert lines[-1] == {"done": True}, lines
                committed = BATCHES
                break
            assert res.returncode == KILLED, (res.returncode, res.stderr)
            where = re.search(r"crash injected at fault point (\S+)", res.stderr)
            assert where, res.stderr
            points.add(where.group(1))
            crashes += 1
            committed = _recover_and_check(path, seed, lines, committed, below_checkpoint="skip")
        _finish_and_check(driver_server, path, seed, BATCHES, committed, below_checkpoint="skip")
    assert len(points) >= 2, f"every random crash hit the same point: {points}"


def test_the_workload_shows_a_batch_applied_twice() -> None:
    """The check behind "exactly once" even where GC deleted the log entries: applying
    any batch a second time changes the data (its marker row reads name "dup")."""
    from tests.model import RefModel

    for i in range(BATCHES):
        model = RefModel(workload.schema())
        for j in [*range(i + 1), i]:
            model.apply(workload.batch(SEED, j))
        model.commit(i + 2)
        twice = checks.normalized(model.rows)
        assert twice != checks.expected_rows(SEED, i + 1)
        assert twice[(workload.marker_key(i),)]["name"] == "dup"
