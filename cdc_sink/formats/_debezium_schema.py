"""The Kafka Connect envelope schema of Debezium events: sharing and hints (private).

An enveloped event ``{"schema": S, "payload": P}`` carries its field schemas in S: the
unit of a timestamp field (its ``name``), the form and scale of a decimal field. This
module reads them for :mod:`cdc_sink.formats.debezium`:

- :func:`strip_shared_schema` cuts S off the events that repeat the first event's S (S
  is most of an event's bytes and repeats in every event of a table);
- :class:`SchemaHints` parses each distinct S once (deduplicated by hashing its bytes
  with Arrow) and gives the :class:`~cdc_sink.formats._jsonvalues.Hints` of a column's
  members from their events' schema ids. A schema that is not a Kafka Connect struct
  schema refuses its events with a reason; nothing here raises on message content.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from cdc_sink.formats._arrays import Parts, gather, refuse, spans, sub_parts
from cdc_sink.formats._jsonmembers import member_kind
from cdc_sink.formats._jsonscan import KIND_OBJECT, Members, scan, skip_ws
from cdc_sink.formats._jsonstrings import match_strings
from cdc_sink.formats._jsonvalues import Hints
from cdc_sink.formats._schema_json import SchemaTextError, load_schema_json
from cdc_sink.formats.value_ranges import TS_UNIT_BY_NAME
from cdc_sink.schema import Column

__all__ = [
    "ENVELOPE",
    "Defaults",
    "SchemaHints",
    "Shared",
    "key_fields",
    "row_fields",
    "strip_shared_schema",
]

ENVELOPE = ("schema", "payload")
"""Members of the Kafka Connect envelope, in the order the JSON converter writes them."""
CONNECT_DECIMAL = "org.apache.kafka.connect.data.Decimal"
"""Kafka Connect's decimal schema name (its ``scale`` parameter is required)."""

FieldsOf = Callable[[Any], dict[str, dict[str, Any]]]
"""Field schemas by column name, from a parsed envelope (or key) schema."""


@dataclass
class Shared:
    """Events that began with one of a few envelope prefixes ``{"schema": S,`` (cut off).

    Attributes:
        ids: Per event, the index in :attr:`schemas` of the schema cut off it (-1: none).
        schemas: The schema texts S cut off.
    """

    ids: np.ndarray
    schemas: list[bytes]

    @property
    def mask(self) -> np.ndarray:
        """Whether each event's schema was cut off."""
        return self.ids >= 0


_ENVELOPED = b'{"schema":'
_MAX_BLOCKS = 1024
"""Most prefixes checked in one run (a run holds a few thousand events)."""
_MAX_MISSES = 3
"""Blocks of one event in a row after which a run's events are taken as not grouped by
schema (events of many tables interleaved): the rest keep their schemas."""


def strip_shared_schema(parts: Parts) -> tuple[Parts, Shared | None]:
    """Cuts the envelope schema off the events that share it with their neighbours.

    Kafka Connect's JSON converter writes ``{"schema":S,"payload":P}`` with the same S
    for every event of a table, and S is most of the bytes. The run is taken in blocks:
    the first event of a block is indexed alone to find its prefix ``{"schema":S,``, and
    the block goes on while the next events start with exactly those bytes (compared
    vectorized, in windows that double). The events of a block of two or more are
    rewritten as ``{"payload":P}`` into a compact copy of the run, and are given S by
    :class:`SchemaHints`, when the schemas cut off are a quarter of the run's bytes at
    least (else the copy costs more than it saves). A run may hold the events of many
    tables one after another (a router decodes the tables of one schema together): each
    table's schema is cut off its events. The prefix is valid JSON in the first event of
    its block, so the grammar check of the rest still covers the whole event.
    """
    live = np.flatnonzero(parts.valid & (parts.lengths > len(_ENVELOPED) + 2))
    if len(live) < 2:
        return parts, None
    s0 = int(parts.starts[live[0]])
    if parts.data[s0 : s0 + len(_ENVELOPED)].tobytes() != _ENVELOPED:
        return parts, None
    ids, schemas, size = _blocks(parts, live)
    shared = ids >= 0
    if not shared.any() or 4 * int(size[shared].sum()) < int(parts.lengths[parts.valid].sum()):
        # Cutting copies the whole run: worth it only when the schemas cut off are a
        # good part of its bytes (not for one table's events among many tables').
        return parts, None
    begin = np.where(shared, parts.starts + size - 1, parts.starts)
    lengths = parts.ends - begin
    buf = gather(parts.data, begin, lengths)
    ends = np.cumsum(lengths)
    starts = ends - lengths
    buf[starts[shared]] = ord("{")
    out = Parts(buffer=pa.py_buffer(buf), data=buf, starts=starts, ends=ends, valid=parts.valid)
    return out, Shared(ids=ids, schemas=schemas)


