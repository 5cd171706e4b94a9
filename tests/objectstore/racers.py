"""Child processes of the race tests (a module of its own: spawned children import it)."""

from __future__ import annotations

from typing import Any

from cdc_sink.errors import CommitConflict
from cdc_sink.storage.log_entry import BucketRef, LogEntry
from cdc_sink.storage.objectstore import ObjectExists, store_for
from cdc_sink.storage.version_log import VersionLog


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
