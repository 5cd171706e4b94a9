"""Reading stored pages in parallel before a small scan starts (internal).

A base loaded from a snapshot holds its pages as :class:`~cdc_sink.tablet.column.LazyPage`
s, read on first access (memory-mapped, CRC-checked, decoded). A large scan builds its
pages in a pool of threads (:func:`cdc_sink.tablet.reads.scan`), reading them there. A
scan too small for that (fewer than ``reads.MIN_PARALLEL_CELLS`` cells) still has its
stored pages read by :func:`load_pages` in a few threads first: Arrow's IPC reader and
the CRC check release the GIL, and one page of 20 compressed columns is 20 decodes, so
the decodes of a cold read of compressed pages overlap on the cores (docs/benchmarks-history.md,
"Cold reads of compressed pages in parallel").

Only the pages the scan will return as they are loaded this way (its columns, and the
pages its filter keeps, with no deleted row): a read of some columns still never
touches the pages of the others. Uncompressed pages are zero-copy, and loading them
costs only their CRC.

Before a scan reads its stored pages, their bytes are fetched together
(:func:`prefetched`: each loader's :class:`~cdc_sink.tablet.lazy_pages.PageFetcher`),
so that a cold read on an object store makes one request per run of near pages, all
issued concurrently, instead of one request per page as it walks.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from cdc_sink.tablet.column import ColumnStore, LazyPage
from cdc_sink.tablet.lazy_pages import PageFetcher, PageLoader

__all__ = ["MIN_PARALLEL", "load_pages", "prefetched", "unloaded_pages", "usable_cores"]

MIN_PARALLEL = 4
"""Fewer unloaded pages than this are left to load on access (a pool is not worth it)."""

_MAX_THREADS = 8


def unloaded_pages(store: ColumnStore, version: int, wanted: np.ndarray) -> list[LazyPage]:
    """The stored pages of ``store``'s base at ``version`` that are not read yet, among
    the pages where ``wanted`` is True (a page past the base's end has none)."""
    base, _ = ColumnStore.view(store.state, version)
    n = len(base.pages)
    out: list[LazyPage] = []
    for p in np.flatnonzero(wanted).tolist():
        if p >= n:
            break
        entry = base.page_entry(p)
        if isinstance(entry, LazyPage) and not entry.loaded:
            out.append(entry)
    return out


def load_pages(pages: Sequence[LazyPage]) -> None:
    """Reads ``pages`` in up to as many threads as this process may use cores (at most
    8), each page once. A page that fails to load is left unloaded: the reader that
    reaches it reads it again and raises its error there, as without this."""
    threads = min(usable_cores(), _MAX_THREADS, len(pages))
    if len(pages) < MIN_PARALLEL or threads <= 1:
        return
    with ThreadPoolExecutor(threads, thread_name_prefix="cdc_sink-pages") as pool:
        for _ in pool.map(_try_load, pages):
            pass


@contextlib.contextmanager
def prefetched(pages: Iterable[LazyPage]) -> Iterator[None]:
    """Within the block, the stored bytes of ``pages`` not loaded yet are fetched
    already (by their loaders' fetchers, each fetcher's pages together), for their loads
    to take; what no load took is dropped when the block ends."""
    groups: dict[int, tuple[PageFetcher, list[PageLoader]]] = {}
    for page in pages:
        fetcher = getattr(page.loader, "fetcher", None)
        if fetcher is not None and not page.loaded:
            groups.setdefault(id(fetcher), (fetcher, []))[1].append(page.loader)
    done = [(fetcher, fetcher.prefetch_pages(loaders)) for fetcher, loaders in groups.values()]
    try:
        yield
    finally:
        for fetcher, loaders in done:
            if loaders:
                fetcher.forget_pages(loaders)


def _try_load(page: LazyPage) -> None:
    with contextlib.suppress(Exception):  # raised again where the page is read
        page.get()


def usable_cores() -> int:
    """How many cores this process may use (its CPU affinity where the OS has one)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1
