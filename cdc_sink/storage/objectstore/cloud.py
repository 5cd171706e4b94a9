"""The object-store interface over ``obstore`` (Rust's ``object_store``, as delta-rs uses):
Amazon S3 and any S3-compatible endpoint, Google Cloud Storage, Azure Blob Storage.

Needs the ``s3`` extra (``pip install 'cdc_sink[s3]'``). Each call is one request
(``list`` and ``delete_many`` one per 1,000 keys), made by obstore's client, which
retries server errors and dropped connections itself::

    get            GET                         get_range     GET with Range
    put            PUT (multipart when large)  put_if_absent PUT with If-None-Match: *
    list           LIST by prefix              delete(_many) DELETE (bulk: 1,000 a request)
    head           HEAD

Options come from ``storage_options`` (obstore's configuration keys: ``endpoint``,
``region``, ``access_key_id``, ``secret_access_key``, ``session_token``,
``google_service_account``, ``account_name``, ...; its client keys: ``allow_http``,
``timeout``, ``connect_timeout``, ...; and ``max_retries``, ``retry_timeout`` in
seconds), and for what they leave unset from the usual environment variables
(``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_ENDPOINT_URL``, ``AWS_REGION``,
``GOOGLE_SERVICE_ACCOUNT``, ``AZURE_STORAGE_ACCOUNT_NAME``, ...). An ``http://``
endpoint implies ``allow_http``. Keys are case-insensitive, and delta-rs's spellings of
the client keys (``AWS_ALLOW_HTTP``, ``AZURE_ALLOW_INVALID_CERTIFICATES``,
``GOOGLE_TIMEOUT``...: a service prefix before a client key) are the client keys. A
boolean client key takes ``true``/``false`` (``1``/``0``, ``yes``/``no``, ``on``/``off``)
and nothing else.

No error message holds an option's value (:mod:`cdc_sink.utils.redact`): obstore's messages,
which echo values (``failed to parse "<value>" as boolean``), are scrubbed of every
option value but the endpoint's and the region's, and of every quoted value; one that
had to be scrubbed is not chained either. An endpoint with user info
(``http://user:pw@host``) is refused: give credentials as their own options. A panic of
obstore's Rust code (``pyo3_runtime.PanicException``, which is no ``Exception``) is
turned into :class:`StoreConfigError` when the store is opened and into
:class:`StoreIOError` on a call, so ``except Exception`` sees it.

Opening a store that will be written checks once that the endpoint honours conditional
creates (:meth:`ObstoreStore.check_conditional_writes`): a probe object is created
twice with ``put_if_absent``, and unless the second is refused the store is not used.
An endpoint that silently ignored ``If-None-Match`` would let two writers both commit
one version; no commit is safer than that.
"""

from __future__ import annotations

import contextlib
import math
import re
import secrets
from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import Any, TypeVar

import obstore
from obstore.exceptions import (
    AlreadyExistsError,
    NotSupportedError,
    PermissionDeniedError,
    PreconditionError,
    UnauthenticatedError,
    UnknownConfigurationKeyError,
)
from obstore.store import from_url

from cdc_sink.storage.objectstore import (
    BucketNotFound,
    ConditionalWritesUnsupported,
    ObjectExists,
    ObjectInfo,
    ObjectNotFound,
    ObjectStore,
    ObjectStoreError,
    StoreAccessDenied,
    StoreConfigError,
    StoreIOError,
)
from cdc_sink.storage.objectstore.urls import parse_store_url
from cdc_sink.utils.cpu_gate import blocking
from cdc_sink.utils.redact import has_userinfo, scrub

__all__ = ["CLIENT_OPTIONS", "PROBE_PREFIX", "ObstoreStore"]

_T = TypeVar("_T")

CLIENT_OPTIONS: frozenset[str] = frozenset(
    {
        "allow_http",
        "allow_invalid_certificates",
        "connect_timeout",
        "default_content_type",
        "http1_only",
        "http2_keep_alive_interval",
        "http2_keep_alive_timeout",
        "http2_keep_alive_while_idle",
        "http2_only",
        "pool_idle_timeout",
        "pool_max_idle_per_host",
        "proxy_url",
        "proxy_ca_certificate",
        "proxy_excludes",
        "randomize_addresses",
        "read_timeout",
        "timeout",
        "user_agent",
    }
)
"""The ``storage_options`` keys that configure obstore's HTTP client, not the store."""

