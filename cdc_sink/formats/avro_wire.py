"""Confluent's wire format and the schema registry it names (for the Avro formats).

A message in Confluent's wire format is one magic byte ``0``, a 4-byte big-endian schema
id, then the Avro binary encoding of one datum written with that schema. The schema is
fetched from a schema registry (Confluent's REST API: ``GET /schemas/ids/<id>``; Apicurio
serves it too, under ``/apis/ccompat/v7``).

- :func:`wire_headers` reads every message's header at once (vectorized) and gives a
  reason to the messages that are not in the format;
- :class:`RegistrySettings` says where the registry is and how to reach it (timeout on
  every call, basic auth, TLS), picklable so decoders ship it to Spark executors;
- :func:`fetch_schemas` returns the parsed schemas of a set of ids through a cache of
  this process: one fetch per id per process, whichever decoder, batch or thread asks.

What one batch may cost the registry is bounded, whatever the messages name (a writer
to the topic chooses the ids): the ids a batch names that this process has not looked
up yet are fetched together (:data:`FETCH_THREADS` at once, over keep-alive connections
kept per registry), and a batch naming more than :data:`MAX_NEW_IDS` of them fails with
:class:`TooManySchemaIds` before any is fetched. The schemas are kept apart from the ids
the registry did not know (:data:`CACHE_SIZE` least recently used schemas; the unknown
ids in their own bounded list, for :data:`UNKNOWN_TTL_S`), so no number of unknown ids
pushes a schema in use out of the cache.

A registry that cannot be reached (refused, timed out, a 5xx or an authentication error)
or answers what is not JSON raises :class:`SchemaRegistryUnavailable`: the caller's
micro-batch fails and is retried; no event is refused because the registry was down. An
id the registry does not know (404), or a schema that is not Avro, is a fact about the
message: the events that name it are refused with the reason (:class:`SchemaLookup`).
Unless the registry knows none of a batch's ids and looks like the wrong one: this
process has had no schema from it yet, or it holds no subject (a wrong URL, or a
registry that lost its storage). Then the batch fails with
:class:`SchemaRegistryMismatch` rather than dead-letter every message. (The one case it
cannot tell apart: a process's very first batch holding nothing but ids the registry
never gave; that batch fails until the registry is checked.)

The client is a small one on ``http.client`` (the formats never import a Kafka client);
it honours the ``http_proxy``/``https_proxy``/``no_proxy`` environment as ``urllib``
does, and follows no redirect.
"""

from __future__ import annotations

import base64
import http.client
import json
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields

import numpy as np

from cdc_sink.errors import (
    InvalidOption,
    SchemaRegistryMismatch,
    SchemaRegistryUnavailable,
    TooManySchemaIds,
)
from cdc_sink.formats import _registry_http
from cdc_sink.formats._arrays import Parts, refuse
from cdc_sink.formats._avro_schema import BadAvroSchema, Node, parse_schema
from cdc_sink.formats._registry_http import FETCH_THREADS
from cdc_sink.utils.redact import mask_url, masked

__all__ = [
    "CACHE_SIZE",
    "FETCH_THREADS",
    "HEADER_BYTES",
    "MAX_NEW_IDS",
    "UNKNOWN_SIZE",
    "UNKNOWN_TTL_S",
    "RegistrySettings",
    "SchemaLookup",
    "SchemaRegistryMismatch",
    "SchemaRegistryUnavailable",
    "TooManySchemaIds",
    "cache_clear",
    "fetch_schemas",
    "wire_headers",
]

HEADER_BYTES = 5
"""The magic byte and the 4-byte schema id."""
CACHE_SIZE = 4096
"""Schemas the process keeps at most (least recently used first out)."""
UNKNOWN_SIZE = 4096
"""Ids the registry did not know that the process remembers at most (apart from the
schemas: an unknown id never pushes a schema out)."""
UNKNOWN_TTL_S = 60.0
"""How long an id the registry did not know is remembered as unknown."""
MAX_NEW_IDS = 256
"""Schema ids one batch may name that this process has not looked up yet (more: the
batch fails with :class:`TooManySchemaIds`, nothing fetched)."""
_MAX_SCHEMA_BYTES = _registry_http.MAX_BODY_BYTES


