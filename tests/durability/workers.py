"""Process entry points of the multi-process durability tests (multiprocessing ``spawn``).

Kept out of the test modules so that a spawned child imports only this module and what
it needs (not pytest and the test modules).
"""

from __future__ import annotations

import hashlib
import random
import time
import traceback
from typing import Any

from tests.durability import workload

BARRIER_TIMEOUT = 120.0


def race_batch(app_index: int, batch_id: int) -> list[dict[str, Any]]:
    """The batch ``batch_id`` of racing writer ``app_index`` (keys overlap between
    writers, so the order of commits matters)."""
    rng = random.Random(7919 * app_index + batch_id)
    out = []
    for _ in range(10):
        k = rng.randrange(16)
        op = rng.choice(["upsert", "upsert", "update", "insert", "delete"])
        e: dict[str, Any] = {"op": op, "key": {"id": k}, "seq": 10 * batch_id + rng.randrange(10)}
        if op != "delete":
            e["set"] = {"name": f"a{app_index}b{batch_id}", "qty": rng.randrange(100)}
        out.append(e)
    return out


def race_writer(
    path: str,
    app_index: int,
    rounds: int,
    attempt: Any,
    checked: Any,
    round_done: Any,
    retry_lock: Any,
    results: Any,
    storage_options: dict[str, str] | None = None,
) -> None:
    """One racing writer: per round, tries to commit the same next version as the other
    writers (all of them decide and prepare before any commits: ``attempt`` barrier in
    front of the log commit), reports, waits while the parent checks, then (a loser)
    commits again, one loser at a time. ``path`` is a directory or an object-store URL
    (with ``storage_options``)."""
    from cdc_sink.errors import CommitConflict
    from cdc_sink.table import open_table

    app_id = f"app{app_index}"
    try:
        table = open_table(path, options=workload.options(), storage_options=storage_options)
        real_commit = table.log.commit
        armed = [True]

        def commit_after_everyone_prepared(entry: Any) -> None:
            if armed[0]:
                attempt.wait(BARRIER_TIMEOUT)
            real_commit(entry)

        table.log.commit = commit_after_everyone_prepared  # type: ignore[method-assign]
        for r in range(rounds):
            armed[0] = True
            events = race_batch(app_index, r)
            # A writer commits after the newest version it knows; it follows the other
            # writers' versions when it reads (here), or when its commit loses a race.
            table.version  # noqa: B018
            lost = False
            try:
                res = table.apply(events, app_id=app_id, batch_id=r)
                results.put(("won", app_id, r, res.version, res.skipped))
            except CommitConflict as exc:
                lost = True
                results.put(("lost", app_id, r, str(exc), False))
            checked.wait(BARRIER_TIMEOUT)  # the parent looks at the table ...
            checked.wait(BARRIER_TIMEOUT)  # ... and is done
            if lost:
                armed[0] = False
                with retry_lock:
                    table.version  # noqa: B018  (the losers retried before it committed)
                    res = table.apply(events, app_id=app_id, batch_id=r)
                results.put(("retried", app_id, r, res.version, res.skipped))
            round_done.wait(BARRIER_TIMEOUT)
    except BaseException:
        results.put(("error", app_id, -1, traceback.format_exc(), False))
        for b in (attempt, checked, round_done):
            b.abort()
        raise


def repeat_reader(
    path: str,
    version: int,
    timestamp_ms: int,
    stop: Any,
    results: Any,
    min_reads: int,
    storage_options: dict[str, str] | None = None,
) -> None:
    """Reads ``version`` again and again, through freshly opened tables (by version and
    by timestamp) and through one table opened at the start, and reports the SHA-256 of
    each read's Arrow IPC bytes (or the error) until ``stop`` is set (and at least
    ``min_reads`` reads). ``path`` is a directory or an object-store URL."""
    import pyarrow as pa

    from cdc_sink.table import open_table

    def digest(t: pa.Table) -> str:
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, t.schema) as w:
            w.write_table(t)
        return hashlib.sha256(sink.getvalue().to_pybytes()).hexdigest()

    def fresh() -> Any:
        return open_table(path, storage_options=storage_options)

    n = 0
    persistent = fresh()  # opened once, follows the table as it changes
    while n < min_reads or not stop.is_set():
        n += 1
        try:
            t = fresh()
            results.put(("version", digest(t.read(version=version)), None))
            results.put(("timestamp", digest(fresh().read(timestamp=timestamp_ms)), None))
            results.put(("persistent", digest(persistent.read(version=version)), None))
        except Exception as exc:
            results.put(("error", None, f"{type(exc).__name__}: {exc}"))
        time.sleep(0.002)
    results.put(("done", None, str(n)))


def follow_reader(path: str, stop: Any, results: Any) -> None:
    """Reads the newest version again and again until ``stop`` is set, through freshly
    opened tables and through one table opened at the start, and reports
    ``(kind, version, SHA-256 of the read's Arrow IPC bytes)`` per read (or
    ``("error", -1, message)``), then ``("done", n, "")``."""
    import pyarrow as pa

    from cdc_sink.table import open_table

    def digest(t: pa.Table) -> str:
        if t.num_rows:
            t = t.sort_by([("id", "ascending")]).combine_chunks()
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, t.schema) as w:
            w.write_table(t)
        return hashlib.sha256(sink.getvalue().to_pybytes()).hexdigest()

    n = 0
    persistent = open_table(path)
    while n < 1 or not stop.is_set():
        n += 1
        try:
            fresh = open_table(path)
            v = fresh.version
            results.put(("fresh", v, digest(fresh.read(version=v))))
            v = persistent.version
            results.put(("persistent", v, digest(persistent.read(version=v))))
        except Exception as exc:
            results.put(("error", -1, f"{type(exc).__name__}: {exc}"))
    results.put(("done", n, ""))
