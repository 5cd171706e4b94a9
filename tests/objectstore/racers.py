"""Child processes of the race tests (a module of its own: spawned children import it)."""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable, Sequence
from typing import Any

from cdc_sink.errors import CommitConflict
from cdc_sink.storage.log_entry import BucketRef, LogEntry
from cdc_sink.storage.objectstore import ObjectExists, store_for
from cdc_sink.storage.version_log import VersionLog

Outcome = tuple[Any, int, str]
"""``(round, racer, "won" | "lost" | "error: ...")``: one racer's outcome of one round."""


def run_race(
    race: Callable[..., None],
    url: str,
    options: dict[str, str] | None,
    rounds: Sequence[Any] | int,
    racers: int,
) -> list[Outcome]:
    """Runs ``race(url, options, rounds, racer, barrier, results)`` in ``racers`` spawned
    processes that meet at a barrier before each round; every outcome, once every racer
    exited with 0."""
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(racers)
    results = ctx.Queue()
    procs = [
        ctx.Process(target=race, args=(url, options, rounds, racer, barrier, results))
        for racer in range(racers)
    ]
    for p in procs:
        p.start()
    n = rounds if isinstance(rounds, int) else len(rounds)
    outcomes = [results.get(timeout=300) for _ in range(racers * n)]
    for p in procs:
        p.join(timeout=60)
    assert [p.exitcode for p in procs] == [0] * racers
    return outcomes


def race_put_if_absent(
    url: str,
    options: dict[str, str] | None,
    keys: list[str],
    racer: int,
    barrier: Any,
    results: Any,
) -> None:
    """For each key in turn: wait for every racer at ``barrier``, then try to create the
    key with this racer's payload; report ``(key, racer, "won" | "lost" | error)``."""
    store = store_for(url, options, check_conditional_writes=False)
    for key in keys:
        barrier.wait(timeout=120)
        try:
            store.put_if_absent(key, payload(racer))
            outcome = "won"
        except ObjectExists:
            outcome = "lost"
        except Exception as exc:  # reported, so the test names it
            outcome = f"error: {type(exc).__name__}: {exc}"
        results.put((key, racer, outcome))


def payload(racer: int) -> bytes:
    """What racer ``racer`` writes."""
    return f"written by racer {racer}".encode()


def race_log_commits(
    url: str,
    options: dict[str, str] | None,
    versions: int,
    racer: int,
    barrier: Any,
    results: Any,
) -> None:
    """For each version in turn: wait for every racer at ``barrier``, then try to commit
    it to the table's version log as writer ``writer-<racer>``; report
    ``(version, racer, "won" | "lost" | error)``."""
    store = store_for(url, options, check_conditional_writes=False)
    log = VersionLog(url, store=store)
    for version in range(versions):
        barrier.wait(timeout=120)
        try:
            log.commit(log_entry(version, racer))
            outcome = "won"
        except CommitConflict:
            outcome = "lost"
        except Exception as exc:  # reported, so the test names it
            outcome = f"error: {type(exc).__name__}: {exc}"
        results.put((version, racer, outcome))


def log_entry(version: int, racer: int) -> LogEntry:
    """The entry racer ``racer`` commits for ``version``."""
    return LogEntry(
        version=version,
        app_id=f"writer-{racer}",
        batch_id=version,
        commit_time_ms=1_000 * version + racer,
        schema_id=0,
        buckets={racer % 4: BucketRef(f"_wal/{racer % 4}/{version:020d}-{racer:04x}.wal", None)},
    )