@dataclass(frozen=True)
class RegistrySettings:
    """Where the schema registry is and how to reach it.

    Attributes:
        url: Base URL of Confluent's API (Apicurio: ``http://host:port/apis/ccompat/v7``).
        timeout: Seconds each call may take (connect and read).
        auth: ``"user:password"`` for HTTP basic auth (``basic.auth.user.info``).
        ca_location: CA bundle for ``https`` (``ssl.ca.location``).
        certificate_location: Client certificate (``ssl.certificate.location``).
        key_location: Client key (``ssl.key.location``).
    """

    url: str
    timeout: float = 10.0
    auth: str | None = None
    ca_location: str | None = None
    certificate_location: str | None = None
    key_location: str | None = None

    def __repr__(self) -> str:
        """The settings with ``auth`` masked, and the URL without user info
        (:mod:`cdc_sink.utils.redact`): reprs end up in logs and in Spark's task errors."""
        shown = (
            f"{f.name}={(masked(f.name, v) if isinstance(v, str) else v)!r}"
            for f in fields(self)
            if f.repr
            for v in (getattr(self, f.name),)
        )
        return f"RegistrySettings({', '.join(shown)})"

    @classmethod
    def from_options(
        cls, url: object, timeout: object, auth: object, ssl_options: Mapping[str, str] | None
    ) -> RegistrySettings:
        """Checked settings from decoder options.

        Raises:
            InvalidOption: An option's value is invalid (the error names it).
        """
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise InvalidOption(
                "decoder option 'registry_url' must be an http(s) URL, got "
                f"{(mask_url(url) if isinstance(url, str) else url)!r}",
                option="registry_url",
            )
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0:
            raise InvalidOption(
                f"decoder option 'registry_timeout' must be > 0 seconds, got {timeout!r}",
                option="registry_timeout",
            )
        if auth is not None and (not isinstance(auth, str) or ":" not in auth):
            raise InvalidOption(
                "decoder option 'registry_auth' must be 'user:password'", option="registry_auth"
            )
        known = {"ca_location", "certificate_location", "key_location"}
        opts = dict(ssl_options or {})
        for k in opts:
            if k not in known:
                raise InvalidOption(
                    f"decoder option 'registry_ssl': unknown key {k!r} (keys: {sorted(known)})",
                    option="registry_ssl",
                )
        return cls(url=url.rstrip("/"), timeout=float(timeout), auth=auth, **opts)

    def get(self, path: str) -> object:
        """``GET`` one resource of the API (its JSON); ``None`` when the registry says 404.

        Raises:
            SchemaRegistryUnavailable: Not reachable, timed out, or any other error.
            InvalidOption: A TLS file of ``registry_ssl`` cannot be read.
        """
        return self._call("GET", path, None)

    def post(self, path: str, body: object) -> object:
        """``POST`` the JSON ``body`` to the API (e.g. register a schema); its answer.

        Raises:
            SchemaRegistryUnavailable: Not reachable, timed out, refused (any error
                status, 404 included), or not JSON.
            InvalidOption: A TLS file of ``registry_ssl`` cannot be read.
        """
        got = self._call("POST", path, json.dumps(body).encode())
        if got is None:
            raise SchemaRegistryUnavailable(
                f"schema registry {mask_url(self.url)} answered 404 to POST {path}"
            )
        return got

    def _call(self, method: str, path: str, data: bytes | None) -> object:
        """One request with the settings' auth and TLS on a kept-alive connection; its
        JSON, ``None`` for a 404."""
        headers = {
            "Accept": "application/json",
            "Content-Type": "application/vnd.schemaregistry.v1+json",
        }
        if self.auth:
            token = base64.b64encode(self.auth.encode()).decode("ascii")
            headers["Authorization"] = f"Basic {token}"
        try:
            status, body = _registry_http.request(self, method, path, data, headers)
        except InvalidOption:
            raise
        except (OSError, http.client.HTTPException, ValueError) as exc:
            raise SchemaRegistryUnavailable(
                f"schema registry {mask_url(self.url)} unreachable ({method} {path}): {exc}"
            ) from exc
        if status == 404:
            return None
        if not 200 <= status < 300:
            raise SchemaRegistryUnavailable(
                f"schema registry {mask_url(self.url)} answered {status} to {method} {path}"
            )
        if len(body) > _MAX_SCHEMA_BYTES:
            raise SchemaRegistryUnavailable(
                f"schema registry {mask_url(self.url)}: {method} {path} answered more than "
                f"{_MAX_SCHEMA_BYTES >> 20} MiB"
            )
        try:
            return json.loads(body)
        except (ValueError, RecursionError) as exc:  # RecursionError: nested too deeply
            raise SchemaRegistryUnavailable(
                f"schema registry {mask_url(self.url)}: {method} {path} did not answer "
                f"readable JSON ({type(exc).__name__})"
            ) from exc