def _blocks(parts: Parts, live: np.ndarray) -> tuple[np.ndarray, list[bytes], np.ndarray]:
    """Per event, the index of the schema cut off it (-1: none), the schemas, and the
    bytes of each event's prefix cut off (0: none): the blocks of
    :func:`strip_shared_schema`, found by sampled bytes, then every event's whole
    prefix compared at once."""
    ids = np.full(parts.n, -1, dtype=np.int64)
    size = np.zeros(parts.n, dtype=np.int64)
    block_of = np.full(parts.n, -1, dtype=np.int64)
    prefixes: list[bytes] = []
    schemas: list[bytes] = []
    slots: dict[bytes, int] = {}
    i = misses = 0
    while i < len(live) - 1 and len(prefixes) < _MAX_BLOCKS and misses < _MAX_MISSES:
        e = int(live[i])
        found = _envelope_prefix(parts, e)
        if found is None:
            i, misses = i + 1, misses + 1
            continue
        n, text = found
        j = _block_end(parts, live, i, n)
        misses = misses + 1 if j - i < 2 else 0
        if j - i >= 2:
            slot = slots.setdefault(text, len(schemas))
            if slot == len(schemas):
                schemas.append(text)
            block = live[i:j]
            ids[block], size[block], block_of[block] = slot, n, len(prefixes)
            s0 = int(parts.starts[e])
            prefixes.append(parts.data[s0 : s0 + n].tobytes())
        i = j
    at = np.flatnonzero(ids >= 0)
    if len(at):
        want = pa.array(prefixes, pa.binary()).take(pa.array(block_of[at]))
        want = want.cast(pa.binary_view())
        got = spans(parts, parts.starts[at], parts.starts[at] + size[at])
        same = np.asarray(pc.equal(got, want).to_numpy(zero_copy_only=False), bool)
        kept = np.bincount(block_of[at[same]], minlength=len(prefixes))
        drop = at[~same | (kept[block_of[at]] < 2)]  # a block's lone event saves nothing
        ids[drop], size[drop] = -1, 0
    return ids, schemas, size


_SAMPLE = 48
"""Bytes of a prefix's end compared to find where a block of events sharing it ends
(the end of an envelope schema names its table)."""


def _block_end(parts: Parts, live: np.ndarray, i: int, n: int) -> int:
    """One past the last of the events ``live[i:]`` that, one after another, end their
    first ``n`` bytes as event ``live[i]`` does, followed by ``"payload"`` (a sample:
    the whole prefixes are compared after)."""
    d = parts.data
    s0 = int(parts.starts[live[i]])
    offs = np.arange(max(0, n - _SAMPLE), n + 1, dtype=np.int64)
    want = d[s0 + offs]
    j, step = i + 1, 64
    while j < len(live):
        idx = live[j : j + step]
        ok = parts.lengths[idx] > n + 1
        starts = np.where(ok, parts.starts[idx], s0)
        eq = ok & (d[starts[:, None] + offs[None, :]] == want).all(axis=1)
        if not eq.all():
            return j + int(np.argmin(eq))
        j, step = j + len(idx), step * 2
    return j


