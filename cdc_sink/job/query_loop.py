"""The job's main loop around a running streaming query: wait, poll, stop on a signal."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql.streaming.query import StreamingQuery

__all__ = ["run_until_stopped"]

logger = logging.getLogger("cdc_to_tablets")


def run_until_stopped(
    query: StreamingQuery,
    stop: threading.Event,
    tick: Callable[[], None],
    signum: Callable[[], int | None],
) -> BaseException | None:
    """Waits for ``query`` to end or for ``stop`` (set by a signal handler), calling
    ``tick`` about twice a second; stops the query from this (the main) thread, outside
    any other Py4J call. Returns the query's failure (None: it ended or was stopped)."""
    from pyspark.errors import StreamingQueryException

    failure: BaseException | None = None
    try:
        while not stop.is_set():
            if query.awaitTermination(0.5):  # type: ignore[arg-type]  # seconds, a float
                break
            tick()
    except StreamingQueryException as exc:
        failure = exc
    if stop.is_set() and query.isActive:
        logger.info("signal %s: stopping (the batch in flight finishes)", signum())
        try:
            query.stop()
        except Exception as exc:  # the batch in flight failed meanwhile
            failure = exc
    if failure is None:
        failure = query.exception()
    return failure