@dataclass(frozen=True)
class SchemaLookup:
    """What the registry says of one schema id: its parsed schema, or why events that
    name it are refused."""

    node: Node | None
    error: str | None = None
    at: float = 0.0
    missing: bool = False
    """The registry answered 404: it does not know the id."""


def wire_headers(parts: Parts, live: np.ndarray, reasons: np.ndarray, what: str = "") -> np.ndarray:
    """The schema id of each message (-1: none), refusing the ``live`` messages that are
    not in Confluent's wire format (too short, or a magic byte other than 0).

    Args:
        parts: The messages.
        live: The messages to read (others get -1 and no reason).
        reasons: Reject reasons (updated).
        what: A prefix for the reasons (``"message key: "``).
    """
    n = parts.n
    ids = np.full(n, -1, dtype=np.int64)
    short = live & (parts.lengths < HEADER_BYTES)
    refuse(
        reasons,
        short,
        f"malformed event: {what}shorter than the 5-byte header of Confluent's wire format",
    )
    ok = np.flatnonzero(live & ~short)
    if not len(ok):
        return ids
    s = parts.starts[ok]
    d = parts.data
    magic = d[s]
    bad = magic != 0
    for m in np.unique(magic[bad]).tolist():
        refuse(
            reasons,
            _at(n, ok[bad & (magic == m)]),
            f"malformed event: {what}magic byte 0x{m:02x}, not 0 (not Confluent's wire format)",
        )
    good = ok[~bad]
    s = s[~bad]
    sid = (
        (d[s + 1].astype(np.int64) << 24)
        | (d[s + 2].astype(np.int64) << 16)
        | (d[s + 3].astype(np.int64) << 8)
        | d[s + 4].astype(np.int64)
    )
    ids[good] = sid
    return ids


def _at(n: int, rows: np.ndarray) -> np.ndarray:
    m = np.zeros(n, dtype=bool)
    m[rows] = True
    return m


# ---------------------------------------------------------------------- the cache
_lock = threading.Lock()
_schemas: OrderedDict[tuple[str, int], SchemaLookup] = OrderedDict()
_unknown: OrderedDict[tuple[str, int], SchemaLookup] = OrderedDict()
_fetching: dict[tuple[str, int], threading.Event] = {}
_answered: set[str] = set()
"""The registries (URLs) that have given this process a schema."""


def _after_fork() -> None:
    global _lock
    _lock = threading.Lock()  # a forked child: no other thread holds it, or ever will
    _fetching.clear()


os.register_at_fork(after_in_child=_after_fork)


def cache_clear() -> None:
    """Forgets every schema, unknown id and kept connection of this process (tests)."""
    with _lock:
        _schemas.clear()
        _unknown.clear()
        _answered.clear()
    _registry_http.clear()


def fetch_schemas(
    settings: RegistrySettings, ids: Iterable[int], *, max_new_ids: int = MAX_NEW_IDS
) -> dict[int, SchemaLookup]:
    """The schemas of one batch's ``ids`` (each fetched once per process, then cached).

    The ids not looked up yet are fetched together; an id the registry does not know
    comes back with ``missing`` set (its events are refused with the reason), unless it
    knows none of ``ids`` and looks like the wrong registry (module docstring).

    Args:
        settings: The registry.
        ids: The schema ids the batch names.
        max_new_ids: How many ids not looked up yet the batch may name.

    Raises:
        TooManySchemaIds: More than ``max_new_ids`` ids were never looked up (nothing
            is fetched).
        SchemaRegistryMismatch: The registry knows none of ``ids`` and has given this
            process no schema yet, or holds no subject.
        SchemaRegistryUnavailable: The registry could not be reached for an id not cached.
    """
    out, new = _cached(settings, sorted({int(i) for i in ids}))
    if len(new) > max_new_ids:
        raise TooManySchemaIds(
            f"the batch names {len(new)} schema ids this process has not looked up in "
            f"schema registry {mask_url(settings.url)}, more than the {max_new_ids} a batch "
            "may look up: messages naming ids the registry never gave (a producer writing "
            "what it should not?); none was fetched",
            count=len(new),
            limit=max_new_ids,
        )
    if len(new) == 1:
        out[new[0]] = _lookup(settings, new[0])
    elif new:
        found = _registry_http.executor().map(lambda sid: _lookup(settings, sid), new)
        out.update(zip(new, found, strict=True))
    _check_known(settings, out)
    return out


