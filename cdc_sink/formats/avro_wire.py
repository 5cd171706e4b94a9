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
  this process (bounded, least recently used first out): one fetch per id per process,
  whichever decoder, batch or thread asks.

A registry that cannot be reached (refused, timed out, a 5xx or an authentication error)
raises :class:`SchemaRegistryUnavailable`: the caller's micro-batch fails and is
retried; no event is refused because the registry was down. An id the registry does not
know (404), or a schema that is not Avro, is a fact about the message: the events that
name it are refused with the reason (:class:`SchemaLookup`).

The client is a small one on ``urllib`` (the formats never import a Kafka client).
"""

from __future__ import annotations

import base64
import json
import ssl
import threading
import time
import urllib.error
import urllib.request
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np

from cdc_sink.errors import InvalidOption, SchemaRegistryUnavailable
from cdc_sink.formats._arrays import Parts, refuse
from cdc_sink.formats._avro_schema import BadAvroSchema, Node, parse_schema

__all__ = [
    "HEADER_BYTES",
    "RegistrySettings",
    "SchemaLookup",
    "SchemaRegistryUnavailable",
    "cache_clear",
    "fetch_schemas",
    "wire_headers",
]

HEADER_BYTES = 5
"""The magic byte and the 4-byte schema id."""
CACHE_SIZE = 4096
"""Schemas (and unknown ids) the process keeps at most."""
UNKNOWN_TTL_S = 60.0
"""How long an id the registry did not know is remembered as unknown."""
_MAX_SCHEMA_BYTES = 16 << 20


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
                f"decoder option 'registry_url' must be an http(s) URL, got {url!r}",
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

    def _context(self) -> ssl.SSLContext | None:
        if not self.url.startswith("https://"):
            return None
        ctx = ssl.create_default_context(cafile=self.ca_location)
        if self.certificate_location:
            ctx.load_cert_chain(self.certificate_location, self.key_location)
        return ctx

    def get(self, path: str) -> object:
        """``GET`` one resource of the API (its JSON); ``None`` when the registry says 404.

        Raises:
            SchemaRegistryUnavailable: Not reachable, timed out, or any other error.
        """
        return self._call("GET", path, None)

    def post(self, path: str, body: object) -> object:
        """``POST`` the JSON ``body`` to the API (e.g. register a schema); its answer.

        Raises:
            SchemaRegistryUnavailable: Not reachable, timed out, refused (any error
                status, 404 included), or not JSON.
        """
        got = self._call("POST", path, json.dumps(body).encode())
        if got is None:
            raise SchemaRegistryUnavailable(
                f"schema registry {self.url} answered 404 to POST {path}"
            )
        return got

    def _call(self, method: str, path: str, data: bytes | None) -> object:
        """One request with the settings' auth and TLS; its JSON, ``None`` for a 404."""
        req = urllib.request.Request(
            self.url + path,
            data=data,
            method=method,
            headers={
                "Accept": "application/json",
                "Content-Type": "application/vnd.schemaregistry.v1+json",
            },
        )
        if self.auth:
            token = base64.b64encode(self.auth.encode()).decode("ascii")
            req.add_header("Authorization", f"Basic {token}")
        try:
            with urllib.request.urlopen(req, timeout=self.timeout, context=self._context()) as r:
                body = r.read(_MAX_SCHEMA_BYTES + 1)
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                return None
            raise SchemaRegistryUnavailable(
                f"schema registry {self.url} answered {exc.code} to {method} {path}"
            ) from exc
        except (urllib.error.URLError, OSError, ValueError) as exc:
            raise SchemaRegistryUnavailable(
                f"schema registry {self.url} unreachable ({method} {path}): {exc}"
            ) from exc
        try:
            got = json.loads(body[:_MAX_SCHEMA_BYTES])
        except ValueError as exc:
            raise SchemaRegistryUnavailable(
                f"schema registry {self.url}: {method} {path} did not answer JSON"
            ) from exc
        return got


@dataclass(frozen=True)
class SchemaLookup:
    """What the registry says of one schema id: its parsed schema, or why events that
    name it are refused."""

    node: Node | None
    error: str | None = None
    at: float = 0.0


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
_cache: OrderedDict[tuple[str, int], SchemaLookup] = OrderedDict()
_fetching: dict[tuple[str, int], threading.Event] = {}


def cache_clear() -> None:
    """Forgets every schema of this process (tests)."""
    with _lock:
        _cache.clear()


def fetch_schemas(settings: RegistrySettings, ids: Iterable[int]) -> dict[int, SchemaLookup]:
    """The schemas of ``ids`` (each fetched once per process, then cached).

    Raises:
        SchemaRegistryUnavailable: The registry could not be reached for an id not cached.
    """
    out: dict[int, SchemaLookup] = {}
    for sid in sorted(set(int(i) for i in ids)):
        out[sid] = _lookup(settings, sid)
    return out


def _lookup(settings: RegistrySettings, sid: int) -> SchemaLookup:
    key = (settings.url, sid)
    while True:
        with _lock:
            hit = _cache.get(key)
            if hit is not None and (
                hit.node is not None or time.monotonic() - hit.at < UNKNOWN_TTL_S
            ):
                _cache.move_to_end(key)
                return hit
            wait = _fetching.get(key)
            if wait is None:
                _fetching[key] = threading.Event()
                break
        wait.wait(settings.timeout * 2)  # another thread fetches it
    try:
        found = _fetch(settings, sid)
        with _lock:
            _cache[key] = found
            _cache.move_to_end(key)
            while len(_cache) > CACHE_SIZE:
                _cache.popitem(last=False)
        return found
    finally:
        with _lock:
            _fetching.pop(key).set()


def _fetch(settings: RegistrySettings, sid: int) -> SchemaLookup:
    got = settings.get(f"/schemas/ids/{sid}")
    now = time.monotonic()
    if not isinstance(got, dict):
        return SchemaLookup(None, f"unknown schema id {sid} (the registry has none)", now)
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