_BOOL_CLIENT_OPTIONS = frozenset(
    {
        "allow_http",
        "allow_invalid_certificates",
        "http1_only",
        "http2_only",
        "http2_keep_alive_while_idle",
        "randomize_addresses",
    }
)

PROBE_PREFIX = "_cdc_sink_probe"
"""Where under the store's root the conditional-create probe writes (and removes) one
object."""

_PAGE = 1000  # keys per LIST or bulk DELETE request (S3's, GCS's and Azure's maximum)


_SERVICE_PREFIXES = ("aws_", "google_", "azure_storage_", "azure_")
"""delta-rs's spellings of the client keys put one of these before them (``AWS_ALLOW_HTTP``)."""

_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")

# options whose value an error may show (where the store is): every other value is scrubbed
_SHOWN_OPTION = re.compile(r"^((aws|google|azure)_)?(endpoint(_url)?|region|default_region)$")
_QUOTED = re.compile(r'"[^"]*"')


def _first_line(exc: BaseException, hidden: tuple[str, ...] = ()) -> str:
    """obstore's message without its debug dump, and without the ``hidden`` values or any
    URL's user info (:func:`cdc_sink.utils.redact.scrub`)."""
    text = str(exc).strip()
    return scrub(text.splitlines()[0], hidden) if text else type(exc).__name__


def _is_panic(exc: BaseException) -> bool:
    """Whether ``exc`` is a panic of Rust code under pyo3 (a ``BaseException`` only)."""
    kind = type(exc)
    return kind.__name__ == "PanicException" and kind.__module__ == "pyo3_runtime"


def _client_key(low: str) -> str:
    """The client key a lower-cased option name spells, else the name itself."""
    for prefix in _SERVICE_PREFIXES:
        if low.startswith(prefix) and low[len(prefix) :] in CLIENT_OPTIONS:
            return low[len(prefix) :]
    return low


def _hidden_values(options: Mapping[str, str]) -> tuple[str, ...]:
    """The option values no message may show: all but the endpoint's and the region's."""
    return tuple(
        v
        for k, v in options.items()
        if isinstance(v, str) and not _SHOWN_OPTION.match(str(k).lower())
    )


def _split_options(
    options: Mapping[str, str], url: str
) -> tuple[dict[str, str], dict[str, Any], dict[str, Any]]:
    """``storage_options`` as obstore's store config, client options and retry config."""
    config: dict[str, str] = {}
    client: dict[str, Any] = {}
    retry: dict[str, Any] = {}
    for key, value in options.items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise StoreConfigError(
                f"storage_options for {url} must map str to str; key {key!r} does not"
            )
        low = _client_key(key.lower())
        if low in _BOOL_CLIENT_OPTIONS:
            client[low] = _boolean(value, key, url)
        elif low in CLIENT_OPTIONS:
            client[low] = value
        elif low == "max_retries":
            retry["max_retries"] = _number(value, key, url, int)
        elif low == "retry_timeout":
            retry["retry_timeout"] = timedelta(seconds=_number(value, key, url, float))
        else:
            config[low] = value
    endpoints = [v for k, v in config.items() if "endpoint" in k]
    if any(has_userinfo(v) for v in endpoints):
        raise StoreConfigError(
            f"storage_options for {url}: an endpoint takes no user info (user:password@): "
            "give the credentials as their own options (access_key_id, secret_access_key...)"
        )
    if any(v.strip().lower().startswith("http://") for v in endpoints):
        client.setdefault("allow_http", True)
    return config, client, retry


def _boolean(value: str, key: str, url: str) -> bool:
    """A boolean client option.

    Raises:
        StoreConfigError: ``value`` is not one (the error does not show it).
    """
    low = value.strip().lower()
    if low in _TRUE or low in _FALSE:
        return low in _TRUE
    raise StoreConfigError(
        f"storage option {key!r} for {url} must be true or false "
        f"({', '.join(_TRUE)} or {', '.join(_FALSE)})"
    )


def _number(value: str, key: str, url: str, kind: Callable[[str], _T]) -> _T:
    try:
        return kind(value)
    except ValueError:
        raise StoreConfigError(f"storage option {key!r} for {url} must be a number") from None


