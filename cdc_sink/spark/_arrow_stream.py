"""Collecting a DataFrame to the driver as Arrow while working on each batch as it arrives
(internal; the driver apply mode's read).

``DataFrame.toArrow()`` returns only when every partition has arrived, so the driver's
Python sits idle while the JVM reads Kafka, and the JVM sits idle while Python decodes.
Spark itself streams the batches: ``collectAsArrowToPython`` writes each partition's Arrow
batches to a local socket as its task finishes (in completion order), then the order
indices that put them in partition order (the protocol of PySpark's
``ArrowCollectSerializer``). :func:`collect_arrow` reads that stream and calls
``on_batch`` on each batch the moment it arrives, so decoding overlaps the read; the
batches and results come back in partition order, exactly as ``toArrow()`` orders the rows.

This uses PySpark internals (``_jdf.collectAsArrowToPython``, ``_load_from_socket``), which
the supported PySpark versions (docs/compatibility.md) share; where they are missing (a
Spark Connect DataFrame, :func:`is_connect`, which has no JVM on the client's side, or
another PySpark), :func:`collect_arrow` returns None and the caller uses ``toArrow()``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, Any, Generic, TypeVar

import pyarrow as pa

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = ["Collected", "collect_arrow", "is_connect"]

T = TypeVar("T")


@dataclass
class Collected(Generic[T]):
    """A DataFrame collected batch by batch.

    Attributes:
        schema: The Arrow schema of the batches.
        batches: The record batches, in partition order (``toArrow()``'s row order).
        results: ``on_batch``'s result of each batch, aligned with ``batches``.
    """

    schema: pa.Schema
    batches: list[pa.RecordBatch]
    results: list[T]

    def table(self) -> pa.Table:
        """The rows as one table (no copy)."""
        return pa.Table.from_batches(self.batches, schema=self.schema)


def collect_arrow(df: DataFrame, on_batch: Callable[[pa.RecordBatch], T]) -> Collected[T] | None:
    """Collects ``df`` to the driver as Arrow, calling ``on_batch`` on each record batch
    as soon as it arrives (while Spark is still computing the other partitions).

    Returns:
        The batches and results in partition order; None when this PySpark (or a Spark
        Connect session) does not offer the streaming collect (nothing was run then).

    Raises:
        Exception: Whatever the Spark job or ``on_batch`` raised (the job's own error as
            PySpark raises it for ``toArrow()``).
    """
    internals = _internals(df)
    if internals is None:
        return None
    load_from_socket, read_int, call_site, unwrap = internals
    with call_site(df.sparkSession.sparkContext):
        port, secret, server = df._jdf.collectAsArrowToPython()
    arrived: list[pa.RecordBatch] = []
    results: list[T] = []
    try:
        with load_from_socket((port, secret), _Stream()) as stream:
            reader = pa.ipc.open_stream(stream)
            schema = reader.schema
            for rb in reader:  # as each partition's task finishes
                arrived.append(rb)
                results.append(on_batch(rb))
            order = _order(stream, read_int)
    except _JobFailed:
        with unwrap():
            server.getResult()  # raises the job's own exception, as toArrow() does
        raise
    except BaseException:
        # on_batch (or the socket) failed: the JVM's writes fail once the socket is
        # closed; its error is a consequence, not the cause.
        with contextlib.suppress(Exception):
            server.getResult()
        raise
    with unwrap():
        server.getResult()
    return Collected(schema, [arrived[i] for i in order], [results[i] for i in order])


class _JobFailed(RuntimeError):
    """The Spark job failed (the JVM's message; its own exception is raised instead)."""


class _Stream:
    """A serializer for ``_load_from_socket`` that hands over the socket file itself."""

    def load_stream(self, stream: IO[bytes]) -> IO[bytes]:
        """The socket file (read by :func:`collect_arrow`)."""
        return stream


def _order(stream: IO[bytes], read_int: Callable[[IO[bytes]], int]) -> list[int]:
    """The indices that put the arrived batches in partition order (after the Arrow
    stream: their count, or -1 and the JVM's error message)."""
    num = read_int(stream)
    if num == -1:
        n = read_int(stream)
        raise _JobFailed(stream.read(n).decode("utf-8", "replace"))
    return [read_int(stream) for _ in range(num)]


def is_connect(df: Any) -> bool:
    """Whether ``df`` is a Spark Connect DataFrame (``pyspark.sql.connect``): a plan sent
    to a server, with no JVM in this process (``_jdf``, ``sparkContext`` and ``rdd``
    raise there)."""
    try:
        from pyspark.sql.connect.dataframe import DataFrame as ConnectDataFrame
    except ImportError:  # no Connect client installed: no Connect DataFrame either
        return False
    return isinstance(df, ConnectDataFrame)


def _internals(df: DataFrame) -> tuple[Any, Any, Any, Any] | None:
    """The PySpark internals :func:`collect_arrow` needs, or None without them."""
    if is_connect(df) or not hasattr(df, "_jdf"):
        return None  # Spark Connect: no JVM here
    try:
        from pyspark.errors.exceptions.captured import unwrap_spark_exception
        from pyspark.serializers import read_int
        from pyspark.traceback_utils import SCCallSiteSync
        from pyspark.util import _load_from_socket
    except ImportError:
        return None
    return _load_from_socket, read_int, SCCallSiteSync, unwrap_spark_exception
