"""Decoding driver mode's Kafka values in worker processes (internal; ``sink(...,
decode_processes=N)``).

Driver mode decodes each Arrow batch the moment Spark streams it to the driver
(:mod:`cdc_sink.spark._arrow_stream`), but in the driver's one Python thread, and in the
end-to-end benchmark that thread (decode, then apply) is the bound while the machine's
cores are only partly busy (docs/benchmarks-history.md, "End to end", "Where the CPU goes"; the
pool's own runs follow it, "Decode worker processes"). Threads do not help: the decoder
is many numpy steps with Python between them, which holds the GIL. A
:class:`DecodePool` hands each batch to one of N worker processes instead, and the
results come back in the order the batches were submitted (the caller joins them in
partition order, as before), so the table, the rejects and their Kafka coordinates are
exactly those of the in-process decode.

Workers are *spawned*, not forked: the driver holds a JVM gateway, Spark's threads and
Arrow's thread pools, none of which a fork may copy safely. They start on the first
batch (each imports numpy, pyarrow and the decoders once) and live until
:meth:`DecodePool.close`. A worker that dies (killed, out of memory) breaks the pool: the
batches it had are decoded in the driver instead, and the next batch starts a new pool,
so a worker's death costs time, never events.
"""

from __future__ import annotations

import concurrent.futures as cf
import logging
import multiprocessing
from collections.abc import Mapping
from concurrent.futures.process import BrokenProcessPool
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

if TYPE_CHECKING:
    from cdc_sink.formats import Decoded, FormatName
    from cdc_sink.schema import TableSchema

__all__ = ["DecodePool", "PendingDecode", "decode_here"]

logger = logging.getLogger(__name__)


def decode_here(
    fmt: FormatName,
    options: Mapping[str, Any],
    schema: TableSchema,
    values: pa.Array,
    keys: pa.Array | None,
) -> Decoded:
    """Decodes ``values`` (with their Kafka ``keys``) in this process; positions are the
    values' indices."""
    from cdc_sink.formats import get_decoder

    decoder = get_decoder(fmt, **options)
    position = np.arange(len(values), dtype=np.int64)
    return decoder.decode_with_meta(values, schema, position=position, keys=keys)


def _decode_in_worker(*args: Any) -> Decoded:
    """:func:`decode_here` (same arguments) in a worker; any error comes back as a
    ``RuntimeError`` naming it (every exception pickles as that, not every cdc_sink error
    does)."""
    try:
        return decode_here(*args)
    except Exception as exc:
        raise RuntimeError(f"decoding in a worker process failed: {exc!r}") from None


def _warm_up() -> None:
    """Imports the decoders in a worker."""
    import cdc_sink.formats  # noqa: F401


class PendingDecode:
    """A batch handed to the pool; :meth:`result` waits for its decoded events."""

    def __init__(
        self,
        pool: DecodePool,
        executor: cf.ProcessPoolExecutor | None,
        future: cf.Future[Decoded],
        args: tuple[Any, ...],
    ) -> None:
        self._pool, self._executor, self._future, self._args = pool, executor, future, args

    def result(self) -> Decoded:
        """The decoded batch (decoded here when the worker died).

        Raises:
            RuntimeError: The decoder failed in the worker.
        """
        try:
            return self._future.result()
        except BrokenProcessPool:
            self._pool.discard_broken(self._executor)
            logger.warning("a decode worker died: its batch is decoded in the driver")
            return decode_here(*self._args)


class DecodePool:
    """``processes`` spawned worker processes that decode Kafka values of ``fmt``.

    Args:
        processes: How many worker processes (>= 1).
        fmt: The format of the values.
        options: Keyword options of the format's decoder.
    """

    def __init__(self, processes: int, fmt: FormatName, options: Mapping[str, Any]) -> None:
        self.processes = processes
        self.fmt: FormatName = fmt
        self.options = dict(options)
        self._pool: cf.ProcessPoolExecutor | None = None

    def _executor(self) -> cf.ProcessPoolExecutor:
        if self._pool is None:
            self._pool = cf.ProcessPoolExecutor(
                self.processes, mp_context=multiprocessing.get_context("spawn")
            )
        return self._pool

    def start(self) -> None:
        """Starts every worker now, each with the decoders imported (otherwise the first
        batches start them)."""
        executor = self._executor()
        for f in [executor.submit(_warm_up) for _ in range(self.processes)]:
            f.result()

    def submit(self, schema: TableSchema, values: pa.Array, keys: pa.Array | None) -> PendingDecode:
        """Hands one batch of values to a worker (starting the workers if need be)."""
        args = (self.fmt, self.options, schema, values, keys)
        executor = self._executor()
        try:
            future = executor.submit(_decode_in_worker, *args)
        except BrokenProcessPool:
            self.discard_broken(executor)
            future = cf.Future()
            future.set_result(decode_here(*args))
        return PendingDecode(self, executor, future, args)

    def discard_broken(self, executor: cf.ProcessPoolExecutor | None) -> None:
        """Drops ``executor`` (a pool a dead worker broke) if it is still the current
        one; the next batch starts a new pool."""
        if executor is not None and executor is self._pool:
            self._pool = None
            executor.shutdown(wait=False, cancel_futures=True)

    def close(self) -> None:
        """Stops the workers (waiting for the batches they have)."""
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)

    @property
    def running(self) -> bool:
        """Whether worker processes are started."""
        return self._pool is not None