class ObstoreStore(ObjectStore):
    """The objects under one URL of an object store (see the module docstring)."""

    def __init__(
        self,
        url: str,
        storage_options: Mapping[str, str] | None = None,
        *,
        check_conditional_writes: bool = True,
    ) -> None:
        """Open ``url`` (``s3://bucket/prefix``, ``gs://...``, ``az://...``).

        Args:
            url: The store's root.
            storage_options: See the module docstring.
            check_conditional_writes: Run :meth:`check_conditional_writes` now (pass
                ``False`` only for a store that will not be written, or whose endpoint
                an earlier open in this deployment checked).

        Raises:
            StoreConfigError: A malformed URL or an unknown option.
            BucketNotFound, StoreAccessDenied, ConditionalWritesUnsupported: The probe
                found so.
        """
        parse_store_url(url)  # no user info, query or fragment: the URL is in every message
        super().__init__(url)
        options = storage_options or {}
        config, client, retry = _split_options(options, url)
        self._hidden = _hidden_values(options)
        try:
            self._store = from_url(
                url,
                config=config or None,  # type: ignore[arg-type]
                client_options=client or None,  # type: ignore[arg-type]
                retry_config=retry or None,  # type: ignore[arg-type]
            )
        except UnknownConfigurationKeyError as exc:
            raise StoreConfigError(f"{url}: {self._shown(exc)}") from None
        except Exception as exc:
            raise StoreConfigError(f"cannot open {url}: {self._shown(exc)}") from None
        except BaseException as exc:
            if not _is_panic(exc):
                raise
            raise StoreConfigError(
                f"cannot open {url}: obstore failed on storage_options "
                f"({', '.join(sorted(options))}): {self._shown(exc)}"
            ) from None
        if check_conditional_writes:
            self.ensure_conditional_writes()

    def check_conditional_writes(self) -> None:
        """Proves that the endpoint refuses a second create of one key.

        Creates ``_cdc_sink_probe/<random>`` with :meth:`put_if_absent`, creates it again
        (which must raise :class:`ObjectExists`), then deletes it. Three or four requests;
        they also prove the bucket exists and the credentials may write.

        Raises:
            ConditionalWritesUnsupported: The second create succeeded, or the endpoint
                does not implement conditional creates.
            BucketNotFound, StoreAccessDenied, StoreConfigError: The first create
                failed so.
        """
        key = f"{PROBE_PREFIX}/{secrets.token_hex(8)}"
        try:
            self.put_if_absent(key, b"first")
            try:
                self.put_if_absent(key, b"second")
            except ObjectExists:
                return
            raise ConditionalWritesUnsupported(
                f"{self.url}: the endpoint accepted a second conditional create "
                "(If-None-Match: *) of one object, so two writers could both commit one "
                "version; refusing to write to it"
            )
        finally:
            # (fails when the probe failed before creating anything, or the store is down)
            with contextlib.suppress(ObjectStoreError):
                self.delete(key)

    # ------------------------------------------------------------ errors

    def _shown(self, exc: BaseException) -> str:
        """obstore's message of ``exc`` as an error may show it: without any option value
        (but the endpoint's and region's), quoted value or URL user info."""
        return _QUOTED.sub('"***"', _first_line(exc, self._hidden))

    def _cause(self, exc: BaseException) -> BaseException | None:
        """``exc`` to chain to an error, or ``None`` when its text holds a hidden value."""
        text = str(exc)
        return None if scrub(text, self._hidden) != text else exc

    def _call(self, key: str, fn: Callable[[], _T], *, create: bool = False) -> _T:
        """``fn()``, obstore's errors turned into this interface's (their text scrubbed of
        the option values, and chained only when it held none). A storage wait: the
        thread's CPU gate slot is free meanwhile (:func:`~cdc_sink.utils.cpu_gate.blocking`)."""
        try:
            with blocking():
                return fn()
        except (AlreadyExistsError, PreconditionError) as exc:
            raise ObjectExists(f"{key} exists in {self.url}") from self._cause(exc)
        except FileNotFoundError as exc:
            msg = _first_line(exc, self._hidden)
            if "NoSuchBucket" in str(exc) or "ContainerNotFound" in str(exc):
                raise BucketNotFound(f"{self.url}: the bucket does not exist ({msg})") from None
            raise ObjectNotFound(f"no object {key} in {self.url}") from self._cause(exc)
        except (PermissionDeniedError, UnauthenticatedError) as exc:
            raise StoreAccessDenied(
                f"{self.url}: the store refused the credentials: {_first_line(exc, self._hidden)}"
            ) from None
        except (NotSupportedError, NotImplementedError) as exc:
            msg = _first_line(exc, self._hidden)
            if create:
                raise ConditionalWritesUnsupported(
                    f"{self.url}: the store does not support conditional creates "
                    f"({msg}); refusing to write to it"
                ) from None
            raise StoreIOError(f"{self.url}: {msg}") from self._cause(exc)
        except UnknownConfigurationKeyError as exc:
            raise StoreConfigError(f"{self.url}: {_first_line(exc, self._hidden)}") from None
        except Exception as exc:  # obstore's GenericError and its other BaseErrors
            raise _classify(self.url, exc, self._hidden) from self._cause(exc)
        except BaseException as exc:
            if not _is_panic(exc):
                raise
            raise StoreIOError(
                f"{self.url}: obstore failed ({_first_line(exc, self._hidden)}); the "
                "outcome of a write is unknown"
            ) from None

    # ------------------------------------------------------------ the interface

    def _get(self, key: str) -> bytes:
        return self._call(key, lambda: bytes(obstore.get(self._store, key).bytes()))

    def _get_range(self, key: str, start: int, length: int) -> bytes:
        def read() -> bytes:
            try:
                return bytes(obstore.get_range(self._store, key, start=start, length=length))
            except FileNotFoundError:
                raise  # a missing object (its message may hold "416" in an id or a time)
            except Exception as exc:
                text = str(exc)
                if "Range Not Satisfiable" in text or "status: 416," in text:
                    return b""  # starts at or past the end: ObjectStore raises ShortRead
                raise

        return self._call(key, read)

    def _put(self, key: str, data: bytes | bytearray | memoryview) -> None:
        body = _bytes_like(data)
        self._call(key, lambda: obstore.put(self._store, key, body, mode="overwrite"))

    def _put_if_absent(self, key: str, data: bytes | bytearray | memoryview) -> None:
        self._call(
            key,
            lambda: obstore.put(
                self._store, key, _bytes_like(data), mode="create", use_multipart=False
            ),
            create=True,
        )

    def _list(self, prefix: str) -> tuple[list[ObjectInfo], int]:
        def collect() -> list[ObjectInfo]:
            stream = obstore.list(self._store, prefix=prefix or None, chunk_size=_PAGE)
            return [
                ObjectInfo(m["path"], m["size"], m["last_modified"].timestamp())
                for chunk in stream
                for m in chunk
            ]

        infos = self._call(prefix or "/", collect)
        return infos, max(1, math.ceil(len(infos) / _PAGE))

    def _list_keys_after(self, prefix: str, start_after: str) -> tuple[list[str], int]:
        def collect() -> list[str]:
            stream = obstore.list(
                self._store, prefix=prefix or None, offset=start_after, chunk_size=_PAGE
            )
            return [m["path"] for chunk in stream for m in chunk]

        keys = self._call(prefix or "/", collect)
        return keys, max(1, math.ceil(len(keys) / _PAGE))

    def _delete(self, key: str) -> None:
        self._call(key, lambda: obstore.delete(self._store, key))

    def _delete_many(self, keys: list[str]) -> int:
        self._call(keys[0], lambda: obstore.delete(self._store, keys))
        return math.ceil(len(keys) / _PAGE)

    def _head(self, key: str) -> ObjectInfo:
        meta = self._call(key, lambda: obstore.head(self._store, key))
        return ObjectInfo(key, meta["size"], meta["last_modified"].timestamp())


_CREDENTIAL_HINTS = ("169.254.169.254", "credential", "InvalidAccessKeyId", "SignatureDoesNotMatch")


def _bytes_like(data: bytes | bytearray | memoryview) -> bytes | bytearray | memoryview:
    """``data`` in a form obstore takes as one buffer: a memoryview of unsigned bytes (a
    view of another format, e.g. of an Arrow buffer, would be read as an iterable)."""
    if isinstance(data, memoryview) and data.format != "B":
        return data.cast("B")
    return data


def _classify(url: str, exc: Exception, hidden: tuple[str, ...] = ()) -> ObjectStoreError:
    """An error obstore did not type: credentials, configuration, or I/O (its message
    without the ``hidden`` values)."""
    text = str(exc)
    msg = _first_line(exc, hidden)
    if any(h in text for h in _CREDENTIAL_HINTS):
        return StoreAccessDenied(f"{url}: no usable credentials: {msg}")
    if "NoSuchBucket" in text:
        return BucketNotFound(f"{url}: the bucket does not exist ({msg})")
    if "Config error" in text:
        return StoreConfigError(f"{url}: {msg}")
    return StoreIOError(f"{url}: {msg}")
