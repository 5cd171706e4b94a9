"""The native ``json`` format: ``{"op", "key": {...}, "set": {...}, "seq"?, "ts_ms"?}``.

One JSON object per Kafka message value::

    {"op": "upsert", "key": {"order_id": 7}, "set": {"qty": 3, "note": null},
     "seq": 42, "ts_ms": 1718000000000}

- ``op``: ``"insert"``, ``"upsert"``, ``"update"``, ``"delete"`` or ``"truncate"`` (deletes
  every live row of the table at that point of the event order; it needs no ``key``,
  ``set`` or ``seq`` and ignores them). A truncate is applied only when the decoder is
  built with ``allow_truncate=True``; by default it is rejected (:data:`TRUNCATE_REFUSED`),
  so a producer that may write to the topic cannot empty the table with one message;
- ``key``: every key column (a bare scalar is accepted for a one-column key);
- ``set``: the columns the event sets. *Absent is not null*: ``"note": null`` sets the
  column to null, a column missing from ``set`` is not set. ``set`` may be missing or
  ``null`` (sets nothing) and is ignored for deletes;
- ``seq``: the event's sequence number (tables with a ``sequence_column``; without
  ``seq`` the sequence column inside ``set`` is used);
- ``ts_ms``: optional producer timestamp, exposed as :attr:`Decoded.ts_ms`;
- other top-level members are ignored (up to :data:`IGNORED_MEMBERS` of them with what they
  hold: an event holding more members than its schema can use, or nested deeper than
  :data:`MAX_DEPTH` levels, is refused before its members are indexed; issue 38).

Values: see :mod:`cdc_sink.formats._jsonvalues` (dates and timestamps as ISO strings
or integers, decimals as strings or numbers, binaries as base64).

**Presence: why not ``pyarrow.json`` alone.** Investigated options of
``pyarrow.json.read_json``: with an explicit schema, ``"x": null`` and a missing ``"x"``
both read as null; ``unexpected_field_behavior`` (``ignore``/``error``/``infer``) only
concerns fields outside the schema; a ``map<string, ...>`` type for ``set`` is refused
("JSON conversion to map is not supported"); a ``null``-typed field fails on any value;
and a value of another JSON kind than its field's type fails the whole block. No option
records which members were present. A substring test for ``"col":`` would count names
inside string values (false positives), and ``json.loads`` per event is a Python loop
per event.

So the decoder builds an exact structural index of all the events at once
(:mod:`cdc_sink.formats._jsonscan`: every member's name, level, parent, value kind and
span; in one compiled pass when the C extension is built, else with numpy). A column is
set by an event exactly when a member with its name is a direct child of that event's
``set`` object. Values are then converted per column for all events at once (Arrow
casts of the raw value tokens; Arrow's JSON parser unescapes the few strings with
backslash escapes). With ``strict=True`` (the default) the full grammar of every event
is checked: by the compiled pass where it can vouch for an event, else by Arrow's JSON
parser, reading straight from the input buffer (parse only: no column is converted;
events it refuses are isolated by bisection, and its message is the reason).

The decoded events equal :meth:`ChangeBatch.from_events` of the parsed objects (checked
by property and differential fuzz tests), except that: a member name repeated within an
object is refused rather than last-one-wins; ``set`` must be an object, ``null`` or
``false``; ``ts_ms`` must be an integer; ISO timestamps follow Arrow's ISO 8601 parser
(stricter than Python's ``fromisoformat``); base64 must be canonically padded; a float
column accepts any JSON number.
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import pyarrow as pa

from cdc_sink.batch import OP_CODES, OP_DELETE, OP_NAMES
from cdc_sink.formats._arrays import (
    Parts,
    binary_parts,
    check_bool,
    new_reasons,
    no_reason,
    position_array,
    refuse,
    sub_parts,
)
from cdc_sink.formats._arrays_runs import Columns, decode_in_runs
from cdc_sink.formats._base import TS_MISSING, Decoded, Decoder, EventEncoder, FormatName
from cdc_sink.formats._jsonflat import decode_flat_run
from cdc_sink.formats._jsongrammar import check_grammar
from cdc_sink.formats._jsonmembers import (
    children,
    column_array,
    index_top,
    int_member,
    member_kind,
    refuse_members,
    string_codes,
)
from cdc_sink.formats._jsonscan import (
    KIND_ARRAY,
    KIND_FALSE,
    KIND_NULL,
    KIND_OBJECT,
    RUN_BYTES,
    Budget,
    Members,
    scan,
)
from cdc_sink.formats._jsonstrings import match_strings
from cdc_sink.schema import TableSchema

__all__ = ["TRUNCATE_REFUSED", "JsonDecoder", "encode_json", "json_encoder", "json_value"]

_TOP = ("op", "key", "set", "seq", "ts_ms")
IGNORED_MEMBERS = 64
"""Members an event may hold besides its known ones and its columns (ignored top-level
members and what they hold); an event holding more is refused (:func:`scan_budget`)."""
MAX_DEPTH = 16
"""The deepest nesting an event may have; the format reads two levels."""
OP_TRUNCATE: int = OP_CODES.get("truncate", -1)
TRUNCATE_REFUSED = "truncate event rejected: not allowed (decoder option allow_truncate=false)"
"""The reject reason of a truncate the decoder was not told to allow (the JVM decoder of
:mod:`cdc_sink.spark.decode` gives the same)."""


# ====================================================================== encoding
def json_value(v: Any) -> Any:
    """A Python value in its JSON form: dates/timestamps as ISO strings, decimals as
    strings, bytes as base64."""
    if isinstance(v, dt.datetime):
        return (v if v.tzinfo else v.replace(tzinfo=dt.timezone.utc)).isoformat()
    if isinstance(v, dt.date):
        return v.isoformat()
    if isinstance(v, decimal.Decimal):
        return str(v)
    if isinstance(v, (bytes, bytearray, memoryview)):
        return base64.b64encode(bytes(v)).decode("ascii")
    if isinstance(v, Mapping):
        return {str(k): json_value(x) for k, x in v.items()}
    return v


def encode_json(event: Mapping[str, Any]) -> bytes:
    """Encodes one native event as a JSON message value (UTF-8, no ASCII escaping).

    Args:
        event: ``{"op", "key", "set"?, "seq"?, "ts_ms"?}`` with Python values (dates,
            datetimes, decimals and bytes are converted by :func:`json_value`).

    Returns:
        The message value.
    """
    return json.dumps(json_value(event), ensure_ascii=False).encode("utf-8")


def json_encoder(schema: TableSchema) -> EventEncoder:
    """The ``json`` encoder of native events (the registry's): :func:`encode_json`, which
    writes every event as it is whatever the schema."""
    del schema
    return encode_json


# ====================================================================== decoding
class JsonDecoder(Decoder):
    """Decoder of the native ``json`` format (see the module docstring); vectorized.

    Args:
        strict: Also check the full JSON grammar of every event with Arrow's parser.
            The structural index alone already rejects unbalanced or unterminated
            events; ``strict=False`` trusts the producer for the rest (faster).
        allow_truncate: Apply ``{"op": "truncate"}`` events (every live row of the table
            is deleted). Off by default: a truncate is then a reject with the reason
            :data:`TRUNCATE_REFUSED`. Turn it on only when every producer that can write
            to the topic may empty the table.
    """

    name: ClassVar[FormatName] = "json"

    def __init__(self, *, strict: bool = True, allow_truncate: bool = False) -> None:
        self.strict = check_bool("strict", strict)
        self.allow_truncate = check_bool("allow_truncate", allow_truncate)

    def decode_with_meta(
        self,
        values: pa.BinaryArray | pa.LargeBinaryArray,
        schema: TableSchema,
        *,
        position: np.ndarray | None = None,
        keys: pa.BinaryArray | pa.LargeBinaryArray | None = None,
    ) -> Decoded:
        """Decodes native JSON message values (see :meth:`Decoder.decode_with_meta`).

        The values are processed in runs of a few MB (so working arrays stay in cache),
        each vectorized; the runs' columns are then validated together. ``keys`` is
        ignored: every event carries its key.
        """
        del keys
        parts = binary_parts(values)
        pos = None if position is None else position_array(position, parts.n)

        def run(lo: int, hi: int) -> Columns:
            return self._decode_run(sub_parts(parts, lo, hi), schema)

        return decode_in_runs(parts, pos, schema, RUN_BYTES, run)

    def _decode_run(self, parts: Parts, schema: TableSchema) -> Columns:
        """Decodes one run of events: flat events in one compiled pass, the others (and
        all of them without the C extension) by :meth:`_decode_general`."""
        return decode_flat_run(parts, schema, lambda p: self._decode_general(p, schema))

    def _decode_general(self, parts: Parts, schema: TableSchema) -> Columns:
        """Decodes one run of events, phase by phase. The phases run in the order their
        reject reasons take precedence (an event keeps the first reason it is given)."""
        reasons = new_reasons(parts.n)
        refuse(reasons, ~parts.valid, "null message value")
        refuse(reasons, parts.valid & (parts.lengths == 0), "empty message value")
        sc = scan(parts, no_reason(reasons), max_level=2, budget=scan_budget(schema))
        m, top = index_top(parts, sc, _TOP, reasons)
        ev = _events(parts, m, top, schema, reasons)
        _refuse_ops(parts, m, ev, reasons)
        if not self.allow_truncate:  # the compiled pass never accepts a truncate
            refuse(reasons, ev.is_truncate, TRUNCATE_REFUSED)
        keys = _key_columns(parts, m, ev, schema, reasons)
        vals = _set_columns(parts, m, ev, schema, reasons)
        seq = _seq(parts, m, ev, schema, vals, reasons)
        ts_v, ts_given = int_member(
            parts, m, ev.ts_m, reasons, "ts_ms {raw} is not an integer (milliseconds)"
        )
        ts = np.where(ts_given, ts_v, TS_MISSING) if ts_given.any() else None
        if self.strict:
            check_grammar(parts, no_reason(reasons) & ~sc.verified, reasons)
        return Columns(op=ev.op, keys=keys, values=vals, seq=seq, reasons=reasons, ts_ms=ts)


def scan_budget(schema: TableSchema) -> Budget:
    """What one event may declare (issue 38): the known top-level members, every column
    (key columns in ``key``, value columns in ``set``) and :data:`IGNORED_MEMBERS`;
    nesting to :data:`MAX_DEPTH`. A message beyond is refused before its members are
    indexed (see :class:`~._jsonscan.Budget`)."""
    return Budget(members=len(_TOP) + len(schema.columns) + IGNORED_MEMBERS, depth=MAX_DEPTH)


@dataclass
class _Events:
    """The top-level members of each event and what they hold (-1: no such member)."""

    op: np.ndarray  # op code (-1: unknown)
    op_m: np.ndarray
    key_m: np.ndarray  # -1 for a truncate, which names no key
    seq_m: np.ndarray  # -1 for a truncate
    ts_m: np.ndarray
    is_truncate: np.ndarray
    key_scalar: np.ndarray  # a bare scalar key (one-column keys)
    key_members: np.ndarray  # members of the key objects
    key_code: np.ndarray  # their key column (index in schema.key_columns; -1: unknown)
    set_members: np.ndarray  # members of the set objects (not of deletes)
    set_code: np.ndarray  # their value column (index in schema.value_columns), or a key
    # column after the value columns, or -1


def _events(
    parts: Parts, m: Members, top: np.ndarray, schema: TableSchema, reasons: np.ndarray
) -> _Events:
    """Reads each event's op and finds the members of its ``key`` and ``set`` objects;
    refuses a missing key, a ``set`` that is not an object, and unknown or key columns
    in ``set``."""
    op_m, key_m, set_m, seq_m, ts_m = top
    op = string_codes(parts, m, op_m, OP_NAMES).astype(np.int8)
    is_delete = op == OP_DELETE
    # a truncate names no key, sets nothing and needs no seq: ignore those members
    is_truncate = op == OP_TRUNCATE
    key_m[is_truncate] = -1
    set_m[is_truncate] = -1
    seq_m[is_truncate] = -1
    key_kind = member_kind(m, key_m)
    key_scalar = (key_kind >= 0) & np.isin(
        key_kind, (KIND_OBJECT, KIND_NULL, KIND_ARRAY), invert=True
    )
    key_scalar &= len(schema.primary_key) == 1
    refuse(
        reasons, (key_kind != KIND_OBJECT) & ~key_scalar & ~is_truncate, "event has no 'key' object"
    )
    set_kind = member_kind(m, set_m)
    refuse(
        reasons,
        ~is_delete
        & (set_kind >= 0)
        & np.isin(set_kind, (KIND_OBJECT, KIND_NULL, KIND_FALSE), invert=True),
        "'set' is not an object",
    )
    l2 = np.flatnonzero(m.level == 2)
    km = children(m, key_m, among=l2)
    sm = children(m, set_m, among=l2)
    sm = sm[~is_delete[m.event[sm]]]
    key_cols, val_cols = schema.key_columns, schema.value_columns
    data = parts.data
    kcode = match_strings(
        data, m.name_start[km], m.name_end[km], m.name_escaped[km], [c.name for c in key_cols]
    )
    refuse_members(reasons, parts, m, km[kcode < 0], "unknown key column {name!r}", use_name=True)
    scode = match_strings(
        data,
        m.name_start[sm],
        m.name_end[sm],
        m.name_escaped[sm],
        [c.name for c in val_cols] + [c.name for c in key_cols],
    )
    refuse_members(
        reasons,
        parts,
        m,
        sm[scode >= len(val_cols)],
        "key column {name!r} inside 'set'",
        use_name=True,
    )
    refuse_members(reasons, parts, m, sm[scode < 0], "unknown column {name!r}", use_name=True)
    return _Events(
        op=op,
        op_m=op_m,
        key_m=key_m,
        seq_m=seq_m,
        ts_m=ts_m,
        is_truncate=is_truncate,
        key_scalar=key_scalar,
        key_members=km,
        key_code=kcode,
        set_members=sm,
        set_code=scode,
    )


def _refuse_ops(parts: Parts, m: Members, ev: _Events, reasons: np.ndarray) -> None:
    """Op reasons (after the structural ones, as ``from_events`` orders them)."""
    no_op = ev.op_m < 0
    refuse(reasons, no_op, "unknown op None")
    refuse_members(reasons, parts, m, ev.op_m[(ev.op < 0) & ~no_op], "unknown op {raw}")


def _key_columns(
    parts: Parts, m: Members, ev: _Events, schema: TableSchema, reasons: np.ndarray
) -> dict[str, pa.Array]:
    """Each key column of every event (from the key object, or a bare scalar key)."""
    keys: dict[str, pa.Array] = {}
    for i, c in enumerate(schema.key_columns):
        sel = ev.key_members[ev.key_code == i]
        if len(schema.primary_key) == 1:
            sel = np.sort(np.concatenate([sel, ev.key_m[ev.key_scalar]]))
        keys[c.name] = column_array(parts, m, sel, c, c.type, parts.n, reasons)
    return keys


def _set_columns(
    parts: Parts, m: Members, ev: _Events, schema: TableSchema, reasons: np.ndarray
) -> dict[str, tuple[pa.Array, np.ndarray]]:
    """The value columns the events set, with the mask of events setting each."""
    vals: dict[str, tuple[pa.Array, np.ndarray]] = {}
    for i, c in enumerate(schema.value_columns):
        sel = ev.set_members[ev.set_code == i]
        if not len(sel):
            continue
        present = np.zeros(parts.n, dtype=bool)
        present[m.event[sel]] = True
        vals[c.name] = (column_array(parts, m, sel, c, c.type, parts.n, reasons), present)
    return vals


def _seq(
    parts: Parts,
    m: Members,
    ev: _Events,
    schema: TableSchema,
    vals: dict[str, tuple[pa.Array, np.ndarray]],
    reasons: np.ndarray,
) -> pa.Array | None:
    """Each event's ``seq`` (else the sequence column it sets); ``None`` without a
    sequence column."""
    seq_v, seq_given = int_member(parts, m, ev.seq_m, reasons, "seq {raw} is not a 64-bit integer")
    if schema.sequence_column is None:
        return None
    s_name = schema.sequence_column
    if s_name in vals:
        s_arr, s_present = vals[s_name]
        s_ok = s_present & np.asarray(s_arr.is_valid(), dtype=bool) & ~seq_given
        s_vals = np.asarray(
            s_arr.cast(pa.int64()).fill_null(0).to_numpy(zero_copy_only=False), dtype=np.int64
        )
        seq_v = np.where(s_ok, s_vals, seq_v)
        seq_given |= s_ok
    refuse(reasons, ~seq_given & ~ev.is_truncate, "seq is missing")
    return pa.array(seq_v, pa.int64(), mask=~seq_given)