def _envelope_prefix(parts: Parts, e: int) -> tuple[int, bytes] | None:
    """The length of event ``e``'s prefix ``{"schema":S,`` and S (None: it has none)."""
    d = parts.data
    s0 = int(parts.starts[e])
    if d[s0 : s0 + len(_ENVELOPED)].tobytes() != _ENVELOPED:
        return None
    one = sub_parts(parts, e, e + 1)
    sc = scan(one, np.ones(1, dtype=bool), max_level=1)
    m = sc.members
    if sc.reasons[0] is not None or len(m) < 2:
        return None
    names = match_strings(d, m.name_start[:2], m.name_end[:2], m.name_escaped[:2], ENVELOPE)
    cut = int(skip_ws(d, m.name_start[1:2] - 2, -1)[0])  # the comma before "payload"
    if names.tolist() != [0, 1] or m.kind[0] != KIND_OBJECT or d[cut] != ord(","):
        return None
    return cut + 1 - s0, bytes(d[int(m.value_start[0]) : int(m.value_end[0])])


@dataclass
class Defaults:
    """Encodings of fields the envelope does not describe (decoder options)."""

    unit: int
    base64: bool


_MAX_SCHEMA_DEPTH = 64
"""Deepest nesting accepted in an envelope schema (Debezium's are a handful deep)."""


class SchemaHints:
    """Distinct envelope schemas of a run's events, parsed once each.

    An envelope schema that is not a valid Kafka Connect schema (not JSON, nested too
    deeply, members of the wrong JSON type, a decimal scale that is not an integer in
    0..38) refuses its events with a reason.

    Args:
        parts: The message values.
        m: Their member index.
        schema_m: The ``schema`` member of each event (-1: none).
        shared: The events whose schema :func:`strip_shared_schema` cut off.
        fields_of: Field schemas by column name of a parsed schema (:func:`row_fields`
            or :func:`key_fields`).
        defaults: Encodings of fields no schema describes.
        reasons: Reject reasons of the events (updated).

    Attributes:
        schema_id: The schema id of each event (-1: no envelope schema).
    """

    def __init__(
        self,
        parts: Parts,
        m: Members,
        schema_m: np.ndarray,
        shared: Shared | None,
        fields_of: FieldsOf,
        defaults: Defaults,
        reasons: np.ndarray,
    ) -> None:
        self.defaults = defaults
        self.schema_id = np.full(parts.n, -1, dtype=np.int64)
        self.fields: list[dict[str, dict[str, Any]]] = []
        errors: list[str | None] = []
        texts: list[bytes | None] = []
        has = np.flatnonzero(member_kind(m, schema_m) == KIND_OBJECT)
        if len(has):
            sm = schema_m[has]
            enc = pc.dictionary_encode(spans(parts, m.value_start[sm], m.value_end[sm]))
            self.schema_id[has] = np.asarray(enc.indices.to_numpy(zero_copy_only=False), np.int64)
            texts.extend(enc.dictionary.to_pylist())
        if shared is not None:
            mask = shared.mask
            self.schema_id[mask] = len(texts) + shared.ids[mask]
            texts.extend(shared.schemas)
        for text in texts:
            fields, err = _parsed_fields(fields_of, text)
            self.fields.append(fields)
            errors.append(err)
        for u, err in enumerate(errors):
            if err is not None:
                refuse(reasons, self.schema_id == u, err)

    def __call__(self, c: Column, ids: np.ndarray) -> Hints:
        """The hints of column ``c``'s members, from their events' schema ids ``ids``."""
        if not (pa.types.is_timestamp(c.type) or pa.types.is_decimal(c.type)):
            return Hints(connect=True)
        k = len(self.fields) + 1
        unit = np.full(k, self.defaults.unit, dtype=np.int64)
        b64 = np.full(k, self.defaults.base64, dtype=bool)
        scale = np.full(k, getattr(c.type, "scale", 0), dtype=np.int64)
        for u, fs in enumerate(self.fields):
            f = fs.get(c.name)
            if f is None:
                continue
            unit[u] = TS_UNIT_BY_NAME.get(f.get("name"), self.defaults.unit)  # type: ignore[arg-type]
            if pa.types.is_decimal(c.type):
                b64[u] = f.get("type") == "bytes"
                params = f.get("parameters") or {}
                scale[u] = _scale(params.get("scale"), int(scale[u]))
        return Hints(ts_unit=unit[ids], dec_base64=b64[ids], dec_scale=scale[ids], connect=True)


