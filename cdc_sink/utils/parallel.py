"""An ordered map over a thread pool with bounded look-ahead (internal).

Snapshot writes encode their pages this way and scans build their pages this way: the
work per item is Arrow or numpy code that releases the GIL (compression, CRC32C,
decoding, ``filter``), so a few threads really overlap, while the consumer gets the
results in input order. At most ``threads * ahead_per_thread`` items are in flight,
so memory stays bounded by a few items whatever the input's length.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

__all__ = ["ordered_map"]

T = TypeVar("T")
R = TypeVar("R")


def ordered_map(
    fn: Callable[[T], R],
    items: Iterable[T],
    threads: int,
    *,
    ahead_per_thread: int = 2,
    name: str = "cdc_sink",
) -> Iterator[R]:
    """Yields ``fn(item)`` for each of ``items``, in order, computed in ``threads``
    threads (in the calling thread when ``threads`` <= 1).

    An exception of ``fn`` is raised to the consumer at that item's turn. When the
    consumer stops (closes the generator, or fails), items not started are cancelled
    and the ones running are waited for.
    """
    if threads <= 1:
        yield from map(fn, items)
        return
    with ThreadPoolExecutor(threads, thread_name_prefix=name) as pool:
        ahead: deque[Future[R]] = deque()
        try:
            for item in items:
                ahead.append(pool.submit(fn, item))
                if len(ahead) >= threads * ahead_per_thread:
                    yield ahead.popleft().result()
            while ahead:
                yield ahead.popleft().result()
        finally:  # the consumer failed or stopped: start nothing more
            for fut in ahead:
                fut.cancel()
