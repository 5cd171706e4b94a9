"""Table URLs: which store a URL names, and opening it.

==========================================  =========================================
URL                                         store
==========================================  =========================================
``s3://bucket/prefix``, ``s3a://...``       :class:`ObstoreStore` (Amazon S3 or any
                                            S3-compatible endpoint: ``endpoint``)
``gs://bucket/prefix``                      :class:`ObstoreStore` (Google Cloud Storage)
``az://container/prefix``, ``azure://``,    :class:`ObstoreStore` (Azure Blob Storage)
``abfs://container@account.../prefix``,
``abfss://...``
``file:///absolute/path``                   :class:`LocalStore`
a plain path (``/data/t``, ``t``)           :class:`LocalStore` (made absolute)
==========================================  =========================================

Anything else with a ``scheme://`` is refused with :class:`StoreConfigError`, as is an
object-store URL without a bucket, a ``file://`` URL naming another host, or
``storage_options`` for a local path (they would be ignored, silently).

A URL with user info (``s3://KEY:SECRET@bucket/t``) or with a query or fragment (where a
SAS token or a signature would go) is refused too, by an error that does not show that
part: the URL is the table's name in every message, repr, log line and writer id, so a
credential in it would be written everywhere. Credentials go in ``storage_options`` or
in the environment.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal
from urllib.parse import unquote, urlsplit

from cdc_sink.storage.objectstore import ObjectStore, StoreConfigError
from cdc_sink.storage.objectstore.local import LocalStore
from cdc_sink.utils.extras import MissingExtra
from cdc_sink.utils.redact import has_userinfo, mask_url

__all__ = ["OBJECT_STORE_SCHEMES", "StoreUrl", "open_store", "parse_store_url"]

OBJECT_STORE_SCHEMES: dict[str, Literal["s3", "gcs", "azure"]] = {
    "s3": "s3",
    "s3a": "s3",
    "gs": "gcs",
    "az": "azure",
    "azure": "azure",
    "abfs": "azure",
    "abfss": "azure",
}
"""URL schemes of object stores, and the service each names."""

_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")


@dataclass(frozen=True)
class StoreUrl:
    """A parsed table URL."""

    kind: Literal["local", "s3", "gcs", "azure"]
    """The service."""
    url: str
    """The URL to open: for a local store ``file://`` + the absolute path."""
    bucket: str | None
    """The bucket or container (None for a local store)."""
    prefix: str
    """The path inside the bucket (``""`` for its root), or the local directory."""


def _shown(url: str) -> str:
    """``url`` for a message: without user info, query or fragment."""
    return mask_url(re.split(r"[?#]", url, maxsplit=1)[0])


def _refuse_credentials(url: str, scheme: str) -> None:
    """Refuses a URL that carries user info, a query or a fragment (without showing them).

    Raises:
        StoreConfigError: It does.
    """
    head = url[len(scheme) + 3 :]
    netloc = re.split(r"[/?#]", head, maxsplit=1)[0]
    if ":" in netloc and OBJECT_STORE_SCHEMES.get(scheme.lower()) in ("s3", "gcs"):
        # no bucket name holds a ':': user info whose password holds a '/' (not shown,
        # since the URL cannot be told apart from its credential)
        raise StoreConfigError(
            f"{scheme}://<not shown>: a bucket name has no ':'; a table URL takes no user "
            "info (user:password@): give credentials as storage_options or in the "
            "environment"
        )
    if has_userinfo(url):  # (abfs's container@account is none)
        raise StoreConfigError(
            f"{_shown(url)}: a table URL takes no user info (user:password@): give "
            "credentials as storage_options or in the environment, never in the URL, which "
            "names the table in every message and log line"
        )
    if re.search(r"[?#]", head):
        raise StoreConfigError(
            f"{_shown(url)}: a table URL takes no query (?...) or fragment (#...): give "
            "options (a SAS token, a signature) as storage_options"
        )


def parse_store_url(url: str) -> StoreUrl:
    """What ``url`` names (see the module docstring).

    Raises:
        TypeError: ``url`` is not a str.
        StoreConfigError: An unknown scheme, no bucket, a ``file://`` URL of another
            host, an empty URL, user info, a query or a fragment (the error shows none
            of them).
    """
    if not isinstance(url, (str, os.PathLike)):
        raise TypeError(f"a table URL must be a str or a path, not {type(url).__name__}")
    url = os.fspath(url)
    if not url.strip():
        raise StoreConfigError("an empty table URL")
    m = _SCHEME.match(url)
    if m is None:
        path = os.path.abspath(url)
        return StoreUrl("local", f"file://{path}", None, path)
    scheme = m.group(1).lower()
    _refuse_credentials(url, m.group(1))
    parts = urlsplit(url)
    if scheme == "file":
        if parts.netloc not in ("", "localhost"):
            raise StoreConfigError(
                f"{_shown(url)}: a file:// URL names a path on this machine "
                f"(file:///path), not on host {parts.netloc!r}"
            )
        path = os.path.abspath(unquote(parts.path) or "/")
        return StoreUrl("local", f"file://{path}", None, path)
    kind = OBJECT_STORE_SCHEMES.get(scheme)
    if kind is None:
        known = ", ".join(f"{s}://" for s in [*OBJECT_STORE_SCHEMES, "file"])
        raise StoreConfigError(
            f"{_shown(url)}: unknown URL scheme {scheme!r}; a table URL is one of {known} "
            "or a plain path"
        )
    bucket = parts.netloc.split("@", 1)[0] if kind == "azure" else parts.netloc
    if not bucket:
        raise StoreConfigError(f"{_shown(url)}: no bucket; expected {scheme}://<bucket>/<prefix>")
    return StoreUrl(kind, url.rstrip("/"), bucket, parts.path.strip("/"))


def open_store(
    url: str,
    storage_options: Mapping[str, str] | None = None,
    *,
    check_conditional_writes: bool = True,
    file_mode: int | None = None,
) -> ObjectStore:
    """The store ``url`` names, opened (see
    :func:`cdc_sink.storage.objectstore.store_for`, which calls this)."""
    where = parse_store_url(url)
    if where.kind == "local":
        if storage_options:
            raise StoreConfigError(
                f"{where.prefix} is a local path: storage_options "
                f"({', '.join(sorted(storage_options))}) apply to object stores only"
            )
        if file_mode is None:
            return LocalStore(where.prefix)
        return LocalStore(where.prefix, file_mode=file_mode)
    try:
        from cdc_sink.storage.objectstore.cloud import ObstoreStore
    except ModuleNotFoundError as exc:
        if (exc.name or "").partition(".")[0] != "obstore":
            raise
        raise MissingExtra(
            f"a table on {where.kind} ({_shown(url)}) needs 'obstore', which is not "
            "installed: install the 's3' extra, e.g. pip install 'cdc_sink[s3]'",
            extra="s3",
            module="obstore",
        ) from exc
    return ObstoreStore(
        where.url, storage_options, check_conditional_writes=check_conditional_writes
    )
