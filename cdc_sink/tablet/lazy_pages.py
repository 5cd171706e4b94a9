"""Pages read on first access: what a base loaded from a snapshot holds.

A page that is stored somewhere (``storage/`` writes pages to snapshot files) is a
:class:`LazyPage`: its row count, a :class:`PageLoader` that reads it (an opaque
callable: where the page lives on disk is storage's business, never the tablet's), and
the array once read. A base loaded from a snapshot holds its pages as a :class:`PageList`
of lazy pages not read yet: a page is read (memory-mapped, checked against its CRC,
decoded) on first access only, so opening a table touches no value page, and a read of
some columns never touches the pages of the others. A page's row count is known without
loading it.

A loader may also name a :class:`PageFetcher` (its ``fetcher`` attribute): something
that fetches the stored bytes of many pages together ahead of their loads (one request
for near pages of a file on an object store), which a scan asks for the pages it is
about to read (:func:`cdc_sink.tablet.page_loads.prefetched`).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator, Sequence
from typing import Protocol, TypeAlias, overload

import pyarrow as pa

__all__ = ["LazyPage", "PageEntry", "PageFetcher", "PageList", "PageLoader", "page_of"]


class PageLoader(Protocol):
    """Reads one stored page: reads, verifies and decodes it, raising if it is damaged.

    Storage implements it (and keeps there where the page lives); to the tablet it is
    opaque.
    """

    def __call__(self) -> pa.Array:
        """The page's array."""
        ...


class PageFetcher(Protocol):
    """Fetches the stored bytes of many pages together, before they are loaded (see the
    module docstring); storage implements it."""

    def prefetch_pages(self, loaders: Sequence[PageLoader]) -> Sequence[PageLoader]:
        """Fetches the pages of ``loaders`` (the ones it knows) for their next loads to
        take; returns the loaders it fetched for."""
        ...

    def forget_pages(self, loaders: Sequence[PageLoader]) -> None:
        """Drops what it fetched for ``loaders`` and no load took."""
        ...


class LazyPage:
    """A stored page, read on first access (see the module docstring).

    Args:
        rows: The page's row count (known without reading it).
        load: Reads the page. Called at most once successfully; a failure is raised
            again on the next access. Kept for the page's life (storage recognizes its
            own loaders, e.g. to reuse a page's location in an incremental snapshot).
        array: The page, when it is in memory already (a page just written).
    """

    __slots__ = ("_array", "_lock", "loader", "rows")

    def __init__(self, rows: int, load: PageLoader, array: pa.Array | None = None) -> None:
        self.rows = rows
        self.loader = load
        self._array: pa.Array | None = array
        # Its own lock: pages load in parallel (cdc_sink.tablet.page_loads), and two
        # readers of one page wait for one read and get the same object.
        self._lock = threading.Lock()

    @property
    def loaded(self) -> bool:
        """Whether the page was read."""
        return self._array is not None

    @property
    def array(self) -> pa.Array | None:
        """The page if it was read, else None (never reads it)."""
        return self._array

    def get(self) -> pa.Array:
        """The page, read (and verified) now if it was not yet."""
        arr = self._array
        if arr is None:
            with self._lock:
                arr = self._array
                if arr is None:
                    arr = self.loader()
                    self._array = arr
        return arr


PageEntry: TypeAlias = "pa.Array | LazyPage"


class PageList(Sequence[pa.Array]):
    """The pages of a base, some of which may be :class:`LazyPage` s; indexing or
    iterating reads them, :meth:`length` and :meth:`entry` do not."""

    __slots__ = ("_entries",)

    def __init__(self, entries: Iterable[PageEntry] = ()) -> None:
        self._entries: list[PageEntry] = list(entries)

    def __len__(self) -> int:
        return len(self._entries)

    @overload
    def __getitem__(self, p: int) -> pa.Array: ...

    @overload
    def __getitem__(self, p: slice) -> list[pa.Array]: ...

    def __getitem__(self, p: int | slice) -> pa.Array | list[pa.Array]:
        if isinstance(p, slice):
            return [page_of(e) for e in self._entries[p]]
        return page_of(self._entries[p])

    def __iter__(self) -> Iterator[pa.Array]:
        return (page_of(e) for e in self._entries)

    def entry(self, p: int) -> PageEntry:
        """Page ``p`` as held: an array or a :class:`LazyPage` (not read)."""
        return self._entries[p]

    def length(self, p: int) -> int:
        """Rows of page ``p`` (without reading it)."""
        e = self._entries[p]
        return e.rows if isinstance(e, LazyPage) else len(e)

    def loaded(self, p: int) -> bool:
        """Whether page ``p`` is in memory (read, or never lazy)."""
        e = self._entries[p]
        return bool(e.loaded) if isinstance(e, LazyPage) else True

    def set_loader(self, p: int, loader: PageLoader) -> None:
        """Page ``p`` (in memory) is stored now, where ``loader`` reads it: its entry
        becomes a :class:`LazyPage` holding the same array (readers see the same data)."""
        arr = page_of(self._entries[p])
        self._entries[p] = LazyPage(len(arr), loader, arr)


def page_of(e: PageEntry, keep: bool = True) -> pa.Array:
    """The page of ``e`` (an array, or a lazy page read now); a stored page read now
    stays in memory only when ``keep``."""
    if not isinstance(e, LazyPage):
        return e
    return e.get() if keep or e.loaded else e.loader()