def _cached(
    settings: RegistrySettings, ids: list[int]
) -> tuple[dict[int, SchemaLookup], list[int]]:
    """The lookups of ``ids`` this process holds, and the ids it must fetch."""
    out: dict[int, SchemaLookup] = {}
    new: list[int] = []
    now = time.monotonic()
    with _lock:
        for sid in ids:
            key = (settings.url, sid)
            hit = _schemas.get(key)
            if hit is not None:
                _schemas.move_to_end(key)
                out[sid] = hit
                continue
            miss = _unknown.get(key)
            if miss is not None and now - miss.at < UNKNOWN_TTL_S:
                out[sid] = miss
            else:
                new.append(sid)
    return out, new


def _check_known(settings: RegistrySettings, lookups: dict[int, SchemaLookup]) -> None:
    """Raises :class:`SchemaRegistryMismatch` when the registry knows none of the
    batch's ids and looks like the wrong one."""
    if not lookups or not all(found.missing for found in lookups.values()):
        return
    ids = sorted(lookups)
    with _lock:
        answered = settings.url in _answered
    if answered:
        subjects = settings.get("/subjects")
        if isinstance(subjects, list) and subjects:
            return  # the registry that gave us schemas, still holding some: bad messages
        why = "holds no subject (a registry that lost its storage?)"
    else:
        why = "has given this process no schema yet (a wrong registry URL?)"
    shown = ", ".join(str(i) for i in ids[:5]) + (", ..." if len(ids) > 5 else "")
    raise SchemaRegistryMismatch(
        f"schema registry {mask_url(settings.url)} knows none of the {len(ids)} schema ids "
        f"the batch names ({shown}) and {why}: the batch fails rather than dead-letter every "
        "message",
        ids=ids[:5],
    )


def _lookup(settings: RegistrySettings, sid: int) -> SchemaLookup:
    """One id's lookup: cached, or fetched once whichever thread asks."""
    key = (settings.url, sid)
    while True:
        with _lock:
            hit = _schemas.get(key) or _unknown.get(key)
            if hit is not None and (not hit.missing or time.monotonic() - hit.at < UNKNOWN_TTL_S):
                return hit
            wait = _fetching.get(key)
            if wait is None:
                _fetching[key] = threading.Event()
                break
        wait.wait(settings.timeout * 2)  # another thread fetches it
    try:
        found = _fetch(settings, sid)
        with _lock:
            _keep(_unknown if found.missing else _schemas, key, found)
            if not found.missing:
                _unknown.pop(key, None)
                _answered.add(settings.url)
        return found
    finally:
        with _lock:
            _fetching.pop(key).set()


def _keep(
    cache: OrderedDict[tuple[str, int], SchemaLookup], key: tuple[str, int], found: SchemaLookup
) -> None:
    """Adds ``found`` to ``cache`` (the lock held), the oldest entries out past its size."""
    cache[key] = found
    cache.move_to_end(key)
    size = UNKNOWN_SIZE if cache is _unknown else CACHE_SIZE
    while len(cache) > size:
        cache.popitem(last=False)


def _fetch(settings: RegistrySettings, sid: int) -> SchemaLookup:
    got = settings.get(f"/schemas/ids/{sid}")
    now = time.monotonic()
    if got is None:
        return SchemaLookup(None, f"unknown schema id {sid} (the registry has none)", now, True)
    if not isinstance(got, dict):
        return SchemaLookup(None, f"schema id {sid}: the registry answered no schema object", now)
    kind = got.get("schemaType", "AVRO")
    if kind not in (None, "AVRO"):
        return SchemaLookup(None, f"schema id {sid} is a {str(kind)[:20]} schema, not Avro", now)
    text = got.get("schema")
    if not isinstance(text, str):
        return SchemaLookup(None, f"schema id {sid}: the registry gave no schema text", now)
    try:
        return SchemaLookup(parse_schema(text), None, now)
    except BadAvroSchema as exc:
        return SchemaLookup(None, f"schema id {sid} is not a readable Avro schema: {exc}", now)
    except RecursionError:
        return SchemaLookup(
            None, f"schema id {sid} is not a readable Avro schema: nested too deeply", now
        )