@functools.lru_cache(maxsize=2048)
def _parsed_fields(
    fields_of: FieldsOf, text: bytes | None
) -> tuple[dict[str, dict[str, Any]], str | None]:
    """The field schemas of one envelope schema text and the reason it is refused (None:
    valid), parsed once per distinct text: a table's events repeat their schema batch
    after batch, and a router decodes each table's few events of a batch separately.
    The dictionaries are shared by every caller: they are only read."""
    try:
        return fields_of(_load_schema(text)), None
    except _BadSchema as exc:
        return {}, f"invalid envelope schema: {exc}"


class _BadSchema(Exception):
    """An envelope schema that is not a valid Kafka Connect schema."""


def _load_schema(text: bytes | None) -> Any:
    """Parses an envelope schema (deep nesting is refused: see :mod:`._schema_json`)."""
    if text is None:
        return None
    try:
        return load_schema_json(text, _MAX_SCHEMA_DEPTH)
    except SchemaTextError as exc:
        raise _BadSchema(str(exc)) from None


def _scale(v: Any, default: int) -> int:
    """A decimal field's ``scale`` parameter (int or integer text) in 0..38, or -1
    (which refuses the field's values)."""
    if v is None:
        return default
    if isinstance(v, str) and v.strip().lstrip("-").isdigit() and len(v) < 10:
        v = int(v)
    if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= 38:
        return -1
    return v


def _check_decimal(f: dict[str, Any], params: dict[str, Any] | None) -> None:
    """A Kafka Connect ``Decimal`` without its ``scale`` (missing, or ``null``) is refused,
    as Kafka Connect refuses it ("Invalid Decimal schema: scale parameter not found");
    so is a ``null`` scale on any field: the column's scale would be a guess."""
    scale = None if params is None else params.get("scale")
    named = f.get("name") == CONNECT_DECIMAL
    if scale is None and (named or (params is not None and "scale" in params)):
        raise _BadSchema(
            f"field {str(f.get('field'))[:40]!r}: a decimal schema without its scale "
            "parameter (Kafka Connect refuses it: scale parameter not found)"
        )


def _struct_fields(s: Any, what: str) -> list[dict[str, Any]]:
    if not isinstance(s, dict):
        raise _BadSchema(f"{what} is not an object")
    fs = s.get("fields")
    if fs is None:
        return []
    if not isinstance(fs, list):
        raise _BadSchema(f"{what}.fields is not an array")
    for f in fs:
        if not isinstance(f, dict):
            raise _BadSchema(f"{what}.fields holds a non-object")
        params = f.get("parameters")
        if params is not None and not isinstance(params, dict):
            raise _BadSchema(f"field {f.get('field')!r}: parameters is not an object")
        if isinstance(params, dict) and _scale(params.get("scale"), 0) < 0:
            raise _BadSchema(
                f"field {f.get('field')!r}: decimal scale "
                f"{str(params.get('scale'))[:40]!r} is not an integer in 0..38"
            )
        for k in ("field", "name", "type"):
            if f.get(k) is not None and not isinstance(f.get(k), str):
                raise _BadSchema(f"field {str(f.get('field'))[:40]!r}: {k} is not a string")
        _check_decimal(f, params)
    return fs


def row_fields(s: Any) -> dict[str, dict[str, Any]]:
    """Field schemas of the row struct (``after``, else ``before``) of an envelope schema.

    Raises:
        _BadSchema: The schema is not a Kafka Connect struct schema.
    """
    out: dict[str, dict[str, Any]] = {}
    if s is None:
        return out
    for f in _struct_fields(s, "schema"):
        if f.get("field") in ("before", "after"):
            for g in _struct_fields(f, f"schema.{f['field']}"):
                if isinstance(g.get("field"), str):
                    out.setdefault(g["field"], g)
    return out


def key_fields(s: Any) -> dict[str, dict[str, Any]]:
    """Field schemas of a message key's struct schema."""
    if s is None:
        return {}
    return {
        f["field"]: f for f in _struct_fields(s, "key schema") if isinstance(f.get("field"), str)
    }
