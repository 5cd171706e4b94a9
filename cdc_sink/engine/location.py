"""Where a table lives: its root and store from a path or URL (what
:func:`cdc_sink.create_table` and :func:`cdc_sink.open_table` do first; whether a table
is there, the open's :class:`~cdc_sink.engine.core.TableCore` finds out from the files it
reads anyway)."""

from __future__ import annotations

import os
from collections.abc import Mapping

from cdc_sink.engine.options import TableOptions
from cdc_sink.storage.layout import kind_of
from cdc_sink.storage.objectstore import ObjectStore, store_for
from cdc_sink.storage.objectstore.urls import parse_store_url

__all__ = ["immutable", "open_location"]


def immutable(key: str) -> bool:
    """Whether ``key`` names an object never rewritten under its name (an attempt's)."""
    return kind_of(key) in ("segment", "snapshot", "pages", "rejects", "images")


def open_location(
    url: str | os.PathLike[str],
    storage_options: Mapping[str, str] | None,
    options: TableOptions | None,
    *,
    probe: bool,
) -> tuple[str, ObjectStore]:
    """The root of the table at ``url`` (a local table's path as given, else its URL)
    and its store (:func:`~cdc_sink.storage.objectstore.store_for`; a local one creates
    files with ``options.file_mode``). Without ``probe`` an object store's conditional
    writes are proved only before this process's first write
    (:meth:`TableCore._writer_repair <cdc_sink.engine.core.TableCore._writer_repair>`)."""
    where = parse_store_url(os.fspath(url))
    root = os.fspath(url) if where.kind == "local" else where.url
    mode = (options or TableOptions()).file_mode
    url = os.fspath(url)
    return root, store_for(url, storage_options, check_conditional_writes=probe, file_mode=mode)
