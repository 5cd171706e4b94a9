"""numpy array buffers kept for reuse across micro-batches, in the sink's hot paths only.

Every micro-batch allocates the same working arrays again (the decoder's token and
column arrays, the bucket split). glibc serves each large one from fresh pages and
returns them to the kernel on free, so each batch page-faults its arrays back in and
the kernel zeroes every page again. Keeping the buffers shortens the driver's decode, on
its own and in a Kafka -> sink run (docs/benchmarks-history.md, "End to end", "numpy buffers
reused, and the fold without a sort").

:func:`reusing` installs, for the current context only (numpy's memory handler is a
context variable: NEP 49), a handler from the C extension ``cdc_sink.runtime._npcache``: buffers
of 64 KiB and more are rounded up to a size class (sixteen per power of two: at most
6.25% more) and, when freed, kept for the next array of that class, up to
:func:`set_limit` bytes (256 MiB until set) in all; smaller ones go to ``malloc``.
Arrays made outside the context, by the user's code or by other threads, keep numpy's
default allocator, and the process's ``malloc`` settings are not touched. Arrays made
inside may live on and be freed anywhere: each remembers its handler.

The sink uses it around the driver's decode of each micro-batch (driver apply mode:
:mod:`cdc_sink.spark._driver`), whose arrays live for one batch. The prepare is left
out: the tablets keep what it allocates, and a run with it around the prepare too gained
nothing (the same section, "The pool around the prepare too"). Without the extension (no
C compiler at install) :func:`reusing` does nothing.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass

from cdc_sink.errors import InvalidArgument

try:  # built from cdc_sink/runtime/_npcache.c at install; optional
    from cdc_sink.runtime import _npcache as _npcache
except ImportError:  # pragma: no cover - exercised where the extension is missing
    _npcache = None  # type: ignore[assignment]

__all__ = ["PoolStats", "available", "release", "reusing", "set_limit", "stats"]


@dataclass(frozen=True)
class PoolStats:
    """The kept buffers.

    Attributes:
        idle_bytes: Bytes of freed buffers kept for reuse now.
        limit_bytes: The most kept at once.
        hits: Buffers handed out again from the kept ones.
        misses: Buffers of a size class newly allocated (nothing kept of its class).
    """

    idle_bytes: int
    limit_bytes: int
    hits: int
    misses: int


def available() -> bool:
    """Whether the extension is built (else :func:`reusing` does nothing)."""
    return _npcache is not None


@contextlib.contextmanager
def reusing() -> Iterator[None]:
    """numpy arrays allocated in this context (this thread, or this asyncio task) come
    from and go back to the kept buffers; the previous handler is back on exit."""
    if _npcache is None:
        yield
        return
    previous = _npcache.install()
    try:
        yield
    finally:
        _npcache.restore(previous)


def set_limit(nbytes: int) -> None:
    """Keeps at most ``nbytes`` of freed buffers (frees what is kept beyond it now).

    Raises:
        InvalidArgument: ``nbytes`` is not an integer >= 0.
    """
    if isinstance(nbytes, bool) or not isinstance(nbytes, int) or nbytes < 0:
        raise InvalidArgument(f"nbytes must be an integer >= 0, got {nbytes!r}")
    if _npcache is not None:
        _npcache.set_limit(nbytes)


def release() -> int:
    """Frees every kept buffer (buffers in use are untouched); the bytes freed."""
    return 0 if _npcache is None else _npcache.release()


def stats() -> PoolStats:
    """The kept buffers now (all zero without the extension)."""
    if _npcache is None:
        return PoolStats(0, 0, 0, 0)
    idle, limit, hits, misses = _npcache.stats()
    return PoolStats(idle, limit, hits, misses)
